// Command hello is the /init of the harness's own boot test: it prints
// "hello" and the kernel command line to the console, then powers off, which
// ends QEMU with status 0.
package main

import (
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

func main() {
	fmt.Println("hello from booty vm harness")
	// /proc is not mounted in a bare initramfs; mount it to show the
	// command line the harness passed.
	if err := os.MkdirAll("/proc", 0o555); err == nil {
		if err := unix.Mount("proc", "/proc", "proc", 0, ""); err == nil {
			if b, err := os.ReadFile("/proc/cmdline"); err == nil {
				fmt.Println("cmdline: " + strings.TrimSpace(string(b)))
			}
		}
	}
	unix.Sync()
	if err := unix.Reboot(unix.LINUX_REBOOT_CMD_POWER_OFF); err != nil {
		fmt.Println("poweroff:", err)
	}
	select {}
}
