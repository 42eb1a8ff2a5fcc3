package config

import (
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite the *.golden files of testdata/ from the current output")

// golden compares got with path, or writes it there under -update.
func golden(t *testing.T, path, got string) {
	t.Helper()
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read golden (run go test -update to create it): %v", err)
	}
	if got != string(want) {
		t.Errorf("output differs from %s (go test -update rewrites it)\n--- got:\n%s\n--- want:\n%s", path, got, want)
	}
}

func goldenPath(input string) string {
	return strings.TrimSuffix(input, filepath.Ext(input)) + ".golden"
}

// TestParseValid parses every testdata/valid file and compares the decoded
// config, with defaults and secrets redacted, with its golden YAML.
func TestParseValid(t *testing.T) {
	files, _ := filepath.Glob("testdata/valid/*.yaml")
	jsonFiles, _ := filepath.Glob("testdata/valid/*.json")
	files = append(files, jsonFiles...)
	if len(files) < 4 {
		t.Fatalf("found only %d valid test configs", len(files))
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			cfg, err := Parse(data)
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			out, err := MarshalYAML(cfg.Redacted())
			if err != nil {
				t.Fatal(err)
			}
			golden(t, goldenPath(f), string(out))
		})
	}
}

// TestParseInvalid parses every testdata/invalid file, expects an error, and
// compares its text with the golden file.
func TestParseInvalid(t *testing.T) {
	files, _ := filepath.Glob("testdata/invalid/*.yaml")
	if len(files) < 20 {
		t.Fatalf("found only %d invalid test configs", len(files))
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			cfg, err := Parse(data)
			if err == nil {
				t.Fatalf("Parse accepted it: %+v", cfg)
			}
			golden(t, goldenPath(f), err.Error()+"\n")
		})
	}
}

func TestParseDefaults(t *testing.T) {
	cfg, err := Parse([]byte(`apiVersion: booty.dev/v1
image: {url: "file:///os.img", checksum: "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"}
disk: {device: /dev/vda}
`))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Mode != ModeProvision || cfg.Handoff != HandoffKexec || cfg.OnFailure.Action != FailureReboot || cfg.OnFailure.Delay.Duration != 30*time.Second {
		t.Errorf("defaults not applied: mode=%q handoff=%q onFailure=%+v", cfg.Mode, cfg.Handoff, cfg.OnFailure)
	}
	// Set values stay.
	cfg, err = Parse([]byte(`apiVersion: booty.dev/v1
mode: soft-deprovision
handoff: poweroff
onFailure: {action: hold, delay: 5m}
`))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Mode != ModeSoftDeprovision || cfg.Handoff != HandoffPoweroff || cfg.OnFailure.Action != FailureHold || cfg.OnFailure.Delay.Duration != 5*time.Minute {
		t.Errorf("set values overwritten: %+v", cfg)
	}
}

// TestParseErrorType checks that content problems come as *ValidationError
// with one problem per entry, and syntax errors as plain errors.
func TestParseErrorType(t *testing.T) {
	_, err := Parse([]byte("apiVersion: booty.dev/v1\nmode: x\nhandoff: z\n"))
	var ve *ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("want *ValidationError, got %T: %v", err, err)
	}
	want := []string{
		`mode: unknown mode "x", want provision, deprovision or soft-deprovision`,
		`handoff: unknown handoff "z", want kexec, reboot or poweroff`,
	}
	if strings.Join(ve.Problems, "|") != strings.Join(want, "|") {
		t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(ve.Problems, "\n"), strings.Join(want, "\n"))
	}
	if ve.Error() != strings.Join(want, "\n") {
		t.Errorf("Error() = %q", ve.Error())
	}
	_, err = Parse([]byte("a: [b\n"))
	if err == nil || errors.As(err, &ve) {
		t.Errorf("syntax error: got %T %v", err, err)
	}
}

// TestSecretsNotInErrors makes sure a bad token or user-data is never quoted.
func TestSecretsNotInErrors(t *testing.T) {
	_, err := Parse([]byte(`apiVersion: booty.dev/v1
mode: deprovision
server: {token: "tok with SECRETWORD", caCert: "x"}
cloudInit: {userData: "SECRETDATA", metaData: "[bad"}
`))
	if err == nil {
		t.Fatal("want an error")
	}
	for _, s := range []string{"SECRETWORD", "SECRETDATA"} {
		if strings.Contains(err.Error(), s) {
			t.Errorf("error quotes secret %s: %v", s, err)
		}
	}
	if !strings.Contains(err.Error(), "server.token: must not contain whitespace") {
		t.Errorf("token problem missing: %v", err)
	}
}

func TestValidateWithoutDefaults(t *testing.T) {
	c := &MachineConfig{APIVersion: APIVersion, Mode: ModeDeprovision}
	if err := c.Validate(); err != nil {
		t.Errorf("Validate of a config without defaults: %v", err)
	}
	c = &MachineConfig{}
	err := c.Validate()
	var ve *ValidationError
	if !errors.As(err, &ve) || len(ve.Problems) != 3 {
		t.Fatalf("empty config: want 3 problems (apiVersion, image.url, disk), got %v", err)
	}
}

func TestDurationJSON(t *testing.T) {
	tests := []struct {
		in      string
		want    time.Duration
		wantErr bool
	}{
		{`"30s"`, 30 * time.Second, false},
		{`"1m30s"`, 90 * time.Second, false},
		{`"0s"`, 0, false},
		{`30`, 0, true},
		{`"soon"`, 0, true},
		{`null`, 0, true},
	}
	for _, tt := range tests {
		var d Duration
		err := d.UnmarshalJSON([]byte(tt.in))
		if (err != nil) != tt.wantErr || d.Duration != tt.want {
			t.Errorf("UnmarshalJSON(%s) = %v, %v; want %v, err %v", tt.in, d.Duration, err, tt.want, tt.wantErr)
		}
	}
	b, err := Duration{90 * time.Second}.MarshalJSON()
	if err != nil || string(b) != `"1m30s"` {
		t.Errorf("MarshalJSON = %s, %v", b, err)
	}
}

func TestRedactedIsDeepCopy(t *testing.T) {
	c := &MachineConfig{
		Server:       ServerSpec{URL: "https://x", Token: "tok"},
		CloudInit:    CloudInitSpec{UserData: "#cloud-config\npassword: x", MetaData: "m"},
		KernelParams: []string{"a"},
		Disk:         DiskSpec{Hints: RootDeviceHints{"size": 10.0}},
		Kubelet:      KubeletSpec{NodeLabels: map[string]string{"a": "b"}},
		DNS:          DNSSpec{Nameservers: []string{"192.0.2.1"}},
	}
	r := c.Redacted()
	if r.Server.Token != RedactedText || r.CloudInit.UserData != RedactedText {
		t.Errorf("secrets not redacted: %+v %+v", r.Server, r.CloudInit)
	}
	if r.CloudInit.MetaData != "m" || r.Server.URL != "https://x" {
		t.Errorf("non-secrets changed: %+v", r)
	}
	r.KernelParams[0] = "changed"
	r.Disk.Hints["size"] = 1.0
	r.Kubelet.NodeLabels["a"] = "changed"
	r.DNS.Nameservers[0] = "changed"
	if c.KernelParams[0] != "a" || c.Disk.Hints["size"] != 10.0 || c.Kubelet.NodeLabels["a"] != "b" || c.DNS.Nameservers[0] != "192.0.2.1" {
		t.Errorf("Redacted shares memory with the original: %+v", c)
	}
	if c.Server.Token != "tok" {
		t.Error("Redacted changed the original")
	}
	empty := (&MachineConfig{}).Redacted()
	if empty.Server.Token != "" || empty.CloudInit.UserData != "" {
		t.Error("empty secrets must stay empty")
	}
}

func TestExampleMachineYAML(t *testing.T) {
	data, err := os.ReadFile("../../examples/machine.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Parse(data); err != nil {
		t.Fatalf("examples/machine.yaml: %v", err)
	}
}
