package config

import (
	"log/slog"
	"maps"
	"slices"
	"sort"

	"github.com/booty-dev/booty/pkg/redact"
)

// RedactedText replaces a secret in Redacted output.
const RedactedText = "<redacted>"

// Redacted returns a deep copy of c for logs, debug dumps, reports and
// `booty config show`: server.token, cloudInit.userData and networkConfig
// and every postProvisionCommands entry become "<redacted>" when set, and
// the URLs (image, bmap, server, and any in kernelParams) lose their user
// info and query through redact.URL, the one URL redaction. c is unchanged.
func (c *MachineConfig) Redacted() *MachineConfig {
	if c == nil {
		return nil
	}
	r := c.Clone()
	if r.Server.Token != "" {
		r.Server.Token = RedactedText
	}
	if r.CloudInit.UserData != "" {
		r.CloudInit.UserData = RedactedText
	}
	// Network config may hold Wi-Fi or 802.1X passwords, and commands
	// passwords on their command lines: neither is shown.
	if r.CloudInit.NetworkConfig != "" {
		r.CloudInit.NetworkConfig = RedactedText
	}
	for i := range r.PostProvisionCommands {
		r.PostProvisionCommands[i] = RedactedText
	}
	// URLs lose their user info and query (pre-signed URLs, tokens).
	r.Image.URL = redact.URL(r.Image.URL)
	r.Image.BmapURL = redact.URL(r.Image.BmapURL)
	r.Server.URL = redact.URL(r.Server.URL)
	for i, p := range r.KernelParams {
		r.KernelParams[i] = redact.Text(p)
	}
	return r
}

// Clone returns a deep copy of c: changing the copy's slices and maps
// leaves c alone.
func (c *MachineConfig) Clone() *MachineConfig {
	if c == nil {
		return nil
	}
	r := *c
	r.KernelParams = slices.Clone(c.KernelParams)
	r.PostProvisionCommands = slices.Clone(c.PostProvisionCommands)
	r.DNS.Nameservers = slices.Clone(c.DNS.Nameservers)
	r.DNS.Search = slices.Clone(c.DNS.Search)
	r.Network = c.Network.clone()
	r.Kubelet.NodeLabels = maps.Clone(c.Kubelet.NodeLabels)
	if c.EFIBootEntry != nil {
		v := *c.EFIBootEntry
		r.EFIBootEntry = &v
	}
	if c.Health != nil {
		h := *c.Health
		h.ReportOnly = slices.Clone(c.Health.ReportOnly)
		r.Health = &h
	}
	if c.Disk.Hints != nil {
		r.Disk.Hints = make(RootDeviceHints, len(c.Disk.Hints))
		for k, v := range c.Disk.Hints {
			r.Disk.Hints[k] = cloneAny(v)
		}
	}
	return &r
}

func cloneAny(v any) any {
	switch x := v.(type) {
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = cloneAny(e)
		}
		return out
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = cloneAny(e)
		}
		return out
	}
	return v
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// plainConfig has MachineConfig's fields without its LogValue method.
type plainConfig MachineConfig

// LogValue makes a logged *MachineConfig print its Redacted copy, so a
// config passed to slog never leaks its secrets.
func (c *MachineConfig) LogValue() slog.Value {
	return slog.AnyValue((*plainConfig)(c.Redacted()))
}
