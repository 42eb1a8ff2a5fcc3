package provision

import (
	"fmt"
	"path"

	"github.com/booty-dev/booty/pkg/config"
	"github.com/booty-dev/booty/pkg/network"
)

// Files written by ConfigureNetwork.
const (
	NetplanDir     = "/etc/netplan"
	NetplanFile    = "/etc/netplan/90-booty.yaml"
	NetworkdDir    = "/etc/systemd/network"
	networkdPrefix = "booty-" // in 10-booty-*.netdev, 20-booty-*.network
)

// ConfigureNetwork writes the config's bonds, VLANs and links (network:
// with persist) into the installed OS, so it comes up on the same bonds
// and addresses as the agent: netplan YAML at NetplanFile when the image
// has NetplanDir, else systemd-networkd .netdev and .network files in
// NetworkdDir. Physical links are matched by the permanent MAC the agent
// reads for the name it knows them by (a link it cannot find is matched
// by name, with a warning). A network section that does not parse is an
// error and nothing is written; without persist or a setup it does nothing.
func (c *Configurator) ConfigureNetwork(cfg *config.MachineConfig) error {
	n := cfg.Network
	if !n.Persist || !n.HasSetup() {
		c.log.Info("network of the installed OS left as in the image")
		return nil
	}
	s, err := n.Setup()
	if err != nil {
		return fmt.Errorf("configure network: %w", err)
	}
	macsOf := c.linkMACs
	if macsOf == nil {
		macsOf = network.PermanentMACs
	}
	macs, missing := macsOf(network.PhysicalLinks(s))
	if len(missing) > 0 {
		c.log.Warn("links not found on this machine are matched by name in the installed OS", "links", missing)
	}
	root := c.root()
	if root.exists(NetplanDir) {
		b, err := network.RenderNetplan(s, macs)
		if err != nil {
			return fmt.Errorf("configure network: %w", err)
		}
		if err := root.writeFile(NetplanFile, b, 0o600); err != nil { // netplan warns about readable files
			return fmt.Errorf("configure network: %w", err)
		}
		c.log.Info("network configured for netplan", "file", NetplanFile)
		return nil
	}
	var names []string
	for _, f := range network.RenderNetworkd(s, macs) {
		p := path.Join(NetworkdDir, f.Name)
		if err := root.writeFile(p, []byte(f.Content), 0o644); err != nil {
			return fmt.Errorf("configure network: %w", err)
		}
		names = append(names, f.Name)
	}
	c.log.Info("network configured for systemd-networkd", "dir", NetworkdDir, "files", names)
	return nil
}
