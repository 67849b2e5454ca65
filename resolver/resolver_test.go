package resolver

import (
	"context"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/miekg/dns"

	"github.com/moat-dev/moat/resolver/dnstest"
)

var (
	pub4  = netip.MustParseAddr("198.18.0.1")
	pub4b = netip.MustParseAddr("198.18.0.2")
	pub6  = netip.MustParseAddr("2001:db8::1")
	pub6b = netip.MustParseAddr("2001:db8::2")
)

// addrCmp compares netip values by their String form.
var addrCmp = cmp.Comparer(func(a, b netip.Addr) bool { return a == b })

// newTestResolver returns a Resolver asking servers, with no hosts file
// unless o names one, and a short per-query timeout.
func newTestResolver(t testing.TB, o Options, servers ...*dnstest.Server) *Resolver {
	t.Helper()
	for _, s := range servers {
		o.Servers = append(o.Servers, s.Addr)
	}
	if o.HostsFile == "" {
		o.HostsFile = "-"
	}
	if o.Timeout == 0 {
		o.Timeout = 500 * time.Millisecond
	}
	r, err := New(o)
	if err != nil {
		t.Fatalf("New(%+v): %v", o, err)
	}
	return r
}

func lookup(t *testing.T, r *Resolver, name string) []netip.Addr {
	t.Helper()
	got, err := r.Lookup(context.Background(), name)
	if err != nil {
		t.Fatalf("Lookup(%q): %v", name, err)
	}
	return got
}

// eventually polls cond a bounded number of times; it reports whether cond
// became true. It asserts an outcome, never a duration.
func eventually(cond func() bool) bool {
	for range 300 {
		if cond() {
			return true
		}
		time.Sleep(10 * time.Millisecond)
	}
	return cond()
}

func TestLookupAAndAAAA(t *testing.T) {
	srv := dnstest.New(t)
	srv.Set("example.test", []netip.Addr{pub4, pub6, pub4b}, time.Hour)
	srv.Set("v4only.test", []netip.Addr{pub4}, time.Hour)
	srv.Set("v6only.test", []netip.Addr{pub6}, time.Hour)
	r := newTestResolver(t, Options{}, srv)

	tests := []struct {
		name string
		want []netip.Addr
	}{
		{"example.test", []netip.Addr{pub6, pub4, pub4b}}, // AAAA first, then A
		{"v4only.test", []netip.Addr{pub4}},
		{"v6only.test", []netip.Addr{pub6}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := lookup(t, r, tc.name)
			if diff := cmp.Diff(tc.want, got, addrCmp); diff != "" {
				t.Errorf("Lookup(%q) mismatch (-want +got):\n%s", tc.name, diff)
			}
			for _, qt := range []uint16{dns.TypeA, dns.TypeAAAA} {
				if n := srv.Count(tc.name, qt); n != 1 {
					t.Errorf("server saw %d %s queries for %q, want 1", n, dns.TypeToString[qt], tc.name)
				}
			}
		})
	}
}

func TestLookupCacheHit(t *testing.T) {
	srv := dnstest.New(t)
	srv.Set("example.test", []netip.Addr{pub4, pub6}, time.Hour)
	r := newTestResolver(t, Options{}, srv)

	first := lookup(t, r, "example.test")
	// Change the answer: a cached lookup must not see it.
	srv.Set("example.test", []netip.Addr{pub4b}, time.Hour)
	for i := range 5 {
		got := lookup(t, r, "example.test")
		if diff := cmp.Diff(first, got, addrCmp); diff != "" {
			t.Fatalf("lookup %d not served from cache (-first +got):\n%s", i, diff)
		}
	}
	if n := srv.Count("example.test", 0); n != 2 {
		t.Errorf("server saw %d queries, want 2 (one A, one AAAA)", n)
	}

	// The caller owns the returned slice: scribbling on it must not
	// corrupt the cache.
	got := lookup(t, r, "example.test")
	got[0] = netip.MustParseAddr("127.0.0.1")
	if again := lookup(t, r, "example.test"); again[0] != first[0] {
		t.Errorf("cache corrupted through returned slice: got %v, want %v", again[0], first[0])
	}
}

func TestLookupTTLExpiry(t *testing.T) {
	tests := []struct {
		name string
		ttl  time.Duration // record TTL from the server
		o    Options
	}{
		{"record TTL 0 raised to MinTTL", 0, Options{MinTTL: 30 * time.Millisecond}},
		{"long TTL clamped to MaxTTL", time.Hour, Options{MaxTTL: 30 * time.Millisecond}},
		{"TTL 0 not cached", 0, Options{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv := dnstest.New(t)
			srv.Set("example.test", []netip.Addr{pub4}, tc.ttl)
			r := newTestResolver(t, tc.o, srv)
			lookup(t, r, "example.test")
			srv.Set("example.test", []netip.Addr{pub4b}, tc.ttl)
			ok := eventually(func() bool {
				got := lookup(t, r, "example.test")
				return len(got) == 1 && got[0] == pub4b
			})
			if !ok {
				t.Fatalf("Lookup never re-queried: server saw %d A queries", srv.Count("example.test", dns.TypeA))
			}
		})
	}
}

func TestLookupNotFound(t *testing.T) {
	srv := dnstest.New(t)
	srv.Set("nodata.test", nil, time.Hour) // exists, no address
	tests := []struct {
		name    string
		host    string
		negTTL  time.Duration
		queries int // after two lookups
	}{
		{"NXDOMAIN cached", "missing.test", 0, 2},
		{"NODATA cached", "nodata.test", 0, 2},
		{"NXDOMAIN negative cache off", "missing.test", -1, 4},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := newTestResolver(t, Options{NegativeTTL: tc.negTTL}, srv)
			before := srv.Count(tc.host, 0)
			for range 2 {
				_, err := r.Lookup(context.Background(), tc.host)
				var nf *NotFoundError
				if !errors.As(err, &nf) {
					t.Fatalf("Lookup(%q) error = %v, want *NotFoundError", tc.host, err)
				}
				if nf.Name != tc.host {
					t.Errorf("NotFoundError.Name = %q, want %q", nf.Name, tc.host)
				}
				if !errors.Is(err, ErrNotFound) {
					t.Errorf("errors.Is(%v, ErrNotFound) = false", err)
				}
			}
			if n := srv.Count(tc.host, 0) - before; n != tc.queries {
				t.Errorf("server saw %d queries, want %d", n, tc.queries)
			}
		})
	}
}

func TestLookupFailover(t *testing.T) {
	tests := []struct {
		name string
		bad  dnstest.Answer
	}{
		{"timeout", dnstest.Answer{Drop: true}},
		{"SERVFAIL", dnstest.Answer{Rcode: dns.RcodeServerFailure}},
		{"REFUSED", dnstest.Answer{Rcode: dns.RcodeRefused}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			bad := dnstest.New(t)
			bad.Handle(func(dnstest.Query) (dnstest.Answer, bool) { return tc.bad, true })
			good := dnstest.New(t)
			good.Set("example.test", []netip.Addr{pub4}, time.Hour)
			r := newTestResolver(t, Options{Timeout: 100 * time.Millisecond}, bad, good)

			got := lookup(t, r, "example.test")
			if diff := cmp.Diff([]netip.Addr{pub4}, got, addrCmp); diff != "" {
				t.Errorf("Lookup mismatch (-want +got):\n%s", diff)
			}
			if n := bad.Count("example.test", 0); n != 2 {
				t.Errorf("first server saw %d queries, want 2 (it is tried first)", n)
			}
			if n := good.Count("example.test", 0); n != 2 {
				t.Errorf("second server saw %d queries, want 2", n)
			}
		})
	}
}

func TestLookupAllServersFail(t *testing.T) {
	var servers []*dnstest.Server
	for range 2 {
		s := dnstest.New(t)
		s.Handle(func(q dnstest.Query) (dnstest.Answer, bool) {
			if q.Type == dns.TypeA {
				return dnstest.Answer{Drop: true}, true
			}
			return dnstest.Answer{Rcode: dns.RcodeServerFailure}, true
		})
		servers = append(servers, s)
	}
	r := newTestResolver(t, Options{Timeout: 50 * time.Millisecond}, servers...)
	_, err := r.Lookup(context.Background(), "example.test")
	if !errors.Is(err, ErrServerFailure) {
		t.Fatalf("Lookup error = %v, want ErrServerFailure", err)
	}
	if errors.Is(err, ErrNotFound) {
		t.Errorf("Lookup error %v claims not found; a failure says nothing about the name", err)
	}
	for i, s := range servers {
		if n := s.Count("example.test", 0); n != 2 {
			t.Errorf("server %d saw %d queries, want 2", i, n)
		}
	}
}

func TestLookupPartialAnswer(t *testing.T) {
	// AAAA fails everywhere, A answers: the A records are returned but
	// not cached, so the next lookup asks again.
	srv := dnstest.New(t)
	srv.Set("example.test", []netip.Addr{pub4}, time.Hour)
	srv.Handle(func(q dnstest.Query) (dnstest.Answer, bool) {
		if q.Type == dns.TypeAAAA {
			return dnstest.Answer{Rcode: dns.RcodeServerFailure}, true
		}
		return dnstest.Answer{}, false
	})
	r := newTestResolver(t, Options{}, srv)
	for range 2 {
		got := lookup(t, r, "example.test")
		if diff := cmp.Diff([]netip.Addr{pub4}, got, addrCmp); diff != "" {
			t.Errorf("Lookup mismatch (-want +got):\n%s", diff)
		}
	}
	if n := srv.Count("example.test", dns.TypeA); n != 2 {
		t.Errorf("server saw %d A queries, want 2 (partial answers are not cached)", n)
	}
}

func TestLookupTruncationFallsBackToTCP(t *testing.T) {
	srv := dnstest.New(t)
	srv.SetAnswer("big.test", dnstest.Answer{Addrs: []netip.Addr{pub4, pub6}, TTL: time.Hour, Truncate: true})
	r := newTestResolver(t, Options{}, srv)

	got := lookup(t, r, "big.test")
	if diff := cmp.Diff([]netip.Addr{pub6, pub4}, got, addrCmp); diff != "" {
		t.Errorf("Lookup mismatch (-want +got):\n%s", diff)
	}
	if udp, tcp := srv.CountNet("udp"), srv.CountNet("tcp"); udp != 2 || tcp != 2 {
		t.Errorf("server saw %d UDP and %d TCP queries, want 2 and 2", udp, tcp)
	}
}

func TestLookupHonoursContext(t *testing.T) {
	srv := dnstest.New(t)
	srv.Handle(func(dnstest.Query) (dnstest.Answer, bool) { return dnstest.Answer{Drop: true}, true })
	r := newTestResolver(t, Options{Timeout: 10 * time.Second}, srv)

	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		// Cancel once the query is on the wire.
		eventually(func() bool { return srv.Count("example.test", 0) > 0 })
		cancel()
	}()
	_, err := r.Lookup(ctx, "example.test")
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Lookup error = %v, want context.Canceled", err)
	}
}

func TestLookupSharesInflightQuery(t *testing.T) {
	srv := dnstest.New(t)
	srv.Set("example.test", []netip.Addr{pub4}, time.Hour)
	r := newTestResolver(t, Options{}, srv)

	var wg sync.WaitGroup
	errs := make(chan error, 20)
	for range 20 {
		wg.Go(func() {
			if _, err := r.Lookup(context.Background(), "example.test"); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("Lookup: %v", err)
	}
	for _, qt := range []uint16{dns.TypeA, dns.TypeAAAA} {
		if n := srv.Count("example.test", qt); n != 1 {
			t.Errorf("server saw %d %s queries from 20 concurrent lookups, want 1", n, dns.TypeToString[qt])
		}
	}
}

func TestLookupCacheEviction(t *testing.T) {
	srv := dnstest.New(t)
	for _, n := range []string{"a.test", "b.test", "c.test"} {
		srv.Set(n, []netip.Addr{pub4}, time.Hour)
	}
	r := newTestResolver(t, Options{CacheSize: 2}, srv)
	for _, n := range []string{"a.test", "b.test", "c.test", "a.test", "c.test"} {
		lookup(t, r, n)
	}
	// a.test was the oldest when c.test arrived, so it was asked again;
	// c.test stayed cached.
	want := map[string]int{"a.test": 2, "b.test": 1, "c.test": 1}
	for n, w := range want {
		if got := srv.Count(n, dns.TypeA); got != w {
			t.Errorf("server saw %d A queries for %s, want %d", got, n, w)
		}
	}
	if n := r.cache.len(); n > 2 {
		t.Errorf("cache holds %d entries, want at most 2", n)
	}
}

func TestLookupWithoutDNS(t *testing.T) {
	srv := dnstest.New(t)
	r := newTestResolver(t, Options{}, srv)
	tests := []struct {
		name string
		want []netip.Addr
	}{
		{"127.0.0.1", []netip.Addr{netip.MustParseAddr("127.0.0.1")}},
		{"2001:db8::1", []netip.Addr{pub6}},
		{"::ffff:10.0.0.1", []netip.Addr{netip.MustParseAddr("10.0.0.1")}},
		{"localhost", []netip.Addr{netip.MustParseAddr("127.0.0.1"), netip.IPv6Loopback()}},
		{"api.localhost", []netip.Addr{netip.MustParseAddr("127.0.0.1"), netip.IPv6Loopback()}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := lookup(t, r, tc.name)
			if diff := cmp.Diff(tc.want, got, addrCmp); diff != "" {
				t.Errorf("Lookup(%q) mismatch (-want +got):\n%s", tc.name, diff)
			}
		})
	}
	if q := srv.Queries(); len(q) != 0 {
		t.Errorf("server saw queries %v, want none", q)
	}
}

func TestLookupInvalidName(t *testing.T) {
	r := newTestResolver(t, Options{}, dnstest.New(t))
	for _, name := range []string{"", ".", "a..b", ".a", "a.", string(make([]byte, 254))} {
		if _, err := r.Lookup(context.Background(), name); !errors.Is(err, ErrInvalidName) {
			t.Errorf("Lookup(%q) error = %v, want ErrInvalidName", name, err)
		}
	}
}

func writeFile(t *testing.T, path, text string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestLookupHostsFile(t *testing.T) {
	srv := dnstest.New(t)
	srv.Set("example.test", []netip.Addr{pub4}, 0)
	srv.Set("other.test", []netip.Addr{pub4}, 0)
	hosts := filepath.Join(t.TempDir(), "hosts")
	writeFile(t, hosts, "# test hosts\n198.18.0.99 Example.Test. alias.test\n2001:db8::99 example.test\n")
	r := newTestResolver(t, Options{HostsFile: hosts}, srv)
	r.hosts.every = 0 // stat on every lookup, so the test need not wait

	h1, h1v6 := netip.MustParseAddr("198.18.0.99"), netip.MustParseAddr("2001:db8::99")
	tests := []struct {
		name string
		want []netip.Addr
	}{
		{"example.test", []netip.Addr{h1, h1v6}}, // file order, both families
		{"alias.test", []netip.Addr{h1}},
		{"other.test", []netip.Addr{pub4}}, // not in the file: DNS
	}
	for _, tc := range tests {
		got := lookup(t, r, tc.name)
		if diff := cmp.Diff(tc.want, got, addrCmp); diff != "" {
			t.Errorf("Lookup(%q) mismatch (-want +got):\n%s", tc.name, diff)
		}
	}
	if n := srv.Count("example.test", 0); n != 0 {
		t.Errorf("server saw %d queries for a hosts-file name, want 0", n)
	}

	// Same size, new content: the mtime tells.
	writeFile(t, hosts, "198.18.0.98 example.test\n2001:db8::99 example.test\n")
	future := time.Now().Add(time.Hour)
	if err := os.Chtimes(hosts, future, future); err != nil {
		t.Fatal(err)
	}
	if got := lookup(t, r, "example.test"); got[0] != netip.MustParseAddr("198.18.0.98") {
		t.Errorf("after rewrite Lookup = %v, want 198.18.0.98 first", got)
	}

	// Removed from the file: DNS answers again.
	writeFile(t, hosts, "198.18.0.99 alias.test\n")
	if got := lookup(t, r, "example.test"); len(got) != 1 || got[0] != pub4 {
		t.Errorf("after removal Lookup = %v, want [%v] from DNS", got, pub4)
	}
}

func TestHostsFileStatInterval(t *testing.T) {
	hosts := filepath.Join(t.TempDir(), "hosts")
	writeFile(t, hosts, "198.18.0.99 example.test\n")
	h, err := newHostsFile(hosts)
	if err != nil {
		t.Fatal(err)
	}
	h.every = time.Hour
	writeFile(t, hosts, "198.18.0.98 example.test other.test\n")
	if got := h.lookup("other.test"); got != nil {
		t.Errorf("lookup within the stat interval re-read the file: got %v", got)
	}
	h.mu.Lock()
	h.lastCheck = time.Time{}
	h.mu.Unlock()
	if got := h.lookup("other.test"); len(got) != 1 {
		t.Errorf("lookup after the interval = %v, want the new entry", got)
	}
}

func TestNew(t *testing.T) {
	dir := t.TempDir()
	conf := filepath.Join(dir, "resolv.conf")
	writeFile(t, conf, "search corp.example\nnameserver 192.0.2.53\nnameserver ::1 # local\noptions ndots:5\n")
	empty := filepath.Join(dir, "empty.conf")
	writeFile(t, empty, "search corp.example\n")

	tests := []struct {
		name    string
		o       Options
		want    []netip.AddrPort
		wantErr error
	}{
		{"servers", Options{Servers: []string{"127.0.0.1:5353", "[::1]:53", "192.0.2.1"}}, []netip.AddrPort{
			netip.MustParseAddrPort("127.0.0.1:5353"), netip.MustParseAddrPort("[::1]:53"), netip.MustParseAddrPort("192.0.2.1:53"),
		}, nil},
		{"resolv.conf", Options{ResolvConf: conf}, []netip.AddrPort{
			netip.MustParseAddrPort("192.0.2.53:53"), netip.MustParseAddrPort("[::1]:53"),
		}, nil},
		{"resolv.conf without nameserver", Options{ResolvConf: empty}, nil, ErrNoServers},
		{"resolv.conf missing", Options{ResolvConf: filepath.Join(dir, "nope")}, nil, os.ErrNotExist},
		{"bad server", Options{Servers: []string{"dns.example:53"}}, nil, ErrBadServer},
		{"port 0", Options{Servers: []string{"127.0.0.1:0"}}, nil, ErrBadServer},
		{"MinTTL above MaxTTL", Options{Servers: []string{"127.0.0.1:53"}, MinTTL: time.Hour, MaxTTL: time.Minute}, nil, ErrBadOptions},
		{"explicit hosts file missing", Options{Servers: []string{"127.0.0.1:53"}, HostsFile: filepath.Join(dir, "nope")}, nil, os.ErrNotExist},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.o.HostsFile == "" {
				tc.o.HostsFile = "-"
			}
			r, err := New(tc.o)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("New(%+v) error = %v, want %v", tc.o, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("New(%+v): %v", tc.o, err)
			}
			if diff := cmp.Diff(tc.want, r.Servers(), cmp.Comparer(func(a, b netip.AddrPort) bool { return a == b })); diff != "" {
				t.Errorf("Servers() mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestExtractAddrs(t *testing.T) {
	rr := func(s string) dns.RR {
		r, err := dns.NewRR(s)
		if err != nil {
			t.Fatalf("NewRR(%q): %v", s, err)
		}
		return r
	}
	tests := []struct {
		name    string
		answer  []string
		qtype   uint16
		want    []netip.Addr
		wantTTL uint32
	}{
		{"plain", []string{"example.test. 60 IN A 198.18.0.1"}, dns.TypeA, []netip.Addr{pub4}, 60},
		{"CNAME chain, min TTL", []string{
			"example.test. 30 IN CNAME edge.cdn.test.",
			"edge.cdn.test. 300 IN CNAME node.cdn.test.",
			"node.cdn.test. 120 IN A 198.18.0.1",
		}, dns.TypeA, []netip.Addr{pub4}, 30},
		{"record for another name ignored", []string{
			"example.test. 60 IN A 198.18.0.1",
			"evil.test. 60 IN A 127.0.0.1",
		}, dns.TypeA, []netip.Addr{pub4}, 60},
		{"wrong type ignored", []string{"example.test. 60 IN AAAA 2001:db8::1"}, dns.TypeA, nil, 0},
		{"mapped AAAA unmapped", []string{"example.test. 60 IN AAAA ::ffff:127.0.0.1"}, dns.TypeAAAA,
			[]netip.Addr{netip.MustParseAddr("127.0.0.1")}, 60},
		{"CNAME loop", []string{
			"example.test. 60 IN CNAME b.test.",
			"b.test. 60 IN CNAME example.test.",
		}, dns.TypeA, nil, 0},
		{"case-insensitive owner", []string{"EXAMPLE.test. 60 IN A 198.18.0.1"}, dns.TypeA, []netip.Addr{pub4}, 60},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := new(dns.Msg)
			for _, s := range tc.answer {
				m.Answer = append(m.Answer, rr(s))
			}
			got, ttl := extractAddrs(m, "example.test.", tc.qtype)
			if diff := cmp.Diff(tc.want, got, addrCmp); diff != "" {
				t.Errorf("extractAddrs addrs mismatch (-want +got):\n%s", diff)
			}
			if ttl != tc.wantTTL {
				t.Errorf("extractAddrs ttl = %d, want %d", ttl, tc.wantTTL)
			}
		})
	}
}

func BenchmarkLookupCached(b *testing.B) {
	srv := dnstest.New(b)
	srv.Set("example.test", []netip.Addr{pub4, pub6}, time.Hour)
	r := newTestResolver(b, Options{}, srv)
	ctx := context.Background()
	if _, err := r.Lookup(ctx, "example.test"); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := r.Lookup(ctx, "example.test"); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
