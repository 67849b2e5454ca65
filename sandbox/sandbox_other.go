//go:build !linux && !darwin

package sandbox

import (
	"context"
)

// MaybeInit does nothing on this platform.
func MaybeInit() {}

// Supported returns ErrUnsupported: this platform has no sandbox.
func Supported() error { return ErrUnsupported }

// Run returns ErrUnsupported and never runs the command unconfined.
func Run(ctx context.Context, s Spec) (int, error) { return SetupExitCode, ErrUnsupported }
