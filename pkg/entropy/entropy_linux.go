package entropy

import (
	"errors"

	"golang.org/x/sys/unix"
)

// kernelReady asks getrandom(2) for one byte without blocking: EAGAIN
// means the CRNG is not initialised yet; EINTR is asked again.
func kernelReady() (bool, error) {
	var b [1]byte
	for {
		_, err := unix.Getrandom(b[:], unix.GRND_NONBLOCK)
		switch {
		case err == nil:
			return true, nil
		case errors.Is(err, unix.EAGAIN):
			return false, nil
		case errors.Is(err, unix.EINTR):
			continue
		}
		return false, err
	}
}

// kernelKick leaves a goroutine blocked in getrandom(2): while a reader
// blocks, the kernel generates entropy from timer jitter
// (try_to_generate_entropy). The goroutine ends when the CRNG is ready.
func kernelKick() {
	go func() {
		var b [1]byte
		for {
			if _, err := unix.Getrandom(b[:], 0); !errors.Is(err, unix.EINTR) {
				return
			}
		}
	}()
}
