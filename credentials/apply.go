package credentials

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
)

// BodyPeekLimit is how much of a request body Apply reads ahead to look for
// leaks. The rest streams unchecked: a cap keeps uploads from being
// buffered whole.
const BodyPeekLimit = 64 << 10

// BodySwapLimit is how far into a body sentinels are swapped for InjectBody
// credentials. Beyond it the body passes through untouched (a sentinel left
// there reaches a bound host only, and is worthless to it).
const BodySwapLimit = 1 << 20

// Result says what Apply did.
type Result struct {
	// Injected names the credentials swapped into the request (each once,
	// in load order), for the audit line's credential field. An InjectBody
	// credential whose sentinel lies beyond BodyPeekLimit is swapped but
	// not listed.
	Injected []string
	// Resigned is true when the request was re-signed with an AWS pair.
	Resigned bool
}

// where kinds, spelled out only when a LeakError is built.
const (
	inHeader = iota
	inBasic
	inURLHost
	inUserinfo
	inPath
	inQuery
	inBody
)

func whereText(kind int, key string) string {
	switch kind {
	case inHeader:
		if len(key) > 64 {
			key = key[:64]
		}
		return "header " + key
	case inBasic:
		return "basic-auth"
	case inURLHost:
		return "url-host"
	case inUserinfo:
		return "url-userinfo"
	case inPath:
		return "url-path"
	case inQuery:
		return "url-query"
	}
	return "body"
}

// pass is the state of one Apply call.
type pass struct {
	s        *Set
	active   []bool // binding bound to this host
	injected []bool // binding to be swapped in
	leak     *LeakError
	swap     bool // some header, userinfo or query needs a textual swap
	resign   bool // an active AWS key ID sentinel was seen
	bodyHit  bool // an InjectBody sentinel was seen in the peeked body
}

// check scans v. A needle of a binding not bound to the host is a leak; a
// sentinel of a bound binding is to be swapped (AWS members are re-signed
// instead). It reports whether v needs a swap.
func (p *pass) check(v string, kind int, key string) bool {
	need := false
	find(&p.s.sc, v, func(n *needle, _ int) bool {
		b := p.s.bindings[n.b]
		switch {
		case !p.active[n.b]:
			p.leak = &LeakError{Credential: b.Name, Where: whereText(kind, key)}
			return false
		case n.secret:
		case b.aws:
			if p.s.isKeyID(n.b) {
				p.resign = true
			}
		case kind == inBody:
			if b.body {
				p.bodyHit = true
				p.injected[n.b] = true
			}
		case kind == inPath:
			// Not swapped: a bound host may see its own sentinel.
		default:
			need = true
			p.injected[n.b] = true
		}
		return true
	})
	return need
}

// replace returns v with the sentinel of every bound, non-AWS binding
// swapped for its secret. Same length, so it is done in place on a copy.
func (p *pass) replace(v string) string {
	var buf []byte
	find(&p.s.sc, v, func(n *needle, at int) bool {
		b := p.s.bindings[n.b]
		if !n.secret && p.active[n.b] && !b.aws {
			if buf == nil {
				buf = []byte(v)
			}
			copy(buf[at:], b.secret)
		}
		return true
	})
	if buf == nil {
		return v
	}
	return string(buf)
}

// Apply swaps sentinels for secrets in req, bound for canonical host, and
// blocks leaks, in one pass. Call it after hop-by-hop headers are stripped
// (a sentinel in Proxy-Authorization must never be swapped and sent on),
// and, for a request the gateway forwards, as the last change to it: an
// AWS request is re-signed here (see ResignAWS).
//
// For every binding bound to host, its sentinel is replaced in every header
// value (inside the base64 of Authorization: Basic too), in the URL userinfo
// and query, and, for InjectBody bindings, in the first BodySwapLimit bytes
// of the body (same length, so Content-Length holds). A sentinel or secret
// of a binding not bound to host, in a header name or value, the decoded
// Basic credentials, the URL host, userinfo, path or query, or the first
// BodyPeekLimit bytes of the body, is a *LeakError; a sentinel in the URL
// host is one whatever the binding. With plaintext set (plain http) and
// allowPlaintext off, a request that would be injected is refused with a
// *PlaintextError. On any error req's headers and URL are unchanged; its
// body is restored so that it can still be read.
func (s *Set) Apply(req *http.Request, host string, plaintext, allowPlaintext bool) (Result, error) {
	var res Result
	if s == nil || len(s.bindings) == 0 {
		return res, nil
	}
	n := len(s.bindings)
	var buf [2 * 32]bool
	flags := buf[:]
	if n > 32 {
		flags = make([]bool, 2*n)
	}
	p := pass{s: s, active: flags[:n:n], injected: flags[n : 2*n]}
	for i, b := range s.bindings {
		p.active[i] = b.hosts.match(host)
	}

	// Phase 1: look, change nothing.
	for k, vs := range req.Header {
		if len(k) >= s.sc.minLen {
			if le := s.checkName(k); le != nil {
				return res, le
			}
		}
		for _, v := range vs {
			if p.check(v, inHeader, k) {
				p.swap = true
			}
			if k == "Authorization" {
				if dec, ok := basicPayload(v); ok && p.check(dec, inBasic, k) {
					p.swap = true
				}
			}
			if p.leak != nil {
				return res, p.leak
			}
		}
	}
	if p.leak != nil {
		return res, p.leak
	}
	if le := s.checkURLHost(req); le != nil {
		return res, le
	}
	u := req.URL
	if u != nil {
		if u.User != nil {
			pw, _ := u.User.Password()
			if p.check(u.User.Username(), inUserinfo, "") || p.check(pw, inUserinfo, "") {
				p.swap = true
			}
		}
		p.check(u.Path, inPath, "")
		p.check(u.RawPath, inPath, "")
		if p.check(u.RawQuery, inQuery, "") {
			p.swap = true
		}
		if strings.ContainsAny(u.RawQuery, "%+") {
			if dec, err := url.QueryUnescape(u.RawQuery); err == nil && p.check(dec, inQuery, "") {
				p.swap = true
			}
		}
		if p.leak != nil {
			return res, p.leak
		}
	}
	if err := p.peekBody(req); err != nil {
		return res, err
	}
	if p.leak != nil {
		return res, p.leak
	}
	// A bound InjectBody sentinel may lie past the peek: the body is then
	// wrapped even though nothing was seen.
	wrap := s.anyBody && p.anyBodyActive() && (!plaintext || allowPlaintext)
	if !p.swap && !p.resign && !p.bodyHit && !wrap {
		return res, nil
	}
	if plaintext && !allowPlaintext && (p.swap || p.resign || p.bodyHit) {
		return res, &PlaintextError{Credential: p.firstName()}
	}

	// Phase 2: change.
	if p.swap {
		for _, vs := range req.Header {
			for i, v := range vs {
				vs[i] = p.replace(v)
				if dec, ok := basicPayload(v); ok {
					if r := p.replace(dec); r != dec {
						vs[i] = v[:len(v)-len(strings.TrimLeft(v[len("Basic "):], " "))] + base64.StdEncoding.EncodeToString([]byte(r))
					}
				}
			}
		}
		if u != nil && u.User != nil {
			name := p.replace(u.User.Username())
			if pw, ok := u.User.Password(); ok {
				u.User = url.UserPassword(name, p.replace(pw))
			} else {
				u.User = url.User(name)
			}
		}
		if u != nil {
			u.RawQuery = p.replaceQuery(u.RawQuery)
		}
	}
	if p.resign {
		pair, err := s.resign(req, host)
		if err != nil {
			return res, err
		}
		if pair != nil {
			res.Resigned = true
			for _, i := range pair.members() {
				p.injected[i] = true
			}
		}
	}
	// A re-signed body must stay as signed: its hash is in the signature.
	if wrap && !res.Resigned {
		p.wrapBody(req)
	}
	for i, b := range s.bindings {
		if p.injected[i] && (len(res.Injected) == 0 || !containsStr(res.Injected, b.Name)) {
			res.Injected = append(res.Injected, b.Name)
		}
	}
	return res, nil
}

func containsStr(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

func (p *pass) anyBodyActive() bool {
	for i, b := range p.s.bindings {
		if b.body && p.active[i] {
			return true
		}
	}
	return false
}

func (p *pass) firstName() string {
	for i, b := range p.s.bindings {
		if p.injected[i] || (p.resign && b.aws && p.active[i]) {
			return b.Name
		}
	}
	return ""
}

// replaceQuery swaps sentinels in a raw query, both as written and in
// their query-escaped form (a sentinel keeps "/", "+" or "=" of its secret).
func (p *pass) replaceQuery(q string) string {
	q = p.replace(q)
	if !strings.ContainsAny(q, "%+") {
		return q
	}
	for i, b := range p.s.bindings {
		if !p.active[i] || b.aws {
			continue
		}
		if esc := url.QueryEscape(b.Sentinel); esc != b.Sentinel {
			q = strings.ReplaceAll(q, esc, url.QueryEscape(b.secret))
		}
	}
	return q
}

// basicPayload decodes the credentials of an "Authorization: Basic" value.
func basicPayload(v string) (string, bool) {
	const prefix = "Basic "
	if len(v) <= len(prefix) || !strings.EqualFold(v[:len(prefix)], prefix) {
		return "", false
	}
	b, err := base64.StdEncoding.DecodeString(strings.TrimLeft(v[len(prefix):], " "))
	if err != nil {
		return "", false
	}
	return string(b), true
}

// checkURLHost reports a sentinel or secret in the request's host (URL or
// Host header): exfiltration through a name the resolver or upstream logs.
func (s *Set) checkURLHost(req *http.Request) *LeakError {
	for _, h := range [2]string{req.Host, urlHost(req.URL)} {
		if h == "" {
			continue
		}
		if le := s.CheckHost(h); le != nil {
			le.Where = "url-host"
			return le
		}
	}
	return nil
}

func urlHost(u *url.URL) string {
	if u == nil {
		return ""
	}
	return u.Host
}

// CheckHost reports a sentinel or secret of any credential inside name, a
// CONNECT or SOCKS5 host or a TLS SNI: no host is ever legitimately named
// after one. It is case-insensitive (DNS is) and also looks at name without
// its dots, so that splitting the token across labels does not hide it.
func (s *Set) CheckHost(name string) *LeakError {
	if s == nil || len(s.bindings) == 0 {
		return nil
	}
	l := strings.ToLower(name)
	flat := strings.ReplaceAll(l, ".", "")
	for i, b := range s.bindings {
		for _, t := range s.lowered[i] {
			if strings.Contains(l, t) || strings.Contains(flat, t) {
				return &LeakError{Credential: b.Name, Where: "host"}
			}
		}
	}
	return nil
}

// checkName reports a sentinel or secret inside a header name, compared
// without regard to case: net/http canonicalises names, so the case the
// client wrote is gone.
func (s *Set) checkName(name string) *LeakError {
	for i, b := range s.bindings {
		for _, t := range s.lowered[i][:2] {
			if containsFold(name, t) {
				return &LeakError{Credential: b.Name, Where: "header-name"}
			}
		}
	}
	return nil
}

// containsFold reports whether s holds lower-case ASCII sub in any case,
// without allocating.
func containsFold(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if strings.EqualFold(s[i:i+len(sub)], sub) {
			return true
		}
	}
	return false
}

// peekBody reads up to BodyPeekLimit bytes of the body, checks them, and
// puts them back in front of the rest.
func (p *pass) peekBody(req *http.Request) error {
	if req.Body == nil || req.Body == http.NoBody || req.ContentLength == 0 {
		return nil
	}
	size := int64(BodyPeekLimit)
	if req.ContentLength > 0 && req.ContentLength < size {
		size = req.ContentLength
	}
	buf := make([]byte, size)
	n, err := io.ReadFull(req.Body, buf)
	buf = buf[:n]
	orig := req.Body
	req.Body = &peekedBody{Reader: io.MultiReader(bytes.NewReader(buf), orig), c: orig}
	// The transport must not resend the original body from GetBody: it has
	// not been through this pass.
	req.GetBody = nil
	if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("read request body: %w", err)
	}
	p.checkBytes(buf)
	return nil
}

func (p *pass) checkBytes(b []byte) {
	find(&p.s.sc, b, func(n *needle, _ int) bool {
		bd := p.s.bindings[n.b]
		switch {
		case !p.active[n.b]:
			p.leak = &LeakError{Credential: bd.Name, Where: "body"}
			return false
		case !n.secret && bd.body && !bd.aws:
			p.bodyHit = true
			p.injected[n.b] = true
		}
		return true
	})
}

type peekedBody struct {
	io.Reader
	c io.Closer
}

func (b *peekedBody) Close() error { return b.c.Close() }

// wrapBody installs the streaming swap for bound InjectBody bindings.
func (p *pass) wrapBody(req *http.Request) {
	if req.Body == nil || req.Body == http.NoBody || req.ContentLength == 0 {
		return
	}
	var swap []*Binding
	keep := 0
	for i, b := range p.s.bindings {
		if b.body && p.active[i] && !b.aws {
			swap = append(swap, b)
			keep = max(keep, len(b.Sentinel)-1)
		}
	}
	if len(swap) == 0 {
		return
	}
	req.Body = &swapBody{src: req.Body, swap: swap, keep: keep, limit: BodySwapLimit}
	req.GetBody = nil
}

// swapBody replaces sentinels in a stream. It holds back the last keep
// bytes of each chunk, so that a sentinel split across reads is still
// seen; replacements have the sentinel's length, so the body's length does
// not change.
type swapBody struct {
	src   io.ReadCloser
	swap  []*Binding
	keep  int
	limit int64
	off   int64 // bytes emitted
	buf   []byte
	out   []byte
	err   error
}

func (r *swapBody) Read(p []byte) (int, error) {
	for len(r.out) == 0 {
		if len(r.buf) == 0 && r.err != nil {
			return 0, r.err
		}
		if len(r.buf) == 0 && r.off >= r.limit {
			return r.src.Read(p)
		}
		if r.buf == nil {
			r.buf = make([]byte, 0, 32<<10)
		}
		if r.err == nil {
			n, err := r.src.Read(r.buf[len(r.buf):cap(r.buf)])
			r.buf = r.buf[:len(r.buf)+n]
			r.err = err
		}
		for _, b := range r.swap {
			for i := 0; ; {
				j := bytes.Index(r.buf[i:], []byte(b.Sentinel))
				if j < 0 {
					break
				}
				copy(r.buf[i+j:], b.secret)
				i += j + len(b.Sentinel)
			}
		}
		emit := len(r.buf) - r.keep
		if r.err != nil || r.off+int64(len(r.buf)) >= r.limit {
			emit = len(r.buf)
		}
		if emit <= 0 {
			continue
		}
		r.out = append(r.out[:0:0], r.buf[:emit]...)
		r.buf = append(r.buf[:0], r.buf[emit:]...)
		r.off += int64(emit)
	}
	n := copy(p, r.out)
	r.out = r.out[n:]
	return n, nil
}

func (r *swapBody) Close() error { return r.src.Close() }
