package resolver

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/moat-dev/moat/gateway/policy"
)

// Defaults for Dialer.
const (
	DefaultDialTimeout   = 10 * time.Second
	DefaultKeepAlive     = 30 * time.Second
	DefaultFallbackDelay = 300 * time.Millisecond // RFC 8305 §5 recommends 250 ms
	DefaultMaxAttempts   = 8
)

// Dialer connects to the destination of an allowed policy.Decision. It
// resolves the host once, judges every address with Policy.CheckAddr and
// dials only the addresses that passed, by IP: dialling the name would
// resolve it again, and a rebinding DNS server would then answer 127.0.0.1.
//
// A Dialer with a nil Policy refuses every decision. It is safe for
// concurrent use once its fields are set.
type Dialer struct {
	// Resolver resolves non-literal hosts; without one only IP literals
	// can be dialled.
	Resolver *Resolver
	// Policy judges each resolved address. Nil denies everything.
	Policy *policy.Policy
	// Dial makes one connection to "ip:port". Default: a net.Dialer with a
	// 10s timeout and 30s keep-alive. Tests inject it to see what would be
	// dialled without touching a real network.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// FallbackDelay is how long an attempt runs before the next address is
	// tried in parallel (happy eyeballs, RFC 8305). Default 300ms.
	FallbackDelay time.Duration
	// MaxAttempts bounds how many addresses one DialContext tries. Default 8.
	MaxAttempts int
}

var defaultNetDialer = &net.Dialer{Timeout: DefaultDialTimeout, KeepAlive: DefaultKeepAlive}

// DialContext connects to dec's destination and returns the connection and
// the address it reached. It refuses a decision that is not Allow or
// Inspect (ErrDenied) and a Dialer without a policy (ErrNoPolicy).
//
// Errors: *AddrDeniedError when every address was refused (the gateway's 403
// blocked-by-resolved-address); the resolver's error, wrapped, when the host
// did not resolve; *DialError when no permitted address accepted (502).
func (d *Dialer) DialContext(ctx context.Context, dec policy.Decision) (net.Conn, netip.AddrPort, error) {
	verdicts, err := d.Resolve(ctx, dec)
	if err != nil {
		return nil, netip.AddrPort{}, err
	}
	var ok []netip.AddrPort
	for _, v := range verdicts {
		if v.Allowed {
			ok = append(ok, v.Addr)
		}
	}
	if len(ok) == 0 {
		return nil, netip.AddrPort{}, &AddrDeniedError{Host: dec.Host.String(), Verdicts: verdicts}
	}
	return d.dialParallel(ctx, dec.Host.String(), interleave(ok))
}

// Resolve returns the verdict of every address dec's host resolves to, in
// resolver order, without dialling. It has the same refusals as DialContext;
// denied addresses are verdicts, not an error.
func (d *Dialer) Resolve(ctx context.Context, dec policy.Decision) ([]policy.AddrVerdict, error) {
	if d == nil || d.Policy == nil {
		return nil, ErrNoPolicy
	}
	// Re-check the verdict here rather than trust the caller: a zero
	// Decision (a forgotten Decide) must not dial.
	if dec.Verdict != policy.Allow && dec.Verdict != policy.Inspect {
		return nil, fmt.Errorf("%w: %s %s (%s)", ErrDenied, dec.Verdict, dec.Host, dec.Text())
	}
	if dec.Port == 0 || (!dec.Host.IsIP() && dec.Host.Name == "") {
		return nil, fmt.Errorf("%w: %q port %d", ErrBadDestination, dec.Host.String(), dec.Port)
	}

	var addrs []netip.Addr
	if dec.Host.IsIP() {
		addrs = []netip.Addr{dec.Host.Addr}
	} else {
		if d.Resolver == nil {
			return nil, fmt.Errorf("%w: cannot resolve %s", ErrNoResolver, dec.Host.Name)
		}
		var err error
		addrs, err = d.Resolver.Lookup(ctx, dec.Host.Name)
		if err != nil {
			return nil, fmt.Errorf("dial %s: %w", dec.Host.Name, err)
		}
		if len(addrs) == 0 {
			return nil, fmt.Errorf("dial %s: %w", dec.Host.Name, &NotFoundError{Name: dec.Host.Name})
		}
	}

	out := make([]policy.AddrVerdict, len(addrs))
	for i, a := range addrs {
		ap := netip.AddrPortFrom(a, dec.Port)
		v := d.Policy.CheckAddr(dec, ap)
		// Dial exactly what was judged, whatever the verdict echoes.
		v.Addr = ap
		out[i] = v
	}
	return out, nil
}

// interleave orders addresses for happy eyeballs (RFC 8305 §4): alternate
// families, starting with the family of the first address, keeping the
// resolver's order within each family.
func interleave(as []netip.AddrPort) []netip.AddrPort {
	if len(as) < 2 {
		return as
	}
	first := as[0].Addr().Is4()
	var same, other []netip.AddrPort
	for _, a := range as {
		if a.Addr().Is4() == first {
			same = append(same, a)
		} else {
			other = append(other, a)
		}
	}
	out := make([]netip.AddrPort, 0, len(as))
	for i := 0; i < len(same) || i < len(other); i++ {
		if i < len(same) {
			out = append(out, same[i])
		}
		if i < len(other) {
			out = append(out, other[i])
		}
	}
	return out
}

type dialResult struct {
	conn net.Conn
	addr netip.AddrPort
	err  error
}

// dialParallel races connection attempts to targets (RFC 8305 §5): the next
// attempt starts when the previous one fails or after FallbackDelay, the
// first success wins, and every other attempt is cancelled or, if it
// connected anyway, closed.
func (d *Dialer) dialParallel(ctx context.Context, host string, targets []netip.AddrPort) (net.Conn, netip.AddrPort, error) {
	dial := d.Dial
	if dial == nil {
		dial = defaultNetDialer.DialContext
	}
	delay := d.FallbackDelay
	if delay <= 0 {
		delay = DefaultFallbackDelay
	}
	maxAttempts := d.MaxAttempts
	if maxAttempts <= 0 {
		maxAttempts = DefaultMaxAttempts
	}
	if len(targets) > maxAttempts {
		targets = targets[:maxAttempts]
	}

	ctx, cancel := context.WithCancel(ctx)
	// Buffered for every attempt, so no attempt goroutine ever blocks
	// after we return.
	results := make(chan dialResult, len(targets))
	next, running := 0, 0
	start := func() {
		a := targets[next]
		next++
		running++
		go func() {
			c, err := dial(ctx, "tcp", a.String())
			if err != nil {
				err = fmt.Errorf("%s: %w", a, err)
			}
			results <- dialResult{conn: c, addr: a, err: err}
		}()
	}
	// The losers are reaped off the caller's path: cancel them, then
	// close any that connected before seeing the cancellation.
	reap := func(n int) {
		cancel()
		if n == 0 {
			return
		}
		go func() {
			for range n {
				if r := <-results; r.conn != nil {
					r.conn.Close()
				}
			}
		}()
	}

	timer := time.NewTimer(delay)
	defer timer.Stop()
	var errs []error
	start()
	for {
		var fallback <-chan time.Time
		if next < len(targets) {
			timer.Reset(delay)
			fallback = timer.C
		}
		select {
		case <-fallback:
			start()
		case r := <-results:
			running--
			if r.err == nil && r.conn != nil {
				reap(running)
				return r.conn, r.addr, nil
			}
			if r.err == nil {
				r.err = fmt.Errorf("%s: dial returned no connection", r.addr)
			}
			errs = append(errs, r.err)
			if next < len(targets) {
				start()
			} else if running == 0 {
				cancel()
				return nil, netip.AddrPort{}, &DialError{Host: host, Addrs: targets, Errs: errs}
			}
		case <-ctx.Done():
			errs = append(errs, ctx.Err())
			reap(running)
			return nil, netip.AddrPort{}, &DialError{Host: host, Addrs: targets[:next], Errs: errs}
		}
	}
}
