package gateway

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log"
	"net"
	"time"

	socks5 "github.com/things-go/go-socks5"
	"github.com/things-go/go-socks5/statute"

	"github.com/moat-dev/moat/gateway/audit"
	"github.com/moat-dev/moat/gateway/policy"
	"github.com/moat-dev/moat/resolver"
)

// RFC 1928 §6 reply codes.
const (
	replySucceeded      = 0x00
	replyNotAllowed     = 0x02
	replyHostUnreach    = 0x04
	replyCmdUnsupported = 0x07
)

type socksKey struct{}

// socksState is the decision the rule made, handed to the connect handler.
type socksState struct {
	id     identity
	budget []int
	dec    policy.Decision
	host   string
	port   uint16
}

func (g *Gateway) setupSOCKS() {
	creds := socksCreds{g: g}
	methods := []socks5.Authenticator{socks5.UserPassAuthenticator{Credentials: creds}}
	if g.opt.NoAuth {
		methods = append([]socks5.Authenticator{socks5.NoAuthAuthenticator{}}, methods...)
	}
	refuse := func(ctx context.Context, w io.Writer, r *socks5.Request) error {
		_ = socks5.SendReply(w, replyCmdUnsupported, nil)
		return errors.New("socks5: only CONNECT is supported")
	}
	g.socks = socks5.NewServer(
		socks5.WithAuthMethods(methods),
		// go-socks5 resolves names before its rule runs; this resolver
		// resolves nothing, so a denied name is never looked up. The
		// gateway resolves only after an allow.
		socks5.WithResolver(noResolve{}),
		socks5.WithRule(socksRule{g: g}),
		socks5.WithConnectHandle(g.socksConnect),
		socks5.WithBindHandle(refuse),
		socks5.WithAssociateHandle(refuse),
		socks5.WithLogger(socks5.NewLogger(log.New(io.Discard, "", 0))),
	)
}

func (g *Gateway) serveSOCKS(c net.Conn) {
	_ = g.socks.ServeConn(c) // ServeConn closes c
}

type noResolve struct{}

func (noResolve) Resolve(ctx context.Context, name string) (context.Context, net.IP, error) {
	return ctx, nil, nil
}

// socksCreds checks RFC 1929 username/password: the password is the token,
// the username the attribution id.
type socksCreds struct{ g *Gateway }

func (c socksCreds) Valid(user, pass, _ string) bool {
	_, ok := c.g.authenticate(user, pass)
	return ok
}

type socksRule struct{ g *Gateway }

func (s socksRule) Allow(ctx context.Context, r *socks5.Request) (context.Context, bool) {
	if r.Command != statute.CommandConnect {
		return ctx, true // the bind/associate handlers refuse with 0x07
	}
	g := s.g
	var user, pass string
	if r.AuthContext != nil {
		user, pass = r.AuthContext.Payload["username"], r.AuthContext.Payload["password"]
	}
	id, ok := g.authenticate(user, pass)
	if !ok {
		return ctx, false
	}
	host := r.RawDestAddr.FQDN
	if host == "" {
		host = r.RawDestAddr.IP.String()
	}
	port := uint16(0)
	if r.RawDestAddr.Port > 0 && r.RawDestAddr.Port <= 65535 {
		port = uint16(r.RawDestAddr.Port)
	}
	if g.opt.Quarantine.Active(id.client) {
		qh := sanitize(host)
		if g.opt.Credentials.CheckHost(qh) != nil {
			qh = "(redacted)"
		}
		g.audit.Write(audit.Event{Session: id.session, Client: id.client, Proto: "socks5", Host: qh,
			Port: port, Verdict: "deny", Reason: reasonQuarantined, Policy: id.pol.Hash()})
		return ctx, false
	}
	if le := g.opt.Credentials.CheckHost(host); le != nil {
		g.opt.Quarantine.Leak(id.client, le.Credential)
		g.audit.Write(audit.Event{Session: id.session, Client: id.client, Proto: "socks5", Host: "(redacted)",
			Port: port, Verdict: "deny", Reason: reasonCredentialLeak, Credential: le.Credential, Policy: id.pol.Hash()})
		return ctx, false
	}
	d := id.pol.Decide(policy.Request{Proto: policy.ProtoSOCKS5, Host: host, Port: port, Client: id.client})
	if d.Verdict == policy.Deny {
		g.audit.Write(g.event(policy.ProtoSOCKS5, id, d, host, port))
		return ctx, false // go-socks5 replies 0x02, not allowed by ruleset
	}
	matched, spent := g.budgets.admit(id.client, d)
	if spent != nil {
		e := g.event(policy.ProtoSOCKS5, id, d, host, port)
		e.Verdict, e.Reason, e.Rule = "deny", reasonBudget, "budget:"+spent.Pattern
		g.audit.Write(e)
		return ctx, false
	}
	return context.WithValue(ctx, socksKey{}, &socksState{id: id, dec: d, host: host, port: port, budget: matched}), true
}

func (g *Gateway) socksConnect(ctx context.Context, w io.Writer, r *socks5.Request) error {
	st, _ := ctx.Value(socksKey{}).(*socksState)
	if st == nil || st.dec.Verdict == policy.Deny {
		_ = socks5.SendReply(w, replyNotAllowed, nil)
		return errors.New("socks5: no allow decision")
	}
	start := time.Now()
	client, ok := w.(net.Conn)
	if !ok {
		return errors.New("socks5: writer is not a connection")
	}
	_ = client.SetReadDeadline(time.Time{}) // the handshake is over
	e := g.event(policy.ProtoSOCKS5, st.id, st.dec, st.host, st.port)
	if st.dec.Verdict == policy.Inspect {
		if g.opt.Interceptor == nil {
			_ = socks5.SendReply(w, replyNotAllowed, nil)
			e.Verdict, e.Reason = "deny", reasonNoInterceptor
			g.audit.Write(e)
			return errors.New("socks5: inspection unavailable")
		}
		if err := socks5.SendReply(w, replySucceeded, &net.TCPAddr{IP: net.IPv4zero}); err != nil {
			return err
		}
		var conn net.Conn = client
		if br, ok := r.Reader.(*bufio.Reader); ok && br.Buffered() > 0 {
			conn = &peekedConn{Conn: client, r: br}
		}
		up, down := g.intercept(conn, st.id, st.dec, e, start, "socks5")
		g.budgets.charge(st.id.client, st.budget, up, down)
		return nil
	}
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	upstream, addr, err := g.dialUpstream(dctx, st.id, st.dec, false)
	cancel()
	if err != nil {
		_, reason, rule := dialReply(err)
		code := byte(replyHostUnreach)
		var ad *resolver.AddrDeniedError
		if errors.As(err, &ad) {
			code = replyNotAllowed
		}
		_ = socks5.SendReply(w, code, nil)
		e.Verdict, e.Reason, e.Rule = dialVerdict(err), reason, rule
		e.DurationMS = msSince(start)
		g.audit.Write(e)
		return err
	}
	e.Addr = addr.String()
	// Registered before the reply: a Shutdown that starts the moment the
	// client has it waits for this tunnel.
	untrack := g.trackTunnel(&tunnel{a: client, b: upstream, client: st.id.client, opaque: true})
	// Never reveal the gateway's own upstream address.
	if err := socks5.SendReply(w, replySucceeded, &net.TCPAddr{IP: net.IPv4zero}); err != nil {
		untrack()
		return err
	}
	if br, ok := r.Reader.(*bufio.Reader); ok && br.Buffered() > 0 {
		b, _ := br.Peek(br.Buffered())
		if _, err := upstream.Write(b); err != nil {
			untrack()
			return err
		}
		e.BytesUp += int64(len(b))
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
	g.budgets.charge(st.id.client, st.budget, e.BytesUp, e.BytesDown)
	e.DurationMS = msSince(start)
	g.audit.Write(e)
	return nil
}
