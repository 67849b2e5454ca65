//go:build linux

package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The hidden verbs of the re-exec. They are not flags so that no CLI parser
// ever sees them.
const (
	verbInit = "__moat-sandbox-init"
)

// File descriptors of the stages: fd 3 carries the JSON configuration, fd 4
// the set-up error channel (it is close-on-exec in the final execve, so EOF
// with no bytes means the command started).
const (
	fdConfig = 3
	fdStatus = 4
)

// initConfig is what the outer Run hands to PID 1 of the sandbox.
type initConfig struct {
	NewRoot      string
	Mounts       []Mount
	Args         []string
	Dir          string
	Env          []string
	AllowAllUnix bool
	UID, GID     int
	// Pass hands connections to the gateway by descriptor.
	Pass bool
	// Warning is printed by PID 1 to stderr before anything else.
	Warning string
	// Seccomp is the compiled filter (sock_filter array) PID 1 loads on
	// the thread that forks the command.
	Seccomp []byte
}

// init runs the sandbox's PID 1 as early as Go allows. Packages initialize
// in import-path order once their imports are done, and this package needs
// only the standard library, x/sys and libseccomp, so it initializes before
// goproxy (waiting on x/net and x/text), yaml and the CLI: PID 1 skips their
// init work (goproxy alone parses an RSA key) on every moat run. The main
// goroutine is locked to the main thread during init, which the confined
// fork needs. MaybeInit stays the documented entry point.
func init() { MaybeInit() }

// MaybeInit runs a sandbox stage and exits if this process was started as
// one (os.Args[1] is a hidden verb); otherwise it returns at once. Call it
// first thing in main and in TestMain.
func MaybeInit() {
	if len(os.Args) < 2 {
		return
	}
	switch os.Args[1] {
	case verbInit:
		// One OS thread: credentials, no_new_privs and the cwd are set on the
		// thread that then execs.
		runtime.LockOSThread()
		warmProcessStart() // while the configuration arrives and the mounts are built
		os.Exit(initMain())
	}
}

// warmProcessStart runs, in the background, the one-time probe the os
// package makes before its first process start (it forks and reaps a child
// to check that pidfds work), so that PID 1's fork of the command does not
// wait for it.
func warmProcessStart() {
	go func() {
		if p, err := os.FindProcess(os.Getpid()); err == nil {
			_ = p.Release()
		}
	}()
}

// Supported reports whether this kernel lets moat build the sandbox, and if
// not, why and how to fix it.
func Supported() error {
	if err := cgoSupported(); err != nil {
		return err
	}
	if _, err := os.Stat("/proc/self/ns/user"); err != nil {
		return fmt.Errorf("%w: kernel without user namespaces (CONFIG_USER_NS)", ErrUnsupported)
	}
	if readSysctl("user/max_user_namespaces") == "0" {
		return fmt.Errorf("%w: user namespaces are disabled (sysctl user.max_user_namespaces=0); fix: sysctl -w user.max_user_namespaces=15000", ErrUnsupported)
	}
	if os.Geteuid() != 0 {
		if readSysctl("kernel/unprivileged_userns_clone") == "0" {
			return fmt.Errorf("%w: unprivileged user namespaces are disabled (sysctl kernel.unprivileged_userns_clone=0); fix: sysctl -w kernel.unprivileged_userns_clone=1", ErrUnsupported)
		}
		if readSysctl("kernel/apparmor_restrict_unprivileged_userns") == "1" {
			return fmt.Errorf("%w: AppArmor restricts unprivileged user namespaces (sysctl kernel.apparmor_restrict_unprivileged_userns=1); fix: install an AppArmor profile granting \"userns\" to the moat binary, or sysctl -w kernel.apparmor_restrict_unprivileged_userns=0", ErrUnsupported)
		}
	}
	return nil
}

func readSysctl(name string) string {
	b, err := os.ReadFile("/proc/sys/" + name)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// Run runs s.Args in a new sandbox and returns its exit code (128+N when it
// died of signal N). err is non-nil only when the sandbox could not be built
// (then the command never ran) or the command could not be started. Run
// forwards SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 to the
// command (SIGINT and SIGQUIT only when stdin is not a terminal: the terminal
// already delivers them to the whole foreground group). Cancelling ctx kills
// the sandbox.
func Run(ctx context.Context, s Spec) (exitCode int, err error) {
	p, err := Prepare(s.Stdin, s.Stdout, s.Stderr)
	if err != nil {
		return SetupExitCode, err
	}
	return p.Run(ctx, s)
}

// Pending is a sandbox whose PID 1 is already booting: a Go runtime start
// is the longest step of a launch, so a caller can start it first and load
// its settings meanwhile. Complete it with Run, or release it with Abort:
// one of the two must be called, from one goroutine; until then it holds the
// process's terminating signals.
type Pending struct {
	cmd       *exec.Cmd
	cfgW, stR *os.File
	sigs      chan os.Signal
	tty       bool
	stdin     io.Reader
	stdout    io.Writer
	stderr    io.Writer
	finished  bool
}

// Prepare clones the namespaces and starts PID 1 with the given standard
// streams; it waits for its configuration. The Spec's own Stdin, Stdout
// and Stderr are not used by Pending.Run: these are.
func Prepare(stdin io.Reader, stdout, stderr io.Writer) (*Pending, error) {
	if err := Supported(); err != nil {
		return nil, err
	}
	cfgR, cfgW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrSetup, err)
	}
	stR, stW, err := os.Pipe()
	if err != nil {
		cfgR.Close()
		cfgW.Close()
		return nil, fmt.Errorf("%w: %v", ErrSetup, err)
	}
	p := &Pending{cfgW: cfgW, stR: stR, tty: isTerminal(stdin)}
	// Catch signals before anything exists to clean up: a SIGTERM during
	// set-up must still run the deferred removal of placeholders.
	p.sigs = make(chan os.Signal, 8)
	signal.Notify(p.sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2)
	cmd := exec.Command("/proc/self/exe", verbInit)
	cmd.Args[0] = "moat-sandbox"
	cmd.Env = []string{}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, stdout, stderr
	cmd.ExtraFiles = []*os.File{cfgR, stW}
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags: syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS | syscall.CLONE_NEWPID |
			syscall.CLONE_NEWNET | syscall.CLONE_NEWIPC | syscall.CLONE_NEWUTS,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getuid(), Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getgid(), Size: 1}},
		// The whole sandbox dies with us: PID 1 dies, the kernel kills the rest
		// of its pid namespace.
		Pdeathsig: syscall.SIGKILL,
	}
	// Pdeathsig fires when the creating OS thread exits: keep it alive.
	runtime.LockOSThread()
	err = cmd.Start()
	runtime.UnlockOSThread()
	cfgR.Close()
	stW.Close()
	if err != nil {
		signal.Stop(p.sigs)
		cfgW.Close()
		stR.Close()
		return nil, fmt.Errorf("%w: clone namespaces: %v%s", ErrSetup, err, cloneHint(err))
	}
	p.cmd = cmd
	return p, nil
}

// Abort stops a Pending sandbox that will not run: PID 1 is killed before it
// ever received a configuration.
func (p *Pending) Abort() {
	if p == nil || p.finished {
		return
	}
	p.finished = true
	p.cfgW.Close()
	_ = p.cmd.Process.Kill()
	_ = p.cmd.Wait()
	p.stR.Close()
	signal.Stop(p.sigs)
}

// Run completes the sandbox for s (see the package-level Run) and waits for
// the command.
func (p *Pending) Run(ctx context.Context, s Spec) (exitCode int, err error) {
	if p.finished {
		return SetupExitCode, fmt.Errorf("%w: sandbox already used", ErrSetup)
	}
	// A signal that arrived while the caller was still setting up (it
	// waits for us before it can act on one) ends the run here, before PID 1
	// gets a configuration.
	select {
	case sig := <-p.sigs:
		if ss, ok := sig.(syscall.Signal); ok && ss != syscall.SIGUSR1 && ss != syscall.SIGUSR2 {
			p.Abort()
			return 128 + int(ss), fmt.Errorf("%w: interrupted by %v during set-up", ErrSetup, sig)
		}
	default:
	}
	cmd := p.cmd
	abort := p.Abort
	defer func() {
		p.finished = true
		p.stR.Close()
		p.cfgW.Close()
		signal.Stop(p.sigs)
	}()
	log := s.Logger
	// The filter depends on the Spec alone: compile it while the plan is
	// built and the placeholders are created.
	type compiled struct {
		prog []byte
		err  error
	}
	seccompc := make(chan compiled, 1)
	go func() {
		prog, err := compileSeccomp(SeccompRules(s.AllowAllUnixSockets))
		seccompc <- compiled{prog, err}
	}()
	runDir, err := os.MkdirTemp("", "moat-run-")
	if err != nil {
		abort()
		return SetupExitCode, fmt.Errorf("%w: private run directory: %v", ErrSetup, err)
	}
	reg := openRegistry()
	rec := &record{RunDir: runDir}
	defer func() {
		// Two directories, two goroutines: the placeholders are removed
		// while the run directory is.
		released := make(chan struct{})
		go func() {
			reg.release(rec)
			close(released)
		}()
		if rmErr := os.RemoveAll(runDir); rmErr != nil && log != nil {
			log.Warn("sandbox: removing run directory", "dir", runDir, "err", rmErr)
		}
		<-released
	}()
	for _, d := range []string{"tmp", "root"} {
		if err := os.Mkdir(filepath.Join(runDir, d), 0o700); err != nil {
			abort()
			return SetupExitCode, fmt.Errorf("%w: %v", ErrSetup, err)
		}
	}
	if err := os.WriteFile(filepath.Join(runDir, "empty"), nil, 0o444); err != nil {
		abort()
		return SetupExitCode, fmt.Errorf("%w: %v", ErrSetup, err)
	}
	var plan *PlanInfo
	err = reg.acquire(rec, func(shared map[string]bool) ([]string, error) {
		var err error
		if plan, err = buildPlan(s, runDir); err != nil {
			return nil, err
		}
		var ph []string
		for i, m := range plan.Mounts {
			if m.Kind == MountBind && m.Flags == "ro" && shared[m.Target] {
				// Another run's placeholder, not a real file: share it, so
				// its owner does not remove it from under us.
				m = Mount{Kind: MountEmpty, Source: filepath.Join(runDir, "empty"), Target: m.Target, Flags: "ro", Placeholder: true}
				plan.Mounts[i] = m
			}
			if m.Placeholder {
				ph = append(ph, m.Target)
			}
		}
		return ph, nil
	})
	if err != nil {
		abort()
		if plan == nil {
			return SetupExitCode, err
		}
		return SetupExitCode, fmt.Errorf("%w: placeholders: %v", ErrSetup, err)
	}

	cfg := initConfig{
		NewRoot: filepath.Join(runDir, "root"), Mounts: plan.Mounts, Args: plan.Args, Dir: plan.Dir,
		Env: plan.env, AllowAllUnix: s.AllowAllUnixSockets, Pass: s.PassConnections,
		UID: os.Getuid(), GID: os.Getgid(),
	}
	if s.WeakerNested {
		// PID 1 prints it: it owns the shared stderr from now on.
		cfg.Warning = "moat: WARNING: enableWeakerNestedSandbox is set: the host's /proc and /sys are visible inside; use it only inside a container that is itself the security boundary"
	}
	sc := <-seccompc
	if sc.err != nil {
		abort()
		return SetupExitCode, fmt.Errorf("%w: seccomp: %v", ErrSetup, sc.err)
	}
	cfg.Seccomp = sc.prog
	blob, err := json.Marshal(cfg)
	if err != nil {
		abort()
		return SetupExitCode, fmt.Errorf("%w: %v", ErrSetup, err)
	}
	done := make(chan struct{})
	defer close(done)
	go func() {
		for {
			select {
			case sig := <-p.sigs:
				if p.tty && (sig == syscall.SIGINT || sig == syscall.SIGQUIT) {
					continue
				}
				_ = cmd.Process.Signal(sig)
			case <-ctx.Done():
				_ = cmd.Process.Kill()
				return
			case <-done:
				return
			}
		}
	}()
	go func() {
		_, _ = p.cfgW.Write(blob)
		p.cfgW.Close()
	}()
	// EOF with no bytes: the command was exec'd (or the stages died).
	msg, _ := io.ReadAll(io.LimitReader(p.stR, 64<<10))
	werr := cmd.Wait()
	code := exitStatus(cmd.ProcessState)
	if len(msg) > 0 {
		return SetupExitCode, fmt.Errorf("%w: %s", ErrSetup, strings.TrimSpace(string(msg)))
	}
	if ctx.Err() != nil {
		return code, ctx.Err()
	}
	var ee *exec.ExitError
	if werr != nil && !errors.As(werr, &ee) {
		return code, fmt.Errorf("sandbox: wait: %w", werr)
	}
	return code, nil
}

// cloneHint explains the usual reasons clone(CLONE_NEWUSER) fails.
func cloneHint(err error) string {
	switch {
	case errors.Is(err, syscall.EPERM), errors.Is(err, syscall.EACCES):
		return " (user namespaces are restricted: check sysctl kernel.unprivileged_userns_clone, kernel.apparmor_restrict_unprivileged_userns, or a container seccomp profile; inside Docker see enableWeakerNestedSandbox)"
	case errors.Is(err, syscall.ENOSPC):
		return " (user.max_user_namespaces reached or 0)"
	case errors.Is(err, syscall.EINVAL):
		return " (kernel rejected the namespace flags)"
	}
	return ""
}

func exitStatus(ps *os.ProcessState) int {
	if ps == nil {
		return SetupExitCode
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
}

func isTerminal(r io.Reader) bool {
	f, ok := r.(*os.File)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// stageFail reports a set-up failure of a stage on the status fd and returns
// the set-up exit code. The command is never executed after it.
func stageFail(status *os.File, format string, args ...any) int {
	msg := fmt.Sprintf(format, args...)
	if status != nil {
		_, _ = status.WriteString(msg + "\n")
	}
	return SetupExitCode
}

// initMain is PID 1 of the sandbox: it builds the mount table, brings lo up,
// starts the relay and the command, reaps zombies, forwards signals and
// exits with the command's status.
func initMain() int {
	// Not dumpable: the command runs as the same uid, and PID 1's other
	// threads keep capabilities and AF_UNIX. Without this it could open
	// /proc/1/mem and rewrite PID 1 (kernel ptrace access checks pass for a
	// same-uid, capability-free thread group leader), or re-open PID 1's
	// descriptors through /proc/1/fd.
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return SetupExitCode
	}
	// Descriptors moat itself inherited (a harness's pipes, a directory
	// fd) must not reach the command: mark every fd past ours close-on-exec.
	if err := unix.CloseRange(fdStatus+1, ^uint(0), unix.CLOSE_RANGE_CLOEXEC); err != nil {
		return SetupExitCode
	}
	// Signals for the command are caught from the start, so that the
	// runtime's signal thread is created while the configuration arrives
	// rather than between confinement and fork (where a new thread cost
	// ~0.3 ms). One that would have ended PID 1 during set-up still ends
	// the run before the command starts (see pendingSignals); the others
	// are forwarded once it runs.
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT,
		syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGWINCH, syscall.SIGCONT)
	status := os.NewFile(fdStatus, "status")
	cfgFile := os.NewFile(fdConfig, "config")
	var cfg initConfig
	if err := json.NewDecoder(cfgFile).Decode(&cfg); err != nil {
		return stageFail(status, "init: read config: %v", err)
	}
	cfgFile.Close()
	if cfg.Warning != "" {
		fmt.Fprintln(os.Stderr, cfg.Warning)
	}
	// The network side (lo, the relay's listeners) is independent of the
	// mount table: build both at once. The relay dials the gateway socket
	// by its path inside, per connection, so after the pivot.
	netReady := make(chan error, 1)
	go func() {
		if err := loopbackUp(); err != nil {
			netReady <- fmt.Errorf("bring lo up: %w", err)
			return
		}
		if err := startRelays(innerGatewaySocket, cfg.Pass); err != nil {
			netReady <- fmt.Errorf("relay: %w", err)
			return
		}
		netReady <- nil
	}()
	if err := buildMounts(&cfg); err != nil {
		return stageFail(status, "init: %v", err)
	}
	if err := <-netReady; err != nil {
		return stageFail(status, "init: %v", err)
	}

	// The command is forked from this thread (locked to the main goroutine
	// since MaybeInit) after the thread confines itself: no_new_privs, no
	// capability left, and the seccomp filter loaded on this thread only.
	// The child inherits all three; the relay's threads keep the AF_UNIX
	// access they need. The Go runtime never clones new threads from a
	// locked thread (it hands that to its template thread), so the
	// confinement cannot leak into the relay either. This thread must stay
	// alive while the command runs (Pdeathsig follows the forking thread):
	// it reaps below.
	name := cfg.Args[0]
	if strings.Contains(name, "/") && !filepath.IsAbs(name) {
		name = filepath.Join(cfg.Dir, name) // ./script.sh is relative to the command's directory
	}
	path, err := lookPath(name, envValue(cfg.Env, "PATH"))
	if err != nil {
		status.Close()
		fmt.Fprintf(os.Stderr, "moat: %s: %v\n", cfg.Args[0], err)
		if errors.Is(err, os.ErrPermission) {
			return 126
		}
		return 127
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return stageFail(status, "init: no_new_privs: %v", err)
	}
	if err := dropCapabilities(); err != nil {
		return stageFail(status, "init: drop capabilities: %v", err)
	}
	if err := loadSeccompProgram(cfg.Seccomp); err != nil {
		return stageFail(status, "init: seccomp: %v", err)
	}
	unix.CloseOnExec(fdStatus)
	unix.CloseOnExec(fdConfig)
	cmd := exec.Command(path)
	cmd.Args = cfg.Args
	cmd.Env = cfg.Env
	if cmd.Env == nil {
		cmd.Env = []string{}
	}
	cmd.Dir = cfg.Dir
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if !isTerminal(os.Stdin) {
		// Its own process group: kill(0) or killpg from inside must not
		// reach the process group moat was started in. (On a terminal the
		// command stays in the foreground group for job control; TIOCSTI is
		// refused by seccomp.)
		cmd.SysProcAttr.Setpgid = true
	}
	early, stop := pendingSignals(sigs)
	if stop != 0 {
		status.Close()
		return 128 + int(stop)
	}
	if err := cmd.Start(); err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) && pe.Op == "chdir" {
			return stageFail(status, "init: working directory %s: %v", cfg.Dir, pe.Err)
		}
		// Still confined: the exec itself failed (ENOEXEC, EACCES…).
		status.Close()
		fmt.Fprintf(os.Stderr, "moat: %s: %v\n", cfg.Args[0], err)
		return 126
	}
	status.Close()
	pid := cmd.Process.Pid
	tty := isTerminal(os.Stdin)
	go func() {
		for _, s := range early {
			_ = syscall.Kill(pid, s)
		}
		for sig := range sigs {
			s := sig.(syscall.Signal)
			if tty && (s == syscall.SIGINT || s == syscall.SIGQUIT) {
				continue // the terminal sent it to the command already
			}
			_ = syscall.Kill(pid, s)
		}
	}()
	// Reap every child (orphans are re-parented to us) until the command exits.
	for {
		var ws unix.WaitStatus
		wpid, err := unix.Wait4(-1, &ws, 0, nil)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return SetupExitCode
		}
		if wpid != pid {
			continue
		}
		if ws.Signaled() {
			return 128 + int(ws.Signal())
		}
		return ws.ExitStatus()
	}
}

// pendingSignals drains the signals caught during set-up. Before PID 1
// caught signals, SIGINT, SIGTERM, SIGHUP and SIGQUIT ended it there: stop
// is the first such signal, and the command must not start. (On a
// terminal the forwarder drops SIGINT and SIGQUIT, which the terminal
// delivers to the command itself; during set-up there is no command yet.)
// The others are returned to be delivered once the command runs.
func pendingSignals(sigs chan os.Signal) (early []syscall.Signal, stop syscall.Signal) {
	for {
		select {
		case sig := <-sigs:
			s := sig.(syscall.Signal)
			switch s {
			case syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT:
				if stop == 0 {
					stop = s
				}
			default:
				early = append(early, s)
			}
		default:
			return early, stop
		}
	}
}

// buildMounts applies cfg.Mounts under cfg.NewRoot and pivots into it
// (DESIGN §4, "the mount order that works here").
func buildMounts(cfg *initConfig) error {
	R := cfg.NewRoot
	at := func(p string) string { return filepath.Join(R, p) }
	// 1. Nothing we do may propagate back to the host.
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make / rprivate: %w", err)
	}
	for _, m := range cfg.Mounts {
		if m.InTree {
			m.Source = at(m.Source)
		}
		if err := applyMount(m, at(m.Target)); err != nil {
			return fmt.Errorf("mount %s: %w", m, err)
		}
	}
	// 9. Enter the new root and drop the old one.
	if err := unix.Chdir(R); err != nil {
		return fmt.Errorf("chdir new root: %w", err)
	}
	if err := unix.PivotRoot(".", "."); err != nil {
		return fmt.Errorf("pivot_root: %w", err)
	}
	if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		return fmt.Errorf("detach old root: %w", err)
	}
	if err := unix.Chdir("/"); err != nil {
		return fmt.Errorf("chdir /: %w", err)
	}
	return nil
}

// pinSymlink binds the symlink source onto target without following
// either (open_tree with AT_SYMLINK_NOFOLLOW; move_mount without
// MOVE_MOUNT_T_SYMLINKS): target still resolves where it did, but a mount
// point cannot be removed or renamed.
func pinSymlink(source, target string) error {
	fd, err := unix.OpenTree(unix.AT_FDCWD, source, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_SYMLINK_NOFOLLOW)
	if err != nil {
		return fmt.Errorf("open_tree %s: %w", source, err)
	}
	defer unix.Close(fd)
	if err := unix.MoveMount(fd, "", unix.AT_FDCWD, target, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("move_mount onto the symlink: %w", err)
	}
	return nil
}

func setattr(path string, flags uint, set uint64) error {
	return unix.MountSetattr(-1, path, flags, &unix.MountAttr{Attr_set: set})
}

func applyMount(m Mount, target string) error {
	ro := strings.Contains(m.Flags, "ro")
	switch m.Kind {
	case MountRoot:
		if err := unix.Mount("/", target, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return err
		}
		var set uint64 = unix.MOUNT_ATTR_NOSUID
		if ro {
			set |= unix.MOUNT_ATTR_RDONLY
		}
		return setattr(target, unix.AT_RECURSIVE, set)
	case MountDev:
		return mountDev(target)
	case MountBind, MountSocket:
		if m.NoFollow {
			return pinSymlink(m.Source, target)
		}
		fi, err := os.Stat(m.Source)
		if err != nil {
			return err
		}
		if err := ensureMountpoint(target, fi.IsDir()); err != nil {
			return err
		}
		if err := unix.Mount(m.Source, target, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return err
		}
		var set uint64 = unix.MOUNT_ATTR_NOSUID
		if ro {
			set |= unix.MOUNT_ATTR_RDONLY
		}
		return setattr(target, unix.AT_RECURSIVE, set)
	case MountTmpfs:
		return unix.Mount("tmpfs", target, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "mode=0755,size=1m")
	case MountRun:
		return unix.Mount("tmpfs", target, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "mode=0755,size=1m")
	case MountSeal:
		return setattr(target, 0, unix.MOUNT_ATTR_RDONLY)
	case MountEmpty:
		if err := ensureMountpoint(target, false); err != nil {
			return err
		}
		if err := unix.Mount(m.Source, target, "", unix.MS_BIND, ""); err != nil {
			return err
		}
		return setattr(target, 0, unix.MOUNT_ATTR_RDONLY|unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NOEXEC)
	case MountProc:
		if m.Source != "" {
			if err := unix.Mount(m.Source, target, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
				return err
			}
			return setattr(target, unix.AT_RECURSIVE, unix.MOUNT_ATTR_RDONLY|unix.MOUNT_ATTR_NOSUID)
		}
		return unix.Mount("proc", target, "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "")
	case MountSysfs:
		if m.Source != "" {
			if err := unix.Mount(m.Source, target, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
				return err
			}
			return setattr(target, unix.AT_RECURSIVE, unix.MOUNT_ATTR_RDONLY|unix.MOUNT_ATTR_NOSUID)
		}
		return unix.Mount("sysfs", target, "sysfs", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "")
	}
	return fmt.Errorf("unknown mount kind %q", m.Kind)
}

// ensureMountpoint creates target (a directory or an empty file) if it is
// missing. It only succeeds where the parent is writable: inside the
// sandbox's own tmpfs mounts, never on the host.
func ensureMountpoint(target string, dir bool) error {
	if _, err := os.Lstat(target); err == nil {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
		return err
	}
	if dir {
		return os.Mkdir(target, 0o755)
	}
	f, err := os.OpenFile(target, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o444)
	if err != nil {
		return err
	}
	return f.Close()
}

// mountDev builds a minimal /dev: the harmless character devices bound from
// the host, a private devpts, a tmpfs /dev/shm; then seals it read-only.
func mountDev(dev string) error {
	if err := unix.Mount("tmpfs", dev, "tmpfs", unix.MS_NOSUID|unix.MS_NOEXEC, "mode=0755,size=64k"); err != nil {
		return err
	}
	for _, n := range []string{"null", "zero", "full", "random", "urandom", "tty"} {
		t := filepath.Join(dev, n)
		if err := ensureMountpoint(t, false); err != nil {
			return err
		}
		if err := unix.Mount("/dev/"+n, t, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("/dev/%s: %w", n, err)
		}
	}
	for _, d := range []string{"pts", "shm"} {
		if err := os.Mkdir(filepath.Join(dev, d), 0o755); err != nil {
			return err
		}
	}
	if err := unix.Mount("devpts", filepath.Join(dev, "pts"), "devpts", unix.MS_NOSUID|unix.MS_NOEXEC, "newinstance,ptmxmode=0666,mode=0620"); err != nil {
		return fmt.Errorf("devpts: %w", err)
	}
	if err := unix.Mount("tmpfs", filepath.Join(dev, "shm"), "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=1777"); err != nil {
		return fmt.Errorf("/dev/shm: %w", err)
	}
	// The terminal moat runs on, under a name ttyname(3) finds: the
	// private devpts does not hold it, so tty(1) said "not a tty". As in
	// container runtimes, it is /dev/console. The command holds that
	// terminal as a standard stream already (TIOCSTI stays refused); a
	// failure here only loses the name.
	for fd := 0; fd <= 2; fd++ {
		if _, err := unix.IoctlGetTermios(fd, unix.TCGETS); err != nil {
			continue
		}
		// By its name in this mount namespace (a bind from the descriptor
		// itself would name the host namespace's mount), if that name is
		// still the same device.
		name, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd))
		var byFD, byName unix.Stat_t
		if err == nil && strings.HasPrefix(name, "/dev/") && unix.Fstat(fd, &byFD) == nil &&
			unix.Stat(name, &byName) == nil && byName.Rdev == byFD.Rdev && byName.Mode&unix.S_IFMT == unix.S_IFCHR {
			t := filepath.Join(dev, "console")
			if ensureMountpoint(t, false) == nil {
				if unix.Mount(name, t, "", unix.MS_BIND|unix.MS_NOSUID|unix.MS_NOEXEC, "") != nil {
					_ = os.Remove(t)
				}
			}
		}
		break
	}
	for name, to := range map[string]string{"ptmx": "pts/ptmx", "fd": "/proc/self/fd",
		"stdin": "/proc/self/fd/0", "stdout": "/proc/self/fd/1", "stderr": "/proc/self/fd/2"} {
		if err := os.Symlink(to, filepath.Join(dev, name)); err != nil {
			return err
		}
	}
	return setattr(dev, 0, unix.MOUNT_ATTR_RDONLY)
}

// loopbackUp sets IFF_UP on lo (10. of the mount order): the relay listens
// there and the new network namespace has nothing else.
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return err
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP | unix.IFF_RUNNING)
	return unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr)
}

// PassMarker is the one byte that carries a passed connection's
// descriptor (SCM_RIGHTS) on the gateway socket.
const PassMarker = 0xfd

// passConn hands c's descriptor to the gateway and closes our copies. It
// reports false (and c stays usable) if the descriptor could not be sent.
func passConn(c, g net.Conn) bool {
	tc, ok1 := c.(*net.TCPConn)
	uc, ok2 := g.(*net.UnixConn)
	if !ok1 || !ok2 {
		return false
	}
	f, err := tc.File() // a duplicate: the gateway gets its own
	if err != nil {
		return false
	}
	_, _, err = uc.WriteMsgUnix([]byte{PassMarker}, unix.UnixRights(int(f.Fd())), nil)
	f.Close()
	if err != nil {
		return false
	}
	c.Close()
	g.Close()
	return true
}

// startRelays listens on the proxy ports of DESIGN §4 and relays each
// connection to the gateway socket. IPv4 must work; IPv6 is best effort
// (a kernel booted with ipv6.disable has no ::1).
func startRelays(gateway string, pass bool) error {
	for _, port := range []int{DefaultHTTPPort, DefaultSOCKSPort} {
		p := strconv.Itoa(port)
		ln, err := net.Listen("tcp4", "127.0.0.1:"+p)
		if err != nil {
			return err
		}
		go serveRelay(ln, gateway, pass)
		if ln6, err := net.Listen("tcp6", "[::1]:"+p); err == nil {
			go serveRelay(ln6, gateway, pass)
		}
	}
	return nil
}

func serveRelay(ln net.Listener, gateway string, pass bool) {
	var d net.Dialer
	d.Timeout = 10 * time.Second
	for {
		c, err := ln.Accept()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			if errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(10 * time.Millisecond) // EMFILE and friends: back off, keep serving
			continue
		}
		go func() {
			g, err := d.Dial("unix", gateway)
			if err != nil {
				c.Close()
				return
			}
			if pass && passConn(c, g) {
				return
			}
			Relay(c, g)
		}()
	}
}

// dropCapabilities empties the bounding, ambient, inheritable, permitted and
// effective sets of this thread (the one that will exec), and checks.
func dropCapabilities() error {
	last := 63
	if v, err := strconv.Atoi(readSysctl("kernel/cap_last_cap")); err == nil {
		last = v
	}
	var boundErr error
	for c := 0; c <= last; c++ {
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil && err != unix.EINVAL && boundErr == nil {
			boundErr = err
		}
	}
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil && err != unix.EINVAL {
		return fmt.Errorf("clear ambient: %w", err)
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capset: %w", err)
	}
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capget: %w", err)
	}
	for _, d := range data {
		if d.Effective != 0 || d.Permitted != 0 || d.Inheritable != 0 {
			return errors.New("capabilities remain after capset")
		}
	}
	// PID 1 is root of a fresh user namespace and holds CAP_SETPCAP there:
	// every drop must succeed.
	if boundErr != nil {
		return fmt.Errorf("bounding set: %w", boundErr)
	}
	return nil
}

func envValue(env []string, k string) string {
	for i := len(env) - 1; i >= 0; i-- {
		if v, ok := strings.CutPrefix(env[i], k+"="); ok {
			return v
		}
	}
	return ""
}

// lookPath resolves name against path (the command's PATH, not ours).
func lookPath(name, path string) (string, error) {
	if strings.Contains(name, "/") {
		if err := checkExec(name); err != nil {
			return "", err
		}
		return name, nil
	}
	if path == "" {
		path = "/usr/local/bin:/usr/bin:/bin"
	}
	var permErr error
	for _, dir := range filepath.SplitList(path) {
		if dir == "" {
			dir = "."
		}
		p := filepath.Join(dir, name)
		if err := checkExec(p); err == nil {
			return p, nil
		} else if errors.Is(err, os.ErrPermission) {
			permErr = err
		}
	}
	if permErr != nil {
		return "", permErr
	}
	return "", errors.New("command not found")
}

func checkExec(p string) error {
	fi, err := os.Stat(p)
	if err != nil {
		return err
	}
	if fi.IsDir() || fi.Mode()&0o111 == 0 {
		return &os.PathError{Op: "exec", Path: p, Err: os.ErrPermission}
	}
	return nil
}
