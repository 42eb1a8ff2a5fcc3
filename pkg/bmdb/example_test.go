package bmdb_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/booty-dev/booty/pkg/bmdb"
)

// The path of one machine, as bootyd's handlers drive it: an agent enrolls,
// the operator inspects and provisions, the agent long-polls each command and
// reports it done.
func Example() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "bmdb-example-")
	defer os.RemoveAll(dir)
	db, err := bmdb.Open(ctx, filepath.Join(dir, "bmdb.db"), bmdb.WithLogger(slog.New(slog.DiscardHandler))) // or "postgres://…"
	if err != nil {
		fmt.Println(err)
		return
	}
	defer db.Close()

	// POST /v1/enroll: an unknown machine appears as discovered.
	en, _ := db.Enroll(ctx, bmdb.Enrollment{MACs: []string{"52:54:00:12:34:56"}, Hardware: []byte(`{"ramMebibytes":2048}`)})
	id := en.Machine.ID
	fmt.Println(en.Machine.Name, en.Machine.State, en.Machine.Status)

	// Every agent request: the token for this boot, same error for all failures.
	if _, err := db.Authenticate(ctx, "52:54:00:12:34:56", en.Token); err == nil {
		fmt.Println("authenticated")
	}

	// The operator inspects; the agent's long poll gets the command.
	db.Transition(ctx, id, bmdb.Transition{To: bmdb.StateInspecting, Command: bmdb.CommandInspect, Reason: "Inspect"})
	c, _ := db.WaitCommand(ctx, id, time.Second)
	m, _ := db.CompleteCommand(ctx, id, c.Generation, bmdb.CommandResult{})
	fmt.Println(c.Kind, "→", m.State)

	// The operator sets the spec and provisions; the agent reports steps.
	spec := bmdb.Spec{Image: bmdb.Image{URL: "http://10.0.0.1/debian.raw.zst", Checksum: "sha256:ab"}, Hostname: "node-1"}
	m, _ = db.UpdateMachine(ctx, id, m.Generation, bmdb.MachineUpdate{Spec: &spec})
	db.Transition(ctx, id, bmdb.Transition{To: bmdb.StateProvisioning, Command: bmdb.CommandProvision, Reason: "Provision", Generation: m.Generation})
	c, _ = db.WaitCommand(ctx, id, time.Second)
	db.ReportStep(ctx, id, c.Generation, bmdb.StepReport{Index: 1, Total: 1, Name: "stream-image", Result: bmdb.StepSucceeded, Duration: 42 * time.Second})
	m, _ = db.CompleteCommand(ctx, id, c.Generation, bmdb.CommandResult{})
	fmt.Println(c.Kind, c.Spec.Image.URL, "→", m.State)
	// Output:
	// discovered-525400123456 registering discovered
	// authenticated
	// inspect → available
	// provision http://10.0.0.1/debian.raw.zst → provisioned
}
