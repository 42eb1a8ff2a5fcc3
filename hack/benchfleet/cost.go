package main

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/booty-dev/booty/pkg/bmdb/bmdbtest"
	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver
)

// What the steady phase cost, measured apart from latency (which a shared
// machine makes noisy): the CPU time of each bootyd and of PostgreSQL, and
// on PostgreSQL the transactions, the statements by calls and each
// replica's connections. Divided by the agents' requests they give the cost
// of a request, which stays steady under other load.

// clockTicks is USER_HZ, the unit of /proc/PID/stat's times (100 on Linux).
const clockTicks = 100

// procCPU returns the user+system CPU time of pid from /proc/PID/stat, with
// its waited-for children's when children is set, and its parent's PID.
func procCPU(pid int, children bool) (cpu time.Duration, ppid int, err error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, err
	}
	// The command name (field 2) may hold spaces; the rest follows its ')'.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0, 0, fmt.Errorf("/proc/%d/stat: no ')'", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state): ppid is field 4, utime 14, stime 15,
	// cutime 16, cstime 17.
	if len(f) < 15 {
		return 0, 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f)+2)
	}
	ppid, _ = strconv.Atoi(f[1])
	last := 13
	if children {
		last = 15
	}
	var ticks int64
	for _, v := range f[11:last] {
		n, _ := strconv.ParseInt(v, 10, 64)
		ticks += n
	}
	return time.Duration(ticks) * time.Second / clockTicks, ppid, nil
}

// treeCPU is the CPU time of pid (with the children it waited for: the
// backends that exited) and of its live children (the running backends).
func treeCPU(pid int) time.Duration {
	total, _, err := procCPU(pid, true)
	if err != nil {
		return 0
	}
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		child, _ := strconv.Atoi(filepath.Base(d))
		if cpu, ppid, err := procCPU(child, false); err == nil && ppid == pid {
			total += cpu
		}
	}
	return total
}

// costSample is one reading of the counters.
type costSample struct {
	bootyd   []time.Duration
	postgres time.Duration
	xacts    int64
	sessions int64 // connections opened to the run's database
}

// costMeter reads the counters of one run.
type costMeter struct {
	servers []*bootyd
	pg      *bmdbtest.Server
	pgPID   int
	db      string  // the run's database name on pg
	admin   *sql.DB // the postgres database, where pg_stat_statements lives
}

func newCostMeter(ctx context.Context, servers []*bootyd, pg *bmdbtest.Server, db string) *costMeter {
	m := &costMeter{servers: servers, pg: pg, db: db}
	if pg == nil {
		return m
	}
	m.pgPID, _ = pg.PostmasterPID()
	if adm, err := sql.Open("pgx", pg.DSN("postgres")); err == nil {
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if _, err := adm.ExecContext(cctx, "CREATE EXTENSION IF NOT EXISTS pg_stat_statements"); err == nil {
			m.admin = adm
		} else {
			adm.Close()
		}
	}
	return m
}

func (m *costMeter) close() {
	if m.admin != nil {
		m.admin.Close()
	}
}

// sample reads the CPU times and, on PostgreSQL, the committed
// transactions of the run's database; reset also zeroes
// pg_stat_statements, so that statements counts from here.
func (m *costMeter) sample(ctx context.Context, reset bool) costSample {
	var s costSample
	for _, b := range m.servers {
		cpu, _, _ := procCPU(b.cmd.Process.Pid, false)
		s.bootyd = append(s.bootyd, cpu)
	}
	if m.pgPID != 0 {
		s.postgres = treeCPU(m.pgPID)
	}
	if m.admin != nil {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		_ = m.admin.QueryRowContext(ctx, "SELECT xact_commit + xact_rollback, sessions FROM pg_stat_database WHERE datname = $1", m.db).Scan(&s.xacts, &s.sessions)
		if reset {
			_, _ = m.admin.ExecContext(ctx, "SELECT pg_stat_statements_reset()")
		}
	}
	return s
}

// statement is one row of pg_stat_statements.
type statement struct {
	Query   string
	Calls   int64
	TotalMS float64
	Rows    int64
}

// statements returns the run database's statements since the reset, by
// total execution time, at most n.
func (m *costMeter) statements(ctx context.Context, n int) ([]statement, error) {
	if m.admin == nil {
		return nil, nil
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	rows, err := m.admin.QueryContext(ctx, `SELECT query, calls, total_exec_time, rows FROM pg_stat_statements
		WHERE dbid = (SELECT oid FROM pg_database WHERE datname = $1) ORDER BY total_exec_time DESC LIMIT $2`, m.db, n)
	if err != nil {
		return nil, fmt.Errorf("pg_stat_statements: %w", err)
	}
	defer rows.Close()
	var out []statement
	for rows.Next() {
		var s statement
		if err := rows.Scan(&s.Query, &s.Calls, &s.TotalMS, &s.Rows); err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, rows.Err()
}

// totalCalls is the number of statements the run's database ran since the
// reset.
func (m *costMeter) totalCalls(ctx context.Context) int64 {
	if m.admin == nil {
		return 0
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var n sql.NullInt64
	_ = m.admin.QueryRowContext(ctx, `SELECT SUM(calls) FROM pg_stat_statements
		WHERE dbid = (SELECT oid FROM pg_database WHERE datname = $1)`, m.db).Scan(&n)
	return n.Int64
}

// connections counts the run database's connections by application_name
// (each bootyd's DSN names it).
func (m *costMeter) connections(ctx context.Context) map[string]int {
	out := map[string]int{}
	if m.admin == nil {
		return out
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	rows, err := m.admin.QueryContext(ctx, "SELECT application_name, COUNT(*) FROM pg_stat_activity WHERE datname = $1 GROUP BY 1", m.db)
	if err != nil {
		return out
	}
	defer rows.Close()
	for rows.Next() {
		var name string
		var n int
		if rows.Scan(&name, &n) == nil {
			out[name] = n
		}
	}
	return out
}

// cost is what the steady phase cost, for the report.
type cost struct {
	bootydCPU   []time.Duration
	postgresCPU time.Duration
	xacts       int64
	sessions    int64
	calls       int64
	requests    int // agent and operator requests answered in the window
	top         []statement
	conns       map[string]int
}

// perRequest formats d divided over the requests, in ms.
func (c cost) perRequest(d time.Duration) string {
	if c.requests == 0 {
		return "-"
	}
	return fmt.Sprintf("%.3f ms", float64(d.Microseconds())/1000/float64(c.requests))
}
