package mitm

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moat-dev/moat/ca"
	"github.com/moat-dev/moat/gateway/audit"
	"github.com/moat-dev/moat/gateway/policy"
	"github.com/moat-dev/moat/resolver"
)

type memSink struct {
	mu  sync.Mutex
	evs []audit.Event
}

func (s *memSink) Write(e audit.Event) {
	s.mu.Lock()
	s.evs = append(s.evs, e)
	s.mu.Unlock()
}

func (s *memSink) events() []audit.Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]audit.Event(nil), s.evs...)
}

// waitEvents waits (bounded) for n audit events: the handler writes its
// line after the response, so the client can see the response first.
func (s *memSink) waitEvents(t *testing.T, n int) []audit.Event {
	t.Helper()
	for range 200 {
		if evs := s.events(); len(evs) >= n {
			return evs
		}
		time.Sleep(10 * time.Millisecond)
	}
	evs := s.events()
	t.Fatalf("got %d audit events, want %d: %+v", len(evs), n, evs)
	return nil
}

func decision(t testing.TB, host string) policy.Decision {
	t.Helper()
	p, err := policy.New(policy.Spec{Allow: []string{host}, InspectAll: true})
	if err != nil {
		t.Fatal(err)
	}
	d := p.Decide(policy.Request{Proto: policy.ProtoConnect, Host: host, Port: 443})
	if d.Verdict != policy.Inspect {
		t.Fatalf("Decide(%s) = %v, want inspect", host, d.Verdict)
	}
	return d
}

// harness is an interceptor in front of one TLS upstream on loopback.
// The "front" listener plays the gateway after CONNECT: it hands each
// accepted connection to Serve.
type harness struct {
	t      testing.TB
	ca     *ca.Authority
	up     *httptest.Server
	i      *Interceptor
	d      policy.Decision
	sink   *memSink
	front  net.Listener
	opaque func(net.Conn)
	wg     sync.WaitGroup
}

type harnessOpts struct {
	rules    []Rule
	git      []GitRule
	roots    *x509.CertPool // nil: the upstream's own
	dial     func(ctx context.Context, d policy.Decision) (net.Conn, netip.AddrPort, error)
	upstream *httptest.Server
	host     string
	track    func(client string, c net.Conn) net.Conn
}

func upstreamEcho() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Upstream-Proto", r.Proto)
		w.Header().Set("X-Upstream-Host", r.Host)
		body, _ := io.ReadAll(r.Body)
		_, _ = io.WriteString(w, "upstream "+r.Method+" "+r.URL.RequestURI()+" "+string(body))
	})
}

func newHarness(t testing.TB, o harnessOpts) *harness {
	t.Helper()
	h := &harness{t: t, sink: &memSink{}}
	auth, err := ca.LoadOrCreate(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	h.ca = auth
	h.up = o.upstream
	if h.up == nil {
		h.up = httptest.NewUnstartedServer(upstreamEcho())
		h.up.EnableHTTP2 = true
		h.up.StartTLS()
		t.Cleanup(h.up.Close)
	}
	roots := o.roots
	if roots == nil {
		roots = x509.NewCertPool()
		roots.AddCert(h.up.Certificate())
	}
	dial := o.dial
	if dial == nil {
		dial = func(ctx context.Context, d policy.Decision) (net.Conn, netip.AddrPort, error) {
			var nd net.Dialer
			c, err := nd.DialContext(ctx, "tcp", h.up.Listener.Addr().String())
			if err != nil {
				return nil, netip.AddrPort{}, err
			}
			return c, netip.MustParseAddrPort(h.up.Listener.Addr().String()), nil
		}
	}
	rs, err := CompileRules(o.rules, o.git)
	if err != nil {
		t.Fatal(err)
	}
	h.i, err = New(Options{CA: auth, Rules: rs, UpstreamRoots: roots, Dial: dial, Audit: h.sink, PolicyHash: "ph"})
	if err != nil {
		t.Fatal(err)
	}
	if o.track != nil {
		h.i.SetUpgradeTracker(o.track)
	}
	host := o.host
	if host == "" {
		host = "example.com"
	}
	h.d = decision(t, host)
	h.front, err = net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		for {
			c, err := h.front.Accept()
			if err != nil {
				return
			}
			h.wg.Add(1)
			go func() {
				defer h.wg.Done()
				h.i.Serve(ctx, c, h.d, Meta{Session: "s1", Client: "c1", Proto: "connect"}, func(c net.Conn) {
					if h.opaque != nil {
						h.opaque(c)
					}
					c.Close()
				})
			}()
		}
	}()
	t.Cleanup(func() {
		cancel()
		h.front.Close()
		h.i.Close()
		h.wg.Wait()
	})
	return h
}

// client returns an HTTP client whose connections go to the front
// listener and trust the moat CA.
func (h *harness) client(h2 bool) *http.Client {
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var nd net.Dialer
			return nd.DialContext(ctx, "tcp", h.front.Addr().String())
		},
		TLSClientConfig:   &tls.Config{RootCAs: h.ca.Pool()},
		ForceAttemptHTTP2: h2,
	}
	if !h2 {
		tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
	}
	h.t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

func do(t *testing.T, c *http.Client, method, url, body string, hdr http.Header) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, vs := range hdr {
		req.Header[k] = vs
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatalf("%s %s: read body: %v", method, url, err)
	}
	return resp, string(b)
}

var readonlyRules = []Rule{{
	ID:    "ro",
	Host:  "example.com",
	Allow: []Match{{Methods: []string{"GET"}, Path: "/repos/**"}},
	Deny:  []Match{{Methods: []string{"*"}, Path: "/repos/*/*/actions/**", Reason: "CI changes are not allowed"}},
}}

func TestInterceptAllowAndDeny(t *testing.T) {
	h := newHarness(t, harnessOpts{rules: readonlyRules})
	c := h.client(false)

	resp, body := do(t, c, "GET", "https://example.com/repos/a/b?token=s3cret", "", nil)
	if resp.StatusCode != 200 || body != "upstream GET /repos/a/b?token=s3cret " {
		t.Errorf("GET allowed: %d %q, want 200 from upstream", resp.StatusCode, body)
	}
	if got := resp.Header.Get("X-Upstream-Host"); got != "example.com" {
		t.Errorf("upstream saw Host %q, want example.com", got)
	}

	tests := []struct {
		name, method, path string
		wantCode, wantRule string
		wantBody           string
	}{
		{"no rule allows", "POST", "/repos/a/b", CodeNoRule, "none", "no rule allows POST /repos/a/b\n"},
		{"deny rule", "GET", "/repos/a/b/actions/runs", CodeRuleDeny, "ro", "CI changes are not allowed\n"},
	}
	for _, tc := range tests {
		resp, body := do(t, c, tc.method, "https://example.com"+tc.path, "payload", nil)
		want := map[string]string{
			"X-Proxy-Error": "blocked-by-sandbox-runtime",
			"X-Moat-Reason": tc.wantCode,
			"X-Moat-Rule":   tc.wantRule,
			"Content-Type":  "text/plain",
		}
		if resp.StatusCode != 403 || body != tc.wantBody {
			t.Errorf("%s: %d %q, want 403 %q", tc.name, resp.StatusCode, body, tc.wantBody)
		}
		for k, v := range want {
			if got := resp.Header.Get(k); got != v {
				t.Errorf("%s: header %s = %q, want %q", tc.name, k, got, v)
			}
		}
	}

	evs := h.sink.waitEvents(t, 3)
	if len(evs) != 3 {
		t.Fatalf("got %d audit events, want 3 (one per request)", len(evs))
	}
	e := evs[0]
	if e.Proto != "mitm" || e.Host != "example.com" || e.Port != 443 || e.Method != "GET" ||
		e.Path != "/repos/a/b?…" || e.Status != 200 || e.Verdict != "allow" || e.Rule != "ro" ||
		e.Session != "s1" || e.Client != "c1" || e.Policy != "ph" || e.Addr == "" || e.BytesDown == 0 {
		t.Errorf("allow event = %+v", e)
	}
	if e := evs[1]; e.Verdict != "deny" || e.Status != 403 || e.Reason != CodeNoRule || e.Method != "POST" {
		t.Errorf("deny event = %+v", e)
	}
	for _, e := range evs {
		if strings.Contains(e.Path, "s3cret") {
			t.Errorf("audit path %q leaks a query value", e.Path)
		}
	}
}

func TestInterceptNoRulesAllowsAll(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	resp, body := do(t, h.client(false), "DELETE", "https://example.com/x", "", nil)
	if resp.StatusCode != 200 || !strings.HasPrefix(body, "upstream DELETE /x") {
		t.Errorf("DELETE to an inspected host without rules: %d %q, want 200", resp.StatusCode, body)
	}
}

func TestInterceptHTTP2(t *testing.T) {
	h := newHarness(t, harnessOpts{rules: readonlyRules})
	c := h.client(true)
	resp, body := do(t, c, "GET", "https://example.com/repos/x", "", nil)
	if resp.ProtoMajor != 2 || resp.StatusCode != 200 || !strings.HasPrefix(body, "upstream GET /repos/x") {
		t.Errorf("h2 GET: %s %d %q, want HTTP/2.0 200 from upstream", resp.Proto, resp.StatusCode, body)
	}
	resp, _ = do(t, c, "POST", "https://example.com/repos/x", "", nil)
	if resp.ProtoMajor != 2 || resp.StatusCode != 403 || resp.Header.Get("X-Proxy-Error") != "blocked-by-sandbox-runtime" {
		t.Errorf("h2 POST: %s %d %v, want HTTP/2.0 403 blocked-by-sandbox-runtime", resp.Proto, resp.StatusCode, resp.Header)
	}
}

func TestInterceptLeafReused(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	for i := range 2 {
		c := h.client(false) // a fresh transport: a new TLS connection
		if resp, _ := do(t, c, "GET", "https://example.com/", "", nil); resp.StatusCode != 200 {
			t.Fatalf("connection %d: status %d", i, resp.StatusCode)
		}
	}
	if got := h.ca.Issued(); got != 1 {
		t.Errorf("Issued() after two connections = %d, want 1", got)
	}
}

func TestInterceptSNIMismatch(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	conn, err := net.Dial("tcp", h.front.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	tc := tls.Client(conn, &tls.Config{ServerName: "other.com", RootCAs: h.ca.Pool()})
	_ = tc.SetDeadline(time.Now().Add(10 * time.Second))
	if err := tc.Handshake(); err == nil {
		t.Fatal("handshake with SNI other.com on a CONNECT to example.com succeeded")
	}
	evs := h.sink.waitEvents(t, 1)
	if e := evs[0]; e.Verdict != "deny" || e.Reason != CodeSNIMismatch || e.Host != "example.com" {
		t.Errorf("audit event = %+v, want deny sni-mismatch", e)
	}
	if h.ca.Issued() != 0 {
		t.Error("a leaf was issued for a refused handshake")
	}
}

func TestInterceptNoSNI(t *testing.T) {
	h := newHarness(t, harnessOpts{host: "127.0.0.1"})
	conn, err := net.Dial("tcp", h.front.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// An IP ServerName sends no SNI; the leaf must be for the CONNECT host.
	tc := tls.Client(conn, &tls.Config{ServerName: "127.0.0.1", RootCAs: h.ca.Pool()})
	_ = tc.SetDeadline(time.Now().Add(10 * time.Second))
	if err := tc.Handshake(); err != nil {
		t.Fatalf("handshake without SNI: %v", err)
	}
}

func TestInterceptHostHeaderMismatch(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	resp, body := do(t, h.client(false), "GET", "https://example.com/", "", http.Header{})
	if resp.StatusCode != 200 {
		t.Fatalf("baseline: %d %q", resp.StatusCode, body)
	}
	req, _ := http.NewRequest("GET", "https://example.com/", nil)
	req.Host = "fronted.test"
	resp, err := h.client(false).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 403 || resp.Header.Get("X-Moat-Reason") != CodeHostMismatch {
		t.Errorf("Host: fronted.test: %d %s %q, want 403 host-mismatch", resp.StatusCode, resp.Header.Get("X-Moat-Reason"), b)
	}
}

func TestInterceptOpaque(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	got := make(chan []byte, 1)
	h.opaque = func(c net.Conn) {
		b := make([]byte, 64)
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		n, _ := io.ReadAtLeast(c, b, len("SSH-2.0-test\r\n"))
		_, _ = c.Write([]byte("SSH-2.0-server\r\n"))
		got <- b[:n]
	}
	conn, err := net.Dial("tcp", h.front.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := conn.Write([]byte("SSH-2.0-test\r\n")); err != nil {
		t.Fatal(err)
	}
	reply := make([]byte, len("SSH-2.0-server\r\n"))
	if _, err := io.ReadFull(conn, reply); err != nil || string(reply) != "SSH-2.0-server\r\n" {
		t.Errorf("reply through opaque = %q, %v", reply, err)
	}
	if b := <-got; string(b) != "SSH-2.0-test\r\n" {
		t.Errorf("opaque handler read %q, want the client's bytes including the peeked one", b)
	}
}

func TestInterceptUpstreamUntrusted(t *testing.T) {
	h := newHarness(t, harnessOpts{roots: x509.NewCertPool()})
	resp, body := do(t, h.client(false), "GET", "https://example.com/", "", nil)
	if resp.StatusCode != 502 || !strings.Contains(body, "upstream certificate not trusted: x509:") ||
		resp.Header.Get("X-Moat-Reason") != CodeUpstreamCert {
		t.Errorf("untrusted upstream: %d %s %q, want a readable 502", resp.StatusCode, resp.Header.Get("X-Moat-Reason"), body)
	}
	if e := h.sink.waitEvents(t, 1)[0]; e.Status != 502 || e.Reason != CodeUpstreamCert {
		t.Errorf("audit = %+v, want status 502 reason %s", e, CodeUpstreamCert)
	}
}

func TestInterceptAddrDenied(t *testing.T) {
	denied := func(ctx context.Context, d policy.Decision) (net.Conn, netip.AddrPort, error) {
		return nil, netip.AddrPort{}, &resolver.AddrDeniedError{Host: d.Host.String(), Verdicts: []policy.AddrVerdict{{
			Reason: policy.ReasonLoopback, Addr: netip.MustParseAddrPort("127.0.0.1:443"), Prefix: netip.MustParsePrefix("127.0.0.0/8"),
		}}}
	}
	h := newHarness(t, harnessOpts{dial: denied})
	resp, body := do(t, h.client(false), "GET", "https://example.com/", "", nil)
	if resp.StatusCode != 403 || resp.Header.Get("X-Proxy-Error") != "blocked-by-resolved-address" ||
		!strings.HasPrefix(body, "Connection blocked: destination resolved to a denied address") {
		t.Errorf("denied address: %d %v %q", resp.StatusCode, resp.Header, body)
	}
}

func TestInterceptDialFailure(t *testing.T) {
	failing := func(ctx context.Context, d policy.Decision) (net.Conn, netip.AddrPort, error) {
		return nil, netip.AddrPort{}, errors.New("connection refused")
	}
	h := newHarness(t, harnessOpts{dial: failing})
	resp, body := do(t, h.client(false), "GET", "https://example.com/", "", nil)
	if resp.StatusCode != 502 || !strings.Contains(body, "connection refused") {
		t.Errorf("dial failure: %d %q, want 502 naming the error", resp.StatusCode, body)
	}
}

func TestNewFailsClosed(t *testing.T) {
	auth, err := ca.LoadOrCreate(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	rs, _ := CompileRules(nil, nil)
	dial := func(context.Context, policy.Decision) (net.Conn, netip.AddrPort, error) {
		return nil, netip.AddrPort{}, nil
	}
	tests := []struct {
		name string
		o    Options
		want error
	}{
		{"no CA", Options{Rules: rs, Dial: dial}, ErrNoCA},
		{"no dial", Options{CA: auth, Rules: rs}, ErrNoDial},
		{"no rules", Options{CA: auth, Dial: dial}, ErrNoRules},
	}
	for _, tc := range tests {
		if _, err := New(tc.o); !errors.Is(err, tc.want) {
			t.Errorf("%s: New = %v, want %v", tc.name, err, tc.want)
		}
	}
}

func TestServeRefusesDenyDecision(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	a, b := net.Pipe()
	defer b.Close()
	done := make(chan struct{})
	go func() {
		h.i.Serve(context.Background(), a, policy.Decision{}, Meta{}, func(net.Conn) { t.Error("opaque called for a deny decision") })
		close(done)
	}()
	<-done
	if _, err := a.Write([]byte{1}); err == nil {
		t.Error("connection still open after Serve with a zero Decision")
	}
}

func TestFilterPlainHTTP(t *testing.T) {
	rs := mustRules(t, readonlyRules, nil)
	auth, _ := ca.LoadOrCreate(t.TempDir())
	i, err := New(Options{CA: auth, Rules: rs, Dial: func(context.Context, policy.Decision) (net.Conn, netip.AddrPort, error) {
		return nil, netip.AddrPort{}, errors.New("unused")
	}})
	if err != nil {
		t.Fatal(err)
	}
	d := decision(t, "example.com")
	r := httptest.NewRequest("POST", "http://example.com/repos/a", nil)
	dec, reply := i.Filter(r, d, "c1")
	if dec.Allowed || reply == nil {
		t.Fatalf("Filter(POST) = %+v, %v; want a refusal", dec, reply)
	}
	w := httptest.NewRecorder()
	reply.ServeHTTP(w, r)
	if w.Code != 403 || w.Header().Get("X-Proxy-Error") != "blocked-by-sandbox-runtime" || w.Body.String() != "no rule allows POST /repos/a\n" {
		t.Errorf("refusal = %d %v %q", w.Code, w.Header(), w.Body.String())
	}
	r = httptest.NewRequest("GET", "http://example.com/repos/a", nil)
	if dec, reply := i.Filter(r, d, "c1"); !dec.Allowed || reply != nil {
		t.Errorf("Filter(GET) = %+v, %v; want allowed", dec, reply)
	}
}
