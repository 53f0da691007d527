"""PyTorch's side of bench/ddp: the same GPT shapes and training step as
`strata train --model.flavour=gpt2-124m`, under torch.nn.parallel.DistributedDataParallel
with Gloo. Started by run.py through torch.distributed.run; rank 0 prints one JSON
line per step: {"step": i, "step_ms": ...}.

Mirrors Strata's step: pre-LN blocks (LayerNorm, fused qkv Linear, causal SDPA,
output Linear; LayerNorm, Linear 4x, tanh-GELU, Linear), tied LM head, mean
cross-entropy, backward, global-norm clipping at 1.0, AdamW (betas 0.9/0.95,
decay 0.1 on matrices and embeddings only, the single-tensor CPU implementation,
as Strata's), and the loss averaged over ranks for logging.
"""
import argparse
import datetime
import json
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.attn_proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.fc = nn.Linear(d, 4 * d)
        self.mlp_proj = nn.Linear(4 * d, d)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        heads = lambda t: t.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        y = F.scaled_dot_product_attention(heads(q), heads(k), heads(v), is_causal=True)
        x = x + self.attn_proj(y.transpose(1, 2).contiguous().view(B, T, C))
        return x + self.mlp_proj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class Gpt(nn.Module):
    def __init__(self, vocab, seq, d, heads, layers):
        super().__init__()
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Embedding(seq, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d)
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, 0.0, 0.02)
            if isinstance(m, nn.Linear):
                nn.init.zeros_(m.bias)

    def forward(self, idx, targets):
        pos = torch.arange(idx.size(1), device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for b in self.blocks:
            x = b(x)
        logits = F.linear(self.ln_f(x), self.wte.weight)
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1))


def make_optimizer(model):
    decay = [p for p in model.parameters() if p.dim() >= 2]
    other = [p for p in model.parameters() if p.dim() < 2]
    return torch.optim.AdamW(
        [{"params": decay, "weight_decay": 0.1}, {"params": other, "weight_decay": 0.0}],
        lr=1e-4, betas=(0.9, 0.95), eps=1e-8, foreach=False)


def train(wrapped, model, vocab, batch, seq, steps, rank, before_step=None, record=None):
    """Strata's step on random tokens; rank 0 prints one JSON line per step (step,
    step_ms, loss, plus what record() adds). before_step() runs before the clock starts."""
    opt = make_optimizer(model)
    gen = torch.Generator().manual_seed(1000 + rank)
    for step in range(steps):
        if before_step:
            before_step()
        t0 = time.perf_counter()
        data = torch.randint(vocab, (batch, seq + 1), generator=gen)
        loss = wrapped(data[:, :-1], data[:, 1:])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, foreach=False)
        opt.step()
        opt.zero_grad()
        mean = torch.tensor([loss.item()], dtype=torch.float64)
        dist.all_reduce(mean)
        ms = (time.perf_counter() - t0) * 1000
        if rank == 0:
            rec = {"step": step + 1, "step_ms": ms, "loss": mean.item() / dist.get_world_size()}
            rec.update(record() if record else {})
            print(json.dumps(rec), flush=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--vocab", type=int, default=50257)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--d", type=int, default=768)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--batch", type=int, default=1, help="per rank")
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--bucket-cap-mb", type=float, default=25)
    p.add_argument("--grad-as-bucket-view", action="store_true")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
    rank = dist.get_rank()
    torch.manual_seed(1337)
    model = Gpt(a.vocab, a.seq, a.d, a.heads, a.layers)
    ddp = DDP(model, bucket_cap_mb=a.bucket_cap_mb, gradient_as_bucket_view=a.grad_as_bucket_view)
    train(ddp, model, a.vocab, a.batch, a.seq, a.steps, rank)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
