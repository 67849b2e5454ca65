package mitm

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moat-dev/moat/e2e/testnet"
	"github.com/moat-dev/moat/gateway/policy"
	"github.com/moat-dev/moat/gateway/policy/canon"
)

// bufConn reads what the CONNECT parser buffered before the socket.
type bufConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// startConnectProxy is a minimal stand-in for the gateway: it answers
// CONNECT with 200, decides the host with pol, and hands the connection to
// i.Serve for an Inspect decision. It returns the proxy URL.
func startConnectProxy(t *testing.T, i *Interceptor, pol *policy.Policy) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); l.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				br := bufio.NewReader(c)
				req, err := http.ReadRequest(br)
				if err != nil || req.Method != http.MethodConnect {
					c.Close()
					return
				}
				host, port, err := canon.SplitHostPort(req.Host)
				d := pol.Decide(policy.Request{Proto: policy.ProtoConnect, Host: host, Port: port})
				if err != nil || d.Verdict != policy.Inspect {
					_, _ = c.Write([]byte("HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n"))
					c.Close()
					return
				}
				_, _ = c.Write([]byte("HTTP/1.1 200 Connection established\r\n\r\n"))
				i.Serve(ctx, &bufConn{Conn: c, r: br}, d, Meta{Session: "git"}, func(c net.Conn) { c.Close() })
			}()
		}
	}()
	return "http://" + l.Addr().String()
}

func TestGitThroughInterceptor(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed")
	}
	root := t.TempDir()
	testnet.NewBareRepo(t, root, "owner/repo.git")
	testnet.NewBareRepo(t, root, "owner/other.git")
	testnet.NewBareRepo(t, root, "evil/x.git")

	upCA := testnet.NewCA(t)
	cert, err := upCA.Issue("git.test")
	if err != nil {
		t.Fatal(err)
	}
	up := httptest.NewUnstartedServer(testnet.GitHandler(root))
	up.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	up.StartTLS()
	t.Cleanup(up.Close)

	h := newHarness(t, harnessOpts{
		upstream: up, roots: upCA.Pool, host: "git.test",
		git: []GitRule{{
			Host:  "git.test",
			Fetch: []string{"owner/*"},
			Push:  []GitPush{{Repo: "owner/repo", Refs: []string{"refs/heads/agent/*"}}},
		}},
	})
	pol, err := policy.New(policy.Spec{Allow: []string{"git.test"}, InspectAll: true})
	if err != nil {
		t.Fatal(err)
	}
	proxy := startConnectProxy(t, h.i, pol)
	caFile := filepath.Join(t.TempDir(), "moat-ca.pem")
	if err := os.WriteFile(caFile, h.ca.CertPEM(), 0o644); err != nil {
		t.Fatal(err)
	}
	env := append(testnet.GitEnv(), "https_proxy="+proxy, "HTTPS_PROXY="+proxy, "GIT_SSL_CAINFO="+caFile)
	work := t.TempDir()
	git := func(dir string, args ...string) (string, error) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, "git", args...)
		cmd.Dir, cmd.Env = dir, env
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		return out.String(), err
	}

	if out, err := git(work, "clone", "https://git.test/owner/repo.git", "repo"); err != nil {
		t.Fatalf("clone allowed repo: %v\n%s", err, out)
	}
	clone := filepath.Join(work, "repo")
	if out, err := git(clone, "commit", "--allow-empty", "-m", "agent work"); err != nil {
		t.Fatalf("commit: %v\n%s", err, out)
	}
	if out, err := git(clone, "push", "origin", "HEAD:refs/heads/agent/one"); err != nil {
		t.Fatalf("push to allowed branch: %v\n%s", err, out)
	}
	if out, err := exec.Command("git", "--git-dir", filepath.Join(root, "owner/repo.git"), "rev-parse", "--verify", "refs/heads/agent/one").CombinedOutput(); err != nil {
		t.Errorf("allowed push did not reach the upstream: %v %s", err, out)
	}

	refused := []struct {
		name string
		dir  string
		args []string
		want string
	}{
		{"push to main", clone, []string{"push", "origin", "HEAD:refs/heads/main"}, "pushing to refs/heads/main is not allowed"},
		{"delete", clone, []string{"push", "origin", ":refs/heads/agent/one"}, "deleting refs/heads/agent/one is not allowed"},
		{"tag", clone, []string{"push", "origin", "HEAD:refs/tags/v1"}, "pushing tags is not allowed"},
		{"two refs, one refused", clone, []string{"push", "origin", "HEAD:refs/heads/agent/two", "HEAD:refs/heads/main"}, "another ref was refused"},
		{"other repo", clone, []string{"push", "https://git.test/owner/other.git", "HEAD:refs/heads/agent/x"}, "git push to owner/other is not allowed"},
		{"clone denied repo", work, []string{"clone", "https://git.test/evil/x.git", "x"}, "git fetch of evil/x is not allowed"},
	}
	for _, tc := range refused {
		out, err := git(tc.dir, tc.args...)
		if err == nil {
			t.Errorf("%s: git %s succeeded, want refused\n%s", tc.name, strings.Join(tc.args, " "), out)
			continue
		}
		t.Logf("%s:\n%s", tc.name, out)
		if !strings.Contains(out, tc.want) {
			t.Errorf("%s: git output does not contain %q:\n%s", tc.name, tc.want, out)
		}
	}
	for _, ref := range []string{"refs/heads/agent/two", "refs/tags/v1"} {
		if err := exec.Command("git", "--git-dir", filepath.Join(root, "owner/repo.git"), "rev-parse", "--verify", "-q", ref).Run(); err == nil {
			t.Errorf("refused push created %s upstream", ref)
		}
	}
	if err := exec.Command("git", "--git-dir", filepath.Join(root, "owner/repo.git"), "rev-parse", "--verify", "-q", "refs/heads/agent/one").Run(); err != nil {
		t.Error("refused delete removed refs/heads/agent/one upstream")
	}
}
