package gateway

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/moat-dev/moat/gateway/audit"
	"github.com/moat-dev/moat/gateway/policy"
	"github.com/moat-dev/moat/resolver"
)

// BenchmarkPlainHTTP measures 1 KiB keep-alive GETs through the gateway
// against the same client going direct, in one run: compare the two
// sub-benchmarks' ns/op (the e2e/bench script does the same with wrk).
func BenchmarkPlainHTTP(b *testing.B) {
	body := strings.Repeat("x", 1024)
	up := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "1024")
		io.WriteString(w, body)
	})}
	ul, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go up.Serve(ul)
	defer up.Close()
	target := "http://" + ul.Addr().String() + "/"

	pol, _ := policy.New(policy.Spec{Allow: []string{"127.0.0.1"}})
	res, _ := resolver.New(resolver.Options{Servers: []string{"127.0.0.1:1"}, HostsFile: "-"})
	f, _ := devNull()
	sink := audit.NewJSONL(f)
	defer sink.Close()
	gw, err := New(Options{Policy: pol, Dialer: &resolver.Dialer{Resolver: res, Policy: pol}, NoAuth: true, Audit: sink})
	if err != nil {
		b.Fatal(err)
	}
	gl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go gw.Serve(gl)
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		gw.Shutdown(ctx)
	}()

	run := func(b *testing.B, proxy *url.URL) {
		tr := &http.Transport{MaxIdleConnsPerHost: 64}
		if proxy != nil {
			tr.Proxy = http.ProxyURL(proxy)
		}
		c := &http.Client{Transport: tr}
		b.ReportAllocs()
		b.SetParallelism(8)
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				resp, err := c.Get(target)
				if err != nil {
					b.Error(err)
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		})
	}
	b.Run("direct", func(b *testing.B) { run(b, nil) })
	b.Run("gateway", func(b *testing.B) { run(b, &url.URL{Scheme: "http", Host: gl.Addr().String()}) })
}

func devNull() (io.Writer, error) { return io.Discard, nil }
