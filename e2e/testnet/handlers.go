package testnet

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
)

// patternPeriod is the period of the /bytes pattern: byte k of a body is
// byte(k % 256), so a client can spot any reordered, dropped or altered
// byte without a checksum.
const patternPeriod = 256

// maxBytes caps /bytes/N at 1 TiB, far above any test and far below
// overflow.
const maxBytes = 1 << 40

// pattern is shared by every /bytes response. Its length is a multiple of
// patternPeriod so that consecutive writes continue the pattern.
var pattern = func() []byte {
	b := make([]byte, 64<<10)
	for i := range b {
		b[i] = byte(i % patternPeriod)
	}
	return b
}()

// PatternByte returns byte off of every /bytes/N body.
func PatternByte(off int64) byte { return byte(off % patternPeriod) }

// CheckPattern reads r to EOF and reports how many bytes it read and the
// first offset where the /bytes pattern is broken, if any.
func CheckPattern(r io.Reader) (int64, error) {
	buf := make([]byte, 32<<10)
	var off int64
	for {
		k, err := r.Read(buf)
		for i := range k {
			if buf[i] != PatternByte(off) {
				return off, fmt.Errorf("testnet: byte %d is %#x, want %#x", off, buf[i], PatternByte(off))
			}
			off++
		}
		if err == io.EOF {
			return off, nil
		}
		if err != nil {
			return off, err
		}
	}
}

// Echo is the JSON body of /echo: what the upstream received, so tests can
// check what a proxy forwarded, added or stripped.
type Echo struct {
	Method     string      `json:"method"`
	RequestURI string      `json:"uri"`  // as on the request line (origin or absolute form)
	Path       string      `json:"path"` // decoded
	Query      string      `json:"query"`
	Host       string      `json:"host"`
	Proto      string      `json:"proto"`
	TLS        bool        `json:"tls"`
	Headers    http.Header `json:"headers"`
	BodyBytes  int64       `json:"bodyBytes"`
	Remote     string      `json:"remote"` // the client's address, as the upstream sees it
}

// Handler returns the standard upstream for tests and benchmarks:
//
//	/bytes/N   N bytes of the pattern (see PatternByte), Content-Length set
//	/echo      the request as JSON (see Echo); any method, any path below
//	/status/N  status N (200..599) with a one-line body
func Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/bytes/{n}", serveBytes)
	mux.HandleFunc("/echo", serveEcho)
	mux.HandleFunc("/echo/", serveEcho)
	mux.HandleFunc("/status/{n}", serveStatus)
	return mux
}

func serveBytes(w http.ResponseWriter, r *http.Request) {
	n, err := strconv.ParseInt(r.PathValue("n"), 10, 64)
	if err != nil || n < 0 || n > maxBytes {
		http.Error(w, "bytes: want /bytes/N with 0 <= N <= 2^40", http.StatusBadRequest)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/octet-stream")
	h.Set("Content-Length", strconv.FormatInt(n, 10))
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodHead {
		return
	}
	for n > 0 {
		chunk := pattern[:min(n, int64(len(pattern)))]
		if _, err := w.Write(chunk); err != nil {
			return // client went away
		}
		n -= int64(len(chunk))
	}
}

func serveEcho(w http.ResponseWriter, r *http.Request) {
	body, _ := io.Copy(io.Discard, r.Body)
	e := Echo{
		Method:     r.Method,
		RequestURI: r.RequestURI,
		Path:       r.URL.Path,
		Query:      r.URL.RawQuery,
		Host:       r.Host,
		Proto:      r.Proto,
		TLS:        r.TLS != nil,
		Headers:    r.Header,
		BodyBytes:  body,
		Remote:     r.RemoteAddr,
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(e)
}

func serveStatus(w http.ResponseWriter, r *http.Request) {
	code, err := strconv.Atoi(r.PathValue("n"))
	if err != nil || code < 200 || code > 599 {
		http.Error(w, "status: want /status/N with 200 <= N <= 599", http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(code)
	fmt.Fprintf(w, "status %d\n", code)
}
