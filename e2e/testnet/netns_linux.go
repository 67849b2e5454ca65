//go:build linux

package testnet

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"
)

const (
	// nsPrefix starts every namespace New creates: moattn-PID-N. The PID
	// lets a later New remove what a crashed test binary left behind.
	nsPrefix = "moattn-"
	// lockDir holds one lock file per third octet X, shared with
	// e2e/bench/run.sh.
	lockDir = "/run/moat-testnet"
	// netnsDir is where `ip netns add` bind-mounts named namespaces.
	netnsDir = "/var/run/netns"
	// nsLinkName is the namespace end of the veth; it is created directly
	// inside the namespace, so the name never clashes in the root one.
	nsLinkName = "eth0"
)

var nsCounter atomic.Uint64

// errVethRefused marks a failed `ip link add … type veth` that was not a
// name clash: the kernel (or a missing veth module) refused, so New skips.
var errVethRefused = errors.New("veth refused")

// platform is the Linux per-Net state: the lock that owns the /24.
type platform struct {
	lock *os.File
}

// New creates a network namespace joined to the root namespace by a veth
// pair: 198.18.X.1/24 on the host side, 198.18.X.2/24 inside, both up, and
// lo up inside. The test's cleanup removes the veth and the namespace.
// Without root, the ip tool, or kernel support, New skips the test with the
// reason.
func New(t testing.TB) *Net {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skipf("testnet: network namespaces need root (euid %d)", os.Geteuid())
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skipf("testnet: iproute2 is not installed: %v", err)
	}
	removeStale(t)

	name := fmt.Sprintf("%s%d-%d", nsPrefix, os.Getpid(), nsCounter.Add(1))
	if out, err := ipCmd("netns", "add", name); err != nil {
		t.Skipf("testnet: the kernel refused a network namespace: ip netns add %s: %v: %s", name, err, out)
	}
	n := &Net{t: t, name: name, nsLink: nsLinkName}
	t.Cleanup(n.remove)

	if err := n.attach(t); err != nil {
		if errors.Is(err, errVethRefused) {
			t.Skipf("testnet: the kernel refused a veth pair: %v", err)
		}
		t.Fatal(err)
	}
	steps := [][]string{
		{"addr", "add", n.HostIP().String() + "/24", "dev", n.hostLink},
		{"link", "set", n.hostLink, "up"},
		{"-n", name, "addr", "add", n.IP().String() + "/24", "dev", n.nsLink},
		{"-n", name, "link", "set", n.nsLink, "up"},
		{"-n", name, "link", "set", "lo", "up"},
	}
	for _, args := range steps {
		if out, err := ipCmd(args...); err != nil {
			t.Fatalf("testnet: ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	return n
}

// attach picks a free X, locks it, and creates the veth pair. A busy X (its
// lock held by another process, an address of it on a host interface, or a
// left-over link of that name) is skipped; at most 254 are tried.
func (n *Net) attach(t testing.TB) error {
	if err := os.MkdirAll(lockDir, 0o755); err != nil {
		return fmt.Errorf("testnet: create %s: %w", lockDir, err)
	}
	used := hostSubnets()
	start := os.Getpid() % 254 // spread concurrent processes over the range
	for i := range 254 {
		x := (start+i)%254 + 1
		if used[x] {
			continue
		}
		lock, err := tryLock(x)
		if err != nil {
			return err
		}
		if lock == nil {
			continue
		}
		host := "moattn" + strconv.Itoa(x)
		out, err := ipCmd("link", "add", host, "type", "veth", "peer", "name", n.nsLink, "netns", n.name)
		if err != nil {
			lock.Close()
			if bytes.Contains(out, []byte("File exists")) {
				t.Logf("testnet: link %s exists (stale?), trying the next subnet", host)
				continue
			}
			return fmt.Errorf("%w: ip link add %s type veth: %v: %s", errVethRefused, host, err, out)
		}
		n.x, n.hostLink, n.plat.lock = x, host, lock
		return nil
	}
	return ErrNoSubnet
}

// tryLock takes the exclusive lock of X without waiting. It returns nil,
// nil when another process holds it.
func tryLock(x int) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(lockDir, strconv.Itoa(x)+".lock"), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open lock file: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, nil
		}
		return nil, fmt.Errorf("flock %s: %w", f.Name(), err)
	}
	return f, nil
}

// hostSubnets returns the X of every 198.18.X.0/24 that already has an
// address on a root-namespace interface, so New never shadows a route.
func hostSubnets() map[int]bool {
	used := map[int]bool{}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return used
	}
	bench := netip.MustParsePrefix("198.18.0.0/16")
	for _, a := range addrs {
		ipn, ok := a.(*net.IPNet)
		if !ok {
			continue
		}
		ip, ok := netip.AddrFromSlice(ipn.IP)
		if ip = ip.Unmap(); ok && bench.Contains(ip) {
			used[int(ip.As4()[2])] = true
		}
	}
	return used
}

// removeStale deletes namespaces named by New in processes that no longer
// exist. Errors are ignored: a concurrent New may be removing the same one.
func removeStale(t testing.TB) {
	entries, err := os.ReadDir(netnsDir)
	if err != nil {
		return
	}
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), nsPrefix)
		if !ok {
			continue
		}
		pidText, _, _ := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidText)
		if err != nil || pid <= 0 || pid == os.Getpid() || processAlive(pid) {
			continue
		}
		if _, err := ipCmd("netns", "del", e.Name()); err == nil {
			t.Logf("testnet: removed stale namespace %s of dead pid %d", e.Name(), pid)
		}
	}
}

func processAlive(pid int) bool {
	err := unix.Kill(pid, 0)
	return err == nil || errors.Is(err, unix.EPERM)
}

// remove is the test cleanup. The host end of the veth is deleted first and
// explicitly: deleting a namespace tears its devices down asynchronously,
// and a socket still open inside keeps the namespace alive, so only an
// explicit delete frees the link name and the /24 before the lock goes.
func (n *Net) remove() {
	n.mu.Lock()
	n.closed = true
	n.mu.Unlock()
	if n.hostLink != "" {
		if out, err := ipCmd("link", "del", n.hostLink); err != nil {
			n.t.Errorf("testnet: ip link del %s: %v: %s", n.hostLink, err, out)
		}
	}
	if out, err := ipCmd("netns", "del", n.name); err != nil {
		n.t.Errorf("testnet: ip netns del %s: %v: %s", n.name, err, out)
	}
	if n.plat.lock != nil {
		n.plat.lock.Close()
	}
}

// AddAddr adds another 198.18.X.y/24 inside the namespace, for tests that
// need several upstream "hosts". It fails the test for an address outside
// the Net's /24. Call it from the goroutine of the test that called New.
func (n *Net) AddAddr(ip string) {
	n.t.Helper()
	a, err := netip.ParseAddr(ip)
	if err != nil {
		n.t.Fatalf("testnet: AddAddr(%q): %v", ip, err)
	}
	if err := n.checkHostAddr(a); err != nil {
		n.t.Fatalf("testnet: AddAddr(%q): %v", ip, err)
	}
	if out, err := ipCmd("-n", n.name, "addr", "add", a.Unmap().String()+"/24", "dev", n.nsLink); err != nil {
		n.t.Fatalf("testnet: AddAddr(%q): ip addr add: %v: %s", ip, err, out)
	}
}

// Listen is net.Listen inside the namespace. The host of addr must be an IP
// literal or empty. The listener's socket stays in the namespace; accepting
// and serving work from any goroutine.
func (n *Net) Listen(network, addr string) (net.Listener, error) {
	if err := checkLiteral(addr); err != nil {
		return nil, err
	}
	var ln net.Listener
	err := n.do(func() error {
		var err error
		ln, err = net.Listen(network, addr)
		return err
	})
	if err != nil {
		if ln != nil {
			ln.Close()
		}
		return nil, fmt.Errorf("testnet: listen %s %s in %s: %w", network, addr, n.name, err)
	}
	return ln, nil
}

// ListenPacket is net.ListenPacket inside the namespace, for UDP servers
// such as a test DNS server.
func (n *Net) ListenPacket(network, addr string) (net.PacketConn, error) {
	if err := checkLiteral(addr); err != nil {
		return nil, err
	}
	var pc net.PacketConn
	err := n.do(func() error {
		var err error
		pc, err = net.ListenPacket(network, addr)
		return err
	})
	if err != nil {
		if pc != nil {
			pc.Close()
		}
		return nil, fmt.Errorf("testnet: listen %s %s in %s: %w", network, addr, n.name, err)
	}
	return pc, nil
}

// DialContext dials from inside the namespace (for example to the
// namespace's own loopback). The host of addr must be an IP literal.
func (n *Net) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	if err := checkLiteral(addr); err != nil {
		return nil, err
	}
	var c net.Conn
	err := n.do(func() error {
		var d net.Dialer
		var err error
		c, err = d.DialContext(ctx, network, addr)
		return err
	})
	if err != nil {
		if c != nil {
			c.Close()
		}
		return nil, fmt.Errorf("testnet: dial %s %s from %s: %w", network, addr, n.name, err)
	}
	return c, nil
}

// do runs fn on an OS thread switched into the namespace. It uses a fresh
// goroutine so that the caller's thread never changes namespace, and if
// switching back fails that goroutine exits still locked, which makes the
// runtime kill the thread instead of reusing it in the wrong namespace.
// Only sockets that fn creates itself, on this goroutine, land in the
// namespace.
func (n *Net) do(fn func() error) error {
	n.mu.Lock()
	closed := n.closed
	n.mu.Unlock()
	if closed {
		return ErrClosed
	}
	target, err := os.Open(filepath.Join(netnsDir, n.name))
	if err != nil {
		return fmt.Errorf("open namespace: %w", err)
	}
	defer target.Close()

	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("open current namespace: %w", err)
			return
		}
		defer orig.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("setns into %s: %w", n.name, err)
			return
		}
		fnErr := fn()
		if err := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); err != nil {
			// Deliberately no UnlockOSThread: see the doc comment.
			errc <- errors.Join(fnErr, fmt.Errorf("setns back to the root namespace: %w", err))
			return
		}
		runtime.UnlockOSThread()
		errc <- fnErr
	}()
	return <-errc
}

// ipCmd runs the ip tool and returns its combined output.
func ipCmd(args ...string) ([]byte, error) {
	out, err := exec.Command("ip", args...).CombinedOutput()
	return bytes.TrimSpace(out), err
}
