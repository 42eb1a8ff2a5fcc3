package bmdb

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"database/sql"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Enrollment is what an agent sends when it boots: its MACs and a hardware
// report (metal3 HardwareDetails JSON).
type Enrollment struct {
	MACs     []string
	Hardware json.RawMessage
}

// Enrolled is the answer to an enrollment. Token is handed out once: only its
// SHA-256 is stored.
type Enrolled struct {
	Machine    Machine
	Token      string
	Discovered bool // the machine was created by this enrollment
}

// AgentSession is the agent session of a machine's current boot.
type AgentSession struct {
	MachineID   string    `json:"machineID"`
	StartedAt   time.Time `json:"startedAt"`
	HeartbeatAt time.Time `json:"heartbeatAt"`
	EndedAt     time.Time `json:"endedAt,omitzero"`
	EndReason   string    `json:"endReason,omitempty"`
	// Live: not ended and heard from within the agent session TTL.
	Live bool `json:"live"`
}

// ErrSessionLive is returned (wrapping ErrConflict) when an agent enrolls for
// a machine whose agent session is still live.
var ErrSessionLive = fmt.Errorf("agent session is live: %w", ErrConflict)

// Enroll links an agent to its machine and starts its agent session:
//
//  1. The MACs are looked up. MACs of two machines give ErrConflict. MACs of
//     no machine create one (name "discovered-<first MAC>", state
//     registering, status discovered), unless auto-discovery is off
//     (ErrNotFound) or the discovered machines reached their bound
//     (ErrLimit). MACs new to a known machine are added to it.
//  2. A live agent session (not ended, heartbeat within the TTL) refuses the
//     enrollment with ErrSessionLive; the refusal is recorded as an event.
//  3. Otherwise a new token (32 random bytes) is issued, its SHA-256
//     replaces the session's, the hardware report is stored and an
//     "Enrolled" event appended, all in one transaction.
func (db *DB) Enroll(ctx context.Context, e Enrollment) (Enrolled, error) {
	if len(e.MACs) == 0 {
		return Enrolled{}, fmt.Errorf("enroll: no MACs: %w", ErrInvalid)
	}
	macs, err := parseMACs(e.MACs)
	if err != nil {
		return Enrolled{}, fmt.Errorf("enroll: %w", err)
	}
	if len(e.Hardware) > 0 {
		if err := db.checkHardware(e.Hardware); err != nil {
			return Enrolled{}, fmt.Errorf("enroll %s: %w", macs[0], err)
		}
	}
	token, hash, err := newToken()
	if err != nil {
		return Enrolled{}, fmt.Errorf("enroll %s: %w", macs[0], err)
	}
	var out Enrolled
	var refused bool
	err = db.write(ctx, "enroll "+macs[0], func(tx *sql.Tx) error {
		out, refused = Enrolled{}, false
		args := make([]any, len(macs))
		for i, m := range macs {
			args[i] = m
		}
		rows, err := tx.QueryContext(ctx, db.q("SELECT DISTINCT machine_id FROM machine_macs WHERE mac IN ("+placeholders(len(macs))+")"), args...)
		if err != nil {
			return fmt.Errorf("enroll %s: look up MACs: %w", macs[0], err)
		}
		var ids []string
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				rows.Close()
				return fmt.Errorf("enroll %s: look up MACs: %w", macs[0], err)
			}
			ids = append(ids, id)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("enroll %s: look up MACs: %w", macs[0], err)
		}
		t := now()
		var id string
		switch len(ids) {
		case 0:
			if !db.opts.autoDiscovery {
				return fmt.Errorf("enroll %s: no machine has these MACs and auto-discovery is off: %w", macs[0], ErrNotFound)
			}
			var n int
			if err := tx.QueryRowContext(ctx, db.q("SELECT COUNT(*) FROM machines WHERE status = ?"), string(StatusDiscovered)).Scan(&n); err != nil {
				return fmt.Errorf("enroll %s: count discovered machines: %w", macs[0], err)
			}
			if n >= db.opts.maxDiscovered {
				return fmt.Errorf("enroll %s: %d discovered machines already: %w", macs[0], n, ErrLimit)
			}
			id = newID()
			name := "discovered-" + strings.ReplaceAll(macs[0], ":", "")
			if err := db.insertMachine(ctx, tx, id, name, nil, macs, BMC{}, false, "{}", StateRegistering, StatusDiscovered,
				"Discovered", "an agent enrolled with unknown MACs "+strings.Join(macs, ", ")); err != nil {
				return fmt.Errorf("enroll: %w", err)
			}
			out.Discovered = true
		case 1:
			id = ids[0]
		default:
			return fmt.Errorf("enroll %s: the MACs belong to %d machines (%s): %w", macs[0], len(ids), strings.Join(ids, ", "), ErrConflict)
		}
		m, err := db.lockMachine(ctx, tx, id)
		if err != nil {
			return fmt.Errorf("enroll %s: %w", macs[0], err)
		}
		if !out.Discovered {
			for _, mac := range macs {
				if _, err := tx.ExecContext(ctx, db.q(`INSERT INTO machine_macs (mac, machine_id) VALUES (?, ?)
					ON CONFLICT (mac) DO NOTHING`), mac, id); err != nil {
					return fmt.Errorf("enroll %s: add MAC %s: %w", m.Name, mac, err)
				}
			}
		}
		s, err := db.agentSession(ctx, tx, id)
		if err != nil && !errors.Is(err, ErrNotFound) {
			return fmt.Errorf("enroll %s: %w", m.Name, err)
		}
		if err == nil && s.Live {
			refused = true
			return db.addEvent(ctx, tx, id, EventWarning, "EnrollmentRefused",
				fmt.Sprintf("an agent enrolled with MACs %s while the agent session started %s is live (last heartbeat %s)",
					strings.Join(macs, ", "), s.StartedAt.Format(time.RFC3339), s.HeartbeatAt.Format(time.RFC3339)), m.Generation)
		}
		if _, err := tx.ExecContext(ctx, db.q(`INSERT INTO agent_sessions (machine_id, token_hash, started_at, heartbeat_at, ended_at, end_reason)
			VALUES (?, ?, ?, ?, NULL, '') ON CONFLICT (machine_id) DO UPDATE SET token_hash = excluded.token_hash,
			started_at = excluded.started_at, heartbeat_at = excluded.heartbeat_at, ended_at = NULL, end_reason = ''`),
			id, hash, ms(t), ms(t)); err != nil {
			return fmt.Errorf("enroll %s: start agent session: %w", m.Name, err)
		}
		if len(e.Hardware) > 0 {
			if err := db.putHardware(ctx, tx, id, e.Hardware, t); err != nil {
				return err
			}
		}
		if err := db.addEvent(ctx, tx, id, EventNormal, "Enrolled",
			fmt.Sprintf("agent enrolled with MACs %s", strings.Join(macs, ", ")), m.Generation); err != nil {
			return err
		}
		// The token changed: other replicas drop what they cached of the
		// session (Authenticate).
		return db.notifyTx(ctx, tx, id)
	})
	if err != nil {
		return Enrolled{}, err
	}
	m, err := db.MachineByMAC(ctx, macs[0])
	if err != nil {
		return Enrolled{}, fmt.Errorf("enroll %s: %w", macs[0], err)
	}
	if refused {
		return Enrolled{}, fmt.Errorf("enroll machine %s: %w", m.Name, ErrSessionLive)
	}
	db.log.Info("agent enrolled", "machine", m, "discovered", out.Discovered)
	out.Machine, out.Token = m, token
	db.notify.changed(m.ID)
	return out, nil
}

// newToken returns a random 32-byte token (base64url) and its SHA-256.
func newToken() (string, []byte, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", nil, fmt.Errorf("generate token: %w", err)
	}
	tok := base64.RawURLEncoding.EncodeToString(b[:])
	h := sha256.Sum256([]byte(tok))
	return tok, h[:], nil
}

func (db *DB) agentSession(ctx context.Context, q interface {
	QueryRowContext(context.Context, string, ...any) *sql.Row
}, id string) (AgentSession, error) {
	s := AgentSession{MachineID: id}
	var started, hb int64
	var ended sql.NullInt64
	err := q.QueryRowContext(ctx, db.q(`SELECT started_at, heartbeat_at, ended_at, end_reason FROM agent_sessions
		WHERE machine_id = ?`), id).Scan(&started, &hb, &ended, &s.EndReason)
	if errors.Is(err, sql.ErrNoRows) {
		return AgentSession{}, fmt.Errorf("agent session of machine %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return AgentSession{}, fmt.Errorf("agent session of machine %s: %w", id, err)
	}
	s.StartedAt, s.HeartbeatAt, s.EndedAt = fromMS(started), fromMS(hb), fromNullMS(ended)
	s.Live = !ended.Valid && time.Since(s.HeartbeatAt) < db.opts.agentSessionTTL
	return s, nil
}

// GetAgentSession returns the agent session of a machine, or ErrNotFound if
// no agent ever enrolled for it.
func (db *DB) GetAgentSession(ctx context.Context, id string) (AgentSession, error) {
	return db.agentSession(ctx, db.sql, id)
}

// dummyHash is compared against when a MAC has no session, so an unknown MAC
// costs the same as a wrong token.
var dummyHash = sha256.Sum256([]byte("bmdb: no such agent session"))

// Authenticate checks an agent's token for the machine owning mac and
// returns that machine's ID. The token must match the SHA-256 stored for a
// session that has not ended (compared in constant time). An unknown or
// malformed MAC, a machine without a session, an ended session and a wrong
// token all give the same ErrUnauthorized.
//
// A (MAC, token) pair verified against the database is remembered for up
// to AuthCacheTTL, so an agent's next requests cost no query: its entry is
// dropped by every change of the machine, here and (on PostgreSQL, through
// LISTEN/NOTIFY) on every other replica; on PostgreSQL the cache is used
// only while this replica's listener is connected (authcache.go). A token
// that does not match the cached one is checked against the database, as
// an uncached one is.
func (db *DB) Authenticate(ctx context.Context, mac, token string) (string, error) {
	got := sha256.Sum256([]byte(token))
	want := dummyHash[:]
	var id string
	var stored []byte
	var ended sql.NullInt64
	found := false
	c, perr := ParseMAC(mac)
	cache := perr == nil && db.authCacheUsable()
	var epoch uint64
	if cache {
		if id, ok := db.notify.auth.lookup(c, got, time.Now()); ok {
			return id, nil
		}
		epoch = db.notify.auth.currentEpoch()
	}
	if perr == nil {
		err := db.queryRow(ctx, `SELECT m.machine_id, s.token_hash, s.ended_at FROM machine_macs m
			JOIN agent_sessions s ON s.machine_id = m.machine_id WHERE m.mac = ?`, c).Scan(&id, &stored, &ended)
		switch {
		case err == nil:
			found = len(stored) == sha256.Size && !ended.Valid
			if found {
				want = stored
			}
		case errors.Is(err, sql.ErrNoRows):
		default:
			return "", fmt.Errorf("authenticate agent: %w", err)
		}
	}
	match := subtle.ConstantTimeCompare(got[:], want) == 1
	if !found || !match {
		return "", ErrUnauthorized
	}
	if cache {
		db.notify.auth.store(epoch, c, got, id, time.Now())
	}
	return id, nil
}

// authCacheUsable says whether Authenticate may use its cache: on SQLite
// always (one bootyd owns the file; another process writing the same file
// is seen within AuthCacheTTL), on PostgreSQL while the listener receives
// the other replicas' changes.
func (db *DB) authCacheUsable() bool {
	return db.engine == EngineSQLite || db.listening.Load()
}

// Heartbeat records that the agent of machine id is alive. ErrNotFound when
// the machine has no agent session or it ended.
func (db *DB) Heartbeat(ctx context.Context, id string) error {
	return db.write(ctx, "heartbeat", func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, db.q("UPDATE agent_sessions SET heartbeat_at = ? WHERE machine_id = ? AND ended_at IS NULL"), ms(now()), id)
		if err != nil {
			return fmt.Errorf("heartbeat of machine %s: %w", id, err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return fmt.Errorf("heartbeat of machine %s: no agent session: %w", id, ErrNotFound)
		}
		return nil
	})
}

// EndAgentSession ends the agent session of machine id (its token stops
// working, a new enrollment is allowed) and records an event with the
// reason. Ending an ended session changes nothing.
func (db *DB) EndAgentSession(ctx context.Context, id, reason string) error {
	if reason == "" {
		return fmt.Errorf("end agent session of machine %s: empty reason: %w", id, ErrInvalid)
	}
	err := db.write(ctx, "end agent session", func(tx *sql.Tx) error {
		m, err := db.lockMachine(ctx, tx, id)
		if err != nil {
			return fmt.Errorf("end agent session: %w", err)
		}
		if err := db.endAgentSession(ctx, tx, id, reason, m.Generation); err != nil {
			return err
		}
		// The token stops working on every replica (Authenticate's cache).
		return db.notifyTx(ctx, tx, id)
	})
	if err == nil {
		db.notify.changed(id)
	}
	return err
}

func (db *DB) endAgentSession(ctx context.Context, tx *sql.Tx, id, reason string, gen int64) error {
	res, err := tx.ExecContext(ctx, db.q("UPDATE agent_sessions SET ended_at = ?, end_reason = ? WHERE machine_id = ? AND ended_at IS NULL"),
		ms(now()), reason, id)
	if err != nil {
		return fmt.Errorf("end agent session of machine %s: %w", id, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return nil
	}
	return db.addEvent(ctx, tx, id, EventNormal, "AgentSessionEnded", reason, gen)
}

func (db *DB) checkHardware(b json.RawMessage) error {
	if len(b) > db.opts.maxHardwareReport {
		return fmt.Errorf("hardware report is %d bytes, at most %d: %w", len(b), db.opts.maxHardwareReport, ErrLimit)
	}
	if err := jsonObject(b); err != nil {
		return fmt.Errorf("hardware report: %w", err)
	}
	return nil
}

func (db *DB) putHardware(ctx context.Context, tx *sql.Tx, id string, b json.RawMessage, t time.Time) error {
	_, err := tx.ExecContext(ctx, db.q(`INSERT INTO hardware (machine_id, report, updated_at) VALUES (?, ?, ?)
		ON CONFLICT (machine_id) DO UPDATE SET report = excluded.report, updated_at = excluded.updated_at`), id, string(b), ms(t))
	if err != nil {
		return fmt.Errorf("machine %s: store hardware report: %w", id, err)
	}
	return nil
}

// ReportHardware stores the hardware report of machine id, replacing the
// last one.
func (db *DB) ReportHardware(ctx context.Context, id string, report json.RawMessage) error {
	if err := db.checkHardware(report); err != nil {
		return fmt.Errorf("report hardware of machine %s: %w", id, err)
	}
	return db.write(ctx, "report hardware", func(tx *sql.Tx) error {
		if _, err := db.lockMachine(ctx, tx, id); err != nil {
			return fmt.Errorf("report hardware: %w", err)
		}
		return db.putHardware(ctx, tx, id, report, now())
	})
}

// Hardware returns the last hardware report of machine id and its time, or
// ErrNotFound.
func (db *DB) Hardware(ctx context.Context, id string) (json.RawMessage, time.Time, error) {
	var r string
	var at int64
	err := db.sql.QueryRowContext(ctx, db.q("SELECT report, updated_at FROM hardware WHERE machine_id = ?"), id).Scan(&r, &at)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, time.Time{}, fmt.Errorf("hardware of machine %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("hardware of machine %s: %w", id, err)
	}
	return json.RawMessage(r), fromMS(at), nil
}

// Command is what the agent of a machine is asked to do.
type Command struct {
	Kind       CommandKind `json:"kind"`
	Generation int64       `json:"generation"`
	IssuedAt   time.Time   `json:"issuedAt"`
	// Spec is the machine's spec at the command's generation (provision).
	Spec Spec `json:"spec,omitzero"`
}

// PendingCommand returns the command waiting for machine id's agent, or nil
// when there is none (one query: long polls call it often). A machine found
// without a command is remembered so for up to AuthCacheTTL, until its next
// change, and answered without a query meanwhile: on PostgreSQL, while the
// listener is connected (see idleCache). On SQLite the query runs in
// process, a prepared statement, and the cache is not used: a command
// written by another process on the file is then seen by the next read.
func (db *DB) PendingCommand(ctx context.Context, id string) (*Command, error) {
	cache := db.engine == EnginePostgres && db.listening.Load()
	var epoch uint64
	if cache {
		if db.notify.idle.idle(id, time.Now()) {
			return nil, nil
		}
		epoch = db.notify.idle.currentEpoch()
	}
	var kind, spec string
	var gen, at int64
	// The spec (cloud-init data included) is read only with a command.
	err := db.queryRow(ctx, `SELECT command, command_generation, command_issued_at,
		CASE WHEN command = '' THEN '' ELSE spec END FROM machines WHERE id = ?`, id).
		Scan(&kind, &gen, &at, &spec)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("pending command of machine %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("pending command of machine %s: %w", id, err)
	}
	if kind == "" {
		if cache {
			db.notify.idle.store(epoch, id, time.Now())
		}
		return nil, nil
	}
	c := &Command{Kind: CommandKind(kind), Generation: gen, IssuedAt: fromMS(at)}
	if err := json.Unmarshal([]byte(spec), &c.Spec); err != nil {
		return nil, fmt.Errorf("pending command of machine %s: decode spec: %w", id, err)
	}
	return c, nil
}

// WaitCommand waits up to wait for a command for machine id's agent and
// returns it, or nil when none came. A command issued by this process wakes
// it at once, as does (on PostgreSQL, through LISTEN/NOTIFY) one issued by
// another replica; it also re-reads every WithCommandPoll interval. A failed
// read (a dropped connection) is retried with backoff within the wait; the
// error is returned only if the wait ends without a good read after it.
func (db *DB) WaitCommand(ctx context.Context, id string, wait time.Duration) (*Command, error) {
	timer := time.NewTimer(wait)
	defer timer.Stop()
	retry := 50 * time.Millisecond
	for {
		changed := db.notify.watch(id)
		c, err := db.PendingCommand(ctx, id)
		next := db.opts.commandPoll
		switch {
		case err == nil && c != nil:
			return c, nil
		case errors.Is(err, ErrNotFound):
			return nil, err
		case err != nil:
			db.log.Warn("long poll: read failed, retrying", "machine", id, "err", err)
			next, retry = retry, min(2*retry, time.Second)
		default:
			retry = 50 * time.Millisecond
		}
		poll := time.NewTimer(next)
		select {
		case <-ctx.Done():
			poll.Stop()
			return nil, fmt.Errorf("wait for a command for machine %s: %w", id, ctx.Err())
		case <-timer.C:
			poll.Stop()
			return nil, err
		case <-changed:
		case <-poll.C:
		}
		poll.Stop()
	}
}

// CommandResult is an agent's report that it ran a command.
type CommandResult struct {
	// Error is empty on success, else what failed.
	Error string
}

// CompleteCommand records that the agent ran the command at generation gen
// and moves the machine on, in one transaction:
//
//   - inspect: inspecting → available;
//   - provision: provisioning → provisioned, the install succeeded;
//   - deprovision: deprovisioning → available;
//   - poweroff: powering off before delete → deleting; otherwise nothing;
//   - reboot: nothing.
//
// A failure keeps the state, sets status error with the command's error
// type and counts it. The command is cleared either way; a success resets
// the error count. Every command but inspect ends the agent session,
// success or failure: its agent hands off (the OS boots, the machine
// reboots or powers off) or, after a failed run, follows its failure policy
// and polls no more, so the next boot's agent enrolls at once instead of
// being refused until the session's heartbeats time out. gen must be the pending command's generation: a repeated
// report for a command already completed at gen changes nothing, any other
// gives ErrStaleGeneration.
func (db *DB) CompleteCommand(ctx context.Context, id string, gen int64, r CommandResult) (Machine, error) {
	var changed bool
	err := db.write(ctx, "complete command", func(tx *sql.Tx) error {
		changed = false
		m, err := db.lockMachine(ctx, tx, id)
		if err != nil {
			return fmt.Errorf("complete command: %w", err)
		}
		if m.Command == "" && gen == m.Generation {
			return nil // completed already: a retried report
		}
		if m.Command == "" || gen != m.CommandGeneration {
			return fmt.Errorf("complete command of machine %s: generation %d, machine is at %d (command %q at %d): %w",
				m.Name, gen, m.Generation, m.Command, m.CommandGeneration, ErrStaleGeneration)
		}
		t := now()
		to, reason, errType := m.State, string(m.Command)+"Done", ErrorType("")
		endSession := m.Command != CommandInspect // the agent's run ends: see the doc comment
		switch m.Command {
		case CommandInspect:
			to, reason, errType = StateAvailable, "InspectionDone", ErrorInspection
		case CommandProvision:
			to, reason, errType = StateProvisioned, "ProvisioningDone", ErrorProvisioning
		case CommandDeprovision:
			to, reason, errType = StateAvailable, "DeprovisioningDone", ErrorProvisioning
		case CommandPowerOff:
			reason, errType = "PoweredOff", ErrorPowerManagement
			if m.State == StatePoweringOffBeforeDelete {
				to = StateDeleting
			}
		case CommandReboot:
			reason, errType = "Rebooted", ErrorPowerManagement
		}
		status, errMsg, errCount, evType := StatusOK, "", 0, EventNormal
		if m.Status != StatusError {
			status = m.Status
		}
		msg := fmt.Sprintf("%s → %s, command %s at generation %d done", m.State, to, m.Command, gen)
		if r.Error != "" {
			to, reason = m.State, strings.TrimSuffix(reason, "Done")+"Failed"
			status, errMsg, errCount, evType = StatusError, r.Error, m.Error.Count+1, EventWarning
			msg = fmt.Sprintf("command %s at generation %d failed: %s", m.Command, gen, r.Error)
		} else {
			errType = ""
		}
		changedAt := ms(m.StateChangedAt)
		if to != m.State {
			changedAt = ms(t)
		}
		if _, err := tx.ExecContext(ctx, db.q(`UPDATE machines SET state = ?, status = ?, error_type = ?, error_message = ?,
			error_count = ?, command = '', command_generation = 0, command_issued_at = 0, updated_at = ?,
			state_changed_at = ? WHERE id = ?`),
			string(to), string(status), string(errType), errMsg, errCount, ms(t), changedAt, id); err != nil {
			return fmt.Errorf("complete command of machine %s: %w", m.Name, err)
		}
		result := "succeeded"
		if r.Error != "" {
			result = "failed"
		}
		if _, err := tx.ExecContext(ctx, db.q(`UPDATE installs SET finished_at = ?, result = ?, error = ?
			WHERE machine_id = ? AND generation = ?`), ms(t), result, r.Error, id, gen); err != nil {
			return fmt.Errorf("complete command of machine %s: record install result: %w", m.Name, err)
		}
		if err := db.addEvent(ctx, tx, id, evType, reason, msg, gen); err != nil {
			return err
		}
		if endSession {
			if err := db.endAgentSession(ctx, tx, id, fmt.Sprintf("command %s %s", m.Command, result), gen); err != nil {
				return err
			}
		}
		changed = true
		return db.notifyTx(ctx, tx, id)
	})
	if err != nil {
		return Machine{}, err
	}
	if changed {
		db.notify.changed(id)
	}
	return db.GetMachine(ctx, id)
}
