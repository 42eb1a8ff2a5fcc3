// Package disk discovers block devices from sysfs (without udev), selects
// the provisioning target with Ironic's root device hints, fixes up the
// partition table and filesystem after an image write, and wipes disks for
// deprovisioning. Everything runs with only the booty binary: partition
// tables are read and written in Go, the kernel is told by ioctl, and
// filesystems are grown with the installed OS's own tools in a chroot.
//
// After image.Write a caller runs, in order:
//
//	m.GrowPartitionTable(ctx, d, size) // backup GPT to the end, root partition grown, kernel re-reads
//	m.ReadPartitions(ctx, dev)         // partitions with their nodes and filesystems
//	(mount root, bind /dev /proc /sys /run)
//	GrowFilesystem(ctx, runner, root, partDev, "")
//
// Every read and write of a disk goes through a BlockDevice (OpenDevice;
// MemDevice in tests): pkg/image writes the image through the same
// interface, and nothing else opens a block device.
//
// System access hangs off Manager fields (Open, Ioctl, NVMe, ATA, Sleep)
// so tests use plain files and fakes. The NVMe (NVME_IOCTL_ADMIN_CMD) and
// ATA (SG_IO ATA PASS-THROUGH) secure erase paths are tested only against
// fakes that check the command bytes: no test machine has such a disk.
package disk

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Disk is one whole block device as the kernel describes it in sysfs.
// String fields are trimmed and empty when the kernel does not expose them.
type Disk struct {
	// Name is the kernel name, "vda", "nvme0n1", "sda".
	Name string `json:"name"`
	// Path is the device node, DevRoot joined with Name ("/dev/vda").
	Path string `json:"path"`
	// Size in bytes.
	Size              int64  `json:"size"`
	LogicalBlockSize  int64  `json:"logicalBlockSize"`
	PhysicalBlockSize int64  `json:"physicalBlockSize"`
	Rotational        bool   `json:"rotational"`
	Removable         bool   `json:"removable"`
	ReadOnly          bool   `json:"readOnly"`
	Model             string `json:"model,omitempty"`
	Vendor            string `json:"vendor,omitempty"`
	Serial            string `json:"serial,omitempty"`
	// WWN is the World Wide Name as udev's ID_WWN spells it: "0x5000c500a1b2c3d4"
	// for NAA identifiers, the raw "eui.…"/"nvme.…" wwid for NVMe.
	WWN string `json:"wwn,omitempty"`
	// WWNWithExtension is WWN plus the NAA vendor extension (udev's
	// ID_WWN_WITH_EXTENSION); equal to WWN when there is none.
	WWNWithExtension string `json:"wwnWithExtension,omitempty"`
	// WWNVendorExtension is the NAA vendor extension alone ("0x…").
	WWNVendorExtension string `json:"wwnVendorExtension,omitempty"`
	// HCTL is the SCSI address host:channel:target:lun of SCSI/SATA/SAS/USB disks.
	HCTL string `json:"hctl,omitempty"`
	// ByPath is the /dev/disk/by-path link naming this disk: read from
	// DevRoot/disk/by-path when udev populated it, else derived from the
	// sysfs device path the way udev's path_id does for common buses.
	ByPath string `json:"byPath,omitempty"`
	// Tran is the transport: nvme, sata, sas, scsi, virtio, usb, mmc, fc, iscsi, or empty.
	Tran string `json:"tran,omitempty"`
	// Partitions are the kernel names of the disk's partitions, sorted.
	Partitions []string `json:"partitions,omitempty"`
	// BootMedium is true for the disk holding what the agent booted or
	// reads its config from (Manager.BootDevices) or any mounted filesystem.
	BootMedium bool `json:"bootMedium"`
}

// DefaultSkipPrefixes are kernel name prefixes that are never provisioning
// targets: loop and RAM disks, device-mapper and MD arrays (a later issue may
// add software RAID), optical drives, floppies, network block devices.
var DefaultSkipPrefixes = []string{"loop", "ram", "zram", "dm-", "md", "sr", "fd", "nbd", "drbd", "rbd"}

// mmcSpecial matches eMMC boot and RPMB hardware partitions, which appear as disks.
var mmcSpecial = regexp.MustCompile(`^mmcblk\d+(boot\d+|rpmb)$`)

// Manager discovers disks and selects the target. The zero value is not
// usable; NewManager sets the defaults, tests point the roots at a fake tree.
type Manager struct {
	// SysRoot is where sysfs is mounted ("/sys").
	SysRoot string
	// DevRoot is where device nodes live ("/dev").
	DevRoot string
	// MountsFile lists mounted filesystems ("/proc/self/mounts"); a disk
	// with a mounted filesystem is marked BootMedium. Empty disables the check.
	MountsFile string
	// BootDevices names disks (or their partitions), as "vda" or "/dev/vda1",
	// that hold the boot medium or config drive; they are marked BootMedium.
	BootDevices []string
	// SkipPrefixes are kernel name prefixes left out of Disks entirely.
	SkipPrefixes []string

	// Open opens a device node (os.OpenFile). Tests open plain files.
	Open func(path string, flag int) (BlockDevice, error)
	// Ioctl issues the block-device ioctls (BLKRRPART, BLKPG, BLKDISCARD).
	Ioctl BlockIoctl
	// NVMe sends NVMe admin commands (NVME_IOCTL_ADMIN_CMD) for secure erase.
	NVMe NVMeAdmin
	// ATA sends ATA PASS-THROUGH(16) commands through SG_IO for secure erase.
	ATA ATAPassthrough
	// Sleep waits between retries and polls (time.Sleep).
	Sleep func(time.Duration)
	// Retry bounds the BLKRRPART attempts on EBUSY.
	Retry Backoff
	// NodeTimeout bounds the wait for partition nodes in sysfs and /dev; PollInterval spaces the checks.
	NodeTimeout, PollInterval time.Duration
	// Log receives what the disk operations do.
	Log *slog.Logger
}

// Backoff is a bounded retry policy: Attempts tries, waiting Initial after
// the first failure and doubling up to Max.
type Backoff struct {
	Attempts     int
	Initial, Max time.Duration
}

// Delay returns the wait after the given failed attempt (1-based).
func (b Backoff) Delay(attempt int) time.Duration {
	d := b.Initial
	for i := 1; i < attempt && d < b.Max; i++ {
		d *= 2
	}
	return min(d, b.Max)
}

// Defaults of the Manager's waits.
var (
	DefaultRetry        = Backoff{Attempts: 6, Initial: 100 * time.Millisecond, Max: 2 * time.Second}
	DefaultNodeTimeout  = 10 * time.Second
	DefaultPollInterval = 50 * time.Millisecond
)

// NewManager returns a Manager reading /sys, /dev and /proc/self/mounts.
func NewManager() *Manager {
	return &Manager{
		SysRoot:      "/sys",
		DevRoot:      "/dev",
		MountsFile:   "/proc/self/mounts",
		SkipPrefixes: DefaultSkipPrefixes,
		Open:         openDevice,
		Ioctl:        linuxIoctl{},
		NVMe:         linuxNVMe{},
		ATA:          linuxSGIO{},
		Sleep:        time.Sleep,
		Retry:        DefaultRetry,
		NodeTimeout:  DefaultNodeTimeout,
		PollInterval: DefaultPollInterval,
	}
}

func openDevice(path string, flag int) (BlockDevice, error) {
	f, err := OpenDevice(path, flag)
	if err != nil {
		return nil, err
	}
	return f, nil
}

// The Manager's seams with their defaults, for a Manager built as a literal.
func (m *Manager) open(path string, flag int) (BlockDevice, error) { return m.OpenDisk(path, flag) }

// OpenDisk opens the disk or partition at path through the Manager's Open
// seam (OpenDevice by default): the one way other packages (health checks)
// open a block device.
func (m *Manager) OpenDisk(path string, flag int) (BlockDevice, error) {
	if m.Open != nil {
		return m.Open(path, flag)
	}
	return openDevice(path, flag)
}

func (m *Manager) sleep(d time.Duration) {
	if m.Sleep != nil {
		m.Sleep(d)
		return
	}
	time.Sleep(d)
}

func (m *Manager) log() *slog.Logger {
	if m.Log != nil {
		return m.Log
	}
	return slog.Default().With("component", "disk")
}

func (m *Manager) ioctl() BlockIoctl {
	if m.Ioctl != nil {
		return m.Ioctl
	}
	return linuxIoctl{}
}

// Disks lists whole disks found in SysRoot/block, sorted by name. Devices
// matching SkipPrefixes, eMMC boot/RPMB areas, hidden NVMe multipath paths and
// zero-sized devices (empty card readers) are left out. An unreadable
// attribute leaves its field empty; only failing to list SysRoot/block or
// to read a disk's size is an error.
func (m *Manager) Disks() ([]Disk, error) {
	blockDir := filepath.Join(m.SysRoot, "block")
	entries, err := os.ReadDir(blockDir)
	if err != nil {
		return nil, fmt.Errorf("list block devices in %s: %w", blockDir, err)
	}
	mounted, err := m.mountedDevices()
	if err != nil {
		return nil, err
	}
	var disks []Disk
	for _, e := range entries {
		name := e.Name()
		if m.skip(name) {
			continue
		}
		d, err := m.readDisk(name)
		if err != nil {
			return nil, err
		}
		if d == nil {
			continue
		}
		d.BootMedium = m.isBootDevice(d, mounted)
		disks = append(disks, *d)
	}
	sort.Slice(disks, func(i, j int) bool { return disks[i].Name < disks[j].Name })
	return disks, nil
}

func (m *Manager) skip(name string) bool {
	prefixes := m.SkipPrefixes
	if prefixes == nil {
		prefixes = DefaultSkipPrefixes
	}
	for _, p := range prefixes {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return mmcSpecial.MatchString(name)
}

// readDisk reads one disk's attributes; nil, nil means "not a candidate".
func (m *Manager) readDisk(name string) (*Disk, error) {
	dir := filepath.Join(m.SysRoot, "block", name)
	if readString(dir, "hidden") == "1" {
		return nil, nil
	}
	sectors, err := readInt(dir, "size")
	if err != nil {
		return nil, fmt.Errorf("read size of %s: %w", name, err)
	}
	if sectors == 0 {
		return nil, nil
	}
	d := &Disk{
		Name:       name,
		Path:       filepath.Join(m.devRoot(), name),
		Size:       sectors * 512, // sysfs size is always in 512-byte units
		Rotational: readString(dir, "queue/rotational") == "1",
		Removable:  readString(dir, "removable") == "1",
		ReadOnly:   readString(dir, "ro") == "1",
		Model:      readString(dir, "device/model"),
		Vendor:     readString(dir, "device/vendor"),
	}
	d.LogicalBlockSize, _ = readInt(dir, "queue/logical_block_size")
	d.PhysicalBlockSize, _ = readInt(dir, "queue/physical_block_size")

	// Serial: NVMe and some SCSI drivers expose device/serial, virtio-blk
	// exposes <disk>/serial, SCSI/SATA have it in VPD page 0x80.
	d.Serial = firstNonEmpty(readString(dir, "device/serial"), readString(dir, "serial"), vpdSerial(filepath.Join(dir, "device/vpd_pg80")))
	d.WWN, d.WWNWithExtension, d.WWNVendorExtension = parseWWID(firstNonEmpty(readString(dir, "wwid"), readString(dir, "device/wwid")))

	// The resolved sysfs path tells the bus: .../pci0000:00/0000:00:1f.2/ata1/host0/target0:0:0/0:0:0:0/block/sda
	devPath, _ := filepath.EvalSymlinks(dir)
	if target, err := os.Readlink(filepath.Join(dir, "device")); err == nil {
		if b := filepath.Base(target); hctlRe.MatchString(b) {
			d.HCTL = b
		}
	}
	d.Tran = transport(name, devPath)
	d.ByPath = m.byPath(name, devPath, d)

	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if _, err := os.Stat(filepath.Join(dir, e.Name(), "partition")); err == nil {
			d.Partitions = append(d.Partitions, e.Name())
		}
	}
	sort.Strings(d.Partitions)
	return d, nil
}

func (m *Manager) devRoot() string {
	if m.DevRoot == "" {
		return "/dev"
	}
	return m.DevRoot
}

var hctlRe = regexp.MustCompile(`^\d+:\d+:\d+:\d+$`)

// transport guesses lsblk's TRAN from the kernel name and resolved sysfs path.
// USB is checked first: a USB-SATA bridge also shows SCSI and sometimes ATA.
func transport(name, devPath string) string {
	switch {
	case strings.Contains(devPath, "/usb"):
		return "usb"
	case strings.HasPrefix(name, "nvme") || strings.Contains(devPath, "/nvme"):
		return "nvme"
	case ataRe.MatchString(devPath):
		return "sata"
	case strings.Contains(devPath, "/end_device-") || strings.Contains(devPath, "/sas_"):
		return "sas"
	case strings.Contains(devPath, "/rport-"):
		return "fc"
	case strings.Contains(devPath, "/session"):
		return "iscsi"
	case strings.HasPrefix(name, "vd") || strings.Contains(devPath, "/virtio"):
		return "virtio"
	case strings.HasPrefix(name, "mmcblk"):
		return "mmc"
	case strings.Contains(devPath, "/host"):
		return "scsi"
	}
	return ""
}

var (
	pciAddrRe = regexp.MustCompile(`^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$`)
	ataRe     = regexp.MustCompile(`/ata(\d+)/`)
	nvmeNSRe  = regexp.MustCompile(`^nvme\d+n(\d+)$`)
)

// byPath returns the /dev/disk/by-path link for the disk. It prefers the link
// udev created (DevRoot/disk/by-path/* resolving to the disk); without udev it
// derives udev path_id's spelling for virtio, NVMe, ATA and SCSI behind one
// PCI device, and returns "" for anything it cannot spell reliably.
func (m *Manager) byPath(name, devPath string, d *Disk) string {
	linkDir := filepath.Join(m.devRoot(), "disk", "by-path")
	if entries, err := os.ReadDir(linkDir); err == nil {
		var names []string
		for _, e := range entries {
			target, err := os.Readlink(filepath.Join(linkDir, e.Name()))
			if err == nil && filepath.Base(target) == name {
				names = append(names, e.Name())
			}
		}
		if len(names) > 0 {
			sort.Strings(names)
			return filepath.Join("/dev/disk/by-path", names[0])
		}
	}
	// The PCI function closest to the disk.
	pci := ""
	for _, part := range strings.Split(devPath, "/") {
		if pciAddrRe.MatchString(part) {
			pci = part
		}
	}
	if pci == "" {
		return ""
	}
	base := "/dev/disk/by-path/pci-" + pci
	switch d.Tran {
	case "virtio":
		if d.HCTL != "" { // virtio-scsi
			return base + "-scsi-" + d.HCTL
		}
		return base
	case "nvme":
		if mm := nvmeNSRe.FindStringSubmatch(name); mm != nil {
			return base + "-nvme-" + mm[1]
		}
	case "sata":
		if mm := ataRe.FindStringSubmatch(devPath); mm != nil && d.HCTL != "" {
			// udev numbers ATA ports from 1 and appends the PMP/device number.
			return base + "-ata-" + mm[1] + ".0"
		}
	case "scsi", "sas":
		if d.HCTL != "" && d.Tran == "scsi" {
			return base + "-scsi-" + d.HCTL
		}
	}
	return ""
}

// mountedDevices returns kernel names of block devices with a mounted filesystem.
func (m *Manager) mountedDevices() (map[string]bool, error) {
	out := map[string]bool{}
	if m.MountsFile == "" {
		return out, nil
	}
	f, err := os.Open(m.MountsFile)
	if errors.Is(err, fs.ErrNotExist) {
		return out, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read mounts %s: %w", m.MountsFile, err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 0 && strings.HasPrefix(fields[0], "/dev/") {
			src := fields[0]
			if r, err := filepath.EvalSymlinks(src); err == nil && m.DevRoot == "/dev" {
				src = r
			}
			out[filepath.Base(src)] = true
		}
	}
	return out, sc.Err()
}

func (m *Manager) isBootDevice(d *Disk, mounted map[string]bool) bool {
	names := map[string]bool{d.Name: true}
	for _, p := range d.Partitions {
		names[p] = true
	}
	for n := range names {
		if mounted[n] {
			return true
		}
	}
	for _, b := range m.BootDevices {
		if names[filepath.Base(b)] {
			return true
		}
	}
	return false
}

// parseWWID turns a sysfs wwid into udev's ID_WWN, ID_WWN_WITH_EXTENSION and
// ID_WWN_VENDOR_EXTENSION. NAA identifiers ("naa.5000c500a1b2c3d4", 16 or 32
// hex digits) become "0x…", split after 16 digits; other forms (eui., nvme.,
// t10.) are returned whole, lowercased, as WWN and WWNWithExtension.
func parseWWID(wwid string) (wwn, withExt, vendorExt string) {
	wwid = strings.ToLower(strings.TrimSpace(wwid))
	if wwid == "" {
		return "", "", ""
	}
	if hex, ok := strings.CutPrefix(wwid, "naa."); ok {
		if len(hex) > 16 {
			return "0x" + hex[:16], "0x" + hex, "0x" + hex[16:]
		}
		return "0x" + hex, "0x" + hex, ""
	}
	if strings.HasPrefix(wwid, "t10.") {
		// T10 vendor IDs are not WWNs; udev leaves ID_WWN unset for them.
		return "", "", ""
	}
	return wwid, wwid, ""
}

// vpdSerial reads the unit serial number from a binary VPD page 0x80:
// a 4-byte header whose bytes 2-3 are the length, then the ASCII serial.
func vpdSerial(path string) string {
	b, err := os.ReadFile(path)
	if err != nil || len(b) < 4 {
		return ""
	}
	n := int(b[2])<<8 | int(b[3])
	if 4+n > len(b) {
		n = len(b) - 4
	}
	return strings.TrimSpace(strings.Trim(string(b[4:4+n]), "\x00"))
}

func readString(dir, rel string) string {
	b, err := os.ReadFile(filepath.Join(dir, rel))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(strings.Trim(string(b), "\x00"))
}

func readInt(dir, rel string) (int64, error) {
	b, err := os.ReadFile(filepath.Join(dir, rel))
	if err != nil {
		return 0, err
	}
	v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("parse %s: %w", filepath.Join(dir, rel), err)
	}
	return v, nil
}

func firstNonEmpty(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}
