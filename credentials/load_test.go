package credentials

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

var gh = []string{"github.com", "api.github.com"}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLoadErrors(t *testing.T) {
	hosts := writeFile(t, "hosts.yml", "github.com:\n    user: me\n")
	tests := []struct {
		name string
		spec Spec
		opts []Option
		want error
	}{
		{"missing env", Spec{Name: "GITHUB_TOKEN", Mode: ModeMask, InjectHosts: gh}, nil, ErrEmptySecret},
		{"missing env source", Spec{Name: "T", Mode: ModeMask, Source: "env:NOPE", InjectHosts: gh}, nil, ErrEmptySecret},
		{"empty command output", Spec{Name: "T", Mode: ModeMask, Source: "command:true", InjectHosts: gh}, nil, ErrEmptySecret},
		{"command failure", Spec{Name: "T", Mode: ModeMask, Source: "command:sh -c 'echo " + ghSecret + "; exit 3'", InjectHosts: gh}, nil, ErrCommand},
		{"command not found", Spec{Name: "T", Mode: ModeMask, Source: "command:/nonexistent/moat-helper", InjectHosts: gh}, nil, ErrCommand},
		{"command timeout", Spec{Name: "T", Mode: ModeMask, Source: "command:sleep 5", InjectHosts: gh},
			[]Option{WithCommandTimeout(100 * time.Millisecond)}, ErrCommand},
		{"unterminated quote", Spec{Name: "T", Mode: ModeMask, Source: "command:echo 'x", InjectHosts: gh}, nil, ErrBadSpec},
		{"missing file source", Spec{Name: "T", Mode: ModeMask, Source: "file:/nonexistent/x", InjectHosts: gh}, nil, os.ErrNotExist},
		{"missing masked file", Spec{Name: "f", File: "/nonexistent/hosts.yml", Mode: ModeMask, InjectHosts: gh}, nil, os.ErrNotExist},
		{"bad source kind", Spec{Name: "T", Mode: ModeMask, Source: "vault:x", InjectHosts: gh}, nil, ErrBadSpec},
		{"bad mode", Spec{Name: "T", Mode: "hide", InjectHosts: gh}, nil, ErrBadSpec},
		{"no inject hosts", Spec{Name: "GH", Mode: ModeMask}, nil, ErrBadSpec},
		{"odd IPv4 spelling", Spec{Name: "GH", Mode: ModeMask, InjectHosts: []string{"127.1"}}, nil, ErrBadSpec},
		{"host with port", Spec{Name: "GH", Mode: ModeMask, InjectHosts: []string{"api.github.com:443"}}, nil, ErrBadSpec},
		{"extract no group", Spec{Name: "f", File: hosts, Mode: ModeMask, InjectHosts: gh, Extract: `oauth_token: \S+`}, nil, ErrBadSpec},
		{"extract bad regex", Spec{Name: "f", File: hosts, Mode: ModeMask, InjectHosts: gh, Extract: `(`}, nil, ErrBadSpec},
		{"extract no match error", Spec{Name: "f", File: hosts, Mode: ModeMask, InjectHosts: gh, Extract: `oauth_token: (\S+)`, OnExtractNoMatch: NoMatchError}, nil, ErrExtractNoMatch},
		{"bad no-match mode", Spec{Name: "f", File: hosts, Mode: ModeMask, InjectHosts: gh, Extract: `(x)`, OnExtractNoMatch: "ignore"}, nil, ErrBadSpec},
		{"too short", Spec{Name: "PIN", Mode: ModeMask, InjectHosts: gh}, nil, ErrTooShort},
		{"file with source", Spec{Name: "f", File: hosts, Source: "env:X", Mode: ModeMask, InjectHosts: gh}, nil, ErrBadSpec},
	}
	env := map[string]string{"PIN": "1234"}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, _, err := Load([]Spec{tc.spec}, envOf(env), tc.opts...)
			if !errors.Is(err, tc.want) {
				t.Fatalf("Load err = %v, want %v", err, tc.want)
			}
			if s != nil {
				t.Error("Load returned a Set with an error")
			}
			var se *SourceError
			if !errors.As(err, &se) || se.Credential != tc.spec.Name {
				t.Errorf("err %v does not name credential %s", err, tc.spec.Name)
			}
			if strings.Contains(err.Error(), ghSecret) {
				t.Error("error text holds the command's output")
			}
		})
	}
}

func TestLoadJoinsErrors(t *testing.T) {
	_, _, err := Load([]Spec{
		{Name: "A", Mode: ModeMask, InjectHosts: gh},
		{Name: "B", Mode: "x"},
	}, envOf(nil))
	for _, n := range []string{"credential A", "credential B"} {
		if err == nil || !strings.Contains(err.Error(), n) {
			t.Errorf("err %v does not mention %s", err, n)
		}
	}
}

func TestLoadSources(t *testing.T) {
	secretFile := writeFile(t, "tok", ghSecret+"\n")
	tests := []struct{ name, source string }{
		{"default env", ""},
		{"env", "env:OTHER"},
		{"file", "file:" + secretFile},
		{"command", "command:cat " + secretFile},
		{"command quoted", `command:sh -c "printf '%s\n' \"$0\"" ` + ghSecret},
	}
	env := map[string]string{"GITHUB_TOKEN": ghSecret, "OTHER": ghSecret}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := mustLoad(t, []Spec{{Name: "GITHUB_TOKEN", Mode: ModeMask, Source: tc.source, InjectHosts: gh}}, env)
			b := bindingNamed(t, s, "GITHUB_TOKEN")
			if b.secret != ghSecret {
				t.Errorf("loaded secret differs from the source (len %d, want %d)", len(b.secret), len(ghSecret))
			}
		})
	}
}

func TestExtractNoMatchModes(t *testing.T) {
	hosts := writeFile(t, "hosts.yml", "github.com:\n    user: me\n")
	for _, tc := range []struct {
		mode       string
		wantDenied bool
	}{{"", false}, {NoMatchWarn, false}, {NoMatchDeny, true}} {
		t.Run("mode="+tc.mode, func(t *testing.T) {
			s, warns, err := Load([]Spec{{Name: hosts, File: hosts, Mode: ModeMask, InjectHosts: gh,
				Extract: `oauth_token: (\S+)`, OnExtractNoMatch: tc.mode}}, envOf(nil))
			if err != nil {
				t.Fatal(err)
			}
			if len(warns) != 1 || warns[0].Credential != hosts {
				t.Errorf("warnings = %v, want one for %s", warns, hosts)
			}
			if got := slices.Contains(s.DeniedFiles(), hosts); got != tc.wantDenied {
				t.Errorf("denied = %v, want %v", got, tc.wantDenied)
			}
			m, err := s.MaskedFiles(t.TempDir())
			if err != nil || len(m) != 0 {
				t.Errorf("MaskedFiles = %v, %v; want none", m, err)
			}
		})
	}
}

func TestSandboxEnv(t *testing.T) {
	s := mustLoad(t, []Spec{
		{Name: "GITHUB_TOKEN", Mode: ModeMask, InjectHosts: gh},
		{Name: "OPENAI_API_KEY", Mode: ModeDeny},
		{Name: "FROM_CMD", Mode: ModeMask, Source: "command:echo " + openaiSecret, InjectHosts: []string{"api.openai.com"}},
	}, map[string]string{"GITHUB_TOKEN": ghSecret})
	base := []string{"PATH=/bin", "GITHUB_TOKEN=" + ghSecret, "OPENAI_API_KEY=" + openaiSecret, "HOME=/h"}
	got := s.SandboxEnv(base)
	want := []string{
		"PATH=/bin",
		"GITHUB_TOKEN=" + bindingNamed(t, s, "GITHUB_TOKEN").Sentinel,
		"HOME=/h",
		"FROM_CMD=" + bindingNamed(t, s, "FROM_CMD").Sentinel,
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("SandboxEnv (-want +got):\n%s", d)
	}
	noSecrets(t, s, "SandboxEnv", strings.Join(got, "\n"))
	if strings.Contains(strings.Join(got, "\n"), openaiSecret) {
		t.Error("denied variable's value survived")
	}
	if d := cmp.Diff([]string{"OPENAI_API_KEY"}, s.DeniedEnv()); d != "" {
		t.Errorf("DeniedEnv (-want +got):\n%s", d)
	}
}

func TestMaskedFiles(t *testing.T) {
	content := "github.com:\n    oauth_token: " + fileSecret + "\n    user: me\n# backup copy: " + fileSecret + "\n"
	hosts := writeFile(t, "hosts.yml", content)
	denied := "/home/u/.ssh"
	s := mustLoad(t, []Spec{
		{Name: hosts, File: hosts, Mode: ModeMask, InjectHosts: []string{"api.github.com"}, Extract: `oauth_token: (\S+)`},
		{Name: denied, File: denied, Mode: ModeDeny},
	}, nil)
	b := bindingNamed(t, s, hosts)
	dir := t.TempDir()
	m, err := s.MaskedFiles(dir)
	if err != nil {
		t.Fatal(err)
	}
	dst, ok := m[hosts]
	if !ok || len(m) != 1 {
		t.Fatalf("MaskedFiles = %v, want one entry for %s", m, hosts)
	}
	if filepath.Dir(dst) != dir {
		t.Errorf("copy %s not under %s", dst, dir)
	}
	fi, err := os.Stat(dst)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("mode = %v, want 0600", fi.Mode().Perm())
	}
	got, _ := os.ReadFile(dst)
	want := strings.ReplaceAll(content, fileSecret, b.Sentinel)
	if string(got) != want {
		t.Errorf("masked copy differs from the original with sentinels (len %d, want %d)", len(got), len(want))
	}
	noSecrets(t, s, "masked copy", string(got))
	if d := cmp.Diff([]string{denied}, s.DeniedFiles()); d != "" {
		t.Errorf("DeniedFiles (-want +got):\n%s", d)
	}
}

func TestExtractSeveralSecrets(t *testing.T) {
	other := "gho_Second0ne1234567890abcdefghijkLMN"
	hosts := writeFile(t, "hosts.yml", "a:\n  oauth_token: "+fileSecret+"\nb:\n  oauth_token: "+other+"\n")
	s := mustLoad(t, []Spec{{Name: "gh-hosts", File: hosts, Mode: ModeMask, InjectHosts: gh, Extract: `oauth_token: (\S+)`}}, nil)
	if n := len(s.Bindings()); n != 2 {
		t.Fatalf("bindings = %d, want 2", n)
	}
	m, err := s.MaskedFiles(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(m[hosts])
	noSecrets(t, s, "masked copy", string(got))
}

func TestFormatHidesValues(t *testing.T) {
	s := mustLoad(t, []Spec{{Name: "GITHUB_TOKEN", Mode: ModeMask, InjectHosts: gh}}, map[string]string{"GITHUB_TOKEN": ghSecret})
	b := bindingNamed(t, s, "GITHUB_TOKEN")
	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x", "%d"} {
		for what, v := range map[string]any{"Set": s, "*Binding": b, "Binding": *b, "[]*Binding": s.Bindings()} {
			out := fmt.Sprintf(verb, v)
			if strings.Contains(out, ghSecret) || strings.Contains(out, b.Sentinel) {
				t.Errorf("fmt %s of %s shows the secret or sentinel", verb, what)
			}
			if !strings.Contains(out, "GITHUB_TOKEN") && verb != "%x" && verb != "%d" {
				t.Errorf("fmt %s of %s = %q, want the name", verb, what, out)
			}
		}
	}
}

func FuzzSplitArgv(f *testing.F) {
	for _, s := range []string{"a b", `sh -c "echo \"x\""`, "'a b' c", `a\ b`, "", "'", `"`, `\`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		argv, err := splitArgv(s)
		if err == nil && len(argv) == 0 {
			t.Fatalf("splitArgv(%q) = empty argv, no error", s)
		}
	})
}

// TestInjectHostsAnyCase: an inject host in any case or with a trailing dot
// binds the credential to its canonical host, as allowedDomains does.
func TestInjectHostsAnyCase(t *testing.T) {
	const secret = "ghp_anyCaseTestSecret0123456789abcdefgh"
	set, _, err := Load([]Spec{{Name: "GH", Mode: ModeMask, InjectHosts: []string{"API.GitHub.com."}}}, func(string) string { return secret })
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest("GET", "https://api.github.com/user", nil)
	req.Header.Set("Authorization", "Bearer "+set.Bindings()[0].Sentinel)
	if _, err := set.Apply(req, "api.github.com", false, false); err != nil {
		t.Fatalf("Apply to the bound host: %v", err)
	}
	if req.Header.Get("Authorization") != "Bearer "+secret {
		t.Errorf("the sentinel was not swapped for api.github.com")
	}
}
