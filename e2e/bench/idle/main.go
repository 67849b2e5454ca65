// Command idle measures the gateway's memory per idle CONNECT tunnel: it
// starts `moat gateway`, opens N tunnels through it to a loopback echo
// server, and reads the gateway's RSS before and after. Loopback only;
// bounded by -n and -timeout.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

func main() {
	moat := flag.String("moat", "bin/moat", "moat binary")
	n := flag.Int("n", 9900, "tunnels to open (the gateway holds 2 fds each; this machine's hard limit is 20000)")
	echo := flag.Bool("echo", false, "internal: run only the loopback echo upstream, printing its address")
	timeout := flag.Duration("timeout", 3*time.Minute, "give up after")
	flag.Parse()
	time.AfterFunc(*timeout, func() { fmt.Fprintln(os.Stderr, "idle: timeout"); exit(1) })

	if *echo {
		up, err := net.Listen("tcp", "127.0.0.1:0")
		check(err)
		fmt.Println(up.Addr())
		for {
			c, err := up.Accept()
			if err != nil {
				return
			}
			// A small buffer, not io.Copy: a splice would park a pipe
			// (two fds) in every idle echo connection.
			go func() { io.CopyBuffer(struct{ io.Writer }{c}, c, make([]byte, 512)); c.Close() }()
		}
	}
	// The echo upstream runs in its own process: file descriptors are
	// limited per process.
	self, err := os.Executable()
	check(err)
	ec := exec.Command(self, "-echo", "-timeout", timeout.String())
	ecOut, err := ec.StdoutPipe()
	check(err)
	check(ec.Start())
	cleanups = append(cleanups, func() { ec.Process.Kill() })
	line, err := bufio.NewReader(ecOut).ReadString('\n')
	check(err)
	target := strings.TrimSpace(line)
	dir, err := os.MkdirTemp("", "moat-idle-")
	check(err)
	cleanups = append(cleanups, func() { os.RemoveAll(dir) })
	settings := filepath.Join(dir, "s.yaml")
	check(os.WriteFile(settings, []byte("network:\n  allowedDomains: [\"127.0.0.1\"]\n"), 0o600))
	pl, err := net.Listen("tcp", "127.0.0.1:0")
	check(err)
	gwAddr := pl.Addr().String()
	pl.Close()
	gw := exec.Command(*moat, "gateway", "--no-auth", "--listen", gwAddr, "--settings", settings)
	gw.Stderr = os.Stderr
	check(gw.Start())
	cleanups = append(cleanups, func() { gw.Process.Kill() })
	for i := 0; ; i++ {
		if c, err := net.Dial("tcp", gwAddr); err == nil {
			c.Close()
			break
		}
		if i > 200 {
			check(fmt.Errorf("gateway did not start"))
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond)
	before := rss(gw.Process.Pid)
	conns := make([]net.Conn, 0, *n)
	for i := 0; i < *n; i++ {
		c, err := net.Dial("tcp", gwAddr)
		check(err)
		fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, &http.Request{Method: "CONNECT"})
		if err != nil {
			check(fmt.Errorf("tunnel %d: %w", i, err))
		}
		if resp.StatusCode != 200 {
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
			check(fmt.Errorf("tunnel %d: status %d: %s", i, resp.StatusCode, body))
		}
		conns = append(conns, c)
	}
	// One round trip on a sample proves the tunnels are live.
	for i := 0; i < len(conns); i += len(conns)/10 + 1 {
		io.WriteString(conns[i], "x")
		b := make([]byte, 1)
		_, err := io.ReadFull(conns[i], b)
		check(err)
	}
	time.Sleep(2 * time.Second) // let the GC settle
	after := rss(gw.Process.Pid)
	per := float64(after-before) / float64(*n)
	fmt.Printf("idle tunnels: %d, gateway RSS %d KiB -> %d KiB, %.1f KiB per tunnel (target <= 64)\n",
		*n, before, after, per)
	for _, c := range conns {
		c.Close()
	}
	exit(0)
}

// rss reads VmRSS in KiB from /proc.
func rss(pid int) int {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	check(err)
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "VmRSS:") {
			v, _ := strconv.Atoi(strings.Fields(l)[1])
			return v
		}
	}
	return 0
}

// cleanups run before any exit: a failed run must not leave the gateway
// or the echo process behind.
var cleanups []func()

func exit(code int) {
	for i := len(cleanups) - 1; i >= 0; i-- {
		cleanups[i]()
	}
	os.Exit(code)
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "idle:", err)
		exit(1)
	}
}
