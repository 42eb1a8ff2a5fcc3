package bootloader

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"golang.org/x/sys/unix"
)

// fakeVars is a temp dir standing in for efivarfs.
func fakeVars(t *testing.T) EFIVars {
	t.Helper()
	return EFIVars{Dir: t.TempDir(), Log: testLogger(t)}
}

func putVar(t *testing.T, v EFIVars, name string, attrs uint32, data []byte) {
	t.Helper()
	b := binary.LittleEndian.AppendUint32(nil, attrs)
	if err := os.WriteFile(v.path(name), append(b, data...), 0o644); err != nil {
		t.Fatal(err)
	}
}

func getVar(t *testing.T, v EFIVars, name string) (uint32, []byte) {
	t.Helper()
	b, err := os.ReadFile(v.path(name))
	if err != nil {
		t.Fatal(err)
	}
	return binary.LittleEndian.Uint32(b), b[4:]
}

func orderBytes(nums ...uint16) []byte {
	var b []byte
	for _, n := range nums {
		b = binary.LittleEndian.AppendUint16(b, n)
	}
	return b
}

func mustOrder(t *testing.T, v EFIVars) []uint16 {
	t.Helper()
	o, err := v.BootOrder()
	if err != nil {
		t.Fatal(err)
	}
	return o
}

func TestBootEntriesSkipsBadAndForeign(t *testing.T) {
	v := fakeVars(t)
	putVar(t, v, "Boot0000", 7, unhex(t, uiAppOptionHex))
	putVar(t, v, "Boot0002", 7, unhex(t, debianOptionHex))
	putVar(t, v, "Boot0001", 7, []byte{1, 2, 3})           // undecodable
	putVar(t, v, "Bootabcd", 7, unhex(t, debianOptionHex)) // lower-case: not a boot option
	os.WriteFile(filepath.Join(v.Dir, "Boot0005-12345678-93ca-11d2-aa0d-00e098032b8c"), []byte{7, 0, 0, 0}, 0o644)
	putVar(t, v, "BootOrder", 7, orderBytes(2, 0))

	got, err := v.BootEntries()
	if err != nil {
		t.Fatal(err)
	}
	var nums []uint16
	for _, o := range got {
		nums = append(nums, o.Num)
	}
	if !slices.Equal(nums, []uint16{0, 2}) || got[0].Description != "UiApp" || got[1].Description != "debian" {
		t.Errorf("entries %v %+v", nums, got)
	}
	if o := mustOrder(t, v); !slices.Equal(o, []uint16{2, 0}) {
		t.Errorf("BootOrder = %v", o)
	}
}

func TestCreateBootEntry(t *testing.T) {
	tests := []struct {
		name      string
		existing  map[uint16]string // number -> hex option ("" = garbage)
		order     []uint16          // nil = no BootOrder variable
		first     bool
		wantNum   uint16
		wantOrder []uint16
	}{
		{name: "empty store", wantNum: 0, first: true, wantOrder: []uint16{0}},
		{name: "lowest free, first", existing: map[uint16]string{0: uiAppOptionHex, 1: "", 3: uiAppOptionHex},
			order: []uint16{3, 0, 1}, first: true, wantNum: 2, wantOrder: []uint16{2, 3, 0, 1}},
		{name: "lowest free, appended", existing: map[uint16]string{0: uiAppOptionHex},
			order: []uint16{0}, wantNum: 1, wantOrder: []uint16{0, 1}},
		{name: "reuse and move first", existing: map[uint16]string{0: uiAppOptionHex, 4: debianOptionHex},
			order: []uint16{0, 4}, first: true, wantNum: 4, wantOrder: []uint16{4, 0}},
		{name: "reuse, not first, already ordered", existing: map[uint16]string{0: uiAppOptionHex, 4: debianOptionHex},
			order: []uint16{0, 4}, wantNum: 4, wantOrder: []uint16{0, 4}},
		{name: "reuse, missing from order", existing: map[uint16]string{4: debianOptionHex},
			order: []uint16{7}, wantNum: 4, wantOrder: []uint16{7, 4}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := fakeVars(t)
			for n, h := range tt.existing {
				data := []byte("garbage")
				if h != "" {
					data = unhex(t, h)
				}
				putVar(t, v, bootVarName(n), 7, data)
			}
			if tt.order != nil {
				putVar(t, v, "BootOrder", 7, orderBytes(tt.order...))
			}
			num, err := v.CreateBootEntry("debian", debianPart, "EFI/debian/shimx64.efi", tt.first)
			if err != nil {
				t.Fatal(err)
			}
			if num != tt.wantNum {
				t.Errorf("num = %d, want %d", num, tt.wantNum)
			}
			attrs, data := getVar(t, v, bootVarName(num))
			if attrs != 7 || !bytes.Equal(data, unhex(t, debianOptionHex)) {
				t.Errorf("Boot%04X = attrs %#x data %x", num, attrs, data)
			}
			if o := mustOrder(t, v); !slices.Equal(o, tt.wantOrder) {
				t.Errorf("BootOrder = %v, want %v", o, tt.wantOrder)
			}
			// Idempotent: a second call changes nothing.
			again, err := v.CreateBootEntry("debian", debianPart, `\EFI\debian\shimx64.efi`, tt.first)
			if err != nil || again != num {
				t.Errorf("second call = %d, %v", again, err)
			}
			if o := mustOrder(t, v); !slices.Equal(o, tt.wantOrder) {
				t.Errorf("BootOrder after second call = %v, want %v", o, tt.wantOrder)
			}
		})
	}
}

func TestCreateBootEntryActivatesInactiveDuplicate(t *testing.T) {
	v := fakeVars(t)
	inactive := unhex(t, debianOptionHex)
	inactive[0] = 0
	putVar(t, v, "Boot0001", 7, inactive)
	num, err := v.CreateBootEntry("debian", debianPart, `\EFI\debian\shimx64.efi`, true)
	if err != nil || num != 1 {
		t.Fatalf("num %d err %v", num, err)
	}
	if _, data := getVar(t, v, "Boot0001"); !bytes.Equal(data, unhex(t, debianOptionHex)) {
		t.Errorf("Boot0001 not reactivated: %x", data)
	}
}

func TestCreateBootEntryDifferentPartitionIsNew(t *testing.T) {
	v := fakeVars(t)
	putVar(t, v, "Boot0000", 7, unhex(t, debianOptionHex))
	other := debianPart
	other.PartUUID = "11111111-2222-3333-4444-555555555555"
	num, err := v.CreateBootEntry("debian", other, `\EFI\debian\shimx64.efi`, true)
	if err != nil || num != 1 {
		t.Fatalf("num %d err %v", num, err)
	}
	if _, err := v.CreateBootEntry("debian", PartitionInfo{PartUUID: "nope"}, `\x`, true); err == nil {
		t.Error("bad PartUUID accepted")
	}
}

func TestRemoveBootEntries(t *testing.T) {
	v := fakeVars(t)
	putVar(t, v, "Boot0000", 7, unhex(t, uiAppOptionHex))
	putVar(t, v, "Boot0001", 7, unhex(t, debianOptionHex))
	putVar(t, v, "Boot0003", 7, unhex(t, debianOptionHex))
	putVar(t, v, "BootOrder", 7, orderBytes(3, 0, 1))
	putVar(t, v, "BootNext", 7, orderBytes(3))

	removed, err := v.RemoveBootEntries(func(o LoadOption) bool {
		p, ok := o.Partition()
		return ok && p.PartUUID == debianPart.PartUUID
	})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(removed, []uint16{1, 3}) {
		t.Errorf("removed %v", removed)
	}
	for _, name := range []string{"Boot0001", "Boot0003", "BootNext"} {
		if _, err := os.Stat(v.path(name)); !os.IsNotExist(err) {
			t.Errorf("%s still exists: %v", name, err)
		}
	}
	if o := mustOrder(t, v); !slices.Equal(o, []uint16{0}) {
		t.Errorf("BootOrder = %v", o)
	}
	// Nothing matches: nothing changes.
	removed, err = v.RemoveBootEntries(func(LoadOption) bool { return false })
	if err != nil || removed != nil {
		t.Errorf("no-match: %v %v", removed, err)
	}
}

// setImmutable sets FS_IMMUTABLE_FL as efivarfs does on existing
// variables; it skips the test where the temp dir's file system has no
// such flag.
func setImmutable(t *testing.T, path string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	flags, err := unix.IoctlGetUint32(int(f.Fd()), unix.FS_IOC_GETFLAGS)
	if err == nil {
		err = unix.IoctlSetPointerInt(int(f.Fd()), unix.FS_IOC_SETFLAGS, int(flags|fsImmutableFL))
	}
	if err != nil {
		t.Skipf("SKIP: cannot set the immutable flag in %s (%v); needs root on ext4/xfs/btrfs", path, err)
	}
	t.Cleanup(func() { makeMutable(path) })
	if err := os.WriteFile(path, []byte("x"), 0o644); err == nil {
		t.Fatal("immutable file was writable; the test would prove nothing")
	}
}

func TestImmutableVariablesAreMadeWritable(t *testing.T) {
	v := fakeVars(t)
	putVar(t, v, "Boot0000", 7, unhex(t, uiAppOptionHex))
	putVar(t, v, "Boot0001", 7, unhex(t, debianOptionHex))
	putVar(t, v, "BootOrder", 7, orderBytes(0, 1))
	setImmutable(t, v.path("BootOrder"))
	setImmutable(t, v.path("Boot0001"))

	if err := v.SetBootOrder([]uint16{1, 0}); err != nil {
		t.Fatal(err)
	}
	if o := mustOrder(t, v); !slices.Equal(o, []uint16{1, 0}) {
		t.Errorf("BootOrder = %v", o)
	}
	removed, err := v.RemoveBootEntries(func(o LoadOption) bool { return o.Num == 1 })
	if err != nil || !slices.Equal(removed, []uint16{1}) {
		t.Fatalf("remove: %v %v", removed, err)
	}
}

func TestMakeMutableToleratesMissingIoctl(t *testing.T) {
	// /proc files answer FS_IOC_GETFLAGS with ENOTTY.
	if err := makeMutable("/proc/self/stat"); err != nil {
		t.Errorf("makeMutable(/proc/self/stat) = %v", err)
	}
}

func TestLowestFree(t *testing.T) {
	tests := []struct {
		used []uint16
		want uint16
	}{
		{nil, 0}, {[]uint16{0, 1, 2}, 3}, {[]uint16{1, 2}, 0}, {[]uint16{0, 2, 3}, 1},
	}
	for _, tt := range tests {
		if got, err := lowestFree(tt.used); err != nil || got != tt.want {
			t.Errorf("lowestFree(%v) = %d, %v", tt.used, got, err)
		}
	}
	all := make([]uint16, 0, 65536)
	for i := range 65536 {
		all = append(all, uint16(i))
	}
	if _, err := lowestFree(all); err == nil {
		t.Error("full table: no error")
	}
}

func TestBootyVar(t *testing.T) {
	v := fakeVars(t)
	if !v.Available() || (EFIVars{Dir: filepath.Join(v.Dir, "absent")}).Available() {
		t.Fatal("Available does not follow the directory")
	}
	if _, err := v.ReadBootyVar("BootyFailures"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("missing variable: err = %v, want fs.ErrNotExist", err)
	}
	for _, data := range [][]byte{[]byte("network 1"), []byte("load-config 12")} {
		if err := v.WriteBootyVar("BootyFailures", data); err != nil {
			t.Fatal(err)
		}
		got, err := v.ReadBootyVar("BootyFailures")
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("ReadBootyVar = %q, %v; want %q", got, err, data)
		}
	}
	// On disk: booty's vendor GUID, non-volatile, boot and runtime access.
	attrs, data := getVar(t, v, "BootyFailures-"+BootyVendorGUID)
	if attrs != efiNVBSRT || string(data) != "load-config 12" {
		t.Errorf("variable file = attrs %#x data %q", attrs, data)
	}
	if err := v.RemoveBootyVar("BootyFailures"); err != nil {
		t.Fatal(err)
	}
	if err := v.RemoveBootyVar("BootyFailures"); err != nil {
		t.Fatalf("removing a missing variable: %v", err)
	}
	if _, err := v.ReadBootyVar("BootyFailures"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("after remove: err = %v, want fs.ErrNotExist", err)
	}
}
