package credentials

import (
	"crypto/rand"
	"fmt"
	"strings"
)

// minRandom is the fewest random characters a sentinel may have. Below it a
// sentinel could be guessed, and the secret itself would match ordinary
// traffic in leak detection.
const minRandom = 8

// keepPrefix is how many characters must stay random after a kept prefix.
const keepPrefix = 16

// knownPrefixes are vendor token prefixes that clients check before they
// send a token (gh, openai and anthropic SDKs, AWS tooling). Keeping them
// lets a masked token pass those checks; they are public, so keeping them
// reveals nothing. Longest first.
var knownPrefixes = []string{
	"sk-ant-api03-", "github_pat_", "sk-ant-", "sk-proj-", "sk-svcacct-",
	"glpat-", "xoxb-", "xoxp-", "xapp-", "pypi-",
	"ghp_", "gho_", "ghu_", "ghs_", "ghr_", "npm_", "AKIA", "ASIA",
	"sk-", "hf_",
}

const (
	lowerChars    = "abcdefghijklmnopqrstuvwxyz"
	upperChars    = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
	digitChars    = "0123456789"
	hexLowerChars = "0123456789abcdef"
	hexUpperChars = "0123456789ABCDEF"
)

// sentinelShape is how each position of a secret is redrawn.
type sentinelShape struct {
	prefix int      // bytes kept verbatim at the start
	alpha  []string // per byte after prefix: the alphabet to draw from, "" = keep
	random int      // positions drawn at random
}

// shapeOf works out how to draw a sentinel for secret. Letters and digits
// are redrawn within their class (lower, upper, digit), so that format
// checks in clients still pass; a secret whose letters and digits are all
// hex is redrawn as hex. Every other byte (punctuation, "-", "_", "/", "+",
// "=", non-ASCII) stays where it is, which keeps separators and lengths.
func shapeOf(secret string) sentinelShape {
	var sh sentinelShape
	for _, p := range knownPrefixes {
		if strings.HasPrefix(secret, p) && len(secret)-len(p) >= keepPrefix {
			sh.prefix = len(p)
			break
		}
	}
	rest := secret[sh.prefix:]
	hexLower, hexUpper := true, true
	for i := 0; i < len(rest); i++ {
		c := rest[i]
		switch {
		case c >= '0' && c <= '9':
		case c >= 'a' && c <= 'f':
			hexUpper = false
		case c >= 'A' && c <= 'F':
			hexLower = false
		case c >= 'g' && c <= 'z', c >= 'G' && c <= 'Z':
			hexLower, hexUpper = false, false
		}
	}
	sh.alpha = make([]string, len(rest))
	for i := 0; i < len(rest); i++ {
		c := rest[i]
		var a string
		switch {
		case hexLower && (c >= '0' && c <= '9' || c >= 'a' && c <= 'f'):
			a = hexLowerChars
		case hexUpper && (c >= '0' && c <= '9' || c >= 'A' && c <= 'F'):
			a = hexUpperChars
		case c >= 'a' && c <= 'z':
			a = lowerChars
		case c >= 'A' && c <= 'Z':
			a = upperChars
		case c >= '0' && c <= '9':
			a = digitChars
		}
		if a != "" {
			sh.random++
		}
		sh.alpha[i] = a
	}
	return sh
}

// newSentinel draws a sentinel for secret with crypto/rand. It never equals
// secret, and taken (which reports a collision with the sentinels and
// secrets already in the set) rejects it. The error never holds either.
func newSentinel(secret string, taken func(string) bool) (string, error) {
	sh := shapeOf(secret)
	if sh.random < minRandom {
		return "", fmt.Errorf("%w: it has %d letters and digits, at least %d are needed", ErrTooShort, sh.random, minRandom)
	}
	buf := []byte(secret)
	// With at least 8 random characters, a collision is below 1 in 10^8 per
	// try; a few tries bound the loop without making failure plausible.
	for range 8 {
		for i, a := range sh.alpha {
			if a != "" {
				c, err := randomChar(a)
				if err != nil {
					return "", err
				}
				buf[sh.prefix+i] = c
			}
		}
		s := string(buf)
		if s != secret && !taken(s) {
			return s, nil
		}
	}
	return "", fmt.Errorf("%w: could not draw a distinct sentinel", ErrTooShort)
}

// randomChar returns a uniformly random byte of alphabet (at most 256 long),
// rejecting the bias of a plain modulo.
func randomChar(alphabet string) (byte, error) {
	n := len(alphabet)
	limit := 256 - 256%n
	var b [16]byte
	for {
		if _, err := rand.Read(b[:]); err != nil {
			return 0, fmt.Errorf("read random: %w", err)
		}
		for _, x := range b {
			if int(x) < limit {
				return alphabet[int(x)%n], nil
			}
		}
	}
}
