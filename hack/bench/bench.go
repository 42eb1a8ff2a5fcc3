package main

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"
)

// bench is one run of the tool.
type bench struct {
	cfg    config
	log    *slog.Logger
	stdout io.Writer

	env      []string
	self     string // this binary, for the decoder helper
	baseURL  string // http://127.0.0.1:PORT/
	features bootyFeatures
	dropOK   bool
	started  time.Time
}

// bootyFeatures are the optional write-image flags the binary under test
// has, found in its --help.
type bootyFeatures struct {
	FreshTarget bool `json:"fresh_target"`
	NoDirect    bool `json:"no_direct"`
	Bmap        bool `json:"bmap"`
	// InsecureHTTP: the binary refuses plain http without --insecure-http
	// (the bench serves the images over loopback http).
	InsecureHTTP bool `json:"insecure_http"`
}

// benchImage is one image of hack/mkbenchimage.sh with its compressed forms.
type benchImage struct {
	Name      string            `json:"name"`
	Size      int64             `json:"size"`      // of the raw image
	Allocated int64             `json:"allocated"` // bytes of the raw image that are not holes
	Sums      map[string]string `json:"sha256"`    // file name -> hex
	Files     map[string]int64  `json:"files"`     // file name -> size
	dir       string
}

func (im benchImage) path(suffix string) string { return filepath.Join(im.dir, im.Name+".img"+suffix) }
func (im benchImage) file(suffix string) string { return im.Name + ".img" + suffix }

// job is one contender or floor on one image and source.
type job struct {
	Kind    string // "write" (a contender) or "floor"
	Name    string // "booty", "dd pipeline", "bmaptool", "zstd -dc", ...
	Source  string // "zst", "gz", "raw"
	Writes  bool   // writes the target: discard before, verify after
	Warm    string // file read into the page cache before each run
	Argvs   [][]string
	WantOut string // when set, the trimmed stdout must equal it
}

func (j job) key() string { return j.Name + "|" + j.Source }

// run does the whole bench; see the package comment.
func (b *bench) run(ctx context.Context) (err error) {
	b.started = time.Now()
	if os.Geteuid() != 0 {
		return errors.New("needs root: loop devices and drop_caches")
	}
	if b.self, err = os.Executable(); err != nil {
		return fmt.Errorf("find own executable: %w", err)
	}
	if b.cfg.Booty, err = filepath.Abs(b.cfg.Booty); err != nil {
		return err
	}
	if err := checkTools(b.cfg.Booty); err != nil {
		return err
	}
	ensureSbinPath()
	b.env = cleanEnv()
	help, _ := runQuiet(ctx, "sh", "-c", `"$0" write-image --help 2>&1`, b.cfg.Booty)
	if !strings.Contains(help, "--source") {
		return fmt.Errorf("%s write-image --help does not list --source: is it booty?", b.cfg.Booty)
	}
	b.features = bootyFeatures{
		FreshTarget: strings.Contains(help, "--fresh-target"),
		NoDirect:    strings.Contains(help, "--no-direct"),
		Bmap:        strings.Contains(help, "--bmap"),

		InsecureHTTP: strings.Contains(help, "--insecure-http"),
	}
	b.log.Info("booty under test", "binary", b.cfg.Booty, "features", fmt.Sprintf("%+v", b.features))

	dir := b.cfg.Images
	if dir == "" {
		if dir, err = b.buildImages(ctx); err != nil {
			return err
		}
	}
	images, err := loadImages(dir, b.cfg.Only)
	if err != nil {
		return err
	}

	b.dropOK = b.cfg.DropCaches
	if b.dropOK {
		if err := dropCaches(); err != nil {
			b.log.Warn("cannot drop the page cache; runs start with a warm cache", "err", err)
			b.dropOK = false
		}
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("listen on 127.0.0.1: %w", err)
	}
	srv := &http.Server{Handler: http.FileServer(http.Dir(dir)), ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	defer srv.Close()
	b.baseURL = "http://" + ln.Addr().String() + "/"
	b.log.Info("serving images", "dir", dir, "url", b.baseURL)

	machine := describeMachine(ctx, b.cfg.TargetDir, b.cfg.Booty)
	rep := &report{
		Date:      b.started.UTC().Format(time.RFC3339),
		Config:    b.cfg,
		Machine:   machine,
		Features:  b.features,
		ImageDir:  dir,
		LoadStart: loadAvg(),
	}
	for _, im := range images {
		rs, loopInfo, err := b.benchImage(ctx, im)
		rep.Results = append(rep.Results, rs...)
		rep.Images = append(rep.Images, im)
		rep.Loop = loopInfo
		if err != nil {
			return err
		}
	}
	rep.LoadEnd = loadAvg()
	rep.Duration = time.Since(b.started).Round(time.Second).String()
	if err := rep.write(b.cfg.Out); err != nil {
		return err
	}
	fmt.Fprintf(b.stdout, "bench: wrote %s and %s\n", filepath.Join(b.cfg.Out, "report.md"), filepath.Join(b.cfg.Out, "results.json"))
	return nil
}

// checkTools fails naming every missing tool.
func checkTools(booty string) error {
	var missing []string
	if _, err := os.Stat(booty); err != nil {
		missing = append(missing, booty+" (make build)")
	}
	if _, err := os.Stat(timeBin); err != nil {
		missing = append(missing, timeBin+" (GNU time)")
	}
	for _, t := range []string{"curl", "zstd", "gzip", "dd", "bmaptool", "losetup", "blkdiscard", "sh"} {
		if _, err := lookPath(t); err != nil {
			missing = append(missing, t)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("missing %s (run hack/deps.sh)", strings.Join(missing, ", "))
	}
	return nil
}

// buildImages runs the image script, which builds the images or finds them
// in its cache, and returns the directory it prints last.
func (b *bench) buildImages(ctx context.Context) (string, error) {
	args := []string{b.cfg.Script}
	if b.cfg.Quick {
		args = append(args, "--quick")
	}
	b.log.Info("building or finding the images", "script", strings.Join(args, " "))
	out, err := runQuiet(ctx, append([]string{"bash"}, args...)...)
	if err != nil {
		return "", fmt.Errorf("build images: %w", err)
	}
	lines := strings.Split(out, "\n")
	return strings.TrimSpace(lines[len(lines)-1]), nil
}

// loadImages reads SHA256SUMS in dir and the sizes of the images named in
// only (all when empty).
func loadImages(dir string, only []string) ([]benchImage, error) {
	sums := map[string]string{}
	f, err := os.Open(filepath.Join(dir, "SHA256SUMS"))
	if err != nil {
		return nil, fmt.Errorf("read image checksums: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		sum, name, ok := strings.Cut(sc.Text(), "  ")
		if ok {
			sums[name] = sum
		}
	}
	var images []benchImage
	for _, name := range []string{"sparse", "dense"} {
		if len(only) > 0 && !slices.Contains(only, name) {
			continue
		}
		im := benchImage{Name: name, dir: dir, Sums: map[string]string{}, Files: map[string]int64{}}
		for _, suf := range []string{"", ".zst", ".gz", ".bmap"} {
			fn := im.file(suf)
			fi, err := os.Stat(im.path(suf))
			if err != nil {
				return nil, fmt.Errorf("image file: %w", err)
			}
			if sums[fn] == "" {
				return nil, fmt.Errorf("image file %s: not in %s", fn, filepath.Join(dir, "SHA256SUMS"))
			}
			im.Sums[fn], im.Files[fn] = sums[fn], fi.Size()
		}
		im.Size = im.Files[im.file("")]
		im.Allocated = allocated(im.path(""))
		images = append(images, im)
	}
	return images, nil
}

// jobs lists what runs on im: the contenders, then the floors.
func (b *bench) jobs(im benchImage, dev string) []job {
	url := func(suf string) string { return b.baseURL + im.file(suf) }
	dd := func(extra ...string) []string {
		return append([]string{"dd", "of=" + dev, "bs=4M", "iflag=fullblock", "oflag=direct", "conv=fsync", "status=none"}, extra...)
	}
	booty := func(suf string, extra ...string) []string {
		a := []string{b.cfg.Booty, "write-image", "--source", url(suf), "--target", dev}
		if b.features.InsecureHTTP {
			a = append(a, "--insecure-http")
		}
		if suf != "" && (b.cfg.BootyChecksum == "both" || b.cfg.BootyChecksum == "source") {
			a = append(a, "--checksum", "sha256:"+im.Sums[im.file(suf)])
		}
		if suf == "" || b.cfg.BootyChecksum == "both" || b.cfg.BootyChecksum == "image" {
			a = append(a, "--image-checksum", "sha256:"+im.Sums[im.file("")])
		}
		return append(a, extra...)
	}
	var js []job
	for _, src := range []struct{ suf, tool string }{{".zst", "zstd"}, {".gz", "gzip"}} {
		s := src.suf[1:]
		w := func(name string, argvs ...[]string) job {
			return job{Kind: "write", Name: name, Source: s, Writes: true, Warm: im.path(src.suf), Argvs: argvs}
		}
		js = append(js,
			w("booty", booty(src.suf)),
			w("dd pipeline",
				[]string{"curl", "-sS", "--fail", url(src.suf)},
				[]string{src.tool, "-dc"},
				dd()),
			w("bmaptool", []string{"bmaptool", "-q", "copy", "--bmap", im.path(".bmap"), url(src.suf), dev}),
		)
		if b.features.FreshTarget {
			js = append(js, w("booty --fresh-target", booty(src.suf, "--fresh-target")))
		}
		if b.features.Bmap {
			js = append(js, w("booty --bmap", booty(src.suf, "--bmap", url(".bmap"))))
		}
	}
	if !b.cfg.Floors {
		return js
	}
	for _, src := range []struct{ suf, tool string }{{".zst", "zstd"}, {".gz", "gzip"}} {
		s := src.suf[1:]
		f := func(name string, want string, argvs ...[]string) job {
			return job{Kind: "floor", Name: name, Source: s, Warm: im.path(src.suf), Argvs: argvs, WantOut: want}
		}
		js = append(js,
			f(src.tool+" -dc", "", []string{src.tool, "-dc", im.path(src.suf)}, []string{"dd", "of=/dev/null", "bs=4M", "status=none"}),
			f("Go "+src.tool, "", []string{"env", helperEnv + "=decode", b.self, src.tool, im.path(src.suf)}),
			f("Go "+src.tool+" + sha256", im.Sums[im.file("")], []string{"env", helperEnv + "=decode", b.self, src.tool, im.path(src.suf), "sha256"}),
			f("curl", "", []string{"curl", "-sS", "--fail", "-o", "/dev/null", url(src.suf)}),
		)
	}
	raw := func(name string, argvs ...[]string) job {
		return job{Kind: "floor", Name: name, Source: "raw", Writes: true, Warm: im.path(""), Argvs: argvs}
	}
	js = append(js,
		raw("dd raw, all bytes", []string{"dd", "if=" + im.path(""), "of=" + dev, "bs=4M", "oflag=direct", "conv=fsync", "status=none"}),
		raw("dd raw, data only", []string{"dd", "if=" + im.path(""), "of=" + dev, "bs=4M", "oflag=direct", "conv=sparse,fsync", "status=none"}),
		raw("booty raw", booty("")),
	)
	return js
}

// benchImage attaches a loop device for im and runs every job on it
// --runs times, in turns; the order of the turn rotates each round. It
// returns what was measured so far even on error.
func (b *bench) benchImage(ctx context.Context, im benchImage) ([]result, loopInfo, error) {
	loop, err := attachLoop(ctx, b.cfg.TargetDir, im.Name, im.Size)
	if err != nil {
		return nil, loopInfo{}, err
	}
	defer func() {
		if err := loop.detach(); err != nil {
			b.log.Error("detach loop device", "dev", loop.Dev, "err", err)
		}
	}()
	b.log.Info("target", "image", im.Name, "dev", loop.Dev, "backing", loop.Backing, "direct_io", loop.DirectIO)

	js := b.jobs(im, loop.Dev)
	results := make([]result, len(js))
	for i, j := range js {
		cmd := strings.NewReplacer(b.baseURL, "$URL/", im.dir+"/", "$IMAGES/", loop.Dev, "$DEV",
			b.cfg.Booty, "booty", b.self, "bench", "env "+helperEnv+"=decode", helperEnv+"=decode").Replace(describe(j.Argvs))
		cmd = hexRe.ReplaceAllString(cmd, "…")
		results[i] = result{Image: im.Name, Kind: j.Kind, Name: j.Name, Source: j.Source, Command: cmd}
	}
	for round := range b.cfg.Runs {
		for k := range js {
			i := (k + round) % len(js)
			j := js[i]
			s, err := b.runOnce(ctx, im, loop, j)
			results[i].Samples = append(results[i].Samples, s)
			b.log.Info("run", "image", im.Name, "job", j.Name, "source", j.Source, "round", fmt.Sprintf("%d/%d", round+1, b.cfg.Runs),
				"seconds", fmt.Sprintf("%.2f", s.Seconds), "rss_mib", s.MaxRSSKiB/1024, "verified", s.Verified)
			if err != nil {
				return finish(results), loop.info(), fmt.Errorf("%s %s (%s) round %d: %w", im.Name, j.Name, j.Source, round+1, err)
			}
		}
	}
	return finish(results), loop.info(), nil
}

// runOnce prepares the target and the cache, runs j once and checks what it
// did: a writer's target must hash to the image's sha256, a helper's stdout
// must be what it should.
func (b *bench) runOnce(ctx context.Context, im benchImage, loop *loopDev, j job) (sample, error) {
	prep := time.Now()
	if j.Writes {
		if err := loop.discard(ctx); err != nil {
			return sample{}, err
		}
		if err := flushBufs(loop.Dev); err != nil {
			return sample{}, err
		}
	}
	if b.dropOK {
		if err := dropCaches(); err != nil {
			return sample{}, err
		}
	}
	if j.Warm != "" {
		if err := warm(j.Warm); err != nil {
			return sample{}, err
		}
	}
	if err := ctx.Err(); err != nil {
		return sample{}, err
	}
	prepSeconds := time.Since(prep).Seconds()
	out, err := runPipeline(ctx, b.env, j.Argvs)
	s := sample{Seconds: out.Wall.Seconds(), MaxRSSKiB: out.MaxRSSKiB, CPUSeconds: out.CPU.Seconds(), PrepSeconds: prepSeconds}
	if err != nil {
		s.Error = err.Error()
		return s, err
	}
	if j.WantOut != "" && strings.TrimSpace(out.Stdout) != j.WantOut {
		err := fmt.Errorf("output %q, want %q", tail(out.Stdout, 200), j.WantOut)
		s.Error = err.Error()
		return s, err
	}
	if j.Writes {
		v := time.Now()
		err := verifyTarget(loop.Dev, im.Size, im.Sums[im.file("")])
		s.VerifySeconds = time.Since(v).Seconds()
		if err != nil {
			s.Error = err.Error()
			return s, err
		}
		s.Verified = true
	}
	return s, nil
}

// verifyTarget hashes the first size bytes of path and compares the
// sha256 with want (hex).
func verifyTarget(path string, size int64, want string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("verify target: %w", err)
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.CopyBuffer(h, io.LimitReader(f, size), make([]byte, 4<<20))
	if err != nil {
		return fmt.Errorf("verify target: read %s: %w", path, err)
	}
	if n != size {
		return fmt.Errorf("verify target: %s holds %d bytes, want %d", path, n, size)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != want {
		return fmt.Errorf("verify target: %s: first %d bytes have sha256 %s, the image %s: the writer wrote wrong data", path, size, got, want)
	}
	return nil
}

// warm reads path into the page cache, as a server that serves an image
// often has it.
func warm(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("warm the cache: %w", err)
	}
	defer f.Close()
	if _, err := io.CopyBuffer(io.Discard, f, make([]byte, 4<<20)); err != nil {
		return fmt.Errorf("warm the cache: read %s: %w", path, err)
	}
	return nil
}

// dropCaches writes back dirty pages and drops the clean page cache,
// dentries and inodes.
func dropCaches() error {
	syncAll()
	if err := os.WriteFile("/proc/sys/vm/drop_caches", []byte("3\n"), 0); err != nil {
		return fmt.Errorf("drop page cache: %w", err)
	}
	return nil
}

var hexRe = regexp.MustCompile(`[0-9a-f]{64}`)

// describe renders argvs as a shell pipeline for the report.
func describe(argvs [][]string) string {
	parts := make([]string, len(argvs))
	for i, a := range argvs {
		parts[i] = strings.Join(a, " ")
	}
	return strings.Join(parts, " | ")
}
