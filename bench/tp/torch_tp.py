"""PyTorch's side of bench/tp: the GPT of bench/ddp/torch_ddp.py (gpt2-124m shapes,
untied head, vocabulary padded to 50304 as Strata pads it) under DTensor tensor
parallelism with torchtitan's plan, over Gloo:
  - token embedding RowwiseParallel (vocabulary rows split), head ColwiseParallel
    with loss_parallel (the logits stay split over the vocabulary);
  - per block: q, k, v and fc ColwiseParallel, the attention output and MLP output
    RowwiseParallel; with --sp the layer norms SequenceParallel, the attention and
    MLP inputs gathered by PrepareModuleInput, the row-parallel outputs Shard(1).
Separate q, k, v linears (torchtitan's wq/wk/wv; a fused colwise qkv would split
across q, k and v). The learned positions are a plain parameter: under --sp each
rank adds its positions and their gradient is all-reduced over tp. Clipping counts
each parameter once (split gradients summed over tp, replicated ones once), as
Strata's. Started by run.py through torch.distributed.run; rank 0 prints one JSON
line per step with the step time and the peak RSS during the step (VmHWM).
"""
import argparse
import datetime
import json
import math
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Replicate, Shard
from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput,
                                               RowwiseParallel, SequenceParallel,
                                               loss_parallel, parallelize_module)

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.join(HERE, ".."), os.path.join(HERE, "..", "ddp")]
from common import reset_rss_peak, rss  # noqa: E402
from torch_ddp import make_optimizer  # noqa: E402


class Attention(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads, self.dim = heads, d // heads
        self.wq, self.wk, self.wv = nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d)
        self.wo = nn.Linear(d, d)

    def forward(self, x):
        B, T = x.shape[0], x.shape[1]
        heads = lambda t: t.view(B, T, -1, self.dim).transpose(1, 2)  # this rank's heads
        y = F.scaled_dot_product_attention(heads(self.wq(x)), heads(self.wk(x)),
                                           heads(self.wv(x)), is_causal=True)
        return self.wo(y.transpose(1, 2).reshape(B, T, -1))


class Mlp(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.fc, self.proj = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x):
        return self.proj(F.gelu(self.fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.ln1, self.attn = nn.LayerNorm(d), Attention(d, heads)
        self.ln2, self.mlp = nn.LayerNorm(d), Mlp(d)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class Gpt(nn.Module):
    def __init__(self, vocab, seq, d, heads, layers):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, d), nn.Embedding(seq, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d)
        self.lm_head = nn.Linear(d, vocab, bias=False)
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, 0.0, 0.02)
            if isinstance(m, nn.Linear) and m.bias is not None:
                nn.init.zeros_(m.bias)

    def forward(self, idx, positions):
        x = self.wte(idx) + self.wpe(positions)
        for b in self.blocks:
            x = b(x)
        return self.lm_head(self.ln_f(x))


def parallelize(model, mesh, sp):
    shard = Shard(1) if sp else Replicate()
    parallelize_module(model, mesh, {
        "wte": RowwiseParallel(input_layouts=Replicate(), output_layouts=shard),
        "lm_head": ColwiseParallel(input_layouts=shard, output_layouts=Shard(-1),
                                   use_local_output=False),
        **({"ln_f": SequenceParallel()} if sp else {}),
    })
    for b in model.blocks:
        plan = {"attn.wq": ColwiseParallel(), "attn.wk": ColwiseParallel(),
                "attn.wv": ColwiseParallel(), "attn.wo": RowwiseParallel(output_layouts=shard),
                "mlp.fc": ColwiseParallel(), "mlp.proj": RowwiseParallel(output_layouts=shard)}
        if sp:
            gather = PrepareModuleInput(input_layouts=(Shard(1),),
                                        desired_input_layouts=(Replicate(),))
            plan.update({"ln1": SequenceParallel(), "ln2": SequenceParallel(),
                         "attn": gather, "mlp": gather})
        parallelize_module(b, mesh, plan)


def clip_(params, group, max_norm=1.0):
    split, whole = 0.0, 0.0
    for p in params:
        g = p.grad
        if isinstance(g, DTensor):
            sq = g.to_local().float().pow(2).sum().item()
            if any(isinstance(pl, Shard) for pl in g.placements):
                split += sq
            else:
                whole += sq
        else:
            whole += g.float().pow(2).sum().item()
    t = torch.tensor([split], dtype=torch.float64)
    dist.all_reduce(t, group=group)
    norm = math.sqrt(t.item() + whole)
    coef = max_norm / (norm + 1e-6)
    if coef < 1:
        for p in params:
            (p.grad.to_local() if isinstance(p.grad, DTensor) else p.grad).mul_(coef)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--vocab", type=int, default=50304)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--sp", action="store_true")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
    rank, world = dist.get_rank(), dist.get_world_size()
    base = rss("VmRSS")
    torch.manual_seed(1337)
    model = Gpt(a.vocab, a.seq, 768, 12, a.layers)
    mesh = init_device_mesh("cpu", (world,))
    parallelize(model, mesh, a.sp)
    params = list(model.parameters())
    opt = make_optimizer(model)
    if rank == 0:
        print(json.dumps({"rss_base": base}), flush=True)
    chunk = a.seq // world
    positions = torch.arange(rank * chunk, (rank + 1) * chunk) if a.sp else torch.arange(a.seq)
    gen = torch.Generator().manual_seed(1000)  # the same batch on every tp rank
    for step in range(a.steps):
        reset_rss_peak()
        t0 = time.perf_counter()
        data = torch.randint(a.vocab - 47, (a.batch, a.seq + 1), generator=gen)
        logits = model(data[:, :-1], positions)
        with loss_parallel():
            loss = F.cross_entropy(logits.flatten(0, 1), data[:, 1:].flatten())
            loss.backward()
        if a.sp:  # each rank's positions only: sum the position gradient over tp
            dist.all_reduce(model.wpe.weight.grad)
        clip_(params, dist.group.WORLD)
        opt.step()
        opt.zero_grad()
        value = loss.full_tensor().item() if isinstance(loss, DTensor) else loss.item()
        ms = (time.perf_counter() - t0) * 1000
        if rank == 0:
            print(json.dumps({"step": step + 1, "step_ms": ms, "loss": value,
                              "rss_peak": rss("VmHWM")}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
