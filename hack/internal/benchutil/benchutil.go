// Package benchutil holds what the bench commands under hack/ share:
// medians and quantiles of their runs, the machine line of a report,
// writing a report as NAME.md and NAME.json, and a log handler that keeps
// only warnings.
package benchutil

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
)

// Median returns the median of xs, 0 for none.
func Median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(xs))
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// Quantile returns the q-quantile (0 < q ≤ 1) of xs by nearest rank, 0 for none.
func Quantile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(xs))
	i := int(float64(len(s))*q+0.999999) - 1
	return s[min(max(i, 0), len(s)-1)]
}

// CPUModel returns the first "model name" of /proc/cpuinfo, or "?".
func CPUModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "?"
	}
	for _, l := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "?"
}

// LoadAvg returns the 1, 5 and 15 minute load averages, or "?".
func LoadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) >= 3 {
		return strings.Join(f[:3], " ")
	}
	return "?"
}

// Machine describes where figures come from: CPUs, CPU model, kernel and
// the load average now.
func Machine() string {
	kernel := "?"
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		kernel = strings.TrimSpace(string(b))
	}
	return fmt.Sprintf("%d CPUs (%s), kernel %s, load average %s", runtime.NumCPU(), CPUModel(), kernel, LoadAvg())
}

// WriteReport writes v as DIR/NAME.json and md as DIR/NAME.md, creating
// DIR, and returns the two paths.
func WriteReport(dir, name string, v any, md string) (mdPath, jsonPath string, err error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", "", fmt.Errorf("create report dir: %w", err)
	}
	js, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return "", "", fmt.Errorf("encode report: %w", err)
	}
	jsonPath, mdPath = filepath.Join(dir, name+".json"), filepath.Join(dir, name+".md")
	if err := os.WriteFile(jsonPath, append(js, '\n'), 0o644); err != nil {
		return "", "", fmt.Errorf("write report: %w", err)
	}
	if err := os.WriteFile(mdPath, []byte(md), 0o644); err != nil {
		return "", "", fmt.Errorf("write report: %w", err)
	}
	return mdPath, jsonPath, nil
}

// WarnOnly wraps h so that only warnings and errors pass, also through
// loggers derived with With and WithGroup.
func WarnOnly(h slog.Handler) slog.Handler { return warnOnly{h} }

type warnOnly struct{ slog.Handler }

func (h warnOnly) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelWarn && h.Handler.Enabled(ctx, l)
}

func (h warnOnly) WithAttrs(as []slog.Attr) slog.Handler { return warnOnly{h.Handler.WithAttrs(as)} }
func (h warnOnly) WithGroup(name string) slog.Handler    { return warnOnly{h.Handler.WithGroup(name)} }
