package config

import (
	"fmt"
	"net/netip"
	"strings"
	"time"

	"github.com/moat-dev/moat/gateway/policy"
	"github.com/moat-dev/moat/gateway/policy/canon"
)

// DefaultDenyRead are the credential stores the built-in default hides
// (DESIGN §2). The sandbox expands "~/" and the trailing "*".
var DefaultDenyRead = []string{
	"~/.ssh", "~/.aws", "~/.gnupg", "~/.config/gcloud", "~/.azure", "~/.kube",
	"~/.docker/config.json", "~/.netrc", "~/.git-credentials", "~/.config/gh",
	"~/.npmrc", "~/.pypirc", "~/.cargo/credentials*",
}

// DefaultDNSTimeout is dns.timeout's default.
const DefaultDNSTimeout = 5 * time.Second

// Default returns the built-in policy used when no settings file is found:
// network closed, writes to the current directory and a private TMPDIR,
// reads open except credential stores. Each call returns a fresh value.
func Default() *File {
	return &File{Filesystem: Filesystem{
		AllowWrite: []string{"."},
		DenyRead:   append([]string(nil), DefaultDenyRead...),
		PrivateTmp: true,
	}}
}

// DNSTimeout is the effective dns.timeout. Call it on a validated File.
func (f *File) DNSTimeout() time.Duration {
	if t, err := time.ParseDuration(f.DNS.Timeout); err == nil && t > 0 {
		return t
	}
	return DefaultDNSTimeout
}

// PolicySpec validates f and maps it to the policy core's input. localAddrs
// are this host's interface addresses (and the gateway's listener), which
// resolved addresses may never reach.
func (f *File) PolicySpec(localAddrs []netip.Addr) (policy.Spec, error) {
	if err := f.Validate(); err != nil {
		return policy.Spec{}, err
	}
	n := &f.Network
	s := policy.Spec{
		Allow:       clone(n.AllowedDomains),
		Deny:        clone(n.DeniedDomains),
		DenyReasons: make(map[string]string, len(n.DeniedDomainReasons)),
		Strict:      n.StrictAllowlist,
		InspectAll:  n.TLSTerminate != nil,
		LocalAddrs:  append([]netip.Addr(nil), localAddrs...),
	}
	for k, v := range n.DeniedDomainReasons {
		s.DenyReasons[k] = v
	}
	if n.AllowAllDomains {
		// srt's allow-all: the deny list and the resolved-address guard
		// still run first; the policy upgrades inspected hosts itself.
		s.Ask = func(policy.Request) policy.Verdict { return policy.Allow }
	}
	if t := n.TLSTerminate; t != nil {
		s.NoInspect = clone(t.ExcludeDomains)
	}
	// Hosts that need TLS terminated even without tlsTerminate: per-request
	// rules, git rules, and masked credentials (the swap happens inside).
	seen := map[string]bool{}
	inspect := func(h string) {
		if !seen[h] {
			seen[h] = true
			s.Inspect = append(s.Inspect, h)
		}
	}
	for _, r := range n.Rules {
		inspect(r.Host)
	}
	for _, g := range n.Git {
		inspect(g.Host)
	}
	masked := func(mode string, hosts []string) {
		if mode != ModeMask {
			return
		}
		if hosts == nil {
			hosts = n.AllowedDomains // injectHosts defaults to allowedDomains
		}
		for _, h := range hosts {
			inspect(h)
		}
	}
	for _, e := range f.Credentials.EnvVars {
		masked(e.Mode, e.InjectHosts)
	}
	for _, fl := range f.Credentials.Files {
		masked(fl.Mode, fl.InjectHosts)
	}
	var err error
	if s.DeniedAddrs, err = prefixList(n.DeniedResolvedAddresses); err != nil {
		return policy.Spec{}, err
	}
	if s.AllowedAddrs, err = prefixList(n.AllowedResolvedAddresses); err != nil {
		return policy.Spec{}, err
	}
	return s, nil
}

// Compile validates f and compiles it into a policy.
func (f *File) Compile(localAddrs []netip.Addr) (*policy.Policy, error) {
	s, err := f.PolicySpec(localAddrs)
	if err != nil {
		return nil, err
	}
	p, err := policy.New(s)
	if err != nil {
		return nil, fmt.Errorf("compile policy: %w", err)
	}
	return p, nil
}

func prefixList(ss []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, s := range ss {
		p, err := parsePrefix(s)
		if err != nil {
			return nil, err // unreachable after Validate
		}
		out = append(out, p)
	}
	return out, nil
}

func clone(ss []string) []string { return append([]string(nil), ss...) }

// Summary is a short human description of what f allows, for
// `moat policy validate`.
func (f *File) Summary() string {
	var b strings.Builder
	line := func(k, v string) { fmt.Fprintf(&b, "%-13s %s\n", k+":", v) }
	list := func(ss []string, none string) string {
		if len(ss) == 0 {
			return none
		}
		return strings.Join(ss, ", ")
	}
	// Patterns as the policy matches them: "GitHub.com." is github.com.
	canonical := func(ss []string, deny bool) []string {
		out := make([]string, 0, len(ss))
		for _, s := range ss {
			if p, err := canon.ParsePattern(s, deny); err == nil {
				s = p.String()
			}
			out = append(out, s)
		}
		return out
	}
	n := &f.Network
	switch {
	case n.AllowAllDomains:
		line("network", "every host not denied")
	case len(n.AllowedDomains) == 0:
		line("network", "closed (no allowed domains)")
	default:
		mode := "other hosts denied"
		if n.StrictAllowlist {
			mode = "strict"
		}
		line("allowed", fmt.Sprintf("%s (%s)", list(canonical(n.AllowedDomains, false), ""), mode))
	}
	if len(n.DeniedDomains) > 0 {
		line("denied", list(canonical(n.DeniedDomains, true), ""))
	}
	if n.HTTPProxyPort != nil || n.SOCKSProxyPort != nil {
		line("proxy", "moat decides, then chains through the HTTP proxy on localhost")
	}
	if t := n.TLSTerminate; t != nil {
		v := "terminated for every allowed host"
		if len(t.ExcludeDomains) > 0 {
			v += " except " + list(canonical(t.ExcludeDomains, false), "")
		}
		line("tls", v)
	} else {
		line("tls", "not terminated, except for hosts with rules or masked credentials")
	}
	if len(n.Rules)+len(n.Git)+len(n.Budgets) > 0 {
		line("rules", fmt.Sprintf("%d request, %d git, %d budget", len(n.Rules), len(n.Git), len(n.Budgets)))
	}
	fs := &f.Filesystem
	if fs.Disabled {
		line("filesystem", "writable everywhere, no filesystem rules (filesystem.disabled); moat's own settings and CA key stay protected")
	} else {
		w := clone(fs.AllowWrite)
		if fs.PrivateTmp {
			w = append(w, "private TMPDIR")
		}
		line("writable", list(w, "nothing"))
		if len(fs.DenyWrite) > 0 {
			line("write-denied", list(fs.DenyWrite, ""))
		}
		line("read-denied", list(fs.DenyRead, "nothing (reads open)"))
	}
	if c := len(f.Credentials.EnvVars) + len(f.Credentials.Files); c > 0 {
		line("credentials", fmt.Sprintf("%d env vars, %d files", len(f.Credentials.EnvVars), len(f.Credentials.Files)))
	}
	return strings.TrimRight(b.String(), "\n")
}
