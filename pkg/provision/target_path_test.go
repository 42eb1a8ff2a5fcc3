package provision

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
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

func TestResolveInRoot(t *testing.T) {
	root, outside := maliciousRoot(t)
	tests := []struct {
		path        string
		followFinal bool
		want        string
		wantErr     bool
	}{
		{"etc/hostname", true, "etc/hostname", false},
		{"/etc/hostname", true, "etc/hostname", false},
		{"etc/evil-abs/x", true, "outside" + "/x", false}, // host path re-rooted: <root>/<outside...>/x
		{"etc/evil-rel/x", true, "outside/x", false},
		{"etc/evil-deep/x", true, "x", false},
		{"etc/cron.d/job", false, "etc/cron.d/job", false},
		{"etc/localtime", true, "usr/share/zoneinfo/UTC", false},
		{"etc/systemd-link/a", true, "outside/systemd/a", false},
		{"etc/loop/x", true, "", true},
		{"", true, "", false},
	}
	for _, tt := range tests {
		got, err := resolveInRoot(root, tt.path, tt.followFinal)
		want := tt.want
		if tt.path == "etc/evil-abs/x" {
			want = filepath.Join(outside[1:], "x")
		}
		if (err != nil) != tt.wantErr || got != want {
			t.Errorf("resolveInRoot(%q, %v) = %q, %v; want %q (err %v)", tt.path, tt.followFinal, got, err, want, tt.wantErr)
		}
	}
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
		if err := fsys.writeFile(p, []byte("x"), 0o644); !errors.Is(err, ErrPathEscapes) {
			t.Errorf("write %q: err = %v, want ErrPathEscapes", p, err)
		}
	}
	if err := fsys.writeFile("etc/loop/x", nil, 0o644); err == nil {
		t.Error("write through a symlink loop: no error")
	}
}
