package provision

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/booty-dev/booty/pkg/bootloader"
	"github.com/booty-dev/booty/pkg/chroot"
	"github.com/booty-dev/booty/pkg/command"
	"github.com/booty-dev/booty/pkg/config"
	"github.com/booty-dev/booty/pkg/disk"
)

// grubGenerators are the grub.cfg generators tried in the chroot, in order:
// the program and its arguments; "{out}" is replaced by the output path.
var grubGenerators = []struct {
	prog string
	args []string
}{
	{"update-grub", nil},
	{"grub-mkconfig", []string{"-o", "{out}"}},
	{"grub2-mkconfig", []string{"-o", "{out}"}},
}

// ConfigureGRUB writes GRUB kernel parameters and runs update-grub via chroot.
//
// In order: cfg.KernelParams are merged into GRUB_CMDLINE_LINUX of
// /etc/default/grub (bootloader.SetGrubDefaultCmdline: key=value replaces
// the old value of the key, nothing is repeated); into the options line of
// every BLS entry when /boot/loader/entries (or the ESP's) holds any
// (bootloader.SetBLSOptions); then, when /etc/default/grub exists, grub.cfg
// is regenerated in the chroot with the first of update-grub,
// `grub-mkconfig -o /boot/grub/grub.cfg`, `grub2-mkconfig -o
// /boot/grub2/grub.cfg` found in the installed OS. No kernel parameters
// does nothing. It fails when the image has neither /etc/default/grub
// nor BLS entries, when /etc/default/grub exists but no generator does,
// or when the generator fails (the error carries its stderr tail); the
// files edited before a failure stay edited.
func (c *Configurator) ConfigureGRUB(ctx context.Context, cfg *config.MachineConfig) error {
	params := cfg.KernelParams
	if len(params) == 0 {
		c.log.Info("no kernel parameters configured, boot configuration left as in the image")
		return nil
	}
	root := c.root()
	defRel, err := root.resolve("etc/default/grub", true)
	if err != nil {
		return fmt.Errorf("configure GRUB: %w", err)
	}
	defPath := chroot.Join(c.rootDir, defRel)
	hasDefaults := false
	if st, err := os.Stat(defPath); err == nil && st.Mode().IsRegular() {
		hasDefaults = true
		if err := bootloader.SetGrubDefaultCmdline(defPath, params); err != nil {
			return fmt.Errorf("configure GRUB: %w", err)
		}
	}
	hasBLS := false
	for _, d := range []string{"boot/loader/entries", "boot/efi/loader/entries", "efi/loader/entries"} {
		rel, err := root.resolve(d, true)
		if err != nil {
			continue
		}
		if m, _ := filepath.Glob(filepath.Join(chroot.Join(c.rootDir, rel), "*.conf")); len(m) > 0 {
			hasBLS = true
		}
	}
	if hasBLS {
		if err := bootloader.SetBLSOptions(c.rootDir, params); err != nil {
			return fmt.Errorf("configure GRUB: %w", err)
		}
	}
	if !hasDefaults && !hasBLS {
		return fmt.Errorf("configure GRUB: %s has neither /etc/default/grub nor BLS entries in /boot/loader/entries", c.rootDir)
	}
	if !hasDefaults {
		c.log.Info("kernel parameters written to BLS entries", "params", params)
		return nil
	}
	for _, g := range grubGenerators {
		if _, err := chroot.LookPath(c.rootDir, g.prog, command.DefaultPath); err != nil {
			continue
		}
		out := "/boot/grub/grub.cfg"
		if g.prog == "grub2-mkconfig" {
			out = "/boot/grub2/grub.cfg"
		}
		var args []string
		for _, a := range g.args {
			args = append(args, strings.ReplaceAll(a, "{out}", out))
		}
		if _, _, err := c.runner.RunChroot(ctx, c.rootDir, g.prog, args...); err != nil {
			return fmt.Errorf("configure GRUB: regenerate grub.cfg: %w", err)
		}
		c.log.Info("kernel parameters written, grub.cfg regenerated", "params", params, "generator", g.prog, "bls", hasBLS)
		return nil
	}
	return fmt.Errorf("configure GRUB: none of update-grub, grub-mkconfig, grub2-mkconfig in %s", c.rootDir)
}

// espRoot returns the host path of the ESP mounted inside the root: the
// first of boot/efi, efi, boot that holds an EFI directory.
func (c *Configurator) espRoot() (string, error) {
	root := c.root()
	for _, d := range c.espDirs {
		rel, err := root.resolve(d, true)
		if err != nil {
			continue
		}
		host := chroot.Join(c.rootDir, rel)
		ents, err := os.ReadDir(host)
		if err != nil {
			continue
		}
		for _, e := range ents {
			if e.IsDir() && strings.EqualFold(e.Name(), "EFI") {
				return host, nil
			}
		}
	}
	return "", fmt.Errorf("no ESP with an EFI directory at %s in %s", strings.Join(c.espDirs, ", "), c.rootDir)
}

func (c *Configurator) checkEFI() error {
	dir := c.efiVars.Dir
	if dir == "" {
		dir = bootloader.DefaultEFIVarsDir
	}
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		return fmt.Errorf("%s: %w", dir, ErrNotEFI)
	}
	return nil
}

// osName returns NAME from the installed OS's os-release, or "".
func (c *Configurator) osName() string {
	root := c.root()
	for _, p := range []string{"etc/os-release", "usr/lib/os-release"} {
		b, err := root.readFile(p)
		if err != nil {
			continue
		}
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(l), "NAME="); ok {
				return strings.Trim(v, `"'`)
			}
		}
	}
	return ""
}

// CreateEFIBootEntry creates a new EFI boot entry for the installed OS.
//
// bootPart is the ESP's device node ("/dev/vda1"); empty means the
// partition of diskDev typed as ESP. The loader is the one
// bootloader.FindLoader picks on the ESP mounted in the root (shim, then
// grub, then the removable path); the entry is described by the OS's
// os-release NAME (else the loader's directory) and goes first in
// BootOrder. An existing identical entry is reused. It fails, wrapping
// ErrNotEFI, without efivarfs, and when the partition, the ESP mount or a
// loader is missing.
func (c *Configurator) CreateEFIBootEntry(ctx context.Context, diskDev, bootPart string) error {
	if err := c.checkEFI(); err != nil {
		return fmt.Errorf("create EFI boot entry: %w", err)
	}
	parts, err := c.readPartitions(ctx, diskDev)
	if err != nil {
		return fmt.Errorf("create EFI boot entry: %w", err)
	}
	var esp *disk.Partition
	for i := range parts {
		p := &parts[i]
		if bootPart == "" && p.Type == disk.TypeEFISystem || bootPart != "" && samePath(bootPart, p.Path) {
			esp = p
			break
		}
	}
	if esp == nil {
		what := "no EFI system partition"
		if bootPart != "" {
			what = bootPart + " is not a partition of it"
		}
		return fmt.Errorf("create EFI boot entry: %s: %s", diskDev, what)
	}
	if esp.PartUUID == "" {
		return fmt.Errorf("create EFI boot entry: %s is not a GPT partition", esp.Path)
	}
	espDir, err := c.espRoot()
	if err != nil {
		return fmt.Errorf("create EFI boot entry: %w", err)
	}
	loader, err := bootloader.FindLoader(espDir)
	if err != nil {
		return fmt.Errorf("create EFI boot entry: %w", err)
	}
	desc := c.osName()
	if desc == "" {
		if f := strings.Split(loader, `\`); len(f) >= 3 {
			desc = f[len(f)-2]
		}
	}
	num, err := c.efiVars.CreateBootEntry(desc, bootloader.PartitionInfo{
		Number: uint32(esp.Number), StartLBA: esp.StartLBA(), SizeLBA: esp.SizeLBA(), PartUUID: esp.PartUUID,
	}, loader, true)
	if err != nil {
		return fmt.Errorf("create EFI boot entry: %w", err)
	}
	c.log.Info("EFI boot entry created", "entry", fmt.Sprintf("Boot%04X", num), "description", desc,
		"loader", loader, "partition", esp.Path)
	return nil
}

func samePath(a, b string) bool {
	if a == b {
		return true
	}
	ra, err1 := filepath.EvalSymlinks(a)
	rb, err2 := filepath.EvalSymlinks(b)
	return err1 == nil && err2 == nil && ra == rb
}

// staleEntryNames returns the names RemoveEFIBootEntries matches: the
// configured ones plus the loader directories (other than BOOT) on the
// ESP mounted in the root, if any, lower case and without duplicates.
func (c *Configurator) staleEntryNames() []string {
	names := slices.Clone(c.staleNames)
	if esp, err := c.espRoot(); err == nil {
		if efi, err := os.ReadDir(esp); err == nil {
			for _, e := range efi {
				if !e.IsDir() || !strings.EqualFold(e.Name(), "EFI") {
					continue
				}
				sub, _ := os.ReadDir(filepath.Join(esp, e.Name()))
				for _, d := range sub {
					if d.IsDir() && !strings.EqualFold(d.Name(), "BOOT") {
						names = append(names, d.Name())
					}
				}
			}
		}
	}
	for i := range names {
		names[i] = strings.ToLower(names[i])
	}
	slices.Sort(names)
	return slices.Compact(slices.DeleteFunc(names, func(s string) bool { return s == "" }))
}

// matchStale reports whether a boot entry belongs to an installed OS of
// one of names: its description contains a name, or its loader lives in
// \EFI\<name>\ (case-insensitively).
func matchStale(o bootloader.LoadOption, names []string) bool {
	desc := strings.ToLower(o.Description)
	loader, _ := o.Loader()
	loader = strings.ToLower(strings.ReplaceAll(loader, "/", `\`))
	for _, n := range names {
		if strings.Contains(desc, n) || strings.Contains(loader, `\efi\`+n+`\`) {
			return true
		}
	}
	return false
}

// RemoveEFIBootEntries removes old EFI boot entries matching "ubuntu".
//
// More precisely it removes every Boot#### entry whose description
// contains, or whose loader lives in \EFI\<name>\ for, one of the stale
// names: SetStaleBootEntryNames' (default "ubuntu", "debian") plus the
// loader directories on the ESP mounted in the root, when there is one.
// Network and firmware entries do not match. Removed numbers also leave
// BootOrder (and BootNext). It fails, wrapping ErrNotEFI, without
// efivarfs.
func (c *Configurator) RemoveEFIBootEntries(ctx context.Context) error {
	if err := c.checkEFI(); err != nil {
		return fmt.Errorf("remove EFI boot entries: %w", err)
	}
	names := c.staleEntryNames()
	removed, err := c.efiVars.RemoveBootEntries(func(o bootloader.LoadOption) bool { return matchStale(o, names) })
	if len(removed) > 0 {
		var s []string
		for _, n := range removed {
			s = append(s, fmt.Sprintf("Boot%04X", n))
		}
		c.log.Info("EFI boot entries removed", "entries", s, "names", names)
	}
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove EFI boot entries: %w", err)
	}
	return nil
}
