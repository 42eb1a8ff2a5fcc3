package main

import (
	"context"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/booty-dev/booty/internal/testenv"
)

func TestQuantile(t *testing.T) {
	var d []time.Duration
	for i := 1; i <= 100; i++ {
		d = append(d, time.Duration(i)*time.Millisecond)
	}
	if q := quantile(d, 0.5); q != 50*time.Millisecond {
		t.Errorf("p50 = %s, want 50ms", q)
	}
	if q := quantile(d, 0.99); q != 99*time.Millisecond {
		t.Errorf("p99 = %s, want 99ms", q)
	}
	if q := quantile(nil, 0.99); q != 0 {
		t.Errorf("p99 of nothing = %s", q)
	}
}

func TestRecorderDropsTheWarmUp(t *testing.T) {
	r := newRecorder(time.Now().Add(-time.Second))
	r.observe("a", 10*time.Millisecond, "200") // started after from
	r.observe("a", 2*time.Second, "200")       // started before from: warm-up
	r.observe("a", 20*time.Millisecond, "503") // kept, a failure
	r.observe("a", 30*time.Millisecond, "error: timeout")
	s := r.snapshot(time.Second)
	if len(s) != 1 || s[0].Count != 3 || s[0].ok() != 1 || s[0].failures() != "503 ×1, error: timeout ×1" {
		t.Errorf("snapshot %+v", s)
	}
	res := result{steady: s}
	if res.serverErrors() != 2 {
		t.Errorf("serverErrors = %d, want 2", res.serverErrors())
	}
}

// TestQuickRun runs the generator for real, small and short: the built
// bootyd, 60 agents on SQLite and on two replicas sharing PostgreSQL, every
// provision done, the report written with a verdict. It asserts what the
// generator did, not how fast bootyd was.
func TestQuickRun(t *testing.T) {
	if testing.Short() {
		t.Skip("builds bootyd and runs it for a minute")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "bootyd")
	build := exec.Command("go", "build", "-o", bin, "github.com/booty-dev/booty/cmd/bootyd")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build bootyd: %v\n%s", err, out)
	}
	scen := "sqlite,postgres"
	if _, err := os.Stat("/usr/lib/postgresql"); err != nil && !testenv.CI() {
		t.Log("WARNING: no PostgreSQL installed (hack/deps.sh installs it): the quick run is on SQLite only")
		scen = "sqlite"
	}
	c := config{bootyd: bin, out: filepath.Join(dir, "report"), agents: 60, duration: 12 * time.Second, heartbeat: 2 * time.Second,
		pollWait: 5 * time.Second, provisions: 3, writeTime: 2 * time.Second, scenarios: scen, steps: "", stepDuration: 10 * time.Second,
		enrollConc: 8, registerConc: 8, watchInterval: time.Second, goalP99: 10 * time.Second, goalRSS: 4 << 30, pgDurable: false}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := run(ctx, c, slog.New(slog.NewTextHandler(t.Output(), nil)), io.Discard); err != nil {
		t.Fatalf("run: %v", err)
	}
	b, err := os.ReadFile(filepath.Join(c.out, "fleet.md"))
	if err != nil {
		t.Fatal(err)
	}
	md := string(b)
	t.Log(md)
	for _, w := range []string{"| SQLite, one bootyd | ", "3 of 3", "POST …/heartbeat", "POST …/progress", "POST …/logs", "bootyd1 RSS: peak"} {
		if !strings.Contains(md, w) {
			t.Errorf("report lacks %q", w)
		}
	}
	if strings.Contains(scen, "postgres") && (!strings.Contains(md, "| PostgreSQL, two bootyd replicas | ") || !strings.Contains(md, "bootyd2 RSS")) {
		t.Errorf("report lacks the PostgreSQL run with two replicas")
	}
	// Every run: all 3 provisions reported done, no 5xx or transport error.
	if n := strings.Count(md, "| 3 of 3 | 0 |"); n != strings.Count(scen, ",")+1 {
		t.Errorf("%d runs completed every provision without errors, want every run", n)
	}
}
