package e2e

import (
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/moat-dev/moat/e2e/testnet"
	"github.com/moat-dev/moat/resolver/dnstest"
)

// world is one upstream test host in a namespace, a DNS server on loopback
// naming it, and a gateway whose settings allow it.
type world struct {
	net  *testnet.Net
	dns  *dnstest.Server
	up   string // upstream IP
	port int    // upstream HTTP port, also bound on the host's 127.0.0.1 as a trap
	gw   *gatewayProc

	trapped atomic.Int64 // connections that reached the loopback trap
}

func newWorld(t *testing.T, allow []string) *world {
	t.Helper()
	need(t, "curl")
	n := testnet.New(t)
	w := &world{net: n, up: n.IP().String()}
	// The upstream listens on a port that is also bound on the host's
	// loopback (the rebinding test's trap), so a wrongly dialled 127.0.0.1
	// would be seen.
	trap, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { trap.Close() })
	go func() {
		for {
			c, err := trap.Accept()
			if err != nil {
				return
			}
			w.trapped.Add(1)
			c.Close()
		}
	}()
	w.port = trap.Addr().(*net.TCPAddr).Port
	n.HTTPServerOn(t, fmt.Sprintf("%s:%d", w.up, w.port), testnet.Handler())
	w.dns = dnstest.New(t)
	a := func(s string) []netip.Addr { return []netip.Addr{netip.MustParseAddr(s)} }
	w.dns.Set("ok.e2e.test", a(w.up), time.Minute)
	w.dns.Set("bad.e2e.test", a(w.up), time.Minute)
	w.dns.Set("other.e2e.test", a(w.up), time.Minute)
	w.dns.Set("lo.e2e.test", a("127.0.0.1"), time.Minute)
	w.dns.Set("meta.e2e.test", a("169.254.169.254"), time.Minute)
	w.dns.Set("linklocal.e2e.test", a("169.254.7.7"), time.Minute)
	w.dns.Set("priv.e2e.test", a("10.1.2.3"), time.Minute)
	w.dns.Set("nat64.e2e.test", a("64:ff9b::a01:203"), time.Minute)
	w.dns.Set("sixtofour.e2e.test", a("2002:a01:203::1"), time.Minute)
	w.dns.Set("self.e2e.test", a(n.HostIP().String()), time.Minute)
	quoted := make([]string, len(allow))
	for i, s := range allow {
		quoted[i] = strconv.Quote(s)
	}
	settings := writeSettings(t, fmt.Sprintf(`
network:
  allowedDomains: [%s]
  deniedDomains: ["bad.e2e.test"]
dns:
  servers: ["%s"]
`, strings.Join(quoted, ", "), w.dns.Addr))
	w.gw = startGateway(t, settings)
	return w
}

func (w *world) url(host string) string {
	return fmt.Sprintf("http://%s:%d/bytes/1024", host, w.port)
}

type curlResult struct {
	code    int    // curl exit code
	status  string // http status (or CONNECT status)
	headers string
	stderr  string
	body    string
}

// curl runs the real curl through the gateway in one of three modes.
func (w *world) curl(t *testing.T, mode, host string) curlResult {
	t.Helper()
	args := []string{"-sS", "--max-time", "10", "-D", "-", "-o", "/dev/null", "-w", "\nSTATUS=%{http_code} CONNECT=%{http_connect}\n"}
	switch mode {
	case "http":
		args = append(args, "-x", "http://"+w.gw.addr)
	case "connect":
		args = append(args, "-p", "-x", "http://"+w.gw.addr)
	case "socks5":
		args = append(args, "--socks5-hostname", w.gw.addr)
	}
	out, stderr, code := run(t, 20*time.Second, "curl", append(args, w.url(host))...)
	r := curlResult{code: code, headers: out, stderr: stderr}
	if i := strings.LastIndex(out, "STATUS="); i >= 0 {
		f := strings.Fields(out[i:])
		r.status = strings.TrimPrefix(f[0], "STATUS=")
		if c := strings.TrimPrefix(f[1], "CONNECT="); c != "000" {
			r.status = c
		}
	}
	return r
}

// rawDeny fetches the whole deny response (headers and body) with curl -i.
func (w *world) rawDeny(t *testing.T, host string) string {
	out, _, _ := run(t, 20*time.Second, "curl", "-sS", "-i", "--max-time", "10", "-x", "http://"+w.gw.addr, w.url(host))
	return out
}

func TestGatewayOneDecisionEverywhere(t *testing.T) {
	w := newWorld(t, []string{"ok.e2e.test", "*.e2e.test"})
	for _, mode := range []string{"http", "connect", "socks5"} {
		t.Run(mode, func(t *testing.T) {
			ok := w.curl(t, mode, "ok.e2e.test")
			if ok.code != 0 || !strings.Contains(ok.headers, "200") {
				t.Errorf("allowed host over %s: curl exit %d, status %s, stderr %q", mode, ok.code, ok.status, ok.stderr)
			}
			bad := w.curl(t, mode, "bad.e2e.test")
			switch mode {
			case "socks5":
				// curl reports REP 0x02 as "not allowed by ruleset".
				if bad.code == 0 || !strings.Contains(bad.stderr, "(2)") {
					t.Errorf("denied host over SOCKS5: curl exit %d, stderr %q", bad.code, bad.stderr)
				}
			default:
				if bad.status != "403" || !strings.Contains(bad.headers, "X-Proxy-Error: blocked-by-allowlist") ||
					!strings.Contains(bad.headers, "X-Moat-Reason: deny-list") || !strings.Contains(bad.headers, "X-Moat-Rule: deny:bad.e2e.test") {
					t.Errorf("denied host over %s: status %s headers %q stderr %q", mode, bad.status, bad.headers, bad.stderr)
				}
			}
		})
	}
	body := w.rawDeny(t, "bad.e2e.test")
	if !strings.Contains(body, "Content-Type: text/plain") || !strings.Contains(body, "\r\n\r\nConnection blocked by network allowlist") ||
		!strings.Contains(body, `to allow: remove "bad.e2e.test" from network.deniedDomains`) {
		t.Errorf("deny response = %q", body)
	}
}

// TestGatewayCanonicalisation: every inet_aton spelling of the upstream's
// address is allowed by its dotted-quad entry, and the gateway dials the
// canonical address.
func TestGatewayCanonicalisation(t *testing.T) {
	n := testnet.New(t)
	ip := n.IP().As4()
	u := n.HTTPServerOn(t, n.IP().String()+":8080", testnet.Handler())
	port := u.Port()
	settings := writeSettings(t, fmt.Sprintf("network:\n  allowedDomains: [%q]\n", n.IP().String()))
	gw := startGateway(t, settings)
	v := uint32(ip[0])<<24 | uint32(ip[1])<<16 | uint32(ip[2])<<8 | uint32(ip[3])
	spellings := []string{
		strconv.FormatUint(uint64(v), 10),                                     // decimal
		fmt.Sprintf("0x%x", v),                                                // hex
		fmt.Sprintf("0%o.0%o.0%o.0%o", ip[0], ip[1], ip[2], ip[3]),            // octal
		fmt.Sprintf("%d.%d.%d", ip[0], ip[1], uint32(ip[2])<<8|uint32(ip[3])), // short form a.b.c
		fmt.Sprintf("%d.%d", ip[0], uint32(ip[1])<<16|uint32(ip[2])<<8|uint32(ip[3])),
		"0x" + strconv.FormatUint(uint64(ip[0]), 16) + "." + strconv.Itoa(int(ip[1])) + "." + strconv.Itoa(int(ip[2])) + "." + strconv.Itoa(int(ip[3])),
	}
	for _, sp := range spellings {
		out, _, code := run(t, 10*time.Second, moatBin, "check", "--settings", settings, "--json", sp+":"+port)
		var r struct{ Host, Verdict string }
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatalf("check %s: %v (%q)", sp, err, out)
		}
		if r.Host != n.IP().String() || r.Verdict != "allow" || code != 0 {
			t.Errorf("moat check %s = host %q verdict %q exit %d, want %s allow 0", sp, r.Host, r.Verdict, code, n.IP())
		}
		so, se, code := run(t, 10*time.Second, "curl", "-sS", "--max-time", "5", "-o", "/dev/null", "-w", "%{http_code}",
			"-x", "http://"+gw.addr, "http://"+sp+":"+port+"/bytes/16")
		if code != 0 || so != "200" {
			t.Errorf("curl via gateway to %s: exit %d status %s %s", sp, code, so, se)
		}
	}
	for _, bad := range []string{"425.510.425.510", "7147006462", "0x1ffffffff"} {
		out, _, code := run(t, 10*time.Second, moatBin, "check", "--settings", settings, "--json", bad+":80")
		if code != 1 || !strings.Contains(out, `"malformed-host"`) {
			t.Errorf("moat check %s: exit %d %s; want deny malformed-host", bad, code, out)
		}
	}
	ev := gw.events(t)
	if len(ev) != len(spellings) {
		t.Errorf("audit lines = %d, want %d", len(ev), len(spellings))
	}
	for _, e := range ev {
		if e.Host != n.IP().String() || !strings.HasPrefix(e.Addr, n.IP().String()+":") {
			t.Errorf("audit host %q addr %q, want the canonical %s", e.Host, e.Addr, n.IP())
		}
	}
}

func TestGatewayResolvedAddressGuard(t *testing.T) {
	w := newWorld(t, []string{"*.e2e.test"})
	for _, host := range []string{"lo.e2e.test", "meta.e2e.test", "linklocal.e2e.test", "priv.e2e.test",
		"nat64.e2e.test", "sixtofour.e2e.test", "self.e2e.test"} {
		for _, mode := range []string{"http", "connect", "socks5"} {
			r := w.curl(t, mode, host)
			if mode == "socks5" {
				if r.code == 0 {
					t.Errorf("%s over SOCKS5 connected", host)
				}
				continue
			}
			if r.status != "403" || !strings.Contains(r.headers, "X-Proxy-Error: blocked-by-resolved-address") {
				t.Errorf("%s over %s: status %s headers %q", host, mode, r.status, r.headers)
			}
		}
		body := w.rawDeny(t, host)
		if !strings.Contains(body, "Connection blocked: destination resolved to a denied address") {
			t.Errorf("%s: body %q", host, body)
		}
	}
	out, _, code := run(t, 10*time.Second, moatBin, "check", "--settings", w.gwSettings(t), "--resolve", "meta.e2e.test")
	if code != 1 || !strings.Contains(out, "169.254.169.254: deny (metadata)") {
		t.Errorf("moat check --resolve meta.e2e.test: exit %d\n%s", code, out)
	}
}

// gwSettings recovers the gateway's settings path from its command line.
func (w *world) gwSettings(t *testing.T) string {
	for i, a := range w.gw.cmd.Args {
		if a == "--settings" {
			return w.gw.cmd.Args[i+1]
		}
	}
	t.Fatal("no --settings")
	return ""
}

// TestGatewayDNSRebinding: the first answer is the real upstream, every
// later answer 127.0.0.1, where a trap listens on the same port.
func TestGatewayDNSRebinding(t *testing.T) {
	w := newWorld(t, []string{"rebind.e2e.test"})
	var n atomic.Int64
	w.dns.Handle(func(q dnstest.Query) (dnstest.Answer, bool) {
		if q.Name != "rebind.e2e.test" {
			return dnstest.Answer{}, false
		}
		if q.Type == 1 && n.Add(1) == 1 {
			return dnstest.Answer{Addrs: []netip.Addr{netip.MustParseAddr(w.up)}}, true
		}
		return dnstest.Answer{Addrs: []netip.Addr{netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("::1")}}, true
	})
	first := w.curl(t, "http", "rebind.e2e.test")
	if first.status != "200" {
		t.Errorf("first request (real upstream): status %s %q", first.status, first.stderr)
	}
	// Plain HTTP may reuse the pooled connection to the checked address;
	// every new dial re-resolves, gets 127.0.0.1 and must be refused.
	for i := 0; i < 5; i++ {
		w.curl(t, "http", "rebind.e2e.test")
		if r := w.curl(t, "connect", "rebind.e2e.test"); r.status != "403" || !strings.Contains(r.headers, "blocked-by-resolved-address") {
			t.Errorf("CONNECT %d after the rebind: status %s %q", i, r.status, r.headers)
		}
		if r := w.curl(t, "socks5", "rebind.e2e.test"); r.code == 0 {
			t.Errorf("SOCKS5 %d after the rebind connected", i)
		}
	}
	if c := w.trapped.Load(); c != 0 {
		t.Fatalf("the gateway dialled 127.0.0.1 %d times after a DNS rebind", c)
	}
}

func TestGatewayConcurrentAudit(t *testing.T) {
	w := newWorld(t, []string{"ok.e2e.test"})
	const n = 24
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			host := "ok.e2e.test"
			if i%3 == 0 {
				host = "other.e2e.test"
			}
			w.curl(t, []string{"http", "connect", "socks5"}[i%3], host)
		}(i)
	}
	wg.Wait()
	ev := w.gw.events(t)
	if len(ev) != n {
		t.Fatalf("audit lines = %d, want exactly %d (one per decision)", len(ev), n)
	}
	for _, e := range ev {
		if e.V != 1 || e.Time.IsZero() || e.Proto == "" || e.Verdict == "" || e.Policy == "" {
			t.Errorf("incomplete audit line %+v", e)
		}
	}
	// moat audit reads the same file back: every line a v1 event, the
	// denials (other.e2e.test, one in three) filtered.
	out, errs, code := run(t, 10*time.Second, moatBin, "audit", "--deny", "--summary", w.gw.audit)
	if code != 0 || !strings.Contains(out, fmt.Sprintf("%d events: 0 allow, %d deny", n/3, n/3)) ||
		!strings.Contains(out, "other.e2e.test") || strings.Contains(out, "allow   ") {
		t.Errorf("moat audit --deny --summary: exit %d\n%s%s", code, out, errs)
	}
}
