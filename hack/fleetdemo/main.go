// Command fleetdemo is `make demo`: two QEMU machines behind test BMCs,
// one registered from the demo's QEMU pool by bootyd's Provisioner loop
// (--inventory), the other with bootyctl apply, which then gives both
// their image; powered on into PXE, inspected,
// provisioned with the Debian image and booted from their disks by
// bootyd's host reconciler, with a live `bootyctl machines watch`, in one
// command. See usageHead for what it does and shows.
//
// Run it as `make demo`, or after `make build initramfs debian-image`:
//
//	go run ./hack/fleetdemo --image-dir /var/cache/booty/debian
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/pflag"

	"github.com/booty-dev/booty/test/vm"
)

const usageHead = `fleetdemo provisions two QEMU machines through bootyd's host reconciler.

It enters a network namespace of its own (so it needs root) and there:
  1. starts bootyd (the real --bootyd binary) on 127.0.0.1:8080 with plain
     HTTP (--insecure-http, on bootyd and bootyctl alike), SQLite in the
     work directory, an operator token file, and --files serving the agent's
     kernel and initramfs and the Debian image; QEMU guests reach it as
     http://10.0.2.2:8080, the --public-url of its iPXE scripts;
  2. starts two test BMCs (pkg/bmc/bmcsim): an IPMI one (lanplus on a
     loopback UDP port) and a Redfish one (HTTPS with its own CA, which
     bootyd trusts through --bmc-ca-cert). Each powers a QEMU machine
     (test/bmcvm): OVMF (UEFI), a fresh empty disk, one NIC on QEMU user
     networking whose DHCP points iPXE at bootyd's /v1/boot.ipxe;
  3. brings the Redfish machine in from the demo's QEMU pool: pool.yaml, an
     inventory (boot MAC, BMC address, credentials from a password file,
     online) that bootyd's Provisioner loop reads (--inventory) and
     registers; then writes hosts.yaml, two BareMetalHost documents (the
     IPMI machine's boot MAC, BMC address and credentials from a password
     file; for both: online, the Debian image with its checksums, root
     device hint /dev/vda), and runs 'bootyctl apply -f hosts.yaml';
  4. runs 'bootyctl machines watch' while bootyd's reconciler powers each
     machine on into PXE, inspects it (the agent enrolls and reports its
     hardware), provisions it (the agent writes the image and kexecs into
     it; the installed OS prints its proof and powers off) and powers it on
     again from its disk;
  5. waits until, on both machines, the firmware booted the installed OS
     from the disk and it printed its proof on the serial console
     ("BOOTY-PROOF ... done", from hack/mkdebianimage.sh's
     booty-proof.service; the proof after the agent's kexec does not
     count), then prints a summary: every state of each machine with its
     time and duration (from bootyd's events), its boots as its BMC saw
     them, and the proof lines of its installed OS.

What you see: on a terminal, watch's live table (a progress bar for each
machine writing its image), then the summary. Piped, a line for each change
("watch  | ..."), each event bootyd records ("event  | ...") and each proof
line ("node-N | BOOTY-PROOF ..."), then the summary. Every machine's serial
console, bootyd's log, hosts.yaml and pool.yaml are kept in the work directory
(--work-dir, else a temporary one removed at exit; its path is printed);
--consoles shows the consoles too (piped output only).

The exit status is 0 only when both machines booted their installed OS
(both printed "BOOTY-PROOF done"); 1 otherwise (the summary says where each
machine got to); 2 for bad flags.

Needs: make build (out/bootyd, out/bootyctl), make initramfs (out/vmlinuz,
out/initramfs.img), make debian-image (the image in BOOTY_CACHE/debian),
qemu-system-x86_64 and OVMF. Under TCG (no working KVM) it takes 4 to 8
minutes on two cores; BOOTY_QEMU_ACCEL=auto|kvm|tcg chooses the accelerator.

Flags:
`

// Defaults that are not flags.
const (
	// port bootyd listens on, in the demo's own network namespace.
	port = 8080
	// guestHost is the address QEMU user networking gives the namespace's
	// loopback inside the guests.
	guestHost = "10.0.2.2"
)

// options is the parsed command line.
type options struct {
	bootyd, bootyctl string
	kernel, initrd   string
	imageDir         string
	timeout          time.Duration
	diskGiB          int
	memoryMiB        int
	workDir          string
	consoles         bool
	interval         time.Duration
	bootydArgs       []string
}

func newFlagSet(o *options) *pflag.FlagSet {
	fs := pflag.NewFlagSet("fleetdemo", pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	fs.SortFlags = false
	fs.StringVar(&o.bootyd, "bootyd", "out/bootyd", "the bootyd binary (make build)")
	fs.StringVar(&o.bootyctl, "bootyctl", "out/bootyctl", "the bootyctl binary (make build)")
	fs.StringVar(&o.kernel, "kernel", "out/vmlinuz", "the agent's kernel, served to iPXE (make initramfs)")
	fs.StringVar(&o.initrd, "initrd", "out/initramfs.img", "the agent's initramfs, served to iPXE (make initramfs)")
	fs.StringVar(&o.imageDir, "image-dir", defaultImageDir(), "the Debian image directory with "+imageZst+" and "+checksumsFile+" (make debian-image)")
	fs.DurationVar(&o.timeout, "timeout", 60*time.Minute, "how long to wait for both machines to boot their installed OS")
	fs.IntVar(&o.diskGiB, "disk-gib", 3, "size of each machine's fresh disk in GiB")
	fs.IntVar(&o.memoryMiB, "memory-mib", 1024, "memory of each machine in MiB")
	fs.StringVar(&o.workDir, "work-dir", "", "keep bootyd's state, hosts.yaml, disks and consoles in this directory instead of a temporary one removed at exit")
	fs.BoolVar(&o.consoles, "consoles", false, "also show both serial consoles, prefixed with the machine's name (only when stdout is not a terminal)")
	fs.DurationVar(&o.interval, "interval", time.Second, "refresh interval of bootyctl machines watch")
	fs.StringArrayVar(&o.bootydArgs, "bootyd-arg", nil, "one more argument for bootyd (repeatable), e.g. --bootyd-arg=--log-level=debug")
	return fs
}

// defaultImageDir is where make debian-image caches the image:
// $BOOTY_CACHE/debian, default /var/cache/booty/debian.
func defaultImageDir() string {
	if c := os.Getenv("BOOTY_CACHE"); c != "" {
		return filepath.Join(c, "debian")
	}
	return "/var/cache/booty/debian"
}

func printUsage(w io.Writer) {
	var o options
	fs := newFlagSet(&o)
	fmt.Fprint(w, usageHead)
	fs.SetOutput(w)
	fs.PrintDefaults()
}

// parseFlags parses args; it returns pflag.ErrHelp for -h/--help and an
// error naming the flag for a bad value.
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
	case o.diskGiB < 2:
		return o, fmt.Errorf("--disk-gib %d: the Debian image needs at least 2", o.diskGiB)
	case o.memoryMiB < 512:
		return o, fmt.Errorf("--memory-mib %d: the agent and Debian need at least 512", o.memoryMiB)
	case o.interval < 100*time.Millisecond:
		return o, fmt.Errorf("--interval %s: bootyctl machines watch wants 100ms or more", o.interval)
	}
	return o, nil
}

// checkInputs names the first input file that is missing and the make
// target that builds it.
func checkInputs(o options) error {
	for _, f := range []struct{ path, make string }{
		{o.bootyd, "make build"},
		{o.bootyctl, "make build"},
		{o.kernel, "make initramfs"},
		{o.initrd, "make initramfs"},
		{filepath.Join(o.imageDir, imageZst), "make debian-image"},
		{filepath.Join(o.imageDir, checksumsFile), "make debian-image"},
	} {
		if _, err := os.Stat(f.path); err != nil {
			return fmt.Errorf("%w (run '%s')", err, f.make)
		}
	}
	return nil
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
		fmt.Fprintf(stderr, "fleetdemo: %v\nRun 'go run ./hack/fleetdemo --help' for usage.\n", err)
		return 2
	}
	if err := checkInputs(o); err != nil {
		fmt.Fprintf(stderr, "fleetdemo: %v\n", err)
		return 1
	}
	vm.EnterNetNS()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return fleet(ctx, o, os.Stdout, stderr)
}
