package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/booty-dev/booty/pkg/bmdb"
	"github.com/booty-dev/booty/pkg/config"
	"github.com/booty-dev/booty/pkg/names"
)

// LabelSource marks machines bootyd registered from a --configs file (value
// "configs") or from --default-config ("default-config").
const LabelSource = "booty.dev/source"

// renderConfig builds the MachineConfig (JSON) an agent runs for command
// kind from spec: the image, its checksums, root device hints, hostname and
// cloud-init data, then spec.ConfigOverrides merged over it, then the mode
// the command asks for and server.url set to bootyd. The token is never in
// it: the agent reports with its own. It fails, naming the problem, when the
// result is not a valid MachineConfig; the config is returned with that
// error when it could be encoded, so the agent can report it as it would
// a bad config file.
func (s *Server) renderConfig(spec bmdb.Spec, kind bmdb.CommandKind) (json.RawMessage, error) {
	cfg := map[string]any{"apiVersion": config.APIVersion}
	img := map[string]any{}
	if spec.Image.URL != "" {
		img["url"] = spec.Image.URL
	}
	sums := spec.Image.Checksums
	if c := spec.Image.Checksum; c != "" {
		if spec.Image.ChecksumType != "" && !strings.Contains(c, ":") {
			c = strings.ToLower(spec.Image.ChecksumType) + ":" + c
		}
		img["checksum"] = c
	}
	if len(sums) > 0 {
		img["imageChecksum"] = sums[0]
	}
	if len(img) > 0 {
		cfg["image"] = img
	}
	if h := spec.RootDeviceHints; h != nil {
		hints := map[string]any{}
		for k, v := range map[string]string{"name": h.DeviceName, "hctl": h.HCTL, "model": h.Model, "vendor": h.Vendor,
			"serial": h.SerialNumber, "wwn": h.WWN, "wwn_with_extension": h.WWNWithExtension, "wwn_vendor_extension": h.WWNVendorExtension} {
			if v != "" {
				hints[k] = v
			}
		}
		if h.MinSizeGigabytes > 0 {
			hints["size"] = fmt.Sprintf(">= %d", h.MinSizeGigabytes)
		}
		if h.Rotational != nil {
			hints["rotational"] = *h.Rotational
		}
		if len(hints) > 0 {
			cfg["disk"] = map[string]any{"hints": hints}
		}
	}
	if spec.Hostname != "" {
		cfg["hostname"] = spec.Hostname
	}
	ci := map[string]any{}
	for k, v := range map[string]string{"userData": spec.UserData, "metaData": spec.MetaData, "networkConfig": spec.NetworkData} {
		if v != "" {
			ci[k] = v
		}
	}
	if len(ci) > 0 {
		cfg["cloudInit"] = ci
	}
	if len(spec.ConfigOverrides) > 0 {
		var over map[string]any
		if err := json.Unmarshal(spec.ConfigOverrides, &over); err != nil {
			return nil, fmt.Errorf("render config: configOverrides: %w", err)
		}
		merge(cfg, over)
	}
	mode, _ := cfg["mode"].(string)
	switch kind {
	case bmdb.CommandDeprovision:
		if mode != config.ModeSoftDeprovision {
			cfg["mode"] = config.ModeDeprovision
		}
	default:
		cfg["mode"] = config.ModeProvision
	}
	srv, _ := cfg["server"].(map[string]any)
	if srv == nil {
		srv = map[string]any{}
	}
	delete(srv, "token")
	if s.opts.PublicURL != "" {
		srv["url"] = s.opts.PublicURL
	}
	if len(srv) > 0 {
		cfg["server"] = srv
	} else {
		delete(cfg, "server")
	}
	b, err := json.Marshal(cfg)
	if err != nil {
		return nil, fmt.Errorf("render config: %w", err)
	}
	if _, err := config.Parse(b); err != nil {
		return b, fmt.Errorf("render config: %w", err)
	}
	return b, nil
}

// merge copies src over dst, recursing into objects present in both.
func merge(dst, src map[string]any) {
	for k, v := range src {
		if sm, ok := v.(map[string]any); ok {
			if dm, ok := dst[k].(map[string]any); ok {
				merge(dm, sm)
				continue
			}
		}
		dst[k] = v
	}
}

// fileSpec turns a config file into the spec of its machine: the whole
// config (server.token removed) as ConfigOverrides, and the command its
// mode asks for.
func fileSpec(data []byte) (bmdb.Spec, bmdb.CommandKind, error) {
	j, err := yaml.YAMLToJSON(data)
	if err != nil {
		return bmdb.Spec{}, "", fmt.Errorf("read config as YAML: %w", err)
	}
	var m map[string]any
	if err := json.Unmarshal(j, &m); err != nil || m == nil {
		return bmdb.Spec{}, "", errors.New("config is not a YAML or JSON object")
	}
	if srv, ok := m["server"].(map[string]any); ok {
		delete(srv, "token")
	}
	kind := bmdb.CommandProvision
	switch m["mode"] {
	case config.ModeDeprovision, config.ModeSoftDeprovision:
		kind = bmdb.CommandDeprovision
	}
	b, err := json.Marshal(m)
	if err != nil {
		return bmdb.Spec{}, "", err
	}
	return bmdb.Spec{ConfigOverrides: b}, kind, nil
}

// configMachine makes sure the machine with mac exists when a config file
// (or, with discovered true, the default config) names it: it registers
// one (name: the config's hostname when free, else "mac-<hex>") labelled
// LabelSource. It returns the config's spec and command, or ok false when
// no config applies. Failures are logged and leave things as they were.
func (s *Server) configFor(mac string, discovered bool) (c machineConfig, ok bool) {
	c, err := s.lookupConfig(mac)
	if err != nil {
		if !errors.Is(err, ErrNoConfig) {
			s.log.Warn("look up config file", "mac", mac, "err", err)
		}
		return c, false
	}
	if c.Default && !discovered {
		return c, false
	}
	return c, true
}

// registerFromConfig registers the machine of a config file unless a
// machine has its MAC already.
func (s *Server) registerFromConfig(ctx context.Context, mac string, c machineConfig) {
	if _, err := s.db.MachineByMAC(ctx, mac); err == nil || !errors.Is(err, bmdb.ErrNotFound) {
		return
	}
	spec, _, err := fileSpec(c.Data)
	if err != nil {
		s.log.Warn("config file is not a config; not registered", "mac", mac, "path", c.Path, "err", err)
		return
	}
	name := "mac-" + strings.ReplaceAll(mac, ":", "")
	var probe struct {
		Hostname string `json:"hostname"`
	}
	if yaml.Unmarshal(c.Data, &probe) == nil && probe.Hostname != "" && names.Hostname(probe.Hostname) == nil {
		if _, err := s.db.MachineByName(ctx, probe.Hostname); errors.Is(err, bmdb.ErrNotFound) {
			name = probe.Hostname
		}
	}
	src := "configs"
	if c.Default {
		src = "default-config"
	}
	m, err := s.db.CreateMachine(ctx, bmdb.NewMachine{Name: name, BootMAC: mac, Spec: spec,
		Labels: map[string]string{LabelSource: src}, Message: "registered from config file " + c.Path})
	if err != nil && !errors.Is(err, bmdb.ErrConflict) {
		s.log.Warn("register machine from config file", "mac", mac, "path", c.Path, "err", err)
		return
	}
	if err == nil {
		s.log.Info("machine registered from config file", "machine", m, "path", c.Path)
	}
}

// RegisterConfigs registers a machine for every config file in ConfigDir
// (see registerFromConfig); files that are not configs are logged and
// skipped.
func (s *Server) RegisterConfigs(ctx context.Context) {
	if s.opts.ConfigDir == "" {
		return
	}
	for _, mac := range s.configMACs() {
		if c, ok := s.configFor(mac, false); ok {
			s.registerFromConfig(ctx, mac, c)
		}
	}
}

// replayConfig gives machine id the command of its config file, as bootyd
// did before the fleet: every boot of the agent runs the file (read now, so
// edits count). It moves the machine along the lifecycle to where the
// command may be issued (provisioned → deprovisioning → available →
// provisioning; available → externally provisioned → deprovisioning),
// updating the spec on the way; each move is an event with reason
// ConfigFile.
func (s *Server) replayConfig(ctx context.Context, id string, c machineConfig) error {
	spec, want, err := fileSpec(c.Data)
	if err != nil {
		return fmt.Errorf("config file %s: %w", c.Path, err)
	}
	target := bmdb.StateProvisioning
	if want == bmdb.CommandDeprovision {
		target = bmdb.StateDeprovisioning
	}
	for range 8 {
		m, err := s.db.GetMachine(ctx, id)
		if err != nil {
			return err
		}
		same := bytes.Equal(m.Spec.ConfigOverrides, spec.ConfigOverrides)
		installing := m.State == bmdb.StatePreparing || m.State == bmdb.StateProvisioning || m.State == bmdb.StateDeprovisioning
		if !same && !installing {
			if _, err := s.db.UpdateMachine(ctx, id, 0, bmdb.MachineUpdate{Spec: &spec}); err != nil {
				return err
			}
			continue
		}
		if same && m.State == target && m.Command == want && m.Status != bmdb.StatusError {
			return nil
		}
		t := bmdb.Transition{Reason: "ConfigFile", Message: "config file " + c.Path}
		switch {
		case same && (m.State == target || m.State == bmdb.StatePreparing && target == bmdb.StateProvisioning ||
			target == bmdb.StateProvisioning && m.State == bmdb.StateAvailable ||
			target == bmdb.StateDeprovisioning && (m.State == bmdb.StateProvisioned || m.State == bmdb.StateProvisioning || m.State == bmdb.StateExternallyProvisioned)):
			t.To, t.Command = target, want
		case m.State == bmdb.StateProvisioning || m.State == bmdb.StateProvisioned:
			t.To = bmdb.StateDeprovisioning
		case target == bmdb.StateDeprovisioning && (m.State == bmdb.StateAvailable || m.State == bmdb.StateRegistering):
			t.To = bmdb.StateExternallyProvisioned
		case m.State == bmdb.StatePoweringOffBeforeDelete || m.State == bmdb.StateDeleting:
			return fmt.Errorf("machine %s is %s", m.Name, m.State)
		default:
			t.To = bmdb.StateAvailable
		}
		if _, err := s.db.Transition(ctx, id, t); err != nil {
			return err
		}
	}
	return fmt.Errorf("machine %s: config file %s: the lifecycle did not reach %s", id, c.Path, target)
}
