// Package audit writes the gateway's audit log: one versioned JSON object per
// line for every connection decision and every inspected request.
//
// Events carry names, hosts and verdicts only. Secrets, sentinels, bodies and
// query values never reach an Event: callers redact before they build one.
package audit

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"sync"
	"time"
)

// Version is the schema version written in every line's "v" field.
const Version = 1

// Event is one audit line (schema v1, DESIGN §6).
type Event struct {
	V          int       `json:"v"`
	Time       time.Time `json:"time"`
	Session    string    `json:"session,omitempty"`
	Client     string    `json:"client,omitempty"`
	Proto      string    `json:"proto"`
	Host       string    `json:"host"`
	Port       uint16    `json:"port,omitempty"`
	Addr       string    `json:"addr,omitempty"`
	Verdict    string    `json:"verdict"`
	Reason     string    `json:"reason,omitempty"`
	Rule       string    `json:"rule,omitempty"`
	Policy     string    `json:"policy,omitempty"`
	Method     string    `json:"method,omitempty"`
	Path       string    `json:"path,omitempty"`
	Status     int       `json:"status,omitempty"`
	Credential string    `json:"credential,omitempty"`
	BytesUp    int64     `json:"bytes_up"`
	BytesDown  int64     `json:"bytes_down"`
	DurationMS float64   `json:"duration_ms"`
}

// Sink receives events. Implementations must be safe for concurrent use and
// must not block the caller for I/O longer than a buffered write.
type Sink interface {
	Write(Event)
}

// Discard is a Sink that drops every event.
var Discard Sink = discard{}

type discard struct{}

func (discard) Write(Event) {}

// Multi fans an event out to several sinks.
type Multi []Sink

// Write implements Sink.
func (m Multi) Write(e Event) {
	for _, s := range m {
		s.Write(e)
	}
}

// ErrClosed is returned by Flush and Close after Close.
var ErrClosed = errors.New("audit: sink closed")

// JSONL writes events as JSON lines to w. Lines are encoded outside the lock
// and appended whole to an in-memory buffer, which is flushed when it is
// full, every FlushInterval, and on Close: the hot path never waits for the
// disk, and no line is split or lost on a clean stop.
type JSONL struct {
	mu     sync.Mutex
	w      io.Writer
	buf    []byte
	err    error
	closed bool
	done   chan struct{}
	wg     sync.WaitGroup
}

const (
	bufSize = 64 << 10
	// FlushInterval bounds how stale the file can be while the gateway runs.
	FlushInterval = 200 * time.Millisecond
)

var encPool = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// NewJSONL starts a JSON-lines sink on w. Call Close to flush and stop it.
func NewJSONL(w io.Writer) *JSONL {
	s := &JSONL{w: w, buf: make([]byte, 0, bufSize), done: make(chan struct{})}
	s.wg.Add(1)
	go s.loop()
	return s
}

func (s *JSONL) loop() {
	defer s.wg.Done()
	t := time.NewTicker(FlushInterval)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			_ = s.Flush()
		case <-s.done:
			return
		}
	}
}

// Write implements Sink. It fills in V and a zero Time.
func (s *JSONL) Write(e Event) {
	e.V = Version
	if e.Time.IsZero() {
		e.Time = time.Now()
	}
	b := encPool.Get().(*bytes.Buffer)
	b.Reset()
	// Encode appends the newline: the line is complete before we lock.
	if err := json.NewEncoder(b).Encode(&e); err != nil {
		encPool.Put(b)
		return
	}
	line := b.Bytes()
	s.mu.Lock()
	if !s.closed {
		if len(s.buf)+len(line) > bufSize {
			s.flushLocked()
		}
		s.buf = append(s.buf, line...)
	}
	s.mu.Unlock()
	encPool.Put(b)
}

func (s *JSONL) flushLocked() {
	if len(s.buf) == 0 {
		return
	}
	if _, err := s.w.Write(s.buf); err != nil && s.err == nil {
		s.err = err
	}
	s.buf = s.buf[:0]
}

// Flush writes buffered lines and reports the first write error seen.
func (s *JSONL) Flush() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.flushLocked()
	return s.err
}

// Close flushes every buffered line and stops the flusher. Events written
// after Close are dropped.
func (s *JSONL) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ErrClosed
	}
	s.closed = true
	s.flushLocked()
	err := s.err
	s.mu.Unlock()
	close(s.done)
	s.wg.Wait()
	return err
}
