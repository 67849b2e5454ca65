package sandbox_test

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/moat-dev/moat/sandbox"
)

// TestMain lets the test binary act as the sandbox's re-exec stages, and as
// a helper moat that a test kills with SIGKILL mid-run.
func TestMain(m *testing.M) {
	sandbox.MaybeInit()
	if h := os.Getenv("MOAT_TEST_HELPER"); h != "" {
		// h = "SOCK|PROJ|HOME"
		p := strings.Split(h, "|")
		code, _ := sandbox.Run(context.Background(), sandbox.Spec{
			Args: []string{"/bin/sh", "-c", "echo ready; sleep 30"}, Dir: p[1], GatewaySocket: p[0],
			Env: []string{"PATH=/usr/bin:/bin", "HOME=" + p[2]}, AllowWrite: []string{p[1]},
			MandatoryDenyDepth: 1, Stdout: os.Stdout, Stderr: os.Stderr,
		})
		os.Exit(code)
	}
	os.Exit(m.Run())
}
