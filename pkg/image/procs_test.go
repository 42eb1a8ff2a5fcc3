package image

import "testing"

func TestProcs(t *testing.T) {
	for _, tt := range []struct{ cpus, want int }{{1, 1 + ExtraProcs}, {2, 2 + ExtraProcs}, {64, 64 + ExtraProcs}, {0, 1 + ExtraProcs}} {
		if got := Procs(tt.cpus); got != tt.want {
			t.Errorf("Procs(%d) = %d, want %d", tt.cpus, got, tt.want)
		}
	}
}
