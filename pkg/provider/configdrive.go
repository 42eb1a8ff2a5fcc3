package provider

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/booty-dev/booty/pkg/config"
	"github.com/booty-dev/booty/pkg/disk"
)

// MountFunc has the signature of unix.Mount.
type MountFunc func(source, target, fstype string, flags uintptr, data string) error

// UnmountFunc has the signature of unix.Unmount.
type UnmountFunc func(target string, flags int) error

// Config drive labels and files.
const (
	LabelBooty        = "BOOTY"
	LabelConfig2      = "config-2" // OpenStack config drive
	configDriveYAML   = "booty.yaml"
	configDriveJSON   = "booty.json"
	openStackUserData = "openstack/latest/user_data"
)

// ConfigDriveProvider finds a filesystem labelled BOOTY or config-2 on a block
// device and reads the config from it:
//
//  1. every device under SysRoot/class/block (disks and partitions; ram and
//     zram devices and devices of size 0, such as an empty CD drive, are
//     skipped) is opened under DevRoot and its label read from the superblock
//     (ReadLabel); labels compare case-insensitively;
//  2. each matching device is mounted read-only at MountDir, trying the
//     detected type first, then iso9660, vfat and ext4;
//  3. booty.yaml, then booty.json at its root is read; on a config-2 drive,
//     failing those, openstack/latest/user_data when its apiVersion is booty's;
//  4. the device is unmounted again, whatever happened.
//
// No labelled device, or labelled devices without a booty file, give
// config.ErrNoConfig. A booty file that does not parse, or a failed mount, is an
// error naming the device.
type ConfigDriveProvider struct {
	SysRoot  string // default /sys
	DevRoot  string // default /dev
	MountDir string // default /run/booty/configdrive
	// Labels to look for; default BOOTY and config-2.
	Labels  []string
	Mount   MountFunc   // default unix.Mount
	Unmount UnmountFunc // default unix.Unmount
	// Drives lists the labelled drives; nil scans with Find. The agent
	// sets it to one scan shared by every user of the answer, so a boot
	// reads the block devices' superblocks once.
	Drives func() ([]Drive, error)
	Log    *slog.Logger
}

// Name names the provider in logs and errors.
func (p *ConfigDriveProvider) Name() string { return "config drive" }

// Drive is one block device with a config drive label.
type Drive struct {
	Device string // path under DevRoot
	FSType string // as ReadLabel found it
	Label  string
}

// Load finds, mounts and reads the config drive; see ConfigDriveProvider.
func (p *ConfigDriveProvider) Load(ctx context.Context) (*config.MachineConfig, error) {
	find := p.Drives
	if find == nil {
		find = p.Find
	}
	drives, err := find()
	if err != nil {
		return nil, err
	}
	if len(drives) == 0 {
		return nil, fmt.Errorf("%w: no block device labelled %s", config.ErrNoConfig, strings.Join(p.labels(), " or "))
	}
	for _, d := range drives {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("config drive: %w", err)
		}
		cfg, err := p.loadFrom(d)
		if errors.Is(err, config.ErrNoConfig) {
			orDiscard(p.Log).Info("config drive has no booty config", "device", d.Device, "label", d.Label)
			continue
		}
		return cfg, err
	}
	return nil, fmt.Errorf("%w: labelled devices hold no %s, %s or booty %s", config.ErrNoConfig, configDriveYAML, configDriveJSON, openStackUserData)
}

func (p *ConfigDriveProvider) labels() []string {
	if len(p.Labels) > 0 {
		return p.Labels
	}
	return []string{LabelBooty, LabelConfig2}
}

func (p *ConfigDriveProvider) root(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

// Find lists the block devices whose filesystem label is one of Labels, in
// name order (disk.Manager.FindLabeled over SysRoot and DevRoot), keeping
// those whose filesystem a config drive can be. A missing
// SysRoot/class/block gives config.ErrNoConfig.
func (p *ConfigDriveProvider) Find() ([]Drive, error) {
	log := orDiscard(p.Log)
	m := &disk.Manager{SysRoot: p.root(p.SysRoot, "/sys"), DevRoot: p.root(p.DevRoot, "/dev"), Log: log}
	found, err := m.FindLabeled(p.labels())
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: %w", config.ErrNoConfig, err)
	}
	if err != nil {
		return nil, err
	}
	var out []Drive
	for _, l := range found {
		fstype, ok := mountType(l.FSType)
		if !ok {
			log.Debug("skip labelled device: not a config drive filesystem", "device", l.Device, "fstype", l.FSType)
			continue
		}
		log.Info("found config drive", "device", l.Device, "fstype", fstype, "label", l.Label)
		out = append(out, Drive{Device: l.Device, FSType: fstype, Label: l.Label})
	}
	return out, nil
}

// loadFrom mounts one drive, reads its config and unmounts it.
func (p *ConfigDriveProvider) loadFrom(d Drive) (cfg *config.MachineConfig, err error) {
	log := orDiscard(p.Log)
	mount, unmount := p.Mount, p.Unmount
	if mount == nil {
		mount = defaultMount
	}
	if unmount == nil {
		unmount = defaultUnmount
	}
	dir := p.root(p.MountDir, "/run/booty/configdrive")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create mount point %s: %w", dir, err)
	}
	var errs []error
	mounted := false
	for _, fstype := range mountOrder(d.FSType) {
		if err := mount(d.Device, dir, fstype, mountReadOnlyFlags, ""); err != nil {
			errs = append(errs, fmt.Errorf("as %s: %w", fstype, err))
			continue
		}
		mounted = true
		break
	}
	if !mounted {
		return nil, fmt.Errorf("mount config drive %s read-only at %s: %w", d.Device, dir, errors.Join(errs...))
	}
	defer func() {
		if uerr := unmount(dir, 0); uerr != nil {
			log.Warn("unmount config drive", "device", d.Device, "dir", dir, "err", uerr)
			if err == nil && cfg == nil {
				err = fmt.Errorf("unmount config drive %s at %s: %w", d.Device, dir, uerr)
			}
		}
	}()

	for _, name := range []string{configDriveYAML, configDriveJSON} {
		path := filepath.Join(dir, name)
		data, err := readLimited(os.ReadFile, path)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("config drive %s: %w", d.Device, err)
		}
		cfg, err := config.Parse(data)
		if err != nil {
			return nil, fmt.Errorf("config drive %s: %s: %w", d.Device, name, err)
		}
		return cfg, nil
	}
	if strings.EqualFold(d.Label, LabelConfig2) {
		data, err := readLimited(os.ReadFile, filepath.Join(dir, openStackUserData))
		switch {
		case errors.Is(err, fs.ErrNotExist):
		case err != nil:
			return nil, fmt.Errorf("config drive %s: %w", d.Device, err)
		case IsBootyConfig(data):
			cfg, err := config.Parse(data)
			if err != nil {
				return nil, fmt.Errorf("config drive %s: %s: %w", d.Device, openStackUserData, err)
			}
			return cfg, nil
		default:
			log.Info("config-2 user_data is not a booty config, ignoring it", "device", d.Device)
		}
	}
	return nil, config.ErrNoConfig
}

// mountOrder puts the detected filesystem type first, then the others.
func mountOrder(detected string) []string {
	order := []string{detected}
	for _, t := range []string{FSISO9660, FSVFAT, FSExt4} {
		if t != detected {
			order = append(order, t)
		}
	}
	return order
}

// IsBootyConfig reports whether data is a YAML or JSON mapping whose
// apiVersion is booty's, so user data meant for cloud-init is told apart.
func IsBootyConfig(data []byte) bool {
	j, err := yaml.YAMLToJSON(data)
	if err != nil {
		return false
	}
	var head struct {
		APIVersion string `json:"apiVersion"`
	}
	if err := json.Unmarshal(j, &head); err != nil {
		return false
	}
	return head.APIVersion == config.APIVersion
}
