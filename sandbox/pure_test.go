package sandbox

import (
	"flag"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var update = flag.Bool("update", false, "rewrite golden files in testdata/")

func envMap(env []string) map[string]string {
	m := map[string]string{}
	for _, e := range env {
		k, v, _ := strings.Cut(e, "=")
		m[k] = v
	}
	return m
}

func TestProxyEnv(t *testing.T) {
	base := []string{"PATH=/bin", "HTTP_PROXY=http://u:p@evil:1", "MOAT_GATEWAY_TOKEN=tok", "MOAT_SETTINGS=/x.yaml", "HOME=/h"}
	got := envMap(ProxyEnv(base, EnvOptions{Self: "/usr/bin/moat", TmpDir: "/tmp/t", TrustBundle: "/run/moat/ca.pem"}))
	want := map[string]string{
		"PATH": "/bin", "HOME": "/h", "MOAT_SETTINGS": "/x.yaml",
		"HTTP_PROXY": "http://localhost:3128", "http_proxy": "http://localhost:3128",
		"HTTPS_PROXY": "http://localhost:3128", "https_proxy": "http://localhost:3128",
		"ALL_PROXY": "http://localhost:3128", "all_proxy": "http://localhost:3128",
		"GRPC_PROXY": "http://localhost:3128", "grpc_proxy": "http://localhost:3128",
		"FTP_PROXY": "socks5h://localhost:1080", "ftp_proxy": "socks5h://localhost:1080",
		"RSYNC_PROXY":       "localhost:1080",
		"DOCKER_HTTP_PROXY": "http://localhost:3128", "DOCKER_HTTPS_PROXY": "http://localhost:3128",
		"CLOUDSDK_PROXY_TYPE": "http", "CLOUDSDK_PROXY_ADDRESS": "localhost", "CLOUDSDK_PROXY_PORT": "3128",
		"NO_PROXY": "localhost,127.0.0.1,::1", "no_proxy": "localhost,127.0.0.1,::1",
		"GIT_SSH_COMMAND": "ssh -o ProxyCommand='/usr/bin/moat proxy-connect %h %p'",
		"SANDBOX_RUNTIME": "1", "MOAT_SANDBOX": "1", "TMPDIR": "/tmp/t",
		"JAVA_TOOL_OPTIONS": "-Dhttp.proxyHost=localhost -Dhttp.proxyPort=3128 -Dhttps.proxyHost=localhost -Dhttps.proxyPort=3128 -Dhttp.nonProxyHosts=localhost|127.0.0.1|[::1]",
	}
	for _, v := range caVars {
		want[v] = "/run/moat/ca.pem"
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("ProxyEnv mismatch (-want +got):\n%s", d)
	}
	if n := len(ProxyEnv([]string{"HTTP_PROXY=a", "HTTP_PROXY=b"}, EnvOptions{})); n != len(ProxyEnv(nil, EnvOptions{})) {
		t.Errorf("duplicate HTTP_PROXY in base: got %d entries, want no duplicates", n)
	}
}

func TestRedactEnv(t *testing.T) {
	got := redactEnv([]string{"GITHUB_TOKEN=ghp_x", "AWS_SECRET_ACCESS_KEY=y", "DB_PASSWORD=z", "PATH=/bin"})
	want := []string{"GITHUB_TOKEN=<redacted>", "AWS_SECRET_ACCESS_KEY=<redacted>", "DB_PASSWORD=<redacted>", "PATH=/bin"}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("redactEnv (-want +got):\n%s", d)
	}
}

func mkTree(t *testing.T, root string, paths ...string) {
	t.Helper()
	for _, p := range paths {
		full := filepath.Join(root, p)
		if strings.HasSuffix(p, "/") {
			if err := os.MkdirAll(full, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestMandatoryDenies(t *testing.T) {
	root := t.TempDir()
	mkTree(t, root, ".bashrc", ".git/hooks/", ".git/config", "a/.mcp.json", "a/b/.vscode/",
		"a/b/c/.zshrc", "node_modules/x/.bashrc", "a/.claude/commands/", "a/.git/config")
	rel := func(ps []string) []string {
		var out []string
		for _, p := range ps {
			r, _ := filepath.Rel(root, p)
			out = append(out, r)
		}
		return out
	}
	cases := []struct {
		name          string
		depth         int
		gitConfig     bool
		wantExisting  []string
		wantMissingIn []string // a sample that must be missing at the root
	}{
		{"depth 3", 3, false, []string{".bashrc", ".git/config", ".git/hooks", "a/.claude/commands", "a/.git/config", "a/.mcp.json", "a/b/.vscode"}, []string{".gitconfig", ".mcp.json", ".vscode", ".claude"}},
		{"depth 4 reaches c", 4, false, []string{".bashrc", ".git/config", ".git/hooks", "a/.claude/commands", "a/.git/config", "a/.mcp.json", "a/b/.vscode", "a/b/c/.zshrc"}, nil},
		{"depth 0 roots only", 0, false, []string{".bashrc", ".git/config", ".git/hooks"}, nil},
		{"negative is 0", -2, false, []string{".bashrc", ".git/config", ".git/hooks"}, nil},
		{"allowGitConfig", 1, true, []string{".bashrc", ".git/hooks"}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ex, miss := MandatoryDenies([]string{root}, tc.depth, tc.gitConfig)
			if d := cmp.Diff(tc.wantExisting, rel(ex)); d != "" {
				t.Errorf("existing (-want +got):\n%s", d)
			}
			m := map[string]bool{}
			for _, p := range rel(miss) {
				m[p] = true
			}
			for _, w := range tc.wantMissingIn {
				if !m[w] {
					t.Errorf("missing = %v, want it to include %s", rel(miss), w)
				}
			}
			if m[".git"] || m[".git/hooks"] {
				t.Errorf("missing = %v: .git exists, only absent names belong there", rel(miss))
			}
		})
	}
}

func TestSeccompRules(t *testing.T) {
	has := func(rs []SeccompRule, name string, val uint64) bool {
		for _, r := range rs {
			if r.Syscall == name && (val == 0 || r.Value == val) {
				return true
			}
		}
		return false
	}
	rs := SeccompRules(false)
	for _, n := range []string{"io_uring_setup", "io_uring_enter", "io_uring_register", "setns", "mount", "umount2",
		"mount_setattr", "move_mount", "open_tree", "fsopen", "fsmount", "fsconfig", "fspick", "pivot_root",
		"ptrace", "process_vm_writev", "bpf", "keyctl", "add_key", "request_key", "perf_event_open"} {
		if !has(rs, n, 0) {
			t.Errorf("SeccompRules(false) has no rule for %s", n)
		}
	}
	for _, c := range []struct {
		name string
		val  uint64
	}{{"socket", afUNIX}, {"socket", afVSOCK}, {"socketpair", afUNIX}, {"unshare", 0x10000000}, {"clone", 0x10000000}, {"clone", 0x40000000}, {"unshare", cloneNewTime}} {
		if !has(rs, c.name, c.val) {
			t.Errorf("SeccompRules(false) has no rule %s(%#x)", c.name, c.val)
		}
	}
	for _, r := range rs {
		if r.Syscall == "clone3" && r.Errno != errnoENOSYS {
			t.Errorf("clone3 errno = %d, want ENOSYS", r.Errno)
		}
		if r.Syscall == "clone" && r.Value == cloneNewTime {
			t.Errorf("clone must not match 0x80: it is the exit-signal byte")
		}
	}
	lifted := SeccompRules(true)
	if has(lifted, "socket", afUNIX) || has(lifted, "socketpair", afUNIX) {
		t.Errorf("SeccompRules(true) still denies AF_UNIX")
	}
	if !has(lifted, "socket", afVSOCK) || len(lifted) != len(rs)-2 {
		t.Errorf("SeccompRules(true) has %d rules, want %d (only the two AF_UNIX rules lifted)", len(lifted), len(rs)-2)
	}
}

func TestSeatbeltGolden(t *testing.T) {
	cases := []struct {
		name string
		spec Spec
		opt  SeatbeltOptions
	}{
		{"default", Spec{Args: []string{"true"}, Dir: "/Users/u/proj", AllowWrite: []string{"/Users/u/proj"},
			DenyRead: []string{"/Users/u/.ssh", "/Users/u/.aws", "/Users/u/.cargo/credentials*"}},
			SeatbeltOptions{TmpDir: "/private/tmp/moat-run-1/tmp", Home: "/Users/u", HTTPPort: 50001, SOCKSPort: 50002}},
		{"unix-and-gitconfig", Spec{Args: []string{"true"}, Dir: "/w", AllowWrite: []string{"/w"}, DenyWrite: []string{"/w/secret \"q\""},
			AllowRead: []string{"/Users/u/.ssh/known_hosts"}, DenyRead: []string{"/Users/u/.ssh"}, AllowGitConfig: true,
			AllowUnixSockets: []string{"/var/run/docker.sock"}},
			SeatbeltOptions{TmpDir: "/t", HTTPPort: 1, SOCKSPort: 2}},
		{"filesystem-disabled", Spec{Args: []string{"true"}, Dir: "/Users/u/proj", OpenFilesystem: true,
			AlwaysHidden: []string{"/Users/u/.config/moat/ca/key.pem"}, DenyWrite: []string{"/Users/u/.config/moat", "/Users/u/proj/.moat.yaml"}},
			SeatbeltOptions{TmpDir: "/t", Home: "/Users/u", HTTPPort: 1, SOCKSPort: 2}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := SeatbeltProfile(tc.spec, tc.opt)
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join("testdata", "seatbelt_"+tc.name+".sb")
			if *update {
				if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run with -update)", err)
			}
			if d := cmp.Diff(string(want), got); d != "" {
				t.Errorf("SeatbeltProfile(%s) (-want +got):\n%s", tc.name, d)
			}
		})
	}
	if _, err := SeatbeltProfile(Spec{DenyRead: []string{"rel"}}, SeatbeltOptions{}); err == nil {
		t.Errorf("SeatbeltProfile with a relative path: no error")
	}
}

func TestPlan(t *testing.T) {
	base := t.TempDir()
	mkTree(t, base, "home/.ssh/id", "home/.ssh/known_hosts", "home/proj/.git/hooks/", "home/.netrc")
	home := filepath.Join(base, "home")
	proj := filepath.Join(home, "proj")
	p, err := Plan(Spec{Args: []string{"true"}, Dir: proj, GatewaySocket: "/x/gw.sock",
		Env:        []string{"HOME=" + home, "GITHUB_TOKEN=ghp_secret"},
		DenyRead:   []string{home + "/.ssh", home + "/.net*", home + "/.aws"},
		AllowRead:  []string{home + "/.ssh/known_hosts"},
		AllowWrite: []string{proj}, MandatoryDenyDepth: 3})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range p.Mounts {
		got = append(got, string(m.Kind)+" "+strings.ReplaceAll(m.Target, base, "B")+" "+m.Flags)
	}
	// The two writable roots come sorted; their order depends on TMPDIR.
	sort.Strings(got[2:4])
	wantPrefix := []string{
		"rbind-root / ro,nosuid",
		"dev /dev ",
		"bind B/home/proj rw",
		"bind " + p.TmpDir + " rw",
		"empty B/home/.netrc ro",
		"tmpfs B/home/.ssh ro",
		"bind B/home/.ssh/known_hosts ro",
		"seal-ro B/home/.ssh ro",
		"bind B/home/proj/.git rw", // pinned: .git cannot be renamed away
		"bind B/home/proj/.git/hooks ro",
	}
	sort.Strings(wantPrefix[2:4])
	if d := cmp.Diff(wantPrefix, got[:len(wantPrefix)]); d != "" {
		t.Errorf("Plan mounts (-want +got):\n%s\nall:\n%s", d, strings.Join(got, "\n"))
	}
	wantTail := []string{"run /run ro", "socket /run/moat/gateway.sock ", "seal-ro /run ro", "proc /proc nosuid,nodev,noexec", "sysfs /sys ro,nosuid,nodev,noexec"}
	if d := cmp.Diff(wantTail, got[len(got)-len(wantTail):]); d != "" {
		t.Errorf("Plan mounts tail (-want +got):\n%s", d)
	}
	if s := p.String(); strings.Contains(s, "ghp_secret") || !strings.Contains(s, "GITHUB_TOKEN=<redacted>") {
		t.Errorf("Plan rendering leaks or misses the redacted token")
	}
	if _, err := Plan(Spec{Args: []string{"true"}, GatewaySocket: "/s", DenyRead: []string{"rel/path"}}); err == nil {
		t.Errorf("Plan with a relative path: no error")
	}
	if _, err := Plan(Spec{GatewaySocket: "/s"}); err != ErrNoCommand {
		t.Errorf("Plan without Args = %v, want ErrNoCommand", err)
	}
}
