package policy

import (
	"net/netip"

	"github.com/moat-dev/moat/gateway/policy/canon"
)

// Verdict is the outcome of a decision.
type Verdict uint8

const (
	Deny    Verdict = iota // the zero value: a forgotten assignment denies
	Allow                  // tunnel bytes untouched
	Inspect                // allow, but terminate TLS and apply per-request rules
)

// String is the audit spelling: deny, allow or inspect.
func (v Verdict) String() string {
	switch v {
	case Allow:
		return "allow"
	case Inspect:
		return "inspect"
	}
	return "deny"
}

// Proto is the protocol a request arrived on.
type Proto uint8

// The protocols, as audit lines name them.
const (
	ProtoHTTP    Proto = iota // plain-HTTP proxying (absolute-form requests)
	ProtoConnect              // an HTTP CONNECT tunnel
	ProtoSOCKS5               // a SOCKS5 CONNECT (RFC 1928)
	ProtoMITM                 // a request inside terminated TLS
)

// String is the audit spelling: http, connect, socks5 or mitm.
func (p Proto) String() string {
	switch p {
	case ProtoConnect:
		return "connect"
	case ProtoSOCKS5:
		return "socks5"
	case ProtoMITM:
		return "mitm"
	}
	return "http"
}

// Request is one connection attempt, as plain data.
type Request struct {
	Proto  Proto
	Host   string // as the client sent it; Decide canonicalises it
	Port   uint16
	Client string
}

// Decision is the answer to a Request. It feeds both the audit line and the
// response the client sees.
type Decision struct {
	Verdict Verdict
	Reason  Reason
	// Rule identifies the entry that matched, e.g. `deny:*.evil.test` or
	// `allow:example.com:443`; empty when no entry matched.
	Rule string
	// Message is a custom text (from deniedDomainReasons) that replaces the
	// reason's default text; usually empty.
	Message string
	// Host and Port are the canonical destination. Host is zero when the
	// request's host was malformed.
	Host canon.Host
	Port uint16
	// Literal is set when an IP literal was explicitly allowed: it is dialled
	// as given, without the resolved-address guard.
	Literal bool
	// LoopbackOnly is set when a localhost entry allowed the request: the
	// destination may resolve only to loopback.
	LoopbackOnly bool
}

// Text is the human text for the decision: Message if set, else the
// reason's text.
func (d Decision) Text() string {
	if d.Message != "" {
		return d.Message
	}
	return d.Reason.String()
}

// AddrVerdict judges one resolved address.
type AddrVerdict struct {
	Allowed bool
	Reason  Reason
	Addr    netip.AddrPort
	// Prefix is the address class or configured range that decided.
	Prefix netip.Prefix
}

// AskFunc lets an embedder decide a request that no list decided. It must
// return Deny, Allow or Inspect; the zero value denies.
type AskFunc func(Request) Verdict

// Spec is the plain-data input of New. The zero Spec denies everything.
type Spec struct {
	Allow       []string          // allowedDomains patterns
	Deny        []string          // deniedDomains patterns
	DenyReasons map[string]string // keyed by the exact Deny entry
	Strict      bool              // strictAllowlist: deny what no list matched
	Ask         AskFunc           // nil: deny what no list matched

	// Inspect lists host patterns whose allowed traffic is marked Inspect
	// (TLS terminated, per-request rules); InspectAll marks every allowed
	// host except those in NoInspect.
	Inspect    []string
	InspectAll bool
	NoInspect  []string

	DeniedAddrs  []netip.Prefix // deniedResolvedAddresses, on top of the defaults
	AllowedAddrs []netip.Prefix // allowedResolvedAddresses carve-outs
	// LocalAddrs are this host's own interface addresses (and the gateway's
	// listener); the caller gathers them, since policy does no I/O.
	LocalAddrs []netip.Addr
}
