#!/usr/bin/env python3
"""The planner against measurement: `strata plan --json` predicts every layout's step for a
model and world; this runs a sample of them (or all: --sample 0) for a few steps each with
`strata train` and compares the median measured step with the prediction. Prints each
layout's predicted and measured milliseconds, the median and largest |error|, Spearman's
rank correlation, whether the predicted first is within 5% of the measured best, and how
many layouts ran. With --device-memory SIZE the plan keeps only layouts the estimator says
fit SIZE, and each run's tracked peak is checked against it (the largest mem_peak_max of
its steps: the highest rank's): none may exceed it. Run alone: a build beside it skews
the figures.

This machine's speed drifts (the same one-rank step measured 115 ms and 146 ms three
hours apart), and a prediction is only as current as its profile. So the bench also
runs an anchor, the calibration's own reference (the debug GPT data-parallel over every
rank, micro-batch 4), before the first layout, after every --anchor-every layouts and
after the last, and prints both errors: raw, and against the machine's speed at that
moment (each prediction times the anchor's measured-over-predicted ratio, the mean of
the anchors either side of it). The drift-corrected figures are what the cost model
answers for; the raw ones say how far the machine moved since `strata calibrate`.

The anchor runs after every layout by default: on the machine of 2026-12-05 eight
back-to-back runs of the 2-rank anchor measured 176-235 ms, and one rank's step went
from 84 to 105 ms between two consecutive runs and stayed there (its speed flips within
seconds, not hours), so an anchor five layouts away said little about the machine a
layout ran on. --anchor-every 5 halves the bench's time.

--passes K runs the whole sample K times (every other pass in reverse order, so that a
slow stretch of the machine does not fall on the same layouts twice) and counts each
layout's fastest run: the machine's slowdowns only add time. It prints how far a
layout's passes differ, the noise floor under every error figure, and compares each
layout's fastest run with the prediction at the fastest anchor (the machine at its
best on both sides). With four or more passes it also splits them in halves and compares
each layout's fastest run in one half with its fastest in the other (Note [bench split
halves]): the host's reproducibility in the very figure the errors are taken on.

  python3 bench/plan/run.py [--nproc 4 --flavour debug --batch 16 --sample 12 --steps 8]
"""
import argparse
import json
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def spearman(a, b):
    def ranks(x):
        order = sorted(range(len(x)), key=lambda i: x[i])
        r = [0.0] * len(x)
        for k, i in enumerate(order):
            r[i] = float(k)
        return r
    ra, rb = ranks(a), ranks(b)
    ma, mb = statistics.mean(ra), statistics.mean(rb)
    cov = sum((x - ma) * (y - mb) for x, y in zip(ra, rb))
    va = sum((x - ma) ** 2 for x in ra) ** 0.5
    vb = sum((y - mb) ** 2 for y in rb) ** 0.5
    return cov / (va * vb) if va and vb else float("nan")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--strata", default=os.path.join(ROOT, "build", "strata"))
    p.add_argument("--nproc", type=int, default=4)
    p.add_argument("--flavour", default="debug")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--profile", default="", help="default: this machine's from strata calibrate")
    p.add_argument("--sample", type=int, default=12, help="layouts to run; 0: all")
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--extra", default="", help="more --section.key=value for plan and train")
    p.add_argument("--device-memory", default="", help="a cap for plan (e.g. 96MiB), checked")
    p.add_argument("--passes", type=int, default=1,
                   help="runs of each layout, in passes over the sample (every other one "
                        "reversed); each layout counts its fastest")
    p.add_argument("--anchor-every", type=int, default=1,
                   help="layouts between runs of the drift anchor; 0: no anchor")
    a = p.parse_args()
    common = [f"--model.flavour={a.flavour}", "--data.source=synthetic",
              f"--training.batch_size={a.batch}"] + a.extra.split()
    plan = [a.strata, "plan", "--nproc", str(a.nproc), "--top", "100000", "--json"] + common
    if a.profile:
        plan += ["--profile", a.profile]
    if a.device_memory:
        plan += ["--device-memory", a.device_memory]
    planned = subprocess.run(plan, check=True, capture_output=True, text=True)
    rows = json.loads(planned.stdout)
    # What the plan timed here (its parts, the machine's speed now) goes into the log.
    # Note [the machine now]: its predictions carry the speed it measured; the drift
    # anchor below is priced from the profile alone, so the anchored figures take that
    # speed out of the predictions first.
    speed = 1.0
    for line in planned.stderr.splitlines():
        if line.startswith("strata plan:"):
            print(line)
        m = re.search(r"every prediction takes ([\d.]+)x", line)
        if m:
            speed = float(m[1])
    best_predicted = rows[0]
    chosen = rows if a.sample == 0 else [rows[0]] + random.Random(a.seed).sample(
        rows[1:], min(a.sample - 1, len(rows) - 1))

    def train(common_args, overrides):
        """The median step (ms) after warm-up, and every step's record; None on failure."""
        with tempfile.TemporaryDirectory(prefix="strata-bench-plan-") as d:
            cmd = [a.strata, "train", "--nproc", str(a.nproc), f"--training.steps={a.steps}",
                   "--training.eval_interval=0", "--checkpoint.save_final=false",
                   "--logging.progress=off", f"--logging.run_dir={d}"] + common_args + overrides
            run = subprocess.run(cmd, capture_output=True, text=True)
            if run.returncode != 0:
                return None, run.stderr.strip()[-200:]
            recs = [json.loads(l) for l in open(os.path.join(d, "metrics.jsonl"))]
        return statistics.median(x["step_ms"] for x in recs[a.warmup:]), recs

    # The drift anchor: the calibration's reference step (Note [step calibration]).
    anchor_common = ["--model.flavour=debug", "--data.source=synthetic",
                     f"--training.batch_size={8 * a.nproc}"]
    anchor_fix = {"parallel.dp": a.nproc, "parallel.tp": 1, "parallel.pp": 1, "parallel.zero": 0,
                  "parallel.offload": "false", "memory.recompute": "none",
                  "training.micro_batch_size": 4}
    anchor_plan = [a.strata, "plan", "--nproc", str(a.nproc), "--top", "1", "--json",
                   "--no-measure", "--fix", ",".join(anchor_fix)] + anchor_common + [
                       f"--{k}={v}" for k, v in anchor_fix.items()]
    if a.profile:
        anchor_plan += ["--profile", a.profile]
    anchor = json.loads(subprocess.run(anchor_plan, check=True, capture_output=True,
                                       text=True).stdout)[0]
    anchors = []  # every anchor run's measured over predicted

    def run_anchor(at, into):
        """Runs the anchor; its factor goes to `into` as (position in the pass, factor)."""
        m, _ = train(anchor_common, anchor["overrides"])
        if m is not None:
            anchors.append(m / (anchor["step_s"] * 1e3))
            into.append((at, anchors[-1]))
            print(f"{'':>12} {m:12.1f} {'':>8}  anchor ({anchor['layout']}, predicted "
                  f"{anchor['step_s'] * 1e3:.1f} ms): the machine at {anchors[-1]:.3f}x "
                  f"the profile's speed")

    # Per layout run: its runs' (measured ms, anchor factor at that moment) by pass.
    runs = {i: [] for i in range(len(chosen))}
    peak_of = {}
    print(f"{a.flavour}, {a.nproc} ranks, batch {a.batch}: {len(rows)} layouts fit; running "
          f"{len(chosen)} for {a.steps} steps each" +
          (f", {a.passes} passes (the later ones in reverse order)" if a.passes > 1 else ""))
    print(f"{'predicted ms':>12} {'measured ms':>12} {'error':>8}  layout")
    closing = None  # the factor of the anchor that ended the previous pass
    for k in range(a.passes):
        order = list(range(len(chosen)))
        if k % 2 == 1:
            order.reverse()
        mine = []  # this pass's anchors: (position in the pass, factor)
        # A pass after the first opens with the anchor that closed the one before: run
        # again, back to back, it would measure the same moment twice.
        if closing is not None:
            mine.append((0, closing))
        elif a.anchor_every > 0:
            run_anchor(0, mine)
        done = []  # (layout index, position in this pass, measured ms), in order
        for j, i in enumerate(order):
            r = chosen[i]
            m, recs = train(common, r["overrides"])
            if m is None:
                print(f"{'':>12} {'failed':>12} {'':>8}  {r['layout']}: {recs}")
                continue
            peak = max(x["mem_peak_max"]["bytes"] for x in recs)
            peak_of[i] = (max(peak, peak_of.get(i, (0,))[0]), r["peak_bytes"], r["layout"])
            pr = r["step_s"] * 1e3
            print(f"{pr:12.1f} {m:12.1f} {100 * (pr - m) / m:7.1f}%  {r['layout']}")
            done.append((i, j, m))
            if a.anchor_every > 0 and ((j + 1) % a.anchor_every == 0 or j + 1 == len(order)):
                run_anchor(j + 1, mine)
        closing = mine[-1][1] if mine and mine[-1][0] == len(order) else None
        # Each run's speed factor: the mean of this pass's anchors just before and after it.
        for i, j, m in done:
            before = [f for at, f in mine if at <= j]
            after = [f for at, f in mine if at > j]
            near = ([before[-1]] if before else []) + ([after[0]] if after else [])
            runs[i].append((m, statistics.mean(near) if near else 1.0))
    at = [i for i in range(len(chosen)) if runs[i]]
    pred = [chosen[i]["step_s"] * 1e3 for i in at]
    # Note [bench passes]: the machine's slowdowns only add time, so a layout run in
    # several passes counts its fastest (timeit's reasoning); the spread between its
    # passes is the noise no cost model can answer for, and is printed.
    meas = [min(m for m, _ in runs[i]) for i in at]
    errs = [abs(x - y) / y for x, y in zip(pred, meas)]
    print(f"layouts run: {len(meas)}; |error| median {100 * statistics.median(errs):.1f}%, "
          f"max {100 * max(errs):.1f}%; Spearman {spearman(pred, meas):.2f}" +
          (" (each layout's fastest pass)" if a.passes > 1 else ""))
    if a.passes > 1:
        spread = [max(m for m, _ in runs[i]) / min(m for m, _ in runs[i]) - 1 for i in at]
        print(f"the same layout's {a.passes} passes differ by: median "
              f"{100 * statistics.median(spread):.1f}%, max {100 * max(spread):.1f}%")
    if a.passes >= 4:
        # Note [bench split halves]: how well the measurement reproduces itself, in the
        # statistic the errors use. The passes are split into two halves (each with
        # forward and reversed passes) and each layout's fastest run in one half is
        # compared with its fastest in the other, as if one half were a perfect model of
        # the other: no cost model can score better against this machine than that. The
        # prediction is scored against each half too: how far the same model's figures
        # move between two halves of one bench.
        half = a.passes // 2
        both = [i for i in at if len(runs[i]) == a.passes]
        if len(both) >= 3:
            first = [min(m for m, _ in runs[i][:half]) for i in both]
            second = [min(m for m, _ in runs[i][half:]) for i in both]
            split = [abs(x - y) / y for x, y in zip(first, second)]
            print(f"split halves (fastest of passes 1-{half} against fastest of "
                  f"{half + 1}-{a.passes}, {len(both)} layouts): |difference| median "
                  f"{100 * statistics.median(split):.1f}%, max {100 * max(split):.1f}%; "
                  f"Spearman {spearman(first, second):.2f}")
            for name, half_meas in (("first", first), ("second", second)):
                e = [abs(chosen[i]["step_s"] * 1e3 - m) / m for i, m in zip(both, half_meas)]
                print(f"  the prediction against the {name} half: |error| median "
                      f"{100 * statistics.median(e):.1f}%, max {100 * max(e):.1f}%")
    # Each run at the profile's speed (divided by its factor); a layout's is the median
    # of its passes'.
    steady = [statistics.median(m / f for m, f in runs[i]) for i in at]
    if anchors:
        factors = anchors
        ferrs_signed = [statistics.median((x / speed * f - m) / m for m, f in runs[i])
                        for x, i in zip(pred, at)]
        ferrs = [abs(e) for e in ferrs_signed]
        print(f"drift anchor: {len(anchors)} runs, the machine at {min(factors):.3f}x to "
              f"{max(factors):.3f}x the profile's speed")
        print(f"against the machine's speed at each run: |error| median "
              f"{100 * statistics.median(ferrs):.1f}%, max {100 * max(ferrs):.1f}%; Spearman "
              f"{spearman(pred, steady):.2f}" +
              (" (each layout's median over its passes)" if a.passes > 1 else ""))
        worst = max(range(len(ferrs)), key=lambda k: ferrs[k])
        print(f"  largest: {100 * ferrs_signed[worst]:+.1f}% ({chosen[at[worst]]['layout']})")
        if a.passes > 1:
            # Both at the machine's fastest: each layout's fastest pass against the
            # prediction at the fastest anchor.
            fast = min(factors)
            serrs = [(x / speed * fast - m) / m for x, m in zip(pred, meas)]
            print(f"at the machine's fastest (the fastest anchor, each layout's fastest pass): "
                  f"|error| median {100 * statistics.median(abs(e) for e in serrs):.1f}%, max "
                  f"{100 * max(abs(e) for e in serrs):.1f}%")
    peaks = [peak_of[i] for i in at]
    if a.device_memory:
        units = {"kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30}
        text = a.device_memory.lower()
        cap = next((float(text[:-3]) * v for k, v in units.items() if text.endswith(k)), None)
        cap = float(text) if cap is None else cap
        over = [(m, e, l) for m, e, l in peaks if m > cap]
        print(f"memory cap {a.device_memory}: {len(over)} of {len(peaks)} layouts predicted to "
              f"fit exceeded it (largest tracked peak {max(m for m, _, _ in peaks) / 2**20:.1f} MiB)")
        for m, e, l in over:
            print(f"  over: {l}: tracked {m / 2**20:.1f} MiB, estimated {e / 2**20:.1f} MiB")
        ratios = sorted((m / e, l) for m, e, l in peaks)
        print(f"tracked peak (highest rank) over estimated: median "
              f"{statistics.median(r for r, _ in ratios):.3f}, range {ratios[0][0]:.3f} "
              f"({ratios[0][1]}) to {ratios[-1][0]:.3f} ({ratios[-1][1]})")
    best = min(meas)
    first = meas[0]
    print(f"predicted first ({best_predicted['layout']}) measures {first:.1f} ms, "
          f"{100 * (first - best) / best:.1f}% above the measured best of those run")
    if anchors:
        k = min(range(len(steady)), key=lambda j: steady[j])
        print(f"  at the profile's speed: {100 * (steady[0] - steady[k]) / steady[k]:.1f}% above "
              f"the best ({chosen[at[k]]['layout']})")


if __name__ == "__main__":
    sys.exit(main())
