package initsys

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestConsoleNames(t *testing.T) {
	tests := []struct {
		cmdline string
		want    []string
	}{
		{"quiet", nil},
		{"console=ttyS0", []string{"ttyS0"}},
		{"console=ttyS0,115200 console=tty0", []string{"ttyS0", "tty0"}},
		{"console=tty0 console=ttyS1,115200n8 console=tty0", []string{"ttyS1", "tty0"}},
		{"console=uart8250,io,0x3f8,115200 console=hvc0 console=null", []string{"hvc0"}},
	}
	for _, tt := range tests {
		if got := ConsoleNames(ParseCmdline(tt.cmdline)); !slices.Equal(got, tt.want) {
			t.Errorf("ConsoleNames(%q) = %v, want %v", tt.cmdline, got, tt.want)
		}
	}
}

func TestOpenConsoles(t *testing.T) {
	dev := t.TempDir()
	for _, n := range []string{"ttyS0", "tty0", "console"} {
		if err := os.WriteFile(filepath.Join(dev, n), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	c, err := OpenConsoles(dev, []string{"ttyS0", "ttyS9", "tty0"})
	if err == nil {
		t.Error("missing ttyS9 not reported")
	}
	if c == nil {
		t.Fatal("no consoles opened")
	}
	if c.Primary != "tty0" || !slices.Equal(c.Names, []string{"ttyS0", "tty0"}) {
		t.Errorf("primary %q names %v", c.Primary, c.Names)
	}
	if _, err := c.Write([]byte("hello\n")); err != nil {
		t.Fatal(err)
	}
	c.Close()
	for _, n := range []string{"ttyS0", "tty0"} {
		if b, _ := os.ReadFile(filepath.Join(dev, n)); string(b) != "hello\n" {
			t.Errorf("%s got %q", n, b)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(dev, "console")); len(b) != 0 {
		t.Errorf("/dev/console written although console= was given: %q", b)
	}

	d, err := OpenConsoles(dev, nil)
	if err != nil || d.Primary != "console" {
		t.Fatalf("default console: %v, %+v", err, d)
	}
	d.Close()
	if _, err := OpenConsoles(t.TempDir(), nil); err == nil {
		t.Error("no console at all not reported")
	}
}
