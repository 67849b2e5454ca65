package main

import (
	"fmt"
	"os"

	"github.com/moat-dev/moat/config"
	"github.com/moat-dev/moat/credentials"
	"github.com/moat-dev/moat/gateway/policy/canon"
)

// defaultInjectHosts is allowedDomains without ports: srt's default for
// injectHosts.
func defaultInjectHosts(f *config.File) []string {
	var out []string
	seen := map[string]bool{}
	for _, a := range f.Network.AllowedDomains {
		p, err := canon.ParsePattern(a, false)
		if err != nil {
			continue
		}
		p.Port = 0
		if s := p.String(); !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}

// loadCredentials reads every configured secret. A missing or empty source
// is an error naming the credential, never its value.
func loadCredentials(f *config.File, s stdio) (*credentials.Set, error) {
	c := &f.Credentials
	if len(c.EnvVars) == 0 && len(c.Files) == 0 {
		return nil, nil
	}
	home, _ := os.UserHomeDir()
	dir, _ := os.Getwd()
	var specs []credentials.Spec
	hosts := func(h []string) []string {
		if len(h) == 0 {
			return defaultInjectHosts(f)
		}
		return h
	}
	for _, e := range c.EnvVars {
		specs = append(specs, credentials.Spec{Name: e.Name, Mode: e.Mode, Source: e.Source, InjectHosts: hosts(e.InjectHosts), InjectBody: e.InjectBody,
			Extract: e.Extract, OnExtractNoMatch: e.OnExtractNoMatch})
	}
	for _, fl := range c.Files {
		p := expandPath(fl.Path, home, dir)
		specs = append(specs, credentials.Spec{Name: fl.Path, Mode: fl.Mode, InjectHosts: hosts(fl.InjectHosts), InjectBody: fl.InjectBody,
			Extract: fl.Extract, OnExtractNoMatch: fl.OnExtractNoMatch, File: p})
	}
	var opts []credentials.Option
	for _, p := range c.AWSPairs {
		opts = append(opts, credentials.WithAWSPair(credentials.AWSPair{
			AccessKeyID: p.AccessKeyIDVar, SecretAccessKey: p.SecretAccessKeyVar, SessionToken: p.SessionTokenVar}))
	}
	if v := c.SigV4; v != nil {
		opts = append(opts, credentials.WithSigV4Passthrough(credentials.SigV4Passthrough{
			Streaming: v.Streaming == "passthrough", Presigned: v.Presigned == "passthrough", SigV4A: v.SigV4A == "passthrough"}))
	}
	set, warns, err := credentials.Load(specs, os.Getenv, opts...)
	if err != nil {
		return nil, withCode(exitUsage, fmt.Errorf("credentials: %w", err))
	}
	for _, w := range warns {
		fmt.Fprintln(s.err, "moat: warning:", w)
	}
	return set, nil
}
