// Command upstream is the benchmark's origin server: testnet.Handler
// (/bytes/N, /echo, /status/N) with keep-alive, on one address. run.sh
// starts it inside a network namespace with `ip netns exec`.
package main

import (
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/moat-dev/moat/e2e/testnet"
)

func main() {
	listen := flag.String("listen", "", "address to listen on, e.g. 198.18.200.2:80 (required)")
	flag.Parse()
	if *listen == "" {
		fmt.Fprintln(os.Stderr, "upstream: -listen is required")
		os.Exit(2)
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatalf("upstream: %v", err)
	}
	fmt.Printf("upstream: listening on %s\n", ln.Addr())
	srv := &http.Server{
		Handler:           testnet.Handler(),
		ReadHeaderTimeout: 30 * time.Second,
		IdleTimeout:       5 * time.Minute, // keep-alive: wrk reuses its 64 connections
	}
	log.Fatal(srv.Serve(ln))
}
