#!/usr/bin/env bash
# mkbenchimage.sh [--quick] [OUTDIR]
#
# Builds the disk images that `make bench` (go run ./hack/bench) writes, and
# prints the directory that holds them as the last line of its output.
#
#   sparse.img   a GPT disk (4 GiB; 64 MiB with --quick):
#                  p1 1 MiB..257 MiB       ESP, FAT, some host binaries in /EFI/bench
#                  p2 257 MiB..end-1 MiB   ext4 root, about 1 GiB (16 MiB) of real files
#                                          copied from the host's /usr/bin, /usr/lib, /usr/share
#                The rest is zeros, kept as holes: this is the common case of an
#                OS image, mostly empty file system.
#   dense.img    1 GiB (16 MiB) of data with no zero blocks: three quarters
#                seeded pseudo-random (ChaCha8), one quarter generated English-like
#                text, interleaved per MiB. The worst case for a sparse writer.
#   NAME.img.zst zstd -3 (the default level), multi-threaded
#   NAME.img.gz  gzip -6 (the default level); gzip, not pigz, as most images are
#   NAME.img.bmap bmaptool create
#   SHA256SUMS   of all of the above (sha256sum format, names relative to the dir)
#   INFO         key=value facts about the build (file count, bytes copied, sizes)
#
# Cache: without OUTDIR the images go to
# ${BOOTY_CACHE:-/var/cache/booty}/bench/{full,quick}-HASH, where HASH is the
# start of this script's own sha256, so they are built once per version of
# this script and reused afterwards; older builds of the same kind are
# removed. With OUTDIR they go there, and are reused when OUTDIR/STAMP names
# the same hash. FORCE=1 rebuilds.
#
# The host kernel may lack loop partition scanning and vfat: nothing is
# mounted. The ESP is made in a file of its own (mkfs.vfat, mtools), the root
# in another (mkfs.ext4 -d DIR), and both are copied into the image with
# dd conv=notrunc,sparse at their partition offsets.
#
# The root's contents come from the host, so two hosts build different
# (but equally shaped) images.
#
# Needs: gdisk (sgdisk), dosfstools, mtools, e2fsprogs, zstd, gzip, bmap-tools,
# tar, coreutils and Go (for the dense data). See hack/deps.sh.
set -euo pipefail

QUICK=0
OUT=
while [ $# -gt 0 ]; do
  case $1 in
  --quick) QUICK=1 ;;
  -h | --help)
    sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
    exit 0
    ;;
  -*)
    echo "mkbenchimage: unknown flag $1" >&2
    exit 2
    ;;
  *)
    if [ -n "$OUT" ]; then
      echo "usage: $0 [--quick] [OUTDIR]" >&2
      exit 2
    fi
    OUT=$1
    ;;
  esac
  shift
done

SCRIPT=$(readlink -f "$0")
HASH=$(sha256sum "$SCRIPT" | cut -c1-12)
if [ "$QUICK" = 1 ]; then KIND=quick; else KIND=full; fi
DEFAULT_OUT=0
if [ -z "$OUT" ]; then
  OUT=${BOOTY_CACHE:-/var/cache/booty}/bench/$KIND-$HASH
  DEFAULT_OUT=1
fi
STAMP="$KIND $HASH"

export TZ=UTC LC_ALL=C
PATH=$PATH:/usr/sbin:/sbin:/usr/local/go/bin

MIB=$((1024 * 1024))
if [ "$QUICK" = 1 ]; then
  DISK_MIB=64 ESP_MIB=16 FILL_MIB=16 ESP_FILL_MIB=4 DENSE_MIB=16
else
  DISK_MIB=4096 ESP_MIB=256 FILL_MIB=1024 ESP_FILL_MIB=64 DENSE_MIB=1024
fi
ESP_START_MIB=1
ROOT_START_MIB=$((ESP_START_MIB + ESP_MIB))
ROOT_MIB=$((DISK_MIB - ROOT_START_MIB - 1)) # leave 1 MiB for the backup GPT
SEED=20240601

outputs=(sparse.img sparse.img.zst sparse.img.gz sparse.img.bmap
  dense.img dense.img.zst dense.img.gz dense.img.bmap INFO SHA256SUMS)

uptodate() {
  [ "${FORCE:-0}" = 1 ] && return 1
  [ -f "$OUT/STAMP" ] && [ "$(cat "$OUT/STAMP")" = "$STAMP" ] || return 1
  local f
  for f in "${outputs[@]}"; do
    [ -f "$OUT/$f" ] || return 1
  done
}

if uptodate; then
  echo "mkbenchimage: $OUT is up to date" >&2
  echo "$OUT"
  exit 0
fi

missing=()
for c in sgdisk mkfs.vfat mmd mcopy mkfs.ext4 e2fsck zstd gzip bmaptool sha256sum go dd truncate tar awk; do
  command -v "$c" >/dev/null 2>&1 || missing+=("$c")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "mkbenchimage: missing ${missing[*]} (run hack/deps.sh)" >&2
  exit 1
fi

mkdir -p "$OUT"
if [ "$DEFAULT_OUT" = 1 ]; then
  # Older builds of this kind, from other versions of this script.
  for d in "$(dirname "$OUT")/$KIND"-*; do
    [ -d "$d" ] && [ "$d" != "$OUT" ] && rm -rf "$d"
  done
fi
rm -f "$OUT/STAMP"
WORK=$(mktemp -d "$OUT/.work.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
start=$(date +%s)
log() { echo "mkbenchimage: $* ($(($(date +%s) - start)) s)" >&2; }

# pick CAP_BYTES DIR: prints paths, one a line, (without the leading /) of
# regular files under DIR, in path order, while they fit in CAP_BYTES, and
# writes the bytes taken to $WORK/taken.
pick() {
  find "$2" -xdev -type f -size +0 -printf '%s\t%P\n' 2>/dev/null |
    LC_ALL=C sort -t $'\t' -k2 |
    awk -F '\t' -v cap="$1" -v pre="$2" -v out="$WORK/taken" '
      $2 !~ /\\/ && taken + $1 <= cap { taken += $1; printf "%s/%s\n", substr(pre, 2), $2 }
      END { print taken + 0 > out }'
}

# Root file system tree: about FILL_MIB of real files, a quarter each from
# /usr/bin and /usr/share, the rest from /usr/lib.
ROOTDIR=$WORK/rootfs
mkdir -p "$ROOTDIR/etc"
fill=$((FILL_MIB * MIB))
: >"$WORK/root.list"
have=0
for d in /usr/bin /usr/share /usr/lib; do
  [ -d "$d" ] || continue
  case $d in
  /usr/lib) cap=$((fill - have)) ;;
  *) cap=$((fill / 4)) ;;
  esac
  [ "$cap" -gt 0 ] || continue
  pick "$cap" "$d" >>"$WORK/root.list"
  have=$((have + $(cat "$WORK/taken")))
done
tar -C / --verbatim-files-from --no-recursion -T "$WORK/root.list" -cf - 2>/dev/null |
  tar -C "$ROOTDIR" -xf -
printf 'NAME="booty bench"\nID=booty-bench\n' >"$ROOTDIR/etc/os-release"
files=$(find "$ROOTDIR" -type f | wc -l)
copied=$(du -sb "$ROOTDIR" | cut -f1)
log "root tree: $files files, $((copied / MIB)) MiB"

# ESP tree: host binaries up to ESP_FILL_MIB.
ESPDIR=$WORK/esp/bench
mkdir -p "$ESPDIR"
pick $((ESP_FILL_MIB * MIB)) /usr/bin | while IFS= read -r p; do
  cp "/$p" "$ESPDIR/$(basename "$p" | tr -c 'A-Za-z0-9._\n-' _)"
done
truncate -s $((ESP_MIB * MIB)) "$WORK/esp.img"
mkfs.vfat -n ESP "$WORK/esp.img" >/dev/null
MTOOLS_SKIP_CHECK=1 mmd -i "$WORK/esp.img" ::/EFI
MTOOLS_SKIP_CHECK=1 mcopy -s -Q -i "$WORK/esp.img" "$ESPDIR" ::/EFI/bench

truncate -s $((ROOT_MIB * MIB)) "$WORK/root.img"
mkfs.ext4 -q -F -b 4096 -L root -E root_owner=0:0 -d "$ROOTDIR" "$WORK/root.img"
e2fsck -f -n "$WORK/root.img" >"$WORK/e2fsck.out" 2>&1 || { cat "$WORK/e2fsck.out" >&2; exit 1; }
rm -rf "$ROOTDIR" "$WORK/esp"
log "file systems made"

IMG=$WORK/sparse.img
truncate -s $((DISK_MIB * MIB)) "$IMG"
# (no -q: sgdisk 1.0.9 -q silently skips writing the table)
sgdisk -o \
  -n "1:$((ESP_START_MIB * 2048)):$(((ESP_START_MIB + ESP_MIB) * 2048 - 1))" -t 1:ef00 -c 1:ESP \
  -n "2:$((ROOT_START_MIB * 2048)):$(((ROOT_START_MIB + ROOT_MIB) * 2048 - 1))" -t 2:8304 -c 2:root \
  "$IMG" >/dev/null
dd if="$WORK/esp.img" of="$IMG" bs=4M seek=$((ESP_START_MIB * MIB)) oflag=seek_bytes conv=notrunc,sparse status=none
dd if="$WORK/root.img" of="$IMG" bs=4M seek=$((ROOT_START_MIB * MIB)) oflag=seek_bytes conv=notrunc,sparse status=none
rm -f "$WORK/esp.img" "$WORK/root.img"
sgdisk -v "$IMG" >/dev/null
log "sparse.img: $(du -B1 "$IMG" | cut -f1) bytes allocated of $((DISK_MIB * MIB))"

# Dense data: ChaCha8 with a fixed seed, every fourth MiB text made of
# words drawn from a small list (compresses about 3:1, like logs and docs).
mkdir -p "$WORK/dense"
cat >"$WORK/dense/main.go" <<'EOF'
package main

import (
	"bufio"
	"math/rand/v2"
	"os"
	"strconv"
)

var words = []string{"the", "image", "disk", "boot", "kernel", "partition", "of", "and",
	"write", "block", "to", "a", "sector", "file", "system", "is", "root", "with",
	"config", "server", "machine", "network", "in", "checksum", "zero", "data"}

func main() {
	seed, _ := strconv.ParseUint(os.Args[1], 10, 64)
	mib, _ := strconv.Atoi(os.Args[2])
	var key [32]byte
	for i := range 8 {
		key[i] = byte(seed >> (8 * i))
	}
	r := rand.NewChaCha8(key)
	pick := rand.New(rand.NewPCG(seed, seed))
	w := bufio.NewWriterSize(os.Stdout, 1<<20)
	buf := make([]byte, 1<<20)
	for i := range mib {
		if i%4 == 3 {
			buf = buf[:0]
			for len(buf) < 1<<20 {
				buf = append(buf, words[pick.IntN(len(words))]...)
				if pick.IntN(12) == 0 {
					buf = append(buf, ".\n"...)
				} else {
					buf = append(buf, ' ')
				}
			}
			buf = buf[:1<<20]
		} else {
			buf = buf[:1<<20]
			r.Read(buf)
		}
		if _, err := w.Write(buf); err != nil {
			os.Exit(1)
		}
	}
	if err := w.Flush(); err != nil {
		os.Exit(1)
	}
}
EOF
(cd "$WORK/dense" && GOWORK=off GOFLAGS= GO111MODULE=off go run main.go "$SEED" "$DENSE_MIB") >"$WORK/dense.img"
rm -rf "$WORK/dense"
log "dense.img written"

# Compress: zstd uses both cores; the two gzips run side by side.
for n in sparse dense; do
  zstd -q -T0 -3 -f -o "$WORK/$n.img.zst" "$WORK/$n.img"
done
log "zstd done"
gzip -6 -n -c "$WORK/sparse.img" >"$WORK/sparse.img.gz" &
gz1=$!
gzip -6 -n -c "$WORK/dense.img" >"$WORK/dense.img.gz" &
gz2=$!
wait "$gz1"
wait "$gz2"
log "gzip done"
bmaptool -q create -o "$WORK/sparse.img.bmap" "$WORK/sparse.img"
# (dense.img has no holes by design: bmaptool warns about that)
bmaptool -q create -o "$WORK/dense.img.bmap" "$WORK/dense.img" 2>/dev/null

cat >"$WORK/INFO" <<EOF
kind=$KIND
script_hash=$HASH
disk_mib=$DISK_MIB
esp_mib=$ESP_MIB
root_mib=$ROOT_MIB
root_files=$files
root_bytes=$copied
dense_mib=$DENSE_MIB
built=$(date -u +%Y-%m-%dT%H:%M:%SZ)
host=$(uname -r)
EOF
(cd "$WORK" && sha256sum sparse.img sparse.img.zst sparse.img.gz sparse.img.bmap \
  dense.img dense.img.zst dense.img.gz dense.img.bmap >SHA256SUMS)

for f in "${outputs[@]}"; do
  mv -f "$WORK/$f" "$OUT/$f"
done
echo "$STAMP" >"$OUT/STAMP"
log "wrote $OUT"
ls -l "$OUT" >&2
echo "$OUT"
