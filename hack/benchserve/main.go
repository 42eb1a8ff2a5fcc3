// Command benchserve measures what one bootyd gives when a rack boots at
// once, next to Debian's nginx serving the same file, and writes
// out/bench/serve.md and out/bench/serve.json. Run it through
// `make bench-serve`, or
//
//	go run ./hack/benchserve [--bootyd out/bootyd] [--size-mib 256] [--clients 50] [--runs 3]
//
// What happens, in order: an image of --size-mib (per 4 MiB, 2 MiB of
// pseudo-random bytes and 2 MiB of zeros, like an OS image with free
// space) is generated in a work directory under --dir with a self-signed
// certificate for 127.0.0.1. Then, --runs times, in turns (each round starts
// one server further): for each of bootyd plain HTTP (out/bootyd
// --insecure-http), nginx plain HTTP (sendfile on), bootyd TLS and nginx
// TLS, a fresh server process starts on a loopback port, --clients
// clients start together and each downloads the whole image in --range-mib
// Range requests over one keep-alive HTTP/1.1 connection (each answer's
// status, Content-Range and length checked; client 0 also hashes what it
// got), and the server process (nginx: master and workers) is sampled from
// /proc: CPU time and peak RSS. Then --agents simulated agents (no VMs)
// write the image to files with booty's own pipeline (pkg/image.Write:
// fetch, verify the sha256, write sparsely with O_DIRECT), once against
// bootyd HTTP, nginx HTTP and bootyd TLS. Servers are stopped and the work
// directory removed on every exit path, Ctrl-C included.
package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run parses args, runs the bench and returns the exit status: 0 when the
// report was written (whether or not bootyd met its target), 1 when the
// bench itself failed (a server did not start, a client got wrong data),
// 2 on a usage error.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cfg, err := parseFlags(args, stderr)
	if err != nil {
		if err == errHelp {
			return 0
		}
		fmt.Fprintf(stderr, "benchserve: %v\n", err)
		return 2
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	rep, err := bench(ctx, cfg, log)
	if err != nil {
		fmt.Fprintf(stderr, "benchserve: %v\n", err)
		return 1
	}
	md, js, err := rep.write(cfg.Out)
	if err != nil {
		fmt.Fprintf(stderr, "benchserve: %v\n", err)
		return 1
	}
	for _, t := range rep.Targets {
		if t.Limit > 0 {
			fmt.Fprintf(stdout, "benchserve: %s: %.2f (limit ≥ %.2f) %s\n", t.Name, t.Ratio, t.Limit, t.verdict())
		} else {
			fmt.Fprintf(stdout, "benchserve: %s: %.2f\n", t.Name, t.Ratio)
		}
	}
	fmt.Fprintf(stdout, "benchserve: wrote %s and %s\n", md, js)
	return 0
}
