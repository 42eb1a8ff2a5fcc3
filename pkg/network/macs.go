package network

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// MACs returns the MAC addresses of physical network links found under
// sysfsRoot/class/net ("/sys"), sorted by interface name. Loopback, links
// whose device lives under devices/virtual (bridges, bonds, veth, tunnels)
// and links without a hardware address or with an all-zero one are left out.
// Failing to list the directory is an error; an unreadable link is skipped.
func MACs(sysfsRoot string) ([]string, error) {
	dir := filepath.Join(sysfsRoot, "class", "net")
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("list network links in %s: %w", dir, err)
	}
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	var out []string
	for _, name := range names {
		if name == "lo" {
			continue
		}
		p := filepath.Join(dir, name)
		target, err := os.Readlink(p)
		if err != nil {
			// Not a symlink: old kernels had directories here; resolve what we can.
			target = p
		}
		if strings.Contains(filepath.ToSlash(target), "/devices/virtual/") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(p, "address"))
		if err != nil {
			continue
		}
		mac := strings.ToLower(strings.TrimSpace(string(b)))
		if mac == "" || strings.Trim(mac, "0:") == "" {
			continue
		}
		out = append(out, mac)
	}
	return out, nil
}
