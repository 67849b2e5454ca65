//go:build linux && cgo

package sandbox

import (
	"fmt"
	"io"
	"os"

	seccomp "github.com/seccomp/libseccomp-golang"
)

func cgoSupported() error { return nil }

// compileSeccomp turns rules into a BPF program (struct sock_filter array,
// native endian). The parent compiles it while the init stage boots, so the
// cost is hidden; unknown syscall names fail closed.
func compileSeccomp(rules []SeccompRule) ([]byte, error) {
	f, err := buildFilter(rules)
	if err != nil {
		return nil, err
	}
	defer f.Release()
	// ExportBPFMem needs libseccomp 2.6; Debian 12 ships 2.5. A pipe holds
	// the few hundred bytes of program.
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("export: %w", err)
	}
	defer r.Close()
	err = f.ExportBPF(w)
	w.Close()
	if err != nil {
		return nil, fmt.Errorf("export: %w", err)
	}
	prog, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("export: %w", err)
	}
	return prog, nil
}

func buildFilter(rules []SeccompRule) (*seccomp.ScmpFilter, error) {
	f, err := seccomp.NewFilter(seccomp.ActAllow)
	if err != nil {
		return nil, fmt.Errorf("new filter: %w", err)
	}
	fail := func(err error) (*seccomp.ScmpFilter, error) {
		f.Release()
		return nil, err
	}
	if err := f.SetNoNewPrivsBit(true); err != nil {
		return fail(fmt.Errorf("no_new_privs attribute: %w", err))
	}
	for _, r := range rules {
		sc, err := seccomp.GetSyscallFromName(r.Syscall)
		if err != nil {
			return fail(fmt.Errorf("syscall %s: %w", r.Syscall, err))
		}
		act := seccomp.ActErrno.SetReturnCode(int16(r.Errno))
		switch r.Op {
		case CmpNone:
			err = f.AddRule(sc, act)
		case CmpEqual:
			var c seccomp.ScmpCondition
			c, err = seccomp.MakeCondition(r.Arg, seccomp.CompareEqual, r.Value)
			if err == nil {
				err = f.AddRuleConditional(sc, act, []seccomp.ScmpCondition{c})
			}
		case CmpMaskedAll:
			var c seccomp.ScmpCondition
			c, err = seccomp.MakeCondition(r.Arg, seccomp.CompareMaskedEqual, r.Mask, r.Value)
			if err == nil {
				err = f.AddRuleConditional(sc, act, []seccomp.ScmpCondition{c})
			}
		default:
			err = fmt.Errorf("unknown comparison %q", r.Op)
		}
		if err != nil {
			return fail(fmt.Errorf("rule %s: %w", r, err))
		}
	}
	return f, nil
}
