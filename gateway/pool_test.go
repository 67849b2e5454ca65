package gateway

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/moat-dev/moat/gateway/policy"
)

// TestPoolRetriesStaleConnection: an upstream that closes every connection
// after one keep-alive answer must not fail the next request.
func TestPoolRetriesStaleConnection(t *testing.T) {
	var accepted atomic.Int64
	addr := tcpServer(t, func(c net.Conn) {
		accepted.Add(1)
		defer c.Close()
		br := bufio.NewReader(c)
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		body, _ := io.ReadAll(req.Body)
		msg := fmt.Sprintf("%s %s %d", req.Method, req.URL.Path, len(body))
		// 103 first: the pool must skip informational answers.
		fmt.Fprintf(c, "HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(msg), msg)
		time.Sleep(20 * time.Millisecond) // then close: stale for the pool
	})
	e := newEnv(t, policy.Spec{Allow: []string{"ok.test"}, AllowedAddrs: loopbackCarveOut}, nil)
	e.dns.Set("ok.test", []netip.Addr{netip.MustParseAddr("127.0.0.1")}, time.Minute)
	_, ps, _ := net.SplitHostPort(addr)
	port, _ := strconv.Atoi(ps)
	c := e.client(testToken)
	c.Transport.(*http.Transport).DisableKeepAlives = false
	for i := 0; i < 3; i++ {
		var resp *http.Response
		var err error
		if i == 1 {
			resp, err = c.Post(fmt.Sprintf("http://ok.test:%d/post", port), "text/plain", strings.NewReader("hello body"))
		} else {
			resp, err = c.Get(fmt.Sprintf("http://ok.test:%d/get", port))
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		want := "GET /get 0"
		if i == 1 {
			want = "POST /post 10"
		}
		if resp.StatusCode != 200 || string(b) != want {
			t.Errorf("request %d: %d %q, want 200 %q", i, resp.StatusCode, b, want)
		}
		time.Sleep(50 * time.Millisecond) // the upstream has closed by now
	}
	if n := accepted.Load(); n < 3 {
		t.Errorf("upstream accepted %d connections, want a fresh one per request", n)
	}
}

// TestPoolClientLeavesMidStream: a client that stops reading an endless
// response ends the upstream connection; the gateway does not drain it.
func TestPoolClientLeavesMidStream(t *testing.T) {
	ended := make(chan struct{})
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer close(ended)
		buf := make([]byte, 32<<10)
		for i := 0; i < 1<<16; i++ { // bounded: 2 GiB at most
			if _, err := w.Write(buf); err != nil {
				return
			}
		}
	})}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(l)
	defer srv.Close()
	e := newEnv(t, policy.Spec{Allow: []string{"127.0.0.1"}}, nil)
	resp, err := e.client(testToken).Get("http://" + l.Addr().String() + "/")
	if err != nil {
		t.Fatal(err)
	}
	io.ReadFull(resp.Body, make([]byte, 1024))
	resp.Body.Close()
	select {
	case <-ended:
	case <-time.After(10 * time.Second):
		t.Fatal("upstream still streaming 10 s after the client left")
	}
}
