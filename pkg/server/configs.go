package server

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"sigs.k8s.io/yaml"
)

// ErrNoConfig means neither the config directory nor the default config
// has a config for the MAC.
var ErrNoConfig = errors.New("no config for this MAC")

// ErrAmbiguousConfig means two files in the config directory name the same MAC
// (for example aa-bb-cc-dd-ee-ff.yaml and AA:BB:CC:DD:EE:FF.json).
var ErrAmbiguousConfig = errors.New("several config files for one MAC")

// configExts maps the accepted config file extensions to their content type.
var configExts = map[string]string{
	".yaml": "application/yaml",
	".yml":  "application/yaml",
	".json": "application/json",
}

// machineConfig is one machine's config file, read as-is.
type machineConfig struct {
	Path        string
	Data        []byte
	ContentType string
	Default     bool // served from --default-config
}

// lookupConfig reads the config for the canonical mac from disk, on every
// call, so that operators may edit files while bootyd runs. It lists the
// config directory, matches file names by normalised MAC (colons or dashes,
// any case, .yaml/.yml/.json), and falls back to the default config. It fails
// with ErrNoConfig when neither exists, ErrAmbiguousConfig when two files
// claim the MAC, and with the I/O error otherwise.
func (s *Server) lookupConfig(mac string) (machineConfig, error) {
	if s.opts.ConfigDir != "" {
		entries, err := os.ReadDir(s.opts.ConfigDir)
		if err != nil {
			return machineConfig{}, fmt.Errorf("list config directory %s: %w", s.opts.ConfigDir, err)
		}
		var found []string
		for _, e := range entries {
			name := e.Name()
			ext := strings.ToLower(filepath.Ext(name))
			if _, ok := configExts[ext]; !ok {
				continue
			}
			m, err := NormalizeMAC(strings.TrimSuffix(name, filepath.Ext(name)))
			if err != nil || m != mac {
				continue
			}
			found = append(found, name)
		}
		switch len(found) {
		case 0:
		case 1:
			p := filepath.Join(s.opts.ConfigDir, found[0])
			return readConfigFile(p, false)
		default:
			return machineConfig{}, fmt.Errorf("look up config for %s in %s: %w: %s", mac, s.opts.ConfigDir, ErrAmbiguousConfig, strings.Join(found, ", "))
		}
	}
	if s.opts.DefaultConfig != "" {
		return readConfigFile(s.opts.DefaultConfig, true)
	}
	return machineConfig{}, fmt.Errorf("look up config for %s: %w", mac, ErrNoConfig)
}

// readConfigFile reads one config file; a directory or unreadable file is an error.
func readConfigFile(path string, isDefault bool) (machineConfig, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return machineConfig{}, fmt.Errorf("read config %s: %w", path, err)
	}
	ct, ok := configExts[strings.ToLower(filepath.Ext(path))]
	if !ok {
		ct = "application/yaml"
	}
	return machineConfig{Path: path, Data: data, ContentType: ct, Default: isDefault}, nil
}

// tokenOnly is the one part of a MachineConfig that bootyd reads: the
// machine's bearer token. Full parsing and validation belong to pkg/config.
type tokenOnly struct {
	Server struct {
		Token string `json:"token"`
	} `json:"server"`
}

// errConfigUnparsable is returned by token when the file is not YAML/JSON of
// the expected shape. Its message never quotes the file's content.
var errConfigUnparsable = errors.New("config is not a YAML or JSON object with an optional server.token string")

// token extracts server.token from the config with a minimal YAML/JSON read.
// The parser's own error is not wrapped because it may quote file content.
func (c machineConfig) token() (string, error) {
	var t tokenOnly
	if err := yaml.Unmarshal(c.Data, &t); err != nil {
		return "", fmt.Errorf("read server.token from %s: %w", c.Path, errConfigUnparsable)
	}
	return t.Server.Token, nil
}

// configMACs lists the MACs that have a config file in ConfigDir; files
// that do not name a MAC are skipped.
func (s *Server) configMACs() []string {
	entries, err := os.ReadDir(s.opts.ConfigDir)
	if err != nil {
		s.log.Warn("list config directory", "dir", s.opts.ConfigDir, "err", err)
		return nil
	}
	var out []string
	for _, e := range entries {
		name := e.Name()
		if _, ok := configExts[strings.ToLower(filepath.Ext(name))]; !ok {
			continue
		}
		if m, err := NormalizeMAC(strings.TrimSuffix(name, filepath.Ext(name))); err == nil {
			out = append(out, m)
		}
	}
	return out
}
