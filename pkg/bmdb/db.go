package bmdb

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" database/sql driver
	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// Sentinel errors. Every error the package returns that callers act on wraps
// one of these; check them with errors.Is.
var (
	// ErrNotFound: no such machine, MAC, secret, session or install.
	ErrNotFound = errors.New("not found")
	// ErrConflict: the change collides with existing data (a taken name or
	// MAC, a machine in a state that forbids the change, a live agent session).
	ErrConflict = errors.New("conflict")
	// ErrStaleGeneration: a command, report or update carried a generation
	// other than the machine's current one; nothing was changed.
	ErrStaleGeneration = errors.New("stale generation")
	// ErrInvalidTransition: the lifecycle table does not allow the transition.
	ErrInvalidTransition = errors.New("transition not allowed")
	// ErrInvalid: bad input (a malformed MAC, an empty name, JSON that is not
	// an object); the error names the field, nothing was changed.
	ErrInvalid = errors.New("invalid input")
	// ErrUnauthorized: an agent's MAC and token do not match a live agent
	// session. An unknown MAC and a wrong token give this same error.
	ErrUnauthorized = errors.New("unauthorized")
	// ErrLimit: a bound was reached (discovered machines, report size).
	ErrLimit = errors.New("limit reached")
	// ErrSessionExpired: the component session is gone or past its
	// deadline; open a new one with StartSession.
	ErrSessionExpired = errors.New("session expired")
	// ErrNothingToDo: Claim found no machine that matches and is free.
	ErrNothingToDo = errors.New("nothing to do")
	// ErrWorkLost: the work row is no longer held by this session (it expired
	// and another session reclaimed the machine). The caller must stop acting.
	ErrWorkLost = errors.New("work no longer held")
)

// Engine names, as returned by DB.Engine.
const (
	EngineSQLite   = "sqlite"
	EnginePostgres = "postgres"
)

// DB is the Bare Metal Database. It is safe for concurrent use by many
// goroutines, and several processes may share one PostgreSQL database.
type DB struct {
	sql    *sql.DB
	engine string
	opts   options
	log    *slog.Logger

	// writeMu serialises this process's write transactions on SQLite, which
	// has one writer at a time anyway: waiting on a mutex is cheaper than
	// SQLite's sleeping busy handler. BEGIN IMMEDIATE and the busy timeout
	// still guard against other processes on the same file.
	writeMu sync.Mutex

	notify notifier
	stmts  stmtCache
	// dsn and stopListen/listenDone run the PostgreSQL change listener.
	dsn        string
	stopListen context.CancelFunc
	listenDone chan struct{}
	// listening is set while the listener receives other replicas'
	// notifications; only then may Authenticate use its cache.
	listening atomic.Bool

	// faultHook, when set (tests only), is called at the start of every write
	// transaction attempt with the operation's name; an error it returns
	// fails that attempt as a database error would.
	faultHook atomic.Pointer[func(op string) error]
}

type options struct {
	logger             *slog.Logger
	autoDiscovery      bool
	agentSessionTTL    time.Duration
	logBytesPerMachine int64
	eventsPerMachine   int
	installsPerMachine int
	workHistoryLimit   int
	maxDiscovered      int
	maxHardwareReport  int
	commandPoll        time.Duration
}

// Option changes a default of Open.
type Option func(*options)

// WithLogger sets the logger (default: slog.Default()).
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.logger = l } }

// WithoutAutoDiscovery makes Enroll refuse MACs that belong to no machine
// (ErrNotFound) instead of creating a discovered machine.
func WithoutAutoDiscovery() Option { return func(o *options) { o.autoDiscovery = false } }

// WithAgentSessionTTL sets how long after its last heartbeat an agent session
// counts as live, which is how long a second enrollment is refused
// (default 2 minutes).
func WithAgentSessionTTL(d time.Duration) Option {
	return func(o *options) { o.agentSessionTTL = d }
}

// WithLogLimit sets the bytes of agent log kept per machine (default 1 MiB);
// the oldest lines are dropped first.
func WithLogLimit(bytes int64) Option { return func(o *options) { o.logBytesPerMachine = bytes } }

// WithEventLimit sets the events kept per machine (default 500); the oldest
// are dropped first.
func WithEventLimit(n int) Option { return func(o *options) { o.eventsPerMachine = n } }

// WithWorkHistoryLimit sets the work history entries kept per machine
// (default 1,000); the oldest are dropped first.
func WithWorkHistoryLimit(n int) Option { return func(o *options) { o.workHistoryLimit = n } }

// WithMaxDiscovered bounds the machines that enrollment may create
// (status discovered; default 10,000); beyond it Enroll returns ErrLimit.
func WithMaxDiscovered(n int) Option { return func(o *options) { o.maxDiscovered = n } }

// WithCommandPoll sets how often WaitCommand re-reads the database while it
// waits (default 30 s), a safety net: changes made by this process wake it at
// once, and on PostgreSQL so do other replicas' (LISTEN/NOTIFY).
func WithCommandPoll(d time.Duration) Option { return func(o *options) { o.commandPoll = d } }

func defaultOptions() options {
	return options{
		logger:             slog.Default(),
		autoDiscovery:      true,
		agentSessionTTL:    2 * time.Minute,
		logBytesPerMachine: 1 << 20,
		eventsPerMachine:   500,
		installsPerMachine: 16,
		workHistoryLimit:   1000,
		maxDiscovered:      10000,
		maxHardwareReport:  1 << 20,
		commandPoll:        30 * time.Second,
	}
}

// Open connects to the database named by dsn and applies the migrations the
// database lacks. dsn is a file path or sqlite://PATH for SQLite (the file is
// created, mode 0600, when missing), or postgres://… / postgresql://… for
// PostgreSQL. On failure nothing stays open.
func Open(ctx context.Context, dsn string, opts ...Option) (*DB, error) {
	o := defaultOptions()
	for _, opt := range opts {
		opt(&o)
	}
	if err := o.check(); err != nil {
		return nil, err
	}
	db := &DB{opts: o, log: o.logger.With("component", "bmdb"), dsn: dsn}
	var err error
	switch {
	case dsn == "":
		return nil, fmt.Errorf("open bmdb: empty DSN: %w", ErrInvalid)
	case strings.HasPrefix(dsn, "postgres://"), strings.HasPrefix(dsn, "postgresql://"):
		db.engine = EnginePostgres
		db.sql, err = sql.Open("pgx", dsn)
		if err != nil {
			return nil, fmt.Errorf("open bmdb postgres: %w", err)
		}
		// Every connection this process opened stays open until it was
		// idle for 5 minutes: with fewer idle ones kept than open, a burst
		// of requests closed the extra connections and the next burst
		// opened them again (134 a minute per two replicas under 10,000
		// agents), each a PostgreSQL backend started and its statements
		// prepared anew.
		db.sql.SetMaxOpenConns(32)
		db.sql.SetMaxIdleConns(32)
		db.sql.SetConnMaxIdleTime(5 * time.Minute)
	case strings.HasPrefix(dsn, "sqlite://") || !strings.Contains(dsn, "://"):
		db.engine = EngineSQLite
		path := strings.TrimPrefix(dsn, "sqlite://")
		if path == "" {
			return nil, fmt.Errorf("open bmdb %q: no file path: %w", dsn, ErrInvalid)
		}
		if err := createPrivate(path); err != nil {
			return nil, fmt.Errorf("open bmdb %s: %w", path, err)
		}
		q := url.Values{}
		for _, p := range []string{"busy_timeout(10000)", "journal_mode(WAL)", "synchronous(NORMAL)", "foreign_keys(1)"} {
			q.Add("_pragma", p)
		}
		q.Set("_txlock", "immediate")
		db.sql, err = sql.Open("sqlite", "file:"+path+"?"+q.Encode())
		if err != nil {
			return nil, fmt.Errorf("open bmdb sqlite %s: %w", path, err)
		}
		db.sql.SetMaxOpenConns(8)
		db.sql.SetMaxIdleConns(8)
	default:
		return nil, fmt.Errorf("open bmdb: unknown scheme in %q (want a path, sqlite://PATH or postgres://…): %w", redactDSN(dsn), ErrInvalid)
	}
	pingCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := db.ping(pingCtx); err != nil {
		db.sql.Close()
		return nil, fmt.Errorf("open bmdb %s %s: %w", db.engine, redactDSN(dsn), err)
	}
	if err := db.migrate(ctx); err != nil {
		db.sql.Close()
		return nil, err
	}
	if db.engine == EnginePostgres {
		lctx, cancel := context.WithCancel(context.Background())
		db.stopListen, db.listenDone = cancel, make(chan struct{})
		go db.listen(lctx, db.listenDone)
	}
	return db, nil
}

func (o options) check() error {
	switch {
	case o.logger == nil:
		return fmt.Errorf("open bmdb: nil logger: %w", ErrInvalid)
	case o.agentSessionTTL < time.Second:
		return fmt.Errorf("open bmdb: agent session TTL %s is under 1s: %w", o.agentSessionTTL, ErrInvalid)
	case o.logBytesPerMachine < 1024:
		return fmt.Errorf("open bmdb: log limit %d bytes is under 1 KiB: %w", o.logBytesPerMachine, ErrInvalid)
	case o.eventsPerMachine < 10:
		return fmt.Errorf("open bmdb: event limit %d is under 10: %w", o.eventsPerMachine, ErrInvalid)
	case o.workHistoryLimit < 10:
		return fmt.Errorf("open bmdb: work history limit %d is under 10: %w", o.workHistoryLimit, ErrInvalid)
	case o.maxDiscovered < 0:
		return fmt.Errorf("open bmdb: negative discovered-machine limit: %w", ErrInvalid)
	case o.commandPoll < 10*time.Millisecond:
		return fmt.Errorf("open bmdb: command poll %s is under 10ms: %w", o.commandPoll, ErrInvalid)
	}
	return nil
}

// createPrivate creates the SQLite file with mode 0600 when it is missing, so
// the secrets in it are not world-readable.
func createPrivate(path string) error {
	if dir := filepath.Dir(path); dir != "" {
		if _, err := os.Stat(dir); err != nil {
			return fmt.Errorf("database directory: %w", err)
		}
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	return f.Close()
}

// redactDSN drops the password of a URL DSN for error messages.
func redactDSN(dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil || u.User == nil {
		return dsn
	}
	return u.Redacted()
}

// Close stops the PostgreSQL change listener and closes the database
// connections.
func (db *DB) Close() error {
	if db.stopListen != nil {
		db.stopListen()
		<-db.listenDone
	}
	db.stmts.close()
	return db.sql.Close()
}

// Engine returns EngineSQLite or EnginePostgres.
func (db *DB) Engine() string { return db.engine }

// maxWriteAttempts bounds the retries of a write transaction that failed
// with a serialization failure, a deadlock or a busy database.
const maxWriteAttempts = 8

// write runs fn in a write transaction and commits it, retrying the whole
// transaction (at most maxWriteAttempts times, with jittered backoff) when the
// engine reports a serialization failure, deadlock or busy database. fn may
// therefore run more than once and must have no effects outside tx.
func (db *DB) write(ctx context.Context, op string, fn func(tx *sql.Tx) error) error {
	return db.retry(ctx, op, func() error { return db.writeOnce(ctx, op, fn) })
}

// retry runs attempt until it succeeds or fails with an error that is not
// retryable, at most maxWriteAttempts times, with jittered backoff.
func (db *DB) retry(ctx context.Context, op string, attempt func() error) error {
	delay := 5 * time.Millisecond
	for n := 1; ; n++ {
		err := attempt()
		if err == nil || !db.retryable(err) || n == maxWriteAttempts || ctx.Err() != nil {
			return err
		}
		d := delay/2 + mrand.N(delay/2+1)
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: %w (after %v)", op, ctx.Err(), err)
		case <-time.After(d):
		}
		delay = min(2*delay, 500*time.Millisecond)
	}
}

func (db *DB) writeOnce(ctx context.Context, op string, fn func(tx *sql.Tx) error) error {
	if db.engine == EngineSQLite {
		db.writeMu.Lock()
		defer db.writeMu.Unlock()
	}
	if h := db.faultHook.Load(); h != nil {
		if err := (*h)(op); err != nil {
			return fmt.Errorf("%s: %w", op, err)
		}
	}
	tx, err := db.sql.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("%s: begin: %w", op, err)
	}
	if err := fn(tx); err != nil {
		tx.Rollback()
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("%s: commit: %w", op, err)
	}
	return nil
}

// writeOne runs one statement that is a whole write by itself and returns
// the rows it changed, retried as write retries. On PostgreSQL it runs
// without BEGIN and COMMIT (a statement is atomic alone): one round trip
// instead of three. On SQLite it runs in a write transaction, queued on
// writeMu like every other.
func (db *DB) writeOne(ctx context.Context, op, query string, args ...any) (int64, error) {
	var n int64
	if db.engine != EnginePostgres {
		err := db.write(ctx, op, func(tx *sql.Tx) error {
			res, err := tx.ExecContext(ctx, db.q(query), args...)
			if err != nil {
				return fmt.Errorf("%s: %w", op, err)
			}
			n, _ = res.RowsAffected()
			return nil
		})
		return n, err
	}
	query = db.q(query)
	err := db.retry(ctx, op, func() error {
		if h := db.faultHook.Load(); h != nil {
			if err := (*h)(op); err != nil {
				return fmt.Errorf("%s: %w", op, err)
			}
		}
		res, err := db.sql.ExecContext(ctx, query, args...)
		if err != nil {
			return fmt.Errorf("%s: %w", op, err)
		}
		n, _ = res.RowsAffected()
		return nil
	})
	return n, err
}

// errCode returns the engine's code of a database error: PostgreSQL's
// SQLSTATE, or SQLite's extended result code; "" and 0 for other errors.
func errCode(err error) (sqlstate string, sqliteCode int) {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code, 0
	}
	var se *sqlite.Error
	if errors.As(err, &se) {
		return "", se.Code()
	}
	return "", 0
}

// retryable reports whether a failed transaction may succeed when run again:
// PostgreSQL's serialization_failure and deadlock_detected, SQLite's BUSY
// and LOCKED (any extended code of them).
func (db *DB) retryable(err error) bool {
	state, code := errCode(err)
	return state == "40001" || state == "40P01" || code&0xff == 5 || code&0xff == 6
}

// isUniqueViolation reports whether err is a UNIQUE or PRIMARY KEY violation
// (SQLITE_CONSTRAINT_UNIQUE 2067, SQLITE_CONSTRAINT_PRIMARYKEY 1555).
func isUniqueViolation(err error) bool {
	state, code := errCode(err)
	return state == "23505" || code == 2067 || code == 1555
}

// isForeignKeyViolation reports whether err is a foreign-key violation
// (SQLITE_CONSTRAINT_FOREIGNKEY 787).
func isForeignKeyViolation(err error) bool {
	state, code := errCode(err)
	return state == "23503" || code == 787
}

// q rewrites a query written with ? placeholders for the engine: PostgreSQL
// wants $1, $2, … The package's SQL has no ? inside string literals.
func (db *DB) q(query string) string {
	if db.engine != EnginePostgres || !strings.Contains(query, "?") {
		return query
	}
	var b strings.Builder
	n := 0
	for _, r := range query {
		if r == '?' {
			n++
			fmt.Fprintf(&b, "$%d", n)
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// forUpdate is the row-lock suffix of a SELECT that a read-modify-write
// transaction bases its change on. SQLite has no row locks and needs none:
// its write transactions (BEGIN IMMEDIATE) run one at a time.
func (db *DB) forUpdate() string {
	if db.engine == EnginePostgres {
		return " FOR UPDATE"
	}
	return ""
}

// now is the time every row written is stamped with. Times are stored as Unix
// milliseconds; replicas sharing PostgreSQL must keep their clocks in sync
// (NTP), as with any lease.
func now() time.Time { return time.Now().Truncate(time.Millisecond) }

func ms(t time.Time) int64 { return t.UnixMilli() }

func fromMS(v int64) time.Time { return time.UnixMilli(v).UTC() }

func fromNullMS(v sql.NullInt64) time.Time {
	if !v.Valid {
		return time.Time{}
	}
	return fromMS(v.Int64)
}

// newID returns a random UUID (version 4) string.
func newID() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(fmt.Sprintf("bmdb: read random bytes: %v", err))
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// placeholders returns "?, ?, ?" for n values.
func placeholders(n int) string {
	return strings.TrimSuffix(strings.Repeat("?, ", n), ", ")
}

type scanner interface{ Scan(dest ...any) error }

// ping connects once. On SQLite a new connection switches the file to WAL,
// which needs the database to itself: replicas opening a fresh file at the
// same moment get SQLITE_BUSY there at once (SQLite's busy handler does not
// run for it), so ping tries again every 20 ms until ctx ends.
func (db *DB) ping(ctx context.Context) error {
	for {
		err := db.sql.PingContext(ctx)
		var se *sqlite.Error
		if err == nil || db.engine != EngineSQLite || !errors.As(err, &se) || se.Code()&0xff != sqlite3.SQLITE_BUSY {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(20 * time.Millisecond):
		}
	}
}
