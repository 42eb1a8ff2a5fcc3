// Package osimage gives end-to-end tests the real bootable Debian image that
// hack/mkdebianimage.sh builds: Ensure builds it (or finds it cached) and
// returns its directory, ReadLayout tells its partitions, UUIDs and kernel,
// and ParseProof and ProofFiles read the "BOOTY-PROOF" lines that the
// image's booty-proof.service prints on the serial console at every boot
// before it powers the machine off.
package osimage

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Files in the image directory.
const (
	Image           = "debian.img"            // the raw GPT disk image
	Compressed      = "debian.img.zst"        // Image compressed with zstd
	ImageSum        = "debian.img.sha256"     // sha256sum line of Image
	CompressedSum   = "debian.img.zst.sha256" // sha256sum line of Compressed
	Checksums       = "SHA256SUMS"            // both lines, for harness.Lab.Checksum
	LayoutFile      = "layout.env"            // KEY=VALUE facts, see Layout
	defaultSubdir   = "debian"
	defaultCacheDir = "/var/cache/booty"
)

// Environment variables.
const (
	// DirEnv names a directory that already holds the image; Ensure uses it
	// as it is, without running the script (the Makefile sets it).
	DirEnv = "BOOTY_DEBIAN"
	// CacheEnv is the cache root of hack/mkdebianimage.sh; the image lives
	// in its "debian" subdirectory.
	CacheEnv = "BOOTY_CACHE"
)

// BuildTimeout bounds one run of the build script: a cold build downloads
// about 120 MiB of packages and takes a few minutes on two cores.
const BuildTimeout = 40 * time.Minute

// ErrIncomplete is wrapped by Check's error when a file is missing.
var ErrIncomplete = errors.New("image directory incomplete")

// DefaultDir returns where hack/mkdebianimage.sh puts the image without an
// OUTDIR argument: $BOOTY_CACHE/debian, or /var/cache/booty/debian.
func DefaultDir() string {
	c := os.Getenv(CacheEnv)
	if c == "" {
		c = defaultCacheDir
	}
	return filepath.Join(c, defaultSubdir)
}

// Script returns the path of hack/mkdebianimage.sh in this checkout.
func Script() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "hack", "mkdebianimage.sh")
}

// Check returns nil when dir holds every output of the build script, or an
// error wrapping ErrIncomplete that names the first missing or empty file.
func Check(dir string) error {
	for _, f := range []string{Image, Compressed, ImageSum, CompressedSum, Checksums, LayoutFile} {
		st, err := os.Stat(filepath.Join(dir, f))
		if err != nil || st.Size() == 0 {
			return fmt.Errorf("%w: %s: no %s", ErrIncomplete, dir, f)
		}
	}
	return nil
}

// Build runs script (bash) with outDir as its argument, its output going
// to w, and then checks outDir with Check. The script does nothing when
// outDir is up to date. It fails when the script fails, runs longer than
// ctx allows (the script and its children get SIGTERM), or leaves outDir
// incomplete.
func Build(ctx context.Context, script, outDir string, w io.Writer) error {
	cmd := exec.CommandContext(ctx, "bash", script, outDir)
	cmd.Stdout = w
	cmd.Stderr = w
	// The script runs in a process group of its own; when ctx ends, the
	// whole group gets SIGTERM, so debootstrap stops too and the script's
	// trap undoes its mounts.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM) }
	cmd.WaitDelay = 30 * time.Second
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("build debian image with %s into %s: %w", script, outDir, err)
	}
	return Check(outDir)
}

var (
	ensureMu  sync.Mutex
	ensureDir string
)

// Ensure returns the directory holding the Debian image, building it first
// when needed: $BOOTY_DEBIAN when set (checked, never built), else
// DefaultDir() after running hack/mkdebianimage.sh, which returns at once
// when its cache is current. The script's output goes to the test log.
// The first success is remembered for the rest of the process. It fails
// the test (Fatal, never Skip) when the image cannot be had.
func Ensure(t testing.TB) string {
	t.Helper()
	ensureMu.Lock()
	defer ensureMu.Unlock()
	if ensureDir != "" {
		return ensureDir
	}
	if d := os.Getenv(DirEnv); d != "" {
		if err := Check(d); err != nil {
			t.Fatalf("%s=%s: %v", DirEnv, d, err)
		}
		ensureDir = d
		return d
	}
	dir := DefaultDir()
	ctx, cancel := context.WithTimeout(context.Background(), BuildTimeout)
	defer cancel()
	start := time.Now()
	if err := Build(ctx, Script(), dir, t.Output()); err != nil {
		t.Fatalf("debian image: %v", err)
	}
	t.Logf("debian image in %s (%s)", dir, time.Since(start).Round(time.Second))
	ensureDir = dir
	return dir
}

// Layout is what layout.env says about the image.
type Layout struct {
	Suite         string
	KernelVersion string
	Hostname      string // the hostname the image boots with unless provisioned
	DiskGUID      string
	DiskBytes     int64

	ESPPartition int // partition number of the ESP (1)
	ESPPartGUID  string
	ESPFSUUID    string // FAT volume id as fstab and blkid write it, XXXX-XXXX
	ESPStart     int64  // bytes
	ESPSize      int64

	RootPartition int // partition number of the root filesystem (2)
	RootPartGUID  string
	RootFSUUID    string
	RootFSLabel   string
	RootStart     int64 // bytes
	RootSize      int64

	EFILoader          string // the distribution's loader on the ESP, /EFI/debian/grubx64.efi
	EFIRemovableLoader string // /EFI/BOOT/BOOTX64.EFI
	GrubCfg            string // on the root filesystem, /boot/grub/grub.cfg

	// Raw holds every KEY=VALUE of the file.
	Raw map[string]string
}

// ReadLayout reads dir/layout.env. It fails when the file cannot be read,
// a line is not KEY=VALUE, or a size or partition number is not a number.
func ReadLayout(dir string) (Layout, error) {
	p := filepath.Join(dir, LayoutFile)
	b, err := os.ReadFile(p)
	if err != nil {
		return Layout{}, fmt.Errorf("read image layout: %w", err)
	}
	kv, err := parseEnv(string(b))
	if err != nil {
		return Layout{}, fmt.Errorf("read image layout %s: %w", p, err)
	}
	l := Layout{
		Suite: kv["SUITE"], KernelVersion: kv["KERNEL_VERSION"], Hostname: kv["HOSTNAME"],
		DiskGUID:    kv["DISK_GUID"],
		ESPPartGUID: kv["ESP_PART_GUID"], ESPFSUUID: kv["ESP_FS_UUID"],
		RootPartGUID: kv["ROOT_PART_GUID"], RootFSUUID: kv["ROOT_FS_UUID"], RootFSLabel: kv["ROOT_FS_LABEL"],
		EFILoader: kv["EFI_LOADER"], EFIRemovableLoader: kv["EFI_REMOVABLE_LOADER"], GrubCfg: kv["GRUB_CFG"],
		Raw: kv,
	}
	ints := []struct {
		key string
		dst *int64
	}{
		{"DISK_BYTES", &l.DiskBytes},
		{"ESP_START_BYTES", &l.ESPStart}, {"ESP_SIZE_BYTES", &l.ESPSize},
		{"ROOT_START_BYTES", &l.RootStart}, {"ROOT_SIZE_BYTES", &l.RootSize},
	}
	for _, f := range ints {
		n, err := strconv.ParseInt(kv[f.key], 10, 64)
		if err != nil {
			return Layout{}, fmt.Errorf("read image layout %s: %s: %w", p, f.key, err)
		}
		*f.dst = n
	}
	for key, dst := range map[string]*int{"ESP_PARTITION": &l.ESPPartition, "ROOT_PARTITION": &l.RootPartition} {
		n, err := strconv.Atoi(kv[key])
		if err != nil {
			return Layout{}, fmt.Errorf("read image layout %s: %s: %w", p, key, err)
		}
		*dst = n
	}
	return l, nil
}

// parseEnv parses KEY=VALUE lines, skipping blank lines and # comments.
func parseEnv(s string) (map[string]string, error) {
	kv := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(s))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("line %d: %q is not KEY=VALUE", n, line)
		}
		kv[k] = v
	}
	return kv, sc.Err()
}
