// Package e2e builds the real moat binary and drives it from outside with
// real clients (curl, git, python3) against upstream test hosts that live in
// network namespaces on 198.18.0.0/16.
package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/moat-dev/moat/gateway/audit"
	"github.com/moat-dev/moat/sandbox"
)

// moatBin is the binary under test, built once by TestMain.
var moatBin string

func TestMain(m *testing.M) {
	sandbox.MaybeInit()
	dir, err := os.MkdirTemp("", "moat-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	moatBin = filepath.Join(dir, "moat")
	if env := os.Getenv("MOAT_BIN"); env != "" {
		moatBin = env
	} else {
		cmd := exec.Command("go", "build", "-o", moatBin, "../cmd/moat")
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			fmt.Fprintln(os.Stderr, "build moat:", err)
			os.Exit(1)
		}
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func need(t *testing.T, bins ...string) {
	t.Helper()
	for _, b := range bins {
		if _, err := exec.LookPath(b); err != nil {
			t.Skipf("%s is not installed", b)
		}
	}
}

// writeSettings writes a YAML settings file and returns its path.
func writeSettings(t *testing.T, yaml string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "settings.yaml")
	if err := os.WriteFile(p, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// gatewayProc is a running `moat gateway`.
type gatewayProc struct {
	addr  string
	audit string
	cmd   *exec.Cmd
	out   *bytes.Buffer
}

// startGateway runs `moat gateway --no-auth` on a free loopback port.
func startGateway(t *testing.T, settings string, extra ...string) *gatewayProc {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	auditPath := filepath.Join(t.TempDir(), "audit.jsonl")
	args := append([]string{"gateway", "--settings", settings, "--listen", addr, "--no-auth", "--audit", auditPath}, extra...)
	cmd := exec.Command(moatBin, args...)
	out := &bytes.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	g := &gatewayProc{addr: addr, audit: auditPath, cmd: cmd, out: out}
	t.Cleanup(func() { g.stop(t) })
	for i := 0; i < 100; i++ {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return g
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("gateway did not start: %s", out)
	return nil
}

// stop sends SIGTERM and waits: the audit log is complete afterwards.
func (g *gatewayProc) stop(t *testing.T) {
	if g.cmd.ProcessState != nil {
		return
	}
	g.cmd.Process.Signal(os.Interrupt)
	done := make(chan error, 1)
	go func() { done <- g.cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		g.cmd.Process.Kill()
		<-done
		t.Errorf("gateway did not stop on SIGINT")
	}
}

// events stops the gateway and returns every audit line, each parsed.
func (g *gatewayProc) events(t *testing.T) []audit.Event {
	t.Helper()
	g.stop(t)
	f, err := os.Open(g.audit)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var ev []audit.Event
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var e audit.Event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("audit line %q: %v", sc.Text(), err)
		}
		ev = append(ev, e)
	}
	return ev
}

// run runs a command with a deadline and returns stdout, stderr, exit code.
func run(t *testing.T, timeout time.Duration, name string, args ...string) (string, string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = cleanEnv()
	var so, se bytes.Buffer
	cmd.Stdout, cmd.Stderr = &so, &se
	err := cmd.Run()
	code := 0
	if err != nil {
		ee, ok := err.(*exec.ExitError)
		if !ok {
			t.Fatalf("%s %v: %v", name, args, err)
		}
		code = ee.ExitCode()
	}
	return so.String(), se.String(), code
}

// cleanEnv is the environment without proxy variables, so curl uses only
// what a test passes.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasSuffix(strings.ToLower(k), "_proxy") {
			continue
		}
		env = append(env, kv)
	}
	return env
}
