package bmdb_test

import (
	"fmt"
	"testing"
	"time"

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

// TestListWithBMC: WithBMC lists only the machines with a BMC address, in
// name order, paged like any listing.
func TestListWithBMC(t *testing.T) {
	engines(t, func(t *testing.T, db *bmdb.DB) {
		var want []string
		for i := range 7 {
			nm := bmdb.NewMachine{Name: fmt.Sprintf("m%d", i), BootMAC: mac(100 + i)}
			if i%3 == 0 {
				nm.BMC = bmdb.BMC{Address: fmt.Sprintf("ipmi://10.0.0.%d:623", i)}
				want = append(want, nm.Name)
			}
			must[bmdb.Machine](t)(db.CreateMachine(ctx(t), nm))
		}
		var got []string
		after := ""
		for {
			page := must[[]bmdb.Machine](t)(db.ListMachines(ctx(t), bmdb.ListOptions{WithBMC: true, AfterName: after, Limit: 2}))
			for _, m := range page {
				if m.BMC.Address == "" {
					t.Errorf("machine %s without a BMC listed", m.Name)
				}
				got = append(got, m.Name)
			}
			if len(page) < 2 {
				break
			}
			after = page[len(page)-1].Name
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("listed %v, want %v", got, want)
		}
		if n := len(must[[]bmdb.Machine](t)(db.ListMachines(ctx(t), bmdb.ListOptions{}))); n != 7 {
			t.Fatalf("%d machines without the filter, want 7", n)
		}
	})
}

// TestListAgentQuiet: AgentQuietBefore lists the machines whose agent was
// last heard from before the time: an old heartbeat, a session ended
// before it; not a fresh session, a recent end, or no session at all.
func TestListAgentQuiet(t *testing.T) {
	engines(t, func(t *testing.T, db *bmdb.DB) {
		old := time.Now().Add(-time.Hour).UnixMilli()
		ids := map[string]string{}
		for i, name := range []string{"fresh", "silent", "ended-long-ago", "ended-now", "never-enrolled"} {
			ids[name] = mustMachine(t, db, name, i+1).ID
			if name == "never-enrolled" {
				continue
			}
			must[bmdb.Enrolled](t)(db.Enroll(ctx(t), bmdb.Enrollment{MACs: []string{mac(i + 1)}}))
		}
		must[int64](t)(db.ExecForTest(ctx(t), "UPDATE agent_sessions SET heartbeat_at = ? WHERE machine_id = ?", old, ids["silent"]))
		for _, n := range []string{"ended-long-ago", "ended-now"} {
			if err := db.EndAgentSession(ctx(t), ids[n], "test"); err != nil {
				t.Fatal(err)
			}
		}
		must[int64](t)(db.ExecForTest(ctx(t), "UPDATE agent_sessions SET heartbeat_at = ?, ended_at = ? WHERE machine_id = ?", old, old, ids["ended-long-ago"]))
		var got []string
		for _, m := range must[[]bmdb.Machine](t)(db.ListMachines(ctx(t), bmdb.ListOptions{AgentQuietBefore: time.Now().Add(-10 * time.Minute)})) {
			got = append(got, m.Name)
		}
		if want := "[ended-long-ago silent]"; fmt.Sprint(got) != want {
			t.Fatalf("quiet agents %v, want %s", got, want)
		}
	})
}
