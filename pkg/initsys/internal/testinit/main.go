// Command testinit is a throwaway /init for the initsys e2e test: it brings
// the machine up with initsys.Bringup, prints the modules it loaded and the
// block and network devices it sees, each on a line starting with
// "TESTINIT ", then powers off through System.Handoff.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/booty-dev/booty/pkg/initsys"
	"golang.org/x/sys/unix"
)

func main() {
	if filepath.Base(os.Args[0]) == "modprobe" {
		// The kernel's on-demand module helper, as booty is.
		kmsg, err := os.OpenFile("/dev/kmsg", os.O_WRONLY, 0)
		if err != nil {
			kmsg = os.Stderr
		}
		os.Exit(initsys.Modprobe(os.Args[1:], kmsg))
	}
	defer initsys.RecoverAndReboot(nil, false, 2*time.Second)
	start := time.Now()
	sys, err := initsys.Bringup(initsys.Options{})
	if err != nil {
		panic(fmt.Sprintf("bringup: %v", err))
	}
	out := sys.Console
	fmt.Fprintf(out, "TESTINIT bringup %s\n", time.Since(start).Round(time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	if err := sys.WaitColdplug(ctx); err != nil {
		fmt.Fprintf(out, "TESTINIT coldplug not done: %v\n", err)
	}
	cancel()
	fmt.Fprintf(out, "TESTINIT coldplug %s\n", time.Since(start).Round(time.Millisecond))
	loaded, _ := sys.LoadedModules()
	for _, m := range loaded {
		fmt.Fprintf(out, "TESTINIT module %s\n", m)
	}
	// ext4 is not loaded at boot: a mount of it makes the kernel ask its
	// modprobe (this binary, /sbin/modprobe) for fs-ext4. The disk holds no
	// filesystem, so the mount itself fails after the module loaded.
	if err := os.MkdirAll("/run/testmnt", 0o755); err == nil {
		_ = unix.Mount("/dev/vda", "/run/testmnt", "ext4", unix.MS_RDONLY, "")
		if _, err := os.Stat("/sys/module/ext4"); err == nil {
			fmt.Fprintf(out, "TESTINIT ondemand ext4\n")
		}
	}
	list(out, "block", "/sys/class/block")
	list(out, "net", "/sys/class/net")
	if b, err := os.ReadFile("/proc/uptime"); err == nil {
		fmt.Fprintf(out, "TESTINIT uptime %s\n", strings.Fields(string(b))[0])
	}
	fmt.Fprintf(out, "TESTINIT done\n")
	if err := sys.Handoff(initsys.Handoff{Action: initsys.Poweroff}); err != nil {
		panic(fmt.Sprintf("handoff: %v", err))
	}
}

func list(out io.Writer, kind, dir string) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		fmt.Fprintf(out, "TESTINIT %s error %v\n", kind, err)
		return
	}
	for _, e := range entries {
		fmt.Fprintf(out, "TESTINIT %s %s\n", kind, e.Name())
	}
}
