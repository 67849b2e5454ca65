package resolver

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
)

// LocalAddrs returns every address of this host's interfaces, unmapped and
// without zones, for policy.Spec.LocalAddrs: a destination that resolves to
// the gateway's own host is reaching services that trust local callers.
func LocalAddrs() ([]netip.Addr, error) {
	ifas, err := net.InterfaceAddrs()
	if err != nil {
		return nil, fmt.Errorf("resolver: list interface addresses: %w", err)
	}
	var out []netip.Addr
	for _, ifa := range ifas {
		var ip net.IP
		switch v := ifa.(type) {
		case *net.IPNet:
			ip = v.IP
		case *net.IPAddr:
			ip = v.IP
		default:
			continue
		}
		a, ok := netip.AddrFromSlice(ip)
		if !ok {
			continue
		}
		a = a.Unmap().WithZone("")
		if !slices.Contains(out, a) {
			out = append(out, a)
		}
	}
	return out, nil
}
