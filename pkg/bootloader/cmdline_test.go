package bootloader

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestMergeParams(t *testing.T) {
	tests := []struct {
		name          string
		existing, add string
		want          string
	}{
		{"append", "quiet", "console=ttyS0", "quiet console=ttyS0"},
		{"no duplicate flag", "quiet splash", "quiet", "quiet splash"},
		{"key replaces in place", "root=/dev/sda1 console=tty0 quiet", "console=ttyS0,115200", "root=/dev/sda1 console=ttyS0,115200 quiet"},
		{"several values of one key kept in order", "console=tty0 quiet console=ttyS1", "console=tty0 console=ttyS0,115200",
			"console=tty0 console=ttyS0,115200 quiet"},
		{"duplicates in add", "", "a=1 a=1 b b", "a=1 b"},
		{"empty", "", "", ""},
		{"quoted value", `quiet acpi_osi="Windows 2020"`, `acpi_osi="Linux"`, `quiet acpi_osi="Linux"`},
		{"flag and key differ", "nomodeset", "nomodeset=0", "nomodeset=0"},
		{"existing duplicates left alone", "x x", "y", "x x y"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := strings.Join(mergeParams(splitParams(tt.existing), splitParams(tt.add)), " ")
			if got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
			again := strings.Join(mergeParams(splitParams(got), splitParams(tt.add)), " ")
			if again != got {
				t.Errorf("not idempotent: %q then %q", got, again)
			}
		})
	}
}

func TestSetGrubDefaultCmdline(t *testing.T) {
	add := []string{"console=ttyS0,115200n8", "net.ifnames=0", "quiet"}
	tests := []struct {
		name, in, want string
	}{
		{"double quotes",
			"GRUB_DEFAULT=0\nGRUB_CMDLINE_LINUX_DEFAULT=\"quiet\"\nGRUB_CMDLINE_LINUX=\"console=tty0 net.ifnames=1\"\n# tail\n",
			"GRUB_DEFAULT=0\nGRUB_CMDLINE_LINUX_DEFAULT=\"quiet\"\nGRUB_CMDLINE_LINUX=\"console=ttyS0,115200n8 net.ifnames=0 quiet\"\n# tail\n"},
		{"empty value",
			"GRUB_CMDLINE_LINUX=\"\"\n",
			"GRUB_CMDLINE_LINUX=\"console=ttyS0,115200n8 net.ifnames=0 quiet\"\n"},
		{"single quotes kept",
			"GRUB_CMDLINE_LINUX='rd.lvm.lv=vg/root'\n",
			"GRUB_CMDLINE_LINUX='rd.lvm.lv=vg/root console=ttyS0,115200n8 net.ifnames=0 quiet'\n"},
		{"unquoted gets quotes when needed",
			"GRUB_CMDLINE_LINUX=nosplash\n",
			"GRUB_CMDLINE_LINUX=\"nosplash console=ttyS0,115200n8 net.ifnames=0 quiet\"\n"},
		{"missing line is appended, commented one ignored",
			"GRUB_TIMEOUT=5\n#GRUB_CMDLINE_LINUX=\"x\"\nGRUB_CMDLINE_LINUX_DEFAULT=\"splash\"",
			"GRUB_TIMEOUT=5\n#GRUB_CMDLINE_LINUX=\"x\"\nGRUB_CMDLINE_LINUX_DEFAULT=\"splash\"\nGRUB_CMDLINE_LINUX=\"console=ttyS0,115200n8 net.ifnames=0 quiet\"\n"},
		{"last assignment edited, self reference kept",
			"GRUB_CMDLINE_LINUX=\"a\"\nexport GRUB_CMDLINE_LINUX=\"$GRUB_CMDLINE_LINUX quiet\" # why\n",
			"GRUB_CMDLINE_LINUX=\"a\"\nexport GRUB_CMDLINE_LINUX=\"$GRUB_CMDLINE_LINUX quiet console=ttyS0,115200n8 net.ifnames=0\" # why\n"},
		{"multi-line value",
			"GRUB_CMDLINE_LINUX=\"a=1\n  b=2\"\nGRUB_TIMEOUT=1\n",
			"GRUB_CMDLINE_LINUX=\"a=1 b=2 console=ttyS0,115200n8 net.ifnames=0 quiet\"\nGRUB_TIMEOUT=1\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "grub")
			if err := os.WriteFile(p, []byte(tt.in), 0o640); err != nil {
				t.Fatal(err)
			}
			if err := SetGrubDefaultCmdline(p, add); err != nil {
				t.Fatal(err)
			}
			got, _ := os.ReadFile(p)
			if string(got) != tt.want {
				t.Errorf("got\n%s\nwant\n%s", got, tt.want)
			}
			if st, _ := os.Stat(p); st.Mode().Perm() != 0o640 {
				t.Errorf("mode %v", st.Mode())
			}
			if err := SetGrubDefaultCmdline(p, add); err != nil {
				t.Fatal(err)
			}
			if again, _ := os.ReadFile(p); string(again) != tt.want {
				t.Errorf("second run changed the file:\n%s", again)
			}
			// The result must read back as the intended value.
			fsys := &rootFS{root: "/"}
			vars, err := readShellVars(p, nil, fsys)
			if err != nil {
				t.Fatal(err)
			}
			for _, a := range add {
				if !slices.Contains(splitParams(vars["GRUB_CMDLINE_LINUX"]), a) {
					t.Errorf("value %q lacks %q", vars["GRUB_CMDLINE_LINUX"], a)
				}
			}
		})
	}
}

func TestSetGrubDefaultCmdlineQuoting(t *testing.T) {
	p := filepath.Join(t.TempDir(), "grub")
	os.WriteFile(p, []byte("GRUB_CMDLINE_LINUX='a'\n"), 0o644)
	weird := []string{`dyndbg="file x.c +p"`, "it's", "cost=$5"}
	if err := SetGrubDefaultCmdline(p, weird); err != nil {
		t.Fatal(err)
	}
	vars, err := readShellVars(p, nil, &rootFS{root: "/"})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := vars["GRUB_CMDLINE_LINUX"], `a dyndbg="file x.c +p" it's cost=$5`; got != want {
		t.Errorf("value %q, want %q", got, want)
	}
}

func TestSetGrubDefaultCmdlineMissingFile(t *testing.T) {
	err := SetGrubDefaultCmdline(filepath.Join(t.TempDir(), "nope"), []string{"quiet"})
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("err = %v", err)
	}
}

func TestSetBLSOptions(t *testing.T) {
	root := copyTree(t, "rhel9", map[string]string{
		"boot/loader/entries/two-lines.conf": "title T\nlinux /vmlinuz-x\noptions root=/dev/sda2 console=tty0\noptions\tquiet\ngrub_class x\n",
		"boot/loader/entries/none.conf":      "title N\nlinux /vmlinuz-y",
	})
	add := []string{"console=ttyS0,115200", "nosmt"}
	if err := SetBLSOptions(root, add); err != nil {
		t.Fatal(err)
	}
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(root, "boot/loader/entries", name))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	if got, want := read("two-lines.conf"), "title T\nlinux /vmlinuz-x\noptions root=/dev/sda2 console=ttyS0,115200 quiet nosmt\ngrub_class x\n"; got != want {
		t.Errorf("two-lines.conf:\n%s\nwant\n%s", got, want)
	}
	if got, want := read("none.conf"), "title N\nlinux /vmlinuz-y\noptions console=ttyS0,115200 nosmt\n"; got != want {
		t.Errorf("none.conf:\n%s\nwant\n%s", got, want)
	}
	rhel := read(rhelMID + "-5.14.0-427.13.1.el9_4.x86_64.conf")
	if !strings.Contains(rhel, "\noptions "+rhelOpts+" $tuned_params console=ttyS0,115200 nosmt\ngrub_users $grub_users\n") {
		t.Errorf("rhel entry:\n%s", rhel)
	}
	before := read("two-lines.conf") + read("none.conf") + rhel
	if err := SetBLSOptions(root, add); err != nil {
		t.Fatal(err)
	}
	if after := read("two-lines.conf") + read("none.conf") + read(rhelMID+"-5.14.0-427.13.1.el9_4.x86_64.conf"); after != before {
		t.Errorf("second run changed entries")
	}
	// The default entry now boots with the new options.
	e, err := defaultEntry(root, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(e.Cmdline, rhelTuned+" console=ttyS0,115200 nosmt") {
		t.Errorf("cmdline %q", e.Cmdline)
	}
}

func TestSetBLSOptionsNoEntries(t *testing.T) {
	if err := SetBLSOptions(t.TempDir(), []string{"x"}); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("err = %v", err)
	}
}

func TestReadShellVars(t *testing.T) {
	root := t.TempDir()
	writeTree(t, root, map[string]string{
		"etc/default/grub":          "A=1\nB=\"$A two\"  # comment\nC='$A'\nD=x\\ y\nexport E=\"${B}!\"\n  F=\"multi\nline\"\n",
		"etc/default/grub.d/10.cfg": "A=override\nG=\"$A\"\n",
	})
	fsys := &rootFS{root: root}
	vars, err := readShellVars(fsys.host("/etc/default/grub"), fsys.globSorted("/etc/default/grub.d/*.cfg"), fsys)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"A": "override", "B": "1 two", "C": "$A", "D": "x y", "E": "1 two!", "F": "multi\nline", "G": "override"}
	for k, v := range want {
		if vars[k] != v {
			t.Errorf("%s = %q, want %q", k, vars[k], v)
		}
	}
}

// An image whose /boot is an absolute symlink: the link means a directory
// of the image, and nothing outside the target root is written.
func TestSetBLSOptionsConfinedToRoot(t *testing.T) {
	root := t.TempDir()
	outside := t.TempDir()
	entry := "title T\nlinux /vmlinuz-x\noptions root=/dev/sda2\n"
	writeTree(t, outside, map[string]string{"loader/entries/a.conf": entry})
	writeTree(t, root, map[string]string{"realboot/loader/entries/a.conf": entry})
	if err := os.Symlink(outside, filepath.Join(root, "boot")); err != nil {
		t.Fatal(err)
	}
	// Inside the image, /boot -> <outside> names <root><outside>: give it the entry.
	writeTree(t, filepath.Join(root, outside), map[string]string{"loader/entries/a.conf": entry})
	if err := SetBLSOptions(root, []string{"nosmt"}); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(outside, "loader/entries/a.conf")); string(b) != entry {
		t.Fatalf("a file outside the target root was rewritten:\n%s", b)
	}
	if b, _ := os.ReadFile(filepath.Join(root, outside, "loader/entries/a.conf")); !strings.Contains(string(b), "options root=/dev/sda2 nosmt") {
		t.Fatalf("the entry the image's /boot names was not updated:\n%s", b)
	}
}
