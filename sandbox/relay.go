package sandbox

import (
	"io"
	"net"
	"sync"
)

// Relay copies bytes both ways between a and b until both directions are
// done, propagating half-closes (a client's CloseWrite reaches the other
// side as EOF), then closes both. It is exported for the darwin relay and
// for embedders that build their own.
func Relay(a, b net.Conn) {
	var wg sync.WaitGroup
	wg.Add(2)
	pipe := func(dst, src net.Conn) {
		defer wg.Done()
		_, err := io.Copy(dst, src)
		if cw, ok := dst.(interface{ CloseWrite() error }); ok && err == nil {
			_ = cw.CloseWrite()
		} else {
			// An error (or no half-close support): tear both down so the
			// other direction does not hang.
			_ = dst.Close()
			_ = src.Close()
		}
	}
	go pipe(a, b)
	go pipe(b, a)
	wg.Wait()
	_ = a.Close()
	_ = b.Close()
}
