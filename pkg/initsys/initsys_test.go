package initsys

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/booty-dev/booty/pkg/initsys/kmod"
)

// recorder is a Syscalls fake that records calls instead of making them.
type recorder struct {
	mu       *sync.Mutex
	calls    []string
	mountErr map[string]error // by target suffix
	rebootErr,
	kexecErr error
	onInit func(name string)
}

func (r *recorder) sys(root string) *Syscalls {
	if r.mu == nil {
		r.mu = &sync.Mutex{}
	}
	return &Syscalls{
		Mount: func(source, target, fstype string, flags uintptr, data string) error {
			rel := strings.TrimPrefix(target, root)
			r.mu.Lock()
			defer r.mu.Unlock()
			r.calls = append(r.calls, fmt.Sprintf("mount %s %s", fstype, rel))
			return r.mountErr[rel]
		},
		Unmount: func(target string, flags int) error {
			r.calls = append(r.calls, "umount "+target)
			return nil
		},
		Sethostname: func(b []byte) error { r.calls = append(r.calls, "hostname "+string(b)); return nil },
		Release:     func() (string, error) { return "6.1.0-test", nil },
		Sync:        func() { r.calls = append(r.calls, "sync") },
		KexecFileLoad: func(k, i int, cmdline string, flags int) error {
			r.calls = append(r.calls, fmt.Sprintf("kexec_file_load initrd=%v cmdline=%q flags=%d", i >= 0, cmdline, flags))
			return r.kexecErr
		},
		Reboot: func(cmd int) error {
			r.calls = append(r.calls, fmt.Sprintf("reboot %#x", cmd))
			return r.rebootErr
		},
		Hold: func() { r.calls = append(r.calls, "hold") },
		InitModule: func(path, params string) error {
			name := kmod.Name(path)
			r.mu.Lock()
			r.calls = append(r.calls, "load "+name)
			r.mu.Unlock()
			if r.onInit != nil {
				r.onInit(name)
			}
			return nil
		},
	}
}

func writeFiles(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for p, content := range files {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func (r *recorder) snapshot() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.calls)
}

// fakeMachine lays out /proc, /sys, /dev and /lib/modules of a small VM
// with a virtio disk behind virtio_pci.
func fakeMachine(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	files := map[string]string{
		"proc/cmdline": "BOOT_IMAGE=/vmlinuz console=ttyS0,115200 console=tty0 panic=-1\n",
		"proc/modules": "",
		"dev/ttyS0":    "",
		"dev/tty0":     "",
		"sys/devices/pci0000:00/0000:00:04.0/modalias": "pci:v00001AF4d00001001sv00001AF4sd00000002bc01sc00i00\n",
		"sys/devices/pci0000:00/0000:00:02.0/modalias": "pci:v00001234d00001111sv00001AF4sd00001100bc03sc00i00\n",
		"sys/devices/platform/serial8250/modalias":     "platform:serial8250\n",
		"sys/devices/pci0000:00/0000:00:04.0/vendor":   "0x1af4\n",
		"sys/firmware/efi/runtime":                     "",
		"etc/booty/modules-load":                       "# filesystems\next4\nnosuch # not in this kernel\n",
	}
	for _, f := range []string{"modules.dep", "modules.alias", "modules.softdep", "modules.builtin"} {
		b, err := os.ReadFile(filepath.Join("kmod", "testdata", f))
		if err != nil {
			t.Fatal(err)
		}
		files["lib/modules/6.1.0-test/"+f] = string(b)
	}
	writeFiles(t, root, files)
	busLink(t, root, "pci", "0000:00:04.0", "devices/pci0000:00/0000:00:04.0")
	busLink(t, root, "pci", "0000:00:02.0", "devices/pci0000:00/0000:00:02.0")
	busLink(t, root, "platform", "serial8250", "devices/platform/serial8250")
	return root
}

// busLink links sys/bus/BUS/devices/NAME to sys/TARGET, as the kernel does.
func busLink(t *testing.T, root, bus, name, target string) {
	t.Helper()
	dir := filepath.Join(root, "sys/bus", bus, "devices")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../../../"+target, filepath.Join(dir, name)); err != nil {
		t.Fatal(err)
	}
}

func TestBringup(t *testing.T) {
	root := fakeMachine(t)
	rec := &recorder{}
	// Loading the virtio PCI driver makes the virtio device visible, as
	// the kernel does (its modalias, and its entry on the virtio bus);
	// coldplug must notice it and run another pass.
	rec.onInit = func(name string) {
		if name == "virtio_pci" {
			writeFiles(t, root, map[string]string{
				"sys/devices/pci0000:00/0000:00:04.0/virtio0/modalias": "virtio:d00000002v00001AF4\n",
			})
			busLink(t, root, "virtio", "virtio0", "devices/pci0000:00/0000:00:04.0/virtio0")
		}
	}
	s, err := Bringup(Options{Root: root, Sys: rec.sys(root), NoReaper: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Consoles.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := s.WaitColdplug(ctx); err != nil {
		t.Fatal(err)
	}
	calls := rec.snapshot()

	// Mounts and the hostname first, in table order; the efivarfs mount
	// (AfterModules) once the network drivers are in (none here).
	wantFirst := []string{
		"mount proc /proc", "mount sysfs /sys", "mount devtmpfs /dev", "mount devpts /dev/pts",
		"mount tmpfs /dev/shm", "mount tmpfs /run", "mount tmpfs /tmp", "mount securityfs /sys/kernel/security",
		"hostname booty",
	}
	if len(calls) < len(wantFirst) || !slices.Equal(calls[:len(wantFirst)], wantFirst) {
		t.Errorf("calls:\n got %q\nwant first %q", calls, wantFirst)
	}
	if !slices.Contains(calls, "mount efivarfs /sys/firmware/efi/efivars") {
		t.Errorf("calls %q lack the efivarfs mount", calls)
	}
	// The loads run in parallel: each module once, after its dependencies.
	// modules-load: ext4 with its deps and softdep pre crc32c; coldplug:
	// the PCI device's virtio_pci, then the virtio device it exposed.
	before := [][2]string{
		{"crc16", "ext4"}, {"mbcache", "ext4"}, {"jbd2", "ext4"}, {"crc32c_generic", "ext4"},
		{"virtio", "virtio_pci"}, {"virtio_ring", "virtio_pci"}, {"virtio_pci_modern_dev", "virtio_pci"},
		{"virtio_pci_legacy_dev", "virtio_pci"}, {"virtio_pci", "virtio_blk"},
	}
	for _, b := range before {
		i, j := slices.Index(calls, "load "+b[0]), slices.Index(calls, "load "+b[1])
		if i < 0 || j < 0 || i > j {
			t.Errorf("want load %s before load %s: calls %q", b[0], b[1], calls)
		}
	}
	loaded, lerr := s.LoadedModules()
	slices.Sort(loaded)
	if want := []string{"crc16", "crc32c_generic", "crc32c_intel", "ext4", "jbd2", "mbcache",
		"virtio", "virtio_blk", "virtio_pci", "virtio_pci_legacy_dev", "virtio_pci_modern_dev", "virtio_ring"}; !slices.Equal(loaded, want) {
		t.Errorf("LoadedModules = %v, want %v", loaded, want)
	}
	if !errors.Is(lerr, kmod.ErrNotFound) {
		t.Errorf("load errors = %v, want nosuch not found", lerr)
	}
	if s.Consoles.Primary != "tty0" || !slices.Equal(s.Consoles.Names, []string{"ttyS0", "tty0"}) {
		t.Errorf("consoles %v primary %s", s.Consoles.Names, s.Consoles.Primary)
	}
	for _, n := range []string{"ttyS0", "tty0"} {
		b, _ := os.ReadFile(filepath.Join(root, "dev", n))
		if !strings.Contains(string(b), "bringup done") || !strings.Contains(string(b), "nosuch") {
			t.Errorf("console %s log lacks bringup done or the nosuch failure:\n%s", n, b)
		}
	}
	if v, _ := s.Cmdline.Get("panic"); v != "-1" {
		t.Errorf("cmdline panic = %q", v)
	}
}

func TestBringupFatalMount(t *testing.T) {
	root := fakeMachine(t)
	rec := &recorder{mountErr: map[string]error{"/sys": unix.EPERM}}
	_, err := Bringup(Options{Root: root, Sys: rec.sys(root), NoReaper: true, Log: slog.New(slog.NewTextHandler(t.Output(), nil))})
	if !errors.Is(err, unix.EPERM) || !strings.Contains(err.Error(), "sys") {
		t.Fatalf("err = %v, want EPERM on /sys", err)
	}
	if slices.Contains(rec.calls, "mount devtmpfs /dev") {
		t.Error("bringup went on after a fatal mount failed")
	}
}

func TestBringupBestEffortMount(t *testing.T) {
	root := fakeMachine(t)
	os.RemoveAll(filepath.Join(root, "sys/firmware/efi"))
	rec := &recorder{mountErr: map[string]error{"/sys/kernel/security": unix.ENODEV, "/proc": unix.EBUSY}}
	s, err := Bringup(Options{Root: root, Sys: rec.sys(root), NoReaper: true, NoColdplug: true, Log: slog.New(slog.NewTextHandler(t.Output(), nil))})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]MountResult{}
	for _, r := range s.Mounts {
		got[r.Mount.Target] = r
	}
	if r := got["/sys/kernel/security"]; !errors.Is(r.Err, unix.ENODEV) {
		t.Errorf("securityfs result %+v, want ENODEV", r)
	}
	if r := got["/proc"]; !r.Already || r.Err != nil {
		t.Errorf("/proc EBUSY result %+v, want already mounted", r)
	}
	if r := got["/sys/firmware/efi/efivars"]; !r.Skipped {
		t.Errorf("efivarfs without /sys/firmware/efi: %+v, want skipped", r)
	}
	if slices.Contains(rec.calls, "load ext4") {
		t.Error("modules loaded with NoColdplug")
	}
}

func TestHandoff(t *testing.T) {
	dir := t.TempDir()
	kernel := filepath.Join(dir, "vmlinuz")
	initrd := filepath.Join(dir, "initrd")
	writeFiles(t, dir, map[string]string{"vmlinuz": "k", "initrd": "i",
		"proc/self/mountinfo": `22 1 0:21 / /proc rw,nosuid - proc proc rw
31 1 253:1 / /mnt/target rw,relatime - ext4 /dev/vda1 rw
32 31 253:2 / /mnt/target/boot\040efi rw - vfat /dev/vda2 rw
`})
	tests := []struct {
		name    string
		h       Handoff
		rec     recorder
		want    []string
		wantErr bool
	}{
		{"none", Handoff{Action: None}, recorder{}, nil, false},
		{"kexec", Handoff{Action: Kexec, Kernel: kernel, Initrd: initrd, Cmdline: "root=/dev/vda1 ro"}, recorder{},
			[]string{`kexec_file_load initrd=true cmdline="root=/dev/vda1 ro" flags=0`, "sync",
				"umount /mnt/target/boot efi", "umount /mnt/target", "sync", "reboot 0x45584543"}, false},
		{"kexec without initrd", Handoff{Action: Kexec, Kernel: kernel}, recorder{},
			[]string{`kexec_file_load initrd=false cmdline="" flags=4`, "sync",
				"umount /mnt/target/boot efi", "umount /mnt/target", "sync", "reboot 0x45584543"}, false},
		{"kexec load fails", Handoff{Action: Kexec, Kernel: kernel}, recorder{kexecErr: unix.ENOEXEC},
			[]string{`kexec_file_load initrd=false cmdline="" flags=4`}, true},
		{"kexec missing kernel", Handoff{Action: Kexec, Kernel: filepath.Join(dir, "nope")}, recorder{}, nil, true},
		{"reboot", Handoff{Action: Reboot}, recorder{},
			[]string{"sync", "umount /mnt/target/boot efi", "umount /mnt/target", "sync", "reboot 0x1234567"}, false},
		{"poweroff", Handoff{Action: Poweroff}, recorder{},
			[]string{"sync", "umount /mnt/target/boot efi", "umount /mnt/target", "sync", "reboot 0x4321fedc"}, false},
		{"reboot fails", Handoff{Action: Reboot}, recorder{rebootErr: unix.EPERM},
			[]string{"sync", "umount /mnt/target/boot efi", "umount /mnt/target", "sync", "reboot 0x1234567"}, true},
		{"hold", Handoff{Action: Hold}, recorder{}, []string{"hold"}, false},
		{"unknown", Handoff{Action: Action(42)}, recorder{}, nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := tt.rec
			s := &System{Root: dir, Sys: *rec.sys(dir), Log: slog.New(slog.NewTextHandler(t.Output(), nil))}
			err := s.Handoff(tt.h)
			if (err != nil) != tt.wantErr {
				t.Errorf("err = %v, want error %v", err, tt.wantErr)
			}
			if !slices.Equal(rec.calls, tt.want) {
				t.Errorf("calls:\n got %q\nwant %q", rec.calls, tt.want)
			}
		})
	}
}

func TestScanDevices(t *testing.T) {
	root := fakeMachine(t)
	// A bus device with its modalias in uevent only (CPUs), one without
	// any, and a second link to a device already seen.
	writeFiles(t, root, map[string]string{
		"sys/devices/system/cpu/cpu0/uevent": "DRIVER=processor\nMODALIAS=cpu:type:x86,ven0000fam0006mod003F:feature:,0000\n",
		"sys/devices/virtual/nomod/uevent":   "DEVTYPE=none\n",
	})
	busLink(t, root, "cpu", "cpu0", "devices/system/cpu/cpu0")
	busLink(t, root, "xen", "nomod", "devices/virtual/nomod")
	busLink(t, root, "pci", "dup", "devices/platform/serial8250")
	got, err := ScanDevices(filepath.Join(root, "sys"))
	if err != nil {
		t.Fatal(err)
	}
	want := []Device{
		{Path: "/devices/pci0000:00/0000:00:02.0", Modalias: "pci:v00001234d00001111sv00001AF4sd00001100bc03sc00i00"},
		{Path: "/devices/pci0000:00/0000:00:04.0", Modalias: "pci:v00001AF4d00001001sv00001AF4sd00000002bc01sc00i00"},
		{Path: "/devices/platform/serial8250", Modalias: "platform:serial8250"},
		{Path: "/devices/system/cpu/cpu0", Modalias: "cpu:type:x86,ven0000fam0006mod003F:feature:,0000"},
	}
	if !slices.Equal(got, want) {
		t.Errorf("ScanDevices =\n %+v\nwant\n %+v", got, want)
	}
	if _, err := ScanDevices(t.TempDir()); err == nil {
		t.Error("scan without a bus dir succeeded")
	}
}
