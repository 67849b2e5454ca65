//go:build linux && cgo

package sandbox

import (
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"

	seccomp "github.com/seccomp/libseccomp-golang"
)

func cgoSupported() error { return nil }

// loadSeccomp compiles rules into a default-allow filter and loads it
// (no_new_privs set, all threads synchronised). Unknown syscall names fail
// closed.
func loadSeccomp(rules []SeccompRule) error {
	f, err := buildFilter(rules)
	if err != nil {
		return err
	}
	defer f.Release()
	if err := f.Load(); err != nil {
		return fmt.Errorf("load: %w", err)
	}
	return nil
}

// loadSeccompThread loads the filter on the calling OS thread only (no
// TSYNC): PID 1 confines the one locked thread that forks the command,
// while its relay threads keep the AF_UNIX access they need. The caller
// must have set no_new_privs on this thread and must keep it locked.
func loadSeccompThread(rules []SeccompRule) error {
	f, err := buildFilter(rules)
	if err != nil {
		return err
	}
	defer f.Release()
	// ExportBPFMem needs libseccomp 2.6; Debian 12 ships 2.5. A pipe holds
	// the few hundred bytes of program.
	r, w, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("export: %w", err)
	}
	defer r.Close()
	err = f.ExportBPF(w)
	w.Close()
	if err != nil {
		return fmt.Errorf("export: %w", err)
	}
	prog, err := io.ReadAll(r)
	if err != nil {
		return fmt.Errorf("export: %w", err)
	}
	const insnSize = 8 // struct sock_filter
	if len(prog) == 0 || len(prog)%insnSize != 0 {
		return fmt.Errorf("export: bad program length %d", len(prog))
	}
	insns := make([]unix.SockFilter, len(prog)/insnSize)
	for i := range insns {
		b := prog[i*insnSize:]
		insns[i] = unix.SockFilter{
			Code: binary.NativeEndian.Uint16(b[0:]),
			Jt:   b[2],
			Jf:   b[3],
			K:    binary.NativeEndian.Uint32(b[4:]),
		}
	}
	fprog := unix.SockFprog{Len: uint16(len(insns)), Filter: &insns[0]}
	if err := unix.Prctl(unix.PR_SET_SECCOMP, unix.SECCOMP_MODE_FILTER, uintptr(unsafe.Pointer(&fprog)), 0, 0); err != nil {
		return fmt.Errorf("load: %w", err)
	}
	runtime.KeepAlive(insns)
	return nil
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
