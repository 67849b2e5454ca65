package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/moat-dev/moat/config"
	"github.com/moat-dev/moat/gateway/policy"
	"github.com/moat-dev/moat/gateway/policy/canon"
	"github.com/moat-dev/moat/mitm"
)

// parseTarget accepts host, host:port, [v6]:port or a URL. No port means
// the URL scheme's port, else 443.
func parseTarget(t string) (host string, port uint16, err error) {
	if strings.Contains(t, "://") {
		u, err := url.Parse(t)
		if err != nil {
			return "", 0, usageErr("TARGET %q: %v", t, err)
		}
		host, port = u.Hostname(), 443
		if u.Scheme == "http" || u.Scheme == "ws" {
			port = 80
		}
		if ps := u.Port(); ps != "" {
			n, err := strconv.ParseUint(ps, 10, 16)
			if err != nil || n == 0 {
				return "", 0, usageErr("TARGET %q: bad port %q (want 1-65535)", t, ps)
			}
			port = uint16(n)
		}
		return host, port, nil
	}
	if h, p, err := canon.SplitHostPort(t); err == nil {
		return h, p, nil
	}
	if strings.HasSuffix(t, ":") || (strings.Count(t, ":") == 1 && !strings.HasPrefix(t, "[")) {
		return "", 0, usageErr("TARGET %q: bad port (want host, host:port with port 1-65535, or a URL)", t)
	}
	return strings.TrimSuffix(strings.TrimPrefix(t, "["), "]"), 443, nil
}

// checkResult is the --json output of moat check.
type checkResult struct {
	Target     string      `json:"target"`
	Host       string      `json:"host"`
	Port       uint16      `json:"port"`
	Method     string      `json:"method,omitempty"`
	Verdict    string      `json:"verdict"`
	Reason     string      `json:"reason"`
	ReasonText string      `json:"reason_text"`
	Rule       string      `json:"rule,omitempty"`
	Hint       string      `json:"hint,omitempty"`
	Addrs      []addrCheck `json:"addrs,omitempty"`
	Settings   string      `json:"settings"`
}

type addrCheck struct {
	Addr    string `json:"addr"`
	Verdict string `json:"verdict"`
	Reason  string `json:"reason"`
}

func checkCmd(s stdio) *cobra.Command {
	var (
		settings, method string
		asJSON, resolve  bool
	)
	c := &cobra.Command{
		Use:   "check [--settings F] [--json] [--resolve] [--method M] TARGET",
		Short: "Print the gateway's decision for host[:port] or a URL (exit 0 allow, 1 deny, 2 error)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			host, port, err := parseTarget(args[0])
			if err != nil {
				return err
			}
			st, err := loadStack(settings, nil)
			if err != nil {
				return err
			}
			d := st.policy.Decide(policy.Request{Proto: policy.ProtoConnect, Host: host, Port: port})
			r := checkResult{
				Target: args[0], Host: d.Host.String(), Port: port, Method: strings.ToUpper(method),
				Verdict: d.Verdict.String(), Reason: d.Reason.Code(), ReasonText: d.Text(), Rule: d.Rule,
				Hint: d.Hint(), Settings: st.source,
			}
			// A method or a URL path asks for the per-request rules too.
			if d.Verdict == policy.Inspect && (method != "" || strings.Contains(args[0], "://")) {
				rules, err := mitmRules(st.file)
				if err != nil {
					return withCode(exitUsage, err)
				}
				m := strings.ToUpper(method)
				if m == "" {
					m = http.MethodGet
				}
				info := mitm.RequestInfo{Host: d.Host.String(), Port: port, Method: m, Path: "/"}
				if u, err := url.Parse(args[0]); err == nil && strings.Contains(args[0], "://") {
					if u.EscapedPath() != "" {
						info.Path = u.EscapedPath()
					}
					info.Query = u.Query()
				}
				rd := rules.Check(info)
				r.Method = m
				if rd.RuleID != "" && rd.RuleID != "none" {
					r.Rule = rd.RuleID
				}
				if !rd.Allowed {
					r.Verdict, r.Reason, r.ReasonText, r.Hint = "deny", rd.Code, rd.Reason, ""
				}
			}
			if resolve && r.Verdict != "deny" {
				ctx, cancel := context.WithTimeout(cmd.Context(), 10*time.Second)
				vs, err := st.dialer.Resolve(ctx, d)
				cancel()
				if err != nil {
					r.Verdict, r.Reason, r.ReasonText = "deny", "resolve-failed", err.Error()
				}
				any := false
				for _, v := range vs {
					a := addrCheck{Addr: v.Addr.Addr().String(), Verdict: "deny", Reason: v.Reason.Code()}
					if v.Allowed {
						a.Verdict, any = "allow", true
					}
					r.Addrs = append(r.Addrs, a)
				}
				if err == nil && !any {
					r.Verdict, r.Reason, r.ReasonText = "deny", "resolved-address", "destination resolved to a denied address"
				}
			}
			if asJSON {
				enc := json.NewEncoder(s.out)
				enc.SetIndent("", "  ")
				if err := enc.Encode(r); err != nil {
					return err
				}
			} else {
				printCheck(s, r)
			}
			if r.Verdict == "deny" {
				return &exitError{code: exitDeny}
			}
			return nil
		},
	}
	fl := c.Flags()
	fl.StringVar(&settings, "settings", "", "settings file (YAML or srt JSON)")
	fl.BoolVar(&asJSON, "json", false, "print the decision as JSON")
	fl.BoolVar(&resolve, "resolve", false, "also resolve the host and judge every address, as the gateway does before dialling")
	fl.StringVar(&method, "method", "", "HTTP method, for per-request rules")
	return c
}

func printCheck(s stdio, r checkResult) {
	host := r.Host
	if host == "" {
		host = strconv.Quote(r.Target)
	}
	fmt.Fprintf(s.out, "%s %s:%d (%s)\n", r.Verdict, host, r.Port, r.ReasonText)
	if r.Rule != "" {
		fmt.Fprintf(s.out, "  rule: %s\n", r.Rule)
	}
	fmt.Fprintf(s.out, "  reason: %s\n", r.Reason)
	for _, a := range r.Addrs {
		fmt.Fprintf(s.out, "  address %s: %s (%s)\n", a.Addr, a.Verdict, a.Reason)
	}
	if r.Verdict == "deny" && r.Hint != "" {
		fmt.Fprintf(s.out, "  %s\n", r.Hint)
	}
	fmt.Fprintf(s.out, "  settings: %s\n", r.Settings)
}

func policyCmd(s stdio) *cobra.Command {
	c := &cobra.Command{Use: "policy", Short: "Work with settings files"}
	c.AddCommand(&cobra.Command{
		Use:   "validate FILE",
		Short: "Print every problem of a settings file, or ok with a summary of what it allows",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			f, err := config.Load(args[0])
			if err == nil {
				err = f.Validate()
			}
			if err != nil {
				fmt.Fprintf(s.out, "%s: invalid\n", args[0])
				for _, line := range strings.Split(err.Error(), "\n") {
					fmt.Fprintf(s.out, "  %s\n", line)
				}
				return &exitError{code: exitUsage}
			}
			fmt.Fprintf(s.out, "ok %s\n%s", args[0], f.Summary())
			return nil
		},
	})
	return c
}

// version is set at link time (-ldflags "-X main.version=…"); otherwise the
// module build info is used.
var version = ""

func versionCmd(s stdio) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print moat's version",
		Args:  cobra.NoArgs,
		Run: func(cmd *cobra.Command, _ []string) {
			v := version
			if bi, ok := debug.ReadBuildInfo(); ok && v == "" {
				v = bi.Main.Version
				for _, st := range bi.Settings {
					if st.Key == "vcs.revision" && len(st.Value) >= 12 {
						v += " " + st.Value[:12]
					}
				}
			}
			if v == "" {
				v = "(devel)"
			}
			fmt.Fprintf(s.out, "moat %s\n", v)
		},
	}
}
