package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/booty-dev/booty/pkg/agent"
	"github.com/booty-dev/booty/pkg/initsys"
)

// runAgent is the PID-1 path: bring the machine up, load the config,
// provision, hand off. It returns only when even the handoff failed, and then
// holds: PID 1 must never exit.
func runAgent([]string) int {
	sys, err := initsys.Bringup(initsys.Options{})
	if err != nil {
		// Bringup logs to /dev/console itself; without proc/sys/dev nothing
		// else can work, so hold for a human.
		fmt.Fprintf(os.Stderr, "booty: bringup failed: %v\n", err)
		holdForever()
	}
	defer initsys.RecoverAndReboot(sys.Log, false, 30*time.Second)
	sys.Log.Info("booty agent starting", "version", version, "cmdline", sys.Cmdline.Raw)

	a := agent.New(sys)
	h := a.Run(context.Background())
	if err := sys.Handoff(h); err != nil {
		sys.Log.Error("handoff failed; holding", "action", h.Action.String(), "error", err)
		if !errors.Is(err, context.Canceled) && h.Action != initsys.Reboot {
			if err := sys.Handoff(initsys.Handoff{Action: initsys.Reboot}); err != nil {
				sys.Log.Error("reboot failed; holding", "error", err)
			}
		}
	}
	holdForever()
	return 1
}

func holdForever() {
	for {
		time.Sleep(time.Hour)
	}
}

var _ = slog.Default
