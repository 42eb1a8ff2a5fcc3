package bmdb_test

import (
	"testing"
	"time"

	"github.com/booty-dev/booty/pkg/bmdb"
)

// HeartbeatMany records many agents' heartbeats at once: live sessions get
// theirs, an ended session and an older time change nothing, unknown IDs
// are skipped.
func TestHeartbeatMany(t *testing.T) {
	engines(t, func(t *testing.T, db *bmdb.DB) {
		var ids []string
		for i := 1; i <= 3; i++ {
			ids = append(ids, must[bmdb.Enrolled](t)(db.Enroll(ctx(t), bmdb.Enrollment{MACs: []string{mac(i)}})).Machine.ID)
		}
		if err := db.EndAgentSession(ctx(t), ids[2], "test"); err != nil {
			t.Fatal(err)
		}
		before := make([]time.Time, len(ids))
		for i, id := range ids {
			before[i] = must[bmdb.AgentSession](t)(db.GetAgentSession(ctx(t), id)).HeartbeatAt
		}
		later := time.Now().Add(time.Minute).Truncate(time.Millisecond)
		beats := map[string]time.Time{ids[0]: later, ids[1]: before[1].Add(-time.Hour), ids[2]: later, "no-such-machine": later}
		if err := db.HeartbeatMany(ctx(t), beats); err != nil {
			t.Fatal(err)
		}
		got := func(i int) time.Time {
			return must[bmdb.AgentSession](t)(db.GetAgentSession(ctx(t), ids[i])).HeartbeatAt
		}
		if g := got(0); !g.Equal(later) {
			t.Errorf("live session: heartbeat %s, want %s", g, later)
		}
		if g := got(1); !g.Equal(before[1]) {
			t.Errorf("an older heartbeat moved the session's back: %s, was %s", g, before[1])
		}
		if g := got(2); !g.Equal(before[2]) {
			t.Errorf("ended session: heartbeat %s, was %s", g, before[2])
		}
		if err := db.HeartbeatMany(ctx(t), nil); err != nil {
			t.Fatalf("no heartbeats: %v", err)
		}
	})
}
