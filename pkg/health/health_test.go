package health

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/booty-dev/booty/pkg/disk"
)

// nvmeSMARTLog lays out a SMART / Health Information log page (log 02h) as
// the controller returns it into the Get Log Page buffer: 512 bytes, the
// fields at their offsets in the NVMe base specification, 128-bit counters
// little-endian.
func nvmeSMARTLog(critical uint8, kelvin uint16, spare, spareThresh, used uint8, mediaErrors uint64) []byte {
	b := make([]byte, 512)
	b[0] = critical
	binary.LittleEndian.PutUint16(b[1:], kelvin)
	b[3], b[4], b[5] = spare, spareThresh, used
	binary.LittleEndian.PutUint64(b[32:], 123456789) // data units read
	binary.LittleEndian.PutUint64(b[128:], 17520)    // power-on hours
	binary.LittleEndian.PutUint64(b[144:], 12)       // unsafe shutdowns
	binary.LittleEndian.PutUint64(b[160:], mediaErrors)
	binary.LittleEndian.PutUint64(b[176:], 40) // error log entries
	return b
}

// fakeNVMe answers Get Log Page 02h with log, after checking the command
// is exactly that: opcode 02h, NSID FFFFFFFFh, NUMDL 127 (512 bytes), LID 02h.
type fakeNVMe struct {
	t   *testing.T
	log []byte
	err error
}

func (f fakeNVMe) AdminCommand(dev disk.BlockDevice, cmd *disk.NVMeCommand) (uint32, error) {
	if cmd.Opcode != 0x02 || cmd.NSID != 0xffffffff || cmd.CDW10 != 0x007f0002 || len(cmd.Data) != 512 || cmd.Timeout <= 0 {
		f.t.Errorf("unexpected NVMe command %+v (data %d bytes)", *cmd, len(cmd.Data))
		return 0, errors.New("unexpected command")
	}
	if f.err != nil {
		return 0, f.err
	}
	copy(cmd.Data, f.log)
	return 0, nil
}

// ataDrive answers ATA PASS-THROUGH(16) PIO-in commands the way a SATA
// drive behind SG_IO does: IDENTIFY DEVICE, SMART READ DATA and SMART READ
// THRESHOLDS, each checked byte for byte.
type ataDrive struct {
	t                  *testing.T
	smart, enabled     bool
	attrs              [][5]uint64 // id, flags, value, threshold, raw
	sawData, sawThresh bool
}

func (a *ataDrive) SGIO(f disk.BlockDevice, cdb []byte, dir int, data []byte, timeout time.Duration) error {
	if len(cdb) != 16 || cdb[0] != 0x85 || cdb[1] != 0x08 || cdb[2] != 0x0e || cdb[6] != 1 || dir != disk.SGDxferFromDev || len(data) != 512 {
		a.t.Errorf("unexpected ATA PASS-THROUGH cdb % x dir %d len %d", cdb, dir, len(data))
		return errors.New("unexpected cdb")
	}
	switch {
	case cdb[14] == 0xec:
		if a.smart {
			binary.LittleEndian.PutUint16(data[82*2:], 0x7869)
		}
		if a.enabled {
			binary.LittleEndian.PutUint16(data[85*2:], 0x7469)
		}
	case cdb[14] == 0xb0 && cdb[4] == 0xd0 && cdb[10] == 0x4f && cdb[12] == 0xc2:
		a.sawData = true
		binary.LittleEndian.PutUint16(data, 0x10) // revision
		for i, at := range a.attrs {
			e := data[2+12*i:]
			e[0] = byte(at[0])
			binary.LittleEndian.PutUint16(e[1:], uint16(at[1]))
			e[3], e[4] = byte(at[2]), byte(at[2])
			var raw [8]byte
			binary.LittleEndian.PutUint64(raw[:], at[4])
			copy(e[5:11], raw[:6])
		}
	case cdb[14] == 0xb0 && cdb[4] == 0xd1 && cdb[10] == 0x4f && cdb[12] == 0xc2:
		a.sawThresh = true
		for i, at := range a.attrs {
			e := data[2+12*i:]
			e[0], e[1] = byte(at[0]), byte(at[3])
		}
	default:
		a.t.Errorf("unexpected ATA command % x", cdb)
		return errors.New("unexpected command")
	}
	return nil
}

// healthyAttrs are a Seagate Exos's attributes (id, flags, value, threshold, raw).
var healthyAttrs = [][5]uint64{
	{1, 0x0f, 83, 44, 201578744}, {5, 0x33, 100, 10, 0}, {9, 0x32, 75, 0, 22301},
	{194, 0x22, 32, 0, 32}, {197, 0x12, 100, 0, 0}, {198, 0x10, 100, 0, 0},
}

type fixture struct {
	root  string
	disks []disk.Disk
	nvme  *fakeNVMe
	ata   *ataDrive
}

func (fx *fixture) write(t *testing.T, rel, content string) {
	t.Helper()
	p := filepath.Join(fx.root, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// newFixture is a healthy machine: 4 CPUs, 16 GiB, eth0 (BOOTIF) with
// carrier at 25 Gb/s, eth1 down, an EDAC controller without errors, an
// NVMe SSD, a SATA HDD and a virtio disk.
func newFixture(t *testing.T) *fixture {
	fx := &fixture{root: t.TempDir()}
	fx.write(t, "proc/meminfo", "MemTotal:       16384000 kB\n")
	fx.write(t, "proc/cpuinfo", "processor\t: 0\n\nprocessor\t: 1\n\nprocessor\t: 2\n\nprocessor\t: 3\n")
	fx.write(t, "proc/cmdline", "BOOTIF=01-3c-fd-fe-aa-bb-01\n")
	for name, v := range map[string][3]string{"eth0": {"3c:fd:fe:aa:bb:01", "1", "25000"}, "eth1": {"3c:fd:fe:aa:bb:02", "0", "-1"}} {
		fx.write(t, "sys/class/net/"+name+"/address", v[0]+"\n")
		fx.write(t, "sys/class/net/"+name+"/carrier", v[1]+"\n")
		fx.write(t, "sys/class/net/"+name+"/speed", v[2]+"\n")
		fx.write(t, "sys/devices/pci0000:00/0000:17:00."+name[3:]+"/vendor", "0x8086\n")
		if err := os.Symlink(filepath.Join(fx.root, "sys/devices/pci0000:00/0000:17:00."+name[3:]), filepath.Join(fx.root, "sys/class/net", name, "device")); err != nil {
			t.Fatal(err)
		}
	}
	fx.write(t, "sys/devices/system/edac/mc/mc0/ue_count", "0\n")
	fx.write(t, "sys/devices/system/edac/mc/mc0/ce_count", "7\n")
	dev := func(name string) string {
		p := filepath.Join(fx.root, "dev", name)
		fx.write(t, "dev/"+name, "")
		return p
	}
	fx.disks = []disk.Disk{
		{Name: "nvme0n1", Path: dev("nvme0n1"), Tran: "nvme"},
		{Name: "sda", Path: dev("sda"), Tran: "sata", Rotational: true},
		{Name: "vda", Path: dev("vda"), Tran: "virtio"},
	}
	fx.nvme = &fakeNVMe{t: t, log: nvmeSMARTLog(0, 310, 100, 10, 3, 0)}
	fx.ata = &ataDrive{t: t, smart: true, enabled: true, attrs: healthyAttrs}
	return fx
}

func (fx *fixture) checker() *Checker {
	return &Checker{
		Root:  fx.root,
		Disks: func() ([]disk.Disk, error) { return fx.disks, nil },
		Open:  (&disk.Manager{}).OpenDisk,
		NVMe:  fx.nvme,
		ATA:   fx.ata,
	}
}

func byName(rs []CheckResult) map[string]CheckResult {
	m := map[string]CheckResult{}
	for _, r := range rs {
		m[r.Name] = r
	}
	return m
}

func TestRunHealthyMachine(t *testing.T) {
	fx := newFixture(t)
	rs := fx.checker().Run(context.Background(), Options{MinMemoryMiB: 15000, MinCPUs: 4})
	var names []string
	for _, r := range rs {
		names = append(names, r.Name)
		if r.Status != StatusPass || r.Blocking {
			t.Errorf("%s", r)
		}
	}
	if got := strings.Join(names, " "); got != "memory cpu disk:nvme0n1 disk:sda disk:vda boot-nic:eth0 edac" {
		t.Errorf("checks %s", got)
	}
	m := byName(rs)
	for _, c := range []struct {
		name, fig string
		want      int64
	}{
		{"memory", "ramMebibytes", 16000}, {"cpu", "count", 4}, {"disk:nvme0n1", "percentageUsed", 3},
		{"disk:nvme0n1", "temperatureCelsius", 37}, {"disk:nvme0n1", "powerOnHours", 17520},
		{"disk:nvme0n1", "maxPercentageUsed", 100}, {"disk:sda", "powerOnHours", 22301}, {"disk:sda", "temperatureCelsius", 32},
		{"boot-nic:eth0", "speedMbps", 25000}, {"edac", "correctable", 7}, {"edac", "uncorrectable", 0},
	} {
		if got, ok := m[c.name].Figures[c.fig]; !ok || got != c.want {
			t.Errorf("%s figure %s = %d (%v), want %d", c.name, c.fig, got, ok, c.want)
		}
	}
	if !fx.ata.sawData || !fx.ata.sawThresh {
		t.Error("ATA SMART data or thresholds not read")
	}
	if Failed(rs) || len(Blocking(rs)) != 0 {
		t.Error("healthy machine failed")
	}
}

func TestRunFailures(t *testing.T) {
	tests := []struct {
		name     string
		setup    func(*testing.T, *fixture)
		opts     Options
		check    string
		status   Status
		blocking bool
		message  string
	}{
		{name: "memory below minimum", opts: Options{MinMemoryMiB: 32768},
			check: "memory", status: StatusFail, blocking: true, message: "16000 MiB installed, at least 32768 MiB required"},
		{name: "too few CPUs", opts: Options{MinCPUs: 8},
			check: "cpu", status: StatusFail, blocking: true, message: "4 logical CPUs, at least 8 required"},
		{name: "nvme critical warning and media errors", setup: func(t *testing.T, fx *fixture) {
			fx.nvme.log = nvmeSMARTLog(0x05, 350, 5, 10, 12, 3)
		}, check: "disk:nvme0n1", status: StatusFail, blocking: true,
			message: "critical warning 0x05: available spare below threshold, reliability degraded; 3 media errors, at most 0 allowed"},
		{name: "nvme worn out", setup: func(t *testing.T, fx *fixture) {
			fx.nvme.log = nvmeSMARTLog(0, 310, 100, 10, 104, 0)
		}, check: "disk:nvme0n1", status: StatusFail, blocking: true, message: "104% of its rated endurance used, at most 100% allowed"},
		{name: "nvme stricter endurance limit", opts: Options{MaxPercentageUsed: 2},
			check: "disk:nvme0n1", status: StatusFail, blocking: true, message: "3% of its rated endurance used, at most 2% allowed"},
		{name: "nvme media errors tolerated", opts: Options{MaxMediaErrors: 5}, setup: func(t *testing.T, fx *fixture) {
			fx.nvme.log = nvmeSMARTLog(0, 310, 100, 10, 3, 2)
		}, check: "disk:nvme0n1", status: StatusWarn, message: "2 media errors (at most 5 allowed); 3% used"},
		{name: "disk failure only reported", opts: Options{ReportOnly: []string{KindDisk}}, setup: func(t *testing.T, fx *fixture) {
			fx.nvme.log = nvmeSMARTLog(0x04, 310, 100, 10, 3, 0)
		}, check: "disk:nvme0n1", status: StatusFail, blocking: false, message: "critical warning 0x04: reliability degraded"},
		{name: "nvme log unreadable", setup: func(t *testing.T, fx *fixture) {
			fx.nvme.err = errors.New("nvme admin command 0x02: inappropriate ioctl for device")
		}, check: "disk:nvme0n1", status: StatusWarn, message: "cannot read the NVMe SMART log of " /* path follows */},
		{name: "ata prefail attribute at threshold", setup: func(t *testing.T, fx *fixture) {
			fx.ata.attrs = [][5]uint64{{1, 0x0f, 83, 44, 0}, {5, 0x33, 9, 10, 3912}, {197, 0x12, 100, 0, 16}}
		}, check: "disk:sda", status: StatusFail, blocking: true,
			message: "SMART says the drive is failing: attribute 5 (reallocated sectors) value 9 at or below threshold 10"},
		{name: "ata pending sectors", setup: func(t *testing.T, fx *fixture) {
			fx.ata.attrs = [][5]uint64{{5, 0x33, 100, 10, 0}, {197, 0x12, 100, 0, 8}}
		}, check: "disk:sda", status: StatusWarn, message: "8 pending sectors"},
		{name: "ata without smart", setup: func(t *testing.T, fx *fixture) { fx.ata.smart, fx.ata.enabled = false, false },
			check: "disk:sda", status: StatusPass, message: "not checked: the drive has no SMART"},
		{name: "ata smart disabled", setup: func(t *testing.T, fx *fixture) { fx.ata.enabled = false },
			check: "disk:sda", status: StatusWarn, message: "SMART is disabled on the drive"},
		{name: "boot nic without carrier", setup: func(t *testing.T, fx *fixture) {
			fx.write(t, "sys/class/net/eth0/carrier", "0\n")
		}, check: "boot-nic:eth0", status: StatusFail, blocking: true, message: "eth0 (3c:fd:fe:aa:bb:01) has no carrier"},
		{name: "configured boot nic by MAC", opts: Options{BootNIC: "3C:FD:FE:AA:BB:02"},
			check: "boot-nic:eth1", status: StatusFail, blocking: true, message: "eth1 (3c:fd:fe:aa:bb:02) has no carrier"},
		{name: "configured boot nic missing", opts: Options{BootNIC: "ens9f0"},
			check: "boot-nic", status: StatusFail, blocking: true, message: "boot NIC ens9f0 is not a physical link of this machine"},
		{name: "no BOOTIF, one link up", setup: func(t *testing.T, fx *fixture) { fx.write(t, "proc/cmdline", "quiet\n") },
			check: "boot-nic", status: StatusPass, message: "boot NIC unknown (no BOOTIF=); links with carrier: eth0"},
		{name: "edac uncorrectable errors", setup: func(t *testing.T, fx *fixture) {
			fx.write(t, "sys/devices/system/edac/mc/mc1/ue_count", "2\n")
			fx.write(t, "sys/devices/system/edac/mc/mc1/ce_count", "0\n")
		}, check: "edac", status: StatusFail, blocking: true, message: "2 uncorrectable memory errors (mc1: 2), at most 0 allowed"},
		{name: "edac errors tolerated", opts: Options{MaxUncorrectable: 2}, setup: func(t *testing.T, fx *fixture) {
			fx.write(t, "sys/devices/system/edac/mc/mc0/ue_count", "2\n")
		}, check: "edac", status: StatusPass, message: "2 uncorrectable, 7 correctable memory errors on 1 controllers"},
		{name: "no edac", setup: func(t *testing.T, fx *fixture) {
			os.RemoveAll(filepath.Join(fx.root, "sys/devices/system/edac"))
		}, check: "edac", status: StatusPass, message: "no EDAC memory controller"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fx := newFixture(t)
			if tt.setup != nil {
				tt.setup(t, fx)
			}
			rs := fx.checker().Run(context.Background(), tt.opts)
			r, ok := byName(rs)[tt.check]
			if !ok {
				t.Fatalf("no result %s in %v", tt.check, rs)
			}
			if r.Status != tt.status || r.Blocking != tt.blocking || !strings.HasPrefix(r.Message, tt.message) {
				t.Errorf("got %s (blocking %v), want %s (blocking %v): %s", r.Status, r.Blocking, tt.status, tt.blocking, tt.message)
				t.Logf("message: %s", r.Message)
			}
			// Every other check still ran and passed or warned.
			for _, o := range rs {
				if o.Name != tt.check && o.Status == StatusFail {
					t.Errorf("unrelated check failed: %s", o)
				}
			}
			if got := len(Blocking(rs)) > 0; got != tt.blocking {
				t.Errorf("Blocking(results) non-empty = %v, want %v", got, tt.blocking)
			}
		})
	}
}

func TestParseNVMeSMART(t *testing.T) {
	b := nvmeSMARTLog(0x02, 343, 97, 10, 12, 1)
	binary.LittleEndian.PutUint64(b[168:], 1) // a 128-bit count beyond 64 bits saturates
	s, err := ParseNVMeSMART(b)
	if err != nil {
		t.Fatal(err)
	}
	if s.CriticalWarning != 2 || s.TemperatureCelsius != 70 || s.AvailableSpare != 97 || s.SpareThreshold != 10 ||
		s.PercentageUsed != 12 || s.PowerOnHours != 17520 || s.UnsafeShutdowns != 12 || s.MediaErrors != ^uint64(0) || s.ErrorLogEntries != 40 {
		t.Errorf("parsed %+v", s)
	}
	if _, err := ParseNVMeSMART(bytes.Repeat([]byte{0}, 100)); err == nil {
		t.Error("short log accepted")
	}
}

// TestRunCancelled: a cancelled run still returns a result for every disk.
func TestRunCancelled(t *testing.T) {
	fx := newFixture(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	r := byName(fx.checker().Run(ctx, Options{}))["disk:sda"]
	if r.Status != StatusWarn || !strings.Contains(r.Message, "not checked") {
		t.Errorf("cancelled disk check: %s", r)
	}
}
