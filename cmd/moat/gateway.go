package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"runtime/debug"
	"runtime/pprof"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/moat-dev/moat/ca"
	"github.com/moat-dev/moat/config"
	"github.com/moat-dev/moat/credentials"
	"github.com/moat-dev/moat/gateway"
	"github.com/moat-dev/moat/gateway/audit"
	"github.com/moat-dev/moat/gateway/policy"
	"github.com/moat-dev/moat/resolver"
)

// stack is a policy with the resolver and dialer that enforce it.
type stack struct {
	file   *config.File
	source string
	policy *policy.Policy
	dialer *resolver.Dialer
	creds  *credentials.Set // loaded by gatewayOptions
	// quarantine is shared by the gateway and the interceptor.
	quarantine *gateway.Quarantine
	// gw is the running gateway; the interceptor dials through it.
	gw *gateway.Gateway
}

// loadStack resolves the settings (DESIGN §2 order) and compiles them. Any
// failure is a usage error (exit 2): never a silent default.
func loadStack(settings string, extraAllow []string) (*stack, error) {
	f, source, err := config.Resolve(settings)
	if err != nil {
		return nil, withCode(exitUsage, err)
	}
	f.Network.AllowedDomains = append(f.Network.AllowedDomains, extraAllow...)
	local, err := resolver.LocalAddrs()
	if err != nil {
		return nil, fmt.Errorf("list this host's addresses: %w", err)
	}
	pol, err := f.Compile(local)
	if err != nil {
		return nil, withCode(exitUsage, fmt.Errorf("%s: %w", source, err))
	}
	res, err := resolver.New(resolver.Options{Servers: f.DNS.Servers, Timeout: f.DNSTimeout()})
	if err != nil {
		return nil, withCode(exitUsage, err)
	}
	return &stack{file: f, source: source, policy: pol, dialer: &resolver.Dialer{Resolver: res, Policy: pol}}, nil
}

// gatewayOptions assembles the gateway's options from the stack: the
// policy, the checked dialer, TLS termination and the parent proxy. It also
// returns the CA, when TLS is terminated, for the sandbox's trust bundle.
func (st *stack) gatewayOptions(sink audit.Sink, log *slog.Logger, s stdio) (gateway.Options, *ca.Authority, error) {
	o := gateway.Options{Policy: st.policy, Dialer: st.dialer, Audit: sink, Logger: log}
	var err error
	if st.creds, err = loadCredentials(st.file, s); err != nil {
		return o, nil, err
	}
	o.Credentials = st.creds
	o.Quarantine = gateway.NewQuarantine(st.file.Credentials.QuarantineOnLeak)
	st.quarantine = o.Quarantine
	icpt, auth, err := st.interceptor(sink, log)
	if err != nil {
		return o, nil, err
	}
	o.Interceptor = icpt
	n := &st.file.Network
	if pp := n.ParentProxy; pp != nil {
		if o.Parent, err = gateway.ParseParent(pp.HTTP, pp.HTTPS, pp.NoProxy); err != nil {
			return o, nil, withCode(exitUsage, err)
		}
	} else if n.HTTPProxyPort != nil {
		// srt's "use an external proxy on this port": moat still decides
		// every connection, then chains through it.
		u := fmt.Sprintf("http://127.0.0.1:%d", *n.HTTPProxyPort)
		if o.Parent, err = gateway.ParseParent(u, u, ""); err != nil {
			return o, nil, withCode(exitUsage, err)
		}
	}
	unlimited := func(p *int64) int64 {
		if p == nil {
			return -1
		}
		return *p
	}
	for _, b := range n.Budgets {
		o.Budgets = append(o.Budgets, gateway.Budget{Pattern: b.Host,
			Requests: unlimited(b.Requests), BytesUp: unlimited(b.BytesUp), BytesDown: unlimited(b.BytesDown)})
	}
	return o, auth, nil
}

// auditSinks opens the audit destinations: --audit FILE overrides
// audit.path; audit.stdout adds standard output.
// auditPath is audit.path with "~" and a relative path expanded, as the
// filesystem paths are; "" when unset.
func auditPath(f *config.File) string {
	if f.Audit.Path == "" {
		return ""
	}
	home, _ := os.UserHomeDir()
	dir, _ := os.Getwd()
	return expandPath(f.Audit.Path, home, dir)
}

func auditSinks(f *config.File, path string, s stdio) (audit.Sink, func() error, error) {
	if path == "" {
		path = auditPath(f)
	}
	var sinks audit.Multi
	var closers []func() error
	if path != "" {
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return nil, nil, withCode(exitUsage, fmt.Errorf("audit.path %s: %w", path, err))
		}
		fh, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
		if err != nil {
			return nil, nil, withCode(exitUsage, fmt.Errorf("open audit log: %w", err))
		}
		j := audit.NewJSONL(fh)
		sinks = append(sinks, j)
		closers = append(closers, j.Close, fh.Close)
	}
	if f.Audit.Stdout {
		j := audit.NewJSONL(s.out)
		sinks = append(sinks, j)
		closers = append(closers, j.Close)
	}
	closeAll := func() error {
		var errs []error
		for _, c := range closers {
			errs = append(errs, c())
		}
		return errors.Join(errs...)
	}
	return sinks, closeAll, nil
}

// listen opens "unix:/path", "/path" (unix sockets) or "host:port" (TCP).
func listen(addr string) (net.Listener, error) {
	path, isUnix := strings.CutPrefix(addr, "unix:")
	if isUnix || strings.HasPrefix(addr, "/") || strings.HasPrefix(addr, "./") {
		if !isUnix {
			path = addr
		}
		if fi, err := os.Lstat(path); err == nil && fi.Mode()&os.ModeSocket != 0 {
			os.Remove(path) // a stale socket of an earlier run
		}
		return net.Listen("unix", path)
	}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return nil, usageErr("--listen %q: want host:port, unix:/path or /path", addr)
	}
	return net.Listen("tcp", addr)
}

// readTokens reads a token file: one "TOKEN [CLIENT [SETTINGS]]" per line,
// # comments. SETTINGS gives that client its own network policy. Errors
// never echo a token.
func readTokens(path string) (tokens map[string]string, settings map[string]string, err error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, nil, withCode(exitUsage, fmt.Errorf("--token-file: %w", err))
	}
	defer fh.Close()
	tokens, settings = map[string]string{}, map[string]string{}
	sc := bufio.NewScanner(fh)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		fs := strings.Fields(line)
		if len(fs[0]) < 16 {
			return nil, nil, usageErr("--token-file %s:%d: token is shorter than 16 characters", path, n)
		}
		if len(fs) > 3 {
			return nil, nil, usageErr("--token-file %s:%d: want \"TOKEN [CLIENT [SETTINGS]]\"", path, n)
		}
		client := fmt.Sprintf("client-%d", n)
		if len(fs) > 1 {
			client = fs[1]
		}
		if _, dup := tokens[fs[0]]; dup {
			return nil, nil, usageErr("--token-file %s:%d: token repeated", path, n)
		}
		tokens[fs[0]] = client
		if len(fs) == 3 {
			if prev, ok := settings[client]; ok && prev != fs[2] {
				return nil, nil, usageErr("--token-file %s:%d: client %s already has settings %s", path, n, client, prev)
			}
			settings[client] = fs[2]
		}
	}
	if err := sc.Err(); err != nil {
		return nil, nil, withCode(exitUsage, fmt.Errorf("--token-file %s: %w", path, err))
	}
	if len(tokens) == 0 {
		return nil, nil, usageErr("--token-file %s: no tokens (want one \"TOKEN [CLIENT [SETTINGS]]\" per line)", path)
	}
	return tokens, settings, nil
}

// clientPolicies loads each client's own settings. Only the network
// decision can differ per client: rules, git rules, credentials, TLS
// termination, budgets and the parent proxy come from the main settings,
// so a client file that sets them is refused rather than half-applied.
func clientPolicies(settings map[string]string) (map[string]gateway.ClientPolicy, error) {
	out := make(map[string]gateway.ClientPolicy, len(settings))
	for client, path := range settings {
		st, err := loadStack(path, nil)
		if err != nil {
			return nil, withCode(exitUsage, fmt.Errorf("client %s: %w", client, err))
		}
		n := &st.file.Network
		for key, set := range map[string]bool{
			"network.rules": len(n.Rules) > 0, "network.git": len(n.Git) > 0, "network.tlsTerminate": n.TLSTerminate != nil,
			"network.budgets": len(n.Budgets) > 0, "network.parentProxy": n.ParentProxy != nil,
			"credentials": len(st.file.Credentials.EnvVars)+len(st.file.Credentials.Files) > 0,
		} {
			if set {
				return nil, usageErr("client %s settings %s: %s applies to the whole gateway; set it in the main --settings file", client, path, key)
			}
		}
		out[client] = gateway.ClientPolicy{Policy: st.policy, Dialer: st.dialer}
	}
	return out, nil
}

// tuneGC trades memory for throughput on the proxy hot path: the default
// GOGC=100 spent a fifth of the gateway's CPU in GC under load. GOGC in the
// environment still wins.
func tuneGC() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(400)
	}
}

func randomID(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic("crypto/rand: " + err.Error())
	}
	return hex.EncodeToString(b)
}

func logger(s stdio, verbose bool) *slog.Logger {
	lvl := slog.LevelWarn
	if verbose {
		lvl = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(s.err, &slog.HandlerOptions{Level: lvl}))
}

func gatewayCmd(s stdio) *cobra.Command {
	var (
		settings, auditPath, tokenFile string
		listens                        []string
		noAuth, verbose                bool
		grace                          time.Duration
		cpuProfile                     string
	)
	c := &cobra.Command{
		Use:   "gateway --listen ADDR... [--settings F] [--audit FILE] [--token-file F | --no-auth]",
		Short: "Run the gateway alone, as a daemon (HTTP, CONNECT and SOCKS5 on each listener)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if len(listens) == 0 {
				return usageErr("gateway: give at least one --listen ADDR (e.g. 127.0.0.1:3128 or unix:/run/moat.sock)")
			}
			if noAuth == (tokenFile != "") {
				return usageErr("gateway: choose exactly one of --token-file FILE (lines \"TOKEN [CLIENT]\") or --no-auth (loopback and unix sockets only)")
			}
			st, err := loadStack(settings, nil)
			if err != nil {
				return err
			}
			tuneGC()
			if cpuProfile != "" {
				pf, err := os.Create(cpuProfile)
				if err != nil {
					return withCode(exitUsage, err)
				}
				pprof.StartCPUProfile(pf)
				defer func() { pprof.StopCPUProfile(); pf.Close() }()
			}
			var tokens map[string]string
			var clients map[string]gateway.ClientPolicy
			if tokenFile != "" {
				var perClient map[string]string
				if tokens, perClient, err = readTokens(tokenFile); err != nil {
					return err
				}
				if clients, err = clientPolicies(perClient); err != nil {
					return err
				}
			}
			sink, closeAudit, err := auditSinks(st.file, auditPath, s)
			if err != nil {
				return err
			}
			defer closeAudit()
			o, _, err := st.gatewayOptions(sink, logger(s, verbose), s)
			if err != nil {
				return err
			}
			o.Tokens, o.NoAuth, o.Session, o.Clients = tokens, noAuth, "gw-"+randomID(4), clients
			gw, err := gateway.New(o)
			if err != nil {
				return err
			}
			st.gw = gw
			errc := make(chan error, len(listens))
			// Every listener is opened and checked before any is served
			// or announced: one bad --listen serves nothing.
			var ls []net.Listener
			closeAll := func() {
				for _, l := range ls {
					l.Close()
				}
			}
			for _, a := range listens {
				l, err := listen(a)
				if err != nil {
					closeAll()
					return withCode(exitUsage, fmt.Errorf("listen %s: %w", a, err))
				}
				ls = append(ls, l)
				if noAuth && !gateway.IsLocalListener(l) {
					closeAll()
					return usageErr("--listen %s: --no-auth serves only loopback addresses and unix sockets; use a token file (--token-file) for other addresses", a)
				}
			}
			for _, l := range ls {
				fmt.Fprintf(s.out, "moat gateway listening on %s %s (settings: %s)\n", l.Addr().Network(), l.Addr(), st.source)
				go func() { errc <- gw.Serve(l) }()
			}
			select {
			case <-cmd.Context().Done():
			case err := <-errc:
				if !errors.Is(err, gateway.ErrClosed) {
					gctx, cancel := context.WithTimeout(context.Background(), time.Second)
					gw.Shutdown(gctx)
					cancel()
					return withCode(exitUsage, err)
				}
			}
			fmt.Fprintf(s.err, "moat gateway: draining (grace %s)\n", grace)
			gctx, cancel := context.WithTimeout(context.Background(), grace)
			defer cancel()
			if err := gw.Shutdown(gctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
				return err
			}
			return nil
		},
	}
	fl := c.Flags()
	fl.StringVar(&settings, "settings", "", "settings file (YAML or srt JSON); default: the DESIGN search order")
	fl.StringArrayVar(&listens, "listen", nil, "address to serve: host:port, unix:/path or /path (repeatable)")
	fl.StringVar(&auditPath, "audit", "", "append the JSON-lines audit log to FILE (overrides audit.path)")
	fl.StringVar(&tokenFile, "token-file", "", "file of \"TOKEN [CLIENT [SETTINGS]]\" lines; clients send TOKEN as the proxy password; SETTINGS gives a client its own network policy")
	fl.BoolVar(&noAuth, "no-auth", false, "accept clients without a token (developer mode; loopback and unix sockets only)")
	fl.DurationVar(&grace, "grace", 10*time.Second, "on SIGTERM, how long open tunnels may finish before they are closed")
	fl.BoolVarP(&verbose, "verbose", "v", false, "log debug details to stderr")
	fl.StringVar(&cpuProfile, "cpuprofile", "", "write a CPU profile to FILE (for benchmarks)")
	fl.MarkHidden("cpuprofile")
	return c
}
