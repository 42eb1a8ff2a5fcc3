package main

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/booty-dev/booty/pkg/api"
)

// fakeBootyd answers the operator routes the demo polls, checking the
// token; it answers every event whatever "after" says, so the demo's own
// check against duplicates is tested.
func fakeBootyd(t *testing.T, token string, m api.Machine, events []api.Event) (*httptest.Server, *[]string) {
	var mu sync.Mutex
	var seen []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.URL.RequestURI())
		mu.Unlock()
		if r.Header.Get("Authorization") != "Bearer "+token {
			http.Error(w, "bad token", http.StatusUnauthorized)
			return
		}
		switch r.URL.Path {
		case "/v1/machines":
			json.NewEncoder(w).Encode(api.MachineList{})
		case "/v1/machines/" + m.Name:
			json.NewEncoder(w).Encode(m)
		case "/v1/machines/" + m.Name + "/events":
			json.NewEncoder(w).Encode(api.EventList{Events: events})
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	return srv, &seen
}

// refresh keeps the machine, asks only for events after the last one it
// has, never keeps one twice, and prints each new one once.
func TestRefreshPollsMachineAndNewEvents(t *testing.T) {
	evs := demoEvents()[:2]
	srv, seen := fakeBootyd(t, "tok-123", api.Machine{Name: "node-1", State: "inspecting"}, evs)
	c := &apiClient{base: srv.URL, token: "tok-123"}
	m := &demoMachine{name: "node-1"}
	var out bytes.Buffer
	for range 2 {
		if err := c.refresh(t.Context(), m, &out); err != nil {
			t.Fatal(err)
		}
	}
	if m.last == nil || m.last.State != "inspecting" {
		t.Fatalf("machine %+v", m.last)
	}
	if len(m.events) != 2 || m.events[1].ID != 2 {
		t.Fatalf("events %+v", m.events)
	}
	if got := strings.Count(out.String(), "event  | "); got != 2 || !strings.Contains(out.String(), "node-1 InspectionStarted: registering → inspecting") {
		t.Fatalf("printed:\n%s", out.String())
	}
	if want := "/v1/machines/node-1/events?after=2"; !strings.Contains(strings.Join(*seen, " "), want) {
		t.Fatalf("requests %q lack %s", *seen, want)
	}

	bad := &apiClient{base: srv.URL, token: "wrong"}
	if err := bad.refresh(t.Context(), m, nil); err == nil || !strings.Contains(err.Error(), "401") {
		t.Fatalf("wrong token: %v", err)
	}
}

// waitReady returns once bootyd answers, and fails at once, naming it,
// when bootyd exited.
func TestWaitReady(t *testing.T) {
	srv, _ := fakeBootyd(t, "tok", api.Machine{Name: "x"}, nil)
	p, err := startProcess("/bin/sleep", []string{"30"}, filepath.Join(t.TempDir(), "log"))
	if err != nil {
		t.Fatal(err)
	}
	defer p.stop()
	if err := (&apiClient{base: srv.URL, token: "tok"}).waitReady(t.Context(), p); err != nil {
		t.Fatal(err)
	}
	dead, err := startProcess("/bin/false", nil, filepath.Join(t.TempDir(), "log"))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err = (&apiClient{base: "http://127.0.0.1:1", token: "tok"}).waitReady(t.Context(), dead)
	if err == nil || !strings.Contains(err.Error(), "bootyd exited before it answered") {
		t.Fatalf("dead bootyd: %v", err)
	}
	if time.Since(start) >= readyTimeout {
		t.Fatalf("waited the whole bound for a dead bootyd")
	}
	if err := p.stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}
	if !p.exited() {
		t.Fatal("still running after stop")
	}
}

// The watch's output arrives through a pipe in arbitrary pieces: every
// line is prefixed once, whole.
func TestPrefixWriterJoinsPieces(t *testing.T) {
	var b bytes.Buffer
	w := &prefixWriter{w: &b, prefix: "watch  | "}
	for _, s := range []string{"09:30:01 node-1 regis", "tering OK\n09:30:02 node-2 ", "inspecting OK\r\n", "partial"} {
		w.Write([]byte(s))
	}
	want := "watch  | 09:30:01 node-1 registering OK\nwatch  | 09:30:02 node-2 inspecting OK\n"
	if b.String() != want {
		t.Fatalf("got %q, want %q", b.String(), want)
	}
}

func TestLinkOrCopyAndSparseDisk(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	if err := os.WriteFile(src, []byte("kernel"), 0o644); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(dir, "files", "vmlinuz")
	os.MkdirAll(filepath.Dir(dst), 0o755)
	if err := linkOrCopy(src, dst); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(dst); string(b) != "kernel" {
		t.Fatalf("linked %q", b)
	}
	if err := linkOrCopy(filepath.Join(dir, "missing"), dst+"2"); err == nil || !strings.Contains(err.Error(), "missing") {
		t.Fatalf("missing source: %v", err)
	}
	disk := filepath.Join(dir, "disk.img")
	if err := createSparse(disk, 3<<30); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(disk)
	if err != nil || fi.Size() != 3<<30 {
		t.Fatalf("disk: %v %v", fi, err)
	}
}
