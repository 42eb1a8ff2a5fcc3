package config

import (
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net/netip"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/booty-dev/booty/pkg/disk"
	"github.com/booty-dev/booty/pkg/httpfetch"
	"github.com/booty-dev/booty/pkg/image"
	"github.com/booty-dev/booty/pkg/names"
	"github.com/booty-dev/booty/pkg/network"
)

// ValidationError lists every problem found in a MachineConfig, each as
// "field.path: what is wrong". Error joins them one per line.
type ValidationError struct {
	Problems []string
}

func (e *ValidationError) Error() string {
	return strings.Join(e.Problems, "\n")
}

// problem is one finding, kept with its field path so decoding problems can
// hide validation problems about the same field.
type problem struct {
	field string
	msg   string
}

func (p problem) String() string {
	if p.field == "" {
		return p.msg
	}
	return p.field + ": " + p.msg
}

func newValidationError(ps []problem) *ValidationError {
	e := &ValidationError{Problems: make([]string, len(ps))}
	for i, p := range ps {
		e.Problems[i] = p.String()
	}
	return e
}

// Validate checks the whole config and returns a *ValidationError listing
// every problem, or nil. Empty mode, handoff and onFailure.action stand for
// their defaults, so Validate works before and after ApplyDefaults.
// Secret values (server.token, cloudInit.userData) are never quoted in a problem.
func (c *MachineConfig) Validate() error {
	if ps := c.validate(); len(ps) > 0 {
		return newValidationError(ps)
	}
	return nil
}

var ()

func (c *MachineConfig) validate() []problem {
	var ps []problem
	add := func(field, format string, args ...any) {
		ps = append(ps, problem{field, fmt.Sprintf(format, args...)})
	}

	switch c.APIVersion {
	case APIVersion:
	case "":
		add("apiVersion", "required, want %q", APIVersion)
	default:
		add("apiVersion", "unsupported %q, want %q", c.APIVersion, APIVersion)
	}

	mode := c.Mode
	switch mode {
	case "", ModeProvision, ModeDeprovision, ModeSoftDeprovision:
	default:
		add("mode", "unknown mode %q, want %s, %s or %s", mode, ModeProvision, ModeDeprovision, ModeSoftDeprovision)
	}
	provision := mode == "" || mode == ModeProvision

	if c.Hostname != "" {
		if err := checkHostname(c.Hostname); err != "" {
			add("hostname", "%s", err)
		}
	}

	// image
	switch {
	case c.Image.URL == "" && provision:
		add("image.url", "required in mode provision")
	case c.Image.URL != "":
		if err := checkImageURL(c.Image.URL); err != "" {
			add("image.url", "%s", err)
		}
	}
	for _, f := range []struct{ name, v string }{{"image.checksum", c.Image.Checksum}, {"image.imageChecksum", c.Image.ImageChecksum}, {"image.bmapChecksum", c.Image.BmapChecksum}} {
		// write-image parses it with the same function.
		if f.v != "" && image.CheckChecksum(f.v) != nil {
			add(f.name, "want \"sha256:\" and 64 hex digits or \"sha512:\" and 128 hex digits, got %q", truncate(f.v, 80))
		}
	}
	if provision && c.Image.URL != "" && c.Image.Checksum == "" && c.Image.ImageChecksum == "" {
		add("image", "checksum or imageChecksum is required in mode provision: booty never leaves an unverified image bootable")
	}
	if c.Image.BmapURL != "" {
		if err := CheckURL(c.Image.BmapURL, image.BmapSchemes...); err != "" {
			add("image.bmapUrl", "%s", err)
		}
	}
	if c.Image.BmapChecksum != "" && c.Image.BmapURL == "" {
		add("image.bmapChecksum", "set but image.bmapUrl is empty")
	}

	// disk
	if provision && c.Disk.Device == "" && len(c.Disk.Hints) == 0 {
		add("disk", "device or hints is required in mode provision: booty never guesses the target disk")
	}
	if c.Disk.Device != "" && (!strings.HasPrefix(c.Disk.Device, "/dev/") || len(c.Disk.Device) <= len("/dev/")) {
		add("disk.device", "want a path under /dev/, got %q", c.Disk.Device)
	}
	for _, k := range sortedKeys(c.Disk.Hints) {
		// select-disk parses them with the same function.
		if _, err := disk.ParseHint(k, c.Disk.Hints[k]); err != nil {
			add("disk.hints."+k, "%v", err)
		}
	}
	if s := c.Disk.RootPartitionSize; s != "" && s != RootPartitionKeep {
		// The grow step parses it with the same function.
		if _, err := disk.ParseSize(s); err != nil {
			add("disk.rootPartitionSize", "%v, or \"keep\"", err)
		}
	}

	// dns
	for i, ns := range c.DNS.Nameservers {
		if _, err := netip.ParseAddr(ns); err != nil {
			add(fmt.Sprintf("dns.nameservers[%d]", i), "want an IP address, got %q", ns)
		}
	}
	for i, d := range c.DNS.Search {
		if err := checkHostname(strings.TrimSuffix(d, ".")); err != "" {
			add(fmt.Sprintf("dns.search[%d]", i), "%s", err)
		}
	}

	for i, p := range c.KernelParams {
		switch {
		case strings.TrimSpace(p) == "":
			add(fmt.Sprintf("kernelParams[%d]", i), "must not be empty")
		case strings.ContainsAny(p, "\n\r\x00"):
			add(fmt.Sprintf("kernelParams[%d]", i), "must not contain a newline or NUL")
		}
	}

	for _, k := range sortedKeys(c.Kubelet.NodeLabels) {
		// The configurator checks them with the same functions.
		if err := names.LabelKey(k); err != nil {
			add("kubelet.nodeLabels."+k, "%v", err)
		}
		if err := names.LabelValue(c.Kubelet.NodeLabels[k]); err != nil {
			add("kubelet.nodeLabels."+k, "%v", err)
		}
	}
	if id := c.Kubelet.ProviderID; id != "" {
		if err := names.ProviderID(id); err != nil {
			add("kubelet.providerID", "%v", err)
		}
	}

	for i, cmd := range c.PostProvisionCommands {
		if strings.TrimSpace(cmd) == "" {
			add(fmt.Sprintf("postProvisionCommands[%d]", i), "must not be empty")
		}
	}

	if n := c.Mellanox.NumVFs; n < 0 || n > MaxNumVFs {
		add("mellanox.numVFs", "want 0 to %d (the PCI SR-IOV limit), got %d", MaxNumVFs, n)
	}

	switch c.Handoff {
	case "", HandoffKexec, HandoffReboot, HandoffPoweroff:
	default:
		add("handoff", "unknown handoff %q, want %s, %s or %s", c.Handoff, HandoffKexec, HandoffReboot, HandoffPoweroff)
	}
	switch c.OnFailure.Action {
	case "", FailureReboot, FailureHold, FailurePoweroff:
	default:
		add("onFailure.action", "unknown action %q, want %s, %s or %s", c.OnFailure.Action, FailureReboot, FailureHold, FailurePoweroff)
	}
	if d := c.OnFailure.Delay.Duration; d < 0 || d > MaxFailureDelay {
		add("onFailure.delay", "want 0s to %s, got %s", MaxFailureDelay, d)
	}

	// server
	if c.Server.URL != "" {
		if err := CheckURL(c.Server.URL, "http", "https"); err != "" {
			add("server.url", "%s", err)
		}
	}
	if c.Server.Token != "" {
		if c.Server.URL == "" {
			add("server.token", "set but server.url is empty")
		}
		if strings.ContainsAny(c.Server.Token, " \t\r\n") {
			add("server.token", "must not contain whitespace") // the value is secret: never quote it
		}
	}
	if c.Server.CACert != "" {
		if msg := checkPEM(c.Server.CACert); msg != "" {
			add("server.caCert", "%s", msg)
		}
	}

	// cloudInit (userData is secret and free-form: never inspected here)
	for _, f := range []struct{ name, v string }{{"cloudInit.metaData", c.CloudInit.MetaData}, {"cloudInit.networkConfig", c.CloudInit.NetworkConfig}} {
		if f.v == "" {
			continue
		}
		if _, err := yaml.YAMLToJSON([]byte(f.v)); err != nil {
			add(f.name, "not valid YAML: %v", err)
		}
	}

	// network
	n := c.Network
	if n.Interface != "" {
		if err := network.CheckLinkName(n.Interface); err != nil {
			add("network.interface", "%q: %v", n.Interface, err)
		}
	}
	var prefix netip.Prefix
	if n.Address != "" {
		p, err := netip.ParsePrefix(n.Address)
		switch {
		case err != nil:
			add("network.address", "want an address in CIDR form like \"192.0.2.10/24\", got %q", n.Address)
		case !p.Addr().Is4():
			// The agent's own network is IPv4 (ip=, DHCPv4): network.ParseStatic,
			// which applies it, takes nothing else.
			add("network.address", "want an IPv4 address in CIDR form like \"192.0.2.10/24\" (IPv6 addresses go under network.links), got %q", n.Address)
		default:
			prefix = p
		}
	}
	if n.Gateway != "" {
		gw, err := netip.ParseAddr(n.Gateway)
		switch {
		case err != nil:
			add("network.gateway", "want an IP address, got %q", n.Gateway)
		case n.Address == "":
			add("network.gateway", "set but network.address is empty (a gateway needs a static address)")
		case prefix.IsValid() && gw.Is4() != prefix.Addr().Is4():
			add("network.gateway", "%s is not in the address family of network.address %s", n.Gateway, n.Address)
		}
	}
	for i, ns := range n.DNS {
		if _, err := netip.ParseAddr(ns); err != nil {
			add(fmt.Sprintf("network.dns[%d]", i), "want an IP address, got %q", ns)
		}
	}
	for i, d := range n.Search {
		if err := checkHostname(strings.TrimSuffix(d, ".")); err != "" {
			add(fmt.Sprintf("network.search[%d]", i), "%s", err)
		}
	}
	n.setup(add)
	if n.Persist && !n.HasSetup() {
		add("network.persist", "set but there are no bonds, vlans or links to write")
	}
	if c.Health != nil {
		c.Health.validate(add)
	}
	return ps
}

// checkHostname returns why h is not an RFC 1123 host name, or "".
func checkHostname(h string) string {
	if err := names.Hostname(h); err != nil {
		return err.Error()
	}
	return ""
}

// checkImageURL checks an image source with pkg/image's grammar
// (image.CheckSource), which Write applies too.
func checkImageURL(s string) string {
	if err := image.CheckSource(s); err != nil {
		return strings.TrimSuffix(err.Error(), ": "+httpfetch.ErrBadURL.Error())
	}
	return ""
}

// CheckURL returns why s is not an absolute URL with one of schemes, or
// "": httpfetch.ParseURL, the grammar every fetch of the agent uses.
func CheckURL(s string, schemes ...string) string {
	if _, err := httpfetch.ParseURL(s, schemes...); err != nil {
		return strings.TrimSuffix(err.Error(), ": "+httpfetch.ErrBadURL.Error())
	}
	return ""
}

// checkPEM checks that s holds at least one parseable certificate.
func checkPEM(s string) string {
	rest := []byte(s)
	n := 0
	for {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		if b.Type != "CERTIFICATE" {
			continue
		}
		if _, err := x509.ParseCertificate(b.Bytes); err != nil {
			return fmt.Sprintf("certificate %d: %v", n+1, err)
		}
		n++
	}
	if n == 0 {
		return "no PEM CERTIFICATE block found"
	}
	return ""
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
