package mitm

import (
	"bufio"
	"crypto/tls"
	"io"
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
		if _, err := io.ReadFull(brw, buf); err == nil {
			c.Write(append([]byte("echo:"), buf...))
		}
	}))
	up.StartTLS()
	t.Cleanup(up.Close)
	h := newHarness(t, harnessOpts{upstream: up, rules: []Rule{{ID: "ws", Host: "example.com",
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
