package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/klauspost/compress/zstd"

	"github.com/booty-dev/booty/pkg/image"
)

func TestRunWriteImage(t *testing.T) {
	dir := t.TempDir()
	img := bytes.Repeat([]byte("booty write-image test image "), 200000) // ~5.8 MB
	var comp bytes.Buffer
	zw, _ := zstd.NewWriter(&comp)
	zw.Write(img)
	zw.Close()
	src := filepath.Join(dir, "image.zst")
	if err := os.WriteFile(src, comp.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(img)
	good := "sha256:" + hex.EncodeToString(sum[:])
	bad := "sha256:" + strings.Repeat("0", 64)

	tests := []struct {
		name       string
		args       []string
		wantCode   int
		wantImage  bool
		wantStderr string
	}{
		{"verified", []string{"--image-checksum", good}, 0, true, ""},
		{"verified with progress log", []string{"--image-checksum", good, "--progress"}, 0, true, "finished=true"},
		{"checksum mismatch", []string{"--image-checksum", bad}, 1, false, "checksum mismatch"},
		{"no checksum", nil, 2, false, "--checksum or --image-checksum"},
		{"insecure", []string{"--insecure-skip-verify"}, 0, true, "unverified"},
		{"bad checksum syntax", []string{"--checksum", "md5:abc"}, 1, false, "malformed checksum"},
		{"missing source", []string{"--source", "", "--image-checksum", good}, 2, false, "--source is required"},
		{"stray argument", []string{"--image-checksum", good, "extra"}, 2, false, "unexpected arguments"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			target := filepath.Join(dir, "target"+string(rune('a'+i)))
			args := append([]string{"--source", src, "--target", target}, tt.args...)
			var stdout, stderr bytes.Buffer
			code := runWriteImage(context.Background(), args, &stdout, &stderr)
			if code != tt.wantCode {
				t.Fatalf("exit %d, want %d\nstdout: %s\nstderr: %s", code, tt.wantCode, stdout.String(), stderr.String())
			}
			if !strings.Contains(stderr.String(), tt.wantStderr) {
				t.Errorf("stderr does not contain %q:\n%s", tt.wantStderr, stderr.String())
			}
			got, _ := os.ReadFile(target)
			if tt.wantImage != bytes.Equal(got, img) {
				t.Errorf("target holds the image: %v, want %v", !tt.wantImage, tt.wantImage)
			}
			if tt.wantCode == 0 && !strings.Contains(stdout.String(), good) {
				t.Errorf("stdout does not report the image digest:\n%s", stdout.String())
			}
		})
	}
}

// Every usage error names the flag and what it accepts, exit status 2;
// sizes take disk.rootPartitionSize's suffixes.
func TestUsageErrorsNameTheFlag(t *testing.T) {
	tests := []struct {
		name string
		run  func(args []string, stderr *bytes.Buffer) int
		args []string
		want []string
	}{
		{"write-image size with suffix is not a usage error", writeImage, []string{"--target-size", "64M"}, []string{"--source is required"}},
		{"write-image bad size", writeImage, []string{"--source", "x", "--target", "y", "--target-size", "8192P"}, []string{`"--target-size"`, "8192P", "64M"}},
		{"write-image fraction of a byte", writeImage, []string{"--target-size", "0.4"}, []string{`"--target-size"`, "at least one byte"}},
		{"write-image unknown flag", writeImage, []string{"--bogus"}, []string{"unknown flag: --bogus", "booty write-image --help"}},
		{"write-image missing value", writeImage, []string{"--source"}, []string{"flag needs an argument: --source"}},
		{"config validate unknown flag", func(args []string, stderr *bytes.Buffer) int {
			return runConfig(append([]string{"validate"}, args...), &bytes.Buffer{}, stderr)
		}, []string{"--bogus"}, []string{"unknown flag: --bogus"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stderr bytes.Buffer
			if code := tt.run(tt.args, &stderr); code != 2 {
				t.Errorf("exit status %d, want 2", code)
			}
			for _, w := range tt.want {
				if !strings.Contains(stderr.String(), w) {
					t.Errorf("stderr lacks %q:\n%s", w, stderr.String())
				}
			}
		})
	}
}

func writeImage(args []string, stderr *bytes.Buffer) int {
	return runWriteImage(context.Background(), args, &bytes.Buffer{}, stderr)
}

// A plain http:// source needs --insecure-http: without it write-image
// fails naming the URL and the flag, and the server is not asked; with it
// the image is written and a warning says that http was allowed.
func TestWriteImageInsecureHTTP(t *testing.T) {
	img := bytes.Repeat([]byte("booty over http "), 100000)
	sum := sha256.Sum256(img)
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.Write(img)
	}))
	defer srv.Close()
	target := filepath.Join(t.TempDir(), "target")
	args := []string{"--source", srv.URL + "/img?sig=SECRET", "--target", target, "--image-checksum", "sha256:" + hex.EncodeToString(sum[:])}
	var stdout, stderr bytes.Buffer
	if code := runWriteImage(context.Background(), args, &stdout, &stderr); code != 1 {
		t.Fatalf("without --insecure-http: exit %d, want 1\n%s", code, stderr.String())
	}
	for _, want := range []string{"--insecure-http", srv.Listener.Addr().String()} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr.String())
		}
	}
	if strings.Contains(stderr.String(), "SECRET") {
		t.Errorf("stderr leaks the query:\n%s", stderr.String())
	}
	if n := hits.Load(); n != 0 {
		t.Fatalf("server asked %d times without the opt-in", n)
	}
	stderr.Reset()
	if code := runWriteImage(context.Background(), append(args, "--insecure-http"), &stdout, &stderr); code != 0 {
		t.Fatalf("with --insecure-http: exit %d\n%s", code, stderr.String())
	}
	if got, _ := os.ReadFile(target); !bytes.Equal(got, img) {
		t.Error("target does not hold the image")
	}
	if strings.Count(stderr.String(), "plain HTTP allowed") != 1 {
		t.Errorf("want one warning about plain HTTP:\n%s", stderr.String())
	}
}

// The hidden --debug-trace and --debug-cpuprofile flags write a
// runtime/trace and a CPU profile of the write (readable by go tool trace
// and go tool pprof), are not listed by --help, and an unwritable profile
// path fails before anything is written.
func TestWriteImageProfiles(t *testing.T) {
	dir := t.TempDir()
	img := bytes.Repeat([]byte("profiled image "), 300000)
	src := filepath.Join(dir, "image.raw")
	if err := os.WriteFile(src, img, 0o644); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(img)
	ck := "sha256:" + hex.EncodeToString(sum[:])
	traceFile, cpuFile := filepath.Join(dir, "w.trace"), filepath.Join(dir, "w.pprof")
	target := filepath.Join(dir, "target")
	var stdout, stderr bytes.Buffer
	args := []string{"--source", src, "--target", target, "--image-checksum", ck, "--debug-trace", traceFile, "--debug-cpuprofile", cpuFile}
	if code := runWriteImage(context.Background(), args, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d\n%s", code, stderr.String())
	}
	if got, _ := os.ReadFile(target); !bytes.Equal(got, img) {
		t.Error("target does not hold the image")
	}
	tr, _ := os.ReadFile(traceFile)
	if !bytes.HasPrefix(tr, []byte("go 1.")) || len(tr) < 1000 {
		t.Errorf("trace file: %d bytes starting %q, want a runtime/trace", len(tr), tr[:min(len(tr), 16)])
	}
	prof, _ := os.ReadFile(cpuFile)
	if !bytes.HasPrefix(prof, []byte{0x1f, 0x8b}) {
		t.Errorf("CPU profile: %d bytes, want a gzipped pprof profile", len(prof))
	}

	stderr.Reset()
	runWriteImage(context.Background(), []string{"--help"}, &stdout, &stderr)
	if strings.Contains(stderr.String(), "debug-") {
		t.Errorf("--help lists the hidden profiling flags:\n%s", stderr.String())
	}

	stderr.Reset()
	target2 := filepath.Join(dir, "target2")
	args = []string{"--source", src, "--target", target2, "--image-checksum", ck, "--debug-trace", filepath.Join(dir, "no", "such", "dir", "t")}
	if code := runWriteImage(context.Background(), args, &stdout, &stderr); code != 1 {
		t.Errorf("unwritable trace path: exit %d, want 1\n%s", code, stderr.String())
	}
	if !strings.Contains(stderr.String(), "create profile") {
		t.Errorf("stderr does not name the profile file:\n%s", stderr.String())
	}
	if _, err := os.Stat(target2); err == nil {
		t.Error("target written although the profile could not be created")
	}
}

// While it writes, write-image runs with image.Procs Ps (more than cores,
// so the fetch is not starved of one), and restores GOMAXPROCS after;
// GOMAXPROCS in the environment is left alone.
func TestWriteImageProcs(t *testing.T) {
	img := bytes.Repeat([]byte("procs "), 100000)
	sum := sha256.Sum256(img)
	var during atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		during.Store(int32(runtime.GOMAXPROCS(0))) // same process: the server runs during the write
		w.Write(img)
	}))
	defer srv.Close()
	before := runtime.GOMAXPROCS(0)
	for _, env := range []string{"", strconv.Itoa(before)} {
		t.Setenv("GOMAXPROCS", env)
		target := filepath.Join(t.TempDir(), "target")
		args := []string{"--source", srv.URL + "/img", "--target", target, "--insecure-http", "--image-checksum", "sha256:" + hex.EncodeToString(sum[:])}
		var stdout, stderr bytes.Buffer
		if code := runWriteImage(context.Background(), args, &stdout, &stderr); code != 0 {
			t.Fatalf("exit %d\n%s", code, stderr.String())
		}
		want := image.Procs(runtime.NumCPU())
		if env != "" {
			want = before
		}
		if got := int(during.Load()); got != want {
			t.Errorf("GOMAXPROCS=%q: %d Ps during the write, want %d", env, got, want)
		}
		if after := runtime.GOMAXPROCS(0); after != before {
			t.Errorf("GOMAXPROCS=%q: %d Ps after the write, want %d as before", env, after, before)
		}
	}
}
