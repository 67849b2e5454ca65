package mitm

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// BenchmarkMITMGet compares 1 KiB GETs over one keep-alive connection
// terminated by the interceptor with the same client through an opaque
// tunnel (a byte pipe, as the gateway's CONNECT path) to the same
// upstream. The target is mitm ≥ 0.5× tunnel requests/s.
func BenchmarkMITMGet(b *testing.B) {
	payload := strings.Repeat("x", 1024)
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, payload)
	}))
	up.StartTLS()
	b.Cleanup(up.Close)

	run := func(b *testing.B, c *http.Client) {
		b.ReportAllocs()
		for b.Loop() {
			resp, err := c.Get("https://example.com/repos/a/b")
			if err != nil {
				b.Fatal(err)
			}
			n, _ := io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 || n != 1024 {
				b.Fatalf("status %d, %d bytes", resp.StatusCode, n)
			}
		}
	}

	b.Run("mitm", func(b *testing.B) {
		h := newHarness(b, harnessOpts{upstream: up, rules: readonlyRules})
		run(b, h.client(false))
	})

	b.Run("tunnel", func(b *testing.B) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		var wg sync.WaitGroup
		b.Cleanup(func() { l.Close(); wg.Wait() })
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				u, err := net.Dial("tcp", up.Listener.Addr().String())
				if err != nil {
					c.Close()
					continue
				}
				wg.Add(2)
				go func() { defer wg.Done(); io.Copy(u, c); u.Close() }()
				go func() { defer wg.Done(); io.Copy(c, u); c.Close() }()
			}
		}()
		roots := x509.NewCertPool()
		roots.AddCert(up.Certificate())
		tr := &http.Transport{
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				var nd net.Dialer
				return nd.DialContext(ctx, "tcp", l.Addr().String())
			},
			TLSClientConfig: &tls.Config{RootCAs: roots},
			TLSNextProto:    map[string]func(string, *tls.Conn) http.RoundTripper{},
		}
		b.Cleanup(tr.CloseIdleConnections)
		run(b, &http.Client{Transport: tr})
	})
}
