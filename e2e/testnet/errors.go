package testnet

import "errors"

// ErrUnsupported is returned on systems without network namespaces
// (everything but Linux).
var ErrUnsupported = errors.New("testnet: network namespaces are only supported on Linux")

// ErrNoSubnet is returned when every 198.18.X.0/24 (X in 1..254) is taken,
// by another test process or by an address already on a host interface.
var ErrNoSubnet = errors.New("testnet: no free 198.18.X.0/24 subnet")

// ErrOutsideSubnet is returned by AddAddr for an address that is not a host
// address of the Net's own /24: tests must never touch other addresses.
var ErrOutsideSubnet = errors.New("testnet: address is outside the namespace's 198.18.X.0/24")

// ErrClosed is returned by Net methods after the test's cleanup removed the
// namespace.
var ErrClosed = errors.New("testnet: namespace already removed")
