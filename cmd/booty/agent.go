package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/booty-dev/booty/pkg/agent"
	"github.com/booty-dev/booty/pkg/initsys"
	"github.com/booty-dev/booty/pkg/redact"
)

// runAgent is the PID-1 path: bring the machine up, load the config,
// provision, hand off. It returns only when even the handoff failed, and then
// holds: PID 1 must never exit.
func runAgent([]string) int {
	// First thing: a panic anywhere, even in bringup, becomes a logged,
	// delayed reboot (or a hold with booty.debug=hold), never an exit.
	defer initsys.RecoverAndReboot(nil, false, 30*time.Second)
	sys, err := initsys.Bringup(initsys.Options{})
	if err != nil {
		// Bringup logs to /dev/console itself; without proc/sys/dev nothing
		// else can work, so hold for a human.
		fmt.Fprintf(os.Stderr, "booty: bringup failed: %v\n", err)
		holdForever()
	}
	defer initsys.RecoverAndReboot(sys.Log, false, 30*time.Second)
	sys.Log.Info("booty agent starting", "version", version, "cmdline", redactCmdline(sys.Cmdline.Raw))

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
	_ = sys.Handoff(initsys.Handoff{Action: initsys.Hold}) // blocks, reaping orphans
	holdForever()
	return 1
}

func holdForever() {
	for {
		time.Sleep(time.Hour)
	}
}

// redactCmdline hides the values of parameters whose names suggest a secret,
// so the kernel command line can be logged.
func redactCmdline(raw string) string {
	f := strings.Fields(raw)
	for i, p := range f {
		k, _, ok := strings.Cut(p, "=")
		lk := strings.ToLower(k)
		if ok && (strings.Contains(lk, "token") || strings.Contains(lk, "pass") || strings.Contains(lk, "secret")) {
			f[i] = k + "=<redacted>"
			continue
		}
		f[i] = redact.Text(p) // booty.config=https://user:pass@host/…?token=…
	}
	return strings.Join(f, " ")
}
