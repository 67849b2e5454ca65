package gateway

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/moat-dev/moat/ca"
	"github.com/moat-dev/moat/gateway/policy"
	"github.com/moat-dev/moat/mitm"
)

// TestInspectedConnect: a CONNECT to an inspected host is terminated with
// moat's CA; bytes that are not TLS (ssh, say) fall back to an opaque
// tunnel under the same decision; without an interceptor the Inspect
// decision is refused (fail closed).
func TestInspectedConnect(t *testing.T) {
	echo := tcpServer(t, func(c net.Conn) { io.Copy(c, c); c.Close() })
	auth, err := ca.LoadOrCreate(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	rules, _ := mitm.CompileRules(nil, nil)
	spec := policy.Spec{Allow: []string{"127.0.0.1"}, InspectAll: true}
	e := newEnv(t, spec, func(o *Options) {
		i, err := mitm.New(mitm.Options{CA: auth, Rules: rules, Dial: o.Dialer.DialContext})
		if err != nil {
			t.Fatal(err)
		}
		o.Interceptor = i
	})
	connect := func(addr string) (net.Conn, *bufio.Reader) {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(5 * time.Second))
		io.WriteString(c, "CONNECT "+echo+" HTTP/1.1\r\nHost: x\r\nProxy-Authorization: Basic "+basic("u", testToken)+"\r\n\r\n")
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, &http.Request{Method: "CONNECT"})
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != 200 {
			return c, nil
		}
		return c, br
	}
	c, br := connect(e.addr)
	defer c.Close()
	io.WriteString(c, "SSH-2.0-test\r\n")
	line, err := br.ReadString('\n')
	if err != nil || line != "SSH-2.0-test\r\n" {
		t.Errorf("non-TLS bytes through an inspected CONNECT: %q %v", line, err)
	}
	// TLS is terminated by moat's CA.
	c2, br2 := connect(e.addr)
	defer c2.Close()
	tc := tls.Client(&bufConn{Conn: c2, r: br2}, &tls.Config{ServerName: "127.0.0.1", RootCAs: auth.Pool()})
	if err := tc.Handshake(); err != nil {
		t.Errorf("TLS through an inspected CONNECT: %v", err)
	} else if issuer := tc.ConnectionState().PeerCertificates[0].Issuer.String(); issuer != auth.Certificate().Subject.String() {
		t.Errorf("leaf issued by %q, want moat's CA", issuer)
	}

	// No interceptor: refused.
	plain := newEnv(t, spec, nil)
	c3, br3 := connect(plain.addr)
	defer c3.Close()
	if br3 != nil {
		t.Errorf("Inspect decision without an interceptor was tunnelled")
	}
}

type bufConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// TestInspectedConnectRulesHaveNoOpaqueBypass: a host with per-request
// rules must not be reachable with plaintext through CONNECT.
func TestInspectedConnectRulesHaveNoOpaqueBypass(t *testing.T) {
	var hits atomic.Int64
	up, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer up.Close()
	go func() {
		for {
			c, err := up.Accept()
			if err != nil {
				return
			}
			hits.Add(1)
			c.Close()
		}
	}()
	auth, _ := ca.LoadOrCreate(t.TempDir())
	rules, err := mitm.CompileRules([]mitm.Rule{{ID: "ro", Host: "127.0.0.1",
		Allow: []mitm.Match{{Methods: []string{"GET"}, Path: "/**"}}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, policy.Spec{Allow: []string{"127.0.0.1"}, Inspect: []string{"127.0.0.1"}}, func(o *Options) {
		i, err := mitm.New(mitm.Options{CA: auth, Rules: rules, Dial: o.Dialer.DialContext})
		if err != nil {
			t.Fatal(err)
		}
		o.Interceptor = i
	})
	c, err := net.Dial("tcp", e.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	io.WriteString(c, "CONNECT "+up.Addr().String()+" HTTP/1.1\r\nHost: x\r\nProxy-Authorization: Basic "+basic("u", testToken)+"\r\n\r\n")
	br := bufio.NewReader(c)
	if resp, err := http.ReadResponse(br, &http.Request{Method: "CONNECT"}); err != nil || resp.StatusCode != 200 {
		t.Fatalf("CONNECT: %v %v", resp, err)
	}
	io.WriteString(c, "DELETE /x HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
	io.ReadAll(br)
	if n := hits.Load(); n != 0 {
		t.Errorf("plaintext through an inspected CONNECT reached the upstream %d times", n)
	}
}

// TestBudgetsInsideTLS: every request inside a terminated connection
// counts against network.budgets (requests and bytes), not only the
// CONNECT that opened it.
func TestBudgetsInsideTLS(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "hello, budget") // 13 bytes
	}))
	defer srv.Close()
	roots := x509.NewCertPool()
	roots.AddCert(srv.Certificate())
	auth, err := ca.LoadOrCreate(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	rules, _ := mitm.CompileRules(nil, nil)
	for _, tc := range []struct {
		name   string
		budget Budget
		ok     int // requests answered 200 before the 403
	}{
		// The CONNECT is one of the three.
		{"requests", Budget{Pattern: "127.0.0.1", Requests: 3, BytesUp: -1, BytesDown: -1}, 2},
		{"bytes", Budget{Pattern: "127.0.0.1", Requests: -1, BytesUp: -1, BytesDown: 20}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, policy.Spec{Allow: []string{"127.0.0.1"}, InspectAll: true, AllowedAddrs: loopbackCarveOut}, func(o *Options) {
				i, err := mitm.New(mitm.Options{CA: auth, Rules: rules, Dial: o.Dialer.DialContext, UpstreamRoots: roots})
				if err != nil {
					t.Fatal(err)
				}
				o.Interceptor = i
				o.Budgets = []Budget{tc.budget}
			})
			c := e.client(testToken)
			tr := c.Transport.(*http.Transport)
			tr.DisableKeepAlives = false
			tr.TLSClientConfig = &tls.Config{RootCAs: auth.Pool()}
			for i := 0; i <= tc.ok; i++ {
				resp, err := c.Get(srv.URL + "/")
				if err != nil {
					t.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				want := 200
				if i == tc.ok {
					want = 403
				}
				if resp.StatusCode != want || (want == 403 && resp.Header.Get("X-Moat-Reason") != mitm.CodeBudget) {
					t.Errorf("request %d: %d %q, want %d", i, resp.StatusCode, resp.Header.Get("X-Moat-Reason"), want)
				}
			}
			tr.CloseIdleConnections()
			connects := 0
			for _, ev := range e.audit.events() {
				if ev.Proto == "connect" {
					connects++
				}
			}
			if connects > 1 {
				t.Errorf("%d CONNECTs: the requests did not share one terminated connection", connects)
			}
		})
	}
}

// TestBudgetNotSpentByRefusedRequests: a plain-HTTP request to an
// inspected host that a rule refuses does not spend the request budget,
// as inside terminated TLS.
func TestBudgetNotSpentByRefusedRequests(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	defer srv.Close()
	auth, err := ca.LoadOrCreate(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	rules, err := mitm.CompileRules([]mitm.Rule{{ID: "ro", Host: "127.0.0.1", Allow: []mitm.Match{{Methods: []string{"GET"}}}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, policy.Spec{Allow: []string{"127.0.0.1"}, Inspect: []string{"127.0.0.1"}, AllowedAddrs: loopbackCarveOut}, func(o *Options) {
		i, err := mitm.New(mitm.Options{CA: auth, Rules: rules, Dial: o.Dialer.DialContext})
		if err != nil {
			t.Fatal(err)
		}
		o.Interceptor = i
		o.Budgets = []Budget{{Pattern: "127.0.0.1", Requests: 1, BytesUp: -1, BytesDown: -1}}
	})
	c := e.client(testToken)
	do := func(method string) (int, string) {
		req, _ := http.NewRequest(method, srv.URL+"/", nil)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode, resp.Header.Get("X-Moat-Reason")
	}
	for i := 0; i < 2; i++ {
		if code, reason := do("POST"); code != 403 || reason == mitm.CodeBudget {
			t.Errorf("POST %d: %d %q, want a rule's 403", i, code, reason)
		}
	}
	if code, _ := do("GET"); code != 200 {
		t.Errorf("GET after two refused POSTs: %d, want 200 (the budget of 1 untouched)", code)
	}
	if code, reason := do("GET"); code != 403 || reason != mitm.CodeBudget {
		t.Errorf("second GET: %d %q, want 403 %s", code, reason, mitm.CodeBudget)
	}
}
