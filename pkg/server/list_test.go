package server

import (
	"context"
	"reflect"
	"testing"

	"github.com/booty-dev/booty/pkg/bmdb"
)

// TestDecorateAll: the listing's batched read shows what decorating each
// machine on its own shows: agent sessions, and progress while installing.
func TestDecorateAll(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	db := e.srv.db
	for _, mac := range []string{"52:54:00:00:60:01", "52:54:00:00:60:02"} {
		if _, err := db.Enroll(ctx, bmdb.Enrollment{MACs: []string{mac}}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.CreateMachine(ctx, bmdb.NewMachine{Name: "never-booted", BootMAC: "52:54:00:00:60:03"}); err != nil {
		t.Fatal(err)
	}
	m, err := db.MachineByMAC(ctx, "52:54:00:00:60:01")
	if err != nil {
		t.Fatal(err)
	}
	spec := bmdb.Spec{Image: bmdb.Image{URL: "http://10.0.0.1/a.raw", Checksum: "sha256:ab"}, Hostname: "n1"}
	if m, err = db.UpdateMachine(ctx, m.ID, 0, bmdb.MachineUpdate{Spec: &spec}); err != nil {
		t.Fatal(err)
	}
	if m, err = db.Transition(ctx, m.ID, bmdb.Transition{To: bmdb.StateInspecting, Command: bmdb.CommandInspect, Reason: "Inspect"}); err != nil {
		t.Fatal(err)
	}
	if m, err = db.CompleteCommand(ctx, m.ID, m.Generation, bmdb.CommandResult{}); err != nil {
		t.Fatal(err)
	}
	if m, err = db.Transition(ctx, m.ID, bmdb.Transition{To: bmdb.StateProvisioning, Command: bmdb.CommandProvision, Reason: "Provision"}); err != nil {
		t.Fatal(err)
	}
	if err := db.ReportProgress(ctx, m.ID, m.Generation, bmdb.Progress{Step: "stream-image", BytesDone: 100, BytesTotal: 400}); err != nil {
		t.Fatal(err)
	}
	ms, err := db.ListMachines(ctx, bmdb.ListOptions{})
	if err != nil || len(ms) != 3 {
		t.Fatalf("list: %d machines, %v", len(ms), err)
	}
	got := e.srv.decorateAll(ctx, ms)
	withProgress, withAgent := 0, 0
	for i, m := range ms {
		want := e.srv.decorate(ctx, m)
		if !reflect.DeepEqual(got[i], want) {
			t.Errorf("machine %s: listed %+v, decorated alone %+v", m.Name, got[i], want)
		}
		if got[i].Progress != nil {
			withProgress++
		}
		if got[i].Agent != nil {
			withAgent++
		}
	}
	if withProgress != 1 || withAgent != 2 {
		t.Fatalf("%d machines with progress, %d with an agent: want 1 and 2", withProgress, withAgent)
	}
}
