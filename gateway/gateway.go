// Package gateway is moat's egress gateway: HTTP CONNECT, plain HTTP and
// SOCKS5 on one listener, every connection decided by gateway/policy,
// dialled through the resolver's checked dialer, and written to the audit
// log.
package gateway

import (
	"bufio"
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/elazarl/goproxy"
	socks5 "github.com/things-go/go-socks5"

	"github.com/moat-dev/moat/credentials"
	"github.com/moat-dev/moat/gateway/audit"
	"github.com/moat-dev/moat/gateway/policy"
	"github.com/moat-dev/moat/mitm"
	"github.com/moat-dev/moat/resolver"
)

// Options configures a Gateway.
type Options struct {
	// Policy decides every connection. Required: New fails without it.
	Policy *policy.Policy
	// Dialer resolves, checks and dials upstream addresses. Required.
	Dialer *resolver.Dialer
	// Audit receives one event per decision. Default: audit.Discard.
	Audit audit.Sink
	// Logger receives operational logs. Default: discard.
	Logger *slog.Logger
	// Tokens maps a proxy password (the session token) to a client name.
	Tokens map[string]string
	// NoAuth accepts every client without a token. Serve refuses it on
	// listeners that are not loopback or unix sockets.
	NoAuth bool
	// Session names this gateway's session in audit lines.
	Session string
	// HeaderTimeout bounds how long a client may take to send its request
	// line and headers (slow-loris). Default 10s.
	HeaderTimeout time.Duration
	// MaxHeaderBytes bounds request headers; larger requests get 431.
	// Default 64 KiB.
	MaxHeaderBytes int
	// IdleTimeout closes idle keep-alive client connections. Default 2m.
	IdleTimeout time.Duration
	// Interceptor terminates TLS for Inspect decisions and applies the
	// per-request rules. Nil: Inspect decisions are refused (fail closed).
	Interceptor *mitm.Interceptor
	// Credentials blocks sentinels in host names and in requests to hosts
	// they are not bound to; the Interceptor swaps them for bound hosts.
	// Nil: none.
	Credentials *credentials.Set
	// Clients gives named clients (Tokens' values) their own policy and
	// dialer; a client without an entry uses Policy and Dialer.
	Clients map[string]ClientPolicy
	// Quarantine, when active, denies every further request (after a
	// blocked leak and credentials.quarantineOnLeak). Nil: never.
	Quarantine *Quarantine
	// Budgets limit each client's requests and bytes per host pattern
	// (network.budgets). Default: none.
	Budgets []Budget
	// Parent chains through a corporate proxy after the gateway's own
	// decision (network.parentProxy). Default: dial directly.
	Parent *Parent
	// AcceptPassed lets unix-socket clients hand over a TCP connection by
	// descriptor (SCM_RIGHTS), as moat run's sandbox relay does. Off for a
	// daemon's listeners.
	AcceptPassed bool
	// MaxIdlePerHost sizes the upstream pool for plain HTTP. Go's default
	// of 2 caps a busy proxy at a fraction of direct throughput. Default 256.
	MaxIdlePerHost int
}

// ClientPolicy is one daemon client's own policy and the dialer that
// enforces it (its resolved-address rules).
type ClientPolicy struct {
	Policy *policy.Policy
	Dialer *resolver.Dialer
}

// Gateway serves the proxy protocols. Create it with New.
type Gateway struct {
	opt   Options
	log   *slog.Logger
	audit audit.Sink
	proxy *goproxy.ProxyHttpServer
	socks *socks5.Server
	http  *http.Server
	tr    *mitm.PerClientTransport
	// pool serves plain-HTTP requests; tr is its fallback (https URLs,
	// upgrades).
	pool   *pool
	poolRT goproxy.RoundTripper

	httpConns chan net.Conn // demultiplexed HTTP connections
	mu        sync.Mutex
	listeners map[net.Listener]struct{}
	tunnels   map[*tunnel]struct{}
	budgets   *budgets
	closed    bool
	done      chan struct{}
	wg        sync.WaitGroup
}

// New checks o and builds a Gateway. It fails closed: no policy, no dialer
// or no authentication mode is an error, never an open proxy.
func New(o Options) (*Gateway, error) {
	if o.Policy == nil {
		return nil, ErrNoPolicy
	}
	if o.Dialer == nil {
		return nil, ErrNoDialer
	}
	if !o.NoAuth && len(o.Tokens) == 0 {
		return nil, ErrNoAuth
	}
	for name, cp := range o.Clients {
		if cp.Policy == nil || cp.Dialer == nil {
			return nil, fmt.Errorf("%w (client %q)", ErrNoPolicy, name)
		}
	}
	if o.Audit == nil {
		o.Audit = audit.Discard
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.HeaderTimeout <= 0 {
		o.HeaderTimeout = 10 * time.Second
	}
	if o.MaxHeaderBytes <= 0 {
		o.MaxHeaderBytes = 64 << 10
	}
	if o.IdleTimeout <= 0 {
		o.IdleTimeout = 2 * time.Minute
	}
	if o.MaxIdlePerHost <= 0 {
		o.MaxIdlePerHost = 256
	}
	g := &Gateway{
		opt:       o,
		log:       o.Logger.With("component", "gateway"),
		audit:     o.Audit,
		httpConns: make(chan net.Conn),
		listeners: make(map[net.Listener]struct{}),
		tunnels:   make(map[*tunnel]struct{}),
		done:      make(chan struct{}),
	}
	var err error
	if g.budgets, err = newBudgets(o.Budgets); err != nil {
		return nil, err
	}
	if o.Interceptor != nil {
		if g.budgets != nil {
			o.Interceptor.SetBudget(g.budgets.mitmHook())
		}
		o.Interceptor.SetUpgradeTracker(g.trackUpgraded)
	}
	g.setupHTTP()
	g.setupSOCKS()
	// A quarantined client keeps no open tunnel: bytes in an opaque
	// tunnel are never inspected again.
	o.Quarantine.watch(g.closeTunnelsOf)
	return g, nil
}

// Serve accepts connections on l until Shutdown. It may be called for
// several listeners. With NoAuth, l must be loopback or a unix socket.
func (g *Gateway) Serve(l net.Listener) error {
	if g.opt.NoAuth && !IsLocalListener(l) {
		return ErrNoAuthNotLoopback
	}
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return ErrClosed
	}
	first := len(g.listeners) == 0
	g.listeners[l] = struct{}{}
	g.mu.Unlock()
	if first {
		g.wg.Add(1)
		go func() {
			defer g.wg.Done()
			_ = g.http.Serve(chanListener{g: g, addr: l.Addr()})
		}()
	}
	var delay time.Duration
	for {
		c, err := l.Accept()
		if err != nil {
			select {
			case <-g.done:
				return ErrClosed
			default:
			}
			if errors.Is(err, net.ErrClosed) {
				return fmt.Errorf("accept: %w", err)
			}
			// EMFILE and friends pass: back off and keep serving every
			// other client rather than exiting.
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			g.log.Warn("accept failed; retrying", "err", err, "in", delay)
			time.Sleep(delay)
			continue
		}
		delay = 0
		go g.demux(c)
	}
}

// IsLocalListener reports whether l is a unix socket or a loopback TCP
// address: the only listeners a gateway without authentication serves.
func IsLocalListener(l net.Listener) bool {
	switch a := l.Addr().(type) {
	case *net.UnixAddr:
		return true
	case *net.TCPAddr:
		ip, ok := netip.AddrFromSlice(a.IP)
		return ok && ip.Unmap().IsLoopback()
	}
	return false
}

// demux reads the first byte: 0x05 is SOCKS5 (RFC 1928 §3), 0x04 is SOCKS4
// (refused), anything else is HTTP.
func (g *Gateway) demux(c net.Conn) {
	if uc, ok := c.(*net.UnixConn); ok && g.opt.AcceptPassed {
		pc, err := acceptPassed(uc, g.opt.HeaderTimeout)
		if err != nil {
			uc.Close()
			return
		}
		c = pc
	}
	_ = c.SetReadDeadline(time.Now().Add(g.opt.HeaderTimeout))
	br := bufio.NewReaderSize(c, 512)
	b, err := br.Peek(1)
	if err != nil {
		c.Close()
		return
	}
	pc := &peekedConn{Conn: c, r: br}
	switch b[0] {
	case socksVersion5:
		g.serveSOCKS(pc)
	case socksVersion4:
		// SOCKS4 request rejected (0x5b), then close.
		_, _ = c.Write([]byte{0x00, 0x5b, 0, 0, 0, 0, 0, 0})
		c.Close()
	default:
		_ = c.SetReadDeadline(time.Time{}) // http.Server applies its own timeouts
		select {
		case g.httpConns <- pc:
		case <-g.done:
			c.Close()
		}
	}
}

const (
	socksVersion4 = 0x04 // SOCKS4 (no RFC)
	socksVersion5 = 0x05 // RFC 1928 §3
)

// peekedConn replays the bytes the demultiplexer read.
type peekedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *peekedConn) Read(p []byte) (int, error) {
	if c.r != nil {
		if c.r.Buffered() > 0 {
			return c.r.Read(p)
		}
		c.r = nil // drop the buffer: idle tunnels must stay small
	}
	return c.Conn.Read(p)
}

// raw returns the underlying connection once the peek buffer is drained,
// so tunnels can splice.
func (c *peekedConn) raw() (net.Conn, bool) {
	if c.r == nil || c.r.Buffered() == 0 {
		c.r = nil
		if p, ok := c.Conn.(*prefixConn); ok && len(p.prefix) == 0 {
			return p.Conn, true // the unix socket itself, for splice and half-close
		}
		return c.Conn, true
	}
	return nil, false
}

// chanListener feeds demultiplexed connections to the http.Server.
type chanListener struct {
	g    *Gateway
	addr net.Addr
}

func (l chanListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.g.httpConns:
		return c, nil
	case <-l.g.done:
		return nil, net.ErrClosed
	}
}
func (l chanListener) Close() error   { return nil }
func (l chanListener) Addr() net.Addr { return l.addr }

// Shutdown stops accepting, lets open tunnels finish until ctx ends, then
// closes them. The audit lines of closed tunnels are written before it
// returns.
func (g *Gateway) Shutdown(ctx context.Context) error {
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return ErrClosed
	}
	g.closed = true
	close(g.done)
	for l := range g.listeners {
		l.Close()
	}
	g.mu.Unlock()
	err := g.http.Shutdown(ctx)
	for {
		g.mu.Lock()
		n := len(g.tunnels)
		g.mu.Unlock()
		if n == 0 {
			break
		}
		select {
		case <-ctx.Done():
			g.mu.Lock()
			for t := range g.tunnels {
				t.close()
			}
			g.mu.Unlock()
			_ = g.http.Close()
			g.waitTunnels()
			g.tr.CloseIdleConnections()
			g.pool.closeIdle()
			g.wg.Wait()
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	g.tr.CloseIdleConnections()
	g.pool.closeIdle()
	g.wg.Wait()
	return err
}

func (g *Gateway) waitTunnels() {
	for i := 0; i < 500; i++ {
		g.mu.Lock()
		n := len(g.tunnels)
		g.mu.Unlock()
		if n == 0 {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// identity is who made a request: the client a token maps to, and the
// attribution id the username carries (never the command text).
type identity struct {
	client  string
	session string
	pol     *policy.Policy   // the client's policy
	dialer  *resolver.Dialer // and the dialer that enforces it
}

// authenticate checks the proxy password against the tokens. user is the
// attribution id.
func (g *Gateway) authenticate(user, pass string) (identity, bool) {
	id := identity{session: g.opt.Session, client: "local", pol: g.opt.Policy, dialer: g.opt.Dialer}
	if user != "" {
		id.session = user
	}
	if g.opt.NoAuth {
		return id, true
	}
	// Constant-time compare against every token: no timing oracle.
	var name string
	found := 0
	for tok, client := range g.opt.Tokens {
		if subtle.ConstantTimeCompare([]byte(tok), []byte(pass)) == 1 {
			name, found = client, 1
		}
	}
	if found == 0 {
		return identity{}, false
	}
	id.client = name
	if cp, ok := g.opt.Clients[name]; ok {
		id.pol, id.dialer = cp.Policy, cp.Dialer
	}
	return id, true
}

// forClient returns the identity of a client by name, for dials that know
// only the name (the interceptor's).
func (g *Gateway) forClient(name string) identity {
	id := identity{client: name, pol: g.opt.Policy, dialer: g.opt.Dialer}
	if cp, ok := g.opt.Clients[name]; ok {
		id.pol, id.dialer = cp.Policy, cp.Dialer
	}
	return id
}

// tunnel is one open CONNECT or SOCKS5 tunnel, tracked for drain.
type tunnel struct {
	a, b net.Conn
	once sync.Once
	// client owns an opaque tunnel (bytes pass uninspected), which
	// quarantine closes; "" for an intercepted connection, whose every
	// request the interceptor refuses once the client is quarantined.
	client string
	opaque bool
}

func (t *tunnel) close() {
	t.once.Do(func() {
		t.a.Close()
		t.b.Close()
	})
}

type closeWriter interface{ CloseWrite() error }

// trackUpgraded registers a connection hijacked for a protocol upgrade
// (WebSocket) as an opaque tunnel of client: its bytes are no longer
// inspected, so a quarantine closes it. Closing the returned connection
// forgets it.
func (g *Gateway) trackUpgraded(client string, c net.Conn) net.Conn {
	untrack := g.trackTunnel(&tunnel{a: c, b: c, client: client, opaque: true})
	return &trackedConn{Conn: c, untrack: untrack}
}

type trackedConn struct {
	net.Conn
	once    sync.Once
	untrack func()
	// up and down count the bytes after the upgrade, for the audit line
	// and the budgets (the copies run in goroutines of their own).
	up, down atomic.Int64
}

func (c *trackedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.up.Add(int64(n))
	return n, err
}

// Write counts first: by the time the peer has the bytes, the count
// holds them (the audit line may be written the moment it answers).
func (c *trackedConn) Write(p []byte) (int, error) {
	c.down.Add(int64(len(p)))
	n, err := c.Conn.Write(p)
	c.down.Add(int64(n - len(p)))
	return n, err
}

func (c *trackedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.untrack)
	return err
}

// closeTunnelsOf closes every opaque tunnel of client.
func (g *Gateway) closeTunnelsOf(client string) {
	g.mu.Lock()
	var ts []*tunnel
	for t := range g.tunnels {
		if t.opaque && t.client == client {
			ts = append(ts, t)
		}
	}
	g.mu.Unlock()
	for _, t := range ts {
		t.close()
	}
	if len(ts) > 0 {
		g.log.Info("quarantine closed open tunnels", "client", client, "tunnels", len(ts))
	}
}

// track registers an open tunnel so Shutdown can close it after the grace
// period; the returned func closes both ends and forgets it.
func (g *Gateway) track(a, b net.Conn) (untrack func()) {
	return g.trackTunnel(&tunnel{a: a, b: b})
}

func (g *Gateway) trackTunnel(t *tunnel) (untrack func()) {
	g.mu.Lock()
	g.tunnels[t] = struct{}{}
	g.mu.Unlock()
	if t.opaque && g.opt.Quarantine.Active(t.client) {
		t.close() // quarantined between its decision and now
	}
	return func() {
		t.close()
		g.mu.Lock()
		delete(g.tunnels, t)
		g.mu.Unlock()
	}
}

// pipe copies both directions until both end, half-closing as each side
// finishes. Copies between *net.TCPConn and *net.UnixConn use splice.
// It returns the bytes sent upstream and downstream.
func (g *Gateway) pipe(id identity, client, upstream net.Conn) (up, down int64) {
	return g.pipeTracked(client, upstream, g.trackTunnel(&tunnel{a: client, b: upstream, client: id.client, opaque: true}))
}

// pipeTracked is pipe for a tunnel the caller registered already (before
// answering the client, so that a Shutdown that starts the moment the
// client has its answer waits for this tunnel); untrack ends it.
func (g *Gateway) pipeTracked(client, upstream net.Conn, untrack func()) (up, down int64) {
	defer untrack()
	done := make(chan int64, 1)
	go func() {
		n, _ := relay(upstream, client)
		if cw, ok := upstream.(closeWriter); ok {
			_ = cw.CloseWrite()
		} else {
			upstream.Close()
		}
		done <- n
	}()
	down, _ = relay(client, upstream)
	if cw, ok := client.(closeWriter); ok {
		_ = cw.CloseWrite()
	} else {
		client.Close()
	}
	up = <-done
	return up, down
}

// event starts an audit event for decision d.
func (g *Gateway) event(proto policy.Proto, id identity, d policy.Decision, host string, port uint16) audit.Event {
	e := audit.Event{
		Session: id.session,
		Client:  id.client,
		Proto:   proto.String(),
		Host:    sanitize(host),
		Port:    port,
		Verdict: d.Verdict.String(),
		Reason:  d.Reason.Code(),
		Rule:    d.Rule,
		Policy:  id.pol.Hash(),
	}
	if h := d.Host.String(); h != "" {
		e.Host = h
	}
	return e
}

// sanitize makes a client-supplied host safe for a log line or audit field.
func sanitize(s string) string {
	if len(s) > 300 {
		s = s[:300]
	}
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return '?'
		}
		return r
	}, s)
}
