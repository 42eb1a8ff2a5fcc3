package manager_test

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/booty-dev/booty/pkg/bmdb/bmdbtest"
	"github.com/booty-dev/booty/pkg/manager"
)

func caDER(t *testing.T) []byte {
	t.Helper()
	k, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"}, IsCA: true, BasicConstraintsValid: true,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	return der
}

func initializerConfig(t *testing.T, ca []byte) manager.InitializerConfig {
	return manager.InitializerConfig{ControlLoopConfig: loopConfig(t, 2), Executable: []byte("#!/bin/sh\necho fake booty\n"),
		TargetPath: "/tmp/booty", Endpoint: "https://bootyd.example:8443", EndpointCACertificate: ca,
		SSHConnectTimeout: 5 * time.Second, SSHExecTimeout: 10 * time.Second}
}

// TestInitializerFake: the Provisioner brings two machines in, the
// Initializer takes each over once through FakeSSHClient (booty and the CA
// uploaded, the takeover command run with the endpoint and the CA path),
// records the event, and leaves them alone afterwards; a wrong answer fails
// the work into a backoff.
func TestInitializerFake(t *testing.T) {
	for _, e := range bmdbtest.Engines() {
		t.Run(e.Name, func(t *testing.T) {
			db := open(t, e.DSN(t))
			ctx := testCtx(t)
			src := manager.NewMemSource("rack-1", memMachines(2)...)
			p, _ := manager.NewProvisioner(src, provisionerConfig(t, 10, 10))
			if _, err := p.Reconcile(ctx, db); err != nil {
				t.Fatal(err)
			}
			ssh := &manager.FakeSSHClient{}
			ca := caDER(t)
			in, err := manager.NewInitializer(src, ssh, initializerConfig(t, ca))
			if err != nil {
				t.Fatal(err)
			}
			runLoop(t, db, in)
			m0, _ := db.MachineByName(ctx, "node-0")
			m1, _ := db.MachineByName(ctx, "node-1")
			eventually(t, 30*time.Second, "both machines taken over", func() bool {
				return len(events(t, db, m0.ID, manager.ReasonAgentTakeover)) == 1 && len(events(t, db, m1.ID, manager.ReasonAgentTakeover)) == 1
			})
			time.Sleep(300 * time.Millisecond) // more rounds: no second takeover
			cmds := ssh.Commands()
			if len(cmds) != 2 {
				t.Fatalf("commands: %q, want one takeover per machine", cmds)
			}
			want := "10.0.1.1:22: '/tmp/booty' takeover --server 'https://bootyd.example:8443' --ca-cert '/tmp/booty.ca.pem'"
			if cmds[0] != want && cmds[1] != want {
				t.Fatalf("commands: %q, want %q", cmds, want)
			}
			up := ssh.Uploads()
			if !bytes.Equal(up["10.0.1.1:22:/tmp/booty"], []byte("#!/bin/sh\necho fake booty\n")) ||
				!strings.Contains(string(up["10.0.1.2:22:/tmp/booty.ca.pem"]), "BEGIN CERTIFICATE") {
				t.Fatalf("uploads: %v", up)
			}
			if n := len(events(t, db, m0.ID, manager.ReasonAgentTakeover)); n != 1 {
				t.Fatalf("%d takeover events for node-0", n)
			}
		})
	}
}

// TestInitializerFailure: a takeover that does not answer TakeoverOK, and a
// machine the source gives no SSH address, fail into the persisted backoff.
func TestInitializerFailure(t *testing.T) {
	db := open(t, bmdbtest.Engines()[0].DSN(t))
	ctx := testCtx(t)
	ms := memMachines(2)
	ms[1].SSHAddress = ""
	src := manager.NewMemSource("rack-1", ms...)
	p, _ := manager.NewProvisioner(src, provisionerConfig(t, 10, 10))
	if _, err := p.Reconcile(ctx, db); err != nil {
		t.Fatal(err)
	}
	in, err := manager.NewInitializer(src, &manager.FakeSSHClient{Answer: "kexec: permission denied\n"}, initializerConfig(t, nil))
	if err != nil {
		t.Fatal(err)
	}
	runLoop(t, db, in)
	for name, cause := range map[string]string{"node-0": "without \"booty takeover: ok\"", "node-1": "no SSH address"} {
		m, _ := db.MachineByName(ctx, name)
		eventually(t, 30*time.Second, name+" backs off", func() bool {
			b, err := db.GetBackoff(ctx, m.ID, manager.ProcessInitialize)
			return err == nil && strings.Contains(b.Cause, cause) && b.Until.After(time.Now().Add(time.Minute))
		})
	}
}

// TestInitializerConfig: Check names what is missing or wrong.
func TestInitializerConfig(t *testing.T) {
	for name, tc := range map[string]struct {
		edit func(*manager.InitializerConfig)
		want string
	}{
		"no executable":    {func(c *manager.InitializerConfig) { c.Executable = nil }, "Executable"},
		"relative target":  {func(c *manager.InitializerConfig) { c.TargetPath = "booty" }, "TargetPath"},
		"no endpoint":      {func(c *manager.InitializerConfig) { c.Endpoint = "" }, "Endpoint"},
		"no exec timeout":  {func(c *manager.InitializerConfig) { c.SSHExecTimeout = 0 }, "SSHExecTimeout"},
		"CA not DER":       {func(c *manager.InitializerConfig) { c.EndpointCACertificate = []byte("-----BEGIN") }, "EndpointCACertificate"},
		"no limiter":       {func(c *manager.InitializerConfig) { c.DBQueryLimiter = nil }, "DBQueryLimiter"},
		"no connect bound": {func(c *manager.InitializerConfig) { c.SSHConnectTimeout = -1 }, "SSHConnectTimeout"},
	} {
		t.Run(name, func(t *testing.T) {
			c := initializerConfig(t, nil)
			tc.edit(&c)
			if err := c.Check(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error naming %s", err, tc.want)
			}
		})
	}
}

// TestSSHKey: a missing key is generated as ed25519 and persisted 0600 in
// OpenSSH format; loading it again gives the same key; a file that is not a
// key is refused and left alone.
func TestSSHKey(t *testing.T) {
	path := filepath.Join(t.TempDir(), "id_ed25519")
	k1 := &manager.SSHKey{KeyPersistPath: path}
	s1, err := k1.Signer()
	if err != nil {
		t.Fatal(err)
	}
	if s1.PublicKey().Type() != "ssh-ed25519" {
		t.Fatalf("key type %s", s1.PublicKey().Type())
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("persisted key: %v %v", fi, err)
	}
	b, _ := os.ReadFile(path)
	if !strings.HasPrefix(string(b), "-----BEGIN OPENSSH PRIVATE KEY-----") {
		t.Fatalf("persisted key is not in OpenSSH format: %.40s", b)
	}
	k2 := &manager.SSHKey{KeyPersistPath: path}
	a1, _ := k1.AuthorizedKey()
	a2, err := k2.AuthorizedKey()
	if err != nil || a1 != a2 || !strings.HasPrefix(a1, "ssh-ed25519 ") {
		t.Fatalf("reloaded key differs: %q %q %v", a1, a2, err)
	}
	bad := filepath.Join(t.TempDir(), "bad")
	os.WriteFile(bad, []byte("not a key"), 0o600)
	if _, err := (&manager.SSHKey{KeyPersistPath: bad}).Signer(); err == nil {
		t.Fatal("a file that is not a key was accepted")
	}
	if b, _ := os.ReadFile(bad); string(b) != "not a key" {
		t.Fatal("the bad key file was overwritten")
	}
	if _, err := (&manager.SSHKey{}).Signer(); err == nil {
		t.Fatal("an SSHKey with neither Key nor path gave a signer")
	}
}

// TestFlags: the loops' flags fill their configs; files are read at parse
// time and a PEM CA becomes DER; the results pass Check.
func TestFlags(t *testing.T) {
	dir := t.TempDir()
	exe := filepath.Join(dir, "booty")
	os.WriteFile(exe, []byte("ELF..."), 0o755)
	caFile := filepath.Join(dir, "ca.pem")
	der := caDER(t)
	os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644)
	fs := pflag.NewFlagSet("bootyd", pflag.ContinueOnError)
	var ic manager.InitializerConfig
	var rc manager.RecovererConfig
	var pc manager.ProvisionerConfig
	key := manager.SSHKey{}
	ic.AddFlags(fs)
	rc.AddFlags(fs)
	pc.AddFlags(fs)
	key.AddFlags(fs)
	err := fs.Parse([]string{"--initializer-executable=" + exe, "--initializer-ca-cert=" + caFile, "--initializer-endpoint=https://bootyd:8443",
		"--initializer-target-path=/run/booty", "--initializer-parallelism=3", "--recoverer-heartbeat-timeout=5m", "--recoverer-db-query-rate=2s,2",
		"--provisioner-max-count=7", "--provisioner-chunk-size=3", "--ssh-key-path=" + filepath.Join(dir, "key")})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []interface{ Check() error }{&ic, &rc, &pc} {
		if err := c.Check(); err != nil {
			t.Fatal(err)
		}
	}
	if string(ic.Executable) != "ELF..." || !bytes.Equal(ic.EndpointCACertificate, der) || ic.Endpoint != "https://bootyd:8443" ||
		ic.TargetPath != "/run/booty" || ic.Parallelism != 3 {
		t.Fatalf("initializer config: %+v", ic)
	}
	if rc.HeartbeatTimeout != 5*time.Minute || rc.StartTimeout != 30*time.Minute || rc.DBQueryLimiter.Burst() != 2 || rc.Backoff.Initial != 30*time.Minute {
		t.Fatalf("recoverer config: %+v", rc)
	}
	if pc.MaxCount != 7 || pc.ChunkSize != 3 || key.KeyPersistPath != filepath.Join(dir, "key") {
		t.Fatalf("provisioner config %+v, key path %q", pc, key.KeyPersistPath)
	}
	if err := fs.Parse([]string{"--initializer-executable=" + filepath.Join(dir, "missing")}); err == nil || !strings.Contains(err.Error(), "initializer-executable") {
		t.Fatalf("missing executable file: %v", err)
	}
}
