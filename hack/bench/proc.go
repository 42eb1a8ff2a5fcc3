package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// outcome is one timed run of a command or pipeline.
type outcome struct {
	Wall      time.Duration
	MaxRSSKiB int64         // max over the pipeline's processes (each includes its waited-for children)
	CPU       time.Duration // user+sys summed over the pipeline's processes (and their waited-for children)
	Stdout    string        // of the last command, at most 64 KiB
}

// cappedBuffer keeps the first max bytes written to it.
type cappedBuffer struct {
	buf bytes.Buffer
	max int
}

func (c *cappedBuffer) Write(p []byte) (int, error) {
	if room := c.max - c.buf.Len(); room > 0 {
		c.buf.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

// timeBin is GNU time, which reports each process's peak RSS. The RSS
// that wait4 reports for our own children is useless: Go starts them with
// vfork, so each one's ru_maxrss starts from the bench's own RSS at exec.
// GNU time forks a small process, so its child's figure is its own.
var timeBin = "/usr/bin/time"

// runPipeline starts argvs as a shell pipeline (each one's stdout into the
// next one's stdin; the last one's stdout is kept, capped), each under GNU
// time in a process group of its own, waits for all of them and returns the
// wall time from the first start to the last exit, the largest peak RSS
// and the CPU time (user+sys) of all of them.
// It fails when any of them exits non-zero, naming it with the end of its
// stderr. Cancelling ctx kills every process group.
func runPipeline(ctx context.Context, env []string, argvs [][]string) (outcome, error) {
	tmp, err := os.MkdirTemp("", "booty-bench-rss-")
	if err != nil {
		return outcome{}, fmt.Errorf("make temp dir: %w", err)
	}
	defer os.RemoveAll(tmp)
	cmds := make([]*exec.Cmd, len(argvs))
	errs := make([]*cappedBuffer, len(argvs))
	rssFiles := make([]string, len(argvs))
	out := &cappedBuffer{max: 64 << 10}
	var closeAfterStart []*os.File
	defer func() {
		for _, f := range closeAfterStart {
			f.Close()
		}
	}()
	for i, argv := range argvs {
		rssFiles[i] = filepath.Join(tmp, fmt.Sprintf("rss%d", i))
		wrapped := append([]string{timeBin, "-f", "%M %U %S", "-o", rssFiles[i]}, argv...)
		c := exec.CommandContext(ctx, wrapped[0], wrapped[1:]...)
		c.Env = env
		c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		c.Cancel = func() error { return syscall.Kill(-c.Process.Pid, syscall.SIGKILL) }
		c.WaitDelay = 5 * time.Second
		errs[i] = &cappedBuffer{max: 16 << 10}
		c.Stderr = errs[i]
		cmds[i] = c
	}
	for i := 0; i+1 < len(cmds); i++ {
		r, w, err := os.Pipe()
		if err != nil {
			return outcome{}, fmt.Errorf("make pipe: %w", err)
		}
		cmds[i].Stdout = w
		cmds[i+1].Stdin = r
		closeAfterStart = append(closeAfterStart, r, w)
	}
	cmds[len(cmds)-1].Stdout = out

	start := time.Now()
	started := 0
	var startErr error
	for _, c := range cmds {
		if err := c.Start(); err != nil {
			startErr = fmt.Errorf("start %s: %w", c.Path, err)
			break
		}
		started++
	}
	// The parent's copies of the pipe ends must go, or readers never see EOF.
	for _, f := range closeAfterStart {
		f.Close()
	}
	closeAfterStart = nil
	var res outcome
	var failed []string
	for i, c := range cmds[:started] {
		if err := c.Wait(); err != nil {
			failed = append(failed, fmt.Sprintf("%s: %v: %s", strings.Join(argvs[i], " "), err, tail(errs[i].buf.String(), 600)))
		}
	}
	res.Wall = time.Since(start)
	res.Stdout = out.buf.String()
	for _, f := range rssFiles[:started] {
		rss, cpu := readTime(f)
		res.MaxRSSKiB = max(res.MaxRSSKiB, rss)
		res.CPU += cpu
	}
	if startErr != nil {
		return res, startErr
	}
	if len(failed) > 0 {
		err := errors.New(strings.Join(failed, "; "))
		if ctx.Err() != nil {
			err = fmt.Errorf("%w (%w)", ctx.Err(), err)
		}
		return res, err
	}
	return res, nil
}

// readTime returns the peak RSS in KiB and the user+sys CPU time that GNU
// time wrote to path ("%M %U %S" on the last line; a line before it tells
// a non-zero exit), or zeros.
func readTime(path string) (int64, time.Duration) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, 0
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	f := strings.Fields(lines[len(lines)-1])
	if len(f) != 3 {
		return 0, 0
	}
	rss, err := strconv.ParseInt(f[0], 10, 64)
	if err != nil {
		return 0, 0
	}
	var cpu float64
	for _, x := range f[1:] {
		v, err := strconv.ParseFloat(x, 64)
		if err != nil {
			return rss, 0
		}
		cpu += v
	}
	return rss, time.Duration(cpu * float64(time.Second))
}

// runQuiet runs one command for set-up work and returns its trimmed stdout,
// or an error that carries its stderr.
func runQuiet(ctx context.Context, argv ...string) (string, error) {
	c := exec.CommandContext(ctx, argv[0], argv[1:]...)
	var stdout, stderr bytes.Buffer
	c.Stdout, c.Stderr = &stdout, &stderr
	if err := c.Run(); err != nil {
		return "", fmt.Errorf("%s: %w: %s", strings.Join(argv, " "), err, tail(stderr.String(), 600))
	}
	return strings.TrimSpace(stdout.String()), nil
}

// tail returns the last n bytes of s, trimmed.
func tail(s string, n int) string {
	s = strings.TrimSpace(s)
	if len(s) > n {
		s = "…" + s[len(s)-n:]
	}
	return s
}

// cleanEnv is the environment for the contenders: ours without proxy
// settings, so curl and bmaptool (Python's urllib) talk to 127.0.0.1
// directly, and with no_proxy set for good measure.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch strings.ToLower(k) {
		case "http_proxy", "https_proxy", "all_proxy", "no_proxy", helperEnv:
			continue
		}
		env = append(env, kv)
	}
	return append(env, "no_proxy=127.0.0.1,localhost", "NO_PROXY=127.0.0.1,localhost")
}

// ensureSbinPath adds /usr/sbin and /sbin to PATH when missing (losetup,
// blkdiscard live there), for this process and the contenders.
func ensureSbinPath() {
	path := os.Getenv("PATH")
	for _, d := range []string{"/usr/sbin", "/sbin"} {
		if !slices.Contains(filepath.SplitList(path), d) {
			path += string(os.PathListSeparator) + d
		}
	}
	os.Setenv("PATH", path)
}
