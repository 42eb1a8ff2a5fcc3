package health

import (
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"strings"
	"time"

	"github.com/booty-dev/booty/pkg/disk"
)

// NVMe Get Log Page for the SMART / Health Information log (NVMe base
// specification, log identifier 02h): 512 bytes, controller-wide (NSID
// FFFFFFFFh).
const (
	nvmeOpGetLogPage = 0x02
	nvmeLogSMART     = 0x02
	nvmeSMARTLogSize = 512
)

// NVMeSMART is the part of the SMART / Health Information log page that
// the disk check judges.
type NVMeSMART struct {
	// CriticalWarning bits: 0 spare below threshold, 1 temperature, 2
	// reliability degraded, 3 read-only, 4 volatile memory backup failed,
	// 5 persistent memory region read-only.
	CriticalWarning    uint8
	TemperatureCelsius int64
	AvailableSpare     uint8
	SpareThreshold     uint8
	PercentageUsed     uint8
	PowerOnHours       uint64
	UnsafeShutdowns    uint64
	MediaErrors        uint64
	ErrorLogEntries    uint64
}

// ParseNVMeSMART decodes the log page as the controller returns it: byte 0
// critical warning, 1-2 composite temperature in kelvin, 3 available
// spare, 4 its threshold, 5 percentage used, 16-byte little-endian
// counters at 128 (power-on hours), 144 (unsafe shutdowns), 160 (media and
// data integrity errors) and 176 (error log entries), saturated to 64 bits.
func ParseNVMeSMART(b []byte) (NVMeSMART, error) {
	if len(b) < nvmeSMARTLogSize {
		return NVMeSMART{}, fmt.Errorf("nvme smart log: %d bytes, want %d", len(b), nvmeSMARTLogSize)
	}
	le := binary.LittleEndian
	u128 := func(off int) uint64 {
		if le.Uint64(b[off+8:]) != 0 {
			return math.MaxUint64
		}
		return le.Uint64(b[off:])
	}
	return NVMeSMART{
		CriticalWarning:    b[0],
		TemperatureCelsius: int64(le.Uint16(b[1:])) - 273,
		AvailableSpare:     b[3],
		SpareThreshold:     b[4],
		PercentageUsed:     b[5],
		PowerOnHours:       u128(128),
		UnsafeShutdowns:    u128(144),
		MediaErrors:        u128(160),
		ErrorLogEntries:    u128(176),
	}, nil
}

var criticalWarningBits = []string{"available spare below threshold", "temperature outside its thresholds",
	"reliability degraded", "media read-only", "volatile memory backup failed", "persistent memory region read-only"}

func describeCriticalWarning(w uint8) string {
	var out []string
	for i, s := range criticalWarningBits {
		if w&(1<<i) != 0 {
			out = append(out, s)
		}
	}
	return strings.Join(out, ", ")
}

// checkDisk judges one disk by its transport: NVMe by its SMART log page,
// SATA by ATA SMART; other transports (virtio, USB, SAS, MMC) have no
// health data booty reads and pass, saying so.
func (c *Checker) checkDisk(d disk.Disk, o Options) CheckResult {
	r := CheckResult{Name: KindDisk + ":" + d.Name}
	switch d.Tran {
	case "nvme":
		return c.checkNVMe(d, o)
	case "sata":
		return c.checkATA(d)
	}
	tran := d.Tran
	if tran == "" {
		tran = "unknown"
	}
	r.Status, r.Message = StatusPass, fmt.Sprintf("not checked: transport %s has no health log booty reads", tran)
	return r
}

func (c *Checker) open(d disk.Disk) (disk.BlockDevice, error) {
	if c.Open == nil {
		return (&disk.Manager{}).OpenDisk(d.Path, os.O_RDONLY)
	}
	return c.Open(d.Path, os.O_RDONLY)
}

func (c *Checker) timeout() time.Duration {
	if c.CommandTimeout > 0 {
		return c.CommandTimeout
	}
	return 10 * time.Second
}

// checkNVMe reads the SMART / Health log and fails on a critical warning,
// a percentage used above MaxPercentageUsed, or more media errors than
// MaxMediaErrors; fewer media errors warn.
func (c *Checker) checkNVMe(d disk.Disk, o Options) CheckResult {
	r := CheckResult{Name: KindDisk + ":" + d.Name}
	if c.NVMe == nil {
		r.Status, r.Message = StatusWarn, "cannot read the NVMe SMART log: no NVMe admin interface"
		return r
	}
	f, err := c.open(d)
	if err != nil {
		r.Status, r.Message = StatusWarn, fmt.Sprintf("cannot read the NVMe SMART log: %v", err)
		return r
	}
	defer f.Close()
	log := make([]byte, nvmeSMARTLogSize)
	_, err = c.NVMe.AdminCommand(f, &disk.NVMeCommand{Opcode: nvmeOpGetLogPage, NSID: 0xffffffff,
		CDW10: uint32(nvmeSMARTLogSize/4-1)<<16 | nvmeLogSMART, Data: log, Timeout: c.timeout()})
	if err != nil {
		r.Status, r.Message = StatusWarn, fmt.Sprintf("cannot read the NVMe SMART log of %s: %v", d.Path, err)
		return r
	}
	s, err := ParseNVMeSMART(log)
	if err != nil {
		r.Status, r.Message = StatusWarn, err.Error()
		return r
	}
	maxUsed := o.MaxPercentageUsed
	if maxUsed <= 0 {
		maxUsed = DefaultMaxPercentageUsed
	}
	r.Figures = map[string]int64{
		"criticalWarning": int64(s.CriticalWarning), "percentageUsed": int64(s.PercentageUsed),
		"maxPercentageUsed": int64(maxUsed), "mediaErrors": sat(s.MediaErrors), "maxMediaErrors": o.MaxMediaErrors,
		"availableSpare": int64(s.AvailableSpare), "availableSpareThreshold": int64(s.SpareThreshold),
		"temperatureCelsius": s.TemperatureCelsius, "powerOnHours": sat(s.PowerOnHours),
	}
	var fails []string
	if s.CriticalWarning != 0 {
		fails = append(fails, fmt.Sprintf("critical warning 0x%02x: %s", s.CriticalWarning, describeCriticalWarning(s.CriticalWarning)))
	}
	if int(s.PercentageUsed) > maxUsed {
		fails = append(fails, fmt.Sprintf("%d%% of its rated endurance used, at most %d%% allowed", s.PercentageUsed, maxUsed))
	}
	if sat(s.MediaErrors) > o.MaxMediaErrors {
		fails = append(fails, fmt.Sprintf("%d media errors, at most %d allowed", s.MediaErrors, o.MaxMediaErrors))
	}
	switch {
	case len(fails) > 0:
		r.Status, r.Message = StatusFail, strings.Join(fails, "; ")
	case s.MediaErrors > 0:
		r.Status, r.Message = StatusWarn, fmt.Sprintf("%d media errors (at most %d allowed); %d%% used", s.MediaErrors, o.MaxMediaErrors, s.PercentageUsed)
	default:
		r.Status, r.Message = StatusPass, fmt.Sprintf("%d%% used, %d%% spare, no media errors, %d°C", s.PercentageUsed, s.AvailableSpare, s.TemperatureCelsius)
	}
	return r
}

func sat(v uint64) int64 {
	if v > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(v)
}

// ATA commands of the SMART feature set (ACS-3 §7.48), sent through ATA
// PASS-THROUGH(16) (SAT-4 §12.2.2).
const (
	ataIdentify          = 0xec
	ataSMART             = 0xb0
	smartReadData        = 0xd0
	smartReadThresholds  = 0xd1
	ataProtoPIOIn        = 4
	ataSMARTLBAMid       = 0x4f
	ataSMARTLBAHigh      = 0xc2
	smartAttributeCount  = 30
	smartAttributeLength = 12
)

// ataReadCDB builds an ATA PASS-THROUGH(16) CDB for a PIO data-in command
// reading one 512-byte block: protocol 4, T_DIR from device, BYT_BLOK,
// T_LENGTH in the count field; SMART commands carry their subcommand in
// the features register and the 0x4f/0xc2 signature in LBA mid/high.
func ataReadCDB(command, features byte) []byte {
	cdb := make([]byte, 16)
	cdb[0] = 0x85
	cdb[1] = ataProtoPIOIn << 1
	cdb[2] = 0x0e
	cdb[4] = features
	cdb[6] = 1
	if command == ataSMART {
		cdb[10], cdb[12] = ataSMARTLBAMid, ataSMARTLBAHigh
	}
	cdb[14] = command
	return cdb
}

// SMARTAttribute is one vendor attribute with its threshold.
type SMARTAttribute struct {
	ID        uint8
	Prefail   bool
	Value     uint8
	Worst     uint8
	Threshold uint8
	Raw       uint64
}

// ParseATASMART pairs the attributes of a SMART READ DATA block (30
// entries of 12 bytes from byte 2: id, flags, value, worst, 48-bit raw)
// with the thresholds of a SMART READ THRESHOLDS block (30 entries of 12
// bytes from byte 2: id, threshold). Empty slots (id 0) are left out.
func ParseATASMART(data, thresholds []byte) ([]SMARTAttribute, error) {
	if len(data) < 512 || len(thresholds) < 512 {
		return nil, fmt.Errorf("ata smart: %d and %d bytes, want 512 each", len(data), len(thresholds))
	}
	th := map[uint8]uint8{}
	for i := 0; i < smartAttributeCount; i++ {
		e := thresholds[2+i*smartAttributeLength:]
		if e[0] != 0 {
			th[e[0]] = e[1]
		}
	}
	var out []SMARTAttribute
	for i := 0; i < smartAttributeCount; i++ {
		e := data[2+i*smartAttributeLength:]
		if e[0] == 0 {
			continue
		}
		var raw [8]byte
		copy(raw[:6], e[5:11])
		out = append(out, SMARTAttribute{ID: e[0], Prefail: e[1]&1 != 0, Value: e[3], Worst: e[4],
			Threshold: th[e[0]], Raw: binary.LittleEndian.Uint64(raw[:])})
	}
	return out, nil
}

var smartNames = map[uint8]string{5: "reallocated sectors", 9: "power-on hours", 187: "reported uncorrectable",
	194: "temperature", 197: "pending sectors", 198: "offline uncorrectable"}

func smartName(id uint8) string {
	if n, ok := smartNames[id]; ok {
		return fmt.Sprintf("%d (%s)", id, n)
	}
	return fmt.Sprint(id)
}

// checkATA reads IDENTIFY DEVICE (word 82 bit 0: SMART supported, word 85
// bit 0: enabled), then SMART READ DATA and READ THRESHOLDS. A pre-failure
// attribute at or below its threshold fails the disk (the drive's own
// "failing" verdict); an old-age one, or pending or offline-uncorrectable
// sectors, warn. A drive without SMART passes, saying so; one with SMART
// disabled warns.
func (c *Checker) checkATA(d disk.Disk) CheckResult {
	r := CheckResult{Name: KindDisk + ":" + d.Name}
	if c.ATA == nil {
		r.Status, r.Message = StatusWarn, "cannot read ATA SMART: no SG_IO interface"
		return r
	}
	f, err := c.open(d)
	if err != nil {
		r.Status, r.Message = StatusWarn, fmt.Sprintf("cannot read ATA SMART: %v", err)
		return r
	}
	defer f.Close()
	read := func(what string, command, features byte) ([]byte, error) {
		b := make([]byte, 512)
		if err := c.ATA.SGIO(f, ataReadCDB(command, features), disk.SGDxferFromDev, b, c.timeout()); err != nil {
			return nil, fmt.Errorf("%s of %s: %w", what, d.Path, err)
		}
		return b, nil
	}
	id, err := read("identify device", ataIdentify, 0)
	if err != nil {
		r.Status, r.Message = StatusWarn, "cannot read ATA SMART: "+err.Error()
		return r
	}
	word := func(n int) uint16 { return binary.LittleEndian.Uint16(id[2*n:]) }
	switch {
	case word(82)&1 == 0:
		r.Status, r.Message = StatusPass, "not checked: the drive has no SMART"
		return r
	case word(85)&1 == 0:
		r.Status, r.Message = StatusWarn, "SMART is disabled on the drive"
		return r
	}
	data, err := read("smart read data", ataSMART, smartReadData)
	if err != nil {
		r.Status, r.Message = StatusWarn, "cannot read ATA SMART: "+err.Error()
		return r
	}
	thr, err := read("smart read thresholds", ataSMART, smartReadThresholds)
	if err != nil {
		r.Status, r.Message = StatusWarn, "cannot read ATA SMART: "+err.Error()
		return r
	}
	attrs, err := ParseATASMART(data, thr)
	if err != nil {
		r.Status, r.Message = StatusWarn, err.Error()
		return r
	}
	r.Figures = map[string]int64{"attributes": int64(len(attrs))}
	figure := map[uint8]string{5: "reallocatedSectors", 9: "powerOnHours", 194: "temperatureCelsius", 197: "pendingSectors", 198: "offlineUncorrectable"}
	var fails, warns []string
	for _, a := range attrs {
		if k, ok := figure[a.ID]; ok {
			v := int64(a.Raw)
			if a.ID == 194 {
				v = int64(a.Raw & 0xff)
			}
			r.Figures[k] = v
		}
		if a.Threshold != 0 && a.Threshold != 0xfe && a.Value <= a.Threshold {
			msg := fmt.Sprintf("attribute %s value %d at or below threshold %d", smartName(a.ID), a.Value, a.Threshold)
			if a.Prefail {
				fails = append(fails, msg)
			} else {
				warns = append(warns, msg+" (old-age)")
			}
		}
		if (a.ID == 197 || a.ID == 198) && a.Raw > 0 {
			warns = append(warns, fmt.Sprintf("%d %s", a.Raw, smartNames[a.ID]))
		}
	}
	switch {
	case len(fails) > 0:
		r.Status, r.Message = StatusFail, "SMART says the drive is failing: "+strings.Join(fails, "; ")
	case len(warns) > 0:
		r.Status, r.Message = StatusWarn, strings.Join(warns, "; ")
	default:
		r.Status, r.Message = StatusPass, fmt.Sprintf("SMART: %d attributes within their thresholds", len(attrs))
	}
	return r
}
