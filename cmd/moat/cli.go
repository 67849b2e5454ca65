package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"
)

// Exit codes shared by every subcommand.
const (
	exitOK    = 0
	exitDeny  = 1 // moat check: the target is denied
	exitUsage = 2 // bad arguments or settings
)

// exitError carries an exit code out of a cobra command.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

func usageErr(format string, a ...any) error {
	return &exitError{code: exitUsage, err: fmt.Errorf(format, a...)}
}

// withCode attaches an exit code to err (nil stays nil).
func withCode(code int, err error) error {
	if err == nil {
		return nil
	}
	return &exitError{code: code, err: err}
}

// io bundles the streams a subcommand uses.
type stdio struct {
	in       io.Reader
	out, err io.Writer
}

// run is the whole CLI: main only adds signals and os.Exit. Subcommands are
// wired here, in one place.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	s := stdio{in: stdin, out: stdout, err: stderr}
	root := &cobra.Command{
		Use:           "moat",
		Short:         "Run untrusted commands behind one boundary: open reads, closed writes, gateway-only network",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetIn(stdin)
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return usageErr("%v (see %s --help)", err, c.CommandPath())
	})
	root.AddCommand(
		gatewayCmd(s),
		checkCmd(s),
		policyCmd(s),
		auditCmd(s),
		versionCmd(s),
	)
	root.AddCommand(extraCmds(s)...)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return exitOK
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.err != nil {
			fmt.Fprintln(stderr, "moat:", ee.err)
		}
		return ee.code
	}
	fmt.Fprintln(stderr, "moat:", err)
	// cobra's own errors (unknown command, bad args) are usage errors.
	return exitUsage
}
