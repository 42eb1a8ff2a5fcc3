package bootloader

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"

	"github.com/booty-dev/booty/pkg/chroot"
	"github.com/booty-dev/booty/pkg/fstab"
)

// fstabEntry is one line of the installed OS's /etc/fstab.
type fstabEntry struct {
	spec, mountpoint, fstype string
	subvol                   string // btrfs subvol= option, without leading "/"
}

// readFstab parses root/etc/fstab; a missing file gives no entries.
// Entries without a type or with a mount point that is not absolute are
// left out.
func readFstab(root string) ([]fstabEntry, error) {
	b, err := os.ReadFile(filepath.Join(root, "etc/fstab"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read fstab: %w", err)
	}
	var out []fstabEntry
	for _, f := range fstab.Parse(b) {
		if f.Type == "" || !strings.HasPrefix(f.File, "/") {
			continue
		}
		e := fstabEntry{spec: f.Spec, mountpoint: f.File, fstype: f.Type}
		if v, ok := f.Option("subvol"); ok && f.Type == "btrfs" {
			e.subvol = strings.Trim(v, "/")
		}
		out = append(out, e)
	}
	return out, nil
}

// fsKey turns an fstab spec or a GRUB search into a lookup key:
// "uuid/<lower>", "label/<label>", "partuuid/<lower>", "partlabel/<label>";
// "" for device paths that name no identifier.
func fsKey(spec string) string {
	for _, p := range []struct{ prefix, key string }{
		{"UUID=", "uuid/"}, {"/dev/disk/by-uuid/", "uuid/"},
		{"PARTUUID=", "partuuid/"}, {"/dev/disk/by-partuuid/", "partuuid/"},
		{"LABEL=", "label/"}, {"/dev/disk/by-label/", "label/"},
		{"PARTLABEL=", "partlabel/"}, {"/dev/disk/by-partlabel/", "partlabel/"},
	} {
		if v, ok := strings.CutPrefix(spec, p.prefix); ok {
			v = strings.Trim(v, `"`)
			if strings.HasSuffix(p.key, "uuid/") {
				v = strings.ToLower(v)
			}
			return p.key + v
		}
	}
	return ""
}

// rootFS answers path questions about the installed OS mounted at root.
type rootFS struct {
	root  string
	fstab []fstabEntry
	byKey map[string]string // fsKey -> mountpoint
}

func newRootFS(root string) (*rootFS, error) {
	fstab, err := readFstab(root)
	if err != nil {
		return nil, err
	}
	r := &rootFS{root: root, fstab: fstab, byKey: map[string]string{}}
	for _, e := range fstab {
		if k := fsKey(e.spec); k != "" {
			if _, dup := r.byKey[k]; !dup { // btrfs subvolumes share the UUID
				r.byKey[k] = e.mountpoint
			}
		}
	}
	return r, nil
}

// separate reports whether mountpoint (like "/boot") is its own file
// system in fstab.
func (r *rootFS) separate(mountpoint string) bool {
	for _, e := range r.fstab {
		if e.mountpoint == mountpoint {
			return true
		}
	}
	return false
}

// mountOf returns the fstab mount point holding rel (a path inside the
// installed OS), "/" when none is more specific.
func (r *rootFS) mountOf(rel string) string {
	rel = path.Clean("/" + rel)
	best := "/"
	for _, e := range r.fstab {
		m := e.mountpoint
		if (rel == m || strings.HasPrefix(rel, m+"/")) && len(m) > len(best) {
			best = m
		}
	}
	return best
}

// rootSpec returns the fstab spec of "/", "" when fstab has none.
func (r *rootFS) rootSpec() string {
	for _, e := range r.fstab {
		if e.mountpoint == "/" {
			return e.spec
		}
	}
	return ""
}

// host maps a path inside the installed OS to the host path, following
// symlinks as if chrooted into root (absolute targets stay inside root,
// ".." stops at root). Missing components are kept as they are.
func (r *rootFS) host(rel string) string {
	return filepath.Join(r.root, r.resolveLinks(rel))
}

// resolveLinks resolves symlinks in rel within root (chroot.Resolve) and
// returns the resulting absolute path inside the installed OS; a path that
// cannot be resolved (a link loop) is returned cleaned, as written.
func (r *rootFS) resolveLinks(rel string) string {
	p, err := chroot.Resolve(r.root, rel, true)
	if err != nil {
		return path.Clean("/" + rel)
	}
	return "/" + p
}

func (r *rootFS) exists(rel string) bool {
	_, err := os.Stat(r.host(rel))
	return err == nil
}

// grubDevPrefix is how GRUB paths name a file system by its mount point
// in the installed OS: "(mnt:/boot)/vmlinuz" is root/boot/vmlinuz.
const grubDevPrefix = "mnt:"

// grubDevice returns the GRUB device name for the file system holding rel.
func (r *rootFS) grubDevice(rel string) string { return grubDevPrefix + r.mountOf(rel) }

// grubPath turns a path inside the installed OS into a GRUB path on the
// file system holding it: "/boot/grub" on a separate /boot is
// "(mnt:/boot)/grub".
func (r *rootFS) grubPath(rel string) string {
	rel = path.Clean("/" + rel)
	m := r.mountOf(rel)
	return "(" + grubDevPrefix + m + ")" + path.Clean("/"+strings.TrimPrefix(rel, m))
}

// deviceFor maps what GRUB's search looks for (kind "uuid", "label",
// "partuuid", "partlabel", "file") to a GRUB device name; ok is false when
// the installed OS's fstab does not say where that file system is.
func (r *rootFS) deviceFor(kind, name string) (string, bool) {
	switch kind {
	case "file":
		for _, m := range r.candidateMounts() {
			if r.exists(path.Join(m, name)) {
				return grubDevPrefix + m, true
			}
		}
		return "", false
	case "uuid", "partuuid":
		name = strings.ToLower(name)
	}
	m, ok := r.byKey[kind+"/"+name]
	if !ok {
		return "", false
	}
	return grubDevPrefix + m, true
}

// candidateMounts lists where a file system of unknown identity may be
// mounted: /boot first when it is separate (GRUB paths are then
// relative to it), then /.
func (r *rootFS) candidateMounts() []string {
	if r.separate("/boot") {
		return []string{"/boot", "/"}
	}
	return []string{"/", "/boot"}
}

// resolveGrub maps a GRUB path ("/vmlinuz-6.1", "($root)/boot/x",
// "(hd0,gpt2)/x") to a path inside the installed OS. dev is the current
// $root. A device this package cannot place (a firmware disk name, a
// UUID missing from fstab) is guessed: the first candidate mount where the
// file exists, else the first candidate.
func (r *rootFS) resolveGrub(dev, p string) string {
	if strings.HasPrefix(p, "(") {
		if end := strings.IndexByte(p, ')'); end > 0 {
			dev, p = p[1:end], p[end+1:]
		}
	}
	dev = strings.Trim(dev, "()")
	p = path.Clean("/" + p)
	if m, ok := strings.CutPrefix(dev, grubDevPrefix); ok {
		return r.onMount(m, p)
	}
	cands := r.candidateMounts()
	for _, m := range cands {
		if r.exists(r.onMount(m, p)) {
			return r.onMount(m, p)
		}
	}
	return r.onMount(cands[0], p)
}

// onMount joins a GRUB path on the file system mounted at m to m. GRUB
// sees a btrfs file system from its top level, so "/@/boot/vmlinuz" is
// boot/vmlinuz under wherever subvol=@ of the same file system is mounted.
func (r *rootFS) onMount(m, p string) string {
	for _, e := range r.fstab {
		if e.mountpoint != m || e.fstype != "btrfs" {
			continue
		}
		for _, sv := range r.fstab {
			if sv.spec != e.spec || sv.subvol == "" {
				continue
			}
			if rest, ok := strings.CutPrefix(p, "/"+sv.subvol+"/"); ok {
				return path.Join(sv.mountpoint, rest)
			}
		}
		break
	}
	return path.Join(m, p)
}

// readGrubenv parses a GRUB environment block; a missing file gives an
// empty map.
func readGrubenv(hostPath string) (map[string]string, error) {
	b, err := os.ReadFile(hostPath)
	if errors.Is(err, fs.ErrNotExist) {
		return map[string]string{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read grubenv: %w", err)
	}
	env := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		if line == "" || line[0] == '#' {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			continue
		}
		var u strings.Builder
		for i := 0; i < len(v); i++ {
			if v[i] == '\\' && i+1 < len(v) {
				i++
			}
			u.WriteByte(v[i])
		}
		env[k] = u.String()
	}
	return env, nil
}

// globSorted returns the matches of pattern (a path inside the installed
// OS) as paths inside the installed OS, sorted.
//
// The directories before the first wildcard are resolved inside root
// first (an image whose /boot is an absolute symlink names a directory of
// the image, not of the host); callers open the results through host,
// which resolves the rest inside root too.
func (r *rootFS) globSorted(pattern string) []string {
	elems := strings.Split(strings.Trim(path.Clean("/"+pattern), "/"), "/")
	i := 0
	for i < len(elems)-1 && !strings.ContainsAny(elems[i], `*?[\`) {
		i++
	}
	dir := r.resolveLinks("/" + strings.Join(elems[:i], "/"))
	base := filepath.Join(r.root, dir)
	m, _ := filepath.Glob(filepath.Join(base, filepath.Join(elems[i:]...)))
	out := make([]string, 0, len(m))
	for _, p := range m {
		if rel, err := filepath.Rel(base, p); err == nil {
			out = append(out, path.Join(dir, filepath.ToSlash(rel)))
		}
	}
	sort.Strings(out)
	return out
}
