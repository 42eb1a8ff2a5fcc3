package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"runtime/pprof"
	"runtime/trace"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/pflag"

	"github.com/booty-dev/booty/pkg/humanize"
	"github.com/booty-dev/booty/pkg/image"
)

func init() {
	register(command{
		name:    "write-image",
		summary: "stream, verify and write an OS image to a disk or file",
		run: func(args []string) int {
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return runWriteImage(ctx, args, os.Stdout, os.Stderr)
		},
	})
}

const writeImageUsage = `Usage:
  booty write-image --source URL --target DEVICE_OR_FILE [--checksum sha256:HEX]
                    [--image-checksum sha256:HEX] [--bmap URL [--bmap-checksum sha256:HEX]]
                    [--target-size SIZE] [--ca-cert FILE]
                    [--progress] [--fresh-target] [--no-direct]
                    [--insecure-skip-verify] [--insecure-http]

Streams the image at URL (http, https, file://, a path, or
oci://REGISTRY/REPO@sha256:HEX; gzip, zstd, xz, bzip2, lz4, qcow2 or raw,
found by its magic bytes) onto a block device or regular file. Fetching,
decompressing, hashing and writing run concurrently; writes are large,
aligned and O_DIRECT where the target allows; all-zero runs are zeroed
with BLKZEROOUT (or skipped with --fresh-target) instead of written. The
first and last MiB of the image are written only after every given
checksum matched; on any failure they are zeroed, so the target is never
left bootable with an unverified image. Interrupted HTTP downloads resume.
A block device is opened exclusively (it must not be mounted); a regular
file is truncated and written sparsely.

With --bmap (bmaptool's XML, versions 1.x and 2.0), each mapped range is
checked against its checksum as it passes and unmapped ranges are not
written; they must be zero in the image, or the write fails naming the
first offset that is not. --bmap-checksum pins the bmap file. For registries that need a token, set BOOTY_OCI_TOKEN.

TLS is verified, and plain http:// (or oci+http://) URLs are refused unless
--insecure-http is given; redirects are bounded, never go from https to
http, and carry no credentials to another host. Interrupted downloads are
retried a bounded number of times with growing waits; a server that stalls
fails the attempt after 60 s without data.

Exit status: 0 the target holds the verified image, 1 the write failed,
2 usage error.
`

// writeImageMemLimit is the soft Go heap limit while writing an image.
const writeImageMemLimit = 40 << 20

// runWriteImage implements "booty write-image"; it returns the exit status.
func runWriteImage(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := pflag.NewFlagSet("booty write-image", pflag.ContinueOnError)
	fs.SetOutput(stderr)
	source := fs.String("source", "", "image `URL`: http://, https://, file:// or a path (required)")
	target := fs.String("target", "", "block device or regular file to write, `DEVICE_OR_FILE` (required)")
	checksum := fs.String("checksum", "", "`ALGO:HEX` (sha256 or sha512) of the file as served, compressed or not")
	imageChecksum := fs.String("image-checksum", "", "`ALGO:HEX` (sha256 or sha512) of the decompressed image")
	caCert := fs.String("ca-cert", "", "PEM `FILE` of CA certificates for https sources (default: system pool)")
	progress := fs.Bool("progress", false, "show progress: a bar on a terminal, a log line every 5 s otherwise")
	insecure := fs.Bool("insecure-skip-verify", false, "write without any checksum (the image is not verified)")
	insecureHTTP := fs.Bool("insecure-http", false, "allow plain http:// and oci+http:// URLs for --source and --bmap (unencrypted, unauthenticated)")
	var targetSize sizeValue
	fs.Var(&targetSize, "target-size", "use at most `SIZE` of the target, like 64M or 20G (default: its whole size; unlimited for a file)")
	bmap := fs.String("bmap", "", "bmaptool bmap `URL` or path: verify mapped ranges, skip unmapped ones (which must be zero in the image)")
	bmapChecksum := fs.String("bmap-checksum", "", "`ALGO:HEX` of the bmap file itself (a bmap 1.x has none inside)")
	fresh := fs.Bool("fresh-target", false, "the target is freshly wiped (reads as zeros): skip zero ranges entirely")
	noDirect := fs.Bool("no-direct", false, "do not use O_DIRECT writes (for benchmarking)")
	verbose := fs.BoolP("verbose", "v", false, "log debug details")
	// Hidden, for profiling the write path (docs/bench.md, "Where the time goes").
	traceFile := fs.String("debug-trace", "", "write a runtime/trace of the write to `FILE`")
	cpuFile := fs.String("debug-cpuprofile", "", "write a CPU profile of the write to `FILE`")
	_ = fs.MarkHidden("debug-trace")
	_ = fs.MarkHidden("debug-cpuprofile")
	fs.Usage = func() {
		fmt.Fprint(stderr, writeImageUsage+"\nFlags:\n")
		fs.PrintDefaults()
	}
	if code := parseFlags(fs, args, stderr, "booty write-image"); code >= 0 {
		return code
	}
	usageErr := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "booty write-image: "+format+"\n\n", a...)
		fs.Usage()
		return 2
	}
	switch {
	case fs.NArg() > 0:
		return usageErr("unexpected arguments %q", fs.Args())
	case *source == "":
		return usageErr("--source is required")
	case *target == "":
		return usageErr("--target is required")
	case *checksum == "" && *imageChecksum == "" && !*insecure && !strings.HasPrefix(*source, "oci"):
		return usageErr("give --checksum or --image-checksum (or --insecure-skip-verify to write an unverified image)")
	}

	level := slog.LevelInfo
	if *verbose {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	opts := image.Options{
		Source:          *source,
		Checksum:        *checksum,
		ImageChecksum:   *imageChecksum,
		AllowUnverified: *insecure,
		Target:          *target,
		TargetSize:      int64(targetSize),
		Bmap:            *bmap,
		BmapChecksum:    *bmapChecksum,
		FreshTarget:     *fresh,
		NoDirect:        *noDirect,
		OCIToken:        os.Getenv("BOOTY_OCI_TOKEN"),
		AllowHTTP:       *insecureHTTP,
		Log:             log,
	}
	if *insecureHTTP {
		log.Warn("plain HTTP allowed (--insecure-http): the image may travel unencrypted")
	}
	if *caCert != "" {
		pem, err := os.ReadFile(*caCert)
		if err != nil {
			fmt.Fprintf(stderr, "booty write-image: read CA certificate: %v\n", err)
			return 1
		}
		opts.CACert = pem
	}
	if *insecure && *checksum == "" && *imageChecksum == "" {
		log.Warn("writing an unverified image (--insecure-skip-verify)")
	}
	var bar *progressBar
	if *progress {
		bar = &progressBar{w: stderr, terminal: isTerminal(stderr), log: log, every: 5 * time.Second}
		opts.Progress = bar.update
	}

	// More Ps than cores keep the fetch from waiting behind the hash and
	// the decoder (image.Procs); GOMAXPROCS in the environment wins.
	defer image.UseProcs()()
	// The chunk buffers live outside the Go heap; keep the heap (decoder
	// state, source blocks) small so peak RSS stays bounded.
	if os.Getenv("GOMEMLIMIT") == "" {
		defer debug.SetMemoryLimit(debug.SetMemoryLimit(writeImageMemLimit))
	}
	stopProfile, err := startProfile(*traceFile, *cpuFile)
	if err != nil {
		fmt.Fprintf(stderr, "booty write-image: %v\n", err)
		return 1
	}
	res, err := image.Write(ctx, opts)
	if perr := stopProfile(); perr != nil {
		fmt.Fprintf(stderr, "booty write-image: %v\n", perr)
	}
	if err != nil {
		fmt.Fprintf(stderr, "booty write-image: %v\n", err)
		return 1
	}
	imgDigest := res.ImageDigest
	if imgDigest == "" {
		imgDigest = "(not computed: pass --image-checksum to verify the decompressed image)"
	}
	fmt.Fprintf(stdout, "wrote %s (%s, %s) to %s in %s, %s/s\n  served: %s\n  image:  %s\n",
		*source, res.Format, humanize.Bytes(res.ImageSize), *target, res.Duration.Round(time.Millisecond),
		humanize.Bytes(int64(float64(res.ImageSize)/max(res.Duration.Seconds(), 1e-3))), res.SourceDigest, imgDigest)
	return 0
}

// startProfile starts a runtime/trace into traceFile and a CPU profile
// into cpuFile, each when named, and returns what stops both and closes
// their files. On failure nothing is left running.
func startProfile(traceFile, cpuFile string) (stop func() error, err error) {
	var stops []func() error
	stop = func() error {
		var errs []error
		for i := len(stops) - 1; i >= 0; i-- {
			errs = append(errs, stops[i]())
		}
		return errors.Join(errs...)
	}
	start := func(name string, begin func(io.Writer) error, end func()) error {
		f, err := os.Create(name)
		if err != nil {
			return fmt.Errorf("create profile %s: %w", name, err)
		}
		if err := begin(f); err != nil {
			f.Close()
			return fmt.Errorf("start profile %s: %w", name, err)
		}
		stops = append(stops, func() error {
			end()
			if err := f.Close(); err != nil {
				return fmt.Errorf("close profile %s: %w", name, err)
			}
			return nil
		})
		return nil
	}
	if traceFile != "" {
		if err := start(traceFile, trace.Start, trace.Stop); err != nil {
			return nil, err
		}
	}
	if cpuFile != "" {
		if err := start(cpuFile, pprof.StartCPUProfile, pprof.StopCPUProfile); err != nil {
			return nil, errors.Join(err, stop())
		}
	}
	return stop, nil
}

// isTerminal reports whether w is a character device (a terminal).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// progressBar renders image.Progress: a redrawn line on a terminal, a log
// line at most every `every` otherwise.
type progressBar struct {
	w        io.Writer
	terminal bool
	log      *slog.Logger
	every    time.Duration
	last     time.Time
}

func (b *progressBar) update(p image.Progress) {
	if !b.terminal {
		if !p.Done && time.Since(b.last) < b.every {
			return
		}
		b.last = time.Now()
		b.log.Info("image progress", "done", humanize.Bytes(p.BytesDone), "total", humanize.Bytes(p.BytesTotal),
			"rate", humanize.Bytes(int64(p.Rate))+"/s", "eta", p.ETA.Round(time.Second), "finished", p.Done)
		return
	}
	line := fmt.Sprintf("%s  %s/s", humanize.Bytes(p.BytesDone), humanize.Bytes(int64(p.Rate)))
	if p.BytesTotal > 0 {
		frac := min(float64(p.BytesDone)/float64(p.BytesTotal), 1)
		const width = 30
		n := int(frac * width)
		line = fmt.Sprintf("%3.0f%% [%s%s] %s / %s  %s/s", frac*100, strings.Repeat("=", n), strings.Repeat(" ", width-n),
			humanize.Bytes(p.BytesDone), humanize.Bytes(p.BytesTotal), humanize.Bytes(int64(p.Rate)))
		if p.ETA > 0 {
			line += "  ETA " + p.ETA.Round(time.Second).String()
		}
	}
	fmt.Fprintf(b.w, "\r%-79s", line)
	if p.Done {
		fmt.Fprintln(b.w)
	}
}
