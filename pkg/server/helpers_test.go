package server

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/booty-dev/booty/pkg/api"
	"github.com/booty-dev/booty/pkg/bmdb"
)

const (
	testOperatorToken = "operator-token-0123456789"
	testMAC           = "aa:bb:cc:dd:ee:ff"
	testToken         = "s3cr3t-T0KEN-7f1c2e9d"
)

// syncBuffer is a bytes.Buffer safe for the server's concurrent writers.
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

// testEnv is a Server behind httptest with real temp directories.
type testEnv struct {
	srv    *Server
	ts     *httptest.Server
	cfgDir string
	files  string
	out    *syncBuffer // human output
	logs   *syncBuffer // slog output, debug level
}

// newEnv builds a server over fresh temp dirs; mutate adjusts the options.
// The config dir holds aa-bb-cc-dd-ee-ff.yaml with testToken.
func newEnv(t *testing.T, mutate func(*Options)) *testEnv {
	t.Helper()
	base := t.TempDir()
	e := &testEnv{
		cfgDir: filepath.Join(base, "configs"),
		files:  filepath.Join(base, "files"),
		out:    &syncBuffer{},
		logs:   &syncBuffer{},
	}
	for _, d := range []string{e.cfgDir, e.files} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	writeFile(t, filepath.Join(e.cfgDir, "aa-bb-cc-dd-ee-ff.yaml"), "hostname: node1\nserver:\n  url: http://bootyd\n  token: "+testToken+"\n")
	db := testDB(t)
	opts := Options{
		DB:             db,
		OperatorTokens: []string{testOperatorToken},
		PublicURL:      "http://bootyd.test:8080",
		ConfigDir:      e.cfgDir,
		FilesDir:       e.files,
		Output:         e.out,
		Logger: slog.New(slog.NewTextHandler(io.MultiWriter(e.logs, t.Output()),
			&slog.HandlerOptions{Level: slog.LevelDebug})),
	}
	if mutate != nil {
		mutate(&opts)
	}
	srv, err := New(opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	e.srv = srv
	e.ts = httptest.NewServer(srv.Handler())
	t.Cleanup(func() {
		e.ts.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		srv.Close(ctx) // the parked polls and heartbeats, before the database closes
	})
	return e
}

func writeFile(t *testing.T, p, content string) {
	t.Helper()
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// do sends a request and returns status, headers and body.
func (e *testEnv) do(t *testing.T, method, path, token string, body any, hdr map[string]string) (int, http.Header, string) {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		data, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequest(method, e.ts.URL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for k, v := range hdr {
		if k == "Host" {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, string(data)
}

// post sends a report and fails the test unless it answered 200.
func (e *testEnv) post(t *testing.T, kind string, body any) {
	t.Helper()
	code, _, resp := e.do(t, "POST", "/v1/machines/"+testMAC+"/"+kind, testToken, body, nil)
	if code != http.StatusOK {
		t.Fatalf("POST %s: status %d, body %s", kind, code, resp)
	}
}

// apiError decodes an api.Error body, failing the test if it is not one.
func apiError(t *testing.T, body string) string {
	t.Helper()
	var e api.Error
	if err := json.Unmarshal([]byte(body), &e); err != nil || e.Error == "" {
		t.Fatalf("body %q is not an api.Error: %v", body, err)
	}
	return e.Error
}

// testDB opens a fresh SQLite BMDB in a temp dir, closed at cleanup.
func testDB(t *testing.T, opts ...bmdb.Option) *bmdb.DB {
	t.Helper()
	db, err := bmdb.Open(context.Background(), filepath.Join(t.TempDir(), "bmdb.db"), append([]bmdb.Option{bmdb.WithLogger(slog.New(slog.DiscardHandler))}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}
