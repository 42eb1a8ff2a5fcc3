// Package bootloader reads and edits what the firmware and the installed OS's
// boot loader use to start the installed kernel, after the image is written
// and its root filesystem is mounted:
//
//   - DefaultEntry finds the kernel, initrd and command line the installed OS
//     boots by default (Boot Loader Specification entries, then grub.cfg, then
//     Debian's /boot/vmlinuz symlinks), so the agent can kexec into it.
//   - SetGrubDefaultCmdline and SetBLSOptions add kernel parameters.
//   - EFIVars reads and writes Boot#### and BootOrder through efivarfs.
//   - FindLoader picks the EFI loader on a mounted EFI system partition.
//
// Nothing here runs commands or touches the host: every function takes the
// root directory or file it works on, and EFIVars takes the efivarfs
// directory, so tests run on temp dirs.
package bootloader
