//go:build !linux

package disk

import (
	"errors"
	"os"
	"time"
)

// errNoIoctl: block-device ioctls exist on Linux only.
var errNoIoctl = errors.New("block device ioctls are only available on linux")

type linuxIoctl struct{}

func (linuxIoctl) RereadPartitions(BlockDevice) error                  { return errNoIoctl }
func (linuxIoctl) Partition(BlockDevice, int, int, int64, int64) error { return errNoIoctl }
func (linuxIoctl) Discard(BlockDevice, int64, int64) error             { return errNoIoctl }

type linuxNVMe struct{}

func (linuxNVMe) AdminCommand(BlockDevice, *NVMeCommand) (uint32, error) { return 0, errNoIoctl }

type linuxSGIO struct{}

func (linuxSGIO) SGIO(BlockDevice, []byte, int, []byte, time.Duration) error { return errNoIoctl }

func deviceSize(*os.File) (int64, error) { return 0, errNoIoctl }
