package bmdb

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"
)

// listDetailsChunk bounds the machine IDs of one ListDetails query.
const listDetailsChunk = 500

// ListDetails is what a listing shows of each machine beyond its row.
type ListDetails struct {
	// Sessions are the agent sessions by machine ID; a machine whose agent
	// never enrolled has none.
	Sessions map[string]AgentSession
	// Progress is the progress of each machine's latest install, by
	// machine ID; a machine never provisioned has none.
	Progress map[string]Progress
}

// ListDetails reads the agent sessions and the latest installs' progress of
// the machines ids in two queries per listDetailsChunk machines, instead of
// GetAgentSession and GetInstall for each. Unknown IDs are left out.
func (db *DB) ListDetails(ctx context.Context, ids []string) (ListDetails, error) {
	d := ListDetails{Sessions: make(map[string]AgentSession, len(ids)), Progress: make(map[string]Progress)}
	for len(ids) > 0 {
		n := min(len(ids), listDetailsChunk)
		if err := db.listDetails(ctx, ids[:n], d); err != nil {
			return ListDetails{}, err
		}
		ids = ids[n:]
	}
	return d, nil
}

func (db *DB) listDetails(ctx context.Context, ids []string, d ListDetails) error {
	in := strings.TrimSuffix(strings.Repeat("?, ", len(ids)), ", ")
	args := make([]any, len(ids))
	for i, id := range ids {
		args[i] = id
	}
	rows, err := db.sql.QueryContext(ctx, db.q(`SELECT machine_id, started_at, heartbeat_at, ended_at, end_reason
		FROM agent_sessions WHERE machine_id IN (`+in+`)`), args...)
	if err != nil {
		return fmt.Errorf("list agent sessions of %d machines: %w", len(ids), err)
	}
	for rows.Next() {
		var s AgentSession
		var started, hb int64
		var ended sql.NullInt64
		if err := rows.Scan(&s.MachineID, &started, &hb, &ended, &s.EndReason); err != nil {
			rows.Close()
			return fmt.Errorf("list agent sessions: %w", err)
		}
		s.StartedAt, s.HeartbeatAt, s.EndedAt = fromMS(started), fromMS(hb), fromNullMS(ended)
		s.Live = !ended.Valid && time.Since(s.HeartbeatAt) < db.opts.agentSessionTTL
		d.Sessions[s.MachineID] = s
	}
	if err := rows.Close(); err != nil {
		return fmt.Errorf("list agent sessions: %w", err)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("list agent sessions: %w", err)
	}
	rows, err = db.sql.QueryContext(ctx, db.q(`SELECT i.machine_id, i.progress_step, i.bytes_done, i.bytes_total, i.progress_at
		FROM installs i WHERE i.machine_id IN (`+in+`)
		AND i.generation = (SELECT MAX(j.generation) FROM installs j WHERE j.machine_id = i.machine_id)`), args...)
	if err != nil {
		return fmt.Errorf("list installs of %d machines: %w", len(ids), err)
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		var p Progress
		var at sql.NullInt64
		if err := rows.Scan(&id, &p.Step, &p.BytesDone, &p.BytesTotal, &at); err != nil {
			return fmt.Errorf("list installs: %w", err)
		}
		p.Time = fromNullMS(at)
		d.Progress[id] = p
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("list installs: %w", err)
	}
	return nil
}
