package bmdb_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/booty-dev/booty/pkg/bmdb"
	"github.com/booty-dev/booty/pkg/bmdb/bmdbtest"
)

// The environment of a claimer child process.
const (
	claimerEnv    = "BMDB_TEST_CLAIMER_DSN"
	claimerGoEnv  = "BMDB_TEST_CLAIMER_GO" // a file whose existence starts the claims
	claimerProc   = bmdb.Process("two-process-test")
	claimersPerPx = 4
)

// runClaimer is the child process of TestTwoProcessesClaim: it opens the
// database, starts claimersPerPx sessions, prints "session ID" for each and
// "ready", waits for the go file, then claims registering machines until
// none is left, finishing each by moving it to inspecting. Exit status 0 on
// success.
func runClaimer() int {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	db, err := bmdb.Open(ctx, os.Getenv(claimerEnv))
	if err != nil {
		fmt.Fprintln(os.Stderr, "claimer:", err)
		return 1
	}
	defer db.Close()
	var sessions []*bmdb.Session
	for i := 0; i < claimersPerPx; i++ {
		s, err := db.StartSession(ctx, bmdb.SessionConfig{Component: "claimer", RuntimeInfo: fmt.Sprint(os.Getpid()), Interval: 5 * time.Second})
		if err != nil {
			fmt.Fprintln(os.Stderr, "claimer:", err)
			return 1
		}
		fmt.Println("session", s.ID())
		sessions = append(sessions, s)
	}
	fmt.Println("ready")
	for {
		if _, err := os.Stat(os.Getenv(claimerGoEnv)); err == nil {
			break
		}
		if ctx.Err() != nil {
			fmt.Fprintln(os.Stderr, "claimer: no go file")
			return 1
		}
		time.Sleep(5 * time.Millisecond)
	}
	var wg sync.WaitGroup
	errs := make(chan error, len(sessions))
	for _, s := range sessions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				w, err := s.Claim(ctx, claimerProc, bmdb.Filter{States: []bmdb.State{bmdb.StateRegistering}})
				if errors.Is(err, bmdb.ErrNothingToDo) {
					return
				}
				if err != nil {
					errs <- err
					return
				}
				time.Sleep(time.Millisecond) // the side effect, outside the database
				if err := w.Finish(ctx, &bmdb.Transition{To: bmdb.StateInspecting, Command: bmdb.CommandInspect, Reason: "Claimed"}); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		fmt.Fprintln(os.Stderr, "claimer:", err)
		return 1
	}
	for _, s := range sessions {
		s.Close(ctx)
	}
	return 0
}

// Two processes (this test binary, re-executed) with four sessions each
// claim work for 200 machines on one PostgreSQL. The work history must show
// every machine claimed exactly once, by one session at a time, and both
// processes claiming.
func TestTwoProcessesClaim(t *testing.T) {
	dsn := bmdbtest.PostgresDSN(t)
	db := open(t, dsn)
	const machines = 200
	for i := 0; i < machines; i++ {
		mustMachine(t, db, fmt.Sprintf("node-%03d", i), i)
	}
	goFile := filepath.Join(t.TempDir(), "go")
	owner := map[string]int{} // session → process index
	var cmds []*exec.Cmd
	var stderrs []*strings.Builder
	for p := 0; p < 2; p++ {
		cmd := exec.Command(os.Args[0])
		cmd.Env = append(os.Environ(), claimerEnv+"="+dsn, claimerGoEnv+"="+goFile)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatalf("start claimer %d: %v", p, err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		sc := bufio.NewScanner(out)
		ready := false
		for sc.Scan() {
			line := sc.Text()
			if id, ok := strings.CutPrefix(line, "session "); ok {
				owner[id] = p
			}
			if line == "ready" {
				ready = true
				break
			}
		}
		if !ready {
			cmd.Wait()
			t.Fatalf("claimer %d did not get ready: %s", p, stderr.String())
		}
		go func() {
			for sc.Scan() {
			}
		}()
		cmds = append(cmds, cmd)
		stderrs = append(stderrs, &stderr)
	}
	if err := os.WriteFile(goFile, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for p, cmd := range cmds {
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("claimer %d: %v: %s", p, err, stderrs[p].String())
			}
		case <-time.After(3 * time.Minute):
			t.Fatalf("claimer %d did not finish in 3 minutes", p)
		}
	}

	hist := must[[]bmdb.WorkEvent](t)(db.WorkHistory(ctx(t), ""))
	perProcess := map[int]int{}
	checkHistory(t, hist, func(m string, starts int) {
		if starts != 1 {
			t.Errorf("machine %s claimed %d times, want once", m, starts)
		}
	})
	claimed := map[string]bool{}
	for _, e := range hist {
		if e.Event == bmdb.WorkStarted {
			p, ok := owner[e.SessionID]
			if !ok {
				t.Fatalf("claim by unknown session %s", e.SessionID)
			}
			perProcess[p]++
			claimed[e.MachineID] = true
		}
	}
	if len(claimed) != machines {
		t.Fatalf("%d machines claimed, want %d", len(claimed), machines)
	}
	if perProcess[0] == 0 || perProcess[1] == 0 {
		t.Fatalf("claims per process %v: both processes must have claimed", perProcess)
	}
	t.Logf("claims per process: %v", perProcess)
	left := must[[]bmdb.Machine](t)(db.ListMachines(ctx(t), bmdb.ListOptions{States: []bmdb.State{bmdb.StateRegistering}}))
	if len(left) != 0 {
		t.Fatalf("%d machines still registering", len(left))
	}
}

// checkHistory asserts that in the work history every machine's claims are
// one at a time: each started is followed by the end (finished, failed,
// cancelled) of that same session's claim before the next started. It calls
// perMachine with each machine's number of claims.
func checkHistory(t *testing.T, hist []bmdb.WorkEvent, perMachine func(machine string, starts int)) {
	t.Helper()
	type key struct {
		m string
		p bmdb.Process
	}
	holder := map[key]string{}
	starts := map[string]int{}
	for _, e := range hist {
		k := key{e.MachineID, e.Process}
		switch e.Event {
		case bmdb.WorkStarted:
			if h, ok := holder[k]; ok {
				t.Fatalf("machine %s claimed by session %s while session %s held it (history id %d)", e.MachineID, e.SessionID, h, e.ID)
			}
			holder[k] = e.SessionID
			starts[e.MachineID]++
		default:
			if h := holder[k]; h != e.SessionID {
				t.Fatalf("history id %d: session %s ended work on %s held by %q", e.ID, e.SessionID, e.MachineID, h)
			}
			delete(holder, k)
		}
	}
	for k, h := range holder {
		t.Errorf("machine %s still held by session %s at the end", k.m, h)
	}
	for m, n := range starts {
		perMachine(m, n)
	}
}
