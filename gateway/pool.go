package gateway

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"sync"
	"time"
)

// pool is the plain-HTTP upstream RoundTripper: keep-alive connections per
// host:port, used synchronously by the request's own goroutine. Go's
// http.Transport hands every request to two more goroutines (a read and a
// write loop per connection); on a busy proxy those hand-offs cost more than
// the proxying itself. Requests it cannot serve this way (HTTPS upstreams,
// protocol upgrades) go to the fallback Transport.
type pool struct {
	dial     func(ctx context.Context, key string) (net.Conn, error)
	fallback http.RoundTripper
	maxIdle  int // per host
	maxTotal int // all hosts
	idleTTL  time.Duration

	mu      sync.Mutex
	idle    map[string][]*poolConn
	total   int
	reaping bool
}

// freshIdle is how long an idle connection counts as certainly alive.
const freshIdle = 500 * time.Millisecond

type poolConn struct {
	net.Conn
	addr string // the dialled IP:port, for audit lines
	br   *bufio.Reader
	bw   *bufio.Writer
	used time.Time
	// deadline is set while a deadline is armed on the connection.
	deadline bool
}

func (p *pool) get(key string, always bool) *poolConn {
	p.mu.Lock()
	defer p.mu.Unlock()
	cs := p.idle[key]
	for len(cs) > 0 {
		c := cs[len(cs)-1]
		cs = cs[:len(cs)-1]
		p.total--
		// Look before using it: the upstream may have closed it while it
		// idled, or queued bytes (an unsolicited 408) that would be read
		// as the next answer. A connection used a moment ago is skipped
		// for requests that can be retried: the peek is a syscall on the
		// hot path, and servers time idle connections out in seconds.
		idle := time.Since(c.used)
		if idle < p.idleTTL && ((!always && idle < freshIdle) || connAlive(c.Conn)) {
			p.idle[key] = cs
			return c
		}
		c.Close()
	}
	delete(p.idle, key)
	return nil
}

func (p *pool) put(key string, c *poolConn) {
	c.used = time.Now()
	p.mu.Lock()
	if len(p.idle[key]) < p.maxIdle && p.total < p.maxTotal {
		p.idle[key] = append(p.idle[key], c)
		p.total++
		p.startReaper()
		p.mu.Unlock()
		return
	}
	p.mu.Unlock()
	c.Close()
}

// startReaper closes connections idle past idleTTL, so hosts visited once
// do not hold descriptors forever. Called with p.mu held.
func (p *pool) startReaper() {
	if p.reaping {
		return
	}
	p.reaping = true
	time.AfterFunc(p.idleTTL/2, p.reap)
}

func (p *pool) reap() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for k, cs := range p.idle {
		keep := cs[:0]
		for _, c := range cs {
			if time.Since(c.used) >= p.idleTTL {
				c.Close()
				p.total--
				continue
			}
			keep = append(keep, c)
		}
		if len(keep) == 0 {
			delete(p.idle, k)
		} else {
			p.idle[k] = keep
		}
	}
	p.reaping = false
	if p.total > 0 {
		p.startReaper()
	}
}

// closeIdle drops every idle connection (Shutdown).
func (p *pool) closeIdle() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for k, cs := range p.idle {
		for _, c := range cs {
			c.Close()
		}
		delete(p.idle, k)
	}
	p.total = 0
}

func (p *pool) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Scheme != "http" || req.Header.Get("Upgrade") != "" || req.Header.Get("Expect") != "" || req.Method == http.MethodConnect {
		if st := stateFrom(req.Context()); st != nil {
			// GotConn runs in this goroutine, before RoundTrip returns.
			req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
				GotConn: func(i httptrace.GotConnInfo) { st.addr = i.Conn.RemoteAddr().String() },
			}))
		}
		return p.fallback.RoundTrip(req)
	}
	// Connections are pooled per client too: a connection dialled under one
	// client's address rules must not carry another client's request.
	key := req.URL.Host
	if st := stateFrom(req.Context()); st != nil {
		key = st.id.client + "\x00" + key
	}
	// A pooled connection may have been closed by the upstream while idle:
	// retry once on a fresh one, but only when nothing of the request can
	// have been consumed (no body, or a replayable one).
	for attempt := 0; ; attempt++ {
		c := p.get(key, !replayable(req))
		fresh := c == nil
		if fresh {
			nc, err := p.dial(req.Context(), key)
			if err != nil {
				return nil, err
			}
			c = &poolConn{Conn: nc, addr: nc.RemoteAddr().String(), br: bufio.NewReaderSize(nc, 16<<10), bw: bufio.NewWriterSize(nc, 8<<10)}
		}
		if st := stateFrom(req.Context()); st != nil {
			st.addr = c.addr
		}
		resp, err := p.roundTrip(c, key, req)
		if err == nil {
			return resp, nil
		}
		c.Close()
		if fresh || attempt > 0 || !replayable(req) {
			return nil, err
		}
	}
}

// replayable: only idempotent requests without a body are sent twice, as
// Go's Transport does: a POST that reached the upstream before the
// connection broke must not run again.
func replayable(req *http.Request) bool {
	switch req.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
	default:
		return false
	}
	return req.Body == nil || req.Body == http.NoBody || req.ContentLength == 0
}

func (p *pool) roundTrip(c *poolConn, key string, req *http.Request) (*http.Response, error) {
	// Deadlines only when the request has one: a SetDeadline per request
	// showed in profiles.
	if dl, ok := req.Context().Deadline(); ok {
		c.SetDeadline(dl)
		c.deadline = true
	} else if c.deadline {
		c.SetDeadline(time.Time{})
		c.deadline = false
	}
	// A client that goes away cancels the request: unblock every read and
	// write on the upstream connection at once.
	stop := context.AfterFunc(req.Context(), func() { c.SetDeadline(time.Unix(1, 0)) })
	// Request.Write sends origin-form (path only) with the Host header,
	// and chunks a body of unknown length.
	if err := req.Write(c.bw); err != nil {
		stop()
		return nil, err
	}
	if err := c.bw.Flush(); err != nil {
		stop()
		return nil, err
	}
	resp, err := http.ReadResponse(c.br, req)
	// Skip informational answers (103 Early Hints); 101 is refused below.
	for i := 0; err == nil && resp.StatusCode >= 100 && resp.StatusCode < 200 && resp.StatusCode != http.StatusSwitchingProtocols; i++ {
		if i == 8 {
			return nil, errors.New("gateway: too many informational responses")
		}
		resp, err = http.ReadResponse(c.br, req)
	}
	if err != nil {
		stop()
		return nil, err
	}
	if resp.StatusCode == http.StatusSwitchingProtocols {
		stop()
		c.Close()
		return nil, errors.New("gateway: unexpected protocol switch")
	}
	reuse := !resp.Close && !req.Close
	resp.Body = &poolBody{ReadCloser: resp.Body, p: p, c: c, key: key, reuse: reuse, stop: stop}
	return resp, nil
}

// poolBody returns the connection to the pool once the body was read to
// its end; a body closed early takes its connection with it.
type poolBody struct {
	io.ReadCloser
	p     *pool
	c     *poolConn
	key   string
	reuse bool
	eof   bool
	done  bool
	stop  func() bool // ends the context watch
}

func (b *poolBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF {
		b.eof = true
	}
	return n, err
}

func (b *poolBody) Close() error {
	if b.done {
		return nil
	}
	b.done = true
	// If the cancel watch already fired, the connection carries a past
	// deadline: it cannot be reused.
	watchStopped := b.stop()
	if !b.eof || !b.reuse || !watchStopped {
		// Closing net/http's body would drain the rest of the response:
		// close the connection first (a client that left must not keep
		// an endless download running).
		b.c.Close()
		b.ReadCloser.Close()
		return nil
	}
	err := b.ReadCloser.Close()
	if b.c.br.Buffered() == 0 {
		b.p.put(b.key, b.c)
	} else {
		b.c.Close()
	}
	return err
}
