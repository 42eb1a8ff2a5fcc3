package manager_test

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	xssh "golang.org/x/crypto/ssh"

	"github.com/booty-dev/booty/pkg/bmdb/bmdbtest"
	"github.com/booty-dev/booty/pkg/manager"
	"github.com/booty-dev/booty/pkg/manager/ssh"
	"github.com/booty-dev/booty/pkg/manager/sshdtest"
)

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
	addr, hostKey := sshdtest.Start(t, dir, ak)
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
