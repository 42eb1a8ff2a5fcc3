#!/usr/bin/env bash
# mkdebianimage.sh [OUTDIR]
#
# Builds the real, bootable Debian 12 (bookworm, amd64) disk image that the
# end-to-end tests provision with booty, and that boots on its own under
# UEFI (OVMF) in QEMU. OUTDIR defaults to ${BOOTY_CACHE:-/var/cache/booty}/debian,
# outside the clone, so the image survives between runs.
#
# How: debootstrap --variant=minbase with a kernel, systemd, udev, kmod,
# e2fsprogs, dosfstools, openssh-server and GRUB for EFI (no cloud-init, no
# docs, man pages or locales: dpkg path-exclude), from the Debian mirror
# configured in this host's apt sources (override with BOOTY_DEBIAN_MIRROR).
# No loop devices, no vfat mount, no device-mapper: the root filesystem is
# made in a file of its own by `mkfs.ext4 -d`, the ESP in another by
# mkfs.vfat and mtools, and both are copied into a GPT image at their
# partition offsets.
#
# GRUB: grub-install cannot run here (it probes the build host's disk and
# wants the ESP mounted as FAT), so the script does what it would do: it
# copies the x86_64-efi modules to /boot/grub/x86_64-efi and makes the EFI
# loader with the image's own grub-mkimage, with an embedded config that
# finds the root filesystem by UUID and sets prefix=($root)/boot/grub. The
# same loader is EFI/BOOT/BOOTX64.EFI (the removable path firmware boots
# without NVRAM entries) and EFI/debian/grubx64.efi; EFI/debian/grub.cfg
# chains to /boot/grub/grub.cfg as Debian's signed GRUB expects. grub.cfg is
# written in update-grub's format; update-grub run later on the provisioned
# disk (in a chroot with /dev, /proc and /sys bound) replaces it, and keeps
# console=ttyS0 from GRUB_CMDLINE_LINUX in /etc/default/grub.
#
# Layout (512-byte sectors, fixed GUIDs and UUIDs, see layout.env):
#   p1  1 MiB..129 MiB  ESP   type ef00, FAT32, label EFI
#   p2  129 MiB..end    root  type 8304 (Linux root x86-64), ext4, label root
#   size: what the root tree needs plus about 200 MiB, in whole MiB.
#
# The image runs booty-proof.service at boot: it prints "BOOTY-PROOF ..."
# lines to /dev/ttyS0 (hostname, resolvers, kernel command line, kubelet
# drop-ins, sha256 of the files listed in /etc/booty-proof.d/files, the
# marker file /var/lib/booty-proof/marker, the EFI BootCurrent), then
# "BOOTY-PROOF done", then powers off (unless /etc/booty-proof.d/no-poweroff
# exists). Root has no password (locked); sshd runs and lets root in by
# key only (/root/.ssh/authorized_keys, absent from the image).
#
# Writes to OUTDIR: debian.img (raw), debian.img.zst (zstd -T0),
# debian.img.sha256 and debian.img.zst.sha256 (sha256sum format), SHA256SUMS
# (both), layout.env (UUIDs, GUIDs, kernel version, sizes) and .key.
#
# Cached: OUTDIR/.key holds a hash of this script; when it matches and every
# output exists nothing is done (FORCE=1 rebuilds). Concurrent runs wait on
# a lock. The build happens in a temporary directory next to OUTDIR and is
# moved into place at the end; mounts are undone on every exit path.
# Downloaded packages are kept in ${BOOTY_CACHE}/debootstrap-debs.
#
# Needs root, network to the Debian mirror, and: debootstrap, gdisk, mtools,
# dosfstools, e2fsprogs, zstd, coreutils, util-linux. See hack/deps.sh.
set -euo pipefail

SCRIPT=$(readlink -f "$0")
CACHE=${BOOTY_CACHE:-/var/cache/booty}
OUT=${1:-$CACHE/debian}
if [ $# -gt 1 ]; then
  echo "usage: $0 [OUTDIR]" >&2
  exit 2
fi
OUT=$(readlink -m "$OUT")
export TZ=UTC LC_ALL=C
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-1700000000}
export E2FSPROGS_FAKE_TIME=$SOURCE_DATE_EPOCH
PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

SUITE=bookworm
ARCH=amd64
HOSTNAME_DEFAULT=booty-debian
DISK_GUID=b0075eed-d1b1-4e00-8000-000000000001
ESP_GUID=b0075eed-d1b1-4e00-8000-000000000002
ROOT_GUID=b0075eed-d1b1-4e00-8000-000000000003
ROOT_FS_UUID=b0075eed-d1b1-4e00-8000-000000000004
ESP_VOLID=B0071DEB
ESP_FS_UUID=B007-1DEB
ESP_TYPE=C12A7328-F81F-11D2-BA4B-00A0C93EC93B
ROOT_TYPE=4F68BCE3-E8CD-4DB1-96E7-FBCAF984B709

MIB=$((1024 * 1024))
ESP_START_MIB=1
ESP_MIB=128
ROOT_START_MIB=$((ESP_START_MIB + ESP_MIB))
HEADROOM_MIB=200

KEY=$( (cat "$SCRIPT"; echo "$SUITE $ARCH") | sha256sum | cut -c1-32)
outputs=(debian.img debian.img.zst debian.img.sha256 debian.img.zst.sha256 SHA256SUMS layout.env)

log() { echo "mkdebianimage: $*" >&2; }
die() { log "$*"; exit 1; }

T0=$(date +%s)
TPHASE=$T0
phase() { # phase NAME: logs how long the previous phase took
  local now
  now=$(date +%s)
  log "$1 (+$((now - TPHASE))s, total $((now - T0))s)"
  TPHASE=$now
}

uptodate() {
  [ "${FORCE:-0}" = 1 ] && return 1
  [ "$(cat "$OUT/.key" 2>/dev/null)" = "$KEY" ] || return 1
  local f
  for f in "${outputs[@]}"; do
    [ -s "$OUT/$f" ] || return 1
  done
}

need() {
  local missing=() c
  for c in "$@"; do
    command -v "$c" >/dev/null 2>&1 || missing+=("$c")
  done
  [ ${#missing[@]} -eq 0 ] || die "missing ${missing[*]} (run hack/deps.sh)"
}

# debian_mirror prints the Debian archive URI this host's apt uses for
# $SUITE (deb822 .sources or one-line .list files), or BOOTY_DEBIAN_MIRROR.
debian_mirror() {
  if [ -n "${BOOTY_DEBIAN_MIRROR:-}" ]; then
    echo "${BOOTY_DEBIAN_MIRROR%/}"
    return
  fi
  local f
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] || continue
    # One stanza per blank-line-separated paragraph.
    awk -v suite="$SUITE" '
      function flush() {
        if (types ~ /(^| )deb( |$)/ && (" " suites " ") ~ (" " suite " ") && uris != "") {
          split(uris, u, " "); print u[1]; found = 1; exit
        }
        types = ""; suites = ""; uris = ""
      }
      /^[ \t]*#/ { next }
      /^[ \t]*$/ { flush(); next }
      /^Types:/  { sub(/^Types:[ \t]*/, ""); types = $0 }
      /^Suites:/ { sub(/^Suites:[ \t]*/, ""); suites = $0 }
      /^URIs:/   { sub(/^URIs:[ \t]*/, ""); uris = $0 }
      END { if (!found) flush() }
    ' "$f"
  done | head -n1 | grep . && return
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [ -f "$f" ] || continue
    # deb [options] URI SUITE COMPONENTS...
    sed -e 's/\[[^]]*\]//' "$f" | awk -v suite="$SUITE" '$1 == "deb" && $3 == suite { print $2; exit }'
  done | head -n1 | grep . && return
  return 1
}

if [ "$(id -u)" -ne 0 ]; then
  die "needs root (debootstrap, chroot)"
fi
mkdir -p "$(dirname "$OUT")"
exec 9>"$OUT.lock"
if ! flock -n 9; then
  log "waiting for another build of $OUT"
  flock 9
fi
if uptodate; then
  log "$OUT is up to date (key $KEY)"
  exit 0
fi

need debootstrap sgdisk mkfs.vfat mmd mcopy mdir mkfs.ext4 e2fsck zstd sha256sum chroot findmnt flock truncate dd
log "output $OUT, key $KEY"

WORK=$(mktemp -d "$(dirname "$OUT")/.mkdebianimage.XXXXXX")
ROOT=$WORK/rootfs
ESPDIR=$WORK/esp

cleanup() {
  local rc=$? m
  # Undo every mount under WORK, deepest first, then remove WORK.
  for m in $(findmnt -rn -o TARGET | grep -F "$WORK/" | sort -r); do
    umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || log "cannot unmount $m"
  done
  if findmnt -rn -o TARGET | grep -qF "$WORK/"; then
    log "mounts left under $WORK; not removing it"
  else
    rm -rf "$WORK"
  fi
  [ $rc -eq 0 ] || log "failed (exit $rc) after $(($(date +%s) - T0))s"
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

in_root() {
  chroot "$ROOT" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin LC_ALL=C TZ=UTC \
    DEBIAN_FRONTEND=noninteractive HOME=/root "$@"
}

bind_mounts() {
  local d
  for d in dev proc sys; do
    mkdir -p "$ROOT/$d"
    if ! mountpoint -q "$ROOT/$d"; then
      mount --rbind "/$d" "$ROOT/$d"
      mount --make-rslave "$ROOT/$d"
    fi
  done
}

unbind_mounts() {
  local m
  for m in $(findmnt -rn -o TARGET | grep -F "$ROOT/" | sort -r); do
    umount "$m" 2>/dev/null || umount -l "$m"
  done
}

# ----------------------------------------------------------------------- base
# The base tree (debootstrap and the initramfs) takes most of the build
# time; it is cached as a tarball keyed by the text between the BASE
# markers, so edits elsewhere in this script rebuild in a minute.
# BEGIN BASE
build_base() {
  local mirror
  mirror=$(debian_mirror) || die "no deb source for $SUITE in /etc/apt/sources.list(.d); set BOOTY_DEBIAN_MIRROR"
  log "mirror $mirror"
  if command -v curl >/dev/null 2>&1; then
    curl -fsS -o /dev/null --max-time 30 "$mirror/dists/$SUITE/Release" ||
      die "cannot reach $mirror/dists/$SUITE/Release"
  fi
  # Excludes take effect for every package dpkg installs in debootstrap's
  # second stage (the first stage only unpacks; the leftovers are removed
  # later). Kernel modules for hardware a test machine never has are left
  # out too.
  mkdir -p "$ROOT/etc/dpkg/dpkg.cfg.d"
  cat >"$ROOT/etc/dpkg/dpkg.cfg.d/01-booty-minimal" <<'EOF'
# booty test image: no documentation, manuals or translations.
path-exclude=/usr/share/doc/*
path-include=/usr/share/doc/*/copyright
path-exclude=/usr/share/man/*
path-exclude=/usr/share/info/*
path-exclude=/usr/share/locale/*
path-include=/usr/share/locale/locale.alias
path-exclude=/usr/share/lintian/*
path-exclude=/usr/share/bug/*
# Kernel modules for hardware no test machine has.
path-exclude=/lib/modules/*/kernel/sound/*
path-exclude=/lib/modules/*/kernel/drivers/gpu/*
path-exclude=/lib/modules/*/kernel/drivers/media/*
path-exclude=/lib/modules/*/kernel/drivers/net/wireless/*
path-exclude=/lib/modules/*/kernel/drivers/infiniband/*
path-exclude=/lib/modules/*/kernel/drivers/staging/*
path-exclude=/lib/modules/*/kernel/drivers/bluetooth/*
path-exclude=/lib/modules/*/kernel/drivers/iio/*
path-exclude=/lib/modules/*/kernel/drivers/isdn/*
path-exclude=/lib/modules/*/kernel/net/bluetooth/*
path-exclude=/lib/modules/*/kernel/net/wireless/*
path-exclude=/lib/modules/*/kernel/net/mac80211/*
EOF
  local debs=$CACHE/debootstrap-debs
  mkdir -p "$debs"
  local include=linux-image-amd64,initramfs-tools,zstd,systemd-sysv,udev,kmod,e2fsprogs,dosfstools,grub-efi-amd64,grub-efi-amd64-bin,ca-certificates,openssh-server
  phase "debootstrap $SUITE ($include)"
  # INITRD=No: the kernel's postinst hook leaves the initramfs out (the
  # initramfs-tools trigger would build it a second time); it is built
  # once below.
  if ! INITRD=No debootstrap --variant=minbase --arch="$ARCH" --cache-dir="$debs" \
    --exclude=cloud-init --include="$include" \
    "$SUITE" "$ROOT" "$mirror" >"$WORK/debootstrap.log" 2>&1; then
    tail -n 40 "$WORK/debootstrap.log" >&2
    [ -f "$ROOT/debootstrap/debootstrap.log" ] && tail -n 40 "$ROOT/debootstrap/debootstrap.log" >&2
    die "debootstrap failed"
  fi
  unbind_mounts
  [ ! -e "$ROOT/usr/bin/cloud-init" ] || die "cloud-init got into the image"

  phase "initramfs"
  bind_mounts
  local kver
  kver=$(cd "$ROOT/boot" && ls vmlinuz-* | sed 's/^vmlinuz-//' | sort -V | tail -n1)
  [ -n "$kver" ] || die "no kernel in /boot"
  rm -f "$ROOT/boot/initrd.img-$kver" "$ROOT/boot/initrd.img-$kver.dpkg-bak"
  in_root update-initramfs -c -k "$kver" >"$WORK/initramfs.log" 2>&1 ||
    { cat "$WORK/initramfs.log" >&2; die "update-initramfs failed"; }
  unbind_mounts
}
# END BASE
BASE_KEY=$( (sed -n '/^# BEGIN BASE$/,/^# END BASE$/p' "$SCRIPT"; echo "$SUITE $ARCH") | sha256sum | cut -c1-32)
BASE_TAR=$CACHE/debian-base/$BASE_KEY.tar.zst
if [ "${FORCE:-0}" != 1 ] && [ -s "$BASE_TAR" ]; then
  phase "base from cache $BASE_TAR"
  mkdir -p "$ROOT"
  zstd -dc "$BASE_TAR" | tar -C "$ROOT" --numeric-owner --xattrs --xattrs-include='*' -xpf -
else
  build_base
  phase "cache base as $BASE_TAR"
  mkdir -p "$CACHE/debian-base"
  rm -f "$CACHE"/debian-base/*.tar.zst
  tar -C "$ROOT" --numeric-owner --xattrs --xattrs-include='*' -cf - . | zstd -q -T0 -3 -o "$BASE_TAR.tmp"
  mv "$BASE_TAR.tmp" "$BASE_TAR"
fi

# ------------------------------------------------------------------ configure
phase "configure"
bind_mounts
KVER=$(cd "$ROOT/boot" && ls vmlinuz-* | sed 's/^vmlinuz-//' | sort -V | tail -n1)
[ -n "$KVER" ] || die "no kernel in /boot"
[ -s "$ROOT/boot/initrd.img-$KVER" ] || die "no initramfs for $KVER"
in_root lsinitramfs "/boot/initrd.img-$KVER" >"$WORK/initramfs.list"
for m in virtio_blk virtio_pci ext4; do
  # Built into the kernel, or a module in the initramfs.
  if ! grep -qE "/$m\.ko" "$ROOT/lib/modules/$KVER/modules.builtin" &&
    ! grep -qE "/$m\.ko" "$WORK/initramfs.list"; then
    die "initramfs of $KVER lacks $m"
  fi
done

echo "$HOSTNAME_DEFAULT" >"$ROOT/etc/hostname"
cat >"$ROOT/etc/hosts" <<EOF
127.0.0.1	localhost
127.0.1.1	$HOSTNAME_DEFAULT
::1		localhost ip6-localhost ip6-loopback
ff02::1		ip6-allnodes
ff02::2		ip6-allrouters
EOF
# debootstrap copied the build host's resolvers; the image has none until
# it is provisioned.
rm -f "$ROOT/etc/resolv.conf"
echo "# written by booty at provisioning" >"$ROOT/etc/resolv.conf"
# An empty machine-id: systemd makes a new one on first boot.
: >"$ROOT/etc/machine-id"
rm -f "$ROOT/var/lib/dbus/machine-id"
cat >"$ROOT/etc/fstab" <<EOF
# <file system> <mount point> <type> <options> <dump> <pass>
UUID=$ROOT_FS_UUID / ext4 errors=remount-ro 0 1
UUID=$ESP_FS_UUID /boot/efi vfat umask=0077 0 1
EOF
mkdir -p "$ROOT/boot/efi"
in_root passwd -l root >/dev/null

# sshd (for the Initializer's takeover test): root logs in by key only,
# from /root/.ssh/authorized_keys, which the image does not have. The host
# keys made by the package's postinst are shared by every copy of the image.
mkdir -p "$ROOT/etc/ssh/sshd_config.d"
cat >"$ROOT/etc/ssh/sshd_config.d/10-booty.conf" <<'EOF'
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
EOF
[ -s "$ROOT/etc/ssh/ssh_host_ed25519_key" ] || die "openssh-server made no host key"
in_root systemctl enable ssh.service >/dev/null 2>&1

# Network: systemd-networkd, DHCP on every ethernet NIC; nothing waits for it.
cat >"$ROOT/etc/systemd/network/80-dhcp.network" <<'EOF'
[Match]
Type=ether

[Network]
DHCP=yes
EOF
in_root systemctl enable systemd-networkd.service >/dev/null 2>&1
in_root systemctl mask systemd-networkd-wait-online.service >/dev/null 2>&1

# The proof service.
mkdir -p "$ROOT/etc/booty-proof.d" "$ROOT/var/lib/booty-proof"
cat >"$ROOT/usr/local/sbin/booty-proof" <<'EOF'
#!/bin/sh
# Prints facts about this boot to the serial console, one "BOOTY-PROOF" line
# each, for booty's end-to-end tests, then powers the machine off (unless
# /etc/booty-proof.d/no-poweroff exists).
out=/dev/ttyS0
[ -w "$out" ] || out=/dev/console
p() { printf 'BOOTY-PROOF %s\n' "$*" >"$out"; }
oneline() { tr '\n' '\036' | sed -e 's/\o036*$//' -e 's/\o036/; /g'; }

p "hostname=$(hostname)"
p "resolv=$(awk '$1 == "nameserver" { print $2 }' /etc/resolv.conf 2>/dev/null | paste -sd, -)"
p "cmdline=$(cat /proc/cmdline)"
p "kernel=$(uname -r)"
p "rootdev=$(findmnt -no SOURCE /)"
p "kubelet=$(cat /etc/systemd/system/kubelet.service.d/*.conf 2>/dev/null | grep -v '^[[:space:]]*$' | oneline)"
if [ -f /etc/booty-proof.d/files ]; then
  while IFS= read -r f || [ -n "$f" ]; do
    case $f in '' | '#'*) continue ;; esac
    if [ -f "$f" ]; then
      p "file $f sha256=$(sha256sum <"$f" | cut -d' ' -f1)"
    else
      p "file $f missing"
    fi
  done </etc/booty-proof.d/files
fi
if [ -f /var/lib/booty-proof/marker ]; then
  p "marker=$(oneline </var/lib/booty-proof/marker)"
fi
efivar() { # efivar NAME: the variable's data (after the 4 attribute bytes) as hex bytes
  v=/sys/firmware/efi/efivars/$1-8be4df61-93ca-11d2-aa0d-00e098032b8c
  [ -r "$v" ] && od -An -v -tx1 -j4 "$v" | tr -s ' \n' ' '
}
if cur=$(efivar BootCurrent); then
  set -- $cur
  p "efi-current=Boot$(printf '%s%s' "$2" "$1" | tr a-f A-F)"
fi
if order=$(efivar BootOrder); then
  set -- $order
  s=
  while [ $# -ge 2 ]; do
    s="$s,$(printf '%s%s' "$2" "$1" | tr a-f A-F)"
    shift 2
  done
  p "efi-order=${s#,}"
fi
p "done"
if [ ! -e /etc/booty-proof.d/no-poweroff ]; then
  systemctl --no-block poweroff
fi
EOF
chmod 0755 "$ROOT/usr/local/sbin/booty-proof"
cat >"$ROOT/etc/systemd/system/booty-proof.service" <<'EOF'
[Unit]
Description=Print booty end-to-end proof lines to the serial console
After=local-fs.target
Wants=local-fs.target

[Service]
Type=oneshot
ExecStart=/usr/local/sbin/booty-proof
StandardOutput=journal+console

[Install]
WantedBy=multi-user.target
EOF
in_root systemctl enable booty-proof.service >/dev/null 2>&1

# ----------------------------------------------------------------------- GRUB
phase "grub"
cat >"$ROOT/etc/default/grub" <<'EOF'
# booty test image. update-grub reads this; keep console=ttyS0.
GRUB_DEFAULT=0
GRUB_TIMEOUT=0
GRUB_DISTRIBUTOR=`lsb_release -i -s 2> /dev/null || echo Debian`
GRUB_CMDLINE_LINUX_DEFAULT=""
GRUB_CMDLINE_LINUX="console=ttyS0,115200"
GRUB_TERMINAL=console
GRUB_DISABLE_OS_PROBER=true
EOF
# What grub-install puts in /boot/grub: modules, font, environment block.
mkdir -p "$ROOT/boot/grub/x86_64-efi" "$ROOT/boot/grub/fonts"
cp "$ROOT"/usr/lib/grub/x86_64-efi/*.mod "$ROOT"/usr/lib/grub/x86_64-efi/*.lst "$ROOT/boot/grub/x86_64-efi/"
if [ -f "$ROOT/usr/share/grub/unicode.pf2" ]; then
  cp "$ROOT/usr/share/grub/unicode.pf2" "$ROOT/boot/grub/fonts/"
fi
in_root grub-editenv /boot/grub/grubenv create

# The EFI loader: GRUB core with the modules to find and read the root
# filesystem, and an embedded config that sets the prefix to it.
cat >"$ROOT/tmp/load.cfg" <<EOF
search.fs_uuid $ROOT_FS_UUID root hd0,gpt2
set prefix=(\$root)'/boot/grub'
EOF
in_root grub-mkimage -O x86_64-efi -d /usr/lib/grub/x86_64-efi -c /tmp/load.cfg -p /boot/grub \
  -o /tmp/grubx64.efi \
  part_gpt part_msdos fat ext2 search search_fs_uuid search_fs_file search_label \
  normal configfile linux echo test gzio all_video efi_gop font gfxterm loadenv \
  boot chain reboot halt ls cat minicmd regexp serial terminal
mkdir -p "$ESPDIR/EFI/BOOT" "$ESPDIR/EFI/debian"
cp "$ROOT/tmp/grubx64.efi" "$ESPDIR/EFI/BOOT/BOOTX64.EFI"
cp "$ROOT/tmp/grubx64.efi" "$ESPDIR/EFI/debian/grubx64.efi"
rm -f "$ROOT/tmp/load.cfg" "$ROOT/tmp/grubx64.efi"
cat >"$ESPDIR/EFI/debian/grub.cfg" <<EOF
search.fs_uuid $ROOT_FS_UUID root hd0,gpt2
set prefix=(\$root)'/boot/grub'
configfile \$prefix/grub.cfg
EOF

# grub.cfg as Debian 12's update-grub writes it for this root, on a machine
# without EFI variables (so no "UEFI Firmware Settings" entry, whose
# fwsetup would reboot into the firmware) and without os-prober.
cat >"$ROOT/boot/grub/grub.cfg" <<EOF
#
# DO NOT EDIT THIS FILE
#
# It is automatically generated by grub-mkconfig using templates
# from /etc/grub.d and settings from /etc/default/grub
#

### BEGIN /etc/grub.d/00_header ###
if [ -s \$prefix/grubenv ]; then
  set have_grubenv=true
  load_env
fi
if [ "\${next_entry}" ] ; then
   set default="\${next_entry}"
   set next_entry=
   save_env next_entry
   set boot_once=true
else
   set default="0"
fi

if [ x"\${feature_menuentry_id}" = xy ]; then
  menuentry_id_option="--id"
else
  menuentry_id_option=""
fi

export menuentry_id_option

if [ "\${prev_saved_entry}" ]; then
  set saved_entry="\${prev_saved_entry}"
  save_env saved_entry
  set prev_saved_entry=
  save_env prev_saved_entry
  set boot_once=true
fi

function savedefault {
  if [ -z "\${boot_once}" ]; then
    saved_entry="\${chosen}"
    save_env saved_entry
  fi
}
function load_video {
  if [ x\$feature_all_video_module = xy ]; then
    insmod all_video
  else
    insmod efi_gop
    insmod efi_uga
    insmod ieee1275_fb
    insmod vbe
    insmod vga
    insmod video_bochs
    insmod video_cirrus
  fi
}

terminal_input console
terminal_output console
if [ x\$feature_timeout_style = xy ] ; then
  set timeout_style=menu
  set timeout=0
# Fallback normal timeout code in case the timeout_style feature is
# unavailable.
else
  set timeout=0
fi
### END /etc/grub.d/00_header ###

### BEGIN /etc/grub.d/05_debian_theme ###
set menu_color_normal=cyan/blue
set menu_color_highlight=white/blue
### END /etc/grub.d/05_debian_theme ###

### BEGIN /etc/grub.d/10_linux ###
function gfxmode {
	set gfxpayload="\${1}"
}
set linux_gfx_mode=
export linux_gfx_mode
menuentry 'Debian GNU/Linux' --class debian --class gnu-linux --class gnu --class os \$menuentry_id_option 'gnulinux-simple-$ROOT_FS_UUID' {
	load_video
	insmod gzio
	if [ x\$grub_platform = xxen ]; then insmod xzio; insmod lzopio; fi
	insmod part_gpt
	insmod ext2
	search --no-floppy --fs-uuid --set=root $ROOT_FS_UUID
	echo	'Loading Linux $KVER ...'
	linux	/boot/vmlinuz-$KVER root=UUID=$ROOT_FS_UUID ro  console=ttyS0,115200 
	echo	'Loading initial ramdisk ...'
	initrd	/boot/initrd.img-$KVER
}
submenu 'Advanced options for Debian GNU/Linux' \$menuentry_id_option 'gnulinux-advanced-$ROOT_FS_UUID' {
	menuentry 'Debian GNU/Linux, with Linux $KVER' --class debian --class gnu-linux --class gnu --class os \$menuentry_id_option 'gnulinux-$KVER-advanced-$ROOT_FS_UUID' {
		load_video
		insmod gzio
		if [ x\$grub_platform = xxen ]; then insmod xzio; insmod lzopio; fi
		insmod part_gpt
		insmod ext2
		search --no-floppy --fs-uuid --set=root $ROOT_FS_UUID
		echo	'Loading Linux $KVER ...'
		linux	/boot/vmlinuz-$KVER root=UUID=$ROOT_FS_UUID ro  console=ttyS0,115200 
		echo	'Loading initial ramdisk ...'
		initrd	/boot/initrd.img-$KVER
	}
	menuentry 'Debian GNU/Linux, with Linux $KVER (recovery mode)' --class debian --class gnu-linux --class gnu --class os \$menuentry_id_option 'gnulinux-$KVER-recovery-$ROOT_FS_UUID' {
		load_video
		insmod gzio
		if [ x\$grub_platform = xxen ]; then insmod xzio; insmod lzopio; fi
		insmod part_gpt
		insmod ext2
		search --no-floppy --fs-uuid --set=root $ROOT_FS_UUID
		echo	'Loading Linux $KVER ...'
		linux	/boot/vmlinuz-$KVER root=UUID=$ROOT_FS_UUID ro single console=ttyS0,115200
		echo	'Loading initial ramdisk ...'
		initrd	/boot/initrd.img-$KVER
	}
}
### END /etc/grub.d/10_linux ###

### BEGIN /etc/grub.d/30_uefi-firmware ###
### END /etc/grub.d/30_uefi-firmware ###

### BEGIN /etc/grub.d/40_custom ###
### END /etc/grub.d/40_custom ###
EOF
in_root grub-script-check /boot/grub/grub.cfg || die "grub.cfg does not parse"
# update-grub must find these when booty runs it on the provisioned disk.
for f in /usr/sbin/update-grub /usr/sbin/grub-mkconfig /usr/sbin/grub-probe /etc/grub.d/10_linux; do
  [ -x "$ROOT$f" ] || die "$f missing from the image"
done

# ------------------------------------------------------------------- shrink
phase "clean"
in_root apt-get clean
unbind_mounts
rm -rf "$ROOT"/usr/share/doc/* "$ROOT"/usr/share/man/* "$ROOT"/usr/share/info/* \
  "$ROOT"/var/lib/apt/lists/* "$ROOT"/var/cache/apt/*.bin "$ROOT"/var/cache/debconf/*-old \
  "$ROOT"/var/log/*.log "$ROOT"/var/log/apt/* "$ROOT"/tmp/* "$ROOT"/var/tmp/* "$ROOT/debootstrap"
find "$ROOT/usr/share/locale" -mindepth 1 -maxdepth 1 ! -name locale.alias -exec rm -rf {} + 2>/dev/null || true
# /etc/dpkg/dpkg.cfg.d/01-booty-minimal stays: later installs stay small too.

# ------------------------------------------------------------- filesystems
phase "filesystems"
USED_MIB=$(($(du -s --block-size=1M "$ROOT" | cut -f1)))
# ext4 metadata (inode tables, journal, 5% reserve) plus the headroom.
ROOT_MIB=$((USED_MIB * 115 / 100 + 64 + HEADROOM_MIB))
DISK_MIB=$((ROOT_START_MIB + ROOT_MIB + 1)) # 1 MiB at the end for the backup GPT
truncate -s $((ROOT_MIB * MIB)) "$WORK/root.img"
mkfs.ext4 -q -F -b 4096 -L root -U "$ROOT_FS_UUID" -E "hash_seed=$ROOT_FS_UUID,root_owner=0:0" \
  -d "$ROOT" "$WORK/root.img"
e2fsck -f -n "$WORK/root.img" >"$WORK/e2fsck.out" 2>&1 || { cat "$WORK/e2fsck.out" >&2; die "root filesystem check failed"; }

truncate -s $((ESP_MIB * MIB)) "$WORK/esp.img"
mkfs.vfat --invariant -F 32 -s 1 -i "$ESP_VOLID" -n EFI "$WORK/esp.img" >/dev/null
export MTOOLS_SKIP_CHECK=1
mmd -i "$WORK/esp.img" ::/EFI ::/EFI/BOOT ::/EFI/debian
for f in EFI/BOOT/BOOTX64.EFI EFI/debian/grubx64.efi EFI/debian/grub.cfg; do
  mcopy -m -i "$WORK/esp.img" "$ESPDIR/$f" "::/$f"
done
mdir -i "$WORK/esp.img" ::/EFI/BOOT/BOOTX64.EFI >/dev/null || die "ESP lacks EFI/BOOT/BOOTX64.EFI"

# -------------------------------------------------------------------- disk
phase "disk"
IMG=$WORK/debian.img
truncate -s $((DISK_MIB * MIB)) "$IMG"
# (no -q: sgdisk 1.0.9 -q silently skips writing the table)
sgdisk -o -U "$DISK_GUID" \
  -n "1:$((ESP_START_MIB * 2048)):$(((ESP_START_MIB + ESP_MIB) * 2048 - 1))" -t 1:ef00 -c "1:EFI System" -u "1:$ESP_GUID" \
  -n "2:$((ROOT_START_MIB * 2048)):$(((ROOT_START_MIB + ROOT_MIB) * 2048 - 1))" -t 2:8304 -c 2:root -u "2:$ROOT_GUID" \
  "$IMG" >/dev/null
dd if="$WORK/esp.img" of="$IMG" bs=1M seek=$ESP_START_MIB conv=notrunc,sparse status=none
dd if="$WORK/root.img" of="$IMG" bs=1M seek=$ROOT_START_MIB conv=notrunc,sparse status=none
rm -f "$WORK/esp.img" "$WORK/root.img"
sgdisk -v "$IMG" >/dev/null
for want in "1:$ESP_GUID:$ESP_TYPE" "2:$ROOT_GUID:$ROOT_TYPE"; do
  IFS=: read -r n guid type <<<"$want"
  info=$(sgdisk -i "$n" "$IMG")
  if ! grep -qi "unique GUID: $guid" <<<"$info" || ! grep -qi "GUID code: $type" <<<"$info"; then
    echo "$info" >&2
    die "partition $n of $IMG is not as written"
  fi
done

# ----------------------------------------------------------------- outputs
phase "compress"
mkdir -p "$WORK/out"
mv "$IMG" "$WORK/out/debian.img"
zstd -q -T0 -10 -o "$WORK/out/debian.img.zst" "$WORK/out/debian.img"
(
  cd "$WORK/out"
  sha256sum debian.img >debian.img.sha256
  sha256sum debian.img.zst >debian.img.zst.sha256
  cat debian.img.sha256 debian.img.zst.sha256 >SHA256SUMS
)
cat >"$WORK/out/layout.env" <<EOF
# The booty Debian test image (hack/mkdebianimage.sh), key $KEY.
SUITE=$SUITE
KERNEL_VERSION=$KVER
HOSTNAME=$HOSTNAME_DEFAULT
DISK_GUID=$DISK_GUID
DISK_BYTES=$((DISK_MIB * MIB))
ESP_PARTITION=1
ESP_PART_GUID=$ESP_GUID
ESP_TYPE_GUID=$ESP_TYPE
ESP_FS_UUID=$ESP_FS_UUID
ESP_START_BYTES=$((ESP_START_MIB * MIB))
ESP_SIZE_BYTES=$((ESP_MIB * MIB))
ROOT_PARTITION=2
ROOT_PART_GUID=$ROOT_GUID
ROOT_TYPE_GUID=$ROOT_TYPE
ROOT_FS_UUID=$ROOT_FS_UUID
ROOT_FS_LABEL=root
ROOT_START_BYTES=$((ROOT_START_MIB * MIB))
ROOT_SIZE_BYTES=$((ROOT_MIB * MIB))
ROOT_USED_MIB=$USED_MIB
EFI_LOADER=/EFI/debian/grubx64.efi
EFI_REMOVABLE_LOADER=/EFI/BOOT/BOOTX64.EFI
GRUB_CFG=/boot/grub/grub.cfg
EOF
echo "$KEY" >"$WORK/out/.key"

phase "install"
if [ -e "$OUT" ]; then
  mv "$OUT" "$WORK/old"
fi
mv "$WORK/out" "$OUT"
log "wrote $OUT in $(($(date +%s) - T0))s: raw $((DISK_MIB)) MiB ($(du -m "$OUT/debian.img" | cut -f1) MiB allocated, root uses $USED_MIB MiB), zst $(du -m --apparent-size "$OUT/debian.img.zst" | cut -f1) MiB, kernel $KVER"
cat "$OUT/SHA256SUMS"
