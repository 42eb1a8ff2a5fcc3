//go:build e2e

package e2e

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/booty-dev/booty/pkg/api"
	"github.com/booty-dev/booty/pkg/entropy"
	"github.com/booty-dev/booty/test/harness"
	"github.com/booty-dev/booty/test/vm"
)

// withoutHardwareRNG makes a VM with no hardware random number generator:
// no virtio-rng device and a CPU model without RDRAND (qemu64), as many
// VMs and older servers are. The kernel's CRNG is then not ready for
// minutes unless someone blocks in getrandom.
func withoutHardwareRNG(c *vm.Config) {
	c.NoRNG = true
	c.CPU = "qemu64"
}

// sourcesLine is the agent's start-up line on such a machine.
const noRNGSources = `msg="random number sources" rdrand=false hwrng=none`

// A machine without a hardware RNG provisions from a plain-http bootyd:
// nothing on the way (DHCP, config, image) waits for the kernel's CRNG.
func TestNoHardwareRNGPlainHTTP(t *testing.T) {
	lab := newLab(t)
	m, st := provision(t, lab, harness.MachineSpec{
		ExtraCmdline: "booty.insecure-http=1",
		VMConfig:     withoutHardwareRNG,
	})
	if st.State != api.StateProvisioned {
		t.Fatalf("state = %q; steps %v", st.State, stepStates(st))
	}
	console := m.VM().ConsoleText()
	if !strings.Contains(console, noRNGSources) {
		t.Fatalf("the guest has a hardware RNG or RDRAND: console lacks %q", noRNGSources)
	}
	if err := harness.DiskHoldsImage(m.Disk, lab.FilePath(harness.DemoImage)); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(console, entropy.Message) {
		t.Error("the agent waited for the kernel's random number generator for plain http")
	}
}

// The same machine against an https bootyd (the config drive names it, with
// its CA, for reports and the image): the agent says it waits for the
// kernel's random number generator, then provisions, or fails naming that
// reason, within the bound.
func TestNoHardwareRNGHTTPS(t *testing.T) {
	lab := newLab(t)
	caPEM, tlsConf := selfSignedTLS(t, net.ParseIP(harness.GuestHost))
	front := forwardTCP(t, "127.0.0.1:0", net.JoinHostPort("127.0.0.1", strconv.Itoa(lab.Port())), tlsConf)
	_, port, _ := net.SplitHostPort(front)
	httpsURL := "https://" + net.JoinHostPort(harness.GuestHost, port)

	cfg, err := lab.DemoConfig()
	if err != nil {
		t.Fatal(err)
	}
	cfg.Server.URL = httpsURL
	cfg.Server.CACert = caPEM
	cfg.Server.Token = "no-rng-https-token"
	cfg.Image.URL = httpsURL + "/files/" + harness.DemoImageZst
	drive := makeConfigDrive(t, cfg)
	m, err := lab.AddMachine(harness.MachineSpec{Config: cfg, Token: cfg.Server.Token,
		VMConfig: func(c *vm.Config) {
			withoutHardwareRNG(c)
			c.Disks = append(c.Disks, configDriveDisk(drive))
			c.Append = "console=ttyS0,115200 panic=-1"
		}})
	if err != nil {
		t.Fatal(err)
	}
	a := buildArtifacts(t)
	g := m.BootT(t, a.kernel, a.initrd)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	if _, err := g.ExpectString(ctx, entropy.Message); err != nil {
		t.Fatalf("the agent never said it waits for the kernel's random number generator: %v", err)
	}
	st, err := m.WaitOutcome(ctx)
	console := g.ConsoleText()
	if !strings.Contains(console, noRNGSources) {
		t.Fatalf("the guest has a hardware RNG or RDRAND: console lacks %q", noRNGSources)
	}
	switch {
	case err == nil && st.State == api.StateProvisioned:
		if !strings.Contains(console, "random number generator is ready") {
			t.Error("provisioned, but the console does not say how long the agent waited")
		}
		// The report has it too: the agent's shipped log, as bootyd recorded it.
		if last, ok := m.State(); ok {
			st = last
		}
		said := false
		for _, l := range st.Logs {
			said = said || strings.Contains(l.Message, entropy.Message)
		}
		if !said {
			t.Errorf("bootyd's record of the agent's log lacks %q (%d lines)", entropy.Message, len(st.Logs))
		}
		if err := harness.DiskHoldsImage(m.Disk, lab.FilePath(harness.DemoImage)); err != nil {
			t.Fatal(err)
		}
	case strings.Contains(console, "random number generator is not ready after waiting"):
		t.Logf("failed with the reason within the bound (state %q, wait error %v)", st.State, err)
	case errors.Is(err, harness.ErrNoOutcome):
		t.Fatalf("the VM ended without an outcome and without the reason on the console")
	default:
		t.Fatalf("state %q, err %v; steps %v", st.State, err, stepStates(st))
	}
}

// selfSignedTLS makes a CA certificate that is also the server's, for ip,
// and returns its PEM and a server config presenting it.
func selfSignedTLS(t *testing.T, ip net.IP) (string, *tls.Config) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "booty e2e bootyd"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:           []net.IP{ip},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})),
		&tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}, MinVersion: tls.VersionTLS12}
}
