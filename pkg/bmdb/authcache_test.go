package bmdb_test

import (
	"errors"
	"testing"
	"time"

	"github.com/booty-dev/booty/pkg/bmdb"
	"github.com/booty-dev/booty/pkg/bmdb/bmdbtest"
)

// refusedWithin polls Authenticate until it refuses token, at most bound,
// and returns how long that took.
func refusedWithin(t *testing.T, db *bmdb.DB, token string, bound time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		_, err := db.Authenticate(ctx(t), mac(1), token)
		if errors.Is(err, bmdb.ErrUnauthorized) {
			return time.Since(start)
		}
		if err != nil {
			t.Fatalf("authenticate: %v", err)
		}
		if time.Since(start) > bound {
			t.Fatalf("a token that stopped working was still accepted after %s", bound)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestAuthCache: a verified token is served from the cache, and a session
// ended or replaced (a new enrollment) stops its token at once in the same
// process. A wrong token is never accepted from the cache.
func TestAuthCache(t *testing.T) {
	engines(t, func(t *testing.T, db *bmdb.DB) {
		if db.Engine() == bmdb.EnginePostgres {
			waitListening(t, db)
		}
		en := must[bmdb.Enrolled](t)(db.Enroll(ctx(t), bmdb.Enrollment{MACs: []string{mac(1)}, Hardware: hw}))
		id := must[string](t)(db.Authenticate(ctx(t), mac(1), en.Token))
		if !db.AuthCachedForTest(mac(1)) {
			t.Fatal("a verified token is not cached")
		}
		if got := must[string](t)(db.Authenticate(ctx(t), mac(1), en.Token)); got != id {
			t.Fatalf("cached authentication gave machine %s, want %s", got, id)
		}
		_, err := db.Authenticate(ctx(t), mac(1), en.Token+"x")
		wantErr(t, err, bmdb.ErrUnauthorized)

		must[struct{}](t)(struct{}{}, db.EndAgentSession(ctx(t), id, "test: end"))
		_, err = db.Authenticate(ctx(t), mac(1), en.Token)
		wantErr(t, err, bmdb.ErrUnauthorized)

		// A new enrollment replaces the token (the session timed out: its
		// last heartbeat is old): the old one stops at once.
		en2 := must[bmdb.Enrolled](t)(db.Enroll(ctx(t), bmdb.Enrollment{MACs: []string{mac(1)}}))
		must[string](t)(db.Authenticate(ctx(t), mac(1), en2.Token))
		silence(t, db, id)
		en3 := must[bmdb.Enrolled](t)(db.Enroll(ctx(t), bmdb.Enrollment{MACs: []string{mac(1)}}))
		_, err = db.Authenticate(ctx(t), mac(1), en2.Token)
		wantErr(t, err, bmdb.ErrUnauthorized)
		must[string](t)(db.Authenticate(ctx(t), mac(1), en3.Token))
	})
}

// cachedOn authenticates token on db until db caches it (at most 10 s: an
// announcement of the enrollment arriving during the check keeps it from
// being cached) and returns its machine.
func cachedOn(t *testing.T, db *bmdb.DB, token string) string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		id := must[string](t)(db.Authenticate(ctx(t), mac(1), token))
		if db.AuthCachedForTest(mac(1)) {
			return id
		}
		if time.Now().After(deadline) {
			t.Fatal("a verified token was not cached within 10s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// silence makes machine id's agent session time out: its last heartbeat
// an hour ago (written directly: no change is announced).
func silence(t *testing.T, db *bmdb.DB, id string) {
	t.Helper()
	must[int64](t)(db.ExecForTest(ctx(t), "UPDATE agent_sessions SET heartbeat_at = ? WHERE machine_id = ?", time.Now().Add(-time.Hour).UnixMilli(), id))
}

// waitListening waits (at most 30 s) until db's change listener is
// connected: before that the authentication cache is not used.
func waitListening(t *testing.T, db *bmdb.DB) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !db.ListeningForTest() {
		if time.Now().After(deadline) {
			t.Fatal("the PostgreSQL change listener did not connect within 30s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestAuthCacheAcrossReplicas: two replicas on one PostgreSQL. A token
// cached by replica B is refused by B soon after replica A ends its session
// (the NOTIFY's delivery: milliseconds; the test's bound is generous for a
// loaded machine), and again after A replaces it by a new enrollment.
func TestAuthCacheAcrossReplicas(t *testing.T) {
	dsn := bmdbtest.PostgresDSN(t)
	a, b := open(t, dsn), open(t, dsn)
	waitListening(t, a)
	waitListening(t, b)
	const bound = 10 * time.Second
	en := must[bmdb.Enrolled](t)(a.Enroll(ctx(t), bmdb.Enrollment{MACs: []string{mac(1)}, Hardware: hw}))
	id := cachedOn(t, b, en.Token)
	must[struct{}](t)(struct{}{}, a.EndAgentSession(ctx(t), id, "test: ended on replica A"))
	t.Logf("replica B refused the ended session's token after %s", refusedWithin(t, b, en.Token, bound))

	// Replaced: B caches the new token; the session times out (its last
	// heartbeat is old) and A enrolls the machine's next boot; B refuses
	// the replaced token and takes the newest.
	en2 := must[bmdb.Enrolled](t)(a.Enroll(ctx(t), bmdb.Enrollment{MACs: []string{mac(1)}}))
	cachedOn(t, b, en2.Token)
	silence(t, a, id)
	en3 := must[bmdb.Enrolled](t)(a.Enroll(ctx(t), bmdb.Enrollment{MACs: []string{mac(1)}}))
	t.Logf("replica B refused the replaced token after %s", refusedWithin(t, b, en2.Token, bound))
	must[string](t)(b.Authenticate(ctx(t), mac(1), en3.Token))
}

// TestIdleCacheAcrossReplicas: replica B remembers that a machine has no
// command; a command issued on replica A wakes B's watcher of the machine,
// and B's read then finds the command (the entry was dropped before the
// wake), not the remembered absence.
func TestIdleCacheAcrossReplicas(t *testing.T) {
	dsn := bmdbtest.PostgresDSN(t)
	a, b := open(t, dsn), open(t, dsn)
	waitListening(t, a)
	waitListening(t, b)
	en := must[bmdb.Enrolled](t)(a.Enroll(ctx(t), bmdb.Enrollment{MACs: []string{mac(1)}, Hardware: hw}))
	id := en.Machine.ID
	// The enrollment's announcement may reach B during its first read;
	// read until B remembers the absence.
	deadline := time.Now().Add(10 * time.Second)
	for !b.IdleCachedForTest(id) {
		if c := must[*bmdb.Command](t)(b.PendingCommand(ctx(t), id)); c != nil {
			t.Fatalf("command %+v before any was issued", c)
		}
		if time.Now().After(deadline) {
			t.Fatal("replica B did not remember within 10s that the machine has no command")
		}
		time.Sleep(5 * time.Millisecond)
	}
	woken := make(chan *bmdb.Command, 1)
	cancel := b.OnChange(id, func() {
		go func() {
			c, _ := b.PendingCommand(ctx(t), id)
			woken <- c
		}()
	})
	defer cancel()
	if c := must[*bmdb.Command](t)(b.PendingCommand(ctx(t), id)); c != nil {
		t.Fatalf("command %+v before any was issued", c)
	}
	must[bmdb.Machine](t)(a.Transition(ctx(t), id, bmdb.Transition{To: bmdb.StateInspecting, Command: bmdb.CommandInspect, Reason: "Inspect"}))
	select {
	case c := <-woken:
		if c == nil || c.Kind != bmdb.CommandInspect {
			t.Fatalf("replica B, woken by the command, read %+v, want the inspect command", c)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("replica B's watcher was not woken within 10s of the command on replica A")
	}
}
