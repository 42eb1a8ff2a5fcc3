//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	xssh "golang.org/x/crypto/ssh"
	"golang.org/x/time/rate"

	"github.com/booty-dev/booty/pkg/bmdb"
	"github.com/booty-dev/booty/pkg/manager"
	"github.com/booty-dev/booty/pkg/manager/ssh"
	"github.com/booty-dev/booty/pkg/server"
	"github.com/booty-dev/booty/test/harness"
	"github.com/booty-dev/booty/test/osimage"
	"github.com/booty-dev/booty/test/vm"
)

// takeoverMAC is the NIC of the machine taken over.
const takeoverMAC = "52:54:00:7a:6e:01"

// TestInitializerTakesOverDebian is issue 11's e2e (d): a VM boots the
// Debian image (UEFI, its own GRUB, kernel and systemd) with sshd, root
// allowed in by the Initializer's key only, written into a copy of the
// image with debugfs. bootyd runs in this process over TLS with a CA of
// the test's own; the Provisioner brings the machine in from a source that
// gives its SSH address (QEMU's hostfwd on this namespace's loopback); the
// Initializer (its real SSH client, checking the image's host key) uploads
// the booty built from this checkout and runs `booty takeover`, which
// fetches the agent from bootyd, kexecs into it, and the agent enrolls
// with bootyd over TLS trusting the CA the takeover handed it: the
// machine's MAC enrolls, with the AgentTakeover and Enrolled events.
func TestInitializerTakesOverDebian(t *testing.T) {
	start := time.Now()
	a := buildArtifacts(t)
	bootyBin := takeoverBooty(t)
	dir := osimage.Ensure(t)
	layout, err := osimage.ReadLayout(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, tool := range []string{"debugfs", "cp"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is missing (hack/deps.sh installs e2fsprogs): %v", tool, err)
		}
	}
	tmp := t.TempDir()
	disk := filepath.Join(tmp, "disk.img")
	if out, err := exec.Command("cp", "--sparse=always", filepath.Join(dir, osimage.Image), disk).CombinedOutput(); err != nil {
		t.Fatalf("copy image: %v\n%s", err, out)
	}
	rootfs := fmt.Sprintf("%s?offset=%d", disk, layout.RootStart)
	// The image's host keys (every copy shares them): the Initializer
	// accepts only these.
	var hostKeys []xssh.PublicKey
	for _, alg := range []string{"ed25519", "ecdsa", "rsa"} {
		line, err := exec.Command("debugfs", "-R", "cat /etc/ssh/ssh_host_"+alg+"_key.pub", rootfs).Output()
		if err != nil || !strings.HasPrefix(string(line), "ssh-") && !strings.HasPrefix(string(line), "ecdsa-") {
			t.Fatalf("the Debian image in %s has no sshd %s host key (%v: %q); rebuild it with hack/mkdebianimage.sh, which installs openssh-server", dir, alg, err, line)
		}
		k, _, _, _, err := xssh.ParseAuthorizedKey(line)
		if err != nil {
			t.Fatalf("parse the image's %s host key: %v", alg, err)
		}
		hostKeys = append(hostKeys, k)
	}
	hostKeyCallback := func(host string, remote net.Addr, key xssh.PublicKey) error {
		for _, k := range hostKeys {
			if bytes.Equal(k.Marshal(), key.Marshal()) {
				return nil
			}
		}
		return fmt.Errorf("host key %s of %s is not one of the image's", xssh.FingerprintSHA256(key), host)
	}

	// The Initializer's key goes to root's authorized_keys; the proof
	// service must not power the machine off.
	key := &manager.SSHKey{KeyPersistPath: filepath.Join(tmp, "initializer_key")}
	ak, err := key.AuthorizedKey()
	if err != nil {
		t.Fatal(err)
	}
	writeInto(t, rootfs, tmp, []string{"mkdir /root/.ssh", "set_inode_field /root/.ssh mode 040700"}, map[string]string{
		"/root/.ssh/authorized_keys":     ak + "\n",
		"/etc/booty-proof.d/no-poweroff": "",
	})

	// bootyd over TLS for 10.0.2.2, where the guest reaches this namespace.
	caPEM, tlsConf := selfSignedTLS(t, net.ParseIP(harness.GuestHost))
	files := filepath.Join(tmp, "files")
	os.Mkdir(files, 0o755)
	copyFile(t, a.kernel, filepath.Join(files, server.DefaultIPXEKernel))
	copyFile(t, a.initrd, filepath.Join(files, server.DefaultIPXEInitrd))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	log := slog.New(slog.NewTextHandler(t.Output(), nil))
	db, err := bmdb.Open(ctx, filepath.Join(tmp, "bmdb.db"), bmdb.WithLogger(log))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	endpoint := fmt.Sprintf("https://%s:%d", harness.GuestHost, ln.Addr().(*net.TCPAddr).Port)
	srv, err := server.New(server.Options{DB: db, FilesDir: files, PublicURL: endpoint, TLSConfig: tlsConf,
		IPXECmdline: "console=ttyS0,115200 no_timer_check panic=-1", Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, ln) }()
	defer func() {
		cancel()
		select {
		case <-served:
		case <-time.After(30 * time.Second):
			t.Error("bootyd did not stop within 30s")
		}
	}()

	// The Debian VM, its sshd on this namespace's loopback.
	sshPort := freePort(t)
	sshAddr := "127.0.0.1:" + sshPort
	v := vm.StartT(t, vm.Config{UEFI: true, Memory: 1024, Disks: []vm.Disk{{Path: disk}}, Net: true, MAC: takeoverMAC,
		NetOptions: "hostfwd=tcp:" + sshAddr + "-:22", Timeout: 25 * time.Minute})
	waitFor(t, "sshd in the Debian VM", 10*time.Minute, func() bool {
		select {
		case <-v.Exited():
			t.Fatalf("the Debian VM exited before sshd answered:\n%s", v.ConsoleText())
		default:
		}
		return sshBanner(sshAddr)
	})
	t.Logf("sshd answers after %s", time.Since(start).Round(time.Second))

	// The Provisioner brings the machine in; the Initializer takes it over.
	src := manager.NewMemSource("takeover-lab", manager.SourceMachine{Name: "debian-0", BootMAC: takeoverMAC, SSHAddress: sshAddr})
	prov, err := manager.NewProvisioner(src, manager.ProvisionerConfig{MaxCount: 1, ChunkSize: 1, Logger: log,
		ReconcileLoopLimiter: rate.NewLimiter(rate.Every(time.Second), 1), DeviceCreationLimiter: rate.NewLimiter(rate.Inf, 1)})
	if err != nil {
		t.Fatal(err)
	}
	if n, err := prov.Reconcile(ctx, db); err != nil || n != 1 {
		t.Fatalf("provisioner: %d machines, %v", n, err)
	}
	m, err := db.MachineByName(ctx, "debian-0")
	if err != nil {
		t.Fatal(err)
	}
	signer, err := key.Signer()
	if err != nil {
		t.Fatal(err)
	}
	caBlock, _ := pem.Decode([]byte(caPEM))
	if _, err := x509.ParseCertificate(caBlock.Bytes); err != nil {
		t.Fatal(err)
	}
	exe, err := os.ReadFile(bootyBin)
	if err != nil {
		t.Fatal(err)
	}
	in, err := manager.NewInitializer(src, &ssh.PlainClient{Signer: signer, HostKeyCallback: hostKeyCallback},
		manager.InitializerConfig{
			ControlLoopConfig: manager.ControlLoopConfig{DBQueryLimiter: rate.NewLimiter(rate.Every(time.Second), 1), Parallelism: 1, Logger: log},
			Executable:        exe, TargetPath: "/tmp/booty", Endpoint: endpoint, EndpointCACertificate: caBlock.Bytes,
			SSHConnectTimeout: 30 * time.Second, SSHExecTimeout: 8 * time.Minute,
		})
	if err != nil {
		t.Fatal(err)
	}
	loopDone := make(chan error, 1)
	go func() { loopDone <- manager.RunControlLoop(ctx, db, in) }()
	defer func() {
		cancel()
		select {
		case <-loopDone:
		case <-time.After(time.Minute):
			t.Error("the Initializer's loop did not stop within a minute")
		}
	}()

	reasons := func() []string {
		evs, err := db.Events(ctx, m.ID, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		var rs []string
		for _, e := range evs {
			rs = append(rs, e.Reason)
			if e.Reason == manager.ReasonAgentTakeover && !strings.Contains(e.Message, "booty takeover: ok") {
				t.Errorf("AgentTakeover event without the OK line: %q", e.Message)
			}
		}
		return rs
	}
	has := func(rs []string, r string) bool { return strings.Contains(" "+strings.Join(rs, " ")+" ", " "+r+" ") }
	waitFor(t, "the Initializer to take the machine over", 12*time.Minute, func() bool {
		if h, _ := db.WorkHistory(ctx, m.ID); len(h) > 0 && h[len(h)-1].Event == bmdb.WorkFailed {
			t.Fatalf("the takeover failed: %+v\n%s", h[len(h)-1], v.ConsoleText())
		}
		return has(reasons(), manager.ReasonAgentTakeover)
	})
	t.Logf("taken over after %s", time.Since(start).Round(time.Second))
	waitFor(t, "booty's agent to enroll", 10*time.Minute, func() bool {
		select {
		case <-v.Exited():
			t.Fatalf("the VM exited before the agent enrolled:\n%s", v.ConsoleText())
		default:
		}
		_, err := db.GetAgentSession(ctx, m.ID)
		return err == nil
	})
	t.Logf("agent enrolled after %s", time.Since(start).Round(time.Second))
	if rs := reasons(); !has(rs, "Enrolled") {
		t.Errorf("events %v lack Enrolled", rs)
	}
	if got, err := db.MachineByMAC(ctx, takeoverMAC); err != nil || got.ID != m.ID {
		t.Errorf("machine by MAC %s: %+v %v, want %s", takeoverMAC, got, err, m.ID)
	}
	console := v.ConsoleText()
	// The rebooter booty takeover left behind logged to the kernel log
	// before the kexec; then the agent's kernel booted as asked.
	for _, want := range []string{`msg="rebooting into the loaded kernel"`, "booty agent starting", "booty.server=" + endpoint} {
		if !strings.Contains(console, want) {
			t.Errorf("the console lacks %q", want)
		}
	}
	if err := v.Kill(); err != nil {
		t.Logf("kill the VM: %v", err)
	}
}

// takeoverBooty returns a booty binary that has the takeover command:
// $BOOTY_BIN when it does, else one built from this checkout.
func takeoverBooty(t *testing.T) string {
	t.Helper()
	if b := os.Getenv("BOOTY_BIN"); b != "" {
		if err := exec.Command(b, "takeover", "--help").Run(); err == nil {
			return b
		}
		t.Logf("BOOTY_BIN=%s has no takeover command; building booty from this checkout", b)
	}
	bin := filepath.Join(t.TempDir(), "booty")
	build := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", bin, "./cmd/booty")
	build.Dir = repoRoot()
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build booty: %v\n%s", err, out)
	}
	return bin
}

// writeInto writes files (path → content, mode 0600) into the ext4
// filesystem fs ("image?offset=N") with debugfs -w, after running cmds
// (debugfs commands); tmp holds the source files.
func writeInto(t *testing.T, fs, tmp string, cmds []string, files map[string]string) {
	t.Helper()
	i := 0
	for p, content := range files {
		src := filepath.Join(tmp, fmt.Sprintf("debugfs-src-%d", i))
		i++
		if err := os.WriteFile(src, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		cmds = append(cmds, "write "+src+" "+p, "set_inode_field "+p+" mode 0100600")
	}
	cmdFile := filepath.Join(tmp, "debugfs.cmd")
	if err := os.WriteFile(cmdFile, []byte(strings.Join(cmds, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("debugfs", "-w", "-f", cmdFile, fs).CombinedOutput()
	if err != nil || strings.Contains(string(out), "debugfs: ") && strings.Contains(string(out), "rror") {
		t.Fatalf("debugfs -w %s: %v\n%s", fs, err, out)
	}
	for p, content := range files {
		got, err := exec.Command("debugfs", "-R", "cat "+p, fs).Output()
		if err != nil || string(got) != content {
			t.Fatalf("%s in the image holds %q (%v), want %q", p, got, err, content)
		}
	}
}

// sshBanner reports whether an SSH server answers at addr (QEMU's hostfwd
// accepts connections before the guest listens, so a connect is no proof).
func sshBanner(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return false
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	b := make([]byte, 4)
	_, err = io.ReadFull(c, b)
	return err == nil && string(b) == "SSH-"
}
