//go:build !linux

package testnet

import (
	"context"
	"net"
	"testing"
)

type platform struct{}

// New skips the test: network namespaces exist only on Linux.
func New(t testing.TB) *Net {
	t.Helper()
	t.Skip(ErrUnsupported)
	return nil
}

// AddAddr fails the test: network namespaces exist only on Linux.
func (n *Net) AddAddr(ip string) { n.t.Fatal(ErrUnsupported) }

// Listen returns ErrUnsupported.
func (n *Net) Listen(network, addr string) (net.Listener, error) { return nil, ErrUnsupported }

// ListenPacket returns ErrUnsupported.
func (n *Net) ListenPacket(network, addr string) (net.PacketConn, error) {
	return nil, ErrUnsupported
}

// DialContext returns ErrUnsupported.
func (n *Net) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	return nil, ErrUnsupported
}
