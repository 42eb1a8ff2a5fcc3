package bmdb

import (
	"context"
	"time"
)

// SetFaultHook makes every write transaction attempt first call h with the
// operation's name; an error from h fails the attempt (a flaky database).
func (db *DB) SetFaultHook(h func(op string) error) {
	if h == nil {
		db.faultHook.Store(nil)
		return
	}
	db.faultHook.Store(&h)
}

// ExecForTest runs a statement (with ? placeholders) directly, to write data
// a test needs, such as an old deadline: time through data, not a fake clock.
func (db *DB) ExecForTest(ctx context.Context, query string, args ...any) (int64, error) {
	res, err := db.sql.ExecContext(ctx, db.q(query), args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// QueryIntForTest returns one integer a query selects.
func (db *DB) QueryIntForTest(ctx context.Context, query string, args ...any) (int64, error) {
	var n int64
	err := db.sql.QueryRowContext(ctx, db.q(query), args...).Scan(&n)
	return n, err
}

// QueryBytesForTest returns one byte string a query selects.
func (db *DB) QueryBytesForTest(ctx context.Context, query string, args ...any) ([]byte, error) {
	var b []byte
	err := db.sql.QueryRowContext(ctx, db.q(query), args...).Scan(&b)
	return b, err
}

// AuthCachedForTest says whether Authenticate's cache holds mac (MAC in
// canonical form).
func (db *DB) AuthCachedForTest(mac string) bool {
	c := &db.notify.auth
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.byMAC[mac]
	return ok
}

// ListeningForTest says whether the PostgreSQL change listener is connected
// (always false on SQLite).
func (db *DB) ListeningForTest() bool { return db.listening.Load() }

// IdleCachedForTest says whether PendingCommand remembers that machine id
// has no command.
func (db *DB) IdleCachedForTest(id string) bool { return db.notify.idle.idle(id, time.Now()) }
