package config

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// EnvSettings names the environment variable that points at a settings file.
const EnvSettings = "MOAT_SETTINGS"

// Find returns the settings file to use, in DESIGN §2 order: explicit
// (--settings), then $MOAT_SETTINGS, then cwd/.moat.yaml, then
// home/.config/moat/settings.yaml, then home/.srt-settings.json. It
// returns "" when none exists, meaning the built-in default.
//
// A path given explicitly or through $MOAT_SETTINGS must exist: a missing
// one wraps ErrNotFound and never falls back. A candidate that exists but
// cannot be examined is an error too, rather than a silent skip to a
// different policy.
func Find(explicit string, getenv func(string) string, cwd, home string) (string, error) {
	p, _, err := find(explicit, getenv, cwd, home)
	return p, err
}

func find(explicit string, getenv func(string) string, cwd, home string) (path, origin string, err error) {
	if getenv == nil {
		getenv = func(string) string { return "" }
	}
	for _, c := range []struct{ path, origin string }{
		{explicit, "--settings"},
		{getenv(EnvSettings), "$" + EnvSettings},
	} {
		if c.path == "" {
			continue
		}
		fi, err := os.Stat(c.path)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return "", "", fmt.Errorf("%s %s: %w", c.origin, c.path, ErrNotFound)
		case err != nil:
			return "", "", fmt.Errorf("%s: %w", c.origin, err)
		case fi.IsDir():
			return "", "", fmt.Errorf("%s %s: is a directory", c.origin, c.path)
		}
		return c.path, c.origin + " " + c.path, nil
	}
	var candidates []string
	if cwd != "" {
		candidates = append(candidates, filepath.Join(cwd, ".moat.yaml"))
	}
	if home != "" {
		candidates = append(candidates,
			filepath.Join(home, ".config", "moat", "settings.yaml"),
			filepath.Join(home, ".srt-settings.json"))
	}
	for _, c := range candidates {
		fi, err := os.Stat(c)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			continue
		case err != nil:
			return "", "", fmt.Errorf("look for settings: %w", err)
		case fi.Mode().IsRegular() && fi.Size() == 0:
			// An empty file found by the search is not a policy: it is what
			// a running sandbox leaves as a placeholder so that the name
			// cannot be created from inside. (An explicit empty file
			// still loads: it means "everything closed".)
			continue
		}
		return c, c, nil
	}
	return "", "built-in default", nil
}

// Resolve finds, loads and validates the settings for this process (see
// Find), using its environment, working directory and home. source
// describes where the settings came from, e.g. "$MOAT_SETTINGS /x.yaml"
// or "built-in default".
func Resolve(explicit string) (f *File, source string, err error) {
	cwd, err := os.Getwd()
	if err != nil {
		return nil, "", fmt.Errorf("resolve settings: %w", err)
	}
	home, _ := os.UserHomeDir() // no home: skip the home candidates
	path, source, err := find(explicit, os.Getenv, cwd, home)
	if err != nil {
		return nil, "", err
	}
	if path == "" {
		return Default(), source, nil
	}
	if f, err = Load(path); err != nil {
		return nil, source, err
	}
	if err := f.Validate(); err != nil {
		return nil, source, withFile(err, path)
	}
	return f, source, nil
}

// withFile names the file in each *FieldError of a joined error.
func withFile(err error, path string) error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range j.Unwrap() {
			withFile(e, path)
		}
	}
	var fe *FieldError
	if errors.As(err, &fe) && fe.File == "" {
		fe.File = path
	}
	return err
}
