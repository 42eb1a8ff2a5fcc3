package initsys

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// Action is what happens to the machine when the agent is done.
type Action int

const (
	// None returns from Handoff and leaves the machine running.
	None Action = iota
	// Kexec boots Handoff.Kernel with Initrd and Cmdline without firmware.
	Kexec
	// Reboot restarts through firmware (needed after firmware changes).
	Reboot
	// Poweroff turns the machine off.
	Poweroff
	// Hold keeps the machine up for a human, reaping orphans, forever.
	Hold
)

func (a Action) String() string {
	switch a {
	case None:
		return "none"
	case Kexec:
		return "kexec"
	case Reboot:
		return "reboot"
	case Poweroff:
		return "poweroff"
	case Hold:
		return "hold"
	}
	return fmt.Sprintf("action(%d)", int(a))
}

// Handoff says how the agent leaves the machine. Kernel, Initrd and
// Cmdline are used by Kexec only; Initrd may be empty.
type Handoff struct {
	Action
	Kernel, Initrd, Cmdline string
}

// Handoff is the one place the machine is kexec'd, rebooted, powered off
// or held. In order: for Kexec, it loads Kernel and Initrd with
// kexec_file_load (a failure is returned with the machine untouched, so the
// caller can fall back to Reboot); then it syncs, unmounts every
// block-device filesystem still mounted (busy ones are remounted
// read-only), syncs again and issues the reboot(2) command. With the real
// syscalls a successful Kexec, Reboot or Poweroff does not return; an error
// from reboot(2) is returned. Hold blocks forever. None returns nil.
func (s *System) Handoff(h Handoff) error {
	s.Log.Info("handoff", "action", h.Action.String(), "kernel", h.Kernel, "initrd", h.Initrd)
	var cmd int
	switch h.Action {
	case None:
		return nil
	case Hold:
		s.Log.Warn("holding the machine; reboot it by hand")
		if s.Reaper != nil {
			s.Reaper.Stop()
		}
		s.Sys.Hold()
		return nil
	case Kexec:
		if err := s.kexecLoad(h); err != nil {
			return err
		}
		cmd = unix.LINUX_REBOOT_CMD_KEXEC
	case Reboot:
		cmd = unix.LINUX_REBOOT_CMD_RESTART
	case Poweroff:
		cmd = unix.LINUX_REBOOT_CMD_POWER_OFF
	default:
		return fmt.Errorf("handoff: unknown action %v", h.Action)
	}
	if s.coldplug != nil {
		s.coldplug.Stop() // no module loads behind the handoff's back
	}
	s.Sys.Sync()
	s.unmountDisks()
	s.Sys.Sync()
	if err := s.Sys.Reboot(cmd); err != nil {
		return fmt.Errorf("handoff %s: reboot(2): %w", h.Action, err)
	}
	return nil
}

func (s *System) kexecLoad(h Handoff) error {
	if h.Kernel == "" {
		return fmt.Errorf("handoff kexec: no kernel given")
	}
	k, err := os.Open(h.Kernel)
	if err != nil {
		return fmt.Errorf("handoff kexec: open kernel: %w", err)
	}
	defer k.Close()
	initrdFd, flags := -1, unix.KEXEC_FILE_NO_INITRAMFS
	if h.Initrd != "" {
		i, err := os.Open(h.Initrd)
		if err != nil {
			return fmt.Errorf("handoff kexec: open initrd: %w", err)
		}
		defer i.Close()
		initrdFd, flags = int(i.Fd()), 0
	}
	if err := s.Sys.KexecFileLoad(int(k.Fd()), initrdFd, h.Cmdline, flags); err != nil {
		return fmt.Errorf("handoff kexec: kexec_file_load %s: %w", h.Kernel, err)
	}
	return nil
}
