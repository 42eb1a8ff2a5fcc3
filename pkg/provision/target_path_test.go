package provision

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/booty-dev/booty/pkg/chroot"
)

// maliciousRoot builds an image root whose symlinks try to leave it, and
// an outside directory they aim at.
func maliciousRoot(t *testing.T) (root, outside string) {
	t.Helper()
	base := t.TempDir()
	root = filepath.Join(base, "root")
	outside = filepath.Join(base, "outside")
	for _, d := range []string{root + "/etc/cron.d", root + "/usr/share", outside} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	links := map[string]string{
		"etc/evil-abs":     outside,                    // absolute, host path
		"etc/evil-rel":     "../../outside",            // relative, climbing out
		"etc/evil-deep":    "../../../../../../../../", // climbing far
		"etc/cron.d/job":   outside + "/job",           // final component
		"etc/localtime":    "/usr/share/zoneinfo/UTC",  // legitimate absolute link
		"etc/loop":         "loop",
		"etc/systemd-link": "/etc/evil-rel/systemd",
	}
	for l, target := range links {
		if err := os.Symlink(target, filepath.Join(root, l)); err != nil {
			t.Fatal(err)
		}
	}
	return root, outside
}

func TestTargetFSConfinesWrites(t *testing.T) {
	root, outside := maliciousRoot(t)
	fsys := targetFS{dir: root}
	for _, p := range []string{"etc/evil-abs/pwned", "etc/evil-rel/pwned", "etc/evil-deep/pwned", "etc/cron.d/job", "etc/systemd-link/pwned"} {
		if err := fsys.writeFile(p, []byte("x"), 0o644); err != nil {
			t.Errorf("write %s: %v", p, err)
		}
	}
	ents, err := os.ReadDir(outside)
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 0 {
		t.Fatalf("writes escaped the root into %s: %v", outside, ents)
	}
	// The final symlink was replaced by a regular file, not written through.
	st, err := os.Lstat(filepath.Join(root, "etc/cron.d/job"))
	if err != nil || !st.Mode().IsRegular() {
		t.Errorf("etc/cron.d/job: %v, %v; want a regular file", st, err)
	}
	for _, p := range []string{"../etc/passwd", "etc/../../x", "/..", "a/../b"} {
		if err := fsys.writeFile(p, []byte("x"), 0o644); !errors.Is(err, chroot.ErrPathEscapes) {
			t.Errorf("write %q: err = %v, want chroot.ErrPathEscapes", p, err)
		}
	}
	if err := fsys.writeFile("etc/loop/x", nil, 0o644); err == nil {
		t.Error("write through a symlink loop: no error")
	}
}
