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

// TestConfigLookup: an agent configured by a file (config drive, /deploy)
// may fetch its file with the file's server.token; file names match the MAC
// in any spelling; a missing or wrong token, an unknown or a malformed MAC
// all get the same 401.
func TestConfigLookup(t *testing.T) {
	e := newEnv(t, nil)
	one := "hostname: one\nserver: {token: tok-one-0123456789}\n"
	two := `{"hostname":"two","server":{"token":"tok-two-0123456789"}}`
	writeFile(t, filepath.Join(e.cfgDir, "AA:BB:CC:DD:EE:01.yml"), one)
	writeFile(t, filepath.Join(e.cfgDir, "aA-Bb-cC-dd-ee-02.JSON"), two)
	writeFile(t, filepath.Join(e.cfgDir, "aa-bb-cc-dd-ee-03.txt"), "server: {token: tok-three-0123456789}\n")
	writeFile(t, filepath.Join(e.cfgDir, "README.yaml"), "not: a mac\n")

	tests := []struct {
		name     string
		path     string
		token    string
		wantCode int
		wantBody string
		wantType string
	}{
		{"colon lower", "aa:bb:cc:dd:ee:01", "tok-one-0123456789", 200, one, "application/yaml"},
		{"colon upper", "AA:BB:CC:DD:EE:01", "tok-one-0123456789", 200, one, "application/yaml"},
		{"dash mixed", "Aa-bB-cc-DD-ee-01", "tok-one-0123456789", 200, one, "application/yaml"},
		{"json file by dashes", "AA-BB-CC-DD-EE-02", "tok-two-0123456789", 200, two, "application/json"},
		{"yaml file with token", testMAC, testToken, 200, "hostname: node1\n", "application/yaml"},
		{"no token", "aa:bb:cc:dd:ee:01", "", 401, "", ""},
		{"another machine's token", "aa:bb:cc:dd:ee:01", "tok-two-0123456789", 401, "", ""},
		{"wrong extension ignored", "aa:bb:cc:dd:ee:03", "tok-three-0123456789", 401, "", ""},
		{"unknown MAC", "00:11:22:33:44:55", testToken, 401, "", ""},
		{"malformed MAC", "not-a-mac", testToken, 401, "", ""},
	}
	var deny string
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, hdr, body := e.do(t, "GET", "/v1/machines/"+tt.path+"/config", tt.token, nil, nil)
			if code != tt.wantCode {
				t.Fatalf("status %d, want %d (body %q)", code, tt.wantCode, body)
			}
			if tt.wantCode != 200 {
				msg := apiError(t, body)
				if deny != "" && msg != deny {
					t.Errorf("refusal %q differs from %q: it tells the cases apart", msg, deny)
				}
				deny = msg
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

func TestConfigReloaded(t *testing.T) {
	e := newEnv(t, nil)
	p := filepath.Join(e.cfgDir, "aa-bb-cc-dd-ee-ff.yaml")
	raw := "# comment kept\nhostname: edited\nserver: {token: " + testToken + "}\n"
	writeFile(t, p, raw)
	if code, _, body := e.do(t, "GET", "/v1/machines/"+testMAC+"/config", testToken, nil, nil); code != 200 || body != raw {
		t.Fatalf("got %d %q, want 200 %q", code, body, raw)
	}
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	if code, _, _ := e.do(t, "GET", "/v1/machines/"+testMAC+"/config", testToken, nil, nil); code != 401 {
		t.Fatalf("after removal status %d, want 401", code)
	}
}

func TestConfigAmbiguous(t *testing.T) {
	e := newEnv(t, nil)
	writeFile(t, filepath.Join(e.cfgDir, "AA:BB:CC:DD:EE:FF.json"), `{}`)
	if code, _, _ := e.do(t, "GET", "/v1/machines/"+testMAC+"/config", testToken, nil, nil); code != http.StatusUnauthorized {
		t.Fatalf("status %d, want 401", code)
	}
	if _, err := e.srv.lookupConfig(testMAC); err == nil || !strings.Contains(err.Error(), "AA:BB:CC:DD:EE:FF.json") ||
		!strings.Contains(err.Error(), "aa-bb-cc-dd-ee-ff.yaml") {
		t.Errorf("error %v does not name both files", err)
	}
}

// TestDefaultConfigTokenRefused: the default config's token is shared by
// every machine, so it authenticates none.
func TestDefaultConfigTokenRefused(t *testing.T) {
	def := filepath.Join(t.TempDir(), "default.json")
	writeFile(t, def, `{"server":{"token":"dflt-0123456789abcdef"}}`)
	e := newEnv(t, func(o *Options) { o.DefaultConfig = def })
	if code, _, body := e.do(t, "GET", "/v1/machines/00-11-22-33-44-55/config", "dflt-0123456789abcdef", nil, nil); code != 401 {
		t.Fatalf("default config: %d %q", code, body)
	}
	if code, _, body := e.do(t, "POST", "/v1/machines/00:11:22:33:44:55/logs", "dflt-0123456789abcdef", `{"lines":[]}`, nil); code != 401 {
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
		{"no database", Options{}, "no database"},
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
	db := testDB(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.want != "no database" {
				tt.opts.DB = db
			}
			_, err := New(tt.opts)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("New error %v, want one containing %q", err, tt.want)
			}
		})
	}
}
