// Package vm starts QEMU virtual machines for booty's end-to-end tests and
// demo: it builds the QEMU command line from a Config, captures the serial
// console line by line, lets a caller wait for a console line with Expect,
// and kills QEMU on timeout. StartT wires all of this into a test: it logs
// the command line that reproduces the test and keeps the console log as an
// artifact. EnterNetNS moves the whole test process into a network namespace
// of its own, so that a guest on QEMU user networking reaches only the
// servers of the test (the host's loopback is 10.0.2.2 in the guest).
//
// The package is modelled on github.com/hugelgupf/vmtest's qemu package.
package vm

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"time"
)

// Defaults used when the matching Config field is empty.
const (
	DefaultQEMU             = "qemu-system-x86_64"
	DefaultMachine          = "q35"
	DefaultMemory           = 1024 // MiB
	DefaultCPUs             = 1
	DefaultMAC              = "52:54:00:12:34:56"
	DefaultTimeout          = 10 * time.Minute
	DefaultKVMDevice        = "/dev/kvm"
	DefaultOVMFCode         = "/usr/share/OVMF/OVMF_CODE_4M.fd"
	DefaultOVMFVarsTemplate = "/usr/share/OVMF/OVMF_VARS_4M.fd"
)

// Accel is the QEMU accelerator a VM runs with.
type Accel string

// Accelerators. AccelAuto lets BOOTY_QEMU_ACCEL decide and, when that is
// unset or "auto", boots a tiny guest under KVM (ProbeKVMGuest) and picks
// AccelKVM only when it ran, AccelTCG otherwise.
const (
	AccelAuto Accel = ""
	AccelKVM  Accel = "kvm"
	AccelTCG  Accel = "tcg"
)

// Disk interfaces understood by Disk.Interface.
const (
	IfaceVirtio = "virtio" // virtio-blk-pci, /dev/vdX (the default)
	IfaceNVMe   = "nvme"   // nvme controller, /dev/nvmeXn1; needs a serial (one is made up)
	IfaceIDE    = "ide"    // AHCI (q35) or IDE (pc) disk or CD-ROM, /dev/sdX or /dev/srX
	IfaceSCSI   = "scsi"   // scsi-hd/scsi-cd on one virtio-scsi-pci controller
	IfaceUSB    = "usb"    // usb-storage on one qemu-xhci controller, removable
)

// ErrBadConfig is wrapped by every error about an invalid Config.
var ErrBadConfig = errors.New("invalid vm config")

// Disk is one block device given to the guest.
type Disk struct {
	// Path is the image file on the host.
	Path string
	// Format is "raw" (the default) or "qcow2".
	Format string
	// Interface is one of the Iface constants; empty means virtio, or ide
	// for a CD-ROM.
	Interface string
	// Serial is the disk's serial number as the guest sees it (for root
	// device hints). Empty means none, except for nvme, which needs one.
	Serial string
	// BlkDebugConfig is the path of a QEMU blkdebug config file. When set,
	// the image is opened through the blkdebug driver with that config, to
	// inject I/O errors (see QEMU's docs/devel/blkdebug.txt).
	BlkDebugConfig string
	// ReadOnly opens the image read-only; the guest sees a read-only disk.
	ReadOnly bool
	// CDROM attaches the image as a CD-ROM (read-only, media=cdrom).
	CDROM bool
	// BootIndex, when above zero, is the device's place in the firmware's
	// boot order (QEMU bootindex); zero leaves the order to the firmware.
	BootIndex int
}

// Config says how to start one VM. The zero value of every field has a
// sensible default, documented on the field.
type Config struct {
	// QEMU is the QEMU binary; default DefaultQEMU, looked up in PATH.
	QEMU string
	// Machine is the -machine type; default DefaultMachine (q35).
	Machine string

	// Kernel, Initrd and Append are passed as -kernel, -initrd, -append.
	// Without Kernel the firmware boots from the disks.
	// "console=ttyS0,115200" and "panic=-1" are put before Append unless
	// Append already sets console= or panic=, so the kernel's output reaches
	// the captured console and a panic ends QEMU (see AllowReboot).
	Kernel string
	Initrd string
	Append string

	// Memory in MiB; default DefaultMemory.
	Memory int
	// CPUs; default DefaultCPUs.
	CPUs int

	// Disks in order (virtio disks appear as vda, vdb, ... in this order).
	Disks []Disk

	// UEFI boots OVMF instead of SeaBIOS: OVMFCode read-only as pflash unit
	// 0 and a writable variable store as unit 1 (see OVMFVars).
	UEFI bool
	// OVMFCode is the firmware code; default DefaultOVMFCode.
	OVMFCode string
	// OVMFVarsTemplate is copied to make a fresh variable store; default
	// DefaultOVMFVarsTemplate.
	OVMFVarsTemplate string
	// OVMFVars is the writable variable store. Empty means a fresh copy of
	// the template in StateDir. A path that does not exist yet gets a fresh
	// copy of the template; an existing file is used as it is, so two boots
	// given the same OVMFVars share boot entries. VM.VarsPath tells which
	// file was used.
	OVMFVars string
	// StateDir holds files Start makes (the OVMF variable store). Empty
	// means a new directory under os.TempDir that Start does not remove;
	// StartT uses a test temp dir.
	StateDir string

	// Net gives the guest one virtio-net NIC on QEMU user networking
	// (slirp): the guest gets 10.0.2.15 by DHCP, and 10.0.2.2 is the loopback
	// of the network namespace QEMU runs in.
	Net bool
	// MAC of the NIC; default DefaultMAC.
	MAC string
	// NetOptions are more comma-separated -nic user options, such as
	// "tftp=/srv/tftp,bootfile=ipxe.efi".
	NetOptions string

	// Accel chooses the accelerator; AccelAuto follows BOOTY_QEMU_ACCEL
	// and otherwise probes KVM (see ChooseAccel).
	Accel Accel
	// KVMDevice is the device the KVM probe opens; default DefaultKVMDevice.
	KVMDevice string

	// AllowReboot lets a guest reboot restart the VM; by default QEMU runs
	// with -no-reboot and exits when the guest reboots, panics or powers
	// off.
	AllowReboot bool

	// ExtraArgs are appended to the QEMU command line as they are.
	ExtraArgs []string

	// Timeout bounds the VM's whole life: QEMU is killed when it is over
	// and Wait and Expect return ErrTimeout. Default DefaultTimeout.
	Timeout time.Duration

	// Console, when set, receives every console line (with its newline)
	// as it arrives. QEMU's own stderr lines go there too, prefixed "qemu: ".
	Console io.Writer
	// ConsoleLog, when set, is a file the console is written to as it
	// arrives (created or truncated), so it survives a killed test.
	ConsoleLog string

	// Logger gets the VM's own messages (accelerator, start, exit);
	// default slog.Default().
	Logger *slog.Logger
	// NoRNG leaves out the virtio-rng device that is attached by default.
	NoRNG bool
	// CPU is the -cpu model; empty means the accelerator's (host under
	// KVM, max under TCG, both with RDRAND). "qemu64" is a CPU without
	// RDRAND: with NoRNG, a guest without any hardware RNG.
	CPU string
}

// withDefaults returns a copy of c with empty fields set to their defaults.
func (c Config) withDefaults() Config {
	if c.QEMU == "" {
		c.QEMU = DefaultQEMU
	}
	if c.Machine == "" {
		c.Machine = DefaultMachine
	}
	if c.Memory == 0 {
		c.Memory = DefaultMemory
	}
	if c.CPUs == 0 {
		c.CPUs = DefaultCPUs
	}
	if c.MAC == "" {
		c.MAC = DefaultMAC
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.KVMDevice == "" {
		c.KVMDevice = DefaultKVMDevice
	}
	if c.OVMFCode == "" {
		c.OVMFCode = DefaultOVMFCode
	}
	if c.OVMFVarsTemplate == "" {
		c.OVMFVarsTemplate = DefaultOVMFVarsTemplate
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// kernelAppend returns the kernel command line: the console and panic
// defaults, then c.Append.
func (c Config) kernelAppend() string {
	var parts []string
	if !hasParam(c.Append, "console") {
		parts = append(parts, "console=ttyS0,115200")
	}
	if !hasParam(c.Append, "panic") {
		parts = append(parts, "panic=-1")
	}
	if c.Append != "" {
		parts = append(parts, c.Append)
	}
	return strings.Join(parts, " ")
}

func hasParam(cmdline, name string) bool {
	for _, f := range strings.Fields(cmdline) {
		if f == name || strings.HasPrefix(f, name+"=") {
			return true
		}
	}
	return false
}

// args builds the QEMU command line (binary first) for a config that has
// its defaults set, with the accelerator already chosen (AccelKVM or
// AccelTCG) and, for UEFI, the variable store to use. It checks the config
// but touches no file.
func (c Config) args(accel Accel, varsPath string) ([]string, error) {
	if c.Memory < 0 || c.CPUs < 0 {
		return nil, fmt.Errorf("%w: memory %d MiB, cpus %d", ErrBadConfig, c.Memory, c.CPUs)
	}
	if c.Kernel == "" && (c.Initrd != "" || c.Append != "") {
		return nil, fmt.Errorf("%w: initrd and append need a kernel", ErrBadConfig)
	}
	a := []string{c.QEMU,
		"-machine", c.Machine,
		"-m", strconv.Itoa(c.Memory),
		"-smp", strconv.Itoa(c.CPUs),
	}
	aa, err := AccelArgs(accel)
	if err != nil {
		return nil, err
	}
	if c.CPU != "" {
		if strings.ContainsAny(c.CPU, " \t\n") {
			return nil, fmt.Errorf("%w: cpu model %q has whitespace", ErrBadConfig, c.CPU)
		}
		for i := range aa {
			if aa[i] == "-cpu" && i+1 < len(aa) {
				aa[i+1] = c.CPU
			}
		}
	}
	a = append(a, aa...)
	a = append(a,
		"-nodefaults",
		"-display", "none",
		"-monitor", "none",
		"-serial", "stdio",
	)
	if !c.AllowReboot {
		a = append(a, "-no-reboot")
	}
	if !c.NoRNG {
		// A hardware RNG, as servers have (RDRAND, TPM): without one a guest
		// under TCG can block for minutes in getrandom() before its first
		// DHCP request.
		a = append(a, "-device", "virtio-rng-pci")
	}
	if c.UEFI {
		if varsPath == "" {
			return nil, fmt.Errorf("%w: uefi needs a variable store", ErrBadConfig)
		}
		a = append(a,
			"-drive", "if=pflash,format=raw,unit=0,readonly=on,file="+escapeOpt(c.OVMFCode),
			"-drive", "if=pflash,format=raw,unit=1,file="+escapeOpt(varsPath),
		)
	}
	if c.Kernel != "" {
		a = append(a, "-kernel", c.Kernel, "-append", c.kernelAppend())
		if c.Initrd != "" {
			a = append(a, "-initrd", c.Initrd)
		}
	}
	diskArgs, err := c.diskArgs()
	if err != nil {
		return nil, err
	}
	a = append(a, diskArgs...)
	if c.Net {
		nic := "user,model=virtio-net-pci,mac=" + c.MAC
		if c.NetOptions != "" {
			nic += "," + c.NetOptions
		}
		a = append(a, "-nic", nic)
	}
	a = append(a, c.ExtraArgs...)
	return a, nil
}

// diskArgs returns the -drive and -device arguments of all disks, with the
// controllers that scsi and usb disks need added once, before their first
// disk.
func (c Config) diskArgs() ([]string, error) {
	var a []string
	var haveSCSI, haveUSB bool
	var nIDE int
	for i, d := range c.Disks {
		if d.Path == "" {
			return nil, fmt.Errorf("%w: disk %d has no path", ErrBadConfig, i)
		}
		format := d.Format
		if format == "" {
			format = "raw"
		}
		if format != "raw" && format != "qcow2" {
			return nil, fmt.Errorf("%w: disk %d (%s): format %q, want raw or qcow2", ErrBadConfig, i, d.Path, format)
		}
		iface := d.Interface
		if iface == "" {
			iface = IfaceVirtio
			if d.CDROM {
				iface = IfaceIDE
			}
		}
		id := fmt.Sprintf("disk%d", i)

		drive := []string{"if=none", "id=" + id}
		if d.BlkDebugConfig != "" {
			// The json-free dotted form: format driver over blkdebug over
			// the file, so no path is parsed out of a "blkdebug:A:B" string.
			drive = append(drive,
				"driver="+format,
				"file.driver=blkdebug",
				"file.config="+escapeOpt(d.BlkDebugConfig),
				"file.image.driver=file",
				"file.image.filename="+escapeOpt(d.Path),
			)
		} else {
			drive = append(drive, "format="+format, "file="+escapeOpt(d.Path))
		}
		switch {
		case d.CDROM:
			drive = append(drive, "media=cdrom", "readonly=on")
		case d.ReadOnly:
			drive = append(drive, "readonly=on")
		default:
			drive = append(drive, "discard=unmap")
		}

		serial := d.Serial
		if iface == IfaceNVMe && serial == "" {
			serial = fmt.Sprintf("booty-nvme-%d", i)
		}
		var dev string
		switch iface {
		case IfaceVirtio:
			if d.CDROM {
				return nil, fmt.Errorf("%w: disk %d (%s): a cdrom cannot be virtio", ErrBadConfig, i, d.Path)
			}
			dev = "virtio-blk-pci,drive=" + id
		case IfaceNVMe:
			if d.CDROM {
				return nil, fmt.Errorf("%w: disk %d (%s): a cdrom cannot be nvme", ErrBadConfig, i, d.Path)
			}
			dev = "nvme,drive=" + id
		case IfaceIDE:
			if d.ReadOnly && !d.CDROM {
				return nil, fmt.Errorf("%w: disk %d (%s): qemu cannot make a read-only ide disk", ErrBadConfig, i, d.Path)
			}
			bus, err := c.ideSlot(nIDE)
			if err != nil {
				return nil, fmt.Errorf("%w: disk %d (%s): %w", ErrBadConfig, i, d.Path, err)
			}
			nIDE++
			kind := "ide-hd"
			if d.CDROM {
				kind = "ide-cd"
			}
			dev = kind + "," + bus + ",drive=" + id
		case IfaceSCSI:
			if !haveSCSI {
				a = append(a, "-device", "virtio-scsi-pci,id=scsi0")
				haveSCSI = true
			}
			dev = "scsi-hd,bus=scsi0.0,drive=" + id
			if d.CDROM {
				dev = "scsi-cd,bus=scsi0.0,drive=" + id
			}
		case IfaceUSB:
			if !haveUSB {
				a = append(a, "-device", "qemu-xhci,id=xhci")
				haveUSB = true
			}
			dev = "usb-storage,bus=xhci.0,removable=on,drive=" + id
		default:
			return nil, fmt.Errorf("%w: disk %d (%s): interface %q, want virtio, nvme, ide, scsi or usb", ErrBadConfig, i, d.Path, iface)
		}
		if serial != "" {
			if strings.ContainsAny(serial, ", ") {
				return nil, fmt.Errorf("%w: disk %d (%s): serial %q has a comma or space", ErrBadConfig, i, d.Path, serial)
			}
			dev += ",serial=" + serial
		}
		if d.BootIndex > 0 {
			dev += fmt.Sprintf(",bootindex=%d", d.BootIndex)
		}
		a = append(a, "-drive", strings.Join(drive, ","), "-device", dev)
	}
	return a, nil
}

// ideSlot returns the bus (and unit) option of the n-th IDE device: q35's
// AHCI controller has six ports of one unit each (ide.0 to ide.5), the pc
// machine two IDE buses of two units each.
func (c Config) ideSlot(n int) (string, error) {
	if c.Machine == "pc" || strings.HasPrefix(c.Machine, "pc-i440fx") {
		if n >= 4 {
			return "", fmt.Errorf("more than 4 ide devices on machine %s", c.Machine)
		}
		return fmt.Sprintf("bus=ide.%d,unit=%d", n/2, n%2), nil
	}
	if n >= 6 {
		return "", fmt.Errorf("more than 6 ide devices on machine %s", c.Machine)
	}
	return fmt.Sprintf("bus=ide.%d", n), nil
}

// escapeOpt escapes a value for a QEMU option string, where a comma is
// written as two.
func escapeOpt(s string) string {
	return strings.ReplaceAll(s, ",", ",,")
}

// shellQuote joins args into one line a POSIX shell runs as the same
// command: every argument with a character outside a safe set is put in
// single quotes.
func shellQuote(args []string) string {
	out := make([]string, len(args))
	for i, s := range args {
		if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./=:,+@%") == "" {
			out[i] = s
			continue
		}
		out[i] = "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
	}
	return strings.Join(out, " ")
}
