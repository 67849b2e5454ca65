//go:build linux && !cgo

package sandbox

import "fmt"

// cgoSupported fails closed: without cgo there is no libseccomp, and moat
// never runs a command without its seccomp filter.
func cgoSupported() error {
	return fmt.Errorf("%w: this moat was built without cgo, so it has no seccomp filter (rebuild with CGO_ENABLED=1 and libseccomp)", ErrUnsupported)
}

func compileSeccomp([]SeccompRule) ([]byte, error) { return nil, cgoSupported() }
