package credentials

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// Fixed fake secrets. Each is distinct from every other and from any text
// the tests write, so finding one in output means it leaked.
const (
	ghSecret     = "ghp_R3alT0kenV4lueAbCdEfGhIjKlMnOpQrSt12"
	openaiSecret = "sk-proj-RealOpenAIsecretKEY0123456789abcdXYZ"
	fileSecret   = "gho_F1leSecretTokenZZZZyyyyXXXXwwww9876"
)

func envOf(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func mustLoad(t testing.TB, specs []Spec, env map[string]string, opts ...Option) *Set {
	t.Helper()
	s, _, err := Load(specs, envOf(env), opts...)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	return s
}

func bindingNamed(t testing.TB, s *Set, name string) *Binding {
	t.Helper()
	for _, b := range s.Bindings() {
		if b.Name == name {
			return b
		}
	}
	t.Fatalf("no binding %s", name)
	return nil
}

// noSecrets fails if text holds any real secret of s. It names the
// credential, never prints the value.
func noSecrets(t testing.TB, s *Set, what, text string) {
	t.Helper()
	for _, b := range s.bindings {
		if strings.Contains(text, b.secret) {
			t.Errorf("%s holds the secret of %s", what, b.Name)
		}
	}
}

func asLeak(err error) *LeakError {
	var le *LeakError
	if errors.As(err, &le) {
		return le
	}
	return nil
}

func fmtS(verb string, v any) string { return fmt.Sprintf(verb, v) }
