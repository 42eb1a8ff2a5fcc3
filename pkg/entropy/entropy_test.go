package entropy

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestWaitReadyAtOnce(t *testing.T) {
	var out bytes.Buffer
	kicks := 0
	p := &Pool{Ready: func() (bool, error) { return true, nil }, Kick: func() { kicks++ }}
	d, err := p.Wait(t.Context(), slog.New(slog.NewTextHandler(&out, nil)), "tls")
	if err != nil || d != 0 {
		t.Fatalf("Wait = %s, %v; want 0, nil", d, err)
	}
	if out.Len() != 0 || kicks != 0 {
		t.Errorf("a ready pool logged %q and kicked %d times", out.String(), kicks)
	}
}

func TestWaitUntilReady(t *testing.T) {
	var out bytes.Buffer
	log := slog.New(slog.NewTextHandler(&out, nil))
	var polls atomic.Int32
	kicks := 0
	p := &Pool{
		Ready:    func() (bool, error) { return polls.Add(1) > 3, nil },
		Kick:     func() { kicks++ },
		Interval: time.Millisecond,
		Timeout:  time.Minute,
	}
	if _, err := p.Wait(t.Context(), log, "https image"); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Wait(t.Context(), log, "bootyd"); err != nil {
		t.Fatal(err)
	}
	s := out.String()
	if n := strings.Count(s, Message); n != 1 {
		t.Errorf("message said %d times, want once:\n%s", n, s)
	}
	if !strings.Contains(s, "random number generator is ready") || !strings.Contains(s, "waited=") {
		t.Errorf("log does not say how long it waited:\n%s", s)
	}
	if kicks != 1 {
		t.Errorf("kicked %d times, want once", kicks)
	}
	if n := polls.Load(); n != 4 {
		t.Errorf("polled %d times, want 4 (a ready pool is remembered)", n)
	}
}

func TestWaitBounded(t *testing.T) {
	var out bytes.Buffer
	p := &Pool{Ready: func() (bool, error) { return false, nil }, Kick: func() {},
		Interval: time.Millisecond, Timeout: 50 * time.Millisecond}
	_, err := p.Wait(t.Context(), slog.New(slog.NewTextHandler(&out, nil)), "https image")
	if !errors.Is(err, ErrNotReady) {
		t.Fatalf("err = %v, want ErrNotReady", err)
	}
	for _, want := range []string{"https image", "add virtio-rng to a VM, or enable RDRAND", "after waiting"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("err = %v, want it to say %q", err, want)
		}
	}
	// A second wait is bounded again, and the message is not repeated.
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := p.Wait(ctx, slog.New(slog.NewTextHandler(&out, nil)), "bootyd"); !errors.Is(err, ErrNotReady) {
		t.Fatalf("cancelled wait: err = %v, want ErrNotReady", err)
	}
	if n := strings.Count(out.String(), Message); n != 1 {
		t.Errorf("message said %d times, want once", n)
	}
}

func TestWaitReadyError(t *testing.T) {
	boom := errors.New("enosys")
	p := &Pool{Ready: func() (bool, error) { return false, boom }}
	if _, err := p.Wait(t.Context(), nil, "tls"); !errors.Is(err, boom) {
		t.Fatalf("err = %v, want %v", err, boom)
	}
}

// On the test machine the CRNG has long been ready: the real check says so.
func TestKernelReady(t *testing.T) {
	ok, err := kernelReady()
	if err != nil || !ok {
		t.Fatalf("kernelReady = %v, %v; want true on a running host", ok, err)
	}
}

func TestSources(t *testing.T) {
	dir := t.TempDir()
	write := func(name, data string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	qemu64 := write("cpuinfo-qemu64", "processor\t: 0\nflags\t\t: fpu de pse tsc msr pae mce cx8 apic sep pge cmov pat pse36 clflush mmx fxsr sse sse2 syscall nx lm nopl cpuid pni cx16 hypervisor lahf_lm svm\n")
	host := write("cpuinfo-host", "processor\t: 0\nflags\t\t: fpu sse2 aes rdrand hypervisor\nbugs\t\t: spectre_v1\n")
	virtio := write("rng_current", "virtio_rng.0\n")
	none := write("rng_current-none", "none\n")
	for _, tt := range []struct {
		cpuinfo, hwrng string
		ready          bool
		want           Sources
	}{
		{qemu64, filepath.Join(dir, "absent"), false, Sources{HWRNG: "none"}},
		{qemu64, none, false, Sources{HWRNG: "none"}},
		{host, virtio, true, Sources{RDRAND: true, HWRNG: "virtio_rng.0", Ready: true}},
	} {
		p := &Pool{CPUInfo: tt.cpuinfo, HWRNGCurrent: tt.hwrng, Ready: func() (bool, error) { return tt.ready, nil }}
		if got := p.Sources(); got != tt.want {
			t.Errorf("Sources(%s, %s) = %+v, want %+v", filepath.Base(tt.cpuinfo), filepath.Base(tt.hwrng), got, tt.want)
		}
	}
}
