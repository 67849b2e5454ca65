//go:build darwin

package sandbox

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
)

const sandboxExec = "/usr/bin/sandbox-exec"

// MaybeInit does nothing on macOS: sandbox-exec needs no re-exec stage.
func MaybeInit() {}

// Supported reports whether sandbox-exec is available.
func Supported() error {
	if _, err := os.Stat(sandboxExec); err != nil {
		return fmt.Errorf("%w: %s not found", ErrUnsupported, sandboxExec)
	}
	return nil
}

// Run runs s.Args under sandbox-exec with the profile of SeatbeltProfile.
// There is no network namespace on macOS, so the relay to the gateway socket
// runs in this process on two ephemeral localhost ports, and the profile
// allows only those.
func Run(ctx context.Context, s Spec) (int, error) {
	if err := Supported(); err != nil {
		return SetupExitCode, err
	}
	if len(s.Args) == 0 {
		return SetupExitCode, ErrNoCommand
	}
	if s.GatewaySocket == "" {
		return SetupExitCode, ErrNoGateway
	}
	tmp, err := os.MkdirTemp("", "moat-run-")
	if err != nil {
		return SetupExitCode, fmt.Errorf("%w: %v", ErrSetup, err)
	}
	defer os.RemoveAll(tmp)
	var ports [2]int
	for i := range ports {
		ln, err := net.Listen("tcp4", "127.0.0.1:0")
		if err != nil {
			return SetupExitCode, fmt.Errorf("%w: relay: %v", ErrSetup, err)
		}
		defer ln.Close()
		ports[i] = ln.Addr().(*net.TCPAddr).Port
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				go func() {
					g, err := net.Dial("unix", s.GatewaySocket)
					if err != nil {
						c.Close()
						return
					}
					Relay(c, g)
				}()
			}
		}()
	}
	home, _ := os.UserHomeDir()
	if h := homeOf(s.Env); h != "" {
		home = h
	}
	profile, err := SeatbeltProfile(s, SeatbeltOptions{TmpDir: tmp, Home: home, HTTPPort: ports[0], SOCKSPort: ports[1]})
	if err != nil {
		return SetupExitCode, err
	}
	self, _ := os.Executable()
	bundle := s.TrustBundle
	env := ProxyEnv(s.Env, EnvOptions{Self: self, TmpDir: tmp, TrustBundle: bundle, HTTPPort: ports[0], SOCKSPort: ports[1]})
	cmd := exec.Command(sandboxExec, append([]string{"-p", profile, "--"}, s.Args...)...)
	cmd.Dir, cmd.Env = s.Dir, env
	cmd.Stdin, cmd.Stdout, cmd.Stderr = s.Stdin, s.Stdout, s.Stderr
	if err := cmd.Start(); err != nil {
		return SetupExitCode, fmt.Errorf("%w: sandbox-exec: %v", ErrSetup, err)
	}
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGUSR1, syscall.SIGUSR2)
	defer signal.Stop(sigs)
	done := make(chan struct{})
	defer close(done)
	go func() {
		for {
			select {
			case sig := <-sigs:
				_ = cmd.Process.Signal(sig)
			case <-ctx.Done():
				_ = cmd.Process.Kill()
				return
			case <-done:
				return
			}
		}
	}()
	werr := cmd.Wait()
	code := cmd.ProcessState.ExitCode()
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		code = 128 + int(ws.Signal())
	}
	var ee *exec.ExitError
	if werr != nil && !errors.As(werr, &ee) {
		return code, fmt.Errorf("sandbox: wait: %w", werr)
	}
	return code, nil
}
