// Package resolver turns an allowed destination into a connection without
// letting DNS change what was allowed.
//
// A Resolver answers names from a hosts file, then from DNS (A and AAAA in
// parallel, UDP with TCP fallback on truncation) through a TTL-bounded cache.
// A Dialer resolves a policy.Decision's host once, judges every address with
// policy.CheckAddr, and dials only the surviving IP addresses, never the
// name: a second resolution at connect time is how DNS rebinding reaches
// 127.0.0.1 or a cloud metadata address after the name was allowed.
//
// The policy package stays pure; this package is where the I/O happens.
package resolver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/miekg/dns"
)

// Defaults for Options.
const (
	DefaultTimeout     = 2 * time.Second
	DefaultMaxTTL      = 5 * time.Minute
	DefaultNegativeTTL = 5 * time.Second
	DefaultCacheSize   = 4096
	defaultHostsFile   = "/etc/hosts"
)

// ednsUDPSize is the EDNS0 buffer we advertise: the DNS Flag Day 2020 value,
// which avoids IP fragmentation; larger answers come back truncated and are
// re-asked over TCP (RFC 7766).
const ednsUDPSize = 1232

// maxCNAMEHops bounds how far a CNAME chain inside one answer is followed.
const maxCNAMEHops = 8

// Options configures a Resolver. The zero value reads /etc/resolv.conf and
// /etc/hosts and uses the defaults below.
type Options struct {
	// Servers are the DNS servers, "ip:port" (a bare IP means port 53),
	// tried in order. Empty: the nameserver lines of ResolvConf.
	Servers []string
	// ResolvConf is the file read when Servers is empty. Default
	// /etc/resolv.conf.
	ResolvConf string
	// Timeout bounds one query to one server. Default 2s.
	Timeout time.Duration
	// HostsFile is consulted before DNS and re-read when it changes.
	// Default /etc/hosts; "-" disables it.
	HostsFile string
	// MaxTTL and MinTTL clamp how long an answer is cached, whatever its
	// records' TTL. Default MaxTTL 5m, MinTTL 0.
	MaxTTL, MinTTL time.Duration
	// NegativeTTL is how long NXDOMAIN and no-address answers are cached.
	// Default 5s (at most MaxTTL); negative disables negative caching.
	NegativeTTL time.Duration
	// CacheSize bounds the number of cached names; the oldest is evicted.
	// Default 4096; negative disables the cache.
	CacheSize int
	// Logger receives operational logs, scoped with component=resolver.
	// Default: discard.
	Logger *slog.Logger
}

// Resolver looks names up in a hosts file and DNS. It is safe for concurrent
// use.
type Resolver struct {
	servers []netip.AddrPort
	timeout time.Duration
	hosts   *hostsFile // nil when disabled
	minTTL  time.Duration
	maxTTL  time.Duration
	negTTL  time.Duration // < 0: no negative caching
	cache   *cache        // nil when disabled
	log     *slog.Logger
	udp     *dns.Client
	tcp     *dns.Client

	mu       sync.Mutex
	inflight map[string]*call
}

// call is one DNS resolution shared by every concurrent Lookup of a name, so
// that a burst of connections to a cold name sends one A and one AAAA query.
type call struct {
	done  chan struct{}
	addrs []netip.Addr
	err   error
}

// New checks o and returns a Resolver. It reads the resolv.conf file (when
// Servers is empty) and the hosts file once; the hosts file is re-read later
// when it changes.
func New(o Options) (*Resolver, error) {
	r := &Resolver{
		timeout:  o.Timeout,
		minTTL:   o.MinTTL,
		maxTTL:   o.MaxTTL,
		negTTL:   o.NegativeTTL,
		inflight: make(map[string]*call),
	}
	if r.timeout <= 0 {
		r.timeout = DefaultTimeout
	}
	if r.maxTTL <= 0 {
		r.maxTTL = DefaultMaxTTL
	}
	if r.minTTL < 0 || r.minTTL > r.maxTTL {
		return nil, fmt.Errorf("%w: MinTTL %v outside [0, MaxTTL %v]", ErrBadOptions, o.MinTTL, r.maxTTL)
	}
	if r.negTTL == 0 {
		r.negTTL = DefaultNegativeTTL
	}
	r.negTTL = min(r.negTTL, r.maxTTL)

	for _, s := range o.Servers {
		ap, err := parseServer(s)
		if err != nil {
			return nil, err
		}
		r.servers = append(r.servers, ap)
	}
	if len(o.Servers) == 0 {
		path := o.ResolvConf
		if path == "" {
			path = defaultResolvConf
		}
		data, err := readLimited(path, 1<<20)
		if err != nil {
			return nil, fmt.Errorf("resolver: read DNS servers: %w", err)
		}
		r.servers = parseResolvConf(data)
		if len(r.servers) == 0 {
			return nil, fmt.Errorf("%w: %s has no nameserver line", ErrNoServers, path)
		}
	}

	switch o.HostsFile {
	case "-":
	case "":
		h, err := newHostsFile(defaultHostsFile)
		if err != nil {
			return nil, fmt.Errorf("resolver: read hosts file: %w", err)
		}
		r.hosts = h
	default:
		// An explicit path that does not exist is a configuration
		// mistake, not an empty file.
		if _, err := os.Stat(o.HostsFile); err != nil {
			return nil, fmt.Errorf("resolver: hosts file: %w", err)
		}
		h, err := newHostsFile(o.HostsFile)
		if err != nil {
			return nil, fmt.Errorf("resolver: read hosts file: %w", err)
		}
		r.hosts = h
	}

	size := o.CacheSize
	if size == 0 {
		size = DefaultCacheSize
	}
	if size > 0 {
		r.cache = newCache(size)
	}

	l := o.Logger
	if l == nil {
		l = slog.New(slog.DiscardHandler)
	}
	r.log = l.With("component", "resolver")
	r.udp = &dns.Client{Net: "udp", UDPSize: ednsUDPSize, Timeout: r.timeout}
	r.tcp = &dns.Client{Net: "tcp", Timeout: r.timeout}
	return r, nil
}

// Servers returns the DNS servers in the order they are tried.
func (r *Resolver) Servers() []netip.AddrPort { return slices.Clone(r.servers) }

// Lookup returns the addresses of name: an IP literal is returned as is;
// otherwise the hosts file is consulted, then DNS (AAAA records first, then
// A). name must already be canonical (lower-case ASCII, no trailing dot); no
// search list is applied. Addresses are unmapped and zone-free.
//
// A name that does not exist or has no address is a *NotFoundError. When no
// server answers, the error wraps ErrServerFailure. Lookup returns when ctx
// ends even if a query is still running for other callers.
func (r *Resolver) Lookup(ctx context.Context, name string) ([]netip.Addr, error) {
	if a, err := netip.ParseAddr(name); err == nil {
		return []netip.Addr{a.WithZone("").Unmap()}, nil
	}
	if !validName(name) {
		return nil, fmt.Errorf("%w: %q", ErrInvalidName, name)
	}
	if r.hosts != nil {
		if as := r.hosts.lookup(name); len(as) > 0 {
			return slices.Clone(as), nil
		}
	}
	// RFC 6761 §6.3: localhost names are loopback and are never sent to
	// DNS, where a hostile server could answer with any address.
	if name == "localhost" || strings.HasSuffix(name, ".localhost") {
		return []netip.Addr{netip.AddrFrom4([4]byte{127, 0, 0, 1}), netip.IPv6Loopback()}, nil
	}
	if e, ok := r.cache.get(name, time.Now()); ok {
		if e.err != nil {
			return nil, e.err
		}
		return slices.Clone(e.addrs), nil
	}

	r.mu.Lock()
	c, ok := r.inflight[name]
	if !ok {
		// A query may have finished between the cache miss and the
		// lock; it cached before leaving inflight, so look again rather
		// than ask twice.
		if e, hit := r.cache.get(name, time.Now()); hit {
			r.mu.Unlock()
			if e.err != nil {
				return nil, e.err
			}
			return slices.Clone(e.addrs), nil
		}
		c = &call{done: make(chan struct{})}
		r.inflight[name] = c
		// The shared query must not die with the first caller's context,
		// or every other caller would get its cancellation. It keeps the
		// values and is bounded by the per-query timeouts instead.
		qctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.budget())
		go func() {
			defer cancel()
			c.addrs, c.err = r.resolve(qctx, name)
			r.mu.Lock()
			delete(r.inflight, name)
			r.mu.Unlock()
			close(c.done)
		}()
	}
	r.mu.Unlock()

	select {
	case <-c.done:
		if c.err != nil {
			return nil, c.err
		}
		return slices.Clone(c.addrs), nil
	case <-ctx.Done():
		return nil, fmt.Errorf("resolve %s: %w", name, ctx.Err())
	}
}

// budget bounds one whole resolution: every server, UDP then TCP.
func (r *Resolver) budget() time.Duration {
	return 2*time.Duration(len(r.servers))*r.timeout + time.Second
}

// validName is a cheap sanity check of a canonical name: it is not a
// validator (canon is), it only keeps nonsense out of DNS packets.
func validName(name string) bool {
	if name == "" || len(name) > 253 || name[0] == '.' || name[len(name)-1] == '.' {
		return false
	}
	_, ok := dns.IsDomainName(name)
	return ok && !strings.Contains(name, "..")
}

// typeResult is the outcome of asking one record type.
type typeResult struct {
	addrs []netip.Addr
	ttl   uint32 // min TTL of the records used; meaningful when addrs != nil
	err   error  // *NotFoundError for NXDOMAIN
}

// resolve asks for AAAA and A in parallel, combines the answers and caches
// them.
func (r *Resolver) resolve(ctx context.Context, name string) ([]netip.Addr, error) {
	var v6, v4 typeResult
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); v6 = r.queryType(ctx, name, dns.TypeAAAA) }()
	go func() { defer wg.Done(); v4 = r.queryType(ctx, name, dns.TypeA) }()
	wg.Wait()

	addrs := append(v6.addrs, v4.addrs...)
	if len(addrs) > 0 {
		if v6.err != nil || v4.err != nil {
			// Half an answer is usable but not cached: the next lookup
			// may get the whole one.
			r.log.Debug("partial DNS answer", "name", name, "aaaa_err", v6.err, "a_err", v4.err)
			return addrs, nil
		}
		ttl := uint32(1<<32 - 1)
		for _, t := range []typeResult{v6, v4} {
			if len(t.addrs) > 0 {
				ttl = min(ttl, t.ttl)
			}
		}
		d := min(max(time.Duration(ttl)*time.Second, r.minTTL), r.maxTTL)
		if d > 0 {
			r.cache.put(&cacheEntry{name: name, addrs: addrs, expires: time.Now().Add(d)})
		}
		return addrs, nil
	}

	var nf *NotFoundError
	if errors.As(v6.err, &nf) || errors.As(v4.err, &nf) || (v6.err == nil && v4.err == nil) {
		err := &NotFoundError{Name: name}
		if r.negTTL > 0 {
			r.cache.put(&cacheEntry{name: name, err: err, expires: time.Now().Add(r.negTTL)})
		}
		return nil, err
	}
	switch {
	case v6.err != nil && v4.err != nil:
		return nil, fmt.Errorf("resolve %s: %w; %w", name, v6.err, v4.err)
	case v6.err != nil:
		return nil, fmt.Errorf("resolve %s: %w", name, v6.err)
	default:
		return nil, fmt.Errorf("resolve %s: %w", name, v4.err)
	}
}

// queryType asks each server in turn for one record type of name until one
// gives an authoritative outcome (an answer, NODATA or NXDOMAIN).
func (r *Resolver) queryType(ctx context.Context, name string, qtype uint16) typeResult {
	qname := name + "."
	var errs []string
	for _, srv := range r.servers {
		if err := ctx.Err(); err != nil {
			errs = append(errs, err.Error())
			break
		}
		msg, err := r.exchange(ctx, srv, qname, qtype)
		if err != nil {
			r.log.Debug("DNS query failed", "server", srv, "name", name, "type", dns.TypeToString[qtype], "err", err)
			errs = append(errs, fmt.Sprintf("%s: %v", srv, err))
			continue
		}
		switch msg.Rcode {
		case dns.RcodeSuccess:
			addrs, ttl := extractAddrs(msg, qname, qtype)
			return typeResult{addrs: addrs, ttl: ttl}
		case dns.RcodeNameError:
			return typeResult{err: &NotFoundError{Name: name}}
		default:
			// SERVFAIL, REFUSED and the rest say nothing about the
			// name; another server may know.
			rc := dns.RcodeToString[msg.Rcode]
			r.log.Debug("DNS server refused", "server", srv, "name", name, "type", dns.TypeToString[qtype], "rcode", rc)
			errs = append(errs, fmt.Sprintf("%s: %s", srv, rc))
		}
	}
	return typeResult{err: fmt.Errorf("%w (%s: %s)", ErrServerFailure, dns.TypeToString[qtype], strings.Join(errs, "; "))}
}

// exchange sends one query to srv over UDP, and again over TCP if the UDP
// reply was truncated.
func (r *Resolver) exchange(ctx context.Context, srv netip.AddrPort, qname string, qtype uint16) (*dns.Msg, error) {
	m := new(dns.Msg)
	m.SetQuestion(qname, qtype)
	m.RecursionDesired = true
	m.SetEdns0(ednsUDPSize, false)

	addr := srv.String()
	resp, err := r.exchangeOne(ctx, r.udp, m, addr)
	if err == nil && resp.Truncated {
		resp, err = r.exchangeOne(ctx, r.tcp, m, addr)
		if err != nil {
			err = fmt.Errorf("tcp after truncation: %w", err)
		}
	}
	if err != nil {
		return nil, err
	}
	// The client checked the id; also insist the reply is about what we
	// asked, so a confused or spoofing server cannot answer another name.
	if len(resp.Question) != 1 || !strings.EqualFold(resp.Question[0].Name, qname) || resp.Question[0].Qtype != qtype {
		return nil, errors.New("reply does not match the question")
	}
	return resp, nil
}

func (r *Resolver) exchangeOne(ctx context.Context, c *dns.Client, m *dns.Msg, addr string) (*dns.Msg, error) {
	qctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	resp, _, err := c.ExchangeContext(qctx, m, addr)
	if err != nil {
		return nil, err
	}
	return resp, nil
}

// extractAddrs returns the qtype addresses of qname in msg's answer section,
// following a CNAME chain within the answer, and the minimum TTL of the
// records used. Records for names outside the chain are ignored: a server
// may not add addresses for names we did not ask about.
func extractAddrs(msg *dns.Msg, qname string, qtype uint16) ([]netip.Addr, uint32) {
	chain := []string{qname}
	ttl := uint32(1<<32 - 1)
	for hop := 0; hop < maxCNAMEHops; hop++ {
		cur := chain[len(chain)-1]
		next := ""
		for _, rr := range msg.Answer {
			if c, ok := rr.(*dns.CNAME); ok && strings.EqualFold(c.Hdr.Name, cur) {
				next, ttl = c.Target, min(ttl, c.Hdr.Ttl)
				break
			}
		}
		if next == "" || slices.ContainsFunc(chain, func(s string) bool { return strings.EqualFold(s, next) }) {
			break
		}
		chain = append(chain, next)
	}
	inChain := func(n string) bool {
		return slices.ContainsFunc(chain, func(s string) bool { return strings.EqualFold(s, n) })
	}

	var out []netip.Addr
	for _, rr := range msg.Answer {
		var ip []byte
		switch v := rr.(type) {
		case *dns.A:
			if qtype != dns.TypeA || !inChain(v.Hdr.Name) {
				continue
			}
			ip = v.A
		case *dns.AAAA:
			if qtype != dns.TypeAAAA || !inChain(v.Hdr.Name) {
				continue
			}
			ip = v.AAAA
		default:
			continue
		}
		a, ok := netip.AddrFromSlice(ip)
		if !ok {
			continue
		}
		// miekg stores A records as 16-byte slices; unmap so that
		// ::ffff:127.0.0.1 in an AAAA record is also judged as 127.0.0.1.
		a = a.Unmap()
		if !slices.Contains(out, a) {
			out = append(out, a)
		}
		ttl = min(ttl, rr.Header().Ttl)
	}
	if len(out) == 0 {
		return nil, 0
	}
	return out, ttl
}
