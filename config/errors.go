package config

import (
	"errors"
	"fmt"
	"strconv"
)

// ErrNotFound is wrapped when a settings file that was asked for explicitly
// (--settings or $MOAT_SETTINGS) does not exist. moat never falls back to
// another file or the default in that case.
var ErrNotFound = errors.New("config: settings file not found")

// ErrInvalid is wrapped by every error Parse and Validate return, so that a
// caller can tell a bad file (exit 2) from an I/O failure.
var ErrInvalid = errors.New("config: invalid settings")

// FieldError is one problem at one place of a settings file. Parse and
// Validate return errors.Join of *FieldError values; use errors.As to reach
// one.
type FieldError struct {
	// File and Line locate the problem; they are set by Parse only.
	File string
	Line int
	// Path is the dotted path, e.g. "network.allowedDomains[2]"; "" is the
	// whole document.
	Path string
	// Value is the offending entry when the message is about its spelling;
	// it is printed quoted after the path.
	Value string
	// Msg says what is wrong and, when known, what to write instead.
	Msg string
}

// Error returns `[FILE:LINE: ]PATH[ "VALUE"]: MSG`.
func (e *FieldError) Error() string {
	var s string
	if e.File != "" {
		s = e.File + ":"
		if e.Line > 0 {
			s += strconv.Itoa(e.Line) + ":"
		}
		s += " "
	}
	p := e.Path
	if p == "" {
		p = "(document)"
	}
	s += p
	if e.Value != "" {
		s += " " + quote(e.Value)
	}
	return s + ": " + e.Msg
}

// Is makes every FieldError match ErrInvalid.
func (e *FieldError) Is(target error) bool { return target == ErrInvalid }

// maxEcho bounds how much of a hostile value an error message repeats.
const maxEcho = 80

// quote quotes s for a message, clipped; %q escapes control characters so
// that none reaches a terminal raw.
func quote(s string) string {
	if len(s) > maxEcho {
		s = s[:maxEcho] + "…"
	}
	return fmt.Sprintf("%q", s)
}
