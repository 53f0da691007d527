"""PyTorch's side of bench/pipeline: bench/ddp/torch_ddp.py's blocks (gpt2-124m shapes,
untied head, vocabulary padded to 50304 as Strata pads it) cut by hand into
torch.distributed.pipelining PipelineStages and run by one of its schedules over Gloo:
  - gpipe, 1f1b: one stage per rank (blocks split evenly; the first stage also embeds,
    the last also applies ln_f, the head and the loss);
  - interleaved, zb: two stages per rank (stage r and r + world), under
    ScheduleInterleaved1F1B and ScheduleInterleavedZeroBubble.
The step is the schedule's step over --micro micro-batches of one sequence each, then
clipping at 1.0 (the norm summed over the ranks, as Strata's) and AdamW. Started by
run.py through torch.distributed.run; rank 0 (the first stage) prints one JSON line per
step with the step time and the peak RSS during the step (VmHWM).
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
from torch.distributed.pipelining import (PipelineStage, Schedule1F1B, ScheduleGPipe,
                                          ScheduleInterleaved1F1B,
                                          ScheduleInterleavedZeroBubble)

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.join(HERE, ".."), os.path.join(HERE, "..", "ddp")]
from common import reset_rss_peak, rss  # noqa: E402
from torch_ddp import Block, make_optimizer  # noqa: E402


class Stage(nn.Module):
    """Blocks [begin, end) of the model, with the embeddings when first and the final
    norm and head when last."""

    def __init__(self, a, begin, end, first, last):
        super().__init__()
        d = 768
        self.first, self.last = first, last
        if first:
            self.wte, self.wpe = nn.Embedding(a.vocab, d), nn.Embedding(a.seq, d)
        self.blocks = nn.ModuleList(Block(d, 12) for _ in range(end - begin))
        if last:
            self.ln_f, self.lm_head = nn.LayerNorm(d), nn.Linear(d, a.vocab, bias=False)
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, 0.0, 0.02)
            if isinstance(m, nn.Linear) and m.bias is not None:
                nn.init.zeros_(m.bias)

    def forward(self, x):
        if self.first:
            x = self.wte(x) + self.wpe(torch.arange(x.shape[1]))
        for b in self.blocks:
            x = b(x)
        return self.lm_head(self.ln_f(x)) if self.last else x


def loss_fn(logits, target):
    return F.cross_entropy(logits.flatten(0, 1), target.flatten())


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--vocab", type=int, default=50304)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--batch", type=int, default=1, help="sequences per micro-batch")
    p.add_argument("--micro", type=int, default=8, help="micro-batches per step")
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--schedule", default="1f1b", choices=["gpipe", "1f1b", "interleaved", "zb"])
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=300))
    rank, world = dist.get_rank(), dist.get_world_size()
    base = rss("VmRSS")
    torch.manual_seed(1337 + rank)
    v = 2 if a.schedule in ("interleaved", "zb") else 1
    n = world * v
    per = a.layers // n
    stages, modules = [], []
    for c in range(v):
        i = c * world + rank
        m = Stage(a, i * per, (i + 1) * per, i == 0, i == n - 1)
        modules.append(m)
        stages.append(PipelineStage(m, i, n, torch.device("cpu")))
    kind = {"gpipe": ScheduleGPipe, "1f1b": Schedule1F1B, "interleaved": ScheduleInterleaved1F1B,
            "zb": ScheduleInterleavedZeroBubble}[a.schedule]
    schedule = kind(stages if v > 1 else stages[0], a.micro, loss_fn=loss_fn)
    params = [q for m in modules for q in m.parameters()]
    opts = [make_optimizer(m) for m in modules]
    if rank == 0:
        print(json.dumps({"rss_base": base}), flush=True)
    gen = torch.Generator().manual_seed(1000)  # the same batch on every rank
    holds_first = any(m.first for m in modules)
    holds_last = any(m.last for m in modules)
    for step in range(a.steps):
        reset_rss_peak()
        t0 = time.perf_counter()
        data = torch.randint(a.vocab - 47, (a.batch * a.micro, a.seq + 1), generator=gen)
        losses = []
        args = (data[:, :-1],) if holds_first else ()
        kwargs = {"target": data[:, 1:], "losses": losses} if holds_last else {}
        schedule.step(*args, **kwargs)
        # Clipping at 1.0 with the norm over every stage, as Strata's.
        sq = torch.tensor([sum(q.grad.float().pow(2).sum().item() for q in params
                               if q.grad is not None)], dtype=torch.float64)
        dist.all_reduce(sq)
        coef = 1.0 / (math.sqrt(sq.item()) + 1e-6)
        if coef < 1:
            for q in params:
                if q.grad is not None:
                    q.grad.mul_(coef)
        for o in opts:
            o.step()
            o.zero_grad()
        ms = (time.perf_counter() - t0) * 1000
        if rank == 0:
            print(json.dumps({"step": step + 1, "step_ms": ms, "rss_peak": rss("VmHWM")}),
                  flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
