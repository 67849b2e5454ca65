package gateway

import (
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// relayBufs serves the copies that cannot splice (e.g. into a unix socket).
var relayBufs = sync.Pool{New: func() any { b := make([]byte, 64<<10); return &b }}

// relay copies src to dst until src ends. It holds nothing while src is
// idle: it waits for readability with a zero-copy MSG_PEEK, asks the kernel
// how much is queued (SIOCINQ, tcp(7)), and only then moves exactly that much —
// spliced where dst is TCP. A plain io.Copy would park a splice pipe (two
// file descriptors) or a 32 KiB buffer in every idle tunnel, which caps a
// gateway at a few thousand idle tunnels.
func relay(dst, src net.Conn) (int64, error) {
	sc, ok := src.(syscall.Conn)
	if !ok {
		return io.Copy(dst, src)
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return io.Copy(dst, src)
	}
	var total int64
	var peek [1]byte
	for {
		var avail int
		var eof bool
		var perr error
		err := rc.Read(func(fd uintptr) bool {
			n, _, err := unix.Recvfrom(int(fd), peek[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
			for i := 0; err == unix.EINTR && i < 8; i++ {
				n, _, err = unix.Recvfrom(int(fd), peek[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
			}
			switch {
			case err == unix.EAGAIN:
				return false // wait for readability, holding nothing
			case err != nil:
				perr = err
			case n == 0:
				eof = true
			default:
				avail, perr = unix.IoctlGetInt(int(fd), unix.SIOCINQ)
			}
			return true
		})
		if err != nil {
			return total, err
		}
		if perr != nil {
			return total, perr
		}
		if eof {
			return total, nil
		}
		if avail <= 0 {
			avail = 1
		}
		if uc, ok := dst.(*net.UnixConn); ok {
			if tc, ok := src.(*net.TCPConn); ok {
				// Into moat run's private unix socket (a handful of tunnels
				// per session): splice to the end. Go cannot bound this
				// splice, so it keeps a pipe while the tunnel idles.
				n, err := tc.WriteTo(uc)
				return total + n, err
			}
		}
		lr := &io.LimitedReader{R: src, N: int64(avail)}
		var n int64
		if _, isTCP := dst.(*net.TCPConn); isTCP {
			n, err = io.Copy(dst, lr) // splice
		} else {
			bp := relayBufs.Get().(*[]byte)
			n, err = io.CopyBuffer(writerOnly{dst}, lr, *bp)
			relayBufs.Put(bp)
		}
		total += n
		if err != nil {
			return total, err
		}
		if n == 0 {
			return total, errors.New("relay: no progress")
		}
	}
}

// writerOnly hides ReadFrom so CopyBuffer uses the pooled buffer.
type writerOnly struct{ io.Writer }

// connAlive reports whether an idle connection is still open: no EOF and
// no unexpected bytes queued.
func connAlive(c net.Conn) bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return true
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	alive := false
	var b [1]byte
	_ = rc.Read(func(fd uintptr) bool {
		_, _, err := unix.Recvfrom(int(fd), b[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
		alive = err == unix.EAGAIN
		return true
	})
	return alive
}

// passMarker is the byte a sandbox relay sends with a passed connection's
// descriptor (sandbox.PassMarker; gateway does not import sandbox).
const passMarker = 0xfd

// acceptPassed reads the first message of a unix-socket client. A relay
// that passes its accepted TCP connection by descriptor (SCM_RIGHTS) sends
// one marker byte with it: the gateway then serves that connection
// directly, one copy less per byte. Any other client's first byte is kept.
func acceptPassed(uc *net.UnixConn, timeout time.Duration) (net.Conn, error) {
	_ = uc.SetReadDeadline(time.Now().Add(timeout))
	buf := make([]byte, 1)
	oob := make([]byte, unix.CmsgSpace(4*4))
	n, oobn, flags, _, err := uc.ReadMsgUnix(buf, oob)
	if err != nil {
		return nil, err
	}
	if oobn == 0 {
		if n == 0 {
			return nil, io.EOF
		}
		_ = uc.SetReadDeadline(time.Time{})
		return &prefixConn{Conn: uc, prefix: buf[:n]}, nil
	}
	var fds []int
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil {
		// Cannot name the descriptors to close: drop the connection.
		return nil, errors.New("gateway: unreadable control message")
	}
	for i := range msgs {
		if f, err := unix.ParseUnixRights(&msgs[i]); err == nil {
			fds = append(fds, f...)
		}
	}
	if flags&unix.MSG_CTRUNC != 0 || len(fds) != 1 || n != 1 || buf[0] != passMarker {
		for _, fd := range fds {
			unix.Close(fd)
		}
		return nil, errors.New("gateway: malformed passed connection")
	}
	// Only a connected TCP socket is served: never a file, a unix socket
	// or a listener.
	fd := fds[0]
	typ, err1 := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TYPE)
	dom, err2 := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_DOMAIN)
	lst, err3 := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ACCEPTCONN)
	_, err4 := unix.Getpeername(fd)
	if err1 != nil || err2 != nil || err3 != nil || err4 != nil || typ != unix.SOCK_STREAM ||
		(dom != unix.AF_INET && dom != unix.AF_INET6) || lst != 0 {
		unix.Close(fd)
		return nil, errors.New("gateway: passed descriptor is not a connected TCP socket")
	}
	f := os.NewFile(uintptr(fd), "passed")
	c, err := net.FileConn(f) // dups; f is ours to close
	f.Close()
	if err != nil {
		return nil, err
	}
	uc.Close()
	return c, nil
}

// prefixConn replays the bytes read while looking for a passed descriptor.
type prefixConn struct {
	net.Conn
	prefix []byte
}

func (c *prefixConn) Read(p []byte) (int, error) {
	if len(c.prefix) > 0 {
		n := copy(p, c.prefix)
		c.prefix = c.prefix[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}
