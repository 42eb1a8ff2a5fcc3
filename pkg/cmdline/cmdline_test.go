package cmdline

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	cl := Parse(`BOOT_IMAGE=/vmlinuz root=/dev/ram0 console=tty0 console=ttyS0,115200n8 booty.debug ` +
		`booty.config="http://192.0.2.1/cfg?a=b c" "quoted=x y" ip=dhcp booty.server=http://192.0.2.1:8080 -- init-arg booty.debug=0` + "\n")
	tests := []struct {
		key     string
		want    string
		present bool
	}{
		{"BOOT_IMAGE", "/vmlinuz", true},
		{"console", "ttyS0,115200n8", true}, // last one wins
		{"booty.debug", "", true},
		{"booty.config", "http://192.0.2.1/cfg?a=b c", true},
		{"quoted", "x y", true},
		{"ip", "dhcp", true},
		{"booty.server", "http://192.0.2.1:8080", true},
		{"init-arg", "", false}, // after --
		{"missing", "", false},
	}
	for _, tt := range tests {
		got, ok := cl.Get(tt.key)
		if got != tt.want || ok != tt.present {
			t.Errorf("Get(%q) = %q, %v; want %q, %v", tt.key, got, ok, tt.want, tt.present)
		}
	}
	if got := cl.GetAll("console"); !reflect.DeepEqual(got, []string{"tty0", "ttyS0,115200n8"}) {
		t.Errorf("GetAll(console) = %q", got)
	}
	if !cl.Flag("booty.debug") {
		t.Error("Flag(booty.debug) = false, want true (bare flag; the =0 is after --)")
	}
}

func TestFlag(t *testing.T) {
	for in, want := range map[string]bool{
		"booty.debug": true, "booty.debug=1": true, "booty.debug=yes": true,
		"booty.debug=0": false, "booty.debug=false": false, "booty.debug=off": false, "": false,
		"booty.debug booty.debug=no": false,
	} {
		if got := Parse(in).Flag("booty.debug"); got != want {
			t.Errorf("%q: Flag = %v, want %v", in, got, want)
		}
	}
}

func TestEdgeCases(t *testing.T) {
	tests := []struct {
		in   string
		want []Param
	}{
		{"", nil},
		{"   \t\n", nil},
		{`a="unterminated b`, []Param{{"a", "unterminated b", true}}},
		{`k= x=`, []Param{{"k", "", true}, {"x", "", true}}},
		{`a=b=c`, []Param{{"a", "b=c", true}}},
		{`"k=v"`, []Param{{"k", "v", true}}},
	}
	for _, tt := range tests {
		if got := Parse(tt.in).Params; !reflect.DeepEqual(got, tt.want) {
			t.Errorf("Parse(%q) = %#v, want %#v", tt.in, got, tt.want)
		}
	}
	cl := Parse(`a="x y" b c=d`)
	if s := cl.String(); s != `a="x y" b c=d` {
		t.Errorf("String() = %q", s)
	}
}

func TestRead(t *testing.T) {
	p := filepath.Join(t.TempDir(), "cmdline")
	if err := os.WriteFile(p, []byte("booty.server=http://x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cl, err := Read(p)
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := cl.Get("booty.server"); v != "http://x" {
		t.Errorf("got %q", v)
	}
	if _, err := Read(filepath.Join(t.TempDir(), "nope")); err == nil {
		t.Error("want an error for a missing file")
	}
}

func TestParseConsolesAndHold(t *testing.T) {
	c := Parse("BOOT_IMAGE=/vmlinuz console=tty0 console=ttyS0,115200n8 quiet booty.url=\"http://x/a b\" booty.debug=hold,trace -- init-arg console=ttyS1\n")
	if v, ok := c.Get("BOOT_IMAGE"); !ok || v != "/vmlinuz" {
		t.Errorf("BOOT_IMAGE = %q, %v", v, ok)
	}
	if v, ok := c.Get("booty.url"); v != "http://x/a b" || !ok {
		t.Errorf("quoted value = %q", v)
	}
	if _, ok := c.Get("quiet"); !ok {
		t.Error("bare flag quiet not found")
	}
	if _, ok := c.Get("init-arg"); ok {
		t.Error("parameter after -- was kept")
	}
	if got := c.GetAll("console"); !slices.Equal(got, []string{"tty0", "ttyS0,115200n8"}) {
		t.Errorf("console values = %v", got)
	}
	if !c.HoldRequested() {
		t.Error("booty.debug=hold,trace not seen as hold")
	}
	if Parse("booty.debug=trace").HoldRequested() {
		t.Error("booty.debug=trace seen as hold")
	}
}

func TestRedact(t *testing.T) {
	raw := "console=ttyS0 booty.config=https://user:s3cret@host/cfg.yaml?access_token=XYZ booty.token=TOK quiet"
	got := Redact(raw)
	for _, secret := range []string{"s3cret", "user:", "XYZ", "TOK"} {
		if strings.Contains(got, secret) {
			t.Errorf("Redact kept %q: %s", secret, got)
		}
	}
	for _, keep := range []string{"console=ttyS0", "booty.config=https://<redacted>@host/cfg.yaml?<redacted>", "booty.token=<redacted>", "quiet"} {
		if !strings.Contains(got, keep) {
			t.Errorf("Redact lost %q: %s", keep, got)
		}
	}
}
