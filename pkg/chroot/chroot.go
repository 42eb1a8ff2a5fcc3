// Package chroot resolves paths inside an OS tree mounted at a root
// directory the way a process chrooted there would see them: symlinks are
// followed with the root as "/", so an absolute link target starts again
// at the root and ".." stops there. Everything booty writes into or reads
// from the installed OS (pkg/provision's configurator, pkg/bootloader's GRUB
// and BLS code, the command runner's PATH lookup) resolves through it, so
// an image's links can never send a write outside its root.
package chroot

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"syscall"
)

// ErrPathEscapes is wrapped by CheckPath's error for a path that tries to
// leave the root with a ".." component.
var ErrPathEscapes = errors.New("path escapes the target root")

// maxSymlinks bounds symlink resolution, as the kernel's ELOOP does.
const maxSymlinks = 40

// CheckPath rejects a path from a config, the server or a file name that
// names its way out with "..": any ".." component is refused, whatever
// follows it, and so are empty paths and NUL bytes. Absolute paths are
// fine: they are taken relative to the root.
func CheckPath(p string) error {
	if p == "" {
		return fmt.Errorf("empty path")
	}
	if strings.ContainsRune(p, 0) {
		return fmt.Errorf("path %q contains a NUL byte", p)
	}
	for _, c := range strings.Split(p, "/") {
		if c == ".." {
			return fmt.Errorf("%q: %w", p, ErrPathEscapes)
		}
	}
	return nil
}

// Resolve resolves p inside the tree at root and returns the result as a
// clean path relative to root ("etc/resolv.conf", "" for the root itself).
// The final component is followed only with followFinal. Components that
// do not exist are kept as they are. It fails on more than 40 links and on
// errors other than a missing component.
func Resolve(root, p string, followFinal bool) (string, error) {
	rest := strings.Split(p, "/")
	var done []string
	links := 0
	for len(rest) > 0 {
		c := rest[0]
		rest = rest[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			if len(done) > 0 {
				done = done[:len(done)-1]
			}
			continue
		}
		cand := path.Join(append(done, c)...)
		st, err := os.Lstat(Join(root, cand))
		if err != nil || st.Mode()&fs.ModeSymlink == 0 || (len(rest) == 0 && !followFinal) {
			if err != nil && !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, syscall.ENOTDIR) {
				return "", fmt.Errorf("resolve %s in %s: %w", p, root, err)
			}
			done = append(done, c)
			continue
		}
		links++
		if links > maxSymlinks {
			return "", fmt.Errorf("resolve %s in %s: too many levels of symbolic links", p, root)
		}
		target, err := os.Readlink(Join(root, cand))
		if err != nil {
			return "", fmt.Errorf("resolve %s in %s: %w", p, root, err)
		}
		if strings.HasPrefix(target, "/") {
			done = nil
		}
		rest = append(strings.Split(target, "/"), rest...)
	}
	return path.Join(done...), nil
}

// Join returns the host path of rel (already resolved) under root.
func Join(root, rel string) string {
	if rel == "" {
		return root
	}
	return filepath.Join(root, filepath.FromSlash(rel))
}

// Host is the host path of p inside root, every link followed (Resolve);
// when resolution fails it is p joined to root as written, which stays
// inside root because Resolve's only failures are I/O errors and loops.
func Host(root, p string) string {
	rel, err := Resolve(root, p, true)
	if err != nil {
		return Join(root, strings.TrimPrefix(path.Clean("/"+p), "/"))
	}
	return Join(root, rel)
}

// LookPath finds the program name inside the OS tree at root and returns
// its path as seen from inside the chroot ("/usr/sbin/update-grub"). A
// name with a slash is checked as given; otherwise each directory of
// pathEnv is tried in order. Links are resolved inside root. The error
// wraps exec.ErrNotFound and fs.ErrNotExist.
func LookPath(root, name, pathEnv string) (string, error) {
	var cands []string
	if strings.Contains(name, "/") {
		cands = []string{path.Clean("/" + name)}
	} else {
		for _, dir := range strings.Split(pathEnv, ":") {
			if dir != "" {
				cands = append(cands, path.Join("/", dir, name))
			}
		}
	}
	for _, c := range cands {
		rel, err := Resolve(root, c, true)
		if err != nil {
			continue
		}
		st, err := os.Stat(Join(root, rel))
		if err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
			return c, nil
		}
	}
	return "", fmt.Errorf("%s not found in %s (PATH %s): %w", name, root, pathEnv, errors.Join(exec.ErrNotFound, fs.ErrNotExist))
}
