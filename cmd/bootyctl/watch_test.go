package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/creack/pty"

	"github.com/booty-dev/booty/pkg/api"
)

func TestBar(t *testing.T) {
	for _, tc := range []struct {
		done, total int64
		want        string
	}{
		{0, 100, "[░░░░░░░░░░░░░░░░░░░░░░░░]   0%"},
		{50, 100, "[████████████░░░░░░░░░░░░]  50%"},
		{100, 100, "[████████████████████████] 100%"},
		{150, 100, "[████████████████████████] 100%"},
		{5, 0, "[░░░░░░░░░░░░░░░░░░░░░░░░]   ?%"},
	} {
		if got := bar(tc.done, tc.total); got != tc.want {
			t.Errorf("bar(%d, %d) = %q, want %q", tc.done, tc.total, got, tc.want)
		}
	}
}

// syncBuffer is a bytes.Buffer safe for one writer and one reader.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestWatchDrawsProgressBarsOnATerminal runs watch with stdout on a real
// pseudo-terminal: it must see the terminal, redraw in place (cursor home,
// no scrolling) and draw a bar for the writing machine that fills as the
// write goes on.
func TestWatchDrawsProgressBarsOnATerminal(t *testing.T) {
	f, srv := newFakeBootyd(t, testToken)
	f.add(api.Machine{ID: "m1", Name: "node-1", State: api.MachineProvisioning, Status: api.StatusOK,
		Progress: &api.InstallProgress{Step: "stream-image", BytesDone: 1 << 30, BytesTotal: 4 << 30}})
	f.add(api.Machine{ID: "m2", Name: "node-2", State: api.MachineAvailable, Status: api.StatusOK})

	ptmx, tty, err := pty.Open()
	if err != nil {
		t.Fatalf("open a pty: %v", err)
	}
	defer ptmx.Close()
	defer tty.Close()
	if err := pty.Setsize(ptmx, &pty.Winsize{Rows: 30, Cols: 120}); err != nil {
		t.Fatal(err)
	}
	var screen syncBuffer
	copied := make(chan struct{})
	go func() { io.Copy(&screen, ptmx); close(copied) }()

	go func() {
		time.Sleep(400 * time.Millisecond)
		f.set("node-1", func(m *api.MachineDetail) { m.Progress.BytesDone = 3 << 30 })
	}()
	var errb bytes.Buffer
	e := &env{stdout: tty, stderr: &errb, now: time.Now, isTerminal: isTerminal}
	if !e.isTerminal(tty) {
		t.Fatal("isTerminal says a pty is not a terminal")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	code := runEnv(ctx, e, append([]string{"machines", "watch", "--interval", "100ms", "--count", "10"}, conn(srv.URL, tokenFile(t, testToken))...))
	if code != 0 {
		t.Fatalf("watch exit %d: %s", code, errb.String())
	}
	// Everything written must have reached the master side.
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(screen.String(), "\x1b[?25h") && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	out := screen.String()
	t.Logf("terminal output (%d bytes), last frame:\n%s", len(out), out[max(0, strings.LastIndex(out, "\x1b[H")):])
	for _, w := range []string{
		"\x1b[H", // redraw in place
		"node-1", "provisioning", "stream-image",
		"[██████░░░░░░░░░░░░░░░░░░]  25% 1.0 GiB/4.0 GiB",
		"[██████████████████░░░░░░]  75% 3.0 GiB/4.0 GiB",
		"node-2", "1 writing",
	} {
		if !strings.Contains(out, w) {
			t.Errorf("terminal output lacks %q", w)
		}
	}
	if n := strings.Count(out, "\x1b[H"); n != 10 {
		t.Errorf("%d frames drawn, want 10 (--count 10)", n)
	}
}

// TestWatchFitsTheTerminal: a fleet taller than the terminal shows the busy
// machines (the writing one first) and counts the rest; no line is wider
// than the terminal, so redrawing in place never scrolls.
func TestWatchFitsTheTerminal(t *testing.T) {
	var ms []api.Machine
	for i := range 20 {
		ms = append(ms, api.Machine{ID: fmt.Sprint(i), Name: fmt.Sprintf("node-%02d", i), State: api.MachineProvisioned, Status: api.StatusOK})
	}
	ms[17].State = api.MachineProvisioning
	ms[17].Progress = &api.InstallProgress{Step: "stream-image", BytesDone: 1 << 29, BytesTotal: 1 << 30}
	ms[3].State, ms[3].Status = api.MachineAvailable, api.StatusError
	ms[3].Error = &api.MachineError{Message: strings.Repeat("a very long error ", 10)}
	var b bytes.Buffer
	if err := drawScreen(&b, ms, "bootyd:8443", t0, 60, 8); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	t.Logf("frame:\n%s", out)
	lines := strings.Split(strings.TrimSuffix(out, "\x1b[J"), "\n")
	if len(lines) > 8 {
		t.Errorf("%d lines for a terminal of 8 rows", len(lines))
	}
	for _, l := range lines {
		l = strings.NewReplacer("\x1b[H", "", "\x1b[K", "").Replace(l)
		if n := len([]rune(l)); n > 60 {
			t.Errorf("line of %d columns for a terminal of 60: %q", n, l)
		}
	}
	for _, w := range []string{"node-17", "node-03", "… and 16 more: 16 provisioned"} {
		if !strings.Contains(out, w) {
			t.Errorf("frame lacks %q", w)
		}
	}
	if strings.Index(out, "node-03") > strings.Index(out, "node-17") {
		t.Errorf("shown machines are not in name order")
	}
}
