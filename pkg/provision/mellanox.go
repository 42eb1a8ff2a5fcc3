package provision

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/booty-dev/booty/pkg/config"
)

// MellanoxVendorID is the PCI vendor ID of Mellanox (NVIDIA networking).
const MellanoxVendorID = "15b3"

// defaultPCIVendorCheck is the PCI vendor check new Configurators start
// with; SetPCIVendorCheckFunc replaces it.
var defaultPCIVendorCheck = struct {
	sync.Mutex
	fn func(string) (bool, error)
}{fn: func(id string) (bool, error) { return hasPCIVendor("/sys", id) }}

// SetPCIVendorCheckFunc overrides the PCI vendor detection for testing. Returns a restore function that resets to the original implementation.
//
// The function gets a vendor ID without "0x" ("15b3") and reports whether
// the machine has a PCI device of that vendor. SetupMellanox asks it first
// and does nothing more when it says no. It is the default of every
// Configurator created afterwards (and of those whose check was not set).
func SetPCIVendorCheckFunc(fn func(string) (bool, error)) func() {
	defaultPCIVendorCheck.Lock()
	defer defaultPCIVendorCheck.Unlock()
	old := defaultPCIVendorCheck.fn
	defaultPCIVendorCheck.fn = fn
	return func() {
		defaultPCIVendorCheck.Lock()
		defer defaultPCIVendorCheck.Unlock()
		defaultPCIVendorCheck.fn = old
	}
}

// defaultVendorCheck asks the current default check.
func defaultVendorCheck(id string) (bool, error) {
	defaultPCIVendorCheck.Lock()
	fn := defaultPCIVendorCheck.fn
	defaultPCIVendorCheck.Unlock()
	return fn(id)
}

// hasPCIVendor reads sysfs/bus/pci/devices/*/vendor.
func hasPCIVendor(sysfs, vendorID string) (bool, error) {
	devs, err := pciDevicesOf(sysfs, vendorID)
	return len(devs) > 0, err
}

// pciDevicesOf lists the PCI addresses ("0000:3b:00.0") of the physical
// functions of a vendor under sysfs, sorted; virtual functions (with a
// physfn link) are left out.
func pciDevicesOf(sysfs, vendorID string) ([]string, error) {
	dir := filepath.Join(sysfs, "bus", "pci", "devices")
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("list PCI devices: %w", err)
	}
	want := "0x" + strings.ToLower(strings.TrimPrefix(vendorID, "0x"))
	var out []string
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(dir, e.Name(), "vendor"))
		if err != nil || strings.ToLower(strings.TrimSpace(string(b))) != want {
			continue
		}
		if _, err := os.Lstat(filepath.Join(dir, e.Name(), "physfn")); err == nil {
			continue
		}
		out = append(out, e.Name())
	}
	slices.Sort(out)
	return out, nil
}

// pciAddrRE is a full PCI address, domain:bus:device.function.
var pciAddrRE = regexp.MustCompile(`^[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$`)

// mstValue is one parameter of `mstconfig query`: the raw text and, for
// numbers and enums like "False(0)", the number.
type mstValue struct {
	Raw   string
	Num   int64
	IsNum bool
}

// parseMstconfigQuery reads the parameters of `mstconfig -d ADDR query`
// output: the lines after "Configurations:", each "NAME   VALUE" with
// the Next Boot value last (a leading "*" marks a changed value; with
// -e the Default and Current columns come first). Values "False(0)",
// "True(1)", "AUTOMATIC(0)" give the number in parentheses; plain
// numbers and 0x hex give themselves; others ("Array[0..15]") are kept
// raw only.
func parseMstconfigQuery(out string) map[string]mstValue {
	vals := map[string]mstValue{}
	in := false
	for _, l := range strings.Split(out, "\n") {
		t := strings.TrimSpace(l)
		if strings.HasPrefix(t, "Configurations:") {
			in = true
			continue
		}
		if !in || t == "" {
			continue
		}
		f := strings.Fields(strings.TrimPrefix(t, "*"))
		if len(f) < 2 || strings.ToUpper(f[0]) != f[0] || strings.ContainsAny(f[0], ":") {
			continue
		}
		raw := f[len(f)-1]
		v := mstValue{Raw: raw}
		num := raw
		if i := strings.LastIndexByte(raw, '('); i >= 0 && strings.HasSuffix(raw, ")") {
			num = raw[i+1 : len(raw)-1]
		}
		if n, err := strconv.ParseInt(num, 0, 64); err == nil {
			v.Num, v.IsNum = n, true
		}
		vals[f[0]] = v
	}
	return vals
}

// SetupMellanox detects and configures Mellanox ConnectX NICs. Returns true if firmware values were changed (requiring a hard reboot for reinit).
//
// It asks the Configurator's PCI vendor check (by default the one set by
// SetPCIVendorCheckFunc) for vendor 15b3
// and returns false when there is none. Otherwise, for every Mellanox
// physical function in sysfs (virtual functions are skipped), in address
// order, it runs `mstconfig -d ADDR query` on the agent, and when the
// Next Boot values of SRIOV_EN and NUM_OF_VFS differ from 1 and numVFs,
// `mstconfig -y -d ADDR set SRIOV_EN=1 NUM_OF_VFS=N`. numVFs 0 does
// nothing; a negative one is an error. A device whose query lacks either
// parameter, or any failing mstconfig run, is an error naming the device;
// changed reports the devices set before the failure too.
func (c *Configurator) SetupMellanox(ctx context.Context, numVFs int) (changed bool, err error) {
	if numVFs < 0 || numVFs > config.MaxNumVFs {
		return false, fmt.Errorf("setup mellanox: number of VFs %d out of range 0 to %d", numVFs, config.MaxNumVFs)
	}
	if numVFs == 0 {
		return false, nil
	}
	found, err := c.pciVendorCheck(MellanoxVendorID)
	if err != nil {
		return false, fmt.Errorf("setup mellanox: detect PCI vendor %s: %w", MellanoxVendorID, err)
	}
	if !found {
		c.log.Info("no Mellanox PCI device, SR-IOV setup skipped")
		return false, nil
	}
	devs, err := pciDevicesOf(c.sysfsDir, MellanoxVendorID)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return false, fmt.Errorf("setup mellanox: %w", err)
	}
	if len(devs) == 0 {
		c.log.Warn("Mellanox device reported but no physical function in sysfs", "sysfs", c.sysfsDir)
		return false, nil
	}
	for _, addr := range devs {
		if !pciAddrRE.MatchString(addr) {
			return changed, fmt.Errorf("setup mellanox: unexpected PCI address %q", addr)
		}
		out, _, err := c.runner.Run(ctx, c.mstconfig, "-d", addr, "query")
		if err != nil {
			return changed, fmt.Errorf("setup mellanox: query %s: %w", addr, err)
		}
		vals := parseMstconfigQuery(string(out))
		sriov, ok1 := vals["SRIOV_EN"]
		vfs, ok2 := vals["NUM_OF_VFS"]
		if !ok1 || !ok2 || !sriov.IsNum || !vfs.IsNum {
			return changed, fmt.Errorf("setup mellanox: %s: query shows no SRIOV_EN/NUM_OF_VFS (firmware without SR-IOV?)", addr)
		}
		if sriov.Num == 1 && vfs.Num == int64(numVFs) {
			c.log.Info("Mellanox SR-IOV already configured", "device", addr, "numVFs", numVFs)
			continue
		}
		if _, _, err := c.runner.Run(ctx, c.mstconfig, "-y", "-d", addr, "set", "SRIOV_EN=1", "NUM_OF_VFS="+strconv.Itoa(numVFs)); err != nil {
			return changed, fmt.Errorf("setup mellanox: set %s: %w", addr, err)
		}
		changed = true
		c.log.Info("Mellanox SR-IOV configured, takes effect after a hard reboot", "device", addr,
			"SRIOV_EN", sriov.Raw+"→1", "NUM_OF_VFS", vfs.Raw+"→"+strconv.Itoa(numVFs))
	}
	return changed, nil
}
