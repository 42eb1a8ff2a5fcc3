//go:build e2e

package e2e

import (
	"net"
	"strconv"
	"strings"
	"testing"

	"github.com/booty-dev/booty/pkg/config"
	"github.com/booty-dev/booty/test/harness"
	"github.com/booty-dev/booty/test/vm"
)

// A config drive's network: section brings the agent's network up where no
// DHCP server answers: the guest's only NIC is a tap in the test's
// namespace (no QEMU user networking, so no slirp DHCP), the host end has
// 10.0.2.2/24, and the config gives the guest 10.0.2.15/24 via 10.0.2.2.
// bootyd is reached at 10.0.2.2:<port> through a forwarder to its loopback
// listener, so the lab's guest URLs hold.
func TestConfigDriveStaticNetwork(t *testing.T) {
	lab := newLab(t)
	const tap = "bootytap0"
	newTap(t, tap, harness.GuestHost+"/24")
	port := strconv.Itoa(lab.Port())
	forwardTCP(t, net.JoinHostPort(harness.GuestHost, port), net.JoinHostPort("127.0.0.1", port), nil)

	cfg, err := lab.DemoConfig()
	if err != nil {
		t.Fatal(err)
	}
	cfg.Server.URL = lab.GuestURL()
	cfg.Server.Token = "static-network-token"
	cfg.Network = config.NetworkSpec{Address: "10.0.2.15/24", Gateway: harness.GuestHost, DNS: []string{"10.0.2.3"}}
	drive := makeConfigDrive(t, cfg)
	m, err := lab.AddMachine(harness.MachineSpec{Config: cfg, Token: cfg.Server.Token,
		VMConfig: func(c *vm.Config) {
			c.Disks = append(c.Disks, configDriveDisk(drive))
			c.Net = false
			c.ExtraArgs = append(c.ExtraArgs, "-nic", "tap,ifname="+tap+",script=no,downscript=no,model=virtio-net-pci,mac="+c.MAC)
			c.Append = "console=ttyS0,115200 panic=-1 booty.insecure-http=1"
		}})
	if err != nil {
		t.Fatal(err)
	}
	bootToProvisioned(t, lab, m)
	console := m.VM().ConsoleText()
	for _, want := range []string{`msg="network up"`, `address=10.0.2.15/24`, `method=static`, `from="config network:"`} {
		if !strings.Contains(console, want) {
			t.Errorf("console does not say %s", want)
		}
	}
	if strings.Contains(console, "dhcp attempt failed") {
		t.Error("the agent ran DHCP although the config drive gave a static address")
	}
}
