//go:build !linux

package sandbox

import (
	"context"
	"io"
)

// Pending is a sandbox prepared by Prepare; here nothing boots early.
type Pending struct{ used bool }

// Prepare checks support; Run does the work on this platform.
func Prepare(stdin io.Reader, stdout, stderr io.Writer) (*Pending, error) {
	if err := Supported(); err != nil {
		return nil, err
	}
	return &Pending{}, nil
}

// Run runs s (see the package-level Run).
func (p *Pending) Run(ctx context.Context, s Spec) (int, error) {
	if p.used {
		return SetupExitCode, ErrSetup
	}
	p.used = true
	return Run(ctx, s)
}

// Abort releases a Pending sandbox that will not run.
func (p *Pending) Abort() {}
