package config

import (
	"encoding/json"
	"errors"
	"flag"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/moat-dev/moat/gateway/policy"
)

var update = flag.Bool("update", false, "rewrite golden files in testdata/")

// golden compares got with testdata file name, or rewrites it with -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update)", err)
	}
	if diff := cmp.Diff(string(want), got); diff != "" {
		t.Errorf("%s mismatch (-want +got):\n%s", name, diff)
	}
}

// fieldErrors flattens a joined error into its *FieldError leaves.
func fieldErrors(err error) []*FieldError {
	var out []*FieldError
	var walk func(error)
	walk = func(e error) {
		if j, ok := e.(interface{ Unwrap() []error }); ok {
			for _, c := range j.Unwrap() {
				walk(c)
			}
			return
		}
		var fe *FieldError
		if errors.As(e, &fe) {
			out = append(out, fe)
		}
	}
	walk(err)
	return out
}

func loadValid(t *testing.T, name string) *File {
	t.Helper()
	f, err := Load(filepath.Join("testdata", "valid", name))
	if err != nil {
		t.Fatalf("Load(%s): %v", name, err)
	}
	if err := f.Validate(); err != nil {
		t.Fatalf("Validate(%s): %v", name, err)
	}
	return f
}

// TestValidGolden loads every file of testdata/valid, which must parse,
// validate and compile, and compares its decoded form, policy spec and
// summary with goldens.
func TestValidGolden(t *testing.T) {
	names, _ := filepath.Glob("testdata/valid/*")
	if len(names) < 5 {
		t.Fatalf("found %d valid inputs", len(names))
	}
	for _, path := range names {
		name := filepath.Base(path)
		if strings.HasSuffix(name, ".golden") {
			continue
		}
		t.Run(name, func(t *testing.T) {
			f := loadValid(t, name)
			local := []netip.Addr{netip.MustParseAddr("192.0.2.1")}
			if _, err := f.Compile(local); err != nil {
				t.Fatalf("Compile: %v", err)
			}
			spec, err := f.PolicySpec(local)
			if err != nil {
				t.Fatal(err)
			}
			decoded, _ := json.MarshalIndent(f, "", "  ")
			specJSON, _ := json.MarshalIndent(struct {
				policy.Spec
				Ask bool
			}{spec, spec.Ask != nil}, "", "  ")
			golden(t, "valid/"+name+".golden",
				string(decoded)+"\n--- spec\n"+string(specJSON)+"\n--- summary\n"+f.Summary()+"\n")
		})
	}
}

// TestSrtFileUnchanged checks that a real srt settings file keeps every
// value it sets.
func TestSrtFileUnchanged(t *testing.T) {
	f := loadValid(t, "srt-settings.json")
	checks := []struct {
		name      string
		got, want any
	}{
		{"allowUnixSockets", f.Network.AllowUnixSockets, []string{"/var/run/docker.sock"}},
		{"ignoreViolations", f.IgnoreViolations, map[string][]string{"*": {"/usr/bin", "/System"}, "git push": {"/usr/bin/nc"}}},
		{"ripgrep", *f.Ripgrep, Ripgrep{Command: "rg", Args: []string{"--hidden"}, Argv0: "rg"}},
		{"httpProxyPort", *f.Network.HTTPProxyPort, 8888},
		{"depth", f.SearchDepth(), 5},
		{"reason", f.Network.DeniedDomainReasons["github.com:22"], "SSH pushes to GitHub are blocked; use an https remote"},
		{"extract", f.Credentials.Files[0].Extract, `oauth_token: (\S+)`},
		{"proxyPortRange", f.Windows.ProxyPortRange, []int{60080, 60089}},
		{"allowGitConfig", f.Filesystem.AllowGitConfig, true},
	}
	for _, c := range checks {
		if diff := cmp.Diff(c.want, c.got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", c.name, diff)
		}
	}
}

// TestInvalidGolden runs every file of testdata/invalid through Parse and
// Validate and compares the error text with its .err golden.
func TestInvalidGolden(t *testing.T) {
	names, _ := filepath.Glob("testdata/invalid/*")
	n := 0
	for _, path := range names {
		if strings.HasSuffix(path, ".err") {
			continue
		}
		n++
		name := filepath.Base(path)
		t.Run(name, func(t *testing.T) {
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			f, err := Parse(data, name)
			if err == nil {
				err = f.Validate()
				if err == nil {
					t.Fatalf("Parse and Validate(%s) accepted an invalid file", name)
				}
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("error does not wrap ErrInvalid: %v", err)
			}
			if strings.Contains(err.Error(), "hunter2") {
				t.Errorf("error repeats a secret: %v", err)
			}
			golden(t, "invalid/"+name+".err", err.Error()+"\n")
		})
	}
	if n < 10 {
		t.Fatalf("found %d invalid inputs", n)
	}
}

// TestParseErrors pins the paths and suggestions of decode errors.
func TestParseErrors(t *testing.T) {
	tests := []struct {
		name, in string
		want     []string // "path: msg substring"
	}{
		{"did you mean", "network:\n  allowedDomain: []\n", []string{`network.allowedDomain: unknown key; did you mean "allowedDomains"?`}},
		{"case only", "network:\n  strictAllowList: true\n", []string{`network.strictAllowList: unknown key; did you mean "strictAllowlist"?`}},
		{"wrong section", `{"allowedDomains": []}`, []string{`allowedDomains: unknown key; did you mean "network.allowedDomains"?`}},
		{"wrong section nested", "filesystem: {allowedDomains: []}", []string{`filesystem.allowedDomains: unknown key; did you mean "network.allowedDomains"?`}},
		{"no suggestion", "zzzzzz: 1\n", []string{`zzzzzz: unknown key`}},
		{"type in list", `{"network": {"allowedDomains": ["a.test", 7]}}`, []string{`network.allowedDomains[1]: expected string, got integer 7`}},
		{"bool", `{"network": {"strictAllowlist": "true"}}`, []string{`network.strictAllowlist: expected boolean (true or false), got string "true"`}},
		{"int", `{"network": {"httpProxyPort": 80.5}}`, []string{`network.httpProxyPort: expected integer, got number 80.5`}},
		{"int overflow", `{"mandatoryDenySearchDepth": 99999999999}`, []string{`mandatoryDenySearchDepth: integer 99999999999 is out of range`}},
		{"map of lists", `{"ignoreViolations": {"*": "x"}}`, []string{`ignoreViolations["*"]: expected list, got string "x"`}},
		{"object", `{"ripgrep": "rg"}`, []string{`ripgrep: expected a mapping, got string "rg"`}},
		{"deep", "network:\n  rules:\n    - allow:\n        - {method: 5}\n", []string{`network.rules[0].allow[0].method: expected string, got integer 5`}},
		{"dup", "audit: {path: a}\naudit: {path: b}\n", []string{`audit: duplicate key`}},
		{"dup nested", "audit: {path: a, path: b}\n", []string{`audit.path: duplicate key`}},
		{"dup map key", "network: {deniedDomainReasons: {a.test: x, a.test: y}}", []string{`network.deniedDomainReasons["a.test"]: duplicate key`}},
		{"two docs", "{}\n---\n{}\n", []string{`(document): a settings file holds one document`}},
		{"billion laughs", "", nil}, // replaced below
	}
	tests[len(tests)-1].in = mustRead(t, "testdata/invalid/billion-laughs.yaml")
	tests[len(tests)-1].want = []string{"network.allowedDomains[9]"}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.in), "s.yaml")
			if err == nil {
				t.Fatalf("Parse(%q) = nil error, want %q", tc.in, tc.want)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Parse(%q) = %q, want it to contain %q", tc.in, err, w)
				}
			}
			if fes := fieldErrors(err); len(fes) == 0 || len(fes) > maxErrors+1 || fes[0].File != "s.yaml" {
				t.Errorf("Parse errors %v do not name the file", fes)
			}
		})
	}
}

func mustRead(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestParseLine checks that a decode error carries the line of the key.
func TestParseLine(t *testing.T) {
	_, err := Parse([]byte("network:\n  allowedDomains: []\n  bogus: 1\n"), "x.yaml")
	fes := fieldErrors(err)
	if len(fes) != 1 || fes[0].Line != 3 || fes[0].Path != "network.bogus" {
		t.Fatalf("Parse errors = %+v, want one at line 3, network.bogus", fes)
	}
	if got, want := fes[0].Error(), `x.yaml:3: network.bogus: unknown key`; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
}

// TestEmpty checks that empty inputs are empty settings: valid, closed.
func TestEmpty(t *testing.T) {
	for _, in := range []string{"", "\n", "# c\n", "{}", "~", "null"} {
		f, err := Parse([]byte(in), "e")
		if err != nil {
			t.Fatalf("Parse(%q): %v", in, err)
		}
		if diff := cmp.Diff(&File{}, f); diff != "" {
			t.Errorf("Parse(%q) (-want +got):\n%s", in, diff)
		}
		p, err := f.Compile(nil)
		if err != nil {
			t.Fatalf("Compile(%q): %v", in, err)
		}
		if d := p.Decide(policy.Request{Proto: policy.ProtoConnect, Host: "example.com", Port: 443}); d.Verdict != policy.Deny {
			t.Errorf("empty settings: Decide(example.com) = %v, want deny", d.Verdict)
		}
	}
}

// TestValidateErrors pins one message per rule, by path.
func TestValidateErrors(t *testing.T) {
	tests := []struct {
		name, in  string
		path, msg string
	}{
		{"too broad", `{"network":{"allowedDomains":["a.test","b.test","*.com"]}}`, "network.allowedDomains[2]", `: "*.com" is too broad`},
		{"deny star ok, allow star not", `{"network":{"allowedDomains":["*"],"deniedDomains":["*"]}}`, "network.allowedDomains[0]", `"*"`},
		{"reason key", `{"network":{"deniedDomains":["a.test"],"deniedDomainReasons":{"b.test":"x"}}}`, `network.deniedDomainReasons["b.test"]`, "is not a network.deniedDomains entry"},
		{"cidr", `{"network":{"deniedResolvedAddresses":["10.0.0.0/33"]}}`, "network.deniedResolvedAddresses[0]", "is not a CIDR"},
		{"cidr host bits", `{"network":{"allowedResolvedAddresses":["10.1.2.3/16"]}}`, "network.allowedResolvedAddresses[0]", `"10.1.2.3/16": use "10.1.0.0/16"`},
		{"port", `{"network":{"httpProxyPort":65536}}`, "network.httpProxyPort", "port 65536 is out of range"},
		{"odd IPv4", `{"network":{"allowedDomains":["127.1:8080"]}}`, "network.allowedDomains[0]", `spell the address in dotted decimal: use "127.0.0.1:8080"`},
		{"socks alone", `{"network":{"socksProxyPort":1080}}`, "network.socksProxyPort", "moat chains only through HTTP proxies"},
		{"inject", `{"network":{"allowedDomains":["a.test"]},"credentials":{"envVars":[{"name":"T","mode":"mask","injectHosts":["a.test","x.test"]}]}}`, "credentials.envVars[0].injectHosts[1]", `"x.test" is not covered by network.allowedDomains`},
		{"inject wildcard covered", `{"network":{"allowedDomains":["*.a.test"]},"credentials":{"envVars":[{"name":"T","mode":"mask","injectHosts":["*.b.a.test","a.test"]}]}}`, "credentials.envVars[0].injectHosts[1]", `"a.test" is not covered`},
		{"dup rule id", `{"network":{"rules":[{"id":"r","host":"a.test"},{"id":"r","host":"b.test"}]}}`, "network.rules[1].id", `duplicate rule id "r" (also network.rules[0])`},
		{"glob", `{"network":{"rules":[{"host":"a.test","allow":[{"path":"/a/[b"}]}]}}`, "network.rules[0].allow[0].path", "is not a valid glob"},
		{"method", `{"network":{"rules":[{"host":"a.test","allow":[{"method":"get"}]}]}}`, "network.rules[0].allow[0].method", `"get": methods are case-sensitive: use "GET"`},
		{"budget", `{"network":{"budgets":[{"host":"a.test","bytesDown":-1}]}}`, "network.budgets[0].bytesDown", "-1 is negative"},
		{"dns", `{"dns":{"servers":["one.one.one.one"]}}`, "dns.servers[0]", "must be an IP or IP:port"},
		{"duration", `{"dns":{"timeout":"soon"}}`, "dns.timeout", `"soon" is not a duration`},
		{"depth", `{"mandatoryDenySearchDepth":11}`, "mandatoryDenySearchDepth", "11 is out of range: use 0..10"},
		{"git refs", `{"network":{"git":[{"host":"github.com","push":[{"repo":"o/r"}]}]}}`, "network.git[0].push[0].refs", "is empty"},
		{"reason newline", `{"network":{"deniedDomains":["a.test"],"deniedDomainReasons":{"a.test":"x\ndeny write /etc"}}}`, `network.deniedDomainReasons["a.test"]`, "contains a control character"},
		{"strict and all", `{"network":{"strictAllowlist":true,"allowAllDomains":true}}`, "network.allowAllDomains", "contradicts"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f, err := Parse([]byte(tc.in), "v")
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			err = f.Validate()
			for _, fe := range fieldErrors(err) {
				if fe.Path == tc.path && strings.Contains(fe.Error(), tc.msg) {
					return
				}
			}
			t.Errorf("Validate(%s) = %v\nwant an error at %s containing %q", tc.in, err, tc.path, tc.msg)
		})
	}
}

// TestValidateJoinsEverything checks that one Validate reports every
// problem, not only the first.
func TestValidateJoinsEverything(t *testing.T) {
	f, err := Parse([]byte(mustRead(t, "testdata/invalid/credentials.yaml")), "c")
	if err != nil {
		t.Fatal(err)
	}
	if n := len(fieldErrors(f.Validate())); n < 15 {
		t.Errorf("Validate reported %d problems, want at least 15", n)
	}
	if err := (*File)(nil).Validate(); err == nil {
		t.Error("nil File validated")
	}
	if _, err := (&File{MandatoryDenySearchDepth: new(int(-1))}).Compile(nil); err == nil {
		t.Error("Compile of an invalid File succeeded")
	}
}

// TestPolicySpec checks the mapping from settings to the policy core.
func TestPolicySpec(t *testing.T) {
	in := `
network:
  allowedDomains: [a.test, "*.b.test", c.test]
  deniedDomains: [bad.a.test]
  deniedDomainReasons: {bad.a.test: "no"}
  strictAllowlist: true
  deniedResolvedAddresses: [203.0.113.7, "2001:db8::/32"]
  allowedResolvedAddresses: [10.1.0.0/16]
  tlsTerminate: {excludeDomains: [c.test]}
  rules: [{host: a.test}]
  git: [{host: "*.b.test"}, {host: a.test}]
credentials:
  envVars:
    - {name: T, mode: mask, injectHosts: [x.b.test]}
    - {name: U, mode: deny, injectHosts: [c.test]}
`
	f, err := Parse([]byte(in), "p")
	if err != nil {
		t.Fatal(err)
	}
	local := []netip.Addr{netip.MustParseAddr("192.0.2.1")}
	got, err := f.PolicySpec(local)
	if err != nil {
		t.Fatal(err)
	}
	want := policy.Spec{
		Allow:        []string{"a.test", "*.b.test", "c.test"},
		Deny:         []string{"bad.a.test"},
		DenyReasons:  map[string]string{"bad.a.test": "no"},
		Strict:       true,
		Inspect:      []string{"a.test", "*.b.test", "x.b.test"},
		InspectAll:   true,
		NoInspect:    []string{"c.test"},
		DeniedAddrs:  []netip.Prefix{netip.MustParsePrefix("203.0.113.7/32"), netip.MustParsePrefix("2001:db8::/32")},
		AllowedAddrs: []netip.Prefix{netip.MustParsePrefix("10.1.0.0/16")},
		LocalAddrs:   local,
	}
	if diff := cmp.Diff(want, got, cmp.Comparer(func(a, b netip.Prefix) bool { return a == b }), cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); diff != "" {
		t.Errorf("PolicySpec (-want +got):\n%s", diff)
	}

	p, err := f.Compile(local)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		host string
		want policy.Verdict
	}{
		{"a.test", policy.Inspect},
		{"bad.a.test", policy.Deny},
		{"c.test", policy.Allow}, // excluded from termination
		{"other.test", policy.Deny},
	} {
		if d := p.Decide(policy.Request{Proto: policy.ProtoConnect, Host: tc.host, Port: 443}); d.Verdict != tc.want {
			t.Errorf("Decide(%s) = %v (%s), want %v", tc.host, d.Verdict, d.Reason, tc.want)
		}
	}
}

// TestMaskDefaultsToAllowed checks that a masked credential without
// injectHosts makes every allowed host inspected, and allowAllDomains
// becomes an allowing ask hook.
func TestMaskDefaultsToAllowed(t *testing.T) {
	f, err := Parse([]byte(`{"network":{"allowedDomains":["a.test","b.test:8443"],"allowAllDomains":true,"deniedDomains":["d.test"]},"credentials":{"envVars":[{"name":"T","mode":"mask"}]}}`), "m")
	if err != nil {
		t.Fatal(err)
	}
	s, err := f.PolicySpec(nil)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"a.test", "b.test:8443"}, s.Inspect); diff != "" {
		t.Errorf("Inspect (-want +got):\n%s", diff)
	}
	p, err := policy.New(s)
	if err != nil {
		t.Fatal(err)
	}
	for host, want := range map[string]policy.Verdict{"anything.test": policy.Allow, "d.test": policy.Deny, "a.test": policy.Inspect} {
		if d := p.Decide(policy.Request{Proto: policy.ProtoConnect, Host: host, Port: 443}); d.Verdict != want {
			t.Errorf("allowAllDomains: Decide(%s) = %v, want %v", host, d.Verdict, want)
		}
	}
}

// TestDefault checks the built-in default policy.
func TestDefault(t *testing.T) {
	f := Default()
	if err := f.Validate(); err != nil {
		t.Fatalf("Default().Validate(): %v", err)
	}
	if len(f.Network.AllowedDomains) != 0 || f.Network.AllowAllDomains {
		t.Errorf("default network is not closed: %+v", f.Network)
	}
	if diff := cmp.Diff([]string{"."}, f.Filesystem.AllowWrite); diff != "" || !f.Filesystem.PrivateTmp {
		t.Errorf("default writes (-want +got):\n%s private tmp %v", diff, f.Filesystem.PrivateTmp)
	}
	for _, must := range []string{"~/.ssh", "~/.aws", "~/.gnupg", "~/.config/gcloud", "~/.azure", "~/.kube", "~/.docker/config.json", "~/.netrc", "~/.git-credentials", "~/.config/gh", "~/.npmrc", "~/.pypirc", "~/.cargo/credentials*"} {
		found := false
		for _, d := range f.Filesystem.DenyRead {
			found = found || d == must
		}
		if !found {
			t.Errorf("default denyRead lacks %s", must)
		}
	}
	if f.SearchDepth() != 3 {
		t.Errorf("default SearchDepth = %d, want 3", f.SearchDepth())
	}
	Default().Filesystem.DenyRead[0] = "changed"
	if DefaultDenyRead[0] != "~/.ssh" {
		t.Error("Default shares its slice with DefaultDenyRead")
	}
	golden(t, "default.summary", f.Summary()+"\n")
}

// TestFind checks the search order with real files in temp directories.
func TestFind(t *testing.T) {
	root := t.TempDir()
	cwd, home := filepath.Join(root, "cwd"), filepath.Join(root, "home")
	explicit := filepath.Join(root, "explicit.yaml")
	envFile := filepath.Join(root, "env.yaml")
	local := filepath.Join(cwd, ".moat.yaml")
	user := filepath.Join(home, ".config", "moat", "settings.yaml")
	srt := filepath.Join(home, ".srt-settings.json")
	for _, p := range []string{explicit, envFile, local, user, srt} {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("{}"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	env := map[string]string{EnvSettings: envFile}
	getenv := func(k string) string { return env[k] }
	steps := []struct {
		explicit, want string
		remove         string // removed after this step
	}{
		{explicit, explicit, ""},
		{"", envFile, ""},
	}
	for _, s := range steps {
		got, err := Find(s.explicit, getenv, cwd, home)
		if err != nil || got != s.want {
			t.Errorf("Find(%q) = %q, %v; want %q", s.explicit, got, err, s.want)
		}
	}
	delete(env, EnvSettings)
	for _, next := range []struct{ want, remove string }{{local, local}, {user, user}, {srt, srt}, {"", ""}} {
		got, err := Find("", getenv, cwd, home)
		if err != nil || got != next.want {
			t.Errorf("Find = %q, %v; want %q", got, err, next.want)
		}
		if next.remove != "" {
			os.Remove(next.remove)
		}
	}
	// A missing explicit or $MOAT_SETTINGS file is an error, never a fallback.
	os.WriteFile(srt, []byte("{}"), 0o644)
	missing := filepath.Join(root, "missing.yaml")
	if got, err := Find(missing, getenv, cwd, home); !errors.Is(err, ErrNotFound) {
		t.Errorf("Find(missing) = %q, %v; want ErrNotFound", got, err)
	}
	env[EnvSettings] = missing
	if got, err := Find("", getenv, cwd, home); !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "$MOAT_SETTINGS") {
		t.Errorf("Find($MOAT_SETTINGS missing) = %q, %v; want ErrNotFound", got, err)
	}
	if _, err := Find(root, getenv, cwd, home); err == nil {
		t.Error("Find(directory) succeeded")
	}
}

// TestResolve runs Resolve in a temp cwd with a temp HOME.
func TestResolve(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	t.Setenv("HOME", filepath.Join(dir, "home"))
	t.Setenv(EnvSettings, "")
	f, src, err := Resolve("")
	if err != nil || src != "built-in default" || !f.Filesystem.PrivateTmp {
		t.Fatalf("Resolve() = %+v, %q, %v; want the default", f, src, err)
	}
	if err := os.WriteFile(".moat.yaml", []byte("network: {allowedDomains: [a.test]}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	f, src, err = Resolve("")
	if err != nil || !strings.HasSuffix(src, ".moat.yaml") || f.Network.AllowedDomains[0] != "a.test" {
		t.Fatalf("Resolve() = %+v, %q, %v; want ./.moat.yaml", f, src, err)
	}
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(bad, []byte("network: {allowedDomains: ['*.com']}\n"), 0o644)
	if _, _, err := Resolve(bad); err == nil || !strings.HasPrefix(err.Error(), bad+": network.allowedDomains[0]: ") {
		t.Errorf("Resolve(bad) = %v; want an error naming the file and path", err)
	}
	if _, _, err := Resolve(filepath.Join(dir, "nope.yaml")); !errors.Is(err, ErrNotFound) {
		t.Errorf("Resolve(missing) = %v; want ErrNotFound", err)
	}
	unreadable := filepath.Join(dir, "unreadable.yaml")
	os.WriteFile(unreadable, []byte("{}"), 0o000)
	if os.Getuid() != 0 { // root reads anything
		if _, _, err := Resolve(unreadable); err == nil {
			t.Error("Resolve(unreadable) succeeded")
		}
	}
	if _, err := Load(dir); err == nil {
		t.Error("Load(directory) succeeded")
	}
}

// TestParseBounds checks that alias expansion and error count are bounded.
func TestParseBounds(t *testing.T) {
	// Each level multiplies by 8 through the schema's nested lists.
	in := `m: &m [GET, GET, GET, GET, GET, GET, GET, GET]
l: &l [{method: *m}, {method: *m}, {method: *m}, {method: *m}, {method: *m}, {method: *m}, {method: *m}, {method: *m}]
r: &r {host: a.test, allow: *l, deny: *l}
network:
  rules: [*r, *r, *r, *r, *r, *r, *r, *r]
  allowedDomains: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44, 45, 46, 47, 48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 58, 59, 60]
`
	_, err := Parse([]byte(in), "b")
	fes := fieldErrors(err)
	if len(fes) != maxErrors+1 || !strings.Contains(fes[maxErrors].Msg, "too many errors") {
		t.Errorf("Parse reported %d errors, want %d ending in \"too many errors\"", len(fes), maxErrors+1)
	}

	// 120 × 120 × 120 method entries through aliases exceed the node budget.
	rep := func(x string) string { return "[" + strings.TrimSuffix(strings.Repeat(x+", ", 120), ", ") + "]" }
	in = "m: &m " + rep("GET") + "\nl: &l " + rep("{method: *m}") + "\nr: &r {host: a.test, allow: *l}\nnetwork: {rules: " + rep("*r") + "}\n"
	_, err = Parse([]byte(in), "b")
	if err == nil || !strings.Contains(err.Error(), "document is too large") {
		t.Errorf("alias expansion: Parse = %v, want \"document is too large\"", err)
	}
}

// TestNonCanonicalSpellingsLoad: srt matches hosts case-insensitively, so
// an srt file may spell them any way that canonicalises; each entry then
// decides exactly like its canonical form.
func TestNonCanonicalSpellingsLoad(t *testing.T) {
	f, err := Parse([]byte(`{"network":{"allowedDomains":["GitHub.com", "api.Example.COM.", "[0:0::1]:8080"],
		"deniedDomains":["Evil.GitHub.com"], "deniedDomainReasons":{"Evil.GitHub.com":"not this one"}}}`), "srt.json")
	if err != nil {
		t.Fatal(err)
	}
	spec, err := f.PolicySpec(nil)
	if err != nil {
		t.Fatalf("an srt file with non-canonical host spellings did not load: %v", err)
	}
	pol, err := policy.New(spec)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		host string
		port uint16
		want policy.Verdict
	}{
		{"github.com", 443, policy.Allow},
		{"api.example.com", 443, policy.Allow},
		{"::1", 8080, policy.Allow},
		{"::1", 8081, policy.Deny},
		{"evil.github.com", 443, policy.Deny},
		{"other.test", 443, policy.Deny},
	} {
		if d := pol.Decide(policy.Request{Proto: policy.ProtoConnect, Host: tc.host, Port: tc.port}); d.Verdict != tc.want {
			t.Errorf("%s:%d = %v (%s), want %v", tc.host, tc.port, d.Verdict, d.Reason.Code(), tc.want)
		}
	}
	d := pol.Decide(policy.Request{Proto: policy.ProtoConnect, Host: "evil.github.com", Port: 443})
	if !strings.Contains(d.Message, "not this one") {
		t.Errorf("the reason keyed by the deny entry as written was lost: %+v", d)
	}
}
