package bootloader

import (
	"slices"
	"strings"
	"testing"
)

// runScript interprets src as /boot/grub/grub.cfg of a root with files.
func runScript(t *testing.T, src string, files map[string]string) *grubInterp {
	t.Helper()
	root := t.TempDir()
	if files == nil {
		files = map[string]string{}
	}
	files["boot/grub/grub.cfg"] = src
	writeTree(t, root, files)
	fsys, err := newRootFS(root)
	if err != nil {
		t.Fatal(err)
	}
	in, err := runGrubConfig(fsys, testLogger(t), "/boot/grub/grub.cfg")
	if err != nil {
		t.Fatal(err)
	}
	return in
}

func TestGrubExpansionAndQuoting(t *testing.T) {
	in := runScript(t, `
set a="x y"
set empty=
b='single $a'
c="double $a \"q\" \$lit"
d=pre${a}post
e=$empty
set f=one\ two
menuentry "t" {
  linux /k $a "$a" '$a' x$empty"" $empty ${a}z "" "a\\b"
}
`, map[string]string{"boot/k": "k"})
	for k, want := range map[string]string{"b": "single $a", "c": `double x y "q" $lit`, "d": "prex ypost", "e": "", "f": "one two"} {
		if in.vars[k] != want {
			t.Errorf("%s = %q, want %q", k, in.vars[k], want)
		}
	}
	b, err := in.bootEntry(in.items[0])
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"x", "y", "x y", "$a", "x", "x", "yz", "", `a\b`}
	if !slices.Equal(b.args, want) {
		t.Errorf("args %q\nwant %q", b.args, want)
	}
	if got := joinCmdline(b.args); got != `x y "x y" $a x x yz  a\b` {
		t.Errorf("cmdline %q", got)
	}
}

func TestGrubConditions(t *testing.T) {
	in := runScript(t, `
set n=3
if [ "$n" -gt 2 -a x$missing = x ]; then r1=yes; else r1=no; fi
if [ ! -e /boot/grub/grub.cfg ]; then r2=no; elif [ -f $prefix/grub.cfg ]; then r2=yes; fi
if [ -s /boot/empty ]; then r3=no; else r3=yes; fi
if [ -d /boot/grub ]; then r4=yes; fi
if [ -z "" -o -n "" ]; then r5=yes; fi
if test a != a; then r6=no; else r6=yes; fi
if false; then r7=no; elif true; then r7=yes; fi
if keystatus --shift; then r8=no; else r8=yes; fi
if [ "$n" = 3 ] ; then if [ "$n" != 3 ]; then r9=no; else r9=yes; fi; fi
for x in a b; do r10=no; done
while false; do r11=no; done
`, map[string]string{"boot/empty": ""})
	for i := 1; i <= 9; i++ {
		if k := "r" + string(rune('0'+i)); in.vars[k] != "yes" {
			t.Errorf("%s = %q", k, in.vars[k])
		}
	}
	if in.vars["r10"] != "" || in.vars["r11"] != "" {
		t.Error("loop bodies ran")
	}
}

func TestGrubFunctionsAndPositionals(t *testing.T) {
	in := runScript(t, `
set one=outer
function setboth {
  set one="$1"
  set two="$2-$#"
}
setboth first second
function recurse { recurse; }
`, nil)
	if in.vars["one"] != "first" || in.vars["two"] != "second-2" || in.vars["1"] != "" {
		t.Errorf("vars %q %q %q", in.vars["one"], in.vars["two"], in.vars["1"])
	}
	root := t.TempDir()
	writeTree(t, root, map[string]string{"boot/grub/grub.cfg": "function r { r; }\nr\n"})
	fsys, _ := newRootFS(root)
	if _, err := runGrubConfig(fsys, testLogger(t), "/boot/grub/grub.cfg"); err == nil || !strings.Contains(err.Error(), "nested too deep") {
		t.Errorf("unbounded recursion: %v", err)
	}
}

func TestGrubMenuStructure(t *testing.T) {
	in := runScript(t, `
menuentry_id_option="--id"
menuentry 'A' --class x $menuentry_id_option 'id-a' { linux /a; }
submenu "Sub" --id=id-sub {
  menuentry "B" --unrestricted --users "" { linux /b; }
  submenu 'Deeper' { menuentry 'C' --hotkey c --id id-c { linux /c; } }
}
menuentry --class y "D" { linux /d; }
`, nil)
	var titles []string
	var walk func(items []*grubMenuItem, prefix string)
	walk = func(items []*grubMenuItem, prefix string) {
		for _, it := range items {
			titles = append(titles, prefix+it.title+"#"+it.id)
			walk(it.items, prefix+it.title+">")
		}
	}
	walk(in.items, "")
	want := []string{"A#id-a", "Sub#id-sub", "Sub>B#", "Sub>Deeper#", "Sub>Deeper>C#id-c", "D#"}
	if !slices.Equal(titles, want) {
		t.Errorf("menu %q\nwant %q", titles, want)
	}
	for def, wantTitle := range map[string]string{
		"": "A", "0": "A", "id-a": "A", "1": "B", "1>0": "B", "1>1": "C", "1>1>0": "C", "id-sub>Deeper>id-c": "C",
		"Sub>B": "B", "2": "D", "D": "D", "7": "A", "nope": "A", "0>3": "A",
	} {
		it, _, err := selectDefault(in.items, def, testLogger(t))
		if err != nil || it.title != wantTitle {
			t.Errorf("default %q: got %v, %v; want %s", def, it, err, wantTitle)
		}
	}
}

func TestGrubESPStubs(t *testing.T) {
	tests := []struct {
		tree, stub, kernel string
	}{
		{"debian12", "/boot/efi/EFI/debian/grub.cfg", "/boot/vmlinuz-6.1.0-18-amd64"},
		{"ubuntu2404", "/boot/efi/EFI/ubuntu/grub.cfg", "/boot/vmlinuz-6.8.0-45-generic"},
	}
	for _, tt := range tests {
		t.Run(tt.tree, func(t *testing.T) {
			root := copyTree(t, tt.tree, nil)
			fsys, err := newRootFS(root)
			if err != nil {
				t.Fatal(err)
			}
			e, err := fsys.grubDefault(tt.stub, testLogger(t))
			if err != nil {
				t.Fatal(err)
			}
			if e.Kernel != root+tt.kernel || !strings.HasPrefix(e.Source, "/boot/grub/grub.cfg (") {
				t.Errorf("got %+v", e)
			}
		})
	}
	t.Run("rhel stub reaches the blscfg config", func(t *testing.T) {
		root := copyTree(t, "rhel9", nil)
		fsys, _ := newRootFS(root)
		in, err := runGrubConfig(fsys, testLogger(t), "/boot/efi/EFI/redhat/grub.cfg")
		if err != nil {
			t.Fatal(err)
		}
		if in.vars["default"] != rhelMID+"-5.14.0-362.8.1.el9_3.x86_64" || in.vars["tuned_params"] != rhelTuned ||
			!strings.HasPrefix(in.vars["kernelopts"], "root=/dev/mapper/rhel-root") || in.vars["dev"] != "mnt:/boot" {
			t.Errorf("vars default=%q tuned=%q kernelopts=%q dev=%q", in.vars["default"], in.vars["tuned_params"], in.vars["kernelopts"], in.vars["dev"])
		}
		if len(in.items) != 1 || in.items[0].id != "uefi-firmware" {
			t.Errorf("menu %v", in.items)
		}
	})
}

func TestGrubPathResolution(t *testing.T) {
	root := t.TempDir()
	writeTree(t, root, map[string]string{
		"etc/fstab":    "UUID=ROOT-1 / ext4 defaults 0 1\nLABEL=boot /boot ext4 defaults 0 2\n/dev/sda1 /boot/efi vfat defaults 0 2\n",
		"boot/vmlinuz": "k",
		"vmlinuz":      "->boot/vmlinuz",
		"boot/link":    "->/boot/vmlinuz",
		"boot/escape":  "->../../../../etc/passwd",
	})
	fsys, err := newRootFS(root)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct{ dev, path, want string }{
		{"", "/vmlinuz", "/boot/vmlinuz"}, // separate /boot: guessed there first
		{"mnt:/", "/vmlinuz", "/vmlinuz"}, // explicit
		{"", "(mnt:/boot)/grub/../vmlinuz", "/boot/vmlinuz"},
		{"hd0,gpt2", "/nothing", "/boot/nothing"},     // unknown device, no file: first candidate
		{"", "/../../etc/passwd", "/boot/etc/passwd"}, // cannot climb out
	}
	for _, tt := range tests {
		if got := fsys.resolveGrub(tt.dev, tt.path); got != tt.want {
			t.Errorf("resolveGrub(%q, %q) = %q, want %q", tt.dev, tt.path, got, tt.want)
		}
	}
	for kind, name := range map[string]string{"uuid": "root-1", "label": "boot"} {
		if _, ok := fsys.deviceFor(kind, name); !ok {
			t.Errorf("deviceFor(%s, %s) not found", kind, name)
		}
	}
	if d, _ := fsys.deviceFor("uuid", "ROOT-1"); d != "mnt:/" {
		t.Errorf("uuid ROOT-1 -> %q", d)
	}
	if d, _ := fsys.deviceFor("file", "/vmlinuz"); d != "mnt:/boot" {
		t.Errorf("file /vmlinuz -> %q", d)
	}
	for rel, want := range map[string]string{"/vmlinuz": "/boot/vmlinuz", "/boot/link": "/boot/vmlinuz", "/boot/escape": "/etc/passwd"} {
		if got := fsys.resolveLinks(rel); got != want {
			t.Errorf("resolveLinks(%s) = %s, want %s", rel, got, want)
		}
	}
	if got := fsys.grubPath("/boot/efi/EFI/debian"); got != "(mnt:/boot/efi)/EFI/debian" {
		t.Errorf("grubPath = %s", got)
	}
}

func TestGrubLexErrors(t *testing.T) {
	for name, src := range map[string]string{
		"single quote":  "menuentry 'x {\n}\n",
		"double quote":  "set a=\"x\n",
		"unclosed menu": "menuentry x {\n linux /k\n",
		"stray fi":      "fi\n",
		"no brace":      "menuentry x\n",
	} {
		if _, err := parseGrub(src); err == nil {
			t.Errorf("%s: parsed", name)
		}
	}
}

func TestGrubSearchForms(t *testing.T) {
	in := runScript(t, `
search --no-floppy --fs-uuid --set=r1 --hint-bios=hd0,gpt2 --hint hd0,gpt2 ABCD-1234
search -u abcd-1234 -s
set r2=$root
search.fs_label my\ boot r3 hd0,gpt3
search --label --set=r4 "my boot"
search.file /grub/grub.cfg r5
search --file --set=r6 /boot/grub/grub.cfg
search -f /nothing -sr7
search.fs_uuid 1111-2222 r8
search --part-uuid --set=r9 0fc63daf-8483-4772-8e79-3d69d8477de4
`, map[string]string{
		"etc/fstab":                 "UUID=abcd-1234 /boot/efi vfat umask=0077 0 1\nLABEL=my\\040boot /mnt/my\\040boot ext4 defaults 0 2\nPARTUUID=0FC63DAF-8483-4772-8E79-3D69D8477DE4 /srv xfs defaults 0 0\n",
		"mnt/my boot/grub/grub.cfg": "",
	})
	want := map[string]string{
		"r1": "mnt:/boot/efi", "r2": "mnt:/boot/efi", "r3": "mnt:/mnt/my boot", "r4": "mnt:/mnt/my boot",
		"r5": "mnt:/boot", "r6": "mnt:/", "r7": "file//nothing", "r8": "uuid/1111-2222", "r9": "mnt:/srv",
	}
	for k, v := range want {
		if in.vars[k] != v {
			t.Errorf("%s = %q, want %q", k, in.vars[k], v)
		}
	}
}
