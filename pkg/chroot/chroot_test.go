package chroot

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestResolve: every link an image can hold, pointing out of the root or
// not, resolves to a path inside it.
func TestResolve(t *testing.T) {
	base := t.TempDir()
	root, outside := filepath.Join(base, "root"), filepath.Join(base, "outside")
	if err := os.MkdirAll(filepath.Join(root, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		link, target string // a link to create first, or none
		path         string
		followFinal  bool
		want         string // relative to root; "ERR" for an error
	}{
		{path: "etc/hostname", followFinal: true, want: "etc/hostname"},
		{path: "/etc/hostname", followFinal: true, want: "etc/hostname"},
		{path: "", followFinal: true, want: ""},
		{link: "etc/abs", target: outside, path: "etc/abs/x", followFinal: true, want: filepath.Join(outside[1:], "x")},
		{link: "etc/rel", target: "../../outside", path: "etc/rel/x", followFinal: true, want: "outside/x"},
		{link: "etc/deep", target: "../../../../../../", path: "etc/deep/x", followFinal: true, want: "x"},
		{link: "etc/job", target: outside + "/job", path: "etc/job", followFinal: false, want: "etc/job"},
		{link: "etc/localtime", target: "/usr/share/zoneinfo/UTC", path: "etc/localtime", followFinal: true, want: "usr/share/zoneinfo/UTC"},
		{link: "etc/chain", target: "/etc/rel/systemd", path: "etc/chain/a", followFinal: true, want: "outside/systemd/a"},
		{link: "etc/loop", target: "loop", path: "etc/loop/x", followFinal: true, want: "ERR"},
	}
	for _, tt := range tests {
		if tt.link != "" {
			if err := os.Symlink(tt.target, filepath.Join(root, tt.link)); err != nil {
				t.Fatal(err)
			}
		}
		got, err := Resolve(root, tt.path, tt.followFinal)
		if tt.want == "ERR" {
			if err == nil {
				t.Errorf("Resolve(%q) = %q, want an error", tt.path, got)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("Resolve(%q, %v) = %q, %v; want %q", tt.path, tt.followFinal, got, err, tt.want)
		}
	}
	if h := Host(root, "etc/rel/x"); h != filepath.Join(root, "outside/x") {
		t.Errorf("Host = %s, want inside the root", h)
	}
	if h := Host(root, "etc/loop/x"); h != filepath.Join(root, "etc/loop/x") {
		t.Errorf("Host of a loop = %s, want the path as written, under root", h)
	}
}

func TestCheckPath(t *testing.T) {
	for _, p := range []string{"etc/hosts", "/etc/hosts", "a/./b", "..x/y"} {
		if err := CheckPath(p); err != nil {
			t.Errorf("CheckPath(%q) = %v", p, err)
		}
	}
	for _, p := range []string{"../etc/passwd", "etc/../../x", "/..", "a/../b"} {
		if err := CheckPath(p); !errors.Is(err, ErrPathEscapes) {
			t.Errorf("CheckPath(%q) = %v, want ErrPathEscapes", p, err)
		}
	}
	for _, p := range []string{"", "a\x00b"} {
		if err := CheckPath(p); err == nil {
			t.Errorf("CheckPath(%q): no error", p)
		}
	}
}

func TestLookPath(t *testing.T) {
	root := t.TempDir()
	mk := func(p string, mode os.FileMode) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(filepath.Join(root, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, p), []byte("#!/bin/sh\n"), mode); err != nil {
			t.Fatal(err)
		}
	}
	mk("usr/sbin/update-grub", 0o755)
	mk("usr/bin/notexec", 0o644)
	if err := os.Symlink("/usr/sbin", filepath.Join(root, "sbin")); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{
		"update-grub":       "/usr/sbin/update-grub",
		"/sbin/update-grub": "/sbin/update-grub",
		"notexec":           "",
		"grub-mkconfig":     "",
	} {
		got, err := LookPath(root, name, "/usr/local/bin:/usr/bin:/usr/sbin")
		if got != want || (want == "") != (err != nil) || (err != nil && !errors.Is(err, exec.ErrNotFound)) {
			t.Errorf("LookPath(%q) = %q, %v; want %q", name, got, err, want)
		}
	}
}
