package gateway

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/moat-dev/moat/credentials"
	"github.com/moat-dev/moat/gateway/policy"
	"github.com/moat-dev/moat/resolver"
)

// reply is what the client sees for a refused or failed request. It is
// built apart from the log line: the client gets the reason code and a hint,
// the log gets the full wrapped error.
type reply struct {
	status int
	header http.Header
	body   string
}

const (
	proxyErrAllowlist = "blocked-by-allowlist"
	proxyErrAddress   = "blocked-by-resolved-address"
)

// denyReply is the srt-compatible 403 for a host-rule denial.
func denyReply(d policy.Decision, host string, port uint16) reply {
	h := make(http.Header)
	h.Set("Content-Type", "text/plain")
	h.Set("X-Proxy-Error", proxyErrAllowlist)
	h.Set("X-Moat-Reason", d.Reason.Code())
	h.Set("X-Moat-Rule", ruleOrNone(d.Rule))
	if d.Host.String() != "" {
		host = d.Host.String()
		if d.Host.Addr.Is6() {
			host = "[" + host + "]"
		}
	} else {
		host = strconv.Quote(sanitize(host))
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Connection blocked by network allowlist: %s:%d (%s)\n", host, port, d.Text())
	if hint := d.Hint(); hint != "" {
		b.WriteString(hint)
		b.WriteByte('\n')
	}
	return reply{status: http.StatusForbidden, header: h, body: b.String()}
}

func ruleOrNone(r string) string {
	if r == "" {
		return "none"
	}
	return r
}

// dialVerdict is the audit verdict of a failed dial: deny when the address
// guard or the dialer's own checks refused it; allow when the policy
// allowed it and the network failed (no such host, refused, timed out, a
// parent proxy's refusal), as the reason then says.
func dialVerdict(err error) string {
	var ad *resolver.AddrDeniedError
	switch {
	case errors.As(err, &ad), dialRefused(err):
		return "deny"
	}
	return "allow"
}

// dialRefused: the dialer's own checks refused a decision it was handed
// (they back up the policy; a correct gateway never trips them).
func dialRefused(err error) bool {
	return errors.Is(err, resolver.ErrDenied) || errors.Is(err, resolver.ErrNoPolicy) ||
		errors.Is(err, resolver.ErrBadDestination) || errors.Is(err, errNoDecision)
}

// dialReply maps an upstream dial error: a refused resolved address is a 403
// (a policy answer), anything else a 502. It also returns the reason code and
// rule for the audit line.
func dialReply(err error) (r reply, reason, rule string) {
	h := make(http.Header)
	h.Set("Content-Type", "text/plain")
	var ad *resolver.AddrDeniedError
	if errors.As(err, &ad) {
		reason, rule = policy.ReasonNoAddress.Code(), "address"
		var b strings.Builder
		b.WriteString("Connection blocked: destination resolved to a denied address\n")
		var hint string
		for _, v := range ad.Verdicts {
			if v.Allowed {
				continue
			}
			if rule == "address" {
				reason = v.Reason.Code()
				if v.Prefix.IsValid() {
					rule = "address:" + v.Prefix.String()
				}
				hint = addrHint(v)
			}
			fmt.Fprintf(&b, "refused %s\n", v.Describe())
		}
		if hint != "" {
			b.WriteString(hint)
			b.WriteByte('\n')
		}
		h.Set("X-Proxy-Error", proxyErrAddress)
		h.Set("X-Moat-Reason", reason)
		h.Set("X-Moat-Rule", rule)
		return reply{status: http.StatusForbidden, header: h, body: b.String()}, reason, rule
	}
	if dialRefused(err) {
		reason, rule = "dial-refused", "none"
		h.Set("X-Proxy-Error", "blocked-by-sandbox-runtime")
		h.Set("X-Moat-Reason", reason)
		h.Set("X-Moat-Rule", rule)
		return reply{status: http.StatusForbidden, header: h, body: "Connection blocked: the gateway's dialer refused the destination\n"}, reason, rule
	}
	reason, rule = "upstream-unreachable", "none"
	var pe *ParentError
	if errors.As(err, &pe) {
		reason = "parent-proxy-failed" // the parent refused or failed the tunnel
	}
	h.Set("X-Moat-Reason", reason)
	return reply{status: http.StatusBadGateway, header: h, body: "Bad Gateway: " + sanitize(err.Error()) + "\n"}, reason, rule
}

// addrHint says how to open a refused address class, where that is sound.
func addrHint(v policy.AddrVerdict) string {
	switch v.Reason {
	case policy.ReasonPrivate, policy.ReasonCGNAT, policy.ReasonULA, policy.ReasonEmbeddedV4:
		return fmt.Sprintf("to allow: add %q to network.allowedResolvedAddresses", v.Addr.Addr().String())
	case policy.ReasonLoopback, policy.ReasonLocalInterface:
		return "to allow a service on this machine: add \"localhost:PORT\" to network.allowedDomains and connect to localhost"
	case policy.ReasonDeniedRange:
		return "to allow: remove the range from network.deniedResolvedAddresses"
	}
	return "this address class cannot be allowed"
}

func authReply() reply {
	h := make(http.Header)
	h.Set("Content-Type", "text/plain")
	h.Set("Proxy-Authenticate", `Basic realm="moat"`)
	h.Set("X-Moat-Reason", "auth-required")
	return reply{status: http.StatusProxyAuthRequired, header: h,
		body: "Proxy authentication required: send the session token as the proxy password\n"}
}

func badRequestReply(msg string) reply {
	h := make(http.Header)
	h.Set("Content-Type", "text/plain")
	h.Set("X-Moat-Reason", policy.ReasonMalformedHost.Code())
	return reply{status: http.StatusBadRequest, header: h, body: "Bad Request: " + msg + "\n"}
}

func (r reply) write(w http.ResponseWriter) {
	for k, vs := range r.header {
		w.Header()[k] = vs
	}
	w.Header().Set("Content-Length", strconv.Itoa(len(r.body)))
	w.WriteHeader(r.status)
	_, _ = w.Write([]byte(r.body))
}

func (r reply) response(req *http.Request) *http.Response {
	resp := &http.Response{
		Status:        strconv.Itoa(r.status) + " " + http.StatusText(r.status),
		StatusCode:    r.status,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        r.header,
		ContentLength: int64(len(r.body)),
		Body:          http.NoBody,
		Request:       req,
	}
	if len(r.body) > 0 {
		resp.Body = nopCloser{strings.NewReader(r.body)}
	}
	return resp
}

type nopCloser struct{ *strings.Reader }

func (nopCloser) Close() error { return nil }

// reasonNoInterceptor: an Inspect decision without TLS termination set up.
const reasonNoInterceptor = "inspection-unavailable"

func noInterceptorReply() reply {
	h := make(http.Header)
	h.Set("Content-Type", "text/plain")
	h.Set("X-Proxy-Error", "blocked-by-sandbox-runtime")
	h.Set("X-Moat-Reason", reasonNoInterceptor)
	h.Set("X-Moat-Rule", "none")
	return reply{status: http.StatusForbidden, header: h,
		body: "Connection blocked: this host must be inspected, but TLS termination is not set up\n" +
			"to allow: set up TLS termination (network.tlsTerminate; in the Go API, gateway.Options.Interceptor)\n"}
}

const reasonCredentialLeak = "credential-leak"

// leakReply is the 403 for a sentinel headed for a host it is not bound to.
// It names the credential, never its value.
func leakReply(credential, host string) reply {
	h := make(http.Header)
	h.Set("Content-Type", "text/plain")
	h.Set("X-Proxy-Error", "blocked-credential-leak")
	h.Set("X-Moat-Reason", reasonCredentialLeak)
	h.Set("X-Moat-Rule", "credential:"+credential)
	msg := "Connection blocked: credential " + credential + " may not leave the sandbox this way"
	if host != "" {
		msg = "Connection blocked: credential " + credential + " is not bound to " + host
	}
	return reply{status: http.StatusForbidden, header: h, body: msg + "\n"}
}

// leakName extracts the credential name of a leak or plaintext refusal.
func leakName(err error) string {
	var le *credentials.LeakError
	if errors.As(err, &le) {
		return le.Credential
	}
	var pe *credentials.PlaintextError
	if errors.As(err, &pe) {
		return pe.Credential
	}
	return "unknown"
}

const reasonQuarantined = "quarantined"

// quarantineReply answers every request of a quarantined session.
func quarantineReply() reply {
	h := make(http.Header)
	h.Set("Content-Type", "text/plain")
	h.Set("X-Proxy-Error", "blocked-credential-leak")
	h.Set("X-Moat-Reason", reasonQuarantined)
	h.Set("X-Moat-Rule", "credentials.quarantineOnLeak")
	return reply{status: http.StatusForbidden, header: h,
		body: "Connection blocked: this session is quarantined after a blocked credential leak\n"}
}

// reasonNotTLS: non-TLS bytes to a host whose traffic must be inspected.
const reasonNotTLS = "not-tls"
