package vm

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"sync"
	"testing"
	"time"
)

// ArtifactsEnv names the environment variable with a directory where StartT
// keeps each test's console log and QEMU command line after the test ends.
const ArtifactsEnv = "BOOTY_E2E_ARTIFACTS"

// ArtifactDir returns the directory for t's VM artifacts: $BOOTY_E2E_ARTIFACTS
// joined with the test's name when the variable is set (created, kept after
// the test), else t.ArtifactDir() (kept with go test -artifacts, removed
// otherwise).
func ArtifactDir(t testing.TB) string {
	t.Helper()
	base := os.Getenv(ArtifactsEnv)
	if base == "" {
		return t.ArtifactDir()
	}
	name := regexp.MustCompile(`[^A-Za-z0-9._-]+`).ReplaceAllString(t.Name(), "_")
	dir := filepath.Join(base, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatalf("create artifact dir %s: %v", dir, err)
	}
	return dir
}

// StartT starts a VM for a test and fails the test (Fatal, never Skip) when
// it cannot start, for instance when QEMU is missing. Unless cfg sets them,
// the VM's log goes to the test log, its console lines go to the test
// output prefixed "console: ", its state (UEFI variables) lives in
// t.TempDir(), and the console log is written as it arrives to
// console.log in ArtifactDir(t), next to qemu.sh holding the command line.
// The test log gets the command line that reproduces the VM. A cleanup
// kills QEMU, waits for it, and names the console log.
//
// Each VM of one test gets its own console log: console.log, console-2.log...
func StartT(t testing.TB, cfg Config) *VM {
	t.Helper()
	dir := ArtifactDir(t)
	n := nextVMNumber(t)
	suffix := ""
	if n > 1 {
		suffix = "-" + strconv.Itoa(n)
	}
	if cfg.StateDir == "" {
		cfg.StateDir = t.TempDir()
	}
	if cfg.ConsoleLog == "" {
		cfg.ConsoleLog = filepath.Join(dir, "console"+suffix+".log")
	}
	out := t.Output()
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(out, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	consoleOut := &prefixWriter{w: out, prefix: "console" + suffix + ": "}
	if cfg.Console != nil {
		cfg.Console = io.MultiWriter(cfg.Console, consoleOut)
	} else {
		cfg.Console = consoleOut
	}

	start := time.Now()
	v, err := Start(context.Background(), cfg)
	if err != nil {
		t.Fatalf("start vm: %v", err)
	}
	t.Logf("vm%s (%s) reproduce with:\n%s", suffix, v.Accel(), v.CommandLine())
	script := filepath.Join(dir, "qemu"+suffix+".sh")
	if err := os.WriteFile(script, []byte("#!/bin/sh\n# "+t.Name()+"\nexec "+v.CommandLine()+"\n"), 0o755); err != nil {
		t.Logf("write %s: %v", script, err)
	}
	t.Cleanup(func() {
		if err := v.Kill(); err != nil {
			t.Errorf("%v", err)
		}
		t.Logf("vm%s ran %s; console log: %s", suffix, time.Since(start).Round(time.Millisecond), cfg.ConsoleLog)
	})
	return v
}

var (
	vmCountMu sync.Mutex
	vmCount   = map[string]int{}
)

func nextVMNumber(t testing.TB) int {
	vmCountMu.Lock()
	defer vmCountMu.Unlock()
	vmCount[t.Name()]++
	return vmCount[t.Name()]
}

// prefixWriter writes each line it is given (whole lines, as VM.emit
// delivers them) with a prefix.
type prefixWriter struct {
	mu     sync.Mutex
	w      io.Writer
	prefix string
}

func (p *prefixWriter) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, err := io.WriteString(p.w, p.prefix+string(b)); err != nil {
		return 0, err
	}
	return len(b), nil
}

// Artifact returns the build artifact a VM test needs: $env when set, else
// rel under the repository's out/ directory as seen from a test package two
// levels below the root (test/harness, test/bmcvm). It fails the test when
// the file does not exist, naming the make target that builds it.
func Artifact(t testing.TB, env, rel string) string {
	t.Helper()
	p := os.Getenv(env)
	if p == "" {
		p = filepath.Join("..", "..", "out", rel)
	}
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("%s: %v (run 'make initramfs demo-image', or set %s)", rel, err, env)
	}
	return p
}
