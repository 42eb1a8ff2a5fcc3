package main

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	xssh "golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/booty-dev/booty/pkg/bmc"
	"github.com/booty-dev/booty/pkg/bmc/bmcsim"
	"github.com/booty-dev/booty/pkg/bmdb"
	"github.com/booty-dev/booty/pkg/manager"
	"github.com/booty-dev/booty/pkg/manager/sshdtest"
)

const bmcPassword = "inv-s3cret-pw"

// writeInventory writes an inventory and the password file it names into a
// new directory and returns the inventory's path.
func writeInventory(t *testing.T, body string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "pass"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "pass", "node-1"), []byte(bmcPassword+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "inventory.yaml")
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// waitUntil polls cond every 100ms until it holds or bound passes.
func waitUntil(t *testing.T, bound time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(bound)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, bound)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestInventory: bootyd --inventory brings both machines into the BMDB
// with their label, BMC, online and the credentials read from passwordFile;
// the host reconciler picks up the one behind a Redfish test BMC and, with
// those credentials, powers it on into PXE. The password shows in no log.
func TestInventory(t *testing.T) {
	mach := &bmcsim.MemMachine{}
	sim, err := bmcsim.NewRedfish(bmcsim.RedfishConfig{Machine: mach, Username: "admin", Password: bmcPassword, PowerDelay: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer sim.Close()
	ca := filepath.Join(t.TempDir(), "bmc-ca.pem")
	if err := os.WriteFile(ca, sim.CACertPEM(), 0o644); err != nil {
		t.Fatal(err)
	}
	inv := writeInventory(t, `machines:
- name: node-1
  bootMAC: 52:54:00:aa:00:01
  bmcAddress: `+sim.Address()+`
  credentialsName: bmc-node-1
  username: admin
  passwordFile: pass/node-1
  online: true
- name: node-2
  bootMAC: 52:54:00:aa:00:02
  sshAddress: 127.0.0.1:1
`)
	state := t.TempDir()
	d := startBootyd(t, "--insecure-http", "--listen", "127.0.0.1:0", "--state-dir", state, "--recover=false",
		"--bmc-ca-cert", ca, "--inventory", inv, "--provisioner-creation-rate", "10ms,1", "--reconcile-db-query-rate", "100ms,1")
	waitUntil(t, 2*time.Minute, "the reconciler powers node-1 on into PXE through its BMC", func() bool {
		return mach.State() == bmc.PowerOn && slices.Contains(mach.Boots(), bmc.DevicePXE)
	})
	d.stop(t)
	if !strings.Contains(d.stderr.String(), `msg="control loops started" reconcile=true recover=false provision=`+inv+` initialize=false`) {
		t.Errorf("no Provisioner in the started loops:\n%s", d.stderr.String())
	}
	for name, out := range map[string]string{"stderr": d.stderr.String(), "stdout": d.stdout.String()} {
		if strings.Contains(out, bmcPassword) {
			t.Errorf("bootyd's %s shows the BMC password", name)
		}
	}

	ctx, db, n1 := stateMachine(t, state, "node-1")
	if n1.Labels[manager.LabelProvider] != "inventory" || n1.BMC.Address != sim.Address() || n1.BMC.CredentialsRef != "bmc-node-1" ||
		!n1.Online || n1.BootMAC != "52:54:00:aa:00:01" {
		t.Errorf("node-1: labels %v, BMC %+v, online %v, boot MAC %s", n1.Labels, n1.BMC, n1.Online, n1.BootMAC)
	}
	if n1.State == bmdb.StateRegistering && n1.Status == bmdb.StatusError {
		t.Errorf("node-1 in error: %+v", n1)
	}
	n2, err := db.MachineByName(ctx, "node-2")
	if err != nil {
		t.Fatal(err)
	}
	if n2.Labels[manager.LabelProvider] != "inventory" || n2.BMC.Address != "" || n2.Online || n2.State != bmdb.StateRegistering {
		t.Errorf("node-2: labels %v, BMC %+v, online %v, state %s", n2.Labels, n2.BMC, n2.Online, n2.State)
	}
	c, err := db.GetCredentials(ctx, "bmc-node-1")
	if err != nil || c.Username != "admin" || c.Password != bmcPassword {
		t.Errorf("credentials bmc-node-1: %v, %v; want admin and the password file's line", c, err)
	}
}

// stateMachine opens the SQLite BMDB in a stopped bootyd's state dir
// (closed at cleanup) and returns the machine named name, with a context
// bounded to a minute.
func stateMachine(t *testing.T, state, name string) (context.Context, *bmdb.DB, bmdb.Machine) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	db, err := bmdb.Open(ctx, filepath.Join(state, "bmdb.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	m, err := db.MachineByName(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	return ctx, db, m
}

// runBootyd runs bootyd with args to its end (bounded) and returns its exit
// code and stderr.
func runBootyd(t *testing.T, args ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var errb bytes.Buffer
	cmd := exec.CommandContext(ctx, binary(t), args...)
	cmd.Stderr = &errb
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode(), errb.String()
	} else if err != nil {
		t.Fatal(err)
	}
	return 0, errb.String()
}

// TestLoopFlagErrors: a bad inventory and incomplete Initializer flags stop
// bootyd at start with exit 2 and an error naming the machine, field or
// flag; nothing is written to the database.
func TestLoopFlagErrors(t *testing.T) {
	good := writeInventory(t, "machines:\n- name: node-2\n  bootMAC: 52:54:00:aa:00:02\n  sshAddress: 127.0.0.1:22\n")
	exe := filepath.Join(t.TempDir(), "booty")
	if err := os.WriteFile(exe, []byte("#!/bin/true\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	badKnownHosts := filepath.Join(t.TempDir(), "known_hosts")
	if err := os.WriteFile(badKnownHosts, []byte("host ssh-ed25519 not-base64!\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	initFlags := func(extra ...string) []string {
		return append([]string{"--inventory", good, "--initializer-executable", exe, "--public-url", "http://127.0.0.1:8080"}, extra...)
	}
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"missing inventory", []string{"--inventory", "/nonexistent/inv.yaml"}, "--inventory: read inventory"},
		{"bad MAC", []string{"--inventory", writeInventory(t, "machines:\n- name: node-1\n  bootMAC: zz\n")}, "machine 1: machine node-1: bootMAC"},
		{"inline password", []string{"--inventory", writeInventory(t, "machines:\n- name: node-1\n  bootMAC: 52:54:00:aa:00:01\n  credentialsName: c\n  username: admin\n  password: "+bmcPassword+"\n")},
			"machine node-1: password: a password is not written in the inventory"},
		{"password file missing", []string{"--inventory", writeInventory(t, "machines:\n- name: node-1\n  bootMAC: 52:54:00:aa:00:01\n  credentialsName: c\n  username: admin\n  passwordFile: pass/nope\n")},
			"machine node-1: passwordFile: open"},
		{"username without password file", []string{"--inventory", writeInventory(t, "machines:\n- name: node-1\n  bootMAC: 52:54:00:aa:00:01\n  credentialsName: c\n  username: admin\n")},
			"machine node-1: username and passwordFile go together"},
		{"online not a boolean", []string{"--inventory", writeInventory(t, "machines:\n- name: node-1\n  bootMAC: 52:54:00:aa:00:01\n  online: maybe\n")}, "online"},
		{"unknown field", []string{"--inventory", writeInventory(t, "machines:\n- name: node-1\n  bootMAC: 52:54:00:aa:00:01\n  bmc: x\n")}, `unknown field "bmc"`},
		{"provisioner flag without inventory", []string{"--provisioner-chunk-size", "5"}, "--provisioner-chunk-size is given without --inventory"},
		{"initializer flag without executable", []string{"--inventory", good, "--initializer-known-hosts", badKnownHosts}, "--initializer-known-hosts is given without --initializer-executable"},
		{"ssh key path without executable", []string{"--ssh-key-path", "/tmp/k"}, "--ssh-key-path is given without --initializer-executable"},
		{"bad provisioner rate", []string{"--inventory", good, "--provisioner-creation-rate", "fast"}, "provisioner-creation-rate"},
		{"initializer without inventory", []string{"--initializer-executable", exe, "--initializer-insecure-ignore-host-key"}, "--initializer-executable needs --inventory"},
		{"initializer executable missing", []string{"--inventory", good, "--initializer-executable", exe + ".nope"}, "--initializer-executable"},
		{"initializer without host key check", initFlags(), "exactly one of --initializer-known-hosts and --initializer-insecure-ignore-host-key"},
		{"initializer with both host key options", initFlags("--initializer-known-hosts", badKnownHosts, "--initializer-insecure-ignore-host-key"), "exactly one of"},
		{"initializer bad known_hosts", initFlags("--initializer-known-hosts", badKnownHosts), "--initializer-known-hosts:"},
		{"initializer without endpoint", []string{"--inventory", good, "--initializer-executable", exe, "--initializer-insecure-ignore-host-key"}, "--initializer-endpoint or --public-url"},
		{"initializer bad endpoint", initFlags("--initializer-insecure-ignore-host-key", "--initializer-endpoint", "ftp://x"), `--initializer-endpoint "ftp://x"`},
		{"initializer relative target", initFlags("--initializer-insecure-ignore-host-key", "--initializer-target-path", "booty"), "TargetPath"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			state := t.TempDir()
			code, stderr := runBootyd(t, append([]string{"--insecure-http", "--listen", "127.0.0.1:0", "--state-dir", state}, tt.args...)...)
			if code != 2 || !strings.Contains(stderr, tt.want) {
				t.Fatalf("exit %d, stderr %q; want exit 2 mentioning %q", code, stderr, tt.want)
			}
			if strings.Contains(stderr, bmcPassword) {
				t.Errorf("stderr shows the password: %q", stderr)
			}
			if _, err := os.Stat(filepath.Join(state, "bmdb.db")); err == nil {
				t.Errorf("a refused start created the database")
			}
		})
	}
}

// TestInitializer: with --initializer-executable bootyd generates the SSH
// key under --state-dir (0600, its public half logged), keeps it across
// restarts, and its Initializer dials the inventory machine's sshAddress.
func TestInitializer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	dialed := make(chan struct{}, 16)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			dialed <- struct{}{}
			c.Close()
		}
	}()
	inv := writeInventory(t, "machines:\n- name: node-2\n  bootMAC: 52:54:00:aa:00:02\n  sshAddress: "+ln.Addr().String()+"\n")
	exe := filepath.Join(t.TempDir(), "booty")
	if err := os.WriteFile(exe, []byte("#!/bin/true\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	state := t.TempDir()
	args := []string{"--insecure-http", "--listen", "127.0.0.1:0", "--state-dir", state, "--reconcile=false", "--recover=false",
		"--public-url", "http://127.0.0.1:8080", "--inventory", inv, "--provisioner-creation-rate", "10ms,1",
		"--initializer-executable", exe, "--initializer-insecure-ignore-host-key", "--initializer-db-query-rate", "100ms,1"}
	d := startBootyd(t, args...)
	select {
	case <-dialed:
	case <-time.After(2 * time.Minute):
		t.Fatalf("the Initializer did not dial node-2's sshAddress within 2 minutes\n%s", d.stderr.String())
	}
	d.stop(t)
	if !strings.Contains(d.stderr.String(), `msg="control loops started" reconcile=false recover=false provision=`+inv+` initialize=true`) {
		t.Errorf("no Initializer in the started loops:\n%s", d.stderr.String())
	}
	keyPath := filepath.Join(state, "initializer_ed25519")
	fi, err := os.Stat(keyPath)
	if err != nil {
		t.Fatalf("no SSH key persisted under --state-dir: %v", err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("SSH key mode %v, want 0600", fi.Mode().Perm())
	}
	authorized := func(log string) string {
		_, rest, ok := strings.Cut(log, `msg="initializer SSH key" path=`+keyPath+` authorized_key="`)
		if !ok {
			t.Fatalf("no initializer SSH key line:\n%s", log)
		}
		line, _, _ := strings.Cut(rest, `"`)
		return line
	}
	first := authorized(d.stderr.String())
	b, err := os.ReadFile(keyPath)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := xssh.ParsePrivateKey(b)
	if err != nil {
		t.Fatal(err)
	}
	if want := strings.TrimSpace(string(xssh.MarshalAuthorizedKey(signer.PublicKey()))); first != want || !strings.HasPrefix(first, "ssh-ed25519 ") {
		t.Errorf("logged authorized key %q, the file's is %q", first, want)
	}
	d = startBootyd(t, args...)
	d.stop(t)
	if again := authorized(d.stderr.String()); again != first {
		t.Errorf("after a restart the key is %q, was %q", again, first)
	}
}

// TestInitializerTakesOverThroughSSHD: bootyd's Initializer, with the key
// at --ssh-key-path and the host key in --initializer-known-hosts, logs in
// to a real sshd (network namespace) at the inventory's sshAddress, uploads
// --initializer-executable (a fake booty that records its arguments and
// prints the takeover's OK line) and the CA, runs it with the endpoint
// (--public-url) and records AgentTakeover. A known_hosts with another key
// for the address makes the login fail and nothing run.
func TestInitializerTakesOverThroughSSHD(t *testing.T) {
	dir := t.TempDir()
	keyPath := filepath.Join(dir, "id_ed25519")
	ak, err := (&manager.SSHKey{KeyPersistPath: keyPath}).AuthorizedKey()
	if err != nil {
		t.Fatal(err)
	}
	sshdDir := t.TempDir()
	addr, hostKey := sshdtest.Start(t, sshdDir, ak)
	_, otherKey, _ := ed25519.GenerateKey(rand.Reader)
	otherSigner, err := xssh.NewSignerFromKey(otherKey)
	if err != nil {
		t.Fatal(err)
	}
	caPath, _, _ := selfSigned(t)
	exe := filepath.Join(dir, "fake-booty")
	fake := "#!/bin/sh\necho \"$@\" > \"$(dirname \"$0\")/takeover-args\"\necho \"booty takeover: ok (fake)\"\n"
	if err := os.WriteFile(exe, []byte(fake), 0o755); err != nil {
		t.Fatal(err)
	}
	inv := writeInventory(t, "machines:\n- name: node-3\n  bootMAC: 52:54:00:aa:00:03\n  sshAddress: "+addr+"\n")

	takeover := func(t *testing.T, hostKey xssh.PublicKey) (target string, d *daemon, state string) {
		kh := filepath.Join(t.TempDir(), "known_hosts")
		if err := os.WriteFile(kh, []byte(knownhosts.Line([]string{addr}, hostKey)+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		target = filepath.Join(t.TempDir(), "booty")
		state = t.TempDir()
		d = startBootyd(t, "--insecure-http", "--listen", "127.0.0.1:0", "--state-dir", state, "--reconcile=false", "--recover=false",
			"--public-url", "https://bootyd.example:8443", "--inventory", inv, "--provisioner-creation-rate", "10ms,1",
			"--initializer-executable", exe, "--initializer-ca-cert", caPath, "--initializer-target-path", target,
			"--initializer-known-hosts", kh, "--ssh-key-path", keyPath, "--initializer-db-query-rate", "100ms,1")
		return target, d, state
	}

	t.Run("known host", func(t *testing.T) {
		target, d, state := takeover(t, hostKey)
		argsFile := filepath.Join(filepath.Dir(target), "takeover-args")
		waitUntil(t, 2*time.Minute, "booty run on node-3 through sshd", func() bool {
			_, err := os.Stat(argsFile)
			return err == nil
		})
		waitUntil(t, time.Minute, "the AgentTakeover log line", func() bool {
			return strings.Contains(d.stderr.String(), `msg="machine taken over" component=initializer machine=node-3`)
		})
		d.stop(t)
		args, err := os.ReadFile(argsFile)
		if want := "takeover --server https://bootyd.example:8443 --ca-cert " + target + ".ca.pem\n"; err != nil || string(args) != want {
			t.Errorf("the fake booty ran with %q (%v), want %q", args, err, want)
		}
		if ca, _ := os.ReadFile(target + ".ca.pem"); !bytes.HasPrefix(ca, []byte("-----BEGIN CERTIFICATE-----")) {
			t.Errorf("uploaded CA: %.40q", ca)
		}
		ctx, db, m := stateMachine(t, state, "node-3")
		evs, err := db.Events(ctx, m.ID, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.ContainsFunc(evs, func(e bmdb.Event) bool { return e.Reason == manager.ReasonAgentTakeover }) {
			t.Errorf("node-3 has no %s event: %+v", manager.ReasonAgentTakeover, evs)
		}
	})
	t.Run("unknown host key", func(t *testing.T) {
		target, d, _ := takeover(t, otherSigner.PublicKey())
		waitUntil(t, 2*time.Minute, "the Initializer's failed login", func() bool {
			return strings.Contains(d.stderr.String(), "key mismatch")
		})
		d.stop(t)
		if _, err := os.Stat(target); !os.IsNotExist(err) {
			t.Errorf("booty was uploaded to a host with an unknown key: %v", err)
		}
	})
}
