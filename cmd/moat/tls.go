package main

import (
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/moat-dev/moat/ca"
	"github.com/moat-dev/moat/config"
	"github.com/moat-dev/moat/gateway/audit"
	"github.com/moat-dev/moat/gateway/policy"
	"github.com/moat-dev/moat/mitm"
)

// needsInspection reports whether the settings can produce Inspect
// decisions: TLS termination, per-request or git rules, or masked
// credentials.
func needsInspection(f *config.File) bool {
	n := &f.Network
	if n.TLSTerminate != nil || len(n.Rules) > 0 || len(n.Git) > 0 {
		return true
	}
	for _, e := range f.Credentials.EnvVars {
		if e.Mode == config.ModeMask {
			return true
		}
	}
	for _, e := range f.Credentials.Files {
		if e.Mode == config.ModeMask {
			return true
		}
	}
	return false
}

// loadCA loads tlsTerminate.caCertPath/caKeyPath, or creates moat's own CA
// once under the config directory.
func loadCA(f *config.File) (*ca.Authority, error) {
	if t := f.Network.TLSTerminate; t != nil && (t.CACertPath != "" || t.CAKeyPath != "") {
		if t.CACertPath == "" || t.CAKeyPath == "" {
			return nil, usageErr("network.tlsTerminate: set both caCertPath and caKeyPath, or neither (moat then uses its own CA)")
		}
		return ca.Load(t.CACertPath, t.CAKeyPath)
	}
	return ca.LoadOrCreate("")
}

// mitmRules maps the settings' rules onto mitm's plain spec types.
func mitmRules(f *config.File) (*mitm.RuleSet, error) {
	var rules []mitm.Rule
	for _, r := range f.Network.Rules {
		mr := mitm.Rule{ID: r.ID, Host: r.Host}
		conv := func(ms []config.Match) []mitm.Match {
			var out []mitm.Match
			for _, m := range ms {
				out = append(out, mitm.Match{Methods: m.Method, Path: m.Path, Query: m.Query, Headers: m.Headers, Reason: m.Reason})
			}
			return out
		}
		mr.Allow, mr.Deny = conv(r.Allow), conv(r.Deny)
		rules = append(rules, mr)
	}
	var git []mitm.GitRule
	for _, g := range f.Network.Git {
		gr := mitm.GitRule{Host: g.Host, Fetch: g.Fetch}
		for _, p := range g.Push {
			gr.Push = append(gr.Push, mitm.GitPush{Repo: p.Repo, Refs: p.Refs, AllowDelete: p.AllowDelete, AllowTags: p.AllowTags})
		}
		git = append(git, gr)
	}
	return mitm.CompileRules(rules, git)
}

// upstreamRoots are the system roots plus tlsTerminate.upstreamCaCertPaths.
func upstreamRoots(f *config.File) (*x509.CertPool, error) {
	pool, err := x509.SystemCertPool()
	if err != nil || pool == nil {
		pool = x509.NewCertPool()
	}
	if t := f.Network.TLSTerminate; t != nil {
		for i, p := range t.UpstreamCACertPaths {
			data, err := os.ReadFile(p)
			if err != nil {
				return nil, usageErr("network.tlsTerminate.upstreamCaCertPaths[%d]: %v", i, err)
			}
			if !pool.AppendCertsFromPEM(data) {
				return nil, usageErr("network.tlsTerminate.upstreamCaCertPaths[%d]: %s holds no PEM certificate", i, p)
			}
		}
	}
	return pool, nil
}

// interceptor builds TLS termination for st, or nil when the settings never
// inspect. It also returns the CA, for the sandbox's trust bundle.
func (st *stack) interceptor(sink audit.Sink, log *slog.Logger) (*mitm.Interceptor, *ca.Authority, error) {
	if !needsInspection(st.file) {
		return nil, nil, nil
	}
	auth, err := loadCA(st.file)
	if err != nil {
		return nil, nil, withCode(exitUsage, fmt.Errorf("TLS termination CA: %w", err))
	}
	rules, err := mitmRules(st.file)
	if err != nil {
		return nil, nil, withCode(exitUsage, err)
	}
	roots, err := upstreamRoots(st.file)
	if err != nil {
		return nil, nil, err
	}
	i, err := mitm.New(mitm.Options{
		CA: auth, Rules: rules, UpstreamRoots: roots, Dial: st.dialGateway,
		Audit: sink, Logger: log, PolicyHash: st.policy.Hash(),
		Credentials: st.creds, AllowPlaintextInject: st.file.Credentials.AllowPlaintextInject,
		OnLeak: st.quarantine.Leak, Quarantined: st.quarantine.Active,
	})
	if err != nil {
		return nil, nil, err
	}
	return i, auth, nil
}

// dialGateway dials for the interceptor the way the gateway dials (parent
// proxy, checked dialer). Before the gateway exists it refuses.
func (st *stack) dialGateway(ctx context.Context, d policy.Decision) (net.Conn, netip.AddrPort, error) {
	if st.gw == nil {
		return nil, netip.AddrPort{}, errors.New("moat: gateway not started")
	}
	return st.gw.Dial(ctx, d)
}

// writeTrustBundle writes the moat CA, the system roots and
// tlsTerminate.extraCaCertPaths to dir/trust-bundle.pem.
func writeTrustBundle(f *config.File, auth *ca.Authority, dir string) (string, error) {
	var extra []string
	if t := f.Network.TLSTerminate; t != nil {
		extra = t.ExtraCACertPaths
	}
	pem, err := ca.TrustBundle(auth, extra)
	if err != nil {
		return "", withCode(exitUsage, err)
	}
	p := filepath.Join(dir, "trust-bundle.pem")
	if err := os.WriteFile(p, pem, 0o644); err != nil {
		return "", err
	}
	return p, nil
}

func caCmd(s stdio) *cobra.Command {
	c := &cobra.Command{Use: "ca", Short: "Manage moat's TLS-termination CA (ECDSA P-256, key mode 0600)"}
	dir := func() (string, error) {
		d, err := ca.DefaultDir()
		if err != nil {
			return "", withCode(exitUsage, err)
		}
		return d, nil
	}
	c.AddCommand(&cobra.Command{
		Use: "init", Short: "Create the CA once (no-op when it exists)", Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			a, err := ca.LoadOrCreate("")
			if err != nil {
				return withCode(exitUsage, err)
			}
			d, _ := dir()
			fmt.Fprintf(s.out, "CA ready: %s (fingerprint %s)\n", filepath.Join(d, ca.CertFile), fingerprint(a))
			return nil
		},
	}, &cobra.Command{
		Use: "path", Short: "Print the CA certificate's path", Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			d, err := dir()
			if err != nil {
				return err
			}
			fmt.Fprintln(s.out, filepath.Join(d, ca.CertFile))
			return nil
		},
	}, &cobra.Command{
		Use: "show", Short: "Print the CA's subject, validity and fingerprint", Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			d, err := dir()
			if err != nil {
				return err
			}
			a, err := ca.Load(filepath.Join(d, ca.CertFile), filepath.Join(d, ca.KeyFile))
			if err != nil {
				return withCode(exitUsage, fmt.Errorf("%w (run moat ca init)", err))
			}
			cert := a.Certificate()
			fmt.Fprintf(s.out, "subject: %s\nnot before: %s\nnot after: %s\nsha256: %s\n",
				cert.Subject, cert.NotBefore.UTC(), cert.NotAfter.UTC(), fingerprint(a))
			return nil
		},
	}, &cobra.Command{
		Use: "export", Short: "Write the CA certificate (PEM, never the key) to stdout", Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			a, err := ca.LoadOrCreate("")
			if err != nil {
				return withCode(exitUsage, err)
			}
			_, err = s.out.Write(a.CertPEM())
			return err
		},
	})
	return c
}

func fingerprint(a *ca.Authority) string {
	sum := sha256.Sum256(a.Certificate().Raw)
	return hex.EncodeToString(sum[:])
}
