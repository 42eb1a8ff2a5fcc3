package harness

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/booty-dev/booty/pkg/api"
	"github.com/booty-dev/booty/pkg/config"
	"github.com/booty-dev/booty/test/vm"
)

const (
	zstSum = "1111111111111111111111111111111111111111111111111111111111111111"
	rawSum = "2222222222222222222222222222222222222222222222222222222222222222"
)

// filesDir makes a demo image dir: small demo.img and demo.img.zst
// stand-ins and a SHA256SUMS listing them (the sums are made up: nothing
// here checks them).
func filesDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	files := map[string]string{
		DemoImage:     "raw image",
		DemoImageZst:  "zst image",
		ChecksumsFile: rawSum + "  demo.img\n" + zstSum + " *demo.img.zst\nnot a line\n",
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// get fetches u from the lab's bootyd and returns the status and body.
func get(t *testing.T, u string) (int, string) {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

func TestLabServesDemoMachine(t *testing.T) {
	files := filesDir(t)
	var out bytes.Buffer
	lab := NewLabT(t, LabOptions{FilesDir: files, Output: &out})

	if !strings.HasPrefix(lab.GuestURL(), "http://10.0.2.2:") || lab.Port() == 0 ||
		lab.HostURL() != fmt.Sprintf("http://127.0.0.1:%d", lab.Port()) {
		t.Fatalf("urls: guest %s host %s", lab.GuestURL(), lab.HostURL())
	}
	m, err := lab.AddMachine(MachineSpec{})
	if err != nil {
		t.Fatal(err)
	}
	if m.MAC != DefaultMAC || filepath.Base(m.ConfigPath) != "52-54-00-12-34-56.yaml" {
		t.Errorf("machine %s config %s", m.MAC, m.ConfigPath)
	}

	// bootyd serves exactly the file AddMachine wrote, to its token only.
	if code, _ := get(t, lab.HostURL()+"/v1/machines/52:54:00:12:34:56/config"); code != http.StatusUnauthorized {
		t.Fatalf("GET config without the token = %d", code)
	}
	req, _ := http.NewRequest("GET", lab.HostURL()+"/v1/machines/52:54:00:12:34:56/config", nil)
	req.Header.Set("Authorization", "Bearer "+m.Token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	code, body := resp.StatusCode, string(b)
	file, err := os.ReadFile(m.ConfigPath)
	if err != nil {
		t.Fatal(err)
	}
	if code != http.StatusOK || body != string(file) {
		t.Fatalf("GET config = %d %q, file %q", code, body, file)
	}
	c, err := config.Parse([]byte(body))
	if err != nil {
		t.Fatalf("served config does not parse: %v\n%s", err, body)
	}
	want := &config.MachineConfig{
		APIVersion: config.APIVersion,
		Mode:       config.ModeProvision,
		Image: config.ImageSpec{
			URL:           lab.GuestURL() + "/files/demo.img.zst",
			Checksum:      "sha256:" + zstSum,
			ImageChecksum: "sha256:" + rawSum,
		},
		Disk:         config.DiskSpec{Device: "/dev/vda", RootPartitionSize: config.RootPartitionKeep},
		Handoff:      config.HandoffPoweroff,
		EFIBootEntry: new(bool),
		OnFailure:    config.FailureSpec{Action: config.FailurePoweroff, Delay: config.Duration{Duration: 5 * time.Second}},
		Server:       config.ServerSpec{URL: lab.GuestURL(), Token: m.Token},
	}
	gotJSON, _ := json.Marshal(c)
	wantJSON, _ := json.Marshal(want)
	if !bytes.Equal(gotJSON, wantJSON) {
		t.Errorf("served config:\n got %s\nwant %s", gotJSON, wantJSON)
	}
	if len(m.Token) != 32 {
		t.Errorf("token %q: want 32 random hex digits", m.Token)
	}

	// The lab's files are served to the guest URL's path.
	if code, body := get(t, lab.HostURL()+"/files/demo.img.zst"); code != http.StatusOK || body != "zst image" {
		t.Errorf("GET image = %d %q", code, body)
	}

	// A second machine gets another token; the same MAC twice is refused.
	m2, err := lab.AddMachine(MachineSpec{MAC: "52-54-00-AA-BB-CC"})
	if err != nil {
		t.Fatal(err)
	}
	if m2.MAC != "52:54:00:aa:bb:cc" || m2.Token == m.Token {
		t.Errorf("second machine %s token equal to first: %v", m2.MAC, m2.Token == m.Token)
	}
	if _, err := lab.AddMachine(MachineSpec{MAC: "52:54:00:12:34:56"}); err == nil {
		t.Error("adding the same MAC twice: no error")
	}
	if _, err := lab.AddMachine(MachineSpec{MAC: "not-a-mac"}); err == nil {
		t.Error("adding a malformed MAC: no error")
	}

	// A report with the machine's token is accepted and reaches Output.
	report(t, lab, m, api.StatusReport{Step: "select-disk", Index: 1, Total: 3, State: api.StateStarted})
	if st, ok := m.State(); !ok || st.State != "running" {
		t.Errorf("state after report = %+v", st)
	}
	if !strings.Contains(out.String(), "[1/3 select-disk] started") {
		t.Errorf("bootyd output lacks the step line:\n%s", out.String())
	}
	if strings.Contains(out.String(), m.Token) {
		t.Error("bootyd output shows the token")
	}
}

// report POSTs r for m with its token and fails the test unless bootyd
// answers 200.
func report(t *testing.T, lab *Lab, m *Machine, r api.StatusReport) {
	t.Helper()
	body, _ := json.Marshal(r)
	req, _ := http.NewRequest(http.MethodPost, lab.HostURL()+"/v1/machines/"+m.MAC+"/status", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+m.Token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("report %s %s: %d %s", r.Step, r.State, resp.StatusCode, b)
	}
}

func TestAddMachineConfig(t *testing.T) {
	files := filesDir(t)
	lab := NewLabT(t, LabOptions{FilesDir: files})
	g := lab.GuestURL()
	tests := []struct {
		name string
		spec MachineSpec
		want []string // substrings of the config file
		not  []string
	}{
		{
			name: "config with relative image and own token",
			spec: MachineSpec{MAC: "52:54:00:00:00:01", Config: &config.MachineConfig{
				Image:     config.ImageSpec{URL: "other.img.gz", BmapURL: "other.bmap"},
				Disk:      config.DiskSpec{Hints: config.RootDeviceHints{"serial": "S1"}},
				Server:    config.ServerSpec{Token: "from-config"},
				Handoff:   config.HandoffReboot,
				OnFailure: config.FailureSpec{Action: config.FailureHold},
			}},
			want: []string{"apiVersion: " + config.APIVersion, "url: " + g + "/files/other.img.gz",
				"bmapUrl: " + g + "/files/other.bmap", "token: from-config", "serial: S1", "handoff: reboot"},
			not: []string{"checksum"},
		},
		{
			name: "absolute image url kept, spec token wins",
			spec: MachineSpec{MAC: "52:54:00:00:00:02", Token: "from-spec", Config: &config.MachineConfig{
				Image:  config.ImageSpec{URL: "http://10.0.2.2:1/x.img"},
				Server: config.ServerSpec{Token: "from-config"},
			}},
			want: []string{"url: http://10.0.2.2:1/x.img", "token: from-spec"},
			not:  []string{"from-config", "/files/"},
		},
		{
			name: "deprovision gets no image",
			spec: MachineSpec{MAC: "52:54:00:00:00:03", Config: &config.MachineConfig{Mode: config.ModeDeprovision}},
			want: []string{"mode: deprovision"},
			not:  []string{"image", "files"},
		},
		{
			name: "provision without image gets the demo image",
			spec: MachineSpec{MAC: "52:54:00:00:00:04", Config: &config.MachineConfig{Disk: config.DiskSpec{Device: "/dev/vdb"}}},
			want: []string{"url: " + g + "/files/demo.img.zst", "device: /dev/vdb"},
		},
		{
			name: "template",
			spec: MachineSpec{MAC: "52:54:00:00:00:05", Token: "tok", ConfigTemplate: "mac: {{.MAC}}\nserver: {{.ServerURL}}\n" +
				"files: {{.FilesURL}}\nimage: {{.ImageURL}}\nsum: {{.Checksum}}\nraw: {{.ImageChecksum}}\ntoken: {{.Token}}\n"},
			want: []string{"mac: 52:54:00:00:00:05\n", "server: " + g + "\n", "files: " + g + "/files\n",
				"image: " + g + "/files/demo.img.zst\n", "sum: sha256:" + zstSum + "\n", "raw: sha256:" + rawSum + "\n", "token: tok\n"},
		},
		{
			name: "template written as is, even when invalid",
			spec: MachineSpec{MAC: "52:54:00:00:00:06", ConfigTemplate: "apiVersion: nope\nbogus: [\n"},
			want: []string{"apiVersion: nope\nbogus: [\n"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := tt.spec.Config.Clone()
			m, err := lab.AddMachine(tt.spec)
			if err != nil {
				t.Fatal(err)
			}
			data, err := os.ReadFile(m.ConfigPath)
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range tt.want {
				if !strings.Contains(string(data), w) {
					t.Errorf("config lacks %q:\n%s", w, data)
				}
			}
			for _, n := range tt.not {
				if strings.Contains(string(data), n) {
					t.Errorf("config has %q:\n%s", n, data)
				}
			}
			if cfg != nil {
				a, _ := json.Marshal(cfg)
				b, _ := json.Marshal(tt.spec.Config)
				if !bytes.Equal(a, b) {
					t.Errorf("AddMachine changed the spec's config:\n%s\n%s", a, b)
				}
			}
		})
	}

	for _, tmpl := range []string{"{{.Nope}}", "{{"} {
		if _, err := lab.AddMachine(MachineSpec{MAC: "52:54:00:00:00:ff", ConfigTemplate: tmpl}); err == nil {
			t.Errorf("template %q: no error", tmpl)
		}
	}
}

func TestDemoConfigNeedsChecksums(t *testing.T) {
	lab := NewLabT(t, LabOptions{FilesDir: t.TempDir()})
	if _, err := lab.DemoConfig(); err == nil || !strings.Contains(err.Error(), "SHA256SUMS") {
		t.Errorf("DemoConfig without SHA256SUMS = %v", err)
	}
	if _, err := lab.AddMachine(MachineSpec{}); err == nil {
		t.Error("AddMachine with the demo config and no SHA256SUMS: no error")
	}
}

func TestAddMachineDisk(t *testing.T) {
	lab := NewLabT(t, LabOptions{FilesDir: filesDir(t)})
	initial := filepath.Join(t.TempDir(), "initial")
	content := bytes.Repeat([]byte("booty"), 1000)
	if err := os.WriteFile(initial, content, 0o644); err != nil {
		t.Fatal(err)
	}

	m, err := lab.AddMachine(MachineSpec{MAC: "52:54:00:00:01:01"})
	if err != nil {
		t.Fatal(err)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(m.Disk, &st); err != nil {
		t.Fatal(err)
	}
	if st.Size != DefaultDiskSize || st.Blocks*512 > 1<<20 {
		t.Errorf("default disk: size %d, %d bytes allocated; want %d, sparse", st.Size, st.Blocks*512, DefaultDiskSize)
	}

	m2, err := lab.AddMachine(MachineSpec{MAC: "52:54:00:00:01:02", DiskSize: 1 << 20, InitialDisk: initial})
	if err != nil {
		t.Fatal(err)
	}
	if err := DiskHoldsImage(m2.Disk, initial); err != nil {
		t.Error(err)
	}
	if fi, err := os.Stat(m2.Disk); err != nil || fi.Size() != 1<<20 {
		t.Errorf("disk with initial contents: %v, %v", fi, err)
	}

	if _, err := lab.AddMachine(MachineSpec{MAC: "52:54:00:00:01:03", DiskSize: 100, InitialDisk: initial}); err == nil ||
		!strings.Contains(err.Error(), "do not fit") {
		t.Errorf("initial contents larger than the disk: %v", err)
	}
}

func TestVMConfig(t *testing.T) {
	lab := NewLabT(t, LabOptions{FilesDir: filesDir(t)})
	m, err := lab.AddMachine(MachineSpec{
		MAC:          "52:54:00:00:02:01",
		ExtraCmdline: " booty.debug quiet ",
		Memory:       2048,
		VMConfig:     func(c *vm.Config) { c.UEFI = true },
	})
	if err != nil {
		t.Fatal(err)
	}
	c := m.VMConfig("/k", "/i")
	wantAppend := "console=ttyS0,115200 booty.server=" + lab.GuestURL() + " booty.insecure-http=1 panic=-1 booty.debug quiet"
	if c.Append != wantAppend {
		t.Errorf("append = %q, want %q", c.Append, wantAppend)
	}
	if c.Kernel != "/k" || c.Initrd != "/i" || !c.Net || c.MAC != m.MAC || c.Memory != 2048 || !c.UEFI || c.AllowReboot {
		t.Errorf("vm config = %+v", c)
	}
	if len(c.Disks) != 1 || c.Disks[0].Path != m.Disk || c.Disks[0].Format != "raw" || c.Disks[0].Interface != vm.IfaceVirtio {
		t.Errorf("disks = %+v", c.Disks)
	}
}

func TestBootOutsideNetNS(t *testing.T) {
	if vm.InNetNS() {
		t.Skip("this test process runs in a network namespace; the refusal is not reachable")
	}
	lab := NewLabT(t, LabOptions{FilesDir: filesDir(t)})
	m, err := lab.AddMachine(MachineSpec{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Boot(context.Background(), "/k", "/i"); err == nil || !strings.Contains(err.Error(), "EnterNetNS") {
		t.Errorf("Boot outside a network namespace = %v", err)
	}
	if _, err := m.WaitOutcome(context.Background()); err == nil {
		t.Error("WaitOutcome before Boot: no error")
	}
}
