// Command benchboot times how a machine boots into booty and reaches its
// image: it boots the demo (the kernel and initramfs of `make initramfs`,
// the image of `make demo-image`, bootyd in-process as in the e2e tests,
// inside a network namespace of its own) --runs times under TCG, and under
// KVM when test/vm's probe finds it working, and reads the milestones off
// the serial console: kernel start → agent (PID 1) start → modules loaded
// (coldplug done) → network up → config loaded → first image byte →
// handoff. It writes out/bench/boot.md and out/bench/boot.json with the
// medians and every run, and prints the target (PID 1 start →
// first image byte under 1.5 s under TCG) with PASS or FAIL. Run it as root
// through `make bench-boot`, or
//
//	go run ./hack/benchboot [--runs 5] [--kernel out/vmlinuz] [--initrd out/initramfs.img] [--image-dir out/demo]
//
// How the console is timed: the kernel's lines carry printk times
// (printk.time=1 is on the command line; "quiet" must not be, or the
// kernel's "Run /init as init process" is not printed), the agent's lines
// carry the guest's wall clock (slog's time=). Both clocks run at the
// host's rate, but their offset is known only to the second (the RTC), so
// each line is also stamped when it arrives on the host: the smallest
// (arrival − printk time) over the kernel lines places the kernel's zero on
// the host clock, the smallest (arrival − wall time) over the agent lines
// places the agent's clock, and every milestone is then put on the
// kernel's clock. The error is the console's delivery delay of the
// fastest line of each kind, a millisecond or less.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/pflag"

	"github.com/booty-dev/booty/test/harness"
	"github.com/booty-dev/booty/test/vm"
)

// options is the parsed command line.
type options struct {
	Kernel   string        `json:"kernel"`
	Initrd   string        `json:"initrd"`
	ImageDir string        `json:"image_dir"`
	Out      string        `json:"-"`
	Runs     int           `json:"runs"`
	Accels   []string      `json:"accels"`
	Append   string        `json:"append"`
	Memory   int           `json:"memory_mib"`
	Timeout  time.Duration `json:"timeout"`
	TargetMS int           `json:"target_ms"`
}

const usageHead = `benchboot boots the demo machine --runs times and reports, from the serial
console, how long each phase of the boot takes (medians and every run):
kernel start, agent (PID 1) start, modules loaded, network up, config
loaded, first image byte, handoff. It needs root (a network namespace),
make initramfs and make demo-image. Writes OUT/boot.md and OUT/boot.json.

Flags:
`

func newFlagSet(o *options) *pflag.FlagSet {
	fs := pflag.NewFlagSet("benchboot", pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	fs.SortFlags = false
	fs.StringVar(&o.Kernel, "kernel", "out/vmlinuz", "kernel to boot (make initramfs)")
	fs.StringVar(&o.Initrd, "initrd", "out/initramfs.img", "initramfs with booty as /init (make initramfs)")
	fs.StringVar(&o.ImageDir, "image-dir", "out/demo", "demo image directory (make demo-image)")
	fs.StringVar(&o.Out, "out", "out/bench", "report directory")
	fs.IntVar(&o.Runs, "runs", 5, "boots per accelerator; figures are medians")
	fs.StringSliceVar(&o.Accels, "accels", []string{"tcg", "kvm"}, "accelerators to measure; kvm only when test/vm's probe finds it working")
	fs.StringVar(&o.Append, "append", "", "more kernel parameters (not quiet: it hides the kernel's PID 1 line)")
	fs.IntVar(&o.Memory, "memory-mib", vm.DefaultMemory, "memory of the machine in MiB")
	fs.DurationVar(&o.Timeout, "timeout", 5*time.Minute, "bound of one boot, from QEMU start to the outcome")
	fs.IntVar(&o.TargetMS, "target-ms", 1500, "target of PID 1 start → first image byte under TCG, in ms")
	return fs
}

func parseFlags(args []string) (options, error) {
	var o options
	fs := newFlagSet(&o)
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	switch {
	case o.Runs < 1:
		return o, fmt.Errorf("--runs %d: need at least 1", o.Runs)
	case o.Timeout <= 0:
		return o, fmt.Errorf("--timeout %s: must be positive", o.Timeout)
	case o.Memory < 256:
		return o, fmt.Errorf("--memory-mib %d: booty needs at least 256", o.Memory)
	}
	for _, a := range o.Accels {
		if a != "tcg" && a != "kvm" {
			return o, fmt.Errorf("--accels %q: want tcg and/or kvm", strings.Join(o.Accels, ","))
		}
	}
	for _, p := range strings.Fields(o.Append) {
		if p == "quiet" || strings.HasPrefix(p, "loglevel=") {
			return o, fmt.Errorf("--append %q: %s hides the kernel's \"Run /init as init process\" line the bench times PID 1 start by", o.Append, p)
		}
	}
	return o, nil
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run checks flags and inputs, re-executes itself in a new network
// namespace (vm.EnterNetNS exits with the namespaced run's status) and
// there runs the bench. It returns 0 when the report was written (target
// met or not), 1 when a boot failed or the bench could not run, 2 for bad
// flags.
func run(args []string, stdout, stderr io.Writer) int {
	o, err := parseFlags(args)
	if errors.Is(err, pflag.ErrHelp) {
		fs := newFlagSet(&o)
		fmt.Fprint(stdout, usageHead)
		fs.SetOutput(stdout)
		fs.PrintDefaults()
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "benchboot: %v\nRun 'go run ./hack/benchboot --help' for usage.\n", err)
		return 2
	}
	if err := harness.CheckDemoInputs(o.Kernel, o.Initrd, o.ImageDir); err != nil {
		fmt.Fprintf(stderr, "benchboot: %v\n", err)
		return 1
	}
	vm.EnterNetNS()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep, err := bench(ctx, o, stderr)
	if rep != nil {
		md, js, werr := rep.write(o.Out)
		if werr != nil {
			fmt.Fprintf(stderr, "benchboot: %v\n", werr)
			return 1
		}
		for _, t := range rep.Targets {
			fmt.Fprintf(stdout, "benchboot: %s\n", t.line())
		}
		fmt.Fprintf(stdout, "benchboot: wrote %s and %s\n", md, js)
	}
	if err != nil {
		fmt.Fprintf(stderr, "benchboot: %v\n", err)
		return 1
	}
	return 0
}
