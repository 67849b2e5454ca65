package credentials

import (
	"errors"
	"strings"
	"testing"
)

func class(c byte) string {
	switch {
	case c >= 'a' && c <= 'z':
		return "lower"
	case c >= 'A' && c <= 'Z':
		return "upper"
	case c >= '0' && c <= '9':
		return "digit"
	}
	return string(c)
}

func isHex(s string) bool {
	return strings.Trim(s, "0123456789abcdef") == ""
}

func TestSentinelShape(t *testing.T) {
	tests := []struct {
		name, secret, prefix string
		hex                  bool
	}{
		{"github classic", ghSecret, "ghp_", false},
		{"openai project", openaiSecret, "sk-proj-", false},
		{"aws key id", "AKIAIOSFODNN7EXAMPLE", "", false}, // prefix kept only with 16 random after it
		{"aws secret", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "", false},
		{"hex", "3f9a0c1b2d4e5f60718293a4b5c6d7e8f9012345", "", true},
		{"uuid", "123e4567-e89b-12d3-a456-426614174000", "", true},
		{"slack", "xoxb-1234567890-0987654321-AbCdEfGhIjKlMnOpQrStUvWx", "xoxb-", false},
		{"short prefix kept off", "ghp_abcdefgh12", "", false},
		{"symbols", "p@ss:w0rd!with*stuff#99", "", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := newSentinel(tc.secret, func(string) bool { return false })
			if err != nil {
				t.Fatalf("newSentinel: %v", err)
			}
			if got == tc.secret {
				t.Fatal("sentinel equals the secret")
			}
			if len(got) != len(tc.secret) {
				t.Fatalf("len = %d, want %d", len(got), len(tc.secret))
			}
			if !strings.HasPrefix(got, tc.prefix) {
				t.Errorf("sentinel does not keep prefix %q", tc.prefix)
			}
			if tc.hex && !isHex(strings.ReplaceAll(got, "-", "")) {
				t.Errorf("hex secret got a non-hex sentinel")
			}
			for i := len(tc.prefix); i < len(got); i++ {
				g, w := class(got[i]), class(tc.secret[i])
				if tc.hex && w != "-" {
					continue // hex positions are drawn from the hex alphabet, checked above
				}
				if g != w {
					t.Errorf("position %d: class %s, want %s", i, g, w)
				}
			}
		})
	}
}

func TestSentinelRandomAndDistinct(t *testing.T) {
	seen := map[string]bool{}
	for range 200 {
		s, err := newSentinel(ghSecret, func(string) bool { return false })
		if err != nil {
			t.Fatal(err)
		}
		if seen[s] {
			t.Fatal("two draws gave the same sentinel")
		}
		seen[s] = true
	}
}

func TestSentinelTaken(t *testing.T) {
	// taken rejecting every candidate must end in an error, not a loop.
	_, err := newSentinel(ghSecret, func(string) bool { return true })
	if !errors.Is(err, ErrTooShort) {
		t.Fatalf("err = %v, want ErrTooShort", err)
	}
}

func TestSentinelTooShort(t *testing.T) {
	for _, sec := range []string{"abc", "1234567", "--__--__--__ab"} {
		if _, err := newSentinel(sec, func(string) bool { return false }); !errors.Is(err, ErrTooShort) {
			t.Errorf("newSentinel(%d-byte secret) err = %v, want ErrTooShort", len(sec), err)
		}
	}
}

func TestLoadSentinelsDistinct(t *testing.T) {
	// Ten secrets of one shape: sentinels must pairwise not overlap, and
	// none may overlap any secret.
	env := map[string]string{}
	var specs []Spec
	for i := range 10 {
		name := "TOK" + string(rune('A'+i))
		env[name] = "ghp_" + strings.Repeat(string(rune('a'+i)), 20) + "0123456789ABCDEF"
		specs = append(specs, Spec{Name: name, Mode: ModeMask, InjectHosts: []string{"api.github.com"}})
	}
	s := mustLoad(t, specs, env)
	bs := s.Bindings()
	for i, a := range bs {
		for j, b := range bs {
			if i != j && (strings.Contains(a.Sentinel, b.Sentinel) || strings.Contains(a.Sentinel, b.secret)) {
				t.Errorf("sentinel of %s overlaps %s", a.Name, b.Name)
			}
		}
	}
}
