package bmdb_test

import (
	"errors"
	"testing"

	"github.com/booty-dev/booty/pkg/bmdb"
)

// An agent whose run ended, failed or not, leaves: its session ends with the
// command's result, so the machine's next boot enrolls at once instead of
// being refused until the session's heartbeats time out. An inspection
// keeps the session (the agent goes on waiting for work).
func TestRunEndEndsTheSession(t *testing.T) {
	engines(t, func(t *testing.T, db *bmdb.DB) {
		en := must[bmdb.Enrolled](t)(db.Enroll(ctx(t), bmdb.Enrollment{MACs: []string{mac(1)}, Hardware: hw}))
		id := en.Machine.ID
		m := must[bmdb.Machine](t)(db.Transition(ctx(t), id, bmdb.Transition{To: bmdb.StateInspecting, Command: bmdb.CommandInspect, Reason: "Inspect"}))
		m = must[bmdb.Machine](t)(db.CompleteCommand(ctx(t), id, m.Generation, bmdb.CommandResult{Error: "no disks"}))
		if s := must[bmdb.AgentSession](t)(db.GetAgentSession(ctx(t), id)); !s.Live {
			t.Fatalf("session after a failed inspection %+v: want live (the agent still waits)", s)
		}
		m = must[bmdb.Machine](t)(db.Transition(ctx(t), id, bmdb.Transition{To: bmdb.StateInspecting, Command: bmdb.CommandInspect, Reason: "Inspect"}))
		m = must[bmdb.Machine](t)(db.CompleteCommand(ctx(t), id, m.Generation, bmdb.CommandResult{}))
		_, err := db.Enroll(ctx(t), bmdb.Enrollment{MACs: []string{mac(1)}})
		wantErr(t, err, bmdb.ErrSessionLive)

		// A failed provision ends the session: the agent's token stops
		// working, and the next boot enrolls at once.
		m = must[bmdb.Machine](t)(db.Transition(ctx(t), id, bmdb.Transition{To: bmdb.StateProvisioning, Command: bmdb.CommandProvision, Reason: "Provision", Generation: m.Generation}))
		m = must[bmdb.Machine](t)(db.CompleteCommand(ctx(t), id, m.Generation, bmdb.CommandResult{Error: "stream-image: checksum mismatch"}))
		if m.Status != bmdb.StatusError || m.State != bmdb.StateProvisioning {
			t.Fatalf("after a failed provision: %s %s", m.State, m.Status)
		}
		s := must[bmdb.AgentSession](t)(db.GetAgentSession(ctx(t), id))
		if s.Live || s.EndedAt.IsZero() || s.EndReason != "command provision failed" {
			t.Fatalf("session after a failed provision %+v: want ended, reason %q", s, "command provision failed")
		}
		if _, err := db.Authenticate(ctx(t), mac(1), en.Token); !errors.Is(err, bmdb.ErrUnauthorized) {
			t.Fatalf("token of the failed run: %v, want ErrUnauthorized", err)
		}
		en2 := must[bmdb.Enrolled](t)(db.Enroll(ctx(t), bmdb.Enrollment{MACs: []string{mac(1)}}))
		if en2.Machine.ID != id || en2.Token == en.Token {
			t.Fatalf("second enrollment %+v", en2)
		}

		// A failed deprovision ends it too (the retried provision runs
		// under the new session).
		m = must[bmdb.Machine](t)(db.Transition(ctx(t), id, bmdb.Transition{To: bmdb.StateProvisioning, Command: bmdb.CommandProvision, Reason: "Retry"}))
		m = must[bmdb.Machine](t)(db.CompleteCommand(ctx(t), id, m.Generation, bmdb.CommandResult{}))
		must[bmdb.Enrolled](t)(db.Enroll(ctx(t), bmdb.Enrollment{MACs: []string{mac(1)}}))
		m = must[bmdb.Machine](t)(db.Transition(ctx(t), id, bmdb.Transition{To: bmdb.StateDeprovisioning, Command: bmdb.CommandDeprovision, Reason: "Deprovision"}))
		m = must[bmdb.Machine](t)(db.CompleteCommand(ctx(t), id, m.Generation, bmdb.CommandResult{Error: "wipe: I/O error"}))
		if s := must[bmdb.AgentSession](t)(db.GetAgentSession(ctx(t), id)); s.Live || s.EndReason != "command deprovision failed" {
			t.Fatalf("session after a failed deprovision %+v", s)
		}
		must[bmdb.Enrolled](t)(db.Enroll(ctx(t), bmdb.Enrollment{MACs: []string{mac(1)}}))
	})
}
