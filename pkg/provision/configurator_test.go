package provision

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/booty-dev/booty/pkg/bootloader"
	"github.com/booty-dev/booty/pkg/command"
	"github.com/booty-dev/booty/pkg/config"
	"github.com/booty-dev/booty/pkg/disk"
)

// newTestConfigurator returns a Configurator on a temp root, deploy dir,
// sysfs and efivars dir, with a recording fake runner.
func newTestConfigurator(t *testing.T) (*Configurator, *fakeRunner) {
	t.Helper()
	base := t.TempDir()
	c := NewConfigurator(nil)
	fr := &fakeRunner{}
	c.SetRunner(fr)
	c.SetLogger(testLogger(t))
	c.SetRootDir(filepath.Join(base, "root"))
	c.deployDir = filepath.Join(base, "deploy")
	c.sysfsDir = filepath.Join(base, "sys")
	c.efiVars.Dir = filepath.Join(base, "efivars")
	c.now = func() time.Time { return time.Unix(1700000000, 0) }
	for _, d := range []string{c.rootDir + "/etc", c.efiVars.Dir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return c, fr
}

// writeTree creates files (content) under dir; a value starting with
// "->" makes a symlink, a key ending in "/" a directory.
func writeTree(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for p, content := range files {
		full := filepath.Join(dir, p)
		if strings.HasSuffix(p, "/") {
			if err := os.MkdirAll(full, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if target, ok := strings.CutPrefix(content, "->"); ok {
			if err := os.Symlink(target, full); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func readRoot(t *testing.T, c *Configurator, p string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(c.rootDir, p))
	if err != nil {
		t.Fatalf("read %s: %v", p, err)
	}
	return string(b)
}

func TestSetHostname(t *testing.T) {
	tests := []struct {
		name, hostname, hosts string
		wantHosts             string // "" means /etc/hosts is not checked
		wantErr               bool
	}{
		{
			name: "replaces 127.0.1.1", hostname: "node1",
			hosts:     "127.0.0.1 localhost\n127.0.1.1 debian\n::1 localhost\n",
			wantHosts: "127.0.0.1 localhost\n127.0.1.1\tnode1\n::1 localhost\n",
		},
		{
			name: "adds after 127.0.0.1, fqdn", hostname: "node1.example.com",
			hosts:     "# comment\n127.0.0.1 localhost\n::1 localhost\n",
			wantHosts: "# comment\n127.0.0.1 localhost\n127.0.1.1\tnode1.example.com node1\n::1 localhost\n",
		},
		{
			name: "creates hosts", hostname: "node1",
			wantHosts: "127.0.0.1\tlocalhost\n127.0.1.1\tnode1\n::1\tlocalhost ip6-localhost ip6-loopback\n",
		},
		{name: "invalid", hostname: "bad_name!", hosts: "127.0.0.1 localhost\n", wantErr: true},
		{name: "label too long", hostname: strings.Repeat("a", 64), wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, _ := newTestConfigurator(t)
			if tt.hosts != "" {
				writeTree(t, c.rootDir, map[string]string{"etc/hosts": tt.hosts})
			}
			err := c.SetHostname(&config.MachineConfig{Hostname: tt.hostname})
			if tt.wantErr {
				if err == nil {
					t.Fatal("no error")
				}
				if _, err := os.Stat(filepath.Join(c.rootDir, "etc/hostname")); err == nil {
					t.Error("/etc/hostname written despite the error")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := readRoot(t, c, "etc/hostname"); got != tt.hostname+"\n" {
				t.Errorf("/etc/hostname = %q", got)
			}
			if got := readRoot(t, c, "etc/hosts"); got != tt.wantHosts {
				t.Errorf("/etc/hosts =\n%s\nwant\n%s", got, tt.wantHosts)
			}
		})
	}
	c, _ := newTestConfigurator(t)
	if err := c.SetHostname(&config.MachineConfig{}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(c.rootDir, "etc/hostname")); err == nil {
		t.Error("empty hostname wrote /etc/hostname")
	}
}

func TestConfigureDNS(t *testing.T) {
	dns := config.DNSSpec{Nameservers: []string{"10.0.0.53", "2001:db8::53"}, Search: []string{"example.com", "lab.example.com"}}
	t.Run("plain file", func(t *testing.T) {
		c, _ := newTestConfigurator(t)
		writeTree(t, c.rootDir, map[string]string{"etc/resolv.conf": "nameserver 8.8.8.8\n"})
		if err := c.ConfigureDNS(&config.MachineConfig{DNS: dns}); err != nil {
			t.Fatal(err)
		}
		want := "# Written by booty.\nnameserver 10.0.0.53\nnameserver 2001:db8::53\nsearch example.com lab.example.com\n"
		if got := readRoot(t, c, "etc/resolv.conf"); got != want {
			t.Errorf("resolv.conf =\n%s\nwant\n%s", got, want)
		}
	})
	t.Run("systemd-resolved stub", func(t *testing.T) {
		c, _ := newTestConfigurator(t)
		writeTree(t, c.rootDir, map[string]string{"etc/resolv.conf": "->../run/systemd/resolve/stub-resolv.conf"})
		if err := c.ConfigureDNS(&config.MachineConfig{DNS: dns}); err != nil {
			t.Fatal(err)
		}
		if target, err := os.Readlink(filepath.Join(c.rootDir, "etc/resolv.conf")); err != nil || target != "../run/systemd/resolve/stub-resolv.conf" {
			t.Errorf("resolv.conf link = %q, %v; want it kept", target, err)
		}
		want := "# Written by booty.\n[Resolve]\nDNS=10.0.0.53 2001:db8::53\nDomains=example.com lab.example.com\n"
		if got := readRoot(t, c, ResolvedDropIn); got != want {
			t.Errorf("drop-in =\n%s\nwant\n%s", got, want)
		}
	})
	t.Run("other symlink replaced", func(t *testing.T) {
		c, _ := newTestConfigurator(t)
		writeTree(t, c.rootDir, map[string]string{"etc/resolv.conf": "->/run/NetworkManager/resolv.conf"})
		if err := c.ConfigureDNS(&config.MachineConfig{DNS: dns}); err != nil {
			t.Fatal(err)
		}
		st, err := os.Lstat(filepath.Join(c.rootDir, "etc/resolv.conf"))
		if err != nil || !st.Mode().IsRegular() {
			t.Fatalf("resolv.conf is %v, %v; want a regular file", st, err)
		}
	})
	t.Run("invalid nameserver", func(t *testing.T) {
		c, _ := newTestConfigurator(t)
		err := c.ConfigureDNS(&config.MachineConfig{DNS: config.DNSSpec{Nameservers: []string{"dns.example.com"}}})
		if err == nil || !strings.Contains(err.Error(), "dns.example.com") {
			t.Errorf("err = %v", err)
		}
		if _, err := os.Stat(filepath.Join(c.rootDir, "etc/resolv.conf")); err == nil {
			t.Error("resolv.conf written despite the error")
		}
	})
}

func TestConfigureKubelet(t *testing.T) {
	spec := config.KubeletSpec{
		ProviderID: "metal3://default/node-1/2f5b1c3e",
		NodeLabels: map[string]string{"topology.kubernetes.io/zone": "rack-2", "booty.dev/pool": "gpu", "plain": ""},
	}
	args := "--provider-id=metal3://default/node-1/2f5b1c3e --node-labels=booty.dev/pool=gpu,plain=,topology.kubernetes.io/zone=rack-2"
	c, _ := newTestConfigurator(t)
	writeTree(t, c.rootDir, map[string]string{
		"etc/default/kubelet": "# kubeadm\nKUBELET_EXTRA_ARGS=\"--max-pods=200 --node-labels=old=1 --provider-id old\"\nOTHER=1\n",
		"etc/sysconfig/":      "",
	})
	if err := c.ConfigureKubelet(&config.MachineConfig{Kubelet: spec}); err != nil {
		t.Fatal(err)
	}
	wantDropIn := "# Written by booty: this machine's provider ID and node labels.\n[Service]\nEnvironment=\"KUBELET_EXTRA_ARGS=" + args + "\"\n"
	if got := readRoot(t, c, KubeletDropIn); got != wantDropIn {
		t.Errorf("drop-in =\n%s\nwant\n%s", got, wantDropIn)
	}
	wantDefault := "# kubeadm\nKUBELET_EXTRA_ARGS=\"--max-pods=200 " + args + "\"\nOTHER=1\n"
	if got := readRoot(t, c, KubeletDefaults); got != wantDefault {
		t.Errorf("/etc/default/kubelet =\n%s\nwant\n%s", got, wantDefault)
	}
	if got := readRoot(t, c, KubeletSysconfig); got != "KUBELET_EXTRA_ARGS=\""+args+"\"\n" {
		t.Errorf("/etc/sysconfig/kubelet = %q", got)
	}

	for _, bad := range []config.KubeletSpec{
		{NodeLabels: map[string]string{"bad key": "x"}},
		{NodeLabels: map[string]string{"ok": "bad value!"}},
		{NodeLabels: map[string]string{"Bad.Prefix/x": "y"}},
		{NodeLabels: map[string]string{"x": strings.Repeat("v", 64)}},
		{ProviderID: "id with space"},
		{ProviderID: `id"quote`},
	} {
		c, _ := newTestConfigurator(t)
		if err := c.ConfigureKubelet(&config.MachineConfig{Kubelet: bad}); err == nil {
			t.Errorf("%+v: no error", bad)
		}
		if _, err := os.Stat(filepath.Join(c.rootDir, KubeletDropIn)); err == nil {
			t.Errorf("%+v: drop-in written despite the error", bad)
		}
	}
}

func TestWriteCloudInitSeed(t *testing.T) {
	const secret = "#cloud-config\npassword: hunter2-SECRET\n"
	c, _ := newTestConfigurator(t)
	var logs bytes.Buffer
	c.SetLogger(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	cfg := &config.MachineConfig{Hostname: "node1", CloudInit: config.CloudInitSpec{UserData: secret, NetworkConfig: "version: 2\n"}}
	if err := c.WriteCloudInitSeed(cfg); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(c.rootDir, NoCloudSeedDir)
	want := map[string]string{
		"user-data":      secret,
		"meta-data":      "instance-id: booty-node1-1700000000\nlocal-hostname: node1\n",
		"network-config": "version: 2\n",
	}
	for name, content := range want {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil || string(b) != content {
			t.Errorf("%s = %q, %v; want %q", name, b, err, content)
		}
		st, _ := os.Stat(filepath.Join(dir, name))
		if st != nil && st.Mode().Perm() != 0o600 {
			t.Errorf("%s mode %v, want 0600", name, st.Mode().Perm())
		}
	}
	if strings.Contains(logs.String(), "hunter2") {
		t.Errorf("user-data leaked into the logs:\n%s", logs.String())
	}
	c2, _ := newTestConfigurator(t)
	if err := c2.WriteCloudInitSeed(&config.MachineConfig{CloudInit: config.CloudInitSpec{MetaData: "instance-id: x\n"}}); err != nil {
		t.Fatal(err)
	}
	if got := readRoot(t, c2, NoCloudSeedDir+"/meta-data"); got != "instance-id: x\n" {
		t.Errorf("given meta-data = %q", got)
	}
	if got := readRoot(t, c2, NoCloudSeedDir+"/user-data"); got != "#cloud-config\n" {
		t.Errorf("default user-data = %q", got)
	}
}

func TestCopyFiles(t *testing.T) {
	c, _ := newTestConfigurator(t)
	outside := t.TempDir()
	// The image tries to redirect writes out of the root.
	writeTree(t, c.rootDir, map[string]string{
		"etc/ssh/":       "",
		"opt":            "->" + outside,
		"etc/motd":       "->/usr/share/motd-outside",
		"etc/issue.d":    "->../../../../" + strings.TrimPrefix(outside, "/"),
		"etc/keep-mode/": "",
	})
	if err := os.Chmod(filepath.Join(c.rootDir, "etc/keep-mode"), 0o700); err != nil {
		t.Fatal(err)
	}
	fsDir := filepath.Join(c.deployDir, "file-system")
	mfDir := filepath.Join(c.deployDir, "machine-files")
	writeTree(t, fsDir, map[string]string{
		"etc/ssh/sshd_config.d/10-booty.conf": "PermitRootLogin no\n",
		"etc/motd":                            "provisioner\n",
		"usr/local/bin/tool":                  "#!/bin/sh\n",
		"opt/app/config":                      "x\n",
		"etc/issue.d/booty.issue":             "hi\n",
		"etc/link":                            "->/etc/motd",
		"etc/keep-mode/file":                  "k\n",
	})
	writeTree(t, mfDir, map[string]string{"etc/motd": "machine\n", "etc/secret": "s\n"})
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.Chmod(filepath.Join(fsDir, "usr/local/bin/tool"), 0o755|fs.ModeSetuid))
	must(os.Chmod(filepath.Join(mfDir, "etc/secret"), 0o600))

	must(c.CopyProvisionerFiles())
	must(c.CopyMachineFiles())

	if ents, _ := os.ReadDir(outside); len(ents) != 0 {
		t.Fatalf("copy escaped the root into %s: %v", outside, ents)
	}
	checks := []struct {
		path, content string
		mode          fs.FileMode
	}{
		{"etc/ssh/sshd_config.d/10-booty.conf", "PermitRootLogin no\n", 0o644},
		{"etc/motd", "machine\n", 0o644},
		{"usr/local/bin/tool", "#!/bin/sh\n", 0o755 | fs.ModeSetuid},
		{"etc/secret", "s\n", 0o600},
		{filepath.Join(strings.TrimPrefix(outside, "/"), "app/config"), "x\n", 0o644},
		{filepath.Join(strings.TrimPrefix(outside, "/"), "booty.issue"), "hi\n", 0o644},
	}
	for _, ck := range checks {
		p := filepath.Join(c.rootDir, ck.path)
		st, err := os.Lstat(p)
		if err != nil {
			t.Errorf("%s: %v", ck.path, err)
			continue
		}
		b, _ := os.ReadFile(p)
		if string(b) != ck.content || st.Mode() != ck.mode {
			t.Errorf("%s = %q mode %v; want %q mode %v", ck.path, b, st.Mode(), ck.content, ck.mode)
		}
	}
	if target, err := os.Readlink(filepath.Join(c.rootDir, "etc/link")); err != nil || target != "/etc/motd" {
		t.Errorf("etc/link -> %q, %v; want /etc/motd", target, err)
	}
	if st, _ := os.Stat(filepath.Join(c.rootDir, "etc/keep-mode")); st == nil || st.Mode().Perm() != 0o700 {
		t.Errorf("existing directory mode changed: %v", st)
	}

	// No deploy directories: nothing to do.
	c2, _ := newTestConfigurator(t)
	must(c2.CopyProvisionerFiles())
	must(c2.CopyMachineFiles())
}

func TestRunMachineCommands(t *testing.T) {
	c, fr := newTestConfigurator(t)
	dir := filepath.Join(c.deployDir, "machine-commands")
	writeTree(t, dir, map[string]string{"20-second": "#!/bin/sh\necho 2\n", "10-first": "#!/bin/sh\necho 1\n", "README": "not a command\n"})
	for _, f := range []string{"20-second", "10-first"} {
		if err := os.Chmod(filepath.Join(dir, f), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	var seen []string
	fr.Handle = func(call fakeCall) ([]byte, []byte, error) {
		b, err := os.ReadFile(filepath.Join(call.Root, call.Name))
		if err != nil {
			t.Errorf("%s not in the root while it runs: %v", call.Name, err)
		}
		seen = append(seen, string(b))
		return nil, nil, nil
	}
	if err := c.RunMachineCommands(t.Context()); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"chroot /tmp/booty-machine-commands/10-first",
		"chroot /tmp/booty-machine-commands/20-second",
	}
	if got := fr.commands(); !slices.Equal(got, want) {
		t.Errorf("commands = %q, want %q", got, want)
	}
	if len(seen) != 2 || !strings.Contains(seen[0], "echo 1") {
		t.Errorf("contents seen = %q", seen)
	}
	if _, err := os.Stat(filepath.Join(c.rootDir, "tmp/booty-machine-commands")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("commands left in the root: %v", err)
	}

	fr.Calls = nil
	fr.Handle = func(call fakeCall) ([]byte, []byte, error) {
		return nil, []byte("boom"), &command.Error{Name: call.Name, ExitCode: 3, Stderr: "boom"}
	}
	err := c.RunMachineCommands(t.Context())
	if err == nil || !strings.Contains(err.Error(), "10-first") || !strings.Contains(err.Error(), "exit code 3") {
		t.Errorf("err = %v, want one naming 10-first and exit code 3", err)
	}
	if len(fr.Calls) != 1 {
		t.Errorf("ran %d commands after a failure, want 1", len(fr.Calls))
	}
}

func TestRunPostProvisionCmds(t *testing.T) {
	for _, tc := range []struct {
		name, shell string
		files       map[string]string
	}{
		{"bash", "/bin/bash", map[string]string{"usr/bin/bash": "", "usr/bin/sh": "", "bin": "->usr/bin"}},
		{"sh only", "/bin/sh", map[string]string{"bin/sh": ""}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, fr := newTestConfigurator(t)
			writeTree(t, c.rootDir, tc.files)
			for p, v := range tc.files {
				if v == "" {
					_ = os.Chmod(filepath.Join(c.rootDir, p), 0o755)
				}
			}
			fr.Handle = func(call fakeCall) ([]byte, []byte, error) {
				if call.Args[1] == "false" {
					return nil, nil, &command.Error{Name: call.Name, ExitCode: 5, Stderr: "line1\nlast words"}
				}
				return nil, nil, nil
			}
			err := c.RunPostProvisionCmds(t.Context(), []string{"echo a", "false", "echo never"})
			want := []string{"chroot " + tc.shell + " -c echo a", "chroot " + tc.shell + " -c false"}
			if got := fr.commands(); !slices.Equal(got, want) {
				t.Errorf("commands = %q, want %q", got, want)
			}
			if err == nil {
				t.Fatal("no error for a failing command")
			}
			for _, s := range []string{"command 2 of 3", "exit code 5", "last words"} {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q lacks %q", err, s)
				}
			}
		})
	}
	c, _ := newTestConfigurator(t)
	if err := c.RunPostProvisionCmds(t.Context(), []string{"true"}); err == nil {
		t.Error("no error without a shell in the root")
	}
}

func TestConfigureGRUB(t *testing.T) {
	params := []string{"console=ttyS0,115200", "quiet"}
	tests := []struct {
		name      string
		files     map[string]string
		runErr    error
		wantCmds  []string
		wantErr   string
		wantGrub  string
		wantBLS   string
		execFiles []string
	}{
		{
			name: "debian update-grub",
			files: map[string]string{
				"etc/default/grub":     "GRUB_DEFAULT=0\nGRUB_CMDLINE_LINUX=\"console=tty0\"\n",
				"usr/sbin/update-grub": "#!/bin/sh\n",
			},
			execFiles: []string{"usr/sbin/update-grub"},
			wantCmds:  []string{"chroot update-grub"},
			wantGrub:  "GRUB_DEFAULT=0\nGRUB_CMDLINE_LINUX=\"console=ttyS0,115200 quiet\"\n",
		},
		{
			name: "rhel grub2-mkconfig and BLS",
			files: map[string]string{
				"etc/default/grub":                    "GRUB_CMDLINE_LINUX=\"rhgb\"\nGRUB_ENABLE_BLSCFG=true\n",
				"usr/sbin/grub2-mkconfig":             "#!/bin/sh\n",
				"boot/loader/entries/abc-5.14.0.conf": "title RHEL\nlinux /vmlinuz-5.14.0\noptions root=UUID=1 ro\n",
				"boot/loader/entries/abc-rescue.conf": "title RHEL rescue\nlinux /vmlinuz-0-rescue\noptions root=UUID=1 ro\n",
			},
			execFiles: []string{"usr/sbin/grub2-mkconfig"},
			wantCmds:  []string{"chroot grub2-mkconfig -o /boot/grub2/grub.cfg"},
			wantGrub:  "GRUB_CMDLINE_LINUX=\"rhgb console=ttyS0,115200 quiet\"\nGRUB_ENABLE_BLSCFG=true\n",
			wantBLS:   "title RHEL\nlinux /vmlinuz-5.14.0\noptions root=UUID=1 ro console=ttyS0,115200 quiet\n",
		},
		{
			name:    "no generator",
			files:   map[string]string{"etc/default/grub": "GRUB_CMDLINE_LINUX=\"\"\n"},
			wantErr: "none of update-grub",
		},
		{
			name:    "nothing to edit",
			files:   map[string]string{"etc/os-release": "NAME=x\n"},
			wantErr: "neither /etc/default/grub nor BLS",
		},
		{
			name: "generator fails",
			files: map[string]string{
				"etc/default/grub":       "GRUB_CMDLINE_LINUX=\"\"\n",
				"usr/sbin/grub-mkconfig": "#!/bin/sh\n",
			},
			execFiles: []string{"usr/sbin/grub-mkconfig"},
			runErr:    &command.Error{Name: "grub-mkconfig", ExitCode: 1, Stderr: "grub-probe: error: failed to get canonical path"},
			wantCmds:  []string{"chroot grub-mkconfig -o /boot/grub/grub.cfg"},
			wantErr:   "failed to get canonical path",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, fr := newTestConfigurator(t)
			writeTree(t, c.rootDir, tt.files)
			for _, f := range tt.execFiles {
				if err := os.Chmod(filepath.Join(c.rootDir, f), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			fr.Handle = func(fakeCall) ([]byte, []byte, error) { return nil, nil, tt.runErr }
			err := c.ConfigureGRUB(t.Context(), &config.MachineConfig{KernelParams: params})
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
			} else if err != nil {
				t.Fatal(err)
			}
			if got := fr.commands(); !slices.Equal(got, tt.wantCmds) {
				t.Errorf("commands = %q, want %q", got, tt.wantCmds)
			}
			if tt.wantGrub != "" {
				if got := readRoot(t, c, "etc/default/grub"); got != tt.wantGrub {
					t.Errorf("/etc/default/grub =\n%s\nwant\n%s", got, tt.wantGrub)
				}
			}
			if tt.wantBLS != "" {
				if got := readRoot(t, c, "boot/loader/entries/abc-5.14.0.conf"); got != tt.wantBLS {
					t.Errorf("BLS entry =\n%s\nwant\n%s", got, tt.wantBLS)
				}
			}
		})
	}
	c, fr := newTestConfigurator(t)
	if err := c.ConfigureGRUB(t.Context(), &config.MachineConfig{}); err != nil || len(fr.Calls) != 0 {
		t.Errorf("no kernel params: err %v, commands %v; want nothing done", err, fr.commands())
	}
}

func TestEFIBootEntries(t *testing.T) {
	c, _ := newTestConfigurator(t)
	writeTree(t, c.rootDir, map[string]string{
		"etc/os-release":                  "PRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\nNAME=\"Debian GNU/Linux\"\nID=debian\n",
		"boot/efi/EFI/debian/shimx64.efi": "shim",
		"boot/efi/EFI/debian/grubx64.efi": "grub",
		"boot/efi/EFI/BOOT/BOOTX64.EFI":   "fallback",
		"boot/efi/EFI/centos/grubx64.efi": "old",
	})
	esp := disk.Partition{Path: "/dev/vda15", Number: 15, Start: 2048 * 512, Size: 260096 * 512, SectorSize: 512, Type: disk.TypeEFISystem, PartUUID: "8d3f1a2b-1111-4222-8333-944455556666"}
	c.readPartitions = func(_ context.Context, dev string) ([]disk.Partition, error) {
		if dev != "/dev/vda" {
			t.Errorf("partitions read from %s", dev)
		}
		return []disk.Partition{{Path: "/dev/vda1", Number: 1, Type: disk.TypeLinuxRootX86_64, PartUUID: "aaaaaaaa-1111-4222-8333-944455556666"}, esp}, nil
	}
	vars := c.efiVars
	hd := bootloader.PartitionInfo{Number: 1, StartLBA: 2048, SizeLBA: 1000, PartUUID: "11111111-2222-4333-8444-555555555555"}
	mustNum := func(n uint16, err error) uint16 {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	ubuntu := mustNum(vars.CreateBootEntry("ubuntu", hd, `\EFI\ubuntu\shimx64.efi`, false))
	pxe := mustNum(vars.CreateBootEntry("UEFI PXEv4 (MAC:525400123456)", hd, `\EFI\BOOT\BOOTX64.EFI`, false))
	centos := mustNum(vars.CreateBootEntry("CentOS Linux", hd, `\EFI\centos\grubx64.efi`, false))
	rhel := mustNum(vars.CreateBootEntry("Linux Boot Manager", hd, `\EFI\CentOS\shimx64.efi`, false))

	if err := c.RemoveEFIBootEntries(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := c.CreateEFIBootEntry(t.Context(), "/dev/vda", ""); err != nil {
		t.Fatal(err)
	}
	entries, err := vars.BootEntries()
	if err != nil {
		t.Fatal(err)
	}
	var descs []string
	var debian *bootloader.LoadOption
	for i, e := range entries {
		descs = append(descs, e.Description)
		if e.Description == "Debian GNU/Linux" {
			debian = &entries[i]
		}
	}
	if len(entries) != 2 || debian == nil {
		t.Fatalf("entries = %q, want the PXE entry and Debian GNU/Linux", descs)
	}
	if l, _ := debian.Loader(); l != `\EFI\debian\shimx64.efi` {
		t.Errorf("loader = %q", l)
	}
	if p, _ := debian.Partition(); p.Number != 15 || p.StartLBA != 2048 || p.SizeLBA != 260096 || !strings.EqualFold(p.PartUUID, esp.PartUUID) {
		t.Errorf("partition = %+v, want the ESP %+v", p, esp)
	}
	order, err := vars.BootOrder()
	if err != nil {
		t.Fatal(err)
	}
	if len(order) != 2 || order[0] != debian.Num || order[1] != pxe {
		t.Errorf("BootOrder = %v, want [%d %d] (removed: %d %d %d)", order, debian.Num, pxe, ubuntu, centos, rhel)
	}

	// Explicit boot partition that is not on the disk.
	if err := c.CreateEFIBootEntry(t.Context(), "/dev/vda", "/dev/sdz1"); err == nil {
		t.Error("no error for a boot partition not on the disk")
	}
	// BIOS machine: no efivarfs.
	c.efiVars.Dir = filepath.Join(t.TempDir(), "missing")
	if err := c.RemoveEFIBootEntries(t.Context()); !errors.Is(err, ErrNotEFI) {
		t.Errorf("remove without efivars: %v, want ErrNotEFI", err)
	}
	if err := c.CreateEFIBootEntry(t.Context(), "/dev/vda", ""); !errors.Is(err, ErrNotEFI) {
		t.Errorf("create without efivars: %v, want ErrNotEFI", err)
	}
}
