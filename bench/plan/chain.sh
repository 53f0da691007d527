#!/bin/bash
# A validation chain of the planner (bench/plan/VALIDATION.md): one fresh calibration,
# then the six rows of the plan's issue (the debug GPT, bert-debug and the d384 GPT at
# 2 and 4 ranks), each bench/plan/run.py run alone, one after another. Run it on an
# otherwise idle machine: a build or test beside it skews every figure.
#
#   bench/plan/chain.sh OUT_DIR [ROW ...]     rows: debug2 bert2 d384x2 debug4 bert4 d384x4
#
# Environment: STRATA (the binary; default build/strata), PASSES (default 4), PYTHON.
# OUT_DIR/profile.json is reused when it exists (calibrate is skipped); each row's log is
# OUT_DIR/ROW.log and its wall time goes to OUT_DIR/times.txt. Four passes of all six
# rows take about two hours on the 2-core development machine.
set -u
if [ $# -lt 1 ]; then
  sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
fi
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=$(mkdir -p "$1" && cd "$1" && pwd)
shift
STRATA=${STRATA:-$ROOT/build/strata}
PASSES=${PASSES:-4}
PYTHON=${PYTHON:-$(command -v ~/.cache/strata/venv/bin/python || command -v python3)}
[ -x "$STRATA" ] || { echo "chain.sh: no strata binary at $STRATA; build it (README, Building by hand) or set STRATA" >&2; exit 2; }
ALL_ROWS="debug2 bert2 d384x2 debug4 bert4 d384x4"
ROWS=${*:-$ALL_ROWS}
D384="--model.d_model=384 --model.n_head=6 --model.n_layer=8"
# Sets args to ROW's bench/plan/run.py arguments; fails for a row it does not know.
row_args() {
  case $1 in
    debug2) args=(--nproc 2 --flavour debug --batch 16 --device-memory 64MiB --sample 20) ;;
    bert2) args=(--nproc 2 --flavour bert-debug --batch 16 --sample 16) ;;
    d384x2) args=(--nproc 2 --flavour debug --batch 8 --sample 12 --extra "$D384") ;;
    debug4) args=(--nproc 4 --flavour debug --batch 16 --device-memory 80MiB --sample 20) ;;
    bert4) args=(--nproc 4 --flavour bert-debug --batch 16 --device-memory 96MiB --sample 16) ;;
    d384x4) args=(--nproc 4 --flavour debug --batch 8 --sample 12 --extra "$D384") ;;
    *) return 1 ;;
  esac
}
# Every row is checked before the calibration's two minutes are spent.
for row in $ROWS; do
  row_args "$row" || { echo "chain.sh: unknown row $row; the rows are $ALL_ROWS" >&2; exit 2; }
done
if [ ! -f "$OUT/profile.json" ]; then
  "$STRATA" calibrate --nproc 4 -o "$OUT/profile.json" > "$OUT/calibrate.log" 2>&1 ||
    { echo "chain.sh: calibrate failed; see $OUT/calibrate.log" >&2; exit 1; }
fi
status=0
for row in $ROWS; do
  row_args "$row"
  t0=$(date +%s)
  "$PYTHON" "$ROOT/bench/plan/run.py" --strata "$STRATA" --profile "$OUT/profile.json" \
    --passes "$PASSES" "${args[@]}" > "$OUT/$row.log" 2>&1
  rc=$?
  [ $rc -eq 0 ] || status=1
  echo "$row rc=$rc $(($(date +%s) - t0)) s" >> "$OUT/times.txt"
  grep -E "^layouts run|^predicted first|exceeded it" "$OUT/$row.log" | sed "s/^/$row: /"
done
exit $status
