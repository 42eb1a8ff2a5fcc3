package server

import (
	"context"
	"testing"
	"time"

	"github.com/booty-dev/booty/pkg/api"
)

// TestHeartbeatsBatched: a heartbeat is answered at once and lands in the
// BMDB with the next flush; the machine's agent shows it to the operator.
func TestHeartbeatsBatched(t *testing.T) {
	clock := time.Now().Add(time.Hour).Truncate(time.Millisecond) // later than the enrollment's
	e := newEnv(t, func(o *Options) {
		o.HeartbeatFlush = 50 * time.Millisecond
		o.Now = func() time.Time { return clock }
	})
	p := agentFor(e, "52:54:00:00:30:01")
	defer p.Close()
	load(t, p)
	eventually(t, "the enrollment", func() bool { return p.MAC() != "" })
	if code, _, body := e.agentDo(t, p, "heartbeat", api.Heartbeat{}); code != 200 {
		t.Fatalf("heartbeat: %d %s", code, body)
	}
	m, err := e.srv.db.MachineByMAC(context.Background(), "52:54:00:00:30:01")
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "the heartbeat in the BMDB", func() bool {
		s, err := e.srv.db.GetAgentSession(context.Background(), m.ID)
		return err == nil && s.HeartbeatAt.Equal(clock)
	})
	if d := e.show(t, m.Name); d.Agent == nil || !d.Agent.LastHeartbeat.Equal(clock) {
		t.Fatalf("operator view of the agent: %+v, want the heartbeat at %s", d.Agent, clock)
	}
}
