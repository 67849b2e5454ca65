package canon

import (
	"fmt"
	"strconv"
	"strings"
)

// String returns "exact", "suffix" or "any".
func (k PatternKind) String() string {
	switch k {
	case Exact:
		return "exact"
	case Suffix:
		return "suffix"
	case Any:
		return "any"
	}
	return "PatternKind(" + strconv.Itoa(int(k)) + ")"
}

// ParsePattern parses an allowedDomains or deniedDomains entry:
//
//	example.com          one host, every port
//	example.com:443      one host, one port
//	*.example.com        strict subdomains of example.com (not example.com itself)
//	localhost, *.localhost
//	[::1], [::1]:8080    IPv6, always bracketed
//	10.0.0.5, 10.0.0.5:80
//	*, *:443             every host; only when denyList is true
//
// A port is 1–65535 with no leading zero; no port means every port. A
// wildcard needs at least two labels after "*." ("*.co.uk" but not "*.com",
// which would cover a whole top-level domain); "*.localhost" is the one
// exception, since it can only ever reach loopback.
//
// Non-canonical spellings such as "Example.COM." are accepted; the returned
// Pattern's String is the canonical spelling, so a config validator can
// compare the two and print the fix. Every error is a *PatternError that
// wraps ErrBadPattern and explains what to write instead.
func ParsePattern(s string, denyList bool) (Pattern, error) {
	p, perr := parsePattern(s, denyList)
	if perr == nil {
		return p, nil
	}
	// parsePattern proposes a raw fix; offer it only if it is valid, and in
	// its canonical spelling.
	if perr.fixCandidate != "" {
		if fix, err := parsePattern(perr.fixCandidate, denyList); err == nil {
			perr.Fix = fix.String()
		}
	}
	return Pattern{}, perr.PatternError
}

const wildcardIP = "puts a wildcard over an IP address: wildcards match names only; list the address itself"

// patternError carries a raw fix candidate next to the public error.
type patternError struct {
	*PatternError
	fixCandidate string
}

func bad(s, problem string, fix string, cause error) *patternError {
	return &patternError{
		PatternError: &PatternError{Pattern: s, Problem: problem, Err: cause},
		fixCandidate: fix,
	}
}

func parsePattern(s string, denyList bool) (Pattern, *patternError) {
	if s == "" {
		return Pattern{}, bad(s, `is empty: give a host, such as "example.com"`, "", nil)
	}
	if t := strings.TrimSpace(s); t != s {
		return Pattern{}, bad(s, "has white space around it", t, nil)
	}
	if i := strings.Index(s, "://"); i >= 0 {
		rest := s[i+3:]
		if j := strings.IndexAny(rest, "/?#"); j >= 0 {
			rest = rest[:j]
		}
		if j := strings.LastIndexByte(rest, '@'); j >= 0 {
			rest = rest[j+1:]
		}
		return Pattern{}, bad(s, "has a URL scheme: an entry is a host with an optional port, not a URL; drop the scheme", rest, nil)
	}
	if i := strings.IndexAny(s, "/?#"); i >= 0 {
		return Pattern{}, bad(s, "has a path: an entry is a host with an optional port, not a URL", s[:i], nil)
	}

	if strings.HasPrefix(s, "*.[") {
		return Pattern{}, bad(s, wildcardIP, "", nil)
	}
	host, portStr, hasPort, perr := splitPattern(s)
	if perr != nil {
		return Pattern{}, perr
	}
	var port uint16
	if hasPort {
		var prob portProblem
		port, prob = parsePort(portStr)
		if prob != portOK {
			return Pattern{}, badPort(s, host, portStr, prob)
		}
	}
	if host == "" {
		msg := fmt.Sprintf("has no host before %q: give one, such as \"example.com:%s\"", ":"+portStr, portStr)
		if denyList {
			msg += fmt.Sprintf(`, or "*:%s" for every host`, portStr)
		}
		return Pattern{}, bad(s, msg, "", nil)
	}
	withPort := func(h string) string {
		if hasPort {
			return h + ":" + portStr
		}
		return h
	}

	switch {
	case host == "*":
		if !denyList {
			return Pattern{}, bad(s, `would allow every host, and an allow list cannot take "*": list the hosts to allow ("*" belongs in deniedDomains)`, "", nil)
		}
		return Pattern{Kind: Any, Port: port}, nil

	case strings.HasPrefix(host, "*."):
		parent := host[2:]
		if strings.Contains(parent, "*") {
			return Pattern{}, bad(s, `has more than one "*": a wildcard may only be the whole first label, as in "*.example.com"`, "", nil)
		}
		if parent == "" {
			return Pattern{}, bad(s, `has nothing after "*.": give a domain, as in "*.example.com"`, "", nil)
		}
		h, err := ParseHost(parent)
		if err != nil {
			return Pattern{}, bad(s, fmt.Sprintf("has a wildcard over an invalid domain: %v", err), "", err)
		}
		if h.IsIP() {
			return Pattern{}, bad(s, wildcardIP, "", nil)
		}
		// "*.com" would open a whole top-level domain. Two labels is srt's
		// rule; it cannot tell "*.co.uk" (fine) from "*.com", and neither
		// can we without a public-suffix list.
		if !strings.Contains(h.Name, ".") && h.Name != "localhost" {
			return Pattern{}, bad(s, `is too broad: a wildcard needs at least two labels after "*.", as in "*.example.com"`, "", nil)
		}
		return Pattern{Kind: Suffix, Host: h, Port: port}, nil

	case strings.HasPrefix(host, "*"):
		return Pattern{}, bad(s, `has "*" inside a label: a wildcard must be a whole label followed by ".", as in "*.example.com"`,
			withPort("*."+strings.TrimLeft(host, "*.")), nil)

	case strings.Contains(host, "*"):
		return Pattern{}, bad(s, `has "*" after the first label: a wildcard may only be the whole first label, as in "*.example.com"`, "", nil)
	}

	h, err := ParseHost(host)
	if err != nil {
		fix := ""
		if strings.HasPrefix(host, "[") {
			// "[10.0.0.5]": brackets are for IPv6 only.
			if inner, e := ParseHost(strings.Trim(host, "[]")); e == nil && !inner.Addr.Is6() {
				fix = withPort(inner.String())
			}
		}
		return Pattern{}, bad(s, fmt.Sprintf("is not a valid host: %v", err), fix, err)
	}
	return Pattern{Kind: Exact, Host: h, Port: port}, nil
}

// splitPattern splits s into host and port text. An IPv6 host keeps its
// brackets (ParseHost accepts them); unbracketed IPv6 is refused because
// "::1:443" could be an address or an address and a port.
func splitPattern(s string) (host, port string, hasPort bool, perr *patternError) {
	if strings.HasPrefix(s, "[") {
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return "", "", false, bad(s, `is missing the closing "]"`, s+"]", nil)
		}
		host, rest := s[:end+1], s[end+1:]
		switch {
		case rest == "":
			return host, "", false, nil
		case rest[0] == ':':
			return host, rest[1:], true, nil
		}
		return "", "", false, bad(s, fmt.Sprintf(`has unexpected text %q after "]"`, clip(rest)), "", nil)
	}
	switch strings.Count(s, ":") {
	case 0:
		return s, "", false, nil
	case 1:
		h, p, _ := strings.Cut(s, ":")
		return h, p, true, nil
	}
	if h, err := ParseHost(s); err == nil && h.IsIP() {
		return "", "", false, bad(s, `is an IPv6 address without brackets (with a port, write "[::1]:443")`, "["+s+"]", nil)
	}
	return "", "", false, bad(s, `has more than one ":": an IPv6 address must be bracketed, as in "[::1]" or "[::1]:443"`, "", nil)
}

// badPort explains a port problem in pattern s.
func badPort(s, host, port string, prob portProblem) *patternError {
	switch prob {
	case portMissing:
		return bad(s, `has an empty port: drop the ":" to match every port, or give a port 1–65535`, host, ErrBadPort)
	case portZero:
		return bad(s, `has port 0: drop ":0" to match every port, or give a port 1–65535`, host, ErrBadPort)
	case portLeadingZero:
		return bad(s, "has a port with a leading zero", host+":"+strings.TrimLeft(port, "0"), ErrBadPort)
	case portTooBig:
		return bad(s, fmt.Sprintf("has port %q, above the highest port 65535", clip(port)), "", ErrBadPort)
	}
	return bad(s, fmt.Sprintf("has port %q, which is not a number 1–65535", clip(port)), "", ErrBadPort)
}

// String returns the canonical spelling of p: "example.com",
// "*.example.com:443", "[::1]:8080", "10.0.0.5", "*". ParsePattern of the
// result returns p again.
func (p Pattern) String() string {
	var h string
	switch p.Kind {
	case Any:
		h = "*"
	case Suffix:
		h = "*." + p.Host.Name
	case Exact:
		h = p.Host.String()
		if p.Host.Addr.Is6() {
			h = "[" + h + "]"
		}
	default:
		return p.Kind.String()
	}
	if p.Port != 0 {
		h += ":" + strconv.Itoa(int(p.Port))
	}
	return h
}

// Match reports whether p covers host h on port. It is the reference
// semantics; the policy package compiles patterns into indexes that must
// agree with it. The zero Pattern and unknown kinds match nothing.
func (p Pattern) Match(h Host, port uint16) bool {
	if p.Port != 0 && p.Port != port {
		return false
	}
	switch p.Kind {
	case Any:
		return true
	case Exact:
		return h == p.Host && (h.Name != "" || h.Addr.IsValid())
	case Suffix:
		parent, n := p.Host.Name, h.Name
		// Strict subdomains only, and on a label boundary: "*.example.com"
		// matches "a.example.com", not "example.com" or "badexample.com".
		return !h.IsIP() && parent != "" &&
			len(n) > len(parent)+1 &&
			strings.HasSuffix(n, parent) && n[len(n)-len(parent)-1] == '.'
	}
	return false
}
