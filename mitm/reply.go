package mitm

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/moat-dev/moat/resolver"
)

// X-Proxy-Error values (srt-compatible, DESIGN §3).
const (
	proxyErrRule    = "blocked-by-sandbox-runtime"
	proxyErrAddress = "blocked-by-resolved-address"
)

// Reason codes for upstream failures, in X-Moat-Reason and audit lines.
const (
	CodeUpstreamCert        = "upstream-cert-untrusted"
	CodeUpstreamUnreachable = "upstream-unreachable"
	CodeAddrDenied          = "address-denied"
)

// reply is what the client sees for a refused or failed request; it is
// built apart from the log line, which gets the full error.
type reply struct {
	status int
	header http.Header
	body   []byte
	code   string
	rule   string
}

func textHeader() http.Header {
	h := make(http.Header)
	h.Set("Content-Type", "text/plain")
	return h
}

// denyReply is the 403 for a per-request rule: the body is the reason.
func denyReply(d RuleDecision) reply {
	h := textHeader()
	h.Set("X-Proxy-Error", proxyErrRule)
	h.Set("X-Moat-Reason", d.Code)
	h.Set("X-Moat-Rule", orNone(d.RuleID))
	return reply{status: http.StatusForbidden, header: h, body: []byte(clip(d.Reason) + "\n"), code: d.Code, rule: orNone(d.RuleID)}
}

// pushRefusalReply answers a refused POST git-receive-pack so that git
// prints "! [remote rejected] <ref> (<reason>)".
func pushRefusalReply(cmds []PushCommand, ref, reason, caps string, d RuleDecision) reply {
	h := make(http.Header)
	h.Set("Content-Type", "application/x-git-receive-pack-result")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Moat-Reason", CodeGitPushRef)
	h.Set("X-Moat-Rule", orNone(d.RuleID))
	return reply{status: http.StatusOK, header: h, body: PushRefusal(cmds, ref, reason, caps), code: CodeGitPushRef, rule: orNone(d.RuleID)}
}

// upstreamReply maps a forwarding error: a refused resolved address is a
// policy answer (403), an untrusted upstream certificate a readable 502
// that names the reason, anything else a plain 502.
func upstreamReply(err error) reply {
	h := textHeader()
	var ad *resolver.AddrDeniedError
	if errors.As(err, &ad) {
		code, rule := CodeAddrDenied, "address"
		var b strings.Builder
		b.WriteString("Connection blocked: destination resolved to a denied address\n")
		for _, v := range ad.Verdicts {
			if v.Allowed {
				continue
			}
			if rule == "address" {
				code = v.Reason.Code()
				if v.Prefix.IsValid() {
					rule = "address:" + v.Prefix.String()
				}
			}
			fmt.Fprintf(&b, "refused %s\n", v.Describe())
		}
		h.Set("X-Proxy-Error", proxyErrAddress)
		h.Set("X-Moat-Reason", code)
		h.Set("X-Moat-Rule", rule)
		return reply{status: http.StatusForbidden, header: h, body: []byte(b.String()), code: code, rule: rule}
	}
	if certErr := certError(err); certErr != nil {
		h.Set("X-Moat-Reason", CodeUpstreamCert)
		h.Set("X-Moat-Rule", "none")
		return reply{status: http.StatusBadGateway, header: h, code: CodeUpstreamCert, rule: "none",
			body: []byte("Bad Gateway: upstream certificate not trusted: " + clip(certErr.Error()) + "\n")}
	}
	h.Set("X-Moat-Reason", CodeUpstreamUnreachable)
	h.Set("X-Moat-Rule", "none")
	return reply{status: http.StatusBadGateway, header: h, code: CodeUpstreamUnreachable, rule: "none",
		body: []byte("Bad Gateway: " + clip(err.Error()) + "\n")}
}

// certError finds an upstream certificate verification failure in err.
func certError(err error) error {
	var ve *tls.CertificateVerificationError
	if errors.As(err, &ve) {
		return ve.Err
	}
	var ua x509.UnknownAuthorityError
	var he x509.HostnameError
	var ci x509.CertificateInvalidError
	switch {
	case errors.As(err, &ua):
		return ua
	case errors.As(err, &he):
		return he
	case errors.As(err, &ci):
		return ci
	}
	return nil
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

func (r reply) write(w http.ResponseWriter) {
	for k, vs := range r.header {
		w.Header()[k] = vs
	}
	w.Header().Set("Content-Length", strconv.Itoa(len(r.body)))
	w.WriteHeader(r.status)
	_, _ = w.Write(r.body)
}

// leakReply is the 403 for a sentinel headed for a host it is not bound to.
func leakReply(d RuleDecision) reply {
	r := denyReply(d)
	r.header.Set("X-Proxy-Error", "blocked-credential-leak")
	return r
}
