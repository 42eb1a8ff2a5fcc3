package initsys

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/booty-dev/booty/pkg/safego"
)

// Reaper collects zombie orphans, which the kernel hands to PID 1, without
// stealing the exit status of children the agent runs with os/exec.
//
// How: it peeks at the first waitable child with waitid(P_ALL,
// WEXITED|WNOHANG|WNOWAIT), which leaves the zombie in place. A child that
// is Protected is left alone; any other child is reaped only once it has
// been a zombie for Grace. An exec.Cmd whose Wait is already running (Run,
// Output, CombinedOutput, or Start followed by Wait) collects its child
// the moment it exits, well inside Grace, so it never sees ECHILD.
//
// The remaining race, documented rather than hidden: a caller that Starts a
// command and calls Wait more than Grace after the child exited loses the
// status ("waitid: no child processes") unless it called Protect(pid)
// right after Start and Release(pid) after Wait. Also, while a protected
// zombie is first in the kernel's list, zombies behind it wait until it
// is collected.
type Reaper struct {
	// Grace is how long a zombie may wait for its own Wait before the
	// reaper takes it. Default 2s.
	Grace time.Duration
	// Interval is the poll period besides SIGCHLD. Default 500ms.
	Interval time.Duration
	Log      *slog.Logger

	// Peek returns the pid of a waitable child without reaping it, 0 when
	// there is none. Reap collects pid. Defaults use waitid and wait4.
	Peek func() (int, error)
	Reap func(pid int) (unix.WaitStatus, error)
	Now  func() time.Time

	mu        sync.Mutex
	protected map[int]bool
	seen      map[int]time.Time
	reaped    int
	stop      context.CancelFunc
	done      chan struct{}
}

// NewReaper returns a Reaper with the default syscalls.
func NewReaper(log *slog.Logger) *Reaper {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Reaper{Grace: 2 * time.Second, Interval: 500 * time.Millisecond, Log: log,
		Peek: peekChild, Reap: reapChild, Now: time.Now}
}

func peekChild() (int, error) {
	var info unix.Siginfo
	err := unix.Waitid(unix.P_ALL, 0, &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil)
	if errors.Is(err, unix.ECHILD) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	// si_pid follows signo, errno, code and padding in struct siginfo.
	return siginfoPid(&info), nil
}

func reapChild(pid int) (unix.WaitStatus, error) {
	var ws unix.WaitStatus
	_, err := unix.Wait4(pid, &ws, unix.WNOHANG, nil)
	return ws, err
}

// Protect keeps the reaper away from pid until Release; call it right
// after exec.Cmd.Start when Wait may come late.
func (r *Reaper) Protect(pid int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.protected == nil {
		r.protected = map[int]bool{}
	}
	r.protected[pid] = true
}

// Release undoes Protect.
func (r *Reaper) Release(pid int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.protected, pid)
}

// Reaped returns how many orphans this reaper collected.
func (r *Reaper) Reaped() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.reaped
}

// ReapOnce collects every zombie that is past its grace and not
// protected, stopping at the first one that is not. It returns how many it
// collected.
func (r *Reaper) ReapOnce() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.seen == nil {
		r.seen = map[int]time.Time{}
	}
	n := 0
	for {
		pid, err := r.Peek()
		if err != nil {
			r.Log.Debug("peek child", "err", err)
			return n
		}
		if pid <= 0 || r.protected[pid] {
			return n
		}
		first, ok := r.seen[pid]
		now := r.Now()
		if !ok {
			r.seen[pid] = now
			first = now
		}
		if now.Sub(first) < r.Grace {
			return n
		}
		delete(r.seen, pid)
		ws, err := r.Reap(pid)
		if err != nil {
			// Its own Wait got it first.
			continue
		}
		n++
		r.reaped++
		r.Log.Debug("reaped orphan", "pid", pid, "status", ws.ExitStatus())
	}
}

// Start runs the reaper in a goroutine until Stop: on every SIGCHLD and
// every Interval it calls ReapOnce.
func (r *Reaper) Start() {
	ctx, cancel := context.WithCancel(context.Background())
	r.stop = cancel
	r.done = make(chan struct{})
	sig := make(chan os.Signal, 16)
	signal.Notify(sig, unix.SIGCHLD)
	go func() {
		defer close(r.done)
		defer signal.Stop(sig)
		// Zombies then pile up, but init lives on.
		defer safego.Recover("reap children", func(err error) { fmt.Fprintln(os.Stderr, "booty: reaper stopped:", err) })
		t := time.NewTicker(r.Interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-sig:
			case <-t.C:
			}
			r.ReapOnce()
		}
	}()
}

// Stop ends the goroutine started by Start and waits for it.
func (r *Reaper) Stop() {
	if r.stop != nil {
		r.stop()
		<-r.done
		r.stop = nil
	}
}
