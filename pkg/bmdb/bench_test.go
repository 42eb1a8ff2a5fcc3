package bmdb_test

import (
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/booty-dev/booty/pkg/bmdb"
	"github.com/booty-dev/booty/pkg/bmdb/bmdbtest"
)

// BenchmarkHeartbeat measures agent heartbeat writes over a fleet of 10,000
// enrolled machines, with 16 concurrent writers (as HTTP handlers would be):
// "heartbeat" is the write alone, "auth+heartbeat" adds the token check each
// request pays, "auth+poll" is the token check and the read of the pending
// command a command poll makes. The target is 1,000 heartbeats/s on SQLite
// (bootyd batches them since: bmdb.HeartbeatMany).
//
//	go test -run '^$' -bench Heartbeat -benchtime 5s ./pkg/bmdb/
func BenchmarkHeartbeat(b *testing.B) {
	const fleet = 10000
	for _, e := range bmdbtest.Engines() {
		b.Run(e.Name, func(b *testing.B) {
			db := open(b, e.DSN(b), bmdb.WithMaxDiscovered(fleet))
			type agent struct{ id, mac, token string }
			agents := make([]agent, fleet)
			start := time.Now()
			var wg sync.WaitGroup
			var next atomic.Int64
			errs := make(chan error, 8)
			for g := 0; g < 8; g++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := int(next.Add(1) - 1); i < fleet; i = int(next.Add(1) - 1) {
						en, err := db.Enroll(ctx(b), bmdb.Enrollment{MACs: []string{mac(i)}, Hardware: hw})
						if err != nil {
							errs <- err
							return
						}
						agents[i] = agent{en.Machine.ID, mac(i), en.Token}
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				b.Fatal(err)
			}
			b.Logf("%s: enrolled %d agents in %s", e.Name, fleet, time.Since(start).Round(time.Millisecond))

			run := func(b *testing.B, auth, poll bool) {
				var i atomic.Int64
				b.SetParallelism(8) // × GOMAXPROCS goroutines
				b.ResetTimer()
				t0 := time.Now()
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						a := agents[int(i.Add(1))%fleet]
						if auth {
							if _, err := db.Authenticate(ctx(b), a.mac, a.token); err != nil {
								b.Error(err)
								return
							}
						}
						if poll {
							if _, err := db.PendingCommand(ctx(b), a.id); err != nil {
								b.Error(err)
								return
							}
							continue
						}
						if err := db.Heartbeat(ctx(b), a.id); err != nil {
							b.Error(err)
							return
						}
					}
				})
				b.ReportMetric(float64(b.N)/time.Since(t0).Seconds(), "heartbeats/s")
			}
			b.Run("heartbeat", func(b *testing.B) { run(b, false, false) })
			b.Run("auth+heartbeat", func(b *testing.B) { run(b, true, false) })
			// What each command poll costs before it parks.
			b.Run("auth+poll", func(b *testing.B) { run(b, true, true) })
		})
	}
}

// BenchmarkClaim measures claim + finish cycles of four sessions over a
// fleet of 10,000 machines (each claim moves its machine out of the filter,
// as a control loop's Finish does).
//
//	go test -run '^$' -bench Claim ./pkg/bmdb/
func BenchmarkClaim(b *testing.B) {
	const fleet = 10000
	for _, e := range bmdbtest.Engines() {
		b.Run(e.Name, func(b *testing.B) {
			db := open(b, e.DSN(b))
			for i := 0; i < fleet; i++ {
				if _, err := db.CreateMachine(ctx(b), bmdb.NewMachine{Name: "m" + strconv.Itoa(i), BootMAC: mac(i)}); err != nil {
					b.Fatal(err)
				}
			}
			var sessions []*bmdb.Session
			for i := 0; i < 4; i++ {
				s, err := db.StartSession(ctx(b), bmdb.SessionConfig{Component: "bench"})
				if err != nil {
					b.Fatal(err)
				}
				sessions = append(sessions, s)
			}
			var n atomic.Int64
			b.SetParallelism(2)
			b.ResetTimer()
			t0 := time.Now()
			b.RunParallel(func(pb *testing.PB) {
				s := sessions[int(n.Add(1))%len(sessions)]
				for pb.Next() {
					w, err := s.Claim(ctx(b), "bench", bmdb.Filter{States: []bmdb.State{bmdb.StateRegistering, bmdb.StateAvailable}})
					if err != nil {
						b.Error(err)
						return
					}
					// Alternate the machine between two states so the fleet never runs dry.
					m, err := db.GetMachine(ctx(b), w.MachineID)
					if err != nil {
						b.Error(err)
						return
					}
					to := bmdb.StateAvailable
					if m.State == bmdb.StateAvailable {
						to = bmdb.StateInspecting
					}
					if err := w.Finish(ctx(b), &bmdb.Transition{To: to, Reason: "Bench"}); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/time.Since(t0).Seconds(), "claims/s")
		})
	}
}
