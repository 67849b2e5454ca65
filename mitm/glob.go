package mitm

import (
	"fmt"
	"net/url"
	"path"
	"strings"
)

// segGlob is a compiled "/"-separated glob: "*" matches one segment, "**"
// any number of segments (zero or more), and any other segment is matched
// with path.Match, so "*.json" or "v[12]" work within one segment.
type segGlob struct {
	segs []string
}

func compileSegGlob(s string) (segGlob, error) {
	parts := splitSegs(s)
	for _, p := range parts {
		if p == "*" || p == "**" {
			continue
		}
		if strings.Contains(p, "**") {
			return segGlob{}, fmt.Errorf("%q: ** must be a whole segment", s)
		}
		if _, err := path.Match(p, ""); err != nil {
			return segGlob{}, fmt.Errorf("%q: %w", s, err)
		}
	}
	return segGlob{segs: parts}, nil
}

// splitSegs splits on "/" and drops empty segments: "//" and a trailing
// "/" do not create segments, as most servers collapse them.
func splitSegs(s string) []string {
	out := make([]string, 0, 8)
	for p := range strings.SplitSeq(s, "/") {
		if p != "" {
			out = append(out, p)
		}
	}
	return out
}

// match reports whether the segments of a subject match the glob. It is a
// dynamic programme over (glob, subject) positions, so "**" never
// backtracks exponentially.
func (g segGlob) match(subj []string) bool {
	// cur[j]: the first i glob segments match the first j subject segments.
	cur := make([]bool, len(subj)+1)
	next := make([]bool, len(subj)+1)
	cur[0] = true
	for _, gs := range g.segs {
		clear(next)
		switch gs {
		case "**":
			seen := false
			for j := range cur {
				seen = seen || cur[j]
				next[j] = seen
			}
		default:
			for j := 0; j < len(subj); j++ {
				if cur[j] && segMatch(gs, subj[j]) {
					next[j+1] = true
				}
			}
		}
		cur, next = next, cur
	}
	return cur[len(subj)]
}

func segMatch(glob, s string) bool {
	if glob == "*" {
		return true
	}
	if !strings.ContainsAny(glob, `*?[\`) {
		return glob == s
	}
	ok, _ := path.Match(glob, s)
	return ok
}

// pathSegments turns an escaped request path into decoded segments. The
// path is split on literal "/" before decoding, so that "a%2Fb" stays one
// segment, as the upstream sees it. Dot segments (also encoded, "%2e%2e")
// make it non-canonical: upstreams resolve them, and a glob that did not
// would be bypassed ("/x/../repos/a/b/actions").
func pathSegments(escaped string) ([]string, bool) {
	raw := splitSegs(escaped)
	for i, p := range raw {
		d, err := url.PathUnescape(p)
		if err != nil || d == "." || d == ".." || strings.ContainsAny(d, "\x00\\") {
			return nil, false
		}
		raw[i] = d
	}
	return raw, true
}

// wildMatch matches s against a glob where "*" matches any run of bytes
// (including "/"), for query and header values.
func wildMatch(glob, s string) bool {
	// Iterative star matching with one backtrack point: linear enough for
	// short header values and never exponential.
	gi, si := 0, 0
	star, mark := -1, 0
	for si < len(s) {
		switch {
		case gi < len(glob) && glob[gi] == '*':
			star, mark = gi, si
			gi++
		case gi < len(glob) && glob[gi] == s[si]:
			gi++
			si++
		case star >= 0:
			gi = star + 1
			mark++
			si = mark
		default:
			return false
		}
	}
	for gi < len(glob) && glob[gi] == '*' {
		gi++
	}
	return gi == len(glob)
}
