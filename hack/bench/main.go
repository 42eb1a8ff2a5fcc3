// Command bench times `booty write-image` against the usual ways of writing
// a compressed disk image (a curl | zstd -dc | dd oflag=direct pipeline and
// bmaptool copy), and against the floors under them (the decoders alone, the
// raw write of the image's data), and writes out/bench/report.md and
// out/bench/results.json. Run it as root through `make bench`, or
//
//	go run ./hack/bench [--quick] [--runs N] [--booty out/booty] [--images DIR]
//
// What happens, in order: the images are built or found in the cache by
// hack/mkbenchimage.sh; an HTTP file server starts on 127.0.0.1 serving them;
// for each image a loop device with direct I/O is attached to a sparse file on
// disk (--target-dir); every contender runs --runs times, in turns, each run
// starting from a discarded target and dropped page cache with the served
// file read back into the cache; every writer's result is read back and its
// sha256 compared with the image's, so a fast but wrong writer fails the
// bench instead of winning it. The loop devices are detached, their files
// removed and the server stopped on every exit path, Ctrl-C included.
//
// The same binary is its own decoder helper: with BOOTY_BENCH_HELPER=decode
// in the environment it decodes one file with the Go decoders booty uses
// (klauspost/compress) to io.Discard, and so has its own peak RSS.
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
	if os.Getenv(helperEnv) != "" {
		os.Exit(helperMain(os.Args[1:], os.Stdout, os.Stderr))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run parses args, runs the bench and returns the exit status: 0 when the
// report was written (whether or not booty met its targets), 1 when the bench
// itself failed (a writer failed or wrote wrong data, a tool is missing), 2
// on a usage error.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cfg, err := parseFlags(args, stderr)
	if err != nil {
		if err == errHelp {
			return 0
		}
		fmt.Fprintf(stderr, "bench: %v\n", err)
		return 2
	}
	if cfg.Render != "" {
		if err := render(cfg.Render, cfg.Out); err != nil {
			fmt.Fprintf(stderr, "bench: %v\n", err)
			return 1
		}
		return 0
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	b := &bench{cfg: cfg, log: log, stdout: stdout}
	if err := b.run(ctx); err != nil {
		fmt.Fprintf(stderr, "bench: %v\n", err)
		return 1
	}
	return 0
}
