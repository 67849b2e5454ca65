package config

import (
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"path"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/moat-dev/moat/gateway/policy/canon"
)

// maxSearchDepth bounds MandatoryDenySearchDepth, as in srt.
const maxSearchDepth = 10

// maxDNSTimeout bounds dns.timeout: a longer wait only hides a dead server.
const maxDNSTimeout = time.Minute

// Validate checks every semantic rule of f and returns errors.Join of all
// problems, each a *FieldError that starts with its dotted path. A nil File
// is invalid.
func (f *File) Validate() error {
	if f == nil {
		return &FieldError{Msg: "no settings"}
	}
	v := &validator{}
	v.network(&f.Network)
	v.filesystem(&f.Filesystem)
	v.credentials(&f.Credentials, &f.Network)
	if d := f.MandatoryDenySearchDepth; d != nil && (*d < 0 || *d > maxSearchDepth) {
		v.add("mandatoryDenySearchDepth", "%d is out of range: use 0..%d (default %d)", *d, maxSearchDepth, DefaultSearchDepth)
	}
	for k, paths := range f.IgnoreViolations {
		v.paths(mapPath("ignoreViolations", k), paths)
	}
	if f.Git != nil {
		v.paths("git.safeDirectories", f.Git.SafeDirectories)
	}
	v.dns(&f.DNS)
	return v.err()
}

type validator struct {
	errs []error
	// allowed are the parsed allowedDomains, for coverage checks.
	allowed []canon.Pattern
	exclude []canon.Pattern
}

func (v *validator) add(path, format string, args ...any) {
	v.errs = append(v.errs, &FieldError{Path: path, Msg: fmt.Sprintf(format, args...)})
}

func (v *validator) err() error {
	sortErrs(v.errs)
	return errors.Join(v.errs...)
}

// sortErrs orders errors by path so that output is stable although map
// iteration is not.
func sortErrs(errs []error) {
	key := func(e error) string {
		var fe *FieldError
		if errors.As(e, &fe) {
			return fe.Path
		}
		return ""
	}
	for i := 1; i < len(errs); i++ {
		for j := i; j > 0 && key(errs[j]) < key(errs[j-1]); j-- {
			errs[j], errs[j-1] = errs[j-1], errs[j]
		}
	}
}

// pattern parses a host pattern. A name in any case or with a trailing dot
// is accepted (srt matches hosts case-insensitively, so "GitHub.com" and
// "github.com." are the same entry; srt files must load unchanged): the
// policy matches the canonical form, which `moat policy validate` prints.
// An IPv4 address must be dotted decimal: "127.1" or "0177.0.0.1" mean
// different things to different tools. ok is false only when s does not
// parse at all.
func (v *validator) pattern(p, s string, deny, noPort bool) (canon.Pattern, bool) {
	pat, err := canon.ParsePattern(s, deny)
	if err != nil {
		v.add(p, "%s", err.Error())
		return pat, false
	}
	switch {
	case noPort && pat.Port != 0:
		want := pat
		want.Port = 0
		v.errs = append(v.errs, &FieldError{Path: p, Value: s, Msg: fmt.Sprintf("takes no port: use %q", want.String())})
	case canon.OddIPv4Spelling(s, pat):
		v.errs = append(v.errs, &FieldError{Path: p, Value: s, Msg: fmt.Sprintf("spell the address in dotted decimal: use %q", pat.String())})
	}
	return pat, true
}

func (v *validator) port(p string, port *int) {
	if port != nil && (*port < 1 || *port > 65535) {
		v.add(p, "port %d is out of range 1..65535", *port)
	}
}

// text checks a message that ends up in a response body or a violation
// line: a newline there could forge another line.
func (v *validator) text(p, s string) {
	if s == "" {
		v.add(p, "is empty")
		return
	}
	for _, r := range s {
		if r < 0x20 || r == 0x7f {
			v.add(p, "contains a control character")
			return
		}
	}
}

func (v *validator) paths(p string, ps []string) {
	for i, s := range ps {
		switch {
		case s == "":
			v.add(fmt.Sprintf("%s[%d]", p, i), "path is empty")
		case strings.ContainsRune(s, 0):
			v.add(fmt.Sprintf("%s[%d]", p, i), "path contains NUL")
		}
	}
}

func (v *validator) network(n *Network) {
	for i, s := range n.AllowedDomains {
		if pat, ok := v.pattern(fmt.Sprintf("network.allowedDomains[%d]", i), s, false, false); ok {
			v.allowed = append(v.allowed, pat)
		}
	}
	deny := make(map[string]bool, len(n.DeniedDomains))
	for i, s := range n.DeniedDomains {
		v.pattern(fmt.Sprintf("network.deniedDomains[%d]", i), s, true, false)
		deny[s] = true
	}
	for k, msg := range n.DeniedDomainReasons {
		p := mapPath("network.deniedDomainReasons", k)
		if !deny[k] {
			v.add(p, "%s is not a network.deniedDomains entry (keys match the exact entry)", quote(k))
		}
		v.text(p, msg)
	}
	if n.StrictAllowlist && n.AllowAllDomains {
		v.add("network.allowAllDomains", "contradicts network.strictAllowlist: set one of them")
	}
	v.paths("network.allowUnixSockets", n.AllowUnixSockets)
	v.port("network.httpProxyPort", n.HTTPProxyPort)
	v.port("network.socksProxyPort", n.SOCKSProxyPort)
	if n.SOCKSProxyPort != nil && n.HTTPProxyPort == nil && n.ParentProxy == nil {
		v.add("network.socksProxyPort", "moat chains only through HTTP proxies; set network.httpProxyPort or network.parentProxy instead")
	}
	if t := n.TLSTerminate; t != nil {
		if (t.CACertPath == "") != (t.CAKeyPath == "") {
			v.add("network.tlsTerminate", "caCertPath and caKeyPath must be given together")
		}
		for i, s := range t.ExcludeDomains {
			if pat, ok := v.pattern(fmt.Sprintf("network.tlsTerminate.excludeDomains[%d]", i), s, false, true); ok {
				v.exclude = append(v.exclude, pat)
			}
		}
		v.paths("network.tlsTerminate.extraCaCertPaths", t.ExtraCACertPaths)
		v.paths("network.tlsTerminate.upstreamCaCertPaths", t.UpstreamCACertPaths)
	}
	if pp := n.ParentProxy; pp != nil {
		v.proxyURL("network.parentProxy.http", pp.HTTP)
		v.proxyURL("network.parentProxy.https", pp.HTTPS)
	}
	v.prefixes("network.deniedResolvedAddresses", n.DeniedResolvedAddresses)
	v.prefixes("network.allowedResolvedAddresses", n.AllowedResolvedAddresses)
	ids := map[string]int{}
	for i := range n.Rules {
		v.rule(fmt.Sprintf("network.rules[%d]", i), &n.Rules[i], ids, i)
	}
	for i := range n.Git {
		v.git(fmt.Sprintf("network.git[%d]", i), &n.Git[i])
	}
	for i, b := range n.Budgets {
		p := fmt.Sprintf("network.budgets[%d]", i)
		v.requiredPattern(p+".host", b.Host)
		for _, l := range []struct {
			k string
			n *int64
		}{{"requests", b.Requests}, {"bytesUp", b.BytesUp}, {"bytesDown", b.BytesDown}} {
			if l.n != nil && *l.n < 0 {
				v.add(p+"."+l.k, "%d is negative: omit it for no limit", *l.n)
			}
		}
	}
}

func (v *validator) requiredPattern(p, s string) {
	if s == "" {
		v.add(p, "is required")
		return
	}
	v.pattern(p, s, false, false)
}

// proxyURL checks a parent proxy URL. The URL may carry credentials, so
// messages never repeat it.
func (v *validator) proxyURL(p, s string) {
	if s == "" {
		return
	}
	u, err := url.Parse(s)
	switch {
	case err != nil:
		v.add(p, "is not a URL")
	case u.Scheme != "http" && u.Scheme != "https":
		v.add(p, "scheme must be http or https")
	case u.Host == "":
		v.add(p, "has no host")
	case u.Path != "" && u.Path != "/" || u.RawQuery != "" || u.Fragment != "":
		v.add(p, "must be scheme://host:port only")
	}
}

// parsePrefix reads a CIDR or a bare IP (a /32 or /128).
func parsePrefix(s string) (netip.Prefix, error) {
	if strings.Contains(s, "/") {
		return netip.ParsePrefix(s)
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, err
	}
	return netip.PrefixFrom(a, a.BitLen()), nil
}

func (v *validator) prefixes(p string, ss []string) {
	for i, s := range ss {
		ep := fmt.Sprintf("%s[%d]", p, i)
		pf, err := parsePrefix(s)
		if err != nil {
			v.add(ep, "%s is not a CIDR or IP address (e.g. \"10.1.0.0/16\")", quote(s))
			continue
		}
		if pf.Addr().Zone() != "" {
			v.add(ep, "%s: zones are not allowed", quote(s))
			continue
		}
		want := pf.Masked()
		if a := pf.Addr(); a.Is4In6() && pf.Bits() >= 96 {
			want = netip.PrefixFrom(a.Unmap(), pf.Bits()-96).Masked()
		}
		c := want.String()
		if !strings.Contains(s, "/") && want.IsSingleIP() {
			c = want.Addr().String()
		}
		if c != s {
			v.errs = append(v.errs, &FieldError{Path: ep, Value: s, Msg: fmt.Sprintf("use %q", c)})
		}
	}
}

func lazyRegexp(expr string) func() *regexp.Regexp {
	return sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(expr) })
}

var (
	// Compiled on first use: every moat process (and each sandbox stage)
	// would otherwise pay for them at start-up.
	ruleIDRe   = lazyRegexp(`^[A-Za-z0-9][A-Za-z0-9._:/-]{0,63}$`)
	methodRe   = lazyRegexp(`^[A-Z][A-Z0-9_-]*$`)
	tokenRe    = lazyRegexp("^[!#$%&'*+.^_`|~0-9A-Za-z-]+$") // RFC 9110 §5.6.2
	envNameRe  = lazyRegexp(`^[A-Za-z_][A-Za-z0-9_]*$`)
	gitRepoMax = 2 // "owner/repo"
)

func (v *validator) rule(p string, r *Rule, ids map[string]int, i int) {
	if r.ID != "" {
		if !ruleIDRe().MatchString(r.ID) {
			v.add(p+".id", "%s: use letters, digits and ._:/- (at most 64)", quote(r.ID))
		} else if j, dup := ids[r.ID]; dup {
			v.add(p+".id", "duplicate rule id %s (also network.rules[%d])", quote(r.ID), j)
		} else {
			ids[r.ID] = i
		}
	}
	v.requiredPattern(p+".host", r.Host)
	for _, l := range []struct {
		k  string
		ms []Match
	}{{"allow", r.Allow}, {"deny", r.Deny}} {
		for j, m := range l.ms {
			v.match(fmt.Sprintf("%s.%s[%d]", p, l.k, j), &m)
		}
	}
}

func (v *validator) match(p string, m *Match) {
	if m.Method != nil && len(m.Method) == 0 {
		v.add(p+".method", "is empty: omit it for every method")
	}
	for i, meth := range m.Method {
		mp := p + ".method"
		if len(m.Method) > 1 || meth == "" {
			mp = fmt.Sprintf("%s[%d]", mp, i)
		}
		switch {
		case meth == "*":
		case methodRe().MatchString(meth):
		case tokenRe().MatchString(meth) && methodRe().MatchString(strings.ToUpper(meth)):
			v.errs = append(v.errs, &FieldError{Path: mp, Value: meth, Msg: fmt.Sprintf("methods are case-sensitive: use %q", strings.ToUpper(meth))})
		default:
			v.add(mp, "%s is not an HTTP method (e.g. \"GET\", or \"*\")", quote(meth))
		}
	}
	if m.Path != "" {
		if prob := pathGlobProblem(m.Path); prob != "" {
			v.add(p+".path", "%s %s", quote(m.Path), prob)
		}
	}
	for k, g := range m.Query {
		qp := mapPath(p+".query", k)
		if k == "" {
			v.add(qp, "query key is empty")
		}
		if _, err := path.Match(g, ""); err != nil || g == "" {
			v.add(qp, "%s is not a glob (use \"*\" for any value)", quote(g))
		}
	}
	for k, g := range m.Headers {
		hp := mapPath(p+".headers", k)
		if !tokenRe().MatchString(k) {
			v.add(hp, "%s is not a header name", quote(k))
		}
		if _, err := path.Match(g, ""); err != nil || g == "" {
			v.add(hp, "%s is not a glob (use \"*\" for any value)", quote(g))
		}
	}
	if m.Reason != "" {
		v.text(p+".reason", m.Reason)
	}
}

// pathGlobProblem checks a request path glob: segments separated by "/",
// "*" (or path.Match syntax) within one segment, "**" as a whole segment
// for any number of them.
func pathGlobProblem(g string) string {
	if !strings.HasPrefix(g, "/") {
		return "must start with \"/\""
	}
	for _, seg := range strings.Split(g[1:], "/") {
		if seg == "**" {
			continue
		}
		if strings.Contains(seg, "**") {
			return "uses \"**\" inside a segment: \"**\" must be a whole segment (\"/a/**\")"
		}
		if _, err := path.Match(seg, ""); err != nil {
			return "is not a valid glob"
		}
	}
	return ""
}

// globProblem checks a "/"-separated glob of want segments (0: any).
func globProblem(g string, want int) string {
	if g == "" {
		return "is empty"
	}
	segs := strings.Split(g, "/")
	if want > 0 && len(segs) != want {
		return "must have the form \"owner/repo\""
	}
	for _, seg := range segs {
		if seg == "" {
			return "has an empty segment"
		}
		if _, err := path.Match(seg, ""); err != nil {
			return "is not a valid glob"
		}
	}
	return ""
}

func (v *validator) git(p string, g *GitRule) {
	v.requiredPattern(p+".host", g.Host)
	for i, r := range g.Fetch {
		if prob := globProblem(r, gitRepoMax); prob != "" {
			v.add(fmt.Sprintf("%s.fetch[%d]", p, i), "%s %s", quote(r), prob)
		}
	}
	for i, push := range g.Push {
		pp := fmt.Sprintf("%s.push[%d]", p, i)
		if prob := globProblem(push.Repo, gitRepoMax); prob != "" {
			v.add(pp+".repo", "%s %s", quote(push.Repo), prob)
		}
		if len(push.Refs) == 0 {
			v.add(pp+".refs", "is empty: no push could succeed; list refs such as \"refs/heads/agent/*\"")
		}
		for j, ref := range push.Refs {
			rp := fmt.Sprintf("%s.refs[%d]", pp, j)
			if !strings.HasPrefix(ref, "refs/") {
				v.add(rp, "%s must start with \"refs/\" (e.g. \"refs/heads/main\")", quote(ref))
			} else if prob := globProblem(ref, 0); prob != "" {
				v.add(rp, "%s %s", quote(ref), prob)
			}
		}
	}
}

func (v *validator) filesystem(fs *Filesystem) {
	v.paths("filesystem.denyRead", fs.DenyRead)
	v.paths("filesystem.allowRead", fs.AllowRead)
	v.paths("filesystem.allowWrite", fs.AllowWrite)
	v.paths("filesystem.denyWrite", fs.DenyWrite)
}

// covers reports whether allow-list pattern a reaches every host of pattern
// h, ignoring ports: injection is per host.
func covers(a, h canon.Pattern) bool {
	a.Port = 0
	switch h.Kind {
	case canon.Exact:
		return a.Match(h.Host, 1)
	case canon.Suffix:
		return a.Kind == canon.Suffix && (a.Host.Name == h.Host.Name || a.Match(canon.Host{Name: h.Host.Name}, 1))
	}
	return false
}

func coveredBy(h canon.Pattern, list []canon.Pattern) bool {
	for _, a := range list {
		if covers(a, h) {
			return true
		}
	}
	return false
}

// injectHosts checks one credential's injectHosts against the allow list.
func (v *validator) injectHosts(p string, hosts []string, mode string, allowAll bool) {
	if mode == ModeMask && hosts != nil && len(hosts) == 0 {
		v.add(p, "is empty: the secret would be masked but never sent; omit it to default to network.allowedDomains")
	}
	for i, s := range hosts {
		ep := fmt.Sprintf("%s[%d]", p, i)
		pat, ok := v.pattern(ep, s, false, true)
		if !ok {
			continue
		}
		if !allowAll && !coveredBy(pat, v.allowed) {
			v.add(ep, "%s is not covered by network.allowedDomains: add it (or a covering wildcard) there, or remove it here", quote(s))
		}
		if mode == ModeMask && coveredBy(pat, v.exclude) {
			v.add(ep, "%s is covered by network.tlsTerminate.excludeDomains: the secret is only swapped on terminated TLS", quote(s))
		}
	}
	if mode == ModeMask && hosts == nil && allowAll && len(v.allowed) == 0 {
		v.add(p, "is required with network.allowAllDomains and no allowedDomains: list the hosts that receive the secret")
	}
}

func (v *validator) mode(p, m string) {
	switch m {
	case ModeDeny, ModeMask:
	case "":
		v.add(p, "is required: \"deny\" or \"mask\"")
	default:
		v.add(p, "%s: use \"deny\" or \"mask\"", quote(m))
	}
}

// masking checks the fields shared by masked env vars and files.
func (v *validator) masking(p, extract, onNoMatch, decode string, claims []string) {
	if extract != "" {
		re, err := regexp.Compile(extract)
		switch {
		case err != nil:
			v.add(p+".extract", "is not a valid regular expression (RE2 syntax): %s", strings.TrimPrefix(err.Error(), "error parsing regexp: "))
		case re.NumSubexp() < 1:
			v.add(p+".extract", "has no capturing group: group 1 is the secret (e.g. \"token:\\\\s*(\\\\S+)\")")
		}
	}
	switch onNoMatch {
	case "", "warn", "deny", "error":
	default:
		v.add(p+".onExtractNoMatch", "%s: use \"warn\", \"deny\" or \"error\"", quote(onNoMatch))
	}
	switch decode {
	case "", "jwt":
	default:
		v.add(p+".decode", "%s: use \"jwt\"", quote(decode))
	}
	if claims != nil {
		if decode == "" {
			v.add(p+".maskClaims", "requires decode (e.g. \"jwt\")")
		}
		if len(claims) == 0 {
			v.add(p+".maskClaims", "is empty: omit it to mask the whole token")
		}
		for i, c := range claims {
			if c == "" {
				v.add(fmt.Sprintf("%s.maskClaims[%d]", p, i), "is empty")
			}
		}
	}
}

func (v *validator) credentials(c *Credentials, n *Network) {
	names := map[string]int{}
	for i, e := range c.EnvVars {
		p := fmt.Sprintf("credentials.envVars[%d]", i)
		switch {
		case e.Name == "":
			v.add(p+".name", "is required")
		case !envNameRe().MatchString(e.Name):
			v.add(p+".name", "%s is not a variable name (letters, digits, _)", quote(e.Name))
		default:
			if j, dup := names[e.Name]; dup {
				v.add(p+".name", "%s is also credentials.envVars[%d]", quote(e.Name), j)
			} else {
				names[e.Name] = i
			}
		}
		v.mode(p+".mode", e.Mode)
		v.source(p+".source", e.Source)
		v.masking(p, e.Extract, e.OnExtractNoMatch, e.Decode, e.MaskClaims)
		v.injectHosts(p+".injectHosts", e.InjectHosts, e.Mode, n.AllowAllDomains)
	}
	for i, fl := range c.Files {
		p := fmt.Sprintf("credentials.files[%d]", i)
		switch {
		case fl.Path == "":
			v.add(p+".path", "is required")
		case strings.ContainsRune(fl.Path, 0):
			v.add(p+".path", "path contains NUL")
		case fl.Mode == ModeMask && strings.HasSuffix(fl.Path, "/"):
			v.add(p+".path", "%s is a directory: mask applies to one file; use mode \"deny\"", quote(fl.Path))
		}
		v.mode(p+".mode", fl.Mode)
		v.masking(p, fl.Extract, fl.OnExtractNoMatch, fl.Decode, fl.MaskClaims)
		v.injectHosts(p+".injectHosts", fl.InjectHosts, fl.Mode, n.AllowAllDomains)
	}
	used := map[string]bool{}
	for i, pair := range c.AWSPairs {
		p := fmt.Sprintf("credentials.awsPairs[%d]", i)
		for _, slot := range []struct {
			k, name string
			need    bool
		}{{"accessKeyIdVar", pair.AccessKeyIDVar, true}, {"secretAccessKeyVar", pair.SecretAccessKeyVar, true}, {"sessionTokenVar", pair.SessionTokenVar, false}} {
			sp := p + "." + slot.k
			if slot.name == "" {
				if slot.need {
					v.add(sp, "is required")
				}
				continue
			}
			if used[slot.name] {
				v.add(sp, "%s fills more than one awsPairs slot", quote(slot.name))
				continue
			}
			used[slot.name] = true
			j, ok := names[slot.name]
			switch {
			case !ok || c.EnvVars[j].Mode != ModeMask:
				v.add(sp, "%s is not a credentials.envVars entry with mode \"mask\"", quote(slot.name))
			case c.EnvVars[j].Extract != "" || c.EnvVars[j].Decode != "":
				v.add(sp, "%s uses extract or decode: an AWS pair member must be masked whole", quote(slot.name))
			}
		}
	}
	if s := c.SigV4; s != nil {
		for _, f := range []struct{ k, val string }{{"streaming", s.Streaming}, {"presigned", s.Presigned}, {"sigv4a", s.SigV4A}} {
			switch f.val {
			case "", "deny", "passthrough":
			default:
				v.add("credentials.sigv4."+f.k, "%s: use \"deny\" or \"passthrough\"", quote(f.val))
			}
		}
	}
}

// source checks a moat credential source: env:NAME, file:PATH or
// command:ARGV.
func (v *validator) source(p, s string) {
	if s == "" {
		return
	}
	kind, arg, _ := strings.Cut(s, ":")
	switch {
	case kind == "env" && envNameRe().MatchString(arg):
	case kind == "file" && arg != "" && !strings.ContainsRune(arg, 0):
	case kind == "command" && strings.TrimSpace(arg) != "":
	default:
		// The value may name a secret's location but not the secret; still,
		// keep the message generic.
		v.add(p, "must be \"env:NAME\", \"file:PATH\" or \"command:ARGV\"")
	}
}

func (v *validator) dns(d *DNS) {
	for i, s := range d.Servers {
		p := fmt.Sprintf("dns.servers[%d]", i)
		a, err := netip.ParseAddr(s)
		if err != nil {
			ap, err2 := netip.ParseAddrPort(s)
			if err2 != nil {
				v.add(p, "%s must be an IP or IP:port (IPv6 as \"[ip]:port\")", quote(s))
				continue
			}
			if ap.Port() == 0 {
				v.add(p, "%s: port 0", quote(s))
			}
			a = ap.Addr()
		}
		if a.Zone() != "" {
			v.add(p, "%s: zones are not allowed", quote(s))
		}
	}
	if d.Timeout != "" {
		t, err := time.ParseDuration(d.Timeout)
		switch {
		case err != nil:
			v.add("dns.timeout", "%s is not a duration (e.g. \"5s\")", quote(d.Timeout))
		case t <= 0 || t > maxDNSTimeout:
			v.add("dns.timeout", "%s is out of range (0, %s]", quote(d.Timeout), maxDNSTimeout)
		}
	}
}
