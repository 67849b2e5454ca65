package mitm

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/http/httputil"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"

	"github.com/moat-dev/moat/ca"
	"github.com/moat-dev/moat/credentials"
	"github.com/moat-dev/moat/gateway/audit"
	"github.com/moat-dev/moat/gateway/policy"
	"github.com/moat-dev/moat/gateway/policy/canon"
)

// Timeouts and limits of the interceptor.
const (
	// PeekTimeout bounds the wait for the client's first bytes and for
	// the TLS handshake.
	PeekTimeout = 10 * time.Second
	// maxDrain bounds how much of a refused push's pack is read and
	// discarded, so git sees the report instead of a broken pipe.
	maxDrain = 64 << 20
	// upstreamIdlePerHost sizes the upstream pool to the concurrency
	// (DESIGN §3: Go's default of 2 collapses throughput).
	upstreamIdlePerHost = 64
)

const tlsRecordHandshake = 0x16 // RFC 8446 §5.1 ContentType handshake

// Options configures an Interceptor.
type Options struct {
	// CA issues the leaves presented to the client. Required.
	CA *ca.Authority
	// Rules decides each request. Required; CompileRules(nil, nil) allows
	// every request to an inspected host.
	Rules *RuleSet
	// UpstreamRoots verifies upstream certificates. Nil: the system roots.
	UpstreamRoots *x509.CertPool
	// Dial connects to the destination of an allowed decision (the
	// resolver's checked dialer). Required: the interceptor never
	// resolves a name itself, so the address guard holds inside TLS.
	Dial func(ctx context.Context, d policy.Decision) (net.Conn, netip.AddrPort, error)
	// Audit receives one event per inspected request. Nil: discarded.
	Audit audit.Sink
	// Logger gets operational messages. Nil: discarded.
	Logger *slog.Logger
	// PolicyHash is written in audit events' "policy" field.
	PolicyHash string
	// Credentials swaps sentinels for secrets on the way out, for bound
	// hosts only, and blocks sentinels headed anywhere else. Nil: none.
	Credentials *credentials.Set
	// AllowPlaintextInject permits swapping over plain http
	// (credentials.allowPlaintextInject).
	AllowPlaintextInject bool
	// OnLeak is told the credential of every blocked leak; Quarantined,
	// when it returns true, refuses every request (the gateway's
	// quarantine). Both may be nil.
	OnLeak      func(client, credential string)
	Quarantined func(client string) bool
}

// BudgetFunc admits one request of client to d's host against the
// session's budgets (network.budgets). It returns the function to charge
// the request's bytes to, or the pattern of a spent budget.
type BudgetFunc func(client string, d policy.Decision) (charge func(up, down int64), spent string)

// CodeBudget is the reason code of a request refused by a spent budget.
const CodeBudget = "budget-exhausted"

// SetBudget makes every request inside a terminated connection count
// against budget, as the gateway's own plain-HTTP requests do. Call it
// before the first Serve.
func (i *Interceptor) SetBudget(budget BudgetFunc) { i.budget = budget }

// SetUpgradeTracker hands every connection hijacked for a protocol upgrade
// (WebSocket) to track, which may wrap it; the gateway closes a
// quarantined client's upgraded connections, whose bytes are no longer
// inspected. Call it before the first Serve.
func (i *Interceptor) SetUpgradeTracker(track func(client string, c net.Conn) net.Conn) {
	i.track = track
}

// Meta attributes a connection in audit events.
type Meta struct {
	Session, Client string
	Proto           string // the outer protocol ("connect", "socks5"); informational
}

// Interceptor terminates TLS for inspected connections. It is safe for
// concurrent use.
type Interceptor struct {
	o      Options
	budget BudgetFunc
	track  func(client string, c net.Conn) net.Conn
	log    *slog.Logger
	audit  audit.Sink
	tr     *PerClientTransport
	proxy  *httputil.ReverseProxy
	h2     *http2.Server
}

// New checks o and builds an Interceptor. A missing CA, rule set or dialer
// is an error: the interceptor fails closed.
func New(o Options) (*Interceptor, error) {
	switch {
	case o.CA == nil:
		return nil, ErrNoCA
	case o.Dial == nil:
		return nil, ErrNoDial
	case o.Rules == nil:
		return nil, ErrNoRules
	}
	i := &Interceptor{o: o, log: o.Logger, audit: o.Audit}
	if i.log == nil {
		i.log = slog.New(slog.DiscardHandler)
	}
	i.log = i.log.With("component", "mitm")
	if i.audit == nil {
		i.audit = audit.Discard
	}
	i.tr = &PerClientTransport{
		Key: func(r *http.Request) string { return ClientFrom(r.Context()) },
		New: func() *http.Transport { return i.newTransport(o) },
	}
	i.proxy = &httputil.ReverseProxy{
		Rewrite: rewrite,
		// Without a pool, ReverseProxy allocates a 32 KiB copy buffer for
		// every request.
		BufferPool:   copyBuffers{},
		Transport:    i.tr,
		ErrorHandler: i.proxyError,
		ErrorLog:     slog.NewLogLogger(i.log.Handler(), slog.LevelDebug),
	}
	i.h2 = &http2.Server{IdleTimeout: 2 * time.Minute}
	return i, nil
}

// newTransport is one client's upstream pool.
func (i *Interceptor) newTransport(o Options) *http.Transport {
	return &http.Transport{
		// Never the environment's proxy variables: the upstream is the
		// decision's destination, dialled through o.Dial.
		Proxy:       nil,
		DialContext: i.dialUpstream,
		TLSClientConfig: &tls.Config{
			RootCAs:    o.UpstreamRoots,
			MinVersion: tls.VersionTLS12,
		},
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          1024,
		MaxIdleConnsPerHost:   upstreamIdlePerHost,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   PeekTimeout,
		ExpectContinueTimeout: time.Second,
	}
}

// PerClientTransport keeps one upstream pool per client (Key names it): a
// connection dialled under one client's address rules must not carry
// another client's request.
type PerClientTransport struct {
	Key func(*http.Request) string
	New func() *http.Transport

	mu       sync.Mutex
	byClient map[string]*http.Transport
}

// RoundTrip sends r on its client's pool.
func (c *PerClientTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	name := c.Key(r)
	c.mu.Lock()
	tr := c.byClient[name]
	if tr == nil {
		if c.byClient == nil {
			c.byClient = make(map[string]*http.Transport)
		}
		tr = c.New()
		c.byClient[name] = tr
	}
	c.mu.Unlock()
	return tr.RoundTrip(r)
}

// CloseIdleConnections closes every client's idle upstream connections.
func (c *PerClientTransport) CloseIdleConnections() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, tr := range c.byClient {
		tr.CloseIdleConnections()
	}
}

// Close drops idle upstream connections.
func (i *Interceptor) Close() { i.tr.CloseIdleConnections() }

type stateKey struct{}

// reqState travels in the request context from the handler to the
// transport's dialer and the proxy's error handler.
type reqState struct {
	d     policy.Decision
	addr  string // the upstream address the request used
	reply *reply // set by proxyError
}

func stateOf(ctx context.Context) *reqState {
	st, _ := ctx.Value(stateKey{}).(*reqState)
	return st
}

var errNoDecision = errors.New("mitm: upstream dial without a decision")

type clientKey struct{}

// ClientFrom returns the client (Meta.Client) a dial is made for, so that
// Options.Dial can apply that client's address policy.
func ClientFrom(ctx context.Context) string {
	c, _ := ctx.Value(clientKey{}).(string)
	return c
}

func (i *Interceptor) dialUpstream(ctx context.Context, _, _ string) (net.Conn, error) {
	st := stateOf(ctx)
	if st == nil {
		return nil, errNoDecision
	}
	c, _, err := i.o.Dial(ctx, st.d)
	return c, err
}

func rewrite(pr *httputil.ProxyRequest) {
	st := stateOf(pr.In.Context())
	pr.Out.URL.Scheme = "https"
	if st != nil {
		pr.Out.URL.Host = canon.HostPort(st.d.Host, st.d.Port)
	} else {
		pr.Out.URL.Host = "" // fails the request: no decision, no dial
	}
	// Out.Host keeps the client's Host, which serveHTTP checked against
	// the decision.
}

func (i *Interceptor) proxyError(w http.ResponseWriter, r *http.Request, err error) {
	rep := upstreamReply(err)
	if st := stateOf(r.Context()); st != nil {
		st.reply = &rep
	}
	i.log.Info("upstream request failed", "host", r.Host, "err", err)
	rep.write(w)
}

// peekConn replays the peeked bytes before reading from the connection.
type peekConn struct {
	net.Conn
	prefix []byte
}

func (c *peekConn) Read(p []byte) (int, error) {
	if len(c.prefix) > 0 {
		n := copy(p, c.prefix)
		c.prefix = c.prefix[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}

// Serve handles one client connection that the gateway has answered
// CONNECT with 200 for, under an Inspect decision d. It returns when the
// connection is done. If the first byte is not a TLS handshake record
// (e.g. SSH), it calls opaque with a connection that replays that byte, so
// the gateway can tunnel it under the same decision.
//
// A ClientHello whose SNI names another host than d.Host is refused: the
// decision was made for d.Host, and a different SNI would ask the
// upstream's virtual hosting for something the policy never saw.
func (i *Interceptor) Serve(ctx context.Context, client net.Conn, d policy.Decision, m Meta, opaque func(client net.Conn)) {
	if d.Verdict != policy.Inspect && d.Verdict != policy.Allow {
		client.Close()
		return
	}
	_ = client.SetReadDeadline(time.Now().Add(PeekTimeout))
	var first [1]byte
	if _, err := io.ReadFull(client, first[:]); err != nil {
		client.Close()
		return
	}
	pc := &peekConn{Conn: client, prefix: []byte{first[0]}}
	if first[0] != tlsRecordHandshake {
		_ = client.SetReadDeadline(time.Time{})
		if opaque == nil {
			client.Close()
			return
		}
		opaque(pc)
		return
	}

	host := d.Host.String()
	var sniMismatch string
	cfg := &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: []string{"h2", "http/1.1"},
		GetConfigForClient: func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
			if hello.ServerName != "" {
				sni, err := canon.ParseHost(hello.ServerName)
				if err != nil || sni != d.Host {
					sniMismatch = hello.ServerName
					return nil, fmt.Errorf("mitm: SNI %q does not match CONNECT host %s", clip(hello.ServerName), host)
				}
			}
			return nil, nil
		},
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return i.o.CA.Leaf(host)
		},
	}
	tc := tls.Server(pc, cfg)
	hctx, cancel := context.WithTimeout(ctx, PeekTimeout)
	err := tc.HandshakeContext(hctx)
	cancel()
	if err != nil {
		if sniMismatch != "" {
			i.audit.Write(audit.Event{
				Session: m.Session, Client: m.Client, Proto: policy.ProtoMITM.String(),
				Host: host, Port: d.Port, Verdict: policy.Deny.String(),
				Reason: CodeSNIMismatch, Rule: "none", Policy: i.o.PolicyHash,
			})
			i.log.Info("SNI mismatch", "host", host, "sni", clip(sniMismatch))
		} else {
			i.log.Debug("client TLS handshake failed", "host", host, "err", err)
		}
		tc.Close()
		return
	}
	_ = client.SetReadDeadline(time.Time{})

	done := make(chan struct{})
	defer close(done)
	go func() {
		select {
		case <-ctx.Done():
			tc.Close()
		case <-done:
		}
	}()

	h := &connHandler{i: i, d: d, m: m}
	if tc.ConnectionState().NegotiatedProtocol == "h2" {
		i.h2.ServeConn(tc, &http2.ServeConnOpts{Context: ctx, Handler: h})
		tc.Close()
		return
	}
	l := newOneConnListener(tc)
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(i.log.Handler(), slog.LevelDebug),
		BaseContext:       func(net.Listener) context.Context { return ctx },
	}
	_ = srv.Serve(l)
}

// oneConnListener hands out one connection, then blocks Accept until that
// connection is closed, so that http.Server.Serve returns when it is done.
type oneConnListener struct {
	conn   *closeNotifyConn
	taken  bool
	mu     sync.Mutex
	closed chan struct{}
}

type closeNotifyConn struct {
	net.Conn
	once   sync.Once
	closed chan struct{}
}

func (c *closeNotifyConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { close(c.closed) })
	return err
}

func newOneConnListener(c net.Conn) *oneConnListener {
	return &oneConnListener{conn: &closeNotifyConn{Conn: c, closed: make(chan struct{})}, closed: make(chan struct{})}
}

func (l *oneConnListener) Accept() (net.Conn, error) {
	l.mu.Lock()
	if !l.taken {
		l.taken = true
		l.mu.Unlock()
		return l.conn, nil
	}
	l.mu.Unlock()
	select {
	case <-l.conn.closed:
	case <-l.closed:
	}
	return nil, net.ErrClosed
}

func (l *oneConnListener) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	select {
	case <-l.closed:
	default:
		close(l.closed)
	}
	return nil
}

func (l *oneConnListener) Addr() net.Addr { return l.conn.LocalAddr() }

// connHandler serves the requests of one terminated connection.
type connHandler struct {
	i *Interceptor
	d policy.Decision
	m Meta
}

// statusWriter records the status and the bytes written for the audit
// line; Unwrap lets http.ResponseController reach Flush, and Hijack
// (WebSocket upgrades) hands the connection to the upgrade tracker.
type statusWriter struct {
	http.ResponseWriter
	status   int
	bytes    int64
	track    func(net.Conn) net.Conn
	upgraded *countingConn
}

func (w *statusWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, brw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err != nil {
		return c, brw, err
	}
	w.upgraded = &countingConn{Conn: c}
	if brw != nil {
		// Bytes the server read ahead are forwarded from brw, past the
		// counting connection.
		w.upgraded.up.Add(int64(brw.Reader.Buffered()))
	}
	if w.track == nil {
		return w.upgraded, brw, nil
	}
	return w.track(w.upgraded), brw, nil
}

// countingConn counts the bytes of an upgraded connection, for the audit
// line and the budgets; the copies run in goroutines of their own.
type countingConn struct {
	net.Conn
	up, down atomic.Int64
}

func (c *countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.up.Add(int64(n))
	return n, err
}

// Write counts first: by the time the peer has the bytes, the count
// holds them (the audit line may be written the moment it answers).
func (c *countingConn) Write(p []byte) (int, error) {
	c.down.Add(int64(len(p)))
	n, err := c.Conn.Write(p)
	c.down.Add(int64(n - len(p)))
	return n, err
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	n, err := w.ResponseWriter.Write(p)
	w.bytes += int64(n)
	return n, err
}

func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

type countingBody struct {
	io.ReadCloser
	n int64
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n += int64(n)
	return n, err
}

func auditPath(r *http.Request) string {
	p := r.URL.EscapedPath()
	if r.URL.RawQuery != "" {
		p += "?…" // query values never reach the audit log
	}
	return clip(p)
}

func (h *connHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	sw := &statusWriter{ResponseWriter: w}
	if h.i.track != nil {
		sw.track = func(c net.Conn) net.Conn { return h.i.track(h.m.Client, c) }
	}
	body := &countingBody{ReadCloser: r.Body}
	r.Body = body
	st := &reqState{d: h.d}
	ev := audit.Event{
		Session: h.m.Session, Client: h.m.Client, Proto: policy.ProtoMITM.String(),
		Host: h.d.Host.String(), Port: h.d.Port, Policy: h.i.o.PolicyHash,
		Method: r.Method, Path: auditPath(r),
	}
	var charge func(up, down int64)
	defer func() {
		up, down := body.n, sw.bytes
		if u := sw.upgraded; u != nil {
			up, down = up+u.up.Load(), down+u.down.Load()
		}
		if charge != nil {
			charge(up, down)
		}
		ev.Status = sw.status
		ev.BytesUp, ev.BytesDown = up, down
		ev.Addr = st.addr
		ev.DurationMS = float64(time.Since(start).Microseconds()) / 1000
		h.i.audit.Write(ev)
	}()

	dec, rep := h.i.decide(r, h.d, h.m.Client, true)
	ev.Rule, ev.Reason = orNone(dec.RuleID), dec.Code
	ev.Credential = strings.Join(dec.Injected, ",")
	if rep != nil {
		ev.Verdict = policy.Deny.String()
		ev.Rule, ev.Reason = rep.rule, rep.code
		rep.write(sw)
		return
	}
	if h.i.budget != nil {
		var spent string
		if charge, spent = h.i.budget(h.m.Client, h.d); spent != "" {
			dec := RuleDecision{RuleID: "budget:" + spent, Code: CodeBudget,
				Reason: fmt.Sprintf("Connection blocked: this session's budget for %s is spent (network.budgets)", spent)}
			rep := denyReply(dec)
			ev.Verdict, ev.Rule, ev.Reason = policy.Deny.String(), rep.rule, rep.code
			rep.write(sw)
			return
		}
	}
	ev.Verdict = policy.Allow.String()

	trace := &httptrace.ClientTrace{GotConn: func(ci httptrace.GotConnInfo) {
		if a := ci.Conn.RemoteAddr(); a != nil {
			st.addr = a.String()
		}
	}}
	ctx := httptrace.WithClientTrace(context.WithValue(context.WithValue(r.Context(), stateKey{}, st), clientKey{}, h.m.Client), trace)
	h.i.proxy.ServeHTTP(sw, r.WithContext(ctx))
	if st.reply != nil {
		ev.Reason, ev.Rule = st.reply.code, st.reply.rule
		if st.reply.status == http.StatusForbidden {
			ev.Verdict = policy.Deny.String()
		}
	}
}

// decide applies the rules to r. It returns the decision and, when the
// request must not be forwarded, the reply to send. For an allowed git
// push it parses the command list and replaces r.Body with a reader that
// replays it. checkHost also requires the Host header to name the
// decision's host: on a shared CDN address a different Host is domain
// fronting, a request for a host the policy never judged.
func (i *Interceptor) decide(r *http.Request, d policy.Decision, client string, checkHost bool) (dec RuleDecision, rep *reply) {
	defer func() {
		if rep == nil && dec.Allowed {
			dec, rep = i.applyCredentials(r, d, client, !checkHost, dec)
		}
	}()
	if i.o.Quarantined != nil && i.o.Quarantined(client) {
		dec := RuleDecision{RuleID: "credentials.quarantineOnLeak", Code: CodeQuarantined,
			Reason: "this session is quarantined after a blocked credential leak"}
		rep := leakReply(dec)
		return dec, &rep
	}
	if checkHost && r.Host != "" {
		hh := r.Host
		if h, _, err := canon.SplitHostPort(hh); err == nil {
			hh = h
		}
		got, err := canon.ParseHost(hh)
		if err != nil || got != d.Host {
			dec := RuleDecision{RuleID: "none", Code: CodeHostMismatch,
				Reason: fmt.Sprintf("Host header %q does not match the connection's host %s", clip(r.Host), d.Host)}
			rep := denyReply(dec)
			return dec, &rep
		}
	}
	info := RequestInfo{
		Host: d.Host.String(), Port: d.Port, Method: r.Method,
		Path: r.URL.EscapedPath(), Query: r.URL.Query(), Header: r.Header,
	}
	dec = i.o.Rules.Check(info)
	if !dec.Allowed {
		rep := denyReply(dec)
		return dec, &rep
	}
	if dec.Git == nil || dec.Git.Kind != GitPushPack {
		return dec, nil
	}
	// The body may be gzip-encoded by some clients; the command list must
	// be readable here or the push is refused, never passed unchecked.
	if ce := r.Header.Get("Content-Encoding"); ce != "" && ce != "identity" {
		dec.Allowed, dec.Code, dec.Reason = false, CodeGitBadPush, "compressed git push bodies are not supported ("+clip(ce)+")"
		rep := denyReply(dec)
		return dec, &rep
	}
	cmds, replay, err := ParsePushCommands(r.Body, DefaultMaxPushCommandBytes)
	if err != nil {
		dec.Allowed, dec.Code, dec.Reason = false, CodeGitBadPush, "git push refused: "+err.Error()
		rep := denyReply(dec)
		return dec, &rep
	}
	if ok, ref, why := dec.Git.Permits(cmds); !ok {
		dec.Allowed, dec.Code, dec.Reason = false, CodeGitPushRef, why
		// Read the pack before answering: git reports a broken pipe,
		// not our report, if the server answers mid-upload.
		_, _ = io.Copy(io.Discard, io.LimitReader(r.Body, maxDrain))
		caps := ""
		if len(cmds) > 0 {
			caps = cmds[0].Caps
		}
		rep := pushRefusalReply(cmds, ref, why, caps, dec)
		return dec, &rep
	}
	r.Body = readCloser{replay, r.Body}
	return dec, nil
}

// applyCredentials swaps sentinels into r for hosts the credentials are
// bound to, after hop-by-hop headers are stripped (a client must not be
// able to drop an injected header through Connection), and refuses a
// sentinel headed for any other host.
func (i *Interceptor) applyCredentials(r *http.Request, d policy.Decision, client string, plaintext bool, dec RuleDecision) (RuleDecision, *reply) {
	if i.o.Credentials == nil {
		return dec, nil
	}
	StripHopByHop(r.Header)
	res, err := i.o.Credentials.Apply(r, d.Host.String(), plaintext, i.o.AllowPlaintextInject)
	if err == nil {
		dec.Injected = res.Injected
		return dec, nil
	}
	dec.Allowed = false
	var le *credentials.LeakError
	var pe *credentials.PlaintextError
	switch {
	case errors.As(err, &le):
		if i.o.OnLeak != nil {
			i.o.OnLeak(client, le.Credential)
		}
		dec.Code, dec.Injected = CodeCredentialLeak, []string{le.Credential}
		dec.Reason = "credential " + le.Credential + " may not be sent to " + d.Host.String() + " (" + le.Where + ")"
		rep := leakReply(dec)
		return dec, &rep
	case errors.As(err, &pe):
		dec.Code, dec.Injected = CodePlaintextInject, []string{pe.Credential}
		dec.Reason = "credential " + pe.Credential + " is not injected over plain http (set credentials.allowPlaintextInject)"
	default:
		dec.Code, dec.Reason = CodeCredentialError, "credential swap failed"
	}
	rep := denyReply(dec)
	return dec, &rep
}

// hopByHop are the headers of RFC 9110 §7.6.1 that never cross a proxy.
var hopByHop = []string{
	"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding",
}

// StripHopByHop removes hop-by-hop headers, including every header that
// Connection names. Upgrade survives only for a WebSocket handshake.
func StripHopByHop(h http.Header) {
	upgrade := false
	for _, v := range h["Connection"] {
		for _, f := range strings.Split(v, ",") {
			f = http.CanonicalHeaderKey(strings.TrimSpace(f))
			if f == "Upgrade" {
				upgrade = true
				continue
			}
			if f != "" {
				h.Del(f)
			}
		}
	}
	for _, k := range hopByHop {
		h.Del(k)
	}
	if upgrade && strings.EqualFold(h.Get("Upgrade"), "websocket") {
		h.Set("Connection", "Upgrade")
	} else {
		h.Del("Upgrade")
	}
}

type readCloser struct {
	io.Reader
	io.Closer
}

// OpaqueAllowed reports whether non-TLS bytes to d's destination may be
// tunnelled untouched. A host that rules, git rules or a bound credential
// govern may not: an opaque tunnel would carry a plaintext request (or a
// git push over ssh) around every per-request check. Only hosts inspected
// because of tlsTerminate alone fall back to a tunnel.
func (i *Interceptor) OpaqueAllowed(d policy.Decision) bool {
	if i.o.Rules.Governs(d.Host, d.Port) {
		return false
	}
	return !i.o.Credentials.BindsHost(d.Host.String())
}

// Filter applies the rules to a plain-HTTP request for an inspected host,
// for the gateway's own forwarding path. If the request must not be
// forwarded, it returns a handler that writes the refusal (the 403, or a
// git report-status); otherwise the handler is nil and r may be forwarded
// as is — for a git push its Body has been replaced by a reader that
// replays the inspected command list.
func (i *Interceptor) Filter(r *http.Request, d policy.Decision, client string) (RuleDecision, http.Handler) {
	dec, rep := i.decide(r, d, client, false)
	if rep == nil {
		return dec, nil
	}
	return dec, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { rep.write(w) })
}

var copyBufPool = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// copyBuffers is ReverseProxy's BufferPool.
type copyBuffers struct{}

func (copyBuffers) Get() []byte  { return *copyBufPool.Get().(*[]byte) }
func (copyBuffers) Put(b []byte) { copyBufPool.Put(&b) }
