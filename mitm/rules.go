package mitm

import (
	"errors"
	"fmt"
	"net/http"
	"net/textproto"
	"net/url"
	"strings"

	"github.com/moat-dev/moat/gateway/policy/canon"
)

// Rule is one network.rules entry, as plain data: requests to Host are
// checked against Deny first, then Allow.
type Rule struct {
	ID    string
	Host  string // a host pattern (DESIGN §2 syntax)
	Allow []Match
	Deny  []Match
}

// Match matches one HTTP request; every field that is set must match.
type Match struct {
	Methods []string          // empty or "*": every method
	Path    string            // glob over the decoded path; empty: "/**"
	Query   map[string]string // key → value glob ("*": present)
	Headers map[string]string // name → value glob
	Reason  string            // text of a deny; empty: "request denied by rule"
}

// GitRule is one network.git entry.
type GitRule struct {
	Host  string   // a host pattern
	Fetch []string // "owner/repo" globs (.git optional) that may be fetched
	Push  []GitPush
}

// GitPush allows pushes to the repositories matching Repo.
type GitPush struct {
	Repo        string   // "owner/repo" glob
	Refs        []string // ref globs a push may create or update
	AllowDelete bool
	AllowTags   bool
}

// RequestInfo is one request to an inspected host, as plain data.
type RequestInfo struct {
	Host   string // canonical host (policy.Decision.Host.String())
	Port   uint16 // 0 matches only rules without a port
	Method string
	// Path is the path as sent, escaped (url.URL.EscapedPath): Check
	// splits it on "/" before decoding each segment.
	Path   string
	Query  url.Values
	Header http.Header
}

// GitKind says which half of git's smart HTTP protocol a request is.
type GitKind uint8

const (
	GitFetch    GitKind = iota + 1 // info/refs?service=git-upload-pack or POST git-upload-pack
	GitPushRefs                    // info/refs?service=git-receive-pack
	GitPushPack                    // POST git-receive-pack: commands must be checked
)

// GitOp describes a classified git request.
type GitOp struct {
	Kind GitKind
	Repo string // normalised "owner/repo", no ".git"
	// pushes are the push entries whose Repo matched, for Permits.
	pushes []compiledPush
}

// RuleDecision is the outcome of Check. The zero value denies.
type RuleDecision struct {
	Allowed bool
	RuleID  string // X-Moat-Rule; "none" when no rule matched
	Code    string // X-Moat-Reason and the audit reason
	Reason  string // human text, the body of the 403
	// Git is set for git smart-HTTP requests to a git host. For
	// GitPushPack, an allowed decision still needs Git.Permits over the
	// parsed push commands.
	Git *GitOp
	// Injected names the credentials swapped into the request (for the
	// audit "credential" field), or the one a leak was blocked for.
	Injected []string
}

// Reason codes of RuleDecision.Code.
const (
	CodeRuleDeny        = "rule-deny"     // a Deny match
	CodeRuleAllow       = "rule-allow"    // an Allow match
	CodeNoRule          = "rule-no-match" // inspected host, nothing allowed it
	CodeNoRules         = "inspect"       // inspected host without rules
	CodeBadPath         = "non-canonical-path"
	CodeGitFetch        = "git-fetch"
	CodeGitPush         = "git-push"
	CodeGitDenied       = "git-denied"
	CodeGitPushRef      = "git-push-ref"
	CodeGitBadPush      = "git-bad-push"
	CodeSNIMismatch     = "sni-mismatch"
	CodeHostMismatch    = "host-mismatch"
	CodeQuarantined     = "quarantined"      // the session is quarantined after a leak
	CodeCredentialLeak  = "credential-leak"  // a sentinel headed for a host it is not bound to
	CodePlaintextInject = "plaintext-inject" // a swap over plain http without allowPlaintextInject
	CodeCredentialError = "credential-error" // the swap itself failed
)

// RuleSet is a compiled set of rules. The nil *RuleSet allows nothing.
type RuleSet struct {
	rules []compiledRule
	git   []compiledGit
}

type compiledRule struct {
	id    string
	host  canon.Pattern
	allow []compiledMatch
	deny  []compiledMatch
}

type compiledMatch struct {
	methods map[string]bool // nil: every method
	path    segGlob
	query   map[string]string
	headers map[string]string
	reason  string
}

type compiledGit struct {
	id    string
	host  canon.Pattern
	fetch []segGlob
	push  []compiledPush
}

type compiledPush struct {
	spec GitPush
	repo segGlob
	refs []segGlob
}

const defaultDenyReason = "request denied by rule"

// CompileRules validates and compiles rules and git rules. Every problem is
// reported, joined, each naming its config path (network.rules[i]...).
func CompileRules(rules []Rule, git []GitRule) (*RuleSet, error) {
	rs := &RuleSet{}
	var errs []error
	bad := func(format string, a ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrBadRule}, a...)...))
	}
	for i, r := range rules {
		at := fmt.Sprintf("network.rules[%d]", i)
		cr := compiledRule{id: r.ID}
		if cr.id == "" {
			cr.id = at
		}
		p, err := canon.ParsePattern(r.Host, false)
		if err != nil {
			bad("%s.host: %v", at, err)
		}
		cr.host = p
		if len(r.Allow) == 0 && len(r.Deny) == 0 {
			bad("%s: needs allow or deny entries", at)
		}
		for j, m := range r.Allow {
			cm, err := compileMatch(m, fmt.Sprintf("%s.allow[%d]", at, j))
			errs = append(errs, err...)
			cr.allow = append(cr.allow, cm)
		}
		for j, m := range r.Deny {
			cm, err := compileMatch(m, fmt.Sprintf("%s.deny[%d]", at, j))
			errs = append(errs, err...)
			cr.deny = append(cr.deny, cm)
		}
		rs.rules = append(rs.rules, cr)
	}
	for i, g := range git {
		at := fmt.Sprintf("network.git[%d]", i)
		cg := compiledGit{id: at}
		p, err := canon.ParsePattern(g.Host, false)
		if err != nil {
			bad("%s.host: %v", at, err)
		}
		cg.host = p
		for j, f := range g.Fetch {
			sg, err := compileRepoGlob(f)
			if err != nil {
				bad("%s.fetch[%d]: %v", at, j, err)
			}
			cg.fetch = append(cg.fetch, sg)
		}
		for j, ps := range g.Push {
			pat := fmt.Sprintf("%s.push[%d]", at, j)
			cp := compiledPush{spec: ps}
			if ps.Repo == "" {
				bad("%s.repo: required", pat)
			} else if sg, err := compileRepoGlob(ps.Repo); err != nil {
				bad("%s.repo: %v", pat, err)
			} else {
				cp.repo = sg
			}
			if len(ps.Refs) == 0 {
				bad("%s.refs: required (e.g. [\"refs/heads/agent/*\"])", pat)
			}
			for k, ref := range ps.Refs {
				if !strings.HasPrefix(ref, "refs/") {
					bad("%s.refs[%d] %q: must start with refs/", pat, k, ref)
					continue
				}
				sg, err := compileSegGlob(ref)
				if err != nil {
					bad("%s.refs[%d]: %v", pat, k, err)
				}
				cp.refs = append(cp.refs, sg)
			}
			cg.push = append(cg.push, cp)
		}
		rs.git = append(rs.git, cg)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return rs, nil
}

func compileRepoGlob(s string) (segGlob, error) {
	n := normRepo(s)
	if n == "" || strings.Contains(s, "..") {
		return segGlob{}, fmt.Errorf("%q: want an \"owner/repo\" glob", s)
	}
	return compileSegGlob(n)
}

// normRepo strips a leading "/" and a trailing ".git" or "/".
func normRepo(s string) string {
	s = strings.Trim(s, "/")
	return strings.TrimSuffix(s, ".git")
}

func compileMatch(m Match, at string) (compiledMatch, []error) {
	var errs []error
	cm := compiledMatch{reason: m.Reason, query: m.Query}
	if cm.reason == "" {
		cm.reason = defaultDenyReason
	}
	for _, meth := range m.Methods {
		if meth == "*" {
			cm.methods = nil
			break
		}
		if meth == "" || strings.ContainsAny(meth, " \t\r\n") {
			errs = append(errs, fmt.Errorf("%w: %s.method %q: not an HTTP method", ErrBadRule, at, meth))
			continue
		}
		if cm.methods == nil {
			cm.methods = map[string]bool{}
		}
		cm.methods[strings.ToUpper(meth)] = true
	}
	p := m.Path
	if p == "" {
		p = "/**"
	}
	if !strings.HasPrefix(p, "/") {
		errs = append(errs, fmt.Errorf("%w: %s.path %q: must start with /", ErrBadRule, at, p))
	}
	g, err := compileSegGlob(p)
	if err != nil {
		errs = append(errs, fmt.Errorf("%w: %s.path: %v", ErrBadRule, at, err))
	}
	cm.path = g
	if len(m.Headers) > 0 {
		cm.headers = make(map[string]string, len(m.Headers))
		for k, v := range m.Headers {
			cm.headers[textproto.CanonicalMIMEHeaderKey(k)] = v
		}
	}
	return cm, errs
}

func (m *compiledMatch) matches(r *RequestInfo, segs []string) bool {
	if m.methods != nil && !m.methods[r.Method] {
		return false
	}
	if !m.path.match(segs) {
		return false
	}
	for k, glob := range m.query {
		vs, ok := r.Query[k]
		if !anyMatch(glob, vs, ok) {
			return false
		}
	}
	for k, glob := range m.headers {
		vs, ok := r.Header[k]
		if !anyMatch(glob, vs, ok) {
			return false
		}
	}
	return true
}

// anyMatch: "*" means present (even with an empty value); otherwise some
// value must match the glob.
func anyMatch(glob string, vs []string, present bool) bool {
	if !present {
		return false
	}
	if glob == "*" {
		return true
	}
	for _, v := range vs {
		if wildMatch(glob, v) {
			return true
		}
	}
	return false
}

// Governs reports whether any network.rules or network.git entry names h on
// port: such a host must never be reached around the per-request rules.
func (rs *RuleSet) Governs(h canon.Host, port uint16) bool {
	if rs == nil {
		return false
	}
	for i := range rs.git {
		if rs.git[i].host.Match(h, port) {
			return true
		}
	}
	for i := range rs.rules {
		if rs.rules[i].host.Match(h, port) {
			return true
		}
	}
	return false
}

// Check decides one request to an inspected host. It is pure and total.
//
// Git smart-HTTP requests to a host with a network.git entry are decided by
// the git rules; every other request by the network.rules entries for the
// host, in order: the first entry with a matching Deny (denies) or Allow
// (allows) decides. A host that has entries but no match is denied; an
// inspected host with no entries at all is allowed.
func (rs *RuleSet) Check(r RequestInfo) RuleDecision {
	if rs == nil {
		return RuleDecision{RuleID: "none", Code: CodeNoRule, Reason: "no rule set"}
	}
	h, err := canon.ParseHost(r.Host)
	if err != nil {
		return RuleDecision{RuleID: "none", Code: CodeNoRule, Reason: "malformed host"}
	}
	r.Method = strings.ToUpper(r.Method)
	var git *compiledGit
	for i := range rs.git {
		if rs.git[i].host.Match(h, r.Port) {
			git = &rs.git[i]
			break
		}
	}
	hasRules := false
	for i := range rs.rules {
		if rs.rules[i].host.Match(h, r.Port) {
			hasRules = true
			break
		}
	}
	if git == nil && !hasRules {
		return RuleDecision{Allowed: true, RuleID: "none", Code: CodeNoRules}
	}
	segs, ok := pathSegments(r.Path)
	if !ok {
		return RuleDecision{RuleID: "none", Code: CodeBadPath, Reason: "path is not canonical (dot segments): " + clip(r.Path)}
	}
	if git != nil {
		if op := classifyGit(r, segs); op != nil {
			return git.decide(op)
		}
	}
	for i := range rs.rules {
		cr := &rs.rules[i]
		if !cr.host.Match(h, r.Port) {
			continue
		}
		for j := range cr.deny {
			if cr.deny[j].matches(&r, segs) {
				return RuleDecision{RuleID: cr.id, Code: CodeRuleDeny, Reason: cr.deny[j].reason}
			}
		}
		for j := range cr.allow {
			if cr.allow[j].matches(&r, segs) {
				return RuleDecision{Allowed: true, RuleID: cr.id, Code: CodeRuleAllow}
			}
		}
	}
	why := fmt.Sprintf("no rule allows %s %s", r.Method, clip(r.Path))
	if git != nil && !hasRules {
		why = fmt.Sprintf("not a git smart-HTTP request, and no network.rules entry allows %s %s", r.Method, clip(r.Path))
	}
	return RuleDecision{RuleID: "none", Code: CodeNoRule, Reason: why}
}

// classifyGit recognises git's smart HTTP protocol (gitprotocol-http(5)):
// GET …/info/refs?service=git-upload-pack|git-receive-pack and
// POST …/git-upload-pack|git-receive-pack. Anything else is nil.
func classifyGit(r RequestInfo, segs []string) *GitOp {
	n := len(segs)
	var kind GitKind
	var repo []string
	switch {
	case r.Method == http.MethodGet && n >= 3 && segs[n-2] == "info" && segs[n-1] == "refs":
		switch r.Query.Get("service") {
		case "git-upload-pack":
			kind = GitFetch
		case "git-receive-pack":
			kind = GitPushRefs
		default:
			return nil // the dumb protocol: not classified, so not allowed by git rules
		}
		repo = segs[:n-2]
	case r.Method == http.MethodPost && n >= 2 && segs[n-1] == "git-upload-pack":
		kind, repo = GitFetch, segs[:n-1]
	case r.Method == http.MethodPost && n >= 2 && segs[n-1] == "git-receive-pack":
		kind, repo = GitPushPack, segs[:n-1]
	default:
		return nil
	}
	for _, s := range repo {
		// A decoded "/" inside a segment would let "a%2Fb" pose as "a/b".
		if strings.Contains(s, "/") {
			return nil
		}
	}
	return &GitOp{Kind: kind, Repo: normRepo(strings.Join(repo, "/"))}
}

func (g *compiledGit) decide(op *GitOp) RuleDecision {
	segs := splitSegs(op.Repo)
	for _, p := range g.push {
		if p.repo.match(segs) {
			op.pushes = append(op.pushes, p)
		}
	}
	d := RuleDecision{RuleID: g.id, Git: op}
	if op.Kind == GitFetch {
		if len(op.pushes) > 0 {
			d.Allowed, d.Code = true, CodeGitFetch
			return d
		}
		for _, f := range g.fetch {
			if f.match(segs) {
				d.Allowed, d.Code = true, CodeGitFetch
				return d
			}
		}
		d.Code, d.Reason = CodeGitDenied, fmt.Sprintf("git fetch of %s is not allowed by network.git", clip(op.Repo))
		return d
	}
	if len(op.pushes) == 0 {
		d.Code, d.Reason = CodeGitDenied, fmt.Sprintf("git push to %s is not allowed by network.git", clip(op.Repo))
		return d
	}
	d.Allowed, d.Code = true, CodeGitPush
	return d
}

// Permits checks every command of a push against the push entries that
// matched the repository. The push is all or nothing: it returns the first
// refused command's ref and the reason.
func (op *GitOp) Permits(cmds []PushCommand) (ok bool, ref, reason string) {
	if op == nil || op.Kind != GitPushPack || len(op.pushes) == 0 {
		return false, "", "not an allowed git push"
	}
	for _, c := range cmds {
		var why string
		allowed := false
		for _, p := range op.pushes {
			var r string
			if allowed, r = p.permits(c); allowed {
				break
			}
			if why == "" {
				why = r
			}
		}
		if !allowed {
			return false, c.Ref, why
		}
	}
	return true, "", ""
}

// Permits reports whether the entry allows one push command: the ref
// must match a Refs glob, a delete (all-zero new id) needs AllowDelete and
// refs/tags/* needs AllowTags. An all-zero old id creates the ref.
func (p GitPush) Permits(cmd PushCommand) (ok bool, reason string) {
	var refs []segGlob
	for _, r := range p.Refs {
		g, err := compileSegGlob(r)
		if err != nil {
			return false, "bad ref glob in network.git"
		}
		refs = append(refs, g)
	}
	return compiledPush{spec: p, refs: refs}.permits(cmd)
}

func (p compiledPush) permits(c PushCommand) (bool, string) {
	if !strings.HasPrefix(c.Ref, "refs/") {
		return false, "ref " + clip(c.Ref) + " is outside refs/"
	}
	if c.IsDelete() && !p.spec.AllowDelete {
		return false, "deleting " + clip(c.Ref) + " is not allowed by network.git"
	}
	if strings.HasPrefix(c.Ref, "refs/tags/") && !p.spec.AllowTags {
		return false, "pushing tags is not allowed by network.git"
	}
	segs := splitSegs(c.Ref)
	for _, g := range p.refs {
		if g.match(segs) {
			return true, ""
		}
	}
	return false, "pushing to " + clip(c.Ref) + " is not allowed by network.git (allowed: " + strings.Join(p.spec.Refs, ", ") + ")"
}

// clip bounds and sanitises text that came from a request before it goes
// into a reason, a header or a log.
func clip(s string) string {
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return '?'
		}
		return r
	}, s)
}
