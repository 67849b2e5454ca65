//go:build !linux

package gateway

import (
	"io"
	"net"
	"time"
)

// relay copies src to dst until src ends.
func relay(dst, src net.Conn) (int64, error) { return io.Copy(dst, src) }

// connAlive cannot look without reading here; the retry covers it.
func connAlive(net.Conn) bool { return true }

// acceptPassed serves unix-socket clients as they are: descriptor passing
// is Linux-only.
func acceptPassed(uc *net.UnixConn, _ time.Duration) (net.Conn, error) { return uc, nil }

// prefixConn is never built on this platform.
type prefixConn struct {
	net.Conn
	prefix []byte
}
