// Package early starts the sandbox's PID 1 during package initialization
// when moat was invoked as `moat run`. Go initializes this package right
// after the sandbox package, before goproxy (which parses an RSA key), yaml,
// the CLI and the gateway: PID 1's own runtime start-up, the longest step of
// a launch, then overlaps all of that.
//
// main must hand the Pending to the run command (Take) or release it
// (Release) on every path.
package early

import (
	"os"

	"github.com/moat-dev/moat/sandbox"
)

var (
	pending *sandbox.Pending
	err     error
	started bool
)

func init() {
	if len(os.Args) < 2 || os.Args[1] != "run" {
		return
	}
	started = true
	pending, err = sandbox.Prepare(os.Stdin, os.Stdout, os.Stderr)
}

// Take returns the sandbox started at initialization and its error, once.
// ok is false if none was started (moat was not invoked as `moat run`, or
// Take was called before): the caller prepares its own.
func Take() (p *sandbox.Pending, e error, ok bool) {
	if !started {
		return nil, nil, false
	}
	started = false
	p, e = pending, err
	pending, err = nil, nil
	return p, e, true
}

// Release aborts the sandbox started at initialization if nobody took it
// (`moat run --help`, a flag error).
func Release() {
	if p, _, ok := Take(); ok && p != nil {
		p.Abort()
	}
}
