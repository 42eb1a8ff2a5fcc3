package main

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

func TestParseFlagsDefaults(t *testing.T) {
	t.Setenv("BOOTY_CACHE", "/cache")
	o, err := parseFlags(nil)
	if err != nil {
		t.Fatal(err)
	}
	if o.bootyd != "out/bootyd" || o.bootyctl != "out/bootyctl" || o.kernel != "out/vmlinuz" || o.initrd != "out/initramfs.img" {
		t.Errorf("binaries and agent: %+v", o)
	}
	if o.imageDir != "/cache/debian" {
		t.Errorf("image dir %q, want $BOOTY_CACHE/debian", o.imageDir)
	}
	if o.timeout != time.Hour || o.diskGiB != 3 || o.memoryMiB != 1024 || o.interval != time.Second || o.consoles || o.workDir != "" {
		t.Errorf("defaults: %+v", o)
	}
	o, err = parseFlags([]string{"--bootyd-arg=--log-level=debug", "--bootyd-arg", "--reconcile-resync=5s", "--consoles", "--work-dir", "/w"})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(o.bootydArgs, " ") != "--log-level=debug --reconcile-resync=5s" || !o.consoles || o.workDir != "/w" {
		t.Errorf("parsed: %+v", o)
	}
}

func TestParseFlagsRejectsBadValues(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--timeout", "0s"}, "--timeout 0s"},
		{[]string{"--disk-gib", "1"}, "--disk-gib 1"},
		{[]string{"--memory-mib", "256"}, "--memory-mib 256"},
		{[]string{"--interval", "10ms"}, "--interval 10ms"},
		{[]string{"extra"}, "unexpected arguments: extra"},
		{[]string{"--no-such-flag"}, "no-such-flag"},
	} {
		_, err := parseFlags(c.args)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("parseFlags(%q) = %v, want an error naming %q", c.args, err, c.want)
		}
	}
}

func TestHelpAndBadFlagsExitCodes(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"--help"}, &out, &errb); code != 0 {
		t.Fatalf("--help exit %d", code)
	}
	for _, want := range []string{"two QEMU machines", "bootyctl apply -f hosts.yaml", "bootyctl machines watch",
		"--insecure-http", "BOOTY-PROOF", "--bootyd-arg", "--work-dir", "exit status is 0 only when both machines"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("--help lacks %q", want)
		}
	}
	out.Reset()
	if code := run([]string{"--timeout", "-1s"}, &out, &errb); code != 2 {
		t.Errorf("bad flag exit %d, want 2", code)
	}
	if !strings.Contains(errb.String(), "--timeout -1s: must be positive") {
		t.Errorf("stderr %q", errb.String())
	}
	if _, err := parseFlags([]string{"-h"}); !errors.Is(err, pflag.ErrHelp) {
		t.Errorf("-h: %v", err)
	}
}

// A missing input is named with the make target that builds it, before
// anything starts (exit 1).
func TestMissingInputsNamed(t *testing.T) {
	dir := t.TempDir()
	touch := func(name string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	args := []string{"--bootyd", touch("bootyd"), "--bootyctl", touch("bootyctl"), "--kernel", touch("vmlinuz"),
		"--initrd", filepath.Join(dir, "initramfs.img"), "--image-dir", dir}
	var out, errb bytes.Buffer
	if code := run(args, &out, &errb); code != 1 {
		t.Fatalf("exit %d, want 1", code)
	}
	if !strings.Contains(errb.String(), "initramfs.img") || !strings.Contains(errb.String(), "make initramfs") {
		t.Errorf("stderr %q, want the initramfs and make initramfs named", errb.String())
	}
	touch("initramfs.img")
	errb.Reset()
	if code := run(args, &out, &errb); code != 1 || !strings.Contains(errb.String(), imageZst) || !strings.Contains(errb.String(), "make debian-image") {
		t.Errorf("exit %d, stderr %q: want the image and make debian-image named", code, errb.String())
	}
}
