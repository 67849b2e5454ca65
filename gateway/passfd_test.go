//go:build linux

package gateway

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/moat-dev/moat/gateway/policy"
	"github.com/moat-dev/moat/resolver"
)

// TestPassedConnections: a relay hands its accepted TCP connection to the
// gateway's unix socket by descriptor; the gateway serves it directly.
// Plain unix-socket clients keep working; a passed file is refused.
func TestPassedConnections(t *testing.T) {
	_, port, _ := upstream(t)
	pol, _ := policy.New(policy.Spec{Allow: []string{"127.0.0.1"}})
	gw, err := New(Options{Policy: pol, Dialer: &resolver.Dialer{Policy: pol}, NoAuth: true, AcceptPassed: true})
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(t.TempDir(), "gw.sock")
	ul, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	go gw.Serve(ul)
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		gw.Shutdown(ctx)
	}()
	target := "http://127.0.0.1:" + itoa(port) + "/"

	// The "sandbox side": a TCP listener whose accepted conns are passed.
	tl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer tl.Close()
	go func() {
		for {
			c, err := tl.Accept()
			if err != nil {
				return
			}
			g, err := net.Dial("unix", sock)
			if err != nil {
				c.Close()
				continue
			}
			f, _ := c.(*net.TCPConn).File()
			g.(*net.UnixConn).WriteMsgUnix([]byte{passMarker}, unix.UnixRights(int(f.Fd())), nil)
			f.Close()
			c.Close()
			g.Close()
		}
	}()
	pc := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(mustURL("http://" + tl.Addr().String()))}, Timeout: 5 * time.Second}
	resp, err := pc.Get(target)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(b), "hello from upstream") {
		t.Fatalf("through a passed connection: %d %q", resp.StatusCode, b)
	}

	// A plain client on the unix socket (its first byte is kept).
	uc, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer uc.Close()
	io.WriteString(uc, "GET "+target+" HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
	r2, err := http.ReadResponse(bufio.NewReader(uc), nil)
	if err != nil || r2.StatusCode != 200 {
		t.Fatalf("plain unix client: %v %v", r2, err)
	}

	// A passed regular file is refused and the connection closed.
	f, _ := os.Open(os.Args[0])
	defer f.Close()
	bad, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer bad.Close()
	bad.(*net.UnixConn).WriteMsgUnix([]byte{passMarker}, unix.UnixRights(int(f.Fd())), nil)
	bad.SetReadDeadline(time.Now().Add(3 * time.Second))
	if n, err := bad.Read(make([]byte, 1)); err == nil || n > 0 {
		t.Errorf("a passed file was accepted (%d, %v)", n, err)
	}
}

func itoa(p uint16) string { return strconv.Itoa(int(p)) }

func mustURL(s string) *url.URL {
	u, err := url.Parse(s)
	if err != nil {
		panic(err)
	}
	return u
}
