#!/usr/bin/env python3
"""Asynchronous checkpoints against synchronous ones, and against PyTorch's
torch.distributed.checkpoint (save vs async_save) on the same state: gpt2-124m's
weights and AdamW moments (~1.5 GB), one process. For Strata, `strata train` on
synthetic data saves every --interval steps, once with checkpoint.async=false and
once with true; the stall is what the step paid (the async copy to host memory,
plus any wait for the previous write), reported as a share of the synchronous save.
Goal (issue 18): stall <= 20% of the synchronous save. Run alone: a build beside it
skews the figures.

  python3 bench/checkpoint/run.py [--steps 10 --interval 3 --seq 64]
"""
import argparse
import os
import statistics
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "bench"))
from common import add_run_args, strata_train_records, torch_peer_lines  # noqa: E402


def strata_side(a, async_save):
    with tempfile.TemporaryDirectory(prefix="strata-bench-ckpt-") as d:
        recs = strata_train_records(a, d, [f"--checkpoint.interval={a.interval}",
                                           "--checkpoint.keep=1",
                                           f"--checkpoint.async={str(async_save).lower()}"])
    saves = [r["checkpoint"] for r in recs if "checkpoint" in r]
    writes = [r["checkpoint_written"]["write_ms"] for r in recs if "checkpoint_written" in r]
    plain = [r["step_ms"] - r.get("checkpoint", {}).get("ms", 0) for r in recs]
    return {"stall": [s["ms"] for s in saves], "wait": [s.get("wait_ms", 0) for s in saves],
            "write": writes if async_save else [s["ms"] for s in saves], "step": plain}


def med(xs):
    return statistics.median(xs) if xs else float("nan")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_run_args(p, ROOT, steps=10, warmup=0, repeats=1)
    p.add_argument("--interval", type=int, default=3, help="steps between saves")
    p.set_defaults(world=1, seq=64)
    a = p.parse_args()
    sync = strata_side(a, False)
    asy = strata_side(a, True)
    torch_lines = torch_peer_lines(a, os.path.join(ROOT, "bench", "checkpoint", "torch_dcp.py"),
                                   ["--saves", "3"]) if a.world == 1 else []
    print(f"gpt2-124m state, world {a.world}, seq {a.seq}, {a.steps} steps, a save every "
          f"{a.interval} (medians, ms)")
    print(f"strata  sync save {med(sync['stall']):9.1f}   async stall {med(asy['stall']):7.1f} "
          f"(wait {med(asy['wait']):.1f})   background write {med(asy['write']):9.1f}   "
          f"stall / sync = {med(asy['stall']) / med(sync['stall']):.3f}")
    print(f"strata  step without the save: sync {med(sync['step']):.1f}, async "
          f"{med(asy['step']):.1f} (the writer shares the cores)")
    if torch_lines:
        ts = [l["stall_ms"] for l in torch_lines if l["mode"] == "sync"]
        ta = [l["stall_ms"] for l in torch_lines if l["mode"] == "async"]
        tt = [l["total_ms"] for l in torch_lines if l["mode"] == "async"]
        print(f"torch   dcp.save {med(ts):9.1f}   dcp.async_save stall {med(ta):7.1f}   "
              f"background write {med(tt) - med(ta):9.1f}   stall / sync = {med(ta) / med(ts):.3f}")
        print(f"strata / torch: sync save {med(sync['stall']) / med(ts):.3f}, async stall "
              f"{med(asy['stall']) / med(ta):.3f}")


if __name__ == "__main__":
    main()
