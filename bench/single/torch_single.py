"""PyTorch's side of bench/single: one process, eager mode, the GPT of
bench/ddp/torch_ddp.py (Strata's gpt2-124m architecture: pre-LN blocks, causal SDPA,
tanh-GELU, tied head), mean cross-entropy, backward, global-norm clipping at 1.0,
AdamW (betas 0.9/0.95, decay 0.1 on matrices and embeddings). Prints one JSON line
per step: step_ms and its split into forward+backward and clip+optimizer.

CPU: fp32, the single-tensor AdamW (Strata's implementation is single-tensor too).
CUDA: --precision bf16 runs the forward under torch.autocast(bfloat16) with fp32
parameters (PyTorch's usual mixed precision), AdamW with PyTorch's CUDA default
(foreach); the clock reads after torch.cuda.synchronize().
"""
import argparse
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "ddp"))
from torch_ddp import Gpt  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--vocab", type=int, default=8192)
    p.add_argument("--seq", type=int, default=256)
    p.add_argument("--d", type=int, default=768)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--device", default="cpu")
    p.add_argument("--precision", default="fp32", choices=["fp32", "bf16"])
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(1337)
    dev = torch.device(a.device)
    model = Gpt(a.vocab, a.seq, a.d, a.heads, a.layers).to(dev)
    decay = [q for q in model.parameters() if q.dim() >= 2]
    other = [q for q in model.parameters() if q.dim() < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": 0.1}, {"params": other, "weight_decay": 0.0}],
        lr=1e-4, betas=(0.9, 0.95), eps=1e-8, foreach=None if dev.type == "cuda" else False)
    gen = torch.Generator().manual_seed(1000)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    for step in range(a.steps):
        data = torch.randint(a.vocab, (a.batch, a.seq + 1), generator=gen).to(dev)
        sync()
        t0 = time.perf_counter()
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=a.precision == "bf16"):
            loss = model(data[:, :-1], data[:, 1:])
        loss.backward()
        sync()
        t1 = time.perf_counter()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, foreach=dev.type == "cuda")
        opt.step()
        opt.zero_grad()
        value = loss.item()
        sync()
        t2 = time.perf_counter()
        print(json.dumps({"step": step + 1, "step_ms": (t2 - t0) * 1000,
                          "fwd_bwd_ms": (t1 - t0) * 1000, "optim_ms": (t2 - t1) * 1000,
                          "loss": value}), flush=True)


if __name__ == "__main__":
    main()
