package disk

import (
	"encoding/binary"
	"fmt"
	"os"
	"runtime"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The real ioctls. They cannot run in unit tests (plain files answer
// ENOTTY, and the test host has no NVMe or SATA disk to erase); tests use
// fakes that check the command bytes, and the loop-device tests exercise
// BLKRRPART, BLKPG and BLKDISCARD.

const (
	ioctlBLKPG         = 0x1269
	ioctlSGIO          = 0x2285
	ioctlNVMeAdminCmd  = 0xc0484e41 // _IOWR('N', 0x41, struct nvme_passthru_cmd), 72 bytes
	nvmePassthruLength = 72
)

type fder interface{ Fd() uintptr }

// deviceSize asks the kernel for the size of the open block device (BLKGETSIZE64).
func deviceSize(f *os.File) (int64, error) {
	n, err := unix.IoctlGetUint64(int(f.Fd()), unix.BLKGETSIZE64)
	if err != nil {
		return 0, err
	}
	return int64(n), nil
}

func fdOf(f BlockDevice) (uintptr, error) {
	x, ok := f.(fder)
	if !ok {
		return 0, fmt.Errorf("device %T has no file descriptor: %w", f, unix.ENOTTY)
	}
	return x.Fd(), nil
}

func ioctl(fd, req, arg uintptr) (uintptr, error) {
	r, _, errno := unix.Syscall(unix.SYS_IOCTL, fd, req, arg)
	if errno != 0 {
		return r, errno
	}
	return r, nil
}

type linuxIoctl struct{}

func (linuxIoctl) RereadPartitions(f BlockDevice) error {
	fd, err := fdOf(f)
	if err != nil {
		return err
	}
	_, err = ioctl(fd, unix.BLKRRPART, 0)
	runtime.KeepAlive(f)
	return err
}

// blkpgPartition is struct blkpg_partition.
type blkpgPartition struct {
	Start, Length int64
	Pno           int32
	Devname       [64]byte
	Volname       [64]byte
}

func (linuxIoctl) Partition(f BlockDevice, op, num int, start, length int64) error {
	fd, err := fdOf(f)
	if err != nil {
		return err
	}
	p := blkpgPartition{Start: start, Length: length, Pno: int32(num)}
	arg := unix.BlkpgIoctlArg{Op: int32(op), Datalen: int32(unsafe.Sizeof(p)), Data: (*byte)(unsafe.Pointer(&p))}
	_, err = ioctl(fd, ioctlBLKPG, uintptr(unsafe.Pointer(&arg)))
	runtime.KeepAlive(&p)
	runtime.KeepAlive(f)
	return err
}

func (linuxIoctl) Discard(f BlockDevice, start, length int64) error {
	fd, err := fdOf(f)
	if err != nil {
		return err
	}
	r := [2]uint64{uint64(start), uint64(length)}
	_, err = ioctl(fd, unix.BLKDISCARD, uintptr(unsafe.Pointer(&r)))
	runtime.KeepAlive(f)
	return err
}

type linuxNVMe struct{}

// encodeNVMePassthru lays cmd out as struct nvme_passthru_cmd with the
// data buffer at addr: opcode 0, flags 1, nsid 4, cdw2 8, cdw3 12,
// metadata 16, addr 24, metadata_len 32, data_len 36, cdw10-15 40-60,
// timeout_ms 64, result 68.
func encodeNVMePassthru(cmd *NVMeCommand, addr uint64) [nvmePassthruLength]byte {
	var b [nvmePassthruLength]byte
	le := binary.LittleEndian
	b[0] = cmd.Opcode
	le.PutUint32(b[4:], cmd.NSID)
	le.PutUint64(b[24:], addr)
	le.PutUint32(b[36:], uint32(len(cmd.Data)))
	for i, v := range []uint32{cmd.CDW10, cmd.CDW11, cmd.CDW12, cmd.CDW13, cmd.CDW14, cmd.CDW15} {
		le.PutUint32(b[40+4*i:], v)
	}
	le.PutUint32(b[64:], uint32(cmd.Timeout/time.Millisecond))
	return b
}

func (linuxNVMe) AdminCommand(f BlockDevice, cmd *NVMeCommand) (uint32, error) {
	fd, err := fdOf(f)
	if err != nil {
		return 0, err
	}
	var pin runtime.Pinner
	defer pin.Unpin()
	var addr uint64
	if len(cmd.Data) > 0 {
		pin.Pin(&cmd.Data[0])
		addr = uint64(uintptr(unsafe.Pointer(&cmd.Data[0])))
	}
	b := encodeNVMePassthru(cmd, addr)
	status, err := ioctl(fd, ioctlNVMeAdminCmd, uintptr(unsafe.Pointer(&b[0])))
	runtime.KeepAlive(f)
	if err != nil {
		return 0, fmt.Errorf("nvme admin command 0x%02x: %w", cmd.Opcode, err)
	}
	if status != 0 {
		return 0, &NVMeStatusError{Opcode: cmd.Opcode, Status: uint32(status)}
	}
	return binary.LittleEndian.Uint32(b[68:]), nil
}

// sgIOHdr is struct sg_io_hdr (64-bit layout).
type sgIOHdr struct {
	InterfaceID    int32
	DxferDirection int32
	CmdLen         uint8
	MxSbLen        uint8
	IovecCount     uint16
	DxferLen       uint32
	Dxferp         unsafe.Pointer
	Cmdp           unsafe.Pointer
	Sbp            unsafe.Pointer
	Timeout        uint32
	Flags          uint32
	PackID         int32
	UsrPtr         unsafe.Pointer
	Status         uint8
	MaskedStatus   uint8
	MsgStatus      uint8
	SbLenWr        uint8
	HostStatus     uint16
	DriverStatus   uint16
	Resid          int32
	Duration       uint32
	Info           uint32
}

type linuxSGIO struct{}

func (linuxSGIO) SGIO(f BlockDevice, cdb []byte, dir int, data []byte, timeout time.Duration) error {
	fd, err := fdOf(f)
	if err != nil {
		return err
	}
	sense := make([]byte, 64)
	var pin runtime.Pinner
	defer pin.Unpin()
	pin.Pin(&cdb[0])
	pin.Pin(&sense[0])
	h := sgIOHdr{InterfaceID: 'S', DxferDirection: int32(dir), CmdLen: uint8(len(cdb)), MxSbLen: uint8(len(sense)),
		Cmdp: unsafe.Pointer(&cdb[0]), Sbp: unsafe.Pointer(&sense[0]), Timeout: uint32(timeout / time.Millisecond)}
	if len(data) > 0 {
		pin.Pin(&data[0])
		h.Dxferp, h.DxferLen = unsafe.Pointer(&data[0]), uint32(len(data))
	}
	if _, err := ioctl(fd, ioctlSGIO, uintptr(unsafe.Pointer(&h))); err != nil {
		return fmt.Errorf("SG_IO ATA command 0x%02x: %w", cdb[14], err)
	}
	runtime.KeepAlive(f)
	const driverSense = 0x08
	if h.Status != 0 || h.HostStatus != 0 || h.DriverStatus&^driverSense != 0 {
		return fmt.Errorf("SG_IO ATA command 0x%02x: scsi status 0x%02x host 0x%x driver 0x%x sense % x",
			cdb[14], h.Status, h.HostStatus, h.DriverStatus, sense[:h.SbLenWr])
	}
	return nil
}
