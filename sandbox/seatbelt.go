package sandbox

import (
	"fmt"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// SeatbeltOptions are the run-time facts of a macOS sandbox that are not in
// the Spec.
type SeatbeltOptions struct {
	TmpDir    string // private TMPDIR, writable
	Home      string // $HOME, where the mandatory denies also apply
	HTTPPort  int    // the gateway relay's localhost ports, the only network allowed
	SOCKSPort int
}

// machServices are the Mach services a typical CLI needs (logging,
// name resolution of local files, keychain-free TLS trust evaluation).
var machServices = []string{
	"com.apple.system.logger",
	"com.apple.system.notification_center",
	"com.apple.system.opendirectoryd.libinfo",
	"com.apple.trustd.agent",
	"com.apple.SecurityServer",
	"com.apple.coreservices.launchservicesd",
	"com.apple.diagnosticd",
	"com.apple.analyticsd",
	"com.apple.logd",
	"com.apple.FSEvents",
	"com.apple.lsd.mapdb",
}

// SeatbeltProfile renders the SBPL profile for s (DESIGN §9). Later rules
// override earlier ones in SBPL, so each deny follows the allow it narrows.
// It is pure: globs are not expanded (SBPL matches them as regexes).
func SeatbeltProfile(s Spec, o SeatbeltOptions) (string, error) {
	if o.HTTPPort == 0 {
		o.HTTPPort = DefaultHTTPPort
	}
	if o.SOCKSPort == 0 {
		o.SOCKSPort = DefaultSOCKSPort
	}
	for _, l := range [][]string{s.DenyRead, s.AllowRead, s.AllowWrite, s.DenyWrite, s.AllowUnixSockets, s.AlwaysHidden} {
		for _, p := range l {
			if !filepath.IsAbs(p) {
				return "", fmt.Errorf("sandbox: %q: path must be absolute", p)
			}
		}
	}
	var b strings.Builder
	w := func(format string, a ...any) { fmt.Fprintf(&b, format+"\n", a...) }
	// rule writes one SBPL rule over paths; nothing for none.
	rule := func(head string, paths []string) {
		if len(paths) == 0 {
			return
		}
		w("(%s", head)
		for _, p := range paths {
			w("  %s", sbPath(p))
		}
		w(")")
	}
	w("(version 1)")
	w("(deny default)")
	w("")
	w("; processes: run and fork; signal and inspect only inside this sandbox")
	w("(allow process-exec process-fork)")
	w("(allow signal (target same-sandbox))")
	w("(allow process-info* (target same-sandbox))")
	w("(allow sysctl-read)")
	w("(allow iokit-open (iokit-registry-entry-class \"RootDomainUserClient\"))")
	w("(allow ipc-posix-shm-read-data ipc-posix-shm-write-data ipc-posix-shm-write-create)")
	w("(allow mach-lookup")
	for _, m := range machServices {
		w("  (global-name %s)", sbString(m))
	}
	w(")")
	w("")
	w("; reads: open, minus the credential stores, plus allowRead inside them")
	w("(allow file-read*)")
	rule("deny file-read*", s.DenyRead)
	rule("allow file-read*", s.AllowRead)
	if len(s.AlwaysHidden) > 0 {
		w("; moat's own secrets: after every allow, so nothing re-opens them")
		rule("deny file-read* file-write*", s.AlwaysHidden)
	}
	w("")
	writable := append([]string{}, s.AllowWrite...)
	if o.TmpDir != "" {
		writable = append(writable, o.TmpDir)
	}
	switch {
	case s.OpenFilesystem:
		w("; writes: everywhere (filesystem.disabled), minus moat's own files below")
		w("(allow file-write*)")
	default:
		w("; writes: allowWrite and TMPDIR only")
		w("(allow file-write-data (literal \"/dev/null\") (literal \"/dev/zero\") (literal \"/dev/tty\") (regex #\"^/dev/ttys[0-9]+$\") (literal \"/dev/dtracehelper\"))")
	}
	if !s.OpenFilesystem {
		rule("allow file-write*", writable)
	}
	rule("deny file-write*", s.DenyWrite)
	// Mandatory denies, at any depth below each writable root and $HOME.
	roots := append([]string{}, s.AllowWrite...)
	if s.Dir != "" {
		roots = append(roots, s.Dir)
	}
	if o.Home != "" {
		roots = append(roots, o.Home)
	}
	if s.OpenFilesystem {
		roots = nil // srt drops every filesystem rule; DenyWrite stays
	}
	roots = dedupe(roots)
	sort.Strings(roots)
	if len(roots) > 0 {
		w("; protected names: shell start-up files, git config and hooks, editor and agent settings")
		w("(deny file-write*")
		for _, r := range roots {
			base := "^" + regexp.QuoteMeta(filepath.Clean(r)) + "/(.*/)?"
			for _, f := range mandatoryFiles {
				w("  (regex %s)", sbRegex(base+regexp.QuoteMeta(f)+"$"))
			}
			for _, d := range mandatoryDirs {
				w("  (regex %s)", sbRegex(base+regexp.QuoteMeta(d)+"(/.*)?$"))
			}
			if !s.AllowGitConfig {
				w("  (regex %s)", sbRegex(base+regexp.QuoteMeta(".git/config")+"$"))
			}
		}
		w(")")
	}
	// Moving a parent away would move a protected path with it.
	anc := ancestors(append(append(append([]string{}, s.DenyRead...), s.DenyWrite...), s.AlwaysHidden...))
	if len(anc) > 0 {
		w("; renames of protected paths and their parents")
		w("(deny file-write-unlink")
		for _, a := range anc {
			w("  (literal %s)", sbString(a))
		}
		w(")")
	}
	w("")
	w("; network: only the gateway relay on localhost")
	w("(allow network-outbound (remote ip \"localhost:%d\") (remote ip \"localhost:%d\"))", o.HTTPPort, o.SOCKSPort)
	if s.AllowAllUnixSockets {
		w("(allow network* (remote unix-socket))")
	} else if len(s.AllowUnixSockets) > 0 {
		w("(allow network-outbound")
		for _, p := range s.AllowUnixSockets {
			w("  (remote unix-socket (path-literal %s))", sbString(p))
		}
		w(")")
	}
	return b.String(), nil
}

// sbPath matches a path and everything below it; a glob becomes a regex.
func sbPath(p string) string {
	p = filepath.Clean(p)
	if strings.ContainsAny(p, "*?[") {
		return "(regex " + sbRegex("^"+globRegex(p)+"(/.*)?$") + ")"
	}
	return "(subpath " + sbString(p) + ")"
}

// globRegex turns a path glob into a regex body: * and ? stay in one
// component, [...] is copied.
func globRegex(g string) string {
	var b strings.Builder
	for i := 0; i < len(g); i++ {
		switch c := g[i]; c {
		case '*':
			b.WriteString("[^/]*")
		case '?':
			b.WriteString("[^/]")
		case '[':
			j := strings.IndexByte(g[i:], ']')
			if j < 0 {
				b.WriteString(`\[`)
				continue
			}
			b.WriteString(g[i : i+j+1])
			i += j
		default:
			b.WriteString(regexp.QuoteMeta(string(c)))
		}
	}
	return b.String()
}

// sbString quotes s as an SBPL string literal.
func sbString(s string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(s) + `"`
}

// sbRegex quotes a regex as an SBPL #"..." literal.
func sbRegex(re string) string {
	return `#"` + strings.ReplaceAll(re, `"`, `\"`) + `"`
}

// ancestors returns the paths and all their parents (except /), sorted.
func ancestors(ps []string) []string {
	seen := map[string]bool{}
	for _, p := range ps {
		p = filepath.Clean(p)
		if strings.ContainsAny(p, "*?[") {
			p = filepath.Dir(p)
		}
		for ; p != "/" && p != "."; p = filepath.Dir(p) {
			seen[p] = true
		}
	}
	out := make([]string, 0, len(seen))
	for p := range seen {
		out = append(out, p)
	}
	sort.Strings(out)
	return out
}
