#!/usr/bin/env python3
"""Generation speed with and without the KV cache, and against Hugging Face transformers'
generate() on the same weights: a GPT (gpt2-124m's shape by default, KJV tokenizer)
trained one step, exported with `strata export`, then greedy decoding of --tokens
tokens inside one window (so both sides do the same work, cache on and off), the
same intra-op threads on both sides. Prints tokens/s and the ratios. Run alone: a
build beside it skews the figures.

  python3 bench/generate/run.py [--flavour gpt2-124m --seq 256 --tokens 200 --threads 2]
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def strata_tokens_per_s(a, run_dir, kv):
    env = dict(os.environ, OMP_NUM_THREADS=str(a.threads))
    best = 0.0
    for _ in range(a.repeats):
        r = subprocess.run([a.strata, "generate", run_dir, "--tokens", str(a.tokens),
                            "--temperature", "0", "--kv-cache", kv],
                           capture_output=True, text=True, check=True, env=env)
        m = re.search(r"([0-9.]+) tokens/s", r.stderr)
        best = max(best, float(m.group(1)))
    return best


def hf_tokens_per_s(a, hf_dir, use_cache):
    import torch
    from transformers import AutoModelForCausalLM
    torch.set_num_threads(a.threads)
    model = AutoModelForCausalLM.from_pretrained(hf_dir, dtype=torch.float32).eval()
    ids = torch.tensor([[11, 12, 13, 14]])
    kw = dict(do_sample=False, use_cache=use_cache, pad_token_id=0)
    with torch.no_grad():
        model.generate(ids, max_new_tokens=4, min_new_tokens=4, **kw)  # warm-up
        best = 0.0
        for _ in range(a.repeats):
            t0 = time.perf_counter()
            out = model.generate(ids, max_new_tokens=a.tokens, min_new_tokens=a.tokens, **kw)
            secs = time.perf_counter() - t0
            assert out.shape[1] == 4 + a.tokens
            best = max(best, a.tokens / secs)
    return best


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--strata", default=os.path.join(ROOT, "build", "strata"))
    p.add_argument("--flavour", default="gpt2-124m")
    p.add_argument("--seq", type=int, default=256)
    p.add_argument("--tokens", type=int, default=200)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeats", type=int, default=3)
    a = p.parse_args()
    assert a.tokens + 8 <= a.seq, "--tokens must fit one window (--seq) with the prompt"
    with tempfile.TemporaryDirectory(prefix="strata-bench-gen-") as d:
        run_dir, hf_dir = os.path.join(d, "run"), os.path.join(d, "hf")
        subprocess.run([a.strata, "train", f"--model.flavour={a.flavour}",
                        f"--model.seq_len={a.seq}", "--training.steps=1",
                        "--training.batch_size=1", "--training.eval_interval=0",
                        "--model.dropout=0", f"--logging.run_dir={run_dir}",
                        "--logging.progress=off"], check=True, capture_output=True)
        subprocess.run([a.strata, "export", run_dir, "-o", hf_dir], check=True,
                       capture_output=True)
        s_on = strata_tokens_per_s(a, run_dir, "on")
        s_off = strata_tokens_per_s(a, run_dir, "off")
        h_on = hf_tokens_per_s(a, hf_dir, True)
        h_off = hf_tokens_per_s(a, hf_dir, False)
    print(f"{a.flavour}, seq {a.seq}, {a.tokens} greedy tokens, {a.threads} threads "
          f"(best of {a.repeats})")
    print(f"  strata        KV cache {s_on:8.1f} tok/s   no cache {s_off:8.1f} tok/s   "
          f"cache speed-up {s_on / s_off:.2f}x")
    print(f"  transformers  KV cache {h_on:8.1f} tok/s   no cache {h_off:8.1f} tok/s   "
          f"cache speed-up {h_on / h_off:.2f}x")
    print(f"  strata / transformers: {s_on / h_on:.2f} (cache), {s_off / h_off:.2f} (no cache)")


if __name__ == "__main__":
    sys.exit(main())
