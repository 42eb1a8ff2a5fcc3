package initsys

import (
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/booty-dev/booty/pkg/initsys/kmod"
)

// The kernel runs "modprobe -q -- NAME" for a module it needs: booty as
// modprobe resolves the name (module or alias), loads the dependencies
// first and says by its status whether it worked.
func TestModprobe(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"modules.dep", "modules.alias", "modules.softdep", "modules.builtin"} {
		b, err := os.ReadFile(filepath.Join("kmod", "testdata", f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	log := slog.New(slog.NewTextHandler(t.Output(), nil))
	var loaded []string
	loader := func() *kmod.Loader {
		l, err := kmod.NewLoader(dir, log)
		if err != nil {
			t.Fatal(err)
		}
		l.Init = func(path, _ string) error { loaded = append(loaded, filepath.Base(path)); return nil }
		l.ProcModules, l.SysModule = filepath.Join(dir, "no-proc-modules"), "" // not the host's
		return l
	}

	if rc := modprobe([]string{"-q", "--", "virtio:d00000002v00001AF4"}, loader(), log); rc != 0 {
		t.Fatalf("modprobe of an alias = %d, want 0", rc)
	}
	if len(loaded) == 0 || !slices.ContainsFunc(loaded, func(s string) bool { return len(s) >= 10 && s[:10] == "virtio_blk" }) {
		t.Errorf("loaded %v, want virtio_blk after its dependencies", loaded)
	}
	if rc := modprobe([]string{"-q", "--", "no-such-module"}, loader(), log); rc != 1 {
		t.Errorf("modprobe of an unknown name = %d, want 1", rc)
	}
	if rc := modprobe([]string{"-q"}, loader(), log); rc != 2 {
		t.Errorf("modprobe without a name = %d, want 2", rc)
	}
}
