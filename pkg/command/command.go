// Package command runs the agent's external commands: on the agent's own
// root (mstconfig, efibootmgr) or chrooted into the installed OS
// (update-grub, resize2fs, machine commands). Runner is the seam every
// caller takes; Exec is the real one, and tests record and fake calls.
package command

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path"
	"strings"
	"syscall"
	"time"

	"github.com/booty-dev/booty/pkg/chroot"
)

// Runner runs external commands for the agent: on the agent's own root
// (mstconfig, efibootmgr) or chrooted into the installed OS (update-grub,
// machine commands). Both calls return the command's captured stdout and
// stderr; a command that ran and failed returns an *Error.
type Runner interface {
	Run(ctx context.Context, name string, args ...string) (stdout, stderr []byte, err error)
	RunChroot(ctx context.Context, root, name string, args ...string) (stdout, stderr []byte, err error)
}

// DefaultTimeout bounds every command Exec runs when it has no Timeout of
// its own; an earlier context deadline wins.
const DefaultTimeout = 10 * time.Minute

// DefaultPath is the PATH commands run with, on the agent and in a chroot.
const DefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// maxCapture is how much of each output stream a command keeps; the rest
// is dropped (the start is kept, CommandError shows the tail of that).
const maxCapture = 1 << 20

// Error is the error of a command that started and then failed:
// exited non-zero, was killed, or ran out of time. Stderr is the tail of
// what the command wrote there. Args are not part of Error(), so an error
// never repeats a secret passed on a command line.
type Error struct {
	Name     string
	ExitCode int // -1 when killed by a signal or the timeout
	Stderr   string
	Err      error
}

func (e *Error) Error() string {
	s := fmt.Sprintf("run %s: exit code %d", e.Name, e.ExitCode)
	if e.Err != nil {
		s = fmt.Sprintf("run %s: %v", e.Name, e.Err)
	}
	if t := strings.TrimSpace(e.Stderr); t != "" {
		s += ": " + t
	}
	return s
}

func (e *Error) Unwrap() error { return e.Err }

// Exec runs commands with os/exec. Every command gets an environment
// of PATH (and Env) only, stdin from /dev/null, a timeout, and its outputs
// captured; the command line and the outputs' tails are logged at debug
// level unless the context was marked with WithSecretArgs, in which case
// only the program name is logged.
type Exec struct {
	// Timeout per command; zero means DefaultTimeout.
	Timeout time.Duration
	// Path is the PATH of the commands; empty means DefaultPath.
	Path string
	// Env is appended to the environment ("KEY=value").
	Env []string
	// Log receives a line per command; nil means slog.Default().
	Log *slog.Logger
}

type secretArgsKey struct{}

// WithSecretArgs marks ctx so that runners log neither the arguments nor
// the output of commands run with it.
func WithSecretArgs(ctx context.Context) context.Context {
	return context.WithValue(ctx, secretArgsKey{}, true)
}

func secretArgs(ctx context.Context) bool {
	v, _ := ctx.Value(secretArgsKey{}).(bool)
	return v
}

// Run runs name (looked up in the agent's PATH) with args.
func (r Exec) Run(ctx context.Context, name string, args ...string) ([]byte, []byte, error) {
	return r.run(ctx, "", name, args)
}

// RunChroot runs name with args chrooted into root (SysProcAttr.Chroot,
// working directory /). A name without a slash is looked up in PATH
// inside root, following symlinks as the chroot would; the error wraps
// exec.ErrNotFound when it is not there.
func (r Exec) RunChroot(ctx context.Context, root, name string, args ...string) ([]byte, []byte, error) {
	if root == "" {
		return nil, nil, fmt.Errorf("run %s in chroot: empty root", name)
	}
	return r.run(ctx, root, name, args)
}

func (r Exec) run(ctx context.Context, root, name string, args []string) ([]byte, []byte, error) {
	log := r.Log
	if log == nil {
		log = slog.Default().With("component", "command")
	}
	pathEnv := r.Path
	if pathEnv == "" {
		pathEnv = DefaultPath
	}
	prog := name
	if root != "" {
		p, err := chroot.LookPath(root, name, pathEnv)
		if err != nil {
			return nil, nil, fmt.Errorf("run %s in chroot %s: %w", name, root, err)
		}
		prog = p
	} else if !strings.Contains(name, "/") {
		p, err := lookPathEnv(name, pathEnv)
		if err != nil {
			return nil, nil, fmt.Errorf("run %s: %w", name, err)
		}
		prog = p
	}
	timeout := r.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	cmd := exec.CommandContext(ctx, prog, args...)
	cmd.Env = append([]string{"PATH=" + pathEnv, "LC_ALL=C"}, r.Env...)
	cmd.WaitDelay = 5 * time.Second
	var stdout, stderr capBuffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if root != "" {
		cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: root}
		cmd.Dir = "/"
	}
	secret := secretArgs(ctx)
	attrs := []any{"cmd", name}
	if !secret {
		attrs = append(attrs, "args", args)
	}
	if root != "" {
		attrs = append(attrs, "chroot", root)
	}
	start := time.Now()
	err := cmd.Run()
	attrs = append(attrs, "duration", time.Since(start).Round(time.Millisecond))
	if !secret {
		attrs = append(attrs, "stdout", tail(stdout.String(), 400), "stderr", tail(stderr.String(), 400))
	}
	if err == nil {
		log.Debug("command done", attrs...)
		return stdout.Bytes(), stderr.Bytes(), nil
	}
	ce := &Error{Name: name, ExitCode: -1, Stderr: tail(stderr.String(), 1000)}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee) && ee.Exited():
		ce.ExitCode = ee.ExitCode()
	case ctx.Err() != nil:
		ce.Err = fmt.Errorf("%w after %s", ctx.Err(), time.Since(start).Round(time.Millisecond))
	default:
		ce.Err = err
	}
	log.Warn("command failed", append(attrs, "exitCode", ce.ExitCode)...)
	return stdout.Bytes(), stderr.Bytes(), ce
}

// lookPathEnv finds name in the directories of pathEnv on the agent's root.
func lookPathEnv(name, pathEnv string) (string, error) {
	for _, dir := range strings.Split(pathEnv, ":") {
		if dir == "" {
			continue
		}
		p := path.Join(dir, name)
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s not in PATH %s: %w", name, pathEnv, exec.ErrNotFound)
}

// capBuffer keeps the first maxCapture bytes written to it.
type capBuffer struct{ bytes.Buffer }

func (b *capBuffer) Write(p []byte) (int, error) {
	if room := maxCapture - b.Len(); room > 0 {
		if len(p) > room {
			b.Buffer.Write(p[:room])
		} else {
			b.Buffer.Write(p)
		}
	}
	return len(p), nil
}

// tail returns the last n bytes of s, trimmed, marked when cut.
func tail(s string, n int) string {
	s = strings.TrimSpace(s)
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}
