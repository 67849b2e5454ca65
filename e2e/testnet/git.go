package testnet

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/cgi"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// maxGitBody caps a request body that GitHandler must buffer (see below).
const maxGitBody = 256 << 20

// GitHandler serves the bare repositories under root over git's smart HTTP
// protocol, through `git http-backend` as a CGI program: clone, fetch and
// push (http.receivepack is on, with no authentication) all work. Serve it
// at "/" so that URL paths map to paths under root. It ignores the host's
// system and global git configuration.
func GitHandler(root string) http.Handler {
	gitPath, err := exec.LookPath("git")
	if err != nil {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			http.Error(w, "testnet: git is not installed: "+err.Error(), http.StatusInternalServerError)
		})
	}
	h := &cgi.Handler{
		Path: gitPath,
		Dir:  root,
		Args: []string{"http-backend"},
		Env: append([]string{
			"GIT_PROJECT_ROOT=" + root,
			"GIT_HTTP_EXPORT_ALL=1",
			"HOME=" + root,
		}, gitIsolatedEnv("http.receivepack", "true", "safe.directory", "*")...),
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// net/http/cgi refuses chunked bodies, which git sends for any
		// POST above http.postBuffer (1 MiB) and HTTP/2 never announces a
		// length; buffer such bodies so that large pushes work too.
		if r.ContentLength < 0 {
			body, err := io.ReadAll(io.LimitReader(r.Body, maxGitBody+1))
			if err != nil {
				http.Error(w, "read body: "+err.Error(), http.StatusBadRequest)
				return
			}
			if len(body) > maxGitBody {
				http.Error(w, "body too large for the test git server", http.StatusRequestEntityTooLarge)
				return
			}
			r.Body = io.NopCloser(bytes.NewReader(body))
			r.ContentLength = int64(len(body))
			r.TransferEncoding = nil
		}
		h.ServeHTTP(w, r)
	})
}

// gitIsolatedEnv returns environment entries that make git ignore the
// host's system and global configuration and set the given key/value
// pairs, so tests behave the same on every machine.
func gitIsolatedEnv(kv ...string) []string {
	env := []string{
		"GIT_CONFIG_NOSYSTEM=1",
		"GIT_CONFIG_GLOBAL=/dev/null",
		fmt.Sprintf("GIT_CONFIG_COUNT=%d", len(kv)/2),
	}
	for i := 0; i+1 < len(kv); i += 2 {
		env = append(env,
			fmt.Sprintf("GIT_CONFIG_KEY_%d=%s", i/2, kv[i]),
			fmt.Sprintf("GIT_CONFIG_VALUE_%d=%s", i/2, kv[i+1]))
	}
	return env
}

// GitEnv returns an environment for git clients in tests: the process's
// environment without proxy variables or git configuration from the host,
// plus a fixed author and committer. Append to it, for example, the
// http_proxy that a test wants git to use.
func GitEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch strings.ToLower(k) {
		case "http_proxy", "https_proxy", "all_proxy", "no_proxy":
			continue
		}
		if strings.HasPrefix(k, "GIT_") {
			continue
		}
		env = append(env, kv)
	}
	env = append(env,
		"GIT_AUTHOR_NAME=moat test", "GIT_AUTHOR_EMAIL=test@moat.invalid",
		"GIT_COMMITTER_NAME=moat test", "GIT_COMMITTER_EMAIL=test@moat.invalid",
		"GIT_AUTHOR_DATE=2025-01-01T00:00:00Z", "GIT_COMMITTER_DATE=2025-01-01T00:00:00Z",
		"GIT_TERMINAL_PROMPT=0",
	)
	return append(env, gitIsolatedEnv("init.defaultBranch", "main", "protocol.version", "2")...)
}

// NewBareRepo creates the bare repository root/name (for example
// "owner/repo.git") holding one commit on main, with README.md, and returns
// that commit's id. It fails the test if git is missing.
func NewBareRepo(t testing.TB, root, name string) string {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Fatalf("testnet: git is not installed: %v", err)
	}
	dir := filepath.Join(root, filepath.FromSlash(name))
	git := func(stdin string, args ...string) string {
		t.Helper()
		cmd := exec.Command("git", args...)
		cmd.Env = GitEnv()
		cmd.Stdin = strings.NewReader(stdin)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("testnet: git %s: %v: %s", strings.Join(args, " "), err, stderr.Bytes())
		}
		return strings.TrimSpace(string(out))
	}
	git("", "init", "--quiet", "--bare", "--initial-branch=main", dir)
	// Plumbing instead of a work tree: one blob, one tree, one commit.
	blob := git("# "+name+"\n", "--git-dir", dir, "hash-object", "-w", "--stdin")
	tree := git("100644 blob "+blob+"\tREADME.md\n", "--git-dir", dir, "mktree")
	commit := git("", "--git-dir", dir, "commit-tree", tree, "-m", "initial commit")
	git("", "--git-dir", dir, "update-ref", "refs/heads/main", commit)
	return commit
}
