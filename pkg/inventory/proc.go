package inventory

import (
	"bufio"
	"fmt"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"

	"github.com/booty-dev/booty/pkg/api"
)

// RAMMebibytes returns the installed memory in MiB: the sum of the SMBIOS
// memory devices when the firmware lists them, else MemTotal from
// Root/proc/meminfo rounded up to whole MiB (which is what the kernel can
// use, a little less than what is installed). It fails when neither is
// readable.
func (c *Collector) RAMMebibytes() (int, error) {
	return c.ramMebibytes(c.readSMBIOS())
}

func (c *Collector) ramMebibytes(sm smbiosFacts) (int, error) {
	if sm.memBytes > 0 {
		return int(sm.memBytes >> 20), nil
	}
	kb, err := c.MemTotalKiB()
	if err != nil {
		return 0, err
	}
	return int((kb + 1023) / 1024), nil
}

// MemTotalKiB reads MemTotal from Root/proc/meminfo.
func (c *Collector) MemTotalKiB() (int64, error) {
	p := c.path("proc/meminfo")
	f, err := os.Open(p)
	if err != nil {
		return 0, fmt.Errorf("inventory: read memory size: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "MemTotal:")
		if !ok {
			continue
		}
		fields := strings.Fields(rest)
		if len(fields) == 0 {
			break
		}
		n, err := strconv.ParseInt(fields[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("inventory: parse MemTotal in %s: %w", p, err)
		}
		return n, nil
	}
	return 0, fmt.Errorf("inventory: no MemTotal in %s", p)
}

// CPU reads Root/proc/cpuinfo: the number of logical CPUs, the model name
// (x86 "model name"; elsewhere "cpu model", "Processor" or "uarch"), the
// flags (x86 "flags", arm64 "Features"), sorted; and the clock: the
// highest cpufreq maximum in sysfs, else the first "cpu MHz". It fails
// when cpuinfo cannot be read or lists no processor.
func (c *Collector) CPU() (api.CPU, error) {
	cpu := api.CPU{Arch: c.Arch}
	if cpu.Arch == "" {
		cpu.Arch = unameArch(runtime.GOARCH)
	}
	p := c.path("proc/cpuinfo")
	f, err := os.Open(p)
	if err != nil {
		return cpu, fmt.Errorf("inventory: read cpu facts: %w", err)
	}
	defer f.Close()
	flags := map[string]bool{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		switch k {
		case "processor":
			if _, err := strconv.Atoi(v); err == nil { // arm32 also has "Processor : ARMv7 ..."
				cpu.Count++
			} else if cpu.Model == "" {
				cpu.Model = v
			}
		case "model name", "cpu model", "uarch":
			if cpu.Model == "" {
				cpu.Model = v
			}
		case "flags", "Features":
			for _, fl := range strings.Fields(v) {
				flags[fl] = true
			}
		case "cpu MHz":
			if cpu.ClockMegahertz == 0 {
				cpu.ClockMegahertz, _ = strconv.ParseFloat(v, 64)
			}
		}
	}
	if err := sc.Err(); err != nil {
		return cpu, fmt.Errorf("inventory: read %s: %w", p, err)
	}
	if cpu.Count == 0 {
		return cpu, fmt.Errorf("inventory: no processor in %s", p)
	}
	for fl := range flags {
		cpu.Flags = append(cpu.Flags, fl)
	}
	sort.Strings(cpu.Flags)
	if mhz := c.maxCPUFreqMHz(); mhz > 0 {
		cpu.ClockMegahertz = mhz
	}
	return cpu, nil
}

// maxCPUFreqMHz is the highest cpuinfo_max_freq (kHz) of any CPU, in MHz.
func (c *Collector) maxCPUFreqMHz() float64 {
	dirs, _ := os.ReadDir(c.path("sys/devices/system/cpu"))
	var best int64
	for _, d := range dirs {
		if !strings.HasPrefix(d.Name(), "cpu") {
			continue
		}
		v := readTrim(c.path("sys/devices/system/cpu", d.Name(), "cpufreq/cpuinfo_max_freq"))
		if n, err := strconv.ParseInt(v, 10, 64); err == nil && n > best {
			best = n
		}
	}
	return float64(best) / 1000
}
