// Package sandbox runs one command confined: on Linux in fresh user, mount,
// pid, net, ipc and uts namespaces with a read-only view of the host, the
// writable paths bound in, credential stores hidden, a seccomp filter, and
// no network except a relay on localhost that leads to the gateway's unix
// socket; on macOS under sandbox-exec with a generated Seatbelt profile.
// Elsewhere it returns ErrUnsupported and never runs the command
// unconfined.
//
// A program that embeds the sandbox must call MaybeInit first thing in main
// (and in TestMain): the Linux sandbox re-executes the running binary to
// build the namespaces.
//
// The package knows nothing of the gateway or the config file: the caller
// starts the gateway on a per-session unix socket and passes its path.
package sandbox

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Spec describes one sandboxed command. Paths must be absolute (already
// ~-expanded by the caller); glob patterns in the path lists are expanded at
// launch.
type Spec struct {
	Args []string // argv; Args[0] is resolved with the PATH of Env inside the sandbox
	Dir  string   // working directory; default: the current directory
	Env  []string // base environment; the proxy variables of ProxyEnv are added or overridden

	// GatewaySocket is the host path of the gateway's unix socket. It should
	// be a per-session socket in a private 0700 directory: the socket itself
	// is the credential, so the command's environment holds no token.
	GatewaySocket string
	// PassConnections hands each accepted connection's descriptor to the
	// gateway over the socket (SCM_RIGHTS) instead of relaying its bytes:
	// one copy less on every byte. Only moat's own gateway understands it
	// (gateway.Gateway accepts both); leave it off for another gateway.
	PassConnections bool

	DenyRead, AllowRead []string // reads are open except DenyRead, with AllowRead re-opened inside
	// AlwaysHidden are hidden like DenyRead, but nothing re-opens them or
	// anything inside them, whatever an allow entry names or resolves to
	// (moat's CA key, the gateway directories, denied credential files).
	AlwaysHidden          []string
	AllowWrite, DenyWrite []string // writes only to AllowWrite (plus TMPDIR), minus DenyWrite
	AllowGitConfig        bool     // lets the command write .git/config

	// MandatoryDenyDepth is how many directory levels below each writable
	// root are searched for protected names (.bashrc, .git/hooks, …).
	// The config default is 3; negative means 0 (the roots only).
	MandatoryDenyDepth int

	AllowAllUnixSockets bool     // lifts only the seccomp rule against AF_UNIX sockets
	AllowUnixSockets    []string // socket paths made visible (AF_UNIX stays blocked unless AllowAllUnixSockets)

	// Overlays maps a host file to a replacement shown read-only in its
	// place, e.g. a copy of a credentials file that holds a sentinel instead
	// of the secret. Both paths must be absolute; a missing target is
	// skipped with a warning.
	Overlays map[string]string

	// TrustBundle is an optional host path of a CA bundle. It is mounted
	// read-only at /run/moat/trust-bundle.pem and every CA variable points at it.
	TrustBundle string

	// WeakerNested is srt's enableWeakerNestedSandbox, for running inside a
	// container that forbids nested user namespaces and fresh /proc mounts:
	// the host's /proc and /sys are bound read-only. It prints a warning to Stderr.
	WeakerNested bool
	// OpenFilesystem is srt's filesystem.disabled: the whole file system
	// is writable and the mandatory denies are off; only DenyRead and
	// DenyWrite (which the CLI limits to moat's own files then) still apply.
	// The network stays closed except through the gateway.
	OpenFilesystem bool

	Stdin          io.Reader // nil means /dev/null
	Stdout, Stderr io.Writer // nil means discard
	Logger         *slog.Logger
}

// MountKind says what one step of the mount table does.
type MountKind string

// The kinds of Mount, in the order the Linux init stage applies them.
const (
	MountRoot   MountKind = "rbind-root" // the host's / onto the new root, recursively read-only and nosuid
	MountDev    MountKind = "dev"        // minimal /dev: null zero full random urandom tty, devpts, shm
	MountBind   MountKind = "bind"       // Source onto Target (recursive), Flags "rw" or "ro"
	MountTmpfs  MountKind = "tmpfs"      // empty tmpfs hiding a denied directory
	MountSeal   MountKind = "seal-ro"    // make the tmpfs at Target read-only, after binds inside it
	MountEmpty  MountKind = "empty"      // empty read-only file over a denied file or a protected name
	MountRun    MountKind = "run"        // tmpfs over /run
	MountSocket MountKind = "socket"     // bind a unix socket
	MountProc   MountKind = "proc"       // fresh proc of the new pid namespace (or the host's, weaker)
	MountSysfs  MountKind = "sysfs"      // fresh sysfs of the new net namespace (or the host's, weaker)
)

// Mount is one step of the mount table.
type Mount struct {
	Kind   MountKind
	Source string `json:",omitempty"`
	Target string
	Flags  string `json:",omitempty"`
	// Placeholder means Target does not exist on the host: an empty file is
	// created there for the duration of the run (and removed afterwards), so
	// the name cannot be created from inside.
	Placeholder bool `json:",omitempty"`
	// NoFollow means Target is a symlink bound onto itself without being
	// followed: it still resolves as before, but as a mount point it
	// cannot be removed, renamed or replaced (EBUSY).
	NoFollow bool `json:",omitempty"`
	// InTree means Source names a path inside the sandbox's tree, not the
	// host's: a self-bind that pins or protects a path keeps what was
	// already mounted below it (a hidden denyRead entry stays hidden).
	InTree bool `json:",omitempty"`
}

func (m Mount) String() string {
	s := fmt.Sprintf("%-10s %s", m.Kind, m.Target)
	if m.Source != "" && m.Source != m.Target {
		s += " <- " + m.Source
	}
	if m.Flags != "" {
		s += " (" + m.Flags + ")"
	}
	if m.Placeholder {
		s += " [placeholder]"
	}
	if m.NoFollow {
		s += " [symlink pinned]"
	}
	if m.InTree {
		s += " [in-tree]"
	}
	return s
}

// Paths inside the Linux sandbox.
const (
	innerGatewaySocket = "/run/moat/gateway.sock"
	innerTrustBundle   = "/run/moat/trust-bundle.pem"
)

// PlanInfo is what the sandbox would be, computed without running anything.
type PlanInfo struct {
	Args     []string
	Dir      string
	TmpDir   string
	Mounts   []Mount
	Seccomp  []SeccompRule
	Env      []string // secret-looking values redacted
	Warnings []string `json:",omitempty"`

	env []string // unredacted, for Run
}

// String renders the plan for `moat policy` style output.
func (p *PlanInfo) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "command: %q\ndir: %s\ntmpdir: %s\nmounts:\n", p.Args, p.Dir, p.TmpDir)
	for i, m := range p.Mounts {
		fmt.Fprintf(&b, "  %2d %s\n", i+1, m)
	}
	b.WriteString("seccomp (default allow):\n")
	for _, r := range p.Seccomp {
		fmt.Fprintf(&b, "  %s\n", r)
	}
	b.WriteString("env:\n")
	for _, e := range p.Env {
		fmt.Fprintf(&b, "  %s\n", e)
	}
	for _, w := range p.Warnings {
		fmt.Fprintf(&b, "warning: %s\n", w)
	}
	return b.String()
}

// Plan returns what Run would build for s, without running it. The private
// TMPDIR is shown as it would be named, with a placeholder suffix.
func Plan(s Spec) (*PlanInfo, error) {
	return buildPlan(s, filepath.Join(os.TempDir(), "moat-run-XXXXXX"))
}

// buildPlan computes the mount table for s with the per-run directory
// runDir (holding tmp/, root/ and the empty file). It stats and walks the
// file system but changes nothing.
func buildPlan(s Spec, runDir string) (*PlanInfo, error) {
	if len(s.Args) == 0 || s.Args[0] == "" {
		return nil, ErrNoCommand
	}
	if s.GatewaySocket == "" {
		return nil, ErrNoGateway
	}
	dir := s.Dir
	if dir == "" {
		wd, err := os.Getwd()
		if err != nil {
			return nil, fmt.Errorf("sandbox: working directory: %w", err)
		}
		dir = wd
	}
	var errs []error
	abs := func(field string, ps []string) []string {
		var out []string
		for i, p := range ps {
			if !filepath.IsAbs(p) {
				errs = append(errs, fmt.Errorf("sandbox: %s[%d] %q: path must be absolute", field, i, p))
				continue
			}
			out = append(out, expandGlob(p)...)
		}
		return out
	}
	for _, f := range []struct{ name, p string }{{"Dir", dir}, {"GatewaySocket", s.GatewaySocket}} {
		if !filepath.IsAbs(f.p) {
			errs = append(errs, fmt.Errorf("sandbox: %s %q: path must be absolute", f.name, f.p))
		}
	}
	if s.TrustBundle != "" && !filepath.IsAbs(s.TrustBundle) {
		errs = append(errs, fmt.Errorf("sandbox: TrustBundle %q: path must be absolute", s.TrustBundle))
	}
	alwaysHidden := abs("AlwaysHidden", s.AlwaysHidden)
	denyRead := append(abs("DenyRead", s.DenyRead), alwaysHidden...)
	allowRead := abs("AllowRead", s.AllowRead)
	allowWrite := abs("AllowWrite", s.AllowWrite)
	denyWrite := abs("DenyWrite", s.DenyWrite)
	sockets := abs("AllowUnixSockets", s.AllowUnixSockets)
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	dir = resolveLinks(filepath.Clean(dir))
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		why := "not a directory"
		if err != nil {
			why = err.Error()
		}
		return nil, fmt.Errorf("%w: working directory %s: %s", ErrSetup, dir, why)
	}
	tmpDir := filepath.Join(runDir, "tmp")
	empty := filepath.Join(runDir, "empty")
	p := &PlanInfo{Args: append([]string(nil), s.Args...), Dir: dir, TmpDir: tmpDir}
	add := func(m Mount) { p.Mounts = append(p.Mounts, m) }

	rootFlags := "ro,nosuid"
	if s.OpenFilesystem {
		rootFlags = "rw,nosuid"
		p.Warnings = append(p.Warnings, "filesystem.disabled: the whole file system is writable inside; only the network is sandboxed")
	}
	add(Mount{Kind: MountRoot, Source: "/", Target: "/", Flags: rootFlags})
	add(Mount{Kind: MountDev, Target: "/dev"})

	// 4. Writable paths, parents first so a child bind is not hidden.
	writable := dedupe(append([]string{tmpDir}, sortedExisting(allowWrite)...))
	sort.Strings(writable)
	for _, w := range writable {
		add(Mount{Kind: MountBind, Source: w, Target: w, Flags: "rw"})
	}
	for _, w := range allowWrite {
		if !exists(w) {
			p.Warnings = append(p.Warnings, fmt.Sprintf("allowWrite %s does not exist: not writable", w))
		}
	}

	// Masked-file overlays, by resolved target.
	overlays := make(map[string]string, len(s.Overlays))
	var overlayTargets []string
	for t, src := range s.Overlays {
		if !filepath.IsAbs(t) || !filepath.IsAbs(src) {
			return nil, fmt.Errorf("sandbox: Overlays %q -> %q: paths must be absolute", t, src)
		}
		rt := resolveLinks(t)
		if !exists(rt) {
			p.Warnings = append(p.Warnings, fmt.Sprintf("overlay target %s does not exist: skipped", t))
			continue
		}
		overlays[rt] = src
		overlayTargets = append(overlayTargets, rt)
	}
	sort.Strings(overlayTargets)
	overlayDone := map[string]bool{}

	// 5. Hide denied directories; re-open allowed paths inside them. The
	// longest entry decides: allowWrite: ["~"] does not re-open a denied
	// ~/.config, but allowRead: ["~/.ssh/known_hosts"] re-opens that file
	// inside a denied ~/.ssh; on a tie (an allow entry naming the denied
	// path, or resolving to it through a glob or a symlink) the deny wins.
	// A re-opened path is writable only if a write root deeper than the
	// deny covers it. Nothing re-opens AlwaysHidden.
	writeRoots := append([]string{tmpDir}, allowWrite...)
	reopen := append(append([]string{}, allowRead...), writeRoots...)
	shownIn := func(q string, hidden []string) bool {
		h := longestRoot(q, hidden)
		return h == "" || len(longestRoot(q, reopen)) > len(h)
	}
	visibleIn := func(q string, hidden []string) bool { return !under(q, alwaysHidden) && shownIn(q, hidden) }
	var hidden []string // denied dirs and files
	for _, d := range sortedExisting(denyRead) {
		if !shownIn(d, hidden) {
			continue // already hidden by a denied parent
		}
		if p := longestRoot(d, alwaysHidden); p != "" && p != d {
			continue // inside an always-hidden path: hidden, never re-opened
		}
		fi, err := os.Stat(d)
		if err != nil {
			continue
		}
		hidden = append(hidden, d)
		if !fi.IsDir() {
			add(Mount{Kind: MountEmpty, Source: empty, Target: d, Flags: "ro"})
			continue
		}
		add(Mount{Kind: MountTmpfs, Target: d, Flags: "ro"})
		// Masked files inside a hidden directory (gh's hosts.yml under a
		// denied ~/.config/gh): their mount point must be made before the
		// tmpfs is sealed.
		for _, t := range overlayTargets {
			if strings.HasPrefix(t, d+"/") && !overlayDone[t] {
				overlayDone[t] = true
				add(Mount{Kind: MountBind, Source: overlays[t], Target: t, Flags: "ro"})
			}
		}
		for _, a := range sortedExisting(reopen) {
			if a == d || !strings.HasPrefix(a, d+"/") || under(a, alwaysHidden) {
				continue
			}
			fl := "ro"
			if len(longestRoot(a, writeRoots)) > len(d) && !under(a, denyWrite) {
				fl = "rw"
			}
			add(Mount{Kind: MountBind, Source: a, Target: a, Flags: fl})
		}
		add(Mount{Kind: MountSeal, Target: d, Flags: "ro"})
	}
	visible := func(q string) bool { return visibleIn(q, hidden) }
	isWritable := func(q string) bool { return under(q, writable) && visible(q) }
	pinRoots := writable
	if s.OpenFilesystem {
		isWritable = visible
		pinRoots = append([]string{"/"}, writable...)
	}

	// 6. Write denies inside writable paths: explicit denyWrite entries, then
	// the mandatory names in Dir, every writable root and $HOME.
	var roProtect, placeholders []string
	for _, d := range denyWrite {
		if exists(d) {
			if isWritable(d) {
				roProtect = append(roProtect, d)
			}
			continue
		}
		if m := firstMissing("/", strings.TrimPrefix(d, "/")); m != "" && isWritable(filepath.Dir(m)) {
			placeholders = append(placeholders, m)
		}
	}
	roots := []string{dir}
	roots = append(roots, writable...)
	if h := homeOf(s.Env); h != "" {
		roots = append(roots, resolveLinks(h))
	}
	var mroots []string
	for _, r := range dedupe(roots) {
		// A file is a write root of its own (allowWrite: ["./notes.txt"]):
		// nothing below it to protect.
		if fi, err := os.Stat(r); r != tmpDir && isWritable(r) && err == nil && fi.IsDir() {
			mroots = append(mroots, r)
		}
	}
	depth := s.MandatoryDenyDepth
	if depth < 0 {
		depth = 0
	}
	if s.OpenFilesystem {
		mroots = nil // srt drops every filesystem rule
	}
	ex, miss := MandatoryDenies(mroots, depth, s.AllowGitConfig)
	// A write root at or inside a protected name of the working directory
	// or $HOME (allowWrite: ["./.git"] or ["./.git/hooks"], the directory
	// itself not writable): the names it holds, or the root itself, stay
	// protected, though no writable root above them was scanned.
	if !s.OpenFilesystem {
		bases := []string{dir}
		if h := homeOf(s.Env); h != "" {
			bases = append(bases, resolveLinks(h))
		}
		for _, base := range dedupe(bases) {
			if !exists(base) {
				continue
			}
			for _, n := range mandatoryNames(s.AllowGitConfig) {
				p := filepath.Join(base, n)
				for _, w := range writable {
					switch {
					case w == tmpDir:
					case p == w || strings.HasPrefix(p, w+"/"):
						if exists(p) {
							ex = append(ex, p)
						} else if m := firstMissing("/", strings.TrimPrefix(p, "/")); strings.HasPrefix(m, base+"/") && under(m, []string{w}) {
							miss = append(miss, m)
						}
					case strings.HasPrefix(w, p+"/"):
						ex = append(ex, w)
					}
				}
			}
		}
		ex, miss = dedupe(ex), dedupe(miss)
	}
	// A protected name reached through symlinks (.bashrc -> dotfiles/bashrc,
	// or a linked directory on the way): the file it resolves to is
	// protected, or held by a placeholder if it does not exist, and every
	// link on the way that sits in a writable directory is pinned, so the
	// command cannot swap one for a path of its own that the host would
	// follow later.
	// protect makes an existing protected path read-only. Hidden by a
	// denyRead entry it needs nothing, except where something inside it is
	// re-opened writable: that stays read-only (the protection wins).
	protect := func(p string) {
		if isWritable(p) {
			roProtect = append(roProtect, p)
			return
		}
		if visible(p) {
			return
		}
		for _, a := range sortedExisting(reopen) {
			if strings.HasPrefix(a, p+"/") && isWritable(a) {
				roProtect = append(roProtect, a)
			}
		}
	}
	var linkPins []string
	for _, e := range ex {
		links, final := linkChain(e)
		if len(links) == 0 {
			protect(e)
			continue
		}
		for _, l := range links {
			if isWritable(filepath.Dir(l)) {
				linkPins = append(linkPins, l)
			}
		}
		switch {
		case final == "": // a loop: nothing can be written through it
		case exists(final):
			protect(final)
		default:
			if m := firstMissing("/", strings.TrimPrefix(final, "/")); m != "" && isWritable(filepath.Dir(m)) {
				miss = append(miss, m)
			}
		}
	}
	// A denyWrite entry reached through symlinks (--settings ./s.yaml ->
	// conf/real.yaml, an audit log link): the entry is resolved above, and
	// the links on the way are pinned too, so that the command cannot point
	// them at a file of its own for the next run.
	for _, raw := range s.DenyWrite {
		if !filepath.IsAbs(raw) || strings.ContainsAny(raw, "*?[") {
			continue
		}
		links, _ := linkChain(raw)
		for _, l := range links {
			if isWritable(filepath.Dir(l)) {
				linkPins = append(linkPins, l)
			}
		}
	}
	linkPins = dedupe(linkPins)
	for _, m := range miss {
		if isWritable(filepath.Dir(m)) {
			placeholders = append(placeholders, m)
		}
	}
	// A protected name whose parent is a file (.git as a gitfile in a
	// worktree or submodule): protect that file, or replacing it with a
	// directory would create the name.
	var keptPlaceholders []string
	for _, m := range dedupe(placeholders) {
		if f := fileAncestor(m, mroots); f != "" {
			roProtect = append(roProtect, f)
			continue
		}
		keptPlaceholders = append(keptPlaceholders, m)
	}
	placeholders = keptPlaceholders
	roProtect = dedupe(roProtect)
	// Pin every directory between a writable root and a protected path
	// with a self-bind: a mount point cannot be renamed or removed (EBUSY),
	// so `mv .git .git.old && mkdir .git` cannot put a fresh, writable
	// .git/config where the protected one was.
	var pins []string
	pinned := map[string]bool{}
	for _, list := range [][]string{roProtect, placeholders, linkPins} {
		for _, x := range list {
			root := longestRoot(x, pinRoots)
			if root == "" {
				continue
			}
			for a := filepath.Dir(x); a != root && (root == "/" || strings.HasPrefix(a, root+"/")); a = filepath.Dir(a) {
				if !pinned[a] && isWritable(a) {
					pinned[a] = true
					pins = append(pins, a)
				}
			}
		}
	}
	sort.Slice(pins, func(i, j int) bool { return len(pins[i]) < len(pins[j]) })
	// From the sandbox's own tree (InTree), never from the host: a bind of
	// the host's ~/.config/moat would lay the CA key, hidden above, back
	// on top.
	for _, a := range pins {
		add(Mount{Kind: MountBind, Source: a, Target: a, Flags: "rw", InTree: true})
	}
	for _, r := range roProtect {
		add(Mount{Kind: MountBind, Source: r, Target: r, Flags: "ro", InTree: true})
	}
	for _, m := range placeholders {
		add(Mount{Kind: MountEmpty, Source: empty, Target: m, Flags: "ro", Placeholder: true})
	}
	for _, l := range linkPins {
		add(Mount{Kind: MountBind, Source: l, Target: l, Flags: "ro", NoFollow: true, InTree: true})
	}

	// Masked files: the replacement shadows the real file.
	for _, t := range overlayTargets {
		if !overlayDone[t] {
			add(Mount{Kind: MountBind, Source: overlays[t], Target: t, Flags: "ro"})
		}
	}

	// 7. /run: only the gateway socket (and what the caller lets in).
	add(Mount{Kind: MountRun, Target: "/run", Flags: "ro"})
	add(Mount{Kind: MountSocket, Source: s.GatewaySocket, Target: innerGatewaySocket})
	for _, u := range sockets {
		if strings.HasPrefix(u, "/run/") || !visible(u) {
			add(Mount{Kind: MountSocket, Source: u, Target: u})
		}
	}
	bundle := ""
	if s.TrustBundle != "" {
		bundle = innerTrustBundle
		add(Mount{Kind: MountBind, Source: s.TrustBundle, Target: innerTrustBundle, Flags: "ro"})
	}
	add(Mount{Kind: MountSeal, Target: "/run", Flags: "ro"})

	// 8. Fresh /proc and /sys.
	if s.WeakerNested {
		add(Mount{Kind: MountProc, Source: "/proc", Target: "/proc", Flags: "host,ro"})
		add(Mount{Kind: MountSysfs, Source: "/sys", Target: "/sys", Flags: "host,ro"})
		p.Warnings = append(p.Warnings, "enableWeakerNestedSandbox: the host's /proc and /sys are visible inside")
	} else {
		add(Mount{Kind: MountProc, Target: "/proc", Flags: "nosuid,nodev,noexec"})
		add(Mount{Kind: MountSysfs, Target: "/sys", Flags: "ro,nosuid,nodev,noexec"})
	}

	self, _ := os.Executable()
	p.env = ProxyEnv(s.Env, EnvOptions{Self: self, TmpDir: tmpDir, TrustBundle: bundle})
	p.Env = redactEnv(p.env)
	p.Seccomp = SeccompRules(s.AllowAllUnixSockets)
	return p, nil
}

// expandGlob expands a pattern with glob metacharacters; a plain path (or a
// pattern without matches) is returned cleaned, as is.
func expandGlob(p string) []string {
	p = filepath.Clean(p)
	if !strings.ContainsAny(p, "*?[") {
		return []string{resolveLinks(p)}
	}
	m, err := filepath.Glob(p)
	if err != nil || len(m) == 0 {
		return nil // nothing matches now: nothing to hide or open
	}
	for i := range m {
		m[i] = resolveLinks(m[i])
	}
	return m
}

// linkChain resolves p one component at a time, as the kernel does, and
// returns every symlink it passes (each named with its directory resolved)
// and the path it ends at, which may not exist. final is "" for a loop.
func linkChain(p string) (links []string, final string) {
	rest := strings.Split(strings.TrimPrefix(filepath.Clean(p), "/"), "/")
	cur := "/"
	for hops := 0; len(rest) > 0; {
		c := rest[0]
		rest = rest[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			cur = filepath.Dir(cur)
			continue
		}
		next := filepath.Join(cur, c)
		fi, err := os.Lstat(next)
		if err != nil {
			// Missing from here on: the rest is lexical.
			return links, filepath.Join(append([]string{next}, rest...)...)
		}
		if fi.Mode()&os.ModeSymlink == 0 {
			cur = next
			continue
		}
		if hops++; hops > 40 { // the kernel's limit too (ELOOP)
			return links, ""
		}
		links = append(links, next)
		t, err := os.Readlink(next)
		if err != nil {
			return links, ""
		}
		if filepath.IsAbs(t) {
			cur = "/"
		}
		rest = append(strings.Split(t, "/"), rest...)
	}
	return links, cur
}

// resolveLinks follows symlinks in an existing path: mount(2) follows them
// too, but against the host's root while the table is built, so a mount
// on "linkdir" would land on the host's target and vanish at pivot_root,
// leaving what it should hide readable. A missing path stays as given.
func resolveLinks(p string) string {
	if r, err := filepath.EvalSymlinks(p); err == nil {
		return r
	}
	return p
}

// under reports whether p is one of roots or below one of them.
func under(p string, roots []string) bool {
	for _, r := range roots {
		if p == r || r == "/" || strings.HasPrefix(p, r+"/") {
			return true
		}
	}
	return false
}

func exists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}

// sortedExisting returns the existing paths of ps, deduplicated, sorted so
// parents come before children.
func sortedExisting(ps []string) []string {
	var out []string
	for _, p := range dedupe(ps) {
		if exists(p) {
			out = append(out, p)
		}
	}
	sort.Strings(out)
	return out
}

func dedupe(ps []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, p := range ps {
		if !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	return out
}

// homeOf returns $HOME from env, or "".
func homeOf(env []string) string {
	for i := len(env) - 1; i >= 0; i-- {
		if v, ok := strings.CutPrefix(env[i], "HOME="); ok && filepath.IsAbs(v) {
			return filepath.Clean(v)
		}
	}
	return ""
}

// longestRoot returns the longest of roots that contains p, or "".
func longestRoot(p string, roots []string) string {
	best := ""
	for _, r := range roots {
		if (p == r || r == "/" || strings.HasPrefix(p, r+"/")) && len(r) > len(best) {
			best = r
		}
	}
	return best
}

// fileAncestor returns the first existing non-directory on the way from a
// root to p (exclusive), or "".
func fileAncestor(p string, roots []string) string {
	root := longestRoot(p, roots)
	if root == "" {
		return ""
	}
	rel, err := filepath.Rel(root, filepath.Dir(p))
	if err != nil || rel == "." {
		return ""
	}
	cur := root
	for _, part := range strings.Split(rel, "/") {
		cur = filepath.Join(cur, part)
		fi, err := os.Lstat(cur)
		if err != nil {
			return ""
		}
		if !fi.IsDir() {
			return cur
		}
	}
	return ""
}
