package ca

import (
	"container/list"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Leaf timing. Leaves are short-lived so that a leaked leaf key is worth
// little; they are backdated to absorb clock skew inside the sandbox.
const (
	LeafValidity = 7 * 24 * time.Hour
	leafBackdate = time.Hour
	// leafRenewBefore makes a cached leaf be replaced well before it
	// expires, so that no long-lived connection sees an expired one.
	leafRenewBefore = 24 * time.Hour
)

// DefaultCacheSize bounds how many leaves are kept in memory.
const DefaultCacheSize = 1024

// Leaf returns a certificate for host (a DNS name or an IP literal,
// brackets allowed), signed by the CA, with the CA in its chain. Leaves are
// cached in a bounded LRU; concurrent first calls for one host issue a
// single certificate.
func (a *Authority) Leaf(host string) (*tls.Certificate, error) {
	key := leafKey(host)
	if key == "" {
		return nil, ErrBadHost
	}
	return a.leaves.get(key, time.Now(), a.issue)
}

// Issued reports how many leaves this Authority has signed.
func (a *Authority) Issued() int64 { return a.leaves.issued.Load() }

// leafKey normalises host for the cache and the SAN: lower case, no
// trailing dot, no IPv6 brackets, IPs in canonical form.
func leafKey(host string) string {
	h := strings.TrimSuffix(strings.ToLower(host), ".")
	if strings.HasPrefix(h, "[") && strings.HasSuffix(h, "]") {
		h = h[1 : len(h)-1]
	}
	if ip, err := netip.ParseAddr(h); err == nil {
		return ip.Unmap().String()
	}
	return h
}

func (a *Authority) issue(host string, now time.Time) (*tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("ca: leaf key: %w", err)
	}
	sn, err := serial()
	if err != nil {
		return nil, err
	}
	notAfter := now.Add(LeafValidity)
	if notAfter.After(a.cert.NotAfter) {
		notAfter = a.cert.NotAfter
	}
	tmpl := &x509.Certificate{
		SerialNumber: sn,
		Subject:      pkix.Name{CommonName: host},
		NotBefore:    now.Add(-leafBackdate),
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		tmpl.IPAddresses = append(tmpl.IPAddresses, ip.AsSlice())
	} else {
		tmpl.DNSNames = []string{host}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, a.cert, &key.PublicKey, a.signer)
	if err != nil {
		return nil, fmt.Errorf("ca: sign leaf for %s: %w", host, err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("ca: parse leaf for %s: %w", host, err)
	}
	return &tls.Certificate{Certificate: [][]byte{der, a.cert.Raw}, PrivateKey: key, Leaf: leaf}, nil
}

// leafCache is an LRU of leaves with single-flight issuance.
type leafCache struct {
	mu      sync.Mutex
	max     int
	ll      *list.List // of *cacheEntry, most recent first
	byHost  map[string]*list.Element
	flights map[string]*flight
	issued  atomic.Int64
}

type cacheEntry struct {
	host string
	cert *tls.Certificate
}

type flight struct {
	done chan struct{}
	cert *tls.Certificate
	err  error
}

func newLeafCache(max int) *leafCache {
	return &leafCache{max: max, ll: list.New(), byHost: map[string]*list.Element{}, flights: map[string]*flight{}}
}

func (c *leafCache) get(host string, now time.Time, issue func(string, time.Time) (*tls.Certificate, error)) (*tls.Certificate, error) {
	c.mu.Lock()
	if el, ok := c.byHost[host]; ok {
		e := el.Value.(*cacheEntry)
		if now.Add(leafRenewBefore).Before(e.cert.Leaf.NotAfter) {
			c.ll.MoveToFront(el)
			c.mu.Unlock()
			return e.cert, nil
		}
		c.ll.Remove(el)
		delete(c.byHost, host)
	}
	if f, ok := c.flights[host]; ok {
		c.mu.Unlock()
		<-f.done
		return f.cert, f.err
	}
	f := &flight{done: make(chan struct{})}
	c.flights[host] = f
	c.mu.Unlock()

	f.cert, f.err = issue(host, now)
	if f.err == nil {
		c.issued.Add(1)
	}

	c.mu.Lock()
	delete(c.flights, host)
	if f.err == nil {
		c.byHost[host] = c.ll.PushFront(&cacheEntry{host: host, cert: f.cert})
		for c.ll.Len() > c.max {
			old := c.ll.Remove(c.ll.Back()).(*cacheEntry)
			delete(c.byHost, old.host)
		}
	}
	c.mu.Unlock()
	close(f.done)
	return f.cert, f.err
}
