// Package initramfs assembles the booty initramfs: a newc cpio archive,
// compressed with zstd, gzip or lz4 (or not), holding /init (the booty binary), the
// kernel modules of a module list closed over their dependencies with the
// depmod metadata rewritten for that subset, the modules-load list, the CA
// bundle and optional /deploy contents. Archives are written with u-root's
// mkuimage cpio library.
package initramfs

import (
	"bufio"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
	"github.com/u-root/mkuimage/cpio"
	uinitramfs "github.com/u-root/mkuimage/uimage/initramfs"

	"github.com/booty-dev/booty/pkg/initsys/kmod"
)

// Compression of the archive.
type Compression string

const (
	// Auto picks what CompressionFor says for the kernel's config.
	Auto Compression = ""
	Zstd Compression = "zstd"
	Gzip Compression = "gzip"
	// Lz4 is the legacy LZ4 frame format the kernel unpacks
	// (CONFIG_RD_LZ4): larger than zstd, several times faster to unpack.
	Lz4  Compression = "lz4"
	None Compression = "none"
)

// DefaultCACerts is the host CA bundle copied to the same path.
const DefaultCACerts = "/etc/ssl/certs/ca-certificates.crt"

// ModulesLoadPath is the archive path of the modules-load list read by the
// agent (initsys.ModulesLoadPath).
const ModulesLoadPath = "etc/booty/modules-load"

// Extra is a host file or directory copied to a path in the archive.
type Extra struct{ Src, Dst string }

// ParseExtra parses "SRC:DST".
func ParseExtra(s string) (Extra, error) {
	src, dst, ok := strings.Cut(s, ":")
	if !ok || src == "" || dst == "" {
		return Extra{}, fmt.Errorf("parse extra %q: want SRC:DST", s)
	}
	return Extra{Src: src, Dst: dst}, nil
}

// Options say what goes into the archive and where it goes.
type Options struct {
	// KernelVersion is the module directory name; default the newest
	// vmlinuz-* in BootDir.
	KernelVersion string
	// BootDir holds vmlinuz-KVER and config-KVER; default /boot.
	BootDir string
	// ModulesRoot holds KVER/; default /lib/modules.
	ModulesRoot string
	// Init is the binary that becomes /init (booty, static).
	Init string
	// Modules to include; nil means no kernel modules at all.
	Modules []ModuleSpec
	// DeployDir, when set, is copied to /deploy.
	DeployDir string
	Extra     []Extra
	// CACerts is the CA bundle; empty means DefaultCACerts if it exists,
	// "-" means none.
	CACerts     string
	Compression Compression
	// Out is the archive path; KernelOut, when set, receives a copy of
	// BootDir/vmlinuz-KVER.
	Out       string
	KernelOut string
	Log       *slog.Logger
}

// Result summarizes a build.
type Result struct {
	KernelVersion string
	Compression   Compression
	Files         int
	Modules       []string
	Load          []string
	Unmatched     []string
	Uncompressed  int64
	Size          int64
}

// Build writes the archive described by opts to opts.Out (and the kernel to
// opts.KernelOut). Steps: pick the kernel, select modules, stage files and
// generated records, write the cpio through the compressor, copy the
// kernel. On error the partial output file is removed.
func Build(opts Options) (*Result, error) {
	log := opts.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if opts.BootDir == "" {
		opts.BootDir = "/boot"
	}
	if opts.ModulesRoot == "" {
		opts.ModulesRoot = "/lib/modules"
	}
	if opts.Init == "" || opts.Out == "" {
		return nil, errors.New("build initramfs: init binary and output path are required")
	}
	if opts.KernelVersion == "" {
		v, err := NewestKernel(opts.BootDir)
		if err != nil {
			return nil, err
		}
		opts.KernelVersion = v
	}
	if opts.Compression == Auto {
		opts.Compression = CompressionFor(filepath.Join(opts.BootDir, "config-"+opts.KernelVersion))
	}
	res := &Result{KernelVersion: opts.KernelVersion, Compression: opts.Compression}

	files := uinitramfs.NewFiles()
	for _, d := range []struct {
		name string
		mode uint64
	}{{"dev", 0o755}, {"proc", 0o555}, {"sys", 0o555}, {"run", 0o755}, {"tmp", 0o1777}, {"etc", 0o755}, {"etc/booty", 0o755}, {"lib", 0o755}, {"lib/modules", 0o755}} {
		if err := files.AddRecord(cpio.Directory(d.name, d.mode)); err != nil {
			return nil, fmt.Errorf("build initramfs: %w", err)
		}
	}
	// The kernel opens /dev/console for init's stdio before anything is
	// mounted.
	if err := files.AddRecord(cpio.CharDev("dev/console", 0o600, 5, 1)); err != nil {
		return nil, fmt.Errorf("build initramfs: %w", err)
	}
	if err := files.AddFile(opts.Init, "init"); err != nil {
		return nil, fmt.Errorf("build initramfs: add init: %w", err)
	}
	// The kernel runs /sbin/modprobe (booty, by its name) to load the
	// modules it needs on demand: filesystems at mount, code pages, bond
	// and VLAN links.
	for _, r := range []cpio.Record{cpio.Directory("sbin", 0o755), cpio.Symlink("sbin/modprobe", "/init")} {
		if err := files.AddRecord(r); err != nil {
			return nil, fmt.Errorf("build initramfs: %w", err)
		}
	}

	if opts.Modules != nil {
		if err := addModules(files, opts, res, log); err != nil {
			return nil, err
		}
	}

	ca := opts.CACerts
	switch ca {
	case "-":
	case "":
		if _, err := os.Stat(DefaultCACerts); err == nil {
			if err := files.AddFile(DefaultCACerts, strings.TrimPrefix(DefaultCACerts, "/")); err != nil {
				return nil, fmt.Errorf("build initramfs: add CA bundle: %w", err)
			}
		} else {
			log.Warn("no CA bundle on this host; HTTPS will fail in the agent", "path", DefaultCACerts)
		}
	default:
		if err := files.AddFile(ca, strings.TrimPrefix(DefaultCACerts, "/")); err != nil {
			return nil, fmt.Errorf("build initramfs: add CA bundle: %w", err)
		}
	}
	if opts.DeployDir != "" {
		if err := files.AddFile(opts.DeployDir, "deploy"); err != nil {
			return nil, fmt.Errorf("build initramfs: add deploy dir: %w", err)
		}
	}
	for _, e := range opts.Extra {
		if err := files.AddFile(e.Src, strings.TrimPrefix(filepath.Clean(e.Dst), "/")); err != nil {
			return nil, fmt.Errorf("build initramfs: add extra %s: %w", e.Src, err)
		}
	}

	if err := writeArchive(files, opts.Out, opts.Compression, res); err != nil {
		os.Remove(opts.Out)
		return nil, err
	}
	if opts.KernelOut != "" {
		if err := copyFile(filepath.Join(opts.BootDir, "vmlinuz-"+opts.KernelVersion), opts.KernelOut); err != nil {
			return nil, fmt.Errorf("build initramfs: copy kernel: %w", err)
		}
	}
	log.Info("initramfs built", "out", opts.Out, "kernel", res.KernelVersion, "compression", res.Compression,
		"files", res.Files, "modules", len(res.Modules), "load", res.Load,
		"uncompressed_bytes", res.Uncompressed, "bytes", res.Size)
	for _, u := range res.Unmatched {
		log.Warn("module list entry matched nothing", "pattern", u, "kernel", res.KernelVersion)
	}
	return res, nil
}

// addModules selects the modules and stages them plus the rewritten
// metadata under lib/modules/KVER.
func addModules(files *uinitramfs.Files, opts Options, res *Result, log *slog.Logger) error {
	dir := filepath.Join(opts.ModulesRoot, opts.KernelVersion)
	ix, err := kmod.LoadIndex(dir)
	if err != nil {
		return fmt.Errorf("build initramfs: %w", err)
	}
	sel, err := SelectModules(ix, dir, opts.Modules)
	if err != nil {
		return fmt.Errorf("build initramfs: %w", err)
	}
	res.Load, res.Unmatched = sel.Load, sel.Unmatched
	if len(sel.Builtin) > 0 {
		log.Info("modules built into the kernel", "modules", sel.Builtin)
	}
	dst := filepath.Join("lib/modules", opts.KernelVersion)
	in := map[string]bool{}
	for _, m := range sel.Modules {
		in[m.Name] = true
		res.Modules = append(res.Modules, m.Name)
		if err := files.AddFile(filepath.Join(dir, m.Path), filepath.Join(dst, m.Path)); err != nil {
			return fmt.Errorf("build initramfs: add module %s: %w", m.Name, err)
		}
	}
	// Metadata for exactly the included modules; the paths stay relative
	// to the modules directory, so they stay valid.
	keep := map[string]func(string) bool{
		kmod.DepFile: func(l string) bool { p, _, _ := strings.Cut(l, ":"); return in[kmod.Name(p)] },
		kmod.AliasFile: func(l string) bool {
			f := strings.Fields(l)
			return len(f) == 3 && in[kmod.Name(f[2])]
		},
		kmod.SoftdepFile: func(l string) bool {
			f := strings.Fields(l)
			return len(f) >= 2 && in[kmod.Name(f[1])]
		},
		kmod.OrderFile:   func(l string) bool { return in[kmod.Name(l)] },
		kmod.BuiltinFile: func(string) bool { return true },
	}
	names := make([]string, 0, len(keep))
	for n := range keep {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		content, err := filterLines(filepath.Join(dir, n), keep[n])
		if errors.Is(err, os.ErrNotExist) && n != kmod.DepFile {
			continue
		}
		if err != nil {
			return fmt.Errorf("build initramfs: rewrite %s: %w", n, err)
		}
		if err := files.AddRecord(cpio.StaticFile(filepath.Join(dst, n), content, 0o644)); err != nil {
			return fmt.Errorf("build initramfs: %w", err)
		}
	}
	var load strings.Builder
	load.WriteString("# Modules the agent loads at boot whether or not a device asks for them.\n# Written by the booty initramfs builder.\n")
	for _, n := range sel.Load {
		load.WriteString(n + "\n")
	}
	if err := files.AddRecord(cpio.StaticFile(ModulesLoadPath, load.String(), 0o644)); err != nil {
		return fmt.Errorf("build initramfs: %w", err)
	}
	return nil
}

// countWriter counts bytes passed through it.
type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// archiveWriter is a uinitramfs.Writer: newc records into a compressor.
type archiveWriter struct {
	cpio.RecordWriter
	records int
}

func (a *archiveWriter) WriteRecord(r cpio.Record) error {
	a.records++
	return a.RecordWriter.WriteRecord(r)
}

func (a *archiveWriter) Finish() error { return cpio.WriteTrailer(a.RecordWriter) }

func writeArchive(files *uinitramfs.Files, out string, comp Compression, res *Result) error {
	f, err := os.Create(out)
	if err != nil {
		return fmt.Errorf("create initramfs: %w", err)
	}
	defer f.Close()
	compressed := &countWriter{w: bufio.NewWriterSize(f, 1<<20)}
	var zw io.WriteCloser
	switch comp {
	case Zstd:
		zw, err = zstd.NewWriter(compressed, zstd.WithEncoderLevel(zstd.SpeedBetterCompression))
	case Gzip:
		zw, err = gzip.NewWriterLevel(compressed, gzip.BestCompression)
	case Lz4:
		w := lz4.NewWriter(compressed)
		err = w.Apply(lz4.LegacyOption(true), lz4.CompressionLevelOption(lz4.Level9))
		zw = w
	case None:
		zw = nopCloser{compressed}
	default:
		return fmt.Errorf("create initramfs: unknown compression %q", comp)
	}
	if err != nil {
		return fmt.Errorf("create initramfs compressor: %w", err)
	}
	raw := &countWriter{w: zw}
	aw := &archiveWriter{RecordWriter: cpio.Newc.Writer(raw)}
	if err := files.WriteTo(aw); err != nil {
		return fmt.Errorf("write initramfs %s: %w", out, err)
	}
	if err := aw.Finish(); err != nil {
		return fmt.Errorf("write initramfs trailer: %w", err)
	}
	if err := zw.Close(); err != nil {
		return fmt.Errorf("finish initramfs compression: %w", err)
	}
	if err := compressed.w.(*bufio.Writer).Flush(); err != nil {
		return fmt.Errorf("write initramfs %s: %w", out, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("close initramfs %s: %w", out, err)
	}
	res.Files, res.Uncompressed, res.Size = aw.records, raw.n, compressed.n
	return nil
}

type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return fmt.Errorf("copy %s to %s: %w", src, dst, err)
	}
	return out.Close()
}

// CompressionFor reads a kernel config and returns Lz4 when it has
// CONFIG_RD_LZ4=y, else Zstd when it has CONFIG_RD_ZSTD=y, else Gzip
// (which every distribution kernel unpacks). Lz4 comes first for boot
// time: the kernel unpacks the initramfs before it starts /init, and under
// emulation (make bench-boot, TCG) the 37 MiB archive took a median 0.89 s
// to unpack from zstd, 0.48 s from lz4 and 0.31 s uncompressed, for 10.5,
// 13.7 and 35.4 MiB to fetch. An unreadable config gives Gzip.
func CompressionFor(configPath string) Compression {
	b, err := os.ReadFile(configPath)
	if err != nil {
		return Gzip
	}
	have := map[string]bool{}
	for _, l := range strings.Split(string(b), "\n") {
		have[strings.TrimSpace(l)] = true
	}
	switch {
	case have["CONFIG_RD_LZ4=y"]:
		return Lz4
	case have["CONFIG_RD_ZSTD=y"]:
		return Zstd
	}
	return Gzip
}

// NewestKernel returns the version of the newest vmlinuz-VERSION in
// bootDir, comparing the numeric parts numerically. It fails when there
// is none.
func NewestKernel(bootDir string) (string, error) {
	m, err := filepath.Glob(filepath.Join(bootDir, "vmlinuz-*"))
	if err != nil || len(m) == 0 {
		return "", fmt.Errorf("find kernel: no vmlinuz-* in %s", bootDir)
	}
	var vs []string
	for _, p := range m {
		vs = append(vs, strings.TrimPrefix(filepath.Base(p), "vmlinuz-"))
	}
	sort.Slice(vs, func(i, j int) bool { return versionLess(vs[i], vs[j]) })
	return vs[len(vs)-1], nil
}

// versionLess compares versions like 6.1.0-57-amd64 part by part, numbers
// numerically, other text lexically.
func versionLess(a, b string) bool {
	pa, pb := versionParts(a), versionParts(b)
	for i := 0; i < len(pa) && i < len(pb); i++ {
		if pa[i] == pb[i] {
			continue
		}
		na, ea := strconv.Atoi(pa[i])
		nb, eb := strconv.Atoi(pb[i])
		if ea == nil && eb == nil {
			return na < nb
		}
		return pa[i] < pb[i]
	}
	return len(pa) < len(pb)
}

func versionParts(s string) []string {
	return strings.FieldsFunc(s, func(r rune) bool { return r == '.' || r == '-' || r == '_' || r == '+' || r == '~' })
}
