#!/usr/bin/env bash
# mkdemoimage.sh OUTDIR
#
# Builds the small GPT disk image that `make demo-one` and the e2e tests write
# with booty, without loop devices or mounts (the host may lack vfat and loop
# partition scanning): the partition table is written into the image file by
# sgdisk, the ESP is made in a file of its own with mkfs.vfat and mtools, the
# root filesystem in another with mkfs.ext4 -d, and both are copied into the
# image at their partition offsets.
#
# Layout (64 MiB, 512-byte sectors):
#   p1  1 MiB..17 MiB   ESP   type ef00, FAT16, label ESP, EFI/BOOT/README.txt
#   p2 17 MiB..63 MiB   root  type 8304, ext4, label root, /etc/os-release
#                             (ID=booty-demo), /etc/hostname, /var/lib/demo/random.bin
#                             (4 MiB, seeded pseudo-random, so the image is not all zeros)
#
# Writes to OUTDIR: demo.img (raw), demo.img.zst, demo.img.gz, demo.img.xz
# and SHA256SUMS (sha256sum format, names relative to OUTDIR).
#
# Deterministic: fixed disk/partition/filesystem UUIDs, a fixed seed, and
# every timestamp set to SOURCE_DATE_EPOCH (default below), so two runs give
# the same bytes. Idempotent: does nothing when every output exists and is
# newer than this script (set FORCE=1 to rebuild).
#
# Needs: gdisk (sgdisk), dosfstools (mkfs.vfat), mtools, e2fsprogs, zstd,
# xz-utils, gzip, coreutils, and Go (for the seeded random file). See
# hack/deps.sh.
set -euo pipefail

if [ $# -ne 1 ]; then
  echo "usage: $0 OUTDIR" >&2
  exit 2
fi
OUT=$1
SCRIPT=$(readlink -f "$0")
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-1700000000}
# e2fsprogs 1.47.0 takes the filesystem's own times from this.
export E2FSPROGS_FAKE_TIME=$SOURCE_DATE_EPOCH
export TZ=UTC LC_ALL=C

DISK_GUID=5f1e4b9c-0b00-4d5a-9a6e-000000000001
ESP_GUID=5f1e4b9c-0b00-4d5a-9a6e-000000000002
ROOT_GUID=5f1e4b9c-0b00-4d5a-9a6e-000000000003
ROOT_FS_UUID=5f1e4b9c-0b00-4d5a-9a6e-000000000004
ESP_VOLID=B0071E55
SEED=20240601

MIB=$((1024 * 1024))
DISK_MIB=64
ESP_START_MIB=1
ESP_MIB=16
ROOT_START_MIB=$((ESP_START_MIB + ESP_MIB))
ROOT_MIB=46 # ends at 63 MiB, leaving room for the backup GPT

outputs=(demo.img demo.img.zst demo.img.gz demo.img.xz SHA256SUMS)

uptodate() {
  [ "${FORCE:-0}" = 1 ] && return 1
  local f
  for f in "${outputs[@]}"; do
    [ "$OUT/$f" -nt "$SCRIPT" ] || return 1
  done
  return 0
}

need() {
  local missing=()
  local c
  for c in "$@"; do
    command -v "$c" >/dev/null 2>&1 || missing+=("$c")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    echo "mkdemoimage: missing ${missing[*]} (run hack/deps.sh)" >&2
    exit 1
  fi
}

if uptodate; then
  echo "mkdemoimage: $OUT is up to date"
  exit 0
fi

PATH=$PATH:/usr/sbin:/sbin:/usr/local/go/bin
need sgdisk mkfs.vfat mmd mcopy mkfs.ext4 debugfs e2fsck zstd xz gzip sha256sum go dd truncate
mkdir -p "$OUT"
WORK=$(mktemp -d "$OUT/.mkdemoimage.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

# The 4 MiB random file: ChaCha8 seeded with SEED, from a tiny Go program
# (standard library only, built outside any module).
mkdir -p "$WORK/prng"
cat >"$WORK/prng/main.go" <<'EOF'
package main

import (
	"bufio"
	"math/rand/v2"
	"os"
	"strconv"
)

func main() {
	seed, _ := strconv.ParseUint(os.Args[1], 10, 64)
	n, _ := strconv.Atoi(os.Args[2])
	var key [32]byte
	for i := range 8 {
		key[i] = byte(seed >> (8 * i))
	}
	r := rand.NewChaCha8(key)
	w := bufio.NewWriter(os.Stdout)
	buf := make([]byte, 64<<10)
	for n > 0 {
		m := min(n, len(buf))
		r.Read(buf[:m])
		w.Write(buf[:m])
		n -= m
	}
	if err := w.Flush(); err != nil {
		os.Exit(1)
	}
}
EOF

# Root filesystem tree.
ROOTDIR=$WORK/rootfs
mkdir -p "$ROOTDIR/etc" "$ROOTDIR/var/lib/demo"
cat >"$ROOTDIR/etc/os-release" <<'EOF'
NAME="booty demo"
ID=booty-demo
PRETTY_NAME="booty demo image"
VERSION_ID=1
EOF
echo booty-demo >"$ROOTDIR/etc/hostname"
(cd "$WORK/prng" && GOWORK=off GOFLAGS= GO111MODULE=off go run main.go "$SEED" $((4 * MIB))) >"$ROOTDIR/var/lib/demo/random.bin"
find "$ROOTDIR" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +

# ESP tree.
ESPDIR=$WORK/esp
mkdir -p "$ESPDIR/EFI/BOOT"
cat >"$ESPDIR/EFI/BOOT/README.txt" <<'EOF'
booty demo image: this EFI system partition holds no boot loader.
It exists so that booty's disk, partition and EFI code has a real ESP to find.
EOF
find "$ESPDIR" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +

# ESP filesystem in its own file.
truncate -s $((ESP_MIB * MIB)) "$WORK/esp.img"
mkfs.vfat --invariant -F 16 -i "$ESP_VOLID" -n ESP "$WORK/esp.img" >/dev/null
MTOOLS_SKIP_CHECK=1 mmd -i "$WORK/esp.img" ::/EFI ::/EFI/BOOT
MTOOLS_SKIP_CHECK=1 mcopy -m -i "$WORK/esp.img" "$ESPDIR/EFI/BOOT/README.txt" ::/EFI/BOOT/README.txt

# Root filesystem in its own file.
truncate -s $((ROOT_MIB * MIB)) "$WORK/root.img"
mkfs.ext4 -q -F -b 4096 -I 256 -L root -U "$ROOT_FS_UUID" -E "hash_seed=$ROOT_FS_UUID,root_owner=0:0" \
  -d "$ROOTDIR" "$WORK/root.img"
# mkfs.ext4 -d copies each source file's ctime, which no tool can set:
# set ctime (and the creation time) of every inode to SOURCE_DATE_EPOCH.
{
  for p in / /lost+found $(cd "$ROOTDIR" && find . -mindepth 1 | sed 's|^\.||' | sort); do
    for field in ctime crtime atime mtime; do
      echo "set_inode_field $p $field @$SOURCE_DATE_EPOCH"
    done
    for field in ctime_extra crtime_extra atime_extra mtime_extra; do
      echo "set_inode_field $p $field 0"
    done
  done
} >"$WORK/debugfs.cmd"
debugfs -w -f "$WORK/debugfs.cmd" "$WORK/root.img" >/dev/null 2>"$WORK/debugfs.err" || {
  cat "$WORK/debugfs.err" >&2
  exit 1
}
if grep -v '^debugfs ' "$WORK/debugfs.err" | grep -q .; then
  cat "$WORK/debugfs.err" >&2
  exit 1
fi
e2fsck -f -n "$WORK/root.img" >"$WORK/e2fsck.out" 2>&1 || { cat "$WORK/e2fsck.out" >&2; exit 1; }

# The disk: GPT written by sgdisk, then the filesystems at their offsets.
IMG=$WORK/demo.img
truncate -s $((DISK_MIB * MIB)) "$IMG"
# (no -q: sgdisk 1.0.9 -q silently skips writing the table)
sgdisk -o -U "$DISK_GUID" \
  -n "1:$((ESP_START_MIB * 2048)):$(((ESP_START_MIB + ESP_MIB) * 2048 - 1))" -t 1:ef00 -c 1:ESP -u "1:$ESP_GUID" \
  -n "2:$((ROOT_START_MIB * 2048)):$(((ROOT_START_MIB + ROOT_MIB) * 2048 - 1))" -t 2:8304 -c 2:root -u "2:$ROOT_GUID" \
  "$IMG" >/dev/null
dd if="$WORK/esp.img" of="$IMG" bs=1M seek=$ESP_START_MIB conv=notrunc,sparse status=none
dd if="$WORK/root.img" of="$IMG" bs=1M seek=$ROOT_START_MIB conv=notrunc,sparse status=none
sgdisk -v "$IMG" >/dev/null
# Check the table really is there, as the tests will read it.
for want in "1:$ESP_GUID:C12A7328-F81F-11D2-BA4B-00A0C93EC93B" "2:$ROOT_GUID:4F68BCE3-E8CD-4DB1-96E7-FBCAF984B709"; do
  IFS=: read -r n guid type <<<"$want"
  info=$(sgdisk -i "$n" "$IMG")
  if ! grep -qi "unique GUID: $guid" <<<"$info" || ! grep -qi "GUID code: $type" <<<"$info"; then
    echo "mkdemoimage: partition $n of $IMG is not as written:" >&2
    echo "$info" >&2
    exit 1
  fi
done

zstd -q -f -10 -o "$IMG.zst" "$IMG"
gzip -n -9 -c "$IMG" >"$IMG.gz"
xz -T1 -6 -c "$IMG" >"$IMG.xz"
(cd "$WORK" && sha256sum demo.img demo.img.zst demo.img.gz demo.img.xz >SHA256SUMS)

# Replace the outputs, SHA256SUMS last so it is newest.
for f in "${outputs[@]}"; do
  mv -f "$WORK/$f" "$OUT/$f"
done
touch "$OUT/SHA256SUMS"
echo "mkdemoimage: wrote $OUT"
cat "$OUT/SHA256SUMS"
