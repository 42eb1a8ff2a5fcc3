#!/usr/bin/env bash
# Installs everything booty's build and tests need on a fresh Debian machine.
# Safe to run again: apt-get skips what is present.
set -euo pipefail

PKGS=(
  build-essential make git ca-certificates curl
  linux-image-amd64 kmod          # the kernel the initramfs is built for, and its modules
  qemu-system-x86 qemu-utils ovmf # VM tests (TCG when /dev/kvm is absent)
  iproute2 util-linux             # network namespaces, losetup, unshare
  gdisk mtools dosfstools e2fsprogs xfsprogs # demo and test images
  zstd xz-utils gzip bzip2 lz4 cpio
  debootstrap lvm2                # the bootable Debian test image; LVM root tests
  bmap-tools time                 # make bench: bmaptool anchor, peak RSS
  postgresql                      # pkg/bmdb tests start a real PostgreSQL (initdb, pg_ctl)
  grub-common grub-efi-amd64-bin grub-pc-bin xorriso # make iso (virtual media)
  ipmitool                        # drives the IPMI test BMC (pkg/bmc/bmcsim)
  nginx                           # make bench-serve: the file server bootyd is compared with
  openssh-server                  # pkg/manager: the Initializer's test runs a real sshd in a network namespace
)

if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; else SUDO=; fi
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

if ! command -v go >/dev/null 2>&1 && [ ! -x /usr/local/go/bin/go ]; then
  echo "deps: Go is missing; install Go 1.24 or newer to /usr/local/go" >&2
  exit 1
fi
echo "deps: ok"
