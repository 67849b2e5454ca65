package credentials

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
)

const (
	awsKeyID  = "AKIAREALKEY000000001"
	awsSecret = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYREALSECRET"
	awsToken  = "IQoJb3JpZ2luX2VjEREALSESSIONTOKENabcdefghijklmnop0123456789"
)

func awsSet(t testing.TB, hosts []string, opts ...Option) *Set {
	return mustLoad(t, []Spec{
		{Name: "AWS_ACCESS_KEY_ID", Mode: ModeMask, InjectHosts: hosts},
		{Name: "AWS_SECRET_ACCESS_KEY", Mode: ModeMask, InjectHosts: hosts},
		{Name: "AWS_SESSION_TOKEN", Mode: ModeMask, InjectHosts: hosts},
	}, map[string]string{"AWS_ACCESS_KEY_ID": awsKeyID, "AWS_SECRET_ACCESS_KEY": awsSecret, "AWS_SESSION_TOKEN": awsToken}, opts...)
}

// sigV4Server verifies every request's SigV4 signature with the real keys,
// recomputing it with the SDK signer over exactly the signed headers.
func sigV4Server(t *testing.T) *httptest.Server {
	real := aws.Credentials{AccessKeyID: awsKeyID, SecretAccessKey: awsSecret, SessionToken: awsToken}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		why := verifySigV4(r, real)
		if why != "" {
			http.Error(w, why, http.StatusForbidden)
			return
		}
		io.WriteString(w, "verified")
	}))
	t.Cleanup(srv.Close)
	return srv
}

func verifySigV4(r *http.Request, real aws.Credentials) string {
	auth := r.Header.Get("Authorization")
	params, ok := strings.CutPrefix(auth, sigV4Alg+" ")
	if !ok {
		return "not sigv4"
	}
	var cred, signed, sig string
	for _, f := range strings.Split(params, ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(f), "=")
		switch k {
		case "Credential":
			cred = v
		case "SignedHeaders":
			signed = v
		case "Signature":
			sig = v
		}
	}
	scope := strings.Split(cred, "/")
	if len(scope) != 5 || scope[0] != real.AccessKeyID {
		return "unknown key"
	}
	if r.Header.Get("X-Amz-Security-Token") != real.SessionToken {
		return "bad token"
	}
	body, _ := io.ReadAll(r.Body)
	hash := r.Header.Get("X-Amz-Content-Sha256")
	if hash == "" {
		sum := sha256.Sum256(body)
		hash = hex.EncodeToString(sum[:])
	} else if hash != unsigned {
		sum := sha256.Sum256(body)
		if hash != hex.EncodeToString(sum[:]) {
			return "body hash mismatch"
		}
	}
	tm, err := time.Parse(amzDate, r.Header.Get("X-Amz-Date"))
	if err != nil {
		return "bad date"
	}
	chk, _ := http.NewRequest(r.Method, "http://"+r.Host+r.URL.RequestURI(), nil)
	chk.ContentLength = r.ContentLength
	for _, h := range strings.Split(signed, ";") {
		if h != "host" && h != "content-length" {
			chk.Header[http.CanonicalHeaderKey(h)] = r.Header.Values(h)
		}
	}
	err = v4.NewSigner().SignHTTP(context.Background(), real, chk, hash, scope[3], scope[2], tm,
		func(o *v4.SignerOptions) { o.DisableURIPathEscaping = scope[3] == "s3" })
	if err != nil {
		return "sign: " + err.Error()
	}
	if !strings.HasSuffix(chk.Header.Get("Authorization"), "Signature="+sig) {
		return "signature mismatch"
	}
	return ""
}

// sentinelSigned builds a request signed the way an SDK in the sandbox
// would: with the sentinels as its keys.
func sentinelSigned(t *testing.T, s *Set, method, rawURL, body, service, payload string) *http.Request {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, rawURL, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-amz-json-1.1")
	hash := payload
	if payload == "" {
		sum := sha256.Sum256([]byte(body))
		hash = hex.EncodeToString(sum[:])
	} else {
		req.Header.Set("X-Amz-Content-Sha256", payload)
	}
	sc := aws.Credentials{
		AccessKeyID:     bindingNamed(t, s, "AWS_ACCESS_KEY_ID").Sentinel,
		SecretAccessKey: bindingNamed(t, s, "AWS_SECRET_ACCESS_KEY").Sentinel,
		SessionToken:    bindingNamed(t, s, "AWS_SESSION_TOKEN").Sentinel,
	}
	if err := v4.NewSigner().SignHTTP(context.Background(), sc, req, hash, service, "eu-west-1", time.Now()); err != nil {
		t.Fatal(err)
	}
	return req
}

func send(t *testing.T, req *http.Request) (int, string) {
	t.Helper()
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestResignAWS(t *testing.T) {
	srv := sigV4Server(t)
	s := awsSet(t, []string{"127.0.0.1"})
	tests := []struct {
		name, method, path, body, service, payload string
	}{
		{"sts body hashed by gateway", "POST", "/", "Action=GetCallerIdentity&Version=2011-06-15", "sts", ""},
		{"s3 unsigned payload", "PUT", "/bucket/key%20with%20space", "hello", "s3", unsigned},
		{"s3 literal hash", "PUT", "/bucket/k", "data", "s3", sha256Hex("data")},
		{"get with query", "GET", "/?list-type=2&prefix=a%2Fb", "", "s3", sha256Hex("")},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// Without re-signing the server must refuse: the test can fail.
			bare := sentinelSigned(t, s, tc.method, srv.URL+tc.path, tc.body, tc.service, tc.payload)
			if code, _ := send(t, bare); code != http.StatusForbidden {
				t.Fatalf("sentinel-signed request: status %d, want 403", code)
			}
			req := sentinelSigned(t, s, tc.method, srv.URL+tc.path, tc.body, tc.service, tc.payload)
			res, err := s.Apply(req, "127.0.0.1", true, true)
			if err != nil {
				t.Fatalf("Apply: %v", err)
			}
			if !res.Resigned || len(res.Injected) != 3 {
				t.Errorf("Result = %+v, want re-signed with 3 credentials", res)
			}
			if code, msg := send(t, req); code != http.StatusOK {
				t.Errorf("re-signed request: status %d (%s), want 200", code, strings.TrimSpace(msg))
			}
		})
	}
}

func sha256Hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

func TestResignAWSRefusals(t *testing.T) {
	deny := awsSet(t, []string{"127.0.0.1"})
	pass := awsSet(t, []string{"127.0.0.1"}, WithSigV4Passthrough(SigV4Passthrough{Streaming: true, Presigned: true, SigV4A: true}))
	streaming := func(s *Set) *http.Request {
		return sentinelSigned(t, s, "PUT", "http://127.0.0.1:1/b/k", "x", "s3", "STREAMING-AWS4-HMAC-SHA256-PAYLOAD")
	}
	presigned := func(s *Set) *http.Request {
		req, _ := http.NewRequest("GET", "http://127.0.0.1:1/b/k", nil)
		sc := aws.Credentials{AccessKeyID: bindingNamed(t, s, "AWS_ACCESS_KEY_ID").Sentinel, SecretAccessKey: "x"}
		u, _, err := v4.NewSigner().PresignHTTP(context.Background(), sc, req, unsigned, "s3", "eu-west-1", time.Now())
		if err != nil {
			t.Fatal(err)
		}
		pu, _ := url.Parse(u)
		req.URL = pu
		return req
	}
	sigv4a := func(s *Set) *http.Request {
		req, _ := http.NewRequest("GET", "http://127.0.0.1:1/", nil)
		req.Header.Set("Authorization", sigV4AAlg+" Credential="+bindingNamed(t, s, "AWS_ACCESS_KEY_ID").Sentinel+"/20250101/s3/aws4_request, SignedHeaders=host, Signature=00")
		return req
	}
	for _, tc := range []struct {
		name string
		mk   func(*Set) *http.Request
		want error
	}{
		{"streaming", streaming, ErrSigV4Streaming},
		{"presigned", presigned, ErrSigV4Presigned},
		{"sigv4a", sigv4a, ErrSigV4A},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := deny.Apply(tc.mk(deny), "127.0.0.1", false, false)
			var se *SigV4Error
			if !errors.Is(err, tc.want) || !errors.As(err, &se) || se.Credential != "AWS_ACCESS_KEY_ID" {
				t.Errorf("deny: err = %v, want SigV4Error wrapping %v", err, tc.want)
			}
			res, err := pass.Apply(tc.mk(pass), "127.0.0.1", false, false)
			if err != nil || res.Resigned {
				t.Errorf("passthrough: %+v, %v; want untouched, no error", res, err)
			}
		})
	}
}

func TestResignAWSLeak(t *testing.T) {
	s := awsSet(t, []string{"*.amazonaws.com"})
	req := sentinelSigned(t, s, "GET", "http://evil.test/", "", "sts", "")
	_, err := s.Apply(req, "evil.test", false, false)
	if le := asLeak(err); le == nil {
		t.Fatalf("Apply err = %v, want *LeakError", err)
	}
	ok, err := s.ResignAWS(req, "evil.test")
	if ok || asLeak(err) == nil {
		t.Errorf("ResignAWS = %v, %v; want false, *LeakError", ok, err)
	}
}

func TestResignAWSBadDate(t *testing.T) {
	s := awsSet(t, []string{"127.0.0.1"})
	req := sentinelSigned(t, s, "GET", "http://127.0.0.1:1/", "", "sts", "")
	req.Header.Set("X-Amz-Date", "19990101T000000Z")
	if _, err := s.ResignAWS(req, "127.0.0.1"); !errors.Is(err, ErrBadSigV4) {
		t.Errorf("err = %v, want ErrBadSigV4", err)
	}
}
