package resolver

import (
	"bufio"
	"bytes"
	"fmt"
	"net/netip"
	"strings"
)

// defaultResolvConf is read when Options.Servers is empty.
const defaultResolvConf = "/etc/resolv.conf"

// dnsPort is the port of a server given without one (RFC 1035 §4.2).
const dnsPort = 53

// parseResolvConf returns the "nameserver" entries of resolv.conf(5) text as
// ip:53 addresses, in file order. Everything else (search, options, domain)
// is ignored: names reaching the resolver are already fully qualified, and
// timeouts come from Options.
func parseResolvConf(data []byte) []netip.AddrPort {
	var out []netip.AddrPort
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := sc.Text()
		if i := strings.IndexAny(line, "#;"); i >= 0 {
			line = line[:i]
		}
		f := strings.Fields(line)
		if len(f) < 2 || f[0] != "nameserver" {
			continue
		}
		// A link-local server needs its zone to be reachable, so keep it.
		a, err := netip.ParseAddr(f[1])
		if err != nil {
			continue
		}
		ap := netip.AddrPortFrom(a.Unmap(), dnsPort)
		if !containsAddrPort(out, ap) {
			out = append(out, ap)
		}
	}
	return out
}

func containsAddrPort(as []netip.AddrPort, a netip.AddrPort) bool {
	for _, b := range as {
		if a == b {
			return true
		}
	}
	return false
}

// parseServer accepts "ip:port", "[v6]:port" or a bare IP (port 53).
func parseServer(s string) (netip.AddrPort, error) {
	if ap, err := netip.ParseAddrPort(s); err == nil {
		if ap.Port() == 0 {
			return netip.AddrPort{}, fmt.Errorf("%w: %q: port 0", ErrBadServer, s)
		}
		return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()), nil
	}
	if a, err := netip.ParseAddr(strings.TrimSuffix(strings.TrimPrefix(s, "["), "]")); err == nil {
		return netip.AddrPortFrom(a.Unmap(), dnsPort), nil
	}
	return netip.AddrPort{}, fmt.Errorf("%w: %q: want ip:port", ErrBadServer, s)
}
