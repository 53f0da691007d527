#!/usr/bin/env bash
# Installs what Strata needs (once per machine), then configures and builds it.
# Idempotent: packages already present and a torch already installed are skipped.
#
#   STRATA_HOME       where heavy things live, outside the checkout (default ~/.cache/strata)
#   STRATA_BUILD_DIR  build folder (default <checkout>/build)
#   STRATA_CUDA=1     build the CUDA variant (links torch_cuda; default build-cuda/)
#   STRATA_NO_TESTS=1 do not build the tests
#   TORCH_CUDA_ARCH_LIST GPU architectures of a CUDA build (default "8.0;9.0": A100, H100/H200)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
STRATA_HOME=${STRATA_HOME:-$HOME/.cache/strata}
TORCH_VERSION=${STRATA_TORCH_VERSION:-2.15.0}
CUDA=${STRATA_CUDA:-0}
if [ "$CUDA" = 1 ]; then BUILD=${STRATA_BUILD_DIR:-$ROOT/build-cuda}; else BUILD=${STRATA_BUILD_DIR:-$ROOT/build}; fi

log() { echo "[setup] $*"; }

# 1. Debian packages, by name.
PACKAGES=(cmake ninja-build g++ ccache pkg-config python3 python3-venv
  libgtest-dev libtomlplusplus-dev libcli11-dev nlohmann-json3-dev libsentencepiece-dev
  libgloo-dev zlib1g-dev bible-kjv dataset-fashion-mnist chromium)
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  log "installing Debian packages: ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# 2. libtorch from the PyPI torch wheel, in a virtual environment outside the checkout.
VENV=$STRATA_HOME/venv
if ! (cd / && "$VENV/bin/python" -c "import torch; assert torch.__version__.startswith('$TORCH_VERSION')") 2>/dev/null; then
  log "installing torch==$TORCH_VERSION into $VENV (once per machine)"
  mkdir -p "$STRATA_HOME"
  [ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q --upgrade pip >/dev/null
  "$VENV/bin/pip" install -q "torch==$TORCH_VERSION" numpy
fi
# Hugging Face's own library checks what `strata export` writes (tests only).
if ! (cd / && "$VENV/bin/python" -c "import transformers, safetensors") 2>/dev/null; then
  log "installing transformers and safetensors into $VENV (once per machine; interop tests)"
  "$VENV/bin/pip" install -q "transformers==5.25.0" "safetensors==0.8.0"
fi
TORCH_PREFIX=$(cd / && "$VENV/bin/python" -c 'import torch; print(torch.utils.cmake_prefix_path)')

# 3. Configure (first time, or when the torch prefix moved) and build.
TESTS=ON; [ "${STRATA_NO_TESTS:-0}" = 1 ] && TESTS=OFF
CUDA_FLAG=OFF; [ "$CUDA" = 1 ] && CUDA_FLAG=ON
if [ ! -f "$BUILD/build.ninja" ] || ! grep -q "^CMAKE_PREFIX_PATH:.*=$TORCH_PREFIX\$" "$BUILD/CMakeCache.txt" 2>/dev/null \
   || ! grep -q "STRATA_CUDA:BOOL=$CUDA_FLAG" "$BUILD/CMakeCache.txt"; then
  log "configuring $BUILD"
  cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_PREFIX_PATH="$TORCH_PREFIX" \
    -DSTRATA_CUDA=$CUDA_FLAG -DSTRATA_TESTS=$TESTS \
    -DTORCH_CUDA_ARCH_LIST="${TORCH_CUDA_ARCH_LIST:-8.0;9.0}" >/dev/null
fi
log "building $BUILD"
start=$(date +%s)
cmake --build "$BUILD" -- -j"$(nproc)" | grep -vE '^\[[0-9]+/[0-9]+\] ' || true
[ -x "$BUILD/strata" ] || { echo "error: the build failed; see the compiler output above"; exit 1; }
log "built in $(( $(date +%s) - start )) s: $BUILD/strata"
