// Package policy decides whether a connection or request may proceed.
// It does no I/O: no sockets, files, clocks or logging. Every input is a value.
//
// A Policy is compiled once from a Spec into indexed lookups (a map for exact
// hosts, a suffix map for wildcards), so Decide never re-parses patterns.
package policy

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"sort"
	"strconv"
	"strings"

	"github.com/moat-dev/moat/gateway/policy/canon"
)

// entry is one compiled pattern.
type entry struct {
	port uint16 // 0: every port
	rule string // e.g. "deny:*.evil.test"
	raw  string // the pattern as written (deniedDomainReasons key)
	msg  string // custom deny text
	lit  bool   // the pattern is an IP literal
	lo   bool   // the pattern is localhost or *.localhost
}

// index is a set of patterns with O(labels) lookup.
type index struct {
	exact  map[string][]entry // canonical host → entries
	suffix map[string][]entry // parent domain of "*.parent" → entries
	any    []entry            // "*" and "*:PORT"
}

func (ix *index) add(p canon.Pattern, e entry) {
	switch p.Kind {
	case canon.Exact:
		if ix.exact == nil {
			ix.exact = make(map[string][]entry)
		}
		k := p.Host.String()
		ix.exact[k] = append(ix.exact[k], e)
	case canon.Suffix:
		if ix.suffix == nil {
			ix.suffix = make(map[string][]entry)
		}
		ix.suffix[p.Host.Name] = append(ix.suffix[p.Host.Name], e)
	case canon.Any:
		ix.any = append(ix.any, e)
	}
}

func pick(es []entry, port uint16) (entry, bool) {
	for _, e := range es {
		if e.port == 0 || e.port == port {
			return e, true
		}
	}
	return entry{}, false
}

// lookup finds an entry matching host h on port: exact first, then the
// nearest wildcard parent, then "*". host is the canonical string form.
func (ix *index) lookup(h canon.Host, port uint16) (entry, bool) {
	host := h.String()
	if es, ok := ix.exact[host]; ok {
		if e, ok := pick(es, port); ok {
			return e, true
		}
	}
	// Wildcards never match IP literals.
	if !h.IsIP() && len(ix.suffix) > 0 {
		for i := strings.IndexByte(host, '.'); i >= 0; {
			parent := host[i+1:]
			if es, ok := ix.suffix[parent]; ok {
				if e, ok := pick(es, port); ok {
					return e, true
				}
			}
			j := strings.IndexByte(parent, '.')
			if j < 0 {
				break
			}
			i += j + 1
		}
	}
	return pick(ix.any, port)
}

// Policy is a compiled Spec. The zero value and a nil *Policy deny
// everything.
type Policy struct {
	allow, deny       index
	inspect, noInspct index
	inspectAll        bool
	strict            bool
	ask               AskFunc
	deniedAddrs       []netip.Prefix
	allowedAddrs      []netip.Prefix
	local             map[netip.Addr]struct{}
	hash              string
}

// PatternError reports one invalid pattern of a Spec list.
type PatternError struct {
	List  string // "allow", "deny", "inspect" or "noInspect"
	Index int
	Entry string
	Err   error
}

func (e *PatternError) Error() string {
	return fmt.Sprintf("%s[%d] %q: %v", e.List, e.Index, e.Entry, e.Err)
}

func (e *PatternError) Unwrap() error { return e.Err }

// New compiles s. It returns every invalid pattern as a *PatternError,
// joined.
func New(s Spec) (*Policy, error) {
	p := &Policy{
		inspectAll:   s.InspectAll,
		strict:       s.Strict,
		ask:          s.Ask,
		deniedAddrs:  canonPrefixes(s.DeniedAddrs),
		allowedAddrs: canonPrefixes(s.AllowedAddrs),
		local:        make(map[netip.Addr]struct{}, len(s.LocalAddrs)),
	}
	for _, a := range s.LocalAddrs {
		p.local[a.Unmap().WithZone("")] = struct{}{}
	}
	var errs []error
	add := func(list string, pats []string, deny bool, ix *index) {
		for i, raw := range pats {
			pat, err := canon.ParsePattern(raw, deny)
			if err != nil {
				errs = append(errs, &PatternError{List: list, Index: i, Entry: raw, Err: err})
				continue
			}
			e := entry{port: pat.Port, rule: list + ":" + pat.String(), raw: raw}
			e.lit = pat.Kind == canon.Exact && pat.Host.IsIP()
			e.lo = pat.Host.Name == "localhost"
			if deny {
				e.msg = s.DenyReasons[raw]
			}
			ix.add(pat, e)
		}
	}
	add("deny", s.Deny, true, &p.deny)
	add("allow", s.Allow, false, &p.allow)
	add("inspect", s.Inspect, false, &p.inspect)
	add("noInspect", s.NoInspect, false, &p.noInspct)
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	p.hash = specHash(s)
	return p, nil
}

func canonPrefixes(ps []netip.Prefix) []netip.Prefix {
	out := make([]netip.Prefix, 0, len(ps))
	for _, pf := range ps {
		a := pf.Addr()
		bits := pf.Bits()
		if a.Is4In6() {
			a = a.Unmap()
			bits -= 96
			if bits < 0 {
				bits = 0
			}
		}
		out = append(out, netip.PrefixFrom(a.WithZone(""), bits).Masked())
	}
	return out
}

// specHash is a short stable digest of the compiled inputs, for the audit
// "policy" field. The ask hook contributes only its presence.
func specHash(s Spec) string {
	h := sha256.New()
	w := func(tag string, xs []string) {
		fmt.Fprintf(h, "%s%d\x00%s\x00", tag, len(xs), strings.Join(xs, "\x00"))
	}
	w("allow", s.Allow)
	w("deny", s.Deny)
	w("inspect", s.Inspect)
	w("noinspect", s.NoInspect)
	keys := make([]string, 0, len(s.DenyReasons))
	for k, v := range s.DenyReasons {
		keys = append(keys, k+"="+v)
	}
	sort.Strings(keys)
	w("reasons", keys)
	var pf []string
	for _, p := range s.DeniedAddrs {
		pf = append(pf, p.String())
	}
	w("daddr", pf)
	pf = pf[:0]
	for _, p := range s.AllowedAddrs {
		pf = append(pf, p.String())
	}
	w("aaddr", pf)
	fmt.Fprintf(h, "strict=%t inspectAll=%t ask=%t", s.Strict, s.InspectAll, s.Ask != nil)
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// Hash identifies the compiled policy in audit lines.
func (p *Policy) Hash() string {
	if p == nil {
		return "none"
	}
	return p.hash
}

// Decide judges r: validate and canonicalise the host, then deny list, allow
// list, strict mode and the ask hook, in that order. It is total: every
// path returns a Decision, and a nil *Policy denies.
func (p *Policy) Decide(r Request) Decision {
	h, err := canon.ParseHost(r.Host)
	if err != nil {
		return Decision{Reason: ReasonMalformedHost}
	}
	d := Decision{Host: h, Port: r.Port}
	if r.Port == 0 {
		d.Reason = ReasonBadPort
		return d
	}
	if p == nil {
		d.Reason = ReasonNotAllowed
		return d
	}
	if e, ok := p.deny.lookup(h, r.Port); ok {
		d.Reason, d.Rule, d.Message = ReasonDenyList, e.rule, e.msg
		return d
	}
	if e, ok := p.allow.lookup(h, r.Port); ok {
		d.Verdict, d.Reason, d.Rule = Allow, ReasonAllowList, e.rule
		d.Literal, d.LoopbackOnly = e.lit, e.lo
		if p.inspects(h, r.Port) {
			d.Verdict = Inspect
		}
		return d
	}
	if p.strict {
		d.Reason = ReasonStrict
		return d
	}
	d.Reason = ReasonNotAllowed
	if p.ask != nil {
		switch v := p.ask(r); v {
		case Allow, Inspect:
			d.Verdict, d.Reason, d.Rule = v, ReasonAsk, "ask"
			if v == Allow && p.inspects(h, r.Port) {
				d.Verdict = Inspect
			}
		}
	}
	return d
}

func (p *Policy) inspects(h canon.Host, port uint16) bool {
	if _, ok := p.inspect.lookup(h, port); ok {
		return true
	}
	if !p.inspectAll {
		return false
	}
	_, excluded := p.noInspct.lookup(h, port)
	return !excluded
}

// addrClass is one row of the default address table.
type addrClass struct {
	prefix netip.Prefix
	reason Reason
}

// defaultDenied is checked in order: specific rows (metadata, broadcast)
// come before the ranges that contain them.
var defaultDenied = func() []addrClass {
	rows := []struct {
		p string
		r Reason
	}{
		{"169.254.169.254/32", ReasonMetadata},
		{"100.100.100.200/32", ReasonMetadata},
		{"fd00:ec2::254/128", ReasonMetadata},
		{"255.255.255.255/32", ReasonBroadcast},
		{"0.0.0.0/8", ReasonThisNetwork},
		{"127.0.0.0/8", ReasonLoopback},
		{"169.254.0.0/16", ReasonLinkLocal},
		{"224.0.0.0/4", ReasonMulticast},
		{"240.0.0.0/4", ReasonReserved},
		{"10.0.0.0/8", ReasonPrivate},
		{"172.16.0.0/12", ReasonPrivate},
		{"192.168.0.0/16", ReasonPrivate},
		{"100.64.0.0/10", ReasonCGNAT},
		{"::/128", ReasonUnspecified},
		{"::1/128", ReasonLoopback},
		{"fe80::/10", ReasonLinkLocal},
		{"ff00::/8", ReasonMulticast},
		{"fc00::/7", ReasonULA},
		{"::/96", ReasonReserved}, // deprecated IPv4-compatible addresses
	}
	out := make([]addrClass, len(rows))
	for i, r := range rows {
		out[i] = addrClass{netip.MustParsePrefix(r.p), r.r}
	}
	return out
}()

var (
	nat64      = netip.MustParsePrefix("64:ff9b::/96")
	nat64Local = netip.MustParsePrefix("64:ff9b:1::/48")
	sixToFour  = netip.MustParsePrefix("2002::/16")
	teredo     = netip.MustParsePrefix("2001::/32")
)

// embeddedV4 extracts the IPv4 address that NAT64, 6to4 and Teredo carry,
// so that 64:ff9b::7f00:1 is judged as 127.0.0.1.
func embeddedV4(a netip.Addr) (netip.Addr, netip.Prefix, bool) {
	if !a.Is6() {
		return netip.Addr{}, netip.Prefix{}, false
	}
	b := a.As16()
	switch {
	case nat64.Contains(a):
		return netip.AddrFrom4([4]byte{b[12], b[13], b[14], b[15]}), nat64, true
	case nat64Local.Contains(a):
		return netip.AddrFrom4([4]byte{b[12], b[13], b[14], b[15]}), nat64Local, true
	case sixToFour.Contains(a):
		return netip.AddrFrom4([4]byte{b[2], b[3], b[4], b[5]}), sixToFour, true
	case teredo.Contains(a):
		// RFC 4380 §4: the client address is stored inverted.
		return netip.AddrFrom4([4]byte{^b[12], ^b[13], ^b[14], ^b[15]}), teredo, true
	}
	return netip.Addr{}, netip.Prefix{}, false
}

// CheckAddr judges one resolved address for decision d. Only an allowed
// decision can pass; d.Literal lets an explicitly allowed IP literal through
// as given, and d.LoopbackOnly confines localhost entries to loopback.
func (p *Policy) CheckAddr(d Decision, a netip.AddrPort) AddrVerdict {
	ip := a.Addr().Unmap().WithZone("")
	v := AddrVerdict{Addr: netip.AddrPortFrom(ip, a.Port())}
	if p == nil || d.Verdict == Deny || !ip.IsValid() {
		v.Reason = ReasonNotAllowed
		return v
	}
	if d.Literal && d.Host.IsIP() && d.Host.Addr == ip {
		v.Allowed, v.Reason = true, ReasonLiteral
		v.Prefix = netip.PrefixFrom(ip, ip.BitLen())
		return v
	}
	if d.LoopbackOnly {
		v.Reason = ReasonNotLoopback
		if ip.IsLoopback() {
			v.Allowed, v.Reason = true, ReasonLoopback
		}
		return v
	}
	v.Reason, v.Prefix = p.classify(ip)
	v.Allowed = v.Reason == ReasonPublic || v.Reason == ReasonAllowedRange
	return v
}

// classify returns the class of ip: configured denials, this host's own
// addresses, configured carve-outs, then the default table.
func (p *Policy) classify(ip netip.Addr) (Reason, netip.Prefix) {
	for _, pf := range p.deniedAddrs {
		if pf.Contains(ip) {
			return ReasonDeniedRange, pf
		}
	}
	if _, ok := p.local[ip]; ok {
		return ReasonLocalInterface, netip.PrefixFrom(ip, ip.BitLen())
	}
	for _, pf := range p.allowedAddrs {
		if pf.Contains(ip) {
			return ReasonAllowedRange, pf
		}
	}
	for _, c := range defaultDenied {
		if c.prefix.Contains(ip) {
			return c.reason, c.prefix
		}
	}
	if v4, pf, ok := embeddedV4(ip); ok {
		if r, _ := p.classify(v4); r != ReasonPublic && r != ReasonAllowedRange {
			return ReasonEmbeddedV4, pf
		}
	}
	return ReasonPublic, netip.Prefix{}
}

// Describe renders a verdict for humans: "127.0.0.1:80 (loopback address)".
func (v AddrVerdict) Describe() string {
	return v.Addr.String() + " (" + v.Reason.String() + ")"
}

// Hint is the last line of a deny body: how a human or an agent can allow
// the request.
func (d Decision) Hint() string {
	switch d.Reason {
	case ReasonNotAllowed, ReasonStrict:
		h := d.Host.String()
		if d.Host.Addr.Is6() {
			h = "[" + h + "]"
		}
		return "to allow: add " + strconv.Quote(h) + " to network.allowedDomains"
	case ReasonDenyList:
		return "to allow: remove " + strconv.Quote(strings.TrimPrefix(d.Rule, "deny:")) + " from network.deniedDomains"
	case ReasonMalformedHost, ReasonBadPort:
		return "fix the destination: it is not a valid host and port"
	}
	return ""
}
