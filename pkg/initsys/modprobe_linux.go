package initsys

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/booty-dev/booty/pkg/initsys/kmod"
)

// ModprobePath is where the initramfs links booty as modprobe, and what
// Bringup writes to /proc/sys/kernel/modprobe: the kernel runs it to load
// a module it needs on demand (request_module) — a filesystem at mount
// (fs-xfs), a code page (nls_cp437), a bond or VLAN link (rtnl-link-bond),
// a socket family — so those modules are not loaded at every boot.
const ModprobePath = "/sbin/modprobe"

// Modprobe is booty started as ModprobePath: it loads the named modules or
// aliases (dependencies first) from /lib/modules/$(uname -r) as the kernel
// asks, "modprobe -q -- fs-xfs". Options other than the names (-q, -b, -v)
// are ignored. It logs to the kernel log (the helper has no console) and
// returns the exit status: 0 when every name is loaded or was present, 1
// otherwise, 2 without a name.
func Modprobe(args []string, kmsg io.Writer) int {
	log := slog.New(slog.NewTextHandler(kmsg, &slog.HandlerOptions{Level: slog.LevelWarn})).With("component", "modprobe")
	rel, err := kernelRelease()
	if err != nil {
		log.Warn("modprobe", "args", args, "err", err)
		return 1
	}
	l, err := kmod.NewLoader(filepath.Join("/lib/modules", rel), log)
	if err != nil {
		log.Warn("modprobe", "args", args, "err", err)
		return 1
	}
	return modprobe(args, l, log)
}

// modprobe loads the names in args with l.
func modprobe(args []string, l *kmod.Loader, log *slog.Logger) int {
	var names []string
	for i, a := range args {
		if a == "--" {
			names = append(names, args[i+1:]...)
			break
		}
		if !strings.HasPrefix(a, "-") {
			names = append(names, a)
		}
	}
	if len(names) == 0 {
		fmt.Fprintln(os.Stderr, "usage: modprobe [-q] [--] MODULE...")
		return 2
	}
	if _, err := l.Load(names...); err != nil {
		log.Warn("modprobe", "modules", names, "err", err)
		return 1
	}
	return 0
}

// setModprobePath tells the kernel to run booty for on-demand modules.
func (s *System) setModprobePath() {
	p := s.path("/proc/sys/kernel/modprobe")
	if err := os.WriteFile(p, []byte(ModprobePath+"\n"), 0o644); err != nil {
		s.Log.Warn("set the kernel's modprobe helper", "path", ModprobePath, "err", err)
	}
}
