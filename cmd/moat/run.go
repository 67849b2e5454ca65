package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/moat-dev/moat/ca"
	"github.com/moat-dev/moat/config"
	"github.com/moat-dev/moat/gateway"
	"github.com/moat-dev/moat/gateway/audit"
	"github.com/moat-dev/moat/gateway/policy"
	"github.com/moat-dev/moat/sandbox"
)

func extraCmds(s stdio) []*cobra.Command {
	return []*cobra.Command{runCmd(s), planCmd(s), proxyConnectCmd(s), caCmd(s)}
}

// runFlags are the flags shared by run and plan.
type runFlags struct {
	settings    string
	allow       []string
	allowWrite  []string
	shellString string
	report      bool
	verbose     bool
}

func (f *runFlags) register(c *cobra.Command, withRun bool) {
	fl := c.Flags()
	fl.StringVar(&f.settings, "settings", "", "settings file (YAML or srt JSON); default: the DESIGN search order")
	fl.StringArrayVar(&f.allow, "allow", nil, "also allow HOST[:PORT] (repeatable; same syntax as network.allowedDomains)")
	fl.StringArrayVar(&f.allowWrite, "allow-write", nil, "also allow writes under PATH (repeatable)")
	fl.StringVarP(&f.shellString, "command", "c", "", "run STRING with /bin/sh -c")
	if withRun {
		fl.BoolVar(&f.report, "report", false, "append the run's denials to stderr as <sandbox_violations>")
		fl.BoolVarP(&f.verbose, "verbose", "v", false, "log debug details to stderr")
	}
}

// argv is the command to run: -c STRING or the args after --.
func (f *runFlags) argv(args []string) ([]string, error) {
	switch {
	case f.shellString != "" && len(args) > 0:
		return nil, usageErr("give either -c STRING or -- CMD ARGS..., not both")
	case f.shellString != "":
		return []string{"/bin/sh", "-c", f.shellString}, nil
	case len(args) > 0:
		return args, nil
	}
	return nil, usageErr("no command: use moat run -- CMD ARGS... or moat run -c 'STRING'")
}

// expandPath makes p absolute: "~" and "~/x" from home, relative paths from
// dir.
func expandPath(p, home, dir string) string {
	switch {
	case p == "~":
		return home
	case strings.HasPrefix(p, "~/"):
		return filepath.Join(home, p[2:])
	case filepath.IsAbs(p):
		return filepath.Clean(p)
	}
	return filepath.Join(dir, p)
}

func expandAll(ps []string, home, dir string) []string {
	out := make([]string, 0, len(ps))
	for _, p := range ps {
		out = append(out, expandPath(p, home, dir))
	}
	return out
}

// sandboxSpec maps the settings file onto a sandbox.Spec.
func sandboxSpec(f *config.File, fl *runFlags, argv []string, s stdio) (sandbox.Spec, error) {
	dir, err := os.Getwd()
	if err != nil {
		return sandbox.Spec{}, err
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return sandbox.Spec{}, fmt.Errorf("home directory: %w", err)
	}
	fs := &f.Filesystem
	spec := sandbox.Spec{
		Args: argv,
		Dir:  dir,
		Env:  os.Environ(),
		// The credential stores of the built-in default are always denied,
		// whatever the settings say (allowRead re-opens one on purpose).
		DenyRead:            expandAll(append(append([]string(nil), fs.DenyRead...), config.DefaultDenyRead...), home, dir),
		AllowRead:           expandAll(fs.AllowRead, home, dir),
		AllowWrite:          expandAll(append(append([]string(nil), fs.AllowWrite...), fl.allowWrite...), home, dir),
		DenyWrite:           expandAll(fs.DenyWrite, home, dir),
		AllowGitConfig:      fs.AllowGitConfig,
		MandatoryDenyDepth:  f.SearchDepth(),
		AllowAllUnixSockets: f.Network.AllowAllUnixSockets,
		AllowUnixSockets:    expandAll(f.Network.AllowUnixSockets, home, dir),
		WeakerNested:        f.EnableWeakerNestedSandbox,
		Stdin:               s.in,
		Stdout:              s.out,
		Stderr:              s.err,
	}
	if fs.Disabled {
		// srt's filesystem.disabled drops every filesystem rule, the
		// credential stores of the default included: only the network is
		// sandboxed. moat's own files below stay protected.
		spec.OpenFilesystem = true
		spec.DenyRead, spec.AllowRead, spec.AllowWrite, spec.DenyWrite = nil, nil, nil, nil
	}
	// The settings moat itself reads are never writable from inside: an
	// agent must not widen the policy of the next run.
	spec.DenyWrite = append(spec.DenyWrite,
		filepath.Join(home, ".config", "moat"),
		filepath.Join(home, ".srt-settings.json"),
	)
	// The CA's key never enters the sandbox, wherever it lives, and
	// neither does any session's private gateway directory (ours is bound
	// into /run/moat from its host path). No allow entry re-opens them.
	var forced []string
	if caDir, err := ca.DefaultDir(); err == nil {
		forced = append(forced, filepath.Join(caDir, ca.KeyFile))
		spec.DenyWrite = append(spec.DenyWrite, caDir)
	}
	if t := f.Network.TLSTerminate; t != nil && t.CAKeyPath != "" {
		forced = append(forced, expandPath(t.CAKeyPath, home, dir))
	}
	if base, err := gatewayBase(); err == nil {
		forced = append(forced, base)
	}
	if err := notReopened(spec, forced); err != nil {
		return sandbox.Spec{}, err
	}
	spec.AlwaysHidden = append(spec.AlwaysHidden, forced...)
	// The project's own settings file is searched first: never writable,
	// even when filesystem.disabled turns the mandatory denies off. Nor is
	// the audit log, which a command could otherwise forge.
	spec.DenyWrite = append(spec.DenyWrite, filepath.Join(dir, ".moat.yaml"))
	if p := auditPath(f); p != "" {
		spec.DenyWrite = append(spec.DenyWrite, p)
	}
	if p := os.Getenv(config.EnvSettings); p != "" {
		spec.DenyWrite = append(spec.DenyWrite, expandPath(p, home, dir))
	}
	if fl.settings != "" {
		spec.DenyWrite = append(spec.DenyWrite, expandPath(fl.settings, home, dir))
	}
	return spec, nil
}

// notReopened refuses allow entries that name a path moat always hides, or
// a path inside one: an allow entry that names a denied path re-opens it.
func notReopened(spec sandbox.Spec, hidden []string) error {
	for _, list := range []struct {
		field string
		paths []string
	}{{"filesystem.allowRead", spec.AllowRead}, {"filesystem.allowWrite (or --allow-write)", spec.AllowWrite}} {
		for _, a := range list.paths {
			for _, h := range hidden {
				if a == h || strings.HasPrefix(a, h+"/") {
					return usageErr("%s: %s is always hidden from the sandbox (%s); remove the entry", list.field, a, h)
				}
			}
		}
	}
	return nil
}

// violations collects the denials of one run for --report.
type violations struct {
	mu    sync.Mutex
	lines []string
	// ignore is srt's ignoreViolations: "*" patterns apply to every
	// command, other keys when they are a substring of the command; a
	// line containing one of the patterns is not reported.
	ignore  map[string][]string
	command string
}

func (v *violations) ignored(line string) bool {
	for key, pats := range v.ignore {
		if key != "*" && !strings.Contains(v.command, key) {
			continue
		}
		for _, p := range pats {
			if p != "" && strings.Contains(line, p) {
				return true
			}
		}
	}
	return false
}

func (v *violations) Write(e audit.Event) {
	if e.Verdict != "deny" {
		return
	}
	var line string
	if e.Method != "" && e.Proto != "http" {
		line = fmt.Sprintf("deny http-request %s https://%s%s (rule %s)", e.Method, e.Host, e.Path, e.Rule)
	} else {
		why := e.Reason
		if r, ok := policy.ReasonByCode(e.Reason); ok {
			why = r.String()
		}
		line = fmt.Sprintf("deny network-outbound %s:%d (%s)", e.Host, e.Port, why)
	}
	if v.ignored(line) {
		return
	}
	v.mu.Lock()
	v.lines = append(v.lines, line)
	v.mu.Unlock()
}

func (v *violations) print(w io.Writer) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if len(v.lines) == 0 {
		return
	}
	fmt.Fprintln(w, "<sandbox_violations>")
	for _, l := range v.lines {
		fmt.Fprintln(w, l)
	}
	fmt.Fprintln(w, "</sandbox_violations>")
}

// privateDir makes a 0700 directory for the per-session gateway socket: the
// socket is the credential, so only this run's sandbox relay may reach it.
func privateDir() (string, error) {
	base, err := gatewayBase()
	if err != nil {
		return "", err
	}
	return os.MkdirTemp(base, "session-")
}

// gatewayBase is the 0700 directory that holds every session's private
// gateway directory: one stable path the sandbox hides, whatever sessions
// come and go meanwhile.
func gatewayBase() (string, error) {
	base := os.Getenv("XDG_RUNTIME_DIR")
	if base == "" {
		base = os.TempDir()
	}
	dir := filepath.Join(base, fmt.Sprintf("moat-gw-%d", os.Getuid()))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return "", err
	}
	if !fi.IsDir() || fi.Mode().Perm() != 0o700 || !ownedByMe(fi) {
		return "", fmt.Errorf("%s must be a directory of yours with mode 0700 (remove it to let moat recreate it)", dir)
	}
	return dir, nil
}

// takeEarly hands over the sandbox main's initialization started, if any
// (see package early). Tests leave it nil.
var takeEarly func() (*sandbox.Pending, error, bool)

func prepareSandbox(s stdio) (*sandbox.Pending, error) {
	if takeEarly != nil && s.in == os.Stdin && s.out == os.Stdout && s.err == os.Stderr {
		if p, err, ok := takeEarly(); ok {
			return p, err
		}
	}
	return sandbox.Prepare(s.in, s.out, s.err)
}

func runCmd(s stdio) *cobra.Command {
	fl := &runFlags{}
	c := &cobra.Command{
		Use:   "run [--settings F] [--allow HOST[:PORT]]... [--allow-write PATH]... [--report] (-c STRING | -- CMD ARGS...)",
		Short: "Run a command in the sandbox; its only way out is moat's gateway",
		RunE: func(cmd *cobra.Command, args []string) error {
			argv, err := fl.argv(args)
			if err != nil {
				return err
			}
			// PID 1's runtime boots while the settings load and the gateway
			// starts: the longest step of a launch, overlapped. The binary
			// started it during initialization (package early) when the
			// standard streams are its own.
			pending, err := prepareSandbox(s)
			if err != nil {
				return withCode(sandbox.SetupExitCode, err)
			}
			ran := false
			defer func() {
				if !ran {
					pending.Abort()
				}
			}()
			st, err := loadStack(fl.settings, fl.allow)
			if err != nil {
				return err
			}
			tuneGC()
			spec, err := sandboxSpec(st.file, fl, argv, s)
			if err != nil {
				return withCode(exitUsage, err)
			}
			sink, closeAudit, err := auditSinks(st.file, "", s)
			if err != nil {
				return err
			}
			viol := &violations{ignore: st.file.IgnoreViolations, command: strings.Join(argv, " ")}
			log := logger(s, fl.verbose)
			o, auth, err := st.gatewayOptions(audit.Multi{sink, viol}, log, s)
			if err != nil {
				closeAudit()
				return err
			}
			o.NoAuth, o.Session, o.AcceptPassed = true, "run-"+randomID(4), true
			gw, err := gateway.New(o)
			if err != nil {
				closeAudit()
				return err
			}
			st.gw = gw
			dir, err := privateDir()
			if err != nil {
				closeAudit()
				return withCode(sandbox.SetupExitCode, fmt.Errorf("gateway socket directory: %w", err))
			}
			defer os.RemoveAll(dir)
			if auth != nil {
				if spec.TrustBundle, err = writeTrustBundle(st.file, auth, dir); err != nil {
					closeAudit()
					return err
				}
			}
			if st.creds != nil {
				// The real values never enter the sandbox: masked variables
				// hold sentinels, masked files are shadowed by sentinel
				// copies, denied ones are removed or read-denied.
				spec.Env = st.creds.SandboxEnv(spec.Env)
				if spec.Overlays, err = st.creds.MaskedFiles(dir); err != nil {
					closeAudit()
					return withCode(sandbox.SetupExitCode, fmt.Errorf("masked credential files: %w", err))
				}
				denied := st.creds.DeniedFiles()
				if err := notReopened(spec, denied); err != nil {
					closeAudit()
					return err
				}
				spec.AlwaysHidden = append(spec.AlwaysHidden, denied...)
			}
			sock := filepath.Join(dir, "gateway.sock")
			l, err := net.Listen("unix", sock)
			if err != nil {
				closeAudit()
				return withCode(sandbox.SetupExitCode, fmt.Errorf("gateway socket: %w", err))
			}
			go gw.Serve(l)
			spec.GatewaySocket = sock
			spec.PassConnections = true // our own gateway takes descriptors
			spec.Logger = log
			// Signals are forwarded by sandbox.Run itself; cancelling would
			// SIGKILL the command instead of letting it handle SIGINT.
			ran = true
			code, runErr := pending.Run(context.WithoutCancel(cmd.Context()), spec)
			gctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			gw.Shutdown(gctx)
			cancel()
			closeAudit()
			if fl.report {
				viol.print(s.err)
			}
			if runErr != nil {
				return withCode(code, runErr)
			}
			if code != 0 {
				return &exitError{code: code}
			}
			return nil
		},
	}
	fl.register(c, true)
	c.Flags().SetInterspersed(false)
	return c
}

func planCmd(s stdio) *cobra.Command {
	fl := &runFlags{}
	c := &cobra.Command{
		Use:   "plan [--settings F] [-- CMD ARGS...]",
		Short: "Print what the sandbox would be (mounts, seccomp, environment, network policy) without running it",
		RunE: func(cmd *cobra.Command, args []string) error {
			argv := []string{"/bin/sh"}
			if fl.shellString != "" || len(args) > 0 {
				var err error
				if argv, err = fl.argv(args); err != nil {
					return err
				}
			}
			st, err := loadStack(fl.settings, fl.allow)
			if err != nil {
				return err
			}
			spec, err := sandboxSpec(st.file, fl, argv, s)
			if err != nil {
				return withCode(exitUsage, err)
			}
			spec.GatewaySocket = "/run/user/moat-gw-XXXXXX/gateway.sock"
			p, err := sandbox.Plan(spec)
			if err != nil {
				return withCode(exitUsage, err)
			}
			fmt.Fprintf(s.out, "settings: %s\n%s", st.source, p)
			fmt.Fprintf(s.out, "network (policy %s):\n%s", st.policy.Hash(), st.file.Summary())
			return nil
		},
	}
	fl.register(c, false)
	c.Flags().SetInterspersed(false)
	return c
}

// proxyConnectCmd is the ssh ProxyCommand inside the sandbox: it opens a
// CONNECT tunnel through the relay and joins it to stdin/stdout.
func proxyConnectCmd(s stdio) *cobra.Command {
	var proxyAddr string
	c := &cobra.Command{
		Use:   "proxy-connect HOST PORT",
		Short: "Join stdin/stdout to HOST:PORT through the gateway (ssh ProxyCommand)",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			port, err := strconv.ParseUint(args[1], 10, 16)
			if err != nil || port == 0 {
				return usageErr("proxy-connect: PORT %q must be 1-65535", args[1])
			}
			target := net.JoinHostPort(args[0], strconv.Itoa(int(port)))
			c, err := net.DialTimeout("tcp", proxyAddr, 10*time.Second)
			if err != nil {
				return fmt.Errorf("proxy-connect: reach the gateway at %s: %w", proxyAddr, err)
			}
			defer c.Close()
			fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
			br := bufio.NewReader(c)
			resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
			if err != nil {
				return fmt.Errorf("proxy-connect: read gateway response: %w", err)
			}
			if resp.StatusCode != http.StatusOK {
				body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
				return withCode(1, fmt.Errorf("proxy-connect %s: %s\n%s", target, resp.Status, body))
			}
			// Bytes the upstream sent right away (an ssh banner) may sit in
			// the reader already.
			if n := br.Buffered(); n > 0 {
				b, _ := br.Peek(n)
				s.out.Write(b)
			}
			done := make(chan struct{})
			go func() {
				io.Copy(c, s.in)
				if tc, ok := c.(*net.TCPConn); ok {
					tc.CloseWrite()
				}
				close(done)
			}()
			io.Copy(s.out, c)
			return nil
		},
	}
	c.Flags().StringVar(&proxyAddr, "proxy", "127.0.0.1:3128", "the gateway relay's address")
	return c
}
