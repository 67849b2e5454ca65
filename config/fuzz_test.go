package config

import (
	"os"
	"path/filepath"
	"testing"
)

// FuzzParse checks that no input panics Parse, Validate or Summary, and that
// a file that parses and validates also compiles: Validate must reject
// everything the policy core would.
func FuzzParse(f *testing.F) {
	for _, dir := range []string{"testdata/valid", "testdata/invalid"} {
		names, _ := filepath.Glob(filepath.Join(dir, "*"))
		for _, n := range names {
			if filepath.Ext(n) == ".golden" || filepath.Ext(n) == ".err" {
				continue
			}
			if b, err := os.ReadFile(n); err == nil {
				f.Add(b)
			}
		}
	}
	f.Add([]byte(`{"network":{"allowedDomains":["a.test"],"rules":[{"host":"a.test"}]},"credentials":{"envVars":[{"name":"T","mode":"mask"}]}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := Parse(data, "fuzz")
		if err != nil {
			return
		}
		_ = file.Summary()
		if file.Validate() != nil {
			return
		}
		if _, err := file.Compile(nil); err != nil {
			t.Fatalf("valid file does not compile: %v\n%s", err, data)
		}
	})
}
