package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"reflect"
	"sort"
	"strings"
	"sync"

	"gopkg.in/yaml.v3"
)

// maxFileSize bounds what Load reads: a settings file is a few kilobytes.
const maxFileSize = 4 << 20

// maxNodes bounds the nodes one decode visits. YAML aliases make the tree a
// DAG, and a naive walk of nested aliases is exponential ("billion laughs").
const maxNodes = 1 << 18

// Parse decodes a settings file (YAML or JSON) strictly: unknown keys,
// duplicate keys, wrong types and multiple documents are errors, each with
// its dotted path. name is used in the messages only. An empty document is
// an empty File. Parse does not Validate.
func Parse(data []byte, name string) (*File, error) {
	f := &File{}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return f, nil
		}
		return nil, &FieldError{File: name, Msg: yamlMsg(err)}
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		line := extra.Line
		msg := "a settings file holds one document"
		if err != nil {
			line, msg = 0, yamlMsg(err)
		}
		return nil, &FieldError{File: name, Line: line, Msg: msg}
	}
	d := &decoder{file: name}
	root := &doc
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		root = root.Content[0]
	}
	d.decode(root, reflect.ValueOf(f).Elem(), "")
	if len(d.errs) > 0 {
		return nil, errors.Join(d.errs...)
	}
	return f, nil
}

// Load reads and parses the settings file at path. It does not Validate.
func Load(path string) (*File, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read settings: %w", err)
	}
	defer fh.Close()
	data, err := io.ReadAll(io.LimitReader(fh, maxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("read settings %s: %w", path, err)
	}
	if len(data) > maxFileSize {
		return nil, &FieldError{File: path, Msg: fmt.Sprintf("file is larger than %d bytes", maxFileSize)}
	}
	return Parse(data, path)
}

// yamlMsg strips yaml.v3's "yaml: " prefix; the location is added by us.
func yamlMsg(err error) string {
	return strings.TrimPrefix(err.Error(), "yaml: ")
}

type decoder struct {
	file  string
	errs  []error
	nodes int
}

// maxErrors bounds the problems one Parse reports; a hostile file could
// otherwise produce one per element.
const maxErrors = 50

func (d *decoder) fail(n *yaml.Node, path, format string, args ...any) {
	if len(d.errs) > maxErrors {
		return
	}
	if len(d.errs) == maxErrors {
		format, args = "too many errors; stopping", nil
	}
	e := &FieldError{File: d.file, Path: path, Msg: fmt.Sprintf(format, args...)}
	if n != nil {
		e.Line = n.Line
	}
	d.errs = append(d.errs, e)
}

var stringListType = reflect.TypeOf(StringList(nil))

// decode stores n into v, which is addressable. It reports problems and
// carries on, so that one Parse reports every problem of the file.
func (d *decoder) decode(n *yaml.Node, v reflect.Value, path string) {
	if d.nodes++; d.nodes > maxNodes {
		if d.nodes == maxNodes+1 {
			d.fail(n, path, "document is too large (aliases expand to more than %d nodes)", maxNodes)
		}
		return
	}
	if n.Kind == yaml.AliasNode {
		if n.Alias == nil {
			d.fail(n, path, "dangling alias")
			return
		}
		n = n.Alias
	}
	if isNull(n) {
		return // null or absent: the field keeps its default
	}
	t := v.Type()
	switch {
	case t == stringListType:
		if n.Kind == yaml.ScalarNode {
			var s string
			if d.scalar(n, &s, "!!str", "string", path) {
				v.Set(reflect.ValueOf(StringList{s}))
			}
			return
		}
		d.decodeSlice(n, v, path, "string or list of strings")
		return
	}
	switch t.Kind() {
	case reflect.Pointer:
		nv := reflect.New(t.Elem())
		d.decode(n, nv.Elem(), path)
		v.Set(nv)
	case reflect.Struct:
		d.decodeStruct(n, v, path)
	case reflect.Map:
		d.decodeMap(n, v, path)
	case reflect.Slice:
		d.decodeSlice(n, v, path, "list")
	case reflect.String:
		var s string
		if d.scalar(n, &s, "!!str", "string", path) {
			v.SetString(s)
		}
	case reflect.Bool:
		var b bool
		if d.scalar(n, &b, "!!bool", "boolean (true or false)", path) {
			v.SetBool(b)
		}
	case reflect.Int, reflect.Int64:
		var i int64
		if d.scalar(n, &i, "!!int", "integer", path) {
			if t.Kind() == reflect.Int && (i > math.MaxInt32 || i < math.MinInt32) {
				d.fail(n, path, "integer %d is out of range", i)
				return
			}
			v.SetInt(i)
		}
	default:
		// A schema type the decoder does not know is a bug in this package.
		panic("config: unsupported field type " + t.String())
	}
}

func isNull(n *yaml.Node) bool {
	return n.Kind == 0 || (n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null")
}

// scalar decodes a scalar of the given tag into out. JSON and YAML values
// are not coerced: `port: "80"` is a string, not an integer.
func (d *decoder) scalar(n *yaml.Node, out any, tag, want, path string) bool {
	if n.Kind != yaml.ScalarNode || n.ShortTag() != tag {
		d.fail(n, path, "expected %s, got %s", want, describe(n))
		return false
	}
	if s, ok := out.(*string); ok {
		*s = n.Value // the common case; yaml.v3's Decode is costly per node
		return true
	}
	if err := n.Decode(out); err != nil {
		d.fail(n, path, "expected %s: %s", want, yamlMsg(err))
		return false
	}
	return true
}

// describe names what a node holds, for type errors.
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	}
	switch n.ShortTag() {
	case "!!str":
		return "string " + quote(n.Value)
	case "!!int":
		return "integer " + n.Value
	case "!!float":
		return "number " + n.Value
	case "!!bool":
		return "boolean " + n.Value
	}
	return "value " + quote(n.Value) + " (" + n.ShortTag() + ")"
}

func (d *decoder) decodeSlice(n *yaml.Node, v reflect.Value, path, want string) {
	if n.Kind != yaml.SequenceNode {
		d.fail(n, path, "expected %s, got %s", want, describe(n))
		return
	}
	// An explicit [] stays non-nil: for injectHosts, [] and absent differ.
	s := reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content))
	for i, c := range n.Content {
		d.decode(c, s.Index(i), fmt.Sprintf("%s[%d]", path, i))
	}
	v.Set(s)
}

// pairs yields the key/value pairs of a mapping, reporting non-string keys,
// merge keys and duplicates.
func (d *decoder) pairs(n *yaml.Node, path string, sub func(path, key string) string, fn func(k, val *yaml.Node)) bool {
	if n.Kind != yaml.MappingNode {
		d.fail(n, path, "expected a mapping, got %s", describe(n))
		return false
	}
	seen := make(map[string]bool, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		if k.Kind == yaml.AliasNode && k.Alias != nil {
			k = k.Alias
		}
		if k.Kind != yaml.ScalarNode {
			d.fail(k, path, "a key must be a string, got %s", describe(k))
			continue
		}
		if k.ShortTag() == "!!merge" {
			d.fail(k, path, "merge keys (<<) are not supported")
			continue
		}
		if seen[k.Value] {
			d.fail(k, sub(path, k.Value), "duplicate key")
			continue
		}
		seen[k.Value] = true
		fn(k, val)
	}
	return true
}

func (d *decoder) decodeMap(n *yaml.Node, v reflect.Value, path string) {
	m := reflect.MakeMap(v.Type())
	ok := d.pairs(n, path, mapPath, func(k, val *yaml.Node) {
		e := reflect.New(v.Type().Elem()).Elem()
		d.decode(val, e, mapPath(path, k.Value))
		m.SetMapIndex(reflect.ValueOf(k.Value), e)
	})
	if ok {
		v.Set(m)
	}
}

func (d *decoder) decodeStruct(n *yaml.Node, v reflect.Value, path string) {
	fields := fieldsOf(v.Type())
	d.pairs(n, path, join, func(k, val *yaml.Node) {
		idx, ok := fields.index[k.Value]
		if !ok {
			d.fail(k, join(path, k.Value), "unknown key%s", suggest(k.Value, fields.names))
			return
		}
		d.decode(val, v.Field(idx), join(path, k.Value))
	})
}

// join appends a struct key to a dotted path.
func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// mapPath appends a map key: plain keys as `.key`, others as `["key"]` so
// that `deniedDomainReasons["github.com:22"]` stays unambiguous.
func mapPath(path, key string) string {
	plain := key != ""
	for _, r := range key {
		if !(r == '_' || r == '-' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
			plain = false
			break
		}
	}
	if plain {
		return join(path, key)
	}
	return path + "[" + quote(key) + "]"
}

// structFields is the key schema of one struct type, derived from its yaml
// tags.
type structFields struct {
	index map[string]int
	names []string
}

var fieldCache sync.Map // reflect.Type → *structFields

func fieldsOf(t reflect.Type) *structFields {
	if c, ok := fieldCache.Load(t); ok {
		return c.(*structFields)
	}
	sf := &structFields{index: map[string]int{}}
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ",")
		if name == "" || name == "-" {
			continue
		}
		sf.index[name] = i
		sf.names = append(sf.names, name)
	}
	sort.Strings(sf.names)
	fieldCache.Store(t, sf)
	return sf
}

// suggest returns `; did you mean "X"?` for the known key closest to key, or
// "" when none is close. A case-only difference (strictAllowList) always
// counts.
func suggest(key string, known []string) string {
	best, bestD := "", math.MaxInt
	lk := strings.ToLower(key)
	for _, k := range known {
		dist := levenshtein(lk, strings.ToLower(k))
		if dist < bestD {
			best, bestD = k, dist
		}
	}
	limit := max(2, len(key)/4)
	if best == "" || bestD > limit {
		if other := elsewhere(key); other != "" {
			return fmt.Sprintf("; did you mean %q?", other)
		}
		return ""
	}
	return fmt.Sprintf("; did you mean %q?", best)
}

// elsewhere finds key (case-insensitively) in another section of the schema,
// for a key put at the wrong level: top-level `allowedDomains` →
// "network.allowedDomains".
func elsewhere(key string) string {
	var found string
	var walk func(t reflect.Type, prefix string, depth int)
	walk = func(t reflect.Type, prefix string, depth int) {
		for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice {
			t = t.Elem()
		}
		if t.Kind() != reflect.Struct || t == stringListType || depth > 1 || found != "" {
			return
		}
		sf := fieldsOf(t)
		for _, name := range sf.names {
			p := join(prefix, name)
			if strings.EqualFold(name, key) && found == "" {
				found = p
			}
			walk(t.Field(sf.index[name]).Type, p, depth+1)
		}
	}
	walk(reflect.TypeOf(File{}), "", 0)
	return found
}

// levenshtein is the edit distance between a and b (bytes; keys are ASCII).
func levenshtein(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
