package bootloader

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"github.com/booty-dev/booty/pkg/guid"
	"github.com/booty-dev/booty/pkg/utf16text"
)

// Load option attributes (UEFI 2.10, 3.1.3).
const (
	LoadOptionActive         uint32 = 0x00000001
	LoadOptionForceReconnect uint32 = 0x00000002
	LoadOptionHidden         uint32 = 0x00000008
	LoadOptionCategoryApp    uint32 = 0x00000100
)

// Device path node types and subtypes this package builds or names
// (UEFI 2.10, 10.3).
const (
	devicePathTypeMedia     uint8 = 0x04
	devicePathTypeEnd       uint8 = 0x7f
	mediaSubTypeHardDrive   uint8 = 0x01
	mediaSubTypeFilePath    uint8 = 0x04
	mediaSubTypePIWGFile    uint8 = 0x06
	mediaSubTypePIWGVolume  uint8 = 0x07
	endSubTypeEntirePath    uint8 = 0xff
	hardDriveNodeLen              = 42
	hardDriveFormatGPT      uint8 = 0x02
	hardDriveSignatureGUID  uint8 = 0x02
	devicePathNodeHeaderLen       = 4
)

// ErrBadLoadOption is wrapped by every error about a malformed
// EFI_LOAD_OPTION or device path.
var ErrBadLoadOption = errors.New("malformed EFI load option")

// PartitionInfo locates a GPT partition the way a HARDDRIVE_MEDIA device path
// node does. StartLBA and SizeLBA count logical blocks of the disk;
// PartUUID is the partition's unique GUID as blkid prints PARTUUID.
type PartitionInfo struct {
	Number   uint32
	StartLBA uint64
	SizeLBA  uint64
	PartUUID string
}

// DevicePathNode is one node of a UEFI device path; Data excludes the
// 4-byte type/subtype/length header.
type DevicePathNode struct {
	Type    uint8
	SubType uint8
	Data    []byte
}

// DevicePath is a device path list as stored in a load option, including
// its END node(s).
type DevicePath []DevicePathNode

// LoadOption is a decoded EFI_LOAD_OPTION, the value of a Boot####
// variable. Num is the #### of the variable it was read from.
type LoadOption struct {
	Num          uint16
	Attributes   uint32
	Description  string
	FilePath     DevicePath
	OptionalData []byte
}

// Active reports whether LOAD_OPTION_ACTIVE is set.
func (o LoadOption) Active() bool { return o.Attributes&LoadOptionActive != 0 }

// Partition returns the first HARDDRIVE_MEDIA node of the option's device
// path, and false when there is none or it is not a GPT/GUID node.
func (o LoadOption) Partition() (PartitionInfo, bool) {
	for _, n := range o.FilePath {
		if p, ok := n.HardDrive(); ok {
			return p, true
		}
	}
	return PartitionInfo{}, false
}

// Loader returns the FILE_PATH media node's path ("\EFI\debian\shimx64.efi"),
// and false when the device path has none.
func (o LoadOption) Loader() (string, bool) {
	for _, n := range o.FilePath {
		if n.Type == devicePathTypeMedia && n.SubType == mediaSubTypeFilePath {
			return utf16text.Decode(n.Data, binary.LittleEndian), true
		}
	}
	return "", false
}

// HardDrive decodes a HARDDRIVE_MEDIA_DEVICE_PATH node with a GPT partition
// GUID signature; false for any other node.
func (n DevicePathNode) HardDrive() (PartitionInfo, bool) {
	if n.Type != devicePathTypeMedia || n.SubType != mediaSubTypeHardDrive ||
		len(n.Data) != hardDriveNodeLen-devicePathNodeHeaderLen {
		return PartitionInfo{}, false
	}
	d := n.Data
	if d[36] != hardDriveFormatGPT || d[37] != hardDriveSignatureGUID {
		return PartitionInfo{}, false
	}
	return PartitionInfo{
		Number:   binary.LittleEndian.Uint32(d[0:4]),
		StartLBA: binary.LittleEndian.Uint64(d[4:12]),
		SizeLBA:  binary.LittleEndian.Uint64(d[12:20]),
		PartUUID: guid.Format(d[20:36]),
	}, true
}

// String renders the node the way efibootmgr -v does for the node types
// this package knows, and as hex otherwise.
func (n DevicePathNode) String() string {
	switch {
	case n.Type == devicePathTypeEnd:
		return ""
	case n.Type == devicePathTypeMedia && n.SubType == mediaSubTypeFilePath:
		return "File(" + utf16text.Decode(n.Data, binary.LittleEndian) + ")"
	case n.Type == devicePathTypeMedia && n.SubType == mediaSubTypePIWGFile && len(n.Data) == 16:
		return "FvFile(" + guid.Format(n.Data) + ")"
	case n.Type == devicePathTypeMedia && n.SubType == mediaSubTypePIWGVolume && len(n.Data) == 16:
		return "FvVol(" + guid.Format(n.Data) + ")"
	}
	if p, ok := n.HardDrive(); ok {
		return fmt.Sprintf("HD(%d,GPT,%s,0x%x,0x%x)", p.Number, p.PartUUID, p.StartLBA, p.SizeLBA)
	}
	return fmt.Sprintf("Path(%d,%d,%s)", n.Type, n.SubType, hex.EncodeToString(n.Data))
}

// String joins the nodes with "/", leaving out END nodes.
func (p DevicePath) String() string {
	var parts []string
	for _, n := range p {
		if s := n.String(); s != "" {
			parts = append(parts, s)
		}
	}
	return strings.Join(parts, "/")
}

// MarshalBinary encodes the device path list, node after node, as stored
// in a load option. It appends an END_ENTIRE node when the path does not
// end with one.
func (p DevicePath) MarshalBinary() ([]byte, error) {
	var b bytes.Buffer
	for _, n := range p {
		l := devicePathNodeHeaderLen + len(n.Data)
		if l > 0xffff {
			return nil, fmt.Errorf("encode device path node %d/%d: %d bytes: %w", n.Type, n.SubType, l, ErrBadLoadOption)
		}
		b.Write([]byte{n.Type, n.SubType})
		binary.Write(&b, binary.LittleEndian, uint16(l))
		b.Write(n.Data)
	}
	if len(p) == 0 || p[len(p)-1].Type != devicePathTypeEnd || p[len(p)-1].SubType != endSubTypeEntirePath {
		b.Write([]byte{devicePathTypeEnd, endSubTypeEntirePath, devicePathNodeHeaderLen, 0})
	}
	return b.Bytes(), nil
}

// parseDevicePath decodes a device path list. It fails on a node whose
// length is shorter than its header or runs past the end of b.
func parseDevicePath(b []byte) (DevicePath, error) {
	var p DevicePath
	for len(b) > 0 {
		if len(b) < devicePathNodeHeaderLen {
			return nil, fmt.Errorf("parse device path: %d trailing bytes: %w", len(b), ErrBadLoadOption)
		}
		l := int(binary.LittleEndian.Uint16(b[2:4]))
		if l < devicePathNodeHeaderLen || l > len(b) {
			return nil, fmt.Errorf("parse device path node %d/%d: length %d with %d bytes left: %w", b[0], b[1], l, len(b), ErrBadLoadOption)
		}
		p = append(p, DevicePathNode{Type: b[0], SubType: b[1], Data: bytes.Clone(b[devicePathNodeHeaderLen:l])})
		b = b[l:]
	}
	return p, nil
}

// hardDriveNode builds a HARDDRIVE_MEDIA_DEVICE_PATH node for a GPT
// partition. It fails when PartUUID is not a GUID.
func hardDriveNode(p PartitionInfo) (DevicePathNode, error) {
	g, err := guid.Parse(p.PartUUID)
	if err != nil {
		return DevicePathNode{}, fmt.Errorf("encode partition %d: %w: %w", p.Number, err, ErrBadLoadOption)
	}
	d := make([]byte, hardDriveNodeLen-devicePathNodeHeaderLen)
	binary.LittleEndian.PutUint32(d[0:4], p.Number)
	binary.LittleEndian.PutUint64(d[4:12], p.StartLBA)
	binary.LittleEndian.PutUint64(d[12:20], p.SizeLBA)
	copy(d[20:36], g[:])
	d[36] = hardDriveFormatGPT
	d[37] = hardDriveSignatureGUID
	return DevicePathNode{Type: devicePathTypeMedia, SubType: mediaSubTypeHardDrive, Data: d}, nil
}

// filePathNode builds a FILE_PATH media node; forward slashes become
// backslashes and a leading backslash is added when missing.
func filePathNode(path string) DevicePathNode {
	return DevicePathNode{Type: devicePathTypeMedia, SubType: mediaSubTypeFilePath, Data: utf16text.EncodeLE(efiPath(path))}
}

// efiPath normalises a loader path to the form firmware expects:
// backslashes, one leading backslash.
func efiPath(p string) string {
	p = strings.ReplaceAll(p, "/", `\`)
	return `\` + strings.TrimLeft(p, `\`)
}

// MarshalBinary encodes the option as an EFI_LOAD_OPTION: attributes
// (u32 LE), FilePathListLength (u16 LE), NUL-terminated UTF-16LE
// description, the device path list, optional data.
func (o LoadOption) MarshalBinary() ([]byte, error) {
	fp, err := o.FilePath.MarshalBinary()
	if err != nil {
		return nil, err
	}
	if len(fp) > 0xffff {
		return nil, fmt.Errorf("encode load option %q: device path is %d bytes: %w", o.Description, len(fp), ErrBadLoadOption)
	}
	var b bytes.Buffer
	binary.Write(&b, binary.LittleEndian, o.Attributes)
	binary.Write(&b, binary.LittleEndian, uint16(len(fp)))
	b.Write(utf16text.EncodeLE(o.Description))
	b.Write(fp)
	b.Write(o.OptionalData)
	return b.Bytes(), nil
}

// ParseLoadOption decodes an EFI_LOAD_OPTION (a Boot#### variable's data
// without the 4 efivarfs attribute bytes). Num is left zero. It fails when
// the description is not terminated or the device path list is truncated
// or malformed.
func ParseLoadOption(b []byte) (LoadOption, error) {
	if len(b) < 6 {
		return LoadOption{}, fmt.Errorf("parse load option: %d bytes: %w", len(b), ErrBadLoadOption)
	}
	o := LoadOption{Attributes: binary.LittleEndian.Uint32(b[0:4])}
	fpLen := int(binary.LittleEndian.Uint16(b[4:6]))
	rest := b[6:]
	end := -1
	for i := 0; i+1 < len(rest); i += 2 {
		if rest[i] == 0 && rest[i+1] == 0 {
			end = i
			break
		}
	}
	if end < 0 {
		return LoadOption{}, fmt.Errorf("parse load option: description not NUL-terminated: %w", ErrBadLoadOption)
	}
	o.Description = utf16text.Decode(rest[:end+2], binary.LittleEndian)
	rest = rest[end+2:]
	if fpLen > len(rest) {
		return LoadOption{}, fmt.Errorf("parse load option %q: file path list length %d with %d bytes left: %w", o.Description, fpLen, len(rest), ErrBadLoadOption)
	}
	fp, err := parseDevicePath(rest[:fpLen])
	if err != nil {
		return LoadOption{}, fmt.Errorf("parse load option %q: %w", o.Description, err)
	}
	o.FilePath = fp
	if len(rest) > fpLen {
		o.OptionalData = bytes.Clone(rest[fpLen:])
	}
	return o, nil
}
