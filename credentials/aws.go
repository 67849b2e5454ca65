package credentials

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
)

// maxHashBody bounds the body ResignAWS reads to hash when the request does
// not carry X-Amz-Content-Sha256 (services other than S3 sign the body's
// hash without sending it).
const maxHashBody = 8 << 20

const (
	sigV4Alg  = "AWS4-HMAC-SHA256"
	sigV4AAlg = "AWS4-ECDSA-P256-SHA256"
	amzDate   = "20060102T150405Z" // X-Amz-Date, ISO 8601 basic
	unsigned  = "UNSIGNED-PAYLOAD"
)

// awsPair is a resolved AWSPair: indexes into Set.bindings (token -1 when
// there is none).
type awsPair struct {
	id, secret, token int
}

func (a awsPair) members() []int {
	if a.token < 0 {
		return []int{a.id, a.secret}
	}
	return []int{a.id, a.secret, a.token}
}

// pairAWS resolves the AWS pairs, the standard names first, and marks their
// members so that Apply never swaps them textually (that would break the
// signature). A key ID masked without its secret key cannot be re-signed,
// which is worth a warning.
func (s *Set) pairAWS(extra []AWSPair) []Warning {
	var warns []Warning
	idx := func(name string) int {
		at := -1
		for i, b := range s.bindings {
			if b.Name == name {
				if at >= 0 {
					return -2 // an extract made several: not a single key
				}
				at = i
			}
		}
		return at
	}
	std := AWSPair{AccessKeyID: "AWS_ACCESS_KEY_ID", SecretAccessKey: "AWS_SECRET_ACCESS_KEY", SessionToken: "AWS_SESSION_TOKEN"}
	for n, p := range append([]AWSPair{std}, extra...) {
		id, sec := idx(p.AccessKeyID), idx(p.SecretAccessKey)
		tok := -1
		if p.SessionToken != "" {
			tok = idx(p.SessionToken)
		}
		switch {
		case id == -1 && sec == -1 && n == 0:
			continue
		case id < 0 || sec < 0 || tok < -1:
			warns = append(warns, Warning{Credential: p.AccessKeyID,
				Message: "AWS pair needs one masked access key ID and one masked secret access key; SigV4 requests will not be re-signed"})
			continue
		}
		s.pairs = append(s.pairs, awsPair{id: id, secret: sec, token: tok})
		for _, i := range s.pairs[len(s.pairs)-1].members() {
			s.bindings[i].aws = true
		}
	}
	return warns
}

// isKeyID reports whether binding i is the access key ID of a pair.
func (s *Set) isKeyID(i int) bool {
	for _, p := range s.pairs {
		if p.id == i {
			return true
		}
	}
	return false
}

// pairFor returns the pair whose key ID sentinel is key.
func (s *Set) pairFor(key string) *awsPair {
	for i := range s.pairs {
		if s.bindings[s.pairs[i].id].Sentinel == key {
			return &s.pairs[i]
		}
	}
	return nil
}

// bound reports whether every member of the pair is bound to host.
func (s *Set) pairBound(p *awsPair, host string) bool {
	for _, i := range p.members() {
		if !s.bindings[i].hosts.match(host) {
			return false
		}
	}
	return true
}

// ResignAWS re-signs a SigV4 request made with a pair's sentinel key ID
// with the real pair, keeping the client's region, service, date
// (X-Amz-Date) and payload hash. It reports whether it re-signed; a request
// that is not SigV4 with one of our sentinel keys is left alone. Apply
// calls it; call it directly only instead of Apply, and then last.
//
// The payload hash is X-Amz-Content-Sha256 when present (a literal hash or
// UNSIGNED-PAYLOAD); without it the body is read (at most 8 MiB) and
// hashed. STREAMING-* payloads, presigned URLs and SigV4A are denied with a
// *SigV4Error unless SigV4Passthrough allows them, in which case they go
// out untouched (and fail upstream). The real session token, if the pair
// has one, replaces X-Amz-Security-Token. A sentinel key bound elsewhere is
// a *LeakError.
func (s *Set) ResignAWS(req *http.Request, host string) (bool, error) {
	p, err := s.resign(req, host)
	return p != nil, err
}

func (s *Set) resign(req *http.Request, host string) (*awsPair, error) {
	if s == nil || len(s.pairs) == 0 {
		return nil, nil
	}
	if req.URL != nil && req.URL.RawQuery != "" {
		if q, err := url.ParseQuery(req.URL.RawQuery); err == nil {
			for k, vs := range q {
				if !strings.EqualFold(k, "X-Amz-Credential") {
					continue
				}
				for _, v := range vs {
					key, _, _ := strings.Cut(v, "/")
					if p := s.pairFor(key); p != nil {
						return nil, s.refuse(p, host, "url-query", s.passthrough.Presigned, ErrSigV4Presigned)
					}
				}
			}
		}
	}
	alg, params, _ := strings.Cut(req.Header.Get("Authorization"), " ")
	if alg != sigV4Alg && alg != sigV4AAlg {
		return nil, nil
	}
	cred := authCredential(params)
	scope := strings.Split(cred, "/")
	p := s.pairFor(scope[0])
	if p == nil {
		return nil, nil
	}
	name := s.bindings[p.id].Name
	if alg == sigV4AAlg {
		return nil, s.refuse(p, host, "header Authorization", s.passthrough.SigV4A, ErrSigV4A)
	}
	if !s.pairBound(p, host) {
		return nil, &LeakError{Credential: name, Where: "header Authorization"}
	}
	bad := func(why string) error {
		return &SigV4Error{Credential: name, Err: fmt.Errorf("%w: %s", ErrBadSigV4, why)}
	}
	if len(scope) != 5 || scope[4] != "aws4_request" || scope[2] == "" || scope[3] == "" {
		return nil, bad("credential scope is not KEY/DATE/REGION/SERVICE/aws4_request")
	}
	date, region, service := scope[1], scope[2], scope[3]
	ds := req.Header.Get("X-Amz-Date")
	t, err := time.Parse(amzDate, ds)
	if err != nil {
		return nil, bad("X-Amz-Date is missing or not YYYYMMDDTHHMMSSZ")
	}
	if ds[:8] != date {
		return nil, bad("credential scope date differs from X-Amz-Date")
	}
	hash := req.Header.Get("X-Amz-Content-Sha256")
	switch {
	case strings.HasPrefix(hash, "STREAMING-"):
		return nil, s.refuse(p, host, "", s.passthrough.Streaming, ErrSigV4Streaming)
	case hash == unsigned || isSHA256Hex(hash):
	case hash == "":
		if hash, err = hashBody(req); err != nil {
			return nil, bad(err.Error())
		}
	default:
		return nil, bad("X-Amz-Content-Sha256 is not a hash, UNSIGNED-PAYLOAD or STREAMING-*")
	}
	creds := aws.Credentials{
		AccessKeyID:     s.bindings[p.id].secret,
		SecretAccessKey: s.bindings[p.secret].secret,
	}
	if p.token >= 0 {
		creds.SessionToken = s.bindings[p.token].secret
	}
	req.Header.Del("Authorization")
	// S3 signs the path as sent; every other service escapes it twice
	// (the SDK's S3 client sets the same option).
	s3 := service == "s3" || strings.HasPrefix(service, "s3-") || service == "s3express"
	err = v4.NewSigner().SignHTTP(context.Background(), creds, req, hash, service, region, t,
		func(o *v4.SignerOptions) { o.DisableURIPathEscaping = s3 })
	if err != nil {
		return nil, &SigV4Error{Credential: name, Err: fmt.Errorf("sign: %w", err)}
	}
	return p, nil
}

// refuse answers a SigV4 form that cannot be re-signed: a leak if the pair
// is not bound to host, nothing if passthrough allows it, else a
// *SigV4Error wrapping cause.
func (s *Set) refuse(p *awsPair, host, where string, pass bool, cause error) error {
	name := s.bindings[p.id].Name
	if !s.pairBound(p, host) {
		if where == "" {
			where = "header Authorization"
		}
		return &LeakError{Credential: name, Where: where}
	}
	if pass {
		return nil
	}
	return &SigV4Error{Credential: name, Err: cause}
}

// authCredential returns the Credential of a SigV4 Authorization header's
// parameters. SignedHeaders is not needed: the request is signed afresh.
func authCredential(params string) string {
	for _, f := range strings.Split(params, ",") {
		if k, v, _ := strings.Cut(strings.TrimSpace(f), "="); k == "Credential" {
			return v
		}
	}
	return ""
}

func isSHA256Hex(s string) bool {
	if len(s) != 64 {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil
}

// hashBody reads the whole body (bounded), puts it back, and returns its
// SHA-256 in hex.
func hashBody(req *http.Request) (string, error) {
	if req.Body == nil || req.Body == http.NoBody {
		sum := sha256.Sum256(nil)
		return hex.EncodeToString(sum[:]), nil
	}
	b, err := io.ReadAll(io.LimitReader(req.Body, maxHashBody+1))
	orig := req.Body
	req.Body = &peekedBody{Reader: io.MultiReader(bytes.NewReader(b), orig), c: orig}
	req.GetBody = nil
	if err != nil {
		return "", fmt.Errorf("read body to hash: %v", err)
	}
	if len(b) > maxHashBody {
		return "", fmt.Errorf("body over %d bytes without X-Amz-Content-Sha256", maxHashBody)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), nil
}
