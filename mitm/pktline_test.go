package mitm

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

const (
	zero = "0000000000000000000000000000000000000000"
	oidA = "1111111111111111111111111111111111111111"
	oidB = "2222222222222222222222222222222222222222"
)

func pkt(s string) string { return fmt.Sprintf("%04x%s", len(s)+4, s) }

func TestParsePushCommands(t *testing.T) {
	const pack = "PACK\x00\x00\x00\x02rest-of-pack"
	body := pkt(oidA+" "+oidB+" refs/heads/main\x00report-status side-band-64k agent=git/2.39\n") +
		pkt(zero+" "+oidB+" refs/heads/agent/new\n") +
		pkt(oidA+" "+zero+" refs/heads/old\n") + "0000" + pack
	cmds, replay, err := ParsePushCommands(strings.NewReader(body), 0)
	if err != nil {
		t.Fatalf("ParsePushCommands: %v", err)
	}
	want := []PushCommand{
		{Old: oidA, New: oidB, Ref: "refs/heads/main", Caps: "report-status side-band-64k agent=git/2.39"},
		{Old: zero, New: oidB, Ref: "refs/heads/agent/new"},
		{Old: oidA, New: zero, Ref: "refs/heads/old"},
	}
	if diff := cmp.Diff(want, cmds); diff != "" {
		t.Errorf("commands (-want +got):\n%s", diff)
	}
	if !cmds[1].IsCreate() || cmds[1].IsDelete() || !cmds[2].IsDelete() {
		t.Errorf("IsCreate/IsDelete wrong: %+v", cmds)
	}
	got, _ := io.ReadAll(replay)
	if string(got) != body {
		t.Errorf("replay = %q, want the whole body %q", got, body)
	}
}

func TestParsePushCommandsSHA256AndShallow(t *testing.T) {
	o := strings.Repeat("a", 64)
	body := pkt("shallow "+oidA+"\n") + pkt(o+" "+o+" refs/heads/x\x00report-status") + "0000"
	cmds, _, err := ParsePushCommands(strings.NewReader(body), 0)
	if err != nil || len(cmds) != 1 || cmds[0].Ref != "refs/heads/x" {
		t.Errorf("ParsePushCommands = %+v, %v; want one command for refs/heads/x", cmds, err)
	}
}

func TestParsePushCommandsErrors(t *testing.T) {
	many := strings.Repeat(pkt(oidA+" "+oidB+" refs/heads/b\n"), maxPushCommands+1) + "0000"
	tests := []struct {
		name string
		body string
		max  int
		want error
	}{
		{"empty", "", 0, ErrPktLine},
		{"no flush", pkt(oidA + " " + oidB + " refs/heads/x\n"), 0, ErrPktLine},
		{"bad hex", "zzzz", 0, ErrPktLine},
		{"short line", "0040" + oidA, 0, ErrPktLine},
		{"delim", "0001", 0, ErrPktLine},
		{"empty line", "0004", 0, ErrPktLine},
		{"bad oid", pkt("xyz "+oidB+" refs/heads/x\n") + "0000", 0, ErrPktLine},
		{"mixed oid length", pkt(oidA+" "+strings.Repeat("b", 64)+" refs/heads/x\n") + "0000", 0, ErrPktLine},
		{"no ref", pkt(oidA+" "+oidB) + "0000", 0, ErrPktLine},
		{"dot ref", pkt(oidA+" "+oidB+" refs/heads/../x") + "0000", 0, ErrPktLine},
		{"caps twice", pkt(oidA+" "+oidB+" refs/heads/a\x00c") + pkt(oidA+" "+oidB+" refs/heads/b\x00c") + "0000", 0, ErrPktLine},
		{"too many bytes", pkt(oidA+" "+oidB+" refs/heads/"+strings.Repeat("x", 200)) + "0000", 100, ErrPushTooLarge},
		{"too many commands", many, 1 << 30, ErrPushTooLarge},
		{"signed", pkt("push-cert\x00report-status\n") + "0000", 0, ErrSignedPush},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cmds, r, err := ParsePushCommands(strings.NewReader(tc.body), tc.max)
			if !errors.Is(err, tc.want) {
				t.Errorf("ParsePushCommands = %v, want %v", err, tc.want)
			}
			if cmds != nil || r != nil {
				t.Errorf("ParsePushCommands returned commands or a reader with an error")
			}
		})
	}
}

func TestGitPushPermits(t *testing.T) {
	p := GitPush{Repo: "o/r", Refs: []string{"refs/heads/agent/*", "refs/tags/**"}}
	tests := []struct {
		name      string
		p         GitPush
		cmd       PushCommand
		ok        bool
		reasonHas string
	}{
		{"update allowed", p, PushCommand{oidA, oidB, "refs/heads/agent/x", ""}, true, ""},
		{"create allowed", p, PushCommand{zero, oidB, "refs/heads/agent/x", ""}, true, ""},
		{"other branch", p, PushCommand{oidA, oidB, "refs/heads/main", ""}, false, "pushing to refs/heads/main is not allowed"},
		{"deeper branch", p, PushCommand{oidA, oidB, "refs/heads/agent/x/y", ""}, false, "not allowed"},
		{"delete", p, PushCommand{oidA, zero, "refs/heads/agent/x", ""}, false, "deleting refs/heads/agent/x"},
		{"delete allowed", GitPush{Refs: p.Refs, AllowDelete: true}, PushCommand{oidA, zero, "refs/heads/agent/x", ""}, true, ""},
		{"tag", p, PushCommand{zero, oidB, "refs/tags/v1", ""}, false, "tags"},
		{"tag allowed", GitPush{Refs: p.Refs, AllowTags: true}, PushCommand{zero, oidB, "refs/tags/v1", ""}, true, ""},
		{"outside refs", p, PushCommand{zero, oidB, "HEAD", ""}, false, "outside refs/"},
	}
	for _, tc := range tests {
		ok, reason := tc.p.Permits(tc.cmd)
		if ok != tc.ok || !strings.Contains(reason, tc.reasonHas) {
			t.Errorf("%s: Permits(%+v) = %v, %q; want %v, reason containing %q", tc.name, tc.cmd, ok, reason, tc.ok, tc.reasonHas)
		}
	}
}

func TestGitOpPermitsAllOrNothing(t *testing.T) {
	rs := mustRules(t, nil, testGit)
	d := rs.Check(RequestInfo{Host: "github.com", Port: 443, Method: "POST", Path: "/myorg/myrepo.git/git-receive-pack"})
	if !d.Allowed || d.Git == nil || d.Git.Kind != GitPushPack {
		t.Fatalf("Check(push pack) = %+v, want allowed GitPushPack", d)
	}
	cmds := []PushCommand{{oidA, oidB, "refs/heads/agent/a", ""}, {oidA, oidB, "refs/heads/main", ""}}
	ok, ref, reason := d.Git.Permits(cmds)
	if ok || ref != "refs/heads/main" || !strings.Contains(reason, "refs/heads/main") {
		t.Errorf("Permits = %v, %q, %q; want refused at refs/heads/main", ok, ref, reason)
	}
	if ok, _, _ := d.Git.Permits(cmds[:1]); !ok {
		t.Error("Permits(allowed ref) refused")
	}
	var nilOp *GitOp
	if ok, _, _ := nilOp.Permits(nil); ok {
		t.Error("nil GitOp permits")
	}
}

// readPkts decodes a pkt-line stream into its payloads ("" for a flush).
func readPkts(t *testing.T, b []byte) []string {
	t.Helper()
	var out []string
	for len(b) > 0 {
		n, ok := parseHex4(b[:4])
		if !ok {
			t.Fatalf("bad pkt length %q", b[:4])
		}
		if n == 0 {
			out = append(out, "")
			b = b[4:]
			continue
		}
		out = append(out, string(b[4:n]))
		b = b[n:]
	}
	return out
}

func TestPushRefusal(t *testing.T) {
	cmds := []PushCommand{{oidA, oidB, "refs/heads/a", ""}, {oidA, oidB, "refs/heads/main", ""}}
	plain := PushRefusal(cmds, "refs/heads/main", "no\nway", "report-status")
	want := []string{"unpack ok\n", "ng refs/heads/a push refused: another ref was refused\n", "ng refs/heads/main no?way\n", ""}
	if diff := cmp.Diff(want, readPkts(t, plain)); diff != "" {
		t.Errorf("plain report (-want +got):\n%s", diff)
	}
	for _, caps := range []string{"report-status side-band-64k", "side-band report-status"} {
		sb := readPkts(t, PushRefusal(cmds, "refs/heads/main", "no\nway", caps))
		if len(sb) != 2 || sb[1] != "" || !strings.HasPrefix(sb[0], "\x01") {
			t.Fatalf("caps %q: sideband framing = %q, want one band-1 packet and a flush", caps, sb)
		}
		if !bytes.Equal([]byte(sb[0][1:]), plain) {
			t.Errorf("caps %q: band 1 carries %q, want the plain report", caps, sb[0][1:])
		}
	}
}

func FuzzParsePushCommands(f *testing.F) {
	f.Add([]byte(pkt(oidA+" "+oidB+" refs/heads/main\x00report-status\n") + "0000PACK"))
	f.Add([]byte("0000"))
	f.Add([]byte("00"))
	f.Add([]byte(pkt("shallow "+oidA) + pkt("push-cert\x00") + "0000"))
	f.Fuzz(func(t *testing.T, data []byte) {
		cmds, r, err := ParsePushCommands(bytes.NewReader(data), 4096)
		if err != nil {
			if cmds != nil || r != nil {
				t.Fatal("results with an error")
			}
			return
		}
		got, _ := io.ReadAll(r)
		if !bytes.Equal(got, data) {
			t.Fatalf("replay differs from input")
		}
		for _, c := range cmds {
			if !isOID(c.Old) || !isOID(c.New) || !validRef(c.Ref) {
				t.Fatalf("accepted a bad command %+v", c)
			}
		}
	})
}
