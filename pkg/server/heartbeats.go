package server

import (
	"context"
	"sync"
	"time"
)

// HeartbeatFlushInterval is how long bootyd buffers agents' heartbeats
// before it writes them to the BMDB in one transaction: a fleet of 10,000
// agents then costs one write a second instead of a thousand. A heartbeat
// only keeps a session from expiring (minutes), so a second's delay, or the
// loss of the last second's heartbeats in a crash, changes nothing.
const HeartbeatFlushInterval = time.Second

// heartbeatBuffer holds the heartbeats received since the last flush,
// machine ID → time of the latest.
type heartbeatBuffer struct {
	mu        sync.Mutex
	pending   map[string]time.Time
	scheduled bool
	flushing  sync.Mutex // one flush at a time, in order
}

// heartbeat buffers the heartbeat of machine id and makes sure a flush
// runs within HeartbeatFlushInterval.
func (s *Server) heartbeat(id string) {
	b := &s.beats
	b.mu.Lock()
	if b.pending == nil {
		b.pending = make(map[string]time.Time)
	}
	b.pending[id] = s.opts.Now()
	if !b.scheduled {
		b.scheduled = true
		time.AfterFunc(s.opts.HeartbeatFlush, func() { s.flushHeartbeats(context.Background()) })
	}
	b.mu.Unlock()
}

// flushHeartbeats writes the buffered heartbeats in one batch, bounded by
// a timeout of 30 s. A failed batch is logged and dropped: the agents'
// next heartbeats come within their interval, long before their sessions
// could expire.
func (s *Server) flushHeartbeats(ctx context.Context) {
	b := &s.beats
	b.flushing.Lock()
	defer b.flushing.Unlock()
	b.mu.Lock()
	beats := b.pending
	b.pending, b.scheduled = nil, false
	b.mu.Unlock()
	if len(beats) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := s.db.HeartbeatMany(ctx, beats); err != nil {
		s.log.Warn("record heartbeats", "agents", len(beats), "err", err)
	}
}
