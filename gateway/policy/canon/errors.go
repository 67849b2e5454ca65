package canon

import (
	"errors"
	"fmt"
)

// ErrMalformedHost is wrapped by every ParseHost and SplitHostPort error
// about the host itself: a character outside the host alphabet, a bad label,
// an IPv4 literal out of range, an IPv6 zone id. Policy denies such a host
// before any list is consulted.
var ErrMalformedHost = errors.New("malformed host")

// ErrBadPattern is wrapped by every ParsePattern error (via *PatternError).
var ErrBadPattern = errors.New("bad host pattern")

// ErrBadPort is wrapped by every error about a port: missing, zero, with a
// leading zero, not a number, or above 65535. A pattern error about its port
// wraps both ErrBadPattern and ErrBadPort.
var ErrBadPort = errors.New("bad port")

// PatternError is the error ParsePattern returns. Its Error text is written
// for the person editing the settings file: it says what is wrong and, when
// one is known, which spelling to use instead.
type PatternError struct {
	// Pattern is the entry as written.
	Pattern string
	// Problem says what is wrong, phrased to follow the quoted pattern
	// ("is too broad: …").
	Problem string
	// Fix is a valid, canonical pattern that was probably meant, or "".
	Fix string
	// Err is the underlying cause (a host or port error), or nil.
	Err error
}

// Error returns `"PATTERN" PROBLEM` plus `; use "FIX"` when a fix is known.
// The pattern is quoted with %q so that control characters never reach a
// terminal or log raw.
func (e *PatternError) Error() string {
	msg := fmt.Sprintf("%q %s", clip(e.Pattern), e.Problem)
	if e.Fix != "" {
		msg += fmt.Sprintf("; use %q", e.Fix)
	}
	return msg
}

// Unwrap lets errors.Is find ErrBadPattern and the underlying cause.
func (e *PatternError) Unwrap() []error {
	if e.Err == nil {
		return []error{ErrBadPattern}
	}
	return []error{ErrBadPattern, e.Err}
}

// maxEcho bounds how much of a hostile input an error message repeats.
const maxEcho = 80

// clip shortens s for an error message. The caller quotes the result with %q,
// which escapes control characters and invalid UTF-8.
func clip(s string) string {
	if len(s) <= maxEcho {
		return s
	}
	return s[:maxEcho] + "…"
}

// malformed builds an ErrMalformedHost error about input s.
func malformed(s, detail string) error {
	return fmt.Errorf("%w %q: %s", ErrMalformedHost, clip(s), detail)
}
