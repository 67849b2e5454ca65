package mitm

import (
	"bufio"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestInterceptWebSocket: an upgrade passes through after the rule check,
// and the upgraded connection carries bytes both ways; a denied path is
// refused before any upgrade.
func TestInterceptWebSocket(t *testing.T) {
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
			http.Error(w, "want an upgrade", http.StatusBadRequest)
			return
		}
		c, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer c.Close()
		io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
		buf := make([]byte, 4)
		for i := 0; i < 10; i++ { // bounded echo
			if _, err := io.ReadFull(brw, buf); err != nil {
				return
			}
			c.Write(append([]byte("echo:"), buf...))
		}
	}))
	up.StartTLS()
	t.Cleanup(up.Close)
	// The tracker sees the upgraded connection (the gateway closes it on
	// a quarantine).
	tracked := make(chan net.Conn, 4)
	track := func(client string, c net.Conn) net.Conn {
		if client != "c1" {
			t.Errorf("upgrade tracked for client %q, want c1", client)
		}
		tracked <- c
		return c
	}
	h := newHarness(t, harnessOpts{upstream: up, track: track, rules: []Rule{{ID: "ws", Host: "example.com",
		Allow: []Match{{Methods: []string{"GET"}, Path: "/ws/**"}}}}})

	dial := func() (*tls.Conn, *bufio.Reader) {
		c, err := tls.Dial("tcp", h.front.Addr().String(), &tls.Config{ServerName: "example.com", RootCAs: h.ca.Pool(), NextProtos: []string{"http/1.1"}})
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(5 * time.Second))
		return c, bufio.NewReader(c)
	}
	upgrade := "Host: example.com\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"

	c, br := dial()
	defer c.Close()
	io.WriteString(c, "GET /ws/chat HTTP/1.1\r\n"+upgrade)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("upgrade: %d %q", resp.StatusCode, b)
	}
	io.WriteString(c, "ping")
	got := make([]byte, len("echo:ping"))
	if _, err := io.ReadFull(br, got); err != nil || string(got) != "echo:ping" {
		t.Fatalf("through the upgraded connection: %q %v", got, err)
	}
	select {
	case tc := <-tracked:
		tc.Close() // what a quarantine does
		io.WriteString(c, "pong")
		if _, err := io.ReadFull(br, got); err == nil {
			t.Errorf("the upgraded connection carried %q after its tracked connection was closed", got)
		}
	default:
		t.Errorf("the upgraded connection was not handed to the tracker")
	}
	// The request's audit line counts the upgraded bytes.
	var wsUp, wsDown int64
	for i := 0; i < 200 && wsDown == 0; i++ {
		for _, ev := range h.sink.events() {
			if ev.Path == "/ws/chat" {
				wsUp, wsDown = ev.BytesUp, ev.BytesDown
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	if wsUp < int64(len("ping")) || wsDown < int64(len("echo:ping")) {
		t.Errorf("audit bytes of the upgraded request: up %d down %d, want at least 4 and 9", wsUp, wsDown)
	}

	c2, br2 := dial()
	defer c2.Close()
	io.WriteString(c2, "GET /other HTTP/1.1\r\n"+upgrade)
	resp, err = http.ReadResponse(br2, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusForbidden || resp.Header.Get("X-Proxy-Error") != "blocked-by-sandbox-runtime" {
		t.Errorf("upgrade on a denied path: %d %q", resp.StatusCode, resp.Header.Get("X-Proxy-Error"))
	}
}
