package osimage

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

const sumA = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

func TestParseProof(t *testing.T) {
	tests := []struct {
		name    string
		console string
		want    map[string]string
	}{
		{"empty", "", map[string]string{}},
		{"no proof", "Booting Linux\nlogin:\n", map[string]string{}},
		{
			"full boot",
			"[  OK  ] Reached target multi-user.target\r\n" +
				"BOOTY-PROOF hostname=node-1\r\n" +
				"BOOTY-PROOF resolv=10.0.2.3,1.1.1.1\n" +
				"BOOTY-PROOF cmdline=BOOT_IMAGE=/boot/vmlinuz root=UUID=x ro console=ttyS0,115200\n" +
				"BOOTY-PROOF kubelet=[Service]; Environment=\"KUBELET_EXTRA_ARGS=--node-ip=10.0.0.1\"\n" +
				"BOOTY-PROOF file /etc/a sha256=" + sumA + "\n" +
				"BOOTY-PROOF marker=post-provision ran\n" +
				"BOOTY-PROOF efi-current=Boot0003\n" +
				"BOOTY-PROOF done\n" +
				"reboot: Power down\n",
			map[string]string{
				"hostname":    "node-1",
				"resolv":      "10.0.2.3,1.1.1.1",
				"cmdline":     "BOOT_IMAGE=/boot/vmlinuz root=UUID=x ro console=ttyS0,115200",
				"kubelet":     "[Service]; Environment=\"KUBELET_EXTRA_ARGS=--node-ip=10.0.0.1\"",
				"marker":      "post-provision ran",
				"efi-current": "Boot0003",
				"done":        "",
			},
		},
		{"empty values", "BOOTY-PROOF resolv=\nBOOTY-PROOF kubelet=\n", map[string]string{"resolv": "", "kubelet": ""}},
		{"kernel message before the prefix", "[   12.3] random: crng initBOOTY-PROOF hostname=h\n", map[string]string{"hostname": "h"}},
		{"later line wins", "BOOTY-PROOF hostname=a\nBOOTY-PROOF hostname=b\n", map[string]string{"hostname": "b"}},
		{"not a key", "BOOTY-PROOF some words=x\nBOOTY-PROOF =x\nBOOTY-PROOFhostname=y\n", map[string]string{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ParseProof(tt.console); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("ParseProof() = %#v, want %#v", got, tt.want)
			}
		})
	}
}

func TestProofFiles(t *testing.T) {
	tests := []struct {
		name    string
		console string
		want    []ProofFile
	}{
		{"none", "BOOTY-PROOF hostname=a\n", nil},
		{
			"present, missing, spaces, upper case",
			"BOOTY-PROOF file /etc/a sha256=" + sumA + "\r\n" +
				"BOOTY-PROOF file /etc/gone missing\n" +
				"BOOTY-PROOF file /etc/with space sha256=" + strings.ToUpper(sumA) + "\n",
			[]ProofFile{
				{Path: "/etc/a", SHA256: sumA},
				{Path: "/etc/gone", Missing: true},
				{Path: "/etc/with space", SHA256: sumA},
			},
		},
		{
			"malformed",
			"BOOTY-PROOF file /etc/a sha256=abc\nBOOTY-PROOF file sha256=" + sumA + "\nBOOTY-PROOF file  missing\nBOOTY-PROOF file /x\n",
			nil,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ProofFiles(tt.console); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("ProofFiles() = %#v, want %#v", got, tt.want)
			}
		})
	}
}

func TestProofDoneRE(t *testing.T) {
	for line, want := range map[string]bool{
		"BOOTY-PROOF done":       true,
		"xxBOOTY-PROOF done\r":   true,
		"BOOTY-PROOF donefoo":    false,
		"BOOTY-PROOF hostname=x": false,
	} {
		if got := ProofDoneRE.MatchString(line); got != want {
			t.Errorf("ProofDoneRE.MatchString(%q) = %v, want %v", line, got, want)
		}
	}
}

const layoutEnv = `# comment
SUITE=bookworm
KERNEL_VERSION=6.1.0-50-amd64
HOSTNAME=booty-debian
DISK_GUID=g
DISK_BYTES=1048576000
ESP_PARTITION=1
ESP_PART_GUID=e
ESP_FS_UUID=B007-1DEB
ESP_START_BYTES=1048576
ESP_SIZE_BYTES=134217728
ROOT_PARTITION=2
ROOT_PART_GUID=r
ROOT_FS_UUID=u
ROOT_FS_LABEL=root
ROOT_START_BYTES=135266304
ROOT_SIZE_BYTES=900000000
EFI_LOADER=/EFI/debian/grubx64.efi
EFI_REMOVABLE_LOADER=/EFI/BOOT/BOOTX64.EFI
GRUB_CFG=/boot/grub/grub.cfg
`

func TestReadLayout(t *testing.T) {
	tests := []struct {
		name    string
		content string
		wantErr string
	}{
		{"good", layoutEnv, ""},
		{"not key=value", layoutEnv + "garbage\n", "not KEY=VALUE"},
		{"bad size", strings.Replace(layoutEnv, "DISK_BYTES=1048576000", "DISK_BYTES=lots", 1), "DISK_BYTES"},
		{"missing partition", strings.Replace(layoutEnv, "ROOT_PARTITION=2\n", "", 1), "ROOT_PARTITION"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, LayoutFile), []byte(tt.content), 0o644); err != nil {
				t.Fatal(err)
			}
			l, err := ReadLayout(dir)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ReadLayout() error = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if l.KernelVersion != "6.1.0-50-amd64" || l.ESPPartition != 1 || l.RootPartition != 2 ||
				l.RootStart != 135266304 || l.ESPFSUUID != "B007-1DEB" || l.DiskBytes != 1048576000 ||
				l.GrubCfg != "/boot/grub/grub.cfg" || l.Raw["SUITE"] != "bookworm" {
				t.Errorf("ReadLayout() = %+v", l)
			}
		})
	}
	if _, err := ReadLayout(t.TempDir()); err == nil {
		t.Error("ReadLayout of an empty dir: no error")
	}
}

// fakeScript writes a build script standing in for hack/mkdebianimage.sh.
func fakeScript(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "mk.sh")
	if err := os.WriteFile(p, []byte("set -e\nout=$1\n"+body+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestBuild(t *testing.T) {
	all := `mkdir -p "$out"; for f in debian.img debian.img.zst debian.img.sha256 debian.img.zst.sha256 SHA256SUMS layout.env; do echo x >"$out/$f"; done; echo built`
	tests := []struct {
		name    string
		body    string
		wantErr error
		errText string
	}{
		{"complete", all, nil, ""},
		{"script fails", "echo broken >&2; exit 3", nil, "exit status 3"},
		{"incomplete", all + `; : >"$out/layout.env"`, ErrIncomplete, "layout.env"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "debian")
			var log strings.Builder
			err := Build(context.Background(), fakeScript(t, tt.body), out, &log)
			if tt.errText == "" {
				if err != nil {
					t.Fatalf("Build() = %v, log %q", err, log.String())
				}
				if !strings.Contains(log.String(), "built") {
					t.Errorf("log %q lacks the script's output", log.String())
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.errText) {
				t.Fatalf("Build() = %v, want an error containing %q", err, tt.errText)
			}
			if tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
				t.Errorf("Build() = %v, want errors.Is %v", err, tt.wantErr)
			}
		})
	}
}

func TestBuildTimeout(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := Build(ctx, fakeScript(t, "sleep 30"), t.TempDir(), &strings.Builder{})
	if err == nil {
		t.Fatal("Build() of a script that outlives its context: no error")
	}
	if d := time.Since(start); d > 15*time.Second {
		t.Errorf("Build() returned after %s", d)
	}
}

func TestEnsureUsesDirEnv(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{Image, Compressed, ImageSum, CompressedSum, Checksums, LayoutFile} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv(DirEnv, dir)
	ensureMu.Lock()
	ensureDir = ""
	ensureMu.Unlock()
	t.Cleanup(func() { ensureMu.Lock(); ensureDir = ""; ensureMu.Unlock() })
	if got := Ensure(t); got != dir {
		t.Errorf("Ensure() = %q, want %q", got, dir)
	}
}

func TestDefaultDir(t *testing.T) {
	t.Setenv(CacheEnv, "/c")
	if got := DefaultDir(); got != "/c/debian" {
		t.Errorf("DefaultDir() = %q", got)
	}
	t.Setenv(CacheEnv, "")
	if got := DefaultDir(); got != "/var/cache/booty/debian" {
		t.Errorf("DefaultDir() = %q", got)
	}
	if _, err := os.Stat(Script()); err != nil {
		t.Errorf("Script(): %v", err)
	}
}
