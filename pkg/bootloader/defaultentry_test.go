package bootloader

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// copyTree copies testdata/<name> (symlinks as symlinks) to a temp dir
// and applies edits: a value of "" removes the file, "->x" makes a
// symlink, anything else is the new content.
func copyTree(t *testing.T, name string, edits map[string]string) string {
	t.Helper()
	dst := t.TempDir()
	src := filepath.Join("testdata", name)
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		out := filepath.Join(dst, rel)
		switch {
		case d.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			return os.Symlink(target, out)
		case d.IsDir():
			return os.MkdirAll(out, 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(out, b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	for p, content := range edits {
		full := filepath.Join(dst, p)
		os.Remove(full)
		if content != "" {
			writeTree(t, dst, map[string]string{p: content})
		}
	}
	return dst
}

func grubenv(vars ...string) string {
	s := "# GRUB Environment Block\n"
	for _, v := range vars {
		s += v + "\n"
	}
	return s + strings.Repeat("#", 1024-len(s))
}

const (
	debRoot   = "3f5ad5b1-2d0c-4c7e-9a53-0c6f2b1d9e7a"
	ubuntuID  = "e1f2a3b4-c5d6-4e7f-8091-a2b3c4d5e6f7"
	rhelMID   = "3a7f0c1e9b2d4f6a8c0e2b4d6f8a0c1e"
	rhelOpts  = "root=/dev/mapper/rhel-root ro crashkernel=1G-4G:192M,4G-64G:256M,64G-:512M resume=/dev/mapper/rhel-swap rd.lvm.lv=rhel/root rd.lvm.lv=rhel/swap rhgb quiet"
	rhelTuned = "skew_tick=1 tsc=reliable rcupdate.rcu_normal_after_boot=1"
)

// want is a BootEntry with paths relative to the root.
type want struct {
	title, id, kernel, initrd, cmdline, source string
}

func TestDefaultEntryGolden(t *testing.T) {
	debQuiet := "root=UUID=" + debRoot + " ro quiet"
	ubuntuCmd := "root=/dev/mapper/ubuntu--vg-ubuntu--lv ro quiet splash console=tty1 console=ttyS0 vt.handoff=7"
	tests := []struct {
		name  string
		tree  string
		edits map[string]string
		want  want
	}{
		{name: "debian default 0", tree: "debian12", want: want{
			title: "Debian GNU/Linux", id: "gnulinux-simple-" + debRoot,
			kernel: "/boot/vmlinuz-6.1.0-18-amd64", initrd: "/boot/initrd.img-6.1.0-18-amd64",
			cmdline: debQuiet, source: "/boot/grub/grub.cfg (Debian GNU/Linux)"}},
		{name: "debian next_entry index path into submenu", tree: "debian12",
			edits: map[string]string{"boot/grub/grubenv": grubenv("next_entry=1>2")},
			want: want{title: "Debian GNU/Linux, with Linux 6.1.0-17-amd64", id: "gnulinux-6.1.0-17-amd64-advanced-" + debRoot,
				kernel: "/boot/vmlinuz-6.1.0-17-amd64", initrd: "/boot/initrd.img-6.1.0-17-amd64", cmdline: debQuiet}},
		{name: "debian id path", tree: "debian12",
			edits: map[string]string{"boot/grub/grubenv": grubenv("next_entry=gnulinux-advanced-" + debRoot + ">gnulinux-6.1.0-17-amd64-recovery-" + debRoot)},
			want: want{title: "Debian GNU/Linux, with Linux 6.1.0-17-amd64 (recovery mode)", id: "gnulinux-6.1.0-17-amd64-recovery-" + debRoot,
				kernel: "/boot/vmlinuz-6.1.0-17-amd64", initrd: "/boot/initrd.img-6.1.0-17-amd64",
				cmdline: "root=UUID=" + debRoot + " ro single dis_ucode_ldr"}},
		{name: "debian title path", tree: "debian12",
			edits: map[string]string{"boot/grub/grubenv": grubenv("next_entry=Advanced options for Debian GNU/Linux>Debian GNU/Linux, with Linux 6.1.0-18-amd64 (recovery mode)")},
			want: want{title: "Debian GNU/Linux, with Linux 6.1.0-18-amd64 (recovery mode)", id: "gnulinux-6.1.0-18-amd64-recovery-" + debRoot,
				kernel: "/boot/vmlinuz-6.1.0-18-amd64", initrd: "/boot/initrd.img-6.1.0-18-amd64",
				cmdline: "root=UUID=" + debRoot + " ro single dis_ucode_ldr"}},
		{name: "debian submenu without step enters its first entry", tree: "debian12",
			edits: map[string]string{"boot/grub/grubenv": grubenv("next_entry=1")},
			want: want{title: "Debian GNU/Linux, with Linux 6.1.0-18-amd64", id: "gnulinux-6.1.0-18-amd64-advanced-" + debRoot,
				kernel: "/boot/vmlinuz-6.1.0-18-amd64", initrd: "/boot/initrd.img-6.1.0-18-amd64", cmdline: debQuiet,
				source: "/boot/grub/grub.cfg (Advanced options for Debian GNU/Linux>Debian GNU/Linux, with Linux 6.1.0-18-amd64)"}},
		{name: "debian index out of range falls back to 0 like grub", tree: "debian12",
			edits: map[string]string{"boot/grub/grubenv": grubenv("next_entry=9")},
			want: want{title: "Debian GNU/Linux", id: "gnulinux-simple-" + debRoot,
				kernel: "/boot/vmlinuz-6.1.0-18-amd64", initrd: "/boot/initrd.img-6.1.0-18-amd64", cmdline: debQuiet}},
		{name: "debian custom.cfg sourced", tree: "debian12",
			edits: map[string]string{
				"boot/grub/grubenv": grubenv("next_entry=custom-old"),
				"boot/grub/custom.cfg": "menuentry \"Old kernel, serial\" --id custom-old {\n" +
					"  search --no-floppy --fs-uuid --set=root " + debRoot + "\n" +
					"  linux ($root)/boot/vmlinuz-6.1.0-17-amd64 root=UUID=" + debRoot + " ro console=ttyS0,115200n8 \"acpi_osi=Windows 2020\"\n" +
					"  initrd ($root)/boot/initrd.img-6.1.0-17-amd64\n}\n"},
			want: want{title: "Old kernel, serial", id: "custom-old",
				kernel: "/boot/vmlinuz-6.1.0-17-amd64", initrd: "/boot/initrd.img-6.1.0-17-amd64",
				cmdline: "root=UUID=" + debRoot + ` ro console=ttyS0,115200n8 "acpi_osi=Windows 2020"`}},
		{name: "debian entry without linux falls through to the symlinks", tree: "debian12",
			edits: map[string]string{"boot/grub/grubenv": grubenv("next_entry=uefi-firmware")},
			want: want{title: "Linux (vmlinuz-6.1.0-18-amd64)",
				kernel: "/boot/vmlinuz-6.1.0-18-amd64", initrd: "/boot/initrd.img-6.1.0-18-amd64",
				cmdline: debQuiet, source: "/vmlinuz, /initrd.img"}},
		{name: "debian without grub.cfg uses /etc/default/grub", tree: "debian12",
			edits: map[string]string{"boot/grub/grub.cfg": "",
				"etc/default/grub": "GRUB_CMDLINE_LINUX=\"console=ttyS0\"\nGRUB_CMDLINE_LINUX_DEFAULT='quiet  loglevel=3'\n"},
			want: want{title: "Linux (vmlinuz-6.1.0-18-amd64)",
				kernel: "/boot/vmlinuz-6.1.0-18-amd64", initrd: "/boot/initrd.img-6.1.0-18-amd64",
				cmdline: "root=UUID=" + debRoot + " ro console=ttyS0 quiet loglevel=3"}},

		{name: "ubuntu separate /boot", tree: "ubuntu2404", want: want{
			title: "Ubuntu", id: "gnulinux-simple-" + ubuntuID,
			kernel: "/boot/vmlinuz-6.8.0-45-generic", initrd: "/boot/initrd.img-6.8.0-45-generic", cmdline: ubuntuCmd}},
		{name: "ubuntu memtest by id", tree: "ubuntu2404",
			edits: map[string]string{"boot/grub/grubenv": grubenv("next_entry=memtest86+-serial")},
			want: want{title: "Memory test (memtest86+x64.efi, serial console)", id: "memtest86+-serial",
				kernel: "/boot/memtest86+x64.efi", cmdline: "console=ttyS0,115200"}},
		{name: "ubuntu older kernel", tree: "ubuntu2404",
			edits: map[string]string{"boot/grub/grubenv": grubenv("next_entry=1>2")},
			want: want{title: "Ubuntu, with Linux 6.8.0-31-generic", id: "gnulinux-6.8.0-31-generic-advanced-" + ubuntuID,
				kernel: "/boot/vmlinuz-6.8.0-31-generic", initrd: "/boot/initrd.img-6.8.0-31-generic", cmdline: ubuntuCmd}},
		{name: "ubuntu recordfail drops vt.handoff", tree: "ubuntu2404",
			edits: map[string]string{"boot/grub/grubenv": grubenv("recordfail=1")},
			want: want{title: "Ubuntu", id: "gnulinux-simple-" + ubuntuID,
				kernel: "/boot/vmlinuz-6.8.0-45-generic", initrd: "/boot/initrd.img-6.8.0-45-generic",
				cmdline: "root=/dev/mapper/ubuntu--vg-ubuntu--lv ro quiet splash console=tty1 console=ttyS0"}},
		{name: "ubuntu fallback reads grub.d", tree: "ubuntu2404",
			edits: map[string]string{"boot/grub/grub.cfg": "", "boot/efi/EFI/ubuntu/grub.cfg": ""},
			want: want{title: "Linux (vmlinuz-6.8.0-45-generic)",
				kernel: "/boot/vmlinuz-6.8.0-45-generic", initrd: "/boot/initrd.img-6.8.0-45-generic",
				cmdline: "root=/dev/disk/by-id/dm-uuid-LVM-Xq3k9TtQ8bH0d1fG2hJ3kL4mN5pQ6rS7tU8vW9xY0zA1bC2dE3fG4hJ5kL6mN7pQ ro quiet splash console=tty1 console=ttyS0",
				source:  "/boot/vmlinuz, /boot/initrd.img"}},

		{name: "rhel saved_entry", tree: "rhel9", want: want{
			title: "Red Hat Enterprise Linux (5.14.0-362.8.1.el9_3.x86_64) 9.3 (Plow)", id: rhelMID + "-5.14.0-362.8.1.el9_3.x86_64",
			kernel: "/boot/vmlinuz-5.14.0-362.8.1.el9_3.x86_64", initrd: "/boot/initramfs-5.14.0-362.8.1.el9_3.x86_64.img",
			cmdline: rhelOpts + " " + rhelTuned, source: "/boot/loader/entries/" + rhelMID + "-5.14.0-362.8.1.el9_3.x86_64.conf"}},
		{name: "rhel newest without saved_entry", tree: "rhel9",
			edits: map[string]string{"boot/grub2/grubenv": grubenv("boot_success=0")},
			want: want{title: "Red Hat Enterprise Linux (5.14.0-427.13.1.el9_4.x86_64) 9.4 (Plow)", id: rhelMID + "-5.14.0-427.13.1.el9_4.x86_64",
				kernel: "/boot/vmlinuz-5.14.0-427.13.1.el9_4.x86_64", initrd: "/boot/initramfs-5.14.0-427.13.1.el9_4.x86_64.img",
				cmdline: rhelOpts + " " + rhelTuned}},
		{name: "rhel stale saved_entry falls back to newest", tree: "rhel9",
			edits: map[string]string{"boot/grub2/grubenv": grubenv("saved_entry=" + rhelMID + "-4.18.0-1.el8.x86_64")},
			want: want{title: "Red Hat Enterprise Linux (5.14.0-427.13.1.el9_4.x86_64) 9.4 (Plow)", id: rhelMID + "-5.14.0-427.13.1.el9_4.x86_64",
				kernel: "/boot/vmlinuz-5.14.0-427.13.1.el9_4.x86_64", initrd: "/boot/initramfs-5.14.0-427.13.1.el9_4.x86_64.img",
				cmdline: rhelOpts + " " + rhelTuned}},
		{name: "rhel next_entry by index into sorted entries", tree: "rhel9",
			edits: map[string]string{"boot/grub2/grubenv": grubenv("next_entry=2")},
			want: want{title: "Red Hat Enterprise Linux (0-rescue-" + rhelMID + ") 9.4 (Plow)", id: rhelMID + "-0-rescue",
				kernel: "/boot/vmlinuz-0-rescue-" + rhelMID, initrd: "/boot/initramfs-0-rescue-" + rhelMID + ".img", cmdline: rhelOpts}},
		{name: "rhel8 kernelopts from grubenv", tree: "rhel9",
			edits: map[string]string{
				"boot/grub2/grubenv": grubenv("saved_entry="+rhelMID+"-5.14.0-427.13.1.el9_4.x86_64", "kernelopts=root=/dev/mapper/rhel-root ro console=ttyS0 "),
				"boot/loader/entries/" + rhelMID + "-5.14.0-427.13.1.el9_4.x86_64.conf": "title RHEL 8 style\nversion 5.14.0-427.13.1.el9_4.x86_64\n" +
					"linux /vmlinuz-5.14.0-427.13.1.el9_4.x86_64\ninitrd /initramfs-5.14.0-427.13.1.el9_4.x86_64.img $tuned_initrd\noptions $kernelopts $tuned_params\nid rhel-20240430\n"},
			want: want{title: "RHEL 8 style", id: rhelMID + "-5.14.0-427.13.1.el9_4.x86_64",
				kernel: "/boot/vmlinuz-5.14.0-427.13.1.el9_4.x86_64", initrd: "/boot/initramfs-5.14.0-427.13.1.el9_4.x86_64.img",
				cmdline: "root=/dev/mapper/rhel-root ro console=ttyS0 " + rhelTuned}},
		{name: "rhel kernelopts fallback from grub.cfg", tree: "rhel9",
			edits: map[string]string{
				"boot/loader/entries/" + rhelMID + "-5.14.0-362.8.1.el9_3.x86_64.conf": "title t\nversion 5.14.0-362.8.1.el9_3.x86_64\n" +
					"linux /vmlinuz-5.14.0-362.8.1.el9_3.x86_64\noptions ${kernelopts}\n"},
			want: want{title: "t", id: rhelMID + "-5.14.0-362.8.1.el9_3.x86_64",
				kernel: "/boot/vmlinuz-5.14.0-362.8.1.el9_3.x86_64", cmdline: rhelOpts}},
		{name: "rhel without grub.cfg reads grubenv", tree: "rhel9",
			edits: map[string]string{"boot/grub2/grub.cfg": "", "boot/efi/EFI/redhat/grub.cfg": ""},
			want: want{title: "Red Hat Enterprise Linux (5.14.0-362.8.1.el9_3.x86_64) 9.3 (Plow)", id: rhelMID + "-5.14.0-362.8.1.el9_3.x86_64",
				kernel: "/boot/vmlinuz-5.14.0-362.8.1.el9_3.x86_64", initrd: "/boot/initramfs-5.14.0-362.8.1.el9_3.x86_64.img",
				cmdline: rhelOpts}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := copyTree(t, tt.tree, tt.edits)
			e, err := defaultEntry(root, testLogger(t))
			if err != nil {
				t.Fatal(err)
			}
			rel := func(p string) string {
				if p == "" {
					return ""
				}
				if !strings.HasPrefix(p, root+"/") {
					t.Errorf("path %s is not under the root %s", p, root)
				}
				return strings.TrimPrefix(p, root)
			}
			got := want{title: e.Title, id: e.ID, kernel: rel(e.Kernel), initrd: rel(e.Initrd), cmdline: e.Cmdline, source: e.Source}
			if tt.want.source == "" {
				got.source = ""
			}
			if got != tt.want {
				t.Errorf("got  %+v\nwant %+v", got, tt.want)
			}
			if e.Initrd != "" && (len(e.Initrds) == 0 || e.Initrds[len(e.Initrds)-1] != e.Initrd) {
				t.Errorf("Initrds %v does not end with Initrd %s", e.Initrds, e.Initrd)
			}
		})
	}
}

func TestDefaultEntryErrors(t *testing.T) {
	t.Run("empty root lists everything tried", func(t *testing.T) {
		_, err := defaultEntry(t.TempDir(), testLogger(t))
		if !errors.Is(err, ErrNoBootEntry) {
			t.Fatalf("err = %v", err)
		}
		for _, s := range []string{"/boot/loader/entries: no entries", "/boot/grub/grub.cfg: not found",
			"/boot/grub2/grub.cfg: not found", "/boot/efi/EFI/*/grub.cfg: not found", "/boot/vmlinuz, /vmlinuz: not found"} {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("error does not mention %q:\n%v", s, err)
			}
		}
	})
	t.Run("missing kernel is named", func(t *testing.T) {
		root := copyTree(t, "debian12", map[string]string{"boot/vmlinuz-6.1.0-18-amd64": ""})
		_, err := defaultEntry(root, testLogger(t))
		if !errors.Is(err, ErrNoBootEntry) || !strings.Contains(err.Error(), "kernel /boot/vmlinuz-6.1.0-18-amd64") {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("syntax error is reported with the file", func(t *testing.T) {
		root := copyTree(t, "debian12", map[string]string{"boot/grub/grub.cfg": "if [ x ]; then\n menuentry 'a' {\n linux /x\n}\n",
			"vmlinuz": "", "boot/efi/EFI/debian/grub.cfg": ""})
		_, err := defaultEntry(root, testLogger(t))
		if !errors.Is(err, ErrNoBootEntry) || !strings.Contains(err.Error(), "parse grub config /boot/grub/grub.cfg: line 1: if not closed") {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("configfile loop is bounded", func(t *testing.T) {
		root := copyTree(t, "debian12", map[string]string{"boot/grub/grub.cfg": "configfile $prefix/grub.cfg\n", "vmlinuz": "", "boot/efi/EFI/debian/grub.cfg": ""})
		_, err := defaultEntry(root, testLogger(t))
		if !errors.Is(err, ErrNoBootEntry) || !strings.Contains(err.Error(), "nested deeper than 8") {
			t.Fatalf("err = %v", err)
		}
	})
}

func TestDefaultEntryPublic(t *testing.T) {
	root := copyTree(t, "debian12", nil)
	e, err := DefaultEntry(root)
	if err != nil || e.Kernel != filepath.Join(root, "boot/vmlinuz-6.1.0-18-amd64") {
		t.Fatalf("DefaultEntry = %+v, %v", e, err)
	}
}

func TestDefaultEntryBtrfsSubvolume(t *testing.T) {
	root := t.TempDir()
	const u = "9b8c7d6e-5f4a-4b3c-8d2e-1f0a9b8c7d6e"
	writeTree(t, root, map[string]string{
		"etc/fstab": "UUID=" + u + " /     btrfs defaults,subvol=@ 0 1\n" +
			"UUID=" + u + " /home btrfs defaults,subvol=@home 0 2\n",
		"boot/grub/grub.cfg": "set default=0\nmenuentry 'Ubuntu' {\n search --no-floppy --fs-uuid --set=root " + u + "\n" +
			" linux /@/boot/vmlinuz-6.8.0-45-generic root=UUID=" + u + " ro rootflags=subvol=@ quiet\n" +
			" initrd /@/boot/initrd.img-6.8.0-45-generic\n}\n" +
			"submenu 'x' { configfile /@/boot/grub/other.cfg; }\n",
		"boot/grub/other.cfg":              "menuentry 'hijack' { linux /nope; }\n",
		"boot/vmlinuz-6.8.0-45-generic":    "k",
		"boot/initrd.img-6.8.0-45-generic": "i",
	})
	e, err := defaultEntry(root, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	if e.Title != "Ubuntu" || e.Kernel != root+"/boot/vmlinuz-6.8.0-45-generic" || e.Initrd != root+"/boot/initrd.img-6.8.0-45-generic" ||
		e.Cmdline != "root=UUID="+u+" ro rootflags=subvol=@ quiet" {
		t.Errorf("got %+v", e)
	}
}
