package canon

import (
	"errors"
	"strconv"
	"strings"
	"testing"
)

// seedHosts is the corpus shared by the fuzz targets, on top of the
// testdata vectors.
var seedHosts = []string{
	"example.com", "Example.COM.", "localhost", "a", ".", "", " ",
	"127.0.0.1", "2130706433", "0x7f000001", "0177.0.0.1", "127.1", "10.1.1", "0x7f.1",
	"425.510.425.510", "7147006462", "0x100000000", "1.2.3.4.5", "0x7g.1", "0x", "09",
	"::1", "[::1]", "::ffff:127.0.0.1", "[fe80::1%eth0]", "fe80::1%25eth0",
	"bücher.example", "ｅｘａｍｐｌｅ.com", "例え.jp", "xn--bcher-kva.example", "xn--zz",
	"example.com\x00", "a\r\nb", "user@host", "a/b", "a\\b", "\xff", "１２７.0.0.1",
	strings.Repeat("a", 64), strings.Repeat("a.", 127),
}

func addHostSeeds(f *testing.F) {
	for _, s := range seedHosts {
		f.Add(s)
	}
	for _, v := range readVectors(f, "hosts.txt") {
		f.Add(v.input)
	}
}

func FuzzParseHost(f *testing.F) {
	addHostSeeds(f)
	f.Fuzz(func(t *testing.T, s string) {
		h, err := ParseHost(s)
		if err != nil {
			if !errors.Is(err, ErrMalformedHost) {
				t.Fatalf("ParseHost(%q) error %v does not wrap ErrMalformedHost", s, err)
			}
			if h != (Host{}) {
				t.Fatalf("ParseHost(%q) = %#v with an error", s, h)
			}
			noRawControls(t, "fuzz", err.Error())
			return
		}
		checkHostInvariants(t, "fuzz", s, h)
	})
}

func FuzzParsePattern(f *testing.F) {
	for _, v := range readVectors(f, "patterns.txt") {
		f.Add(v.input, strings.HasPrefix(v.rest, "deny"))
	}
	for _, v := range readVectors(f, "match.txt") {
		f.Add(v.input, true)
	}
	for _, s := range seedHosts {
		f.Add(s, false)
		f.Add("*."+s, true)
		f.Add(s+":443", false)
	}
	f.Fuzz(func(t *testing.T, s string, deny bool) {
		p, err := ParsePattern(s, deny)
		if err != nil {
			checkPatternError(t, "fuzz", s, deny, err)
			return
		}
		checkPatternRoundTrip(t, "fuzz", s, deny, p)
		// A pattern built from a host matches that host.
		if p.Kind == Exact && !p.Match(p.Host, p.Port) {
			t.Fatalf("ParsePattern(%q) = %v does not match its own host", s, p)
		}
		if p.Kind == Suffix {
			sub, err := ParseHost("x." + p.Host.Name)
			if err == nil && !p.Match(sub, p.Port) {
				t.Fatalf("ParsePattern(%q) = %v does not match %v", s, p, sub)
			}
			if p.Match(p.Host, p.Port) {
				t.Fatalf("ParsePattern(%q) = %v matches its own parent", s, p)
			}
		}
	})
}

func FuzzSplitHostPort(f *testing.F) {
	for _, s := range []string{
		"example.com:443", "[::1]:443", "[::1]", "::1:443", "a:0", "a:0443", "a:65536",
		":443", "[]:1", "[a]:1", "[::1]x:1", "a]:1", "a:", "", "[", "[::1",
	} {
		f.Add(s)
	}
	for _, s := range seedHosts {
		f.Add(s + ":80")
		f.Add("[" + s + "]:80")
	}
	f.Fuzz(func(t *testing.T, s string) {
		host, port, err := SplitHostPort(s)
		if err != nil {
			if !errors.Is(err, ErrMalformedHost) && !errors.Is(err, ErrBadPort) {
				t.Fatalf("SplitHostPort(%q) error %v wraps neither ErrMalformedHost nor ErrBadPort", s, err)
			}
			noRawControls(t, "fuzz", err.Error())
			return
		}
		if port == 0 || host == "" {
			t.Fatalf("SplitHostPort(%q) = %q, %d", s, host, port)
		}
		// Joining again (brackets for IPv6) splits back to the same parts.
		j := host + ":" + strconv.Itoa(int(port))
		if strings.Contains(host, ":") {
			j = "[" + host + "]:" + strconv.Itoa(int(port))
		}
		h2, p2, err := SplitHostPort(j)
		if err != nil || h2 != host || p2 != port {
			t.Fatalf("SplitHostPort(%q) = %q, %d; its join %q splits to %q, %d, %v", s, host, port, j, h2, p2, err)
		}
		// A host that parses survives HostPort and back.
		if h, err := ParseHost(host); err == nil {
			rh, rp, err := SplitHostPort(HostPort(h, port))
			if err != nil || rp != port {
				t.Fatalf("SplitHostPort(HostPort(%v, %d)) = %q, %d, %v", h, port, rh, rp, err)
			}
			if back, err := ParseHost(rh); err != nil || back != h {
				t.Fatalf("ParseHost(%q) = %v, %v; want %v", rh, back, err, h)
			}
		}
	})
}

func BenchmarkParseHost(b *testing.B) {
	for _, in := range []string{
		"api.github.com",
		"API.GitHub.com.",
		"10.0.0.5",
		"0x7f.1",
		"2001:db8::1",
		"bücher.example",
	} {
		b.Run(in, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := ParseHost(in); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
