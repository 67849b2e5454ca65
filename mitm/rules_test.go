package mitm

import (
	"errors"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

func mustRules(t testing.TB, rules []Rule, git []GitRule) *RuleSet {
	t.Helper()
	rs, err := CompileRules(rules, git)
	if err != nil {
		t.Fatalf("CompileRules: %v", err)
	}
	return rs
}

var testRules = []Rule{
	{
		ID:   "github-api-readonly",
		Host: "api.github.com",
		Allow: []Match{
			{Methods: []string{"GET", "HEAD"}, Path: "/**"},
			{Methods: []string{"POST"}, Path: "/graphql", Headers: map[string]string{"x-agent": "moat-*"}},
			{Methods: []string{"*"}, Path: "/search/*", Query: map[string]string{"q": "*"}},
		},
		Deny: []Match{
			{Methods: []string{"*"}, Path: "/repos/*/*/actions/**", Reason: "CI changes are not allowed"},
		},
	},
	{ID: "files", Host: "*.example.com", Allow: []Match{{Path: "/pub/*.txt"}}},
}

var testGit = []GitRule{{
	Host:  "github.com",
	Fetch: []string{"public/*"},
	Push:  []GitPush{{Repo: "myorg/myrepo", Refs: []string{"refs/heads/agent/*"}}},
}}

func TestCheck(t *testing.T) {
	rs := mustRules(t, testRules, testGit)
	type req struct {
		host, method, path, query string
		header                    http.Header
	}
	tests := []struct {
		name      string
		req       req
		allowed   bool
		rule      string
		code      string
		reasonHas string
	}{
		{"get allowed", req{"api.github.com", "GET", "/repos/a/b", "", nil}, true, "github-api-readonly", CodeRuleAllow, ""},
		{"root allowed", req{"api.github.com", "GET", "/", "", nil}, true, "github-api-readonly", CodeRuleAllow, ""},
		{"deny before allow", req{"api.github.com", "GET", "/repos/a/b/actions/runs", "", nil}, false, "github-api-readonly", CodeRuleDeny, "CI changes are not allowed"},
		{"deny ** matches zero", req{"api.github.com", "GET", "/repos/a/b/actions", "", nil}, false, "github-api-readonly", CodeRuleDeny, "CI changes"},
		{"deny ignores //", req{"api.github.com", "GET", "//repos/a//b/actions/", "", nil}, false, "github-api-readonly", CodeRuleDeny, "CI changes"},
		{"dot segments refused", req{"api.github.com", "GET", "/x/../repos/a/b/actions", "", nil}, false, "none", CodeBadPath, "not canonical"},
		{"encoded dot segments refused", req{"api.github.com", "GET", "/x/%2e%2E/repos", "", nil}, false, "none", CodeBadPath, "not canonical"},
		{"encoded slash is one segment", req{"api.github.com", "GET", "/repos/a%2Fb/c/actions/x", "", nil}, false, "github-api-readonly", CodeRuleDeny, "CI"},
		{"post denied by default", req{"api.github.com", "POST", "/repos/a/b/issues", "", nil}, false, "none", CodeNoRule, "no rule allows POST /repos/a/b/issues"},
		{"lower-case method", req{"api.github.com", "get", "/x", "", nil}, true, "github-api-readonly", CodeRuleAllow, ""},
		{"header glob allows", req{"api.github.com", "POST", "/graphql", "", http.Header{"X-Agent": {"moat-1"}}}, true, "github-api-readonly", CodeRuleAllow, ""},
		{"header glob mismatch", req{"api.github.com", "POST", "/graphql", "", http.Header{"X-Agent": {"other"}}}, false, "none", CodeNoRule, ""},
		{"header missing", req{"api.github.com", "POST", "/graphql", "", nil}, false, "none", CodeNoRule, ""},
		{"query present", req{"api.github.com", "PUT", "/search/code", "q=", nil}, true, "github-api-readonly", CodeRuleAllow, ""},
		{"query absent", req{"api.github.com", "PUT", "/search/code", "p=1", nil}, false, "none", CodeNoRule, ""},
		{"star is one segment", req{"api.github.com", "PUT", "/search/a/b", "q=1", nil}, false, "none", CodeNoRule, ""},
		{"segment glob", req{"a.example.com", "GET", "/pub/notes.txt", "", nil}, true, "files", CodeRuleAllow, ""},
		{"segment glob mismatch", req{"a.example.com", "GET", "/pub/notes.exe", "", nil}, false, "none", CodeNoRule, ""},
		{"no rules for host", req{"other.test", "DELETE", "/anything", "", nil}, true, "none", CodeNoRules, ""},
		{"suffix pattern excludes apex", req{"example.com", "DELETE", "/x", "", nil}, true, "none", CodeNoRules, ""},

		{"git fetch refs", req{"github.com", "GET", "/public/lib.git/info/refs", "service=git-upload-pack", nil}, true, "network.git[0]", CodeGitFetch, ""},
		{"git fetch pack", req{"github.com", "POST", "/public/lib/git-upload-pack", "", nil}, true, "network.git[0]", CodeGitFetch, ""},
		{"git fetch of push repo", req{"github.com", "POST", "/myorg/myrepo.git/git-upload-pack", "", nil}, true, "network.git[0]", CodeGitFetch, ""},
		{"git fetch other repo", req{"github.com", "GET", "/evil/x.git/info/refs", "service=git-upload-pack", nil}, false, "network.git[0]", CodeGitDenied, "git fetch of evil/x is not allowed"},
		{"git push refs", req{"github.com", "GET", "/myorg/myrepo.git/info/refs", "service=git-receive-pack", nil}, true, "network.git[0]", CodeGitPush, ""},
		{"git push pack", req{"github.com", "POST", "/myorg/myrepo.git/git-receive-pack", "", nil}, true, "network.git[0]", CodeGitPush, ""},
		{"git push to fetch-only repo", req{"github.com", "GET", "/public/lib.git/info/refs", "service=git-receive-pack", nil}, false, "network.git[0]", CodeGitDenied, "git push to public/lib is not allowed"},
		{"git dumb protocol", req{"github.com", "GET", "/public/lib.git/info/refs", "", nil}, false, "none", CodeNoRule, "not a git smart-HTTP request"},
		{"git host web page", req{"github.com", "GET", "/", "", nil}, false, "none", CodeNoRule, "not a git smart-HTTP request"},
		{"git encoded slash repo", req{"github.com", "GET", "/public%2Flib/info/refs", "service=git-upload-pack", nil}, false, "none", CodeNoRule, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			q, _ := url.ParseQuery(tc.req.query)
			ri := RequestInfo{Host: tc.req.host, Port: 443, Method: tc.req.method, Path: tc.req.path, Query: q, Header: tc.req.header}
			got := rs.Check(ri)
			if got.Allowed != tc.allowed || got.RuleID != tc.rule || got.Code != tc.code || !strings.Contains(got.Reason, tc.reasonHas) {
				t.Errorf("Check(%s %s %s?%s) = {allowed %v rule %q code %q reason %q}, want {allowed %v rule %q code %q reason containing %q}",
					tc.req.method, tc.req.host, tc.req.path, tc.req.query, got.Allowed, got.RuleID, got.Code, got.Reason, tc.allowed, tc.rule, tc.code, tc.reasonHas)
			}
		})
	}
}

func TestCheckNilAndZero(t *testing.T) {
	var rs *RuleSet
	if d := rs.Check(RequestInfo{Host: "x.test", Method: "GET", Path: "/"}); d.Allowed {
		t.Error("nil RuleSet allowed a request")
	}
	if (RuleDecision{}).Allowed {
		t.Error("zero RuleDecision allows")
	}
	rs = mustRules(t, nil, nil)
	if d := rs.Check(RequestInfo{Host: "x.test", Method: "GET", Path: "/"}); !d.Allowed {
		t.Errorf("empty RuleSet: %+v, want allowed (inspected host without rules)", d)
	}
	if d := rs.Check(RequestInfo{Host: "bad host", Method: "GET", Path: "/"}); d.Allowed {
		t.Error("malformed host allowed")
	}
}

func TestCompileRulesErrors(t *testing.T) {
	_, err := CompileRules([]Rule{
		{Host: "Bad Host", Allow: []Match{{Path: "/x"}}},
		{Host: "a.test"},
		{Host: "b.test", Allow: []Match{{Path: "no-slash"}, {Path: "/a**b"}}, Deny: []Match{{Methods: []string{"GE T"}}}},
	}, []GitRule{
		{Host: "g.test", Fetch: []string{""}, Push: []GitPush{{Repo: "", Refs: nil}, {Repo: "a/b", Refs: []string{"heads/x"}}}},
	})
	if !errors.Is(err, ErrBadRule) {
		t.Fatalf("CompileRules = %v, want ErrBadRule", err)
	}
	for _, want := range []string{
		"network.rules[0].host", "network.rules[1]: needs allow or deny",
		"network.rules[2].allow[0].path", "network.rules[2].allow[1].path", "network.rules[2].deny[0].method",
		"network.git[0].fetch[0]", "network.git[0].push[0].repo", "network.git[0].push[0].refs",
		"network.git[0].push[1].refs[0]",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("CompileRules error does not mention %s:\n%v", want, err)
		}
	}
}

func TestSegGlob(t *testing.T) {
	tests := []struct {
		glob, path string
		want       bool
	}{
		{"/**", "/", true},
		{"/**", "/a/b/c", true},
		{"/*", "/", false},
		{"/*", "/a", true},
		{"/*", "/a/b", false},
		{"/a/**/z", "/a/z", true},
		{"/a/**/z", "/a/b/c/z", true},
		{"/a/**/z", "/a/b/c/y", false},
		{"/**/x/**/y", "/1/x/2/3/y", true},
		{"/**/**/**/**/**/**/q", strings.Repeat("/a", 200), false},
		{"/v[12]/*", "/v2/x", true},
		{"/v[12]/*", "/v3/x", false},
	}
	for _, tc := range tests {
		g, err := compileSegGlob(tc.glob)
		if err != nil {
			t.Fatalf("compileSegGlob(%q): %v", tc.glob, err)
		}
		if got := g.match(splitSegs(tc.path)); got != tc.want {
			t.Errorf("glob %q match %q = %v, want %v", tc.glob, tc.path, got, tc.want)
		}
	}
}

func TestWildMatch(t *testing.T) {
	tests := []struct {
		glob, s string
		want    bool
	}{
		{"*", "", true},
		{"a*", "abc", true},
		{"*c", "abc", true},
		{"a*c", "a/b/c", true},
		{"a*c", "ab", false},
		{"abc", "abc", true},
		{"abc", "abd", false},
		{"*a*a*a*b", strings.Repeat("a", 100), false},
	}
	for _, tc := range tests {
		if got := wildMatch(tc.glob, tc.s); got != tc.want {
			t.Errorf("wildMatch(%q, %q) = %v, want %v", tc.glob, tc.s, got, tc.want)
		}
	}
}
