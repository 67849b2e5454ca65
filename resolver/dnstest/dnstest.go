// Package dnstest runs a small authoritative DNS server for tests, on UDP and
// TCP at the same loopback port, whose answers a test sets and can change per
// query. It counts what it was asked so that tests can prove caching, retries
// and TCP fallback with real packets instead of a mocked network.
package dnstest

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// Query is one question the server received.
type Query struct {
	Name string // lower-case, without the trailing dot
	Type uint16 // dns.TypeA, dns.TypeAAAA, …
	Net  string // "udp" or "tcp"
}

// Answer is what the server replies to one query.
type Answer struct {
	// Addrs are the addresses of the name; a query gets those of its type
	// (IPv4 for A, IPv6 for AAAA). None of its type is NODATA.
	Addrs []netip.Addr
	// TTL of the records, in whole seconds.
	TTL time.Duration
	// Rcode is the response code; zero is NOERROR. dns.RcodeNameError is
	// NXDOMAIN.
	Rcode int
	// Truncate answers UDP queries with the TC bit and no records, so the
	// client must retry over TCP; TCP queries get the full answer.
	Truncate bool
	// Drop sends no reply at all, like a dead server.
	Drop bool
}

// HandlerFunc decides the answer to one query. Returning false falls back to
// the records set with Set (and NXDOMAIN for unknown names).
type HandlerFunc func(q Query) (Answer, bool)

// Server is a running test DNS server.
type Server struct {
	// Addr is "ip:port", served on both UDP and TCP.
	Addr string

	udp, tcp *dns.Server

	mu      sync.Mutex
	records map[string]Answer
	handler HandlerFunc
	queries []Query
}

// New starts a server on 127.0.0.1 and stops it when tb's test ends.
func New(tb testing.TB) *Server {
	tb.Helper()
	s, err := Start("127.0.0.1:0")
	if err != nil {
		tb.Fatalf("dnstest: %v", err)
	}
	tb.Cleanup(func() { s.Close() })
	return s
}

// Start listens on addr ("ip:port"; port 0 picks one free on both UDP and
// TCP) and serves until Close.
func Start(addr string) (*Server, error) {
	var errs []error
	// A free UDP port may be taken on TCP; try a few times.
	for range 10 {
		pc, err := net.ListenPacket("udp", addr)
		if err != nil {
			return nil, err
		}
		l, err := net.Listen("tcp", pc.LocalAddr().String())
		if err != nil {
			pc.Close()
			errs = append(errs, err)
			continue
		}
		s := &Server{Addr: pc.LocalAddr().String(), records: map[string]Answer{}}
		h := dns.HandlerFunc(s.serve)
		s.udp = &dns.Server{PacketConn: pc, Handler: h}
		s.tcp = &dns.Server{Listener: l, Handler: h}
		if err := startAndWait(s.udp); err != nil {
			pc.Close()
			l.Close()
			return nil, err
		}
		if err := startAndWait(s.tcp); err != nil {
			s.udp.Shutdown()
			l.Close()
			return nil, err
		}
		return s, nil
	}
	return nil, fmt.Errorf("listen on %s: %w", addr, errors.Join(errs...))
}

func startAndWait(srv *dns.Server) error {
	started := make(chan struct{})
	failed := make(chan error, 1)
	srv.NotifyStartedFunc = func() { close(started) }
	go func() {
		if err := srv.ActivateAndServe(); err != nil {
			failed <- err
		}
	}()
	select {
	case <-started:
		return nil
	case err := <-failed:
		return err
	case <-time.After(5 * time.Second):
		return errors.New("dnstest: server did not start")
	}
}

// Close stops the server.
func (s *Server) Close() error {
	return errors.Join(s.udp.Shutdown(), s.tcp.Shutdown())
}

// AddrPort is Addr parsed.
func (s *Server) AddrPort() netip.AddrPort { return netip.MustParseAddrPort(s.Addr) }

// Set makes name (any case, trailing dot optional) answer with addrs and the
// given TTL. Nil addrs makes the name exist with no address (NODATA).
func (s *Server) Set(name string, addrs []netip.Addr, ttl time.Duration) {
	s.SetAnswer(name, Answer{Addrs: addrs, TTL: ttl})
}

// SetAnswer makes name answer with a.
func (s *Server) SetAnswer(name string, a Answer) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.records[canonical(name)] = a
}

// Handle installs h, consulted before the records for every query; nil
// removes it.
func (s *Server) Handle(h HandlerFunc) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.handler = h
}

// Queries returns every query received so far, in order.
func (s *Server) Queries() []Query {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Query(nil), s.queries...)
}

// Count returns how many queries for name (any case) and qtype arrived, over
// any transport; qtype 0 counts every type.
func (s *Server) Count(name string, qtype uint16) int {
	name = canonical(name)
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, q := range s.queries {
		if q.Name == name && (qtype == 0 || q.Type == qtype) {
			n++
		}
	}
	return n
}

// CountNet returns how many queries arrived over network ("udp" or "tcp").
func (s *Server) CountNet(network string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, q := range s.queries {
		if q.Net == network {
			n++
		}
	}
	return n
}

func canonical(name string) string {
	return strings.ToLower(strings.TrimSuffix(name, "."))
}

func (s *Server) serve(w dns.ResponseWriter, req *dns.Msg) {
	if len(req.Question) != 1 {
		m := new(dns.Msg)
		m.SetRcode(req, dns.RcodeFormatError)
		w.WriteMsg(m)
		return
	}
	q := req.Question[0]
	query := Query{Name: canonical(q.Name), Type: q.Qtype, Net: w.LocalAddr().Network()}

	s.mu.Lock()
	s.queries = append(s.queries, query)
	h := s.handler
	rec, known := s.records[query.Name]
	s.mu.Unlock()

	var ans Answer
	handled := false
	if h != nil {
		ans, handled = h(query)
	}
	if !handled {
		ans = rec
		if !known {
			ans = Answer{Rcode: dns.RcodeNameError}
		}
	}
	if ans.Drop {
		return
	}

	m := new(dns.Msg)
	m.SetReply(req)
	m.Authoritative = true
	m.Rcode = ans.Rcode
	if ans.Truncate && query.Net == "udp" {
		m.Truncated = true
		w.WriteMsg(m)
		return
	}
	if ans.Rcode == dns.RcodeSuccess {
		hdr := func(t uint16) dns.RR_Header {
			return dns.RR_Header{Name: q.Name, Rrtype: t, Class: dns.ClassINET, Ttl: uint32(ans.TTL / time.Second)}
		}
		for _, a := range ans.Addrs {
			switch {
			case q.Qtype == dns.TypeA && a.Is4():
				m.Answer = append(m.Answer, &dns.A{Hdr: hdr(dns.TypeA), A: a.AsSlice()})
			case q.Qtype == dns.TypeAAAA && a.Is6():
				m.Answer = append(m.Answer, &dns.AAAA{Hdr: hdr(dns.TypeAAAA), AAAA: a.AsSlice()})
			}
		}
	}
	w.WriteMsg(m)
}
