package provider

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/booty-dev/booty/pkg/config"
)

const validYAML = `apiVersion: booty.dev/v1
hostname: from-drive
image:
  url: http://192.0.2.1/os.img
  checksum: sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef
disk:
  device: /dev/sda
`

// fakeBlock lays out sysRoot/class/block/NAME/size and devRoot/NAME (a copy
// of img, or an empty file) for each device.
type fakeBlock struct {
	sysRoot, devRoot, mountDir string
}

func newFakeBlock(t *testing.T) *fakeBlock {
	d := t.TempDir()
	fb := &fakeBlock{filepath.Join(d, "sys"), filepath.Join(d, "dev"), filepath.Join(d, "mnt")}
	for _, p := range []string{filepath.Join(fb.sysRoot, "class", "block"), fb.devRoot} {
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return fb
}

func (fb *fakeBlock) add(t *testing.T, name, img string, size string) {
	t.Helper()
	dir := filepath.Join(fb.sysRoot, "class", "block", name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "size"), []byte(size+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var data []byte
	if img != "" {
		var err error
		if data, err = os.ReadFile(img); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(fb.devRoot, name), data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// fakeMount "mounts" a device by copying the directory tree given for it
// into the target, and records every call.
type fakeMount struct {
	trees   map[string]string // device path -> directory with its files
	fail    map[string]bool   // fstype -> mount fails
	calls   []string
	mounted string
}

func (m *fakeMount) mount(source, target, fstype string, flags uintptr, data string) error {
	m.calls = append(m.calls, "mount "+filepath.Base(source)+" "+fstype)
	if flags&unix.MS_RDONLY == 0 {
		return errors.New("test: mount must be read-only")
	}
	if m.fail[fstype] {
		return unix.EINVAL
	}
	tree, ok := m.trees[source]
	if !ok {
		return unix.ENODEV
	}
	if err := os.CopyFS(target, os.DirFS(tree)); err != nil {
		return err
	}
	m.mounted = target
	return nil
}

func (m *fakeMount) unmount(target string, flags int) error {
	m.calls = append(m.calls, "umount")
	if m.mounted != target {
		return unix.EINVAL
	}
	entries, _ := os.ReadDir(target)
	for _, e := range entries {
		os.RemoveAll(filepath.Join(target, e.Name()))
	}
	m.mounted = ""
	return nil
}

func tree(t *testing.T, files map[string]string) string {
	t.Helper()
	d := t.TempDir()
	for name, content := range files {
		p := filepath.Join(d, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return d
}

func TestConfigDriveProvider(t *testing.T) {
	vfatBooty := mkfsImage(t, 1440<<10, "mkfs.vfat", "-n", "BOOTY")
	ext4Config2 := mkfsImage(t, 8<<20, "mkfs.ext4", "-q", "-F", "-L", "config-2")
	isoConfig2 := isoImage(t, "config-2", true, map[string]string{"x": "y"})
	ext4Other := mkfsImage(t, 8<<20, "mkfs.ext4", "-q", "-F", "-L", "data")

	type dev struct{ name, img, size string }
	tests := []struct {
		name      string
		devs      []dev
		trees     map[string]map[string]string // device name -> files
		fail      map[string]bool
		wantHost  string
		wantErr   string // substring; "" means success
		noConfig  bool   // want config.ErrNoConfig
		wantCalls []string
	}{
		{
			name:     "no labelled device",
			devs:     []dev{{"sda", ext4Other, "16384"}, {"sdb", "", "16384"}},
			noConfig: true, wantErr: "no block device labelled BOOTY or config-2",
		},
		{
			name:      "BOOTY vfat with booty.yaml",
			devs:      []dev{{"sda", ext4Other, "16384"}, {"sdb", vfatBooty, "2880"}},
			trees:     map[string]map[string]string{"sdb": {"booty.yaml": validYAML}},
			wantHost:  "from-drive",
			wantCalls: []string{"mount sdb vfat", "umount"},
		},
		{
			name:      "booty.json",
			devs:      []dev{{"sdb", vfatBooty, "2880"}},
			trees:     map[string]map[string]string{"sdb": {"booty.json": `{"apiVersion":"booty.dev/v1","mode":"deprovision","hostname":"json"}`}},
			wantHost:  "json",
			wantCalls: []string{"mount sdb vfat", "umount"},
		},
		{
			name:      "config-2 iso with booty user_data",
			devs:      []dev{{"sr0", isoConfig2, "8192"}},
			trees:     map[string]map[string]string{"sr0": {"openstack/latest/user_data": validYAML}},
			wantHost:  "from-drive",
			wantCalls: []string{"mount sr0 iso9660", "umount"},
		},
		{
			name:      "config-2 with cloud-init user_data is not ours",
			devs:      []dev{{"vdb", ext4Config2, "16384"}},
			trees:     map[string]map[string]string{"vdb": {"openstack/latest/user_data": "#cloud-config\npackages: [vim]\n"}},
			noConfig:  true,
			wantErr:   "labelled devices hold no",
			wantCalls: []string{"mount vdb ext4", "umount"},
		},
		{
			name: "first drive empty, second has config",
			devs: []dev{{"vdb", ext4Config2, "16384"}, {"vdc", vfatBooty, "2880"}},
			trees: map[string]map[string]string{
				"vdb": {"openstack/latest/meta_data.json": "{}"},
				"vdc": {"booty.yaml": validYAML},
			},
			wantHost:  "from-drive",
			wantCalls: []string{"mount vdb ext4", "umount", "mount vdc vfat", "umount"},
		},
		{
			name:      "bad booty.yaml names device and field",
			devs:      []dev{{"sdb", vfatBooty, "2880"}},
			trees:     map[string]map[string]string{"sdb": {"booty.yaml": "apiVersion: booty.dev/v1\nmode: provision\nimage: {urll: x}\n"}},
			wantErr:   "sdb: booty.yaml: image.urll: unknown field",
			wantCalls: []string{"mount sdb vfat", "umount"},
		},
		{
			name:      "empty CD drive and ram disks are skipped",
			devs:      []dev{{"sr0", isoConfig2, "0"}, {"ram0", vfatBooty, "2880"}},
			noConfig:  true,
			wantErr:   "no block device labelled",
			wantCalls: nil,
		},
		{
			name:      "detected type fails, next type mounts",
			devs:      []dev{{"sdb", vfatBooty, "2880"}},
			trees:     map[string]map[string]string{"sdb": {"booty.yaml": validYAML}},
			fail:      map[string]bool{"vfat": true},
			wantHost:  "from-drive",
			wantCalls: []string{"mount sdb vfat", "mount sdb iso9660", "umount"},
		},
		{
			name:      "no type mounts",
			devs:      []dev{{"sdb", vfatBooty, "2880"}},
			fail:      map[string]bool{"vfat": true, "iso9660": true, "ext4": true},
			wantErr:   "mount config drive",
			wantCalls: []string{"mount sdb vfat", "mount sdb iso9660", "mount sdb ext4"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fb := newFakeBlock(t)
			m := &fakeMount{trees: map[string]string{}, fail: tt.fail}
			for _, d := range tt.devs {
				fb.add(t, d.name, d.img, d.size)
				if files, ok := tt.trees[d.name]; ok {
					m.trees[filepath.Join(fb.devRoot, d.name)] = tree(t, files)
				}
			}
			p := &ConfigDriveProvider{SysRoot: fb.sysRoot, DevRoot: fb.devRoot, MountDir: fb.mountDir,
				Mount: m.mount, Unmount: m.unmount, Log: testLogger(t)}
			cfg, err := p.Load(context.Background())
			if strings.Join(m.calls, ",") != strings.Join(tt.wantCalls, ",") {
				t.Errorf("calls = %q, want %q", m.calls, tt.wantCalls)
			}
			if m.mounted != "" {
				t.Error("left mounted")
			}
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want it to contain %q", err, tt.wantErr)
				}
				if errors.Is(err, config.ErrNoConfig) != tt.noConfig {
					t.Errorf("errors.Is(err, config.ErrNoConfig) = %v, want %v", !tt.noConfig, tt.noConfig)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if cfg.Hostname != tt.wantHost {
				t.Errorf("hostname = %q, want %q", cfg.Hostname, tt.wantHost)
			}
		})
	}
}

func TestConfigDriveNoSysfs(t *testing.T) {
	p := &ConfigDriveProvider{SysRoot: filepath.Join(t.TempDir(), "nope")}
	if _, err := p.Load(context.Background()); !errors.Is(err, config.ErrNoConfig) {
		t.Errorf("err = %v, want config.ErrNoConfig", err)
	}
}

// TestConfigDriveRealMount mounts a real ext4 image through a loop device
// with the default unix.Mount. It needs root and loop devices.
func TestConfigDriveRealMount(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("SKIPPED: needs root for loop devices and mount")
	}
	img := mkfsImage(t, 8<<20, "mkfs.ext4", "-q", "-F", "-L", "BOOTY")
	out, err := exec.Command("losetup", "-f", "--show", img).Output()
	if err != nil {
		t.Skipf("SKIPPED: losetup: %v", err)
	}
	loop := strings.TrimSpace(string(out))
	t.Cleanup(func() { exec.Command("losetup", "-d", loop).Run() })

	// Put booty.yaml on it through a read-write mount.
	rw := t.TempDir()
	if err := unix.Mount(loop, rw, "ext4", 0, ""); err != nil {
		t.Skipf("SKIPPED: mount ext4: %v", err)
	}
	werr := os.WriteFile(filepath.Join(rw, "booty.yaml"), []byte(validYAML), 0o644)
	if err := unix.Unmount(rw, 0); err != nil {
		t.Fatal(err)
	}
	if werr != nil {
		t.Fatal(werr)
	}

	fb := newFakeBlock(t)
	name := filepath.Base(loop)
	if err := os.MkdirAll(filepath.Join(fb.sysRoot, "class", "block", name), 0o755); err != nil {
		t.Fatal(err)
	}
	p := &ConfigDriveProvider{SysRoot: fb.sysRoot, DevRoot: "/dev", MountDir: fb.mountDir, Log: testLogger(t)}
	cfg, err := p.Load(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Hostname != "from-drive" {
		t.Errorf("hostname = %q", cfg.Hostname)
	}
	if _, err := os.Stat(filepath.Join(fb.mountDir, "booty.yaml")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("config drive still mounted at %s: %v", fb.mountDir, err)
	}
}
