package disk

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// markers are offsets where a wipe test writes non-zero bytes, and whether
// Wipe must zero them.
type marker struct {
	off   int64
	wiped bool
	what  string
}

var wipeTemplate struct {
	once       sync.Once
	head, tail []byte
}

// wipeImage makes a 64 MiB GPT disk image with an ESP (1-9 MiB) and a root
// partition (9-41 MiB), plus markers standing in for signatures.
func wipeImage(t *testing.T) (string, []marker) {
	img := filepath.Join(t.TempDir(), "disk.img")
	wipeTemplate.once.Do(func() {
		src := sgdiskImage(t, 64, 64, "-n", "1:2048:+8M", "-t", "1:ef00", "-n", "2:0:+32M", "-t", "2:8304")
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		wipeTemplate.head, wipeTemplate.tail = b[:mib], b[63*mib:]
	})
	if wipeTemplate.head == nil {
		t.Fatal("no template image")
	}
	// sgdisk writes only the first and last MiB; copy those into a sparse file.
	if err := os.WriteFile(img, wipeTemplate.head, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, 64*mib); err != nil {
		t.Fatal(err)
	}
	ms := []marker{
		{1*mib + 0x52, true, "FAT boot sector of partition 1"},
		{9*mib + 1080, true, "ext4 superblock of partition 2"},
		{9*mib + 65536 + 0x40, true, "btrfs superblock"},
		{41*mib - 8192, true, "MD 1.0 superblock at the end of partition 2"},
		{9*mib - 512, true, "end of partition 1"},
		{20 * mib, false, "file data in the middle of partition 2"},
		{50 * mib, false, "free space"},
	}
	f, err := os.OpenFile(img, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(wipeTemplate.tail, 63*mib); err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		if _, err := f.WriteAt([]byte("SIGNATURE"), m.off); err != nil {
			t.Fatal(err)
		}
	}
	return img, ms
}

func checkMarkers(t *testing.T, img string, ms []marker) {
	t.Helper()
	b, err := os.ReadFile(img)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		zero := bytes.Equal(b[m.off:m.off+9], make([]byte, 9))
		if zero != m.wiped {
			t.Errorf("%s at %d: zeroed=%v, want %v", m.what, m.off, zero, m.wiped)
		}
	}
	for _, r := range []region{{0, mib}, {63 * mib, 64 * mib}} {
		if !bytes.Equal(b[r.off:r.end], make([]byte, r.end-r.off)) {
			t.Errorf("bytes %d-%d not zeroed", r.off, r.end)
		}
	}
	if _, err := ReadPartitionTable(bytes.NewReader(b), int64(len(b))); !errors.Is(err, ErrNoGPT) {
		t.Errorf("partition table after wipe: %v, want none", err)
	}
}

func wipeManager(t *testing.T) (*Manager, *fakeIoctl) {
	m := NewManager()
	io := &fakeIoctl{discardErr: syscall.EOPNOTSUPP}
	m.Ioctl, m.Log = io, testLogger(t)
	m.Sleep = func(time.Duration) {}
	return m, io
}

func TestWipeFile(t *testing.T) {
	img, ms := wipeImage(t)
	m, io := wipeManager(t)
	d := Disk{Name: "vda", Path: img, Size: 64 * mib, Tran: "virtio", Serial: "S1"}
	rep, err := m.Wipe(context.Background(), d, WipeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	checkMarkers(t, img, ms)
	// Regions: 0-2M (disk start + p1 start), 8-10M (p1 end + p2 start), 40-41M (p2 end), 63-64M (disk end and backup GPT).
	if rep.BytesZeroed != 6*mib || rep.Regions != 4 || rep.PartitionTable != "gpt" || rep.Partitions != 2 {
		t.Fatalf("report %+v: want 6 MiB in 4 regions of a 2-partition gpt", rep)
	}
	if rep.Discarded || rep.DiscardNote != "not supported" || rep.SecureErase != "none" || rep.Error != "" || rep.Identity["serial"] != "S1" {
		t.Fatalf("report %+v", rep)
	}
	if want := []string{fmt.Sprintf("BLKDISCARD 0 %d", 64*mib), "BLKRRPART"}; !reflect.DeepEqual(io.ops, want) {
		t.Fatalf("ops %q, want %q", io.ops, want)
	}

	// A second wipe of the wiped disk zeroes the edges only.
	rep, err = m.Wipe(context.Background(), d, WipeOptions{NoDiscard: true, EdgeBytes: 2 * mib})
	if err != nil || rep.BytesZeroed != 4*mib || rep.PartitionTable != "" || rep.DiscardNote != "disabled" {
		t.Fatalf("second wipe: %+v, %v", rep, err)
	}
}

func TestWipeDiscardError(t *testing.T) {
	img, ms := wipeImage(t)
	m, io := wipeManager(t)
	io.discardErr = syscall.EIO
	rep, err := m.Wipe(context.Background(), Disk{Path: img, Size: 64 * mib}, WipeOptions{})
	if !errors.Is(err, syscall.EIO) || rep.Discarded || rep.BytesZeroed != 6*mib {
		t.Fatalf("report %+v, err %v: want EIO reported and the zeroing done", rep, err)
	}
	checkMarkers(t, img, ms)
}

func TestWipeRefuses(t *testing.T) {
	for _, d := range []Disk{{ReadOnly: true}, {Removable: true}, {BootMedium: true}} {
		img, _ := wipeImage(t)
		before, _ := os.ReadFile(img)
		m, io := wipeManager(t)
		d.Path, d.Size = img, 64*mib
		rep, err := m.Wipe(context.Background(), d, WipeOptions{SecureErase: true})
		if !errors.Is(err, ErrRefuseWipe) || rep.BytesZeroed != 0 || len(io.ops) != 0 {
			t.Fatalf("%+v: report %+v, err %v; want refused", d, rep, err)
		}
		if after, _ := os.ReadFile(img); !bytes.Equal(before, after) {
			t.Fatalf("%+v: refused wipe changed the disk", d)
		}
	}
}

func TestWipeAll(t *testing.T) {
	m, _ := wipeManager(t)
	var disks []Disk
	var marks [][]marker
	for i := range 3 {
		img, ms := wipeImage(t)
		disks = append(disks, Disk{Name: fmt.Sprintf("sd%c", 'a'+i), Path: img, Size: 64 * mib})
		marks = append(marks, ms)
	}
	disks[1].BootMedium = true
	reps, err := m.WipeAll(context.Background(), disks, WipeOptions{})
	if !errors.Is(err, ErrRefuseWipe) || len(reps) != 3 {
		t.Fatalf("%d reports, err %v", len(reps), err)
	}
	for i, r := range reps {
		if r.Identity["name"] != disks[i].Name {
			t.Fatalf("report %d is for %s", i, r.Identity["name"])
		}
	}
	if reps[0].BytesZeroed != 6*mib || reps[2].BytesZeroed != 6*mib || reps[1].BytesZeroed != 0 || !strings.Contains(reps[1].Error, "boot medium") {
		t.Fatalf("reports %+v", reps)
	}
	checkMarkers(t, disks[0].Path, marks[0])
	checkMarkers(t, disks[2].Path, marks[2])
}

func TestWipeRegions(t *testing.T) {
	pt := &PartitionTable{Kind: "gpt", SectorSize: 512, BackupHeaderOffset: 100*mib - 512, BackupEntriesOffset: 100*mib - 33*512,
		Partitions: []Partition{{Number: 1, Start: mib, Size: 512 << 10}, {Number: 2, Start: 10 * mib, Size: 80 * mib}}}
	got := wipeRegions(200*mib, mib, pt)
	want := []region{{0, mib + 512<<10}, {10 * mib, 11 * mib}, {89 * mib, 90 * mib}, {100*mib - 33*512, 100 * mib}, {199 * mib, 200 * mib}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("regions %v, want %v", got, want)
	}
	if got := wipeRegions(mib/2, mib, nil); !reflect.DeepEqual(got, []region{{0, mib / 2}}) {
		t.Fatalf("tiny disk: %v", got)
	}
}

// TestWipeLoop wipes a real loop device with the real ioctls: the loop
// driver supports BLKDISCARD (it punches holes in the backing file).
func TestWipeLoop(t *testing.T) {
	needRootLoop(t)
	img, ms := wipeImage(t)
	loop := attachLoop(t, img, false)
	m := NewManager()
	m.Log = testLogger(t)
	rep, err := m.Wipe(context.Background(), Disk{Name: filepath.Base(loop), Path: loop, Size: 64 * mib}, WipeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Discarded || rep.BytesZeroed != 6*mib {
		t.Fatalf("report %+v: want discarded and 6 MiB zeroed", rep)
	}
	for i := range ms {
		ms[i].wiped = true // the discard zeroed the rest
	}
	checkMarkers(t, img, ms)
	if out, _ := exec.Command("sgdisk", "-v", loop).CombinedOutput(); !strings.Contains(string(out), "Creating new GPT") && !strings.Contains(string(out), "GPT: not present") {
		t.Logf("sgdisk -v after wipe:\n%s", out)
	}
}

// fakeNVMe answers Identify and the Sanitize log, and records the commands.
type fakeNVMe struct {
	ctrl, ns []byte
	sstat    []uint16 // sanitize status returned per log read
	failOp   map[uint8]error
	active   []uint32 // active namespace IDs; nil: only 2 (nvme0n2)
	cmds     []NVMeCommand
}

func (f *fakeNVMe) AdminCommand(_ BlockDevice, c *NVMeCommand) (uint32, error) {
	rec := *c
	rec.Data = nil
	f.cmds = append(f.cmds, rec)
	if err := f.failOp[c.Opcode]; err != nil {
		return 0, err
	}
	switch {
	case c.Opcode == nvmeOpIdentify && c.CDW10 == 1:
		copy(c.Data, f.ctrl)
	case c.Opcode == nvmeOpIdentify && c.CDW10 == 0:
		copy(c.Data, f.ns)
	case c.Opcode == nvmeOpIdentify && c.CDW10 == 2:
		ids := f.active
		if ids == nil {
			ids = []uint32{2}
		}
		for i, id := range ids {
			binary.LittleEndian.PutUint32(c.Data[4*i:], id)
		}
	case c.Opcode == nvmeOpGetLogPage:
		s := f.sstat[0]
		if len(f.sstat) > 1 {
			f.sstat = f.sstat[1:]
		}
		binary.LittleEndian.PutUint16(c.Data[2:], s)
	}
	return 0, nil
}

func nvmeCtrl(oacs uint16, sanicap uint32) []byte { return nvmeCtrlFNA(oacs, sanicap, 0) }

func nvmeCtrlFNA(oacs uint16, sanicap uint32, fna byte) []byte {
	b := make([]byte, 4096)
	b[524] = fna
	binary.LittleEndian.PutUint16(b[256:], oacs)
	binary.LittleEndian.PutUint32(b[328:], sanicap)
	return b
}

func TestSecureEraseNVMe(t *testing.T) {
	ns := make([]byte, 4096)
	ns[26] = 0x21 // FLBAS: LBA format 1 | high bits 01 (format 17)
	ns[29] = 0x09 // DPS: type 1 protection, first bytes of metadata
	type cmd struct {
		op    uint8
		nsid  uint32
		cdw10 uint32
	}
	tests := []struct {
		name       string
		nvme       *fakeNVMe
		wantMethod string
		wantCmds   []cmd
		wantErr    error
	}{
		{name: "sanitize crypto erase", nvme: &fakeNVMe{ctrl: nvmeCtrl(0x2, 0x7), sstat: []uint16{2, 2, 1}},
			wantMethod: "nvme-sanitize-crypto-erase",
			wantCmds:   []cmd{{0x06, 0, 1}, {0x06, 0, 2}, {0x84, 0, 4}, {0x02, 0xffffffff, 127<<16 | 0x81}, {0x02, 0xffffffff, 127<<16 | 0x81}, {0x02, 0xffffffff, 127<<16 | 0x81}}},
		{name: "sanitize block erase", nvme: &fakeNVMe{ctrl: nvmeCtrl(0, 0x2), sstat: []uint16{4}},
			wantMethod: "nvme-sanitize-block-erase", wantCmds: []cmd{{0x06, 0, 1}, {0x06, 0, 2}, {0x84, 0, 2}, {0x02, 0xffffffff, 127<<16 | 0x81}}},
		{name: "sanitize overwrite", nvme: &fakeNVMe{ctrl: nvmeCtrl(0, 0x4), sstat: []uint16{1}},
			wantMethod: "nvme-sanitize-overwrite", wantCmds: []cmd{{0x06, 0, 1}, {0x06, 0, 2}, {0x84, 0, 3 | 1<<4}, {0x02, 0xffffffff, 127<<16 | 0x81}}},
		{name: "sanitize fails", nvme: &fakeNVMe{ctrl: nvmeCtrl(0, 0x1), sstat: []uint16{2, 3}},
			wantCmds: []cmd{{0x06, 0, 1}, {0x06, 0, 2}, {0x84, 0, 4}, {0x02, 0xffffffff, 127<<16 | 0x81}, {0x02, 0xffffffff, 127<<16 | 0x81}}},
		{name: "format keeps the LBA format", nvme: &fakeNVMe{ctrl: nvmeCtrl(0x2, 0), ns: ns},
			wantMethod: "nvme-format-user-data-erase",
			// LBAF low 1, PI 1 <<5, PIL 1 <<8, SES 1 <<9, LBAF high 1 <<12
			wantCmds: []cmd{{0x06, 0, 1}, {0x06, 0, 2}, {0x06, 2, 0}, {0x80, 2, 1 | 1<<5 | 1<<8 | 1<<9 | 1<<12}}},
		{name: "format rejected", nvme: &fakeNVMe{ctrl: nvmeCtrl(0x2, 0), ns: ns, failOp: map[uint8]error{0x80: &NVMeStatusError{Opcode: 0x80, Status: 0x10a}}},
			wantCmds: []cmd{{0x06, 0, 1}, {0x06, 0, 2}, {0x06, 2, 0}, {0x80, 2, 1 | 1<<5 | 1<<8 | 1<<9 | 1<<12}}},
		// Two namespaces on the controller: sanitize, or a format that FNA
		// says applies to all namespaces, would erase the other one too.
		{name: "two namespaces: sanitize refused", nvme: &fakeNVMe{ctrl: nvmeCtrl(0x2, 0x7), active: []uint32{1, 2}},
			wantCmds: []cmd{{0x06, 0, 1}, {0x06, 0, 2}}, wantErr: ErrSecureEraseMultiNamespace},
		{name: "two namespaces: format of all namespaces refused", nvme: &fakeNVMe{ctrl: nvmeCtrlFNA(0x2, 0, 0x1), ns: ns, active: []uint32{2, 3}},
			wantCmds: []cmd{{0x06, 0, 1}, {0x06, 0, 2}}, wantErr: ErrSecureEraseMultiNamespace},
		{name: "two namespaces: secure erase of all namespaces refused", nvme: &fakeNVMe{ctrl: nvmeCtrlFNA(0x2, 0, 0x2), ns: ns, active: []uint32{2, 3}},
			wantCmds: []cmd{{0x06, 0, 1}, {0x06, 0, 2}}, wantErr: ErrSecureEraseMultiNamespace},
		{name: "two namespaces: per-namespace format runs", nvme: &fakeNVMe{ctrl: nvmeCtrl(0x2, 0), ns: ns, active: []uint32{2, 3}},
			wantMethod: "nvme-format-user-data-erase",
			wantCmds:   []cmd{{0x06, 0, 1}, {0x06, 0, 2}, {0x06, 2, 0}, {0x80, 2, 1 | 1<<5 | 1<<8 | 1<<9 | 1<<12}}},
		{name: "nothing supported", nvme: &fakeNVMe{ctrl: nvmeCtrl(0, 0)}, wantCmds: []cmd{{0x06, 0, 1}, {0x06, 0, 2}}, wantErr: ErrSecureEraseUnsupported},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			img, ms := wipeImage(t)
			before, _ := os.ReadFile(img)
			m, _ := wipeManager(t)
			m.NVMe = tt.nvme
			rep, err := m.Wipe(context.Background(), Disk{Name: "nvme0n2", Path: img, Size: 64 * mib, Tran: "nvme"}, WipeOptions{SecureErase: true})
			var got []cmd
			for _, c := range tt.nvme.cmds {
				got = append(got, cmd{c.Opcode, c.NSID, c.CDW10})
			}
			if !reflect.DeepEqual(got, tt.wantCmds) {
				t.Fatalf("commands %#v, want %#v", got, tt.wantCmds)
			}
			switch {
			case tt.wantMethod != "":
				if err != nil || rep.SecureErase != tt.wantMethod {
					t.Fatalf("report %+v, err %v; want %s", rep, err, tt.wantMethod)
				}
			case err == nil || rep.SecureErase != "none" || tt.wantErr != nil && !errors.Is(err, tt.wantErr):
				t.Fatalf("report %+v, err %v; want a failed secure erase", rep, err)
			}
			if errors.Is(tt.wantErr, ErrSecureEraseMultiNamespace) {
				if !errors.Is(err, ErrSecureEraseMultiNamespace) {
					t.Fatalf("err %v, want ErrSecureEraseMultiNamespace", err)
				}
				if after, _ := os.ReadFile(img); !bytes.Equal(before, after) {
					t.Fatal("the disk changed although the erase was refused")
				}
				return
			}
			// The signatures are zeroed whether the secure erase worked or not.
			checkMarkers(t, img, ms)
		})
	}
}

// fakeATA records SG_IO CDBs and data and answers IDENTIFY DEVICE.
type fakeATA struct {
	identify []byte
	fail     map[byte]error // by ATA command
	cdbs     []string
	data     [][]byte
	timeouts []time.Duration
}

func (f *fakeATA) SGIO(_ BlockDevice, cdb []byte, dir int, data []byte, timeout time.Duration) error {
	f.cdbs = append(f.cdbs, hex.EncodeToString(cdb))
	f.data = append(f.data, bytes.Clone(data))
	f.timeouts = append(f.timeouts, timeout)
	if want := map[byte]int{0xec: SGDxferFromDev, 0xf1: SGDxferToDev, 0xf3: SGDxferNone, 0xf4: SGDxferToDev, 0xf6: SGDxferToDev}[cdb[14]]; want != dir {
		return fmt.Errorf("command %02x with direction %d, want %d", cdb[14], dir, want)
	}
	if cdb[14] == 0xec {
		copy(data, f.identify)
	}
	return f.fail[cdb[14]]
}

func ataIdentifyData(security uint16, eraseTime, enhancedTime uint16) []byte {
	b := make([]byte, 512)
	binary.LittleEndian.PutUint16(b[82*2:], 0x2)
	binary.LittleEndian.PutUint16(b[128*2:], security)
	binary.LittleEndian.PutUint16(b[89*2:], eraseTime)
	binary.LittleEndian.PutUint16(b[90*2:], enhancedTime)
	return b
}

func TestSecureEraseATA(t *testing.T) {
	const (
		identify = "85080e" + "000000" + "01" + "00000000000000" + "ec" + "00"
		setPass  = "850a06" + "000000" + "01" + "00000000000000" + "f1" + "00"
		prepare  = "850600" + "000000" + "00" + "00000000000000" + "f3" + "00"
		erase    = "850a06" + "000000" + "01" + "00000000000000" + "f4" + "00"
		disable  = "850a06" + "000000" + "01" + "00000000000000" + "f6" + "00"
	)
	tests := []struct {
		name       string
		ata        *fakeATA
		wantMethod string
		wantCDBs   []string
		wantCtl    uint16 // erase unit control word
		wantErr    error
	}{
		{name: "normal erase", ata: &fakeATA{identify: ataIdentifyData(0x1, 30, 0)}, wantMethod: "ata-security-erase",
			wantCDBs: []string{identify, setPass, prepare, erase}, wantCtl: 0},
		{name: "enhanced erase", ata: &fakeATA{identify: ataIdentifyData(0x21, 30, 60)}, wantMethod: "ata-enhanced-security-erase",
			wantCDBs: []string{identify, setPass, prepare, erase}, wantCtl: 0x2},
		{name: "frozen", ata: &fakeATA{identify: ataIdentifyData(0x9, 0, 0)}, wantCDBs: []string{identify}, wantErr: ErrATAFrozen},
		{name: "password already set", ata: &fakeATA{identify: ataIdentifyData(0x3, 0, 0)}, wantCDBs: []string{identify}, wantErr: ErrATASecurityEnabled},
		{name: "no security feature", ata: &fakeATA{identify: ataIdentifyData(0x0, 0, 0)}, wantCDBs: []string{identify}, wantErr: ErrSecureEraseUnsupported},
		{name: "erase fails: password removed", ata: &fakeATA{identify: ataIdentifyData(0x1, 0, 0), fail: map[byte]error{0xf4: syscall.EIO}},
			wantCDBs: []string{identify, setPass, prepare, erase, disable}, wantErr: syscall.EIO},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			img, ms := wipeImage(t)
			m, _ := wipeManager(t)
			m.ATA = tt.ata
			rep, err := m.Wipe(context.Background(), Disk{Name: "sda", Path: img, Size: 64 * mib, Tran: "sata"}, WipeOptions{SecureErase: true})
			if !reflect.DeepEqual(tt.ata.cdbs, tt.wantCDBs) {
				t.Fatalf("CDBs\n%q\nwant\n%q", tt.ata.cdbs, tt.wantCDBs)
			}
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) || rep.SecureErase != "none" {
					t.Fatalf("report %+v, err %v; want %v", rep, err, tt.wantErr)
				}
			} else if err != nil || rep.SecureErase != tt.wantMethod {
				t.Fatalf("report %+v, err %v; want %s", rep, err, tt.wantMethod)
			}
			if len(tt.ata.cdbs) >= 4 {
				pw := tt.ata.data[1]
				if binary.LittleEndian.Uint16(pw) != 0 || string(pw[2:7]) != "booty" || len(pw) != 512 {
					t.Fatalf("set password data % x", pw[:40])
				}
				eu := tt.ata.data[3]
				if binary.LittleEndian.Uint16(eu) != tt.wantCtl || string(eu[2:7]) != "booty" {
					t.Fatalf("erase unit data % x", eu[:40])
				}
			}
			if tt.name == "normal erase" && tt.ata.timeouts[3] != 100*time.Minute {
				t.Fatalf("erase timeout %v, want 30*2 min * 1.5 + 10 min", tt.ata.timeouts[3])
			}
			checkMarkers(t, img, ms)
		})
	}
}

func TestSecureEraseUnsupportedTransport(t *testing.T) {
	img, ms := wipeImage(t)
	m, _ := wipeManager(t)
	rep, err := m.Wipe(context.Background(), Disk{Path: img, Size: 64 * mib, Tran: "virtio"}, WipeOptions{SecureErase: true})
	if !errors.Is(err, ErrSecureEraseUnsupported) || rep.SecureErase != "none" || rep.BytesZeroed != 6*mib {
		t.Fatalf("report %+v, err %v", rep, err)
	}
	checkMarkers(t, img, ms)
}

func TestIdentity(t *testing.T) {
	d := Disk{Name: "sda", Size: 500 << 30, Model: "ST500", Serial: "ZA1", WWN: "0x5000c500a1b2c3d4", Tran: "sata",
		ByPath: "/dev/disk/by-path/pci-0000:00:1f.2-ata-1.0", HCTL: "0:0:0:0", Vendor: "ATA"}
	want := map[string]string{"name": "sda", "size": "536870912000", "model": "ST500", "serial": "ZA1", "wwn": "0x5000c500a1b2c3d4",
		"tran": "sata", "by_path": "/dev/disk/by-path/pci-0000:00:1f.2-ata-1.0", "hctl": "0:0:0:0"}
	if got := d.Identity(); !reflect.DeepEqual(got, want) {
		t.Fatalf("Identity = %v, want %v", got, want)
	}
	if got := (Disk{Name: "vda", Size: 1 << 30}).Identity(); !reflect.DeepEqual(got, map[string]string{"name": "vda", "size": "1073741824"}) {
		t.Fatalf("sparse Identity = %v", got)
	}
}

// TestWipeDamagedPrimary: with the primary GPT gone, Wipe still finds the
// partitions through the backup and zeroes their ends.
func TestWipeDamagedPrimary(t *testing.T) {
	img, ms := wipeImage(t)
	f, _ := os.OpenFile(img, os.O_RDWR, 0)
	f.WriteAt(make([]byte, 512), 512)
	f.Close()
	m, _ := wipeManager(t)
	rep, err := m.Wipe(context.Background(), Disk{Path: img, Size: 64 * mib}, WipeOptions{})
	if err != nil || rep.Partitions != 2 || rep.BytesZeroed != 6*mib {
		t.Fatalf("report %+v, %v", rep, err)
	}
	checkMarkers(t, img, ms)
}
