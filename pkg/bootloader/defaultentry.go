package bootloader

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path"
	"strings"
)

// ErrNoBootEntry is wrapped by DefaultEntry's error when no source
// yielded a bootable entry; the message lists every source tried and why
// it failed.
var ErrNoBootEntry = errors.New("no default boot entry found")

// BootEntry is what the installed OS boots by default.
type BootEntry struct {
	// Title is the menu title ("Debian GNU/Linux"), the BLS title, or a
	// description of the fallback used.
	Title string
	// ID is the menuentry --id or the BLS entry's file name without
	// .conf; empty when there is none.
	ID string
	// Kernel and Initrd are host paths: the root directory passed to
	// DefaultEntry joined with the file's path in the installed OS, with
	// symlinks resolved inside root. Initrd is empty when the entry loads
	// none; with several initrds it is the last (the initramfs; microcode
	// images come first) and Initrds holds them all in load order, to be
	// concatenated by a caller that wants all of them.
	Kernel  string
	Initrd  string
	Initrds []string
	// Cmdline is the kernel command line the entry passes, variables
	// expanded; GRUB's own BOOT_IMAGE= is not added.
	Cmdline string
	// Source says where the entry came from: the BLS file, the grub.cfg
	// with the menu path followed, or the fallback's files.
	Source string
}

// grubConfigs are the grub.cfg files tried in order; ESP configs follow.
var grubConfigs = []string{"/boot/grub/grub.cfg", "/boot/grub2/grub.cfg"}

// DefaultEntry finds the default boot entry of the installed OS mounted
// at root, trying in order:
//
//  1. Boot Loader Specification entries (/boot/loader/entries/*.conf,
//     then the ESP's loader/entries): sorted as systemd-boot sorts them,
//     the default taken from GRUB's default variable as grub.cfg leaves it
//     (or grubenv's next_entry/saved_entry without a grub.cfg), $variables
//     in options and initrd expanded from the same environment
//     ($kernelopts from grubenv on RHEL 8).
//  2. grub.cfg: /boot/grub/grub.cfg, /boot/grub2/grub.cfg, then
//     /boot/efi/EFI/*/grub.cfg, interpreted (configfile/source followed,
//     up to 8 deep) to find the entry "default" names.
//  3. Debian's /boot/vmlinuz and /boot/initrd.img symlinks (or /vmlinuz,
//     /initrd.img) with root= from fstab and GRUB_CMDLINE_LINUX and
//     GRUB_CMDLINE_LINUX_DEFAULT from /etc/default/grub(.d).
//
// GRUB paths are placed through the installed OS's fstab: a separate /boot
// makes "/vmlinuz-…" mean root/boot/vmlinuz-…. A source is only accepted
// when its kernel and initrds exist. On failure the error wraps
// ErrNoBootEntry and says what each source lacked.
func DefaultEntry(root string) (*BootEntry, error) {
	return defaultEntry(root, slog.Default().With("component", "bootloader"))
}

func defaultEntry(root string, log *slog.Logger) (*BootEntry, error) {
	fsys, err := newRootFS(root)
	if err != nil {
		return nil, fmt.Errorf("find default boot entry in %s: %w", root, err)
	}
	var tried []string
	fail := func(what string, err error) { tried = append(tried, what+": "+err.Error()) }

	// 1. BLS.
	for _, dir := range blsDirs {
		entries, err := loadBLS(fsys, dir)
		if err != nil {
			fail(dir, err)
			continue
		}
		if len(entries) == 0 {
			fail(dir, errors.New("no entries"))
			continue
		}
		e, err := fsys.blsDefault(entries, dir, log)
		if err != nil {
			fail(dir, err)
			continue
		}
		return e, nil
	}

	// 2. grub.cfg.
	cfgs := append(append([]string(nil), grubConfigs...), fsys.globSorted("/boot/efi/EFI/*/grub.cfg")...)
	for _, cfg := range cfgs {
		if !fsys.exists(cfg) {
			fail(cfg, errors.New("not found"))
			continue
		}
		e, err := fsys.grubDefault(cfg, log)
		if err != nil {
			fail(cfg, err)
			continue
		}
		return e, nil
	}
	if len(fsys.globSorted("/boot/efi/EFI/*/grub.cfg")) == 0 {
		tried = append(tried, "/boot/efi/EFI/*/grub.cfg: not found")
	}

	// 3. Debian symlinks.
	e, err := fsys.debianDefault()
	if err != nil {
		fail("/boot/vmlinuz, /vmlinuz", err)
		return nil, fmt.Errorf("find default boot entry in %s: tried %s: %w", root, strings.Join(tried, "; "), ErrNoBootEntry)
	}
	return e, nil
}

// grubEnvironment returns the variables GRUB has when it reaches the
// menu: those the first grub.cfg that runs leaves, else grubenv's.
func (r *rootFS) grubEnvironment(log *slog.Logger) (vars map[string]string, def string) {
	for _, cfg := range append(append([]string(nil), grubConfigs...), r.globSorted("/boot/efi/EFI/*/grub.cfg")...) {
		if !r.exists(cfg) {
			continue
		}
		in, err := runGrubConfig(r, log, cfg)
		if err != nil {
			log.Warn("ignoring grub.cfg for BLS defaults", "file", cfg, "err", err)
			continue
		}
		return in.vars, in.vars["default"]
	}
	for _, f := range []string{"/boot/grub2/grubenv", "/boot/grub/grubenv"} {
		env, err := readGrubenv(r.host(f))
		if err == nil && len(env) > 0 {
			if env["next_entry"] != "" {
				return env, env["next_entry"]
			}
			return env, env["saved_entry"]
		}
	}
	return map[string]string{}, ""
}

func (r *rootFS) blsDefault(entries []blsEntry, dir string, log *slog.Logger) (*BootEntry, error) {
	vars, def := r.grubEnvironment(log)
	e, ok := selectBLS(entries, def)
	if !ok {
		log.Warn("grub default matches no BLS entry, using the newest", "default", def, "entry", e.id)
	}
	dev := ""
	if m := r.mountOf(dir); m != "/" {
		dev = grubDevPrefix + m
	}
	var opts []string
	for _, o := range e.options {
		opts = append(opts, strings.Fields(expandVars(o, vars))...)
	}
	b := &grubBoot{kernel: r.resolveGrub(dev, expandVars(e.linux, vars)), args: opts}
	for _, i := range e.initrds {
		for _, f := range strings.Fields(expandVars(i, vars)) {
			b.initrds = append(b.initrds, r.resolveGrub(dev, f))
		}
	}
	return r.entry(e.title, e.id, b, e.file)
}

func (r *rootFS) grubDefault(cfg string, log *slog.Logger) (*BootEntry, error) {
	in, err := runGrubConfig(r, log, cfg)
	if err != nil {
		return nil, err
	}
	if len(in.items) == 0 {
		return nil, errors.New("no menu entries")
	}
	it, trail, err := selectDefault(in.items, in.vars["default"], log)
	if err != nil {
		return nil, err
	}
	b, err := in.bootEntry(it)
	if err != nil {
		return nil, err
	}
	return r.entry(it.title, it.id, b, fmt.Sprintf("%s (%s)", it.file, strings.Join(trail, ">")))
}

// entry checks that the kernel and initrds exist and builds the result.
func (r *rootFS) entry(title, id string, b *grubBoot, source string) (*BootEntry, error) {
	e := &BootEntry{Title: title, ID: id, Cmdline: joinCmdline(b.args), Source: source}
	check := func(what, rel string) (string, error) {
		h := r.host(rel)
		st, err := os.Stat(h)
		if err != nil {
			return "", fmt.Errorf("%s %s: %w", what, rel, err)
		}
		if !st.Mode().IsRegular() {
			return "", fmt.Errorf("%s %s: not a regular file", what, rel)
		}
		return h, nil
	}
	var err error
	if e.Kernel, err = check("kernel", b.kernel); err != nil {
		return nil, err
	}
	for _, i := range b.initrds {
		h, err := check("initrd", i)
		if err != nil {
			return nil, err
		}
		e.Initrds = append(e.Initrds, h)
	}
	if len(e.Initrds) > 0 {
		e.Initrd = e.Initrds[len(e.Initrds)-1]
	}
	return e, nil
}

// debianDefault builds an entry from the /boot/vmlinuz symlinks Debian's
// kernel postinst maintains.
func (r *rootFS) debianDefault() (*BootEntry, error) {
	pick := func(names ...string) string {
		for _, n := range names {
			if _, err := os.Lstat(path.Join(r.root, n)); err == nil && r.exists(n) {
				return n
			}
		}
		return ""
	}
	kernel := pick("/boot/vmlinuz", "/vmlinuz")
	if kernel == "" {
		return nil, errors.New("not found")
	}
	initrd := pick(strings.Replace(kernel, "vmlinuz", "initrd.img", 1), "/boot/initrd.img", "/initrd.img")
	spec := r.rootSpec()
	if spec == "" {
		return nil, errors.New("fstab names no root file system for root=")
	}
	vars, err := readShellVars(r.host("/etc/default/grub"), r.globSorted("/etc/default/grub.d/*.cfg"), r)
	if err != nil {
		return nil, err
	}
	args := append([]string{"root=" + spec, "ro"}, splitParams(vars["GRUB_CMDLINE_LINUX"])...)
	args = append(args, splitParams(vars["GRUB_CMDLINE_LINUX_DEFAULT"])...)
	b := &grubBoot{kernel: r.resolveLinks(kernel), args: args}
	src := kernel
	if initrd != "" {
		b.initrds = []string{r.resolveLinks(initrd)}
		src += ", " + initrd
	}
	e, err := r.entry("Linux ("+path.Base(b.kernel)+")", "", b, src)
	if err != nil {
		return nil, err
	}
	e.Cmdline = strings.Join(args, " ")
	return e, nil
}
