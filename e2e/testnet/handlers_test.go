package testnet

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// noProxyClient never uses the environment's proxy variables: test traffic
// must go straight to the server it names.
func noProxyClient() *http.Client {
	return &http.Client{Transport: &http.Transport{Proxy: nil}}
}

func TestHandlerBytesAndStatus(t *testing.T) {
	srv := httptest.NewServer(Handler())
	defer srv.Close()
	tests := []struct {
		name       string
		method     string
		path       string
		wantStatus int
		wantLen    int64 // body bytes, checked against the pattern when status is 200
	}{
		{name: "zero bytes", method: "GET", path: "/bytes/0", wantStatus: 200, wantLen: 0},
		{name: "1 KiB", method: "GET", path: "/bytes/1024", wantStatus: 200, wantLen: 1024},
		{name: "spans buffer writes", method: "GET", path: "/bytes/200003", wantStatus: 200, wantLen: 200003},
		{name: "HEAD has no body", method: "HEAD", path: "/bytes/4096", wantStatus: 200, wantLen: 0},
		{name: "negative", method: "GET", path: "/bytes/-1", wantStatus: 400},
		{name: "not a number", method: "GET", path: "/bytes/abc", wantStatus: 400},
		{name: "too large", method: "GET", path: "/bytes/1099511627777", wantStatus: 400},
		{name: "status 404", method: "GET", path: "/status/404", wantStatus: 404},
		{name: "status 503 by POST", method: "POST", path: "/status/503", wantStatus: 503},
		{name: "status below 200", method: "GET", path: "/status/199", wantStatus: 400},
		{name: "status above 599", method: "GET", path: "/status/600", wantStatus: 400},
		{name: "unknown path", method: "GET", path: "/nope", wantStatus: 404},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req, err := http.NewRequest(tc.method, srv.URL+tc.path, nil)
			if err != nil {
				t.Fatal(err)
			}
			resp, err := noProxyClient().Do(req)
			if err != nil {
				t.Fatalf("%s %s: %v", tc.method, tc.path, err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != tc.wantStatus {
				t.Fatalf("%s %s: status %d, want %d", tc.method, tc.path, resp.StatusCode, tc.wantStatus)
			}
			if tc.wantStatus != 200 || !strings.HasPrefix(tc.path, "/bytes/") {
				return
			}
			if tc.method == "GET" && resp.ContentLength != tc.wantLen {
				t.Errorf("Content-Length %d, want %d", resp.ContentLength, tc.wantLen)
			}
			got, err := CheckPattern(resp.Body)
			if err != nil {
				t.Fatalf("body: %v", err)
			}
			if got != tc.wantLen {
				t.Errorf("body is %d bytes, want %d", got, tc.wantLen)
			}
		})
	}
}

func TestHandlerEcho(t *testing.T) {
	srv := httptest.NewServer(Handler())
	defer srv.Close()
	req, err := http.NewRequest("PUT", srv.URL+"/echo/a%20b?x=1&y=2", strings.NewReader("hello"))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Test", "v1")
	resp, err := noProxyClient().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var got Echo
	if err := json.NewDecoder(resp.Body).Decode(&got); err != nil {
		t.Fatalf("decode /echo: %v", err)
	}
	want := Echo{
		Method:     "PUT",
		RequestURI: "/echo/a%20b?x=1&y=2",
		Path:       "/echo/a b",
		Query:      "x=1&y=2",
		Host:       strings.TrimPrefix(srv.URL, "http://"),
		Proto:      "HTTP/1.1",
		BodyBytes:  5,
	}
	// Headers and Remote depend on the client; check the ones we set.
	if v := got.Headers.Get("X-Test"); v != "v1" {
		t.Errorf("echo header X-Test = %q, want %q", v, "v1")
	}
	if _, err := netip.ParseAddrPort(got.Remote); err != nil {
		t.Errorf("echo remote %q is not ip:port: %v", got.Remote, err)
	}
	got.Headers, got.Remote = nil, ""
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("/echo mismatch (-want +got):\n%s", diff)
	}
}

func TestCheckPatternDetectsCorruption(t *testing.T) {
	body := make([]byte, 1000)
	for i := range body {
		body[i] = PatternByte(int64(i))
	}
	if n, err := CheckPattern(bytes.NewReader(body)); err != nil || n != 1000 {
		t.Fatalf("CheckPattern(intact) = %d, %v; want 1000, nil", n, err)
	}
	body[700] ^= 1
	n, err := CheckPattern(bytes.NewReader(body))
	if err == nil || n != 700 {
		t.Fatalf("CheckPattern(corrupt at 700) = %d, %v; want 700 and an error", n, err)
	}
	if _, err := CheckPattern(io.MultiReader(bytes.NewReader(body[:10]), iotestErr{})); err == nil {
		t.Fatal("CheckPattern did not pass on a read error")
	}
}

type iotestErr struct{}

func (iotestErr) Read([]byte) (int, error) { return 0, io.ErrUnexpectedEOF }

func TestCheckHostAddr(t *testing.T) {
	n := &Net{x: 7}
	tests := []struct {
		addr string
		ok   bool
	}{
		{"198.18.7.2", true},
		{"198.18.7.3", true},
		{"198.18.7.254", true},
		{"::ffff:198.18.7.9", true},
		{"198.18.7.0", false},
		{"198.18.7.1", false}, // the host side
		{"198.18.7.255", false},
		{"198.18.8.2", false},
		{"10.0.0.2", false},
		{"127.0.0.1", false},
		{"2001:db8::1", false},
	}
	for _, tc := range tests {
		err := n.checkHostAddr(netip.MustParseAddr(tc.addr))
		if (err == nil) != tc.ok {
			t.Errorf("checkHostAddr(%s) = %v, want ok=%v", tc.addr, err, tc.ok)
		}
	}
}

func TestCheckLiteral(t *testing.T) {
	tests := []struct {
		addr string
		ok   bool
	}{
		{"198.18.1.2:80", true},
		{":0", true},
		{"[::1]:0", true},
		{"localhost:80", false},
		{"example.test:443", false},
		{"198.18.1.2", false}, // no port
	}
	for _, tc := range tests {
		err := checkLiteral(tc.addr)
		if (err == nil) != tc.ok {
			t.Errorf("checkLiteral(%q) = %v, want ok=%v", tc.addr, err, tc.ok)
		}
	}
}
