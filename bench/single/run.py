"""bench/single: one process of Strata against a plain PyTorch eager loop on the
same shapes, side by side in one invocation, runs alternating.

Default (this machine's CPU): gpt2-124m-shaped layers (12 x d768, 12 heads) with
vocabulary 8192, sequence 256, batch 4, 2 threads, synthetic tokens, fp32, AdamW,
tied head, no dropout. On a GPU (scripts/device-check.sh): --device cuda
--flavour-vocab 50257 --seq 1024 --precision bf16; Strata then runs bf16 autocast
with fp32 parameters (memory.master_weights=false), as PyTorch's side does.

Prints the median step (after the warm-up steps) and its forward+backward / optimizer
split for both, tokens/s, the ratio Strata/PyTorch, and MFU against --peak-tflops.

  ~/.cache/strata/venv/bin/python bench/single/run.py [--repeats 3] [--steps 8]

Not a test: run it alone (a build or test beside it skews ratios by 2x here).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def flops_per_token(vocab, seq, d, layers):
    # 6N per token for the matmuls (N without position embeddings, with the tied
    # head) plus attention's 12 L d T; Strata's metrics use the same formula.
    n = layers * 12 * d * d + d * vocab
    return 6 * n + 12 * layers * d * seq


def run_strata(a, run_dir):
    cmd = [a.strata, "train", "--model.flavour=gpt2-124m", "--data.source=synthetic",
           f"--model.vocab_size={a.vocab}", f"--model.seq_len={a.seq}",
           f"--training.batch_size={a.batch}", f"--training.threads={a.threads}",
           f"--training.steps={a.steps}", "--training.eval_interval=0", "--training.lr=1e-4",
           "--training.warmup_steps=1", "--training.deterministic=false",
           f"--training.device={a.device}", "--checkpoint.save_final=false",
           f"--logging.run_dir={run_dir}", "--logging.progress=off"]
    if a.precision == "bf16":
        cmd += ["--memory.precision=bf16", "--memory.master_weights=false"]
    cmd += a.strata_arg
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    recs = [json.loads(l) for l in open(os.path.join(run_dir, "metrics.jsonl"))]
    return recs[a.warmup:]


def run_torch(a):
    env = dict(os.environ, OMP_NUM_THREADS=str(a.threads))
    cmd = [sys.executable, os.path.join(ROOT, "bench", "single", "torch_single.py"),
           "--vocab", str(a.vocab), "--seq", str(a.seq), "--batch", str(a.batch),
           "--steps", str(a.steps), "--threads", str(a.threads), "--device", a.device,
           "--precision", a.precision]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env, cwd="/").stdout
    recs = [json.loads(l) for l in out.splitlines() if l.startswith("{")]
    return recs[a.warmup:]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--strata", default=os.path.join(ROOT, "build", "strata"))
    p.add_argument("--device", default="cpu")
    p.add_argument("--flavour", default="gpt2-124m", help="shapes: gpt2-124m layers (12 x 768)")
    p.add_argument("--vocab", type=int, default=None, help="default 8192 on CPU, 50257 on CUDA")
    p.add_argument("--seq", type=int, default=256)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--precision", default="fp32", choices=["fp32", "bf16"])
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--peak-tflops", type=float, default=0, help="for MFU (H200 dense bf16: 989)")
    p.add_argument("--json", default="", help="also write the result here")
    p.add_argument("--strata-arg", action="append", default=[])
    a = p.parse_args()
    if a.vocab is None:
        a.vocab = 50257 if a.device == "cuda" else 8192
    if a.device == "cuda":
        a.repeats = min(a.repeats, 2)
    tokens = a.batch * a.seq
    print(f"bench/single: {a.flavour} layers, vocabulary {a.vocab}, seq {a.seq}, batch {a.batch}, "
          f"{a.precision}, {a.device}, {a.threads} threads, {a.steps} steps ({a.warmup} warm-up), "
          f"{a.repeats} repeats", flush=True)
    res = {"strata": [], "pytorch": []}
    with tempfile.TemporaryDirectory() as tmp:
        for rep in range(a.repeats):
            order = ["strata", "pytorch"] if rep % 2 == 0 else ["pytorch", "strata"]
            for who in order:
                recs = run_strata(a, os.path.join(tmp, f"s{rep}")) if who == "strata" else run_torch(a)
                res[who] += recs
                print(f"  repeat {rep + 1} {who:8s} median step "
                      f"{statistics.median(r['step_ms'] for r in recs):8.1f} ms", flush=True)
    out = {"device": a.device, "vocab": a.vocab, "seq": a.seq, "batch": a.batch,
           "precision": a.precision, "threads": a.threads}
    fpt = flops_per_token(a.vocab, a.seq, 768, 12)
    print(f"\n{'':10s} {'step ms':>9s} {'fwd+bwd':>9s} {'optim':>9s} {'tokens/s':>10s} {'MFU':>7s}")
    for who in ("strata", "pytorch"):
        step = statistics.median(r["step_ms"] for r in res[who])
        fb = statistics.median(r["fwd_bwd_ms"] for r in res[who])
        opt = statistics.median(r["optim_ms"] for r in res[who])
        tps = tokens / (step / 1000)
        mfu = tps * fpt / (a.peak_tflops * 1e12) if a.peak_tflops > 0 else float("nan")
        out[who] = {"step_ms": step, "fwd_bwd_ms": fb, "optim_ms": opt, "tokens_per_s": tps, "mfu": mfu}
        print(f"{who:10s} {step:9.1f} {fb:9.1f} {opt:9.1f} {tps:10.0f} {mfu * 100:6.1f}%")
    out["ratio"] = out["strata"]["tokens_per_s"] / out["pytorch"]["tokens_per_s"]
    print(f"\nStrata / PyTorch tokens/s: {out['ratio']:.3f}x")
    if a.json:
        json.dump(out, open(a.json, "w"), indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
