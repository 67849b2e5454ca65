package gateway

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/base64"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"time"

	"github.com/elazarl/goproxy"

	"github.com/moat-dev/moat/gateway/audit"
	"github.com/moat-dev/moat/gateway/policy"
	"github.com/moat-dev/moat/gateway/policy/canon"
	"github.com/moat-dev/moat/mitm"
)

// reqState carries one plain-HTTP request's identity and decision from the
// goproxy handlers to the transport's dialer and the audit line.
type reqState struct {
	id         identity
	dec        policy.Decision
	host       string
	port       uint16
	addr       string
	credential string // credentials injected, or the one a leak was blocked for
	budget     []int  // budget rules to charge
	reason     string
	rule       string
	denied     bool
	decided    bool
}

type stateKey struct{}

func stateFrom(ctx context.Context) *reqState {
	st, _ := ctx.Value(stateKey{}).(*reqState)
	return st
}

func (g *Gateway) setupHTTP() {
	newTr := func() *http.Transport {
		return &http.Transport{
			// Never the environment's proxy: the gateway is the proxy.
			Proxy:                 nil,
			DialContext:           g.transportDial,
			MaxIdleConns:          4 * g.opt.MaxIdlePerHost,
			MaxIdleConnsPerHost:   g.opt.MaxIdlePerHost,
			IdleConnTimeout:       90 * time.Second,
			TLSHandshakeTimeout:   10 * time.Second,
			ExpectContinueTimeout: time.Second,
			// Bodies pass through byte for byte: no transparent gzip.
			DisableCompression: true,
			TLSClientConfig:    &tls.Config{MinVersion: tls.VersionTLS12},
		}
	}
	g.tr = &mitm.PerClientTransport{
		Key: func(r *http.Request) string {
			if st := stateFrom(r.Context()); st != nil {
				return st.id.client
			}
			return ""
		},
		New: newTr,
	}
	g.pool = &pool{
		dial: func(ctx context.Context, _ string) (net.Conn, error) {
			return g.transportDial(ctx, "tcp", "")
		},
		fallback: g.tr,
		maxIdle:  g.opt.MaxIdlePerHost,
		maxTotal: 4 * g.opt.MaxIdlePerHost,
		idleTTL:  90 * time.Second,
		idle:     make(map[string][]*poolConn),
	}
	poolRT := goproxy.RoundTripperFunc(func(req *http.Request, _ *goproxy.ProxyCtx) (*http.Response, error) {
		return g.pool.RoundTrip(req)
	})
	p := goproxy.NewProxyHttpServer()
	// goproxy's own transport is never used (every request goes through
	// the pool's RoundTripper); it must still not read proxy variables.
	p.Tr = newTr()
	p.ConnectDial = nil // CONNECT is served by serveConnect, never by goproxy's env dialer
	p.Logger = log.New(io.Discard, "", 0)
	p.KeepAcceptEncoding = true
	p.KeepDestinationHeaders = true
	p.NonproxyHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		badRequestReply("this is moat's gateway: send proxy requests with an absolute URL (http://host/path)").write(w)
	})
	g.poolRT = poolRT
	p.OnRequest().DoFunc(g.onRequest)
	p.OnResponse().DoFunc(g.onResponse)
	g.proxy = p
	g.http = &http.Server{
		Handler:           http.HandlerFunc(g.serveHTTP),
		ReadHeaderTimeout: g.opt.HeaderTimeout,
		IdleTimeout:       g.opt.IdleTimeout,
		MaxHeaderBytes:    g.opt.MaxHeaderBytes,
		ErrorLog:          log.New(io.Discard, "", 0),
	}
}

// proxyCredentials returns the Basic credentials of Proxy-Authorization.
func proxyCredentials(r *http.Request) (user, pass string, ok bool) {
	v := r.Header.Get("Proxy-Authorization")
	const prefix = "Basic "
	if len(v) < len(prefix) || !strings.EqualFold(v[:len(prefix)], prefix) {
		return "", "", false
	}
	b, err := base64.StdEncoding.DecodeString(strings.TrimSpace(v[len(prefix):]))
	if err != nil {
		return "", "", false
	}
	user, pass, ok = strings.Cut(string(b), ":")
	return user, pass, ok
}

func (g *Gateway) serveHTTP(w http.ResponseWriter, r *http.Request) {
	user, pass, _ := proxyCredentials(r)
	id, ok := g.authenticate(user, pass)
	if !ok {
		authReply().write(w)
		return
	}
	r.Header.Del("Proxy-Authorization")
	if g.opt.Quarantine.Active(id.client) {
		quarantineReply().write(w)
		host := sanitize(r.Host)
		if g.opt.Credentials.CheckHost(host) != nil {
			host = "(redacted)"
		}
		g.audit.Write(audit.Event{Session: id.session, Client: id.client, Proto: "http", Host: host,
			Verdict: "deny", Reason: reasonQuarantined, Policy: id.pol.Hash()})
		return
	}
	if r.Method == http.MethodConnect {
		g.serveConnect(w, r, id)
		return
	}
	start := time.Now()
	st := &reqState{id: id}
	ctx := context.WithValue(r.Context(), stateKey{}, st)
	cw := &countingWriter{ResponseWriter: w, track: func(c net.Conn) net.Conn { return g.trackUpgraded(id.client, c) }}
	// Count what the client really sends: Content-Length is absent for a
	// chunked upload.
	body := &countingReader{ReadCloser: r.Body}
	if r.Body != nil && r.Body != http.NoBody {
		// (NoBody stays NoBody: it tells the outgoing request there is
		// no body to probe for.)
		r.Body = body
	}
	g.proxy.ServeHTTP(cw, r.WithContext(ctx))
	up, down := body.n, cw.n
	if cw.hijacked != nil {
		// An upgraded (WebSocket) connection: goproxy returns when one
		// direction ends and leaves the client's side open.
		cw.hijacked.Close()
		if tc, ok := cw.hijacked.(*trackedConn); ok {
			up, down = up+tc.up.Load(), down+tc.down.Load()
		}
	}
	if !st.decided {
		return // not a proxy request
	}
	e := g.event(policy.ProtoHTTP, id, st.dec, st.host, st.port)
	if st.denied {
		e.Verdict, e.Reason, e.Rule = "deny", st.reason, st.rule
	} else {
		e.Addr = st.addr
		if st.reason != "" { // allowed, but the upstream failed
			e.Reason, e.Rule = st.reason, st.rule
		}
	}
	g.budgets.charge(id.client, st.budget, up, down)
	e.Credential = st.credential
	e.Method = r.Method
	e.Path = redactPath(r.URL.EscapedPath(), r.URL.RawQuery != "")
	if st.reason == reasonCredentialLeak {
		e.Path = "(redacted)" // it may be where the sentinel was
	}
	e.Status = cw.status
	e.BytesUp = up
	e.BytesDown = down
	e.DurationMS = msSince(start)
	g.audit.Write(e)
}

func msSince(t time.Time) float64 {
	return float64(time.Since(t).Microseconds()) / 1000
}

// redactPath drops query values: they may carry secrets.
func redactPath(p string, hasQuery bool) string {
	if len(p) > 2048 {
		p = p[:2048] + "…"
	}
	if hasQuery {
		return p + "?…"
	}
	return p
}

// defaultPort is the port a URL scheme implies.
func defaultPort(scheme string) uint16 {
	if scheme == "https" || scheme == "wss" {
		return 443
	}
	return 80
}

// onRequest decides a plain-HTTP request. A denial is answered here; an
// allowed request continues to the transport, whose dialer uses the
// decision stored in the request context.
func (g *Gateway) onRequest(r *http.Request, ctx *goproxy.ProxyCtx) (*http.Request, *http.Response) {
	st := stateFrom(r.Context())
	if st == nil { // cannot happen through serveHTTP; fail closed
		return r, badRequestReply("no request state").response(r)
	}
	st.decided = true
	st.host = r.URL.Hostname()
	port := defaultPort(r.URL.Scheme)
	if ps := r.URL.Port(); ps != "" {
		n, err := strconv.ParseUint(ps, 10, 16)
		if err != nil || n == 0 || (len(ps) > 1 && ps[0] == '0') {
			st.denied, st.reason = true, policy.ReasonBadPort.Code()
			return r, badRequestReply("bad port in request URL").response(r)
		}
		port = uint16(n)
	}
	st.port = port
	if r.URL.Scheme != "http" && r.URL.Scheme != "https" {
		st.denied, st.reason = true, "bad-scheme"
		return r, badRequestReply("only http and https URLs can be proxied").response(r)
	}
	if le := g.opt.Credentials.CheckHost(st.host); le != nil {
		st.host = "(redacted)" // the host carries the sentinel
		st.denied, st.reason, st.credential = true, reasonCredentialLeak, le.Credential
		g.opt.Quarantine.Leak(st.id.client, le.Credential)
		return r, leakReply(le.Credential, "").response(r)
	}
	st.dec = st.id.pol.Decide(policy.Request{Proto: policy.ProtoHTTP, Host: st.host, Port: port, Client: st.id.client})
	if st.dec.Verdict == policy.Deny {
		st.denied, st.reason, st.rule = true, st.dec.Reason.Code(), st.dec.Rule
		return r, denyReply(st.dec, st.host, port).response(r)
	}
	// The Host header must name the host we decided on: no domain fronting
	// through a permitted address.
	r.Host = canon.HostPort(st.dec.Host, port)
	if port == defaultPort(r.URL.Scheme) {
		r.Host = st.dec.Host.String()
		if st.dec.Host.Addr.Is6() {
			r.Host = "[" + r.Host + "]"
		}
	}
	r.URL.Host = canon.HostPort(st.dec.Host, port)
	mitm.StripHopByHop(r.Header)
	// Trailers arrive after the body, past every check: drop them.
	r.Trailer = nil
	ctx.RoundTripper = g.poolRT
	if st.dec.Verdict != policy.Inspect && g.opt.Credentials != nil {
		// Not bound here (bound hosts are inspected): any sentinel in the
		// request is a leak attempt.
		if _, err := g.opt.Credentials.Apply(r, st.dec.Host.String(), true, false); err != nil {
			st.denied, st.reason = true, reasonCredentialLeak
			st.credential = leakName(err)
			g.opt.Quarantine.Leak(st.id.client, st.credential)
			return r, leakReply(st.credential, st.dec.Host.String()).response(r)
		}
	}
	if st.dec.Verdict == policy.Inspect {
		if g.opt.Interceptor == nil {
			st.denied, st.reason = true, reasonNoInterceptor
			return r, noInterceptorReply().response(r)
		}
		rd, refuse := g.opt.Interceptor.Filter(r, st.dec, st.id.client)
		st.rule = rd.RuleID
		st.credential = strings.Join(rd.Injected, ",")
		if refuse != nil {
			st.denied, st.reason = true, rd.Code
			rec := httptest.NewRecorder()
			refuse.ServeHTTP(rec, r)
			return r, rec.Result()
		}
	}
	// Last, as inside terminated TLS: a request the rules refuse does not
	// spend the budget.
	matched, spent := g.budgets.admit(st.id.client, st.dec)
	if spent != nil {
		st.denied, st.reason, st.rule = true, reasonBudget, "budget:"+spent.Pattern
		return r, budgetReply(spent).response(r)
	}
	st.budget = matched
	return r, nil
}

// inspectConnect answers CONNECT and hands the connection to the
// interceptor, which terminates TLS and decides every request inside.
// Without an interceptor an Inspect decision is refused: fail closed.
func (g *Gateway) inspectConnect(w http.ResponseWriter, id identity, d policy.Decision, e audit.Event, start time.Time) (up, down int64) {
	if g.opt.Interceptor == nil {
		noInterceptorReply().write(w)
		e.Verdict, e.Reason = "deny", reasonNoInterceptor
		g.audit.Write(e)
		return 0, 0
	}
	client, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return 0, 0
	}
	if _, err := io.WriteString(client, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		client.Close()
		return 0, 0
	}
	conn := client
	if brw.Reader.Buffered() > 0 {
		conn = &peekedConn{Conn: client, r: brw.Reader}
	}
	return g.intercept(conn, id, d, e, start, "connect")
}

// intercept runs the interceptor on an answered tunnel. Non-TLS bytes fall
// back to an opaque tunnel under the same decision.
func (g *Gateway) intercept(conn net.Conn, id identity, d policy.Decision, e audit.Event, start time.Time, proto string) (up, down int64) {
	defer g.track(conn, conn)()
	opaque := func(c net.Conn) {
		if !g.opt.Interceptor.OpaqueAllowed(d) {
			// Plaintext to a host with per-request rules or bound
			// credentials would bypass them all.
			e.Verdict, e.Reason = "deny", reasonNotTLS
			c.Close()
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		upstream, addr, err := g.dialUpstream(ctx, id, d, false)
		cancel()
		if err != nil {
			_, reason, rule := dialReply(err)
			e.Verdict, e.Reason, e.Rule = dialVerdict(err), reason, rule
			c.Close()
			return
		}
		e.Verdict, e.Addr = "allow", addr.String()
		e.BytesUp, e.BytesDown = g.pipe(id, c, upstream)
	}
	g.opt.Interceptor.Serve(context.Background(), conn, d, mitm.Meta{Session: id.session, Client: id.client, Proto: proto}, opaque)
	e.DurationMS = msSince(start)
	g.audit.Write(e)
	return e.BytesUp, e.BytesDown
}

// onResponse turns a transport error into the gateway's own reply: 403 for
// a refused resolved address, 502 for an unreachable upstream.
func (g *Gateway) onResponse(resp *http.Response, ctx *goproxy.ProxyCtx) *http.Response {
	if resp != nil || ctx.Error == nil {
		return resp
	}
	rep, reason, rule := dialReply(ctx.Error)
	if st := stateFrom(ctx.Req.Context()); st != nil {
		st.denied, st.reason, st.rule = dialVerdict(ctx.Error) == "deny", reason, rule
	}
	g.log.Debug("upstream request failed", "host", sanitize(ctx.Req.URL.Host), "err", ctx.Error)
	return rep.response(ctx.Req)
}

// transportDial is the http.Transport's only way to reach the network: it
// dials the decision stored in the request context through the checked
// dialer, never the name.
func (g *Gateway) transportDial(ctx context.Context, _, _ string) (net.Conn, error) {
	st := stateFrom(ctx)
	if st == nil || st.dec.Verdict == policy.Deny {
		return nil, errNoDecision
	}
	// No write to st here: the Transport may finish a dial in the
	// background, after the request used another connection.
	c, _, err := g.dialUpstream(ctx, st.id, st.dec, true)
	return c, err
}

// serveConnect handles CONNECT itself rather than through goproxy's hijack
// action, because that action drops bytes a client pipelines after the
// CONNECT request.
func (g *Gateway) serveConnect(w http.ResponseWriter, r *http.Request, id identity) {
	start := time.Now()
	// r.RequestURI is the raw authority: r.URL.Host would have parsed
	// "user@evil.test:443" as evil.test.
	host, port, err := canon.SplitHostPort(r.RequestURI)
	if err != nil {
		g.audit.Write(audit.Event{Session: id.session, Client: id.client, Proto: "connect",
			Host: sanitize(r.RequestURI), Verdict: "deny", Reason: policy.ReasonMalformedHost.Code(), Policy: id.pol.Hash()})
		badRequestReply("CONNECT needs host:port").write(w)
		return
	}
	if le := g.opt.Credentials.CheckHost(host); le != nil {
		// A sentinel as a host label (TOKEN.evil.test) exfiltrates
		// through DNS or SNI: never decide, resolve or dial it.
		leakReply(le.Credential, "").write(w)
		g.opt.Quarantine.Leak(id.client, le.Credential)
		g.audit.Write(audit.Event{Session: id.session, Client: id.client, Proto: "connect", Host: "(redacted)",
			Port: port, Verdict: "deny", Reason: reasonCredentialLeak, Credential: le.Credential, Policy: id.pol.Hash()})
		return
	}
	d := id.pol.Decide(policy.Request{Proto: policy.ProtoConnect, Host: host, Port: port, Client: id.client})
	e := g.event(policy.ProtoConnect, id, d, host, port)
	if d.Verdict == policy.Deny {
		if d.Reason == policy.ReasonMalformedHost {
			badRequestReply("malformed host in CONNECT target").write(w)
		} else {
			denyReply(d, host, port).write(w)
		}
		e.DurationMS = msSince(start)
		g.audit.Write(e)
		return
	}
	matched, spent := g.budgets.admit(id.client, d)
	if spent != nil {
		budgetReply(spent).write(w)
		e.Verdict, e.Reason, e.Rule = "deny", reasonBudget, "budget:"+spent.Pattern
		g.audit.Write(e)
		return
	}
	if d.Verdict == policy.Inspect {
		up, down := g.inspectConnect(w, id, d, e, start)
		// Bytes of an opaque fallback; each request inside TLS is
		// admitted and charged by the interceptor (SetBudget).
		g.budgets.charge(id.client, matched, up, down)
		return
	}
	dctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	upstream, addr, err := g.dialUpstream(dctx, id, d, false)
	cancel()
	if err != nil {
		rep, reason, rule := dialReply(err)
		e.Verdict, e.Reason, e.Rule = dialVerdict(err), reason, rule
		rep.write(w)
		e.DurationMS = msSince(start)
		g.audit.Write(e)
		g.log.Debug("connect failed", "host", e.Host, "err", err)
		return
	}
	e.Addr = addr.String()
	client, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		upstream.Close()
		return
	}
	untrack := g.trackTunnel(&tunnel{a: client, b: upstream, client: id.client, opaque: true})
	_, err = io.WriteString(client, "HTTP/1.1 200 Connection established\r\n\r\n")
	if err == nil && brw.Reader.Buffered() > 0 {
		// Bytes the client sent right after the CONNECT request.
		b, _ := brw.Reader.Peek(brw.Reader.Buffered())
		_, err = upstream.Write(b)
		e.BytesUp += int64(len(b))
	}
	if err != nil {
		untrack() // closes both
		return
	}
	raw := client
	if pc, ok := client.(*peekedConn); ok {
		if c, ok := pc.raw(); ok {
			raw = c
		}
	}
	up, down := g.pipeTracked(raw, upstream, untrack)
	e.BytesUp += up
	e.BytesDown = down
	g.budgets.charge(id.client, matched, e.BytesUp, e.BytesDown)
	e.DurationMS = msSince(start)
	g.audit.Write(e)
}

// countingReader counts the bytes of a request body.
type countingReader struct {
	io.ReadCloser
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.ReadCloser.Read(p)
	c.n += int64(n)
	return n, err
}

// countingWriter records the status and body bytes of a response.
type countingWriter struct {
	http.ResponseWriter
	status int
	n      int64
	// track registers a connection hijacked for a protocol upgrade;
	// hijacked is that connection.
	track    func(net.Conn) net.Conn
	hijacked net.Conn
}

func (c *countingWriter) WriteHeader(code int) {
	if c.status == 0 {
		c.status = code
	}
	c.ResponseWriter.WriteHeader(code)
}

func (c *countingWriter) Write(p []byte) (int, error) {
	if c.status == 0 {
		c.status = http.StatusOK
	}
	n, err := c.ResponseWriter.Write(p)
	c.n += int64(n)
	return n, err
}

// ReadFrom lets io.Copy use the server's pooled buffers: without it every
// proxied response allocated a fresh 32 KiB copy buffer.
func (c *countingWriter) ReadFrom(r io.Reader) (int64, error) {
	if c.status == 0 {
		c.status = http.StatusOK
	}
	var n int64
	var err error
	if rf, ok := c.ResponseWriter.(io.ReaderFrom); ok {
		n, err = rf.ReadFrom(r)
	} else {
		n, err = io.Copy(struct{ io.Writer }{c.ResponseWriter}, r)
	}
	c.n += n
	return n, err
}

// Flush and Unwrap keep streaming and hijacking (WebSocket) working.
func (c *countingWriter) Flush() {
	if f, ok := c.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (c *countingWriter) Unwrap() http.ResponseWriter { return c.ResponseWriter }

func (c *countingWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	conn, brw, err := http.NewResponseController(c.ResponseWriter).Hijack()
	if err != nil || c.track == nil {
		return conn, brw, err
	}
	c.hijacked = c.track(conn)
	if tc, ok := c.hijacked.(*trackedConn); ok && brw != nil {
		// Bytes the server read ahead (its background read takes one)
		// are forwarded from brw, past the counting connection.
		tc.up.Add(int64(brw.Reader.Buffered()))
	}
	return c.hijacked, brw, nil
}
