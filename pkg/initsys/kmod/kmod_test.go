package kmod

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/ulikunitz/xz"
)

func TestMatch(t *testing.T) {
	tests := []struct {
		pattern, s string
		want       bool
	}{
		{"pci:v00001AF4d*sv*sd*bc*sc*i*", "pci:v00001AF4d00001001sv00001AF4sd00000002bc01sc00i00", true},
		{"pci:v00001AF4d*sv*sd*bc*sc*i*", "pci:v00008086d00001001sv00001AF4sd00000002bc01sc00i00", false},
		{"virtio:d00000002v*", "virtio:d00000002v00001AF4", true},
		{"virtio:d00000002v*", "virtio:d00000001v00001AF4", false},
		{"usb:v0BC2p[23]*d*", "usb:v0BC2p2000d0100", true},
		{"usb:v0BC2p[23]*d*", "usb:v0BC2p4000d0100", false},
		{"a[!12]b", "a3b", true},
		{"a[!12]b", "a1b", false},
		{"a[^12]b", "a1b", false},
		{"a[0-9A-F]b", "aCb", true},
		{"a[0-9A-F]b", "aGb", false},
		{"a?c", "abc", true},
		{"a?c", "ac", false},
		{"*", "", true},
		{"a*", "a/b/c", true},
		{"a*b*c", "axxbyyc", true},
		{"a*b*c", "axxbyy", false},
		{"a[b", "a[b", true},
		{`a\*b`, "a*b", true},
		{`a\*b`, "axb", false},
		{"a[]]b", "a]b", true},
		{"exact", "exact", true},
		{"exact", "exactly", false},
	}
	for _, tt := range tests {
		if got := Match(tt.pattern, tt.s); got != tt.want {
			t.Errorf("Match(%q, %q) = %v, want %v", tt.pattern, tt.s, got, tt.want)
		}
	}
}

func TestName(t *testing.T) {
	for in, want := range map[string]string{
		"kernel/arch/x86/crypto/crc32c-intel.ko": "crc32c_intel",
		"kernel/fs/ext4/ext4.ko.zst":             "ext4",
		"xhci-pci.ko.xz":                         "xhci_pci",
		"nls-utf8":                               "nls_utf8",
	} {
		if got := Name(in); got != want {
			t.Errorf("Name(%q) = %q, want %q", in, got, want)
		}
	}
}

func testIndex(t *testing.T) *Index {
	t.Helper()
	ix, err := LoadIndex("testdata")
	if err != nil {
		t.Fatal(err)
	}
	return ix
}

func TestMatchAlias(t *testing.T) {
	ix := testIndex(t)
	tests := []struct {
		modalias string
		want     []string
	}{
		{"pci:v00001AF4d00001042sv00001AF4sd00001100bc01sc00i00", []string{"virtio_pci"}},
		{"virtio:d00000002v00001AF4", []string{"virtio_blk"}},
		{"virtio:d00000001v00001AF4", []string{"virtio_net"}},
		{"pci:v00008086d00001E31sv00001AF4sd00001100bc0Csc03i30", []string{"xhci_pci"}},
		{"pci:v00001B36d0000000Dsv00001AF4sd00001100bc0Csc03i30", []string{"xhci_pci"}},
		{"cpu:type:x86,ven0000fam0006mod003F:feature:,0000,0001,0094,00C0", []string{"crc32c_intel"}},
		{"usb:v0BC2p2000d0100dc00dsc00dp00ic08isc06ip50in00", []string{"other_usb", "some_usb"}},
		{"usb:v0BC2p2000d0100dc00dsc00dp00ic08isc01ip50in00", []string{"some_usb"}},
		{"acpi:PNP0A03:", nil},
	}
	for _, tt := range tests {
		got := ix.MatchAlias(tt.modalias)
		if !slices.Equal(got, tt.want) && !(len(got) == 0 && len(tt.want) == 0) {
			t.Errorf("MatchAlias(%q) = %v, want %v", tt.modalias, got, tt.want)
		}
	}
}

func TestResolve(t *testing.T) {
	ix := testIndex(t)
	tests := []struct {
		in      string
		want    []string
		wantErr error
	}{
		{"ext4", []string{"ext4"}, nil},
		{"fs-ext4", []string{"ext4"}, nil},
		{"xhci-pci", []string{"xhci_pci"}, nil},
		{"crypto-crc32c", []string{"crc32c_generic", "crc32c_intel"}, nil},
		{"sd_mod", []string{"sd_mod"}, nil}, // built in
		{"nosuch", nil, ErrNotFound},
	}
	for _, tt := range tests {
		got, err := ix.Resolve(tt.in)
		if !errors.Is(err, tt.wantErr) || !slices.Equal(got, tt.want) {
			t.Errorf("Resolve(%q) = %v, %v; want %v, %v", tt.in, got, err, tt.want, tt.wantErr)
		}
	}
}

func names(ms []*Module) []string {
	var out []string
	for _, m := range ms {
		out = append(out, m.Name)
	}
	return out
}

// before asserts that in order every module appears after all its hard
// dependencies.
func assertDepsFirst(t *testing.T, ix *Index, order []*Module) {
	t.Helper()
	pos := map[string]int{}
	for i, m := range order {
		if _, dup := pos[m.Name]; dup {
			t.Errorf("%s appears twice in %v", m.Name, names(order))
		}
		pos[m.Name] = i
	}
	for _, m := range order {
		for _, d := range m.Deps {
			if dp, ok := pos[d]; !ok || dp > pos[m.Name] {
				t.Errorf("dependency %s of %s not loaded before it: %v", d, m.Name, names(order))
			}
		}
	}
}

func TestOrder(t *testing.T) {
	ix := testIndex(t)
	tests := []struct {
		names []string
		want  []string
		err   bool
	}{
		{[]string{"virtio_blk"}, []string{"virtio", "virtio_ring", "virtio_blk"}, false},
		{[]string{"virtio_pci", "virtio_blk"}, []string{"virtio_pci_legacy_dev", "virtio_pci_modern_dev", "virtio", "virtio_ring", "virtio_pci", "virtio_blk"}, false},
		// softdep pre: crypto-crc32c resolves to two modules, both before ext4.
		{[]string{"ext4"}, []string{"crc16", "mbcache", "jbd2", "crc32c_generic", "crc32c_intel", "ext4"}, false},
		// post softdep failover comes after virtio_net; it is already
		// there as a hard dependency, so only once.
		{[]string{"virtio_net"}, []string{"failover", "net_failover", "virtio", "virtio_ring", "virtio_net"}, false},
		{[]string{"sd_mod"}, nil, false},
		{[]string{"broken"}, nil, true},
	}
	for _, tt := range tests {
		got, err := ix.Order(tt.names...)
		if (err != nil) != tt.err {
			t.Errorf("Order(%v) err = %v, want error %v", tt.names, err, tt.err)
			continue
		}
		if tt.err {
			continue
		}
		if !slices.Equal(names(got), tt.want) {
			t.Errorf("Order(%v) = %v, want %v", tt.names, names(got), tt.want)
		}
		assertDepsFirst(t, ix, got)
	}
}

func TestParseErrors(t *testing.T) {
	if _, err := ParseDep(strings.NewReader("no colon here\n")); err == nil {
		t.Error("ParseDep accepted a line without colon")
	}
	if _, err := ParseAlias(strings.NewReader("alias onlyone\n")); err == nil {
		t.Error("ParseAlias accepted a short line")
	}
	if _, err := ParseSoftdep(strings.NewReader("options foo bar=1\n")); err == nil {
		t.Error("ParseSoftdep accepted a non-softdep line")
	}
	if _, err := LoadIndex(t.TempDir()); err == nil {
		t.Error("LoadIndex without modules.dep succeeded")
	}
}

func TestLoaderLoad(t *testing.T) {
	ix := testIndex(t)
	root := t.TempDir()
	proc := filepath.Join(root, "modules")
	// virtio is already loaded; failover is "built in with parameters"
	// (present in /sys/module only).
	if err := os.WriteFile(proc, []byte("virtio 16384 2 virtio_pci,virtio_blk, Live 0x0000000000000000\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	sys := filepath.Join(root, "sys", "module")
	if err := os.MkdirAll(filepath.Join(sys, "failover"), 0o755); err != nil {
		t.Fatal(err)
	}
	var calls []string
	l := &Loader{
		Dir:         "/lib/modules/test",
		Index:       ix,
		ProcModules: proc,
		SysModule:   sys,
		Log:         slog.New(slog.NewTextHandler(t.Output(), nil)),
		Init: func(path, params string) error {
			calls = append(calls, path)
			switch Name(path) {
			case "virtio_ring":
				return fmt.Errorf("finit_module: %w", os.ErrExist)
			case "net_failover":
				return errors.New("finit_module: unknown symbol")
			case "virtio_pci_modern_dev":
				return fmt.Errorf("finit_module: %w", syscall.ENODEV)
			}
			return nil
		},
	}
	loaded, err := l.Load("virtio_blk", "virtio-net", "nosuch", "virtio_pci_modern_dev")
	wantCalls := []string{
		"/lib/modules/test/kernel/drivers/virtio/virtio_ring.ko",
		"/lib/modules/test/kernel/drivers/block/virtio_blk.ko",
		"/lib/modules/test/kernel/drivers/net/net_failover.ko",
		"/lib/modules/test/kernel/drivers/net/virtio_net.ko",
		"/lib/modules/test/kernel/drivers/virtio/virtio_pci_modern_dev.ko",
	}
	if !slices.Equal(calls, wantCalls) {
		t.Errorf("Init calls = %v, want %v", calls, wantCalls)
	}
	if want := []string{"virtio_blk", "virtio_net"}; !slices.Equal(loaded, want) {
		t.Errorf("loaded = %v, want %v", loaded, want)
	}
	if !errors.Is(err, ErrNotFound) || !strings.Contains(fmt.Sprint(err), "net_failover") || strings.Contains(fmt.Sprint(err), "virtio_pci_modern_dev") {
		t.Errorf("err = %v, want ErrNotFound for nosuch and the net_failover failure", err)
	}
	// A second call loads nothing again.
	calls = nil
	if loaded, _ := l.Load("virtio_blk", "virtio_net"); len(loaded) != 0 || len(calls) != 0 {
		t.Errorf("second Load loaded %v with calls %v, want nothing", loaded, calls)
	}
}

// LoadDeps loads what a module needs before it, not the module itself;
// Load of it afterwards loads only the module.
func TestLoaderLoadDeps(t *testing.T) {
	var calls []string
	l := &Loader{
		Dir:         "/m",
		Index:       testIndex(t),
		ProcModules: filepath.Join(t.TempDir(), "modules"),
		Log:         slog.New(slog.NewTextHandler(t.Output(), nil)),
		Init: func(path, params string) error {
			calls = append(calls, Name(path))
			return nil
		},
	}
	loaded, err := l.LoadDeps("virtio-net")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []string{"failover", "net_failover", "virtio", "virtio_ring"} {
		if !slices.Contains(loaded, m) {
			t.Errorf("LoadDeps(virtio-net) loaded %v, want %s among them", loaded, m)
		}
	}
	if slices.Contains(calls, "virtio_net") {
		t.Errorf("LoadDeps(virtio-net) loaded virtio_net itself: %v", calls)
	}
	calls = nil
	if loaded, err := l.Load("virtio_net"); err != nil || !slices.Equal(loaded, []string{"virtio_net"}) || !slices.Equal(calls, []string{"virtio_net"}) {
		t.Errorf("Load after LoadDeps = %v, %v (calls %v); want only virtio_net", loaded, err, calls)
	}
}

func TestDecompress(t *testing.T) {
	payload := bytes.Repeat([]byte("\x7fELF module image "), 100)
	var gz, zs, x bytes.Buffer
	gw := gzip.NewWriter(&gz)
	gw.Write(payload)
	gw.Close()
	zw, _ := zstd.NewWriter(&zs)
	zw.Write(payload)
	zw.Close()
	xw, _ := xz.NewWriter(&x)
	xw.Write(payload)
	xw.Close()
	for name, data := range map[string][]byte{"m.ko.gz": gz.Bytes(), "m.ko.zst": zs.Bytes(), "m.ko.xz": x.Bytes(), "m.ko": payload} {
		got, err := Decompress(name, data)
		if err != nil || !bytes.Equal(got, payload) {
			t.Errorf("Decompress(%s) = %d bytes, %v; want the payload", name, len(got), err)
		}
	}
	if _, err := Decompress("m.ko.xz", []byte("not xz")); err == nil {
		t.Error("Decompress of garbage succeeded")
	}
}

func TestHostIndex(t *testing.T) {
	// The real metadata of an installed kernel must parse; skipped only
	// where no kernel modules are installed.
	dirs, _ := filepath.Glob("/lib/modules/*/modules.dep")
	if len(dirs) == 0 {
		t.Skip("no /lib/modules/*/modules.dep on this host")
	}
	ix, err := LoadIndex(filepath.Dir(dirs[0]))
	if err != nil {
		t.Fatal(err)
	}
	if len(ix.Modules) < 100 || len(ix.Aliases) < 100 {
		t.Fatalf("host index has %d modules, %d aliases", len(ix.Modules), len(ix.Aliases))
	}
	order, err := ix.Order("ext4")
	if err != nil {
		t.Fatal(err)
	}
	assertDepsFirst(t, ix, order)
}

// A module is loaded with its Options (modprobe.d's "options"): bonding
// gets max_bonds=0 by default, so it makes no unconfigured bond0.
func TestLoaderOptions(t *testing.T) {
	if DefaultOptions["bonding"] != "max_bonds=0" {
		t.Errorf("DefaultOptions = %v, want bonding max_bonds=0", DefaultOptions)
	}
	params := map[string]string{}
	l := &Loader{
		Dir: "/lib/modules/test", Index: testIndex(t), ProcModules: filepath.Join(t.TempDir(), "none"),
		Log:     slog.New(slog.NewTextHandler(t.Output(), nil)),
		Options: map[string]string{"virtio_blk": "queue_depth=64"},
		Init:    func(path, p string) error { params[Name(path)] = p; return nil },
	}
	if _, err := l.Load("virtio_blk"); err != nil {
		t.Fatal(err)
	}
	if params["virtio_blk"] != "queue_depth=64" || params["virtio"] != "" {
		t.Errorf("loaded with %v, want virtio_blk's options only on virtio_blk", params)
	}
}

// Load from several goroutines at once (coldplug loads the drivers of
// independent devices in parallel): every module is loaded once, each
// after all of its dependencies finished loading, and a goroutine that
// needs a module another one is loading waits for it instead of loading
// it again or going on without it.
func TestLoaderConcurrent(t *testing.T) {
	ix := testIndex(t)
	root := t.TempDir()
	var mu sync.Mutex
	inits := map[string]int{}
	finished := map[string]bool{}
	l := &Loader{
		Dir:         "/lib/modules/test",
		Index:       ix,
		ProcModules: filepath.Join(root, "no-proc-modules"),
		Log:         slog.New(slog.NewTextHandler(t.Output(), nil)),
		Init: func(path, _ string) error {
			name := Name(path)
			mu.Lock()
			inits[name]++
			for _, d := range ix.Modules[name].Deps {
				if !finished[d] {
					t.Errorf("%s loaded before its dependency %s finished", name, d)
				}
			}
			mu.Unlock()
			if name == "virtio_ring" || name == "virtio" {
				time.Sleep(20 * time.Millisecond) // a slow init others must wait for
			}
			mu.Lock()
			finished[name] = true
			mu.Unlock()
			return nil
		},
	}
	roots := []string{"virtio_blk", "virtio_net", "virtio_pci", "ext4", "virtio_blk", "xhci_pci"}
	var wg sync.WaitGroup
	var lmu sync.Mutex
	var loaded []string
	for _, r := range roots {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got, err := l.Load(r)
			if err != nil {
				t.Errorf("Load(%s): %v", r, err)
			}
			lmu.Lock()
			loaded = append(loaded, got...)
			lmu.Unlock()
		}()
	}
	wg.Wait()
	for name, n := range inits {
		if n != 1 {
			t.Errorf("%s loaded %d times, want once", name, n)
		}
	}
	want := []string{"crc16", "crc32c_generic", "crc32c_intel", "ext4", "failover", "jbd2", "mbcache", "net_failover", "virtio", "virtio_blk", "virtio_net",
		"virtio_pci", "virtio_pci_legacy_dev", "virtio_pci_modern_dev", "virtio_ring", "xhci_hcd", "xhci_pci"}
	slices.Sort(loaded)
	if !slices.Equal(loaded, want) {
		t.Errorf("loaded (sorted) = %v, want %v", loaded, want)
	}
}
