package provision

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"
	"syscall"

	"github.com/booty-dev/booty/pkg/chroot"
)

// targetFS does file operations on the installed OS at dir, confined to
// it: paths are resolved with chroot.Resolve, and the final operation goes
// through an os.Root so that a link swapped in between cannot escape.
type targetFS struct{ dir string }

// hostPath resolves p (which must not contain "..") and returns the host
// path of the result, following a final symlink when followFinal.
func (t targetFS) resolve(p string, followFinal bool) (string, error) {
	if err := chroot.CheckPath(p); err != nil {
		return "", err
	}
	return chroot.Resolve(t.dir, p, followFinal)
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
	_, err = os.Stat(chroot.Join(t.dir, rel))
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
