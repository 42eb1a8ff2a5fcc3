package image

import (
	"runtime"
	"testing"
)

func TestProcs(t *testing.T) {
	for _, tt := range []struct{ cpus, want int }{{1, 1 + ExtraProcs}, {2, 2 + ExtraProcs}, {64, 64 + ExtraProcs}, {0, 1 + ExtraProcs}} {
		if got := Procs(tt.cpus); got != tt.want {
			t.Errorf("Procs(%d) = %d, want %d", tt.cpus, got, tt.want)
		}
	}
}

func TestUseProcs(t *testing.T) {
	before := runtime.GOMAXPROCS(0)
	for _, env := range []string{"", "1"} {
		t.Setenv("GOMAXPROCS", env)
		restore := UseProcs()
		got := runtime.GOMAXPROCS(0)
		restore()
		want := Procs(runtime.NumCPU())
		if env != "" {
			want = before
		}
		if got != want {
			t.Errorf("GOMAXPROCS=%q: UseProcs set %d Ps, want %d", env, got, want)
		}
		if after := runtime.GOMAXPROCS(0); after != before {
			t.Errorf("GOMAXPROCS=%q: restore left %d Ps, want %d", env, after, before)
		}
	}
}
