package sandbox

import (
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// loadSeccompProgram loads a compiled filter on the calling OS thread only
// (no TSYNC): PID 1 confines the one locked thread that forks the command,
// while its relay threads keep the AF_UNIX access they need. The caller must
// have set no_new_privs on this thread and must keep it locked. An empty or
// malformed program is an error: no filter, no command.
func loadSeccompProgram(prog []byte) error {
	const insnSize = 8 // struct sock_filter
	if len(prog) == 0 || len(prog)%insnSize != 0 || len(prog)/insnSize > 4096 {
		return fmt.Errorf("bad program length %d", len(prog))
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
	// Prove it took: the filter refuses AF_UNIX sockets (unless lifted,
	// then AF_VSOCK), so a test socket must fail with EPERM.
	fd, err := unix.Socket(unix.AF_VSOCK, unix.SOCK_STREAM, 0)
	if err == nil {
		unix.Close(fd)
		return errors.New("filter loaded but AF_VSOCK sockets still open")
	}
	if !errors.Is(err, unix.EPERM) {
		return fmt.Errorf("filter check: socket(AF_VSOCK) gave %v, want EPERM", err)
	}
	return nil
}
