package policy

import (
	"bufio"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"testing"
)

func mustNew(t testing.TB, s Spec) *Policy {
	t.Helper()
	p, err := New(s)
	if err != nil {
		t.Fatalf("New(%+v): %v", s, err)
	}
	return p
}

func TestDecide(t *testing.T) {
	p := mustNew(t, Spec{
		Allow:       []string{"example.com", "*.github.com", "api.test:443", "10.0.0.5", "localhost", "[2001:db8::1]"},
		Deny:        []string{"evil.github.com", "*.ads.example.com", "*:25"},
		DenyReasons: map[string]string{"evil.github.com": "no evil today"},
		Inspect:     []string{"api.github.com"},
	})
	tests := []struct {
		name   string
		req    Request
		want   Verdict
		reason Reason
		rule   string
	}{
		{"exact", Request{Host: "example.com", Port: 443}, Allow, ReasonAllowList, "allow:example.com"},
		{"exact upper, dot", Request{Host: "EXAMPLE.com.", Port: 80}, Allow, ReasonAllowList, "allow:example.com"},
		{"subdomain of exact", Request{Host: "www.example.com", Port: 443}, Deny, ReasonNotAllowed, ""},
		{"wildcard", Request{Host: "a.b.github.com", Port: 443}, Allow, ReasonAllowList, "allow:*.github.com"},
		{"wildcard not apex", Request{Host: "github.com", Port: 443}, Deny, ReasonNotAllowed, ""},
		{"deny beats allow", Request{Host: "evil.github.com", Port: 443}, Deny, ReasonDenyList, "deny:evil.github.com"},
		{"deny any port", Request{Host: "example.com", Port: 25}, Deny, ReasonDenyList, "deny:*:25"},
		{"port match", Request{Host: "api.test", Port: 443}, Allow, ReasonAllowList, "allow:api.test:443"},
		{"port mismatch", Request{Host: "api.test", Port: 80}, Deny, ReasonNotAllowed, ""},
		{"inspect", Request{Host: "api.github.com", Port: 443}, Inspect, ReasonAllowList, "allow:*.github.com"},
		{"decimal ip", Request{Host: "167772165", Port: 80}, Allow, ReasonAllowList, "allow:10.0.0.5"},
		{"ipv6 bracketed", Request{Host: "[2001:DB8::1]", Port: 80}, Allow, ReasonAllowList, "allow:[2001:db8::1]"},
		{"malformed", Request{Host: "exa mple.com", Port: 80}, Deny, ReasonMalformedHost, ""},
		{"crlf", Request{Host: "example.com\r\nX: y", Port: 80}, Deny, ReasonMalformedHost, ""},
		{"userinfo", Request{Host: "example.com@evil.test", Port: 80}, Deny, ReasonMalformedHost, ""},
		{"port zero", Request{Host: "example.com", Port: 0}, Deny, ReasonBadPort, ""},
		{"wildcard never matches ip", Request{Host: "1.github.com", Port: 80}, Allow, ReasonAllowList, "allow:*.github.com"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := p.Decide(tc.req)
			if got.Verdict != tc.want || got.Reason != tc.reason || got.Rule != tc.rule {
				t.Errorf("Decide(%+v) = %v (%s, rule %q), want %v (%s, rule %q)",
					tc.req, got.Verdict, got.Reason.Code(), got.Rule, tc.want, tc.reason.Code(), tc.rule)
			}
		})
	}
	if d := p.Decide(Request{Host: "evil.github.com", Port: 1}); d.Text() != "no evil today" {
		t.Errorf("deny reason text = %q, want the deniedDomainReasons entry", d.Text())
	}
	if d := p.Decide(Request{Host: "localhost", Port: 8080}); !d.LoopbackOnly {
		t.Errorf("localhost decision is not LoopbackOnly: %+v", d)
	}
	if d := p.Decide(Request{Host: "10.0.0.5", Port: 80}); !d.Literal {
		t.Errorf("allowed IP literal is not Literal: %+v", d)
	}
}

func TestDecideFailsClosed(t *testing.T) {
	var nilPolicy *Policy
	req := Request{Host: "example.com", Port: 443}
	if d := nilPolicy.Decide(req); d.Verdict != Deny {
		t.Errorf("nil policy: Decide = %v, want deny", d.Verdict)
	}
	if d := (&Policy{}).Decide(req); d.Verdict != Deny || d.Reason != ReasonNotAllowed {
		t.Errorf("zero policy: Decide = %v (%s), want deny (not-allowed)", d.Verdict, d.Reason.Code())
	}
	p := mustNew(t, Spec{})
	if d := p.Decide(req); d.Verdict != Deny {
		t.Errorf("empty spec: Decide = %v, want deny", d.Verdict)
	}
	if v := nilPolicy.CheckAddr(Decision{Verdict: Allow}, netip.MustParseAddrPort("8.8.8.8:443")); v.Allowed {
		t.Errorf("nil policy: CheckAddr allowed")
	}
	if v := p.CheckAddr(Decision{}, netip.MustParseAddrPort("8.8.8.8:443")); v.Allowed {
		t.Errorf("CheckAddr of a deny decision allowed")
	}
}

func TestAskAndStrict(t *testing.T) {
	var asked []string
	ask := func(r Request) Verdict {
		asked = append(asked, r.Host)
		if r.Host == "ok.test" {
			return Allow
		}
		return Verdict(200) // nonsense must deny
	}
	p := mustNew(t, Spec{Allow: []string{"a.test"}, Ask: ask})
	if d := p.Decide(Request{Host: "ok.test", Port: 443}); d.Verdict != Allow || d.Reason != ReasonAsk {
		t.Errorf("ask allow: got %v (%s)", d.Verdict, d.Reason.Code())
	}
	if d := p.Decide(Request{Host: "no.test", Port: 443}); d.Verdict != Deny {
		t.Errorf("ask nonsense verdict: got %v, want deny", d.Verdict)
	}
	strict := mustNew(t, Spec{Allow: []string{"a.test"}, Ask: ask, Strict: true})
	asked = nil
	if d := strict.Decide(Request{Host: "ok.test", Port: 443}); d.Verdict != Deny || d.Reason != ReasonStrict {
		t.Errorf("strict: got %v (%s), want deny (strict)", d.Verdict, d.Reason.Code())
	}
	if len(asked) != 0 {
		t.Errorf("strict mode consulted the ask hook for %v", asked)
	}
}

func TestInspectAll(t *testing.T) {
	p := mustNew(t, Spec{Allow: []string{"*.x.test"}, InspectAll: true, NoInspect: []string{"raw.x.test"}})
	if d := p.Decide(Request{Host: "a.x.test", Port: 443}); d.Verdict != Inspect {
		t.Errorf("InspectAll: got %v, want inspect", d.Verdict)
	}
	if d := p.Decide(Request{Host: "raw.x.test", Port: 443}); d.Verdict != Allow {
		t.Errorf("NoInspect: got %v, want allow", d.Verdict)
	}
}

func TestNewErrors(t *testing.T) {
	_, err := New(Spec{Allow: []string{"ok.test", "*.com", "*"}, Deny: []string{"*", "x:0"}})
	if err == nil {
		t.Fatal("New accepted invalid patterns")
	}
	for _, want := range []string{`allow[1] "*.com"`, `allow[2] "*"`, `deny[1] "x:0"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %s", err, want)
		}
	}
	if strings.Contains(err.Error(), `deny[0]`) {
		t.Errorf("bare * must be valid in a deny list: %v", err)
	}
}

// TestCheckAddr runs the vectors of testdata/addrs.txt.
func TestCheckAddr(t *testing.T) {
	p := mustNew(t, Spec{
		Allow:        []string{"example.test"},
		LocalAddrs:   []netip.Addr{netip.MustParseAddr("203.0.113.9")},
		DeniedAddrs:  []netip.Prefix{netip.MustParsePrefix("198.51.100.0/24")},
		AllowedAddrs: []netip.Prefix{netip.MustParsePrefix("10.20.0.0/16")},
	})
	d := p.Decide(Request{Host: "example.test", Port: 443})
	f, err := os.Open("testdata/addrs.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	n := 0
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		fs := strings.Fields(line)
		if len(fs) != 3 {
			t.Fatalf("bad vector %q", line)
		}
		n++
		ap := netip.AddrPortFrom(netip.MustParseAddr(fs[0]), 443)
		got := p.CheckAddr(d, ap)
		verdict := "deny"
		if got.Allowed {
			verdict = "allow"
		}
		if verdict != fs[1] || got.Reason.Code() != fs[2] {
			t.Errorf("CheckAddr(%s) = %s %s, want %s %s", fs[0], verdict, got.Reason.Code(), fs[1], fs[2])
		}
	}
	if n < 30 {
		t.Fatalf("only %d vectors read", n)
	}
}

func TestCheckAddrLiteralAndLocalhost(t *testing.T) {
	p := mustNew(t, Spec{Allow: []string{"10.0.0.5", "localhost", "*.localhost"}})
	lit := p.Decide(Request{Host: "10.0.0.5", Port: 80})
	if v := p.CheckAddr(lit, netip.MustParseAddrPort("10.0.0.5:80")); !v.Allowed {
		t.Errorf("explicit literal refused: %s", v.Describe())
	}
	if v := p.CheckAddr(lit, netip.MustParseAddrPort("10.0.0.6:80")); v.Allowed {
		t.Errorf("literal decision let another address through: %s", v.Describe())
	}
	for _, host := range []string{"localhost", "app.localhost"} {
		lo := p.Decide(Request{Host: host, Port: 8080})
		if v := p.CheckAddr(lo, netip.MustParseAddrPort("127.0.0.1:8080")); !v.Allowed {
			t.Errorf("%s refused loopback: %s", host, v.Describe())
		}
		if v := p.CheckAddr(lo, netip.MustParseAddrPort("8.8.8.8:8080")); v.Allowed || v.Reason != ReasonNotLoopback {
			t.Errorf("%s reached a non-loopback address: %s", host, v.Describe())
		}
	}
}

func TestHint(t *testing.T) {
	p := mustNew(t, Spec{Deny: []string{"bad.test"}})
	if got, want := p.Decide(Request{Host: "example.org", Port: 443}).Hint(), `to allow: add "example.org" to network.allowedDomains`; got != want {
		t.Errorf("Hint = %q, want %q", got, want)
	}
	if got, want := p.Decide(Request{Host: "bad.test", Port: 443}).Hint(), `to allow: remove "bad.test" from network.deniedDomains`; got != want {
		t.Errorf("Hint = %q, want %q", got, want)
	}
}

func TestHashStable(t *testing.T) {
	a := mustNew(t, Spec{Allow: []string{"a.test"}})
	b := mustNew(t, Spec{Allow: []string{"a.test"}})
	c := mustNew(t, Spec{Allow: []string{"b.test"}})
	if a.Hash() != b.Hash() || a.Hash() == c.Hash() {
		t.Errorf("Hash: a=%s b=%s c=%s; want a==b!=c", a.Hash(), b.Hash(), c.Hash())
	}
}

func BenchmarkDecide(b *testing.B) {
	allow := make([]string, 0, 1000)
	for i := 0; i < 500; i++ {
		allow = append(allow, fmt.Sprintf("host%d.example%d.test", i, i%50))
		allow = append(allow, fmt.Sprintf("*.svc%d.example.test:443", i))
	}
	p := mustNew(b, Spec{Allow: allow, Deny: []string{"*.ads.test", "evil.test"}})
	reqs := []Request{
		{Proto: ProtoConnect, Host: "host250.example0.test", Port: 443},
		{Proto: ProtoConnect, Host: "a.b.svc499.example.test", Port: 443},
		{Proto: ProtoConnect, Host: "unknown.example.org", Port: 443},
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		_ = p.Decide(reqs[i%len(reqs)])
	}
}

func TestReasonByCode(t *testing.T) {
	for r := ReasonNone; r <= ReasonNoAddress; r++ {
		got, ok := ReasonByCode(r.Code())
		if !ok || got != r {
			t.Errorf("ReasonByCode(%q) = %v, %v; want %v", r.Code(), got, ok, r)
		}
	}
	if _, ok := ReasonByCode("no-such-code"); ok {
		t.Error("unknown code found")
	}
}
