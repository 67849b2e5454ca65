package gateway

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/proxy"

	"github.com/moat-dev/moat/gateway/audit"
	"github.com/moat-dev/moat/gateway/policy"
	"github.com/moat-dev/moat/resolver"
	"github.com/moat-dev/moat/resolver/dnstest"
)

const testToken = "t0ken-for-tests"

// memSink collects audit events.
type memSink struct {
	mu sync.Mutex
	ev []audit.Event
}

func (m *memSink) Write(e audit.Event) {
	m.mu.Lock()
	m.ev = append(m.ev, e)
	m.mu.Unlock()
}

func (m *memSink) events() []audit.Event {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]audit.Event(nil), m.ev...)
}

// waitEvents polls (bounded) until n events arrived: tunnel lines are
// written when the tunnel closes.
func (m *memSink) waitEvents(t *testing.T, n int) []audit.Event {
	t.Helper()
	for i := 0; i < 200; i++ {
		if ev := m.events(); len(ev) >= n {
			return ev
		}
		time.Sleep(10 * time.Millisecond)
	}
	ev := m.events()
	t.Fatalf("got %d audit events, want %d: %+v", len(ev), n, ev)
	return nil
}

type env struct {
	gw    *Gateway
	addr  string // gateway host:port
	dns   *dnstest.Server
	audit *memSink
}

// newEnv starts a gateway on 127.0.0.1 with a local DNS server.
func newEnv(t *testing.T, spec policy.Spec, mod func(*Options)) *env {
	t.Helper()
	dns := dnstest.New(t)
	res, err := resolver.New(resolver.Options{Servers: []string{dns.Addr}, HostsFile: "-"})
	if err != nil {
		t.Fatal(err)
	}
	pol, err := policy.New(spec)
	if err != nil {
		t.Fatal(err)
	}
	sink := &memSink{}
	o := Options{
		Policy: pol,
		Dialer: &resolver.Dialer{Resolver: res, Policy: pol},
		Audit:  sink,
		Tokens: map[string]string{testToken: "tester"},
	}
	if mod != nil {
		mod(&o)
	}
	gw, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go gw.Serve(l)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		gw.Shutdown(ctx)
	})
	return &env{gw: gw, addr: l.Addr().String(), dns: dns, audit: sink}
}

// tcpServer serves every connection to a loopback listener with handle,
// each in its own goroutine, until the test ends; it returns host:port.
func tcpServer(t *testing.T, handle func(net.Conn)) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go handle(c)
		}
	}()
	return l.Addr().String()
}

func (e *env) client(token string) *http.Client {
	u := &url.URL{Scheme: "http", Host: e.addr}
	if token != "" {
		u.User = url.UserPassword("moat.s1.c1", token)
	}
	return &http.Client{
		Transport: &http.Transport{Proxy: http.ProxyURL(u), DisableKeepAlives: true},
		Timeout:   5 * time.Second,
	}
}

// upstream runs a loopback HTTP server that reports the headers it saw.
func upstream(t *testing.T) (*httptest.Server, uint16, *atomic.Int64) {
	t.Helper()
	var conns atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Seen-Host", r.Host)
		for _, h := range []string{"X-Secret-Hop", "Proxy-Authorization", "Keep-Alive"} {
			if r.Header.Get(h) != "" {
				w.Header().Set("X-Leaked", h)
			}
		}
		io.WriteString(w, "hello from upstream")
	}))
	srv.Config.ConnState = func(c net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	ap := netip.MustParseAddrPort(srv.Listener.Addr().String())
	return srv, ap.Port(), &conns
}

var loopbackCarveOut = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}

func TestNewFailsClosed(t *testing.T) {
	if _, err := New(Options{}); !errors.Is(err, ErrNoPolicy) {
		t.Errorf("New(Options{}) = %v, want ErrNoPolicy", err)
	}
	pol, _ := policy.New(policy.Spec{})
	if _, err := New(Options{Policy: pol}); !errors.Is(err, ErrNoDialer) {
		t.Errorf("New without dialer = %v, want ErrNoDialer", err)
	}
	if _, err := New(Options{Policy: pol, Dialer: &resolver.Dialer{Policy: pol}}); !errors.Is(err, ErrNoAuth) {
		t.Errorf("New without tokens = %v, want ErrNoAuth", err)
	}
}

func TestNoAuthRefusedOffLoopback(t *testing.T) {
	pol, _ := policy.New(policy.Spec{})
	gw, err := New(Options{Policy: pol, Dialer: &resolver.Dialer{Policy: pol}, NoAuth: true})
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "0.0.0.0:0")
	if err != nil {
		t.Skip("cannot bind 0.0.0.0:", err)
	}
	defer l.Close()
	if err := gw.Serve(l); !errors.Is(err, ErrNoAuthNotLoopback) {
		t.Errorf("Serve(0.0.0.0) with NoAuth = %v, want ErrNoAuthNotLoopback", err)
	}
}

// TestOneDecisionEverywhere checks that plain HTTP, CONNECT and SOCKS5 give
// the same decision for the same host, with the srt-compatible responses.
func TestOneDecisionEverywhere(t *testing.T) {
	_, port := func() (*httptest.Server, uint16) { s, p, _ := upstream(t); return s, p }()
	e := newEnv(t, policy.Spec{Allow: []string{"ok.test"}, Deny: []string{"bad.test"}, AllowedAddrs: loopbackCarveOut}, nil)
	lo := []netip.Addr{netip.MustParseAddr("127.0.0.1")}
	e.dns.Set("ok.test", lo, time.Minute)
	e.dns.Set("bad.test", lo, time.Minute)
	e.dns.Set("other.test", lo, time.Minute)

	cases := []struct {
		host      string
		allowed   bool
		reason    string
		hintInBdy string
	}{
		{"ok.test", true, "", ""},
		{"bad.test", false, "deny-list", `to allow: remove "bad.test" from network.deniedDomains`},
		{"other.test", false, "not-allowed", `to allow: add "other.test" to network.allowedDomains`},
	}
	for _, tc := range cases {
		target := fmt.Sprintf("%s:%d", tc.host, port)
		t.Run(tc.host+"/http", func(t *testing.T) {
			resp, err := e.client(testToken).Get("http://" + target + "/")
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			checkHTTPVerdict(t, resp, string(body), tc.allowed, tc.reason, tc.hintInBdy)
		})
		t.Run(tc.host+"/connect", func(t *testing.T) {
			resp, body := rawConnect(t, e.addr, target, testToken)
			checkHTTPVerdict(t, resp, body, tc.allowed, tc.reason, tc.hintInBdy)
		})
		t.Run(tc.host+"/socks5", func(t *testing.T) {
			d, err := proxy.SOCKS5("tcp", e.addr, &proxy.Auth{User: "moat.s1.c1", Password: testToken}, proxy.Direct)
			if err != nil {
				t.Fatal(err)
			}
			c, err := d.Dial("tcp", target)
			if tc.allowed {
				if err != nil {
					t.Fatalf("SOCKS5 dial of allowed host: %v", err)
				}
				defer c.Close()
				fmt.Fprintf(c, "GET / HTTP/1.0\r\nHost: %s\r\n\r\n", tc.host)
				b, _ := io.ReadAll(c)
				if !strings.Contains(string(b), "hello from upstream") {
					t.Errorf("SOCKS5 tunnel body = %q", b)
				}
				return
			}
			if err == nil {
				c.Close()
				t.Fatal("SOCKS5 dial of denied host succeeded")
			}
			if code := socksReplyCode(t, e.addr, tc.host, port); code != replyNotAllowed {
				t.Errorf("SOCKS5 reply = %#x, want %#x", code, replyNotAllowed)
			}
		})
	}
	// A denied name is never looked up, on any protocol (go-socks5 would
	// resolve before its rule runs).
	for _, q := range e.dns.Queries() {
		if q.Name == "bad.test" || q.Name == "other.test" {
			t.Errorf("denied name %s was looked up (%s over %s)", q.Name, dnsType(q.Type), q.Net)
		}
	}
	// Every decision is exactly one audit line: 3 hosts × (http, connect,
	// socks5) plus the extra raw SOCKS5 probes for the 2 denied hosts.
	ev := e.audit.waitEvents(t, 11)
	if len(ev) != 11 {
		t.Errorf("audit lines = %d, want 11", len(ev))
	}
}

func dnsType(t uint16) string {
	if t == 28 {
		return "AAAA"
	}
	return fmt.Sprint(t)
}

func checkHTTPVerdict(t *testing.T, resp *http.Response, body string, allowed bool, reason, hint string) {
	t.Helper()
	if allowed {
		if resp.StatusCode != 200 || !strings.Contains(body, "hello from upstream") {
			t.Errorf("allowed host: status %d body %q", resp.StatusCode, body)
		}
		return
	}
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("status = %d, want 403 (body %q)", resp.StatusCode, body)
	}
	if got := resp.Header.Get("X-Proxy-Error"); got != "blocked-by-allowlist" {
		t.Errorf("X-Proxy-Error = %q, want blocked-by-allowlist", got)
	}
	if got := resp.Header.Get("X-Moat-Reason"); got != reason {
		t.Errorf("X-Moat-Reason = %q, want %q", got, reason)
	}
	if resp.Header.Get("X-Moat-Rule") == "" {
		t.Errorf("X-Moat-Rule missing")
	}
	if resp.Header.Get("Content-Type") != "text/plain" { // srt's exact header
		t.Errorf("Content-Type = %q", resp.Header.Get("Content-Type"))
	}
	if !strings.HasPrefix(body, "Connection blocked by network allowlist") {
		t.Errorf("body = %q, want the srt prefix", body)
	}
	if !strings.HasSuffix(strings.TrimSpace(body), hint) {
		t.Errorf("body = %q, want it to end with %q", body, hint)
	}
}

// rawConnect sends a CONNECT and, when it succeeds, a GET through the tunnel.
func rawConnect(t *testing.T, gw, target, token string) (*http.Response, string) {
	t.Helper()
	c, err := net.DialTimeout("tcp", gw, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	req := "CONNECT " + target + " HTTP/1.1\r\nHost: " + target + "\r\n"
	if token != "" {
		req += "Proxy-Authorization: Basic " + basic("moat.s1.c1", token) + "\r\n"
	}
	io.WriteString(c, req+"\r\n")
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: "CONNECT"})
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
	host, _, _ := net.SplitHostPort(target)
	fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", host)
	inner, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(inner.Body)
	return inner, string(b)
}

func basic(u, p string) string {
	r, _ := http.NewRequest("GET", "http://x/", nil)
	r.SetBasicAuth(u, p)
	return strings.TrimPrefix(r.Header.Get("Authorization"), "Basic ")
}

// socksReplyCode speaks raw SOCKS5 (RFC 1928/1929) and returns REP.
func socksReplyCode(t *testing.T, gw, host string, port uint16) byte {
	t.Helper()
	c, err := net.DialTimeout("tcp", gw, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	c.Write([]byte{5, 1, 2})
	b := make([]byte, 2)
	if _, err := io.ReadFull(c, b); err != nil || b[1] != 2 {
		t.Fatalf("method reply %v %v", b, err)
	}
	user, pass := "moat.s1.c1", testToken
	c.Write(append(append(append([]byte{1, byte(len(user))}, user...), byte(len(pass))), pass...))
	if _, err := io.ReadFull(c, b); err != nil || b[1] != 0 {
		t.Fatalf("auth reply %v %v", b, err)
	}
	req := append([]byte{5, 1, 0, 3, byte(len(host))}, host...)
	req = append(req, byte(port>>8), byte(port))
	c.Write(req)
	rep := make([]byte, 4)
	if _, err := io.ReadFull(c, rep); err != nil {
		t.Fatalf("request reply: %v", err)
	}
	return rep[1]
}

func TestAuth(t *testing.T) {
	e := newEnv(t, policy.Spec{Allow: []string{"ok.test"}}, nil)
	for _, tok := range []string{"", "wrong"} {
		resp, err := e.client(tok).Get("http://ok.test/")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusProxyAuthRequired || resp.Header.Get("Proxy-Authenticate") != `Basic realm="moat"` {
			t.Errorf("token %q: status %d, Proxy-Authenticate %q; want 407 with realm moat",
				tok, resp.StatusCode, resp.Header.Get("Proxy-Authenticate"))
		}
		cresp, _ := rawConnect(t, e.addr, "ok.test:443", tok)
		if cresp.StatusCode != http.StatusProxyAuthRequired {
			t.Errorf("CONNECT token %q: status %d, want 407", tok, cresp.StatusCode)
		}
	}
	d, _ := proxy.SOCKS5("tcp", e.addr, &proxy.Auth{User: "u", Password: "wrong"}, proxy.Direct)
	if c, err := d.Dial("tcp", "ok.test:80"); err == nil {
		c.Close()
		t.Error("SOCKS5 with a wrong password connected")
	}
	d, _ = proxy.SOCKS5("tcp", e.addr, nil, proxy.Direct)
	if c, err := d.Dial("tcp", "ok.test:80"); err == nil {
		c.Close()
		t.Error("SOCKS5 without auth connected")
	}
}

// TestResolvedAddressGuard: allowed names that resolve to refused
// addresses get blocked-by-resolved-address on every protocol.
func TestResolvedAddressGuard(t *testing.T) {
	_, port, conns := upstream(t)
	e := newEnv(t, policy.Spec{Allow: []string{"*.evil.test"}}, nil)
	addrs := map[string]string{
		"lo.evil.test":     "127.0.0.1",
		"meta.evil.test":   "169.254.169.254",
		"priv.evil.test":   "10.1.2.3",
		"nat64.evil.test":  "64:ff9b::7f00:1",
		"sixto4.evil.test": "2002:7f00:1::1",
		"v6lo.evil.test":   "::1",
	}
	for name, a := range addrs {
		e.dns.Set(name, []netip.Addr{netip.MustParseAddr(a)}, time.Minute)
	}
	for name := range addrs {
		target := fmt.Sprintf("%s:%d", name, port)
		resp, err := e.client(testToken).Get("http://" + target + "/")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 403 || resp.Header.Get("X-Proxy-Error") != "blocked-by-resolved-address" ||
			!strings.HasPrefix(string(body), "Connection blocked: destination resolved to a denied address") {
			t.Errorf("%s over http: %d %q %q", name, resp.StatusCode, resp.Header.Get("X-Proxy-Error"), body)
		}
		cresp, cbody := rawConnect(t, e.addr, target, testToken)
		if cresp.StatusCode != 403 || cresp.Header.Get("X-Proxy-Error") != "blocked-by-resolved-address" {
			t.Errorf("%s over CONNECT: %d %q %q", name, cresp.StatusCode, cresp.Header.Get("X-Proxy-Error"), cbody)
		}
		if code := socksReplyCode(t, e.addr, name, port); code != replyNotAllowed {
			t.Errorf("%s over SOCKS5: reply %#x, want %#x", name, code, replyNotAllowed)
		}
	}
	if n := conns.Load(); n != 0 {
		t.Errorf("upstream on loopback received %d connections", n)
	}
}

// TestDNSRebinding: the first answer is a permitted address, later answers
// are 127.0.0.1. The gateway must dial what it checked, never re-resolve.
func TestDNSRebinding(t *testing.T) {
	_, port, conns := upstream(t)
	var mu sync.Mutex
	var dialled []string
	e := newEnv(t, policy.Spec{Allow: []string{"rebind.test"}}, func(o *Options) {
		// Record what would be dialled; only loopback is really dialled,
		// so no packet leaves this machine.
		o.Dialer.Dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
			mu.Lock()
			dialled = append(dialled, addr)
			mu.Unlock()
			if ap, err := netip.ParseAddrPort(addr); err == nil && ap.Addr().IsLoopback() {
				var d net.Dialer
				return d.DialContext(ctx, network, addr)
			}
			return nil, errors.New("test: unreachable test address")
		}
	})
	var n atomic.Int64
	e.dns.Handle(func(q dnstest.Query) (dnstest.Answer, bool) {
		if q.Type != 1 { // A only
			return dnstest.Answer{}, false
		}
		if n.Add(1) == 1 {
			return dnstest.Answer{Addrs: []netip.Addr{netip.MustParseAddr("198.18.255.254")}, TTL: 0}, true
		}
		return dnstest.Answer{Addrs: []netip.Addr{netip.MustParseAddr("127.0.0.1")}, TTL: 0}, true
	})
	for i := 0; i < 5; i++ {
		resp, err := e.client(testToken).Get(fmt.Sprintf("http://rebind.test:%d/", port))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode == 200 {
			t.Fatalf("request %d reached an upstream", i)
		}
		rresp, _ := rawConnect(t, e.addr, fmt.Sprintf("rebind.test:%d", port), testToken)
		if rresp.StatusCode == 200 {
			t.Fatalf("CONNECT %d reached an upstream", i)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(dialled) == 0 || !strings.HasPrefix(dialled[0], "198.18.255.254:") {
		t.Errorf("dialled %v, want the first (checked) answer first", dialled)
	}
	for _, a := range dialled {
		if strings.HasPrefix(a, "127.") {
			t.Errorf("rebinding made the gateway dial %s", a)
		}
	}
	if c := conns.Load(); c != 0 {
		t.Errorf("rebinding reached 127.0.0.1: %d connections", c)
	}
}

func TestPlainHTTPPoolingAndHopByHop(t *testing.T) {
	_, port, conns := upstream(t)
	e := newEnv(t, policy.Spec{Allow: []string{"ok.test"}, AllowedAddrs: loopbackCarveOut}, nil)
	e.dns.Set("ok.test", []netip.Addr{netip.MustParseAddr("127.0.0.1")}, time.Minute)
	pu := &url.URL{Scheme: "http", Host: e.addr, User: url.UserPassword("u", testToken)}
	c := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(pu)}, Timeout: 5 * time.Second}
	for i := 0; i < 30; i++ {
		req, _ := http.NewRequest("GET", fmt.Sprintf("http://ok.test:%d/x?secret=1", port), nil)
		req.Header.Set("Connection", "X-Secret-Hop")
		req.Header.Set("X-Secret-Hop", "must not cross")
		req.Header.Set("Keep-Alive", "timeout=5")
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if l := resp.Header.Get("X-Leaked"); l != "" {
			t.Fatalf("hop-by-hop header %s reached upstream", l)
		}
		if h := resp.Header.Get("X-Seen-Host"); !strings.HasPrefix(h, "ok.test") {
			t.Fatalf("upstream saw Host %q, want ok.test (status %d)", h, resp.StatusCode)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("upstream connections = %d for 30 keep-alive requests, want 1", n)
	}
	// Domain fronting: the Host header must not differ from the decided host.
	fc, err := net.Dial("tcp", e.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer fc.Close()
	fmt.Fprintf(fc, "GET http://ok.test:%d/x?secret=1 HTTP/1.1\r\nHost: evil.test\r\nProxy-Authorization: Basic %s\r\nConnection: close\r\n\r\n", port, basic("u", testToken))
	fresp, err := http.ReadResponse(bufio.NewReader(fc), nil)
	if err != nil {
		t.Fatal(err)
	}
	if h := fresp.Header.Get("X-Seen-Host"); !strings.HasPrefix(h, "ok.test") {
		t.Errorf("fronting: upstream saw Host %q, want ok.test", h)
	}
	ev := e.audit.waitEvents(t, 31)
	for _, x := range ev {
		if x.Path != "/x?…" || x.Method != "GET" || x.Status != 200 || x.Proto != "http" || x.Addr == "" {
			t.Fatalf("audit event %+v: want method, redacted path, status, addr", x)
		}
		if strings.Contains(fmt.Sprint(x), "secret=1") {
			t.Fatalf("query value in audit: %+v", x)
		}
	}
}

func TestBadInput(t *testing.T) {
	e := newEnv(t, policy.Spec{Allow: []string{"ok.test"}}, func(o *Options) {
		o.HeaderTimeout = 300 * time.Millisecond
	})
	baseG, baseFD := runtime.NumGoroutine(), openFDs(t)
	defer func() {
		// Bad input leaks neither goroutines nor file descriptors: both
		// return to where they were (bounded wait for closes to land).
		var g, fd int
		for i := 0; i < 100; i++ {
			g, fd = runtime.NumGoroutine(), openFDs(t)
			if g <= baseG+2 && fd <= baseFD+2 {
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
		t.Errorf("after bad input: goroutines %d -> %d, fds %d -> %d", baseG, g, baseFD, fd)
	}()
	send := func(raw string) string {
		c, err := net.DialTimeout("tcp", e.addr, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(3 * time.Second))
		io.WriteString(c, raw)
		line, _ := bufio.NewReader(c).ReadString('\n')
		return line
	}
	auth := "Proxy-Authorization: Basic " + basic("u", testToken) + "\r\n"
	for _, tc := range []struct{ name, raw, want string }{
		{"no port", "CONNECT ok.test HTTP/1.1\r\nHost: ok.test\r\n" + auth + "\r\n", " 400 "},
		{"port zero", "CONNECT ok.test:0 HTTP/1.1\r\nHost: x\r\n" + auth + "\r\n", " 400 "},
		{"port too big", "CONNECT ok.test:65536 HTTP/1.1\r\nHost: x\r\n" + auth + "\r\n", " 400 "},
		{"userinfo confusion", "CONNECT user@ok.test:443 HTTP/1.1\r\nHost: x\r\n" + auth + "\r\n", " 400 "},
		{"backslash", "CONNECT ok.test\\@evil.test:443 HTTP/1.1\r\nHost: x\r\n" + auth + "\r\n", " 400 "},
		{"percent zone", "CONNECT [fe80::1%25eth0]:443 HTTP/1.1\r\nHost: x\r\n" + auth + "\r\n", " 400 "},
		{"path target", "CONNECT /etc/passwd HTTP/1.1\r\nHost: x\r\n" + auth + "\r\n", " 400 "},
		{"oversized headers", "GET http://ok.test/ HTTP/1.1\r\nHost: ok.test\r\nX-Big: " + strings.Repeat("a", 80<<10) + "\r\n\r\n", " 431 "},
	} {
		if got := send(tc.raw); !strings.Contains(got, tc.want) {
			t.Errorf("%s: status line %q, want %q", tc.name, got, tc.want)
		}
	}
	// A slow client that never finishes its headers is cut off.
	c, err := net.Dial("tcp", e.addr)
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(c, "GET http://ok.test/ HTTP/1.1\r\n")
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadAll(c); err != nil {
		t.Errorf("slow client: connection not closed by the gateway: %v", err)
	}
	c.Close()
	// SOCKS5 garbage and truncated greetings close the connection.
	for _, raw := range [][]byte{{5}, {5, 0}, {5, 1, 9}, {5, 255, 1, 2}, {4, 1, 0, 80, 127, 0, 0, 1, 0}} {
		c, err := net.Dial("tcp", e.addr)
		if err != nil {
			t.Fatal(err)
		}
		c.Write(raw)
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		b, err := io.ReadAll(c)
		if err != nil {
			t.Errorf("SOCKS garbage %v: connection left open: %v", raw, err)
		}
		if len(b) >= 2 && b[0] == 5 && b[1] == 0 {
			t.Errorf("SOCKS garbage %v accepted: %v", raw, b)
		}
		c.Close()
	}
}

func openFDs(t *testing.T) int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip("no /proc/self/fd:", err)
	}
	return len(ents)
}

func TestConcurrentAuditLines(t *testing.T) {
	_, port, _ := upstream(t)
	e := newEnv(t, policy.Spec{Allow: []string{"ok.test"}, AllowedAddrs: loopbackCarveOut}, nil)
	e.dns.Set("ok.test", []netip.Addr{netip.MustParseAddr("127.0.0.1")}, time.Minute)
	const n = 40
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			host := "ok.test"
			if i%2 == 1 {
				host = "no.test"
			}
			resp, err := e.client(testToken).Get(fmt.Sprintf("http://%s:%d/", host, port))
			if err == nil {
				resp.Body.Close()
			}
		}(i)
	}
	wg.Wait()
	ev := e.audit.waitEvents(t, n)
	allow, deny := 0, 0
	for _, x := range ev {
		switch x.Verdict {
		case "allow":
			allow++
		case "deny":
			deny++
		}
	}
	if len(ev) != n || allow != n/2 || deny != n/2 {
		t.Errorf("audit: %d lines (%d allow, %d deny), want %d (%d each)", len(ev), allow, deny, n, n/2)
	}
}

func TestShutdownDrains(t *testing.T) {
	// An upstream that echoes: a tunnel stays open until closed.
	echo := tcpServer(t, func(c net.Conn) { io.Copy(c, c); c.Close() })
	e := newEnv(t, policy.Spec{Allow: []string{"127.0.0.1"}}, nil)
	c, err := net.Dial("tcp", e.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "CONNECT "+echo+" HTTP/1.1\r\nHost: x\r\nProxy-Authorization: Basic "+basic("u", testToken)+"\r\n\r\n")
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: "CONNECT"})
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("CONNECT to allowed literal: %v %v", resp, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- e.gw.Shutdown(ctx) }()
	// During the grace period the tunnel still works.
	io.WriteString(c, "ping")
	b := make([]byte, 4)
	c.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := io.ReadFull(br, b); err != nil || string(b) != "ping" {
		t.Fatalf("tunnel during drain: %q %v", b, err)
	}
	if err := <-done; !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Shutdown = %v, want DeadlineExceeded after closing the open tunnel", err)
	}
	if _, err := io.ReadFull(br, b); err == nil {
		t.Errorf("tunnel still open after the grace period")
	}
	if _, err := net.DialTimeout("tcp", e.addr, time.Second); err == nil {
		t.Errorf("gateway still accepts after Shutdown")
	}
	ev := e.audit.waitEvents(t, 1)
	if ev[0].BytesUp != 4 || ev[0].BytesDown != 4 {
		t.Errorf("tunnel audit bytes up/down = %d/%d, want 4/4", ev[0].BytesUp, ev[0].BytesDown)
	}
}

// TestUpstreamFailureIsNotADenial: an allowed destination that refuses the
// connection gets 502 (plain HTTP) or a failed CONNECT, and its audit line
// keeps verdict allow with reason upstream-unreachable; the address guard
// still audits a deny.
func TestUpstreamFailureIsNotADenial(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := l.Addr().String() // nothing listens here once closed
	l.Close()
	e := newEnv(t, policy.Spec{Allow: []string{"127.0.0.1", "guarded.test"}, AllowedAddrs: loopbackCarveOut}, nil)
	resp, err := e.client(testToken).Get("http://" + closed + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadGateway || resp.Header.Get("X-Moat-Reason") != "upstream-unreachable" {
		t.Errorf("plain HTTP to a closed port: %d %q, want 502 upstream-unreachable", resp.StatusCode, resp.Header.Get("X-Moat-Reason"))
	}
	if cresp, _ := rawConnect(t, e.addr, closed, testToken); cresp.StatusCode != http.StatusBadGateway {
		t.Errorf("CONNECT to a closed port: %d, want 502", cresp.StatusCode)
	}
	ev := e.audit.events()
	if len(ev) != 2 {
		t.Fatalf("%d audit lines, want 2: %+v", len(ev), ev)
	}
	for _, x := range ev {
		if x.Verdict != "allow" || x.Reason != "upstream-unreachable" {
			t.Errorf("%s line: verdict %q reason %q, want allow upstream-unreachable", x.Proto, x.Verdict, x.Reason)
		}
	}
	e.dns.Set("guarded.test", []netip.Addr{netip.MustParseAddr("10.1.2.3")}, time.Minute)
	resp, err = e.client(testToken).Get("http://guarded.test/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	ev = e.audit.events()
	if last := ev[len(ev)-1]; resp.StatusCode != http.StatusForbidden || last.Verdict != "deny" || last.Reason == "upstream-unreachable" {
		t.Errorf("a name resolving to a private address: %d, audit %q %q; want 403 and a deny", resp.StatusCode, last.Verdict, last.Reason)
	}
}

func TestDialVerdict(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{&resolver.AddrDeniedError{}, "deny"},
		{fmt.Errorf("dial: %w", resolver.ErrDenied), "deny"},
		{resolver.ErrBadDestination, "deny"},
		{resolver.ErrNoPolicy, "deny"},
		{resolver.ErrInvalidName, "allow"},
		{errNoDecision, "deny"},
		{fmt.Errorf("lookup: %w", resolver.ErrNotFound), "allow"},
		{&net.OpError{Op: "dial", Err: errors.New("connection refused")}, "allow"},
		{context.DeadlineExceeded, "allow"},
	} {
		if got := dialVerdict(tc.err); got != tc.want {
			t.Errorf("dialVerdict(%v) = %s, want %s", tc.err, got, tc.want)
		}
		// The reply agrees: a denial is a 403, a failure a 502.
		rep, reason, _ := dialReply(tc.err)
		if (tc.want == "deny") != (rep.status == http.StatusForbidden) || (tc.want == "allow" && reason != "upstream-unreachable") {
			t.Errorf("dialReply(%v) = %d %s, for verdict %s", tc.err, rep.status, reason, tc.want)
		}
	}
}
