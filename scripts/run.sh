#!/usr/bin/env bash
# The main job: installs and builds what is missing, then trains the debug GPT on
# the King James Bible with DDP over 2 ranks (STRATA_NPROC=1 for one process).
# Extra arguments are passed to `strata train` (e.g. --training.steps=50). Ends by
# printing a short sample from the trained model (strata generate).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
STRATA_NO_TESTS=${STRATA_NO_TESTS:-0} "$ROOT/scripts/setup.sh"
BUILD=${STRATA_BUILD_DIR:-$ROOT/build}
cd "$ROOT"
"$BUILD/strata" train --config configs/kjv-debug.toml --nproc "${STRATA_NPROC:-2}" "$@"
RUN_DIR=$(sed -n 's/^run_dir *= *"\(.*\)"/\1/p' configs/kjv-debug.toml)
for a in "$@"; do
  case "$a" in --logging.run_dir=*) RUN_DIR=${a#--logging.run_dir=} ;; esac
done
echo "sample from $RUN_DIR:"
"$BUILD/strata" generate "$RUN_DIR" --prompt "In the beginning" --tokens 48
