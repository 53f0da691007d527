"""bench/memory's PyTorch side: the same GPT-2 blocks as blocks.cpp, forward +
backward under one precision and recompute mode with torch.utils.checkpoint
(use_reentrant=False); one JSON line per measured step."""
import argparse
import json
import math
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from common import reset_rss_peak, rss  # noqa: E402


class Attention(nn.Module):
    def __init__(self, d, heads, dropout):
        super().__init__()
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.heads, self.dropout, self.selective = heads, dropout, False

    def core(self, q, k, v):
        return F.scaled_dot_product_attention(
            q, k, v, dropout_p=self.dropout if self.training else 0.0, is_causal=True)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = [t.view(B, T, self.heads, C // self.heads).transpose(1, 2)
                   for t in self.qkv(x).split(C, dim=2)]
        y = (checkpoint(self.core, q, k, v, use_reentrant=False) if self.selective
             else self.core(q, k, v))
        return self.proj(y.transpose(1, 2).contiguous().view(B, T, C))


class Block(nn.Module):
    def __init__(self, d, heads, dropout):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn = Attention(d, heads, dropout)
        self.fc, self.fc_proj = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
        self.drop = nn.Dropout(dropout)

    def forward(self, x):
        h = x + self.drop(self.attn(self.ln1(x)))
        return h + self.drop(self.fc_proj(F.gelu(self.fc(self.ln2(h)), approximate="tanh")))


def segments(mode, n, k):
    if mode in ("none", "selective"):
        return [(0, n, False)]
    k = {"full": 1, "every-k": k, "sqrt": math.ceil(math.sqrt(n))}[mode]
    return [(b, min(b + k, n), True) for b in range(0, n, k)]


def main():
    p = argparse.ArgumentParser()
    for name, default in [("blocks", 12), ("seq", 512), ("batch", 1), ("d", 768), ("heads", 12),
                          ("k", 2), ("steps", 3), ("warmup", 1), ("threads", 2)]:
        p.add_argument("--" + name, type=int, default=default)
    p.add_argument("--precision", default="fp32")
    p.add_argument("--recompute", default="none")
    p.add_argument("--dropout", type=float, default=0.1)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    dt = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[a.precision]
    blocks = nn.ModuleList(Block(a.d, a.heads, a.dropout) for _ in range(a.blocks)).to(dt)
    for blk in blocks:
        blk.attn.selective = a.recompute == "selective"
    segs = segments(a.recompute, a.blocks, a.k)
    for prm in blocks.parameters():
        prm.grad = torch.zeros_like(prm)
    x = torch.randn(a.batch, a.seq, a.d).to(dt)
    target = torch.randn(a.batch, a.seq, a.d)

    def run(h, b, e):
        for i in range(b, e):
            h = blocks[i](h)
        return h

    for s in range(a.warmup + a.steps):
        reset_rss_peak()
        rss0 = rss("VmRSS")
        t0 = time.perf_counter()
        with torch.autocast("cpu", dtype=dt, enabled=dt != torch.float32):
            h = x
            for b, e, rc in segs:
                h = checkpoint(run, h, b, e, use_reentrant=False) if rc else run(h, b, e)
            loss = (h.float() * target).sum()
        t_fwd = time.perf_counter()
        loss.backward()
        ms = (time.perf_counter() - t0) * 1000
        if s >= a.warmup:
            print(json.dumps({"framework": "pytorch", "precision": a.precision,
                              "recompute": a.recompute, "blocks": a.blocks, "ms": ms,
                              "forward_ms": (t_fwd - t0) * 1000,
                              "rss_peak_delta": rss("VmHWM") - rss0}), flush=True)


if __name__ == "__main__":
    main()
