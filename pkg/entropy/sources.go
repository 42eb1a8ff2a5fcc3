package entropy

import (
	"bufio"
	"bytes"
	"os"
	"slices"
	"strings"
)

// Default paths of Pool's source probes.
const (
	DefaultCPUInfo      = "/proc/cpuinfo"
	DefaultHWRNGCurrent = "/sys/class/misc/hw_random/rng_current"
)

// Sources is what can seed the kernel's pool at once, for the log.
type Sources struct {
	// RDRAND: the CPU has the rdrand (or rdseed) instruction.
	RDRAND bool
	// HWRNG is the hardware RNG the kernel uses ("virtio_rng.0",
	// "tpm-rng-0"), or "none".
	HWRNG string
	// Ready: the CRNG is initialised.
	Ready bool
}

// Sources reads CPUInfo's flags and HWRNGCurrent and asks Ready. What
// cannot be read counts as absent.
func (p *Pool) Sources() Sources {
	cpuinfo, hwrng := p.CPUInfo, p.HWRNGCurrent
	if cpuinfo == "" {
		cpuinfo = DefaultCPUInfo
	}
	if hwrng == "" {
		hwrng = DefaultHWRNGCurrent
	}
	s := Sources{HWRNG: "none"}
	if b, err := os.ReadFile(cpuinfo); err == nil {
		sc := bufio.NewScanner(bytes.NewReader(b))
		for sc.Scan() {
			k, v, ok := strings.Cut(sc.Text(), ":")
			if ok && strings.TrimSpace(k) == "flags" {
				f := strings.Fields(v)
				s.RDRAND = slices.Contains(f, "rdrand") || slices.Contains(f, "rdseed")
				break
			}
		}
	}
	if b, err := os.ReadFile(hwrng); err == nil {
		if v := strings.TrimSpace(string(b)); v != "" {
			s.HWRNG = v
		}
	}
	ready := p.Ready
	if ready == nil {
		ready = kernelReady
	}
	s.Ready, _ = ready()
	return s
}
