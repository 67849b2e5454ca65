package mitm

import (
	"bytes"
	"fmt"
	"io"
	"strings"
)

// PushCommand is one ref update of a git push (gitprotocol-pack(5),
// "reference update request").
type PushCommand struct {
	Old, New string // object ids in hex; all zeros for create / delete
	Ref      string
	// Caps is the capability list the client sent after the first
	// command; empty on the others.
	Caps string
}

// IsCreate reports whether the command creates Ref.
func (c PushCommand) IsCreate() bool { return zeroOID(c.Old) }

// IsDelete reports whether the command deletes Ref.
func (c PushCommand) IsDelete() bool { return zeroOID(c.New) }

func zeroOID(s string) bool { return strings.Trim(s, "0") == "" }

// Limits of ParsePushCommands.
const (
	// DefaultMaxPushCommandBytes bounds the command list read before the
	// pack when the caller passes max <= 0.
	DefaultMaxPushCommandBytes = 1 << 20
	maxPushCommands            = 1000
	pktMaxLen                  = 65520 // gitprotocol-common(5): 4 + 65516
)

// ParsePushCommands reads the command list at the start of a
// git-receive-pack request body: pkt-lines (four hex digits of length,
// which counts themselves) ending at a flush-pkt "0000". It returns the
// commands and a reader that replays every byte it consumed followed by
// the rest of r (the pack), so the request can be forwarded unchanged.
//
// A malformed pkt-line, a command list over max bytes (max <= 0 means
// DefaultMaxPushCommandBytes) or over 1000 commands, a signed push and
// an early EOF are errors: the caller must refuse the push, never pass it
// through unchecked.
func ParsePushCommands(r io.Reader, max int) ([]PushCommand, io.Reader, error) {
	if max <= 0 {
		max = DefaultMaxPushCommandBytes
	}
	var consumed bytes.Buffer
	var cmds []PushCommand
	var hdr [4]byte
	for {
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			return nil, nil, fmt.Errorf("%w: reading length: %v", ErrPktLine, err)
		}
		consumed.Write(hdr[:])
		n, ok := parseHex4(hdr[:])
		if !ok {
			return nil, nil, fmt.Errorf("%w: bad length %q", ErrPktLine, clip(string(hdr[:])))
		}
		if n == 0 { // flush-pkt: end of the command list
			break
		}
		if n < 5 || n > pktMaxLen {
			// 0001-0004 are delim, response-end and empty lines, none of
			// which belongs in a command list.
			return nil, nil, fmt.Errorf("%w: unexpected length %04x", ErrPktLine, n)
		}
		if consumed.Len()+n-4 > max {
			return nil, nil, fmt.Errorf("%w: more than %d bytes", ErrPushTooLarge, max)
		}
		start := consumed.Len()
		if _, err := io.CopyN(&consumed, r, int64(n-4)); err != nil {
			return nil, nil, fmt.Errorf("%w: short line: %v", ErrPktLine, err)
		}
		line := consumed.Bytes()[start:]
		line = bytes.TrimSuffix(line, []byte("\n"))
		if len(cmds) == 0 {
			if bytes.HasPrefix(line, []byte("push-cert")) {
				return nil, nil, ErrSignedPush
			}
			// Shallow lines may precede the commands of a push from a
			// shallow clone.
			if bytes.HasPrefix(line, []byte("shallow ")) {
				continue
			}
		}
		c, err := parseCommand(line, len(cmds) == 0)
		if err != nil {
			return nil, nil, err
		}
		if len(cmds) == maxPushCommands {
			return nil, nil, fmt.Errorf("%w: more than %d commands", ErrPushTooLarge, maxPushCommands)
		}
		cmds = append(cmds, c)
	}
	return cmds, io.MultiReader(bytes.NewReader(consumed.Bytes()), r), nil
}

func parseHex4(b []byte) (int, bool) {
	n := 0
	for _, c := range b {
		var v byte
		switch {
		case '0' <= c && c <= '9':
			v = c - '0'
		case 'a' <= c && c <= 'f':
			v = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			v = c - 'A' + 10
		default:
			return 0, false
		}
		n = n<<4 | int(v)
	}
	return n, true
}

// parseCommand parses "<old> <new> <ref>" with, on the first line,
// "\x00<caps>".
func parseCommand(line []byte, first bool) (PushCommand, error) {
	var c PushCommand
	s := string(line)
	if i := strings.IndexByte(s, 0); i >= 0 {
		if !first {
			return c, fmt.Errorf("%w: capabilities after the first command", ErrPktLine)
		}
		s, c.Caps = s[:i], s[i+1:]
	}
	old, rest, ok1 := strings.Cut(s, " ")
	nw, ref, ok2 := strings.Cut(rest, " ")
	if !ok1 || !ok2 || !isOID(old) || !isOID(nw) || len(old) != len(nw) || !validRef(ref) {
		return c, fmt.Errorf("%w: bad command %q", ErrPktLine, clip(s))
	}
	c.Old, c.New, c.Ref = old, nw, ref
	return c, nil
}

// isOID accepts SHA-1 (40) and SHA-256 (64) hex object ids.
func isOID(s string) bool {
	if len(s) != 40 && len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// validRef rejects what git's check-ref-format would, as far as the rule
// check is concerned: the name must be printable, without spaces, and
// have no empty or dot segments that a glob could misread.
func validRef(s string) bool {
	if s == "" || len(s) > 1024 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] == 0x7f || s[i] == '\\' {
			return false
		}
	}
	for seg := range strings.SplitSeq(s, "/") {
		if seg == "" || seg == "." || seg == ".." || strings.HasPrefix(seg, ".") {
			return false
		}
	}
	return !strings.Contains(s, "..")
}

// pktLine encodes one pkt-line.
func pktLine(b *bytes.Buffer, s string) {
	fmt.Fprintf(b, "%04x", len(s)+4)
	b.WriteString(s)
}

// hasCap reports whether a space-separated capability list has name.
func hasCap(caps, name string) bool {
	for c := range strings.FieldsSeq(caps) {
		if c == name {
			return true
		}
	}
	return false
}

// PushRefusal builds a git-receive-pack response (report-status,
// gitprotocol-pack(5)) that refuses the whole push: the command for ref is
// reported "ng <ref> <reason>", every other one "ng <ref> push refused:
// another ref was refused". git prints each ng line. When the client's
// caps ask for side-band-64k or side-band the report travels on band 1.
// Serve it with status 200 and Content-Type
// application/x-git-receive-pack-result.
func PushRefusal(cmds []PushCommand, ref, reason, caps string) []byte {
	reason = strings.ReplaceAll(clip(reason), "\n", " ")
	var rep bytes.Buffer
	pktLine(&rep, "unpack ok\n")
	for _, c := range cmds {
		why := "push refused: another ref was refused"
		if c.Ref == ref {
			why = reason
		}
		pktLine(&rep, "ng "+c.Ref+" "+why+"\n")
	}
	if len(cmds) == 0 {
		pktLine(&rep, "ng "+ref+" "+reason+"\n")
	}
	rep.WriteString("0000")

	chunk := 0
	switch {
	case hasCap(caps, "side-band-64k"):
		chunk = 65515 // 65520 minus the length and the band byte
	case hasCap(caps, "side-band"):
		chunk = 995
	default:
		return rep.Bytes()
	}
	var out bytes.Buffer
	data := rep.Bytes()
	for len(data) > 0 {
		n := min(chunk, len(data))
		pktLine(&out, "\x01"+string(data[:n]))
		data = data[n:]
	}
	out.WriteString("0000")
	return out.Bytes()
}
