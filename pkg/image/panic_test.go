package image

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/booty-dev/booty/internal/testenv"
)

// zstdNoSize compresses data through a pipe, so the frame declares no
// content size and a too-big image is found only while writing.
func zstdNoSize(t *testing.T, data []byte) []byte {
	t.Helper()
	testenv.NeedTools(t, "zstd")
	cmd := exec.Command("zstd", "-c", "-q", "-1", "-T1")
	cmd.Stdin = bytes.NewReader(data)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("zstd: %v", err)
	}
	if sizeHintFromHeader(FormatZstd, out) != 0 {
		t.Fatal("zstd frame declares its content size; the test needs a stream without")
	}
	return out
}

// A zstd stream that overruns the target fails mid-stream while the
// decoder may still be reading: that used to close the decoder under the
// decode goroutine (nil-pointer panic in zstd's nextBlockSync, a kernel
// panic for PID 1). It must be an error, every time.
func TestWriteZstdOverrunNoPanic(t *testing.T) {
	img := make([]byte, 80*mib)
	rng := rand.New(rand.NewPCG(1, 2))
	fillData(rng, img) // dense: the decoder is busy when the write fails
	comp := zstdNoSize(t, img)
	// The server sends all but the stream's last 256 KiB, then stalls: the
	// decoder is inside Read, waiting for more, when the target overruns.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(len(comp)))
		w.Write(comp[:len(comp)-256*1024])
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}))
	defer srv.Close()
	src := srv.URL + "/img.zst"
	for i := range 20 {
		dst := filepath.Join(t.TempDir(), "target.img")
		_, err := Write(context.Background(), Options{
			Source: src, ImageChecksum: sha(img), Target: dst, TargetSize: 64 * mib, AllowHTTP: true, Log: testLog(t),
		})
		if !errors.Is(err, ErrTargetTooSmall) {
			t.Fatalf("run %d: Write = %v, want ErrTargetTooSmall", i, err)
		}
	}
}

// A panic in a pipeline stage is the write's error, not a crash.
func TestWriteStagePanicIsError(t *testing.T) {
	img := gptImage(t, testImageSize, true, 11)
	src := writeFile(t, "src", img)
	mem := newMemTarget(16*mib, 0)
	mem.fail = func(off int64, p []byte) error {
		if off > 0 {
			panic("injected panic in a writer")
		}
		return nil
	}
	_, err := Write(context.Background(), Options{Source: src, ImageChecksum: sha(img), Target: "mem", TargetWriter: mem, Log: testLog(t)})
	if err == nil || !bytes.Contains([]byte(err.Error()), []byte("panic: injected panic in a writer")) {
		t.Fatalf("Write = %v, want the writer's panic as an error", err)
	}
}

// watchedDecoder records a Close that comes while a Read is running.
type watchedDecoder struct {
	r        io.Reader
	close    func()
	mu       sync.Mutex
	reading  int
	closed   bool
	underRun bool // Close ran while a Read was in progress
}

func (d *watchedDecoder) Read(p []byte) (int, error) {
	d.mu.Lock()
	d.reading++
	d.mu.Unlock()
	n, err := d.r.Read(p)
	if err != nil {
		time.Sleep(20 * time.Millisecond) // widen the window a real decoder has after its source fails
	}
	d.mu.Lock()
	d.reading--
	d.mu.Unlock()
	return n, err
}

func (d *watchedDecoder) Close() {
	d.mu.Lock()
	if d.reading > 0 {
		d.underRun = true
	}
	d.closed = true
	d.mu.Unlock()
	d.close()
}

// The decoder is closed only after the decode stage has returned.
func TestWriteClosesDecoderAfterStages(t *testing.T) {
	img := make([]byte, 24*mib)
	fillData(rand.New(rand.NewPCG(3, 4)), img)
	comp := zstdNoSize(t, img)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(len(comp)))
		w.Write(comp[:len(comp)-64*1024])
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}))
	defer srv.Close()
	var decs []*watchedDecoder
	var mu sync.Mutex
	old := openDecoder
	openDecoder = func(f Format, r io.Reader, o *Options) (io.Reader, func(), error) {
		dec, closeDec, err := old(f, r, o)
		if err != nil {
			return dec, closeDec, err
		}
		d := &watchedDecoder{r: dec, close: closeDec}
		mu.Lock()
		decs = append(decs, d)
		mu.Unlock()
		return d, d.Close, nil
	}
	defer func() { openDecoder = old }()
	for i := range 5 {
		_, err := Write(context.Background(), Options{
			Source: srv.URL + "/img.zst", ImageChecksum: sha(img), Target: filepath.Join(t.TempDir(), "t"), TargetSize: 16 * mib, AllowHTTP: true, Log: testLog(t),
		})
		if !errors.Is(err, ErrTargetTooSmall) {
			t.Fatalf("run %d: Write = %v, want ErrTargetTooSmall", i, err)
		}
	}
	for i, d := range decs {
		if !d.closed {
			t.Errorf("run %d: decoder never closed", i)
		}
		if d.underRun {
			t.Errorf("run %d: decoder closed while the decode stage was still reading from it", i)
		}
	}
}
