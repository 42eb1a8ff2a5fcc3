package vm

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// pairs returns the values that follow every occurrence of flag in args.
func pairs(args []string, flag string) []string {
	var out []string
	for i := 0; i+1 < len(args); i++ {
		if args[i] == flag {
			out = append(out, args[i+1])
		}
	}
	return out
}

func TestArgs(t *testing.T) {
	tests := []struct {
		name    string
		cfg     Config
		accel   Accel
		vars    string
		want    map[string][]string // flag -> all its values, in order
		has     []string            // flags that must be present
		hasNot  []string            // flags that must be absent
		wantErr bool
	}{
		{
			name:  "defaults tcg",
			cfg:   Config{Kernel: "/k", Initrd: "/i", Append: "booty.url=http://10.0.2.2:8080"},
			accel: AccelTCG,
			want: map[string][]string{
				"-machine": {"q35"},
				"-m":       {"1024"},
				"-smp":     {"1"},
				"-accel":   {"tcg"},
				"-cpu":     {"max"},
				"-serial":  {"stdio"},
				"-display": {"none"},
				"-monitor": {"none"},
				"-kernel":  {"/k"},
				"-initrd":  {"/i"},
				"-append":  {"console=ttyS0,115200 panic=-1 booty.url=http://10.0.2.2:8080"},
			},
			has:    []string{"-no-reboot", "-nodefaults"},
			hasNot: []string{"-enable-kvm", "-nic", "-drive", "-device"},
		},
		{
			name:  "kvm, own console and panic, reboot allowed",
			cfg:   Config{Kernel: "/k", Append: "console=ttyS1 panic=5", Memory: 2048, CPUs: 2, AllowReboot: true},
			accel: AccelKVM,
			want: map[string][]string{
				"-cpu":    {"host"},
				"-m":      {"2048"},
				"-smp":    {"2"},
				"-append": {"console=ttyS1 panic=5"},
			},
			has:    []string{"-enable-kvm"},
			hasNot: []string{"-accel", "-no-reboot", "-initrd"},
		},
		{
			name: "disks of every interface",
			cfg: Config{Disks: []Disk{
				{Path: "/d/a.img"},
				{Path: "/d/b.qcow2", Format: "qcow2", Interface: "nvme"},
				{Path: "/d/c.img", Interface: "scsi", Serial: "SER1", ReadOnly: true},
				{Path: "/d/d.img", Interface: "scsi"},
				{Path: "/d/e.iso", CDROM: true},
				{Path: "/d/f.img", Interface: "usb", BootIndex: 1},
				{Path: "/d/g,h.img", Interface: "ide"},
			}},
			accel: AccelTCG,
			want: map[string][]string{
				"-drive": {
					"if=none,id=disk0,format=raw,file=/d/a.img,discard=unmap",
					"if=none,id=disk1,format=qcow2,file=/d/b.qcow2,discard=unmap",
					"if=none,id=disk2,format=raw,file=/d/c.img,readonly=on",
					"if=none,id=disk3,format=raw,file=/d/d.img,discard=unmap",
					"if=none,id=disk4,format=raw,file=/d/e.iso,media=cdrom,readonly=on",
					"if=none,id=disk5,format=raw,file=/d/f.img,discard=unmap",
					"if=none,id=disk6,format=raw,file=/d/g,,h.img,discard=unmap",
				},
				"-device": {
					"virtio-blk-pci,drive=disk0",
					"nvme,drive=disk1,serial=booty-nvme-1",
					"virtio-scsi-pci,id=scsi0",
					"scsi-hd,bus=scsi0.0,drive=disk2,serial=SER1",
					"scsi-hd,bus=scsi0.0,drive=disk3",
					"ide-cd,bus=ide.0,drive=disk4",
					"qemu-xhci,id=xhci",
					"usb-storage,bus=xhci.0,removable=on,drive=disk5,bootindex=1",
					"ide-hd,bus=ide.1,drive=disk6",
				},
			},
			hasNot: []string{"-kernel", "-append"},
		},
		{
			name: "ide on pc",
			cfg: Config{Machine: "pc", Disks: []Disk{
				{Path: "/a", Interface: "ide"}, {Path: "/b", Interface: "ide"}, {Path: "/c", CDROM: true},
			}},
			accel: AccelTCG,
			want: map[string][]string{
				"-device": {"ide-hd,bus=ide.0,unit=0,drive=disk0", "ide-hd,bus=ide.0,unit=1,drive=disk1", "ide-cd,bus=ide.1,unit=0,drive=disk2"},
			},
		},
		{
			name:  "blkdebug",
			cfg:   Config{Disks: []Disk{{Path: "/d/a.img", BlkDebugConfig: "/d/err.conf", Serial: "BAD"}}},
			accel: AccelTCG,
			want: map[string][]string{
				"-drive":  {"if=none,id=disk0,driver=raw,file.driver=blkdebug,file.config=/d/err.conf,file.image.driver=file,file.image.filename=/d/a.img,discard=unmap"},
				"-device": {"virtio-blk-pci,drive=disk0,serial=BAD"},
			},
		},
		{
			name:  "uefi",
			cfg:   Config{UEFI: true, OVMFCode: "/fw/CODE.fd"},
			accel: AccelTCG,
			vars:  "/state/VARS.fd",
			want: map[string][]string{
				"-drive": {
					"if=pflash,format=raw,unit=0,readonly=on,file=/fw/CODE.fd",
					"if=pflash,format=raw,unit=1,file=/state/VARS.fd",
				},
			},
		},
		{
			name:  "net and extra args",
			cfg:   Config{Net: true, NetOptions: "tftp=/srv,bootfile=ipxe.efi", ExtraArgs: []string{"-boot", "n"}},
			accel: AccelTCG,
			want: map[string][]string{
				"-nic":  {"user,model=virtio-net-pci,mac=52:54:00:12:34:56,tftp=/srv,bootfile=ipxe.efi"},
				"-boot": {"n"},
			},
		},
		{name: "uefi without vars", cfg: Config{UEFI: true}, accel: AccelTCG, wantErr: true},
		{name: "auto accel unresolved", cfg: Config{}, accel: AccelAuto, wantErr: true},
		{name: "initrd without kernel", cfg: Config{Initrd: "/i"}, accel: AccelTCG, wantErr: true},
		{name: "bad format", cfg: Config{Disks: []Disk{{Path: "/a", Format: "vmdk"}}}, accel: AccelTCG, wantErr: true},
		{name: "bad interface", cfg: Config{Disks: []Disk{{Path: "/a", Interface: "floppy"}}}, accel: AccelTCG, wantErr: true},
		{name: "virtio cdrom", cfg: Config{Disks: []Disk{{Path: "/a", Interface: "virtio", CDROM: true}}}, accel: AccelTCG, wantErr: true},
		{name: "read-only ide disk", cfg: Config{Disks: []Disk{{Path: "/a", Interface: "ide", ReadOnly: true}}}, accel: AccelTCG, wantErr: true},
		{name: "seven ide on q35", cfg: Config{Disks: slices.Repeat([]Disk{{Path: "/a", Interface: "ide"}}, 7)}, accel: AccelTCG, wantErr: true},
		{name: "disk without path", cfg: Config{Disks: []Disk{{}}}, accel: AccelTCG, wantErr: true},
		{name: "serial with comma", cfg: Config{Disks: []Disk{{Path: "/a", Serial: "a,b"}}}, accel: AccelTCG, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args, err := tt.cfg.withDefaults().args(tt.accel, tt.vars)
			if tt.wantErr {
				if !errors.Is(err, ErrBadConfig) {
					t.Fatalf("args() error = %v, want ErrBadConfig", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("args(): %v", err)
			}
			if args[0] != DefaultQEMU {
				t.Errorf("args[0] = %q, want %q", args[0], DefaultQEMU)
			}
			// The RNG device is in every command line (TestArgsRNG checks
			// it); the table is about everything else.
			args = withoutRNG(t, args)
			for flag, want := range tt.want {
				if got := pairs(args, flag); !slices.Equal(got, want) {
					t.Errorf("%s values:\n got %q\nwant %q", flag, got, want)
				}
			}
			for _, f := range tt.has {
				if !slices.Contains(args, f) {
					t.Errorf("args lack %s: %q", f, args)
				}
			}
			for _, f := range tt.hasNot {
				if slices.Contains(args, f) {
					t.Errorf("args have %s: %q", f, args)
				}
			}
		})
	}
}

func TestShellQuote(t *testing.T) {
	got := shellQuote([]string{"qemu", "-append", "console=ttyS0 a='b'", "", "file=/a,b"})
	want := `qemu -append 'console=ttyS0 a='\''b'\''' '' file=/a,b`
	if got != want {
		t.Errorf("shellQuote = %s, want %s", got, want)
	}
}

func TestPrepareVars(t *testing.T) {
	dir := t.TempDir()
	tmpl := filepath.Join(dir, "TEMPLATE.fd")
	if err := os.WriteFile(tmpl, []byte("template"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := Config{OVMFVarsTemplate: tmpl, StateDir: filepath.Join(dir, "state")}

	// Empty OVMFVars: a fresh copy in StateDir.
	p, err := prepareVars(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(dir, "state", "OVMF_VARS.fd"); p != want {
		t.Errorf("vars path = %s, want %s", p, want)
	}
	if b, _ := os.ReadFile(p); string(b) != "template" {
		t.Errorf("vars content = %q, want the template", b)
	}

	// An existing store is reused as it is: a second boot keeps its entries.
	if err := os.WriteFile(p, []byte("boot entries"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg.OVMFVars = p
	p2, err := prepareVars(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(p2); p2 != p || string(b) != "boot entries" {
		t.Errorf("reused vars = %s %q, want %s %q", p2, b, p, "boot entries")
	}

	// A named store that does not exist yet gets the template.
	cfg.OVMFVars = filepath.Join(dir, "other", "VARS.fd")
	p3, err := prepareVars(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(p3); p3 != cfg.OVMFVars || string(b) != "template" {
		t.Errorf("new named vars = %s %q", p3, b)
	}

	cfg.OVMFVars, cfg.OVMFVarsTemplate = "", filepath.Join(dir, "missing.fd")
	if _, err := prepareVars(cfg); err == nil || !strings.Contains(err.Error(), "ovmf vars template") {
		t.Errorf("missing template: err = %v", err)
	}
}

// withoutRNG removes the default "-device virtio-rng-pci" pair, failing the
// test when it is not there.
func withoutRNG(t *testing.T, args []string) []string {
	t.Helper()
	for i := 0; i+1 < len(args); i++ {
		if args[i] == "-device" && args[i+1] == "virtio-rng-pci" {
			return append(append([]string{}, args[:i]...), args[i+2:]...)
		}
	}
	t.Fatalf("args lack -device virtio-rng-pci: %q", args)
	return nil
}

func TestArgsRNG(t *testing.T) {
	args, err := Config{}.withDefaults().args(AccelTCG, "")
	if err != nil {
		t.Fatal(err)
	}
	if got := pairs(args, "-device"); !slices.Equal(got, []string{"virtio-rng-pci"}) {
		t.Fatalf("-device values = %q, want the RNG", got)
	}
	args, err = Config{NoRNG: true}.withDefaults().args(AccelTCG, "")
	if err != nil {
		t.Fatal(err)
	}
	if got := pairs(args, "-device"); len(got) != 0 {
		t.Fatalf("NoRNG: -device values = %q", got)
	}
}

func TestArgsCPU(t *testing.T) {
	for _, tt := range []struct {
		accel Accel
		cpu   string
		want  []string
	}{
		{AccelTCG, "", []string{"max"}},
		{AccelKVM, "", []string{"host"}},
		{AccelTCG, "qemu64", []string{"qemu64"}},
		{AccelKVM, "qemu64", []string{"qemu64"}},
	} {
		args, err := Config{CPU: tt.cpu}.withDefaults().args(tt.accel, "")
		if err != nil {
			t.Fatal(err)
		}
		if got := pairs(args, "-cpu"); !slices.Equal(got, tt.want) {
			t.Errorf("%s with CPU %q: -cpu values = %q, want %q", tt.accel, tt.cpu, got, tt.want)
		}
	}
	if _, err := (Config{CPU: "qemu64 -x"}).withDefaults().args(AccelTCG, ""); !errors.Is(err, ErrBadConfig) {
		t.Errorf("cpu with a space: err = %v, want ErrBadConfig", err)
	}
}
