package initsys

import (
	"golang.org/x/sys/unix"
)

const syscallNoCTTY = unix.O_NOCTTY

var errBusy = unix.EBUSY

// DefaultMounts returns the early mount table of the agent, in order.
func DefaultMounts() []Mount {
	const nodev = unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC
	return []Mount{
		{Source: "proc", Target: "/proc", FSType: "proc", Flags: nodev, Mode: 0o555, Fatal: true,
			Reason: "process and kernel state: cmdline, modules, mountinfo"},
		{Source: "sysfs", Target: "/sys", FSType: "sysfs", Flags: nodev, Mode: 0o555, Fatal: true,
			Reason: "devices, modaliases and block devices for coldplug and disk discovery"},
		{Source: "devtmpfs", Target: "/dev", FSType: "devtmpfs", Flags: unix.MS_NOSUID, Data: "mode=0755", Mode: 0o755, Fatal: true,
			Reason: "device nodes created by the kernel: disks, consoles, null"},
		{Source: "devpts", Target: "/dev/pts", FSType: "devpts", Flags: unix.MS_NOSUID | unix.MS_NOEXEC,
			Data: "newinstance,ptmxmode=0666,mode=0620", Mode: 0o755,
			Reason: "pseudo terminals; only commands that want a tty need it"},
		{Source: "tmpfs", Target: "/dev/shm", FSType: "tmpfs", Flags: unix.MS_NOSUID | unix.MS_NODEV, Data: "mode=1777", Mode: 0o1777,
			Reason: "POSIX shared memory; some tools fail without it"},
		{Source: "tmpfs", Target: "/run", FSType: "tmpfs", Flags: unix.MS_NOSUID | unix.MS_NODEV, Data: "mode=0755", Mode: 0o755,
			Reason: "runtime state (resolv.conf, leases) off the initramfs"},
		{Source: "tmpfs", Target: "/tmp", FSType: "tmpfs", Flags: unix.MS_NOSUID | unix.MS_NODEV, Data: "mode=1777", Mode: 0o1777,
			Reason: "scratch space for tools"},
		{Source: "securityfs", Target: "/sys/kernel/security", FSType: "securityfs", Flags: nodev,
			Reason: "TPM event log and LSM state; only inventory needs it"},
		{Source: "efivarfs", Target: "/sys/firmware/efi/efivars", FSType: "efivarfs", Flags: nodev,
			IfExists: "/sys/firmware/efi", AfterModules: true,
			Reason: "EFI variables for boot entries; without it EFI boot order cannot be changed"},
	}
}
