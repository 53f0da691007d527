#!/usr/bin/env bash
# The GPU proof, one command on a GPU machine, from the checkout root:
#   bash scripts/device-check.sh
# Needs: the NVIDIA driver and CUDA toolkit, CMake, Ninja, a C++ compiler, Python 3
# with torch (its C++ headers, libraries and CMake config), and .device/ made by
# scripts/device-bundle.sh on a Debian machine (carried with the tree). No network.
#   1. builds the CUDA variant against this machine's torch (build-device/)
#   2. runs the tests labelled cuda
#   3. benchmarks gpt2-124m, sequence 1024, bf16, against PyTorch eager (bench/single)
#   4. writes summary.json and summary.txt
# Results go to $OUT, or ./device-check-out/. Each stage has its own time limit so
# the whole check stays under 8 minutes on an H200; a failed stage is recorded and
# the next one still runs.
#   STRATA_DEVICE_ARCH   CUDA architecture (default 9.0, H100/H200)
#   STRATA_DEVICE_JOBS   build jobs (default: nproc)
#   STRATA_DEVICE_BUILD_TIMEOUT  seconds for configure + build (default 300; a 2-core
#                        machine building without a GPU, as a dry run, needs ~1500)
#   PYTHON               the Python whose torch to build against (default python3)
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
OUT=${OUT:-$ROOT/device-check-out}
mkdir -p "$OUT"
BUILD=$ROOT/build-device
PREFIX=$ROOT/.device/prefix
PY=${PYTHON:-python3}
start=$(date +%s)
log() { echo "[device-check $(($(date +%s) - start))s] $*" | tee -a "$OUT/summary.txt"; }
: >"$OUT/summary.txt"
declare -A status

[ -d "$PREFIX/usr" ] || { log "error: no .device/prefix; run scripts/device-bundle.sh on a Debian machine and carry .device/"; exit 2; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader >"$OUT/gpu.txt" 2>&1
log "gpu: $(head -1 "$OUT/gpu.txt")"
TORCH_PREFIX=$(cd / && "$PY" -c 'import torch; print(torch.utils.cmake_prefix_path)')
TORCH_VERSION=$(cd / && "$PY" -c 'import torch; print(torch.__version__)')
log "torch $TORCH_VERSION at $TORCH_PREFIX"

# 1. Build.
t0=$(date +%s)
BUILD_LIMIT=${STRATA_DEVICE_BUILD_TIMEOUT:-300}
if timeout "$BUILD_LIMIT" cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release \
     -DSTRATA_CUDA=ON -DSTRATA_DEPS_PREFIX="$ROOT/.device/prefix" \
     -DCMAKE_PREFIX_PATH="$TORCH_PREFIX" -DTORCH_CUDA_ARCH_LIST="${STRATA_DEVICE_ARCH:-9.0}" \
     >"$OUT/configure.log" 2>&1 &&
   timeout "$BUILD_LIMIT" cmake --build "$BUILD" -j"${STRATA_DEVICE_JOBS:-$(nproc)}" >"$OUT/build.log" 2>&1; then
  status[build]=ok
else
  status[build]=failed
fi
log "build: ${status[build]} in $(($(date +%s) - t0)) s (logs: configure.log, build.log)"
[ "${status[build]}" = ok ] || { tail -30 "$OUT/build.log" "$OUT/configure.log" 2>/dev/null; }

export STRATA_CACHE=$ROOT/.device/cache
mkdir -p "$STRATA_CACHE/data" && cp -u "$ROOT"/.device/data/* "$STRATA_CACHE/data/"

# 2. The cuda-labelled tests.
if [ "${status[build]}" = ok ]; then
  t0=$(date +%s)
  (cd "$BUILD" && timeout 240 ctest -L cuda --output-on-failure --output-junit "$OUT/cuda-tests.xml" \
     >"$OUT/cuda-tests.log" 2>&1) && status[tests]=ok || status[tests]=failed
  log "cuda tests: ${status[tests]} in $(($(date +%s) - t0)) s: $(grep -E 'tests passed' "$OUT/cuda-tests.log" | tail -1)"
  grep -E "configurations on CUDA|Failed|SKIPPED" "$OUT/cuda-tests.log" | head -20 | tee -a "$OUT/summary.txt"
else
  status[tests]=skipped
fi

# 3. Single-device speed: Strata against PyTorch eager on the same shapes.
if [ "${status[build]}" = ok ]; then
  t0=$(date +%s)
  timeout 150 "$PY" bench/single/run.py --strata "$BUILD/strata" --device cuda \
      --flavour gpt2-124m --seq 1024 --batch 16 --precision bf16 --steps 12 \
      --peak-tflops 989 --json "$OUT/bench-single.json" >"$OUT/bench-single.log" 2>&1 \
    && status[bench]=ok || status[bench]=failed
  log "bench: ${status[bench]} in $(($(date +%s) - t0)) s"
  tail -12 "$OUT/bench-single.log" | tee -a "$OUT/summary.txt"
else
  status[bench]=skipped
fi

# 4. Summary.
"$PY" - "$OUT" "$TORCH_VERSION" "${status[build]}" "${status[tests]}" "${status[bench]}" <<'PYEOF'
import json, os, re, sys
out, torch_version, build, tests, bench = sys.argv[1:6]
s = {"torch": torch_version, "gpu": open(os.path.join(out, "gpu.txt")).read().strip(),
     "build": build, "cuda_tests": tests, "bench": bench}
log = os.path.join(out, "cuda-tests.log")
if os.path.exists(log):
    text = open(log).read()
    m = re.search(r"(\d+)% tests passed, (\d+) tests failed out of (\d+)", text)
    if m:
        s["tests_failed"], s["tests_total"] = int(m.group(2)), int(m.group(3))
    m = re.search(r"(\d+) configurations on CUDA: median \|error\| ([\d.]+)%, max ([\d.]+)%", text)
    if m:
        s["estimator"] = {"configurations": int(m.group(1)), "median_error_pct": float(m.group(2)),
                          "max_error_pct": float(m.group(3))}
bj = os.path.join(out, "bench-single.json")
if os.path.exists(bj):
    s["bench_single"] = json.load(open(bj))
json.dump(s, open(os.path.join(out, "summary.json"), "w"), indent=1)
print(json.dumps(s, indent=1))
PYEOF
log "done in $(($(date +%s) - start)) s; results in $OUT"
[ "${status[build]}" = ok ] && [ "${status[tests]}" = ok ] && [ "${status[bench]}" = ok ]
