package provision

import (
	"bufio"
	"bytes"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	"sigs.k8s.io/yaml"

	"github.com/booty-dev/booty/pkg/config"
	"github.com/booty-dev/booty/pkg/redact"
)

// debugDumper writes the machine's state to its logger when a step fails.
// Each Orchestrator has its own (its cfg is the one dumped); the package's
// defaultDumper serves the seed's DumpDebugState. Tests point the roots at
// temp dirs.
type debugDumper struct {
	mu      sync.Mutex
	log     *slog.Logger
	procDir string
	sysDir  string
	cfg     *config.MachineConfig
	// readKmsg returns the kernel log; the default reads the kernel ring buffer.
	readKmsg func() ([]byte, error)
	// stepHints lists the sections to dump first for a failing step.
	stepHints map[string][]string
}

// newDebugDumper returns a dumper of the real system's state.
func newDebugDumper() *debugDumper {
	return &debugDumper{
		procDir:  "/proc",
		sysDir:   "/sys",
		readKmsg: readKernelLog,
		stepHints: map[string][]string{
			StepSelectDisk: {"blockdevices"},
			StepWriteImage: {"blockdevices", "mounts", "addresses", "routes"},
		},
	}
}

// defaultDumper is what DumpDebugState and SetDebugLogger use.
var defaultDumper = newDebugDumper()

// SetDebugLogger routes DumpDebugState's output to l.
func SetDebugLogger(l *slog.Logger) { defaultDumper.setLogger(l) }

func (d *debugDumper) setLogger(l *slog.Logger) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.log = l
}

// DumpDebugState logs system state useful for diagnosing failures. BOOTy runs as PID 1 in an initramfs — this dump is the only diagnostic data available before reboot, so it must be comprehensive. Step-specific debug commands are run first, followed by comprehensive dump.
//
// Sections, in order: the failed step's own sections, then mounts, block
// devices, links and addresses, routes, the tail of the kernel log and the
// MachineConfig with secrets redacted (an Orchestrator's run dumps its own
// config; this package-level call has none). A section that cannot be read
// logs why and the dump goes on.
func DumpDebugState(failedStep string) { defaultDumper.dump(failedStep) }

func (d *debugDumper) dump(failedStep string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	log := d.log
	if log == nil {
		log = slog.Default()
	}
	log = log.With("component", "debug", "step", failedStep)
	sections := []string{}
	seen := map[string]bool{}
	for _, s := range append(append([]string{}, d.stepHints[failedStep]...),
		"mounts", "blockdevices", "addresses", "routes", "dmesg", "config") {
		if !seen[s] {
			seen[s] = true
			sections = append(sections, s)
		}
	}
	log.Error("=== debug state dump begins ===")
	for _, s := range sections {
		text, err := d.section(s)
		if err != nil {
			log.Warn("debug section unavailable", "section", s, "error", err)
			continue
		}
		// dmesg holds the kernel command line (booty.config=URL), mounts
		// and the rest may hold URLs too: the dump is shipped to bootyd.
		text = redact.Text(text)
		for _, line := range strings.Split(strings.TrimRight(text, "\n"), "\n") {
			log.Error(s + ": " + line)
		}
	}
	log.Error("=== debug state dump ends ===")
}

func (d *debugDumper) section(name string) (string, error) {
	switch name {
	case "mounts":
		b, err := os.ReadFile(filepath.Join(d.procDir, "mounts"))
		return string(b), err
	case "blockdevices":
		return d.blockDevices()
	case "addresses":
		return addresses()
	case "routes":
		b, err := os.ReadFile(filepath.Join(d.procDir, "net", "route"))
		return string(b), err
	case "dmesg":
		b, err := d.readKmsg()
		if err != nil {
			return "", err
		}
		return tailLines(string(b), 40), nil
	case "config":
		if d.cfg == nil {
			return "(no config loaded)", nil
		}
		b, err := yaml.Marshal(d.cfg.Redacted())
		return string(b), err
	}
	return "", fmt.Errorf("unknown section %q", name)
}

// blockDevices lists /sys/class/block with size (bytes), read-only and removable flags.
func (d *debugDumper) blockDevices() (string, error) {
	dir := filepath.Join(d.sysDir, "class", "block")
	ents, err := os.ReadDir(dir)
	if err != nil {
		return "", err
	}
	var b bytes.Buffer
	names := make([]string, 0, len(ents))
	for _, e := range ents {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	for _, n := range names {
		read := func(f string) string {
			v, _ := os.ReadFile(filepath.Join(dir, n, f))
			return strings.TrimSpace(string(v))
		}
		var sectors int64
		fmt.Sscan(read("size"), &sectors)
		fmt.Fprintf(&b, "%-12s size=%d ro=%s removable=%s\n", n, sectors*512, read("ro"), read("removable"))
	}
	if b.Len() == 0 {
		return "(none)", nil
	}
	return b.String(), nil
}

func addresses() (string, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return "", err
	}
	var b bytes.Buffer
	for _, i := range ifs {
		addrs, _ := i.Addrs()
		as := make([]string, 0, len(addrs))
		for _, a := range addrs {
			as = append(as, a.String())
		}
		fmt.Fprintf(&b, "%s mac=%s flags=%s mtu=%d addrs=%s\n", i.Name, i.HardwareAddr, i.Flags, i.MTU, strings.Join(as, ","))
	}
	return b.String(), nil
}

func tailLines(s string, n int) string {
	var lines []string
	sc := bufio.NewScanner(strings.NewReader(s))
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
