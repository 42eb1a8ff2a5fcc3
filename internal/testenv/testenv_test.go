package testenv

import (
	"runtime"
	"testing"
)

func TestCI(t *testing.T) {
	for v, want := range map[string]bool{"true": true, "1": true, "YES": true, "": false, "false": false, "0": false} {
		t.Setenv("CI", v)
		if got := CI(); got != want {
			t.Errorf("CI=%q: CI() = %v, want %v", v, got, want)
		}
	}
}

// Outside CI a missing tool skips the test; under CI it fails it.
func TestNeedTools(t *testing.T) {
	const missing = "booty-no-such-tool-9f3a"
	for _, ci := range []string{"", "true"} {
		t.Setenv("CI", ci)
		var skipped, failed bool
		done := make(chan struct{})
		ft := &recorder{TB: t, skip: &skipped, fail: &failed}
		go func() {
			defer close(done)
			NeedTools(ft, "sh", missing)
		}()
		<-done
		if ci == "" && (!skipped || failed) {
			t.Errorf("outside CI: skipped %v failed %v, want a skip", skipped, failed)
		}
		if ci == "true" && (!failed || skipped) {
			t.Errorf("under CI: skipped %v failed %v, want a failure", skipped, failed)
		}
	}
}

// recorder notes Skipf and Fatalf and ends the goroutine like they do.
type recorder struct {
	testing.TB
	skip, fail *bool
}

func (r *recorder) Helper() {}

func (r *recorder) Skipf(string, ...any) {
	*r.skip = true
	runtime.Goexit()
}

func (r *recorder) Fatalf(string, ...any) {
	*r.fail = true
	runtime.Goexit()
}
