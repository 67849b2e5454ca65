package gateway

import (
	"bytes"
	"io"
	"net"
	"testing"
	"time"

	"github.com/moat-dev/moat/gateway/policy"
	"github.com/moat-dev/moat/resolver"
)

// fuzzGateway is a gateway whose policy allows nothing, so no input can
// make it dial: fuzzing stays on this machine.
func fuzzGateway(f *testing.F) *Gateway {
	pol, err := policy.New(policy.Spec{})
	if err != nil {
		f.Fatal(err)
	}
	g, err := New(Options{Policy: pol, Dialer: &resolver.Dialer{Policy: pol}, NoAuth: true, HeaderTimeout: 200 * time.Millisecond})
	if err != nil {
		f.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		f.Fatal(err)
	}
	go g.Serve(l) // starts the HTTP server that demux feeds
	f.Cleanup(func() { l.Close() })
	return g
}

// feed writes data to the gateway over an in-memory connection and returns
// what it answered (bounded in time and size).
func feed(g *Gateway, data []byte) []byte {
	client, server := net.Pipe()
	defer client.Close()
	go g.demux(server)
	client.SetDeadline(time.Now().Add(500 * time.Millisecond))
	go client.Write(data)
	out, _ := io.ReadAll(io.LimitReader(client, 1<<16))
	return out
}

// FuzzConnectLine: no CONNECT or request line makes the gateway panic, hang
// past its deadlines or answer 200 under a deny-all policy.
func FuzzConnectLine(f *testing.F) {
	for _, s := range []string{
		"CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n",
		"CONNECT [::1]:443 HTTP/1.1\r\n\r\n",
		"CONNECT user@evil.test:443 HTTP/1.1\r\n\r\n",
		"CONNECT 0x7f.1:22 HTTP/1.1\r\n\r\n",
		"CONNECT a\x00b:1 HTTP/1.1\r\n\r\n",
		"CONNECT :443 HTTP/1.1\r\n\r\n",
		"GET http://example.com/ HTTP/1.1\r\nHost: example.com\r\n\r\n",
		"GET / HTTP/1.1\r\n\r\n",
		"GET http://[fe80::1%25eth0]/ HTTP/1.1\r\n\r\n",
	} {
		f.Add([]byte(s))
	}
	g := fuzzGateway(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) == 0 || data[0] == socksVersion5 || data[0] == socksVersion4 {
			return
		}
		out := feed(g, data)
		if bytes.HasPrefix(out, []byte("HTTP/1.1 200")) {
			t.Fatalf("deny-all gateway answered 200 to %q: %q", data, out)
		}
	})
}

// FuzzSOCKS5Request: no greeting, auth or request makes the gateway panic
// or reply success under a deny-all policy.
func FuzzSOCKS5Request(f *testing.F) {
	for _, s := range [][]byte{
		{5, 1, 0, 5, 1, 0, 3, 11, 'e', 'x', 'a', 'm', 'p', 'l', 'e', '.', 'c', 'o', 'm', 0, 80},
		{5, 1, 0, 5, 1, 0, 1, 127, 0, 0, 1, 0, 22},
		{5, 1, 0, 5, 2, 0, 1, 127, 0, 0, 1, 0, 22},
		{5, 1, 0, 5, 3, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 53},
		{5, 1, 2, 1, 1, 'u', 1, 'p', 5, 1, 0, 3, 0, 0, 80},
		{5, 0},
		{5, 255},
		{4, 1, 0, 80, 127, 0, 0, 1, 0},
	} {
		f.Add(s)
	}
	g := fuzzGateway(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) == 0 || data[0] != socksVersion5 {
			return
		}
		out := feed(g, data)
		// After the 2-byte method reply (and a 2-byte auth reply), a
		// request reply is 05 REP; REP 00 would be success.
		for i := 0; i+1 < len(out); i++ {
			if i >= 2 && out[i] == 5 && out[i+1] == 0 && i+3 < len(out) && out[i+2] == 0 && (out[i+3] == 1 || out[i+3] == 4) {
				t.Fatalf("deny-all gateway replied success to %v: %v", data, out)
			}
		}
	})
}
