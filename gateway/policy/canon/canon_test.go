package canon

import (
	"bufio"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"testing"
	"unsafe"
)

// vector is one line of a testdata file: a possibly quoted input and the
// rest of the line.
type vector struct {
	pos   string // file:line, for messages
	input string
	rest  string
}

// readVectors reads a testdata file. The first field is bare, or a Go
// quoted string when it starts with '"'. Blank lines and # comments are
// skipped.
func readVectors(t testing.TB, name string) []vector {
	t.Helper()
	f, err := os.Open("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var vs []vector
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		pos := fmt.Sprintf("%s:%d", name, n)
		var in, rest string
		if line[0] == '"' {
			q, err := strconv.QuotedPrefix(line)
			if err != nil {
				t.Fatalf("%s: bad quoted input: %v", pos, err)
			}
			in, _ = strconv.Unquote(q)
			rest = line[len(q):]
		} else {
			i := strings.IndexAny(line, " \t")
			if i < 0 {
				t.Fatalf("%s: want INPUT and a result", pos)
			}
			in, rest = line[:i], line[i:]
		}
		rest = strings.TrimSpace(rest)
		if rest == "" {
			t.Fatalf("%s: missing result", pos)
		}
		vs = append(vs, vector{pos: pos, input: in, rest: rest})
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(vs) == 0 {
		t.Fatalf("%s: no vectors", name)
	}
	return vs
}

// noRawControls fails if an error message carries a control character
// unescaped: it would reach a terminal or a log line as is.
func noRawControls(t *testing.T, pos, msg string) {
	t.Helper()
	for _, r := range msg {
		if r < 0x20 || r == 0x7f || (0x80 <= r && r < 0xa0) || r == 0x202e {
			t.Errorf("%s: error message %q holds raw control character %U", pos, msg, r)
			return
		}
	}
}

func TestParseHostVectors(t *testing.T) {
	for _, v := range readVectors(t, "hosts.txt") {
		got, err := ParseHost(v.input)
		if v.rest == "malformed" {
			if err == nil {
				t.Errorf("%s: ParseHost(%q) = %v, want malformed", v.pos, v.input, got)
				continue
			}
			if !errors.Is(err, ErrMalformedHost) {
				t.Errorf("%s: ParseHost(%q) error %v does not wrap ErrMalformedHost", v.pos, v.input, err)
			}
			if got != (Host{}) {
				t.Errorf("%s: ParseHost(%q) returned %#v with an error, want zero Host", v.pos, v.input, got)
			}
			noRawControls(t, v.pos, err.Error())
			continue
		}
		if err != nil {
			t.Errorf("%s: ParseHost(%q) error %v, want %q", v.pos, v.input, err, v.rest)
			continue
		}
		if s := got.String(); s != v.rest {
			t.Errorf("%s: ParseHost(%q) = %q, want %q", v.pos, v.input, s, v.rest)
		}
		checkHostInvariants(t, v.pos, v.input, got)
	}
}

// checkHostInvariants checks what every successful ParseHost result must
// satisfy: exactly one form set, canonical IP forms, idempotence.
func checkHostInvariants(t *testing.T, pos, in string, h Host) {
	t.Helper()
	if h.IsIP() == (h.Name != "") {
		t.Errorf("%s: ParseHost(%q) = %#v: want exactly one of Name and Addr", pos, in, h)
	}
	if h.IsIP() && (h.Addr.Is4In6() || h.Addr.Zone() != "") {
		t.Errorf("%s: ParseHost(%q) = %v: mapped or zoned address", pos, in, h.Addr)
	}
	if !h.IsIP() {
		if len(h.Name) > maxName {
			t.Errorf("%s: ParseHost(%q) = %d-character name", pos, in, len(h.Name))
		}
		if c, _ := scan(h.Name); c != 0 {
			t.Errorf("%s: ParseHost(%q) = %q: not lower-case ASCII", pos, in, h.Name)
		}
		if strings.HasSuffix(h.Name, ".") {
			t.Errorf("%s: ParseHost(%q) = %q: trailing dot", pos, in, h.Name)
		}
	}
	again, err := ParseHost(h.String())
	if err != nil || again != h {
		t.Errorf("%s: ParseHost(ParseHost(%q).String()=%q) = %#v, %v; want %#v", pos, in, h.String(), again, err, h)
	}
}

func TestParseHostErrorQuotesInput(t *testing.T) {
	_, err := ParseHost("evil\r\nSet-Cookie: x\x1b[2J")
	if err == nil {
		t.Fatal("ParseHost accepted CR LF")
	}
	msg := err.Error()
	noRawControls(t, "crlf", msg)
	if !strings.Contains(msg, `\r\n`) {
		t.Errorf("error %q does not show the input escaped", msg)
	}
	if !strings.HasPrefix(msg, "malformed host") {
		t.Errorf("error %q does not start with %q", msg, "malformed host")
	}
}

func TestParseHostLongInput(t *testing.T) {
	long := strings.Repeat("a.", 1<<16)
	_, err := ParseHost(long)
	if !errors.Is(err, ErrMalformedHost) {
		t.Fatalf("ParseHost(%d bytes) error = %v, want ErrMalformedHost", len(long), err)
	}
	if n := len(err.Error()); n > 300 {
		t.Errorf("error for a long input is %d bytes; it should echo a bounded prefix", n)
	}
}

// TestParseHostNoCopy checks the hot path: a canonical name comes back as
// the very same string, and neither it nor an IP allocates.
func TestParseHostNoCopy(t *testing.T) {
	for _, in := range []string{"api.github.com", "example.com."} {
		h, err := ParseHost(in)
		if err != nil {
			t.Fatal(err)
		}
		if unsafe.StringData(h.Name) != unsafe.StringData(in) {
			t.Errorf("ParseHost(%q) = %q in a copy; want the input's own bytes", in, h.Name)
		}
	}
	for _, in := range []string{"api.github.com", "example.com.", "10.0.0.5", "::1", "[2001:db8::1]"} {
		allocs := testing.AllocsPerRun(100, func() {
			if _, err := ParseHost(in); err != nil {
				t.Fatal(err)
			}
		})
		if allocs != 0 {
			t.Errorf("ParseHost(%q) allocates %v times, want 0", in, allocs)
		}
	}
}

func TestParseHostOneForm(t *testing.T) {
	// Every spelling of one address is one Host, comparable with ==.
	want := Host{Addr: netip.MustParseAddr("127.0.0.1")}
	for _, in := range []string{"127.0.0.1", "0x7f.1", "2130706433", "127.1", "0177.0.0.1", "::ffff:127.0.0.1", "[::ffff:7f00:1]", "127.0.0.1."} {
		got, err := ParseHost(in)
		if err != nil || got != want {
			t.Errorf("ParseHost(%q) = %#v, %v; want %#v", in, got, err, want)
		}
	}
}

func TestSplitHostPort(t *testing.T) {
	tests := []struct {
		name, in string
		host     string
		port     uint16
		wantErr  error
	}{
		{"name", "example.com:443", "example.com", 443, nil},
		{"raw host kept", "Example.COM.:80", "Example.COM.", 80, nil},
		{"ipv4", "10.0.0.5:8080", "10.0.0.5", 8080, nil},
		{"ipv6", "[::1]:443", "::1", 443, nil},
		{"ipv6 long", "[2001:db8::1]:65535", "2001:db8::1", 65535, nil},
		{"port 1", "a:1", "a", 1, nil},
		{"missing port", "example.com", "", 0, ErrBadPort},
		{"empty port", "example.com:", "", 0, ErrBadPort},
		{"zero port", "example.com:0", "", 0, ErrBadPort},
		{"leading zero", "example.com:0443", "", 0, ErrBadPort},
		{"too big", "example.com:65536", "", 0, ErrBadPort},
		{"huge", "example.com:99999999999999999999", "", 0, ErrBadPort},
		{"not a number", "example.com:https", "", 0, ErrBadPort},
		{"sign", "example.com:+443", "", 0, ErrBadPort},
		{"space", "example.com: 443", "", 0, ErrBadPort},
		{"ipv6 missing port", "[::1]", "", 0, ErrBadPort},
		{"ipv6 empty port", "[::1]:", "", 0, ErrBadPort},
		{"ipv6 zero port", "[::1]:0", "", 0, ErrBadPort},
		{"empty host", ":443", "", 0, ErrMalformedHost},
		{"empty brackets", "[]:443", "", 0, ErrMalformedHost},
		{"empty", "", "", 0, ErrBadPort},
		{"unbracketed ipv6", "::1:443", "", 0, ErrMalformedHost},
		{"unclosed bracket", "[::1:443", "", 0, ErrMalformedHost},
		{"bracketed name", "[example.com]:443", "", 0, ErrMalformedHost},
		{"text after bracket", "[::1]x:443", "", 0, ErrMalformedHost},
		{"stray bracket", "a]b:443", "", 0, ErrMalformedHost},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			host, port, err := SplitHostPort(tc.in)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("SplitHostPort(%q) = %q, %d, %v; want error %v", tc.in, host, port, err, tc.wantErr)
				}
				return
			}
			if err != nil || host != tc.host || port != tc.port {
				t.Errorf("SplitHostPort(%q) = %q, %d, %v; want %q, %d", tc.in, host, port, err, tc.host, tc.port)
			}
		})
	}
}

func TestParsePort(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want uint16
		ok   bool
	}{
		{"1", 1, true}, {"443", 443, true}, {"65535", 65535, true},
		{"", 0, false}, {"0", 0, false}, {"00", 0, false}, {"0443", 0, false},
		{"65536", 0, false}, {"-1", 0, false}, {"1e3", 0, false}, {"٤٤٣", 0, false},
	} {
		got, err := ParsePort(tc.in)
		if tc.ok != (err == nil) || got != tc.want {
			t.Errorf("ParsePort(%q) = %d, %v; want %d, ok=%v", tc.in, got, err, tc.want, tc.ok)
		}
		if err != nil && !errors.Is(err, ErrBadPort) {
			t.Errorf("ParsePort(%q) error %v does not wrap ErrBadPort", tc.in, err)
		}
	}
}

func TestHostPort(t *testing.T) {
	for _, tc := range []struct {
		in   string
		port uint16
		want string
	}{
		{"example.com", 443, "example.com:443"},
		{"10.0.0.5", 80, "10.0.0.5:80"},
		{"::1", 8080, "[::1]:8080"},
		{"::ffff:10.0.0.5", 22, "10.0.0.5:22"},
	} {
		h, err := ParseHost(tc.in)
		if err != nil {
			t.Fatal(err)
		}
		got := HostPort(h, tc.port)
		if got != tc.want {
			t.Errorf("HostPort(%v, %d) = %q, want %q", h, tc.port, got, tc.want)
		}
		// The joined form splits back to the same host and port.
		rh, rp, err := SplitHostPort(got)
		if err != nil {
			t.Fatalf("SplitHostPort(%q): %v", got, err)
		}
		back, err := ParseHost(rh)
		if err != nil || back != h || rp != tc.port {
			t.Errorf("SplitHostPort(HostPort(%v, %d)) = %q, %d; want the same host and port", h, tc.port, rh, rp)
		}
	}
}
