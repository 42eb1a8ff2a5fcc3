package provision

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"
)

// ErrPathEscapes is wrapped by the errors of paths from a config, the
// server or a file name that try to leave the installed OS's root with a
// ".." component.
var ErrPathEscapes = errors.New("path escapes the target root")

// maxSymlinks bounds symlink resolution, as the kernel's ELOOP does.
const maxSymlinks = 40

// checkRelPath rejects a path that names its way out with "..": any ".."
// component is refused, whatever follows it. Absolute paths are fine: they
// are taken relative to the root.
func checkRelPath(p string) error {
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

// resolveInRoot resolves p inside the tree at root the way a process
// chrooted there would see it and returns the result as a clean path
// relative to root ("etc/resolv.conf", "" for the root itself). Symlinks
// in the image are followed with root as "/": an absolute target starts
// again at root, ".." stops at root, so the result never leaves it.
// The final component is followed only with followFinal. Components that
// do not exist are kept as they are.
func resolveInRoot(root, p string, followFinal bool) (string, error) {
	rest := splitPath(p)
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
		st, err := os.Lstat(joinRoot(root, cand))
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
		target, err := os.Readlink(joinRoot(root, cand))
		if err != nil {
			return "", fmt.Errorf("resolve %s in %s: %w", p, root, err)
		}
		if strings.HasPrefix(target, "/") {
			done = nil
		}
		rest = append(splitPath(target), rest...)
	}
	return path.Join(done...), nil
}

func splitPath(p string) []string { return strings.Split(p, "/") }

// joinRoot returns the host path of rel (already resolved) under root.
func joinRoot(root, rel string) string {
	if rel == "" {
		return root
	}
	return filepath.Join(root, filepath.FromSlash(rel))
}

// targetFS does file operations on the installed OS at dir, confined to
// it: paths are resolved with resolveInRoot, and the final operation goes
// through an os.Root so that a link swapped in between cannot escape.
type targetFS struct{ dir string }

// hostPath resolves p (which must not contain "..") and returns the host
// path of the result, following a final symlink when followFinal.
func (t targetFS) resolve(p string, followFinal bool) (string, error) {
	if err := checkRelPath(p); err != nil {
		return "", err
	}
	return resolveInRoot(t.dir, p, followFinal)
}

func (t targetFS) open() (*os.Root, error) {
	r, err := os.OpenRoot(t.dir)
	if err != nil {
		return nil, fmt.Errorf("open target root: %w", err)
	}
	return r, nil
}

// readFile reads p, following symlinks inside the root.
func (t targetFS) readFile(p string) ([]byte, error) {
	rel, err := t.resolve(p, true)
	if err != nil {
		return nil, err
	}
	r, err := t.open()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return r.ReadFile(orDot(rel))
}

// exists reports whether p exists in the root (symlinks followed).
func (t targetFS) exists(p string) bool {
	rel, err := t.resolve(p, true)
	if err != nil {
		return false
	}
	_, err = os.Stat(joinRoot(t.dir, rel))
	return err == nil
}

// mkdirAll creates directory p and its missing parents with mode.
func (t targetFS) mkdirAll(p string, mode fs.FileMode) (string, error) {
	rel, err := t.resolve(p, true)
	if err != nil {
		return "", err
	}
	if rel == "" {
		return "", nil
	}
	r, err := t.open()
	if err != nil {
		return "", err
	}
	defer r.Close()
	if err := r.MkdirAll(rel, mode); err != nil {
		return "", fmt.Errorf("create directory %s in target: %w", p, err)
	}
	return rel, nil
}

// writeFile writes data to p with mode (exactly: umask does not apply),
// creating parent directories (0755). A symlink at p is replaced by the
// regular file rather than written through; the replacement is atomic
// (temp file and rename in the same directory).
func (t targetFS) writeFile(p string, data []byte, mode fs.FileMode) error {
	return t.writeFrom(p, mode, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
}

func (t targetFS) writeFrom(p string, mode fs.FileMode, fill func(io.Writer) error) error {
	rel, err := t.resolve(p, false)
	if err != nil {
		return err
	}
	if rel == "" {
		return fmt.Errorf("write %s: is the target root", p)
	}
	dir, base := path.Split(rel)
	dir = strings.TrimSuffix(dir, "/")
	r, err := t.open()
	if err != nil {
		return err
	}
	defer r.Close()
	if dir != "" {
		if err := r.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("write %s in target: %w", p, err)
		}
	}
	tmp := path.Join(dir, "."+base+".booty-tmp")
	f, err := r.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("write %s in target: %w", p, err)
	}
	werr := fill(f)
	if werr == nil {
		werr = f.Chmod(mode)
	}
	if werr == nil {
		werr = f.Sync()
	}
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = r.Rename(tmp, rel)
	}
	if werr != nil {
		_ = r.Remove(tmp)
		return fmt.Errorf("write %s in target: %w", p, werr)
	}
	return nil
}

// symlink creates (or replaces) a symlink at p pointing to target; the
// target is stored as given, it is resolved by the installed OS.
func (t targetFS) symlink(target, p string) error {
	rel, err := t.resolve(p, false)
	if err != nil {
		return err
	}
	r, err := t.open()
	if err != nil {
		return err
	}
	defer r.Close()
	if dir := path.Dir(rel); dir != "." {
		if err := r.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("symlink %s in target: %w", p, err)
		}
	}
	if st, err := r.Lstat(rel); err == nil && !st.IsDir() {
		if err := r.Remove(rel); err != nil {
			return fmt.Errorf("symlink %s in target: %w", p, err)
		}
	}
	if err := r.Symlink(target, rel); err != nil {
		return fmt.Errorf("symlink %s in target: %w", p, err)
	}
	return nil
}

// remove deletes p (not following a final symlink); missing is fine.
func (t targetFS) remove(p string) error {
	rel, err := t.resolve(p, false)
	if err != nil {
		return err
	}
	r, err := t.open()
	if err != nil {
		return err
	}
	defer r.Close()
	if err := r.Remove(orDot(rel)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove %s in target: %w", p, err)
	}
	return nil
}

func orDot(rel string) string {
	if rel == "" {
		return "."
	}
	return rel
}

// chmodOwn gives p the mode bits of info and, when the agent runs as
// root, its owner and group; a final symlink is followed with follow.
func (t targetFS) chmodOwn(p string, info fs.FileInfo, follow bool) error {
	rel, err := t.resolve(p, follow)
	if err != nil {
		return err
	}
	r, err := t.open()
	if err != nil {
		return err
	}
	defer r.Close()
	m := info.Mode()
	if err := r.Chmod(orDot(rel), m.Perm()|m&(fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky)); err != nil {
		return fmt.Errorf("chmod %s in target: %w", p, err)
	}
	if st, ok := info.Sys().(*syscall.Stat_t); ok && os.Geteuid() == 0 {
		if err := r.Lchown(orDot(rel), int(st.Uid), int(st.Gid)); err != nil {
			return fmt.Errorf("chown %s in target: %w", p, err)
		}
		// chown clears setuid/setgid: set the mode again.
		if err := r.Chmod(orDot(rel), m.Perm()|m&(fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky)); err != nil {
			return fmt.Errorf("chmod %s in target: %w", p, err)
		}
	}
	return nil
}

// removeAll deletes p and everything below it; missing is fine.
func (t targetFS) removeAll(p string) error {
	rel, err := t.resolve(p, false)
	if err != nil {
		return err
	}
	if rel == "" {
		return fmt.Errorf("remove %s: is the target root", p)
	}
	r, err := t.open()
	if err != nil {
		return err
	}
	defer r.Close()
	if err := r.RemoveAll(rel); err != nil {
		return fmt.Errorf("remove %s in target: %w", p, err)
	}
	return nil
}
