package e2e

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/moat-dev/moat/e2e/testnet"
	"github.com/moat-dev/moat/gateway/audit"
	"github.com/moat-dev/moat/resolver/dnstest"
	"github.com/moat-dev/moat/sandbox"
)

// tlsBox is a project whose settings terminate TLS for TLS upstream test
// hosts that a test CA signs; the settings trust that CA through
// upstreamCaCertPaths, the sandbox trusts moat's CA through the CA
// variables.
type tlsBox struct {
	*box
	gitRoot string
	audit   string
}

func newTLSBox(t *testing.T) *tlsBox {
	t.Helper()
	if err := sandbox.Supported(); err != nil {
		t.Skipf("sandbox unsupported here: %v", err)
	}
	need(t, "curl", "git", "python3")
	root := t.TempDir()
	b := &box{home: filepath.Join(root, "home")}
	b.project = filepath.Join(b.home, "project")
	os.MkdirAll(b.project, 0o755)
	n := testnet.New(t)
	b.upIP = n.IP().String()
	n.AddAddr(n.Addr(3).String())
	n.AddAddr(n.Addr(4).String())
	gitRoot := t.TempDir()
	testnet.NewBareRepo(t, gitRoot, "myorg/myrepo.git")
	testnet.NewBareRepo(t, gitRoot, "other/repo.git")
	_, _, caPEM := n.TLSServerOn(t, n.Addr(2).String()+":443", testnet.Handler(), "api.e2e.test")
	n.TLSServerOn(t, n.Addr(3).String()+":443", testnet.GitHandler(gitRoot), "git.e2e.test")
	n.TLSServerOn(t, n.Addr(4).String()+":443", testnet.Handler(), "raw.e2e.test")
	dns := dnstest.New(t)
	dns.Set("api.e2e.test", []netip.Addr{n.Addr(2)}, time.Minute)
	dns.Set("git.e2e.test", []netip.Addr{n.Addr(3)}, time.Minute)
	dns.Set("raw.e2e.test", []netip.Addr{n.Addr(4)}, time.Minute)
	dns.Set("lo.e2e.test", []netip.Addr{netip.MustParseAddr("127.0.0.1")}, time.Minute)
	b.settings = writeSettings(t, fmt.Sprintf(`
network:
  allowedDomains: ["api.e2e.test", "git.e2e.test", "raw.e2e.test", "lo.e2e.test"]
  tlsTerminate:
    excludeDomains: ["raw.e2e.test"]
    upstreamCaCertPaths: [%q]
  rules:
    - id: api-readonly
      host: api.e2e.test
      allow:
        - {method: [GET, HEAD], path: "/**"}
  git:
    - host: git.e2e.test
      fetch: ["*/*"]
      push:
        - repo: myorg/myrepo
          refs: ["refs/heads/agent/*"]
filesystem:
  allowWrite: [%q]
dns:
  servers: [%q]
audit:
  path: %q
`, caPEM, b.project, dns.Addr, filepath.Join(root, "audit.jsonl")))
	return &tlsBox{box: b, gitRoot: gitRoot, audit: filepath.Join(root, "audit.jsonl")}
}

func TestTLSTerminationRules(t *testing.T) {
	b := newTLSBox(t)
	out, code := b.sh(t, `
curl -sS -o /dev/null -w "get:%{http_code}\n" https://api.e2e.test/echo/repos/o/r
curl -sS -D - -o /dev/null -X POST -d x https://api.e2e.test/echo/repos/o/r | tr -d '\r' | grep -i -E '^(HTTP|X-Proxy-Error)'
python3 -c 'import urllib.request; print("py:", urllib.request.urlopen("https://api.e2e.test/bytes/5").status)'
curl -sS -o /dev/null -w "raw:%{http_code}\n" https://raw.e2e.test/bytes/5 || echo "raw failed"
head -c 40 ~/.config/moat/ca/key.pem 2>&1 | head -1
echo "gwdirs:$(ls /tmp/moat-gw-0 2>/dev/null | wc -l)"
curl -sS -D - -o /dev/null https://lo.e2e.test/ 2>&1 | tr -d '\r' | grep -i -E '^X-Proxy-Error' || echo "lo: no x-proxy-error"
`)
	for _, want := range []string{"get:200", "HTTP/2 403", "x-proxy-error: blocked-by-sandbox-runtime", "py: 200", "x-proxy-error: blocked-by-resolved-address"} {
		if !strings.Contains(strings.ToLower(out), strings.ToLower(want)) {
			t.Errorf("missing %q (exit %d):\n%s", want, code, out)
		}
	}
	if strings.Contains(out, "PRIVATE KEY") {
		t.Errorf("the CA's private key is readable inside the sandbox")
	}
	if !strings.Contains(out, "gwdirs:0") {
		t.Errorf("gateway session directories are visible inside:\n%s", out)
	}
	// Each inspected request has its own audit line.
	data, err := os.ReadFile(b.audit)
	if err != nil {
		t.Fatal(err)
	}
	var get, post bool
	for _, l := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		var e audit.Event
		if err := json.Unmarshal([]byte(l), &e); err != nil {
			t.Fatalf("audit line %q: %v", l, err)
		}
		if e.Proto != "mitm" || e.Path != "/echo/repos/o/r" {
			continue
		}
		switch {
		case e.Method == "GET" && e.Status == 200 && e.Verdict == "allow" && e.Rule == "api-readonly":
			get = true
		case e.Method == "POST" && e.Status == 403 && e.Verdict == "deny":
			post = true
		}
	}
	if !get || !post {
		t.Errorf("audit lines for the GET (%v) and the refused POST (%v) missing:\n%s", get, post, data)
	}
	// An excluded host is tunnelled untouched: the sandbox does not trust
	// the test CA, so curl fails verification of the real upstream cert.
	if strings.Contains(out, "raw:200") {
		t.Errorf("excluded host was terminated (curl trusted it through moat's CA):\n%s", out)
	}
	if strings.Contains(out, "lo: no x-proxy-error") {
		t.Errorf("inspected host resolving to loopback was not refused:\n%s", out)
	}
}

func TestTLSGitPushRules(t *testing.T) {
	b := newTLSBox(t)
	out, _ := b.sh(t, `
export GIT_AUTHOR_NAME=a GIT_AUTHOR_EMAIL=a@e2e.test GIT_COMMITTER_NAME=a GIT_COMMITTER_EMAIL=a@e2e.test
git clone -q https://git.e2e.test/myorg/myrepo.git r 2>&1 && echo "clone ok"
git clone -q https://git.e2e.test/other/repo.git o 2>&1 && echo "clone other ok"
cd r && git checkout -q -b agent/x && echo 1 > f && git add f && git commit -qm c
git push -q origin agent/x 2>&1 && echo "push agent ok"
git push origin agent/x:main 2>&1 | grep -i -E 'rejected|not allowed' | head -2; echo "---main"
git push origin :refs/heads/agent/x 2>&1 | grep -i -E 'rejected|not allowed|delet' | head -2; echo "---delete"
git push https://git.e2e.test/other/repo.git agent/x 2>&1 | grep -i 'not allowed' | head -1; echo "---other"
`)
	for _, want := range []string{"clone ok", "clone other ok", "push agent ok"} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q:\n%s", want, out)
		}
	}
	for _, sec := range []string{"---main", "---delete", "---other"} {
		i := strings.Index(out, sec)
		prev := out[:i]
		if j := strings.LastIndex(prev, "---"); j >= 0 {
			prev = prev[j:]
		}
		if !strings.Contains(strings.ToLower(prev), "not allowed") && !strings.Contains(strings.ToLower(prev), "rejected") {
			t.Errorf("push section %s printed no refusal reason:\n%s", sec, out)
		}
	}
	// The upstream has agent/x and nothing on main from the sandbox.
	ref := exec.Command("git", "--git-dir", filepath.Join(b.gitRoot, "myorg/myrepo.git"), "for-each-ref", "--format=%(refname)")
	refs, _ := ref.Output()
	if !strings.Contains(string(refs), "refs/heads/agent/x") {
		t.Errorf("allowed push did not land: %s", refs)
	}
}
