package resolver

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"github.com/moat-dev/moat/gateway/policy"
)

// ErrNotFound is matched (with errors.Is) by every *NotFoundError: the name
// does not exist (NXDOMAIN) or has no A or AAAA record.
var ErrNotFound = errors.New("resolver: no such host")

// ErrServerFailure wraps the per-server errors when no DNS server gave a
// usable answer (timeouts, SERVFAIL, REFUSED, malformed replies).
var ErrServerFailure = errors.New("resolver: every DNS server failed")

// ErrNoServers is returned by New when neither Options.Servers nor the
// resolv.conf file names a DNS server.
var ErrNoServers = errors.New("resolver: no DNS servers configured")

// ErrBadServer is returned by New for a server that is not "ip:port" (or a
// bare IP, which means port 53).
var ErrBadServer = errors.New("resolver: bad DNS server address")

// ErrBadOptions is returned by New for inconsistent options, such as a
// MinTTL above MaxTTL.
var ErrBadOptions = errors.New("resolver: bad options")

// ErrInvalidName is returned by Lookup for a name that cannot be a DNS name
// (empty, too long, or with empty labels).
var ErrInvalidName = errors.New("resolver: invalid host name")

// ErrNoPolicy is returned by the Dialer when it has no policy: a missing
// security hook denies, it does not mean "no check".
var ErrNoPolicy = errors.New("resolver: dialer has no policy")

// ErrNoResolver is returned by the Dialer when a name must be resolved but
// Dialer.Resolver is nil.
var ErrNoResolver = errors.New("resolver: dialer has no resolver")

// ErrDenied is returned by the Dialer for a decision that does not allow the
// connection; the Dialer re-checks rather than trusting its caller.
var ErrDenied = errors.New("resolver: decision does not allow the connection")

// ErrBadDestination is returned by the Dialer for a decision without a host
// or with port 0.
var ErrBadDestination = errors.New("resolver: decision has no valid destination")

// NotFoundError reports that Name does not exist (NXDOMAIN) or has no
// address records. It matches ErrNotFound with errors.Is.
type NotFoundError struct {
	Name string
}

func (e *NotFoundError) Error() string {
	return "resolve " + e.Name + ": no such host"
}

// Is makes errors.Is(err, ErrNotFound) true for every NotFoundError.
func (e *NotFoundError) Is(target error) bool { return target == ErrNotFound }

// maxListedAddrs bounds how many refused addresses AddrDeniedError.Error
// names, so that a name with hundreds of records cannot flood a log line.
const maxListedAddrs = 4

// AddrDeniedError reports that every address Host resolved to was refused by
// policy.CheckAddr. Verdicts holds the verdict of each address, in resolver
// order. The gateway maps it to 403 blocked-by-resolved-address.
type AddrDeniedError struct {
	Host     string
	Verdicts []policy.AddrVerdict
}

func (e *AddrDeniedError) Error() string {
	var b strings.Builder
	b.WriteString("destination resolved to a denied address")
	n := 0
	for _, v := range e.Verdicts {
		if v.Allowed {
			continue
		}
		if n == maxListedAddrs {
			fmt.Fprintf(&b, " and %d more", countDenied(e.Verdicts)-n)
			break
		}
		if n == 0 {
			b.WriteString(": ")
		} else {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s (%s)", v.Addr.Addr(), v.Reason)
		n++
	}
	return b.String()
}

func countDenied(vs []policy.AddrVerdict) int {
	n := 0
	for _, v := range vs {
		if !v.Allowed {
			n++
		}
	}
	return n
}

// DialError reports that no connection to any permitted address of Host
// succeeded. Addrs are the addresses attempted and Errs the error of each
// attempt (or of the context, when it ended first). The gateway maps it to 502.
type DialError struct {
	Host  string
	Addrs []netip.AddrPort
	Errs  []error
}

func (e *DialError) Error() string {
	var b strings.Builder
	b.WriteString("dial ")
	b.WriteString(e.Host)
	if len(e.Addrs) > 0 {
		b.WriteString(" (")
		for i, a := range e.Addrs {
			if i == maxListedAddrs {
				fmt.Fprintf(&b, " and %d more", len(e.Addrs)-i)
				break
			}
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(a.String())
		}
		b.WriteString(")")
	}
	// One line, not errors.Join's newlines: this goes into log lines.
	for i, err := range e.Errs {
		if i == 0 {
			b.WriteString(": ")
		} else {
			b.WriteString("; ")
		}
		b.WriteString(err.Error())
	}
	return b.String()
}

// Unwrap gives errors.Is and errors.As access to every attempt's error.
func (e *DialError) Unwrap() []error { return e.Errs }
