package initsys

import (
	"fmt"
	"log/slog"
	"os"
	"runtime/debug"
	"time"

	"golang.org/x/sys/unix"
)

// PanicHandler turns a panic in PID 1 into a logged, delayed reboot, or a
// hold for debugging. Its fields are the system access; tests replace them.
type PanicHandler struct {
	Log *slog.Logger
	// Hold makes the handler hold the machine instead of rebooting. The
	// handler also holds when CmdlinePath holds booty.debug=hold.
	Hold        bool
	CmdlinePath string
	// Delay is how long the panic stays on the console before the reboot.
	Delay time.Duration
	Sleep func(time.Duration)
	// Reboot syncs and restarts the machine; it returns only on failure.
	Reboot func() error
	// HoldForever blocks forever while reaping orphans.
	HoldForever func()
}

// NewPanicHandler returns a PanicHandler with the real syscalls.
func NewPanicHandler(log *slog.Logger, hold bool, delay time.Duration) *PanicHandler {
	if log == nil {
		log = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	return &PanicHandler{
		Log: log, Hold: hold, Delay: delay,
		CmdlinePath: "/proc/cmdline",
		Sleep:       time.Sleep,
		Reboot: func() error {
			unix.Sync()
			return unix.Reboot(unix.LINUX_REBOOT_CMD_RESTART)
		},
		HoldForever: holdForever,
	}
}

// RecoverAndReboot is deferred first thing in the agent's main. On a panic
// it logs the value and the stack, then after delay syncs and reboots; with
// holdOnPanic, or booty.debug=hold on the kernel command line, it holds the
// machine instead (sleeps forever, still reaping orphans) so a human can
// look. If the reboot syscall fails it holds as well: PID 1 must not exit.
// Without a panic it does nothing.
func RecoverAndReboot(log *slog.Logger, holdOnPanic bool, delay time.Duration) {
	if v := recover(); v != nil {
		NewPanicHandler(log, holdOnPanic, delay).Handle(v, debug.Stack())
	}
}

// Recover is the method form of RecoverAndReboot: defer h.Recover().
func (h *PanicHandler) Recover() {
	if v := recover(); v != nil {
		h.Handle(v, debug.Stack())
	}
}

// Handle logs the panic value and stack, then holds or reboots as the
// handler is configured. It returns only when the replaced Reboot or
// HoldForever return (tests).
func (h *PanicHandler) Handle(v any, stack []byte) {
	h.Log.Error("agent panicked", "panic", fmt.Sprint(v), "stack", string(stack))
	hold := h.Hold
	if !hold && h.CmdlinePath != "" {
		if b, err := os.ReadFile(h.CmdlinePath); err == nil {
			hold = ParseCmdline(string(b)).HoldRequested()
		}
	}
	if hold {
		h.Log.Error("holding the machine for debugging (booty.debug=hold); reboot it by hand")
		h.HoldForever()
		return
	}
	h.Log.Error("rebooting after panic", "delay", h.Delay)
	h.Sleep(h.Delay)
	if err := h.Reboot(); err != nil {
		h.Log.Error("reboot after panic failed, holding", "err", err)
		h.HoldForever()
	}
}

// holdForever reaps every child as it exits and never returns. Nothing else
// of the agent runs any more, so no exit status can be stolen.
func holdForever() {
	for {
		var ws unix.WaitStatus
		if _, err := unix.Wait4(-1, &ws, 0, nil); err != nil {
			time.Sleep(time.Second)
		}
	}
}
