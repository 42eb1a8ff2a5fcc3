// Package testenv holds what tests share about the machine they run on:
// whether this is CI, and what to do when something a test needs is
// missing. Under CI (hack/deps.sh installed everything) a missing
// requirement fails the test; elsewhere it skips it, saying so.
package testenv

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// CI reports whether the CI environment variable is set to true, 1 or yes.
func CI() bool {
	v := strings.ToLower(os.Getenv("CI"))
	return v == "true" || v == "1" || v == "yes"
}

// Need fails t under CI, else skips it with a SKIPPED line, when ok is
// false; what says what is missing and how to get it.
func Need(t testing.TB, ok bool, what string) {
	t.Helper()
	if ok {
		return
	}
	if CI() {
		t.Fatalf("%s; required under CI", what)
	}
	t.Skipf("SKIPPED: %s", what)
}

// NeedTools is Need for each program in names on PATH.
func NeedTools(t testing.TB, names ...string) {
	t.Helper()
	for _, n := range names {
		_, err := exec.LookPath(n)
		Need(t, err == nil, n+" not installed (hack/deps.sh installs it)")
	}
}
