package sandbox

import "errors"

// ErrUnsupported is returned by Supported and Run when this platform or
// build cannot confine a command. moat never falls back to running the
// command unconfined.
var ErrUnsupported = errors.New("sandbox: not supported on this platform")

// ErrSetup wraps every failure to build the sandbox (namespaces, mounts,
// seccomp, relay). When Run returns it, the command was never started.
var ErrSetup = errors.New("sandbox: set-up failed")

// ErrNoCommand is returned when Spec.Args is empty.
var ErrNoCommand = errors.New("sandbox: no command")

// ErrNoGateway is returned when Spec.GatewaySocket is empty: the sandbox has
// no network except through the gateway, so a missing socket is a caller bug.
var ErrNoGateway = errors.New("sandbox: no gateway socket")

// SetupExitCode is the exit code reported with ErrSetup, after the
// convention of container runtimes (125: the runtime itself failed).
const SetupExitCode = 125
