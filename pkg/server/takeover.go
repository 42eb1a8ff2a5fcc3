package server

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/booty-dev/booty/pkg/api"
)

// handleAgentBoot answers GET /v1/agent/boot with api.AgentBoot: the iPXE
// kernel and initrd under /files/ (absolute URLs under PublicURL, or
// /files/ paths without it), their sizes and SHA-256 digests, and
// IPXECmdline. Digests are computed once per file version (path, size,
// modification time). A missing kernel or initrd is 404 naming it.
func (s *Server) handleAgentBoot(w http.ResponseWriter, r *http.Request) {
	if s.opts.FilesDir == "" {
		writeError(w, http.StatusNotFound, "bootyd serves no files (no --files), so no agent to boot")
		return
	}
	var out api.AgentBoot
	for _, f := range []struct {
		name, path string
		dst        *api.BootFile
	}{{"kernel", s.opts.IPXEKernel, &out.Kernel}, {"initrd", s.opts.IPXEInitrd, &out.Initrd}} {
		sum, size, err := bootDigests.digest(s.opts.FilesDir, f.path)
		if errors.Is(err, fs.ErrNotExist) {
			writeError(w, http.StatusNotFound, "agent %s %q is not in the files directory", f.name, f.path)
			return
		}
		if err != nil {
			s.log.Error("digest agent file", "file", f.path, "err", err)
			writeError(w, http.StatusInternalServerError, "digest agent %s %q: %v", f.name, f.path, err)
			return
		}
		*f.dst = api.BootFile{URL: fileURL(s.opts.PublicURL, f.path), SHA256: sum, Size: size}
	}
	out.Cmdline = s.opts.IPXECmdline
	s.log.Info("serve agent boot files", "kernel", out.Kernel.URL, "initrd", out.Initrd.URL, "remote", r.RemoteAddr)
	writeJSON(w, http.StatusOK, out)
}

// digestCache remembers the SHA-256 of files by path, size and
// modification time, so that a changed file is hashed again.
type digestCache struct {
	mu sync.Mutex
	m  map[digestKey]string
}

type digestKey struct {
	path  string
	size  int64
	mtime time.Time
}

// bootDigests serves every Server of the process; it holds a few entries.
var bootDigests digestCache

// maxDigests bounds the cache; it is emptied when full.
const maxDigests = 64

// digest returns the hex SHA-256 and size of p inside dir, opened through
// os.Root (no escape from dir). Errors wrap fs.ErrNotExist for a missing
// file, and say so for a directory.
func (c *digestCache) digest(dir, p string) (string, int64, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return "", 0, fmt.Errorf("open files directory %s: %w", dir, err)
	}
	defer root.Close()
	f, err := root.Open(p)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return "", 0, fmt.Errorf("stat %s: %w", p, err)
	}
	if !st.Mode().IsRegular() {
		return "", 0, fmt.Errorf("%s is not a regular file", p)
	}
	k := digestKey{path: dir + "/" + strings.TrimPrefix(p, "/"), size: st.Size(), mtime: st.ModTime()}
	c.mu.Lock()
	sum, ok := c.m[k]
	c.mu.Unlock()
	if ok {
		return sum, st.Size(), nil
	}
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return "", 0, fmt.Errorf("read %s: %w", p, err)
	}
	if n != st.Size() {
		return "", 0, fmt.Errorf("read %s: %d bytes, stat said %d (changed while read)", p, n, st.Size())
	}
	sum = hex.EncodeToString(h.Sum(nil))
	c.mu.Lock()
	if c.m == nil || len(c.m) >= maxDigests {
		c.m = map[digestKey]string{}
	}
	c.m[k] = sum
	c.mu.Unlock()
	return sum, n, nil
}
