// Package layering enforces DESIGN §1's import rules: imports go downhill
// only (cmd → {config, gateway, sandbox, ca} → {mitm, resolver} →
// {credentials, audit} → policy → canon), and sandbox never imports the
// gateway.
package layering

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

const module = "github.com/moat-dev/moat/"

// allowed lists, for each package, the moat packages it may import.
var allowed = map[string][]string{
	"gateway/policy/canon": {},
	"gateway/policy":       {"gateway/policy/canon"},
	"gateway/audit":        {},
	"credentials":          {"gateway/policy/canon"},
	"resolver":             {"gateway/policy", "gateway/policy/canon", "resolver/dnstest"},
	"resolver/dnstest":     {},
	"ca":                   {},
	// mitm maps the resolver's refusals to replies: resolver sits below it.
	"mitm":    {"ca", "credentials", "gateway/audit", "gateway/policy", "gateway/policy/canon", "resolver", "e2e/testnet"},
	"config":  {"gateway/policy", "gateway/policy/canon"},
	"sandbox": {},
	"gateway": {"gateway/policy", "gateway/policy/canon", "gateway/audit", "resolver", "mitm", "credentials",
		"resolver/dnstest", "ca"}, // ca in tests only (it builds interceptors)
}

// testOnly packages are test harnesses: production code never imports them.
var testOnly = map[string]bool{"resolver/dnstest": true, "e2e/testnet": true}

func TestImportsGoDownhill(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for pkg, ok := range allowed {
		dir := filepath.Join(root, filepath.FromSlash(pkg))
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil || len(files) == 0 {
			t.Errorf("%s: no Go files (%v)", pkg, err)
			continue
		}
		permitted := map[string]bool{}
		for _, p := range ok {
			permitted[p] = true
		}
		var bad []string
		for _, f := range files {
			src, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			af, err := parser.ParseFile(token.NewFileSet(), f, src, parser.ImportsOnly)
			if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			test := strings.HasSuffix(f, "_test.go")
			for _, imp := range af.Imports {
				path := strings.Trim(imp.Path.Value, `"`)
				dep, ours := strings.CutPrefix(path, module)
				if !ours || dep == pkg {
					continue
				}
				if !permitted[dep] || (!test && (testOnly[dep] || (pkg == "gateway" && dep == "ca"))) {
					bad = append(bad, filepath.Base(f)+" imports "+dep)
				}
			}
		}
		sort.Strings(bad)
		for _, b := range bad {
			t.Errorf("%s: %s, against DESIGN §1's layering", pkg, b)
		}
		checked++
	}
	if checked < len(allowed) {
		t.Fatalf("checked %d of %d packages", checked, len(allowed))
	}
}
