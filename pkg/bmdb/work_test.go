package bmdb_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/booty-dev/booty/pkg/bmdb"
	"github.com/booty-dev/booty/pkg/bmdb/bmdbtest"
)

func startSession(t *testing.T, db *bmdb.DB, interval time.Duration) *bmdb.Session {
	t.Helper()
	s, err := db.StartSession(ctx(t), bmdb.SessionConfig{Component: "test", Interval: interval})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(ctx(t)) })
	return s
}

// Many goroutines over several sessions claim the same few machines again
// and again: no machine is ever held twice at once, by the in-process check
// and by the work history.
func TestClaimRace(t *testing.T) {
	engines(t, func(t *testing.T, db *bmdb.DB) {
		const machines, sessions, perSession, claims = 10, 4, 3, 300
		for i := 0; i < machines; i++ {
			mustMachine(t, db, fmt.Sprintf("race-%d", i), i)
		}
		var held sync.Map // machine → *atomic.Bool
		for i := 0; i < machines; i++ {
			m := must[[]bmdb.Machine](t)(db.ListMachines(ctx(t), bmdb.ListOptions{}))[i]
			held.Store(m.ID, new(atomic.Bool))
		}
		var left atomic.Int64
		left.Store(claims)
		var wg sync.WaitGroup
		errs := make(chan error, sessions*perSession)
		for s := 0; s < sessions; s++ {
			sess := startSession(t, db, 10*time.Second)
			for g := 0; g < perSession; g++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for left.Add(-1) >= 0 {
						w, err := sess.Claim(ctx(t), "race", bmdb.Filter{})
						if errors.Is(err, bmdb.ErrNothingToDo) {
							time.Sleep(time.Millisecond)
							continue
						}
						if err != nil {
							errs <- err
							return
						}
						h, _ := held.Load(w.MachineID)
						if !h.(*atomic.Bool).CompareAndSwap(false, true) {
							errs <- fmt.Errorf("machine %s claimed while held", w.MachineID)
							return
						}
						time.Sleep(time.Duration(rand.IntN(500)) * time.Microsecond)
						h.(*atomic.Bool).Store(false)
						if rand.IntN(10) == 0 {
							err = w.Cancel(ctx(t), "test cancel")
						} else {
							err = w.Finish(ctx(t), nil)
						}
						if err != nil {
							errs <- err
							return
						}
					}
				}()
			}
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		hist := must[[]bmdb.WorkEvent](t)(db.WorkHistory(ctx(t), ""))
		total := 0
		checkHistory(t, hist, func(_ string, n int) { total += n })
		if total == 0 || total > claims {
			t.Fatalf("%d claims in the history, want 1..%d", total, claims)
		}
		t.Logf("%d claims", total)
	})
}

// Work held by a session whose lease lapsed is reclaimed by the next claim
// (Monogon left such machines locked forever); the old holder can no longer
// finish it.
func TestReclaimAfterSessionExpiry(t *testing.T) {
	engines(t, func(t *testing.T, db *bmdb.DB) {
		m := mustMachine(t, db, "reclaim", 1)
		a := startSession(t, db, 10*time.Second)
		b := startSession(t, db, 10*time.Second)
		wa := must[*bmdb.Work](t)(a.Claim(ctx(t), "recover", bmdb.Filter{MachineID: m.ID}))
		_, err := b.Claim(ctx(t), "recover", bmdb.Filter{MachineID: m.ID})
		wantErr(t, err, bmdb.ErrNothingToDo)
		// Another process may claim the same machine.
		wo := must[*bmdb.Work](t)(b.Claim(ctx(t), "inspect", bmdb.Filter{MachineID: m.ID}))
		// ...unless it is exclusive with the held one.
		_, err = b.Claim(ctx(t), "provision", bmdb.Filter{MachineID: m.ID, Exclusive: []bmdb.Process{"recover"}})
		wantErr(t, err, bmdb.ErrNothingToDo)
		if err := wo.Finish(ctx(t), nil); err != nil {
			t.Fatal(err)
		}

		// Session a's deadline passes: written as data, not a fake clock.
		old := time.Now().Add(-time.Minute).UnixMilli()
		must[int64](t)(db.ExecForTest(ctx(t), "UPDATE sessions SET deadline = ? WHERE id = ?", old, a.ID()))
		wb := must[*bmdb.Work](t)(b.Claim(ctx(t), "recover", bmdb.Filter{MachineID: m.ID}))
		if wb.MachineID != m.ID {
			t.Fatalf("claimed %s", wb.MachineID)
		}
		err = wa.Finish(ctx(t), nil)
		if !errors.Is(err, bmdb.ErrWorkLost) && !errors.Is(err, bmdb.ErrSessionExpired) {
			t.Fatalf("finish by the expired holder: %v, want ErrWorkLost or ErrSessionExpired", err)
		}
		if err := wb.Finish(ctx(t), nil); err != nil {
			t.Fatal(err)
		}
		hist := must[[]bmdb.WorkEvent](t)(db.WorkHistory(ctx(t), m.ID))
		var reclaimed bool
		for _, e := range hist {
			if e.Event == bmdb.WorkCancelled && e.SessionID == a.ID() && e.Process == "recover" {
				reclaimed = true
			}
		}
		if !reclaimed {
			t.Fatalf("no cancelled entry for the expired session in %+v", hist)
		}
		checkHistory(t, hist, func(string, int) {})
		// The expired session learns it: Claim refuses, Done is closed.
		_, err = a.Claim(ctx(t), "other", bmdb.Filter{})
		wantErr(t, err, bmdb.ErrSessionExpired)
		select {
		case <-a.Done():
		case <-time.After(30 * time.Second):
			t.Fatal("expired session not done within 30s")
		}

		// ReclaimExpired sweeps expired sessions with their work.
		c := startSession(t, db, 10*time.Second)
		must[*bmdb.Work](t)(c.Claim(ctx(t), "sweep", bmdb.Filter{MachineID: m.ID}))
		must[int64](t)(db.ExecForTest(ctx(t), "UPDATE sessions SET deadline = ? WHERE id = ?", old, c.ID()))
		if n := must[int](t)(db.ReclaimExpired(ctx(t))); n < 1 {
			t.Fatalf("ReclaimExpired removed %d sessions", n)
		}
		if n := must[int64](t)(db.QueryIntForTest(ctx(t), "SELECT COUNT(*) FROM work WHERE session_id = ?", c.ID())); n != 0 {
			t.Fatalf("%d work rows of a swept session", n)
		}

		// A machine with work held by a live session is not deleted.
		must[bmdb.Machine](t)(db.Transition(ctx(t), m.ID, bmdb.Transition{To: bmdb.StateDeleting, Reason: "Delete"}))
		wd := must[*bmdb.Work](t)(b.Claim(ctx(t), "recover", bmdb.Filter{MachineID: m.ID}))
		wantErr(t, db.DeleteMachine(ctx(t), m.ID), bmdb.ErrConflict)
		if err := wd.Finish(ctx(t), nil); err != nil {
			t.Fatal(err)
		}
		if err := db.DeleteMachine(ctx(t), m.ID); err != nil {
			t.Fatal(err)
		}
		if len(must[[]bmdb.WorkEvent](t)(db.WorkHistory(ctx(t), m.ID))) == 0 {
			t.Fatal("the work history went with the machine")
		}
	})
}

func TestBackoff(t *testing.T) {
	// The interval arithmetic: growth, whole seconds, cap.
	b := bmdb.Backoff{Initial: time.Second, Maximum: 10 * time.Second, Exponent: 2}
	var got []time.Duration
	var last time.Duration
	for i := 0; i < 6; i++ {
		last = b.Next(last)
		got = append(got, last)
	}
	want := []time.Duration{1, 2, 4, 8, 10, 10}
	for i := range want {
		if got[i] != want[i]*time.Second {
			t.Fatalf("intervals %v, want %v seconds", got, want)
		}
	}
	if n := (bmdb.Backoff{Initial: time.Second, Maximum: time.Minute, Exponent: 1.1}).Next(time.Second); n != 2*time.Second {
		t.Fatalf("1s × 1.1 rounds to %s, want 2s (whole seconds, up)", n)
	}
	if n := (bmdb.Backoff{Initial: 5 * time.Second}).Next(time.Minute); n != 5*time.Second {
		t.Fatalf("non-exponential backoff gave %s, want Initial", n)
	}
	if n := (bmdb.Backoff{}).Next(0); n != time.Second {
		t.Fatalf("zero backoff gave %s, want 1s", n)
	}

	// Persisted per (machine, process): growth, cap, jitter, reset by Finish.
	engines(t, func(t *testing.T, db *bmdb.DB) {
		m := mustMachine(t, db, "backoff", 1)
		s := startSession(t, db, 10*time.Second)
		b := bmdb.Backoff{Initial: 60 * time.Second, Maximum: 200 * time.Second, Exponent: 2, Jitter: 0.5}
		expire := func() {
			must[int64](t)(db.ExecForTest(ctx(t), "UPDATE work_backoff SET until_at = ? WHERE machine_id = ?", time.Now().Add(-time.Second).UnixMilli(), m.ID))
		}
		for i, want := range []time.Duration{60, 120, 200, 200} {
			w := must[*bmdb.Work](t)(s.Claim(ctx(t), "p", bmdb.Filter{}))
			before := time.Now()
			if err := w.Fail(ctx(t), b, fmt.Sprintf("failure %d", i)); err != nil {
				t.Fatal(err)
			}
			st := must[bmdb.BackoffState](t)(db.GetBackoff(ctx(t), m.ID, "p"))
			if st.LastInterval != want*time.Second || st.Cause != fmt.Sprintf("failure %d", i) {
				t.Fatalf("failure %d: backoff %+v, want interval %ds", i, st, want)
			}
			// Jitter shortens the wait by at most half, never lengthens it.
			wait := st.Until.Sub(before)
			if wait > want*time.Second+time.Second || wait < want*time.Second/2-time.Second {
				t.Fatalf("failure %d: waits %s for interval %ds with jitter 0.5", i, wait, want)
			}
			// In backoff: not claimed for p, but for another process it is.
			_, err := s.Claim(ctx(t), "p", bmdb.Filter{})
			wantErr(t, err, bmdb.ErrNothingToDo)
			wo := must[*bmdb.Work](t)(s.Claim(ctx(t), "q", bmdb.Filter{}))
			must[struct{}](t)(struct{}{}, wo.Cancel(ctx(t), "done"))
			expire()
		}
		w := must[*bmdb.Work](t)(s.Claim(ctx(t), "p", bmdb.Filter{}))
		if err := w.Finish(ctx(t), nil); err != nil {
			t.Fatal(err)
		}
		_, err := db.GetBackoff(ctx(t), m.ID, "p")
		wantErr(t, err, bmdb.ErrNotFound)
		w = must[*bmdb.Work](t)(s.Claim(ctx(t), "p", bmdb.Filter{}))
		if err := w.Fail(ctx(t), b, "again"); err != nil {
			t.Fatal(err)
		}
		if st := must[bmdb.BackoffState](t)(db.GetBackoff(ctx(t), m.ID, "p")); st.LastInterval != 60*time.Second {
			t.Fatalf("after a Finish the backoff restarts at Initial, got %s", st.LastInterval)
		}
		// Ending work twice is refused.
		wantErr(t, w.Finish(ctx(t), nil), bmdb.ErrConflict)
	})
}

// The session keeper survives a flaky database: with every other poke
// failing the session stays alive well past its interval; when every poke
// fails it ends once the lease lapses.
func TestSessionKeeperFlakyDatabase(t *testing.T) {
	engines(t, func(t *testing.T, db *bmdb.DB) {
		m := mustMachine(t, db, "flaky", 1)
		s := startSession(t, db, time.Second)
		var pokes, failed atomic.Int64
		db.SetFaultHook(func(op string) error {
			if op != "poke session" {
				return nil
			}
			if pokes.Add(1)%2 == 1 {
				failed.Add(1)
				return errors.New("injected: connection reset")
			}
			return nil
		})
		t.Cleanup(func() { db.SetFaultHook(nil) })
		deadline := time.Now().Add(4 * time.Second)
		for time.Now().Before(deadline) {
			if err := s.Err(); err != nil {
				t.Fatalf("session ended after %d failed of %d pokes: %v", failed.Load(), pokes.Load(), err)
			}
			time.Sleep(100 * time.Millisecond)
		}
		if failed.Load() < 3 {
			t.Fatalf("only %d pokes failed: the test did not exercise failures", failed.Load())
		}
		w := must[*bmdb.Work](t)(s.Claim(ctx(t), "p", bmdb.Filter{MachineID: m.ID}))
		if err := w.Finish(ctx(t), nil); err != nil {
			t.Fatal(err)
		}

		db.SetFaultHook(func(op string) error {
			if op == "poke session" {
				return errors.New("injected: database down")
			}
			return nil
		})
		select {
		case <-s.Done():
		case <-time.After(30 * time.Second):
			t.Fatal("session alive 30s after its database went away")
		}
		wantErr(t, s.Err(), bmdb.ErrSessionExpired)
		_, err := s.Claim(ctx(t), "p", bmdb.Filter{MachineID: m.ID})
		wantErr(t, err, bmdb.ErrSessionExpired)
	})
}

// On PostgreSQL, a real fault: every connection of the session's database is
// killed again and again (pg_terminate_backend); the pool reconnects and the
// session lives on.
func TestSessionSurvivesKilledConnections(t *testing.T) {
	dsn := bmdbtest.PostgresDSN(t)
	db := open(t, dsn)
	killer := open(t, dsn)
	s := startSession(t, db, time.Second)
	kills := 0
	for end := time.Now().Add(4 * time.Second); time.Now().Before(end); {
		n, err := killer.QueryIntForTest(ctx(t), `SELECT COUNT(*) FROM (SELECT pg_terminate_backend(pid) AS ok FROM pg_stat_activity
			WHERE datname = current_database() AND pid <> pg_backend_pid()) k WHERE ok`)
		if err != nil {
			t.Fatal(err)
		}
		kills += int(n)
		if err := s.Err(); err != nil {
			t.Fatalf("session ended after %d killed connections: %v", kills, err)
		}
		time.Sleep(150 * time.Millisecond)
	}
	if kills == 0 {
		t.Fatal("no connection was killed: the test exercised nothing")
	}
	m := mustMachine(t, db, "after-kills", 1)
	w := must[*bmdb.Work](t)(s.Claim(ctx(t), "p", bmdb.Filter{MachineID: m.ID}))
	if err := w.Finish(ctx(t), nil); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d connections killed", kills)
}

// Filter.AgentSilentFor picks machines whose agent is silent: never
// enrolled, ended, or last heard from too long ago (written as data). The
// work history stays bounded per machine.
func TestClaimSilentAgentsAndHistoryBound(t *testing.T) {
	engines(t, func(t *testing.T, db *bmdb.DB) {
		s := startSession(t, db, 10*time.Second)
		talking := must[bmdb.Enrolled](t)(db.Enroll(ctx(t), bmdb.Enrollment{MACs: []string{mac(1)}})).Machine
		silent := must[bmdb.Enrolled](t)(db.Enroll(ctx(t), bmdb.Enrollment{MACs: []string{mac(2)}})).Machine
		never := mustMachine(t, db, "never", 3)
		must[int64](t)(db.ExecForTest(ctx(t), "UPDATE agent_sessions SET heartbeat_at = ? WHERE machine_id = ?", time.Now().Add(-time.Hour).UnixMilli(), silent.ID))
		got := map[string]bool{}
		for {
			w, err := s.Claim(ctx(t), "recover", bmdb.Filter{AgentSilentFor: 10 * time.Minute})
			if errors.Is(err, bmdb.ErrNothingToDo) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			got[w.MachineID] = true
			if len(got) > 3 {
				t.Fatal("claimed more machines than exist")
			}
		}
		if !got[silent.ID] || !got[never.ID] || got[talking.ID] || len(got) != 2 {
			t.Fatalf("claimed %v: want the silent and the never-enrolled machine, not the talking one", got)
		}

		for i := 0; i < 30; i++ {
			w := must[*bmdb.Work](t)(s.Claim(ctx(t), "loop", bmdb.Filter{MachineID: talking.ID}))
			if err := w.Finish(ctx(t), nil); err != nil {
				t.Fatal(err)
			}
		}
		if n := len(must[[]bmdb.WorkEvent](t)(db.WorkHistory(ctx(t), talking.ID))); n > 10+1 {
			t.Fatalf("%d work history entries kept for one machine, bound 10", n)
		}
	}, bmdb.WithWorkHistoryLimit(10))
}
