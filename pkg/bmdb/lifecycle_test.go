package bmdb_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/booty-dev/booty/pkg/bmdb"
)

// setState puts a machine into a state directly: the data a test needs.
func setState(t *testing.T, db *bmdb.DB, id string, s bmdb.State) {
	t.Helper()
	must[int64](t)(db.ExecForTest(ctx(t), "UPDATE machines SET state = ?, command = '', command_generation = 0 WHERE id = ?", string(s), id))
}

func TestLifecycleTable(t *testing.T) {
	cases := []struct {
		from bmdb.State
		t    bmdb.Transition
		want error // nil: allowed
	}{
		{bmdb.StateRegistering, bmdb.Transition{To: bmdb.StateInspecting, Command: bmdb.CommandInspect}, nil},
		{bmdb.StateRegistering, bmdb.Transition{To: bmdb.StateAvailable}, nil},
		{bmdb.StateRegistering, bmdb.Transition{To: bmdb.StateProvisioned}, bmdb.ErrInvalidTransition},
		{bmdb.StateRegistering, bmdb.Transition{To: bmdb.StateProvisioning, Command: bmdb.CommandProvision}, bmdb.ErrInvalidTransition},
		{bmdb.StateInspecting, bmdb.Transition{To: bmdb.StateAvailable}, nil},
		{bmdb.StateInspecting, bmdb.Transition{To: bmdb.StateProvisioning, Command: bmdb.CommandProvision}, bmdb.ErrInvalidTransition},
		{bmdb.StateAvailable, bmdb.Transition{To: bmdb.StateProvisioning, Command: bmdb.CommandProvision}, nil},
		{bmdb.StateAvailable, bmdb.Transition{To: bmdb.StateProvisioning, Command: bmdb.CommandInspect}, bmdb.ErrInvalidTransition},
		{bmdb.StateAvailable, bmdb.Transition{To: bmdb.StatePreparing}, nil},
		{bmdb.StateAvailable, bmdb.Transition{To: bmdb.StateDeprovisioning, Command: bmdb.CommandDeprovision}, bmdb.ErrInvalidTransition},
		{bmdb.StateAvailable, bmdb.Transition{To: bmdb.StateAvailable, Command: bmdb.CommandPowerOff}, nil},
		{bmdb.StatePreparing, bmdb.Transition{To: bmdb.StateProvisioning, Command: bmdb.CommandProvision}, nil},
		{bmdb.StateProvisioning, bmdb.Transition{To: bmdb.StateProvisioned}, nil},
		{bmdb.StateProvisioning, bmdb.Transition{To: bmdb.StateAvailable}, bmdb.ErrInvalidTransition},
		{bmdb.StateProvisioning, bmdb.Transition{To: bmdb.StateProvisioning, Command: bmdb.CommandProvision}, nil},
		{bmdb.StateProvisioned, bmdb.Transition{To: bmdb.StateDeprovisioning, Command: bmdb.CommandDeprovision}, nil},
		{bmdb.StateProvisioned, bmdb.Transition{To: bmdb.StateAvailable}, bmdb.ErrInvalidTransition},
		{bmdb.StateProvisioned, bmdb.Transition{To: bmdb.StateProvisioning, Command: bmdb.CommandProvision}, bmdb.ErrInvalidTransition},
		{bmdb.StateExternallyProvisioned, bmdb.Transition{To: bmdb.StateDeprovisioning, Command: bmdb.CommandDeprovision}, nil},
		{bmdb.StateDeprovisioning, bmdb.Transition{To: bmdb.StateAvailable}, nil},
		{bmdb.StateDeprovisioning, bmdb.Transition{To: bmdb.StateProvisioned}, bmdb.ErrInvalidTransition},
		{bmdb.StateProvisioned, bmdb.Transition{To: bmdb.StatePoweringOffBeforeDelete, Command: bmdb.CommandPowerOff}, nil},
		{bmdb.StateInspecting, bmdb.Transition{To: bmdb.StateDeleting}, nil},
		{bmdb.StatePoweringOffBeforeDelete, bmdb.Transition{To: bmdb.StateDeleting}, nil},
		{bmdb.StatePoweringOffBeforeDelete, bmdb.Transition{To: bmdb.StateAvailable}, bmdb.ErrInvalidTransition},
		{bmdb.StateDeleting, bmdb.Transition{To: bmdb.StateAvailable}, bmdb.ErrInvalidTransition},
		{bmdb.StateDeleting, bmdb.Transition{To: bmdb.StateRegistering}, bmdb.ErrInvalidTransition},
		{bmdb.StateAvailable, bmdb.Transition{To: "bogus"}, bmdb.ErrInvalid},
		{bmdb.StateAvailable, bmdb.Transition{To: bmdb.StateInspecting, Command: "format-c"}, bmdb.ErrInvalid},
	}
	engines(t, func(t *testing.T, db *bmdb.DB) {
		for i, c := range cases {
			name := fmt.Sprintf("%s→%s/%s", c.from, c.t.To, c.t.Command)
			m := mustMachine(t, db, fmt.Sprintf("lc-%d", i), i)
			setState(t, db, m.ID, c.from)
			before := must[bmdb.Machine](t)(db.GetMachine(ctx(t), m.ID))
			evBefore := must[[]bmdb.Event](t)(db.Events(ctx(t), m.ID, 0, 0))
			c.t.Reason = "Test"
			got, err := db.Transition(ctx(t), m.ID, c.t)
			evAfter := must[[]bmdb.Event](t)(db.Events(ctx(t), m.ID, 0, 0))
			if c.want != nil {
				if !errors.Is(err, c.want) {
					t.Errorf("%s: error %v, want %v", name, err, c.want)
				}
				after := must[bmdb.Machine](t)(db.GetMachine(ctx(t), m.ID))
				if after.State != before.State || after.Generation != before.Generation || len(evAfter) != len(evBefore) {
					t.Errorf("%s: refused transition changed the machine: %+v → %+v, events %d → %d", name, before, after, len(evBefore), len(evAfter))
				}
				continue
			}
			if err != nil {
				t.Errorf("%s: %v", name, err)
				continue
			}
			if got.State != c.t.To || got.Command != c.t.Command {
				t.Errorf("%s: machine is %s with command %q", name, got.State, got.Command)
			}
			if len(evAfter) != len(evBefore)+1 {
				t.Errorf("%s: %d events after, %d before: want one more", name, len(evAfter), len(evBefore))
			} else if e := evAfter[len(evAfter)-1]; e.Reason != "Test" || e.Generation != got.Generation {
				t.Errorf("%s: event %+v", name, e)
			}
			wantGen := before.Generation
			if c.t.Command != "" {
				wantGen++
			}
			if got.Generation != wantGen {
				t.Errorf("%s: generation %d, want %d", name, got.Generation, wantGen)
			}
			if c.t.Command == bmdb.CommandProvision {
				in := must[bmdb.Install](t)(db.GetInstall(ctx(t), m.ID, 0))
				if in.Generation != got.Generation || in.Kind != bmdb.CommandProvision || in.Spec.Image.URL != m.Spec.Image.URL {
					t.Errorf("%s: install %+v", name, in)
				}
			}
			// The same call again changes nothing and adds no event.
			again, err := db.Transition(ctx(t), m.ID, c.t)
			if err != nil {
				t.Errorf("%s again: %v", name, err)
			}
			evAgain := must[[]bmdb.Event](t)(db.Events(ctx(t), m.ID, 0, 0))
			if again.Generation != got.Generation || len(evAgain) != len(evAfter) {
				t.Errorf("%s again: generation %d → %d, events %d → %d (want no change)", name, got.Generation, again.Generation, len(evAfter), len(evAgain))
			}
		}
	})
}

func TestTransitionStaleGenerationAndErrors(t *testing.T) {
	engines(t, func(t *testing.T, db *bmdb.DB) {
		m := mustMachine(t, db, "gen", 1)
		m1 := must[bmdb.Machine](t)(db.Transition(ctx(t), m.ID, bmdb.Transition{To: bmdb.StateInspecting, Command: bmdb.CommandInspect, Reason: "Inspect", Generation: m.Generation}))
		if m1.Generation != m.Generation+1 {
			t.Fatalf("generation %d after a command, want %d", m1.Generation, m.Generation+1)
		}
		// The old generation is refused, and nothing changes.
		_, err := db.Transition(ctx(t), m.ID, bmdb.Transition{To: bmdb.StateAvailable, Reason: "Skip", Generation: m.Generation})
		wantErr(t, err, bmdb.ErrStaleGeneration)
		if got := must[bmdb.Machine](t)(db.GetMachine(ctx(t), m.ID)); got.State != bmdb.StateInspecting {
			t.Fatalf("state %s after a stale transition", got.State)
		}
		// An error is recorded: status error, type, count, a warning event.
		m2 := must[bmdb.Machine](t)(db.Transition(ctx(t), m.ID, bmdb.Transition{To: bmdb.StateInspecting, Reason: "InspectionFailed",
			Error: &bmdb.ErrorInfo{Type: bmdb.ErrorInspection, Message: "no disks"}}))
		if m2.Status != bmdb.StatusError || m2.Error.Type != bmdb.ErrorInspection || m2.Error.Count != 1 || m2.Error.Message != "no disks" {
			t.Fatalf("after error: %+v", m2)
		}
		ev := must[[]bmdb.Event](t)(db.Events(ctx(t), m.ID, 0, 0))
		if last := ev[len(ev)-1]; last.Type != bmdb.EventWarning || last.Reason != "InspectionFailed" {
			t.Fatalf("last event %+v", last)
		}
		// Leaving the state without an error clears the status.
		m3 := must[bmdb.Machine](t)(db.Transition(ctx(t), m.ID, bmdb.Transition{To: bmdb.StateAvailable, Reason: "Manual"}))
		if m3.Status != bmdb.StatusOK || m3.Error.Type != "" || m3.Command != "" {
			t.Fatalf("after recovery: %+v", m3)
		}
		// Spec updates bump the generation and check the given one.
		_, err = db.UpdateMachine(ctx(t), m.ID, m.Generation, bmdb.MachineUpdate{Spec: &bmdb.Spec{Hostname: "x"}})
		wantErr(t, err, bmdb.ErrStaleGeneration)
		m4 := must[bmdb.Machine](t)(db.UpdateMachine(ctx(t), m.ID, m3.Generation, bmdb.MachineUpdate{Spec: &bmdb.Spec{Hostname: "x"}}))
		if m4.Generation != m3.Generation+1 || m4.Spec.Hostname != "x" {
			t.Fatalf("after spec update: %+v", m4)
		}
		// A transition without a reason is bad input.
		_, err = db.Transition(ctx(t), m.ID, bmdb.Transition{To: bmdb.StateInspecting})
		wantErr(t, err, bmdb.ErrInvalid)
		_, err = db.Transition(ctx(t), "no-such-id", bmdb.Transition{To: bmdb.StateInspecting, Reason: "X"})
		wantErr(t, err, bmdb.ErrNotFound)
	})
}

func TestEventsBounded(t *testing.T) {
	engines(t, func(t *testing.T, db *bmdb.DB) {
		m := mustMachine(t, db, "ev", 1)
		for i := 0; i < 40; i++ {
			if err := db.RecordEvent(ctx(t), m.ID, bmdb.EventNormal, "Tick", fmt.Sprint(i)); err != nil {
				t.Fatal(err)
			}
		}
		ev := must[[]bmdb.Event](t)(db.Events(ctx(t), m.ID, 0, 0))
		if len(ev) != 10 || ev[len(ev)-1].Message != "39" || ev[0].Message != "30" {
			t.Fatalf("%d events kept, first %q last %q: want the newest 10", len(ev), ev[0].Message, ev[len(ev)-1].Message)
		}
	}, bmdb.WithEventLimit(10))
}

func TestMachineValidationAndConflicts(t *testing.T) {
	engines(t, func(t *testing.T, db *bmdb.DB) {
		m := mustMachine(t, db, "a", 1)
		for _, c := range []struct {
			nm   bmdb.NewMachine
			want error
		}{
			{bmdb.NewMachine{Name: "", BootMAC: mac(9)}, bmdb.ErrInvalid},
			{bmdb.NewMachine{Name: "bad name", BootMAC: mac(9)}, bmdb.ErrInvalid},
			{bmdb.NewMachine{Name: "b", BootMAC: "nope"}, bmdb.ErrInvalid},
			{bmdb.NewMachine{Name: "b", BootMAC: mac(9), BMC: bmdb.BMC{Address: "telnet://x"}}, bmdb.ErrInvalid},
			{bmdb.NewMachine{Name: "b", BootMAC: mac(9), Spec: bmdb.Spec{ConfigOverrides: []byte("[1]")}}, bmdb.ErrInvalid},
			{bmdb.NewMachine{Name: "b", BootMAC: mac(9), Labels: map[string]string{"-x": "y"}}, bmdb.ErrInvalid},
			{bmdb.NewMachine{Name: "a", BootMAC: mac(9)}, bmdb.ErrConflict},
			{bmdb.NewMachine{Name: "b", BootMAC: mac(9), MACs: []string{mac(1)}}, bmdb.ErrConflict},
			{bmdb.NewMachine{Name: "b", BootMAC: mac(9), State: bmdb.StateProvisioned}, bmdb.ErrInvalid},
		} {
			_, err := db.CreateMachine(ctx(t), c.nm)
			if !errors.Is(err, c.want) {
				t.Errorf("create %+v: %v, want %v", c.nm, err, c.want)
			}
		}
		if n := len(must[[]bmdb.Machine](t)(db.ListMachines(ctx(t), bmdb.ListOptions{}))); n != 1 {
			t.Fatalf("%d machines after refused creates, want 1", n)
		}
		// MACs are canonical; a MAC maps to one machine.
		b := must[bmdb.Machine](t)(db.CreateMachine(ctx(t), bmdb.NewMachine{Name: "b", BootMAC: "52-54-00-AA-BB-CC", MACs: []string{"52:54:00:aa:bb:cd"},
			BMC: bmdb.BMC{Address: "ipmi://10.0.0.9:623", CredentialsRef: "bmc-b"}}))
		if b.BootMAC != "52:54:00:aa:bb:cc" || len(b.MACs) != 2 {
			t.Fatalf("machine b: %+v", b)
		}
		if got := must[bmdb.Machine](t)(db.MachineByMAC(ctx(t), "52:54:00:AA:BB:CD")); got.ID != b.ID {
			t.Fatalf("MAC lookup found %s", got.Name)
		}
		// Credentials are stored apart and never listed.
		if err := db.PutCredentials(ctx(t), "bmc-b", bmdb.Credentials{Username: "admin", Password: "hunter2"}); err != nil {
			t.Fatal(err)
		}
		c := must[bmdb.Credentials](t)(db.GetCredentials(ctx(t), "bmc-b"))
		if c.Password != "hunter2" || fmt.Sprint(c) == "" || strings.Contains(fmt.Sprint(c), "hunter2") {
			t.Fatalf("credentials %v", c)
		}
		list := must[[]bmdb.Machine](t)(db.ListMachines(ctx(t), bmdb.ListOptions{}))
		if strings.Contains(fmt.Sprintf("%+v", list), "hunter2") {
			t.Fatal("a listing holds the BMC password")
		}
		// Deleting needs state deleting.
		wantErr(t, db.DeleteMachine(ctx(t), m.ID), bmdb.ErrConflict)
		must[bmdb.Machine](t)(db.Transition(ctx(t), m.ID, bmdb.Transition{To: bmdb.StateDeleting, Reason: "Delete"}))
		if err := db.DeleteMachine(ctx(t), m.ID); err != nil {
			t.Fatal(err)
		}
		_, err := db.GetMachine(ctx(t), m.ID)
		wantErr(t, err, bmdb.ErrNotFound)
	})
}

// TestOnline: online is stored at creation, changes without bumping the
// generation, and an unchanged value records no event.
func TestOnline(t *testing.T) {
	engines(t, func(t *testing.T, db *bmdb.DB) {
		m := must[bmdb.Machine](t)(db.CreateMachine(ctx(t), bmdb.NewMachine{Name: "on", BootMAC: mac(7), Online: true}))
		if !m.Online {
			t.Fatal("created with Online: true, reads false")
		}
		off := false
		m2 := must[bmdb.Machine](t)(db.UpdateMachine(ctx(t), m.ID, m.Generation, bmdb.MachineUpdate{Online: &off}))
		if m2.Online || m2.Generation != m.Generation {
			t.Fatalf("after online=false: online %v generation %d (was %d)", m2.Online, m2.Generation, m.Generation)
		}
		evs := must[[]bmdb.Event](t)(db.Events(ctx(t), m.ID, 0, 100))
		m3 := must[bmdb.Machine](t)(db.UpdateMachine(ctx(t), m.ID, 0, bmdb.MachineUpdate{Online: &off}))
		if evs2 := must[[]bmdb.Event](t)(db.Events(ctx(t), m.ID, 0, 100)); len(evs2) != len(evs) || m3.Online {
			t.Fatalf("an unchanged online recorded an event (%d → %d) or changed it", len(evs), len(evs2))
		}
		if got := must[bmdb.Machine](t)(db.MachineByName(ctx(t), "on")); got.Online {
			t.Fatal("online=false not stored")
		}
	})
}

// TestCredentialsWithTheMachine: credentials given with a machine are
// stored in its transaction: a refused creation or a stale update leaves
// the secret store as it was; equal credentials are no change, new ones
// are a change ("bmc credentials") without a new generation.
func TestCredentialsWithTheMachine(t *testing.T) {
	engines(t, func(t *testing.T, db *bmdb.DB) {
		bmc := bmdb.BMC{Address: "ipmi://127.0.0.1:623", CredentialsRef: "bmc-c"}
		m := must[bmdb.Machine](t)(db.CreateMachine(ctx(t), bmdb.NewMachine{Name: "c", BootMAC: mac(20), BMC: bmc,
			Credentials: &bmdb.Credentials{Username: "admin", Password: "first"}}))
		// Name taken, MAC taken: refused, and bmc-c keeps its password.
		for i, nm := range []bmdb.NewMachine{{Name: "c", BootMAC: mac(21)}, {Name: "c2", BootMAC: mac(20)}} {
			nm.BMC, nm.Credentials = bmc, &bmdb.Credentials{Username: "admin", Password: "thief"}
			if _, err := db.CreateMachine(ctx(t), nm); !errors.Is(err, bmdb.ErrConflict) {
				t.Fatalf("refused creation %d: %v, want ErrConflict", i, err)
			}
		}
		if _, err := db.CreateMachine(ctx(t), bmdb.NewMachine{Name: "c3", BootMAC: mac(22), Credentials: &bmdb.Credentials{Username: "admin", Password: "x"}}); !errors.Is(err, bmdb.ErrInvalid) {
			t.Fatalf("credentials without a reference: %v, want ErrInvalid", err)
		}
		if _, err := db.UpdateMachine(ctx(t), m.ID, m.Generation+1, bmdb.MachineUpdate{Credentials: &bmdb.Credentials{Username: "admin", Password: "stale"}}); !errors.Is(err, bmdb.ErrStaleGeneration) {
			t.Fatalf("stale update: %v, want ErrStaleGeneration", err)
		}
		if c := must[bmdb.Credentials](t)(db.GetCredentials(ctx(t), "bmc-c")); c.Password != "first" {
			t.Fatal("a refused creation or update replaced the credentials")
		}
		if names := must[[]string](t)(db.ListCredentials(ctx(t))); len(names) != 1 {
			t.Fatalf("credentials stored: %v, want only bmc-c", names)
		}
		evs := must[[]bmdb.Event](t)(db.Events(ctx(t), m.ID, 0, 100))
		m2 := must[bmdb.Machine](t)(db.UpdateMachine(ctx(t), m.ID, m.Generation, bmdb.MachineUpdate{Credentials: &bmdb.Credentials{Username: "admin", Password: "first"}}))
		if evs2 := must[[]bmdb.Event](t)(db.Events(ctx(t), m.ID, 0, 100)); len(evs2) != len(evs) || !m2.UpdatedAt.Equal(m.UpdatedAt) {
			t.Fatal("equal credentials counted as a change")
		}
		m3 := must[bmdb.Machine](t)(db.UpdateMachine(ctx(t), m.ID, m.Generation, bmdb.MachineUpdate{Credentials: &bmdb.Credentials{Username: "admin", Password: "second"}}))
		evs3 := must[[]bmdb.Event](t)(db.Events(ctx(t), m.ID, 0, 100))
		if last := evs3[len(evs3)-1]; m3.Generation != m.Generation || last.Message != "changed bmc credentials" || strings.Contains(last.Message, "second") {
			t.Fatalf("new credentials: generation %d (was %d), last event %q", m3.Generation, m.Generation, last.Message)
		}
		if c := must[bmdb.Credentials](t)(db.GetCredentials(ctx(t), "bmc-c")); c.Password != "second" {
			t.Fatal("the update did not store the new credentials")
		}
	})
}
