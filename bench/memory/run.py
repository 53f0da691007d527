"""bench/memory: activation memory and step time of each recompute mode x each
precision, Strata against PyTorch's torch.utils.checkpoint, side by side.

Both run the same stack of gpt2-124m-shaped GPT-2 blocks (d=768, 12 heads, MLP 4d,
pre-LayerNorm, dropout 0.1 so the attention core materialises its (T, T)
probabilities as Korthikanti et al. assume) at sequence 512, batch 1, forward and
backward only (no optimizer), with the same intra-op threads, alternating between
the two. Strata runs build/bench/strata_bench_memory, PyTorch torch_blocks.py
(checkpoint(use_reentrant=False) around the same segments; selective = the
attention core). Half precisions are master-weights style (half blocks, autocast).

Two measurements per configuration, each in a fresh process:
- time: median forward+backward ms over --steps steps after a warm-up, with glibc's
  default malloc;
- memory: with MALLOC_MMAP_THRESHOLD_=65536 every large tensor is its own mapping,
  so the resident-set high-water mark (reset through /proc/self/clear_refs before
  the step) follows live tensors; reported is the peak rise during the step, the
  same way for both. Strata's tracking allocator's activation peak is printed too.

  ~/.cache/strata/venv/bin/python bench/memory/run.py [--steps 3] [--blocks 12]

Not a test: numbers depend on the machine.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODES = ["none", "selective", "every-k", "sqrt", "full"]
PRECISIONS = ["fp32", "bf16", "fp16"]


def measure(a, framework, precision, mode, blocks, memory):
    args = ["--blocks", str(blocks), "--seq", str(a.seq), "--batch", str(a.batch),
            "--precision", precision, "--recompute", mode, "--k", str(a.k),
            "--threads", str(a.threads), "--steps", "1" if memory else str(a.steps),
            "--warmup", "1"]
    if framework == "strata":
        cmd = [os.path.join(ROOT, a.build, "bench", "strata_bench_memory")] + args
    else:
        cmd = [sys.executable, os.path.join(ROOT, "bench", "memory", "torch_blocks.py")] + args
    env = dict(os.environ, OMP_NUM_THREADS=str(a.threads))
    env.pop("MALLOC_MMAP_THRESHOLD_", None)
    if memory:
        env["MALLOC_MMAP_THRESHOLD_"] = "65536"
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env, cwd="/").stdout
    return [json.loads(l) for l in out.splitlines() if l.startswith("{")]


def row(a, precision, mode, blocks):
    r = {}
    for fw in ("strata", "pytorch"):
        t = measure(a, fw, precision, mode, blocks, memory=False)
        m = measure(a, fw, precision, mode, blocks, memory=True)
        r[fw] = {"ms": statistics.median(x["ms"] for x in t),
                 "rss": m[-1]["rss_peak_delta"],
                 "tracked": m[-1].get("activation_peak")}
    return r


def mb(x):
    return f"{x / 2**20:8.1f}"


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--blocks", type=int, default=12)
    p.add_argument("--seq", type=int, default=512)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--k", type=int, default=2)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--build", default="build")
    p.add_argument("--sqrt-blocks", default="4,16,36")
    p.add_argument("--precisions", default=",".join(PRECISIONS))
    p.add_argument("--modes", default=",".join(MODES), help="'none' must come first")
    a = p.parse_args()
    print(f"bench/memory: {a.blocks} gpt2-124m blocks, seq {a.seq}, batch {a.batch}, "
          f"dropout 0.1, every-k k={a.k}, {a.threads} threads; time = median of {a.steps} "
          f"steps; memory = peak RSS rise in the step (MiB)")
    hdr = (f"{'precision':9} {'recompute':9} | {'strata ms':>9} {'ovh':>6} {'act MiB':>8} "
           f"{'saved':>6} {'tracked':>8} | {'torch ms':>9} {'ovh':>6} {'act MiB':>8} "
           f"{'saved':>6} | {'time x':>6} {'mem x':>6}")
    print(hdr)
    print("-" * len(hdr))
    results = {}
    for precision in [x for x in a.precisions.split(",") if x]:
        base = None
        for mode in [x for x in a.modes.split(",") if x]:
            r = row(a, precision, mode, a.blocks)
            results[(precision, mode)] = r
            if mode == "none":
                base = r
            s, t = r["strata"], r["pytorch"]
            bs, bt = base["strata"], base["pytorch"]
            print(f"{precision:9} {mode:9} | {s['ms']:9.0f} {100 * (s['ms'] / bs['ms'] - 1):+5.0f}% "
                  f"{mb(s['rss'])} {100 * (1 - s['rss'] / bs['rss']):5.0f}% {mb(s['tracked'])} | "
                  f"{t['ms']:9.0f} {100 * (t['ms'] / bt['ms'] - 1):+5.0f}% {mb(t['rss'])} "
                  f"{100 * (1 - t['rss'] / bt['rss']):5.0f}% | {s['ms'] / t['ms']:6.2f} "
                  f"{s['rss'] / t['rss']:6.2f}", flush=True)
    print("ovh: step time over no recompute, same framework and precision; saved: activation "
          "memory saved against no recompute; time x / mem x: Strata / PyTorch (< 1: Strata "
          "faster / smaller)")
    print()
    print("sqrt(L) growth, fp32, peak RSS rise (MiB), Strata | PyTorch:")
    for blocks in [int(b) for b in a.sqrt_blocks.split(",")]:
        line = f"  L={blocks:3}: "
        for mode in ("none", "sqrt"):
            s = measure(a, "strata", "fp32", mode, blocks, memory=True)[-1]["rss_peak_delta"]
            t = measure(a, "pytorch", "fp32", mode, blocks, memory=True)[-1]["rss_peak_delta"]
            line += f"{mode} {mb(s)} | {mb(t)}   "
            if mode == "sqrt":
                line += f"sqrt/sqrt(L) {s / 2**20 / blocks ** 0.5:6.1f} MiB"
        print(line, flush=True)


if __name__ == "__main__":
    main()
