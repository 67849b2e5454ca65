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
// the sandbox. main must call sandbox.MaybeInit first.
func Example() {
	dir, err := os.MkdirTemp("", "gw-") // 0700
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

	wd, _ := os.Getwd()
	code, err := sandbox.Run(context.Background(), sandbox.Spec{
		Args:               []string{"curl", "-s", "https://example.com/"},
		Dir:                wd,
		Env:                os.Environ(),
		GatewaySocket:      sock,
		AllowWrite:         []string{wd},
		DenyRead:           []string{os.Getenv("HOME") + "/.ssh"},
		MandatoryDenyDepth: 3,
		Stdin:              os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "sandbox:", err) // never ran unconfined
	}
	os.Exit(code)
}

func serveMyGateway(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		c.Close()
	}
}
