package canon

import (
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// hostComparer lets go-cmp compare Host, whose netip.Addr has unexported
// fields; == is the right equality for both.
var hostComparer = cmp.Comparer(func(a, b Host) bool { return a == b })

func TestParsePatternVectors(t *testing.T) {
	for _, v := range readVectors(t, "patterns.txt") {
		lists, result, ok := strings.Cut(v.rest, " ")
		result = strings.TrimSpace(result)
		if !ok || len(result) < 2 || (result[0] != '=' && result[0] != '!') {
			t.Fatalf("%s: want LISTS and = CANONICAL or ! TEXT, got %q", v.pos, v.rest)
		}
		var denies []bool
		switch lists {
		case "allow":
			denies = []bool{false}
		case "deny":
			denies = []bool{true}
		case "both":
			denies = []bool{false, true}
		default:
			t.Fatalf("%s: lists %q is not allow, deny or both", v.pos, lists)
		}
		want := strings.TrimSpace(result[1:])
		for _, deny := range denies {
			p, err := ParsePattern(v.input, deny)
			if result[0] == '=' {
				if err != nil {
					t.Errorf("%s: ParsePattern(%q, deny=%v) error: %v; want %q", v.pos, v.input, deny, err, want)
					continue
				}
				if got := p.String(); got != want {
					t.Errorf("%s: ParsePattern(%q, deny=%v).String() = %q, want %q", v.pos, v.input, deny, got, want)
				}
				checkPatternRoundTrip(t, v.pos, v.input, deny, p)
				continue
			}
			if err == nil {
				t.Errorf("%s: ParsePattern(%q, deny=%v) = %v, want error containing %q", v.pos, v.input, deny, p, want)
				continue
			}
			checkPatternError(t, v.pos, v.input, deny, err)
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%s: ParsePattern(%q, deny=%v) error %q does not contain %q", v.pos, v.input, deny, err, want)
			}
		}
	}
}

// checkPatternRoundTrip checks that the canonical spelling parses back to
// the same Pattern and is a fixed point.
func checkPatternRoundTrip(t *testing.T, pos, in string, deny bool, p Pattern) {
	t.Helper()
	s := p.String()
	again, err := ParsePattern(s, deny)
	if err != nil {
		t.Errorf("%s: ParsePattern(%q) = %q, which does not parse again: %v", pos, in, s, err)
		return
	}
	if diff := cmp.Diff(p, again, hostComparer); diff != "" {
		t.Errorf("%s: ParsePattern(ParsePattern(%q).String()) differs (-first +second):\n%s", pos, in, diff)
	}
	switch p.Kind {
	case Suffix:
		if p.Host.IsIP() || !strings.Contains(p.Host.Name, ".") && p.Host.Name != "localhost" {
			t.Errorf("%s: ParsePattern(%q) = suffix over %v", pos, in, p.Host)
		}
	case Any:
		if !deny {
			t.Errorf("%s: ParsePattern(%q) accepted * in an allow list", pos, in)
		}
	}
}

// checkPatternError checks the shape every ParsePattern error must have.
func checkPatternError(t *testing.T, pos, in string, deny bool, err error) {
	t.Helper()
	if !errors.Is(err, ErrBadPattern) {
		t.Errorf("%s: ParsePattern(%q) error %v does not wrap ErrBadPattern", pos, in, err)
	}
	var pe *PatternError
	if !errors.As(err, &pe) {
		t.Errorf("%s: ParsePattern(%q) error %T is not a *PatternError", pos, in, err)
		return
	}
	if pe.Pattern != in || pe.Problem == "" {
		t.Errorf("%s: ParsePattern(%q) error = %+v: want Pattern set to the input and a Problem", pos, in, *pe)
	}
	noRawControls(t, pos, err.Error())
	if pe.Fix != "" {
		// A suggested fix must itself be valid and canonical, or the user
		// goes round in circles.
		p, ferr := ParsePattern(pe.Fix, deny)
		if ferr != nil || p.String() != pe.Fix {
			t.Errorf("%s: ParsePattern(%q) suggests %q, which is not a canonical pattern (%v)", pos, in, pe.Fix, ferr)
		}
	}
}

func TestParsePatternPortErrorsWrapErrBadPort(t *testing.T) {
	for _, in := range []string{"example.com:0", "example.com:0443", "example.com:", "example.com:x", "[::1]:65536", "*:0"} {
		_, err := ParsePattern(in, true)
		if !errors.Is(err, ErrBadPattern) || !errors.Is(err, ErrBadPort) {
			t.Errorf("ParsePattern(%q) error %v: want both ErrBadPattern and ErrBadPort", in, err)
		}
	}
	_, err := ParsePattern("exa mple.com", true)
	if !errors.Is(err, ErrMalformedHost) {
		t.Errorf("ParsePattern(%q) error %v: want ErrMalformedHost as the cause", "exa mple.com", err)
	}
}

func TestParsePatternFields(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		deny     bool
		want     Pattern
	}{
		{"exact", "Example.COM.", false, Pattern{Kind: Exact, Host: Host{Name: "example.com"}}},
		{"suffix", "*.example.com:443", false, Pattern{Kind: Suffix, Host: Host{Name: "example.com"}, Port: 443}},
		{"any", "*", true, Pattern{Kind: Any}},
		{"any port", "*:8443", true, Pattern{Kind: Any, Port: 8443}},
		{"ipv6", "[::1]:8080", false, Pattern{Kind: Exact, Host: mustHost(t, "::1"), Port: 8080}},
		{"ipv4", "0x7f.1", false, Pattern{Kind: Exact, Host: mustHost(t, "127.0.0.1")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParsePattern(tc.in, tc.deny)
			if err != nil {
				t.Fatalf("ParsePattern(%q, %v): %v", tc.in, tc.deny, err)
			}
			if diff := cmp.Diff(tc.want, got, hostComparer); diff != "" {
				t.Errorf("ParsePattern(%q, %v) (-want +got):\n%s", tc.in, tc.deny, diff)
			}
		})
	}
}

func mustHost(t testing.TB, s string) Host {
	t.Helper()
	h, err := ParseHost(s)
	if err != nil {
		t.Fatalf("ParseHost(%q): %v", s, err)
	}
	return h
}

func TestMatchVectors(t *testing.T) {
	for _, v := range readVectors(t, "match.txt") {
		f := strings.Fields(v.rest)
		if len(f) != 3 || (f[2] != "yes" && f[2] != "no") {
			t.Fatalf("%s: want PATTERN HOST PORT yes|no", v.pos)
		}
		p, err := ParsePattern(v.input, true)
		if err != nil {
			t.Fatalf("%s: ParsePattern(%q): %v", v.pos, v.input, err)
		}
		h := mustHost(t, f[0])
		port, err := strconv.ParseUint(f[1], 10, 16)
		if err != nil {
			t.Fatalf("%s: port %q: %v", v.pos, f[1], err)
		}
		want := f[2] == "yes"
		if got := p.Match(h, uint16(port)); got != want {
			t.Errorf("%s: ParsePattern(%q).Match(%v, %d) = %v, want %v", v.pos, v.input, h, port, got, want)
		}
	}
}

func TestMatchZeroValues(t *testing.T) {
	// A forgotten assignment must not match anything.
	var zero Pattern
	for _, h := range []Host{{}, {Name: "example.com"}, mustHost(t, "10.0.0.1")} {
		if zero.Match(h, 443) {
			t.Errorf("Pattern{}.Match(%#v, 443) = true, want false", h)
		}
	}
	if (Pattern{Kind: Suffix}).Match(Host{Name: "a.b"}, 1) {
		t.Error("suffix pattern with no parent matched")
	}
	if (Pattern{Kind: 7}).Match(Host{Name: "a.b"}, 1) {
		t.Error("unknown pattern kind matched")
	}
}
