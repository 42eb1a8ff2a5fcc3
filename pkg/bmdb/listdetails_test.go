package bmdb_test

import (
	"fmt"
	"testing"

	"github.com/booty-dev/booty/pkg/bmdb"
)

// ListDetails gives, in a few queries, what GetAgentSession and GetInstall
// give machine by machine; across chunks, for unknown IDs too.
func TestListDetails(t *testing.T) {
	engines(t, func(t *testing.T, db *bmdb.DB) {
		var ids []string
		for i := 1; i <= 3; i++ {
			m := mustMachine(t, db, fmt.Sprintf("ld%d", i), i)
			ids = append(ids, m.ID)
		}
		// 1: enrolled, provisioning with progress; 2: enrolled; 3: neither.
		must[bmdb.Enrolled](t)(db.Enroll(ctx(t), bmdb.Enrollment{MACs: []string{mac(1)}, Hardware: hw}))
		must[bmdb.Enrolled](t)(db.Enroll(ctx(t), bmdb.Enrollment{MACs: []string{mac(2)}}))
		m := must[bmdb.Machine](t)(db.Transition(ctx(t), ids[0], bmdb.Transition{To: bmdb.StateInspecting, Command: bmdb.CommandInspect, Reason: "Inspect"}))
		m = must[bmdb.Machine](t)(db.CompleteCommand(ctx(t), ids[0], m.Generation, bmdb.CommandResult{}))
		m = must[bmdb.Machine](t)(db.Transition(ctx(t), ids[0], bmdb.Transition{To: bmdb.StateProvisioning, Command: bmdb.CommandProvision, Reason: "Provision"}))
		if err := db.ReportProgress(ctx(t), ids[0], m.Generation, bmdb.Progress{Step: "stream-image", BytesDone: 512, BytesTotal: 1024}); err != nil {
			t.Fatal(err)
		}
		all := append([]string{"no-such-machine"}, ids...)
		for i := 0; i < 1200; i++ { // more than one chunk
			all = append(all, fmt.Sprintf("unknown-%d", i))
		}
		d := must[bmdb.ListDetails](t)(db.ListDetails(ctx(t), all))
		for _, id := range ids[:2] {
			want := must[bmdb.AgentSession](t)(db.GetAgentSession(ctx(t), id))
			if got, ok := d.Sessions[id]; !ok || got != want {
				t.Errorf("session of %s: %+v, GetAgentSession says %+v", id, got, want)
			}
		}
		if _, ok := d.Sessions[ids[2]]; ok || len(d.Sessions) != 2 {
			t.Errorf("sessions %+v: want those of the 2 enrolled machines", d.Sessions)
		}
		want := must[bmdb.Install](t)(db.GetInstall(ctx(t), ids[0], 0)).Progress
		if got := d.Progress[ids[0]]; got != want || got.BytesDone != 512 {
			t.Errorf("progress %+v, GetInstall says %+v", got, want)
		}
		if len(d.Progress) != 1 {
			t.Errorf("progress of %d machines, want 1: %+v", len(d.Progress), d.Progress)
		}
	})
}
