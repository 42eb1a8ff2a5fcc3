package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
)

// TestMain lets the test binary serve as the decoder helper, as the bench
// binary does, since the bench re-executes itself for it.
func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) != "" {
		os.Exit(helperMain(os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

func TestVerifyTarget(t *testing.T) {
	img := bytes.Repeat([]byte("booty image "), 100000)
	sum := sha256.Sum256(img)
	want := hex.EncodeToString(sum[:])
	flipped := bytes.Clone(img)
	flipped[len(flipped)/2] ^= 1
	tests := []struct {
		name    string
		content []byte
		wantErr string
	}{
		{"exact", img, ""},
		{"longer target, image at the start", append(bytes.Clone(img), make([]byte, 4096)...), ""},
		{"one bit wrong", flipped, "wrong data"},
		{"short target", img[:len(img)-1], "holds"},
		{"all zeros", make([]byte, len(img)), "wrong data"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "target")
			if err := os.WriteFile(p, tt.content, 0o600); err != nil {
				t.Fatal(err)
			}
			err := verifyTarget(p, int64(len(img)), want)
			if tt.wantErr == "" && err != nil {
				t.Fatalf("verifyTarget: %v", err)
			}
			if tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Fatalf("verifyTarget: %v, want an error containing %q", err, tt.wantErr)
			}
		})
	}
}

func TestRunPipeline(t *testing.T) {
	if _, err := os.Stat(timeBin); err != nil {
		t.Fatalf("GNU time: %v (hack/deps.sh installs it)", err)
	}
	env := cleanEnv()
	out, err := runPipeline(context.Background(), env, [][]string{{"printf", "hello"}, {"tr", "a-z", "A-Z"}})
	if err != nil {
		t.Fatalf("runPipeline: %v", err)
	}
	if out.Stdout != "HELLO" {
		t.Errorf("stdout %q, want HELLO", out.Stdout)
	}
	if out.MaxRSSKiB <= 0 || out.MaxRSSKiB > 64<<10 {
		t.Errorf("peak RSS of printf | tr = %d KiB, want a small positive figure", out.MaxRSSKiB)
	}
	// A process that holds 200 MiB must show it: the figure is the
	// child's own, not the bench's (python3 comes with bmaptool).
	out, err = runPipeline(context.Background(), env, [][]string{{"printf", "x"}, {"python3", "-c", "import sys; b = sys.stdin.read() * (200 << 20); print(len(b))"}})
	if err != nil {
		t.Fatalf("runPipeline: %v", err)
	}
	if strings.TrimSpace(out.Stdout) != "209715200" {
		t.Errorf("python3 printed %q, want 209715200", out.Stdout)
	}
	if out.MaxRSSKiB < 200<<10 {
		t.Errorf("peak RSS of a process holding 200 MiB = %d KiB, want at least 200 MiB", out.MaxRSSKiB)
	}
	// CPU time is summed over the processes: two that each burn 0.3 s of
	// CPU show at least 0.6 s, however long they waited for a core.
	burn := []string{"python3", "-c", "import sys, time\nt = time.process_time()\nwhile time.process_time() - t < 0.3: pass\nsys.stdout.write(sys.stdin.read())"}
	out, err = runPipeline(context.Background(), env, [][]string{{"printf", "x"}, burn, burn})
	if err != nil {
		t.Fatalf("runPipeline: %v", err)
	}
	if out.Stdout != "x" || out.CPU < 600*time.Millisecond {
		t.Errorf("two processes burning 0.3 s each: stdout %q, CPU %s; want x and at least 0.6 s", out.Stdout, out.CPU)
	}
	_, err = runPipeline(context.Background(), env, [][]string{{"printf", "x"}, {"sh", "-c", "echo broken >&2; exit 3"}})
	if err == nil || !strings.Contains(err.Error(), "broken") {
		t.Errorf("runPipeline with a failing stage: %v, want an error with its stderr", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = runPipeline(ctx, env, [][]string{{"sleep", "30"}, {"cat"}})
	if err == nil || time.Since(start) > 10*time.Second {
		t.Errorf("runPipeline after cancel: %v after %s, want an error soon", err, time.Since(start))
	}
}

func TestCheckTargets(t *testing.T) {
	r := &report{Results: []result{
		{Image: "sparse", Kind: "write", Name: "booty", Source: "zst", Median: 6, MaxRSSKiB: 30 << 10},
		{Image: "sparse", Kind: "write", Name: "dd pipeline", Source: "zst", Median: 10},
		{Image: "sparse", Kind: "write", Name: "bmaptool", Source: "zst", Median: 8},
		{Image: "dense", Kind: "write", Name: "booty", Source: "gz", Median: 5, MaxRSSKiB: 70 << 10},
		{Image: "dense", Kind: "write", Name: "dd pipeline", Source: "gz", Median: 5},
	}}
	r.checkTargets()
	want := map[string]bool{
		"sparse image, zst: booty time ÷ dd pipeline time":  true,  // 0.6 ≤ 0.7
		"sparse image, zst: booty time ÷ bmaptool time":     false, // 0.75 > 0.7
		"dense image, gz: booty time ÷ dd pipeline time":    true,  // 1.0 ≤ 1.0
		"peak RSS of booty write-image, any image, any run": false,
	}
	if len(r.Targets) != len(want) {
		t.Fatalf("targets %+v, want %d of them", r.Targets, len(want))
	}
	for _, tc := range r.Targets {
		pass, ok := want[tc.What]
		if !ok {
			t.Errorf("unexpected target %q", tc.What)
			continue
		}
		if tc.Pass != pass {
			t.Errorf("%s: measured %.2f limit %.2f pass %v, want %v", tc.What, tc.Measured, tc.Limit, tc.Pass, pass)
		}
	}
	md := r.markdown()
	if !strings.Contains(md, "**FAIL**") || !strings.Contains(md, "| PASS |") {
		t.Errorf("report does not mark both PASS and FAIL:\n%s", md)
	}
}

// TestQuick runs the whole tool in --quick mode: it builds booty and the
// small images, writes them to a real loop device with every contender,
// and checks the report, that every write was verified, and that nothing
// is left attached, also after a cancel in the middle. It needs root, and
// as root it runs.
func TestQuick(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (loop devices, drop_caches): run as root, or `make bench`")
	}
	tmp := t.TempDir()
	// BOOTY_BENCH_BOOTY names a booty binary to use instead of building one.
	booty := os.Getenv("BOOTY_BENCH_BOOTY")
	if booty == "" {
		booty = filepath.Join(tmp, "booty")
		goBin, err := exec.LookPath("go")
		if err != nil {
			goBin = "/usr/local/go/bin/go"
		}
		build := exec.Command(goBin, "build", "-o", booty, "github.com/booty-dev/booty/cmd/booty")
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("build booty: %v\n%s", err, out)
		}
	}
	script, err := filepath.Abs("../mkbenchimage.sh")
	if err != nil {
		t.Fatal(err)
	}

	t.Run("full run", func(t *testing.T) {
		out := filepath.Join(tmp, "out")
		targets := filepath.Join(tmp, "targets")
		if err := os.Mkdir(targets, 0o755); err != nil {
			t.Fatal(err)
		}
		var stdout, stderr bytes.Buffer
		code := run(context.Background(), []string{"--quick", "--booty", booty, "--script", script, "--out", out, "--target-dir", targets}, &stdout, &stderr)
		t.Logf("bench output:\n%s%s", stdout.String(), stderr.String())
		if code != 0 {
			t.Fatalf("bench exited %d", code)
		}
		assertNoLoop(t, targets)

		md, err := os.ReadFile(filepath.Join(out, "report.md"))
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"## sparse.img (64 MiB): writers", "## dense.img (16 MiB): writers", "| booty | zst |",
			"| dd pipeline | gz |", "| bmaptool | zst |", "| Go zstd + sha256 | zst |", "| dd raw, data only | raw |",
			"## Distance from the floor", "## Targets", "peak RSS of booty write-image", "direct I/O on", "| CPU s |"} {
			if !bytes.Contains(md, []byte(want)) {
				t.Errorf("report.md lacks %q", want)
			}
		}
		var rep report
		js, err := os.ReadFile(filepath.Join(out, "results.json"))
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(js, &rep); err != nil {
			t.Fatalf("results.json: %v", err)
		}
		if len(rep.Images) != 2 || len(rep.Targets) == 0 {
			t.Errorf("results.json: %d images, %d targets; want 2 and some", len(rep.Images), len(rep.Targets))
		}
		writes := 0
		for _, r := range rep.Results {
			if len(r.Samples) != 1 || r.Median <= 0 || r.MaxRSSKiB <= 0 {
				t.Errorf("%s %s %s: %d samples, median %.3f s, rss %d KiB; want one run with figures", r.Image, r.Name, r.Source, len(r.Samples), r.Median, r.MaxRSSKiB)
			}
			if r.Name == "booty" && r.MedianCPU <= 0 {
				t.Errorf("%s booty %s: median CPU %.3f s, want the user+sys time of the run", r.Image, r.Source, r.MedianCPU)
			}
			for _, s := range r.Samples {
				wantVerified := r.Kind == "write" || strings.HasPrefix(r.Name, "dd raw") || r.Name == "booty raw"
				if s.Verified != wantVerified || s.Error != "" {
					t.Errorf("%s %s %s: verified %v error %q, want verified %v", r.Image, r.Name, r.Source, s.Verified, s.Error, wantVerified)
				}
				if s.Verified {
					writes++
				}
			}
		}
		if writes < 12 {
			t.Errorf("%d verified writes, want at least 12 (3 writers x 2 sources x 2 images)", writes)
		}
	})

	t.Run("cancel detaches the loop device", func(t *testing.T) {
		targets := filepath.Join(tmp, "targets-cancel")
		if err := os.Mkdir(targets, 0o755); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go func() {
			// Cancel once a loop device over our directory exists and a run is under way.
			for i := 0; i < 600 && ctx.Err() == nil; i++ {
				if len(loopsUnder(targets)) > 0 {
					time.Sleep(700 * time.Millisecond)
					cancel()
					return
				}
				time.Sleep(50 * time.Millisecond)
			}
		}()
		var stderr bytes.Buffer
		code := run(ctx, []string{"--quick", "--booty", booty, "--script", script, "--out", filepath.Join(tmp, "out-cancel"), "--target-dir", targets}, &stderr, &stderr)
		t.Logf("bench output:\n%s", stderr.String())
		if code != 1 {
			t.Errorf("bench exited %d after cancel, want 1", code)
		}
		assertNoLoop(t, targets)
	})
}

// loopsUnder lists loop devices whose backing file is under dir.
func loopsUnder(dir string) []string {
	out, err := exec.Command("losetup", "--list", "--noheadings", "--output", "NAME,BACK-FILE").Output()
	if err != nil {
		return nil
	}
	var devs []string
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) == 2 && strings.HasPrefix(f[1], dir+"/") {
			devs = append(devs, line)
		}
	}
	return devs
}

// assertNoLoop fails when a loop device or a file is left under dir.
func assertNoLoop(t *testing.T, dir string) {
	t.Helper()
	if l := loopsUnder(dir); len(l) > 0 {
		t.Errorf("loop devices left attached: %q", l)
		for _, line := range l {
			exec.Command("losetup", "-d", strings.Fields(line)[0]).Run()
		}
	}
	left, _ := os.ReadDir(dir)
	if len(left) > 0 {
		t.Errorf("files left in %s: %v", dir, left)
	}
}

// The decoder helper, now with booty's zstd options, decodes a zstd file
// and prints the decoded bytes' sha256.
func TestHelperDecodesZstd(t *testing.T) {
	img := bytes.Repeat([]byte("floor "), 1<<20) // 6 MiB
	var comp bytes.Buffer
	zw, err := zstd.NewWriter(&comp, zstd.WithWindowSize(1<<20))
	if err != nil {
		t.Fatal(err)
	}
	zw.Write(img)
	zw.Close()
	p := filepath.Join(t.TempDir(), "img.zst")
	if err := os.WriteFile(p, comp.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	if code := helperMain([]string{"zstd", p, "sha256"}, &stdout, &stderr); code != 0 {
		t.Fatalf("helper: exit %d: %s", code, stderr.String())
	}
	sum := sha256.Sum256(img)
	if got := strings.TrimSpace(stdout.String()); got != hex.EncodeToString(sum[:]) {
		t.Errorf("helper printed %q, want the image's sha256", got)
	}
}
