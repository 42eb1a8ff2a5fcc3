package bmdb_test

import (
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/booty-dev/booty/pkg/bmdb"
	"github.com/booty-dev/booty/pkg/bmdb/bmdbtest"
)

var hw = json.RawMessage(`{"cpu":{"arch":"x86_64","count":2},"ramMebibytes":2048,"storage":[{"name":"/dev/vda","sizeBytes":10737418240,"rotational":false,"type":"SSD"}]}`)

func TestEnrollTokensAndSessions(t *testing.T) {
	engines(t, func(t *testing.T, db *bmdb.DB) {
		// An unknown machine appears as discovered.
		en := must[bmdb.Enrolled](t)(db.Enroll(ctx(t), bmdb.Enrollment{MACs: []string{mac(1), mac(2)}, Hardware: hw}))
		m := en.Machine
		if !en.Discovered || m.Status != bmdb.StatusDiscovered || m.State != bmdb.StateRegistering || len(m.MACs) != 2 {
			t.Fatalf("enrolled: %+v", en)
		}
		if len(en.Token) < 40 {
			t.Fatalf("token %d characters", len(en.Token))
		}
		// Only the SHA-256 of the token is stored.
		stored := must[[]byte](t)(db.QueryBytesForTest(ctx(t), "SELECT token_hash FROM agent_sessions WHERE machine_id = ?", m.ID))
		if sum := sha256.Sum256([]byte(en.Token)); string(stored) != string(sum[:]) {
			t.Fatalf("stored hash %x is not the token's SHA-256", stored)
		}
		got := must[json.RawMessage](t)(func() (json.RawMessage, error) { r, _, err := db.Hardware(ctx(t), m.ID); return r, err }())
		if !strings.Contains(string(got), `"ramMebibytes":2048`) {
			t.Fatalf("hardware %s", got)
		}

		// The token authenticates, by any of the machine's MACs.
		if id, err := db.Authenticate(ctx(t), mac(2), en.Token); err != nil || id != m.ID {
			t.Fatalf("authenticate: %q %v", id, err)
		}
		// Unknown MAC, malformed MAC and wrong token: the same error.
		_, e1 := db.Authenticate(ctx(t), mac(99), en.Token)
		_, e2 := db.Authenticate(ctx(t), mac(1), en.Token+"x")
		_, e3 := db.Authenticate(ctx(t), "zz", en.Token)
		_, e4 := db.Authenticate(ctx(t), mac(1), "")
		for _, e := range []error{e1, e2, e3, e4} {
			if e != bmdb.ErrUnauthorized {
				t.Fatalf("authenticate errors %v / %v / %v / %v: want the same ErrUnauthorized", e1, e2, e3, e4)
			}
		}

		// A second enrollment while the session is live is refused and recorded.
		_, err := db.Enroll(ctx(t), bmdb.Enrollment{MACs: []string{mac(1)}})
		wantErr(t, err, bmdb.ErrSessionLive)
		wantErr(t, err, bmdb.ErrConflict)
		ev := must[[]bmdb.Event](t)(db.Events(ctx(t), m.ID, 0, 0))
		if last := ev[len(ev)-1]; last.Reason != "EnrollmentRefused" || last.Type != bmdb.EventWarning {
			t.Fatalf("last event %+v, want EnrollmentRefused", last)
		}
		if _, err := db.Authenticate(ctx(t), mac(1), en.Token); err != nil {
			t.Fatalf("the refused enrollment broke the live session: %v", err)
		}

		// Heartbeats keep it; a silent session (old heartbeat, written as
		// data) lets a new boot enroll, and the old token stops working.
		if err := db.Heartbeat(ctx(t), m.ID); err != nil {
			t.Fatal(err)
		}
		s := must[bmdb.AgentSession](t)(db.GetAgentSession(ctx(t), m.ID))
		if !s.Live {
			t.Fatalf("session %+v not live after a heartbeat", s)
		}
		old := time.Now().Add(-time.Hour).UnixMilli()
		must[int64](t)(db.ExecForTest(ctx(t), "UPDATE agent_sessions SET heartbeat_at = ? WHERE machine_id = ?", old, m.ID))
		en2 := must[bmdb.Enrolled](t)(db.Enroll(ctx(t), bmdb.Enrollment{MACs: []string{mac(1), mac(3)}}))
		if en2.Discovered || en2.Machine.ID != m.ID || len(en2.Machine.MACs) != 3 {
			t.Fatalf("re-enrollment: %+v", en2)
		}
		if _, err := db.Authenticate(ctx(t), mac(1), en.Token); err != bmdb.ErrUnauthorized {
			t.Fatalf("old token after re-enrollment: %v", err)
		}
		// Ending the session ends the token too.
		if err := db.EndAgentSession(ctx(t), m.ID, "test"); err != nil {
			t.Fatal(err)
		}
		if _, err := db.Authenticate(ctx(t), mac(3), en2.Token); err != bmdb.ErrUnauthorized {
			t.Fatalf("token of an ended session: %v", err)
		}
		wantErr(t, db.Heartbeat(ctx(t), m.ID), bmdb.ErrNotFound)

		// MACs of two machines conflict; bad input names what is wrong.
		other := mustMachine(t, db, "other", 50)
		_, err = db.Enroll(ctx(t), bmdb.Enrollment{MACs: []string{mac(1), other.BootMAC}})
		wantErr(t, err, bmdb.ErrConflict)
		_, err = db.Enroll(ctx(t), bmdb.Enrollment{})
		wantErr(t, err, bmdb.ErrInvalid)
		_, err = db.Enroll(ctx(t), bmdb.Enrollment{MACs: []string{mac(7)}, Hardware: json.RawMessage(`[]`)})
		wantErr(t, err, bmdb.ErrInvalid)
	})
}

func TestEnrollWithoutAutoDiscovery(t *testing.T) {
	engines(t, func(t *testing.T, db *bmdb.DB) {
		_, err := db.Enroll(ctx(t), bmdb.Enrollment{MACs: []string{mac(1)}})
		wantErr(t, err, bmdb.ErrNotFound)
		if n := len(must[[]bmdb.Machine](t)(db.ListMachines(ctx(t), bmdb.ListOptions{}))); n != 0 {
			t.Fatalf("%d machines", n)
		}
		m := mustMachine(t, db, "known", 1)
		en := must[bmdb.Enrolled](t)(db.Enroll(ctx(t), bmdb.Enrollment{MACs: []string{mac(1)}}))
		if en.Machine.ID != m.ID || en.Discovered {
			t.Fatalf("enrolled %+v", en)
		}
	}, bmdb.WithoutAutoDiscovery())
}

func TestDiscoveredMachinesBounded(t *testing.T) {
	engines(t, func(t *testing.T, db *bmdb.DB) {
		for i := 0; i < 3; i++ {
			must[bmdb.Enrolled](t)(db.Enroll(ctx(t), bmdb.Enrollment{MACs: []string{mac(i)}}))
		}
		_, err := db.Enroll(ctx(t), bmdb.Enrollment{MACs: []string{mac(3)}})
		wantErr(t, err, bmdb.ErrLimit)
	}, bmdb.WithMaxDiscovered(3))
}

// The whole flow of commands: inspect, provision (a failure, then a retry),
// deprovision, delete; stale generations are refused on the way.
func TestCommandFlow(t *testing.T) {
	engines(t, func(t *testing.T, db *bmdb.DB) {
		en := must[bmdb.Enrolled](t)(db.Enroll(ctx(t), bmdb.Enrollment{MACs: []string{mac(1)}, Hardware: hw}))
		id := en.Machine.ID
		if c := must[*bmdb.Command](t)(db.PendingCommand(ctx(t), id)); c != nil {
			t.Fatalf("command %+v before any was issued", c)
		}
		// A waiting agent is woken by the command.
		type res struct {
			c   *bmdb.Command
			err error
		}
		got := make(chan res, 1)
		go func() {
			c, err := db.WaitCommand(ctx(t), id, time.Minute)
			got <- res{c, err}
		}()
		time.Sleep(50 * time.Millisecond)
		m := must[bmdb.Machine](t)(db.Transition(ctx(t), id, bmdb.Transition{To: bmdb.StateInspecting, Command: bmdb.CommandInspect, Reason: "Inspect"}))
		var r res
		select {
		case r = <-got:
		case <-time.After(30 * time.Second):
			t.Fatal("WaitCommand was not woken within 30s")
		}
		if r.err != nil || r.c == nil || r.c.Kind != bmdb.CommandInspect || r.c.Generation != m.Generation {
			t.Fatalf("waited command %+v %v", r.c, r.err)
		}
		m = must[bmdb.Machine](t)(db.CompleteCommand(ctx(t), id, m.Generation, bmdb.CommandResult{}))
		if m.State != bmdb.StateAvailable || m.Command != "" {
			t.Fatalf("after inspection: %s %q", m.State, m.Command)
		}
		// Retried completion report: no change, no error.
		m = must[bmdb.Machine](t)(db.CompleteCommand(ctx(t), id, m.Generation, bmdb.CommandResult{}))

		// No command: WaitCommand returns nil after its wait.
		if c, err := db.WaitCommand(ctx(t), id, 100*time.Millisecond); c != nil || err != nil {
			t.Fatalf("WaitCommand without a command: %+v %v", c, err)
		}

		spec := bmdb.Spec{Image: bmdb.Image{URL: "http://10.0.0.1/a.raw", Checksum: "sha256:ab"}, Hostname: "n1",
			RootDeviceHints: &bmdb.RootDeviceHints{DeviceName: "/dev/vda"}, UserData: "#cloud-config\n"}
		m = must[bmdb.Machine](t)(db.UpdateMachine(ctx(t), id, 0, bmdb.MachineUpdate{Spec: &spec}))
		m = must[bmdb.Machine](t)(db.Transition(ctx(t), id, bmdb.Transition{To: bmdb.StateProvisioning, Command: bmdb.CommandProvision, Reason: "Provision", Generation: m.Generation}))
		gen := m.Generation
		c := must[*bmdb.Command](t)(db.PendingCommand(ctx(t), id))
		if c.Kind != bmdb.CommandProvision || c.Generation != gen || c.Spec.Image.URL != spec.Image.URL {
			t.Fatalf("provision command %+v", c)
		}
		// The spec cannot change under a running install.
		_, err := db.UpdateMachine(ctx(t), id, 0, bmdb.MachineUpdate{Spec: &bmdb.Spec{Hostname: "other"}})
		wantErr(t, err, bmdb.ErrConflict)
		// Reports at a stale generation are refused.
		wantErr(t, db.ReportStep(ctx(t), id, gen-1, bmdb.StepReport{Index: 1, Total: 3, Name: "select-disk", Result: bmdb.StepStarted}), bmdb.ErrStaleGeneration)
		wantErr(t, db.ReportProgress(ctx(t), id, gen-1, bmdb.Progress{BytesDone: 1}), bmdb.ErrStaleGeneration)
		_, err = db.CompleteCommand(ctx(t), id, gen-1, bmdb.CommandResult{})
		wantErr(t, err, bmdb.ErrStaleGeneration)
		wantErr(t, db.ReportStep(ctx(t), id, gen, bmdb.StepReport{Index: 0, Name: "x", Result: bmdb.StepStarted}), bmdb.ErrInvalid)

		steps := []bmdb.StepReport{
			{Index: 1, Total: 2, Name: "select-disk", Result: bmdb.StepSucceeded, Duration: 120 * time.Millisecond, Detail: map[string]string{"disk": "/dev/vda"}},
			{Index: 2, Total: 2, Name: "stream-image", Result: bmdb.StepStarted},
		}
		for _, s := range steps {
			if err := db.ReportStep(ctx(t), id, gen, s); err != nil {
				t.Fatal(err)
			}
		}
		if err := db.ReportProgress(ctx(t), id, gen, bmdb.Progress{Step: "stream-image", BytesDone: 512, BytesTotal: 1024}); err != nil {
			t.Fatal(err)
		}
		if err := db.ReportStep(ctx(t), id, gen, bmdb.StepReport{Index: 2, Total: 2, Name: "stream-image", Result: bmdb.StepFailed, Error: "checksum mismatch"}); err != nil {
			t.Fatal(err)
		}
		in := must[bmdb.Install](t)(db.GetInstall(ctx(t), id, gen))
		if len(in.Steps) != 2 || in.Steps[0].Detail["disk"] != "/dev/vda" || in.Steps[0].Duration != 120*time.Millisecond ||
			in.Steps[1].Result != bmdb.StepFailed || in.Progress.BytesDone != 512 || in.Progress.BytesTotal != 1024 {
			t.Fatalf("install %+v", in)
		}
		m = must[bmdb.Machine](t)(db.CompleteCommand(ctx(t), id, gen, bmdb.CommandResult{Error: "stream-image: checksum mismatch"}))
		if m.State != bmdb.StateProvisioning || m.Status != bmdb.StatusError || m.Error.Type != bmdb.ErrorProvisioning || m.Error.Count != 1 || m.Command != "" {
			t.Fatalf("after a failed provision: %+v", m)
		}
		if in := must[bmdb.Install](t)(db.GetInstall(ctx(t), id, gen)); in.Result != "failed" || in.FinishedAt.IsZero() {
			t.Fatalf("failed install %+v", in)
		}
		// Retry: a new generation; the old one's reports are stale now.
		m = must[bmdb.Machine](t)(db.Transition(ctx(t), id, bmdb.Transition{To: bmdb.StateProvisioning, Command: bmdb.CommandProvision, Reason: "Retry"}))
		if m.Generation != gen+1 {
			t.Fatalf("retry generation %d, want %d", m.Generation, gen+1)
		}
		wantErr(t, db.ReportStep(ctx(t), id, gen, bmdb.StepReport{Index: 1, Name: "late", Result: bmdb.StepStarted}), bmdb.ErrStaleGeneration)
		m = must[bmdb.Machine](t)(db.CompleteCommand(ctx(t), id, m.Generation, bmdb.CommandResult{}))
		if m.State != bmdb.StateProvisioned || m.Status != bmdb.StatusOK || m.Error.Count != 0 {
			t.Fatalf("after provisioning: %+v", m)
		}
		if s := must[bmdb.AgentSession](t)(db.GetAgentSession(ctx(t), id)); s.Live || s.EndedAt.IsZero() {
			t.Fatalf("agent session after provisioning %+v: want ended (the OS boots)", s)
		}

		m = must[bmdb.Machine](t)(db.Transition(ctx(t), id, bmdb.Transition{To: bmdb.StateDeprovisioning, Command: bmdb.CommandDeprovision, Reason: "Deprovision"}))
		m = must[bmdb.Machine](t)(db.CompleteCommand(ctx(t), id, m.Generation, bmdb.CommandResult{}))
		if m.State != bmdb.StateAvailable {
			t.Fatalf("after deprovisioning: %s", m.State)
		}
		m = must[bmdb.Machine](t)(db.Transition(ctx(t), id, bmdb.Transition{To: bmdb.StatePoweringOffBeforeDelete, Command: bmdb.CommandPowerOff, Reason: "Delete"}))
		m = must[bmdb.Machine](t)(db.CompleteCommand(ctx(t), id, m.Generation, bmdb.CommandResult{}))
		if m.State != bmdb.StateDeleting {
			t.Fatalf("after power off: %s", m.State)
		}
		if err := db.DeleteMachine(ctx(t), id); err != nil {
			t.Fatal(err)
		}
		if _, err := db.Authenticate(ctx(t), mac(1), en.Token); !errors.Is(err, bmdb.ErrUnauthorized) {
			t.Fatalf("token of a deleted machine: %v", err)
		}
	})
}

// The log of a machine never holds more than its bound in bytes; the
// newest lines are kept.
func TestLogsBounded(t *testing.T) {
	const limit = 64 << 10
	engines(t, func(t *testing.T, db *bmdb.DB) {
		m := mustMachine(t, db, "logs", 1)
		line := strings.Repeat("x", 1000)
		n := 0
		for batch := 0; batch < 30; batch++ { // 30 × 100 × ~1 KiB = 3 MiB
			var lines []bmdb.LogLine
			for i := 0; i < 100; i++ {
				lines = append(lines, bmdb.LogLine{Level: "info", Message: fmt.Sprintf("%06d %s", n, line)})
				n++
			}
			if err := db.AppendLogs(ctx(t), m.ID, lines); err != nil {
				t.Fatal(err)
			}
			if b := must[int64](t)(db.LogBytes(ctx(t), m.ID)); b > limit {
				t.Fatalf("after batch %d the log holds %d bytes, bound %d", batch, b, limit)
			}
		}
		logs := must[[]bmdb.LogLine](t)(db.Logs(ctx(t), m.ID, 0))
		if len(logs) == 0 || !strings.HasPrefix(logs[len(logs)-1].Message, fmt.Sprintf("%06d", n-1)) {
			t.Fatalf("newest line missing: %d lines kept", len(logs))
		}
		if strings.HasPrefix(logs[0].Message, "000000") {
			t.Fatal("oldest line kept")
		}
		for i := 1; i < len(logs); i++ { // in the order appended, within and across batches
			if logs[i].Message[:6] <= logs[i-1].Message[:6] {
				t.Fatalf("line %d (%.6s) follows line %.6s: out of order", i, logs[i].Message, logs[i-1].Message)
			}
		}
		if len(logs) < limit/2/1100 {
			t.Fatalf("only %d lines kept, the bound allows about %d", len(logs), limit/1100)
		}
		usage := must[int64](t)(db.QueryIntForTest(ctx(t), "SELECT bytes FROM log_usage WHERE machine_id = ?", m.ID))
		if sum := must[int64](t)(db.LogBytes(ctx(t), m.ID)); usage != sum {
			t.Fatalf("log_usage %d, sum of sizes %d", usage, sum)
		}
		// One huge line is cut, not refused.
		if err := db.AppendLogs(ctx(t), m.ID, []bmdb.LogLine{{Level: "info", Message: strings.Repeat("y", 1<<20)}}); err != nil {
			t.Fatal(err)
		}
		if b := must[int64](t)(db.LogBytes(ctx(t), m.ID)); b > limit {
			t.Fatalf("log holds %d bytes after a huge line, bound %d", b, limit)
		}
	}, bmdb.WithLogLimit(limit))
}

// Reports carry the command's (or the install's) generation: an operator
// editing the spec during an inspection, or the BMC during a provision, does
// not strand the agent's reports; a newer install does make them stale.
func TestReportsFollowTheCommandGeneration(t *testing.T) {
	engines(t, func(t *testing.T, db *bmdb.DB) {
		m := mustMachine(t, db, "edit", 1)
		m = must[bmdb.Machine](t)(db.Transition(ctx(t), m.ID, bmdb.Transition{To: bmdb.StateInspecting, Command: bmdb.CommandInspect, Reason: "Inspect"}))
		inspectGen := m.Generation
		m = must[bmdb.Machine](t)(db.UpdateMachine(ctx(t), m.ID, 0, bmdb.MachineUpdate{Spec: &bmdb.Spec{Hostname: "edited"}}))
		if m.Generation != inspectGen+1 {
			t.Fatalf("spec edit: generation %d, want %d", m.Generation, inspectGen+1)
		}
		m = must[bmdb.Machine](t)(db.CompleteCommand(ctx(t), m.ID, inspectGen, bmdb.CommandResult{}))
		if m.State != bmdb.StateAvailable {
			t.Fatalf("inspection after a spec edit ended in %s", m.State)
		}

		m = must[bmdb.Machine](t)(db.Transition(ctx(t), m.ID, bmdb.Transition{To: bmdb.StateProvisioning, Command: bmdb.CommandProvision, Reason: "Provision"}))
		gen := m.Generation
		must[bmdb.Machine](t)(db.UpdateMachine(ctx(t), m.ID, 0, bmdb.MachineUpdate{BMC: &bmdb.BMC{Address: "redfish://10.0.0.9/redfish/v1/Systems/1", CredentialsRef: "x"}}))
		if err := db.ReportStep(ctx(t), m.ID, gen, bmdb.StepReport{Index: 1, Total: 1, Name: "stream-image", Result: bmdb.StepStarted}); err != nil {
			t.Fatalf("step after a BMC edit: %v", err)
		}
		// Abort into deprovisioning: a newer install; the old one's reports are stale.
		m = must[bmdb.Machine](t)(db.Transition(ctx(t), m.ID, bmdb.Transition{To: bmdb.StateDeprovisioning, Command: bmdb.CommandDeprovision, Reason: "Abort"}))
		wantErr(t, db.ReportStep(ctx(t), m.ID, gen, bmdb.StepReport{Index: 1, Total: 1, Name: "stream-image", Result: bmdb.StepSucceeded}), bmdb.ErrStaleGeneration)
		_, err := db.CompleteCommand(ctx(t), m.ID, gen, bmdb.CommandResult{})
		wantErr(t, err, bmdb.ErrStaleGeneration)
		if err := db.ReportProgress(ctx(t), m.ID, m.Generation, bmdb.Progress{Step: "wipe", BytesDone: 1}); err != nil {
			t.Fatal(err)
		}
	})
}

// On PostgreSQL a command issued by one replica wakes a long poll waiting on
// another at once (LISTEN/NOTIFY), also after the listener's connection was
// killed; the poll interval is a minute, so only the notification can.
func TestWaitCommandAcrossReplicas(t *testing.T) {
	dsn := bmdbtest.PostgresDSN(t)
	a := open(t, dsn, bmdb.WithCommandPoll(time.Minute))
	b := open(t, dsn, bmdb.WithCommandPoll(time.Minute))
	m := mustMachine(t, b, "replicas", 1)
	wait := func(want bmdb.CommandKind, issue func()) {
		t.Helper()
		got := make(chan *bmdb.Command, 1)
		errc := make(chan error, 1)
		go func() {
			c, err := a.WaitCommand(ctx(t), m.ID, 90*time.Second)
			if err != nil {
				errc <- err
				return
			}
			got <- c
		}()
		time.Sleep(200 * time.Millisecond) // let it block
		start := time.Now()
		issue()
		select {
		case c := <-got:
			if c == nil || c.Kind != want {
				t.Fatalf("woken with %+v, want %s", c, want)
			}
			t.Logf("replica a woken %s after replica b issued %s", time.Since(start).Round(time.Millisecond), want)
		case err := <-errc:
			t.Fatal(err)
		case <-time.After(30 * time.Second):
			t.Fatalf("replica a not woken within 30s of replica b issuing %s", want)
		}
	}
	wait(bmdb.CommandInspect, func() {
		must[bmdb.Machine](t)(b.Transition(ctx(t), m.ID, bmdb.Transition{To: bmdb.StateInspecting, Command: bmdb.CommandInspect, Reason: "Inspect"}))
	})
	m = must[bmdb.Machine](t)(b.CompleteCommand(ctx(t), m.ID, must[bmdb.Machine](t)(b.GetMachine(ctx(t), m.ID)).Generation, bmdb.CommandResult{}))

	// Kill every connection but b's own: a's listener among them.
	n := must[int64](t)(b.QueryIntForTest(ctx(t), `SELECT COUNT(*) FROM (SELECT pg_terminate_backend(pid) AS ok FROM pg_stat_activity
		WHERE datname = current_database() AND pid <> pg_backend_pid()) k WHERE ok`))
	if n == 0 {
		t.Fatal("no connection killed")
	}
	wait(bmdb.CommandProvision, func() {
		must[bmdb.Machine](t)(b.Transition(ctx(t), m.ID, bmdb.Transition{To: bmdb.StateProvisioning, Command: bmdb.CommandProvision, Reason: "Provision"}))
	})
}
