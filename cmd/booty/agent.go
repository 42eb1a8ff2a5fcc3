package main

import (
	"context"

	"github.com/booty-dev/booty/pkg/agent"
	"github.com/booty-dev/booty/pkg/image"
	"github.com/booty-dev/booty/pkg/initsys"
)

// runAgent is the PID-1 path: initsys.Run brings the machine up and hands
// it off in one place; the agent decides how.
func runAgent([]string) int {
	// The agent's main work is the image write: more Ps than cores keep
	// its fetch from waiting behind the hash and the decoder, as for
	// write-image (image.Procs).
	image.UseProcs()
	initsys.Run(func(sys *initsys.System) initsys.Handoff {
		sys.Log.Info("booty agent starting", "version", version)
		return agent.New(sys).Run(context.Background())
	})
	return 1 // not reached: Run never returns
}
