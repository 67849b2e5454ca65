package testnet

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os/exec"
	"strconv"
	"sync"
	"testing"
	"time"
)

// Net is one network namespace with a veth pair to the root namespace.
// Create it with New; the test's cleanup removes it.
type Net struct {
	t    testing.TB
	name string // the netns name, as in `ip netns list`
	x    int    // the third octet: the namespace owns 198.18.x.0/24

	hostLink string // host end of the veth, in the root namespace
	nsLink   string // namespace end of the veth

	plat platform // per-OS state (lock file, …)

	mu     sync.Mutex
	closed bool

	caOnce sync.Once
	ca     *CA
}

// Name returns the network namespace's name, usable with `ip netns exec`.
func (n *Net) Name() string { return n.name }

// HostIP returns 198.18.X.1, the root namespace's end of the veth: the
// address upstream servers see as the client.
func (n *Net) HostIP() netip.Addr { return n.Addr(1) }

// IP returns 198.18.X.2, the namespace's main address.
func (n *Net) IP() netip.Addr { return n.Addr(2) }

// Addr returns 198.18.X.y. It does not add the address: see AddAddr.
func (n *Net) Addr(y int) netip.Addr {
	return netip.AddrFrom4([4]byte{198, 18, byte(n.x), byte(y)})
}

// Prefix returns the namespace's 198.18.X.0/24.
func (n *Net) Prefix() netip.Prefix { return netip.PrefixFrom(n.Addr(0), 24) }

// Command returns a command that runs inside the namespace through
// `ip netns exec`, for servers that must be separate processes.
func (n *Net) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", n.name, name}, args...)...)
}

// checkHostAddr reports whether a is one of the addresses AddAddr may add:
// a host address of the Net's /24 other than the host side's .1.
func (n *Net) checkHostAddr(a netip.Addr) error {
	a = a.Unmap()
	if !n.Prefix().Contains(a) || a == n.Addr(0) || a == n.HostIP() || a == n.Addr(255) {
		return fmt.Errorf("%w: %s (want %s, not .0, .1 or .255)", ErrOutsideSubnet, a, n.Prefix())
	}
	return nil
}

// checkLiteral insists on an IP literal (or an empty host) so that the
// socket is created on the calling, namespace-switched thread: a name would
// be resolved, and Go may dial or resolve on other goroutines, which run in
// the root namespace.
func checkLiteral(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("testnet: address %q: %w", addr, err)
	}
	if host == "" {
		return nil
	}
	if _, err := netip.ParseAddr(host); err != nil {
		return fmt.Errorf("testnet: address %q: host must be an IP literal, not a name", addr)
	}
	return nil
}

// HTTPServer serves h over plain HTTP/1.1 on 198.18.X.2:80 inside the
// namespace until the test ends, and returns its base URL.
func (n *Net) HTTPServer(t testing.TB, h http.Handler) *url.URL {
	t.Helper()
	return n.HTTPServerOn(t, net.JoinHostPort(n.IP().String(), "80"), h)
}

// HTTPServerOn is HTTPServer on a given address inside the namespace, for
// example "198.18.X.3:8080" after AddAddr, or ":0" for any port.
func (n *Net) HTTPServerOn(t testing.TB, addr string, h http.Handler) *url.URL {
	t.Helper()
	return n.serve(t, addr, h, nil)
}

// TLSServer serves h over HTTPS (h2 and HTTP/1.1 by ALPN) on
// 198.18.X.2:443 inside the namespace. The leaf certificate covers names
// (DNS names or IP literals) plus the listening IP, and is issued by the
// Net's test CA, returned both as a pool and as a PEM file path (for
// settings such as tlsTerminate.extraCaCertPaths or curl --cacert).
func (n *Net) TLSServer(t testing.TB, h http.Handler, names ...string) (*url.URL, *x509.CertPool, string) {
	t.Helper()
	return n.TLSServerOn(t, net.JoinHostPort(n.IP().String(), "443"), h, names...)
}

// TLSServerOn is TLSServer on a given address inside the namespace.
func (n *Net) TLSServerOn(t testing.TB, addr string, h http.Handler, names ...string) (*url.URL, *x509.CertPool, string) {
	t.Helper()
	ca := n.CA(t)
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("testnet: TLSServerOn(%q): %v", addr, err)
	}
	if a, err := netip.ParseAddr(host); host == "" || (err == nil && a.IsUnspecified()) {
		host = n.IP().String() // the address serve puts in the URL
	}
	leaf, err := ca.Issue(append(append([]string(nil), names...), host)...)
	if err != nil {
		t.Fatalf("testnet: issue leaf for %v: %v", names, err)
	}
	cfg := &tls.Config{
		Certificates: []tls.Certificate{leaf},
		NextProtos:   []string{"h2", "http/1.1"},
		MinVersion:   tls.VersionTLS12,
	}
	return n.serve(t, addr, h, cfg), ca.Pool, ca.PEMPath
}

// CA returns the Net's test CA, created on first use, shared by every
// TLSServer of this Net so that a test needs to trust only one file.
func (n *Net) CA(t testing.TB) *CA {
	t.Helper()
	n.caOnce.Do(func() { n.ca = NewCA(t) })
	if n.ca == nil {
		t.Fatal("testnet: test CA creation failed earlier")
	}
	return n.ca
}

func (n *Net) serve(t testing.TB, addr string, h http.Handler, cfg *tls.Config) *url.URL {
	t.Helper()
	ln, err := n.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("testnet: listen %s in %s: %v", addr, n.name, err)
	}
	logw := &testLog{t: t}
	srv := &http.Server{
		Handler:           h,
		TLSConfig:         cfg,
		ReadHeaderTimeout: 30 * time.Second,
		// Handshake failures are what many moat tests provoke on purpose;
		// they belong in the test log, not on stderr.
		ErrorLog: log.New(logw, "", 0),
	}
	scheme := "http"
	done := make(chan struct{})
	go func() {
		defer close(done)
		if cfg != nil {
			_ = srv.ServeTLS(ln, "", "")
		} else {
			_ = srv.Serve(ln)
		}
	}()
	if cfg != nil {
		scheme = "https"
	}
	t.Cleanup(func() {
		_ = srv.Close()
		<-done
		logw.stop()
	})
	tcp := ln.Addr().(*net.TCPAddr)
	ip := tcp.IP.String()
	if tcp.IP.IsUnspecified() {
		ip = n.IP().String()
	}
	u := &url.URL{Scheme: scheme, Host: net.JoinHostPort(ip, strconv.Itoa(tcp.Port)), Path: "/"}
	if (scheme == "http" && tcp.Port == 80) || (scheme == "https" && tcp.Port == 443) {
		u.Host = ip
		if tcp.IP.To4() == nil {
			u.Host = "[" + ip + "]"
		}
	}
	return u
}

// testLog forwards a server's error log to t.Logf until the test's cleanup
// stops it; logging after a test has finished panics.
type testLog struct {
	t       testing.TB
	mu      sync.Mutex
	stopped bool
}

func (l *testLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.stopped {
		l.t.Logf("testnet server: %s", p)
	}
	return len(p), nil
}

func (l *testLog) stop() {
	l.mu.Lock()
	l.stopped = true
	l.mu.Unlock()
}

var _ io.Writer = (*testLog)(nil)
