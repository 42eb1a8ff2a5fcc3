package manager_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"github.com/booty-dev/booty/pkg/bmdb"
	"github.com/booty-dev/booty/pkg/bmdb/bmdbtest"
	"github.com/booty-dev/booty/pkg/manager"
)

func TestMain(m *testing.M) { os.Exit(bmdbtest.Main(m)) }

func logger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func open(t *testing.T, dsn string) *bmdb.DB {
	t.Helper()
	db, err := bmdb.Open(testCtx(t), dsn, bmdb.WithLogger(logger(t)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func mac(n int) string { return fmt.Sprintf("52:54:00:%02x:%02x:%02x", n>>16&0xff, n>>8&0xff, n&0xff) }

func loopConfig(t *testing.T, parallelism int) manager.ControlLoopConfig {
	return manager.ControlLoopConfig{DBQueryLimiter: rate.NewLimiter(rate.Every(10*time.Millisecond), 1), Parallelism: parallelism, Logger: logger(t)}
}

// runLoop runs loop in the background until the test ends.
func runLoop(t *testing.T, db *bmdb.DB, loop manager.ControlLoop) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := manager.RunControlLoop(ctx, db, loop); err != nil {
			t.Errorf("run control loop: %v", err)
		}
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(time.Minute):
			t.Error("control loop did not stop within a minute")
		}
	})
}

// eventually polls cond every 50 ms until it is true or the bound passes.
func eventually(t *testing.T, bound time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(bound)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, bound)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func events(t *testing.T, db *bmdb.DB, id, reason string) []bmdb.Event {
	t.Helper()
	evs, err := db.Events(testCtx(t), id, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	var out []bmdb.Event
	for _, e := range evs {
		if e.Reason == reason {
			out = append(out, e)
		}
	}
	return out
}
