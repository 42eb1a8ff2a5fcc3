// Package fstab reads the table format of /etc/fstab and /proc/self/mounts:
// whitespace-separated fields with the kernel's octal escapes ("\040" for a
// space). It is the one parser of that format for the installed OS's fstab
// (pkg/provision mounts it, pkg/bootloader maps GRUB paths with it) and the
// agent's own mount table (pkg/disk grows mounted filesystems).
package fstab

import (
	"path"
	"strings"
)

// Entry is one line of an fstab or mounts file.
type Entry struct {
	// Spec is the device: "UUID=…", "LABEL=…", "/dev/vda1", "tmpfs".
	Spec string
	// File is the mount point, cleaned ("/boot/efi").
	File string
	// Type is the filesystem type, "" when the line has no third field.
	Type string
	// Options are the comma-separated options of the fourth field.
	Options []string
}

// Option returns the value of option key ("subvol" for "subvol=@") and
// whether the entry has it.
func (e Entry) Option(key string) (string, bool) {
	for _, o := range e.Options {
		if k, v, _ := strings.Cut(o, "="); k == key {
			return v, true
		}
	}
	return "", false
}

// Has reports whether the entry carries the flag option ("noauto").
func (e Entry) Has(flag string) bool {
	for _, o := range e.Options {
		if o == flag {
			return true
		}
	}
	return false
}

// Parse returns the entries of data, in order. Blank lines, comments and
// lines with fewer than two fields are skipped; fields are unescaped.
func Parse(data []byte) []Entry {
	var out []Entry
	for _, l := range strings.Split(string(data), "\n") {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		f := strings.Fields(l)
		if len(f) < 2 {
			continue
		}
		e := Entry{Spec: Unescape(f[0]), File: Unescape(f[1])}
		if strings.HasPrefix(e.File, "/") {
			e.File = path.Clean(e.File)
		}
		if len(f) > 2 {
			e.Type = f[2]
		}
		if len(f) > 3 {
			e.Options = strings.Split(f[3], ",")
		}
		out = append(out, e)
	}
	return out
}

// Unescape undoes the octal escapes of a field: a backslash followed by
// exactly three octal digits is that byte; anything else stays as it is.
func Unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) && isOctal(s[i+1]) && isOctal(s[i+2]) && isOctal(s[i+3]) && s[i+1] <= '3' {
			b.WriteByte((s[i+1]-'0')<<6 | (s[i+2]-'0')<<3 | (s[i+3] - '0'))
			i += 3
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func isOctal(c byte) bool { return c >= '0' && c <= '7' }
