package bmdb

import (
	"context"
	"database/sql"
	"sync"
)

// stmtCache holds the prepared statements of the queries every agent
// request runs (Authenticate, PendingCommand). On SQLite, parsing and
// planning such a query took as long as running it: a fifth of bootyd's CPU
// under 10,000 agents. PostgreSQL's driver (pgx) caches prepared statements
// itself.
type stmtCache struct {
	m sync.Map // query → *sql.Stmt
}

// queryRow runs query like sql.DB.QueryRowContext, through a prepared
// statement on SQLite. A statement that cannot be prepared falls back to a
// plain query (which then reports the error).
func (db *DB) queryRow(ctx context.Context, query string, args ...any) *sql.Row {
	query = db.q(query)
	if db.engine != EngineSQLite {
		return db.sql.QueryRowContext(ctx, query, args...)
	}
	if s, ok := db.stmts.m.Load(query); ok {
		return s.(*sql.Stmt).QueryRowContext(ctx, args...)
	}
	s, err := db.sql.PrepareContext(ctx, query)
	if err != nil {
		return db.sql.QueryRowContext(ctx, query, args...)
	}
	if prev, loaded := db.stmts.m.LoadOrStore(query, s); loaded {
		s.Close()
		s = prev.(*sql.Stmt)
	}
	return s.QueryRowContext(ctx, args...)
}

// close closes every cached statement.
func (c *stmtCache) close() {
	c.m.Range(func(k, v any) bool {
		v.(*sql.Stmt).Close()
		c.m.Delete(k)
		return true
	})
}
