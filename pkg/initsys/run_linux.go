package initsys

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/booty-dev/booty/pkg/cmdline"
)

// PanicDelay is how long a panic stays on the console before the reboot.
const PanicDelay = 30 * time.Second

// Run is the whole life of PID 1, in one place, and never returns:
//
//  1. a panic anywhere, even in bringup, becomes a logged, delayed reboot
//     (a hold with booty.debug=hold), never an exit;
//  2. Bringup; when it fails nothing else can work (no proc, sys or dev),
//     so the error goes to stderr and the machine holds for a human;
//  3. the kernel command line is logged with its secrets redacted;
//  4. agent decides how to leave the machine;
//  5. the handoff: kexec, reboot, poweroff or hold. When it fails, and it
//     was not already a reboot, the machine reboots; when that fails too it
//     holds, reaping orphans, for ever.
func Run(agent func(*System) Handoff) {
	defer RecoverAndReboot(nil, false, PanicDelay)
	sys, err := Bringup(Options{})
	if err != nil {
		fmt.Fprintf(os.Stderr, "booty: bringup failed: %v\n", err)
		holdForever()
	}
	defer RecoverAndReboot(sys.Log, false, PanicDelay)
	sys.Log.Info("kernel command line", "cmdline", cmdline.Redact(sys.Cmdline.Raw))

	h := agent(sys)
	if err := sys.Handoff(h); err != nil {
		sys.Log.Error("handoff failed", "action", h.Action.String(), "error", err)
		if !errors.Is(err, context.Canceled) && h.Action != Reboot {
			if err := sys.Handoff(Handoff{Action: Reboot}); err != nil {
				sys.Log.Error("reboot failed; holding", "error", err)
			}
		}
	}
	_ = sys.Handoff(Handoff{Action: Hold}) // blocks, reaping orphans
	holdForever()
}
