package sandbox_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"

	"github.com/moat-dev/moat/sandbox"
)

// An embedder serves its own gateway on a per-session unix socket in a
// private directory (the socket is the credential) and runs a command in
// the sandbox. main must call sandbox.MaybeInit first (importing the
// package does it too).
func Example() {
	dir, err := os.MkdirTemp("", "gw-") // mode 0700
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	sock := filepath.Join(dir, "gateway.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		panic(err)
	}
	defer ln.Close()
	go serveMyGateway(ln) // HTTP CONNECT / SOCKS5 on one socket

	code, err := sandbox.Run(context.Background(), sandbox.Spec{
		Args:          []string{"sh", "-c", "echo hello from the sandbox; touch /etc/x 2>/dev/null || echo /etc is read-only"},
		Dir:           dir,
		Env:           []string{"PATH=/usr/bin:/bin"},
		GatewaySocket: sock,
		Stdout:        os.Stdout,
		Stderr:        os.Stderr,
	})
	fmt.Println("exit", code, err)
	// Output:
	// hello from the sandbox
	// /etc is read-only
	// exit 0 <nil>
}

func serveMyGateway(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		c.Close() // a real gateway decides and proxies here
	}
}
