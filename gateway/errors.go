package gateway

import "errors"

var (
	// ErrNoPolicy is returned by New without a policy: a gateway that
	// cannot decide must not start.
	ErrNoPolicy = errors.New("gateway: no policy")
	// ErrNoDialer is returned by New without a resolver dialer.
	ErrNoDialer = errors.New("gateway: no dialer")
	// ErrNoAuth is returned by New when neither tokens nor NoAuth are set.
	ErrNoAuth = errors.New("gateway: no tokens configured; set tokens or NoAuth")
	// ErrNoAuthNotLoopback is returned by Serve when NoAuth is set and the
	// listener is reachable from other machines.
	ErrNoAuthNotLoopback = errors.New("gateway: --no-auth is allowed only on loopback addresses and unix sockets")
	// ErrClosed is returned by Serve after Shutdown.
	ErrClosed = errors.New("gateway: closed")
)

// errNoDecision: the transport tried to dial without an allow decision.
var errNoDecision = errors.New("gateway: dial without an allow decision")
