package provision

import (
	"strings"
	"testing"
	"time"

	"github.com/booty-dev/booty/pkg/config"
	"github.com/booty-dev/booty/pkg/disk"
	"github.com/booty-dev/booty/pkg/image"
	"github.com/booty-dev/booty/pkg/network"
)

// TestGrammarsAgree runs each value through config validation and through
// the step that consumes it, and requires the same verdict: what validates
// is what runs. Each grammar's table holds the values that once passed
// validation and failed (or meant something else) at run time.
func TestGrammarsAgree(t *testing.T) {
	const sum = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	base := func() *config.MachineConfig {
		return &config.MachineConfig{APIVersion: config.APIVersion, Image: config.ImageSpec{URL: "https://192.0.2.1/os.img", Checksum: sum},
			Disk: config.DiskSpec{Device: "/dev/sda"}}
	}
	type grammar struct {
		name    string
		values  []string
		set     func(c *config.MachineConfig, v string)
		consume func(v string) error // the run-time consumer
	}
	grammars := []grammar{
		{"disk.rootPartitionSize", []string{"20G", "1.5T", "512M", "8191P", "8192P", "0.4", "0", "-1G", "20 gigs", "1.5"},
			func(c *config.MachineConfig, v string) { c.Disk.RootPartitionSize = v },
			func(v string) error { _, err := disk.ParseSize(v); return err }},
		{"disk.hints.model", []string{"samsung", "s== samsung", "<in> evo", "<or> a <or> b", "<all-in> samsung evo", "<like> x", "s=="},
			func(c *config.MachineConfig, v string) { c.Disk.Hints = config.RootDeviceHints{"model": v} },
			func(v string) error { _, err := disk.ParseHints(map[string]any{"model": v}); return err }},
		{"disk.hints.size", []string{"100", ">= 100", "<or> 100 <or> 200", "big", "0", "s== 100"},
			func(c *config.MachineConfig, v string) { c.Disk.Hints = config.RootDeviceHints{"size": v} },
			func(v string) error { _, err := disk.ParseHints(map[string]any{"size": v}); return err }},
		{"kubelet.providerID", []string{"aws:///eu-west-1a/i-0abc", "metal3://ns/host/uid", `a"b`, "a$b", "a`b`", "has space", "x\ny"},
			func(c *config.MachineConfig, v string) { c.Kubelet.ProviderID = v },
			func(v string) error { _, err := kubeletArgs(config.KubeletSpec{ProviderID: v}); return err }},
		{"kubelet.nodeLabels", []string{"role=worker", "example.com/zone=a", "-bad=x", "ok=bad value", "ok="},
			func(c *config.MachineConfig, v string) {
				k, val, _ := strings.Cut(v, "=")
				c.Kubelet.NodeLabels = map[string]string{k: val}
			},
			func(v string) error {
				k, val, _ := strings.Cut(v, "=")
				_, err := kubeletArgs(config.KubeletSpec{NodeLabels: map[string]string{k: val}})
				return err
			}},
		{"hostname", []string{"node-1", "node-1.example.com", "-bad-", "a_b", strings.Repeat("a", 64)},
			func(c *config.MachineConfig, v string) { c.Hostname = v },
			func(v string) error { return validHostname(v) }},
		{"network.interface", []string{"eth0", "enp1s0f0np0", "eth0\x00", "eth0:1", "a/b", ".", "this-name-is-too-long"},
			func(c *config.MachineConfig, v string) { c.Network.Interface = v; c.Network.Address = "192.0.2.10/24" },
			func(v string) error {
				_, err := network.ParseStatic(v, "192.0.2.10/24", "", nil)
				return err
			}},
		{"image.checksum", []string{sum, "SHA256:" + sum[7:], "sha512:" + strings.Repeat("ab", 64), "sha256:abc", "md5:" + sum[7:39], "sha256:" + strings.Repeat("g", 64), sum + " "},
			func(c *config.MachineConfig, v string) { c.Image.Checksum = v },
			func(v string) error { return image.CheckChecksum(v) }},
		{"image.url", []string{"https://192.0.2.1/os.img", "http://192.0.2.1/os.img", "file:///srv/os.img", "ftp://192.0.2.1/os.img", "https:///os.img", "file://host/os.img", "https://u:p@192.0.2.1/os.img"},
			func(c *config.MachineConfig, v string) { c.Image.URL = v },
			func(v string) error { return image.CheckSource(v) }},
		{"image.url (oci)", []string{"oci://r.example.com/os/debian@" + sum, "oci+http://10.0.0.5:5000/os/debian@" + sum,
			"oci://r.example.com/os/debian:v1@" + sum, "oci://r.example.com/os/debian:v1", "oci://r.example.com/OS@" + sum},
			func(c *config.MachineConfig, v string) { c.Image.URL = v; c.Image.ImageChecksum = sum },
			func(v string) error { _, err := image.ParseOCIRef(v); return err }},
	}
	for _, g := range grammars {
		for _, v := range g.values {
			c := base()
			g.set(c, v)
			verr := c.Validate()
			cerr := g.consume(v)
			if (verr == nil) != (cerr == nil) {
				t.Errorf("%s %q: validation says %v, the consumer says %v", g.name, v, verdict(verr), verdict(cerr))
			}
		}
	}
	// onFailure.delay and mellanox.numVFs are consumed as validated; their
	// bounds are the config's constants, which SetupMellanox checks too.
	c := base()
	c.OnFailure.Delay.Duration = 2562047 * time.Hour
	if c.Validate() == nil {
		t.Error("onFailure.delay 2562047h validated")
	}
	c = base()
	c.Mellanox.NumVFs = 2000000000
	if c.Validate() == nil {
		t.Error("mellanox.numVFs 2000000000 validated")
	}
	if _, err := (&Configurator{}).SetupMellanox(t.Context(), 2000000000); err == nil {
		t.Error("SetupMellanox accepted 2000000000 VFs")
	}
}

func verdict(err error) string {
	if err == nil {
		return "ok"
	}
	return "error (" + err.Error() + ")"
}
