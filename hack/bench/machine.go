package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	"golang.org/x/sys/unix"
)

// machine is what the report says about where it ran.
type machine struct {
	CPUs      int               `json:"cpus"`
	CPUModel  string            `json:"cpu_model"`
	MemTotal  string            `json:"mem_total"`
	Kernel    string            `json:"kernel"`
	TargetFS  string            `json:"target_fs"`   // file system of --target-dir
	TargetDev string            `json:"target_disk"` // the disk under it: name, rotational, model
	Booty     string            `json:"booty_version"`
	Tools     map[string]string `json:"tools"`
}

// describeMachine gathers the machine's facts; what it cannot find it
// leaves as "?".
func describeMachine(ctx context.Context, targetDir, booty string) machine {
	m := machine{CPUs: runtime.NumCPU(), CPUModel: "?", MemTotal: "?", Kernel: "?", TargetFS: "?", TargetDev: "?", Tools: map[string]string{}}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	m.CPUModel = procField("/proc/cpuinfo", "model name")
	if v := procField("/proc/meminfo", "MemTotal"); v != "?" {
		var kib int64
		fmt.Sscanf(v, "%d", &kib)
		m.MemTotal = fmt.Sprintf("%.1f GiB", float64(kib)/(1<<20))
	}
	m.TargetFS = mountOf(targetDir)
	m.TargetDev = diskOf(targetDir)
	if v, err := runQuiet(ctx, booty, "version"); err == nil {
		m.Booty = firstLine(v)
	}
	for name, argv := range map[string][]string{
		"zstd":     {"zstd", "--version"},
		"gzip":     {"gzip", "--version"},
		"bmaptool": {"bmaptool", "--version"},
		"curl":     {"curl", "--version"},
		"dd":       {"dd", "--version"},
	} {
		out, err := runQuiet(ctx, "sh", "-c", `"$@" 2>&1`, "sh", argv[0], argv[1])
		if err == nil {
			m.Tools[name] = firstLine(out)
		}
	}
	return m
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(strings.TrimSpace(s), "\n")
	return strings.TrimSpace(l)
}

// procField returns the value of the first "key: value" line of a /proc
// file with that key, or "?".
func procField(path, key string) string {
	f, err := os.Open(path)
	if err != nil {
		return "?"
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == key {
			return strings.TrimSpace(v)
		}
	}
	return "?"
}

// mountOf returns "FSTYPE on MOUNTPOINT (SOURCE)" for the mount that holds
// dir: the longest mount point that is a prefix of it.
func mountOf(dir string) string {
	dir, _ = filepath.Abs(dir)
	if d, err := filepath.EvalSymlinks(dir); err == nil {
		dir = d
	}
	f, err := os.Open("/proc/self/mounts")
	if err != nil {
		return "?"
	}
	defer f.Close()
	best, bestLen := "?", -1
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) < 3 {
			continue
		}
		mp := fs[1]
		if (dir == mp || strings.HasPrefix(dir, strings.TrimSuffix(mp, "/")+"/")) && len(mp) > bestLen {
			best, bestLen = fmt.Sprintf("%s on %s (%s)", fs[2], mp, fs[0]), len(mp)
		}
	}
	return best
}

// diskOf names the block device under dir from sysfs: its name, whether
// it is rotational, and its model.
func diskOf(dir string) string {
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return "?"
	}
	sys := fmt.Sprintf("/sys/dev/block/%d:%d", unix.Major(st.Dev), unix.Minor(st.Dev))
	p, err := filepath.EvalSymlinks(sys)
	if err != nil {
		return "?"
	}
	// A partition's queue and model are its parent's.
	if _, err := os.Stat(filepath.Join(p, "partition")); err == nil {
		p = filepath.Dir(p)
	}
	read := func(rel string) string {
		b, err := os.ReadFile(filepath.Join(p, rel))
		if err != nil {
			return "?"
		}
		return strings.TrimSpace(string(b))
	}
	rot := map[string]string{"0": "non-rotational", "1": "rotational (as the kernel sees it)"}[read("queue/rotational")]
	s := filepath.Base(p) + ", " + rot
	if model := read("device/model"); model != "?" && model != "" {
		s += ", " + model
	}
	if sz := read("size"); sz != "?" {
		var sectors int64
		fmt.Sscanf(sz, "%d", &sectors)
		s += fmt.Sprintf(", %.0f GiB", float64(sectors*512)/(1<<30))
	}
	return s
}

// loadAvg returns the first three fields of /proc/loadavg.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}
