package disk

import (
	"bytes"
	"encoding/binary"
	"testing"
	"time"
	"unsafe"
)

func TestEncodeNVMePassthru(t *testing.T) {
	b := encodeNVMePassthru(&NVMeCommand{Opcode: 0x80, NSID: 1, CDW10: 0x200, CDW11: 7, CDW15: 9, Data: make([]byte, 4096), Timeout: 3 * time.Second}, 0x1122334455667788)
	want := make([]byte, 72)
	want[0] = 0x80
	binary.LittleEndian.PutUint32(want[4:], 1)
	binary.LittleEndian.PutUint64(want[24:], 0x1122334455667788)
	binary.LittleEndian.PutUint32(want[36:], 4096)
	binary.LittleEndian.PutUint32(want[40:], 0x200)
	binary.LittleEndian.PutUint32(want[44:], 7)
	binary.LittleEndian.PutUint32(want[60:], 9)
	binary.LittleEndian.PutUint32(want[64:], 3000)
	if !bytes.Equal(b[:], want) {
		t.Fatalf("passthru\n% x\nwant\n% x", b, want)
	}
}

func TestKernelStructSizes(t *testing.T) {
	if n := unsafe.Sizeof(blkpgPartition{}); n != 152 {
		t.Errorf("struct blkpg_partition is %d bytes, want 152", n)
	}
	if n := unsafe.Sizeof(sgIOHdr{}); unsafe.Sizeof(uintptr(0)) == 8 && n != 88 {
		t.Errorf("struct sg_io_hdr is %d bytes, want 88", n)
	}
	if ioctlNVMeAdminCmd != 3<<30|nvmePassthruLength<<16|'N'<<8|0x41 {
		t.Errorf("NVME_IOCTL_ADMIN_CMD = %#x", ioctlNVMeAdminCmd)
	}
}
