//go:build linux

package testnet

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// getEcho fetches u+"echo" with c and decodes the reply.
func getEcho(t *testing.T, c *http.Client, base string) Echo {
	t.Helper()
	resp, err := c.Get(strings.TrimSuffix(base, "/") + "/echo")
	if err != nil {
		t.Fatalf("GET %s/echo: %v", base, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s/echo: status %d", base, resp.StatusCode)
	}
	var e Echo
	if err := json.NewDecoder(resp.Body).Decode(&e); err != nil {
		t.Fatalf("decode echo: %v", err)
	}
	return e
}

func TestNewAddresses(t *testing.T) {
	n := New(t)
	bench := netip.MustParsePrefix("198.18.0.0/16")
	for _, a := range []netip.Addr{n.HostIP(), n.IP()} {
		if !bench.Contains(a) {
			t.Fatalf("address %s is outside %s", a, bench)
		}
	}
	if !strings.HasPrefix(n.Name(), fmt.Sprintf("%s%d-", nsPrefix, os.Getpid())) {
		t.Errorf("Name() = %q, want prefix %s%d-", n.Name(), nsPrefix, os.Getpid())
	}
	out, err := n.Command(context.Background(), "ip", "-4", "-o", "addr", "show").CombinedOutput()
	if err != nil {
		t.Fatalf("ip addr inside: %v: %s", err, out)
	}
	for _, want := range []string{"127.0.0.1/8", n.IP().String() + "/24"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("namespace addresses %q lack %s", out, want)
		}
	}
	if strings.Contains(string(out), n.HostIP().String()) {
		t.Errorf("namespace has the host side's %s: %s", n.HostIP(), out)
	}
}

func TestHTTPFromHostOverVeth(t *testing.T) {
	n := New(t)
	u := n.HTTPServer(t, Handler())
	if want := "http://" + n.IP().String() + "/"; u.String() != want {
		t.Errorf("HTTPServer URL = %s, want %s", u, want)
	}
	e := getEcho(t, noProxyClient(), u.String())
	// The peer is the host end of the veth: the request crossed namespaces.
	remote, err := netip.ParseAddrPort(e.Remote)
	if err != nil {
		t.Fatalf("echo remote %q: %v", e.Remote, err)
	}
	if remote.Addr() != n.HostIP() {
		t.Errorf("server saw client %s, want the host side %s", remote.Addr(), n.HostIP())
	}
	resp, err := noProxyClient().Get(u.String() + "bytes/1048576")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if got, err := CheckPattern(resp.Body); err != nil || got != 1<<20 {
		t.Errorf("GET /bytes/1048576: read %d bytes, err %v; want %d, nil", got, err, 1<<20)
	}
}

// TestNotOnHostLoopback proves the listener lives in the namespace: from
// the host, 127.0.0.1:port is not it, while from inside the namespace it is.
func TestNotOnHostLoopback(t *testing.T) {
	n := New(t)
	ln, err := n.Listen("tcp4", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	token := fmt.Sprintf("testnet-token-%d-%s", os.Getpid(), n.Name())
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			fmt.Fprintln(c, token)
			c.Close()
		}
	}()
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)

	read := func(c net.Conn) string {
		defer c.Close()
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second)) // bounds a stranger that says nothing
		line, _ := bufio.NewReader(c).ReadString('\n')
		return strings.TrimSpace(line)
	}

	// Positive controls: over the veth from the host, and on the
	// namespace's own loopback from inside.
	c, err := net.Dial("tcp4", net.JoinHostPort(n.IP().String(), port))
	if err != nil {
		t.Fatalf("dial over veth: %v", err)
	}
	if got := read(c); got != token {
		t.Fatalf("over veth: read %q, want the token", got)
	}
	c, err = n.DialContext(context.Background(), "tcp4", net.JoinHostPort("127.0.0.1", port))
	if err != nil {
		t.Fatalf("dial namespace loopback from inside: %v", err)
	}
	if got := read(c); got != token {
		t.Fatalf("namespace loopback: read %q, want the token", got)
	}

	// The host's loopback is another stack: refused, or some unrelated
	// server that happens to own the port, but never ours.
	c, err = net.Dial("tcp4", net.JoinHostPort("127.0.0.1", port))
	if err != nil {
		if !errors.Is(err, syscall.ECONNREFUSED) {
			t.Logf("host 127.0.0.1:%s: %v", port, err)
		}
		return
	}
	if got := read(c); got == token {
		t.Fatalf("the namespace's server answered on the host's 127.0.0.1:%s", port)
	}
}

func TestAddAddrSecondHost(t *testing.T) {
	n := New(t)
	second := n.Addr(3)
	n.AddAddr(second.String())
	u := n.HTTPServerOn(t, net.JoinHostPort(second.String(), "8080"), Handler())
	if want := "http://" + second.String() + ":8080/"; u.String() != want {
		t.Errorf("HTTPServerOn URL = %s, want %s", u, want)
	}
	e := getEcho(t, noProxyClient(), u.String())
	if want := second.String() + ":8080"; e.Host != want {
		t.Errorf("echo host = %q, want %q", e.Host, want)
	}
	// Nothing listens on .2:8080, so the request really went to .3.
	if _, err := net.Dial("tcp4", net.JoinHostPort(n.IP().String(), "8080")); err == nil {
		t.Errorf("dial %s:8080 succeeded, want refused", n.IP())
	}
}

func TestListenPacketUDP(t *testing.T) {
	n := New(t)
	pc, err := n.ListenPacket("udp4", net.JoinHostPort(n.IP().String(), "0"))
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	go func() {
		buf := make([]byte, 1500)
		for {
			k, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			_, _ = pc.WriteTo(append([]byte("echo:"), buf[:k]...), from)
		}
	}()
	c, err := net.Dial("udp4", pc.LocalAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 1500)
	// UDP may drop; a few tries, bounded in count and by the deadline.
	for try := range 3 {
		if _, err := c.Write([]byte("ping")); err != nil {
			t.Fatal(err)
		}
		k, err := c.Read(buf)
		if err == nil {
			if got := string(buf[:k]); got != "echo:ping" {
				t.Fatalf("UDP reply %q, want %q", got, "echo:ping")
			}
			if c.LocalAddr().(*net.UDPAddr).IP.String() != n.HostIP().String() {
				t.Errorf("UDP went out from %s, want %s", c.LocalAddr(), n.HostIP())
			}
			return
		}
		t.Logf("try %d: %v", try, err)
	}
	t.Fatal("no UDP reply from the namespace")
}

func TestTLSServerH1AndH2(t *testing.T) {
	n := New(t)
	const name = "upstream.test"
	u, pool, caPath := n.TLSServer(t, Handler(), name)
	if want := "https://" + n.IP().String() + "/"; u.String() != want {
		t.Errorf("TLSServer URL = %s, want %s", u, want)
	}
	pemBytes, err := os.ReadFile(caPath)
	if err != nil {
		t.Fatal(err)
	}
	if !x509.NewCertPool().AppendCertsFromPEM(pemBytes) {
		t.Fatalf("%s holds no PEM certificate", caPath)
	}
	tests := []struct {
		name       string
		serverName string
		h2         bool
		wantProto  string
	}{
		{name: "h2 by DNS name", serverName: name, h2: true, wantProto: "HTTP/2.0"},
		{name: "http/1.1 by DNS name", serverName: name, h2: false, wantProto: "HTTP/1.1"},
		{name: "h2 by IP", serverName: "", h2: true, wantProto: "HTTP/2.0"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr := &http.Transport{
				Proxy:           nil,
				TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: tc.serverName},
			}
			if tc.h2 {
				tr.ForceAttemptHTTP2 = true
			} else {
				tr.TLSClientConfig.NextProtos = []string{"http/1.1"}
			}
			defer tr.CloseIdleConnections()
			c := &http.Client{Transport: tr}
			resp, err := c.Get(u.String() + "echo")
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var e Echo
			if err := json.NewDecoder(resp.Body).Decode(&e); err != nil {
				t.Fatal(err)
			}
			if resp.Proto != tc.wantProto || e.Proto != tc.wantProto || !e.TLS {
				t.Errorf("client proto %s, server proto %s tls=%v; want %s over TLS", resp.Proto, e.Proto, e.TLS, tc.wantProto)
			}
		})
	}
	t.Run("untrusted without the test CA", func(t *testing.T) {
		tr := &http.Transport{Proxy: nil, TLSClientConfig: &tls.Config{RootCAs: x509.NewCertPool(), ServerName: name}}
		defer tr.CloseIdleConnections()
		_, err := (&http.Client{Transport: tr}).Get(u.String())
		var unknown x509.UnknownAuthorityError
		if !errors.As(err, &unknown) {
			t.Errorf("GET without the CA: %v, want x509.UnknownAuthorityError", err)
		}
	})
	t.Run("wrong name", func(t *testing.T) {
		tr := &http.Transport{Proxy: nil, TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: "other.test"}}
		defer tr.CloseIdleConnections()
		_, err := (&http.Client{Transport: tr}).Get(u.String())
		var invalid x509.HostnameError
		if !errors.As(err, &invalid) {
			t.Errorf("GET as other.test: %v, want x509.HostnameError", err)
		}
	})
}

func TestCleanupRemovesNamespace(t *testing.T) {
	var name, link string
	var x int
	t.Run("inner", func(t *testing.T) {
		n := New(t)
		n.HTTPServer(t, Handler())
		name, link, x = n.Name(), n.hostLink, n.x
		if !strings.Contains(ipList(t), name) {
			t.Fatalf("ip netns list lacks %s while the test runs", name)
		}
	})
	if name == "" {
		t.Skip("inner test skipped")
	}
	if list := ipList(t); strings.Contains(list, name) {
		t.Errorf("ip netns list still has %s after cleanup:\n%s", name, list)
	}
	if _, err := os.Stat(filepath.Join(netnsDir, name)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("stat %s after cleanup: %v, want not exist", name, err)
	}
	if out, err := ipCmd("link", "show", link); err == nil {
		t.Errorf("host link %s still exists after cleanup: %s", link, out)
	}
	lock, err := tryLock(x)
	if err != nil || lock == nil {
		t.Fatalf("lock of subnet %d after cleanup: %v, %v; want it free", x, lock, err)
	}
	lock.Close()
}

func ipList(t *testing.T) string {
	t.Helper()
	out, err := ipCmd("netns", "list")
	if err != nil {
		t.Fatalf("ip netns list: %v: %s", err, out)
	}
	return string(out)
}

func TestStaleNamespaceRemoved(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("ip not installed")
	}
	// A pid that has exited: a child we ran and reaped.
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	pid := dead.Process.Pid
	if processAlive(pid) {
		t.Skipf("pid %d was reused already", pid)
	}
	stale := fmt.Sprintf("%s%d-1", nsPrefix, pid)
	alive := fmt.Sprintf("%s1-%d", nsPrefix, os.Getpid()) // pid 1 is alive
	for _, name := range []string{stale, alive} {
		if out, err := ipCmd("netns", "add", name); err != nil {
			t.Skipf("ip netns add: %v: %s", err, out)
		}
		t.Cleanup(func() { _, _ = ipCmd("netns", "del", name) })
	}
	New(t)
	list := ipList(t)
	if strings.Contains(list, stale) {
		t.Errorf("stale namespace %s of dead pid %d survived New:\n%s", stale, pid, list)
	}
	if !strings.Contains(list, alive) {
		t.Errorf("namespace %s of live pid 1 was removed by New", alive)
	}
}

func TestParallelNewDistinctSubnets(t *testing.T) {
	const k = 3
	nets := make([]*Net, k)
	for i := range nets {
		nets[i] = New(t)
	}
	seen := map[int]bool{}
	for _, n := range nets {
		if seen[n.x] {
			t.Fatalf("subnet 198.18.%d.0/24 handed out twice", n.x)
		}
		seen[n.x] = true
		// A live Net's lock is held: nobody else may take its subnet.
		if lock, err := tryLock(n.x); err != nil || lock != nil {
			if lock != nil {
				lock.Close()
			}
			t.Errorf("tryLock(%d) of a live Net = %v, %v; want nil, nil", n.x, lock, err)
		}
	}
	// Each namespace answers on its own /24 only.
	for _, n := range nets {
		u := n.HTTPServer(t, Handler())
		if e := getEcho(t, noProxyClient(), u.String()); e.Host != n.IP().String() {
			t.Errorf("echo host %q, want %s", e.Host, n.IP())
		}
	}
}

// TestThreadsStayInRootNamespace checks that Listen leaves no OS thread in
// the test namespace: it holds more locked goroutines than the process has
// threads, so every thread is sampled.
func TestThreadsStayInRootNamespace(t *testing.T) {
	n := New(t)
	for range 20 {
		ln, err := n.Listen("tcp4", net.JoinHostPort(n.IP().String(), "0"))
		if err != nil {
			t.Fatal(err)
		}
		ln.Close()
	}
	root, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	threads := threadCount(t) + 4
	var wg sync.WaitGroup
	var mu sync.Mutex
	var bad []string
	release := make(chan struct{})
	for range threads {
		wg.Add(1)
		go func() {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			ns, err := os.Readlink("/proc/thread-self/ns/net")
			mu.Lock()
			if err != nil || ns != root {
				bad = append(bad, fmt.Sprintf("%s (%v)", ns, err))
			}
			mu.Unlock()
			wg.Done()
			<-release // keep the thread until every goroutine has sampled one
		}()
	}
	wg.Wait()
	close(release)
	if len(bad) > 0 {
		t.Errorf("%d threads are not in the root namespace %s: %v", len(bad), root, bad)
	}
}

func threadCount(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "Threads:"); ok {
			k, err := strconv.Atoi(strings.TrimSpace(v))
			if err == nil {
				return k
			}
		}
	}
	t.Fatal("no Threads: line in /proc/self/status")
	return 0
}

func TestListenAfterCleanup(t *testing.T) {
	var n *Net
	t.Run("inner", func(t *testing.T) { n = New(t) })
	if n == nil {
		t.Skip("inner test skipped")
	}
	if _, err := n.Listen("tcp4", ":0"); !errors.Is(err, ErrClosed) {
		t.Errorf("Listen after cleanup: %v, want ErrClosed", err)
	}
}

func TestGitCloneAndPush(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed")
	}
	n := New(t)
	root := t.TempDir()
	commit := NewBareRepo(t, root, "owner/repo.git")
	u := n.HTTPServer(t, GitHandler(root))

	work := t.TempDir()
	git := func(dir string, args ...string) string {
		t.Helper()
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		cmd.Env = GitEnv()
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return strings.TrimSpace(string(out))
	}
	clone := filepath.Join(work, "repo")
	git(work, "clone", "--quiet", u.String()+"owner/repo.git", clone)
	if got := git(clone, "rev-parse", "HEAD"); got != commit {
		t.Fatalf("cloned HEAD = %s, want %s", got, commit)
	}

	// Push a commit larger than http.postBuffer (1 MiB) so that git sends
	// a chunked body, which net/http/cgi alone would refuse.
	big := make([]byte, 3<<20)
	for i := range big {
		big[i] = byte(i*7 + i/251) // poorly compressible enough to stay > 1 MiB
	}
	if err := os.WriteFile(filepath.Join(clone, "big.bin"), big, 0o644); err != nil {
		t.Fatal(err)
	}
	git(clone, "add", "big.bin")
	git(clone, "commit", "--quiet", "-m", "big")
	pushed := git(clone, "rev-parse", "HEAD")
	git(clone, "push", "--quiet", "origin", "main")
	bare := filepath.Join(root, "owner", "repo.git")
	if got := git(bare, "rev-parse", "refs/heads/main"); got != pushed {
		t.Errorf("bare main after push = %s, want %s", got, pushed)
	}

	// A repository that does not exist is a 404, not a server error.
	resp, err := noProxyClient().Get(u.String() + "owner/missing.git/info/refs?service=git-upload-pack")
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("missing repo: status %d, want 404", resp.StatusCode)
	}
}
