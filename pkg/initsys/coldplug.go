package initsys

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Device is a device that may want a driver: its path below /sys (the
// kernel's DEVPATH, "/devices/pci0000:00/0000:00:03.0") and its modalias.
type Device struct {
	Path     string
	Modalias string
	// Interface is set for a network interface the kernel added
	// (SUBSYSTEM=net, no modalias), reported by the event source only.
	Interface bool
	// Module names a module whose init finished (SUBSYSTEM=module: its
	// probes are done, the devices it made announced before), reported by
	// the event source only; Path and Modalias are then empty.
	Module string
}

// ScanDevices returns the devices of every bus under sysDir (/sys) that
// carry a modalias, sorted by path: for each sysDir/bus/*/devices/* its
// "modalias" file, or the MODALIAS= line of its "uevent" (CPUs have only
// that), which is what udev's coldplug reads. It reads a few files per
// device instead of walking all of /sys/devices, which under emulation
// costs a third of a second. Unreadable entries are skipped (devices come
// and go); it fails only when sysDir/bus cannot be listed.
func ScanDevices(sysDir string) ([]Device, error) {
	buses, err := os.ReadDir(filepath.Join(sysDir, "bus"))
	if err != nil {
		return nil, fmt.Errorf("scan devices in %s: %w", filepath.Join(sysDir, "bus"), err)
	}
	seen := map[string]bool{}
	var out []Device
	buf := make([]byte, 4096)
	for _, b := range buses {
		dir := filepath.Join(sysDir, "bus", b.Name(), "devices")
		es, _ := os.ReadDir(dir)
		for _, e := range es {
			p := filepath.Join(dir, e.Name())
			alias := readModalias(p, buf)
			if alias == "" {
				continue
			}
			devpath := p
			if t, err := os.Readlink(p); err == nil {
				devpath = filepath.Join(dir, t)
			}
			devpath = "/" + strings.TrimPrefix(strings.TrimPrefix(devpath, filepath.Clean(sysDir)), "/")
			if seen[devpath] {
				continue
			}
			seen[devpath] = true
			out = append(out, Device{Path: devpath, Modalias: alias})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out, nil
}

// readModalias reads dev/modalias, or the MODALIAS= line of dev/uevent,
// through buf: one open, one read and one close per file (a sysfs
// attribute comes whole in one read), which matters under emulation.
func readModalias(dev string, buf []byte) string {
	if b, ok := readSmall(filepath.Join(dev, "modalias"), buf); ok {
		return strings.TrimSpace(string(b))
	}
	b, ok := readSmall(filepath.Join(dev, "uevent"), buf)
	if !ok {
		return ""
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "MODALIAS="); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// readSmall reads at most len(buf) bytes of a file with one read.
func readSmall(p string, buf []byte) ([]byte, bool) {
	f, err := os.Open(p)
	if err != nil {
		return nil, false
	}
	defer f.Close()
	n, err := f.Read(buf)
	if err != nil && n == 0 {
		return nil, false
	}
	return buf[:n], true
}

// netModalias reports whether a modalias is a network controller's: PCI
// class 02, a virtio network device, or a USB communications (CDC 02,
// CDC data 0a) or wireless (e0) interface. Its driver, and the drivers of
// the devices below it (virtio_pci's virtio device, then virtio_net), are
// what the first fetch needs.
func netModalias(a string) bool {
	switch {
	case strings.HasPrefix(a, "pci:"):
		i := strings.Index(a, "bc")
		return i >= 0 && strings.HasPrefix(a[i+2:], "02")
	case strings.HasPrefix(a, "virtio:"):
		return strings.HasPrefix(a, "virtio:d00000001v")
	case strings.HasPrefix(a, "usb:"):
		i := strings.Index(a, "ic")
		return i >= 0 && (strings.HasPrefix(a[i+2:], "02") || strings.HasPrefix(a[i+2:], "0A") || strings.HasPrefix(a[i+2:], "E0"))
	}
	return false
}

// storageModalias reports whether a modalias is a PCI mass-storage
// controller's (base class 01: SCSI, IDE, RAID, SATA, SAS, NVMe, and
// virtio-blk).
func storageModalias(a string) bool {
	if !strings.HasPrefix(a, "pci:") {
		return false
	}
	i := strings.Index(a, "bc")
	return i >= 0 && strings.HasPrefix(a[i+2:], "01")
}

// ReadModulesLoad reads a modules-load file: one module name or alias per
// line, '#' comments. A missing file is an empty list.
func ReadModulesLoad(path string) ([]string, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("open modules-load list: %w", err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line, _, _ := strings.Cut(sc.Text(), "#")
		if line = strings.TrimSpace(line); line != "" {
			out = append(out, line)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read modules-load list %s: %w", path, err)
	}
	return out, nil
}
