package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/moat-dev/moat/gateway/audit"
	"github.com/moat-dev/moat/gateway/policy/canon"
)

// auditFilter selects events for `moat audit`.
type auditFilter struct {
	deny    bool
	client  string
	host    *canon.Pattern
	verdict string
}

func (f auditFilter) match(e *audit.Event) bool {
	if f.deny && e.Verdict != "deny" {
		return false
	}
	if f.verdict != "" && e.Verdict != f.verdict {
		return false
	}
	if f.client != "" && e.Client != f.client {
		return false
	}
	if f.host != nil {
		h, err := canon.ParseHost(e.Host)
		if err != nil || !f.host.Match(h, e.Port) {
			return false
		}
	}
	return true
}

// printable replaces control characters (C0, DEL, C1) and the Unicode
// line and bidi controls: a forged log line must not drive the terminal.
func printable(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r < 0x20, r >= 0x7f && r <= 0x9f, r == 0x2028, r == 0x2029,
			r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069:
			return '?'
		}
		return r
	}, s)
}

// formatEvent is one readable line: time, verdict, protocol, destination,
// the request (inspected or plain HTTP), why, who and how much. Every field
// is made printable.
func formatEvent(e *audit.Event) string {
	return printable(formatRaw(e))
}

func formatRaw(e *audit.Event) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %-7s %-7s %s", e.Time.UTC().Format(time.RFC3339), e.Verdict, e.Proto, e.Host)
	if e.Port != 0 {
		b.WriteString(":" + strconv.Itoa(int(e.Port)))
	}
	if e.Method != "" {
		fmt.Fprintf(&b, " %s %s", e.Method, e.Path)
	}
	if e.Status != 0 {
		fmt.Fprintf(&b, " %d", e.Status)
	}
	if e.Reason != "" {
		b.WriteString(" " + e.Reason)
	}
	if e.Rule != "" && e.Rule != "none" {
		b.WriteString(" (" + e.Rule + ")")
	}
	if e.Credential != "" {
		b.WriteString(" credential=" + e.Credential)
	}
	if e.Client != "" {
		b.WriteString(" client=" + e.Client)
	}
	if e.BytesUp+e.BytesDown > 0 {
		fmt.Fprintf(&b, " up=%d down=%d", e.BytesUp, e.BytesDown)
	}
	return b.String()
}

// maxAuditLine bounds one audit line; moat writes lines of a few hundred
// bytes.
const maxAuditLine = 1 << 20

// readLine returns the next line without its newline. A line longer than
// max is consumed and reported as long, not returned.
func readLine(br *bufio.Reader, max int) (line []byte, long bool, err error) {
	for {
		chunk, err := br.ReadSlice('\n')
		if len(line)+len(chunk) > max {
			long = true
		} else {
			line = append(line, chunk...)
		}
		switch err {
		case nil:
			return bytes.TrimRight(line, "\r\n"), long, nil
		case bufio.ErrBufferFull:
			continue
		case io.EOF:
			if len(line) == 0 && !long {
				return nil, false, io.EOF
			}
			return bytes.TrimRight(line, "\r\n"), long, nil
		default:
			return nil, false, err
		}
	}
}

func auditCmd(s stdio) *cobra.Command {
	var f auditFilter
	var host string
	var asJSON, summary bool
	c := &cobra.Command{
		Use:   "audit [--deny] [--verdict V] [--client NAME] [--host PATTERN] [--json] [--summary] [FILE|-]...",
		Short: "Read moat's JSON-lines audit log: filter it and print one line per event",
		Long: `Reads audit logs (schema v1; "-" or no file is standard input), keeps the
events that match every filter given, and prints them one per line, or as
the original JSON lines with --json. --summary adds counts by verdict and
the most denied destinations. A line that is not an audit v1 event is
reported with its file and line number, and the exit code is then 1.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if host != "" {
				p, err := canon.ParsePattern(host, false)
				if err != nil {
					return usageErr("--host %q: %v", host, err)
				}
				f.host = &p
			}
			switch f.verdict {
			case "", "allow", "deny", "inspect":
			default:
				return usageErr("--verdict %q: use allow, deny or inspect", f.verdict)
			}
			if len(args) == 0 {
				args = []string{"-"}
			}
			var bad, shown int
			byVerdict := map[string]int{}
			denied := map[string]int{}
			each := func(name string, r io.Reader) error {
				br := bufio.NewReaderSize(r, 64<<10)
				for n := 1; ; n++ {
					line, long, err := readLine(br, maxAuditLine)
					if err == io.EOF {
						return nil
					}
					if err != nil {
						return fmt.Errorf("%s: %w", name, err)
					}
					if long {
						fmt.Fprintf(s.err, "moat audit: %s:%d: line longer than %d bytes, skipped\n", name, n, maxAuditLine)
						bad++
						continue
					}
					if len(bytes.TrimSpace(line)) == 0 {
						continue
					}
					var e audit.Event
					if err := json.Unmarshal(line, &e); err != nil {
						fmt.Fprintf(s.err, "moat audit: %s:%d: not a JSON audit line: %v\n", name, n, err)
						bad++
						continue
					}
					if e.V != audit.Version {
						fmt.Fprintf(s.err, "moat audit: %s:%d: schema version %d, this moat reads %d\n", name, n, e.V, audit.Version)
						bad++
						continue
					}
					if !f.match(&e) {
						continue
					}
					shown++
					byVerdict[e.Verdict]++
					if e.Verdict == "deny" {
						dest := e.Host
						if e.Port != 0 {
							dest += ":" + strconv.Itoa(int(e.Port))
						}
						denied[dest]++
					}
					if asJSON {
						s.out.Write(append(line, '\n'))
					} else {
						fmt.Fprintln(s.out, formatEvent(&e))
					}
				}
			}
			for _, name := range args {
				if name == "-" {
					if err := each(name, s.in); err != nil {
						return err
					}
					continue
				}
				fh, err := os.Open(name)
				if err != nil {
					return withCode(exitUsage, err)
				}
				err = each(name, fh)
				fh.Close()
				if err != nil {
					return err
				}
			}
			if summary {
				fmt.Fprintf(s.out, "%d events: %d allow, %d deny, %d inspect\n", shown, byVerdict["allow"], byVerdict["deny"], byVerdict["inspect"])
				top := make([]string, 0, len(denied))
				for d := range denied {
					top = append(top, d)
				}
				sort.Slice(top, func(i, j int) bool {
					if denied[top[i]] != denied[top[j]] {
						return denied[top[i]] > denied[top[j]]
					}
					return top[i] < top[j]
				})
				for i, d := range top {
					if i == 10 {
						break
					}
					fmt.Fprintf(s.out, "  denied %dx %s\n", denied[d], printable(d))
				}
			}
			if bad > 0 {
				return &exitError{code: 1, err: fmt.Errorf("%d line(s) were not audit v1 events", bad)}
			}
			return nil
		},
	}
	fl := c.Flags()
	fl.BoolVar(&f.deny, "deny", false, "only denials (same as --verdict deny)")
	fl.StringVar(&f.verdict, "verdict", "", "only events with this verdict: allow, deny or inspect")
	fl.StringVar(&f.client, "client", "", "only events of this client (a daemon token's name)")
	fl.StringVar(&host, "host", "", "only events whose destination matches this allow-list pattern (host, *.domain, optional :port)")
	fl.BoolVar(&asJSON, "json", false, "print the matching lines as they are")
	fl.BoolVar(&summary, "summary", false, "end with counts by verdict and the most denied destinations")
	return c
}
