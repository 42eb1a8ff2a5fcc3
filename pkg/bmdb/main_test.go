package bmdb_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/booty-dev/booty/pkg/bmdb"
	"github.com/booty-dev/booty/pkg/bmdb/bmdbtest"
)

func TestMain(m *testing.M) {
	// A child of TestTwoProcessesClaim runs the claimer, not the tests.
	if os.Getenv(claimerEnv) != "" {
		os.Exit(runClaimer())
	}
	os.Exit(bmdbtest.Main(m))
}

// engines runs fn once per engine, each with its own fresh database.
func engines(t *testing.T, fn func(t *testing.T, db *bmdb.DB), opts ...bmdb.Option) {
	t.Helper()
	for _, e := range bmdbtest.Engines() {
		t.Run(e.Name, func(t *testing.T) {
			fn(t, open(t, e.DSN(t), opts...))
		})
	}
}

// open opens the BMDB at dsn with a logger routed to the test's output.
func open(t testing.TB, dsn string, opts ...bmdb.Option) *bmdb.DB {
	t.Helper()
	opts = append([]bmdb.Option{bmdb.WithLogger(slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn})))}, opts...)
	db, err := bmdb.Open(ctx(t), dsn, opts...)
	if err != nil {
		t.Fatalf("open %s: %v", dsn, err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// ctx returns a context bounded by a generous timeout, cancelled when t ends.
func ctx(t testing.TB) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return c
}

// mustMachine registers a machine with a boot MAC derived from n.
func mustMachine(t testing.TB, db *bmdb.DB, name string, n int) bmdb.Machine {
	t.Helper()
	m, err := db.CreateMachine(ctx(t), bmdb.NewMachine{
		Name:    name,
		BootMAC: mac(n),
		Spec:    bmdb.Spec{Image: bmdb.Image{URL: "http://10.0.0.1/img.raw.zst", Checksum: "sha256:00"}, Hostname: name},
	})
	if err != nil {
		t.Fatalf("create machine %s: %v", name, err)
	}
	return m
}

func mac(n int) string {
	b := []byte{0x52, 0x54, 0x00, byte(n >> 16), byte(n >> 8), byte(n)}
	const hexd = "0123456789abcdef"
	s := make([]byte, 0, 17)
	for i, x := range b {
		if i > 0 {
			s = append(s, ':')
		}
		s = append(s, hexd[x>>4], hexd[x&15])
	}
	return string(s)
}

func wantErr(t testing.TB, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("got error %v, want %v", err, want)
	}
}

func must[T any](t testing.TB) func(T, error) T {
	return func(v T, err error) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}
