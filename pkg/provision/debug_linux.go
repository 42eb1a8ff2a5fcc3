package provision

import "golang.org/x/sys/unix"

// readKernelLog reads the kernel ring buffer (what dmesg prints).
func readKernelLog() ([]byte, error) {
	n, err := unix.Klogctl(unix.SYSLOG_ACTION_SIZE_BUFFER, nil)
	if err != nil {
		return nil, err
	}
	if n <= 0 {
		n = 1 << 20
	}
	buf := make([]byte, n)
	m, err := unix.Klogctl(unix.SYSLOG_ACTION_READ_ALL, buf)
	if err != nil {
		return nil, err
	}
	return buf[:m], nil
}
