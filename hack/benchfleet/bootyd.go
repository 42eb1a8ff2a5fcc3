package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// bootyd is one bootyd process the benchmark runs.
type bootyd struct {
	name    string
	url     string
	logPath string // where stop writes its stderr
	pprof   string // base URL of its pprof listener, "" when off
	cmd     *exec.Cmd
	log     *bytes.Buffer
	done    chan error

	mu      sync.Mutex
	peakRSS int64
	lastRSS int64
}

// startBootyd starts the bootyd binary on a free loopback port with db and
// the operator token file, and waits (up to a minute) until it answers.
func startBootyd(ctx context.Context, bin, name, dir, db, tokenFile string, env []string, pprof bool) (*bootyd, error) {
	addr, err := freePort()
	if err != nil {
		return nil, fmt.Errorf("start %s: find a free port: %w", name, err)
	}
	stateDir := filepath.Join(dir, name)
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	b := &bootyd{name: name, url: "http://" + addr, log: &bytes.Buffer{}, done: make(chan error, 1), logPath: filepath.Join(dir, name+"-stderr.log")}
	args := []string{"--insecure-http", "--listen", addr, "--public-url", b.url, "--db", db,
		"--state-dir", stateDir, "--operator-token-file", tokenFile, "--log-level", "warn"}
	if pprof {
		paddr, err := freePort()
		if err != nil {
			return nil, fmt.Errorf("start %s: find a free port for pprof: %w", name, err)
		}
		args = append(args, "--debug-pprof-listen", paddr)
		b.pprof = "http://" + paddr
	}
	b.cmd = exec.Command(bin, args...)
	b.cmd.Env = append(os.Environ(), env...)
	b.cmd.Stdout = nil // bootyd's account of every machine: not what is measured
	b.cmd.Stderr = &lockedWriter{w: b.log}
	b.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := b.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	go func() { b.done <- b.cmd.Wait() }()
	deadline := time.Now().Add(time.Minute)
	for {
		select {
		case err := <-b.done:
			return nil, fmt.Errorf("start %s: bootyd exited: %v\n%s", name, err, b.stderr())
		default:
		}
		resp, err := http.Get(b.url + "/v1/boot.ipxe")
		if err == nil {
			resp.Body.Close()
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			b.stop()
			return nil, fmt.Errorf("start %s: no answer on %s within a minute: %v\n%s", name, b.url, err, b.stderr())
		}
		time.Sleep(100 * time.Millisecond)
	}
	go b.sampleRSS(ctx)
	return b, nil
}

// freePort returns a loopback address whose port was free a moment ago.
func freePort() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// saveProfile fetches the pprof profile at path (e.g. "heap",
// "profile?seconds=15") into file; bounded by a timeout of two minutes.
func (b *bootyd) saveProfile(ctx context.Context, path, file string) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, b.pprof+"/debug/pprof/"+path, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("profile %s of %s: %w", path, b.name, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("profile %s of %s: %s", path, b.name, resp.Status)
	}
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return fmt.Errorf("profile %s of %s: %w", path, b.name, err)
	}
	return f.Close()
}

type lockedWriter struct {
	mu sync.Mutex
	w  *bytes.Buffer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.w.Len() > 1<<20 {
		return len(p), nil
	}
	return l.w.Write(p)
}

func (b *bootyd) stderr() string {
	lw := b.cmd.Stderr.(*lockedWriter)
	lw.mu.Lock()
	defer lw.mu.Unlock()
	s := lw.w.String()
	if len(s) > 4000 {
		s = "…" + s[len(s)-4000:]
	}
	return s
}

// sampleRSS reads VmRSS from /proc every 250 ms until the process ends.
func (b *bootyd) sampleRSS(ctx context.Context) {
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	for {
		rss, err := readRSS(b.cmd.Process.Pid)
		if err == nil {
			b.mu.Lock()
			b.lastRSS = rss
			b.peakRSS = max(b.peakRSS, rss)
			b.mu.Unlock()
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if b.cmd.ProcessState != nil {
			return
		}
	}
}

func (b *bootyd) rss() (peak, last int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.peakRSS, b.lastRSS
}

// readRSS returns the resident set of pid in bytes, from /proc/PID/status.
func readRSS(pid int) (int64, error) {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10, err
		}
	}
	return 0, errors.New("no VmRSS in /proc/" + strconv.Itoa(pid) + "/status")
}

// stop ends bootyd with SIGTERM, then SIGKILL after 15 s.
func (b *bootyd) stop() {
	if b.cmd.Process == nil {
		return
	}
	b.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-b.done:
	case <-time.After(15 * time.Second):
		b.cmd.Process.Kill()
		<-b.done
	}
	// Its own logs (warnings and errors, at most 1 MiB) stay in the work
	// directory, kept with -keep.
	lw := b.cmd.Stderr.(*lockedWriter)
	lw.mu.Lock()
	_ = os.WriteFile(b.logPath, lw.w.Bytes(), 0o600)
	lw.mu.Unlock()
}

// fileSizes sums the sizes of the SQLite database and its WAL and shm files.
func fileSizes(path string) int64 {
	var n int64
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		if st, err := os.Stat(p); err == nil {
			n += st.Size()
		}
	}
	return n
}
