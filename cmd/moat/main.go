// Command moat runs untrusted commands behind one boundary: reads open except
// secrets, writes closed except the workspace, and the network reachable only
// through moat's gateway.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/moat-dev/moat/cmd/moat/internal/early"
	"github.com/moat-dev/moat/sandbox"
)

func main() {
	sandbox.MaybeInit()    // the sandbox's re-exec stage (PID 1) never returns
	takeEarly = early.Take // `moat run`'s PID 1 is already booting
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	early.Release() // not taken: `moat run --help`, a flag error
	os.Exit(code)
}
