package credentials

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// Set is a loaded, compiled group of credentials. It is safe for
// concurrent use once Load has returned it.
type Set struct {
	bindings    []*Binding
	maskedEnv   map[string]string // env name → value with sentinels in place of secrets
	maskedFiles map[string][]byte // real path → content with sentinels
	deniedEnv   []string
	deniedFiles []string
	pairs       []awsPair
	passthrough SigV4Passthrough
	sc          scanner
	lowered     [][]string // per binding: lower-case sentinel, secret and sentinel less its kept prefix, for CheckHost
	anyBody     bool
}

// Binding is one secret, its sentinel and the hosts it is bound to. Its
// secret is unexported and, like the sentinel, never printed: String,
// GoString and Format show the name only.
type Binding struct {
	// Name is Spec.Name; several bindings share it when an extract regex
	// matched several secrets.
	Name string
	// Sentinel is what the sandbox sees in place of the secret. It is not
	// secret, but it is a credential inside the sandbox: do not log it.
	Sentinel string

	secret string
	hosts  hostMatcher
	body   bool // Spec.InjectBody
	aws    bool // part of an AWS pair: swapped by re-signing, never textually
}

// Bound reports whether canonical host may receive this binding's secret.
func (b *Binding) Bound(host string) bool { return b.hosts.match(host) }

// String returns "credentials.Binding{Name: NAME}".
func (b Binding) String() string { return "credentials.Binding{Name: " + strconv.Quote(b.Name) + "}" }

// GoString is String, so that %#v prints neither secret nor sentinel.
func (b Binding) GoString() string { return b.String() }

// Format prints String for every verb: fmt would otherwise print the
// fields, unexported ones included, for %v and %+v.
func (b Binding) Format(f fmt.State, _ rune) { _, _ = f.Write([]byte(b.String())) }

// Bindings returns the mask bindings in load order. The slice is a copy;
// the bindings are shared and must not be modified.
func (s *Set) Bindings() []*Binding { return slices.Clone(s.bindings) }

// String returns a summary naming the credentials, never their values.
func (s *Set) String() string {
	if s == nil {
		return "credentials.Set(nil)"
	}
	var names []string
	for _, b := range s.bindings {
		names = append(names, b.Name)
	}
	return fmt.Sprintf("credentials.Set{masked: %q, deniedEnv: %q, deniedFiles: %q}", names, s.deniedEnv, s.deniedFiles)
}

// GoString is String.
func (s *Set) GoString() string { return s.String() }

// Format prints String for every verb.
func (s *Set) Format(f fmt.State, _ rune) { _, _ = f.Write([]byte(s.String())) }

// SandboxEnv returns base ("NAME=value" entries, as os.Environ) for the
// sandbox: masked variables hold their sentinel form, denied ones are
// removed. A masked variable missing from base is added, because its secret
// may have come from another source (env:OTHER, file:, command:). Entries
// of other variables keep their order.
func (s *Set) SandboxEnv(base []string) []string {
	out := make([]string, 0, len(base)+len(s.maskedEnv))
	done := map[string]bool{}
	for _, kv := range base {
		name, _, _ := strings.Cut(kv, "=")
		if slices.Contains(s.deniedEnv, name) {
			continue
		}
		if v, ok := s.maskedEnv[name]; ok {
			if !done[name] {
				out = append(out, name+"="+v)
				done[name] = true
			}
			continue
		}
		out = append(out, kv)
	}
	var extra []string
	for name := range s.maskedEnv {
		if !done[name] {
			extra = append(extra, name)
		}
	}
	slices.Sort(extra)
	for _, name := range extra {
		out = append(out, name+"="+s.maskedEnv[name])
	}
	return out
}

// MaskedFiles writes, under dir, a copy of each masked file with sentinels
// in place of its secrets (mode 0600), and returns real path → copy path
// for the sandbox to bind over the real file. The copies are named by
// index, not by path, so dir's listing reveals nothing.
func (s *Set) MaskedFiles(dir string) (map[string]string, error) {
	paths := make([]string, 0, len(s.maskedFiles))
	for p := range s.maskedFiles {
		paths = append(paths, p)
	}
	slices.Sort(paths)
	out := make(map[string]string, len(paths))
	for i, p := range paths {
		dst := filepath.Join(dir, "masked-"+strconv.Itoa(i))
		f, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return nil, fmt.Errorf("masked copy of %s: %w", p, err)
		}
		_, err = f.Write(s.maskedFiles[p])
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return nil, fmt.Errorf("masked copy of %s: %w", p, err)
		}
		out[p] = dst
	}
	return out, nil
}

// DeniedFiles returns the files of deny credentials (and of mask files
// whose extract matched nothing under NoMatchDeny), for the sandbox to
// read-deny.
func (s *Set) DeniedFiles() []string { return slices.Clone(s.deniedFiles) }

// DeniedEnv returns the variables SandboxEnv removes.
func (s *Set) DeniedEnv() []string { return slices.Clone(s.deniedEnv) }

// BindsHost reports whether any binding is bound to canonical host, which the
// gateway uses to decide that host must be inspected (TLS terminated).
func (s *Set) BindsHost(host string) bool {
	if s == nil {
		return false
	}
	for _, b := range s.bindings {
		if b.hosts.match(host) {
			return true
		}
	}
	return false
}

// compile builds the scanner once all bindings are known.
func (s *Set) compile() {
	s.sc = newScanner(s.bindings)
	s.lowered = make([][]string, len(s.bindings))
	for i, b := range s.bindings {
		s.anyBody = s.anyBody || b.body
		s.lowered[i] = []string{strings.ToLower(b.Sentinel), strings.ToLower(b.secret)}
		// A host name cannot hold "_", so "ghp_…" would never appear in
		// one whole; its random part can.
		if pre := shapeOf(b.secret).prefix; pre > 0 {
			s.lowered[i] = append(s.lowered[i], strings.ToLower(b.Sentinel[pre:]))
		}
	}
}
