package server

import (
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestNormalizeMAC(t *testing.T) {
	tests := []struct {
		in, want string
		ok       bool
	}{
		{"aa:bb:cc:dd:ee:ff", "aa:bb:cc:dd:ee:ff", true},
		{"AA:BB:CC:DD:EE:FF", "aa:bb:cc:dd:ee:ff", true},
		{"aa-bb-cc-dd-ee-ff", "aa:bb:cc:dd:ee:ff", true},
		{"Aa-Bb-0C-dD-e1-F9", "aa:bb:0c:dd:e1:f9", true},
		{"aa:bb-cc:dd:ee:ff", "", false},  // mixed separators
		{"aabbccddeeff", "", false},       // no separators
		{"aa:bb:cc:dd:ee", "", false},     // short
		{"aa:bb:cc:dd:ee:fg", "", false},  // not hex
		{"aa.bb.cc.dd.ee.ff", "", false},  // wrong separator
		{"aa:bb:cc:dd:ee:ff:", "", false}, // long
		{"", "", false},
	}
	for _, tt := range tests {
		got, err := NormalizeMAC(tt.in)
		if tt.ok != (err == nil) || got != tt.want {
			t.Errorf("NormalizeMAC(%q) = %q, %v; want %q, ok=%v", tt.in, got, err, tt.want, tt.ok)
		}
		if err != nil && !errors.Is(err, ErrBadMAC) {
			t.Errorf("NormalizeMAC(%q) error %v is not ErrBadMAC", tt.in, err)
		}
	}
}

func TestConfigLookup(t *testing.T) {
	e := newEnv(t, nil)
	writeFile(t, filepath.Join(e.cfgDir, "AA:BB:CC:DD:EE:01.yml"), "hostname: one\n")
	writeFile(t, filepath.Join(e.cfgDir, "aA-Bb-cC-dd-ee-02.JSON"), `{"hostname":"two"}`)
	writeFile(t, filepath.Join(e.cfgDir, "aa-bb-cc-dd-ee-03.txt"), "ignored: extension\n")
	writeFile(t, filepath.Join(e.cfgDir, "README.yaml"), "not: a mac\n")

	tests := []struct {
		name     string
		path     string
		wantCode int
		wantBody string
		wantType string
	}{
		{"colon lower", "aa:bb:cc:dd:ee:01", 200, "hostname: one\n", "application/yaml"},
		{"colon upper", "AA:BB:CC:DD:EE:01", 200, "hostname: one\n", "application/yaml"},
		{"dash lower", "aa-bb-cc-dd-ee-01", 200, "hostname: one\n", "application/yaml"},
		{"dash mixed", "Aa-bB-cc-DD-ee-01", 200, "hostname: one\n", "application/yaml"},
		{"json file", "aa:bb:cc:dd:ee:02", 200, `{"hostname":"two"}`, "application/json"},
		{"json file by dashes", "AA-BB-CC-DD-EE-02", 200, `{"hostname":"two"}`, "application/json"},
		{"yaml file with token", testMAC, 200, "hostname: node1\n", "application/yaml"},
		{"wrong extension ignored", "aa:bb:cc:dd:ee:03", 404, "", ""},
		{"unknown MAC", "00:11:22:33:44:55", 404, "", ""},
		{"malformed MAC", "not-a-mac", 400, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, hdr, body := e.do(t, "GET", "/v1/machines/"+tt.path+"/config", "", nil, nil)
			if code != tt.wantCode {
				t.Fatalf("status %d, want %d (body %q)", code, tt.wantCode, body)
			}
			if tt.wantCode != 200 {
				apiError(t, body)
				return
			}
			if !strings.HasPrefix(body, tt.wantBody) {
				t.Errorf("body %q, want prefix %q", body, tt.wantBody)
			}
			if got := hdr.Get("Content-Type"); got != tt.wantType {
				t.Errorf("Content-Type %q, want %q", got, tt.wantType)
			}
			if got := hdr.Get("Cache-Control"); got != "no-store" {
				t.Errorf("Cache-Control %q, want no-store", got)
			}
		})
	}
}

func TestConfigServedAsIsAndReloaded(t *testing.T) {
	e := newEnv(t, nil)
	p := filepath.Join(e.cfgDir, "aa-bb-cc-dd-ee-ff.yaml")
	// Not valid for any schema, still served byte for byte.
	raw := "# comment kept\nhostname: [unclosed\n\tweird: \x01\n"
	writeFile(t, p, raw)
	if code, _, body := e.do(t, "GET", "/v1/machines/"+testMAC+"/config", "", nil, nil); code != 200 || body != raw {
		t.Fatalf("got %d %q, want 200 %q", code, body, raw)
	}
	writeFile(t, p, "hostname: edited\n")
	if _, _, body := e.do(t, "GET", "/v1/machines/"+testMAC+"/config", "", nil, nil); body != "hostname: edited\n" {
		t.Fatalf("after edit got %q", body)
	}
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	if code, _, _ := e.do(t, "GET", "/v1/machines/"+testMAC+"/config", "", nil, nil); code != 404 {
		t.Fatalf("after removal status %d, want 404", code)
	}
}

func TestConfigAmbiguous(t *testing.T) {
	e := newEnv(t, nil)
	writeFile(t, filepath.Join(e.cfgDir, "AA:BB:CC:DD:EE:FF.json"), `{}`)
	code, _, body := e.do(t, "GET", "/v1/machines/"+testMAC+"/config", "", nil, nil)
	if code != http.StatusInternalServerError {
		t.Fatalf("status %d, want 500", code)
	}
	msg := apiError(t, body)
	if !strings.Contains(msg, "AA:BB:CC:DD:EE:FF.json") || !strings.Contains(msg, "aa-bb-cc-dd-ee-ff.yaml") {
		t.Errorf("error %q does not name both files", msg)
	}
}

func TestDefaultConfig(t *testing.T) {
	def := filepath.Join(t.TempDir(), "default.json")
	writeFile(t, def, `{"server":{"token":"dflt"}}`)
	e := newEnv(t, func(o *Options) { o.DefaultConfig = def })
	code, hdr, body := e.do(t, "GET", "/v1/machines/00-11-22-33-44-55/config", "", nil, nil)
	if code != 200 || body != `{"server":{"token":"dflt"}}` || hdr.Get("Content-Type") != "application/json" {
		t.Fatalf("default config: %d %q %q", code, hdr.Get("Content-Type"), body)
	}
	// A machine's own file wins over the default.
	if _, _, body := e.do(t, "GET", "/v1/machines/"+testMAC+"/config", "", nil, nil); !strings.HasPrefix(body, "hostname: node1") {
		t.Fatalf("own config shadowed by default: %q", body)
	}
	// The default's token authenticates machines without a file.
	code, _, body = e.do(t, "POST", "/v1/machines/00:11:22:33:44:55/logs", "dflt", `{"lines":[]}`, nil)
	if code != 200 {
		t.Fatalf("report with default token: %d %s", code, body)
	}
}

func TestNewRejectsBadOptions(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "f.yaml")
	writeFile(t, file, "a: b\n")
	tests := []struct {
		name string
		opts Options
		want string
	}{
		{"nothing to serve", Options{}, "neither a config directory nor a default config"},
		{"missing config dir", Options{ConfigDir: filepath.Join(dir, "nope")}, "config directory"},
		{"config dir is a file", Options{ConfigDir: file}, "not a directory"},
		{"missing default", Options{DefaultConfig: filepath.Join(dir, "nope.yaml")}, "default config"},
		{"missing files dir", Options{ConfigDir: dir, FilesDir: filepath.Join(dir, "nope")}, "files directory"},
		{"relative public URL", Options{ConfigDir: dir, PublicURL: "bootyd:8080"}, "public URL"},
		{"ftp public URL", Options{ConfigDir: dir, PublicURL: "ftp://x"}, "public URL"},
		{"kernel escapes", Options{ConfigDir: dir, IPXEKernel: "../vmlinuz"}, "iPXE kernel"},
		{"absolute initrd", Options{ConfigDir: dir, IPXEInitrd: "/boot/initrd"}, "iPXE initrd"},
		{"newline in cmdline", Options{ConfigDir: dir, IPXECmdline: "quiet\nshell"}, "one line"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(tt.opts)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("New error %v, want one containing %q", err, tt.want)
			}
		})
	}
}
