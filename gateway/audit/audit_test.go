package audit

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

func TestJSONLConcurrentWholeLines(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	s := NewJSONL(f)
	const workers, each = 16, 500
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < each; i++ {
				s.Write(Event{Proto: "connect", Host: fmt.Sprintf("h%d-%d.test", w, i), Port: 443, Verdict: "allow"})
			}
		}(w)
	}
	wg.Wait()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		var e Event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("line %q is not JSON: %v", sc.Text(), err)
		}
		if e.V != Version || e.Time.IsZero() {
			t.Fatalf("line lacks v/time: %q", sc.Text())
		}
		if seen[e.Host] {
			t.Fatalf("duplicate line for %s", e.Host)
		}
		seen[e.Host] = true
	}
	if len(seen) != workers*each {
		t.Fatalf("got %d lines, want %d", len(seen), workers*each)
	}
	s.Write(Event{Host: "late"}) // after Close: dropped, must not panic
	if err := s.Close(); err != ErrClosed {
		t.Errorf("second Close = %v, want ErrClosed", err)
	}
}

func BenchmarkJSONLWrite(b *testing.B) {
	f, err := os.Create(filepath.Join(b.TempDir(), "a.jsonl"))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	s := NewJSONL(f)
	defer s.Close()
	e := Event{Proto: "http", Host: "example.test", Port: 80, Verdict: "allow", Reason: "allow-list", Rule: "allow:example.test"}
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			s.Write(e)
		}
	})
}
