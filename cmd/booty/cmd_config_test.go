package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestRunConfig(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("good.yaml", `apiVersion: booty.dev/v1
image: {url: "http://192.0.2.1/os.img", checksum: "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"}
disk: {device: /dev/sda}
server: {url: "https://bootyd.example.com", token: "TOPSECRET"}
cloudInit: {userData: "#cloud-config\npassword: PASSWORD123"}
`)
	secrets := write("secrets.yaml", `apiVersion: booty.dev/v1
image: {url: "https://s3.example.com/os.img?X-Amz-Signature=PRESIGNED", checksum: "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"}
disk: {device: /dev/sda}
postProvisionCommands: ["echo root:HUNTER2 | chpasswd"]
cloudInit: {networkConfig: "version: 2\nwifis: {wlan0: {access-points: {home: {password: WIFIPASS}}}}"}
`)
	bad := write("bad.yaml", "apiVersion: booty.dev/v1\nhostnme: x\nmellanox: {numVFs: -1}\n")
	vars := write("vars", "export MODE=\"deprovision\"\nexport TOKEN=\"t\"\n")

	tests := []struct {
		name     string
		args     []string
		wantCode int
		wantOut  []string
		wantErr  []string
		notInOut []string
	}{
		{"validate ok", []string{"validate", good}, 0, []string{good + ": ok\n"}, nil, nil},
		{"validate bad lists every problem", []string{"validate", good, bad}, 1, []string{
			good + ": ok\n",
			bad + `: hostnme: unknown field (did you mean "hostname"?)` + "\n",
			bad + ": image.url: required in mode provision\n",
			bad + ": disk: device or hints is required",
			bad + ": mellanox.numVFs: want 0 to 65535 (the PCI SR-IOV limit), got -1\n",
		}, nil, nil},
		{"validate missing file", []string{"validate", filepath.Join(dir, "nope.yaml")}, 1, []string{"no such file"}, nil, nil},
		{"validate vars", []string{"validate", "--vars", vars}, 0, []string{vars + ": ok"}, nil, nil},
		{"show redacts and applies defaults", []string{"show", good}, 0,
			[]string{"apiVersion: booty.dev/v1\nmode: provision\n", "token: <redacted>", "userData: <redacted>", "handoff: kexec", "delay: 30s"},
			nil, []string{"TOPSECRET", "PASSWORD123"}},
		{"show redacts URLs, commands and network config", []string{"show", secrets}, 0,
			[]string{"url: https://s3.example.com/os.img?<redacted>", "- <redacted>", "networkConfig: <redacted>"},
			nil, []string{"PRESIGNED", "HUNTER2", "WIFIPASS"}},
		{"show --show-secrets reveals them", []string{"show", "--show-secrets", secrets}, 0,
			[]string{"PRESIGNED", "HUNTER2", "WIFIPASS"}, nil, nil},
		{"show bad", []string{"show", bad}, 1, nil, []string{"hostnme: unknown field"}, nil},
		{"no subcommand", nil, 2, nil, []string{"Usage:"}, nil},
		{"unknown subcommand", []string{"frob"}, 2, nil, []string{`unknown subcommand "frob"`}, nil},
		{"validate without file", []string{"validate"}, 2, nil, []string{"want at least one FILE"}, nil},
		{"show two files", []string{"show", good, bad}, 2, nil, []string{"want exactly one FILE"}, nil},
		{"bad flag", []string{"validate", "--frob", good}, 2, nil, []string{"unknown flag"}, nil},
		{"help", []string{"validate", "--help"}, 0, nil, []string{"--vars"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			code := runConfig(tt.args, &out, &errb)
			if code != tt.wantCode {
				t.Errorf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", code, tt.wantCode, out.String(), errb.String())
			}
			for _, w := range tt.wantOut {
				if !strings.Contains(out.String(), w) {
					t.Errorf("stdout lacks %q:\n%s", w, out.String())
				}
			}
			for _, w := range tt.wantErr {
				if !strings.Contains(errb.String(), w) {
					t.Errorf("stderr lacks %q:\n%s", w, errb.String())
				}
			}
			for _, w := range tt.notInOut {
				if strings.Contains(out.String()+errb.String(), w) {
					t.Errorf("output contains secret %q", w)
				}
			}
		})
	}
}
