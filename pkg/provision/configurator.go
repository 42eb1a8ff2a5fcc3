package provision

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/netip"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/booty-dev/booty/pkg/bootloader"
	"github.com/booty-dev/booty/pkg/chroot"
	"github.com/booty-dev/booty/pkg/command"
	"github.com/booty-dev/booty/pkg/config"
	"github.com/booty-dev/booty/pkg/disk"
	"github.com/booty-dev/booty/pkg/names"
)

// DefaultDeployDir is the initramfs directory with files and commands
// shipped for the installed OS: file-system/ (copied for every machine),
// machine-files/ (copied for this machine) and machine-commands/ (run in
// the installed OS).
const DefaultDeployDir = "/deploy"

// DefaultStaleBootEntryNames are matched (case-insensitively) against EFI
// boot entries by RemoveEFIBootEntries, in addition to the loader
// directories found on the installed OS's ESP.
var DefaultStaleBootEntryNames = []string{"ubuntu", "debian"}

// ErrNotEFI is wrapped by the EFI boot entry methods when the agent did not
// boot with UEFI (no efivarfs); callers on BIOS machines skip those steps.
var ErrNotEFI = errors.New("no EFI variables: machine did not boot with UEFI")

// Configurator handles post-image OS configuration.
//
// It works on the installed OS mounted at its root directory (SetRootDir;
// Target.Mount prepares it, binds included). Every path it writes is
// resolved inside that root: symlinks in the image are followed as a
// chroot would, and ".." in a name is refused. Commands run through a
// command.Runner, chrooted into the root where they belong to the installed OS.
//
// The methods are independent steps; the orchestrator runs them, each as
// a named step, in this order:
//
//  1. SetupMellanox (agent side, before or after the image is written; its
//     result decides between kexec and a hard reboot)
//  2. Target.Mount, then SetRootDir(target.Root())
//  3. CopyProvisionerFiles, then CopyMachineFiles (machine files win)
//  4. SetHostname, ConfigureDNS, ConfigureKubelet, WriteCloudInitSeed
//  5. RunMachineCommands, then RunPostProvisionCmds(cfg.PostProvisionCommands)
//     (they see the files, hostname and DNS written before)
//  6. ConfigureGRUB (after the commands, so their edits to
//     /etc/default/grub are part of the regenerated grub.cfg)
//  7. RemoveEFIBootEntries, then CreateEFIBootEntry (needs the ESP
//     mounted in the root; both wrap ErrNotEFI on BIOS machines)
//  8. Target.Unmount
//
// Methods with nothing to do for a config (no hostname, no DNS, no
// kubelet settings, no kernel parameters, no cloud-init data, no deploy
// directory) return nil without touching the root.
type Configurator struct {
	disks   *disk.Manager
	rootDir string
	runner  command.Runner
	log     *slog.Logger
	now     func() time.Time

	// deployDir holds file-system/, machine-files/, machine-commands/.
	deployDir string
	// sysfsDir is the agent's sysfs, for PCI devices.
	sysfsDir string
	// mstconfig is the program that reads and sets Mellanox firmware values.
	mstconfig string
	// efiVars reads and writes the machine's boot entries.
	efiVars bootloader.EFIVars
	// espDirs are where the ESP may be mounted inside the root.
	espDirs []string
	// staleNames are matched by RemoveEFIBootEntries.
	staleNames []string
	// readPartitions lists a disk's partitions (CreateEFIBootEntry).
	readPartitions func(ctx context.Context, dev string) ([]disk.Partition, error)
	// pciVendorCheck reports whether a PCI device of a vendor ID ("15b3")
	// is present (SetupMellanox).
	pciVendorCheck func(vendorID string) (bool, error)
	// linkMACs returns the permanent MACs of the named links and the names
	// not found (ConfigureNetwork); nil reads them with netlink.
	linkMACs func(names []string) (map[string]string, []string)
}

// NewConfigurator creates a Configurator for the OS mounted at
// DefaultMountDir, running commands with a command.Exec.
func NewConfigurator(diskMgr *disk.Manager) *Configurator {
	log := slog.Default().With("component", "configurator")
	c := &Configurator{
		disks:      diskMgr,
		rootDir:    DefaultMountDir,
		runner:     command.Exec{Log: log},
		log:        log,
		now:        time.Now,
		deployDir:  DefaultDeployDir,
		sysfsDir:   "/sys",
		mstconfig:  "mstconfig",
		efiVars:    bootloader.EFIVars{Log: log},
		espDirs:    []string{"boot/efi", "efi", "boot"},
		staleNames: slices.Clone(DefaultStaleBootEntryNames),
		// SetPCIVendorCheckFunc's check, asked when SetupMellanox runs.
		pciVendorCheck: defaultVendorCheck,
	}
	c.readPartitions = func(ctx context.Context, dev string) ([]disk.Partition, error) {
		if c.disks == nil {
			return nil, errors.New("no disk manager")
		}
		return c.disks.ReadPartitions(ctx, dev)
	}
	return c
}

// SetRootDir sets where the installed OS is mounted: mount-root calls it
// with the InstalledOS's root, tests with a temp dir.
func (c *Configurator) SetRootDir(dir string) { c.rootDir = dir }

// SetRunner replaces the command runner.
func (c *Configurator) SetRunner(r command.Runner) { c.runner = r }

// SetLogger routes the configurator's logs (and command.Exec's, when it is
// the runner in use) to l.
func (c *Configurator) SetLogger(l *slog.Logger) {
	c.log = l.With("component", "configurator")
	if er, ok := c.runner.(command.Exec); ok {
		er.Log = c.log
		c.runner = er
	}
	c.efiVars.Log = c.log
}

// SetStaleBootEntryNames replaces the names RemoveEFIBootEntries matches
// besides the loader directories on the ESP (default "ubuntu", "debian").
func (c *Configurator) SetStaleBootEntryNames(names ...string) { c.staleNames = slices.Clone(names) }

func (c *Configurator) root() targetFS { return targetFS{dir: c.rootDir} }

// validHostname checks an RFC 1123 host name, with config's grammar.
func validHostname(h string) error {
	if err := names.Hostname(h); err != nil {
		return fmt.Errorf("hostname %w", err)
	}
	return nil
}

// SetHostname writes the hostname to /etc/hostname.
//
// It also points 127.0.1.1 at the name in /etc/hosts (Debian's
// convention): an existing 127.0.1.1 line is replaced, otherwise one is
// added after the 127.0.0.1 line (or at the end); a missing /etc/hosts is
// created with localhost entries. A fully qualified name is written as
// "127.0.1.1 host.example.com host". An empty hostname does nothing; an
// invalid one is an error and nothing is written.
func (c *Configurator) SetHostname(cfg *config.MachineConfig) error {
	h := strings.TrimSpace(cfg.Hostname)
	if h == "" {
		c.log.Info("no hostname configured, /etc/hostname left as in the image")
		return nil
	}
	if err := validHostname(h); err != nil {
		return fmt.Errorf("set hostname: %w", err)
	}
	root := c.root()
	if err := root.writeFile("etc/hostname", []byte(h+"\n"), 0o644); err != nil {
		return fmt.Errorf("set hostname: %w", err)
	}
	names := h
	if short, _, ok := strings.Cut(h, "."); ok {
		names = h + " " + short
	}
	line := "127.0.1.1\t" + names
	old, err := root.readFile("etc/hosts")
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("set hostname: read /etc/hosts: %w", err)
	}
	var out []string
	if len(old) == 0 {
		out = []string{"127.0.0.1\tlocalhost", line, "::1\tlocalhost ip6-localhost ip6-loopback"}
	} else {
		lines := strings.Split(strings.TrimSuffix(string(old), "\n"), "\n")
		replaced, after := false, -1
		for _, l := range lines {
			f := strings.Fields(l)
			if len(f) > 0 && f[0] == "127.0.1.1" {
				if !replaced {
					out = append(out, line)
					replaced = true
				}
				continue
			}
			if len(f) > 0 && f[0] == "127.0.0.1" && after < 0 {
				after = len(out) + 1
			}
			out = append(out, l)
		}
		if !replaced {
			if after < 0 {
				after = len(out)
			}
			out = slices.Insert(out, after, line)
		}
	}
	if err := root.writeFile("etc/hosts", []byte(strings.Join(out, "\n")+"\n"), 0o644); err != nil {
		return fmt.Errorf("set hostname: %w", err)
	}
	c.log.Info("hostname set", "hostname", h)
	return nil
}

// resolvedStubMarkers identify a resolv.conf symlink managed by
// systemd-resolved (stub-resolv.conf or its full resolv.conf).
var resolvedStubMarkers = []string{"systemd/resolve/stub-resolv.conf", "systemd/resolve/resolv.conf"}

// ResolvedDropIn is the systemd-resolved drop-in ConfigureDNS writes when
// the image's /etc/resolv.conf belongs to systemd-resolved.
const ResolvedDropIn = "/etc/systemd/resolved.conf.d/10-booty.conf"

// ConfigureDNS writes resolv.conf to the chroot.
//
// When the image's /etc/resolv.conf is a symlink to systemd-resolved's
// stub (…/systemd/resolve/stub-resolv.conf or …/resolv.conf), the link is
// kept and the servers go to ResolvedDropIn instead ([Resolve] DNS= and
// Domains=), so resolved keeps owning the file. Otherwise /etc/resolv.conf
// becomes a regular file with nameserver and search lines (a symlink to
// anything else is replaced). Nameservers must be IP addresses; an
// invalid one is an error and nothing is written. No nameservers and no
// search domains do nothing.
func (c *Configurator) ConfigureDNS(cfg *config.MachineConfig) error {
	ns, search := cfg.DNS.Nameservers, cfg.DNS.Search
	if len(ns) == 0 && len(search) == 0 {
		c.log.Info("no DNS configured, resolv.conf left as in the image")
		return nil
	}
	for _, n := range ns {
		if _, err := netip.ParseAddr(n); err != nil {
			return fmt.Errorf("configure DNS: nameserver %q is not an IP address", n)
		}
	}
	for _, s := range search {
		if s == "" || strings.ContainsAny(s, " \t\n#;") {
			return fmt.Errorf("configure DNS: search domain %q is not a domain name", s)
		}
	}
	root := c.root()
	if target, err := os.Readlink(filepath.Join(c.rootDir, "etc", "resolv.conf")); err == nil &&
		slices.ContainsFunc(resolvedStubMarkers, func(m string) bool { return strings.HasSuffix(target, m) }) {
		var b strings.Builder
		b.WriteString("# Written by booty.\n[Resolve]\n")
		if len(ns) > 0 {
			b.WriteString("DNS=" + strings.Join(ns, " ") + "\n")
		}
		if len(search) > 0 {
			b.WriteString("Domains=" + strings.Join(search, " ") + "\n")
		}
		if err := root.writeFile(ResolvedDropIn, []byte(b.String()), 0o644); err != nil {
			return fmt.Errorf("configure DNS: %w", err)
		}
		c.log.Info("DNS configured for systemd-resolved", "file", ResolvedDropIn, "nameservers", ns, "search", search)
		return nil
	}
	if len(ns) > 3 {
		c.log.Warn("more than 3 nameservers: the resolver uses only the first 3", "nameservers", ns)
	}
	var b strings.Builder
	b.WriteString("# Written by booty.\n")
	for _, n := range ns {
		b.WriteString("nameserver " + n + "\n")
	}
	if len(search) > 0 {
		b.WriteString("search " + strings.Join(search, " ") + "\n")
	}
	if err := root.writeFile("etc/resolv.conf", []byte(b.String()), 0o644); err != nil {
		return fmt.Errorf("configure DNS: %w", err)
	}
	c.log.Info("DNS configured", "file", "/etc/resolv.conf", "nameservers", ns, "search", search)
	return nil
}

// Kubelet files written by ConfigureKubelet.
const (
	KubeletDropIn      = "/etc/systemd/system/kubelet.service.d/20-booty.conf"
	KubeletDefaults    = "/etc/default/kubelet"
	KubeletSysconfig   = "/etc/sysconfig/kubelet"
	kubeletExtraArgVar = "KUBELET_EXTRA_ARGS"
)

// kubeletArgs returns the validated kubelet flags for spec, labels sorted.
func kubeletArgs(spec config.KubeletSpec) ([]string, error) {
	var args []string
	if spec.ProviderID != "" {
		if err := names.ProviderID(spec.ProviderID); err != nil {
			return nil, err
		}
		args = append(args, "--provider-id="+spec.ProviderID)
	}
	if len(spec.NodeLabels) > 0 {
		keys := slices.Sorted(func(yield func(string) bool) {
			for k := range spec.NodeLabels {
				if !yield(k) {
					return
				}
			}
		})
		var kv []string
		for _, k := range keys {
			if err := names.LabelKey(k); err != nil {
				return nil, fmt.Errorf("node label %w", err)
			}
			if err := names.LabelValue(spec.NodeLabels[k]); err != nil {
				return nil, fmt.Errorf("node label %q: %w", k, err)
			}
			kv = append(kv, k+"="+spec.NodeLabels[k])
		}
		args = append(args, "--node-labels="+strings.Join(kv, ","))
	}
	return args, nil
}

// ConfigureKubelet writes kubelet drop-in configs for provider-id and node labels.
//
// The flags (--provider-id=… and --node-labels=k=v,… sorted by key) go to
// KUBELET_EXTRA_ARGS in two places, because kubeadm's kubelet unit
// (10-kubeadm.conf) reads the variable from an EnvironmentFile, which
// overrides a drop-in's Environment=:
//
//   - KubeletDropIn, a systemd drop-in with Environment="KUBELET_EXTRA_ARGS=…",
//     for units that take the variable from the environment;
//   - KubeletDefaults (/etc/default/kubelet, deb packages) when the image
//     has /etc/default, and KubeletSysconfig (/etc/sysconfig/kubelet, rpm
//     packages) when it has /etc/sysconfig: the KUBELET_EXTRA_ARGS line is
//     replaced (other lines kept; flags other than --provider-id and
//     --node-labels in it are kept too) or added.
//
// A unit whose ExecStart does not use $KUBELET_EXTRA_ARGS ignores both.
// Labels and provider ID are validated first; invalid ones are an error
// and nothing is written. An empty kubelet section does nothing.
func (c *Configurator) ConfigureKubelet(cfg *config.MachineConfig) error {
	args, err := kubeletArgs(cfg.Kubelet)
	if err != nil {
		return fmt.Errorf("configure kubelet: %w", err)
	}
	if len(args) == 0 {
		c.log.Info("no kubelet settings configured")
		return nil
	}
	root := c.root()
	joined := strings.Join(args, " ")
	dropIn := "# Written by booty: this machine's provider ID and node labels.\n[Service]\n" +
		"Environment=\"" + kubeletExtraArgVar + "=" + joined + "\"\n"
	if err := root.writeFile(KubeletDropIn, []byte(dropIn), 0o644); err != nil {
		return fmt.Errorf("configure kubelet: %w", err)
	}
	written := []string{KubeletDropIn}
	for _, f := range []struct{ dir, file string }{{"etc/default", KubeletDefaults}, {"etc/sysconfig", KubeletSysconfig}} {
		if !root.exists(f.dir) {
			continue
		}
		old, err := root.readFile(f.file)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("configure kubelet: read %s: %w", f.file, err)
		}
		if err := root.writeFile(f.file, []byte(setExtraArgs(string(old), args)), 0o644); err != nil {
			return fmt.Errorf("configure kubelet: %w", err)
		}
		written = append(written, f.file)
	}
	c.log.Info("kubelet configured", "files", written, "args", args)
	return nil
}

// setExtraArgs replaces (or appends) the KUBELET_EXTRA_ARGS assignment of
// an environment file, keeping the other flags it had except the ones
// booty sets.
func setExtraArgs(file string, args []string) string {
	var lines []string
	if file != "" {
		lines = strings.Split(strings.TrimSuffix(file, "\n"), "\n")
	}
	idx := -1
	var keep []string
	for i, l := range lines {
		v, ok := strings.CutPrefix(strings.TrimSpace(l), kubeletExtraArgVar+"=")
		if !ok {
			continue
		}
		idx = i
		keep = nil
		words := strings.Fields(strings.Trim(strings.TrimSpace(v), `"'`))
		for j := 0; j < len(words); j++ {
			w := words[j]
			if w == "--provider-id" || w == "--node-labels" {
				j++ // separate value
				continue
			}
			if strings.HasPrefix(w, "--provider-id=") || strings.HasPrefix(w, "--node-labels=") {
				continue
			}
			keep = append(keep, w)
		}
	}
	line := kubeletExtraArgVar + "=\"" + strings.Join(append(keep, args...), " ") + "\""
	if idx >= 0 {
		lines[idx] = line
	} else {
		lines = append(lines, line)
	}
	return strings.Join(lines, "\n") + "\n"
}

// NoCloudSeedDir is where WriteCloudInitSeed puts cloud-init's NoCloud seed.
const NoCloudSeedDir = "/var/lib/cloud/seed/nocloud"

// WriteCloudInitSeed writes cloud-init's NoCloud seed from cfg.CloudInit
// (metal3's user data, meta data and network data) to NoCloudSeedDir:
// user-data (mode 0600, never logged), meta-data and network-config
// (0600). Without meta data, meta-data gets an instance-id
// ("booty-<hostname>-<unix time>", so a reprovisioned machine runs
// cloud-init again) and local-hostname from cfg.Hostname. Without user
// data, user-data is "#cloud-config\n" so that NoCloud still finds a
// complete seed; network-config is only written when given. No cloud-init
// data at all does nothing. On failure the files written before stay.
func (c *Configurator) WriteCloudInitSeed(cfg *config.MachineConfig) error {
	ci := cfg.CloudInit
	if ci.UserData == "" && ci.MetaData == "" && ci.NetworkConfig == "" {
		c.log.Info("no cloud-init data configured")
		return nil
	}
	meta := ci.MetaData
	if meta == "" {
		name := cfg.Hostname
		if name == "" {
			name = "localhost"
		}
		meta = fmt.Sprintf("instance-id: booty-%s-%d\nlocal-hostname: %s\n", name, c.now().Unix(), name)
	}
	user := ci.UserData
	if user == "" {
		user = "#cloud-config\n"
	}
	root := c.root()
	files := []struct {
		name string
		data string
	}{{"meta-data", meta}, {"user-data", user}, {"network-config", ci.NetworkConfig}}
	var written []string
	for _, f := range files {
		if f.data == "" {
			continue
		}
		if err := root.writeFile(path.Join(NoCloudSeedDir, f.name), []byte(f.data), 0o600); err != nil {
			return fmt.Errorf("write cloud-init seed: %w", err)
		}
		written = append(written, f.name)
	}
	c.log.Info("cloud-init NoCloud seed written", "dir", NoCloudSeedDir, "files", written)
	return nil
}

// CopyProvisionerFiles copies files from /deploy/file-system/ to the root.
// See copyTree for what is preserved; a missing directory does nothing.
func (c *Configurator) CopyProvisionerFiles() error {
	return c.copyDeployDir("file-system")
}

// CopyMachineFiles copies files from /deploy/machine-files/ to the root.
// See copyTree for what is preserved; a missing directory does nothing.
func (c *Configurator) CopyMachineFiles() error {
	return c.copyDeployDir("machine-files")
}

func (c *Configurator) copyDeployDir(name string) error {
	src := filepath.Join(c.deployDir, name)
	st, err := os.Stat(src)
	if errors.Is(err, fs.ErrNotExist) {
		c.log.Info("nothing to copy", "dir", src)
		return nil
	}
	if err != nil || !st.IsDir() {
		return fmt.Errorf("copy %s: not a directory (%v)", src, err)
	}
	n, err := copyTree(src, c.root())
	if err != nil {
		return fmt.Errorf("copy %s to %s: %w", src, c.rootDir, err)
	}
	c.log.Info("files copied into the root", "from", src, "entries", n)
	return nil
}

// copyTree copies the tree at src into the root, the way `cp -a` onto a
// chroot would but confined to it: directories are created (an existing
// directory keeps its mode), regular files replace what is there (a
// symlink at the destination is replaced, not written through) with their
// mode bits (including setuid/setgid/sticky) and, as root, owner; symlinks
// are recreated pointing where they pointed. Devices, FIFOs and sockets
// are skipped. It stops at the first error and returns the number of
// entries copied.
func copyTree(src string, dst targetFS) (int, error) {
	n := 0
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil || rel == "." {
			return err
		}
		rel = filepath.ToSlash(rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		mode := info.Mode()
		switch {
		case mode.IsDir():
			if !dst.exists(rel) {
				if _, err := dst.mkdirAll(rel, mode.Perm()); err != nil {
					return err
				}
				if err := dst.chmodOwn(rel, info, true); err != nil {
					return err
				}
			}
		case mode.IsRegular():
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			err = dst.writeFrom(rel, mode.Perm()|mode&(fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky), func(w io.Writer) error {
				_, err := io.Copy(w, f)
				return err
			})
			f.Close()
			if err != nil {
				return err
			}
			if err := dst.chmodOwn(rel, info, false); err != nil {
				return err
			}
		case mode&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			if err := dst.symlink(target, rel); err != nil {
				return err
			}
		default:
			return nil
		}
		n++
		return nil
	})
	return n, err
}

// RunMachineCommands executes commands from /deploy/machine-commands/ in chroot.
//
// Every executable regular file there runs, in lexical order of names:
// it is copied to /tmp/booty-machine-commands/ inside the root and run
// chrooted with no arguments, then removed. Other files are skipped with a
// warning. The first failing command stops the rest; its error names the
// file, the exit code and the end of its stderr. Output is not logged.
func (c *Configurator) RunMachineCommands(ctx context.Context) error {
	dir := filepath.Join(c.deployDir, "machine-commands")
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		c.log.Info("no machine commands", "dir", dir)
		return nil
	}
	if err != nil {
		return fmt.Errorf("run machine commands: %w", err)
	}
	root := c.root()
	const tmpDir = "/tmp/booty-machine-commands"
	defer func() { _ = root.removeAll(tmpDir) }()
	ran := 0
	for _, e := range ents { // ReadDir sorts by name
		info, err := e.Info()
		if err != nil {
			return fmt.Errorf("run machine commands: %w", err)
		}
		if !info.Mode().IsRegular() || info.Mode()&0o111 == 0 {
			c.log.Warn("machine command skipped: not an executable file", "file", e.Name())
			continue
		}
		f, err := os.Open(filepath.Join(dir, e.Name()))
		if err != nil {
			return fmt.Errorf("run machine command %s: %w", e.Name(), err)
		}
		inRoot := path.Join(tmpDir, e.Name())
		err = root.writeFrom(inRoot, 0o755, func(w io.Writer) error { _, err := io.Copy(w, f); return err })
		f.Close()
		if err != nil {
			return fmt.Errorf("run machine command %s: %w", e.Name(), err)
		}
		c.log.Info("running machine command", "file", e.Name())
		if _, _, err := c.runner.RunChroot(command.WithSecretArgs(ctx), c.rootDir, inRoot); err != nil {
			return fmt.Errorf("run machine command %s: %w", e.Name(), err)
		}
		ran++
	}
	c.log.Info("machine commands done", "count", ran)
	return nil
}

// RunPostProvisionCmds executes custom commands in the chroot after provisioning.
// Each command is run via /bin/bash -c in the chroot environment.
//
// When the installed OS has no /bin/bash, /bin/sh -c is used. Commands run
// in order and the first failure stops the rest; its error names the
// command's index (1-based), exit code and the end of its stderr, not the
// command text. Neither the commands nor their output are logged.
func (c *Configurator) RunPostProvisionCmds(ctx context.Context, cmds []string) error {
	if len(cmds) == 0 {
		return nil
	}
	shell := ""
	for _, s := range []string{"/bin/bash", "/bin/sh"} {
		if _, err := chroot.LookPath(c.rootDir, s, command.DefaultPath); err == nil {
			shell = s
			break
		}
	}
	if shell == "" {
		return fmt.Errorf("run post-provision commands: neither /bin/bash nor /bin/sh in %s", c.rootDir)
	}
	for i, cmd := range cmds {
		c.log.Info("running post-provision command", "index", i+1, "of", len(cmds), "shell", shell)
		_, _, err := c.runner.RunChroot(command.WithSecretArgs(ctx), c.rootDir, shell, "-c", cmd)
		if err == nil {
			continue
		}
		return fmt.Errorf("post-provision command %d of %d: %w", i+1, len(cmds), err)
	}
	return nil
}
