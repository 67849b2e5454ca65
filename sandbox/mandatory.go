package sandbox

import (
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// mandatoryFiles and mandatoryDirs are written to by tools that later run
// code on the host (shell start-up files, git config and hooks, editor and
// agent settings), so they stay read-only even inside allowed paths
// (DESIGN §4).
var (
	mandatoryFiles = []string{".gitconfig", ".gitmodules", ".bashrc", ".bash_profile", ".zshrc",
		".zprofile", ".profile", ".ripgreprc", ".mcp.json",
		// moat's own project settings: a command must not widen the policy
		// of the next run started in this directory or one below it.
		".moat.yaml"}
	mandatoryDirs = []string{".vscode", ".idea", ".claude/commands", ".claude/agents", ".git/hooks"}
)

// mandatoryNames returns the relative names protected in each directory.
func mandatoryNames(allowGitConfig bool) []string {
	n := append(append([]string{}, mandatoryFiles...), mandatoryDirs...)
	if !allowGitConfig {
		n = append(n, ".git/config")
	}
	return n
}

// MandatoryDenies walks each root down to depth levels (skipping node_modules
// and symbolic links) and returns the protected paths that exist, and, for
// the roots themselves only, the first missing component of each protected
// name that does not exist yet (so it cannot be created). It only reads the
// file system. depth < 0 is treated as 0 (the roots only).
func MandatoryDenies(roots []string, depth int, allowGitConfig bool) (existing, missing []string) {
	if depth < 0 {
		depth = 0
	}
	names := mandatoryNames(allowGitConfig)
	seenE := map[string]bool{}
	seenM := map[string]bool{}
	addE := func(p string) {
		if !seenE[p] {
			seenE[p] = true
			existing = append(existing, p)
		}
	}
	for _, root := range roots {
		root = filepath.Clean(root)
		// Roots: every name, missing ones included.
		for _, n := range names {
			p := filepath.Join(root, n)
			if _, err := os.Lstat(p); err == nil {
				addE(p)
				continue
			}
			if first := firstMissing(root, n); first != "" && !seenM[first] {
				seenM[first] = true
				missing = append(missing, first)
			}
		}
		addGitfile(root, addE)
		walkMandatory(root, 1, depth, names, addE)
	}
	sort.Strings(existing)
	sort.Strings(missing)
	return existing, missing
}

// walkMandatory checks the entries of the subdirectories of dir (at level
// lvl, dir's children being level lvl) and recurses while lvl < depth.
func walkMandatory(dir string, lvl, depth int, names []string, add func(string)) {
	if lvl >= depth {
		return
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		if !e.IsDir() || e.Name() == "node_modules" || e.Name() == ".git" {
			continue // ReadDir reports symlinks as non-dirs: never followed
		}
		sub := filepath.Join(dir, e.Name())
		addGitfile(sub, add)
		for _, n := range names {
			p := filepath.Join(sub, n)
			if _, err := os.Lstat(p); err == nil {
				add(p)
			}
		}
		walkMandatory(sub, lvl+1, depth, names, add)
	}
}

// addGitfile protects a .git that is a file (a worktree or submodule
// pointer): replaced by a directory, it would give git a writable config
// and hooks.
func addGitfile(dir string, add func(string)) {
	p := filepath.Join(dir, ".git")
	if fi, err := os.Lstat(p); err == nil && !fi.IsDir() {
		add(p)
	}
}

// firstMissing returns the first component of root/rel that does not exist,
// or "" if the whole path exists or a component is not a directory.
func firstMissing(root, rel string) string {
	cur := root
	for _, c := range splitPath(rel) {
		next := filepath.Join(cur, c)
		fi, err := os.Lstat(next)
		if err != nil {
			return next
		}
		if !fi.IsDir() {
			return ""
		}
		cur = next
	}
	return ""
}

// splitPath splits a relative slash path into its components.
func splitPath(rel string) []string {
	return strings.Split(filepath.ToSlash(filepath.Clean(rel)), "/")
}
