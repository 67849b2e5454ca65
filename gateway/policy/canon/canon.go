// Package canon turns every spelling of a host name or IP address into one
// canonical form, and parses the host patterns of allow and deny lists.
//
// It knows nothing of moat: it is pure string and address handling, so that
// every other package can compare hosts by simple equality.
package canon

import (
	"net/netip"
	"strings"
)

// Host is a canonical destination host. Exactly one form is set: Addr is
// valid for an IP literal (IPv4-mapped IPv6 unmapped to IPv4), otherwise Name
// holds a lower-case ASCII (punycode) name without a trailing dot.
type Host struct {
	Name string
	Addr netip.Addr
}

// IsIP reports whether h is an IP literal.
func (h Host) IsIP() bool { return h.Addr.IsValid() }

// String returns the canonical text: the name, or the IP without brackets.
func (h Host) String() string {
	if h.Addr.IsValid() {
		return h.Addr.String()
	}
	return h.Name
}

// PatternKind says what a Pattern matches.
type PatternKind uint8

const (
	// Exact matches one host (a name or an IP literal).
	Exact PatternKind = iota
	// Suffix matches strict subdomains of Pattern.Name ("*.example.com"
	// matches "a.example.com", never "example.com" and never an IP).
	Suffix
	// Any matches every host ("*"); only deny lists accept it.
	Any
)

// Pattern is a parsed allow- or deny-list entry.
type Pattern struct {
	Kind PatternKind
	// Host is the canonical host for Exact; for Suffix, Host.Name is the
	// parent domain without the "*." prefix.
	Host Host
	// Port is the port the pattern is limited to; 0 means every port.
	Port uint16
}

// OddIPv4Spelling reports whether raw, which parsed to p, spells an IPv4
// literal other than in dotted decimal ("127.1", "0x7f.1", "2130706433",
// "0177.0.0.1"). Other tools read those forms differently or as names, so
// a settings file must say which address it means.
func OddIPv4Spelling(raw string, p Pattern) bool {
	if p.Kind != Exact || !p.Host.Addr.Is4() {
		return false
	}
	h := strings.TrimSpace(raw)
	if i := strings.LastIndexByte(h, ':'); i >= 0 {
		h = h[:i]
	}
	return strings.TrimSuffix(h, ".") != p.Host.Addr.String()
}
