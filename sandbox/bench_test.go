package sandbox_test

import (
	"context"
	"net"
	"path/filepath"
	"testing"

	"github.com/moat-dev/moat/sandbox"
)

// BenchmarkRunTrue measures one whole sandbox launch for `true`: namespaces,
// mounts, relay, seccomp, exec and teardown.
func BenchmarkRunTrue(b *testing.B) {
	if err := sandbox.Supported(); err != nil {
		b.Skip(err)
	}
	d := b.TempDir()
	sock := filepath.Join(d, "gw.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	proj := b.TempDir()
	spec := sandbox.Spec{Args: []string{"true"}, Dir: proj, Env: []string{"PATH=/usr/bin:/bin", "HOME=/root"},
		GatewaySocket: sock, AllowWrite: []string{proj}, MandatoryDenyDepth: 3,
		DenyRead: []string{"/root/.ssh", "/root/.aws", "/root/.gnupg"}}
	for b.Loop() {
		code, err := sandbox.Run(context.Background(), spec)
		if err != nil || code != 0 {
			b.Fatalf("Run(true) = %d, %v", code, err)
		}
	}
}
