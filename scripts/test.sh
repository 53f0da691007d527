#!/usr/bin/env bash
# All tests: installs and builds what is missing, then runs the CTest suite
# (unit tests and multi-process tests on loopback).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
"$ROOT/scripts/setup.sh"
BUILD=${STRATA_BUILD_DIR:-$ROOT/build}
cd "$BUILD"
start=$(date +%s)
ctest --output-on-failure -j"${STRATA_TEST_JOBS:-2}" "$@"
echo "[test] ctest wall time $(( $(date +%s) - start )) s"
