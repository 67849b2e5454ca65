//go:build linux

package sandbox_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/moat-dev/moat/sandbox"
)

// fakeGateway listens on a unix socket and answers every connection with a
// fixed HTTP response after reading the request line, proving the relay.
func fakeGateway(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "moat-gw-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "gw.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = bufio.NewReader(c).ReadString('\n')
				_, _ = c.Write([]byte("HTTP/1.1 200 OK\r\nContent-Length: 7\r\n\r\nrelayed"))
			}()
		}
	}()
	return sock
}

// fixture is a fake $HOME with a credential store and a project with
// protected files, all below one temp directory.
type fixture struct {
	home, proj, outside, sock string
}

func newFixture(t *testing.T) fixture {
	t.Helper()
	if err := sandbox.Supported(); err != nil {
		t.Skipf("sandbox not supported here: %v", err)
	}
	base := t.TempDir()
	f := fixture{home: filepath.Join(base, "home"), outside: filepath.Join(base, "outside"), sock: fakeGateway(t)}
	f.proj = filepath.Join(f.home, "proj")
	files := map[string]string{
		"home/.ssh/id_ed25519":            "SECRET-KEY",
		"home/.bashrc":                    "orig",
		"home/proj/.git/config":           "orig",
		"home/proj/.git/hooks/pre-commit": "orig",
		"home/proj/.vscode/x":             "orig",
		"home/proj/sub/.bashrc":           "orig",
		"outside/file":                    "orig",
	}
	for p, c := range files {
		p = filepath.Join(base, p)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

func (f fixture) spec(args ...string) sandbox.Spec {
	return sandbox.Spec{
		Args: args, Dir: f.proj, GatewaySocket: f.sock,
		Env:                []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + f.home, "MOAT_GATEWAY_TOKEN=tok-do-not-leak", "HTTP_PROXY=http://user:pw@evil:1"},
		DenyRead:           []string{filepath.Join(f.home, ".ssh")},
		AllowWrite:         []string{f.proj},
		MandatoryDenyDepth: 3,
	}
}

func run(t *testing.T, s sandbox.Spec) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	s.Stdout, s.Stderr = &out, &errb
	code, err := sandbox.Run(context.Background(), s)
	if err != nil {
		t.Fatalf("Run(%q) error: %v (stderr %q)", s.Args, err, errb.String())
	}
	return code, out.String(), errb.String()
}

func sh(t *testing.T, f fixture, script string) (int, string, string) {
	t.Helper()
	return run(t, f.spec("/bin/sh", "-c", script))
}

func TestRunFilesystem(t *testing.T) {
	f := newFixture(t)
	cases := []struct {
		name, script, want string
	}{
		{"denyRead file is gone", "cat " + f.home + "/.ssh/id_ed25519", "No such file"},
		{"denyRead dir is empty", "ls -A " + f.home + "/.ssh | wc -l", "0"},
		{"write to HOME", "echo x > " + f.home + "/new", "Read-only file system"},
		{"write to /tmp", "echo x > /tmp/moat-test-x", "Read-only file system"},
		{"write outside allowWrite", "echo x >> " + f.outside + "/file", "Read-only file system"},
		{"write to /", "mkdir /newdir", "Read-only file system"},
		{"write to /dev", "echo x > /dev/newfile", "Read-only file system"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := sh(t, f, tc.script)
			got := out + errOut
			if !strings.Contains(got, tc.want) {
				t.Errorf("%s: exit %d, output %q, want it to contain %q", tc.script, code, got, tc.want)
			}
		})
	}
	if b, _ := os.ReadFile(filepath.Join(f.outside, "file")); string(b) != "orig" {
		t.Errorf("outside/file = %q after the run, want %q", b, "orig")
	}
	if _, err := os.Stat(filepath.Join(f.home, "new")); err == nil {
		t.Errorf("a write to $HOME reached the host")
	}
}

func TestRunProjectWritesAndMandatoryDenies(t *testing.T) {
	f := newFixture(t)
	protected := []string{".bashrc", ".gitconfig", ".mcp.json", ".git/hooks/pre-commit", ".git/config", ".vscode/x", ".vscode/new", "sub/.bashrc", ".claude/commands/x", ".idea/y"}
	var script strings.Builder
	script.WriteString("echo hello > out.txt && mkdir -p a/b && echo deep > a/b/c.txt\n")
	for _, p := range protected {
		fmt.Fprintf(&script, "if (mkdir -p \"$(dirname %s)\" && echo pwned >> %s) 2>/dev/null; then echo WROTE %s; fi\n", p, p, p)
	}
	script.WriteString("if echo pwned >> " + f.home + "/.bashrc 2>/dev/null; then echo WROTE home-bashrc; fi\n")
	code, out, errOut := sh(t, f, script.String())
	if code != 0 || strings.Contains(out, "WROTE") {
		t.Errorf("exit %d, stdout %q, stderr %q: want 0 and no WROTE line", code, out, errOut)
	}
	for p, want := range map[string]string{"out.txt": "hello\n", "a/b/c.txt": "deep\n"} {
		if b, err := os.ReadFile(filepath.Join(f.proj, p)); err != nil || string(b) != want {
			t.Errorf("host %s = %q, %v; want %q", p, b, err, want)
		}
	}
	for _, p := range protected {
		b, err := os.ReadFile(filepath.Join(f.proj, p))
		if err == nil && strings.Contains(string(b), "pwned") {
			t.Errorf("protected %s was written on the host: %q", p, b)
		}
	}
	// No placeholder survives the run.
	for _, p := range []string{".bashrc", ".gitconfig", ".mcp.json", ".idea", ".claude", ".zshrc"} {
		if _, err := os.Lstat(filepath.Join(f.proj, p)); err == nil {
			t.Errorf("placeholder %s left in the project after the run", p)
		}
	}
}

func python(t *testing.T) string {
	t.Helper()
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		t.Skip("no /usr/bin/python3")
	}
	return "/usr/bin/python3"
}

func TestRunSeccompAndNamespaces(t *testing.T) {
	f := newFixture(t)
	py := python(t)
	cases := []struct {
		name string
		args []string
		want string // in the combined output
	}{
		{"socket AF_UNIX", []string{py, "-c", "import socket; socket.socket(socket.AF_UNIX)"}, "Operation not permitted"},
		{"socketpair", []string{py, "-c", "import socket; socket.socketpair()"}, "Operation not permitted"},
		{"unshare -U", []string{"unshare", "-U", "true"}, "Operation not permitted"},
		{"unshare -n", []string{"unshare", "-n", "true"}, "Operation not permitted"},
		{"unshare -m", []string{"unshare", "-m", "true"}, "Operation not permitted"},
		{"mount", []string{"mount", "-t", "tmpfs", "none", "/mnt"}, "ermission denied"},
		{"umount2 syscall", []string{py, "-c", "import ctypes,os; l=ctypes.CDLL(None,use_errno=True); r=l.umount2(b'/proc',2); print('umount2', r, os.strerror(ctypes.get_errno()))"}, "umount2 -1 Operation not permitted"},
		{"mount syscall", []string{py, "-c", "import ctypes,os; l=ctypes.CDLL(None,use_errno=True); r=l.mount(b'none',b'/mnt',b'tmpfs',0,None); print('mount', r, os.strerror(ctypes.get_errno()))"}, "mount -1 Operation not permitted"},
		{"ptrace", []string{py, "-c", "import ctypes,os; l=ctypes.CDLL(None,use_errno=True); r=l.ptrace(0,0,0,0); print('ptrace', r, os.strerror(ctypes.get_errno()))"}, "ptrace -1 Operation not permitted"},
		{"pid 1 is the sandbox init", []string{"sh", "-c", "tr '\\0' ' ' </proc/1/cmdline"}, "moat-sandbox __moat-sandbox-init"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := run(t, f.spec(tc.args...))
			got := out + errOut
			if !strings.Contains(got, tc.want) {
				t.Errorf("%q: exit %d, output %q, want %q", tc.args, code, got, tc.want)
			}
		})
	}
	t.Run("net shows only lo", func(t *testing.T) {
		_, out, _ := run(t, f.spec("sh", "-c", "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '"))
		if out != "lo\n" {
			t.Errorf("interfaces = %q, want only lo", out)
		}
	})
	t.Run("few processes", func(t *testing.T) {
		_, out, _ := run(t, f.spec("sh", "-c", "for p in /proc/[0-9]*; do cat $p/comm; done"))
		for _, comm := range strings.Fields(out) {
			switch comm {
			case "sandbox.test", "moat-sandbox", "sh", "cat", "exe":
			default:
				t.Errorf("process %q visible inside the sandbox (all: %q)", comm, out)
			}
		}
	})
	t.Run("AllowAllUnixSockets lifts only AF_UNIX", func(t *testing.T) {
		s := f.spec(py, "-c", "import socket; socket.socket(socket.AF_UNIX); print('unix ok'); socket.socket(40, socket.SOCK_STREAM)")
		s.AllowAllUnixSockets = true
		_, out, errOut := run(t, s)
		if !strings.Contains(out, "unix ok") || !strings.Contains(errOut, "Operation not permitted") {
			t.Errorf("stdout %q stderr %q, want AF_UNIX allowed and AF_VSOCK denied", out, errOut)
		}
	})
}

func TestRunProcessBehaviour(t *testing.T) {
	f := newFixture(t)
	t.Run("exit code", func(t *testing.T) {
		if code, _, _ := sh(t, f, "exit 7"); code != 7 {
			t.Errorf("exit 7 gave %d", code)
		}
	})
	t.Run("signal death", func(t *testing.T) {
		if code, _, _ := sh(t, f, "kill -TERM $$"); code != 143 {
			t.Errorf("kill -TERM $$ gave %d, want 143", code)
		}
	})
	t.Run("stdin", func(t *testing.T) {
		s := f.spec("cat")
		s.Stdin = strings.NewReader("ping\n")
		if code, out, _ := run(t, s); code != 0 || out != "ping\n" {
			t.Errorf("cat = %d %q, want 0 %q", code, out, "ping\n")
		}
	})
	t.Run("weaker nested warns and stays confined", func(t *testing.T) {
		s := f.spec("/bin/sh", "-c", "echo x > /tmp/moat-weak; unshare -U true")
		s.WeakerNested = true
		_, _, errOut := run(t, s)
		for _, w := range []string{"WARNING: enableWeakerNestedSandbox", "Read-only file system", "unshare failed"} {
			if !strings.Contains(errOut, w) {
				t.Errorf("stderr %q, want %q", errOut, w)
			}
		}
	})
	t.Run("command not found", func(t *testing.T) {
		if code, _, errOut := run(t, f.spec("no-such-command-moat")); code != 127 {
			t.Errorf("missing command gave %d (%q), want 127", code, errOut)
		}
	})
	t.Run("environment", func(t *testing.T) {
		_, out, _ := sh(t, f, `echo "$HTTP_PROXY|$https_proxy|$ALL_PROXY|$NO_PROXY|$MOAT_SANDBOX|$MOAT_GATEWAY_TOKEN"; test -d "$TMPDIR" && echo x > "$TMPDIR/f" && echo tmpdir-ok`)
		want := "http://localhost:3128|http://localhost:3128|http://localhost:3128|localhost,127.0.0.1,::1|1|\ntmpdir-ok\n"
		if out != want {
			t.Errorf("env = %q, want %q", out, want)
		}
	})
	t.Run("relay reaches the gateway", func(t *testing.T) {
		py := python(t)
		script := `import socket
for host, port in (("127.0.0.1", 3128), ("127.0.0.1", 1080), ("::1", 3128)):
    s = socket.create_connection((host, port))
    s.sendall(b"GET http://x/ HTTP/1.1\r\n\r\n")
    s.shutdown(socket.SHUT_WR)
    data = b""
    while True:
        b = s.recv(4096)
        if not b: break
        data += b
    print(host, port, data.split(b"\r\n")[0].decode(), data.endswith(b"relayed"))
`
		_, out, errOut := run(t, f.spec(py, "-c", script))
		for _, w := range []string{"127.0.0.1 3128 HTTP/1.1 200 OK True", "127.0.0.1 1080 HTTP/1.1 200 OK True", "::1 3128 HTTP/1.1 200 OK True"} {
			if !strings.Contains(out, w) {
				t.Errorf("relay output %q (stderr %q), want %q", out, errOut, w)
			}
		}
	})
}

func TestRunSetupFailureNeverRunsCommand(t *testing.T) {
	f := newFixture(t)
	marker := filepath.Join(f.proj, "ran")
	s := f.spec("/bin/sh", "-c", "touch "+marker)
	s.Dir = filepath.Join(f.proj, "does-not-exist")
	code, err := sandbox.Run(context.Background(), s)
	if !errors.Is(err, sandbox.ErrSetup) || code != sandbox.SetupExitCode {
		t.Errorf("Run with a missing Dir = %d, %v; want %d, ErrSetup", code, err, sandbox.SetupExitCode)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Errorf("the command ran although set-up failed")
	}
}

// TestRunInterruptedDuringSetupNeverRunsCommand: a SIGINT that reaches
// PID 1 while it is still setting up (a terminal's ^C goes to the whole
// foreground group) ends the run; the command never starts.
func TestRunInterruptedDuringSetupNeverRunsCommand(t *testing.T) {
	f := newFixture(t)
	marker := filepath.Join(f.proj, "ran")
	before := map[int]bool{}
	for _, pid := range childPids() {
		before[pid] = true
	}
	p, err := sandbox.Prepare(nil, io.Discard, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	var pid1 int
	for _, pid := range childPids() {
		if !before[pid] {
			pid1 = pid
		}
	}
	if pid1 == 0 {
		p.Abort()
		t.Fatal("PID 1 of the prepared sandbox not found among our children")
	}
	// Let PID 1 boot (it then waits for its configuration). Either way,
	// caught or not, the signal must stop the run.
	time.Sleep(200 * time.Millisecond)
	if err := syscall.Kill(pid1, syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	s := f.spec("/bin/sh", "-c", "trap '' INT; touch "+marker+"; sleep 0.2")
	var errb bytes.Buffer
	s.Stdout, s.Stderr = io.Discard, &errb
	code, err := p.Run(context.Background(), s)
	if _, serr := os.Stat(marker); serr == nil {
		t.Errorf("the command ran after PID 1 was interrupted during set-up (exit %d, %v)", code, err)
	}
	if code != 130 {
		t.Errorf("exit %d (%v, stderr %q), want 130 (128+SIGINT)", code, err, errb.String())
	}
}

func mountCount(t *testing.T) int {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	return bytes.Count(b, []byte("\n"))
}

func childPids() []int {
	me := strconv.Itoa(os.Getpid())
	var out []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		s := string(b)
		if i := strings.LastIndexByte(s, ')'); i >= 0 {
			if f := strings.Fields(s[i+1:]); len(f) > 1 && f[1] == me {
				out = append(out, pid)
			}
		}
	}
	return out
}

func TestRunParallelLeavesNothing(t *testing.T) {
	f := newFixture(t)
	before := mountCount(t)
	runsBefore, _ := filepath.Glob(filepath.Join(os.TempDir(), "moat-run-*"))
	var wg sync.WaitGroup
	errs := make(chan error, 20)
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var out bytes.Buffer
			s := f.spec("/bin/sh", "-c", fmt.Sprintf("echo %d > out-%d; cat .bashrc 2>/dev/null; sleep 0.05", i, i))
			s.Stdout, s.Stderr = &out, &out
			code, err := sandbox.Run(context.Background(), s)
			if err != nil || code != 0 {
				errs <- fmt.Errorf("run %d: %d, %v, %q", i, code, err, out.String())
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if after := mountCount(t); after != before {
		t.Errorf("host mountinfo has %d lines after the runs, %d before", after, before)
	}
	ents, _ := os.ReadDir(f.proj)
	for _, e := range ents {
		n := e.Name()
		if n != ".git" && n != ".vscode" && n != "sub" && !strings.HasPrefix(n, "out-") {
			t.Errorf("left in the project: %s", n)
		}
	}
	runsAfter, _ := filepath.Glob(filepath.Join(os.TempDir(), "moat-run-*"))
	if len(runsAfter) > len(runsBefore) {
		t.Errorf("run directories left: %d before, %d after", len(runsBefore), len(runsAfter))
	}
	if kids := childPids(); len(kids) != 0 {
		t.Errorf("child processes left: %v", kids)
	}
}

func TestRunKilledParentIsCleanedByNextRun(t *testing.T) {
	f := newFixture(t)
	cmd := exec.Command("/proc/self/exe", "-test.run=^$")
	cmd.Env = append(os.Environ(), "MOAT_TEST_HELPER="+f.sock+"|"+f.proj+"|"+f.home)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, _ := bufio.NewReader(out).ReadString('\n')
	if line != "ready\n" {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("helper said %q, want ready", line)
	}
	placeholder := filepath.Join(f.proj, ".mcp.json")
	if _, err := os.Lstat(placeholder); err != nil {
		t.Fatalf("placeholder %s missing while the helper runs: %v", placeholder, err)
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	_ = cmd.Wait()
	// The next run (anywhere) cleans the dead run's records.
	other := newFixture(t)
	if code, _, _ := run(t, other.spec("true")); code != 0 {
		t.Fatalf("second run exit %d", code)
	}
	if _, err := os.Lstat(placeholder); err == nil {
		t.Errorf("placeholder %s of the killed run is still on the host", placeholder)
	}
}
