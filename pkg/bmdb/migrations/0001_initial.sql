-- The Bare Metal Database, version 1. One file for SQLite and PostgreSQL:
-- {{serial}} and {{blob}} are replaced per engine. Times are Unix
-- milliseconds (BIGINT); JSON is TEXT; booleans are INTEGER 0/1.

-- A machine: identity, desired spec, lifecycle state and the one pending
-- command for its agent. generation is bumped on every change of the spec,
-- the BMC or the command; commands and reports carry it.
CREATE TABLE machines (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL UNIQUE,
    labels TEXT NOT NULL DEFAULT '{}',
    boot_mac TEXT NOT NULL,
    bmc_address TEXT NOT NULL DEFAULT '',
    bmc_credentials TEXT NOT NULL DEFAULT '',
    bmc_insecure INTEGER NOT NULL DEFAULT 0,
    spec TEXT NOT NULL DEFAULT '{}',
    state TEXT NOT NULL,
    status TEXT NOT NULL,
    error_type TEXT NOT NULL DEFAULT '',
    error_message TEXT NOT NULL DEFAULT '',
    error_count INTEGER NOT NULL DEFAULT 0,
    command TEXT NOT NULL DEFAULT '',
    command_generation BIGINT NOT NULL DEFAULT 0,
    command_issued_at BIGINT NOT NULL DEFAULT 0,
    generation BIGINT NOT NULL DEFAULT 1,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL,
    state_changed_at BIGINT NOT NULL
);
CREATE INDEX machines_state ON machines (state);
CREATE INDEX machines_status ON machines (status);

-- Every MAC of a machine, the boot MAC included. A MAC maps to one machine.
CREATE TABLE machine_macs (
    mac TEXT PRIMARY KEY,
    machine_id TEXT NOT NULL REFERENCES machines (id) ON DELETE CASCADE
);
CREATE INDEX machine_macs_machine ON machine_macs (machine_id);

-- BMC credentials, referred to by name from machines.bmc_credentials. Never
-- returned by listings.
CREATE TABLE secrets (
    name TEXT PRIMARY KEY,
    value TEXT NOT NULL,
    updated_at BIGINT NOT NULL
);

-- The last hardware report of a machine's agent (metal3 HardwareDetails JSON).
CREATE TABLE hardware (
    machine_id TEXT PRIMARY KEY REFERENCES machines (id) ON DELETE CASCADE,
    report TEXT NOT NULL,
    updated_at BIGINT NOT NULL
);

-- The agent session of a machine's current boot: the SHA-256 of its token
-- and its last heartbeat. ended_at is set when the session ends.
CREATE TABLE agent_sessions (
    machine_id TEXT PRIMARY KEY REFERENCES machines (id) ON DELETE CASCADE,
    token_hash {{blob}} NOT NULL,
    started_at BIGINT NOT NULL,
    heartbeat_at BIGINT NOT NULL,
    ended_at BIGINT,
    end_reason TEXT NOT NULL DEFAULT ''
);

-- Install requests (a provision or deprovision command, with the spec it was
-- issued with) and their reports, by generation.
CREATE TABLE installs (
    machine_id TEXT NOT NULL REFERENCES machines (id) ON DELETE CASCADE,
    generation BIGINT NOT NULL,
    kind TEXT NOT NULL,
    spec TEXT NOT NULL,
    requested_at BIGINT NOT NULL,
    finished_at BIGINT,
    result TEXT NOT NULL DEFAULT '',
    error TEXT NOT NULL DEFAULT '',
    progress_step TEXT NOT NULL DEFAULT '',
    bytes_done BIGINT NOT NULL DEFAULT 0,
    bytes_total BIGINT NOT NULL DEFAULT 0,
    progress_at BIGINT,
    PRIMARY KEY (machine_id, generation)
);

-- Step reports of an install.
CREATE TABLE install_steps (
    machine_id TEXT NOT NULL,
    generation BIGINT NOT NULL,
    idx INTEGER NOT NULL,
    total INTEGER NOT NULL DEFAULT 0,
    name TEXT NOT NULL,
    result TEXT NOT NULL,
    duration_ms BIGINT NOT NULL DEFAULT 0,
    error TEXT NOT NULL DEFAULT '',
    detail TEXT NOT NULL DEFAULT '{}',
    updated_at BIGINT NOT NULL,
    PRIMARY KEY (machine_id, generation, idx),
    FOREIGN KEY (machine_id, generation) REFERENCES installs (machine_id, generation) ON DELETE CASCADE
);

-- Agent log lines, bounded per machine in bytes (log_usage keeps the sum).
CREATE TABLE logs (
    id {{serial}},
    machine_id TEXT NOT NULL REFERENCES machines (id) ON DELETE CASCADE,
    at BIGINT NOT NULL,
    level TEXT NOT NULL,
    message TEXT NOT NULL,
    size INTEGER NOT NULL
);
CREATE INDEX logs_machine ON logs (machine_id, id);

CREATE TABLE log_usage (
    machine_id TEXT PRIMARY KEY REFERENCES machines (id) ON DELETE CASCADE,
    bytes BIGINT NOT NULL
);

-- The event history of a machine, bounded per machine in rows.
CREATE TABLE events (
    id {{serial}},
    machine_id TEXT NOT NULL REFERENCES machines (id) ON DELETE CASCADE,
    at BIGINT NOT NULL,
    type TEXT NOT NULL,
    reason TEXT NOT NULL,
    message TEXT NOT NULL,
    generation BIGINT NOT NULL
);
CREATE INDEX events_machine ON events (machine_id, id);

-- Component sessions (seed 004): a worker's lease, kept alive by poking the
-- deadline forward.
CREATE TABLE sessions (
    id TEXT PRIMARY KEY,
    component TEXT NOT NULL,
    runtime_info TEXT NOT NULL,
    interval_ms BIGINT NOT NULL,
    created_at BIGINT NOT NULL,
    deadline BIGINT NOT NULL
);

-- Work in progress: one row per (machine, process), held by a session. A row
-- whose session is past its deadline is reclaimed by the next claimer.
CREATE TABLE work (
    machine_id TEXT NOT NULL REFERENCES machines (id),
    process TEXT NOT NULL,
    session_id TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    started_at BIGINT NOT NULL,
    PRIMARY KEY (machine_id, process)
);
CREATE INDEX work_session ON work (session_id);

-- The audit trail of work: started, finished, failed, cancelled (with cause).
-- Not a foreign key: the history outlives the machine.
CREATE TABLE work_history (
    id {{serial}},
    machine_id TEXT NOT NULL,
    process TEXT NOT NULL,
    session_id TEXT NOT NULL,
    event TEXT NOT NULL,
    at BIGINT NOT NULL,
    cause TEXT NOT NULL DEFAULT ''
);
CREATE INDEX work_history_machine ON work_history (machine_id, id);

-- Backoff of a failed (machine, process): not claimed again before until_at.
-- last_interval_s is the un-jittered interval the next failure grows from.
CREATE TABLE work_backoff (
    machine_id TEXT NOT NULL REFERENCES machines (id) ON DELETE CASCADE,
    process TEXT NOT NULL,
    until_at BIGINT NOT NULL,
    cause TEXT NOT NULL,
    last_interval_s BIGINT NOT NULL,
    PRIMARY KEY (machine_id, process)
);
