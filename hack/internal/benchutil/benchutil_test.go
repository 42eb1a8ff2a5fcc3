package benchutil

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"strings"
	"testing"
)

func TestMedianQuantile(t *testing.T) {
	tests := []struct {
		xs               []float64
		median, p50, p99 float64
	}{
		{nil, 0, 0, 0},
		{[]float64{3}, 3, 3, 3},
		{[]float64{4, 1, 3, 2}, 2.5, 2, 4},
		{[]float64{5, 1, 4, 2, 3}, 3, 3, 5},
	}
	for _, tt := range tests {
		if got := Median(tt.xs); got != tt.median {
			t.Errorf("Median(%v) = %v, want %v", tt.xs, got, tt.median)
		}
		if got := Quantile(tt.xs, 0.5); got != tt.p50 {
			t.Errorf("Quantile(%v, 0.5) = %v, want %v", tt.xs, got, tt.p50)
		}
		if got := Quantile(tt.xs, 0.99); got != tt.p99 {
			t.Errorf("Quantile(%v, 0.99) = %v, want %v", tt.xs, got, tt.p99)
		}
	}
	xs := make([]float64, 100)
	for i := range xs {
		xs[i] = float64(100 - i)
	}
	if got := Quantile(xs, 0.99); got != 99 {
		t.Errorf("p99 of 1..100 = %v, want 99", got)
	}
}

func TestWriteReport(t *testing.T) {
	dir := t.TempDir() + "/sub"
	md, js, err := WriteReport(dir, "x", map[string]int{"a": 1}, "# hi\n")
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(md); string(b) != "# hi\n" {
		t.Errorf("%s = %q", md, b)
	}
	var v map[string]int
	if b, _ := os.ReadFile(js); json.Unmarshal(b, &v) != nil || v["a"] != 1 {
		t.Errorf("%s = %q", js, b)
	}
}

func TestWarnOnly(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(WarnOnly(slog.NewTextHandler(&buf, nil))).With("k", "v").WithGroup("g")
	log.Info("quiet")
	log.Warn("loud")
	if s := buf.String(); strings.Contains(s, "quiet") || !strings.Contains(s, "loud") || !strings.Contains(s, "k=v") {
		t.Errorf("log = %q", s)
	}
	if WarnOnly(slog.NewTextHandler(&buf, nil)).Enabled(context.Background(), slog.LevelInfo) {
		t.Error("info enabled")
	}
}
