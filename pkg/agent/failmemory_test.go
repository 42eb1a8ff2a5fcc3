package agent

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/booty-dev/booty/pkg/bootloader"
	"github.com/booty-dev/booty/pkg/config"
	"github.com/booty-dev/booty/pkg/network"
)

func TestFailDelay(t *testing.T) {
	for _, tt := range []struct {
		base time.Duration
		n    int
		want time.Duration
	}{
		{30 * time.Second, 0, 30 * time.Second},
		{30 * time.Second, 1, 30 * time.Second},
		{30 * time.Second, 2, time.Minute},
		{30 * time.Second, 4, 4 * time.Minute},
		{30 * time.Second, 7, MaxFailDelay},
		{30 * time.Second, maxFailCount, MaxFailDelay},
		{time.Hour, 3, time.Hour}, // a base above the bound is kept
	} {
		if got := failDelay(tt.base, tt.n); got != tt.want {
			t.Errorf("failDelay(%s, %d) = %s, want %s", tt.base, tt.n, got, tt.want)
		}
	}
}

// fakeEFIVars is a temp dir standing in for efivarfs.
func fakeEFIVars(t *testing.T) bootloader.EFIVars {
	return bootloader.EFIVars{Dir: t.TempDir()}
}

func TestEFIFailureMemory(t *testing.T) {
	v := fakeEFIVars(t)
	m := newFailureMemory(v)
	if m == nil {
		t.Fatal("no memory although the efivarfs dir exists")
	}
	if newFailureMemory(bootloader.EFIVars{Dir: filepath.Join(v.Dir, "absent")}) != nil {
		t.Fatal("memory without efivarfs")
	}
	var got []int
	for _, kind := range []string{"network", "network", "network", "write-image", "write-image", "network"} {
		n, err := m.Record(kind)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, n)
	}
	if want := []int{1, 2, 3, 1, 2, 1}; !slices.Equal(got, want) {
		t.Errorf("counts = %v, want %v", got, want)
	}
	if err := m.Clear(); err != nil {
		t.Fatal(err)
	}
	if n, _ := m.Record("network"); n != 1 {
		t.Errorf("after Clear: count %d, want 1", n)
	}
	// Garbage in the variable counts as no failure before.
	if err := v.WriteBootyVar(failuresVar, []byte("network lots")); err != nil {
		t.Fatal(err)
	}
	if n, _ := m.Record("network"); n != 1 {
		t.Errorf("after garbage: count %d, want 1", n)
	}
}

func TestEFIFailureMemoryUnwritable(t *testing.T) {
	// A directory where the variable should be cannot be written, even by root.
	v := fakeEFIVars(t)
	if err := os.Mkdir(filepath.Join(v.Dir, failuresVar+"-"+bootloader.BootyVendorGUID), 0o755); err != nil {
		t.Fatal(err)
	}
	n, err := efiFailureMemory{vars: v}.Record("network")
	if err == nil || n != 1 {
		t.Fatalf("Record = %d, %v; want 1 and an error", n, err)
	}
}

// A machine that never gets a network backs off on every boot: the agent
// runs again as after a reboot, with the same fake efivarfs, and waits
// twice as long each time; a success starts over.
func TestRunBacksOffAcrossBoots(t *testing.T) {
	v := fakeEFIVars(t)
	boot := func(succeed bool) []time.Duration {
		r := &fakePipeline{}
		var cfg *config.MachineConfig
		var loadErr error = config.ErrNoConfig
		if succeed {
			cfg, loadErr = cfgWith(nil), nil
		}
		a, out, slept, _ := testAgent(t, "", cfg, loadErr, r)
		a.Failures = newFailureMemory(v)
		if !succeed {
			a.ConfigureNetwork = func(context.Context, network.Options) (*network.Result, error) {
				return nil, errors.New("no DHCP lease on [eth0]: dhcp on eth0: no offer")
			}
		}
		a.Run(context.Background())
		if !succeed {
			// The console names the link tried and why it failed, and the kind.
			for _, want := range []string{`network_error="no DHCP lease on [eth0]: dhcp on eth0: no offer"`, "kind=network", "consecutive_failed_boots="} {
				if !strings.Contains(out.String(), want) {
					t.Errorf("console lacks %s:\n%s", want, out)
				}
			}
		}
		return *slept
	}
	var got []time.Duration
	for range 4 {
		got = append(got, boot(false)...)
	}
	want := []time.Duration{DefaultFailDelay, 2 * DefaultFailDelay, 4 * DefaultFailDelay, 8 * DefaultFailDelay}
	if !slices.Equal(got, want) {
		t.Fatalf("delays = %v, want %v", got, want)
	}
	if s := boot(true); len(s) != 0 {
		t.Fatalf("successful boot slept %v", s)
	}
	if s := boot(false); !slices.Equal(s, []time.Duration{DefaultFailDelay}) {
		t.Errorf("after a success: delays %v, want %v", s, DefaultFailDelay)
	}
}
