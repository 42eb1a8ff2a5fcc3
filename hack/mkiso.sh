#!/usr/bin/env bash
# hack/mkiso.sh KERNEL INITRD OUT.iso [EXTRA_CMDLINE]
#
# Builds a hybrid BIOS+UEFI bootable ISO (GRUB, via grub-mkrescue) that boots
# booty's kernel and initramfs: the virtual-media case. The machine's config
# comes from a second medium labelled BOOTY or config-2 (see README), or from
# booty.config=/booty.server= in EXTRA_CMDLINE.
set -euo pipefail
if [ $# -lt 3 ]; then
  echo "usage: $0 KERNEL INITRD OUT.iso [EXTRA_CMDLINE]" >&2
  exit 2
fi
kernel=$1 initrd=$2 out=$3 extra=${4:-}
for f in "$kernel" "$initrd"; do
  [ -r "$f" ] || { echo "mkiso: cannot read $f (run 'make initramfs')" >&2; exit 1; }
done
command -v grub-mkrescue >/dev/null || { echo "mkiso: grub-mkrescue missing (run 'make deps')" >&2; exit 1; }

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/boot/grub"
cp "$kernel" "$stage/boot/vmlinuz"
cp "$initrd" "$stage/boot/initramfs.img"
cat > "$stage/boot/grub/grub.cfg" <<CFG
set timeout=1
set default=0
serial --unit=0 --speed=115200
terminal_input serial console
terminal_output serial console
menuentry "booty" {
  linux /boot/vmlinuz console=tty0 console=ttyS0,115200 $extra
  initrd /boot/initramfs.img
}
CFG
mkdir -p "$(dirname "$out")"
# grub-mkrescue builds both the BIOS (El Torito) and the EFI (FAT image)
# boot paths when grub-pc-bin and grub-efi-amd64-bin are installed.
SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-1700000000} grub-mkrescue -o "$out.tmp" "$stage" -- -volid BOOTY_AGENT >/dev/null 2>&1 \
  || { echo "mkiso: grub-mkrescue failed" >&2; grub-mkrescue -o "$out.tmp" "$stage" -- -volid BOOTY_AGENT; exit 1; }
mv "$out.tmp" "$out"
echo "mkiso: wrote $out ($(du -h "$out" | cut -f1))"
