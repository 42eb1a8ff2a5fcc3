// Package kmod reads the module metadata depmod writes under
// /lib/modules/$(uname -r) (modules.dep, modules.alias, modules.softdep,
// modules.builtin), matches device modaliases against it the way modprobe
// does, and orders modules so every dependency comes before its user.
//
// It holds no system state: the agent's coldplug (package initsys) and the
// initramfs builder (package initramfs) both use it, on the running kernel
// and on the build host respectively.
package kmod

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// ErrNotFound is returned when a name is neither a module nor an alias of one.
var ErrNotFound = errors.New("module not found")

// Metadata file names inside a /lib/modules/KVER directory.
const (
	DepFile     = "modules.dep"
	AliasFile   = "modules.alias"
	SoftdepFile = "modules.softdep"
	BuiltinFile = "modules.builtin"
	OrderFile   = "modules.order"
)

// Module is one loadable module as listed in modules.dep.
type Module struct {
	// Name is the kernel's name: file base without .ko*, '-' replaced by '_'.
	Name string
	// Path is relative to the modules directory, e.g. kernel/fs/ext4/ext4.ko.
	Path string
	// Deps are the names of the modules this one needs, as depmod lists them.
	Deps []string
}

// Alias is one "alias PATTERN MODULE" line of modules.alias.
type Alias struct {
	Pattern string
	Module  string
}

// Softdep holds the "pre:" and "post:" names of one softdep line; the names
// may be modules or aliases.
type Softdep struct {
	Pre, Post []string
}

// Index is the parsed metadata of one kernel's modules directory.
type Index struct {
	// Modules maps a module name to its entry.
	Modules map[string]*Module
	// Aliases in file order.
	Aliases []Alias
	// Softdeps maps a module name to its soft dependencies.
	Softdeps map[string]Softdep
	// Builtin holds names of modules compiled into the kernel.
	Builtin map[string]bool

	// byPrefix groups aliases by the text before the first ':' (pci, usb,
	// virtio, ...) so a modalias is matched only against its own bus.
	byPrefix map[string][]Alias
}

// Name returns the kernel name of a module given its file path or a name a
// user typed: base name without .ko, .ko.xz, .ko.zst or .ko.gz, with '-'
// replaced by '_'.
func Name(p string) string {
	b := filepath.Base(p)
	for _, ext := range []string{".ko.xz", ".ko.zst", ".ko.gz", ".ko"} {
		if strings.HasSuffix(b, ext) {
			b = strings.TrimSuffix(b, ext)
			break
		}
	}
	return strings.ReplaceAll(b, "-", "_")
}

// LoadIndex reads modules.dep (required) and modules.alias, modules.softdep
// and modules.builtin (each optional) from dir. It fails if modules.dep is
// missing or any present file is malformed.
func LoadIndex(dir string) (*Index, error) {
	ix := &Index{Softdeps: map[string]Softdep{}, Builtin: map[string]bool{}}
	f, err := os.Open(filepath.Join(dir, DepFile))
	if err != nil {
		return nil, fmt.Errorf("open module index: %w", err)
	}
	ix.Modules, err = ParseDep(f)
	f.Close()
	if err != nil {
		return nil, fmt.Errorf("parse %s: %w", filepath.Join(dir, DepFile), err)
	}
	optional := []struct {
		name  string
		parse func(io.Reader) error
	}{
		{AliasFile, func(r io.Reader) (err error) { ix.Aliases, err = ParseAlias(r); return err }},
		{SoftdepFile, func(r io.Reader) (err error) { ix.Softdeps, err = ParseSoftdep(r); return err }},
		{BuiltinFile, func(r io.Reader) (err error) { ix.Builtin, err = ParseBuiltin(r); return err }},
	}
	for _, o := range optional {
		p := filepath.Join(dir, o.name)
		f, err := os.Open(p)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("open %s: %w", p, err)
		}
		err = o.parse(f)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("parse %s: %w", p, err)
		}
	}
	ix.group()
	return ix, nil
}

// NewIndex builds an Index from parsed parts (nil maps are allowed).
func NewIndex(mods map[string]*Module, aliases []Alias, softdeps map[string]Softdep, builtin map[string]bool) *Index {
	ix := &Index{Modules: mods, Aliases: aliases, Softdeps: softdeps, Builtin: builtin}
	if ix.Modules == nil {
		ix.Modules = map[string]*Module{}
	}
	if ix.Softdeps == nil {
		ix.Softdeps = map[string]Softdep{}
	}
	if ix.Builtin == nil {
		ix.Builtin = map[string]bool{}
	}
	ix.group()
	return ix
}

func (ix *Index) group() {
	ix.byPrefix = map[string][]Alias{}
	for _, a := range ix.Aliases {
		p := aliasPrefix(a.Pattern)
		ix.byPrefix[p] = append(ix.byPrefix[p], a)
	}
}

// aliasPrefix is the bus part of a pattern or modalias ("pci" of
// "pci:v..."); a pattern whose prefix contains a wildcard goes under "*".
func aliasPrefix(s string) string {
	i := strings.IndexByte(s, ':')
	if i < 0 {
		return ""
	}
	p := s[:i]
	if strings.ContainsAny(p, "*?[") {
		return "*"
	}
	return p
}

// lines calls fn for every non-empty, non-comment line of r.
func lines(r io.Reader, fn func(n int, line string) error) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	n := 0
	for sc.Scan() {
		n++
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if err := fn(n, line); err != nil {
			return err
		}
	}
	return sc.Err()
}

// ParseDep parses modules.dep: "path.ko: dep1.ko dep2.ko" per line.
func ParseDep(r io.Reader) (map[string]*Module, error) {
	mods := map[string]*Module{}
	err := lines(r, func(n int, line string) error {
		path, deps, ok := strings.Cut(line, ":")
		if !ok || strings.TrimSpace(path) == "" {
			return fmt.Errorf("line %d: want \"module.ko: deps\", got %q", n, line)
		}
		m := &Module{Name: Name(path), Path: strings.TrimSpace(path)}
		for _, d := range strings.Fields(deps) {
			m.Deps = append(m.Deps, Name(d))
		}
		mods[m.Name] = m
		return nil
	})
	return mods, err
}

// ParseAlias parses modules.alias: "alias PATTERN MODULE" per line.
func ParseAlias(r io.Reader) ([]Alias, error) {
	var out []Alias
	err := lines(r, func(n int, line string) error {
		f := strings.Fields(line)
		if len(f) != 3 || f[0] != "alias" {
			return fmt.Errorf("line %d: want \"alias PATTERN MODULE\", got %q", n, line)
		}
		out = append(out, Alias{Pattern: f[1], Module: Name(f[2])})
		return nil
	})
	return out, err
}

// ParseSoftdep parses modules.softdep: "softdep MODULE pre: a b post: c".
// Names before any "pre:" or "post:" are ignored, as kmod does.
func ParseSoftdep(r io.Reader) (map[string]Softdep, error) {
	out := map[string]Softdep{}
	err := lines(r, func(n int, line string) error {
		f := strings.Fields(line)
		if len(f) < 2 || f[0] != "softdep" {
			return fmt.Errorf("line %d: want \"softdep MODULE pre: ... post: ...\", got %q", n, line)
		}
		name := Name(f[1])
		sd := out[name]
		mode := ""
		for _, t := range f[2:] {
			switch t {
			case "pre:", "post:":
				mode = t
			default:
				if mode == "pre:" {
					sd.Pre = append(sd.Pre, t)
				} else if mode == "post:" {
					sd.Post = append(sd.Post, t)
				}
			}
		}
		out[name] = sd
		return nil
	})
	return out, err
}

// ParseBuiltin parses modules.builtin: one module path per line.
func ParseBuiltin(r io.Reader) (map[string]bool, error) {
	out := map[string]bool{}
	err := lines(r, func(_ int, line string) error {
		out[Name(line)] = true
		return nil
	})
	return out, err
}

// MatchAlias returns the names of all modules with an alias pattern that
// matches modalias, sorted and without duplicates. modprobe loads all of
// them, and so does the coldplug.
func (ix *Index) MatchAlias(modalias string) []string {
	seen := map[string]bool{}
	check := func(as []Alias) {
		for _, a := range as {
			if !seen[a.Module] && Match(a.Pattern, modalias) {
				seen[a.Module] = true
			}
		}
	}
	check(ix.byPrefix[aliasPrefix(modalias)])
	if aliasPrefix(modalias) != "*" {
		check(ix.byPrefix["*"])
	}
	out := make([]string, 0, len(seen))
	for m := range seen {
		out = append(out, m)
	}
	sort.Strings(out)
	return out
}

// Resolve turns a module name or alias into module names: the module itself
// when modules.dep lists it or it is built in, otherwise every module whose
// alias matches. It returns ErrNotFound when nothing matches.
func (ix *Index) Resolve(nameOrAlias string) ([]string, error) {
	n := Name(nameOrAlias)
	if _, ok := ix.Modules[n]; ok || ix.Builtin[n] {
		return []string{n}, nil
	}
	if ms := ix.MatchAlias(nameOrAlias); len(ms) > 0 {
		return ms, nil
	}
	return nil, fmt.Errorf("resolve %q: %w", nameOrAlias, ErrNotFound)
}

// Order returns the modules to load for names, dependencies first, each
// once: for every name its modules.dep dependencies (recursively, each
// before its users), its softdep "pre:" modules, the module itself, then its
// softdep "post:" modules. Built-in modules are left out. Softdeps that do
// not resolve are skipped, as modprobe does; a hard dependency missing from
// the index is an error.
func (ix *Index) Order(names ...string) ([]*Module, error) {
	var out []*Module
	done := map[string]bool{}
	visiting := map[string]bool{}
	var visit func(name string, soft bool) error
	visit = func(name string, soft bool) error {
		if done[name] || visiting[name] || ix.Builtin[name] {
			return nil
		}
		m, ok := ix.Modules[name]
		if !ok {
			if soft {
				return nil
			}
			return fmt.Errorf("order module %s: %w", name, ErrNotFound)
		}
		visiting[name] = true
		for _, d := range m.Deps {
			if err := visit(d, false); err != nil {
				return fmt.Errorf("dependency of %s: %w", name, err)
			}
		}
		sd := ix.Softdeps[name]
		for _, p := range sd.Pre {
			for _, r := range ix.resolveSoft(p) {
				_ = visit(r, true)
			}
		}
		visiting[name] = false
		done[name] = true
		out = append(out, m)
		for _, p := range sd.Post {
			for _, r := range ix.resolveSoft(p) {
				_ = visit(r, true)
			}
		}
		return nil
	}
	for _, n := range names {
		if err := visit(Name(n), false); err != nil {
			return out, err
		}
	}
	return out, nil
}

func (ix *Index) resolveSoft(name string) []string {
	r, _ := ix.Resolve(name)
	return r
}
