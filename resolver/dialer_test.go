package resolver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/miekg/dns"

	"github.com/moat-dev/moat/gateway/policy"
	"github.com/moat-dev/moat/resolver/dnstest"
)

func mustPolicy(t testing.TB, s policy.Spec) *policy.Policy {
	t.Helper()
	p, err := policy.New(s)
	if err != nil {
		t.Fatalf("policy.New(%+v): %v", s, err)
	}
	return p
}

// allowedDecision asks p about host:port and insists on an allow, so that
// the tests exercise real decisions rather than hand-built ones.
func allowedDecision(t testing.TB, p *policy.Policy, host string, port uint16) policy.Decision {
	t.Helper()
	d := p.Decide(policy.Request{Proto: policy.ProtoConnect, Host: host, Port: port})
	if d.Verdict == policy.Deny {
		t.Fatalf("Decide(%s:%d) = deny (%s), want allow", host, port, d.Reason)
	}
	return d
}

// recordingDial records every address asked for. Loopback addresses are
// really dialled, so that a bug that reaches them shows up at a listener;
// any other address fails without leaving the host.
type recordingDial struct {
	mu    sync.Mutex
	addrs []string
}

func (r *recordingDial) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	r.mu.Lock()
	r.addrs = append(r.addrs, addr)
	r.mu.Unlock()
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return nil, fmt.Errorf("test dial: not ip:port: %q", addr)
	}
	if ap.Addr().IsLoopback() {
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	}
	return nil, errors.New("test dial: no route (never leaves loopback)")
}

func (r *recordingDial) got() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.addrs...)
}

// loopbackListener counts the connections it accepts.
type loopbackListener struct {
	net.Listener
	accepted atomic.Int32
}

func listenLoopback(t *testing.T, network, addr string) *loopbackListener {
	t.Helper()
	l, err := net.Listen(network, addr)
	if err != nil {
		t.Skipf("listen %s %s: %v", network, addr, err)
	}
	ll := &loopbackListener{Listener: l}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			ll.accepted.Add(1)
			c.Close()
		}
	}()
	return ll
}

func (l *loopbackListener) port() uint16 {
	return netip.MustParseAddrPort(l.Addr().String()).Port()
}

// TestDialRebinding is the attack the package exists for: the name passes
// the host rules, then DNS answers a loopback address. Neither a changed
// answer on a later lookup nor a mixed answer may reach 127.0.0.1.
func TestDialRebinding(t *testing.T) {
	ln := listenLoopback(t, "tcp", "127.0.0.1:0")
	srv := dnstest.New(t)
	var aQueries atomic.Int32
	srv.Handle(func(q dnstest.Query) (dnstest.Answer, bool) {
		switch {
		case q.Name == "mixed.test" && q.Type == dns.TypeA:
			return dnstest.Answer{Addrs: []netip.Addr{netip.MustParseAddr("198.18.0.7"), netip.MustParseAddr("127.0.0.1")}}, true
		case q.Type == dns.TypeA:
			// TTL 0: nothing cached, each lookup sees the next answer.
			if aQueries.Add(1) == 1 {
				return dnstest.Answer{Addrs: []netip.Addr{netip.MustParseAddr("198.18.0.7")}}, true
			}
			return dnstest.Answer{Addrs: []netip.Addr{netip.MustParseAddr("127.0.0.1")}}, true
		}
		return dnstest.Answer{}, true // NODATA for AAAA
	})
	r := newTestResolver(t, Options{}, srv)
	pol := mustPolicy(t, policy.Spec{Allow: []string{"example.test", "mixed.test"}})
	rec := &recordingDial{}
	d := &Dialer{Resolver: r, Policy: pol, Dial: rec.dial}
	port := ln.port()
	public := fmt.Sprintf("198.18.0.7:%d", port)

	// First lookup: the public address is dialled (and fails: no route).
	_, _, err := d.DialContext(context.Background(), allowedDecision(t, pol, "example.test", port))
	var de *DialError
	if !errors.As(err, &de) {
		t.Fatalf("first DialContext error = %v, want *DialError", err)
	}
	// Second lookup: rebound to loopback, refused before any dial.
	_, _, err = d.DialContext(context.Background(), allowedDecision(t, pol, "example.test", port))
	var ade *AddrDeniedError
	if !errors.As(err, &ade) {
		t.Fatalf("rebound DialContext error = %v, want *AddrDeniedError", err)
	}
	if want := "destination resolved to a denied address: 127.0.0.1 (loopback address)"; err.Error() != want {
		t.Errorf("rebound error text = %q, want %q", err.Error(), want)
	}
	// Mixed answer: only the public address is tried.
	_, _, err = d.DialContext(context.Background(), allowedDecision(t, pol, "mixed.test", port))
	if !errors.As(err, &de) {
		t.Fatalf("mixed DialContext error = %v, want *DialError", err)
	}
	if diff := cmp.Diff([]netip.AddrPort{netip.MustParseAddrPort(public)}, de.Addrs, cmp.Comparer(func(a, b netip.AddrPort) bool { return a == b })); diff != "" {
		t.Errorf("mixed DialError.Addrs mismatch (-want +got):\n%s", diff)
	}

	if diff := cmp.Diff([]string{public, public}, rec.got()); diff != "" {
		t.Errorf("dialled addresses mismatch (-want +got):\n%s", diff)
	}
	// A connection made would already sit in the accept queue; close the
	// listener after a short grace and count.
	time.Sleep(50 * time.Millisecond)
	ln.Close()
	if n := ln.accepted.Load(); n != 0 {
		t.Errorf("loopback listener accepted %d connections, want 0", n)
	}
}

func TestDialDeniedAddresses(t *testing.T) {
	srv := dnstest.New(t)
	srv.Set("inside.test", []netip.Addr{
		netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("::1"), netip.MustParseAddr("169.254.169.254"),
	}, time.Hour)
	r := newTestResolver(t, Options{}, srv)
	pol := mustPolicy(t, policy.Spec{Allow: []string{"inside.test"}})
	rec := &recordingDial{}
	d := &Dialer{Resolver: r, Policy: pol, Dial: rec.dial}

	_, _, err := d.DialContext(context.Background(), allowedDecision(t, pol, "inside.test", 80))
	var ade *AddrDeniedError
	if !errors.As(err, &ade) {
		t.Fatalf("DialContext error = %v, want *AddrDeniedError", err)
	}
	want := "destination resolved to a denied address: ::1 (loopback address), 127.0.0.1 (loopback address), 169.254.169.254 (cloud metadata address)"
	if err.Error() != want {
		t.Errorf("error text = %q, want %q", err.Error(), want)
	}
	if ade.Host != "inside.test" || len(ade.Verdicts) != 3 {
		t.Errorf("AddrDeniedError = %+v, want host inside.test and 3 verdicts", ade)
	}
	if got := rec.got(); len(got) != 0 {
		t.Errorf("dialled %v, want nothing", got)
	}
}

func TestAddrDeniedErrorBounded(t *testing.T) {
	var vs []policy.AddrVerdict
	for i := range 10 {
		vs = append(vs, policy.AddrVerdict{Reason: policy.ReasonPrivate, Addr: netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 0, 0, byte(i)}), 80)})
	}
	vs = append(vs, policy.AddrVerdict{Allowed: true, Reason: policy.ReasonPublic, Addr: netip.MustParseAddrPort("198.18.0.1:80")})
	got := (&AddrDeniedError{Host: "x.test", Verdicts: vs}).Error()
	want := "destination resolved to a denied address: 10.0.0.0 (private address (RFC 1918)), 10.0.0.1 (private address (RFC 1918)), " +
		"10.0.0.2 (private address (RFC 1918)), 10.0.0.3 (private address (RFC 1918)) and 6 more"
	if got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
}

func TestResolveVerdicts(t *testing.T) {
	srv := dnstest.New(t)
	srv.Set("example.test", []netip.Addr{
		netip.MustParseAddr("198.18.0.7"), netip.MustParseAddr("10.1.2.3"), netip.MustParseAddr("64:ff9b::7f00:1"),
	}, time.Hour)
	r := newTestResolver(t, Options{}, srv)
	pol := mustPolicy(t, policy.Spec{Allow: []string{"example.test"}})
	rec := &recordingDial{}
	d := &Dialer{Resolver: r, Policy: pol, Dial: rec.dial}

	got, err := d.Resolve(context.Background(), allowedDecision(t, pol, "example.test", 443))
	if err != nil {
		t.Fatalf("Resolve: %v", err)
	}
	type row struct {
		Addr    string
		Allowed bool
		Reason  policy.Reason
	}
	var rows []row
	for _, v := range got {
		rows = append(rows, row{v.Addr.String(), v.Allowed, v.Reason})
	}
	want := []row{
		{"[64:ff9b::7f00:1]:443", false, policy.ReasonEmbeddedV4},
		{"198.18.0.7:443", true, policy.ReasonPublic},
		{"10.1.2.3:443", false, policy.ReasonPrivate},
	}
	if diff := cmp.Diff(want, rows); diff != "" {
		t.Errorf("Resolve verdicts mismatch (-want +got):\n%s", diff)
	}
	if got := rec.got(); len(got) != 0 {
		t.Errorf("Resolve dialled %v, want nothing", got)
	}
}

func TestDialRefuses(t *testing.T) {
	srv := dnstest.New(t)
	srv.Set("example.test", []netip.Addr{netip.MustParseAddr("198.18.0.7")}, time.Hour)
	r := newTestResolver(t, Options{}, srv)
	pol := mustPolicy(t, policy.Spec{Allow: []string{"example.test"}})
	allowed := allowedDecision(t, pol, "example.test", 443)
	denied := pol.Decide(policy.Request{Proto: policy.ProtoConnect, Host: "other.test", Port: 443})
	noPort := allowed
	noPort.Port = 0

	tests := []struct {
		name    string
		d       Dialer
		dec     policy.Decision
		wantErr error
	}{
		{"nil policy", Dialer{Resolver: r}, allowed, ErrNoPolicy},
		{"deny decision", Dialer{Resolver: r, Policy: pol}, denied, ErrDenied},
		{"zero decision", Dialer{Resolver: r, Policy: pol}, policy.Decision{}, ErrDenied},
		{"unknown verdict", Dialer{Resolver: r, Policy: pol}, func() policy.Decision { d := allowed; d.Verdict = 9; return d }(), ErrDenied},
		{"port 0", Dialer{Resolver: r, Policy: pol}, noPort, ErrBadDestination},
		{"no resolver", Dialer{Policy: pol}, allowed, ErrNoResolver},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rec := &recordingDial{}
			tc.d.Dial = rec.dial
			_, _, err := tc.d.DialContext(context.Background(), tc.dec)
			if !errors.Is(err, tc.wantErr) {
				t.Errorf("DialContext error = %v, want %v", err, tc.wantErr)
			}
			if _, err := tc.d.Resolve(context.Background(), tc.dec); !errors.Is(err, tc.wantErr) {
				t.Errorf("Resolve error = %v, want %v", err, tc.wantErr)
			}
			if got := rec.got(); len(got) != 0 {
				t.Errorf("dialled %v, want nothing", got)
			}
		})
	}
	var nilDialer *Dialer
	if _, _, err := nilDialer.DialContext(context.Background(), allowed); !errors.Is(err, ErrNoPolicy) {
		t.Errorf("nil Dialer error = %v, want ErrNoPolicy", err)
	}
}

func TestDialResolveError(t *testing.T) {
	srv := dnstest.New(t)
	r := newTestResolver(t, Options{}, srv)
	pol := mustPolicy(t, policy.Spec{Allow: []string{"missing.test"}})
	rec := &recordingDial{}
	d := &Dialer{Resolver: r, Policy: pol, Dial: rec.dial}
	_, _, err := d.DialContext(context.Background(), allowedDecision(t, pol, "missing.test", 443))
	var nf *NotFoundError
	if !errors.As(err, &nf) || nf.Name != "missing.test" {
		t.Fatalf("DialContext error = %v, want *NotFoundError for missing.test", err)
	}
	var ade *AddrDeniedError
	if errors.As(err, &ade) {
		t.Errorf("DialContext error = %v is an AddrDeniedError; a resolve failure is not a deny", err)
	}
	if got := rec.got(); len(got) != 0 {
		t.Errorf("dialled %v, want nothing", got)
	}
}

// TestDialLoopbackAllowed dials real loopback listeners where policy allows
// it: an explicitly allowed literal, and a localhost entry.
func TestDialLoopbackAllowed(t *testing.T) {
	ln := listenLoopback(t, "tcp", "127.0.0.1:0")
	port := ln.port()
	r := newTestResolver(t, Options{}, dnstest.New(t))
	tests := []struct {
		name  string
		allow string
		host  string
	}{
		{"IP literal", "127.0.0.1", "127.0.0.1"},
		{"localhost", "localhost", "localhost"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pol := mustPolicy(t, policy.Spec{Allow: []string{tc.allow}})
			d := &Dialer{Resolver: r, Policy: pol}
			before := ln.accepted.Load()
			c, addr, err := d.DialContext(context.Background(), allowedDecision(t, pol, tc.host, port))
			if err != nil {
				t.Fatalf("DialContext: %v", err)
			}
			c.Close()
			if want := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), port); addr != want {
				t.Errorf("dialled %v, want %v", addr, want)
			}
			if !eventually(func() bool { return ln.accepted.Load() > before }) {
				t.Errorf("listener accepted nothing")
			}
		})
	}

	// Loopback reached through a name that is not a localhost entry stays
	// denied, as does a literal that was not explicitly allowed.
	pol := mustPolicy(t, policy.Spec{Allow: []string{"*.localhost"}, Ask: func(policy.Request) policy.Verdict { return policy.Allow }})
	d := &Dialer{Resolver: r, Policy: pol}
	_, _, err := d.DialContext(context.Background(), allowedDecision(t, pol, "127.0.0.1", port))
	var ade *AddrDeniedError
	if !errors.As(err, &ade) {
		t.Errorf("ask-allowed literal 127.0.0.1: error = %v, want *AddrDeniedError", err)
	}
}

// fakeConn is a net.Conn that records Close.
type fakeConn struct {
	net.Conn
	closed atomic.Bool
}

func (c *fakeConn) Close() error {
	c.closed.Store(true)
	return c.Conn.Close()
}

func newFakeConn(t *testing.T) *fakeConn {
	a, b := net.Pipe()
	t.Cleanup(func() { a.Close(); b.Close() })
	return &fakeConn{Conn: a}
}

func happyEyeballsSetup(t *testing.T, addrs ...netip.Addr) (*Dialer, policy.Decision) {
	t.Helper()
	srv := dnstest.New(t)
	srv.Set("example.test", addrs, time.Hour)
	r := newTestResolver(t, Options{}, srv)
	pol := mustPolicy(t, policy.Spec{Allow: []string{"example.test"}})
	return &Dialer{Resolver: r, Policy: pol, FallbackDelay: 10 * time.Millisecond}, allowedDecision(t, pol, "example.test", 443)
}

func TestDialHappyEyeballs(t *testing.T) {
	d, dec := happyEyeballsSetup(t, pub6, pub4)
	winner := newFakeConn(t)
	hungCancelled := make(chan struct{})
	d.Dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
		switch addr {
		case netip.AddrPortFrom(pub6, 443).String(): // first: hangs until cancelled
			<-ctx.Done()
			close(hungCancelled)
			return nil, ctx.Err()
		case netip.AddrPortFrom(pub4, 443).String():
			return winner, nil
		}
		return nil, fmt.Errorf("unexpected dial %s", addr)
	}
	c, addr, err := d.DialContext(context.Background(), dec)
	if err != nil {
		t.Fatalf("DialContext: %v", err)
	}
	if c != winner || addr != netip.AddrPortFrom(pub4, 443) {
		t.Errorf("DialContext = %v via %v, want the IPv4 connection", c, addr)
	}
	select {
	case <-hungCancelled:
	case <-time.After(10 * time.Second):
		t.Fatal("the hanging attempt was never cancelled")
	}
	if winner.closed.Load() {
		t.Error("the winning connection was closed")
	}
}

func TestDialClosesLosers(t *testing.T) {
	d, dec := happyEyeballsSetup(t, pub6, pub4)
	slow, fast := newFakeConn(t), newFakeConn(t)
	release := make(chan struct{})
	d.Dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
		if addr == netip.AddrPortFrom(pub6, 443).String() {
			<-release // connects, but after the other one won
			return slow, nil
		}
		return fast, nil
	}
	c, _, err := d.DialContext(context.Background(), dec)
	if err != nil {
		t.Fatalf("DialContext: %v", err)
	}
	if c != fast {
		t.Fatalf("DialContext returned %v, want the fast connection", c)
	}
	close(release)
	if !eventually(slow.closed.Load) {
		t.Error("the losing connection was never closed")
	}
	if fast.closed.Load() {
		t.Error("the winning connection was closed")
	}
}

func TestDialAttemptOrder(t *testing.T) {
	tests := []struct {
		name  string
		addrs []netip.Addr
		max   int
		want  []netip.Addr
	}{
		{"v6 first, interleaved", []netip.Addr{pub6, pub6b, pub4, pub4b}, 0, []netip.Addr{pub6, pub4, pub6b, pub4b}},
		{"bounded attempts", []netip.Addr{pub6, pub6b, pub4, pub4b}, 3, []netip.Addr{pub6, pub4, pub6b}},
		{"one family", []netip.Addr{pub4, pub4b}, 0, []netip.Addr{pub4, pub4b}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d, dec := happyEyeballsSetup(t, tc.addrs...)
			// Only failures start the next attempt, so the order is exact.
			d.FallbackDelay = time.Hour
			d.MaxAttempts = tc.max
			rec := &recordingDial{}
			d.Dial = rec.dial
			_, _, err := d.DialContext(context.Background(), dec)
			var de *DialError
			if !errors.As(err, &de) {
				t.Fatalf("DialContext error = %v, want *DialError", err)
			}
			var want []string
			for _, a := range tc.want {
				want = append(want, netip.AddrPortFrom(a, 443).String())
			}
			if diff := cmp.Diff(want, rec.got()); diff != "" {
				t.Errorf("attempt order mismatch (-want +got):\n%s", diff)
			}
			if len(de.Errs) != len(tc.want) {
				t.Errorf("DialError has %d errors, want %d: %v", len(de.Errs), len(tc.want), de)
			}
		})
	}
}

func TestDialContextCancelled(t *testing.T) {
	d, dec := happyEyeballsSetup(t, pub6, pub4)
	d.Dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { time.Sleep(30 * time.Millisecond); cancel() }()
	_, _, err := d.DialContext(ctx, dec)
	var de *DialError
	if !errors.As(err, &de) || !errors.Is(err, context.Canceled) {
		t.Fatalf("DialContext error = %v, want *DialError wrapping context.Canceled", err)
	}
}

func TestInterleave(t *testing.T) {
	ap := func(a netip.Addr) netip.AddrPort { return netip.AddrPortFrom(a, 1) }
	tests := []struct {
		name     string
		in, want []netip.Addr
	}{
		{"empty", nil, nil},
		{"v4 first", []netip.Addr{pub4, pub4b, pub6}, []netip.Addr{pub4, pub6, pub4b}},
		{"v6 first", []netip.Addr{pub6, pub4, pub6b, pub4b}, []netip.Addr{pub6, pub4, pub6b, pub4b}},
		{"uneven", []netip.Addr{pub6, pub6b, pub4}, []netip.Addr{pub6, pub4, pub6b}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var in, want []netip.AddrPort
			for _, a := range tc.in {
				in = append(in, ap(a))
			}
			for _, a := range tc.want {
				want = append(want, ap(a))
			}
			got := interleave(in)
			if diff := cmp.Diff(want, got, cmp.Comparer(func(a, b netip.AddrPort) bool { return a == b })); diff != "" {
				t.Errorf("interleave(%v) mismatch (-want +got):\n%s", tc.in, diff)
			}
		})
	}
}

func TestLocalAddrs(t *testing.T) {
	got, err := LocalAddrs()
	if err != nil {
		t.Fatalf("LocalAddrs: %v", err)
	}
	var loop bool
	for _, a := range got {
		if a.Zone() != "" || a.Is4In6() || !a.IsValid() {
			t.Errorf("LocalAddrs returned non-canonical %v", a)
		}
		loop = loop || a == netip.MustParseAddr("127.0.0.1")
	}
	if !loop {
		t.Errorf("LocalAddrs() = %v, want it to include 127.0.0.1", got)
	}
}
