package bootloader

import (
	"bufio"
	"fmt"
	"os"
	"path"
	"sort"
	"strings"
)

// blsDirs are where Boot Loader Specification entries live: /boot for
// Fedora/RHEL (grub2 with blscfg), the ESP for systemd-boot.
var blsDirs = []string{"/boot/loader/entries", "/boot/efi/loader/entries", "/efi/loader/entries"}

// blsEntry is one /loader/entries/*.conf file (type #1 entry).
type blsEntry struct {
	id        string // file name without .conf
	file      string // path inside the installed OS
	title     string
	version   string
	machineID string
	sortKey   string
	linux     string
	initrds   []string // one per word of every initrd line
	options   []string // every options line
}

// parseBLS reads one entry file: "key value" lines, # comments.
func parseBLS(id, file string, data []byte) blsEntry {
	e := blsEntry{id: id, file: file}
	sc := bufio.NewScanner(strings.NewReader(string(data)))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		k, v := line, ""
		if i := strings.IndexAny(line, " \t"); i > 0 {
			k, v = line[:i], strings.TrimSpace(line[i+1:])
		}
		switch k {
		case "title":
			e.title = v
		case "version":
			e.version = v
		case "machine-id":
			e.machineID = v
		case "sort-key":
			e.sortKey = v
		case "linux":
			e.linux = v
		case "initrd":
			e.initrds = append(e.initrds, strings.Fields(v)...)
		case "options":
			e.options = append(e.options, v)
		}
	}
	return e
}

// loadBLS reads every *.conf in dir (inside the installed OS) and sorts
// the entries as systemd-boot does: entries with a sort-key first,
// ordered by sort-key, machine-id, then version newest first; then all
// by file name, newest version first. Entries without a linux line
// (EFI-program entries) are left out.
func loadBLS(fsys *rootFS, dir string) ([]blsEntry, error) {
	var out []blsEntry
	for _, f := range fsys.globSorted(path.Join(dir, "*.conf")) {
		b, err := os.ReadFile(fsys.host(f))
		if err != nil {
			return nil, fmt.Errorf("read boot loader entry %s: %w", f, err)
		}
		e := parseBLS(strings.TrimSuffix(path.Base(f), ".conf"), f, b)
		if e.linux != "" {
			out = append(out, e)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return compareBLS(out[i], out[j]) < 0 })
	return out, nil
}

// compareBLS is systemd-boot's boot_entry_compare without boot counting.
func compareBLS(a, b blsEntry) int {
	if (a.sortKey == "") != (b.sortKey == "") {
		if a.sortKey != "" {
			return -1
		}
		return 1
	}
	if a.sortKey != "" {
		if c := strings.Compare(a.sortKey, b.sortKey); c != 0 {
			return c
		}
		if c := strings.Compare(a.machineID, b.machineID); c != 0 {
			return c
		}
		if c := strverscmpImproved(a.version, b.version); c != 0 {
			return -c
		}
	}
	return -strverscmpImproved(a.id, b.id)
}

func isVersionChar(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || strings.IndexByte("~-^.", c) >= 0
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }
func isAlpha(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }

func cmpInt(a, b int) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func cmpBool(a, b bool) int {
	x, y := 0, 0
	if a {
		x = 1
	}
	if b {
		y = 1
	}
	return cmpInt(x, y)
}

// strverscmpImproved is systemd's version comparison (as used by
// systemd-boot and kernel-install, after rpm's vercmp): -1, 0 or 1.
func strverscmpImproved(a, b string) int {
	at := func(s string, i int) byte {
		if i < len(s) {
			return s[i]
		}
		return 0
	}
	i, j := 0, 0
	for {
		for i < len(a) && !isVersionChar(a[i]) {
			i++
		}
		for j < len(b) && !isVersionChar(b[j]) {
			j++
		}
		ca, cb := at(a, i), at(b, j)
		if ca == '~' || cb == '~' {
			if r := cmpBool(ca != '~', cb != '~'); r != 0 {
				return r
			}
			i, j = i+1, j+1
		}
		if i >= len(a) || j >= len(b) {
			return cmpInt(int(at(a, i)), int(at(b, j)))
		}
		for _, sep := range []byte{'-', '^', '.'} {
			ca, cb = at(a, i), at(b, j)
			if ca == sep || cb == sep {
				if r := cmpBool(ca != sep, cb != sep); r != 0 {
					return r
				}
				i, j = i+1, j+1
			}
		}
		ca, cb = at(a, i), at(b, j)
		var ai, bj int
		if isDigit(ca) || isDigit(cb) {
			for ai = i; ai < len(a) && isDigit(a[ai]); ai++ {
			}
			for bj = j; bj < len(b) && isDigit(b[bj]); bj++ {
			}
			if r := cmpBool(ai != i, bj != j); r != 0 {
				return r
			}
			for i < ai && a[i] == '0' {
				i++
			}
			for j < bj && b[j] == '0' {
				j++
			}
			if r := cmpInt(ai-i, bj-j); r != 0 {
				return r
			}
			if r := strings.Compare(a[i:ai], b[j:bj]); r != 0 {
				return r
			}
		} else {
			for ai = i; ai < len(a) && isAlpha(a[ai]); ai++ {
			}
			for bj = j; bj < len(b) && isAlpha(b[bj]); bj++ {
			}
			n := min(ai-i, bj-j)
			if r := strings.Compare(a[i:i+n], b[j:j+n]); r != 0 {
				return r
			}
			if r := cmpInt(ai-i, bj-j); r != 0 {
				return r
			}
		}
		i, j = ai, bj
	}
}

// expandVars substitutes $name and ${name} from vars; unknown names
// expand to nothing.
func expandVars(s string, vars map[string]string) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		if name, n := varRef(s[i:]); n > 0 {
			b.WriteString(vars[name])
			i += n
			continue
		}
		b.WriteByte(s[i])
		i++
	}
	return b.String()
}

// selectBLS finds the entry GRUB's default names (an id, a title or an
// index into the sorted list); empty or unmatched means the first.
func selectBLS(entries []blsEntry, def string) (blsEntry, bool) {
	def = strings.TrimSpace(def)
	if def == "" {
		return entries[0], true
	}
	items := make([]*grubMenuItem, len(entries))
	for i, e := range entries {
		items[i] = &grubMenuItem{id: e.id, title: e.title}
	}
	if i := findMenuItem(items, def); i >= 0 {
		return entries[i], true
	}
	return entries[0], false
}
