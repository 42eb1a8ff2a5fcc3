package main

import (
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/pflag"
)

var errHelp = errors.New("help requested")

// config is what the flags say.
type config struct {
	Bootyd   string        `json:"bootyd"`
	Nginx    string        `json:"nginx"`
	Out      string        `json:"-"`
	Dir      string        `json:"dir"`
	SizeMiB  int           `json:"size_mib"`
	Clients  int           `json:"clients"`
	RangeMiB int           `json:"range_mib"`
	Runs     int           `json:"runs"`
	Agents   int           `json:"agents"`
	Timeout  time.Duration `json:"timeout"`
	Quick    bool          `json:"quick"`
}

const usage = `Usage:
  go run ./hack/benchserve [flags]

Starts bootyd (plain HTTP and TLS) and nginx (plain HTTP and TLS, sendfile
on) on loopback, serving the same generated image, and runs --clients
concurrent clients downloading it in Range requests, then --agents
simulated agents writing it to files with booty's image pipeline; writes
OUT/serve.md and OUT/serve.json. See docs/bench.md.

Flags:
`

func parseFlags(args []string, stderr io.Writer) (config, error) {
	var c config
	fs := pflag.NewFlagSet("benchserve", pflag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.Bootyd, "bootyd", "out/bootyd", "bootyd `BINARY` to measure (make build)")
	fs.StringVar(&c.Nginx, "nginx", "nginx", "nginx `BINARY` to compare with (hack/deps.sh installs it)")
	fs.StringVar(&c.Out, "out", "out/bench", "report `DIR`")
	fs.StringVar(&c.Dir, "dir", "/var/tmp", "`DIR` on a real disk for the work directory (image, agents' target files)")
	fs.IntVar(&c.SizeMiB, "size-mib", 256, "size of the generated image in MiB, a multiple of 4")
	fs.IntVar(&c.Clients, "clients", 50, "concurrent Range clients")
	fs.IntVar(&c.RangeMiB, "range-mib", 8, "size of each client's Range requests in MiB")
	fs.IntVar(&c.Runs, "runs", 3, "rounds of the Range clients against every server; figures are medians")
	fs.IntVar(&c.Agents, "agents", 50, "simulated agents writing the image with pkg/image (0: skip)")
	fs.DurationVar(&c.Timeout, "timeout", 3*time.Minute, "bound of one run of clients or agents")
	fs.BoolVar(&c.Quick, "quick", false, "smoke test: 32 MiB image, 8 clients and agents, one run")
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
	if c.Quick {
		for name, set := range map[string]func(){
			"size-mib": func() { c.SizeMiB = 32 },
			"clients":  func() { c.Clients = 8 },
			"agents":   func() { c.Agents = 8 },
			"runs":     func() { c.Runs = 1 },
		} {
			if !fs.Changed(name) {
				set()
			}
		}
	}
	switch {
	case c.SizeMiB < 4 || c.SizeMiB%4 != 0:
		return c, fmt.Errorf("--size-mib %d: need a multiple of 4", c.SizeMiB)
	case c.Clients < 1:
		return c, fmt.Errorf("--clients %d: need at least 1", c.Clients)
	case c.RangeMiB < 1:
		return c, fmt.Errorf("--range-mib %d: need at least 1", c.RangeMiB)
	case c.Runs < 1:
		return c, fmt.Errorf("--runs %d: need at least 1", c.Runs)
	case c.Agents < 0:
		return c, fmt.Errorf("--agents %d: must not be negative", c.Agents)
	case c.Timeout <= 0:
		return c, fmt.Errorf("--timeout %s: must be positive", c.Timeout)
	}
	return c, nil
}
