"""bench/tp: Strata tensor parallelism against PyTorch's DTensor tensor parallel, side
by side in one invocation.

Both train the same gpt2-124m-shaped GPT (12 layers, d=768, 12 heads, untied head,
vocabulary 50257 padded to 50304) on random tokens, tp = 2 over Gloo on loopback,
the same intra-op threads per rank, runs alternating, several repeats:
  - Strata with parallel.tp=2, without and with parallel.sequence_parallel;
  - PyTorch's parallelize_module with torchtitan's plan (ColwiseParallel /
    RowwiseParallel / SequenceParallel, vocab-parallel embedding, loss_parallel),
    from torch_tp.py, without and with sequence parallelism.
For each: the median step time over the steps after the warm-up, and rank 0's
process peak RSS during a step (VmHWM reset at each step's start, the highest
step), also less the RSS before the model was built. For Strata also the tp
communication per step (bytes and the milliseconds spent waiting on it).

  ~/.cache/strata/venv/bin/python bench/tp/run.py [--repeats 2] [--seq 128] ...

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


def run_strata(a, sp, run_dir):
    recs = strata_train_records(a, run_dir, [
        "--model.tied_embedding=false", f"--training.batch_size={a.batch}",
        f"--parallel.tp={a.world}", f"--parallel.sequence_parallel={'true' if sp else 'false'}"])
    return {"ms": [r["step_ms"] for r in recs],
            "peak": max(r["rss"]["peak"] for r in recs),
            "base": recs[0]["rss"]["base"],
            "tp_bytes": statistics.median(r["comm_axes"]["tp"]["bytes"] for r in recs),
            "tp_ms": statistics.median(r["comm_axes"]["tp"]["ms"] for r in recs)}


def run_torch(a, sp):
    return torch_peer_rss_run(a, os.path.join(ROOT, "bench", "tp", "torch_tp.py"),
                              ["--sp"] if sp else [])


def main():
    p = argparse.ArgumentParser()
    add_run_args(p, ROOT, steps=6, warmup=2, repeats=2)
    a = p.parse_args()
    names = ["strata tp", "pytorch tp", "strata tp+sp", "pytorch tp+sp"]
    res = {n: [] for n in names}
    print(f"bench/tp: gpt2-124m shapes (untied head), seq {a.seq}, batch {a.batch}, "
          f"tp {a.world}, {a.threads} thread(s) per rank, Gloo, {a.steps} steps "
          f"({a.warmup} warm-up), {a.repeats} repeats", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        for rep in range(a.repeats):
            order = names if rep % 2 == 0 else list(reversed(names))
            for n in order:
                sp = n.endswith("+sp")
                if n.startswith("strata"):
                    r = run_strata(a, sp, os.path.join(tmp, f"{'sp' if sp else 'tp'}-{rep}"))
                else:
                    r = run_torch(a, sp)
                res[n].append(r)
                print(f"  repeat {rep + 1}: {n:14s} median step {statistics.median(r['ms']):8.1f} ms"
                      f"  peak RSS {r['peak'] / MiB:7.1f} MiB", flush=True)
    summary = {}
    for n, runs in res.items():
        summary[n] = {"ms": statistics.median([m for r in runs for m in r["ms"]]),
                      "peak": max(r["peak"] for r in runs),
                      "train": max(r["peak"] - r["base"] for r in runs)}
        if "tp_bytes" in runs[0]:
            summary[n]["tp_mib"] = statistics.median(r["tp_bytes"] for r in runs) / MiB
            summary[n]["tp_ms"] = statistics.median(r["tp_ms"] for r in runs)
    print()
    print(f"{'':15s} {'step ms':>9s} {'peak RSS MiB':>13s} {'above base MiB':>15s} "
          f"{'tp MiB/step':>12s} {'tp wait ms':>11s}")
    for n, s in summary.items():
        comm = (f"{s['tp_mib']:12.1f} {s['tp_ms']:11.1f}" if "tp_mib" in s
                else f"{'-':>12s} {'-':>11s}")
        print(f"{n:15s} {s['ms']:9.1f} {s['peak'] / MiB:13.1f} {s['train'] / MiB:15.1f} {comm}")
    print()
    # Strata waits on each tp collective where its result is needed (the next op
    # consumes it), so none of the tp communication is hidden behind computation.
    for mine, peer, tag in [("strata tp", "pytorch tp", "tp"),
                            ("strata tp+sp", "pytorch tp+sp", "tp_sp")]:
        s, t = summary[mine], summary[peer]
        print(f"{mine} / {peer}: step time {s['ms'] / t['ms']:.3f}, peak RSS "
              f"{s['peak'] / t['peak']:.3f}, peak above base {s['train'] / t['train']:.3f}; "
              f"tp communication {s['tp_ms'] / s['ms'] * 100:.1f}% of the step, hidden 0%")
        print(f"RESULT {tag}_vs_dtensor time={s['ms'] / t['ms']:.3f} "
              f"peak_rss={s['peak'] / t['peak']:.3f} peak_above_base={s['train'] / t['train']:.3f}")


if __name__ == "__main__":
    main()
