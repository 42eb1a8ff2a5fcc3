package network

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// PhysicalMACs lists the lower-case MAC addresses of the physical Ethernet
// links under sysRoot/class/net (default /sys), sorted by link name: a link
// counts when it has a device entry (virtual links such as bridges, bonds,
// VLANs and veth have none), is not lo, and has a 6-byte non-zero address.
func PhysicalMACs(sysRoot string) ([]string, error) {
	if sysRoot == "" {
		sysRoot = "/sys"
	}
	dir := filepath.Join(sysRoot, "class", "net")
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("list network links in %s: %w", dir, err)
	}
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	var macs []string
	seen := map[string]bool{}
	for _, name := range names {
		if name == "lo" {
			continue
		}
		if _, err := os.Stat(filepath.Join(dir, name, "device")); err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, name, "address"))
		if err != nil {
			continue
		}
		hw, err := net.ParseMAC(strings.TrimSpace(string(b)))
		if err != nil || len(hw) != 6 || allZero(hw) {
			continue
		}
		m := hw.String()
		if !seen[m] { // bond slaves may share an address
			seen[m] = true
			macs = append(macs, m)
		}
	}
	return macs, nil
}

func allZero(b []byte) bool {
	for _, x := range b {
		if x != 0 {
			return false
		}
	}
	return true
}
