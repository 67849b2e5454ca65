// Package testnet gives moat's e2e tests and benchmarks upstream hosts that
// live in their own network namespace, reached from the test (in the root
// namespace) over a veth pair on 198.18.0.0/16 (RFC 2544's benchmarking
// range, so no test traffic can ever reach a real network).
//
// Each [New] makes one namespace and one /24: the host side of the veth is
// 198.18.X.1 and the namespace side 198.18.X.2 (more addresses with
// [Net.AddAddr]). Servers are started inside the namespace without a
// subprocess: [Net.Listen] switches one locked OS thread into the namespace
// just for the socket() call, so the socket stays there while the rest of
// the test runs in the root namespace. That matters for moat: the gateway
// denies every address of the host's own interfaces, and a server on a
// loopback or host address would prove nothing about real egress.
//
// Concurrency contract, shared with e2e/bench/run.sh: the third octet X is
// owned by whoever holds an exclusive flock(2) on /run/moat-testnet/X.lock.
// The lock dies with its holder, and namespaces named moattn-PID-N whose PID
// is gone are removed by the next New.
//
// Everything needs root and Linux; without them New skips the test with the
// reason, never passes silently.
package testnet
