package credentials

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
)

// benchSet has ten credentials, each bound to its own host.
func benchSet(b *testing.B) *Set {
	env := map[string]string{}
	var specs []Spec
	for i := range 10 {
		name := "TOKEN_" + strconv.Itoa(i)
		env[name] = "ghp_" + strings.Repeat(string(rune('a'+i)), 16) + "Z0123456789ABCDEFGHI"
		specs = append(specs, Spec{Name: name, Mode: ModeMask, InjectHosts: []string{"api" + strconv.Itoa(i) + ".example.com", "*.svc" + strconv.Itoa(i) + ".example.com"}})
	}
	return mustLoad(b, specs, env)
}

func benchHeaders(auth string) http.Header {
	return http.Header{
		"Authorization":        {auth},
		"User-Agent":           {"Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0 Safari/537.36"},
		"Accept":               {"application/vnd.github+json"},
		"Accept-Encoding":      {"gzip, deflate, br"},
		"Accept-Language":      {"en-GB,en;q=0.9"},
		"Content-Type":         {"application/json"},
		"X-Request-Id":         {"6f1c2a8e-3b7d-4c9a-9e2f-0a1b2c3d4e5f"},
		"Cookie":               {"_session=abcdef0123456789abcdef0123456789; theme=dark; lang=en"},
		"If-None-Match":        {`W/"5f9c7e2a1b3d4c6e8f0a"`},
		"X-Github-Api-Version": {"2022-11-28"},
	}
}

// BenchmarkSwapHeaders measures Apply on a ten-header request with ten
// credentials loaded: with a sentinel to swap, and with none.
func BenchmarkSwapHeaders(b *testing.B) {
	s := benchSet(b)
	sent := bindingNamed(b, s, "TOKEN_3").Sentinel
	u, _ := url.Parse("https://api3.example.com/repos/o/r/pulls?state=open&per_page=100")
	for _, bc := range []struct {
		name, auth string
	}{
		{"swap", "Bearer " + sent},
		{"clean", "Bearer not-a-sentinel-0123456789abcdefghijklmnop"},
	} {
		b.Run(bc.name, func(b *testing.B) {
			hdr := benchHeaders(bc.auth)
			req := &http.Request{Method: "GET", URL: u, Header: http.Header{}}
			b.ReportAllocs()
			for b.Loop() {
				for k, v := range hdr {
					req.Header[k] = append(req.Header[k][:0], v...)
				}
				if _, err := s.Apply(req, "api3.example.com", false, false); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
