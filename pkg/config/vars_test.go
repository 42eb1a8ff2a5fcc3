package config

import (
	"errors"
	"os"
	"reflect"
	"strings"
	"testing"
)

// sampleVars is what CAPRF writes to /deploy/vars (the provider's tests
// read the same file).
var sampleVars = func() string {
	b, err := os.ReadFile("testdata/vars/sample.vars")
	if err != nil {
		panic(err)
	}
	return string(b)
}()

func TestParseVars(t *testing.T) {
	cfg, ep, err := ParseVars([]byte(sampleVars))
	if err != nil {
		t.Fatal(err)
	}
	want := &MachineConfig{
		APIVersion: APIVersion,
		Hostname:   "worker-7",
		Mode:       ModeProvision,
		Image: ImageSpec{
			URL:      "http://192.0.2.1/images/ubuntu.img.gz",
			Checksum: "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
		},
		Disk:                  DiskSpec{Device: "/dev/nvme0n1", SecureErase: true},
		DNS:                   DNSSpec{Nameservers: []string{"192.0.2.53", "192.0.2.54"}},
		KernelParams:          []string{"console=ttyS1", "quiet"},
		Kubelet:               KubeletSpec{ProviderID: "metal://cluster/worker-7"},
		PostProvisionCommands: []string{"touch /etc/a", "systemctl enable x"},
		Mellanox:              MellanoxSpec{NumVFs: 8},
		Handoff:               HandoffReboot,
		OnFailure:             FailureSpec{Action: FailureReboot, Delay: Duration{DefaultFailureDelay}},
		Network:               NetworkSpec{Interface: "eno1", Address: "192.0.2.20/24", Gateway: "192.0.2.1"},
	}
	if !reflect.DeepEqual(cfg, want) {
		t.Errorf("config:\n got %+v\nwant %+v", cfg, want)
	}
	wantEP := &VarsEndpoints{
		Token: "caprf-secret-token", InitURL: "http://192.0.2.1/status/init", SuccessURL: "http://192.0.2.1/status/success",
		ErrorURL: "http://192.0.2.1/status/error", LogURL: "http://192.0.2.1/log", DebugURL: "http://192.0.2.1/debug",
		Ignored: []string{"asn_server", "FAILURE_DOMAIN", "REGION"},
	}
	if !reflect.DeepEqual(ep, wantEP) {
		t.Errorf("endpoints:\n got %+v\nwant %+v", ep, wantEP)
	}
}

func TestParseVarsVariants(t *testing.T) {
	base := "IMAGE=file:///os.img\nDISK_DEVICE=/dev/sda\n"
	tests := []struct {
		name  string
		vars  string
		check func(*MachineConfig) bool
	}{
		{"bare sha512 inferred", base + "IMAGE_CHECKSUM=" + strings.Repeat("ab", 64) + "\n",
			func(c *MachineConfig) bool { return c.Image.Checksum == "sha512:"+strings.Repeat("ab", 64) }},
		{"prefixed checksum kept", base + `IMAGE_CHECKSUM="sha256:` + strings.Repeat("0", 64) + `"` + "\n",
			func(c *MachineConfig) bool { return c.Image.Checksum == "sha256:"+strings.Repeat("0", 64) }},
		{"MODE hard", "MODE=hard\n", func(c *MachineConfig) bool { return c.Mode == ModeDeprovision }},
		{"MODE soft", "MODE=soft\n", func(c *MachineConfig) bool { return c.Mode == ModeSoftDeprovision }},
		{"min disk size hint", "MODE=provision\nIMAGE=file:///os.img\nIMAGE_CHECKSUM=" + strings.Repeat("0", 64) + "\nMIN_DISK_SIZE_GB=100\n",
			func(c *MachineConfig) bool { return c.Disk.Hints["size"] == ">= 100" && c.Disk.Device == "" }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, _, err := ParseVars([]byte(tt.vars))
			if err != nil {
				t.Fatal(err)
			}
			if !tt.check(cfg) {
				t.Errorf("unexpected config %+v", cfg)
			}
		})
	}
	if v, err := unquoteVar(`"a\"b\\c\$d"`); err != nil || v != `a"b\c$d` {
		t.Errorf("unquoteVar = %q, %v", v, err)
	}
	if v, err := unquoteVar(`'a\n "b"' # c`); err != nil || v != `a\n "b"` {
		t.Errorf("unquoteVar single = %q, %v", v, err)
	}
}

func TestParseVarsProblems(t *testing.T) {
	vars := `export IMAGE="http://a/1.img, http://a/2.img"
export NUM_VFS="many"
this is not a var
export HOSTNAME="unterminated
export IMAGE_CHECKSUM="abc"
export MIN_DISK_SIZE_GB=big
export LOG_URL="ftp://192.0.2.1/log"
export TOKEN="has space"
export MODE="explode"
export STATIC_IP="192.0.2.20"
`
	_, _, err := ParseVars([]byte(vars))
	var ve *ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("want *ValidationError, got %v", err)
	}
	want := []string{
		"IMAGE: 2 images given; booty writes exactly one",
		`NUM_VFS: want an integer, got "many"`,
		`vars line 3: want KEY="value" or export KEY="value"`,
		"vars line 4 (HOSTNAME): unterminated double quote",
		`MIN_DISK_SIZE_GB: want a whole number of GiB, got "big"`,
		"IMAGE_CHECKSUM: cannot tell the algorithm of a 3-digit checksum: set IMAGE_CHECKSUM_TYPE to sha256 or sha512",
		`LOG_URL: scheme "ftp" not supported in "ftp://192.0.2.1/log", want http, https`,
		"TOKEN: must not contain whitespace",
		`MODE (mode): unknown mode "explode", want provision, deprovision or soft-deprovision`,
		`STATIC_IP (network.address): want an address in CIDR form like "192.0.2.10/24", got "192.0.2.20"`,
	}
	if got := strings.Join(ve.Problems, "\n"); got != strings.Join(want, "\n") {
		t.Errorf("problems:\n%s\nwant:\n%s", got, strings.Join(want, "\n"))
	}
	if strings.Contains(err.Error(), "has space") {
		t.Error("error quotes the token")
	}
}

func TestParseVarsProvisionNeedsDisk(t *testing.T) {
	_, _, err := ParseVars([]byte("IMAGE=http://192.0.2.1/os.img\nIMAGE_CHECKSUM=" + strings.Repeat("0", 64) + "\n"))
	if err == nil || !strings.Contains(err.Error(), "DISK_DEVICE or MIN_DISK_SIZE_GB (disk): device or hints is required") {
		t.Errorf("err = %v", err)
	}
}
