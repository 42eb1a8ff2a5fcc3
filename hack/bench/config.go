package main

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/pflag"
)

var errHelp = errors.New("help requested")

// config is what the flags say.
type config struct {
	Booty         string // booty binary
	Images        string // directory of images; empty: build or find them with Script
	Script        string // hack/mkbenchimage.sh
	Out           string // report directory
	TargetDir     string // where the loop devices' backing files go
	Runs          int
	Quick         bool
	DropCaches    bool
	Floors        bool
	BootyChecksum string // "both", "source", "image"
	Only          []string
	Render        string // results.json to render again into Out, running nothing
}

const usage = `Usage:
  go run ./hack/bench [flags]

Times booty write-image against curl | zstd -dc | dd oflag=direct and
bmaptool copy, writing images served from 127.0.0.1 to a loop device with
direct I/O, and writes REPORT_DIR/report.md and REPORT_DIR/results.json.
Needs root (loop devices, drop_caches). See docs/bench.md.

Flags:
`

func parseFlags(args []string, stderr io.Writer) (config, error) {
	var c config
	fs := pflag.NewFlagSet("bench", pflag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.Booty, "booty", "out/booty", "booty `BINARY` to time")
	fs.StringVar(&c.Images, "images", "", "`DIR` with the images of hack/mkbenchimage.sh (default: run the script, which builds or reuses its cache)")
	fs.StringVar(&c.Script, "script", "hack/mkbenchimage.sh", "image builder `SCRIPT`, used when --images is not given")
	fs.StringVar(&c.Out, "out", "out/bench", "report `DIR`")
	fs.StringVar(&c.TargetDir, "target-dir", "/var/tmp", "`DIR` on a real disk for the loop devices' sparse backing files")
	fs.IntVar(&c.Runs, "runs", 3, "runs of each contender; figures are medians (--quick: 1)")
	fs.BoolVar(&c.Quick, "quick", false, "smoke test: 64 MiB images, one run")
	fs.BoolVar(&c.DropCaches, "drop-caches", false, "also sync and drop the whole page cache before every run (slow on a busy machine: the sync waits for everyone's dirty data)")
	fs.BoolVar(&c.Floors, "floors", true, "also time the decoders alone and the raw writes")
	fs.StringVar(&c.BootyChecksum, "booty-checksum", "source", "checksums booty verifies: `source` (the served file, as an operator gives it), image, or both")
	fs.StringSliceVar(&c.Only, "only", nil, "run only the `IMAGES` named (sparse, dense)")
	fs.StringVar(&c.Render, "render", "", "only render `RESULTS_JSON` of an earlier run into --out (report.md, results.json), running nothing")
	fs.Usage = func() {
		fmt.Fprint(stderr, usage)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return c, errHelp
		}
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if c.Quick && !fs.Changed("runs") {
		c.Runs = 1
	}
	if c.Runs < 1 {
		return c, fmt.Errorf("--runs %d: need at least 1", c.Runs)
	}
	switch c.BootyChecksum {
	case "both", "source", "image":
	default:
		return c, fmt.Errorf("--booty-checksum %q: want both, source or image", c.BootyChecksum)
	}
	for _, o := range c.Only {
		if o != "sparse" && o != "dense" {
			return c, fmt.Errorf("--only %q: want sparse or dense", strings.Join(c.Only, ","))
		}
	}
	return c, nil
}
