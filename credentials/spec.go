package credentials

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"time"

	"github.com/moat-dev/moat/gateway/policy/canon"
)

// Modes of a Spec.
const (
	ModeMask = "mask" // the sandbox sees a sentinel, the gateway swaps it
	ModeDeny = "deny" // the variable is removed, the file read-denied
)

// OnExtractNoMatch values, with srt's meaning.
const (
	NoMatchWarn  = "warn"  // the default: warn and leave the value unmasked
	NoMatchDeny  = "deny"  // treat the credential as mode deny
	NoMatchError = "error" // Load fails
)

// DefaultCommandTimeout bounds a command source unless WithCommandTimeout
// says otherwise.
const DefaultCommandTimeout = 10 * time.Second

// Spec is one credential as the caller's settings describe it: an
// environment variable (File empty) or a file (File set).
type Spec struct {
	// Name is the environment variable inside the sandbox, or for a file a
	// display name (usually its path). It is what audit lines and errors
	// name.
	Name string
	// Mode is ModeMask or ModeDeny.
	Mode string
	// Source is where an env credential's secret comes from: "" means
	// "env:"+Name of moat's own environment; "env:NAME", "file:PATH" (whole
	// file, trailing newlines trimmed) or "command:ARGV" (run with a
	// timeout, stdout trimmed; ARGV is split on blanks, with '…' and "…"
	// quoting). A file credential must leave Source empty: its secret is in
	// File.
	Source string
	// InjectHosts are canonical host patterns without port ("api.github.com"
	// or "*.example.com") the secret may be sent to. A mask credential
	// needs at least one.
	InjectHosts []string
	// Extract is a regex whose group 1 is the secret within the value or
	// file; every match is masked. Empty means the whole (trimmed) value.
	Extract string
	// OnExtractNoMatch is NoMatchWarn (when empty), NoMatchDeny or
	// NoMatchError.
	OnExtractNoMatch string
	// InjectBody also swaps the sentinel inside request bodies (opt-in: a
	// body may be large, and most APIs take tokens in headers).
	InjectBody bool
	// File is the path of a file credential; empty for an env credential.
	File string
}

// Warning is a non-fatal finding of Load, such as an extract that matched
// nothing under NoMatchWarn. It never holds a secret.
type Warning struct {
	// Credential is Spec.Name.
	Credential string
	// Message says what happened and what follows.
	Message string
}

// String returns "credential NAME: MESSAGE".
func (w Warning) String() string { return "credential " + w.Credential + ": " + w.Message }

// AWSPair names the masked env credentials that make one AWS key, so that
// ResignAWS can re-sign SigV4 requests made with their sentinels. The
// standard AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN
// pair themselves.
type AWSPair struct {
	AccessKeyID     string // Spec.Name of the key ID
	SecretAccessKey string // Spec.Name of the secret key
	SessionToken    string // Spec.Name of the session token; optional
}

// SigV4Passthrough says which SigV4 forms that cannot be re-signed are
// forwarded untouched (they then fail upstream, since they are signed with
// the sentinel key) instead of denied. The zero value denies them all.
type SigV4Passthrough struct {
	Streaming bool // STREAMING-* payloads
	Presigned bool // presigned URLs
	SigV4A    bool // AWS4-ECDSA-P256-SHA256
}

// Option adjusts Load.
type Option func(*options)

type options struct {
	pairs       []AWSPair
	passthrough SigV4Passthrough
	timeout     time.Duration
}

// WithAWSPair adds an AWS key made of differently named credentials.
func WithAWSPair(p AWSPair) Option { return func(o *options) { o.pairs = append(o.pairs, p) } }

// WithSigV4Passthrough sets which SigV4 forms pass through untouched.
func WithSigV4Passthrough(p SigV4Passthrough) Option {
	return func(o *options) { o.passthrough = p }
}

// WithCommandTimeout bounds each command source (default
// DefaultCommandTimeout).
func WithCommandTimeout(d time.Duration) Option { return func(o *options) { o.timeout = d } }

// Load reads every mask credential's secret, draws its sentinel and
// compiles the set. getenv reads moat's own environment (os.Getenv in
// production). Deny credentials are not read. Every error names the
// credential and never its value; problems of all specs are joined.
func Load(specs []Spec, getenv func(string) string, opts ...Option) (*Set, []Warning, error) {
	o := options{timeout: DefaultCommandTimeout}
	for _, f := range opts {
		f(&o)
	}
	if getenv == nil {
		getenv = func(string) string { return "" }
	}
	s := &Set{maskedEnv: map[string]string{}, maskedFiles: map[string][]byte{}, passthrough: o.passthrough}
	var warns []Warning
	var errs []error
	for i := range specs {
		w, err := s.add(&specs[i], getenv, o.timeout)
		if w != "" {
			warns = append(warns, Warning{Credential: specs[i].Name, Message: w})
		}
		if err != nil {
			errs = append(errs, &SourceError{Credential: specs[i].Name, Err: err})
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, warns, err
	}
	warns = append(warns, s.pairAWS(o.pairs)...)
	s.compile()
	return s, warns, nil
}

// add loads one spec into s. It returns a warning text, or an error that
// Load wraps with the credential's name.
func (s *Set) add(sp *Spec, getenv func(string) string, timeout time.Duration) (string, error) {
	if sp.Name == "" {
		return "", fmt.Errorf("%w: empty name", ErrBadSpec)
	}
	switch sp.Mode {
	case ModeDeny:
		s.deny(sp)
		return "", nil
	case ModeMask:
	default:
		return "", fmt.Errorf("%w: mode %q is not %q or %q", ErrBadSpec, sp.Mode, ModeMask, ModeDeny)
	}
	hosts, err := compileHosts(sp.InjectHosts)
	if err != nil {
		return "", err
	}
	var re *regexp.Regexp
	if sp.Extract != "" {
		if re, err = regexp.Compile(sp.Extract); err != nil {
			return "", fmt.Errorf("%w: extract: %v", ErrBadSpec, err)
		}
		if re.NumSubexp() < 1 {
			return "", fmt.Errorf("%w: extract regex has no capture group; group 1 must be the secret", ErrBadSpec)
		}
	}
	switch sp.OnExtractNoMatch {
	case "", NoMatchWarn, NoMatchDeny, NoMatchError:
	default:
		return "", fmt.Errorf("%w: onExtractNoMatch %q is not warn, deny or error", ErrBadSpec, sp.OnExtractNoMatch)
	}

	raw, err := readSource(sp, getenv, timeout)
	if err != nil {
		return "", err
	}
	secrets := []string{raw}
	if re != nil {
		secrets = extract(re, raw)
		if len(secrets) == 0 {
			switch sp.OnExtractNoMatch {
			case NoMatchError:
				return "", ErrExtractNoMatch
			case NoMatchDeny:
				s.deny(sp)
				return "extract regex matched nothing; denied instead", nil
			}
			return "extract regex matched nothing; left unmasked", nil
		}
	}
	masked := raw
	for _, sec := range secrets {
		if sec == "" {
			return "", fmt.Errorf("%w: extract group 1 matched nothing", ErrEmptySecret)
		}
		b := s.binding(sec)
		if b == nil {
			sent, err := newSentinel(sec, s.taken)
			if err != nil {
				return "", err
			}
			b = &Binding{Name: sp.Name, Sentinel: sent, secret: sec, hosts: hosts, body: sp.InjectBody}
			s.bindings = append(s.bindings, b)
		} else if b.Name != sp.Name && !b.hosts.equal(hosts) {
			// One secret, two names (a token in $GITHUB_TOKEN and in
			// gh's hosts.yml): they share one sentinel, which is sound
			// only when both bind the same hosts. Refuse rather than guess.
			return "", fmt.Errorf("%w: same secret as credential %s, with different injectHosts: give both the same injectHosts", ErrBadSpec, b.Name)
		}
		// Replace every copy, not only the extracted span: a second
		// verbatim copy elsewhere in the file must not reach the sandbox.
		masked = strings.ReplaceAll(masked, sec, b.Sentinel)
	}
	if sp.File != "" {
		s.maskedFiles[sp.File] = []byte(masked)
	} else {
		s.maskedEnv[sp.Name] = masked
	}
	return "", nil
}

func (s *Set) deny(sp *Spec) {
	if sp.File != "" {
		s.deniedFiles = append(s.deniedFiles, sp.File)
	} else {
		s.deniedEnv = append(s.deniedEnv, sp.Name)
	}
}

// binding returns the binding that already holds secret, if any.
func (s *Set) binding(secret string) *Binding {
	for _, b := range s.bindings {
		if b.secret == secret {
			return b
		}
	}
	return nil
}

// taken reports whether a candidate sentinel overlaps (contains or is
// contained in) any sentinel or secret of s, which would make swaps and
// leak reports ambiguous.
func (s *Set) taken(c string) bool {
	for _, b := range s.bindings {
		for _, t := range [2]string{b.Sentinel, b.secret} {
			if strings.Contains(t, c) || strings.Contains(c, t) {
				return true
			}
		}
	}
	return false
}

// extract returns group 1 of every match of re in raw, each once, in order.
func extract(re *regexp.Regexp, raw string) []string {
	var out []string
	seen := map[string]bool{}
	for _, m := range re.FindAllStringSubmatchIndex(raw, -1) {
		if len(m) < 4 || m[2] < 0 {
			continue
		}
		v := raw[m[2]:m[3]]
		if !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	return out
}

// readSource returns the raw value of a spec: the file for a file
// credential, otherwise what Source names.
func readSource(sp *Spec, getenv func(string) string, timeout time.Duration) (string, error) {
	if sp.File != "" {
		if sp.Source != "" {
			return "", fmt.Errorf("%w: a file credential takes no source", ErrBadSpec)
		}
		b, err := os.ReadFile(sp.File)
		if err != nil {
			return "", err
		}
		if len(bytes.TrimSpace(b)) == 0 {
			return "", fmt.Errorf("%w: file %s", ErrEmptySecret, sp.File)
		}
		return string(b), nil
	}
	kind, arg, ok := strings.Cut(sp.Source, ":")
	if sp.Source == "" {
		kind, arg, ok = "env", sp.Name, true
	}
	if !ok || arg == "" {
		return "", fmt.Errorf("%w: source %q is not env:NAME, file:PATH or command:ARGV", ErrBadSpec, sp.Source)
	}
	var v string
	switch kind {
	case "env":
		v = getenv(arg)
		if v == "" {
			return "", fmt.Errorf("%w: variable %s is unset or empty in moat's environment", ErrEmptySecret, arg)
		}
		return v, nil
	case "file":
		b, err := os.ReadFile(arg)
		if err != nil {
			return "", err
		}
		v = strings.TrimRight(string(b), "\r\n")
	case "command":
		out, err := runCommand(arg, timeout)
		if err != nil {
			return "", err
		}
		v = out
	default:
		return "", fmt.Errorf("%w: source kind %q is not env, file or command", ErrBadSpec, kind)
	}
	if strings.TrimSpace(v) == "" {
		return "", fmt.Errorf("%w: %s source gave nothing", ErrEmptySecret, kind)
	}
	return v, nil
}

// runCommand runs argv with a timeout and returns its stdout without
// surrounding white space. Neither its output nor its stderr is ever put in
// an error: either may hold the secret.
func runCommand(line string, timeout time.Duration) (string, error) {
	argv, err := splitArgv(line)
	if err != nil {
		return "", fmt.Errorf("%w: command: %v", ErrBadSpec, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stdin = nil
	cmd.Stderr = nil
	cmd.WaitDelay = time.Second // a grandchild holding stdout open must not hang Load
	err = cmd.Run()
	switch {
	case ctx.Err() != nil:
		return "", fmt.Errorf("%w: %s timed out after %v", ErrCommand, argv[0], timeout)
	case err != nil:
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return "", fmt.Errorf("%w: %s: %s", ErrCommand, argv[0], ee.ProcessState.String())
		}
		return "", fmt.Errorf("%w: %s: %v", ErrCommand, argv[0], errors.Unwrap(err))
	}
	return strings.TrimSpace(out.String()), nil
}

// splitArgv splits a command line on blanks, honouring '…' (literal) and
// "…" (with \" and \\ escapes) quoting and backslash escapes outside quotes.
// It runs no shell.
func splitArgv(s string) ([]string, error) {
	var argv []string
	var cur strings.Builder
	inArg := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n':
			if inArg {
				argv = append(argv, cur.String())
				cur.Reset()
				inArg = false
			}
		case c == '\'':
			j := strings.IndexByte(s[i+1:], '\'')
			if j < 0 {
				return nil, errors.New("unterminated ' quote")
			}
			cur.WriteString(s[i+1 : i+1+j])
			i += j + 1
			inArg = true
		case c == '"':
			i++
			for ; i < len(s) && s[i] != '"'; i++ {
				if s[i] == '\\' && i+1 < len(s) && (s[i+1] == '"' || s[i+1] == '\\') {
					i++
				}
				cur.WriteByte(s[i])
			}
			if i >= len(s) {
				return nil, errors.New(`unterminated " quote`)
			}
			inArg = true
		case c == '\\':
			if i+1 >= len(s) {
				return nil, errors.New("trailing backslash")
			}
			i++
			cur.WriteByte(s[i])
			inArg = true
		default:
			cur.WriteByte(c)
			inArg = true
		}
	}
	if inArg {
		argv = append(argv, cur.String())
	}
	if len(argv) == 0 {
		return nil, errors.New("empty command")
	}
	return argv, nil
}

// hostMatcher is a compiled InjectHosts list.
type hostMatcher struct {
	exact    map[string]struct{}
	suffixes []string // ".example.com" for "*.example.com"
}

// equal reports whether m and o bind the same hosts.
func (m hostMatcher) equal(o hostMatcher) bool {
	if len(m.exact) != len(o.exact) || len(m.suffixes) != len(o.suffixes) {
		return false
	}
	for h := range m.exact {
		if _, ok := o.exact[h]; !ok {
			return false
		}
	}
	seen := map[string]bool{}
	for _, s := range m.suffixes {
		seen[s] = true
	}
	for _, s := range o.suffixes {
		if !seen[s] {
			return false
		}
	}
	return true
}

func compileHosts(pats []string) (hostMatcher, error) {
	m := hostMatcher{exact: map[string]struct{}{}}
	if len(pats) == 0 {
		return m, fmt.Errorf("%w: a mask credential needs injectHosts", ErrBadSpec)
	}
	for i, p := range pats {
		pat, err := canon.ParsePattern(p, false)
		if err != nil {
			return m, fmt.Errorf("%w: injectHosts[%d]: %v", ErrBadSpec, i, err)
		}
		if pat.Port != 0 {
			return m, fmt.Errorf("%w: injectHosts[%d] %q: inject hosts take no port", ErrBadSpec, i, p)
		}
		if canon.OddIPv4Spelling(p, pat) {
			return m, fmt.Errorf("%w: injectHosts[%d] %q: spell the address in dotted decimal: use %q", ErrBadSpec, i, p, pat.String())
		}
		switch pat.Kind {
		case canon.Exact:
			m.exact[pat.Host.String()] = struct{}{}
		case canon.Suffix:
			m.suffixes = append(m.suffixes, "."+pat.Host.Name)
		default:
			return m, fmt.Errorf("%w: injectHosts[%d] %q matches every host", ErrBadSpec, i, p)
		}
	}
	return m, nil
}

// match reports whether canonical host is bound. Suffix entries match
// strict subdomains only, as canon.Pattern.Match does.
func (m *hostMatcher) match(host string) bool {
	if _, ok := m.exact[host]; ok {
		return true
	}
	for _, suf := range m.suffixes {
		if len(host) > len(suf) && strings.HasSuffix(host, suf) {
			return true
		}
	}
	return false
}
