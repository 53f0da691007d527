"""bench/zero: Strata ZeRO against PyTorch FSDP2, side by side in one invocation.

Both train the same gpt2-124m-shaped GPT (12 layers, d=768, 12 heads, vocabulary
50257, tied head; the model of bench/ddp) on random tokens, world 2, Gloo on
loopback, the same intra-op threads per rank, runs alternating, several repeats:
  - Strata with parallel.zero = 0 (DDP), 1, 2, 3;
  - PyTorch FSDP2 (fully_shard on each block, then the root; ZeRO-3's peer) and
    PyTorch DDP (stage 0's peer), from torch_fsdp.py.
For each: the median step time over the steps after the warm-up, and rank 0's
process peak RSS during a step (VmHWM reset at each step's start, the highest step),
also less the RSS before the model was built (the training's own memory, without
the Python or C++ runtime). Strata's tracking-allocator peak is printed too.

  ~/.cache/strata/venv/bin/python bench/zero/run.py [--repeats 2] [--seq 128] ...

Not a test: numbers depend on the machine. Strata runs from build/strata.
"""
import argparse
import os
import statistics
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "bench"))
from common import add_run_args, strata_train_records, torch_peer_rss_run  # noqa: E402
MiB = 1024.0 * 1024.0


def run_strata(a, stage, run_dir):
    recs = strata_train_records(a, run_dir, [f"--training.batch_size={a.batch * a.world}",
                                             f"--parallel.zero={stage}"] + a.strata_arg)
    return {"ms": [r["step_ms"] for r in recs],
            "peak": max(r["rss"]["peak"] for r in recs),
            "base": recs[0]["rss"]["base"],
            "tracked": max(r["mem_peak_total"] for r in recs)}


def run_torch(a, ddp):
    r = torch_peer_rss_run(a, os.path.join(ROOT, "bench", "zero", "torch_fsdp.py"),
                           ["--ddp"] if ddp else [])
    return dict(r, tracked=None)


def main():
    p = argparse.ArgumentParser()
    add_run_args(p, ROOT, steps=6, warmup=2, repeats=2)
    p.add_argument("--stages", default="0,1,2,3")
    p.add_argument("--strata-arg", action="append", default=[],
                   help="extra flag for strata train (repeatable)")
    a = p.parse_args()
    names = [f"strata zero={s}" for s in a.stages.split(",")] + ["pytorch ddp", "pytorch fsdp2"]
    res = {n: [] for n in names}
    print(f"bench/zero: gpt2-124m shapes, seq {a.seq}, {a.batch} per rank, world {a.world}, "
          f"{a.threads} thread(s) per rank, Gloo, {a.steps} steps ({a.warmup} warm-up), "
          f"{a.repeats} repeats", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        for rep in range(a.repeats):
            order = names if rep % 2 == 0 else list(reversed(names))
            for n in order:
                if n.startswith("strata"):
                    r = run_strata(a, n.split("=")[1], os.path.join(tmp, f"{n[-1]}-{rep}"))
                else:
                    r = run_torch(a, ddp=n == "pytorch ddp")
                res[n].append(r)
                print(f"  repeat {rep + 1}: {n:14s} median step {statistics.median(r['ms']):8.1f} ms"
                      f"  peak RSS {r['peak'] / MiB:7.1f} MiB", flush=True)
    summary = {}
    for n, runs in res.items():
        summary[n] = {
            "ms": statistics.median([m for r in runs for m in r["ms"]]),
            "peak": max(r["peak"] for r in runs),
            "train": max(r["peak"] - r["base"] for r in runs),
            "tracked": max(r["tracked"] for r in runs) if runs[0]["tracked"] else None}
    print()
    print(f"{'':15s} {'step ms':>9s} {'peak RSS MiB':>13s} {'above base MiB':>15s} "
          f"{'tracked peak MiB':>17s}")
    for n, s in summary.items():
        tracked = f"{s['tracked'] / MiB:17.1f}" if s["tracked"] else f"{'-':>17s}"
        print(f"{n:15s} {s['ms']:9.1f} {s['peak'] / MiB:13.1f} {s['train'] / MiB:15.1f} {tracked}")
    print()
    for mine, peer in [("strata zero=3", "pytorch fsdp2"), ("strata zero=0", "pytorch ddp")]:
        if mine not in summary:
            continue
        s, t = summary[mine], summary[peer]
        print(f"{mine} / {peer}: step time {s['ms'] / t['ms']:.3f}, peak RSS "
              f"{s['peak'] / t['peak']:.3f}, peak above base {s['train'] / t['train']:.3f}")
    if "strata zero=3" in summary:
        s, t = summary["strata zero=3"], summary["pytorch fsdp2"]
        print(f"RESULT zero3_vs_fsdp2 time={s['ms'] / t['ms']:.3f} "
              f"peak_rss={s['peak'] / t['peak']:.3f} peak_above_base={s['train'] / t['train']:.3f}")


if __name__ == "__main__":
    main()
