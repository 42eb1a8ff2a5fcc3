package safego

import (
	"errors"
	"strings"
	"sync"
	"testing"
)

func TestCallTurnsPanicIntoError(t *testing.T) {
	err := Call("decode", func() error {
		var m map[string]int
		m["x"] = 1 // nil map write panics
		return nil
	})
	var pe *PanicError
	if !errors.As(err, &pe) {
		t.Fatalf("Call = %v, want a *PanicError", err)
	}
	if !strings.HasPrefix(err.Error(), "decode: panic: ") || len(pe.Stack) == 0 {
		t.Fatalf("error %q / stack %d bytes: want the step name and a stack", err, len(pe.Stack))
	}
}

func TestCallPassesErrors(t *testing.T) {
	want := errors.New("boom")
	if err := Call("x", func() error { return want }); err != want {
		t.Fatalf("Call = %v, want %v", err, want)
	}
	if err := Call("x", func() error { return nil }); err != nil {
		t.Fatalf("Call = %v, want nil", err)
	}
}

func TestGoReportsPanicAndWaitGroupEnds(t *testing.T) {
	var wg sync.WaitGroup
	var mu sync.Mutex
	var got []error
	on := func(err error) { mu.Lock(); got = append(got, err); mu.Unlock() }
	Go(&wg, "stage a", on, func() { panic("a broke") })
	Go(&wg, "stage b", on, func() {})
	wg.Wait()
	if len(got) != 1 || got[0].Error() != "stage a: panic: a broke" {
		t.Fatalf("errors = %v, want one for stage a", got)
	}
	done := make(chan error, 1)
	Go(nil, "plain", func(err error) { done <- err }, func() { panic(7) })
	if err := <-done; err == nil || !strings.Contains(err.Error(), "plain: panic: 7") {
		t.Fatalf("plain goroutine: %v", err)
	}
}
