package mitm

import "errors"

// ErrNoCA is returned by New without a CA: an interceptor that cannot
// terminate TLS must not pretend to inspect.
var ErrNoCA = errors.New("mitm: no CA")

// ErrNoDial is returned by New without a Dial function: upstream
// connections must go through the policy-checked dialer, never a name
// lookup of their own.
var ErrNoDial = errors.New("mitm: no upstream dialer")

// ErrNoRules is returned by New when Rules is nil. Use an empty RuleSet
// (CompileRules(nil, nil)) to inspect without per-request rules.
var ErrNoRules = errors.New("mitm: no rule set")

// ErrBadRule is wrapped by every CompileRules error.
var ErrBadRule = errors.New("mitm: bad rule")

// ErrPktLine is wrapped by ParsePushCommands errors for malformed
// pkt-lines or commands.
var ErrPktLine = errors.New("mitm: malformed git pkt-line")

// ErrPushTooLarge is wrapped by ParsePushCommands when the command list
// exceeds its byte or count limit.
var ErrPushTooLarge = errors.New("mitm: git push command list too large")

// ErrSignedPush is wrapped by ParsePushCommands for signed pushes
// (push-cert), whose commands it does not inspect: refused, not passed.
var ErrSignedPush = errors.New("mitm: signed git pushes are not supported")
