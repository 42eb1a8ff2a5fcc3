// Package bmdbtest runs a test binary's BMDB tests against both engines:
// SQLite in a temp dir, and a real PostgreSQL that Main starts for the
// binary (initdb in a temp dir, pg_ctl on a unix socket there, stopped at the
// end). Use it from TestMain:
//
//	func TestMain(m *testing.M) { os.Exit(bmdbtest.Main(m)) }
//
// and in a test:
//
//	for _, e := range bmdbtest.Engines() {
//		t.Run(e.Name, func(t *testing.T) { db := open(t, e.DSN(t)) … })
//	}
//
// PostgreSQL's binaries are looked up in $BMDB_PG_BIN, then
// /usr/lib/postgresql/*/bin (Debian's postgresql package; hack/deps.sh
// installs it). When they are missing the tests run on SQLite only and say so
// loudly, except under CI (CI=true), where that is a failure. initdb refuses
// to run as root: as root the server runs as the postgres (else nobody) user.
package bmdbtest

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/booty-dev/booty/internal/testenv"
	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver
)

// Engine is one database engine the tests run on.
type Engine struct {
	Name string
	dsn  func(t testing.TB) string
}

// DSN returns the DSN of a fresh, empty database for t, removed when t ends.
func (e Engine) DSN(t testing.TB) string { t.Helper(); return e.dsn(t) }

var pg *postgres

// Engines returns SQLite and, when Main started it, PostgreSQL.
func Engines() []Engine {
	es := []Engine{{Name: "sqlite", dsn: func(t testing.TB) string {
		return filepath.Join(t.TempDir(), "bmdb.db")
	}}}
	if pg != nil {
		es = append(es, Engine{Name: "postgres", dsn: pg.newDatabase})
	}
	return es
}

// PostgresDSN returns the DSN of a fresh PostgreSQL database for t. When Main
// did not start PostgreSQL it skips t, loudly, or fails it under CI.
func PostgresDSN(t testing.TB) string {
	t.Helper()
	if pg == nil {
		if testenv.CI() {
			t.Fatal("bmdbtest: PostgreSQL is not running; it is required under CI (hack/deps.sh installs it)")
		}
		t.Skip("bmdbtest: SKIPPED: PostgreSQL is not running (install Debian's postgresql: hack/deps.sh)")
	}
	return pg.newDatabase(t)
}

// Main starts PostgreSQL, runs the tests and stops it; it returns the exit
// code for os.Exit. Under CI (CI=true) a PostgreSQL that cannot start fails
// the run.
func Main(m *testing.M) int {
	p, err := startPostgres(false)
	if err != nil {
		if testenv.CI() {
			fmt.Fprintf(os.Stderr, "bmdbtest: FAIL: PostgreSQL is required under CI: %v\n", err)
			return 1
		}
		fmt.Fprintf(os.Stderr, "bmdbtest: WARNING: PostgreSQL not started, BMDB tests run on SQLite ONLY: %v\n", err)
	} else {
		pg = p
		defer p.stop()
	}
	return m.Run()
}

type postgres struct {
	dir   string // socket directory and parent of the data directory
	bin   string
	runAs []string // runuser prefix when running as root
	admin *sql.DB
}

// dsn returns the DSN of database name on the test server's socket.
func (p *postgres) dsn(name string) string {
	return "postgres://postgres@/" + name + "?host=" + url.QueryEscape(p.dir) + "&port=5432&sslmode=disable"
}

// binDir finds PostgreSQL's server binaries.
func binDir() (string, error) {
	if d := os.Getenv("BMDB_PG_BIN"); d != "" {
		return d, nil
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool {
		vi, _ := strconv.Atoi(filepath.Base(filepath.Dir(dirs[i])))
		vj, _ := strconv.Atoi(filepath.Base(filepath.Dir(dirs[j])))
		return vi > vj
	})
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			return d, nil
		}
	}
	return "", errors.New("no initdb in $BMDB_PG_BIN or /usr/lib/postgresql/*/bin (install Debian's postgresql package: hack/deps.sh)")
}

// startPostgres starts a server for this process. durable keeps
// PostgreSQL's fsync and synchronous commit (a benchmark measuring what
// production pays); tests run without them.
func startPostgres(durable bool, extra ...string) (*postgres, error) {
	bin, err := binDir()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "bmdbtest-pg-")
	if err != nil {
		return nil, fmt.Errorf("postgres temp dir: %w", err)
	}
	p := &postgres{dir: dir, bin: bin}
	ok := false
	defer func() {
		if !ok {
			os.RemoveAll(dir)
		}
	}()
	if os.Geteuid() == 0 {
		if err := p.dropRoot(); err != nil {
			return nil, err
		}
	}
	data := filepath.Join(dir, "data")
	if out, err := p.run(60*time.Second, "initdb", "-D", data, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync"); err != nil {
		return nil, fmt.Errorf("initdb: %w: %s", err, out)
	}
	args := []string{"-k", dir, "-c", "listen_addresses=", "-p", "5432", "-c", "max_connections=300", "-c", "shared_buffers=64MB"}
	if !durable {
		args = append(args, "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off")
	}
	args = append(args, extra...)
	opts := strings.Join(args, " ")
	if out, err := p.run(90*time.Second, "pg_ctl", "-D", data, "-l", filepath.Join(dir, "server.log"), "-w", "-t", "60", "-o", opts, "start"); err != nil {
		log, _ := os.ReadFile(filepath.Join(dir, "server.log"))
		return nil, fmt.Errorf("pg_ctl start: %w: %s\nserver log:\n%s", err, out, log)
	}
	p.admin, err = sql.Open("pgx", p.dsn("postgres"))
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err = p.admin.PingContext(ctx)
		cancel()
	}
	if err != nil {
		p.stop()
		return nil, fmt.Errorf("connect to the test PostgreSQL: %w", err)
	}
	if err := p.watchdog(); err != nil {
		p.stop()
		return nil, err
	}
	ok = true
	fmt.Fprintf(os.Stderr, "bmdbtest: PostgreSQL (%s) running on socket dir %s\n", bin, dir)
	return p, nil
}

// dropRoot makes the server run as postgres (else nobody): initdb refuses
// root. The temp dir is handed to that user.
func (p *postgres) dropRoot() error {
	var u *user.User
	var err error
	for _, name := range []string{"postgres", "nobody"} {
		if u, err = user.Lookup(name); err == nil {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("running as root and neither postgres nor nobody exists to run PostgreSQL as: %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	if err := os.Chown(p.dir, uid, gid); err != nil {
		return fmt.Errorf("chown %s to %s: %w", p.dir, u.Username, err)
	}
	if _, err := exec.LookPath("runuser"); err != nil {
		return fmt.Errorf("running as root needs runuser (util-linux) to start PostgreSQL as %s: %w", u.Username, err)
	}
	p.runAs = []string{"runuser", "-u", u.Username, "--"}
	return nil
}

// watchdog starts a detached shell that stops the server and removes its
// directory once this process is gone, however it ended (a test timeout
// panics past deferred calls, kill -9 skips everything).
func (p *postgres) watchdog() error {
	const script = `pid=$1 dir=$2 data=$3 pgctl=$4; shift 4
while kill -0 "$pid" 2>/dev/null; do sleep 1; done
"$@" "$pgctl" -D "$data" -m immediate -w stop >/dev/null 2>&1
rm -rf "$dir"`
	args := append([]string{"-c", script, "bmdbtest-watchdog", strconv.Itoa(os.Getpid()), p.dir,
		filepath.Join(p.dir, "data"), filepath.Join(p.bin, "pg_ctl")}, p.runAs...)
	cmd := exec.Command("/bin/sh", args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start the PostgreSQL watchdog: %w", err)
	}
	return cmd.Process.Release()
}

func (p *postgres) run(timeout time.Duration, name string, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	argv := append(append(append([]string{}, p.runAs...), filepath.Join(p.bin, name)), args...)
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir = p.dir
	return cmd.CombinedOutput()
}

func (p *postgres) stop() {
	if p.admin != nil {
		p.admin.Close()
	}
	if out, err := p.run(60*time.Second, "pg_ctl", "-D", filepath.Join(p.dir, "data"), "-m", "immediate", "-w", "stop"); err != nil {
		fmt.Fprintf(os.Stderr, "bmdbtest: pg_ctl stop: %v: %s\n", err, out)
	}
	os.RemoveAll(p.dir)
}

// newDatabase creates an empty database for t and drops it when t ends.
func (p *postgres) newDatabase(t testing.TB) string {
	t.Helper()
	var b [6]byte
	rand.Read(b[:])
	name := "t_" + hex.EncodeToString(b[:])
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := p.admin.ExecContext(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("bmdbtest: create database %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		if _, err := p.admin.ExecContext(ctx, "DROP DATABASE "+name+" WITH (FORCE)"); err != nil {
			t.Logf("bmdbtest: drop database %s: %v", name, err)
		}
	})
	return p.dsn(name)
}

// Server is a PostgreSQL started for a program that is not a test (the
// fleet benchmark, hack/benchfleet): the same server Main starts, on a unix
// socket in a temp dir, stopped by Stop or, should the program die first,
// by a watchdog.
type Server struct{ p *postgres }

// Start starts PostgreSQL (see the package comment for where its binaries
// come from). durable keeps fsync and synchronous commit on, as a
// production server runs; the tests run without them.
func Start(durable bool) (*Server, error) {
	return StartWith(StartOptions{Durable: durable})
}

// StartOptions tunes a Server started by StartWith.
type StartOptions struct {
	// Durable keeps fsync and synchronous commit on, as in production.
	Durable bool
	// TrackStatements loads pg_stat_statements (shared_preload_libraries),
	// so that Statements can say which queries ran how often. The
	// extension ships with Debian's postgresql package.
	TrackStatements bool
}

// StartWith starts PostgreSQL as Start does, with o.
func StartWith(o StartOptions) (*Server, error) {
	var extra []string
	if o.TrackStatements {
		extra = append(extra, "-c", "shared_preload_libraries=pg_stat_statements", "-c", "pg_stat_statements.track=all")
	}
	p, err := startPostgres(o.Durable, extra...)
	if err != nil {
		return nil, err
	}
	return &Server{p: p}, nil
}

// DSN returns the DSN of database name on the server's socket.
func (s *Server) DSN(name string) string { return s.p.dsn(name) }

// PostmasterPID returns the process ID of the server's postmaster, the
// parent of every backend (from postmaster.pid in the data directory).
func (s *Server) PostmasterPID() (int, error) {
	b, err := os.ReadFile(filepath.Join(s.p.dir, "data", "postmaster.pid"))
	if err != nil {
		return 0, fmt.Errorf("postmaster pid: %w", err)
	}
	line, _, _ := strings.Cut(string(b), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		return 0, fmt.Errorf("postmaster pid: first line of postmaster.pid %q: %w", line, err)
	}
	return pid, nil
}

// CreateDatabase creates the empty database name (lower-case letters,
// digits, underscores) and returns its DSN.
func (s *Server) CreateDatabase(ctx context.Context, name string) (string, error) {
	for _, r := range name {
		if (r < 'a' || r > 'z') && (r < '0' || r > '9') && r != '_' {
			return "", fmt.Errorf("create database %q: want lower-case letters, digits and underscores", name)
		}
	}
	if _, err := s.p.admin.ExecContext(ctx, "CREATE DATABASE "+name); err != nil {
		return "", fmt.Errorf("create database %s: %w", name, err)
	}
	return s.p.dsn(name), nil
}

// DatabaseSize returns the bytes database name takes on disk.
func (s *Server) DatabaseSize(ctx context.Context, name string) (int64, error) {
	var n int64
	if err := s.p.admin.QueryRowContext(ctx, "SELECT pg_database_size($1)", name).Scan(&n); err != nil {
		return 0, fmt.Errorf("size of database %s: %w", name, err)
	}
	return n, nil
}

// Stop stops the server and removes its directory.
func (s *Server) Stop() { s.p.stop() }
