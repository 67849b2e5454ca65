//go:build linux && cgo

package sandbox

import (
	"fmt"

	seccomp "github.com/seccomp/libseccomp-golang"
)

func cgoSupported() error { return nil }

// loadSeccomp compiles rules into a default-allow filter and loads it
// (no_new_privs set, all threads synchronised). Unknown syscall names fail
// closed.
func loadSeccomp(rules []SeccompRule) error {
	f, err := seccomp.NewFilter(seccomp.ActAllow)
	if err != nil {
		return fmt.Errorf("new filter: %w", err)
	}
	defer f.Release()
	if err := f.SetNoNewPrivsBit(true); err != nil {
		return fmt.Errorf("no_new_privs attribute: %w", err)
	}
	for _, r := range rules {
		sc, err := seccomp.GetSyscallFromName(r.Syscall)
		if err != nil {
			return fmt.Errorf("syscall %s: %w", r.Syscall, err)
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
			return fmt.Errorf("rule %s: %w", r, err)
		}
	}
	if err := f.Load(); err != nil {
		return fmt.Errorf("load: %w", err)
	}
	return nil
}
