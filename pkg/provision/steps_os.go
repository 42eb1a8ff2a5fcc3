package provision

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/booty-dev/booty/pkg/config"

	"github.com/booty-dev/booty/pkg/disk"
)

// The steps that act on the installed OS, mounted between mount-root and
// unmount-root. Each reads the config from the Orchestrator (o.cfg); the
// Configurator does the work.

// disabledSuffix is appended to grub.cfg by a soft deprovision.
const disabledSuffix = ".booty-disabled"

func (o *Orchestrator) stepMountRoot(ctx context.Context) error {
	t := o.SelectedDisk()
	if o.cfg.Disk.RootPartitionSize == config.RootPartitionKeep {
		// No grow-partition step made the kernel re-read the table the
		// image wrote: without that its partition nodes never appear.
		if err := o.rereadPartitions(t.Path); err != nil {
			return err
		}
	}
	target := o.newInstalledOS(t.Path)
	if err := target.Mount(ctx); err != nil {
		// Mount unmounts what it mounted before failing.
		return err
	}
	o.mu.Lock()
	o.installed = target
	o.mu.Unlock()
	o.conf.SetRootDir(target.Root())
	o.linkDiskNodes(target.Partitions())
	if p, ok := target.RootPartition(); ok {
		o.addDetail(map[string]string{"root": p.String()})
	}
	return nil
}

// linkDiskNodes creates the /dev/disk/by-uuid, by-partuuid and by-label
// links that udev would (the initramfs has no udev). The installed OS's
// tools look for them: grub-mkconfig writes root=UUID=... only when
// /dev/disk/by-uuid/<uuid> exists. Failures are logged, not fatal.
func (o *Orchestrator) linkDiskNodes(parts []disk.Partition) {
	for _, p := range parts {
		for dir, name := range map[string]string{"by-uuid": p.UUID, "by-partuuid": p.PartUUID, "by-label": p.Label} {
			if name == "" || p.Path == "" || strings.ContainsAny(name, "/") {
				continue
			}
			d := filepath.Join(o.devDir, "disk", dir)
			link := filepath.Join(d, name)
			if err := os.MkdirAll(d, 0o755); err != nil {
				o.log.Warn("cannot create device links", "dir", d, "error", err)
				return
			}
			_ = os.Remove(link)
			if err := os.Symlink(p.Path, link); err != nil {
				o.log.Warn("cannot create device link", "link", link, "error", err)
			}
		}
	}
}

func (o *Orchestrator) mountedOS() (installedOS, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.installed == nil {
		return nil, errors.New("the installed OS is not mounted")
	}
	return o.installed, nil
}

func (o *Orchestrator) stepGrowFilesystem(ctx context.Context) error {
	target, err := o.mountedOS()
	if err != nil {
		return err
	}
	p, ok := target.RootPartition()
	if !ok {
		return errors.New("no root partition to grow")
	}
	return o.growFilesystem(ctx, target.Root(), p)
}

func (o *Orchestrator) stepCopyFiles(ctx context.Context) error {
	if err := o.conf.CopyProvisionerFiles(); err != nil {
		return err
	}
	return o.conf.CopyMachineFiles()
}

func (o *Orchestrator) stepSetHostname(context.Context) error { return o.conf.SetHostname(o.cfg) }

func (o *Orchestrator) stepConfigureDNS(context.Context) error { return o.conf.ConfigureDNS(o.cfg) }

func (o *Orchestrator) stepConfigureNetwork(context.Context) error {
	return o.conf.ConfigureNetwork(o.cfg)
}

func (o *Orchestrator) stepConfigureKubelet(context.Context) error {
	return o.conf.ConfigureKubelet(o.cfg)
}

func (o *Orchestrator) stepCloudInitSeed(context.Context) error {
	return o.conf.WriteCloudInitSeed(o.cfg)
}

func (o *Orchestrator) stepMachineCommands(ctx context.Context) error {
	return o.conf.RunMachineCommands(ctx)
}

func (o *Orchestrator) stepPostProvision(ctx context.Context) error {
	return o.conf.RunPostProvisionCmds(ctx, o.cfg.PostProvisionCommands)
}

func (o *Orchestrator) stepConfigureGRUB(ctx context.Context) error {
	return o.conf.ConfigureGRUB(ctx, o.cfg)
}

func (o *Orchestrator) stepEFIBootEntry(ctx context.Context) error {
	t := o.SelectedDisk()
	if err := o.conf.RemoveEFIBootEntries(ctx); err != nil {
		return err
	}
	if err := o.conf.CreateEFIBootEntry(ctx, t.Path, ""); err != nil {
		return err
	}
	if order, err := o.conf.efiVars.BootOrder(); err == nil && len(order) > 0 {
		o.addDetail(map[string]string{"efiBootEntry": fmt.Sprintf("Boot%04X", order[0])})
	}
	return nil
}

// stepPrepareKexec finds the installed OS's default boot entry and copies
// its kernel and initrds out of the installed OS, which is unmounted before
// the handoff.
func (o *Orchestrator) stepPrepareKexec(ctx context.Context) error {
	target, err := o.mountedOS()
	if err != nil {
		return err
	}
	e, err := o.findBootEntry(target.Root())
	if err != nil {
		return fmt.Errorf("find the installed kernel: %w", err)
	}
	if err := os.MkdirAll(o.kexecDir, 0o700); err != nil {
		return fmt.Errorf("prepare kexec: %w", err)
	}
	k := &KexecEntry{Kernel: filepath.Join(o.kexecDir, "vmlinuz"), Cmdline: e.Cmdline, Source: e.Source}
	if err := concatFiles(k.Kernel, []string{e.Kernel}); err != nil {
		return fmt.Errorf("prepare kexec: %w", err)
	}
	initrds := e.Initrds
	if len(initrds) == 0 && e.Initrd != "" {
		initrds = []string{e.Initrd}
	}
	if len(initrds) > 0 {
		k.Initrd = filepath.Join(o.kexecDir, "initrd")
		if err := concatFiles(k.Initrd, initrds); err != nil {
			return fmt.Errorf("prepare kexec: %w", err)
		}
	}
	o.mu.Lock()
	o.kexec = k
	o.mu.Unlock()
	o.log.Info("kexec target ready", "entry", e.Title, "source", e.Source, "kernel", e.Kernel, "cmdline", e.Cmdline)
	o.addDetail(map[string]string{"kernel": e.Kernel, "cmdline": e.Cmdline})
	return nil
}

// concatFiles writes the concatenation of srcs to dst (initrds may be
// several cpio archives; the kernel reads them back to back).
func concatFiles(dst string, srcs []string) error {
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	for _, s := range srcs {
		in, err := os.Open(s)
		if err != nil {
			out.Close()
			return err
		}
		_, err = io.Copy(out, in)
		in.Close()
		if err != nil {
			out.Close()
			return fmt.Errorf("copy %s to %s: %w", s, dst, err)
		}
	}
	return out.Close()
}

// stepDisableBoot renames every grub.cfg of the installed OS (/boot/grub,
// /boot/grub2 and the ESP's EFI/*/), so GRUB finds no configuration and the
// machine no longer boots the OS, while its data stays.
func (o *Orchestrator) stepDisableBoot(ctx context.Context) error {
	target, err := o.mountedOS()
	if err != nil {
		return err
	}
	root := target.Root()
	var found []string
	for _, pattern := range []string{"boot/grub/grub.cfg", "boot/grub2/grub.cfg", "boot/efi/EFI/*/grub.cfg", "efi/EFI/*/grub.cfg"} {
		m, _ := filepath.Glob(filepath.Join(root, pattern))
		found = append(found, m...)
	}
	if len(found) == 0 {
		return fmt.Errorf("no grub.cfg in the installed OS on %s: nothing to disable", o.SelectedDisk().Path)
	}
	var renamed []string
	for _, f := range found {
		if err := os.Rename(f, f+disabledSuffix); err != nil {
			return fmt.Errorf("disable %s: %w", strings.TrimPrefix(f, root), err)
		}
		renamed = append(renamed, strings.TrimPrefix(f, root))
	}
	o.log.Info("boot disabled: grub.cfg renamed", "files", renamed, "suffix", disabledSuffix)
	o.addDetail(map[string]string{"disabled": strings.Join(renamed, ",")})
	return nil
}

func (o *Orchestrator) stepUnmountRoot(ctx context.Context) error {
	o.mu.Lock()
	target := o.installed
	o.installed = nil
	o.mu.Unlock()
	if target == nil {
		return nil
	}
	return target.Unmount()
}

func (o *Orchestrator) stepSetupMellanox(ctx context.Context) error {
	changed, err := o.setupMellanox(ctx, o.cfg.Mellanox.NumVFs)
	if err != nil {
		return err
	}
	if changed {
		o.mu.Lock()
		o.firmwareChanged = true
		o.mu.Unlock()
		o.log.Info("firmware values changed: handoff will be a hard reboot")
	}
	o.addDetail(map[string]string{"firmwareChanged": fmt.Sprint(changed)})
	return nil
}

func (o *Orchestrator) stepReportSuccess(ctx context.Context) error {
	o.log.Info("provisioning succeeded", "hostname", o.cfg.Hostname)
	return nil
}
