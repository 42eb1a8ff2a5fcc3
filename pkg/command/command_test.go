package command

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
}

func TestExecRunCapturesAndFails(t *testing.T) {
	r := Exec{Log: testLogger(t)}
	out, _, err := r.Run(t.Context(), "sh", "-c", "echo out; echo err >&2")
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	if string(out) != "out\n" {
		t.Errorf("stdout = %q, want %q", out, "out\n")
	}
	out, _, err = r.Run(t.Context(), "sh", "-c", `echo "PATH=$PATH"`)
	if err != nil || strings.TrimSpace(string(out)) != "PATH="+DefaultPath {
		t.Errorf("environment PATH: got %q, %v; want PATH=%s", out, err, DefaultPath)
	}
	_, _, err = r.Run(t.Context(), "sh", "-c", "echo broken >&2; exit 7")
	var ce *Error
	if !errors.As(err, &ce) || ce.ExitCode != 7 || ce.Stderr != "broken" {
		t.Fatalf("err = %#v, want Error exit 7 stderr broken", err)
	}
	if !strings.Contains(err.Error(), "exit code 7") || !strings.Contains(err.Error(), "broken") {
		t.Errorf("error text %q lacks exit code or stderr", err)
	}
	if _, _, err := r.Run(t.Context(), "no-such-program-booty"); !errors.Is(err, exec.ErrNotFound) {
		t.Errorf("missing program: err = %v, want exec.ErrNotFound", err)
	}
}

func TestExecTimeout(t *testing.T) {
	r := Exec{Timeout: 200 * time.Millisecond, Log: testLogger(t)}
	start := time.Now()
	_, _, err := r.Run(t.Context(), "sleep", "10")
	if err == nil || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want deadline exceeded", err)
	}
	if d := time.Since(start); d > 7*time.Second {
		t.Errorf("timeout took %s", d)
	}
}

// buildStatic compiles the package in dir into a static binary at out.
func buildStatic(t *testing.T, dir, out string) {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	cmd := exec.Command(goBin, "build", "-o", out, ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=", "GO111MODULE=off")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build %s: %v\n%s", dir, err, b)
	}
}

// TestExecRunChrootReal runs a static program as /bin/sh inside a
// tiny root: it must find it through the root's PATH, see the root's
// marker file as /booty-chroot-marker, start in / and report its exit code.
func TestExecRunChrootReal(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("SKIPPED: chroot needs root")
	}
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "usr", "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	// merged /usr: /bin is an absolute symlink, resolved inside the root.
	if err := os.Symlink("/usr/bin", filepath.Join(root, "bin")); err != nil {
		t.Fatal(err)
	}
	buildStatic(t, filepath.Join("testdata", "fakesh"), filepath.Join(root, "usr", "bin", "sh"))
	if err := os.WriteFile(filepath.Join(root, "booty-chroot-marker"), []byte("inside\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := Exec{Log: testLogger(t)}
	out, _, err := r.RunChroot(t.Context(), root, "sh", "-c", "hello world")
	if err != nil {
		t.Fatalf("run in chroot: %v", err)
	}
	for _, want := range []string{"args=-c hello world", "wd=/", "marker=inside", "path=" + DefaultPath} {
		if !strings.Contains(string(out), want+"\n") {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	_, _, err = r.RunChroot(t.Context(), root, "/bin/sh", "-c", "exit 4")
	var ce *Error
	if !errors.As(err, &ce) || ce.ExitCode != 4 || !strings.Contains(ce.Stderr, "failing on purpose") {
		t.Fatalf("err = %v, want exit code 4 with stderr", err)
	}
	if _, _, err := r.RunChroot(t.Context(), root, "bash", "-c", "true"); !errors.Is(err, exec.ErrNotFound) {
		t.Errorf("bash absent from the root: err = %v, want exec.ErrNotFound", err)
	}
}
