package provision

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
)

// testLogger routes logs, debug level included, to the test's output.
func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// fakeCall is one command a fakeRunner was asked to run.
type fakeCall struct {
	Root string // "" for Run
	Name string
	Args []string
}

func (c fakeCall) String() string {
	s := strings.Join(append([]string{c.Name}, c.Args...), " ")
	if c.Root != "" {
		s = "chroot " + s
	}
	return s
}

// fakeRunner records commands and answers them with Handle (nil: success,
// no output).
type fakeRunner struct {
	mu     sync.Mutex
	Calls  []fakeCall
	Handle func(c fakeCall) (stdout, stderr []byte, err error)
}

func (f *fakeRunner) record(c fakeCall) ([]byte, []byte, error) {
	f.mu.Lock()
	f.Calls = append(f.Calls, c)
	h := f.Handle
	f.mu.Unlock()
	if h == nil {
		return nil, nil, nil
	}
	return h(c)
}

func (f *fakeRunner) Run(_ context.Context, name string, args ...string) ([]byte, []byte, error) {
	return f.record(fakeCall{Name: name, Args: args})
}

func (f *fakeRunner) RunChroot(_ context.Context, root, name string, args ...string) ([]byte, []byte, error) {
	return f.record(fakeCall{Root: root, Name: name, Args: args})
}

func (f *fakeRunner) commands() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, c := range f.Calls {
		out = append(out, c.String())
	}
	return out
}
