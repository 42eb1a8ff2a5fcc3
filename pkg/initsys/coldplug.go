package initsys

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// ScanModaliases returns the distinct modalias strings of all devices under
// sysDir (/sys): every "modalias" file below sysDir/devices, plus
// sysDir/bus/*/devices/*/modalias for buses whose devices live elsewhere.
// Unreadable files are skipped (devices come and go); it fails only when
// sysDir/devices cannot be walked at all.
func ScanModaliases(sysDir string) ([]string, error) {
	seen := map[string]bool{}
	add := func(p string) {
		b, err := os.ReadFile(p)
		if err != nil {
			return
		}
		if s := strings.TrimSpace(string(b)); s != "" {
			seen[s] = true
		}
	}
	root := filepath.Join(sysDir, "devices")
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p == root {
				return err
			}
			return nil // a vanished or unreadable subtree
		}
		if d.Name() == "modalias" && d.Type().IsRegular() {
			add(p)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("scan modaliases in %s: %w", root, err)
	}
	bus, _ := filepath.Glob(filepath.Join(sysDir, "bus", "*", "devices", "*", "modalias"))
	for _, p := range bus {
		add(p)
	}
	out := make([]string, 0, len(seen))
	for s := range seen {
		out = append(out, s)
	}
	sort.Strings(out)
	return out, nil
}

// ReadModulesLoad reads a modules-load file: one module name or alias per
// line, '#' comments. A missing file is an empty list.
func ReadModulesLoad(path string) ([]string, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("open modules-load list: %w", err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line, _, _ := strings.Cut(sc.Text(), "#")
		if line = strings.TrimSpace(line); line != "" {
			out = append(out, line)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read modules-load list %s: %w", path, err)
	}
	return out, nil
}
