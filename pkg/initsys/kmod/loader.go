package kmod

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"

	"github.com/klauspost/compress/zstd"
	"github.com/ulikunitz/xz"
)

// Loader loads modules of one kernel into the running kernel, each at most
// once, dependencies first. Its fields are the system access; tests replace
// Init and the paths. Load and Present may be called from several
// goroutines at once: a module is loaded by one of them while the others
// that need it wait for that load, so independent modules load in
// parallel and every module still comes after its dependencies.
type Loader struct {
	// Dir is the modules directory, /lib/modules/$(uname -r); module paths
	// of the index are relative to it.
	Dir string
	// Index is the parsed metadata of Dir.
	Index *Index
	// Init loads one module file with parameters. The default uses
	// finit_module(2), for compressed files with MODULE_INIT_COMPRESSED_FILE
	// and, when the kernel refuses that, init_module(2) on the file
	// decompressed in memory. An error wrapping os.ErrExist (EEXIST) means
	// the module was already loaded; ENODEV means its init found nothing
	// to drive, which is logged but not counted as a failure.
	Init func(path, params string) error
	// ProcModules and SysModule tell which modules the kernel already has
	// (/proc/modules, /sys/module).
	ProcModules string
	SysModule   string
	// Log receives one line per module loaded or failed.
	Log *slog.Logger
	// Options are module parameters by module name, as modprobe.d's
	// "options" lines give them; NewLoader sets DefaultOptions.
	Options map[string]string

	mu      sync.Mutex
	have    map[string]bool
	loading map[string]chan struct{} // closed when that module's load ends
}

// DefaultOptions are the parameters booty loads modules with, whoever asks
// (coldplug, the modules-load list, or the kernel through booty as its
// modprobe): bonding without the unconfigured bond0 it makes by default,
// which would take the name of the config's bond.
var DefaultOptions = map[string]string{"bonding": "max_bonds=0"}

// NewLoader returns a Loader for dir with the system defaults and the index
// read from dir. It fails when the index cannot be read.
func NewLoader(dir string, log *slog.Logger) (*Loader, error) {
	ix, err := LoadIndex(dir)
	if err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Loader{
		Dir:         dir,
		Index:       ix,
		Init:        initModuleFile,
		ProcModules: "/proc/modules",
		SysModule:   "/sys/module",
		Log:         log,
		Options:     DefaultOptions,
	}, nil
}

// Present reports whether the kernel already has module name: loaded
// earlier by this Loader, listed in /proc/modules, present under
// /sys/module, or built in.
func (l *Loader) Present(name string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.present(name)
}

// present is Present with l.mu held.
func (l *Loader) present(name string) bool {
	if l.have == nil {
		l.have = map[string]bool{}
		if f, err := os.Open(l.ProcModules); err == nil {
			sc := bufio.NewScanner(f)
			for sc.Scan() {
				if fs := strings.Fields(sc.Text()); len(fs) > 0 {
					l.have[fs[0]] = true
				}
			}
			f.Close()
		}
	}
	if l.have[name] || l.Index.Builtin[name] {
		return true
	}
	if l.SysModule != "" {
		if _, err := os.Stat(filepath.Join(l.SysModule, name)); err == nil {
			l.have[name] = true
			return true
		}
	}
	return false
}

// Load resolves each name (module name or alias), orders the result with
// its dependencies and loads every module the kernel does not have yet.
// It keeps going past failures: the names it loaded are returned together
// with all errors joined. A name that resolves to nothing is an error
// wrapping ErrNotFound.
func (l *Loader) Load(names ...string) ([]string, error) {
	return l.load(names, false)
}

// LoadDeps is Load of what each name needs before it (its dependencies
// and softdep pre: modules) without the name's own module: the coldplug
// loads the dependencies of slow-probing disk controllers first, on their
// own (see initsys).
func (l *Loader) LoadDeps(names ...string) ([]string, error) {
	return l.load(names, true)
}

func (l *Loader) load(names []string, depsOnly bool) ([]string, error) {
	var errs []error
	var mods []string
	for _, n := range names {
		r, err := l.Index.Resolve(n)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		mods = append(mods, r...)
	}
	// Order each requested module on its own so one missing dependency
	// does not hide the others.
	var loaded []string
	for _, name := range mods {
		order, err := l.Index.Order(name)
		if err != nil {
			errs = append(errs, err)
		}
		if depsOnly {
			// The module itself, and its softdep post: modules after it.
			if i := slices.IndexFunc(order, func(m *Module) bool { return m.Name == Name(name) }); i >= 0 {
				order = order[:i]
			}
		}
		for _, m := range order {
			ok, err := l.ensure(m)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			if ok {
				loaded = append(loaded, m.Name)
			}
		}
	}
	return loaded, errors.Join(errs...)
}

// ensure loads m unless the kernel has it. When another goroutine is
// loading m it waits for that load to end and reports nothing loaded (the
// other one reports it). It returns whether this call loaded m.
func (l *Loader) ensure(m *Module) (bool, error) {
	l.mu.Lock()
	for {
		ch, busy := l.loading[m.Name]
		if !busy {
			break
		}
		l.mu.Unlock()
		<-ch
		l.mu.Lock()
	}
	if l.present(m.Name) {
		l.mu.Unlock()
		return false, nil
	}
	if l.loading == nil {
		l.loading = map[string]chan struct{}{}
	}
	ch := make(chan struct{})
	l.loading[m.Name] = ch
	l.mu.Unlock()

	ok, err := l.loadOne(m)

	l.mu.Lock()
	l.have[m.Name] = true // loaded, or failed: do not try again this boot
	delete(l.loading, m.Name)
	l.mu.Unlock()
	close(ch)
	return ok, err
}

func (l *Loader) loadOne(m *Module) (bool, error) {
	p := filepath.Join(l.Dir, m.Path)
	err := l.Init(p, l.Options[m.Name])
	if errors.Is(err, os.ErrExist) {
		return false, nil
	}
	if errors.Is(err, syscall.ENODEV) {
		// The module's init found nothing to drive (a CPU feature
		// missing, not an EFI system): normal, not a failure.
		l.Log.Info("module found no device", "module", m.Name)
		return false, nil
	}
	if err != nil {
		l.Log.Warn("load module failed", "module", m.Name, "path", m.Path, "err", err)
		return false, fmt.Errorf("load module %s: %w", m.Name, err)
	}
	l.Log.Info("loaded module", "module", m.Name)
	return true, nil
}

// Decompress returns the module image in data decompressed according to
// the file name's suffix (.xz, .zst, .gz); other names are returned as is.
func Decompress(name string, data []byte) ([]byte, error) {
	var r io.Reader
	switch {
	case strings.HasSuffix(name, ".xz"):
		xr, err := xz.NewReader(bytes.NewReader(data))
		if err != nil {
			return nil, fmt.Errorf("decompress %s: %w", name, err)
		}
		r = xr
	case strings.HasSuffix(name, ".zst"):
		zr, err := zstd.NewReader(bytes.NewReader(data))
		if err != nil {
			return nil, fmt.Errorf("decompress %s: %w", name, err)
		}
		defer zr.Close()
		r = zr
	case strings.HasSuffix(name, ".gz"):
		gr, err := gzip.NewReader(bytes.NewReader(data))
		if err != nil {
			return nil, fmt.Errorf("decompress %s: %w", name, err)
		}
		r = gr
	default:
		return data, nil
	}
	out, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("decompress %s: %w", name, err)
	}
	return out, nil
}

// Compressed reports whether a module file name carries a compression suffix.
func Compressed(name string) bool {
	return strings.HasSuffix(name, ".xz") || strings.HasSuffix(name, ".zst") || strings.HasSuffix(name, ".gz")
}
