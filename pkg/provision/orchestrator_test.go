package provision

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/booty-dev/booty/pkg/api"
	"github.com/booty-dev/booty/pkg/command"
	"github.com/booty-dev/booty/pkg/config"
	"github.com/booty-dev/booty/pkg/disk"
	"github.com/booty-dev/booty/pkg/image"
)

// recordingProvider is a provider with every reporting capability; it records
// what it was told.
type recordingProvider struct {
	mu       sync.Mutex
	status   []api.StatusReport
	progress []api.ProgressReport
}

func (p *recordingProvider) Name() string { return "recording" }
func (p *recordingProvider) Load(context.Context) (*config.MachineConfig, error) {
	return nil, config.ErrNoConfig
}
func (p *recordingProvider) ReportStatus(_ context.Context, r api.StatusReport) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.status = append(p.status, r)
	return nil
}
func (p *recordingProvider) ReportProgress(_ context.Context, r api.ProgressReport) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.progress = append(p.progress, r)
	return nil
}

func (p *recordingProvider) states() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var s []string
	for _, r := range p.status {
		s = append(s, r.Step+":"+r.State)
	}
	return s
}

func testConfig() *config.MachineConfig {
	return &config.MachineConfig{
		APIVersion: config.APIVersion,
		Hostname:   "node-1",
		Mode:       config.ModeProvision,
		Image:      config.ImageSpec{URL: "http://127.0.0.1/img.zst", Checksum: "sha256:" + strings.Repeat("a", 64)},
		Disk:       config.DiskSpec{Device: "/dev/vda"},
		Server:     config.ServerSpec{Token: "s3cret-token"},
	}
}

func newTestOrchestrator(t *testing.T, cfg *config.MachineConfig, p config.Provider) (*Orchestrator, *bytes.Buffer) {
	t.Helper()
	o := NewOrchestrator(cfg, p, nil)
	var logs bytes.Buffer
	o.SetLogger(slog.New(slog.NewTextHandler(&logs, nil)))
	o.selectDisk = func(spec config.DiskSpec) (*disk.Disk, error) {
		return &disk.Disk{Name: "vda", Path: filepath.Join(t.TempDir(), "vda"), Size: 1 << 30, Serial: "S1"}, nil
	}
	o.dumpDebugState = func(string) { t.Fatal("debug dump on success path") }
	o.efiBooted = func() bool { return false }
	o.deployDir = filepath.Join(t.TempDir(), "deploy")
	o.kexecDir = filepath.Join(t.TempDir(), "kexec")
	o.devDir = filepath.Join(t.TempDir(), "dev")
	o.growPartition = func(context.Context, *disk.Disk, int64) (string, error) { return "grown", nil }
	o.growFilesystem = func(context.Context, string, disk.Partition) error { return nil }
	o.conf.SetRunner(&fakeRunner{})
	return o, &logs
}

// keepConfig is testConfig for an image written as is: no growth, no
// kexec, nothing configured, so the installed OS is never mounted.
func keepConfig() *config.MachineConfig {
	c := testConfig()
	c.Hostname = ""
	c.Handoff = config.HandoffPoweroff
	c.Disk.RootPartitionSize = config.RootPartitionKeep
	return c
}

func TestProvisionPlanNames(t *testing.T) {
	tests := []struct {
		name string
		cfg  func(*config.MachineConfig)
		efi  bool
		dirs []string
		want []string
	}{
		{name: "image as is", cfg: func(*config.MachineConfig) {},
			want: []string{StepSelectDisk, StepWriteImage, StepReportSuccess}},
		{name: "grow and kexec", cfg: func(c *config.MachineConfig) { c.Disk.RootPartitionSize = ""; c.Handoff = "" },
			want: []string{StepSelectDisk, StepWriteImage, StepGrowPartition, StepMountRoot, StepGrowFilesystem,
				StepPrepareKexec, StepUnmountRoot, StepReportSuccess}},
		{name: "everything", efi: true, dirs: []string{"file-system", "machine-commands"}, cfg: func(c *config.MachineConfig) {
			c.Disk.RootPartitionSize = "40G"
			c.Handoff = config.HandoffKexec
			c.Hostname = "n1"
			c.DNS.Nameservers = []string{"10.0.0.53"}
			c.Network = config.NetworkSpec{Persist: true, Links: []config.LinkSpec{{Name: "eth0", DHCP4: true}}}
			c.Kubelet.ProviderID = "metal://x"
			c.CloudInit.UserData = "#cloud-config"
			c.PostProvisionCommands = []string{"true"}
			c.KernelParams = []string{"quiet"}
			c.Mellanox.NumVFs = 8
		}, want: []string{StepSelectDisk, StepWriteImage, StepGrowPartition, StepMountRoot, StepGrowFilesystem,
			StepCopyFiles, StepSetHostname, StepConfigureDNS, StepConfigureNetwork, StepConfigureKubelet, StepCloudInitSeed,
			StepMachineCommands, StepPostProvision, StepConfigureGRUB, StepEFIBootEntry, StepPrepareKexec,
			StepUnmountRoot, StepSetupMellanox, StepReportSuccess}},
		{name: "efi entry not wanted", efi: true, cfg: func(c *config.MachineConfig) { f := false; c.EFIBootEntry = &f },
			want: []string{StepSelectDisk, StepWriteImage, StepReportSuccess}},
		{name: "efi entry on a UEFI machine", efi: true, cfg: func(c *config.MachineConfig) {},
			want: []string{StepSelectDisk, StepWriteImage, StepMountRoot, StepEFIBootEntry, StepUnmountRoot, StepReportSuccess}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := keepConfig()
			tt.cfg(cfg)
			o, _ := newTestOrchestrator(t, cfg, &recordingProvider{})
			o.efiBooted = func() bool { return tt.efi }
			for _, d := range tt.dirs {
				os.MkdirAll(filepath.Join(o.deployDir, d), 0o755)
			}
			if got := stepNames(o.ProvisionPlan()); !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("plan = %v\nwant %v", got, tt.want)
			}
		})
	}
}

func stepNames(plan []Step) []string {
	var n []string
	for _, s := range plan {
		n = append(n, s.Name)
	}
	return n
}

func TestProvisionReportsEveryStep(t *testing.T) {
	p := &recordingProvider{}
	o, logs := newTestOrchestrator(t, keepConfig(), p)
	var got image.Options
	o.writeImage = func(_ context.Context, opts image.Options) (image.Result, error) {
		got = opts
		opts.Progress(image.Progress{BytesDone: 50, BytesTotal: 100, Rate: 10, ETA: 5 * time.Second})
		return image.Result{ImageSize: 100, ImageDigest: "sha256:x"}, nil
	}
	if err := o.Provision(context.Background()); err != nil {
		t.Fatalf("Provision: %v", err)
	}
	want := []string{
		"select-disk:started", "select-disk:succeeded",
		"write-image:started", "write-image:succeeded",
		"report-success:started", "report-success:succeeded",
		"machine:provisioned",
	}
	if s := p.states(); !reflect.DeepEqual(s, want) {
		t.Fatalf("reports = %v\nwant %v", s, want)
	}
	if got.Target != o.SelectedDisk().Path || got.Source != testConfig().Image.URL || got.Checksum != testConfig().Image.Checksum {
		t.Fatalf("write-image got options %+v", got)
	}
	if len(p.progress) != 1 || p.progress[0].BytesDone != 50 || p.progress[0].Step != StepWriteImage || p.progress[0].ETASeconds != 5 {
		t.Fatalf("progress = %+v", p.progress)
	}
	// Index and total travel with each report; select-disk reports the disk.
	if r := p.status[1]; r.Index != 1 || r.Total != 3 || r.Detail["serial"] != "S1" {
		t.Fatalf("select-disk report = %+v", r)
	}
	for _, want := range []string{"step started", "step done", "n=2/3", "duration="} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, logs.String())
		}
	}
	if got.AllowHTTP {
		t.Error("plain http allowed without SetAllowHTTP (booty.insecure-http=1)")
	}
	o.SetAllowHTTP(true)
	if err := o.stepWriteImage(context.Background()); err != nil || !got.AllowHTTP {
		t.Errorf("SetAllowHTTP(true) did not reach the image writer (err %v)", err)
	}
	if got.HTTPClient != nil {
		t.Error("the image writer got a client from a provider that lends none")
	}
}

// lendingProvider lends a client for its own URLs, as
// provider.ServerProvider.ClientFor does.
type lendingProvider struct {
	recordingProvider
	client *http.Client
	asked  []string
}

func (p *lendingProvider) ClientFor(rawURL, caPEM string) *http.Client {
	p.asked = append(p.asked, rawURL+" "+caPEM)
	return p.client
}

// The image writer fetches with the client the provider lends for the
// image URL and the config's CA (bootyd's connections).
func TestWriteImageUsesProviderClient(t *testing.T) {
	p := &lendingProvider{client: &http.Client{}}
	cfg := keepConfig()
	cfg.Server.CACert = "-----BEGIN CERTIFICATE-----"
	o, _ := newTestOrchestrator(t, cfg, p)
	var got image.Options
	o.writeImage = func(_ context.Context, opts image.Options) (image.Result, error) {
		got = opts
		return image.Result{ImageSize: 100}, nil
	}
	if err := o.Provision(context.Background()); err != nil {
		t.Fatalf("Provision: %v", err)
	}
	if got.HTTPClient != p.client {
		t.Errorf("image writer client %p, want the provider's %p", got.HTTPClient, p.client)
	}
	if want := cfg.Image.URL + " " + cfg.Server.CACert; len(p.asked) != 1 || p.asked[0] != want {
		t.Errorf("provider asked %q, want [%q]", p.asked, want)
	}
}

func TestProvisionFailureNamesStepAndStops(t *testing.T) {
	p := &recordingProvider{}
	o, _ := newTestOrchestrator(t, keepConfig(), p)
	var dumped []string
	o.dumpDebugState = func(step string) { dumped = append(dumped, step) }
	boom := errors.New("checksum mismatch")
	o.writeImage = func(context.Context, image.Options) (image.Result, error) { return image.Result{}, boom }
	err := o.Provision(context.Background())
	if !errors.Is(err, boom) {
		t.Fatalf("err = %v, want wrapping %v", err, boom)
	}
	if FailedStep(err) != StepWriteImage {
		t.Fatalf("FailedStep = %q", FailedStep(err))
	}
	if !reflect.DeepEqual(dumped, []string{StepWriteImage}) {
		t.Fatalf("debug dumps = %v", dumped)
	}
	want := []string{"select-disk:started", "select-disk:succeeded", "write-image:started", "write-image:failed", "machine:error"}
	if s := p.states(); !reflect.DeepEqual(s, want) {
		t.Fatalf("reports = %v\nwant %v", s, want)
	}
	failed := p.status[3]
	if !strings.Contains(failed.Error, "checksum mismatch") || failed.Index != 2 {
		t.Fatalf("failed report = %+v", failed)
	}
	if !strings.Contains(p.status[4].Error, "write-image") {
		t.Fatalf("machine error does not name the step: %q", p.status[4].Error)
	}
}

func TestProvisionDiskErrorWritesNothing(t *testing.T) {
	p := &recordingProvider{}
	o, _ := newTestOrchestrator(t, testConfig(), p)
	o.dumpDebugState = func(string) {}
	o.selectDisk = func(config.DiskSpec) (*disk.Disk, error) { return nil, errors.New("no disk /dev/vdz") }
	o.writeImage = func(context.Context, image.Options) (image.Result, error) {
		t.Fatal("write-image ran after select-disk failed")
		return image.Result{}, nil
	}
	if err := o.Provision(context.Background()); FailedStep(err) != StepSelectDisk {
		t.Fatalf("err = %v", err)
	}
}

func TestProvisionWithoutReporterCapabilities(t *testing.T) {
	// A provider that only loads configs must still work: reporting is optional.
	o, _ := newTestOrchestrator(t, keepConfig(), loadOnly{})
	o.writeImage = func(_ context.Context, opts image.Options) (image.Result, error) {
		opts.Progress(image.Progress{BytesDone: 1})
		return image.Result{}, nil
	}
	if err := o.Provision(context.Background()); err != nil {
		t.Fatal(err)
	}
}

type loadOnly struct{}

func (loadOnly) Name() string { return "load-only" }
func (loadOnly) Load(context.Context) (*config.MachineConfig, error) {
	return nil, config.ErrNoConfig
}

func TestCancelledContextStopsBeforeNextStep(t *testing.T) {
	p := &recordingProvider{}
	o, _ := newTestOrchestrator(t, keepConfig(), p)
	ctx, cancel := context.WithCancel(context.Background())
	o.selectDisk = func(config.DiskSpec) (*disk.Disk, error) {
		cancel()
		return &disk.Disk{Path: "/dev/null"}, nil
	}
	o.writeImage = func(context.Context, image.Options) (image.Result, error) {
		t.Fatal("write-image ran after cancel")
		return image.Result{}, nil
	}
	err := o.Provision(ctx)
	if FailedStep(err) != StepWriteImage || !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v", err)
	}
}

func TestDeprovisionHard(t *testing.T) {
	cfg := testConfig()
	cfg.Mode = config.ModeDeprovision
	cfg.Disk.SecureErase = true
	p := &recordingProvider{}
	o, _ := newTestOrchestrator(t, cfg, p)
	o.efiBooted = func() bool { return true }
	o.readPartUUIDs = func(*disk.Disk) (map[string]bool, error) { return map[string]bool{"u1": true}, nil }
	var removedFor map[string]bool
	o.removeEFI = func(u map[string]bool) ([]uint16, error) { removedFor = u; return []uint16{3, 0x1a}, nil }
	var wiped disk.WipeOptions
	o.wipeDisk = func(_ context.Context, d disk.Disk, opts disk.WipeOptions) (*disk.WipeReport, error) {
		wiped = opts
		return &disk.WipeReport{Disk: d.Path, BytesZeroed: 4 << 20, Regions: 4, Discarded: true, SecureErase: "nvme-format-user-data-erase"}, nil
	}
	if got, want := stepNames(o.DeprovisionPlan()), []string{StepSelectDisk, StepRemoveEFIEntries, StepWipeDisk}; !reflect.DeepEqual(got, want) {
		t.Fatalf("plan = %v, want %v", got, want)
	}
	if err := o.Deprovision(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !wiped.SecureErase || !removedFor["u1"] {
		t.Fatalf("wipe options %+v, EFI removal for %v", wiped, removedFor)
	}
	var efi, wipe api.StatusReport
	for _, r := range p.status {
		if r.State == api.StateSucceeded && r.Step == StepRemoveEFIEntries {
			efi = r
		}
		if r.State == api.StateSucceeded && r.Step == StepWipeDisk {
			wipe = r
		}
	}
	if efi.Detail["efiEntriesRemoved"] != "Boot0003,Boot001A" {
		t.Errorf("EFI report = %+v", efi.Detail)
	}
	if wipe.Detail["secureErase"] != "nvme-format-user-data-erase" || wipe.Detail["bytesZeroed"] != "4194304" || wipe.Detail["discarded"] != "true" {
		t.Errorf("wipe report = %+v", wipe.Detail)
	}
	if s := p.states(); s[len(s)-1] != "machine:deprovisioned" {
		t.Fatalf("reports = %v", s)
	}
}

// fakeOS is an installed OS "mounted" at a temp dir.
type fakeOS struct {
	root      string
	mounts    int
	unmounts  int
	mountErr  error
	partition disk.Partition
}

func (f *fakeOS) Mount(context.Context) error {
	f.mounts++
	return f.mountErr
}
func (f *fakeOS) Unmount() error                        { f.unmounts++; return nil }
func (f *fakeOS) Root() string                          { return f.root }
func (f *fakeOS) RootPartition() (disk.Partition, bool) { return f.partition, true }
func (f *fakeOS) ESP() (disk.Partition, bool)           { return disk.Partition{}, false }
func (f *fakeOS) Partitions() []disk.Partition          { return []disk.Partition{f.partition} }

func newFakeOS(t *testing.T) *fakeOS {
	root := t.TempDir()
	for _, d := range []string{"etc", "boot/grub", "boot/efi/EFI/debian"} {
		os.MkdirAll(filepath.Join(root, d), 0o755)
	}
	os.WriteFile(filepath.Join(root, "etc/hostname"), []byte("image\n"), 0o644)
	os.WriteFile(filepath.Join(root, "etc/hosts"), []byte("127.0.0.1 localhost\n"), 0o644)
	os.WriteFile(filepath.Join(root, "boot/vmlinuz-6.1.0-1-amd64"), []byte("KERNEL"), 0o644)
	os.WriteFile(filepath.Join(root, "boot/initrd.img-6.1.0-1-amd64"), []byte("INITRD"), 0o644)
	os.WriteFile(filepath.Join(root, "boot/grub/grub.cfg"), []byte("menuentry 'Debian' {\n linux /boot/vmlinuz-6.1.0-1-amd64 root=UUID=abc ro quiet\n initrd /boot/initrd.img-6.1.0-1-amd64\n}\n"), 0o644)
	os.WriteFile(filepath.Join(root, "boot/efi/EFI/debian/grub.cfg"), []byte("configfile $prefix/grub.cfg\n"), 0o644)
	return &fakeOS{root: root, partition: disk.Partition{Path: "/dev/vda2", Number: 2, FSType: "ext4",
		UUID: "fs-uuid-2", PartUUID: "part-uuid-2", Label: "root"}}
}

func TestProvisionConfiguresAndPreparesKexec(t *testing.T) {
	cfg := testConfig()
	cfg.Hostname = "node-7"
	cfg.Handoff = config.HandoffKexec
	p := &recordingProvider{}
	o, _ := newTestOrchestrator(t, cfg, p)
	fos := newFakeOS(t)
	o.newInstalledOS = func(string) installedOS { return fos }
	var grewFS disk.Partition
	o.growFilesystem = func(_ context.Context, root string, part disk.Partition) error {
		if root != fos.root {
			t.Errorf("grow-filesystem root %q", root)
		}
		grewFS = part
		return nil
	}
	o.writeImage = func(context.Context, image.Options) (image.Result, error) { return image.Result{}, nil }
	if err := o.Provision(context.Background()); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(fos.root, "etc/hostname")); string(b) != "node-7\n" {
		t.Errorf("hostname = %q", b)
	}
	if grewFS.Path != "/dev/vda2" {
		t.Errorf("grew filesystem on %+v", grewFS)
	}
	k := o.Kexec()
	if k == nil || !strings.Contains(k.Cmdline, "root=UUID=abc") {
		t.Fatalf("kexec target = %+v", k)
	}
	if b, _ := os.ReadFile(k.Kernel); string(b) != "KERNEL" {
		t.Errorf("kexec kernel holds %q", b)
	}
	if b, _ := os.ReadFile(k.Initrd); string(b) != "INITRD" {
		t.Errorf("kexec initrd holds %q", b)
	}
	if fos.mounts != 1 || fos.unmounts != 1 {
		t.Errorf("mounted %d times, unmounted %d times", fos.mounts, fos.unmounts)
	}
	// udev's links, which grub-mkconfig needs for root=UUID=.
	for link, want := range map[string]string{"disk/by-uuid/fs-uuid-2": "/dev/vda2", "disk/by-partuuid/part-uuid-2": "/dev/vda2", "disk/by-label/root": "/dev/vda2"} {
		if got, err := os.Readlink(filepath.Join(o.devDir, link)); err != nil || got != want {
			t.Errorf("link %s -> %q (%v), want %s", link, got, err, want)
		}
	}
}

// A failure after the image was written unmounts the OS and leaves the disk
// without partition tables at either end.
func TestFailureAfterWriteMakesDiskUnbootable(t *testing.T) {
	cfg := testConfig()
	cfg.PostProvisionCommands = []string{"exit 3"}
	cfg.Handoff = config.HandoffReboot
	p := &recordingProvider{}
	o, _ := newTestOrchestrator(t, cfg, p)
	o.dumpDebugState = func(string) {}
	fos := newFakeOS(t)
	o.newInstalledOS = func(string) installedOS { return fos }
	o.disks = &disk.Manager{}
	path := filepath.Join(t.TempDir(), "disk")
	data := bytes.Repeat([]byte{0xAB}, 4<<20)
	os.WriteFile(path, data, 0o600)
	o.selectDisk = func(config.DiskSpec) (*disk.Disk, error) { return &disk.Disk{Path: path, Size: int64(len(data))}, nil }
	o.writeImage = func(context.Context, image.Options) (image.Result, error) { return image.Result{}, nil }
	o.conf.SetRunner(&fakeRunner{Handle: func(fakeCall) ([]byte, []byte, error) {
		return nil, []byte("boom"), &command.Error{Name: "bash", ExitCode: 3, Stderr: "boom"}
	}})
	err := o.Provision(context.Background())
	if FailedStep(err) != StepPostProvision {
		t.Fatalf("err = %v", err)
	}
	if fos.unmounts != 1 {
		t.Errorf("unmounted %d times after the failure", fos.unmounts)
	}
	got, _ := os.ReadFile(path)
	zero := make([]byte, disk.EndsSpan)
	if !bytes.Equal(got[:disk.EndsSpan], zero) || !bytes.Equal(got[len(got)-disk.EndsSpan:], zero) {
		t.Fatal("disk ends not zeroed after a failure past the write")
	}
	if !bytes.Equal(got[disk.EndsSpan:len(got)-disk.EndsSpan], data[disk.EndsSpan:len(got)-disk.EndsSpan]) {
		t.Fatal("middle changed")
	}
}

// A failure before the write leaves the disk as it was.
func TestFailureBeforeWriteTouchesNothing(t *testing.T) {
	o, _ := newTestOrchestrator(t, testConfig(), &recordingProvider{})
	o.dumpDebugState = func(string) {}
	path := filepath.Join(t.TempDir(), "disk")
	data := bytes.Repeat([]byte{0xAB}, 3<<20)
	os.WriteFile(path, data, 0o600)
	o.selectDisk = func(config.DiskSpec) (*disk.Disk, error) { return &disk.Disk{Path: path, Size: int64(len(data))}, nil }
	o.writeImage = func(context.Context, image.Options) (image.Result, error) {
		return image.Result{}, errors.New("checksum mismatch")
	}
	if err := o.Provision(context.Background()); FailedStep(err) != StepWriteImage {
		t.Fatalf("err = %v", err)
	}
	if got, _ := os.ReadFile(path); !bytes.Equal(got, data) {
		t.Fatal("the orchestrator changed the disk although the image was never written")
	}
}

func TestSoftDeprovisionRenamesGrubCfg(t *testing.T) {
	cfg := testConfig()
	cfg.Mode = config.ModeSoftDeprovision
	o, _ := newTestOrchestrator(t, cfg, &recordingProvider{})
	fos := newFakeOS(t)
	o.newInstalledOS = func(string) installedOS { return fos }
	if got, want := stepNames(o.DeprovisionPlan()), []string{StepSelectDisk, StepMountRoot, StepDisableBoot, StepUnmountRoot}; !reflect.DeepEqual(got, want) {
		t.Fatalf("plan = %v, want %v", got, want)
	}
	if err := o.Deprovision(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"boot/grub/grub.cfg", "boot/efi/EFI/debian/grub.cfg"} {
		if _, err := os.Stat(filepath.Join(fos.root, f)); !os.IsNotExist(err) {
			t.Errorf("%s still there", f)
		}
		if _, err := os.Stat(filepath.Join(fos.root, f+disabledSuffix)); err != nil {
			t.Errorf("%s not renamed: %v", f, err)
		}
	}
	// A second soft deprovision finds nothing to disable: a clear error.
	o2, _ := newTestOrchestrator(t, cfg, &recordingProvider{})
	o2.dumpDebugState = func(string) {}
	o2.newInstalledOS = func(string) installedOS { return fos }
	if err := o2.Deprovision(context.Background()); err == nil || !strings.Contains(err.Error(), "no grub.cfg") {
		t.Fatalf("second soft deprovision: %v", err)
	}
}

func TestDumpDebugStateRedactsSecrets(t *testing.T) {
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "proc", "net"), 0o755)
	os.WriteFile(filepath.Join(root, "proc", "mounts"), []byte("proc /proc proc rw 0 0\n"), 0o644)
	os.WriteFile(filepath.Join(root, "proc", "net", "route"), []byte("Iface\tDestination\n"), 0o644)
	blk := filepath.Join(root, "sys", "class", "block", "vda")
	os.MkdirAll(blk, 0o755)
	os.WriteFile(filepath.Join(blk, "size"), []byte("2048\n"), 0o644)

	var out bytes.Buffer
	cfg := testConfig()
	o := NewOrchestrator(cfg, nil, nil)
	o.debug.procDir = filepath.Join(root, "proc")
	o.debug.sysDir = filepath.Join(root, "sys")
	o.debug.readKmsg = func() ([]byte, error) {
		return []byte("[    0.0] Kernel command line: booty.config=https://user:kmsgpass@host/c.yaml?access_token=KMSGTOKEN\n" +
			"[    1.0] virtio_blk virtio1: [vda] 2048 512-byte logical blocks\n"), nil
	}
	o.SetLogger(slog.New(slog.NewTextHandler(&out, nil)))
	cfg.CloudInit.UserData = "#cloud-config\npassword: hunter2"
	cfg.Image.URL = "https://s3.example.com/os.img?X-Amz-Signature=PRESIGNED"
	cfg.PostProvisionCommands = []string{"echo root:CMDPASS | chpasswd"}
	cfg.CloudInit.NetworkConfig = "version: 2\nwifis: {wlan0: {access-points: {home: {password: WIFIPASS}}}}"

	o.dumpDebugState(StepWriteImage)
	s := out.String()
	for _, want := range []string{"step=write-image", "mounts: proc /proc", "vda", "size=1048576", "virtio_blk", "hostname: node-1"} {
		if !strings.Contains(s, want) {
			t.Errorf("dump lacks %q", want)
		}
	}
	for _, secret := range []string{"s3cret-token", "hunter2", "PRESIGNED", "CMDPASS", "WIFIPASS", "kmsgpass", "KMSGTOKEN"} {
		if strings.Contains(s, secret) {
			t.Errorf("dump leaks secret %q", secret)
		}
	}
}

// The write-image step's error carries image.url: in the report and the
// log it has no user info or query.
func TestStepErrorRedactsURL(t *testing.T) {
	var out bytes.Buffer
	o := NewOrchestrator(testConfig(), nil, nil)
	o.SetLogger(slog.New(slog.NewTextHandler(&out, nil)))
	plan := []Step{{Name: StepWriteImage, Fn: func(context.Context) error {
		return fmt.Errorf("write https://user:pw@s3.example.com/os.img?X-Amz-Signature=PRESIGNED: %w", errors.New("connection reset"))
	}}}
	err := executor{o: o}.run(context.Background(), plan)
	if err == nil {
		t.Fatal("run succeeded")
	}
	for _, s := range []string{err.Error(), out.String()} {
		if strings.Contains(s, "PRESIGNED") || strings.Contains(s, "user:pw") {
			t.Errorf("secret in %q", s)
		}
		if !strings.Contains(s, "s3.example.com/os.img") {
			t.Errorf("the URL's host and path are gone from %q", s)
		}
	}
}

// An image written as is (rootPartitionSize keep) gets no grow-partition
// step to make the kernel re-read its table: mount-root does, before it
// looks for the partitions; with a grow step it does not again.
func TestMountRootRereadsWhenNotGrown(t *testing.T) {
	for _, keep := range []bool{true, false} {
		cfg := testConfig()
		cfg.Handoff = config.HandoffPoweroff
		if keep {
			cfg.Disk.RootPartitionSize = config.RootPartitionKeep
		}
		o, _ := newTestOrchestrator(t, cfg, &recordingProvider{})
		fos := newFakeOS(t)
		var order []string
		o.rereadPartitions = func(dev string) error { order = append(order, "reread "+dev); return nil }
		o.newInstalledOS = func(string) installedOS { order = append(order, "mount"); return fos }
		o.writeImage = func(context.Context, image.Options) (image.Result, error) { return image.Result{}, nil }
		if err := o.Provision(context.Background()); err != nil {
			t.Fatal(err)
		}
		want := []string{"mount"}
		if keep {
			want = []string{"reread " + o.SelectedDisk().Path, "mount"}
		}
		if !slices.Equal(order, want) {
			t.Errorf("keep=%v: %v, want %v", keep, order, want)
		}
	}
}
