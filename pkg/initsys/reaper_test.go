package initsys

import (
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// zombie reports whether pid is a zombie (state Z in /proc/pid/stat).
func zombie(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i > 0 && i+2 < len(s) && s[i+2] == 'Z'
}

// TestReaper runs real processes: the test process becomes a child
// subreaper so orphans are handed to it as they would be to PID 1.
func TestReaper(t *testing.T) {
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		t.Fatalf("become subreaper: %v", err)
	}
	t.Cleanup(func() { unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0) })

	r := NewReaper(slog.New(slog.NewTextHandler(t.Output(), nil)))
	r.Grace = 300 * time.Millisecond
	r.Interval = 50 * time.Millisecond
	r.Start()
	defer r.Stop()

	// An orphan: sh starts a short sleep in the background and exits.
	out, err := exec.Command("sh", "-c", "sleep 0.1 >/dev/null 2>&1 & echo $!").Output()
	if err != nil {
		t.Fatal(err)
	}
	orphan, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil {
		t.Fatal(err)
	}

	// Our own children, waited the usual ways while the reaper runs.
	for i := 0; i < 5; i++ {
		if err := exec.Command("sh", "-c", "sleep 0.05; exit 3").Run(); err == nil || err.(*exec.ExitError).ExitCode() != 3 {
			t.Fatalf("Run: exit status lost: %v", err)
		}
	}
	// Started, Wait called late but inside Grace.
	c := exec.Command("true")
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	if err := c.Wait(); err != nil {
		t.Errorf("Wait inside grace: %v", err)
	}
	// Started, Wait called long after Grace, protected.
	c = exec.Command("sh", "-c", "exit 7")
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	r.Protect(c.Process.Pid)
	time.Sleep(3 * r.Grace)
	if err := c.Wait(); err == nil || c.ProcessState.ExitCode() != 7 {
		t.Errorf("Wait of protected child after grace: %v, want exit 7", err)
	}
	r.Release(c.Process.Pid)

	deadline := time.Now().Add(5 * time.Second)
	for zombie(orphan) || r.Reaped() == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("orphan %d not reaped (zombie=%v, reaped=%d)", orphan, zombie(orphan), r.Reaped())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestReapOnceGraceAndProtect(t *testing.T) {
	now := time.Unix(0, 0)
	zombies := []int{10, 11}
	var reaped []int
	r := &Reaper{
		Grace: time.Second, Log: slog.New(slog.DiscardHandler),
		Now: func() time.Time { return now },
		Peek: func() (int, error) {
			if len(zombies) == 0 {
				return 0, nil
			}
			return zombies[0], nil
		},
		Reap: func(pid int) (unix.WaitStatus, error) {
			reaped = append(reaped, pid)
			zombies = zombies[1:]
			return 0, nil
		},
	}
	if n := r.ReapOnce(); n != 0 {
		t.Fatalf("reaped %d zombies before their grace", n)
	}
	r.Protect(10)
	now = now.Add(2 * time.Second)
	if n := r.ReapOnce(); n != 0 {
		t.Fatalf("reaped a protected pid")
	}
	r.Release(10)
	// 10 is past grace; 11 is seen for the first time and waits.
	if n := r.ReapOnce(); n != 1 || reaped[0] != 10 {
		t.Fatalf("ReapOnce = %d, reaped %v; want 10 only", n, reaped)
	}
	now = now.Add(2 * time.Second)
	if n := r.ReapOnce(); n != 1 || reaped[1] != 11 {
		t.Fatalf("ReapOnce = %d, reaped %v; want 11", n, reaped)
	}
}
