package bmdb

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"time"
)

// maxHeartbeatBatch bounds the heartbeats one HeartbeatMany statement or
// transaction carries; larger batches are split.
const maxHeartbeatBatch = 5000

// HeartbeatMany records, in one write transaction per maxHeartbeatBatch
// machines, that the agents of the machines in beats were alive at the
// times given (machine ID → time). It is Heartbeat for many agents at once:
// a caller that buffers the heartbeats of a fleet (bootyd flushes them every
// second) writes once instead of once per agent. A session that ended, or
// already has a later heartbeat, is left as it is; unknown IDs are skipped.
// On failure no heartbeat of the failed batch is recorded. On PostgreSQL
// the batches commit without waiting for the WAL flush (synchronous_commit
// off for them alone): a crash may lose the last second's heartbeats,
// which the next ones replace.
func (db *DB) HeartbeatMany(ctx context.Context, beats map[string]time.Time) error {
	ids := make([]string, 0, len(beats))
	for id := range beats {
		ids = append(ids, id)
	}
	// One order for every replica, so that two batches never wait for
	// each other's row locks in a cycle.
	slices.Sort(ids)
	for len(ids) > 0 {
		n := min(len(ids), maxHeartbeatBatch)
		if err := db.heartbeatBatch(ctx, ids[:n], beats); err != nil {
			return err
		}
		ids = ids[n:]
	}
	return nil
}

func (db *DB) heartbeatBatch(ctx context.Context, ids []string, beats map[string]time.Time) error {
	ts := make([]int64, len(ids))
	for i, id := range ids {
		ts[i] = ms(beats[id].Truncate(time.Millisecond))
	}
	return db.write(ctx, "record heartbeats", func(tx *sql.Tx) error {
		if db.engine == EnginePostgres {
			// The one write whose loss in a crash is harmless by design:
			// the agents' next heartbeats replace it, long before a
			// session could expire. Its commit does not wait for the WAL
			// flush (PostgreSQL still never corrupts or reorders it);
			// every other write, reports and commands above all, stays
			// synchronous: nothing of theirs may be lost.
			if _, err := tx.ExecContext(ctx, "SET LOCAL synchronous_commit = off"); err != nil {
				return fmt.Errorf("record %d heartbeats: %w", len(ids), err)
			}
			// One statement: a round trip per agent would hold the row
			// locks of the whole batch for as many round trips.
			_, err := tx.ExecContext(ctx, `UPDATE agent_sessions s SET heartbeat_at = v.t
				FROM (SELECT unnest($1::text[]) AS id, unnest($2::bigint[]) AS t) v
				WHERE s.machine_id = v.id AND s.ended_at IS NULL AND s.heartbeat_at < v.t`, ids, ts)
			if err != nil {
				return fmt.Errorf("record %d heartbeats: %w", len(ids), err)
			}
			return nil
		}
		st, err := tx.PrepareContext(ctx, `UPDATE agent_sessions SET heartbeat_at = ?
			WHERE machine_id = ? AND ended_at IS NULL AND heartbeat_at < ?`)
		if err != nil {
			return fmt.Errorf("record %d heartbeats: %w", len(ids), err)
		}
		defer st.Close()
		for i, id := range ids {
			if _, err := st.ExecContext(ctx, ts[i], id, ts[i]); err != nil {
				return fmt.Errorf("record heartbeat of machine %s: %w", id, err)
			}
		}
		return nil
	})
}
