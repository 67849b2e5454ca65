package canon

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"unicode/utf8"

	"golang.org/x/net/idna"
)

const (
	maxName      = 253 // RFC 1035 §2.3.4, without the root label's dot
	maxLabel     = 63  // RFC 1035 §2.3.4
	maxBracketed = maxName + 2
	// maxInput bounds the work done on hostile input before IDNA: maxName+1
	// characters (a trailing dot) of at most 4 bytes each.
	maxInput = (maxName + 1) * utf8.UTFMax
)

// idnaProfile converts non-ASCII names the way WHATWG URL's "domain to
// ASCII" does (UTS #46 non-transitional, CheckBidi and CheckJoiners on,
// CheckHyphens and UseSTD3ASCIIRules off), so that moat sees the same
// name a browser or curl would resolve. STD3 rules are off because labels
// such as "_acme-challenge" are real; the ASCII result is re-checked against
// our own alphabet afterwards, which rejects whatever the mapping produced
// outside it (U+FF0F FULLWIDTH SOLIDUS maps to "/", for example).
var idnaProfile = idna.New(
	idna.MapForLookup(),
	idna.Transitional(false),
	idna.BidiRule(),
	idna.StrictDomainName(false),
	idna.CheckHyphens(false),
)

// class is what scan learnt about a host string.
type class uint8

const (
	hasUpper class = 1 << iota
	hasColon
	hasNonASCII
	hasBad // a byte outside the host alphabet; scan stops there
)

// scan classifies the bytes of s in one pass. When it finds a forbidden byte
// it returns hasBad and that byte's offset.
func scan(s string) (class, int) {
	var c class
	for i := 0; i < len(s); i++ {
		b := s[i]
		switch {
		case 'a' <= b && b <= 'z', '0' <= b && b <= '9', b == '.', b == '-', b == '_':
		case 'A' <= b && b <= 'Z':
			c |= hasUpper
		case b == ':':
			c |= hasColon
		case b >= utf8.RuneSelf:
			c |= hasNonASCII
		default:
			return c | hasBad, i
		}
	}
	return c, -1
}

// badChar explains why byte i of s is not allowed in a host.
func badChar(orig, s string, i int) error {
	b := s[i]
	var what string
	switch {
	case b == 0:
		what = "NUL byte"
	case b < 0x20 || b == 0x7f:
		what = fmt.Sprintf("control character %q", b)
	case b == ' ':
		what = "space"
	case b == '%':
		what = `"%" (percent-encoding and IPv6 zone ids are not allowed)`
	case b == '@':
		what = `"@" (a host has no userinfo)`
	case b == '/' || b == '\\':
		what = fmt.Sprintf("%q (a host has no path)", b)
	default:
		what = fmt.Sprintf("character %q", b)
	}
	return malformed(orig, fmt.Sprintf("%s at offset %d; a host is an IP address or letters, digits, '.', '-' and '_'", what, i))
}

// ParseHost validates a destination host and returns its canonical form.
//
// It accepts a name of ASCII letters, digits, '.', '-' and '_' (at most 253
// characters after one optional trailing dot, labels of 1–63), a name with
// non-ASCII characters (converted with IDNA UTS #46 to punycode), an IPv4
// address in any inet_aton spelling ("2130706433", "0x7f.1", "0177.0.0.1",
// "127.1"), or an IPv6 address with or without brackets. Names are
// lower-cased and lose one trailing dot; IPv4 becomes a dotted quad; IPv6 is
// compressed and "::ffff:a.b.c.d" becomes IPv4.
//
// A name whose last label is numeric must be a valid IPv4 address (as in the
// WHATWG URL standard): "1.2.3.4.5" and "10.0.0.256" are malformed rather
// than names, because resolvers and libraries disagree on what they mean,
// and an IPv4 that is out of range is never wrapped around. Every error wraps
// ErrMalformedHost.
//
// ParseHost is idempotent: ParseHost(h.String()) returns h for every h it
// returns. An input that is already canonical is returned without copying.
func ParseHost(s string) (Host, error) {
	switch {
	case s == "":
		return Host{}, malformed(s, "empty")
	case len(s) > maxInput:
		return Host{}, malformed(s, fmt.Sprintf("%d bytes long, longer than any host", len(s)))
	case s[0] == '[':
		return parseBracketed(s)
	}
	c, i := scan(s)
	switch {
	case c&hasBad != 0:
		return Host{}, badChar(s, s, i)
	case c&hasNonASCII != 0:
		return parseIDN(s, c)
	case c&hasColon != 0:
		return parseIPv6(s, s)
	}
	return parseName(s, c&hasUpper != 0, s)
}

// parseBracketed handles "[v6]", the URL spelling of an IPv6 host.
func parseBracketed(s string) (Host, error) {
	if len(s) > maxBracketed {
		return Host{}, malformed(s, fmt.Sprintf("%d characters long, more than %d", len(s), maxBracketed))
	}
	if end := strings.IndexByte(s, ']'); end < 0 {
		return Host{}, malformed(s, `missing the closing "]"`)
	} else if end != len(s)-1 {
		return Host{}, malformed(s, fmt.Sprintf(`unexpected %q after "]" (a host has no port here)`, clip(s[end+1:])))
	}
	inner := s[1 : len(s)-1]
	c, i := scan(inner)
	switch {
	case c&hasBad != 0:
		return Host{}, badChar(s, s, i+1)
	case c&hasNonASCII != 0 || c&hasColon == 0:
		return Host{}, malformed(s, "brackets are only for IPv6 addresses")
	}
	return parseIPv6(inner, s)
}

// parseIPv6 parses an IPv6 literal (s contains a colon) for input orig.
func parseIPv6(s, orig string) (Host, error) {
	a, err := netip.ParseAddr(s)
	if err != nil || !a.Is6() || a.Zone() != "" {
		if strings.Count(s, ":") == 1 {
			return Host{}, malformed(orig, `":" is only allowed in IPv6 addresses (a host has no port here)`)
		}
		return Host{}, malformed(orig, "not a valid IPv6 address")
	}
	// ::ffff:a.b.c.d reaches the same IPv4 host; one spelling per host.
	return Host{Addr: a.Unmap()}, nil
}

// parseIDN converts a name with non-ASCII characters to punycode and parses
// the result as an ASCII name.
func parseIDN(s string, c class) (Host, error) {
	switch {
	case c&hasColon != 0:
		return Host{}, malformed(s, `":" is not allowed in a name`)
	case !utf8.ValidString(s):
		return Host{}, malformed(s, "not valid UTF-8")
	case utf8.RuneCountInString(s) > maxName+1:
		return Host{}, malformed(s, fmt.Sprintf("longer than %d characters", maxName))
	}
	a, err := idnaProfile.ToASCII(s)
	if err != nil {
		return Host{}, malformed(s, "not a valid internationalised name (IDNA)")
	}
	c, i := scan(a)
	switch {
	case c&hasBad != 0:
		return Host{}, malformed(s, fmt.Sprintf("IDNA maps it to the forbidden character %q", a[i]))
	case c&(hasColon|hasNonASCII) != 0:
		return Host{}, malformed(s, "IDNA maps it to something that is not a name")
	}
	return parseName(a, c&hasUpper != 0, s)
}

// parseName canonicalises s, which holds only [A-Za-z0-9._-], for input orig.
func parseName(s string, upper bool, orig string) (Host, error) {
	if upper {
		s = strings.ToLower(s)
	}
	// s can be empty when IDNA maps every rune away ("\u200b").
	if len(s) > 0 && s[len(s)-1] == '.' {
		s = s[:len(s)-1]
	}
	if s == "" {
		return Host{}, malformed(orig, "no labels")
	}
	if len(s) > maxName {
		return Host{}, malformed(orig, fmt.Sprintf("%d characters long, more than %d", len(s), maxName))
	}
	start := 0
	for i := 0; i <= len(s); i++ {
		if i < len(s) && s[i] != '.' {
			continue
		}
		switch n := i - start; {
		case n == 0:
			return Host{}, malformed(orig, "empty label")
		case n > maxLabel:
			return Host{}, malformed(orig, fmt.Sprintf("label of %d characters, more than %d", n, maxLabel))
		}
		if i < len(s) {
			start = i + 1
		}
	}
	if !numeric(s[start:]) {
		return Host{Name: s}, nil
	}
	a, problem := parseIPv4(s)
	if problem != "" {
		return Host{}, malformed(orig, problem)
	}
	return Host{Addr: a}, nil
}

// numeric reports whether label l reads as an IPv4 number: decimal digits,
// or "0x" followed by zero or more hex digits (WHATWG URL "ends in a
// number"). l is lower case.
func numeric(l string) bool {
	if len(l) >= 2 && l[0] == '0' && l[1] == 'x' {
		for i := 2; i < len(l); i++ {
			if !isHex(l[i]) {
				return false
			}
		}
		return true
	}
	for i := 0; i < len(l); i++ {
		if l[i] < '0' || l[i] > '9' {
			return false
		}
	}
	return true
}

func isHex(b byte) bool {
	return '0' <= b && b <= '9' || 'a' <= b && b <= 'f'
}

// parseIPv4 parses s (lower case, labels non-empty) the way inet_aton and
// the WHATWG URL standard do: one to four parts, each decimal, octal
// (leading 0) or hex (leading 0x); the last part fills the remaining bytes.
// It returns a problem description instead of an error so that the caller
// can name the original input.
func parseIPv4(s string) (netip.Addr, string) {
	var parts [4]uint64
	n := 0
	for rest := s; ; {
		p, tail, more := strings.Cut(rest, ".")
		if n == len(parts) {
			return netip.Addr{}, "its last label is a number, so it must be an IPv4 address, but it has more than 4 parts"
		}
		v, ok := parseIPv4Number(p)
		if !ok {
			return netip.Addr{}, fmt.Sprintf("its last label is a number, so it must be an IPv4 address, but %q is not a number", p)
		}
		parts[n] = v
		n++
		if !more {
			break
		}
		rest = tail
	}
	var v uint64
	for i := 0; i < n-1; i++ {
		if parts[i] > 0xff {
			return netip.Addr{}, "IPv4 address out of range"
		}
		v |= parts[i] << (8 * (3 - i))
	}
	// The last part fills the bytes the others left: 4 with one part, 1 with
	// four. An out-of-range value is an error, never wrapped around.
	if parts[n-1] >= 1<<(8*(5-n)) {
		return netip.Addr{}, "IPv4 address out of range"
	}
	v |= parts[n-1]
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}), ""
}

// parseIPv4Number parses one part of an IPv4 address. A value too large for
// an address saturates above 2^32 rather than overflowing, so that any
// number of digits is judged correctly.
func parseIPv4Number(p string) (uint64, bool) {
	base := uint64(10)
	switch {
	case len(p) >= 2 && p[0] == '0' && p[1] == 'x':
		base, p = 16, p[2:] // "0x" alone is 0, as in WHATWG URL
	case len(p) >= 2 && p[0] == '0':
		base, p = 8, p[1:]
	case p == "":
		return 0, false
	}
	const limit = 1 << 33
	var v uint64
	for i := 0; i < len(p); i++ {
		var d uint64
		switch b := p[i]; {
		case '0' <= b && b <= '9':
			d = uint64(b - '0')
		case 'a' <= b && b <= 'f':
			d = uint64(b-'a') + 10
		default:
			return 0, false
		}
		if d >= base {
			return 0, false
		}
		v = v*base + d
		if v > limit {
			v = limit
		}
	}
	return v, true
}

// SplitHostPort splits a CONNECT authority or "host:port" into its raw host
// (brackets removed, not canonicalised: pass it to ParseHost) and its port.
// An IPv6 host must be bracketed. The port must be 1–65535 in decimal with no
// leading zero. Errors about the host wrap ErrMalformedHost; errors about
// the port wrap ErrBadPort.
func SplitHostPort(s string) (host string, port uint16, err error) {
	var ps string
	if strings.HasPrefix(s, "[") {
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return "", 0, malformed(s, `missing the closing "]"`)
		}
		host, ps = s[1:end], s[end+1:]
		switch {
		case host == "":
			return "", 0, malformed(s, "empty host")
		case !strings.Contains(host, ":"):
			return "", 0, malformed(s, "brackets are only for IPv6 addresses")
		case ps == "":
			return "", 0, portError(s, portMissing)
		case ps[0] != ':':
			return "", 0, malformed(s, fmt.Sprintf(`unexpected %q after "]"`, clip(ps)))
		}
		ps = ps[1:]
	} else {
		i := strings.LastIndexByte(s, ':')
		if i < 0 {
			return "", 0, portError(s, portMissing)
		}
		host, ps = s[:i], s[i+1:]
		switch {
		case host == "":
			return "", 0, malformed(s, "empty host")
		case strings.Contains(host, ":"):
			return "", 0, malformed(s, `an IPv6 address with a port must be bracketed, as in "[::1]:443"`)
		case strings.ContainsAny(host, "[]"):
			return "", 0, malformed(s, "stray bracket")
		}
	}
	port, prob := parsePort(ps)
	if prob != portOK {
		return "", 0, portError(s, prob)
	}
	return host, port, nil
}

// portProblem says what is wrong with a port string.
type portProblem uint8

const (
	portOK portProblem = iota
	portMissing
	portNotNumber
	portZero
	portLeadingZero
	portTooBig
)

func (p portProblem) String() string {
	switch p {
	case portMissing:
		return "missing port"
	case portNotNumber:
		return "port is not a number 1–65535"
	case portZero:
		return "port 0 is not a port"
	case portLeadingZero:
		return "port has a leading zero"
	case portTooBig:
		return "port is above 65535"
	}
	return "ok"
}

func portError(s string, p portProblem) error {
	return fmt.Errorf("%w in %q: %s", ErrBadPort, clip(s), p)
}

// parsePort parses a decimal port 1–65535 with no sign and no leading zero:
// "0443" is refused because some parsers read it as octal.
func parsePort(s string) (uint16, portProblem) {
	if s == "" {
		return 0, portMissing
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, portNotNumber
		}
	}
	switch {
	case s == "0":
		return 0, portZero
	case s[0] == '0':
		return 0, portLeadingZero
	case len(s) > 5:
		return 0, portTooBig
	}
	v, _ := strconv.Atoi(s) // at most 5 digits: cannot fail
	if v > 65535 {
		return 0, portTooBig
	}
	return uint16(v), portOK
}

// ParsePort parses a port 1–65535 written in decimal with no leading zero.
// Errors wrap ErrBadPort.
func ParsePort(s string) (uint16, error) {
	p, prob := parsePort(s)
	if prob != portOK {
		return 0, portError(s, prob)
	}
	return p, nil
}

// HostPort joins a canonical host and a port, bracketing IPv6 ("[::1]:443").
func HostPort(h Host, port uint16) string {
	if h.Addr.IsValid() {
		return netip.AddrPortFrom(h.Addr, port).String()
	}
	return h.Name + ":" + strconv.Itoa(int(port))
}
