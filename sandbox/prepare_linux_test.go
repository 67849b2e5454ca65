package sandbox

import (
	"context"
	"errors"
	"io"
	"testing"
)

func TestPrepareAbortAndStreams(t *testing.T) {
	if err := Supported(); err != nil {
		t.Skip(err)
	}
	p, err := Prepare(nil, io.Discard, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	p.Abort()
	if st := p.cmd.ProcessState; st == nil || !st.Exited() && st.Sys() == nil {
		t.Errorf("PID 1 still there after Abort: %v", st)
	}
	if _, err := p.Run(context.Background(), Spec{Args: []string{"true"}}); !errors.Is(err, ErrSetup) {
		t.Errorf("Run after Abort = %v, want ErrSetup", err)
	}
}
