#!/usr/bin/env bash
# Fills .device/ (git-ignored) with everything scripts/device-check.sh needs on a GPU
# machine that has CUDA, CMake, Ninja, a compiler and Python with torch, but none of
# Strata's Debian packages and no network:
#   .device/debs/     the .deb files (apt-get download), for the record
#   .device/prefix/   the same unpacked with dpkg -x (never into /); docs pruned
#   .device/data/     the KJV corpus, its tokenizer and token cache (data.cache_dir)
# Run here (Debian 12, packages reachable) after scripts/setup.sh; carry .device with
# the tree. Idempotent: a package already unpacked is skipped.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DEV=$ROOT/.device
BUILD=${STRATA_BUILD_DIR:-$ROOT/build}
PACKAGES=(libtomlplusplus-dev libcli11-dev nlohmann-json3-dev libsentencepiece-dev
  libsentencepiece0 libgloo-dev libgtest-dev zlib1g-dev)
log() { echo "[device-bundle] $*"; }

mkdir -p "$DEV/debs" "$DEV/prefix" "$DEV/data"
cd "$DEV/debs"
for p in "${PACKAGES[@]}"; do
  if ! ls "${p}"_*.deb >/dev/null 2>&1; then
    apt-get download "$p" >/dev/null 2>&1 || { apt-get update -qq && apt-get download "$p" >/dev/null; }
    log "downloaded $p"
  fi
done
for deb in *.deb; do
  stamp="$DEV/prefix/.unpacked-${deb%.deb}"
  [ -f "$stamp" ] && continue
  dpkg -x "$deb" "$DEV/prefix"
  touch "$stamp"
done
rm -rf "$DEV/prefix/usr/share/doc" "$DEV/prefix/usr/share/man" "$DEV/prefix/usr/share/lintian"

# The default corpus and its tokenizer, made once here (the GPU machine has no
# bible-kjv package): a one-step run of the built strata fills the cache.
CACHE=${STRATA_CACHE:-$HOME/.cache/strata}/data
if ! ls "$CACHE"/tokenizer-*.model >/dev/null 2>&1; then
  [ -x "$BUILD/strata" ] || { echo "error: build strata first (scripts/setup.sh)"; exit 1; }
  tmp=$(mktemp -d)
  "$BUILD/strata" train --training.steps=1 --logging.progress=off --logging.run_dir="$tmp" \
    --checkpoint.save_final=false --training.eval_interval=0 >/dev/null
  rm -rf "$tmp"
fi
cp -u "$CACHE"/kjv.txt "$CACHE"/tokenizer-*.model "$CACHE"/tokens-*.i32 "$DEV/data/"
log "$(du -sh "$DEV" | cut -f1) in $DEV ($(ls "$DEV/debs" | wc -l) packages, $(ls "$DEV/data" | wc -l) data files)"
