// Package bmdb is booty's Bare Metal Database: the machines of a fleet, their
// lifecycle, the agents running on them and the work control loops do on
// them. It has no HTTP in it: bootyd's handlers (pkg/server) and the control
// loops (pkg/manager) call it.
//
// # Engines
//
// Open takes a DSN: a file path or sqlite://PATH opens SQLite (pure Go,
// modernc.org/sqlite, so bootyd stays static), postgres://… opens PostgreSQL
// (jackc/pgx/v5) for several bootyd replicas sharing one database. One set
// of migrations (migrations/*.sql, embedded, versioned in schema_migrations)
// runs on both and is applied at Open; opening again changes nothing, and a
// database migrated by a newer binary is refused. Every write is one
// transaction, retried (bounded, with backoff) on a serialization failure,
// deadlock or busy database, so write functions may run more than once and
// have no effects outside the database.
//
//   - SQLite: WAL, busy timeout 10 s, foreign keys on, and every transaction
//     starts with BEGIN IMMEDIATE, so writers run one at a time; within one
//     process they also queue on a mutex, cheaper than SQLite's sleeping
//     busy handler. Readers run beside them. synchronous=NORMAL: a commit
//     survives the process being killed (kill -9); a power loss may drop
//     the last commits, never corrupt the file. The file is created 0600.
//   - PostgreSQL: READ COMMITTED; a read-modify-write locks the machine row
//     first (SELECT … FOR UPDATE), and Claim picks its machine with
//     FOR UPDATE SKIP LOCKED. The UNIQUE (machine, process) of the work table
//     is the final word: a claim that loses the race retries elsewhere.
//
// Times are Unix milliseconds from the writing process's clock; replicas
// sharing PostgreSQL keep their clocks in sync (NTP), as any lease needs.
//
// # Tables
//
//	machines        id, name (unique), labels, boot MAC, BMC address and the name of
//	                its credentials, the spec (JSON), state, status, error, the pending
//	                command and its generation, generation, timestamps
//	machine_macs    every MAC → its one machine
//	secrets         BMC credentials by name (PutCredentials); never listed or logged
//	hardware        the last hardware report (metal3 HardwareDetails JSON)
//	agent_sessions  per machine: SHA-256 of this boot's token, start, last heartbeat, end
//	installs        install requests by generation (provision/deprovision + the spec
//	                they were issued with), result, progress; newest 16 kept
//	install_steps   step reports of an install: index, name, result, duration, error
//	logs, log_usage agent log lines, bounded per machine in bytes (default 1 MiB)
//	events          the history of a machine, bounded per machine (default 500)
//	sessions        component sessions: component, interval, deadline
//	work            (machine, process) UNIQUE → the session holding it
//	work_history    started / finished / failed / cancelled, with cause; bounded per
//	                machine (default 1,000), kept when the machine is deleted
//	work_backoff    (machine, process) → until, cause, last interval
//
// # Lifecycle
//
// A machine has metal3's provisioning state (registering, inspecting,
// available, preparing, provisioning, provisioned, deprovisioning,
// externally provisioned, powering off before delete, deleting) and an
// operational status (OK, discovered, error, detached), plus the last error's
// type, message and count. Transition is the one function that moves a
// machine; the table in lifecycle.go says which moves are allowed (any state
// but deleting may go to powering off before delete and deleting). Each
// transition appends an event (time, type, reason, message, generation). A
// transition can issue a command for the agent (inspect, provision,
// deprovision, reboot, poweroff); issuing one bumps the generation, as does
// a change of the spec (UpdateMachine). Calls are idempotent: a
// transition that finds the machine already where it leads changes nothing
// and appends nothing. Generations guard against the stale: a transition or
// update may carry the generation it was based on, and every agent report
// (CompleteCommand, ReportStep, ReportProgress) must carry the current one;
// otherwise ErrStaleGeneration and nothing changes. For agent reports the
// current generation is the pending command's (CompleteCommand) or the
// latest install's (steps, progress), so a spec edited while a machine is
// inspecting does not strand the inspection.
//
// The usual path: CreateMachine (registering) or an enrollment (registering,
// discovered) → Transition to inspecting with inspect → the agent's
// CompleteCommand → available → Transition to provisioning with provision
// (an install row records the spec) → steps, progress, logs → CompleteCommand
// → provisioned (the agent session ends: the OS boots) → deprovisioning with
// deprovision → available. A failed command keeps the state, sets status
// error and counts; re-issuing the command retries under a new generation.
// Deleting: powering off before delete with poweroff → deleting →
// DeleteMachine.
//
// # Agents
//
// Enroll takes an agent's MACs and hardware report. MACs of no machine create
// a discovered one (unless WithoutAutoDiscovery; bounded by
// WithMaxDiscovered). It issues a per-boot token: 32 random bytes, returned
// once, stored as its SHA-256. While the machine's agent session is live (not
// ended, heartbeat within WithAgentSessionTTL) a second enrollment is refused
// with ErrSessionLive and recorded as an event. Authenticate compares in
// constant time, and an unknown MAC, an ended session and a wrong token give
// the same ErrUnauthorized. It remembers a verified (MAC, token) pair for up
// to AuthCacheTTL, so an agent's next requests cost no query; any change of
// the machine drops it, on every replica (LISTEN/NOTIFY), and a replica whose
// listener is not connected does not use the cache, so a token that stopped
// working on one replica is refused by the others within the notification's
// delivery (authcache.go). Heartbeat records the last time. WaitCommand is
// the long poll: it returns as soon as a command is issued for the machine,
// by this process (an in-process notifier) or, on PostgreSQL, by another
// replica (pg_notify at commit, a LISTEN connection per DB that reconnects
// and then wakes every waiter to re-read); a slow poll (WithCommandPoll,
// 30 s) is the safety net.
//
// # Work (seed 004)
//
// A control loop opens a Session (component, interval). A keeper goroutine
// pokes its deadline every interval/3; a failed poke is retried within the
// lease, and only when the lease would lapse (or the database says the
// session is gone) does the session end (Done, Err). Session.Claim picks one
// machine matching a Filter (states, one machine, a silent agent) that no
// live session holds for the process (or for processes marked Exclusive) and
// that is not in backoff, and inserts the work row and a "started" history
// entry, all in one transaction after checking the session is alive. The
// side effect (a BMC call, SSH) happens outside the database while the row is
// held. Then exactly one of: Finish (row and backoff deleted, "finished", and
// an optional Transition applied, in one transaction), Fail (row deleted,
// "failed" with cause, backoff upserted), Cancel ("cancelled" with cause).
// Backoff: the first failure waits Initial, each further one the last
// interval × Exponent, capped at Maximum, in whole seconds, shortened by up to
// Jitter; only the last interval is stored; Finish resets it.
//
// # What we changed from Monogon's BMDB
//
//   - Work held by a session past its deadline is reclaimed: Claim deletes
//     such a row (history: cancelled, "reclaimed: session … expired") and
//     ReclaimExpired sweeps expired sessions. The old holder's Finish or Fail
//     then fails with ErrWorkLost or ErrSessionExpired, so it cannot end
//     someone else's claim. Monogon never collected sessions and its queries
//     ignored deadlines: a crashed worker locked its machines forever.
//   - The session keeper tolerates failed pokes until the lease would lapse;
//     Monogon's retry check was inverted, so one failed poke ended a session.
//     The keeper also ends the session in this process a tenth of an interval
//     before the database's deadline, so a reclaimer never overlaps it.
//   - Backoff has jitter.
//   - State is a lifecycle column with metal3's states and an event
//     history, not one tag table per fact; SQLite works as well as
//     PostgreSQL (Monogon needed CockroachDB's serializable transactions).
//
// # For the HTTP layer
//
// Map the sentinels: ErrInvalid → 400, ErrUnauthorized → 401 (the same
// answer for an unknown MAC), ErrNotFound → 404, ErrConflict,
// ErrInvalidTransition and ErrStaleGeneration → 409, ErrLimit → 413 or 429.
// Machine.LogValue keeps the spec (user data) out of logs; Credentials print
// without their password; listings never hold secrets, only CredentialsRef.
package bmdb
