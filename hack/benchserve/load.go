package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/booty-dev/booty/hack/internal/benchutil"
	"github.com/booty-dev/booty/pkg/image"
)

// Load kinds of a run.
const (
	loadRange  = "range clients"
	loadAgents = "agents"
)

// runResult is one run of clients or agents against one server.
type runResult struct {
	Server     string    `json:"server"`
	Load       string    `json:"load"`
	Round      int       `json:"round"`
	Clients    int       `json:"clients"`
	Bytes      int64     `json:"bytes"`
	Seconds    float64   `json:"seconds"`
	MiBps      float64   `json:"mib_per_s"`
	Completion []float64 `json:"completion_s"` // per client, from the common start
	P50        float64   `json:"p50_s"`
	P99        float64   `json:"p99_s"`
	CPUSeconds float64   `json:"server_cpu_s"`
	CPUPercent float64   `json:"server_cpu_percent"` // of one core, over the run
	PeakRSSMiB float64   `json:"server_peak_rss_mib"`
	HWMMiB     float64   `json:"server_vmhwm_mib"` // kernel's peak, process lifetime
}

// measure runs load (which must wait for start before its clients begin)
// against s, samples the server's processes and fills the timing and
// server figures of r.
func measure(s *server, r *runResult, load func(start <-chan struct{}) ([]time.Duration, error)) error {
	before := sampleProcs(s.pids)
	stopPeak := peakRSS(s.pids)
	start := make(chan struct{})
	var times []time.Duration
	var err error
	done := make(chan struct{})
	go func() { defer close(done); times, err = load(start) }()
	t0 := time.Now()
	close(start)
	<-done
	wall := time.Since(t0)
	peak := stopPeak()
	after := sampleProcs(s.pids)
	if err != nil {
		return err
	}
	r.Seconds = wall.Seconds()
	r.MiBps = float64(r.Bytes) / (1 << 20) / wall.Seconds()
	for _, t := range times {
		r.Completion = append(r.Completion, t.Seconds())
	}
	r.P50, r.P99 = benchutil.Quantile(r.Completion, 0.50), benchutil.Quantile(r.Completion, 0.99)
	r.CPUSeconds = (after.CPU - before.CPU).Seconds()
	r.CPUPercent = 100 * r.CPUSeconds / wall.Seconds()
	r.PeakRSSMiB = float64(peak) / (1 << 20)
	r.HWMMiB = float64(after.HWM) / (1 << 20)
	return nil
}

// rangeClients runs n clients that each download the whole image in
// rangeSize Range requests over one keep-alive connection.
func (w *work) rangeClients(ctx context.Context, s *server, n int, rangeSize int64, round int, timeout time.Duration) (runResult, error) {
	r := runResult{Server: s.kind.Name, Load: loadRange, Round: round, Clients: n, Bytes: int64(n) * w.size}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	err := measure(s, &r, func(start <-chan struct{}) ([]time.Duration, error) {
		return together(n, start, func(i int, started func()) error {
			c := w.client(s.kind.TLS, 30*time.Second)
			defer c.CloseIdleConnections()
			var h hash.Hash
			if i == 0 {
				h = sha256.New() // one client checks the bytes, not only their count
			}
			buf := make([]byte, 256<<10)
			started()
			for off := int64(0); off < w.size; off += rangeSize {
				if err := fetchRange(ctx, c, s.url, off, min(rangeSize, w.size-off), w.size, h, buf); err != nil {
					cancel()
					return fmt.Errorf("client %d: %w", i, err)
				}
			}
			if h != nil {
				if got := hex.EncodeToString(h.Sum(nil)); got != w.sum {
					return fmt.Errorf("client %d: downloaded image has sha256 %s, want %s", i, got, w.sum)
				}
			}
			return nil
		})
	})
	if err != nil {
		return r, fmt.Errorf("%s, %s, round %d: %w", s.kind.Name, loadRange, round, err)
	}
	return r, nil
}

// fetchRange GETs [off, off+n) of url and checks status 206, Content-Range
// and length; the body goes to h when set.
func fetchRange(ctx context.Context, c *http.Client, url string, off, n, size int64, h hash.Hash, buf []byte) error {
	req, err := http.NewRequestWithContext(ctx, "GET", url, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Range", fmt.Sprintf("bytes=%d-%d", off, off+n-1))
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	want := fmt.Sprintf("bytes %d-%d/%d", off, off+n-1, size)
	if resp.StatusCode != http.StatusPartialContent || resp.Header.Get("Content-Range") != want {
		return fmt.Errorf("GET %s range %d+%d: status %d, Content-Range %q, want 206 and %q",
			url, off, n, resp.StatusCode, resp.Header.Get("Content-Range"), want)
	}
	var dst io.Writer = io.Discard
	if h != nil {
		dst = h
	}
	got, err := io.CopyBuffer(struct{ io.Writer }{dst}, resp.Body, buf)
	if err != nil {
		return fmt.Errorf("GET %s range %d+%d: after %d bytes: %w", url, off, n, got, err)
	}
	if got != n {
		return fmt.Errorf("GET %s range %d+%d: got %d bytes", url, off, n, got)
	}
	return nil
}

// agents runs n simulated agents that each write the image to a file of
// their own with pkg/image.Write (fetch, sha256 of the served file, sparse
// O_DIRECT writes, held-back first and last MiB), as `booty write-image`
// does, and remove the file after.
func (w *work) agents(ctx context.Context, s *server, n int, timeout time.Duration, log *slog.Logger) (runResult, error) {
	r := runResult{Server: s.kind.Name, Load: loadAgents, Round: 1, Clients: n, Bytes: int64(n) * w.size}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var ca []byte
	if s.kind.TLS {
		ca = w.certPEM
	}
	// The agents' own info lines (50 × "writing image") would drown the bench's.
	agentLog := slog.New(benchutil.WarnOnly(log.Handler()))
	err := measure(s, &r, func(start <-chan struct{}) ([]time.Duration, error) {
		return together(n, start, func(i int, started func()) error {
			target := filepath.Join(w.targets, fmt.Sprintf("agent-%02d.img", i))
			defer os.Remove(target)
			started()
			res, err := image.Write(ctx, image.Options{
				Source:   s.url,
				Checksum: "sha256:" + w.sum,
				Target:   target,
				CACert:   ca,
				// The plain-HTTP servers are measured on purpose (loopback).
				AllowHTTP: strings.HasPrefix(s.url, "http:"),
				Log:       agentLog.With("agent", i),
			})
			switch {
			case err != nil:
				cancel()
				return fmt.Errorf("agent %d: %w", i, err)
			case res.ImageSize != w.size || res.SourceDigest != "sha256:"+w.sum:
				cancel()
				return fmt.Errorf("agent %d: wrote %d bytes with digest %s, want %d and sha256:%s", i, res.ImageSize, res.SourceDigest, w.size, w.sum)
			}
			return nil
		})
	})
	if err != nil {
		return r, fmt.Errorf("%s, %s: %w", s.kind.Name, loadAgents, err)
	}
	return r, nil
}

// together runs f for clients 0..n-1, each in a goroutine that waits for
// start; f calls started right before its timed work. It returns each
// client's time from start to its end and the first real error (a
// cancellation that another client's failure caused comes last).
func together(n int, start <-chan struct{}, f func(i int, started func()) error) ([]time.Duration, error) {
	times := make([]time.Duration, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var t0 time.Time
			errs[i] = f(i, func() { <-start; t0 = time.Now() })
			times[i] = time.Since(t0)
		}()
	}
	wg.Wait()
	return times, firstError(errs)
}

func firstError(errs []error) error {
	for _, err := range errs {
		if err != nil && !errors.Is(err, context.Canceled) {
			return err
		}
	}
	return errors.Join(errs...)
}

// bench runs everything the package comment describes and returns the report.
func bench(ctx context.Context, cfg config, log *slog.Logger) (*report, error) {
	started := time.Now()
	for _, b := range []string{cfg.Bootyd, cfg.Nginx} {
		if _, err := lookPath(b); err != nil {
			return nil, fmt.Errorf("%s not found (make build; hack/deps.sh installs nginx): %w", b, err)
		}
	}
	log.Info("generating the image", "size_mib", cfg.SizeMiB, "dir", cfg.Dir)
	w, err := newWork(cfg.Dir, cfg.SizeMiB)
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(w.dir)
	rep := &report{Date: started.UTC().Format(time.RFC3339), Config: cfg, Machine: describeMachine(cfg), ImageSHA256: w.sum}

	run := func(kind serverKind, f func(s *server) (runResult, error)) error {
		s, err := w.start(ctx, kind, cfg.Bootyd, cfg.Nginx, log)
		if err != nil {
			return err
		}
		defer s.stop()
		r, err := f(s)
		if err != nil {
			return fmt.Errorf("%w; server log: %s", err, tailFile(s.log))
		}
		log.Info("run", "server", r.Server, "load", r.Load, "round", r.Round, "MiB/s", fmt.Sprintf("%.0f", r.MiBps),
			"p50_s", fmt.Sprintf("%.2f", r.P50), "p99_s", fmt.Sprintf("%.2f", r.P99),
			"server_cpu_percent", fmt.Sprintf("%.0f", r.CPUPercent), "server_peak_rss_mib", fmt.Sprintf("%.1f", r.PeakRSSMiB))
		rep.Runs = append(rep.Runs, r)
		runtime.GC()
		return nil
	}
	kinds := []serverKind{bootydHTTP, nginxHTTP, bootydTLS, nginxTLS}
	for round := 1; round <= cfg.Runs; round++ {
		for k := range kinds {
			kind := kinds[(k+round-1)%len(kinds)]
			err := run(kind, func(s *server) (runResult, error) {
				return w.rangeClients(ctx, s, cfg.Clients, int64(cfg.RangeMiB)<<20, round, cfg.Timeout)
			})
			if err != nil {
				return nil, err
			}
		}
	}
	if cfg.Agents > 0 {
		for _, kind := range []serverKind{bootydHTTP, nginxHTTP, bootydTLS} {
			err := run(kind, func(s *server) (runResult, error) { return w.agents(ctx, s, cfg.Agents, cfg.Timeout, log) })
			if err != nil {
				return nil, err
			}
		}
	}
	rep.summarize()
	rep.Duration = time.Since(started).Round(time.Second).String()
	return rep, nil
}
