package bmdb_test

import (
	"path/filepath"
	"testing"

	"github.com/booty-dev/booty/pkg/bmdb"
	"github.com/booty-dev/booty/pkg/bmdb/bmdbtest"
)

// Opening a database twice applies the migrations once and keeps the data;
// a database with a newer schema than the binary knows is refused untouched.
func TestMigrationsTwice(t *testing.T) {
	for _, e := range bmdbtest.Engines() {
		t.Run(e.Name, func(t *testing.T) {
			dsn := e.DSN(t)
			db := open(t, dsn)
			v1 := must[int](t)(db.SchemaVersion(ctx(t)))
			if v1 < 1 {
				t.Fatalf("schema version %d after open", v1)
			}
			m := mustMachine(t, db, "node-1", 1)
			db.Close()

			db2 := open(t, dsn)
			if v2 := must[int](t)(db2.SchemaVersion(ctx(t))); v2 != v1 {
				t.Fatalf("schema version %d after second open, want %d", v2, v1)
			}
			rows := must[int64](t)(db2.QueryIntForTest(ctx(t), "SELECT COUNT(*) FROM schema_migrations"))
			if int(rows) != v1 {
				t.Fatalf("%d rows in schema_migrations, want %d (each migration once)", rows, v1)
			}
			got := must[bmdb.Machine](t)(db2.GetMachine(ctx(t), m.ID))
			if got.Name != "node-1" || got.BootMAC != mac(1) {
				t.Fatalf("machine after reopen: %+v", got)
			}

			must[int64](t)(db2.ExecForTest(ctx(t), "INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)", 9999, "9999_future.sql", 0))
			db2.Close()
			if _, err := bmdb.Open(ctx(t), dsn); err == nil {
				t.Fatal("open of a database with schema version 9999 succeeded")
			} else {
				wantErr(t, err, bmdb.ErrConflict)
			}
		})
	}
}

// Replicas starting together on an empty database migrate it once.
func TestConcurrentOpen(t *testing.T) {
	for _, e := range bmdbtest.Engines() {
		t.Run(e.Name, func(t *testing.T) {
			dsn := e.DSN(t)
			errs := make(chan error, 4)
			for i := 0; i < 4; i++ {
				go func() {
					db, err := bmdb.Open(ctx(t), dsn)
					if err == nil {
						db.Close()
					}
					errs <- err
				}()
			}
			for i := 0; i < 4; i++ {
				if err := <-errs; err != nil {
					t.Fatal(err)
				}
			}
			db := open(t, dsn)
			if n := must[int64](t)(db.QueryIntForTest(ctx(t), "SELECT COUNT(*) FROM schema_migrations")); n != int64(must[int](t)(db.SchemaVersion(ctx(t)))) {
				t.Fatalf("%d migration rows", n)
			}
		})
	}
}

func TestOpenRejectsBadDSN(t *testing.T) {
	for _, dsn := range []string{"", "mysql://x/y", "sqlite://"} {
		if _, err := bmdb.Open(ctx(t), dsn); err == nil {
			t.Errorf("Open(%q) succeeded", dsn)
		} else {
			wantErr(t, err, bmdb.ErrInvalid)
		}
	}
	// A path in a missing directory names the path.
	if _, err := bmdb.Open(ctx(t), filepath.Join(t.TempDir(), "missing", "x.db")); err == nil {
		t.Error("Open in a missing directory succeeded")
	}
	// sqlite:// prefix and a plain path both open SQLite.
	db := open(t, "sqlite://"+filepath.Join(t.TempDir(), "a.db"))
	if db.Engine() != bmdb.EngineSQLite {
		t.Fatalf("engine %s", db.Engine())
	}
}
