package manager_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"github.com/booty-dev/booty/pkg/bmdb"
	"github.com/booty-dev/booty/pkg/bmdb/bmdbtest"
	"github.com/booty-dev/booty/pkg/manager"
)

func memMachines(n int) []manager.SourceMachine {
	var out []manager.SourceMachine
	for i := range n {
		out = append(out, manager.SourceMachine{Name: fmt.Sprintf("node-%d", i), BootMAC: mac(0x100 + i),
			BMCAddress: fmt.Sprintf("redfish://10.0.0.%d/redfish/v1/Systems/1", i+1), CredentialsName: "bmc", SSHAddress: fmt.Sprintf("10.0.1.%d:22", i+1)})
	}
	return out
}

func provisionerConfig(t *testing.T, maxCount, chunk uint) manager.ProvisionerConfig {
	return manager.ProvisionerConfig{MaxCount: maxCount, ChunkSize: chunk, Logger: logger(t),
		ReconcileLoopLimiter: rate.NewLimiter(rate.Every(20*time.Millisecond), 1), DeviceCreationLimiter: rate.NewLimiter(rate.Inf, 1)}
}

// TestProvisionerReconcile: rounds create ChunkSize machines each up to
// MaxCount, labelled and with their BMC; the guard refuses a round when the
// source lost a managed machine or has a used one the BMDB lacks, and lets
// it pass once the machine failed (status error).
func TestProvisionerReconcile(t *testing.T) {
	db := open(t, bmdbtest.Engines()[0].DSN(t))
	ctx := testCtx(t)
	src := manager.NewMemSource("rack-1", memMachines(5)...)
	p, err := manager.NewProvisioner(src, provisionerConfig(t, 3, 2))
	if err != nil {
		t.Fatal(err)
	}
	for round, want := range []int{2, 1, 0} {
		n, err := p.Reconcile(ctx, db)
		if err != nil || n != want {
			t.Fatalf("round %d: created %d, %v; want %d", round, n, err, want)
		}
	}
	ms, _ := db.ListMachines(ctx, bmdb.ListOptions{})
	if len(ms) != 3 {
		t.Fatalf("%d machines in the BMDB, want 3", len(ms))
	}
	m := ms[0]
	if m.Name != "node-0" || m.Labels[manager.LabelProvider] != "rack-1" || m.BMC.Address != "redfish://10.0.0.1/redfish/v1/Systems/1" ||
		m.BMC.CredentialsRef != "bmc" || m.State != bmdb.StateRegistering || m.BootMAC != mac(0x100) {
		t.Fatalf("machine: %+v", m)
	}
	if sm, _ := src.Get(ctx, "node-2"); sm.Availability != manager.AvailabilityUsed {
		t.Fatalf("node-2 in the source: %s, want used", sm.Availability)
	}

	// The source lost node-1: refuse, naming it.
	lost, _ := src.Get(ctx, "node-1")
	src.Remove("node-1")
	p.MaxCount = 5
	n, err := p.Reconcile(ctx, db)
	if !errors.Is(err, manager.ErrDisagree) || !strings.Contains(err.Error(), "node-1 is in the BMDB but not in the source") || n != 0 {
		t.Fatalf("lost machine: created %d, %v", n, err)
	}
	// Once the machine failed the guard lets the round pass.
	m1, _ := db.MachineByName(ctx, "node-1")
	if _, err := db.Transition(ctx, m1.ID, bmdb.Transition{To: bmdb.StateRegistering, Reason: "Test",
		Error: &bmdb.ErrorInfo{Type: bmdb.ErrorRegistration, Message: "gone"}}); err != nil {
		t.Fatal(err)
	}
	if n, err := p.Reconcile(ctx, db); err != nil || n != 2 {
		t.Fatalf("after the machine failed: created %d, %v; want 2", n, err)
	}
	// A used machine the BMDB lacks: refuse.
	lost.Availability = manager.AvailabilityUsed
	lost.Name, lost.BootMAC = "node-9", mac(0x109)
	src.Set(lost)
	if _, err := p.Reconcile(ctx, db); !errors.Is(err, manager.ErrDisagree) || !strings.Contains(err.Error(), "node-9 is used in the source") {
		t.Fatalf("used machine missing in the BMDB: %v", err)
	}
}

// TestProvisionerRun: Run brings the inventory file's machines in and stops
// with its context.
func TestProvisionerRun(t *testing.T) {
	db := open(t, bmdbtest.Engines()[0].DSN(t))
	path := filepath.Join(t.TempDir(), "inventory.yaml")
	os.WriteFile(path, []byte(`machines:
- name: node-a
  bootMAC: 52:54:00:00:0a:01
  bmcAddress: ipmi://10.0.0.1:623
  credentialsName: bmc-a
  username: admin
  passwordFile: pass/bmc-a
  online: true
- name: node-b
  bootMAC: "52:54:00:00:0a:02"
  bmcAddress: redfish://10.0.0.2/redfish/v1/Systems/1
  credentialsName: bmc-b
  sshAddress: 10.0.1.2:22
`), 0o644)
	os.Mkdir(filepath.Join(filepath.Dir(path), "pass"), 0o700)
	os.WriteFile(filepath.Join(filepath.Dir(path), "pass", "bmc-a"), []byte("s3cret pass\nignored\n"), 0o600)
	inv, err := manager.LoadInventory("lab", path)
	if err != nil {
		t.Fatal(err)
	}
	p, err := manager.NewProvisioner(inv, provisionerConfig(t, 10, 20))
	if err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t)
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- p.Run(rctx, db) }()
	eventually(t, 30*time.Second, "inventory machines in the BMDB", func() bool {
		ms, _ := db.ListMachines(ctx, bmdb.ListOptions{})
		return len(ms) == 2
	})
	// Further rounds leave the inventory's machines alone (availability
	// unknown: present in both is agreement).
	time.Sleep(100 * time.Millisecond)
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("run: %v", err)
	}
	b, _ := db.MachineByName(ctx, "node-b")
	if b.BMC.Address != "redfish://10.0.0.2/redfish/v1/Systems/1" || b.Labels[manager.LabelProvider] != "lab" || b.Online {
		t.Fatalf("node-b: %+v", b)
	}
	// node-a's credentials were stored with it; node-b names credentials
	// the inventory does not give, left to the operator.
	a, _ := db.MachineByName(ctx, "node-a")
	if !a.Online || a.BMC.CredentialsRef != "bmc-a" {
		t.Fatalf("node-a: online %v, credentials %q; want online, bmc-a", a.Online, a.BMC.CredentialsRef)
	}
	if c, err := db.GetCredentials(ctx, "bmc-a"); err != nil || c.Username != "admin" || c.Password != "s3cret pass" {
		t.Fatalf("credentials bmc-a: %v, %v; want admin with the file's first line", c, err)
	}
	if _, err := db.GetCredentials(ctx, "bmc-b"); !errors.Is(err, bmdb.ErrNotFound) {
		t.Fatalf("credentials bmc-b: %v, want not found", err)
	}
}

// TestLoadInventory: bad inventories are refused with an error naming the
// machine and the field.
func TestLoadInventory(t *testing.T) {
	for name, tc := range map[string]struct{ body, want string }{
		"bad MAC":          {`{"machines":[{"name":"a","bootMAC":"zz"}]}`, "machine 1: machine a: bootMAC"},
		"bad name":         {`{"machines":[{"name":"A_b","bootMAC":"52:54:00:00:00:01"}]}`, `machine name "A_b"`},
		"bad BMC":          {`{"machines":[{"name":"a","bootMAC":"52:54:00:00:00:01","bmcAddress":"ftp://x","credentialsName":"c"}]}`, "bmcAddress"},
		"no credentials":   {`{"machines":[{"name":"a","bootMAC":"52:54:00:00:00:01","bmcAddress":"ipmi://x"}]}`, "without credentialsName"},
		"duplicate MAC":    {`{"machines":[{"name":"a","bootMAC":"52:54:00:00:00:01"},{"name":"b","bootMAC":"52-54-00-00-00-01"}]}`, "machine 2 (b): MAC 52:54:00:00:00:01 is also machine a's"},
		"unknown field":    {`{"machines":[{"name":"a","bootMAC":"52:54:00:00:00:01","bmc":"x"}]}`, "unknown field"},
		"duplicate name":   {`{"machines":[{"name":"a","bootMAC":"52:54:00:00:00:01"},{"name":"a","bootMAC":"52:54:00:00:00:02"}]}`, "name a is also"},
		"not an inventory": {`[1,2]`, "inventory"},
		"inline password":  {`{"machines":[{"name":"a","bootMAC":"52:54:00:00:00:01","credentialsName":"c","username":"u","password":"p"}]}`, "machine a: password: a password is not written in the inventory"},
		"no passwordFile":  {`{"machines":[{"name":"a","bootMAC":"52:54:00:00:00:01","credentialsName":"c","username":"u"}]}`, "machine a: username and passwordFile go together"},
		"no username":      {`{"machines":[{"name":"a","bootMAC":"52:54:00:00:00:01","credentialsName":"c","passwordFile":"good.pass"}]}`, "machine a: username and passwordFile go together"},
		"username no name": {`{"machines":[{"name":"a","bootMAC":"52:54:00:00:00:01","username":"u","passwordFile":"good.pass"}]}`, "machine a: username without credentialsName"},
		"missing password": {`{"machines":[{"name":"a","bootMAC":"52:54:00:00:00:01","credentialsName":"c","username":"u","passwordFile":"nope.pass"}]}`, "machine a: passwordFile: open"},
		"empty password":   {`{"machines":[{"name":"a","bootMAC":"52:54:00:00:00:01","credentialsName":"c","username":"u","passwordFile":"empty.pass"}]}`, "empty.pass: its first line is empty"},
		"online not bool":  {`{"machines":[{"name":"a","bootMAC":"52:54:00:00:00:01","online":"yes"}]}`, "online"},
		"credentials clash": {`{"machines":[{"name":"a","bootMAC":"52:54:00:00:00:01","credentialsName":"c","username":"u","passwordFile":"good.pass"},` +
			`{"name":"b","bootMAC":"52:54:00:00:00:02","credentialsName":"c","username":"root","passwordFile":"good.pass"}]}`, "machine 2 (b): credentialsName c: other username or password than machine a's"},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "inv.json")
			os.WriteFile(path, []byte(tc.body), 0o644)
			os.WriteFile(filepath.Join(dir, "good.pass"), []byte("hunter22\n"), 0o600)
			os.WriteFile(filepath.Join(dir, "empty.pass"), []byte("\nhunter22\n"), 0o600)
			_, err := manager.LoadInventory("lab", path)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error containing %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "hunter22") {
				t.Fatalf("the error shows the password: %v", err)
			}
		})
	}
}
