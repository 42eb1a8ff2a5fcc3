// Package safego starts the agent's goroutines so that a panic in one of
// them becomes an error of the step that started it.
//
// booty runs as PID 1: a panic that escapes a goroutine kills init, which is
// a kernel panic with no report and no failure policy. RecoverAndReboot in
// the entry point only sees panics of the main goroutine, so every other
// goroutine the agent starts goes through Go or Call.
package safego

import (
	"fmt"
	"runtime/debug"
)

// PanicError is a recovered panic: what was running, the value and the
// stack of the goroutine that panicked.
type PanicError struct {
	What  string
	Value any
	Stack []byte
}

func (e *PanicError) Error() string {
	return fmt.Sprintf("%s: panic: %v", e.What, e.Value)
}

// Call runs f and returns a panic in it as a *PanicError, else f's error.
func Call(what string, f func() error) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &PanicError{What: what, Value: v, Stack: debug.Stack()}
		}
	}()
	return f()
}

// Recover, deferred directly by a goroutine (`defer safego.Recover(...)`),
// passes a panic of that goroutine to onPanic as a *PanicError and ends the
// goroutine normally. Deferred after the goroutine's own cleanup (closing
// its output channel), it reports the failure before that cleanup runs, so
// a consumer that sees the channel close also sees the error.
func Recover(what string, onPanic func(error)) {
	if v := recover(); v != nil {
		onPanic(&PanicError{What: what, Value: v, Stack: debug.Stack()})
	}
}

// Starter is what starts a goroutine: a *sync.WaitGroup, or nil for a
// plain go statement.
type Starter interface{ Go(func()) }

// Go runs f in a goroutine started by wg (a plain goroutine when wg is nil);
// a panic in f is passed to onPanic as a *PanicError instead of crashing
// the process.
func Go(wg Starter, what string, onPanic func(error), f func()) {
	run := func() {
		defer Recover(what, onPanic)
		f()
	}
	if wg == nil {
		go run()
		return
	}
	wg.Go(run)
}
