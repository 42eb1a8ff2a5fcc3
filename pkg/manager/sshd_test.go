package manager_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	xssh "golang.org/x/crypto/ssh"

	"github.com/booty-dev/booty/pkg/bmdb/bmdbtest"
	"github.com/booty-dev/booty/pkg/manager"
	"github.com/booty-dev/booty/pkg/manager/ssh"
)

func ci() bool {
	v := strings.ToLower(os.Getenv("CI"))
	return v == "true" || v == "1" || v == "yes"
}

// need fails the test under CI, else skips it loudly, when a requirement
// is missing.
func need(t *testing.T, ok bool, what string) {
	t.Helper()
	if ok {
		return
	}
	if ci() {
		t.Fatalf("%s; required under CI (hack/deps.sh installs openssh-server and iproute2; the test runs as root)", what)
	}
	t.Skipf("SKIPPED: %s (install openssh-server and iproute2 with hack/deps.sh, run as root)", what)
}

func run(t *testing.T, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, args[0], args[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v: %s", strings.Join(args, " "), err, out)
	}
}

func randHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// sshdInNetns starts Debian's sshd in a network namespace the test creates,
// reached over a veth pair with a random /30 of 10.251.0.0/16, with a fresh
// host key and authorizedKey as root's only way in. It returns the address
// and the host key; everything is torn down when the test ends.
func sshdInNetns(t *testing.T, dir, authorizedKey string) (string, xssh.PublicKey) {
	t.Helper()
	sshd := "/usr/sbin/sshd"
	_, err := os.Stat(sshd)
	need(t, err == nil, "sshd is not installed at "+sshd)
	_, err = exec.LookPath("ip")
	need(t, err == nil, "ip (iproute2) is not installed")
	need(t, os.Geteuid() == 0, "network namespaces need root")

	id := randHex(3)
	ns, hostIf, peerIf := "booty-init-"+id, "bih"+id, "bip"+id
	run(t, "ip", "netns", "add", ns)
	t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
	run(t, "ip", "link", "add", hostIf, "type", "veth", "peer", "name", peerIf)
	t.Cleanup(func() { exec.Command("ip", "link", "del", hostIf).Run() })
	run(t, "ip", "link", "set", peerIf, "netns", ns)
	nb, _ := rand.Int(rand.Reader, big.NewInt(256*64))
	base := int(nb.Int64())
	hostIP := fmt.Sprintf("10.251.%d.%d", base/64, base%64*4+1)
	peerIP := fmt.Sprintf("10.251.%d.%d", base/64, base%64*4+2)
	run(t, "ip", "addr", "add", hostIP+"/30", "dev", hostIf)
	run(t, "ip", "link", "set", hostIf, "up")
	run(t, "ip", "netns", "exec", ns, "ip", "addr", "add", peerIP+"/30", "dev", peerIf)
	run(t, "ip", "netns", "exec", ns, "ip", "link", "set", peerIf, "up")
	run(t, "ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up")

	_, hk, _ := ed25519.GenerateKey(rand.Reader)
	blk, err := xssh.MarshalPrivateKey(hk, "")
	if err != nil {
		t.Fatal(err)
	}
	hostKey := filepath.Join(dir, "ssh_host_ed25519_key")
	os.WriteFile(hostKey, pem.EncodeToMemory(blk), 0o600)
	hostSigner, _ := xssh.NewSignerFromKey(hk)
	os.WriteFile(filepath.Join(dir, "authorized_keys"), []byte(authorizedKey+"\n"), 0o600)
	cfg := filepath.Join(dir, "sshd_config")
	os.WriteFile(cfg, []byte(strings.Join([]string{
		"Port 22", "ListenAddress " + peerIP, "HostKey " + hostKey,
		"AuthorizedKeysFile " + filepath.Join(dir, "authorized_keys"), "PidFile " + filepath.Join(dir, "sshd.pid"),
		"PermitRootLogin prohibit-password", "PasswordAuthentication no", "KbdInteractiveAuthentication no",
		"UsePAM no", "StrictModes no", "LogLevel VERBOSE", "",
	}, "\n")), 0o600)
	// sshd's privilege separation directory.
	if err := os.MkdirAll("/run/sshd", 0o755); err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	cmd := exec.Command("ip", "netns", "exec", ns, sshd, "-D", "-e", "-f", cfg)
	cmd.Stdout, cmd.Stderr = &log, &log
	t.Logf("sshd: %s", strings.Join(cmd.Args, " "))
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		t.Logf("sshd log:\n%s", log.String())
	})
	addr := net.JoinHostPort(peerIP, "22")
	eventually(t, 20*time.Second, "sshd listening on "+addr, func() bool {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	return addr, hostSigner.PublicKey()
}

// TestInitializerSSHD takes a machine over through a real sshd in a network
// namespace: the Initializer logs in with its generated ed25519 key,
// uploads a fake booty that prints what a takeover would, and runs it with
// the endpoint and the CA; the fake's record of its arguments, the uploaded
// files and the event show it ran. A wrong host key is refused.
func TestInitializerSSHD(t *testing.T) {
	dir := t.TempDir()
	key := &manager.SSHKey{KeyPersistPath: filepath.Join(dir, "initializer_key")}
	ak, err := key.AuthorizedKey()
	if err != nil {
		t.Fatal(err)
	}
	addr, hostKey := sshdInNetns(t, dir, ak)
	signer, _ := key.Signer()
	client := &ssh.PlainClient{Signer: signer, HostKeyCallback: xssh.FixedHostKey(hostKey)}

	_, other, _ := ed25519.GenerateKey(rand.Reader)
	otherSigner, _ := xssh.NewSignerFromKey(other)
	wrong := &ssh.PlainClient{Signer: signer, HostKeyCallback: xssh.FixedHostKey(otherSigner.PublicKey())}
	if _, err := wrong.Dial(testCtx(t), addr, 10*time.Second); err == nil || !strings.Contains(err.Error(), "host key") {
		t.Fatalf("dial with the wrong host key: %v, want refused", err)
	}

	target := filepath.Join(dir, "target")
	os.Mkdir(target, 0o755)
	fake := "#!/bin/sh\necho \"booty takeover: ok $*\"\necho \"$@\" > \"$(dirname \"$0\")/takeover-args\"\n"
	cfg := initializerConfig(t, caDER(t))
	cfg.Executable, cfg.TargetPath = []byte(fake), filepath.Join(target, "booty")

	db := open(t, bmdbtest.Engines()[0].DSN(t))
	ctx := testCtx(t)
	ms := memMachines(1)
	ms[0].SSHAddress = addr
	src := manager.NewMemSource("lab", ms...)
	p, _ := manager.NewProvisioner(src, provisionerConfig(t, 10, 10))
	if _, err := p.Reconcile(ctx, db); err != nil {
		t.Fatal(err)
	}
	in, err := manager.NewInitializer(src, client, cfg)
	if err != nil {
		t.Fatal(err)
	}
	runLoop(t, db, in)
	m, _ := db.MachineByName(ctx, "node-0")
	eventually(t, 60*time.Second, "machine taken over through sshd", func() bool {
		return len(events(t, db, m.ID, manager.ReasonAgentTakeover)) == 1
	})
	ev := events(t, db, m.ID, manager.ReasonAgentTakeover)[0]
	if !strings.Contains(ev.Message, "booty takeover: ok takeover --server https://bootyd.example:8443") {
		t.Fatalf("event: %q", ev.Message)
	}
	args, err := os.ReadFile(filepath.Join(target, "takeover-args"))
	wantArgs := "takeover --server https://bootyd.example:8443 --ca-cert " + cfg.TargetPath + ".ca.pem\n"
	if err != nil || string(args) != wantArgs {
		t.Fatalf("the fake booty ran with %q (%v), want %q", args, err, wantArgs)
	}
	fi, err := os.Stat(cfg.TargetPath)
	if err != nil || fi.Mode().Perm() != 0o755 {
		t.Fatalf("uploaded booty: %v %v", fi, err)
	}
	if ca, _ := os.ReadFile(cfg.TargetPath + ".ca.pem"); !bytes.HasPrefix(ca, []byte("-----BEGIN CERTIFICATE-----")) {
		t.Fatalf("uploaded CA: %.40q", ca)
	}
	if _, err := os.Stat(cfg.TargetPath + ".upload"); !os.IsNotExist(err) {
		t.Fatalf("temporary upload file left behind: %v", err)
	}

	// booty kexecs away after its OK line: the connection drops without an
	// exit status, which is a success. The fake closes its output (as booty
	// must, so the line gets out) and kills its sshd session.
	conn, err := client.Dial(ctx, addr, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	stdout, _, err := conn.Execute(ctx, `echo "booty takeover: ok"; exec >&- 2>&-; sleep 0.3; kill -9 $PPID; sleep 5`, nil)
	if err == nil || !ssh.ExitStatusMissing(err) || !strings.Contains(string(stdout), "booty takeover: ok") {
		t.Fatalf("a dropped session: stdout %q, err %v (%T), want the OK line and a missing exit status", stdout, err, err)
	}
	// A command that fails gives its exit status and output.
	conn2, err := client.Dial(ctx, addr, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn2.Close()
	var exit *xssh.ExitError
	if _, stderr, err := conn2.Execute(ctx, "echo nope >&2; exit 3", nil); !errors.As(err, &exit) || exit.ExitStatus() != 3 || string(stderr) != "nope\n" {
		t.Fatalf("failing command: %v %q", err, stderr)
	}
}
