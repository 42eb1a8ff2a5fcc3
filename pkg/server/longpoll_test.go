package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptrace"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/booty-dev/booty/pkg/api"
	"github.com/booty-dev/booty/pkg/bmdb"
)

// servedEnv runs e's server with Serve on a loopback listener (the
// http.Server that parked polls hand their connections back to) until the
// test ends; it returns the base URL and the context's cancel, which shuts
// the server down.
func servedEnv(t *testing.T, e *testEnv) (string, context.CancelFunc, <-chan error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.srv.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Error("Serve did not return within 30s of its context's end")
		}
	})
	return "http://" + ln.Addr().String(), cancel, done
}

// call sends one request with client c and returns the status, the body
// and whether the connection was a reused (kept-alive) one.
func call(t *testing.T, c *http.Client, method, url, token string, body any) (int, string, bool) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	var reused bool
	ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) { reused = i.Reused }})
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read the answer: %v", method, url, err)
	}
	return resp.StatusCode, string(b), reused
}

// enrollRaw enrolls the agent of mac and returns its answer.
func enrollRaw(t *testing.T, c *http.Client, base, mac string) api.EnrollResponse {
	t.Helper()
	code, body, _ := call(t, c, "POST", base+"/v1/enroll", "", api.EnrollRequest{MACs: []string{mac}})
	var en api.EnrollResponse
	if code != 200 || json.Unmarshal([]byte(body), &en) != nil || en.Token == "" {
		t.Fatalf("enroll %s: %d %s", mac, code, body)
	}
	return en
}

// connServeGoroutines counts the goroutines net/http runs for a connection.
func connServeGoroutines() int {
	var b bytes.Buffer
	_ = pprof.Lookup("goroutine").WriteTo(&b, 2)
	return strings.Count(b.String(), "net/http.(*conn).serve(")
}

// TestParkedPolls: a command long poll that finds nothing is parked
// without a goroutine; a command wakes it at once; the connection is handed
// back and serves the agent's next request (keep-alive); an empty wait ends
// in 204; shutdown answers the parked polls at once.
func TestParkedPolls(t *testing.T) {
	e := newEnv(t, nil)
	base, stop, _ := servedEnv(t, e)
	c := &http.Client{Timeout: time.Minute, Transport: &http.Transport{MaxIdleConnsPerHost: 100}}
	en := enrollRaw(t, c, base, "52:54:00:00:40:01")
	pollURL := base + "/v1/machines/" + en.MAC + "/command?wait=20"

	// Parked, then woken by the operator's inspect.
	type answer struct {
		code int
		body string
		at   time.Time
	}
	got := make(chan answer, 1)
	go func() {
		code, body, _ := call(t, c, "GET", pollURL, en.Token, nil)
		got <- answer{code, body, time.Now()}
	}()
	eventually(t, "the poll parked", func() bool { return e.srv.parked.len() == 1 })
	issued := time.Now()
	if code, _, body := e.do(t, "POST", "/v1/machines/"+en.Name+"/inspect", testOperatorToken, api.ActionRequest{}, nil); code != 200 {
		t.Fatalf("inspect: %d %s", code, body)
	}
	var a answer
	select {
	case a = <-got:
	case <-time.After(15 * time.Second):
		t.Fatal("the parked poll was not answered within 15s of the command")
	}
	var cmd api.AgentCommand
	if a.code != 200 || json.Unmarshal([]byte(a.body), &cmd) != nil || cmd.Kind != api.CommandInspect {
		t.Fatalf("parked poll answered %d %s, want the inspect command", a.code, a.body)
	}
	t.Logf("command delivered %s after it was issued", a.at.Sub(issued))
	if n := e.srv.parked.len(); n != 0 {
		t.Fatalf("%d polls still parked after the answer", n)
	}
	// The connection went back to the http.Server: the next request reuses it.
	code, body, reused := call(t, c, "POST", base+"/v1/machines/"+en.MAC+"/heartbeat", en.Token, api.Heartbeat{})
	if code != 200 || !reused {
		t.Fatalf("heartbeat after the parked poll: %d %s, connection reused %v (want kept alive)", code, body, reused)
	}

	// An empty wait ends in 204.
	if code, body, _ := call(t, c, "POST", base+"/v1/machines/"+en.MAC+"/command", en.Token, api.CommandResult{Kind: cmd.Kind, Generation: cmd.Generation}); code != 200 {
		t.Fatalf("command result: %d %s", code, body)
	}
	if code, body, _ := call(t, c, "GET", base+"/v1/machines/"+en.MAC+"/command?wait=1", en.Token, nil); code != http.StatusNoContent {
		t.Fatalf("poll without a command: %d %s, want 204", code, body)
	}

	// Many parked polls hold no connection goroutine each.
	const n = 40
	var wg sync.WaitGroup
	codes := make(chan int, n)
	for i := 0; i < n; i++ {
		en := enrollRaw(t, c, base, fmt.Sprintf("52:54:00:00:41:%02x", i))
		wg.Add(1)
		go func() {
			defer wg.Done()
			code, _, _ := call(t, c, "GET", base+"/v1/machines/"+en.MAC+"/command?wait=20", en.Token, nil)
			codes <- code
		}()
	}
	eventually(t, "every poll parked", func() bool { return e.srv.parked.len() == n })
	if g := connServeGoroutines(); g >= n/2 {
		t.Fatalf("%d connection goroutines for %d parked polls: parked polls must not hold one each", g, n)
	}

	// Shutdown answers them at once (204, the connection closed), long
	// before their 20 s wait.
	start := time.Now()
	stop()
	wg.Wait()
	close(codes)
	for code := range codes {
		if code != http.StatusNoContent {
			t.Fatalf("parked poll at shutdown: %d, want 204", code)
		}
	}
	if d := time.Since(start); d > 15*time.Second {
		t.Fatalf("shutdown answered the parked polls after %s", d)
	}
}

// TestParkedPollWithoutServe: mounted as a plain handler (no Serve), a
// parked poll is still answered when its command comes, and its connection
// closed.
func TestParkedPollWithoutServe(t *testing.T) {
	e := newEnv(t, nil)
	c := &http.Client{Timeout: time.Minute}
	en := enrollRaw(t, c, e.ts.URL, "52:54:00:00:42:01")
	got := pollAsync(c, e.ts.URL, en, 20)
	eventually(t, "the poll parked", func() bool { return e.srv.parked.len() == 1 })
	if code, _, body := e.do(t, "POST", "/v1/machines/"+en.Name+"/inspect", testOperatorToken, api.ActionRequest{}, nil); code != 200 {
		t.Fatalf("inspect: %d %s", code, body)
	}
	select {
	case s := <-got:
		if !strings.HasPrefix(s, "200 close=true") || !strings.Contains(s, `"inspect"`) {
			t.Fatalf("parked poll answered %q, want 200 with Connection: close and the inspect command", s)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the parked poll was not answered within 15s of the command")
	}
}

// TestHandedBackConnectionKeptAlive: a connection handed back after a
// parked poll waits for its next request as long as any kept-alive one
// (IdleTimeout), not just the header timeout of a new connection.
func TestHandedBackConnectionKeptAlive(t *testing.T) {
	e := newEnv(t, nil)
	e.srv.readHeaderTimeout = 300 * time.Millisecond
	base, _, _ := servedEnv(t, e)
	c := &http.Client{Timeout: time.Minute, Transport: &http.Transport{}}
	en := enrollRaw(t, c, base, "52:54:00:00:43:01")
	if code, body, _ := call(t, c, "GET", base+"/v1/machines/"+en.MAC+"/command?wait=1", en.Token, nil); code != http.StatusNoContent {
		t.Fatalf("poll: %d %s, want 204", code, body)
	}
	time.Sleep(time.Second) // past the header timeout, well within IdleTimeout
	code, body, reused := call(t, c, "POST", base+"/v1/machines/"+en.MAC+"/heartbeat", en.Token, api.Heartbeat{})
	if code != 200 || !reused {
		t.Fatalf("heartbeat a second after the parked poll: %d %s, connection reused %v (want kept alive)", code, body, reused)
	}
}

// TestCloseAnswersParkedPolls: Close answers a poll parked by a server whose
// Handler is mounted elsewhere (204, Connection: close) and returns only
// once that answer is written, so nothing of the server reads the database
// or logs after it (a parked poll's timer once fired after a test ended
// and logged into its finished test).
func TestCloseAnswersParkedPolls(t *testing.T) {
	e := newEnv(t, nil)
	c := &http.Client{Timeout: time.Minute}
	en := enrollRaw(t, c, e.ts.URL, "52:54:00:00:44:01")
	got := pollAsync(c, e.ts.URL, en, 25)
	eventually(t, "the poll parked", func() bool { return e.srv.parked.len() == 1 })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	e.srv.Close(ctx)
	if ctx.Err() != nil {
		t.Fatalf("Close waited out its bound (%s)", time.Since(start))
	}
	select {
	case s := <-got:
		if s != "204 close=true " {
			t.Fatalf("the parked poll was answered %q, want 204 with Connection: close", s)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close returned but the parked poll has no answer")
	}
	if n := e.srv.parked.len(); n != 0 {
		t.Fatalf("%d polls still parked after Close", n)
	}
}

// pollAsync sends the agent's command long poll (wait seconds) in the
// background; the channel gets "STATUS close=BOOL BODY", or the error.
func pollAsync(c *http.Client, base string, en api.EnrollResponse, wait int) <-chan string {
	got := make(chan string, 1)
	go func() {
		req, _ := http.NewRequest("GET", fmt.Sprintf("%s/v1/machines/%s/command?wait=%d", base, en.MAC, wait), nil)
		req.Header.Set("Authorization", "Bearer "+en.Token)
		resp, err := c.Do(req)
		if err != nil {
			got <- err.Error()
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		got <- fmt.Sprintf("%d close=%v %s", resp.StatusCode, resp.Close, b)
	}()
	return got
}

// TestParkedPollEndsWithoutReread: a parked poll whose wait ends with no
// change of its machine announced answers 204 without reading the database
// again (a query per agent per wait saved); a command written without an
// announcement (here by another handle on the file, as another process
// would) is then found by the agent's next poll at once.
func TestParkedPollEndsWithoutReread(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bmdb.db")
	open := func() *bmdb.DB {
		db, err := bmdb.Open(context.Background(), path, bmdb.WithLogger(slog.New(slog.DiscardHandler)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		return db
	}
	served, other := open(), open()
	e := newEnv(t, func(o *Options) { o.DB = served })
	base, _, _ := servedEnv(t, e)
	c := &http.Client{Timeout: time.Minute, Transport: &http.Transport{}}
	en := enrollRaw(t, c, base, "52:54:00:00:45:01")
	pollURL := base + "/v1/machines/" + en.MAC + "/command?wait=2"

	got := make(chan int, 1)
	go func() {
		code, _, _ := call(t, c, "GET", pollURL, en.Token, nil)
		got <- code
	}()
	eventually(t, "the poll parked", func() bool { return e.srv.parked.len() == 1 })
	if _, err := other.Transition(context.Background(), en.MachineID, bmdb.Transition{To: bmdb.StateInspecting, Command: bmdb.CommandInspect, Reason: "Inspect"}); err != nil {
		t.Fatal(err)
	}
	select {
	case code := <-got:
		if code != http.StatusNoContent {
			t.Fatalf("the parked poll answered %d at the end of its wait, want 204 (no change was announced to it)", code)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the parked poll was not answered within 30s of its 2s wait")
	}
	code, body, _ := call(t, c, "GET", pollURL, en.Token, nil)
	var cmd api.AgentCommand
	if code != 200 || json.Unmarshal([]byte(body), &cmd) != nil || cmd.Kind != api.CommandInspect {
		t.Fatalf("the next poll answered %d %s, want the inspect command", code, body)
	}
}
