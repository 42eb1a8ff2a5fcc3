package bmdb_test

import (
	"testing"
	"time"

	"github.com/booty-dev/booty/pkg/bmdb"
)

// OnChange calls its function once at the machine's next change (a command
// issued); a cancelled registration is not called.
func TestOnChange(t *testing.T) {
	engines(t, func(t *testing.T, db *bmdb.DB) {
		id := must[bmdb.Enrolled](t)(db.Enroll(ctx(t), bmdb.Enrollment{MACs: []string{mac(1)}})).Machine.ID
		called := make(chan string, 4)
		db.OnChange(id, func() { called <- "kept" })
		cancel := db.OnChange(id, func() { called <- "cancelled" })
		cancel()
		m := must[bmdb.Machine](t)(db.Transition(ctx(t), id, bmdb.Transition{To: bmdb.StateInspecting, Command: bmdb.CommandInspect, Reason: "Inspect"}))
		select {
		case got := <-called:
			if got != "kept" {
				t.Fatalf("called %q", got)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("OnChange was not called within 10s of the command")
		}
		// Once only: the next change calls nothing registered before.
		must[bmdb.Machine](t)(db.CompleteCommand(ctx(t), id, m.Generation, bmdb.CommandResult{}))
		select {
		case got := <-called:
			t.Fatalf("called %q again", got)
		case <-time.After(200 * time.Millisecond):
		}
	})
}
