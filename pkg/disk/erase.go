package disk

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"time"
)

// Sentinels of secure erase.
var (
	// ErrSecureEraseUnsupported: the disk's transport or controller offers no secure erase booty can run.
	ErrSecureEraseUnsupported = errors.New("secure erase not supported")
	// ErrSecureEraseMultiNamespace: the NVMe erase would also erase other namespaces of the controller (disks nobody selected).
	ErrSecureEraseMultiNamespace = errors.New("secure erase would erase other namespaces")
	// ErrATAFrozen: the drive's security state is frozen (by firmware at boot); a suspend/resume or hot plug unfreezes it.
	ErrATAFrozen = errors.New("ATA security is frozen")
	// ErrATASecurityEnabled: the drive already has a user password or is locked; booty does not know it.
	ErrATASecurityEnabled = errors.New("ATA security is already enabled or locked")
)

// NVMeCommand is one NVMe admin command, the fields of the kernel's
// struct nvme_passthru_cmd that booty sets. Data is the buffer the command
// reads from or writes to (its address and length go into the command).
type NVMeCommand struct {
	Opcode                                   uint8
	NSID                                     uint32
	CDW10, CDW11, CDW12, CDW13, CDW14, CDW15 uint32
	Data                                     []byte
	Timeout                                  time.Duration
}

// NVMe admin opcodes and values used for secure erase.
const (
	nvmeOpGetLogPage = 0x02
	nvmeOpIdentify   = 0x06
	nvmeOpFormat     = 0x80
	nvmeOpSanitize   = 0x84

	nvmeLogSanitize = 0x81
)

// NVMeAdmin sends an NVMe admin command (NVME_IOCTL_ADMIN_CMD) and returns
// the completion's result dword. A command the controller completed with
// an error status returns an *NVMeStatusError.
type NVMeAdmin interface {
	AdminCommand(f BlockDevice, cmd *NVMeCommand) (result uint32, err error)
}

// NVMeStatusError is a non-zero NVMe completion status.
type NVMeStatusError struct {
	Opcode uint8
	Status uint32
}

func (e *NVMeStatusError) Error() string {
	return fmt.Sprintf("nvme admin command 0x%02x: status 0x%x", e.Opcode, e.Status)
}

// SG_IO data directions, as in <scsi/sg.h>.
const (
	SGDxferNone    = -1
	SGDxferToDev   = -2
	SGDxferFromDev = -3
)

// ATAPassthrough sends a SCSI command block (here ATA PASS-THROUGH(16))
// through SG_IO with data in the given direction; an error includes the
// SCSI status and sense data.
type ATAPassthrough interface {
	SGIO(f BlockDevice, cdb []byte, dir int, data []byte, timeout time.Duration) error
}

// ATA commands and ATA PASS-THROUGH protocols used for security erase.
const (
	ataIdentify             = 0xec
	ataSecuritySetPassword  = 0xf1
	ataSecurityErasePrepare = 0xf3
	ataSecurityEraseUnit    = 0xf4
	ataSecurityDisablePass  = 0xf6

	ataProtoNonData = 3
	ataProtoPIOIn   = 4
	ataProtoPIOOut  = 5
)

// ataCDB builds an ATA PASS-THROUGH(16) CDB (SAT-4 §12.2.2) for a 28-bit
// command moving one 512-byte block (PIO) or none.
func ataCDB(proto int, command byte) []byte {
	cdb := make([]byte, 16)
	cdb[0] = 0x85
	cdb[1] = byte(proto << 1)
	switch proto {
	case ataProtoPIOIn:
		cdb[2] = 0x0e // T_DIR from device, BYT_BLOK blocks, T_LENGTH in the count field
		cdb[6] = 1
	case ataProtoPIOOut:
		cdb[2] = 0x06
		cdb[6] = 1
	}
	cdb[14] = command
	return cdb
}

const (
	defaultSecureEraseTimeout = 12 * time.Hour
	defaultATAPassword        = "booty"
	sanitizePoll              = 5 * time.Second
)

// secureErase runs the disk's secure erase: NVMe Sanitize or Format NVM
// for nvme, ATA SECURITY ERASE UNIT for sata. It returns the method used.
func (m *Manager) secureErase(ctx context.Context, f BlockDevice, d Disk, opts WipeOptions) (string, error) {
	timeout := opts.SecureEraseTimeout
	if timeout <= 0 {
		timeout = defaultSecureEraseTimeout
	}
	switch d.Tran {
	case "nvme":
		if m.NVMe == nil {
			return "", fmt.Errorf("secure erase %s: no NVMe admin interface: %w", d.Path, ErrSecureEraseUnsupported)
		}
		return m.nvmeErase(ctx, f, d, timeout)
	case "sata":
		if m.ATA == nil {
			return "", fmt.Errorf("secure erase %s: no SG_IO interface: %w", d.Path, ErrSecureEraseUnsupported)
		}
		return m.ataErase(f, d, opts.ATAPassword, timeout)
	}
	return "", fmt.Errorf("secure erase %s: transport %q: %w", d.Path, d.Tran, ErrSecureEraseUnsupported)
}

// nvmeErase reads Identify Controller; when SANICAP offers a sanitize
// action it starts Sanitize (crypto erase, else block erase, else one
// overwrite pass; this erases every namespace of the controller) and polls
// the Sanitize Status log page every 5 s until it completes, fails or the
// timeout passes. Otherwise, when OACS says Format NVM is supported, it
// formats the namespace with SES=1 (user data erase), keeping its LBA
// format, metadata and protection settings from Identify Namespace.
func (m *Manager) nvmeErase(ctx context.Context, f BlockDevice, d Disk, timeout time.Duration) (string, error) {
	ctrl := make([]byte, 4096)
	if _, err := m.NVMe.AdminCommand(f, &NVMeCommand{Opcode: nvmeOpIdentify, CDW10: 1, Data: ctrl, Timeout: 10 * time.Second}); err != nil {
		return "", fmt.Errorf("secure erase %s: identify controller: %w", d.Path, err)
	}
	le := binary.LittleEndian
	oacs := le.Uint16(ctrl[256:])
	sanicap := le.Uint32(ctrl[328:])
	fna := ctrl[524]
	mm := nvmeNSRe.FindStringSubmatch(d.Name)
	if mm == nil {
		return "", fmt.Errorf("secure erase %s: no namespace id in name %q: %w", d.Path, d.Name, ErrSecureEraseUnsupported)
	}
	nsid64, _ := strconv.ParseUint(mm[1], 10, 32)
	nsid := uint32(nsid64)
	// Sanitize always erases every namespace of the controller, and Format
	// NVM does when FNA says so: only the selected disk may be erased, so
	// refuse unless its namespace is the controller's only active one.
	others, err := m.otherNamespaces(f, nsid)
	if err != nil {
		return "", fmt.Errorf("secure erase %s: list active namespaces: %w", d.Path, err)
	}
	allNS := sanicap&0x7 != 0 || fna&0x3 != 0
	if len(others) > 0 && allNS {
		what := "sanitize"
		if sanicap&0x7 == 0 {
			what = "format (FNA: applies to all namespaces)"
		}
		return "", fmt.Errorf("secure erase %s: the controller also has namespaces %v and its %s would erase them too; nothing erased: %w",
			d.Path, others, what, ErrSecureEraseMultiNamespace)
	}
	if sanicap&0x7 != 0 {
		sanact, method := uint32(3), "nvme-sanitize-overwrite"
		switch {
		case sanicap&0x1 != 0:
			sanact, method = 4, "nvme-sanitize-crypto-erase"
		case sanicap&0x2 != 0:
			sanact, method = 2, "nvme-sanitize-block-erase"
		}
		cdw10 := sanact
		if sanact == 3 {
			cdw10 |= 1 << 4 // one overwrite pass
		}
		if _, err := m.NVMe.AdminCommand(f, &NVMeCommand{Opcode: nvmeOpSanitize, CDW10: cdw10, Timeout: 30 * time.Second}); err != nil {
			return method, fmt.Errorf("secure erase %s: start sanitize: %w", d.Path, err)
		}
		deadline := time.Now().Add(timeout)
		for {
			log := make([]byte, 512)
			_, err := m.NVMe.AdminCommand(f, &NVMeCommand{Opcode: nvmeOpGetLogPage, NSID: 0xffffffff,
				CDW10: (uint32(len(log)/4-1) << 16) | nvmeLogSanitize, Data: log, Timeout: 10 * time.Second})
			if err != nil {
				return method, fmt.Errorf("secure erase %s: read sanitize status: %w", d.Path, err)
			}
			switch le.Uint16(log[2:]) & 0x7 {
			case 1, 4: // completed (4: without deallocation)
				return method, nil
			case 3:
				return method, fmt.Errorf("secure erase %s: sanitize failed (status log 0x%04x)", d.Path, le.Uint16(log[2:]))
			}
			if err := ctx.Err(); err != nil {
				return method, fmt.Errorf("secure erase %s: wait for sanitize: %w", d.Path, err)
			}
			if time.Now().After(deadline) {
				return method, fmt.Errorf("secure erase %s: sanitize not done after %s (progress %d/65536)", d.Path, timeout, le.Uint16(log[0:]))
			}
			m.sleep(sanitizePoll)
		}
	}
	if oacs&0x2 == 0 {
		return "", fmt.Errorf("secure erase %s: controller supports neither sanitize nor format: %w", d.Path, ErrSecureEraseUnsupported)
	}
	ns := make([]byte, 4096)
	if _, err := m.NVMe.AdminCommand(f, &NVMeCommand{Opcode: nvmeOpIdentify, NSID: nsid, CDW10: 0, Data: ns, Timeout: 10 * time.Second}); err != nil {
		return "", fmt.Errorf("secure erase %s: identify namespace %d: %w", d.Path, nsid, err)
	}
	flbas, dps := uint32(ns[26]), uint32(ns[29])
	cdw10 := flbas&0xf | // LBA format, low bits
		flbas&0x10 | // metadata settings (MSET)
		(dps&0x7)<<5 | // protection information
		(dps>>3&1)<<8 | // protection information location
		1<<9 | // SES=1: user data erase
		(flbas>>5&0x3)<<12 // LBA format, high bits
	method := "nvme-format-user-data-erase"
	if _, err := m.NVMe.AdminCommand(f, &NVMeCommand{Opcode: nvmeOpFormat, NSID: nsid, CDW10: cdw10, Timeout: timeout}); err != nil {
		return method, fmt.Errorf("secure erase %s: format namespace %d: %w", d.Path, nsid, err)
	}
	return method, nil
}

// otherNamespaces returns the controller's active namespace IDs other than
// nsid (Identify CNS 02h, the active namespace ID list).
func (m *Manager) otherNamespaces(f BlockDevice, nsid uint32) ([]uint32, error) {
	list := make([]byte, 4096)
	if _, err := m.NVMe.AdminCommand(f, &NVMeCommand{Opcode: nvmeOpIdentify, NSID: 0, CDW10: 2, Data: list, Timeout: 10 * time.Second}); err != nil {
		return nil, err
	}
	var others []uint32
	for i := 0; i+4 <= len(list); i += 4 {
		id := binary.LittleEndian.Uint32(list[i:])
		if id == 0 {
			break
		}
		if id != nsid {
			others = append(others, id)
		}
	}
	return others, nil
}

// ataErase runs the ATA security erase: IDENTIFY DEVICE (security feature
// supported, not frozen, not enabled or locked), SECURITY SET PASSWORD
// (user, high), SECURITY ERASE PREPARE, SECURITY ERASE UNIT (enhanced when
// supported) with a timeout from the drive's own estimate. When the erase
// command fails it tries SECURITY DISABLE PASSWORD so the drive is not left
// with a password; a successful erase clears the password itself.
func (m *Manager) ataErase(f BlockDevice, d Disk, password string, timeout time.Duration) (string, error) {
	if password == "" {
		password = defaultATAPassword
	}
	id := make([]byte, 512)
	if err := m.ATA.SGIO(f, ataCDB(ataProtoPIOIn, ataIdentify), SGDxferFromDev, id, 10*time.Second); err != nil {
		return "", fmt.Errorf("secure erase %s: identify device: %w", d.Path, err)
	}
	word := func(n int) uint16 { return binary.LittleEndian.Uint16(id[2*n:]) }
	sec := word(128)
	switch {
	case word(82)&0x2 == 0 || sec&0x1 == 0:
		return "", fmt.Errorf("secure erase %s: no ATA security feature set: %w", d.Path, ErrSecureEraseUnsupported)
	case sec&0x8 != 0:
		return "", fmt.Errorf("secure erase %s: %w", d.Path, ErrATAFrozen)
	case sec&0x6 != 0:
		return "", fmt.Errorf("secure erase %s: security word 0x%04x: %w", d.Path, sec, ErrATASecurityEnabled)
	}
	enhanced := sec&0x20 != 0
	est := word(89)
	method := "ata-security-erase"
	if enhanced {
		est, method = word(90), "ata-enhanced-security-erase"
	}
	// Time in 2-minute units: bits 14:0 in the extended format (bit 15), else bits 7:0.
	units := int64(est & 0xff)
	if est&0x8000 != 0 {
		units = int64(est & 0x7fff)
	}
	if units > 0 && (est&0x8000 != 0 || units < 255) {
		timeout = min(timeout, time.Duration(units)*2*time.Minute*3/2+10*time.Minute)
	}

	pw := func(ctl uint16) []byte {
		b := make([]byte, 512)
		binary.LittleEndian.PutUint16(b, ctl)
		copy(b[2:34], password)
		return b
	}
	if err := m.ATA.SGIO(f, ataCDB(ataProtoPIOOut, ataSecuritySetPassword), SGDxferToDev, pw(0), 30*time.Second); err != nil {
		return method, fmt.Errorf("secure erase %s: set password: %w", d.Path, err)
	}
	erase := func() error {
		if err := m.ATA.SGIO(f, ataCDB(ataProtoNonData, ataSecurityErasePrepare), SGDxferNone, nil, 30*time.Second); err != nil {
			return fmt.Errorf("erase prepare: %w", err)
		}
		ctl := uint16(0)
		if enhanced {
			ctl |= 0x2
		}
		if err := m.ATA.SGIO(f, ataCDB(ataProtoPIOOut, ataSecurityEraseUnit), SGDxferToDev, pw(ctl), timeout); err != nil {
			return fmt.Errorf("erase unit: %w", err)
		}
		return nil
	}
	if err := erase(); err != nil {
		if derr := m.ATA.SGIO(f, ataCDB(ataProtoPIOOut, ataSecurityDisablePass), SGDxferToDev, pw(0), 30*time.Second); derr != nil {
			err = errors.Join(err, fmt.Errorf("disable the temporary password afterwards: %w", derr))
		}
		return method, fmt.Errorf("secure erase %s: %w", d.Path, err)
	}
	return method, nil
}
