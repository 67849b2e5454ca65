package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/moat-dev/moat/sandbox"
)

func TestMain(m *testing.M) {
	sandbox.MaybeInit()
	os.Exit(m.Run())
}

func moat(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(context.Background(), args, strings.NewReader(""), &out, &errb)
	return out.String(), errb.String(), code
}

func settingsFile(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "s.yaml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestCheckExitCodes(t *testing.T) {
	s := settingsFile(t, "network:\n  allowedDomains: [\"example.com\", \"10.0.0.5\"]\n  deniedDomains: [\"bad.example.com\"]\n")
	for _, tc := range []struct {
		target string
		code   int
		want   string
	}{
		{"example.com", 0, "allow example.com:443"},
		{"https://EXAMPLE.com./x?q=1", 0, "allow example.com:443"},
		{"http://example.com", 0, "allow example.com:80"},
		{"example.com:8443", 0, "allow example.com:8443"},
		{"167772165:80", 0, "allow 10.0.0.5:80"},
		{"bad.example.com", 1, `to allow: remove "bad.example.com" from network.deniedDomains`},
		{"other.test", 1, `to allow: add "other.test" to network.allowedDomains`},
		{"example.com:0", 2, "bad port"},
		{"example.com:", 2, "bad port"},
	} {
		out, errs, code := moat(t, "check", "--settings", s, tc.target)
		if code != tc.code || !strings.Contains(out+errs, tc.want) {
			t.Errorf("moat check %s: exit %d, output %q %q; want exit %d and %q", tc.target, code, out, errs, tc.code, tc.want)
		}
	}
}

func TestCheckJSONCanonical(t *testing.T) {
	s := settingsFile(t, "network:\n  allowedDomains: [\"127.0.0.1\", \"[::1]\"]\n")
	for _, sp := range []string{"2130706433", "0x7f000001", "0177.0.0.1", "127.1", "0x7f.1", "[::ffff:127.0.0.1]"} {
		out, _, code := moat(t, "check", "--settings", s, "--json", sp+":80")
		var r checkResult
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatalf("%s: %v %q", sp, err, out)
		}
		if r.Host != "127.0.0.1" || r.Verdict != "allow" || code != 0 {
			t.Errorf("check %s = %+v exit %d, want host 127.0.0.1 allow", sp, r, code)
		}
	}
}

func TestSettingsErrors(t *testing.T) {
	_, errs, code := moat(t, "check", "--settings", "/nonexistent/moat.yaml", "example.com")
	if code != 2 || !strings.Contains(errs, "/nonexistent/moat.yaml") {
		t.Errorf("missing --settings: exit %d, %q; want 2 naming the path", code, errs)
	}
	unreadable := settingsFile(t, "network: {}\n")
	os.Chmod(unreadable, 0)
	if os.Geteuid() != 0 { // root reads anything
		if _, _, code := moat(t, "check", "--settings", unreadable, "example.com"); code != 2 {
			t.Errorf("unreadable settings: exit %d, want 2", code)
		}
	}
	bad := settingsFile(t, "network:\n  allowedDomain: [\"x.test\"]\n")
	out, _, code := moat(t, "policy", "validate", bad)
	if code != 2 || !strings.Contains(out, `did you mean "allowedDomains"`) {
		t.Errorf("validate unknown key: exit %d\n%s", code, out)
	}
	bad = settingsFile(t, "network:\n  allowedDomains: [\"*.co\"]\n  deniedDomains: [\"*.com\", \"x:0\"]\n")
	out, _, code = moat(t, "policy", "validate", bad)
	if code != 2 || !strings.Contains(out, "network.allowedDomains[0]") || !strings.Contains(out, "network.deniedDomains[0]") ||
		!strings.Contains(out, "network.deniedDomains[1]") {
		t.Errorf("validate: problem without dotted path:\n%s", out)
	}
	// Any spelling that canonicalises loads (srt files must), and the
	// summary shows what the policy matches.
	good := settingsFile(t, "network:\n  allowedDomains: [\"Example.COM.\"]\n")
	out, _, code = moat(t, "policy", "validate", good)
	if code != 0 || !strings.HasPrefix(out, "ok ") || !strings.Contains(out, "example.com") {
		t.Errorf("validate good: exit %d\n%s", code, out)
	}
}

func TestUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"nosuchcommand"},
		{"gateway"},
		{"gateway", "--listen", "127.0.0.1:0"},
		{"gateway", "--listen", "127.0.0.1:0", "--no-auth", "--token-file", "x"},
		{"gateway", "--listen", "nonsense", "--no-auth"},
		{"run"},
		{"run", "-c", "true", "--", "true"},
		{"check"},
		{"check", "--bogus", "x"},
		{"proxy-connect", "host", "0"},
	} {
		_, errs, code := moat(t, args...)
		if code != 2 || errs == "" {
			t.Errorf("moat %v: exit %d, stderr %q; want 2 with a message", args, code, errs)
		}
	}
	// --no-auth off loopback is refused before anything says it listens.
	for _, args := range [][]string{
		{"gateway", "--listen", "0.0.0.0:0", "--no-auth"},
		{"gateway", "--listen", "127.0.0.1:0", "--listen", "0.0.0.0:0", "--no-auth"},
	} {
		out, errs, code := moat(t, args...)
		if code != 2 || !strings.Contains(errs, "--no-auth serves only loopback") || strings.Contains(out, "listening") {
			t.Errorf("moat %v: exit %d, stdout %q, stderr %q", args, code, out, errs)
		}
	}
}

func TestVersion(t *testing.T) {
	out, _, code := moat(t, "version")
	if code != 0 || !strings.HasPrefix(out, "moat ") {
		t.Errorf("version: %q %d", out, code)
	}
}

func TestTokenFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "tokens")
	os.WriteFile(p, []byte("# team\ntinytok ci\n"), 0o600)
	_, _, err := readTokens(p)
	if err == nil || strings.Contains(err.Error(), "tinytok") {
		t.Errorf("short token: err %v (must refuse without echoing the token)", err)
	}
	os.WriteFile(p, []byte("0123456789abcdef0123 ci-1 /etc/ci.yaml\nfedcba9876543210fedc\n"), 0o600)
	toks, per, err := readTokens(p)
	if err != nil || toks["0123456789abcdef0123"] != "ci-1" || toks["fedcba9876543210fedc"] != "client-2" || per["ci-1"] != "/etc/ci.yaml" {
		t.Errorf("readTokens = %v, %v, %v", toks, per, err)
	}
	// A client file may not set gateway-wide keys.
	cf := settingsFile(t, "network:\n  allowedDomains: [\"a.test\"]\n  rules: [{id: r, host: a.test, allow: [{method: GET, path: \"/**\"}]}]\n")
	if _, err := clientPolicies(map[string]string{"ci-1": cf}); err == nil || !strings.Contains(err.Error(), "network.rules") {
		t.Errorf("client settings with rules: %v, want a refusal naming network.rules", err)
	}
}

// TestExamplesValidate keeps examples/ loadable.
func TestExamplesValidate(t *testing.T) {
	files, _ := filepath.Glob("../../examples/*.yaml")
	if len(files) == 0 {
		t.Fatal("no examples found")
	}
	for _, f := range files {
		if out, _, code := moat(t, "policy", "validate", f); code != 0 {
			t.Errorf("%s:\n%s", f, out)
		}
	}
}

func TestCACommands(t *testing.T) {
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	out, errs, code := moat(t, "ca", "show")
	if code != 2 || !strings.Contains(errs, "moat ca init") {
		t.Errorf("ca show before init: exit %d %q, want 2 and a hint to run moat ca init", code, errs)
	}
	out, _, code = moat(t, "ca", "init")
	if code != 0 || !strings.Contains(out, "CA ready") {
		t.Fatalf("ca init: %d %q", code, out)
	}
	path, _, _ := moat(t, "ca", "path")
	path = strings.TrimSpace(path)
	key := filepath.Join(filepath.Dir(path), "key.pem")
	if fi, err := os.Stat(key); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("CA key %s: %v mode %v, want 0600", key, err, fi.Mode().Perm())
	}
	pem, _, _ := moat(t, "ca", "export")
	certFile, _ := os.ReadFile(path)
	if !strings.HasPrefix(pem, "-----BEGIN CERTIFICATE-----") || pem != string(certFile) || strings.Contains(pem, "PRIVATE KEY") {
		t.Errorf("ca export is not exactly the certificate")
	}
	out, _, code = moat(t, "ca", "show")
	if code != 0 || !strings.Contains(out, "sha256: ") {
		t.Errorf("ca show: %d %q", code, out)
	}
	again, _, _ := moat(t, "ca", "export")
	if again != pem {
		t.Errorf("a second init/export changed the CA")
	}
}

// TestCheckPerRequestRules: --method and a URL path are judged by the
// per-request rules of an inspected host.
func TestCheckPerRequestRules(t *testing.T) {
	ex := "../../examples/github-push-one-repo.yaml"
	if out, _, code := moat(t, "check", "--settings", ex, "--method", "POST", "https://api.github.com/repos/o/r/pulls"); code != 1 || !strings.Contains(out, "rule-no-match") {
		t.Errorf("POST to a read-only API: exit %d\n%s", code, out)
	}
	if out, _, code := moat(t, "check", "--settings", ex, "https://api.github.com/repos/o/r"); code != 0 || !strings.Contains(out, "github-api-readonly") {
		t.Errorf("GET to a read-only API: exit %d\n%s", code, out)
	}
	if out, _, code := moat(t, "check", "--settings", ex, "--method", "GET", "https://api.github.com/repos/o/r/actions/runs"); code != 1 {
		t.Errorf("GET of a denied path: exit %d\n%s", code, out)
	}
}

func TestAuditCommand(t *testing.T) {
	log := filepath.Join(t.TempDir(), "audit.jsonl")
	os.WriteFile(log, []byte(`{"v":1,"time":"2026-12-01T22:00:00Z","client":"c1","proto":"connect","host":"evil.test","port":443,"verdict":"deny","reason":"blocked-by-allowlist","bytes_up":0,"bytes_down":0,"duration_ms":0}
{"v":1,"time":"2026-12-01T22:00:01Z","client":"c2","proto":"mitm","host":"api.github.com","port":443,"verdict":"allow","method":"GET","path":"/repos/o/r","status":200,"bytes_up":1,"bytes_down":2,"duration_ms":1}

{"v":1,"time":"2026-12-01T22:00:02Z","client":"c1","proto":"http","host":"a.github.com","port":80,"verdict":"deny","reason":"blocked-by-allowlist","bytes_up":0,"bytes_down":0,"duration_ms":0}
`), 0o600)
	for _, tc := range []struct {
		args      []string
		want, not []string
	}{
		{[]string{"audit", log}, []string{"evil.test:443 blocked-by-allowlist client=c1", "api.github.com:443 GET /repos/o/r 200", "a.github.com:80"}, nil},
		{[]string{"audit", "--deny", log}, []string{"evil.test", "a.github.com"}, []string{"api.github.com"}},
		{[]string{"audit", "--client", "c2", log}, []string{"api.github.com"}, []string{"evil.test"}},
		{[]string{"audit", "--host", "*.github.com:80", log}, []string{"a.github.com"}, []string{"api.github.com", "evil.test"}},
		{[]string{"audit", "--summary", log}, []string{"3 events: 1 allow, 2 deny, 0 inspect", "denied 1x evil.test:443"}, nil},
		{[]string{"audit", "--json", "--verdict", "allow", log}, []string{`{"v":1,"time":"2026-12-01T22:00:01Z","client":"c2"`}, []string{"evil.test"}},
	} {
		out, errs, code := moat(t, tc.args...)
		if code != 0 {
			t.Errorf("moat %v: exit %d, %s", tc.args, code, errs)
		}
		for _, w := range tc.want {
			if !strings.Contains(out, w) {
				t.Errorf("moat %v: want %q in\n%s", tc.args, w, out)
			}
		}
		for _, w := range tc.not {
			if strings.Contains(out, w) {
				t.Errorf("moat %v: %q should be filtered out of\n%s", tc.args, w, out)
			}
		}
	}
	bad := filepath.Join(t.TempDir(), "bad.jsonl")
	os.WriteFile(bad, []byte("{\"v\":1,\"proto\":\"http\",\"host\":\"x\",\"verdict\":\"allow\"}\nnot json\n{\"v\":7}\n"), 0o600)
	if _, errs, code := moat(t, "audit", bad); code != 1 || !strings.Contains(errs, "bad.jsonl:2") || !strings.Contains(errs, "bad.jsonl:3: schema version 7") {
		t.Errorf("malformed lines: exit %d, stderr %q", code, errs)
	}
	// A forged line cannot drive the terminal; an overlong line is skipped,
	// and the lines after it are still read.
	forged := filepath.Join(t.TempDir(), "forged.jsonl")
	long := `{"v":1,"proto":"http","host":"` + strings.Repeat("x", 2<<20) + `","verdict":"deny"}`
	os.WriteFile(forged, []byte(long+"\n"+`{"v":1,"proto":"http","host":"a\u001b[2Jb\u202e.test","verdict":"deny"}`+"\n"), 0o600)
	out, errs, code := moat(t, "audit", "--summary", forged)
	if code != 1 || !strings.Contains(errs, "forged.jsonl:1: line longer than") || strings.ContainsAny(out, "\x1b\u202e") || !strings.Contains(out, "a?[2Jb?.test") {
		t.Errorf("forged log: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	for _, args := range [][]string{{"audit", "/nonexistent.jsonl"}, {"audit", "--host", "*.com", log}, {"audit", "--verdict", "maybe", log}} {
		if _, errs, code := moat(t, args...); code != 2 || errs == "" {
			t.Errorf("moat %v: exit %d, stderr %q; want 2", args, code, errs)
		}
	}
}

func TestAllowCannotReopenForcedDenies(t *testing.T) {
	cfg := t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", cfg)
	key := filepath.Join(cfg, "moat", "ca", "key.pem")
	os.MkdirAll(filepath.Dir(key), 0o700)
	os.WriteFile(key, []byte("k"), 0o600)
	s := settingsFile(t, fmt.Sprintf("filesystem:\n  allowRead: [%q]\n", key))
	_, errs, code := moat(t, "plan", "--settings", s, "--", "true")
	if code != 2 || !strings.Contains(errs, "filesystem.allowRead") || !strings.Contains(errs, "always hidden") {
		t.Errorf("allowRead of the CA key: exit %d, %q; want 2 naming the field", code, errs)
	}
	_, errs, code = moat(t, "plan", "--allow-write", key, "--", "true")
	if code != 2 || !strings.Contains(errs, "--allow-write") {
		t.Errorf("--allow-write of the CA key: exit %d, %q", code, errs)
	}
	// A parent is shorter than the deny: allowed, and the key stays hidden.
	if out, errs, code := moat(t, "plan", "--allow-write", filepath.Dir(key), "--", "true"); code != 0 || !strings.Contains(out, key) {
		t.Errorf("--allow-write of the CA directory: exit %d, %q\n%s", code, errs, out)
	}
}
