package resolver

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseHosts(t *testing.T) {
	a := netip.MustParseAddr
	tests := []struct {
		name string
		in   string
		want hostsTable
	}{
		{"empty", "", hostsTable{}},
		{"comments and blanks", "# c\n\n   \n127.0.0.1 # localhost\n", hostsTable{}},
		{"aliases", "127.0.0.1\tlocalhost  loc\n", hostsTable{"localhost": {a("127.0.0.1")}, "loc": {a("127.0.0.1")}}},
		{"canonical names", "198.18.0.1 Example.TEST.\n", hostsTable{"example.test": {a("198.18.0.1")}}},
		{"file order, dedup", "198.18.0.1 x.test\n2001:db8::1 x.test\n198.18.0.1 x.test\n",
			hostsTable{"x.test": {a("198.18.0.1"), a("2001:db8::1")}}},
		{"mapped and zoned", "::ffff:10.0.0.1 m.test\nfe80::1%eth0 z.test\n",
			hostsTable{"m.test": {a("10.0.0.1")}, "z.test": {a("fe80::1")}}},
		{"bad address skipped", "300.1.1.1 bad.test\nexample.test 198.18.0.1\n198.18.0.1 good.test\n",
			hostsTable{"good.test": {a("198.18.0.1")}}},
		{"bad names skipped", "198.18.0.1 . .. a..b .x ok.test\n", hostsTable{"ok.test": {a("198.18.0.1")}}},
		{"CRLF", "198.18.0.1 w.test\r\n", hostsTable{"w.test": {a("198.18.0.1")}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := parseHosts([]byte(tc.in))
			if diff := cmp.Diff(tc.want, got, addrCmp); diff != "" {
				t.Errorf("parseHosts(%q) mismatch (-want +got):\n%s", tc.in, diff)
			}
		})
	}
}

func TestParseResolvConf(t *testing.T) {
	ap := netip.MustParseAddrPort
	tests := []struct {
		name string
		in   string
		want []netip.AddrPort
	}{
		{"empty", "", nil},
		{"typical", "# generated\nsearch a.test\nnameserver 127.0.0.53\noptions edns0 trust-ad\n", []netip.AddrPort{ap("127.0.0.53:53")}},
		{"order and dedup", "nameserver 192.0.2.1\nnameserver 2001:db8::53\nnameserver 192.0.2.1\n",
			[]netip.AddrPort{ap("192.0.2.1:53"), ap("[2001:db8::53]:53")}},
		{"comments", "nameserver 192.0.2.1 # primary\n; nameserver 192.0.2.2\n#nameserver 192.0.2.3\n", []netip.AddrPort{ap("192.0.2.1:53")}},
		{"link-local keeps zone", "nameserver fe80::1%eth0\n", []netip.AddrPort{ap("[fe80::1%eth0]:53")}},
		{"junk", "nameserver\nnameserver dns.test\nnameservers 192.0.2.9\n", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := parseResolvConf([]byte(tc.in))
			if diff := cmp.Diff(tc.want, got, cmp.Comparer(func(a, b netip.AddrPort) bool { return a == b })); diff != "" {
				t.Errorf("parseResolvConf(%q) mismatch (-want +got):\n%s", tc.in, diff)
			}
		})
	}
}

func FuzzParseHosts(f *testing.F) {
	for _, s := range []string{"127.0.0.1 localhost\n", "::1 a b c # x\n", "fe80::1%lo x.\r\n", "\x00 \xff"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for name, as := range parseHosts([]byte(s)) {
			if !validName(name) || name != strings.ToLower(name) {
				t.Errorf("non-canonical name %q", name)
			}
			for _, a := range as {
				if !a.IsValid() || a.Zone() != "" || a.Is4In6() {
					t.Errorf("name %q: non-canonical address %v", name, a)
				}
			}
		}
	})
}

func FuzzParseResolvConf(f *testing.F) {
	for _, s := range []string{"nameserver 127.0.0.53\n", "nameserver ::1\noptions x\n", "nameserver fe80::1%eth0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, ap := range parseResolvConf([]byte(s)) {
			if !ap.IsValid() || ap.Port() != dnsPort || ap.Addr().Is4In6() {
				t.Errorf("bad server %v", ap)
			}
		}
	})
}
