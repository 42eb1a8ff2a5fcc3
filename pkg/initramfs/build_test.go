package initramfs

import (
	"bytes"
	"compress/gzip"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
	"github.com/u-root/mkuimage/cpio"

	"github.com/booty-dev/booty/pkg/initsys/kmod"
)

const kver = "6.1.0-test-amd64"

// fakeHost lays out /boot and /lib/modules/KVER with module files and the
// depmod metadata of ../initsys/kmod/testdata plus one unrelated module.
func fakeHost(t *testing.T) (boot, modRoot string) {
	t.Helper()
	root := t.TempDir()
	boot, modRoot = filepath.Join(root, "boot"), filepath.Join(root, "lib/modules")
	dir := filepath.Join(modRoot, kver)
	write := func(p, content string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{kmod.DepFile, kmod.AliasFile, kmod.SoftdepFile, kmod.BuiltinFile} {
		b, err := os.ReadFile(filepath.Join("..", "initsys", "kmod", "testdata", f))
		if err != nil {
			t.Fatal(err)
		}
		s := string(b)
		if f == kmod.DepFile {
			s += "kernel/sound/unrelated.ko: kernel/drivers/virtio/virtio.ko\n"
		}
		if f == kmod.AliasFile {
			s += "alias pci:v00008888d*sv*sd*bc*sc*i* unrelated\n"
		}
		write(filepath.Join(dir, f), s)
	}
	mods, _ := kmod.ParseDep(strings.NewReader(mustRead(t, filepath.Join(dir, kmod.DepFile))))
	for _, m := range mods {
		write(filepath.Join(dir, m.Path), "\x7fELF "+m.Name)
	}
	write(filepath.Join(dir, kmod.OrderFile), "kernel/drivers/block/virtio_blk.ko\nkernel/sound/unrelated.ko\n")
	write(filepath.Join(boot, "vmlinuz-"+kver), "KERNEL")
	write(filepath.Join(boot, "vmlinuz-6.1.0-9-amd64"), "OLD KERNEL")
	write(filepath.Join(boot, "config-"+kver), "CONFIG_RD_GZIP=y\nCONFIG_RD_ZSTD=y\n")
	return boot, modRoot
}

func mustRead(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

const testList = `
# storage
drivers/virtio/virtio_pci.ko
drivers/block/virtio_blk.ko
fs/ext4/ext4.ko      load
drivers/scsi/sd_mod.ko
drivers/nosuch/*.ko
`

// readArchive decompresses and parses an initramfs.
func readArchive(t *testing.T, path string, comp Compression) map[string]cpio.Record {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var r io.Reader = bytes.NewReader(b)
	switch comp {
	case Zstd:
		zr, err := zstd.NewReader(r)
		if err != nil {
			t.Fatal(err)
		}
		defer zr.Close()
		r = zr
	case Gzip:
		if r, err = gzip.NewReader(r); err != nil {
			t.Fatal(err)
		}
	case Lz4:
		// The kernel unpacks only the legacy frame format (magic 0x184C2102).
		if len(b) < 4 || !bytes.Equal(b[:4], []byte{0x02, 0x21, 0x4c, 0x18}) {
			t.Fatalf("lz4 archive starts with % x, want the legacy frame magic 02 21 4c 18", b[:min(4, len(b))])
		}
		r = lz4.NewReader(r)
	}
	raw, err := io.ReadAll(r)
	if err != nil {
		t.Fatalf("decompress %s: %v", comp, err)
	}
	recs, err := cpio.ReadAllRecords(cpio.Newc.Reader(bytes.NewReader(raw)))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]cpio.Record{}
	for _, rec := range recs {
		if _, dup := out[rec.Name]; dup {
			t.Errorf("duplicate record %s", rec.Name)
		}
		out[rec.Name] = rec
	}
	return out
}

func content(t *testing.T, r cpio.Record) string {
	t.Helper()
	b, err := io.ReadAll(io.NewSectionReader(r.ReaderAt, 0, int64(r.FileSize)))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestBuild(t *testing.T) {
	boot, modRoot := fakeHost(t)
	specs, err := ParseModuleList(strings.NewReader(testList))
	if err != nil {
		t.Fatal(err)
	}
	work := t.TempDir()
	initBin := filepath.Join(work, "booty")
	os.WriteFile(initBin, []byte("#!booty"), 0o755)
	ca := filepath.Join(work, "ca.crt")
	os.WriteFile(ca, []byte("-----BEGIN CERTIFICATE-----"), 0o644)
	deploy := filepath.Join(work, "deploy")
	os.MkdirAll(filepath.Join(deploy, "images"), 0o755)
	os.WriteFile(filepath.Join(deploy, "images", "config.yaml"), []byte("hostname: x"), 0o644)
	extra := filepath.Join(work, "motd")
	os.WriteFile(extra, []byte("hi"), 0o644)

	for _, comp := range []Compression{Auto, Gzip, Lz4, None} {
		name := string(comp)
		if comp == Auto {
			name = "auto"
		}
		t.Run(name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "initramfs")
			kout := filepath.Join(t.TempDir(), "vmlinuz")
			res, err := Build(Options{
				BootDir: boot, ModulesRoot: modRoot, Init: initBin, Modules: specs,
				DeployDir: deploy, Extra: []Extra{{extra, "/etc/motd"}}, CACerts: ca,
				Compression: comp, Out: out, KernelOut: kout,
				Log: slog.New(slog.NewTextHandler(t.Output(), nil)),
			})
			if err != nil {
				t.Fatal(err)
			}
			if res.KernelVersion != kver {
				t.Errorf("kernel %s, want newest %s", res.KernelVersion, kver)
			}
			wantComp := comp
			if comp == Auto {
				wantComp = Zstd
			}
			if res.Compression != wantComp {
				t.Errorf("compression %s, want %s", res.Compression, wantComp)
			}
			if got := mustRead(t, kout); got != "KERNEL" {
				t.Errorf("kernel copy = %q", got)
			}
			recs := readArchive(t, out, res.Compression)
			if res.Files != len(recs) {
				t.Errorf("Result.Files = %d, archive has %d records", res.Files, len(recs))
			}
			st, _ := os.Stat(out)
			if res.Size != st.Size() {
				t.Errorf("Result.Size = %d, file is %d", res.Size, st.Size())
			}

			init := recs["init"]
			if init.Mode&cpio.S_IFMT != cpio.S_IFREG || init.Mode&0o111 == 0 || content(t, init) != "#!booty" {
				t.Errorf("init record %v", init.Info)
			}
			if c := recs["dev/console"]; c.Mode&cpio.S_IFMT != cpio.S_IFCHR || c.Rmajor != 5 || c.Rminor != 1 {
				t.Errorf("dev/console record %v", c.Info)
			}
			for _, d := range []string{"dev", "proc", "sys", "run", "tmp", "etc", "lib/modules", "deploy", "deploy/images"} {
				if r, ok := recs[d]; !ok || r.Mode&cpio.S_IFMT != cpio.S_IFDIR {
					t.Errorf("directory %s missing", d)
				}
			}
			if m := recs["sbin/modprobe"]; m.Mode&cpio.S_IFMT != cpio.S_IFLNK || content(t, m) != "/init" {
				t.Errorf("sbin/modprobe is not a link to /init (the kernel's module helper): %+v", m.Info)
			}
			if recs["tmp"].Mode&0o7777 != 0o1777 {
				t.Errorf("tmp mode %o", recs["tmp"].Mode&0o7777)
			}
			if content(t, recs["etc/ssl/certs/ca-certificates.crt"]) != "-----BEGIN CERTIFICATE-----" {
				t.Error("CA bundle missing")
			}
			if content(t, recs["deploy/images/config.yaml"]) != "hostname: x" || content(t, recs["etc/motd"]) != "hi" {
				t.Error("deploy or extra file missing")
			}

			// Module closure: listed modules, their deps and the
			// softdep pre crc32c of ext4; not the unrelated one.
			md := "lib/modules/" + kver + "/"
			var mods []string
			for name := range recs {
				if strings.HasPrefix(name, md+"kernel/") && strings.HasSuffix(name, ".ko") {
					mods = append(mods, kmod.Name(name))
				}
			}
			sort.Strings(mods)
			want := []string{"crc16", "crc32c_generic", "crc32c_intel", "ext4", "jbd2", "mbcache",
				"virtio", "virtio_blk", "virtio_pci", "virtio_pci_legacy_dev", "virtio_pci_modern_dev", "virtio_ring"}
			if !slices.Equal(mods, want) {
				t.Errorf("modules in archive %v\nwant %v", mods, want)
			}
			if !slices.Equal(res.Unmatched, []string{"drivers/nosuch/*.ko"}) {
				t.Errorf("unmatched %v", res.Unmatched)
			}

			// The rewritten metadata parses and resolves inside the archive.
			ix := kmod.NewIndex(nil, nil, nil, nil)
			ix.Modules, err = kmod.ParseDep(strings.NewReader(content(t, recs[md+kmod.DepFile])))
			if err != nil {
				t.Fatal(err)
			}
			if len(ix.Modules) != len(want) {
				t.Errorf("modules.dep has %d modules, want %d", len(ix.Modules), len(want))
			}
			for _, m := range ix.Modules {
				if _, ok := recs[md+m.Path]; !ok {
					t.Errorf("modules.dep names %s, not in archive", m.Path)
				}
			}
			alias := content(t, recs[md+kmod.AliasFile])
			if strings.Contains(alias, "unrelated") || strings.Contains(alias, "virtio_net") || !strings.Contains(alias, "virtio_blk") {
				t.Errorf("modules.alias not filtered to the archive:\n%s", alias)
			}
			if sd := content(t, recs[md+kmod.SoftdepFile]); !strings.Contains(sd, "softdep ext4 pre: crypto-crc32c") || strings.Contains(sd, "cifs") {
				t.Errorf("modules.softdep:\n%s", sd)
			}
			if o := content(t, recs[md+kmod.OrderFile]); strings.Contains(o, "unrelated") || !strings.Contains(o, "virtio_blk") {
				t.Errorf("modules.order:\n%s", o)
			}
			if !strings.Contains(content(t, recs[md+kmod.BuiltinFile]), "sd_mod.ko") {
				t.Error("modules.builtin not copied")
			}
			var load []string
			for _, l := range strings.Split(content(t, recs[ModulesLoadPath]), "\n") {
				if l != "" && !strings.HasPrefix(l, "#") {
					load = append(load, l)
				}
			}
			if !slices.Equal(load, []string{"ext4"}) {
				t.Errorf("modules-load = %v, want [ext4]", load)
			}
		})
	}
}

func TestBuildErrors(t *testing.T) {
	boot, modRoot := fakeHost(t)
	initBin := filepath.Join(t.TempDir(), "booty")
	os.WriteFile(initBin, []byte("x"), 0o755)
	out := filepath.Join(t.TempDir(), "out")
	tests := []struct {
		name string
		opts Options
	}{
		{"no init", Options{Out: out}},
		{"missing init", Options{Init: "/nonexistent/booty", Out: out, BootDir: boot, ModulesRoot: modRoot}},
		{"unknown kernel", Options{Init: initBin, Out: out, BootDir: boot, ModulesRoot: modRoot, KernelVersion: "9.9", Modules: []ModuleSpec{{Pattern: "x.ko"}}}},
		{"bad compression", Options{Init: initBin, Out: out, BootDir: boot, ModulesRoot: modRoot, Compression: "lzma"}},
		{"no boot dir", Options{Init: initBin, Out: out, BootDir: t.TempDir(), ModulesRoot: modRoot}},
	}
	for _, tt := range tests {
		if _, err := Build(tt.opts); err == nil {
			t.Errorf("%s: Build succeeded", tt.name)
		}
		if _, err := os.Stat(out); err == nil {
			t.Errorf("%s: partial output left behind", tt.name)
			os.Remove(out)
		}
	}
}

func TestParseModuleList(t *testing.T) {
	specs, err := ParseModuleList(strings.NewReader(testList))
	if err != nil {
		t.Fatal(err)
	}
	if len(specs) != 5 || !specs[2].Load || specs[1].Load || specs[2].Pattern != "fs/ext4/ext4.ko" {
		t.Errorf("specs %+v", specs)
	}
	for _, bad := range []string{"a.ko unload\n", "/abs/a.ko\n", "../x.ko\n", "a[.ko\n", "a.ko load extra\n"} {
		if _, err := ParseModuleList(strings.NewReader(bad)); err == nil {
			t.Errorf("ParseModuleList(%q) succeeded", bad)
		}
	}
}

func TestSelectModulesStaleIndex(t *testing.T) {
	_, modRoot := fakeHost(t)
	dir := filepath.Join(modRoot, kver)
	os.WriteFile(filepath.Join(dir, "kernel/drivers/block/stray.ko"), []byte("x"), 0o644)
	ix, err := kmod.LoadIndex(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := SelectModules(ix, dir, []ModuleSpec{{Pattern: "drivers/block/*.ko"}}); err == nil || !strings.Contains(err.Error(), "stray") {
		t.Errorf("module file unknown to modules.dep: err = %v", err)
	}
}

func TestNewestKernelAndCompression(t *testing.T) {
	dir := t.TempDir()
	for _, v := range []string{"6.1.0-9-amd64", "6.1.0-57-amd64", "6.1.0-10-amd64", "5.10.0-30-amd64"} {
		os.WriteFile(filepath.Join(dir, "vmlinuz-"+v), nil, 0o644)
	}
	if v, err := NewestKernel(dir); err != nil || v != "6.1.0-57-amd64" {
		t.Errorf("NewestKernel = %q, %v", v, err)
	}
	if _, err := NewestKernel(t.TempDir()); err == nil {
		t.Error("NewestKernel of empty dir succeeded")
	}
	cfg := filepath.Join(dir, "config")
	os.WriteFile(cfg, []byte("CONFIG_RD_GZIP=y\n# CONFIG_RD_ZSTD is not set\n"), 0o644)
	if c := CompressionFor(cfg); c != Gzip {
		t.Errorf("CompressionFor without zstd = %s", c)
	}
	os.WriteFile(cfg, []byte("CONFIG_RD_GZIP=y\nCONFIG_RD_ZSTD=y\n# CONFIG_RD_LZ4 is not set\n"), 0o644)
	if c := CompressionFor(cfg); c != Zstd {
		t.Errorf("CompressionFor with zstd = %s", c)
	}
	os.WriteFile(cfg, []byte("CONFIG_RD_GZIP=y\nCONFIG_RD_LZ4=y\nCONFIG_RD_ZSTD=y\n"), 0o644)
	if c := CompressionFor(cfg); c != Lz4 {
		t.Errorf("CompressionFor with lz4 and zstd = %s, want lz4 (faster to unpack)", c)
	}
	if _, err := ParseExtra("nocolon"); err == nil {
		t.Error("ParseExtra without colon succeeded")
	}
}
