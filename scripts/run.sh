#!/usr/bin/env bash
# The main job: installs and builds what is missing, then trains the debug GPT on
# the King James Bible with DDP over 2 ranks (STRATA_NPROC=1 for one process).
# Extra arguments are passed to `strata train` (e.g. --training.steps=50).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
STRATA_NO_TESTS=${STRATA_NO_TESTS:-0} "$ROOT/scripts/setup.sh"
BUILD=${STRATA_BUILD_DIR:-$ROOT/build}
cd "$ROOT"
exec "$BUILD/strata" train --config configs/kjv-debug.toml --nproc "${STRATA_NPROC:-2}" "$@"
