package gateway

import (
	"bufio"
	"context"
	"encoding/base64"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"time"

	"github.com/moat-dev/moat/gateway/policy"
	"github.com/moat-dev/moat/gateway/policy/canon"
	"github.com/moat-dev/moat/mitm"
)

// Parent is an upstream (corporate) proxy the gateway chains through, after
// its own decision. With a parent, the parent resolves and dials the name:
// moat's resolved-address guard then applies only to NoProxy destinations,
// which are dialled directly.
type Parent struct {
	HTTP  *url.URL // for plain-HTTP requests; nil: direct
	HTTPS *url.URL // for CONNECT and SOCKS5 tunnels; nil: direct
	// noProxy entries: "*", a host or ".domain" suffix, or a CIDR.
	hosts    []string
	prefixes []netip.Prefix
	all      bool
}

// ParseParent reads network.parentProxy: http and https are proxy URLs
// (http://[user:pass@]host:port), noProxy a comma-separated list. https
// defaults to http. Errors name the field and never echo a password.
func ParseParent(httpURL, httpsURL, noProxy string) (*Parent, error) {
	if httpsURL == "" {
		httpsURL = httpURL
	}
	p := &Parent{}
	var err error
	if p.HTTP, err = parseProxyURL("network.parentProxy.http", httpURL); err != nil {
		return nil, err
	}
	if p.HTTPS, err = parseProxyURL("network.parentProxy.https", httpsURL); err != nil {
		return nil, err
	}
	for _, e := range strings.Split(noProxy, ",") {
		e = strings.ToLower(strings.TrimSpace(e))
		switch {
		case e == "":
		case e == "*":
			p.all = true
		case strings.Contains(e, "/"):
			pf, err := netip.ParsePrefix(e)
			if err != nil {
				return nil, fmt.Errorf("network.parentProxy.noProxy: %q is not a CIDR (want e.g. 10.0.0.0/8)", e)
			}
			p.prefixes = append(p.prefixes, pf.Masked())
		default:
			p.hosts = append(p.hosts, strings.TrimPrefix(e, "."))
		}
	}
	return p, nil
}

func parseProxyURL(field, s string) (*url.URL, error) {
	if s == "" {
		return nil, nil
	}
	u, err := url.Parse(s)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "") {
		return nil, fmt.Errorf("%s: want http://host:port (credentials as user:pass@), got %q", field, redactURL(s))
	}
	if u.Port() == "" {
		u.Host = net.JoinHostPort(u.Hostname(), "3128")
	}
	return u, nil
}

// redactURL drops the password of a proxy URL for error messages.
func redactURL(s string) string {
	if u, err := url.Parse(s); err == nil && u.User != nil {
		u.User = url.User(u.User.Username())
		return u.String()
	}
	if i := strings.LastIndex(s, "@"); i >= 0 {
		return "…" + s[i:]
	}
	return s
}

// route returns the parent for a destination, or nil to dial directly.
func (p *Parent) route(h canon.Host, plain bool) *url.URL {
	if p == nil || p.all {
		return nil
	}
	u := p.HTTPS
	if plain {
		u = p.HTTP
	}
	if u == nil {
		return nil
	}
	if h.IsIP() {
		for _, pf := range p.prefixes {
			if pf.Contains(h.Addr) {
				return nil
			}
		}
	}
	name := h.String()
	for _, e := range p.hosts {
		if name == e || strings.HasSuffix(name, "."+e) {
			return nil
		}
	}
	return u
}

// dialUpstream connects to d's destination: through the parent proxy when
// one applies, else through the checked dialer.
func (g *Gateway) dialUpstream(ctx context.Context, id identity, d policy.Decision, plain bool) (net.Conn, netip.AddrPort, error) {
	if d.Verdict == policy.Deny {
		return nil, netip.AddrPort{}, errNoDecision
	}
	u := g.opt.Parent.route(d.Host, plain)
	// localhost entries name this machine: through the parent they would
	// reach the parent's own loopback instead.
	if u == nil || d.LoopbackOnly {
		return id.dialer.DialContext(ctx, d)
	}
	return dialViaParent(ctx, u, canon.HostPort(d.Host, d.Port))
}

// Dial connects to an allowed decision's destination the way the gateway
// does: through the parent proxy where one applies, else through the
// checked dialer. The interceptor dials inspected hosts with it.
func (g *Gateway) Dial(ctx context.Context, d policy.Decision) (net.Conn, netip.AddrPort, error) {
	return g.dialUpstream(ctx, g.forClient(mitm.ClientFrom(ctx)), d, false)
}

// ParentError reports a parent proxy that refused or failed a tunnel.
type ParentError struct {
	Proxy  string // host:port of the parent
	Status string
	Err    error
}

func (e *ParentError) Error() string {
	if e.Err != nil {
		return "parent proxy " + e.Proxy + ": " + e.Err.Error()
	}
	return "parent proxy " + e.Proxy + " refused the tunnel: " + e.Status
}

func (e *ParentError) Unwrap() error { return e.Err }

func dialViaParent(ctx context.Context, u *url.URL, target string) (net.Conn, netip.AddrPort, error) {
	var dl net.Dialer
	c, err := dl.DialContext(ctx, "tcp", u.Host)
	if err != nil {
		return nil, netip.AddrPort{}, &ParentError{Proxy: u.Host, Err: err}
	}
	if dl, ok := ctx.Deadline(); ok {
		c.SetDeadline(dl)
	} else {
		c.SetDeadline(time.Now().Add(30 * time.Second))
	}
	req := "CONNECT " + target + " HTTP/1.1\r\nHost: " + target + "\r\n"
	if u.User != nil {
		pw, _ := u.User.Password()
		req += "Proxy-Authorization: Basic " + base64.StdEncoding.EncodeToString([]byte(u.User.Username()+":"+pw)) + "\r\n"
	}
	if _, err := c.Write([]byte(req + "\r\n")); err != nil {
		c.Close()
		return nil, netip.AddrPort{}, &ParentError{Proxy: u.Host, Err: err}
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		c.Close()
		return nil, netip.AddrPort{}, &ParentError{Proxy: u.Host, Err: err}
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		c.Close()
		return nil, netip.AddrPort{}, &ParentError{Proxy: u.Host, Status: resp.Status}
	}
	c.SetDeadline(time.Time{})
	addr, _ := netip.ParseAddrPort(c.RemoteAddr().String())
	if br.Buffered() > 0 {
		return &peekedConn{Conn: c, r: br}, addr, nil
	}
	return c, addr, nil
}
