// Command demo provisions one QEMU machine end to end and shows what an
// operator sees: it runs bootyd in-process inside a network namespace of
// its own, boots the booty kernel and initramfs in QEMU with a fresh disk,
// streams the serial console and bootyd's account of every step, and ends
// with a summary that checks the disk holds exactly the demo image.
//
// Run it as `make demo-one` (`make demo` is the fleet demo, hack/fleetdemo), or after `make initramfs demo-image`:
//
//	go run ./hack/demo --kernel out/vmlinuz --initrd out/initramfs.img --image-dir out/demo
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

const usageHead = `demo provisions one QEMU machine with booty and shows every step.

It enters a network namespace of its own (so it needs root), starts bootyd
in-process on 127.0.0.1 serving the demo image directory, gives a machine
with a fresh, empty 256 MiB disk a config that writes demo.img.zst to
/dev/vda (checksums from SHA256SUMS) and powers off, then boots the booty
kernel and initramfs in QEMU. The guest finds bootyd at 10.0.2.2 through
QEMU user networking, loads its config by MAC, and reports each step.

What you see:
  console| ...   the machine's serial console (hide it with --quiet-console)
  bootyd | ...   bootyd's account: each step started/succeeded/failed and
                 write progress; with --quiet-console also the agent's log
                 lines it receives (otherwise they repeat the console)
  summary        outcome, every step with its duration, bytes written, and
                 whether the disk now holds exactly demo.img (compared byte
                 by byte)

The exit status is 0 only when the machine reported "provisioned", powered
off, and its disk holds exactly the image; 1 otherwise; 2 for bad flags.

Needs: make initramfs (out/vmlinuz, out/initramfs.img), make demo-image
(out/demo), qemu-system-x86_64. KVM is used when a probe guest runs under
it, otherwise QEMU emulates (TCG, about a minute); BOOTY_QEMU_ACCEL=auto|kvm|tcg
overrides the choice.

Flags:
`

// options is the parsed command line.
type options struct {
	kernel, initrd, imageDir string
	timeout                  time.Duration
	quietConsole             bool
	appendArgs               string
	mac                      string
	diskMiB                  int
	memoryMiB                int
	workDir                  string
}

func newFlagSet(o *options) *pflag.FlagSet {
	fs := pflag.NewFlagSet("demo", pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	fs.SortFlags = false
	fs.StringVar(&o.kernel, "kernel", "out/vmlinuz", "kernel to boot (make initramfs)")
	fs.StringVar(&o.initrd, "initrd", "out/initramfs.img", "initramfs with booty as /init (make initramfs)")
	fs.StringVar(&o.imageDir, "image-dir", "out/demo", "demo image directory with demo.img, demo.img.zst, SHA256SUMS (make demo-image)")
	fs.DurationVar(&o.timeout, "timeout", 10*time.Minute, "how long to wait for the machine's outcome")
	fs.BoolVar(&o.quietConsole, "quiet-console", false, "do not show the serial console (it is still quoted when something fails)")
	fs.StringVar(&o.appendArgs, "append", "quiet", "extra kernel parameters; --append='' shows the whole kernel log")
	fs.StringVar(&o.mac, "mac", harness.DefaultMAC, "MAC address of the machine's NIC")
	fs.IntVar(&o.diskMiB, "disk-mib", harness.DefaultDiskSize>>20, "size of the machine's disk in MiB")
	fs.IntVar(&o.memoryMiB, "memory-mib", vm.DefaultMemory, "memory of the machine in MiB")
	fs.StringVar(&o.workDir, "work-dir", "", "keep the lab (configs, state, disk, console.log) in this directory instead of a temporary one removed at exit")
	return fs
}

func printUsage(w io.Writer) {
	var o options
	fs := newFlagSet(&o)
	fmt.Fprint(w, usageHead)
	fs.SetOutput(w)
	fs.PrintDefaults()
}

// parseFlags parses args; it returns pflag.ErrHelp for -h/--help.
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
	case o.timeout <= 0:
		return o, fmt.Errorf("--timeout %s: must be positive", o.timeout)
	case o.diskMiB < 64:
		return o, fmt.Errorf("--disk-mib %d: the demo image needs at least 64", o.diskMiB)
	case o.memoryMiB < 256:
		return o, fmt.Errorf("--memory-mib %d: booty needs at least 256", o.memoryMiB)
	}
	return o, nil
}

// checkInputs names the first input file that is missing and how to make it.
func checkInputs(o options) error {
	return harness.CheckDemoInputs(o.kernel, o.initrd, o.imageDir)
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run checks the flags and inputs, re-executes itself in a new network
// namespace (vm.EnterNetNS, which exits with the namespaced run's status),
// and there runs the demo. It returns the exit status.
func run(args []string, stdout, stderr io.Writer) int {
	o, err := parseFlags(args)
	if errors.Is(err, pflag.ErrHelp) {
		printUsage(stdout)
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "demo: %v\nRun 'go run ./hack/demo --help' for usage.\n", err)
		return 2
	}
	if err := checkInputs(o); err != nil {
		fmt.Fprintf(stderr, "demo: %v\n", err)
		return 1
	}
	vm.EnterNetNS()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return demo(ctx, o, stdout, stderr)
}
