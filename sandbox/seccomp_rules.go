package sandbox

import "fmt"

// Linux constants for the seccomp rule list. They are spelled out here (not
// taken from x/sys/unix) so the list stays pure and testable on every OS.
const (
	afUNIX  = 1
	afVSOCK = 40

	errnoEPERM  = 1
	errnoENOSYS = 38
)

// cloneNewFlags are the CLONE_NEW* flags. CLONE_NEWTIME (0x80) overlaps the
// exit-signal byte of clone(2), so it is only matched for unshare(2).
var cloneNewFlags = []struct {
	name string
	bit  uint64
}{
	{"CLONE_NEWNS", 0x00020000},
	{"CLONE_NEWCGROUP", 0x02000000},
	{"CLONE_NEWUTS", 0x04000000},
	{"CLONE_NEWIPC", 0x08000000},
	{"CLONE_NEWUSER", 0x10000000},
	{"CLONE_NEWPID", 0x20000000},
	{"CLONE_NEWNET", 0x40000000},
}

const cloneNewTime = 0x80

// CmpOp is how a SeccompRule compares a syscall argument.
type CmpOp string

// Comparison operators of SeccompRule.
const (
	CmpNone      CmpOp = ""          // no argument condition: every call matches
	CmpEqual     CmpOp = "eq"        // arg == Value
	CmpMaskedAll CmpOp = "masked-eq" // arg & Mask == Value
)

// SeccompRule is one entry of the filter: calls to Syscall whose argument
// matches fail with Errno. Every other call is allowed.
type SeccompRule struct {
	Syscall string
	Errno   uint16 // errnoEPERM or errnoENOSYS (Linux numbers)
	Arg     uint   // index of the compared argument, when Op != CmpNone
	Op      CmpOp
	Value   uint64
	Mask    uint64
	Why     string // short reason, for Plan's rendering
}

func (r SeccompRule) String() string {
	e := "EPERM"
	if r.Errno == errnoENOSYS {
		e = "ENOSYS"
	}
	switch r.Op {
	case CmpEqual:
		return fmt.Sprintf("%s(arg%d == %d) -> %s  # %s", r.Syscall, r.Arg, r.Value, e, r.Why)
	case CmpMaskedAll:
		return fmt.Sprintf("%s(arg%d & %#x == %#x) -> %s  # %s", r.Syscall, r.Arg, r.Mask, r.Value, e, r.Why)
	}
	return fmt.Sprintf("%s -> %s  # %s", r.Syscall, e, r.Why)
}

// ioctl requests that reach outside the sandbox through its terminal.
const (
	tiocsti   = 0x5412
	tioclinux = 0x541c
)

// low32 matches an int argument: the kernel reads only its low 32 bits, so
// an exact 64-bit comparison would let 0x100000001 pass as AF_UNIX.
func low32(syscall string, arg uint, value uint64, why string) SeccompRule {
	return SeccompRule{Syscall: syscall, Errno: errnoEPERM, Arg: arg, Op: CmpMaskedAll, Mask: 0xffffffff, Value: value, Why: why}
}

// SeccompRules is the filter of DESIGN §4, loaded just before the command is
// executed. allowAllUnixSockets lifts only the AF_UNIX socket rules. It is
// pure.
func SeccompRules(allowAllUnixSockets bool) []SeccompRule {
	var rs []SeccompRule
	deny := func(name, why string) {
		rs = append(rs, SeccompRule{Syscall: name, Errno: errnoEPERM, Why: why})
	}
	if !allowAllUnixSockets {
		// The gateway socket and host daemons (docker, ssh-agent, dbus) are
		// unix sockets: the only way out that skips the network namespace.
		rs = append(rs,
			low32("socket", 0, afUNIX, "AF_UNIX reaches host daemons"),
			low32("socketpair", 0, afUNIX, "AF_UNIX (srt misses socketpair)"),
		)
	}
	rs = append(rs, low32("socket", 0, afVSOCK, "AF_VSOCK reaches the hypervisor"))
	// TIOCSTI pushes bytes into the terminal's input: the host shell would
	// run them after moat exits. TIOCLINUX can do the same on a console.
	rs = append(rs,
		low32("ioctl", 1, tiocsti, "TIOCSTI injects input into the host terminal"),
		low32("ioctl", 1, tioclinux, "TIOCLINUX can inject console input"),
	)
	for _, n := range []string{"io_uring_setup", "io_uring_enter", "io_uring_register"} {
		deny(n, "io_uring bypasses seccomp")
	}
	for _, f := range cloneNewFlags {
		for _, sc := range []string{"unshare", "clone"} {
			rs = append(rs, SeccompRule{Syscall: sc, Errno: errnoEPERM, Arg: 0, Op: CmpMaskedAll, Mask: f.bit, Value: f.bit, Why: f.name + ": new namespaces could unlock mounts"})
		}
	}
	rs = append(rs, SeccompRule{Syscall: "unshare", Errno: errnoEPERM, Arg: 0, Op: CmpMaskedAll, Mask: cloneNewTime, Value: cloneNewTime, Why: "CLONE_NEWTIME"})
	for _, n := range []string{"setns", "mount", "umount2", "mount_setattr", "move_mount", "open_tree",
		"fsopen", "fsmount", "fsconfig", "fspick", "pivot_root"} {
		deny(n, "the mount table is fixed")
	}
	for _, n := range []string{"ptrace", "process_vm_writev"} {
		deny(n, "no tampering with other processes")
	}
	for _, n := range []string{"bpf", "keyctl", "add_key", "request_key", "perf_event_open"} {
		deny(n, "kernel attack surface")
	}
	// clone3 passes its flags in memory, which seccomp cannot read; ENOSYS
	// makes libc fall back to clone(2), whose flags the rules above check.
	rs = append(rs, SeccompRule{Syscall: "clone3", Errno: errnoENOSYS, Why: "flags in memory: force the clone fallback"})
	return rs
}
