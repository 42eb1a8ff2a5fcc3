package bmdb

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// notifier wakes the goroutines of this process that wait for a change of a
// machine (WaitCommand). Each machine has at most one channel; a change closes
// it and the next watcher gets a fresh one. On PostgreSQL other replicas'
// changes arrive through LISTEN/NOTIFY (listen) and wake the same watchers;
// waiters also poll the database, for a listener that is reconnecting.
type notifier struct {
	// auth is Authenticate's cache, idle PendingCommand's; every wake of
	// a machine drops its entries first (authcache.go).
	auth authCache
	idle idleCache

	mu sync.Mutex
	ch map[string]chan struct{}
	fn map[string]map[*func()]struct{} // OnChange callbacks by machine
}

// watch returns a channel that is closed at the next change of machine id.
// Take it before reading the database so no change falls in between.
func (n *notifier) watch(id string) <-chan struct{} {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.ch == nil {
		n.ch = make(map[string]chan struct{})
	}
	c, ok := n.ch[id]
	if !ok {
		c = make(chan struct{})
		n.ch[id] = c
	}
	return c
}

// onChange registers fn to be called once at the next change of machine
// id; cancel drops it if it was not called yet.
func (n *notifier) onChange(id string, fn func()) (cancel func()) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.fn == nil {
		n.fn = make(map[string]map[*func()]struct{})
	}
	set := n.fn[id]
	if set == nil {
		set = make(map[*func()]struct{})
		n.fn[id] = set
	}
	key := &fn
	set[key] = struct{}{}
	return func() {
		n.mu.Lock()
		defer n.mu.Unlock()
		if set := n.fn[id]; set != nil {
			delete(set, key)
			if len(set) == 0 {
				delete(n.fn, id)
			}
		}
	}
}

// changed drops what the caches hold of machine id, then wakes its
// watchers. Call it after the commit.
func (n *notifier) changed(id string) {
	n.auth.drop(id)
	n.idle.drop(id)
	n.mu.Lock()
	if c, ok := n.ch[id]; ok {
		close(c)
		delete(n.ch, id)
	}
	set := n.fn[id]
	delete(n.fn, id)
	n.mu.Unlock()
	for fn := range set {
		(*fn)()
	}
}

// changedAll empties the caches (authcache.go) and wakes every watcher:
// changes may have been missed (the PostgreSQL listener reconnected), so
// all re-read the database.
func (n *notifier) changedAll() {
	n.auth.dropAll()
	n.idle.dropAll()
	n.mu.Lock()
	for id, c := range n.ch {
		close(c)
		delete(n.ch, id)
	}
	all := n.fn
	n.fn = nil
	n.mu.Unlock()
	for _, set := range all {
		for fn := range set {
			(*fn)()
		}
	}
}

// OnChange calls fn once at the next change of machine id's command or
// state (in this process or, on PostgreSQL, in another replica), or when
// changes may have been missed; fn must not block (start a goroutine).
// cancel drops fn if it was not called yet. A caller that waits without a
// goroutine of its own (bootyd's parked long polls) registers fn before it
// reads PendingCommand, so no command falls in between.
func (db *DB) OnChange(id string, fn func()) (cancel func()) {
	return db.notify.onChange(id, fn)
}

// notifyChannel is the PostgreSQL channel on which a replica announces that
// a machine's command or state changed; the payload is the machine ID.
const notifyChannel = "bmdb_machine"

// notifyTx makes PostgreSQL tell every replica, at commit, that machine id
// changed, so their WaitCommand calls wake at once. SQLite has one process
// and needs nothing beyond notifier.changed after the commit.
func (db *DB) notifyTx(ctx context.Context, tx *sql.Tx, id string) error {
	if db.engine != EnginePostgres {
		return nil
	}
	if _, err := tx.ExecContext(ctx, "SELECT pg_notify($1, $2)", notifyChannel, id); err != nil {
		return fmt.Errorf("notify replicas of machine %s: %w", id, err)
	}
	return nil
}

// listen keeps a dedicated PostgreSQL connection LISTENing on notifyChannel
// and wakes this process's watchers of each machine announced. A lost
// connection is re-established with backoff (100 ms doubling to 5 s); after
// each (re)connect every watcher is woken to re-read, since announcements
// may have been missed. It returns when ctx ends.
func (db *DB) listen(ctx context.Context, done chan<- struct{}) {
	defer close(done)
	delay := 100 * time.Millisecond
	for {
		connected, err := db.listenOnce(ctx)
		if ctx.Err() != nil {
			return
		}
		if connected {
			delay = 100 * time.Millisecond
		}
		db.log.Warn("machine change listener lost its connection; reconnecting", "err", err, "after", delay)
		select {
		case <-ctx.Done():
			return
		case <-time.After(delay):
		}
		delay = min(2*delay, 5*time.Second)
	}
}

func (db *DB) listenOnce(ctx context.Context) (connected bool, err error) {
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	conn, err := pgx.Connect(cctx, db.dsn)
	cancel()
	if err != nil {
		return false, fmt.Errorf("connect: %w", err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		conn.Close(cctx)
		cancel()
	}()
	if _, err := conn.Exec(ctx, "LISTEN "+notifyChannel); err != nil {
		return false, fmt.Errorf("listen: %w", err)
	}
	db.notify.changedAll()
	// From here on other replicas' changes arrive: the caches
	// (authcache.go) may be used, until this connection is lost.
	db.listening.Store(true)
	defer db.listening.Store(false)
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return true, fmt.Errorf("wait for notification: %w", err)
		}
		db.notify.changed(n.Payload)
	}
}
