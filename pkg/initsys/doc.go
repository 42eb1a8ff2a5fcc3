// Package initsys holds the PID-1 mechanics of the booty agent and nothing
// else: the early mount table, consoles from the kernel command line,
// kernel module coldplug, the orphan reaper, panic handling and the single
// place where the machine is handed off (kexec, reboot, poweroff, hold).
//
// The agent's main calls Bringup, runs its own logic, then System.Handoff:
//
//	func main() {
//		defer initsys.RecoverAndReboot(nil, false, 10*time.Second)
//		sys, err := initsys.Bringup(initsys.Options{})
//		...
//		err = sys.Handoff(initsys.Handoff{Action: initsys.Kexec, Kernel: k, Initrd: i, Cmdline: c})
//	}
//
// Bringup returns once the network drivers are loaded (every NIC has its
// interface); the coldplug of the other drivers goes on in the background,
// and whatever looks at disks calls System.WaitColdplug first. The disk
// controllers' driver dependencies load before anything else, so their
// slow probes start first.
//
// Every path hangs off Options.Root and every syscall goes through
// Syscalls, so tests run the whole bringup against a temp dir and record
// what would have been mounted, loaded or rebooted.
package initsys
