package gateway

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/elazarl/goproxy"

	"github.com/moat-dev/moat/credentials"
	"github.com/moat-dev/moat/gateway/audit"
	"github.com/moat-dev/moat/gateway/policy"
	"github.com/moat-dev/moat/resolver"
)

// corporate runs a goproxy on loopback as the parent proxy and counts the
// CONNECTs it receives and the credentials they carried.
func corporate(t *testing.T) (string, *atomic.Int64, *atomic.Value) {
	t.Helper()
	var n atomic.Int64
	var auth atomic.Value
	auth.Store("")
	p := goproxy.NewProxyHttpServer()
	p.ConnectDial = nil
	p.OnRequest().HandleConnectFunc(func(host string, ctx *goproxy.ProxyCtx) (*goproxy.ConnectAction, string) {
		n.Add(1)
		auth.Store(ctx.Req.Header.Get("Proxy-Authorization"))
		return goproxy.OkConnect, host
	})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: p}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return l.Addr().String(), &n, &auth
}

func TestParentProxy(t *testing.T) {
	_, port, conns := upstream(t)
	parentAddr, parentHits, parentAuth := corporate(t)
	parent, err := ParseParent("http://corp:s3cret@"+parentAddr, "", ".direct.test, 192.0.2.0/24")
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, policy.Spec{Allow: []string{"127.0.0.1", "x.direct.test"}, AllowedAddrs: loopbackCarveOut},
		func(o *Options) { o.Parent = parent })
	e.dns.Set("x.direct.test", []netip.Addr{netip.MustParseAddr("127.0.0.1")}, time.Minute)

	// Plain HTTP and CONNECT both go through the parent.
	resp, err := e.client(testToken).Get(fmt.Sprintf("http://127.0.0.1:%d/", port))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(b), "hello from upstream") {
		t.Fatalf("plain HTTP via parent: %d %q", resp.StatusCode, b)
	}
	cresp, body := rawConnect(t, e.addr, fmt.Sprintf("127.0.0.1:%d", port), testToken)
	if cresp.StatusCode != 200 || !strings.Contains(body, "hello") {
		t.Fatalf("CONNECT via parent: %d %q", cresp.StatusCode, body)
	}
	if got := parentHits.Load(); got != 2 {
		t.Errorf("parent saw %d tunnels, want 2", got)
	}
	if a := parentAuth.Load().(string); a != "Basic "+basic("corp", "s3cret") {
		t.Errorf("parent got Proxy-Authorization %q", a)
	}
	// noProxy destinations are dialled directly.
	before := parentHits.Load()
	cresp, _ = rawConnect(t, e.addr, fmt.Sprintf("x.direct.test:%d", port), testToken)
	if cresp.StatusCode != 200 || parentHits.Load() != before {
		t.Errorf("noProxy host: status %d, parent hits %d -> %d", cresp.StatusCode, before, parentHits.Load())
	}
	// Denied hosts never reach the parent.
	cresp, _ = rawConnect(t, e.addr, "denied.test:443", testToken)
	if cresp.StatusCode != 403 || parentHits.Load() != before {
		t.Errorf("denied host: status %d, parent hits %d", cresp.StatusCode, parentHits.Load())
	}
	if conns.Load() == 0 {
		t.Errorf("upstream saw no connection")
	}
}

func TestParseParentErrors(t *testing.T) {
	for _, tc := range []struct{ http, noProxy, want string }{
		{"socks5://p:1080", "", "network.parentProxy.http"},
		{"http://u:hunter2@", "", "network.parentProxy.http"},
		{"http://p:3128", "10.0.0.0/99", "network.parentProxy.noProxy"},
	} {
		_, err := ParseParent(tc.http, "", tc.noProxy)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseParent(%q, %q) = %v, want an error naming %s", tc.http, tc.noProxy, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "hunter2") {
			t.Errorf("error leaks the password: %v", err)
		}
	}
}

const otherToken = "other-client-token"

// TestQuarantineAfterLeak: once a leak was blocked and quarantine is on,
// every further request of the session is refused, and its open tunnels
// are closed; another client is not affected.
func TestQuarantineAfterLeak(t *testing.T) {
	_, port, _ := upstream(t)
	set, _, err := credentials.Load([]credentials.Spec{{Name: "GITHUB_TOKEN", Mode: "mask", InjectHosts: []string{"bound.test"}}},
		func(string) string { return "ghp_quarantineTestSecret0123456789abcd" })
	if err != nil {
		t.Fatal(err)
	}
	sentinel := set.Bindings()[0].Sentinel
	q := NewQuarantine(true)
	e := newEnv(t, policy.Spec{Allow: []string{"127.0.0.1", "bound.test"}, AllowedAddrs: loopbackCarveOut},
		func(o *Options) {
			o.Credentials, o.Quarantine = set, q
			o.Tokens[otherToken] = "other"
		})
	get := func(url, hdr string) *http.Response {
		req, _ := http.NewRequest("GET", url, nil)
		if hdr != "" {
			req.Header.Set("X-Token", hdr)
		}
		resp, err := e.client(testToken).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	target := fmt.Sprintf("http://127.0.0.1:%d/", port)
	if r := get(target, ""); r.StatusCode != 200 {
		t.Fatalf("before the leak: %d", r.StatusCode)
	}
	// A tunnel opened before the leak, and one of another client.
	openTunnel := func(token string) (net.Conn, *bufio.Reader) {
		c, err := net.DialTimeout("tcp", e.addr, 2*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		hp := target[len("http://") : len(target)-1]
		fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\nProxy-Authorization: Basic %s\r\n\r\n", hp, hp, basic("moat.s1.c1", token))
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, &http.Request{Method: "CONNECT"})
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("CONNECT before the leak: %v %v", resp, err)
		}
		return c, br
	}
	tun, tunR := openTunnel(testToken)
	other, otherR := openTunnel(otherToken)
	if r := get(target, sentinel); r.StatusCode != 403 || r.Header.Get("X-Proxy-Error") != "blocked-credential-leak" {
		t.Fatalf("leak: %d %q", r.StatusCode, r.Header.Get("X-Proxy-Error"))
	}
	if r := get(target, ""); r.StatusCode != 403 || r.Header.Get("X-Moat-Reason") != "quarantined" {
		t.Errorf("after the leak: %d %q, want 403 quarantined", r.StatusCode, r.Header.Get("X-Moat-Reason"))
	}
	// The open tunnel of the quarantined client is closed by the gateway;
	// the other client's still works.
	tun.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := tunR.ReadByte(); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("the quarantined client's open tunnel still open after the leak (read: %v)", err)
	}
	other.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(other, "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
	if resp, err := http.ReadResponse(otherR, nil); err != nil || resp.StatusCode != 200 {
		t.Errorf("another client's tunnel after the leak: %v %v", resp, err)
	}
	if cresp, _ := rawConnect(t, e.addr, target[len("http://"):len(target)-1], testToken); cresp.StatusCode != 403 {
		t.Errorf("CONNECT after the leak: %d", cresp.StatusCode)
	}
}

func TestBudgets(t *testing.T) {
	_, port, _ := upstream(t)
	e := newEnv(t, policy.Spec{Allow: []string{"127.0.0.1", "*.b.test"}, AllowedAddrs: loopbackCarveOut},
		func(o *Options) {
			o.Budgets = []Budget{
				{Pattern: "127.0.0.1", Requests: 2, BytesUp: -1, BytesDown: -1},
				{Pattern: "*.b.test", Requests: -1, BytesUp: -1, BytesDown: 10},
			}
		})
	e.dns.Set("x.b.test", []netip.Addr{netip.MustParseAddr("127.0.0.1")}, time.Minute)
	status := func(url string) (int, string) {
		resp, err := e.client(testToken).Get(url)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode, resp.Header.Get("X-Moat-Reason")
	}
	lit := fmt.Sprintf("http://127.0.0.1:%d/", port)
	for i, want := range []int{200, 200, 403} {
		if got, reason := status(lit); got != want || (want == 403 && reason != "budget-exhausted") {
			t.Errorf("request %d to the request-limited host: %d %q, want %d", i, got, reason, want)
		}
	}
	// CONNECT counts against the same budget.
	if cresp, _ := rawConnect(t, e.addr, fmt.Sprintf("127.0.0.1:%d", port), testToken); cresp.StatusCode != 403 {
		t.Errorf("CONNECT after the budget was spent: %d", cresp.StatusCode)
	}
	// The byte budget: the first answer (19 bytes) spends it.
	name := fmt.Sprintf("http://x.b.test:%d/", port)
	if got, _ := status(name); got != 200 {
		t.Errorf("first request to the byte-limited host: %d", got)
	}
	if got, reason := status(name); got != 403 || reason != "budget-exhausted" {
		t.Errorf("after the byte budget: %d %q, want 403 budget-exhausted", got, reason)
	}
}

// TestPerClientPolicy: in daemon mode each token's client can have its own
// policy; a client without one uses the gateway's.
func TestPerClientPolicy(t *testing.T) {
	_, port, _ := upstream(t)
	strict, _ := policy.New(policy.Spec{})
	open, _ := policy.New(policy.Spec{Allow: []string{"127.0.0.1"}})
	e := newEnv(t, policy.Spec{Allow: []string{"127.0.0.1"}}, func(o *Options) {
		o.Tokens = map[string]string{testToken: "tester", "other-token-0123456": "locked"}
		o.Clients = map[string]ClientPolicy{"locked": {Policy: strict, Dialer: &resolver.Dialer{Policy: strict}}}
		_ = open
	})
	target := fmt.Sprintf("http://127.0.0.1:%d/", port)
	for _, tc := range []struct {
		token string
		want  int
	}{{testToken, 200}, {"other-token-0123456", 403}} {
		resp, err := e.client(tc.token).Get(target)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("token of client %q: status %d, want %d", tc.token[:5], resp.StatusCode, tc.want)
		}
	}
	if _, err := New(Options{Policy: open, Dialer: &resolver.Dialer{Policy: open}, NoAuth: true,
		Clients: map[string]ClientPolicy{"x": {}}}); !errors.Is(err, ErrNoPolicy) {
		t.Errorf("a client without a policy: %v, want ErrNoPolicy", err)
	}
}

// TestQuarantineClosesUpgradedConnections: a WebSocket opened through
// plain-HTTP proxying before a leak carries no byte after it.
func TestQuarantineClosesUpgradedConnections(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") == "" {
			io.WriteString(w, "plain")
			return
		}
		c, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer c.Close()
		io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
		buf := make([]byte, 4)
		for i := 0; i < 100; i++ { // bounded echo
			if _, err := io.ReadFull(brw, buf); err != nil {
				return
			}
			c.Write(append([]byte("echo:"), buf...))
		}
	}))
	defer up.Close()
	set, _, err := credentials.Load([]credentials.Spec{{Name: "GITHUB_TOKEN", Mode: "mask", InjectHosts: []string{"bound.test"}}},
		func(string) string { return "ghp_quarantineTestSecret0123456789abcd" })
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, policy.Spec{Allow: []string{"127.0.0.1", "bound.test"}, AllowedAddrs: loopbackCarveOut},
		func(o *Options) { o.Credentials, o.Quarantine = set, NewQuarantine(true) })
	hostport := strings.TrimPrefix(up.URL, "http://")
	c, err := net.DialTimeout("tcp", e.addr, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(c, "GET http://%s/ws HTTP/1.1\r\nHost: %s\r\nProxy-Authorization: Basic %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n",
		hostport, hostport, basic("u", testToken))
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 101 {
		t.Fatalf("upgrade: %v %v", resp, err)
	}
	echo := func() (string, error) {
		io.WriteString(c, "ping")
		got := make([]byte, 9)
		_, err := io.ReadFull(br, got)
		return string(got), err
	}
	if got, err := echo(); err != nil || got != "echo:ping" {
		t.Fatalf("before the leak: %q %v", got, err)
	}
	req, _ := http.NewRequest("GET", up.URL+"/", nil)
	req.Header.Set("X-Token", set.Bindings()[0].Sentinel)
	r2, err := e.client(testToken).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	r2.Body.Close()
	if r2.Header.Get("X-Proxy-Error") != "blocked-credential-leak" {
		t.Fatalf("the leak was not blocked: %d", r2.StatusCode)
	}
	if got, err := echo(); err == nil {
		t.Errorf("the upgraded connection still carries bytes after the quarantine: %q", got)
	}
	// Its audit line counts the bytes after the upgrade too.
	var ws *audit.Event
	for i := 0; i < 200 && ws == nil; i++ {
		for _, ev := range e.audit.events() {
			if ev.Path == "/ws" {
				ws = &ev
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	if ws == nil || ws.BytesUp < int64(len("ping")) || ws.BytesDown < int64(len("echo:ping")) {
		t.Errorf("audit line of the WebSocket: %+v, want the upgraded bytes counted", ws)
	}
}

// TestParentProxyRefusal: a parent proxy that refuses the tunnel gives the
// client a 502 naming it, and the audit line keeps verdict allow (the
// policy allowed it) with reason parent-proxy-failed.
func TestParentProxyRefusal(t *testing.T) {
	refusing := tcpServer(t, func(c net.Conn) {
		defer c.Close()
		http.ReadRequest(bufio.NewReader(c))
		io.WriteString(c, "HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n")
	})
	parent, err := ParseParent("http://"+refusing, "", "")
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, policy.Spec{Allow: []string{"far.test"}}, func(o *Options) { o.Parent = parent })
	cresp, _ := rawConnect(t, e.addr, "far.test:443", testToken)
	if cresp.StatusCode != http.StatusBadGateway || cresp.Header.Get("X-Moat-Reason") != "parent-proxy-failed" {
		t.Errorf("CONNECT through a refusing parent: %d %q, want 502 parent-proxy-failed", cresp.StatusCode, cresp.Header.Get("X-Moat-Reason"))
	}
	ev := e.audit.events()
	if len(ev) != 1 || ev[0].Verdict != "allow" || ev[0].Reason != "parent-proxy-failed" {
		t.Errorf("audit: %+v, want one allow line with reason parent-proxy-failed", ev)
	}
}
