package initramfs

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/booty-dev/booty/pkg/initsys/kmod"
)

// ModuleSpec is one line of a module list: a glob relative to
// /lib/modules/KVER/kernel, and whether the agent loads the matched modules
// at boot whether or not a device asks for them (filesystems, nls).
type ModuleSpec struct {
	Pattern string
	Load    bool
	Line    int
}

// ParseModuleList reads a module list: one glob per line, optionally
// followed by the word "load"; '#' starts a comment. A pattern ending in
// .ko also matches .ko.xz, .ko.zst and .ko.gz files.
func ParseModuleList(r io.Reader) ([]ModuleSpec, error) {
	var out []ModuleSpec
	sc := bufio.NewScanner(r)
	n := 0
	for sc.Scan() {
		n++
		line, _, _ := strings.Cut(sc.Text(), "#")
		f := strings.Fields(line)
		switch {
		case len(f) == 0:
			continue
		case len(f) == 1:
			out = append(out, ModuleSpec{Pattern: f[0], Line: n})
		case len(f) == 2 && f[1] == "load":
			out = append(out, ModuleSpec{Pattern: f[0], Load: true, Line: n})
		default:
			return nil, fmt.Errorf("module list line %d: want \"GLOB [load]\", got %q", n, strings.TrimSpace(line))
		}
		if p := out[len(out)-1].Pattern; filepath.IsAbs(p) || strings.Contains(p, "..") {
			return nil, fmt.Errorf("module list line %d: pattern %q must be relative to the kernel directory", n, p)
		}
		if _, err := filepath.Match(out[len(out)-1].Pattern, ""); err != nil {
			return nil, fmt.Errorf("module list line %d: %w", n, err)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read module list: %w", err)
	}
	return out, nil
}

// Selection is the set of modules that goes into an initramfs.
type Selection struct {
	// Modules are all modules to include, dependencies first, closed over
	// modules.dep and resolvable softdeps.
	Modules []*kmod.Module
	// Load are the names the agent loads at boot (specs marked load).
	Load []string
	// Builtin are specs naming a module that is built into the kernel.
	Builtin []string
	// Unmatched are specs that matched no module file and no built-in.
	Unmatched []string
}

// SelectModules expands specs against dir/kernel and closes the result
// over the dependencies in ix. A matched file that modules.dep does not
// know is an error (the index is stale); a spec matching nothing is
// reported in Unmatched or Builtin, not an error, since kernels differ.
func SelectModules(ix *kmod.Index, dir string, specs []ModuleSpec) (*Selection, error) {
	sel := &Selection{}
	var roots []string
	loadSeen := map[string]bool{}
	for _, s := range specs {
		pats := []string{s.Pattern}
		if strings.HasSuffix(s.Pattern, ".ko") {
			pats = append(pats, s.Pattern+".xz", s.Pattern+".zst", s.Pattern+".gz")
		}
		var matched []string
		for _, p := range pats {
			m, err := filepath.Glob(filepath.Join(dir, "kernel", p))
			if err != nil {
				return nil, fmt.Errorf("module list line %d: %w", s.Line, err)
			}
			matched = append(matched, m...)
		}
		if len(matched) == 0 {
			if name := kmod.Name(s.Pattern); ix.Builtin[name] {
				sel.Builtin = append(sel.Builtin, name)
			} else {
				sel.Unmatched = append(sel.Unmatched, s.Pattern)
			}
			continue
		}
		sort.Strings(matched)
		for _, f := range matched {
			name := kmod.Name(f)
			if _, ok := ix.Modules[name]; !ok {
				return nil, fmt.Errorf("module %s: file %s is not in %s (run depmod)", name, f, kmod.DepFile)
			}
			roots = append(roots, name)
			if s.Load && !loadSeen[name] {
				loadSeen[name] = true
				sel.Load = append(sel.Load, name)
			}
		}
	}
	order, err := ix.Order(roots...)
	if err != nil {
		return nil, fmt.Errorf("close module dependencies: %w", err)
	}
	sel.Modules = order
	return sel, nil
}

// filterLines copies the lines of src to a string, keeping comments and
// the lines for which keep returns true.
func filterLines(src string, keep func(line string) bool) (string, error) {
	f, err := os.Open(src)
	if err != nil {
		return "", err
	}
	defer f.Close()
	var b strings.Builder
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		line := sc.Text()
		t := strings.TrimSpace(line)
		if t == "" || strings.HasPrefix(t, "#") || keep(t) {
			b.WriteString(line)
			b.WriteByte('\n')
		}
	}
	if err := sc.Err(); err != nil {
		return "", fmt.Errorf("read %s: %w", src, err)
	}
	return b.String(), nil
}
