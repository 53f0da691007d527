"""PyTorch's side of bench/zero: the GPT of bench/ddp/torch_ddp.py (the shapes and
training step of `strata train --model.flavour=gpt2-124m`) sharded with FSDP2
(`torch.distributed.fsdp.fully_shard`: each block, then the root) over Gloo, or
with --ddp under DistributedDataParallel. Started by run.py through
torch.distributed.run; rank 0 prints one JSON line per step with the step time and
the process's peak RSS during the step (VmHWM, reset through /proc/self/clear_refs
at the step's start), and a first line with the RSS before the model was built.
"""
import argparse
import datetime
import json
import os
import sys

import torch
import torch.distributed as dist

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.join(HERE, ".."), os.path.join(HERE, "..", "ddp")]
from common import reset_rss_peak, rss  # noqa: E402
from torch_ddp import Gpt, train  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--vocab", type=int, default=50257)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--batch", type=int, default=1, help="per rank")
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--ddp", action="store_true")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
    rank, world = dist.get_rank(), dist.get_world_size()
    base = rss("VmRSS")
    torch.manual_seed(1337)
    model = Gpt(a.vocab, a.seq, 768, 12, a.layers)
    if a.ddp:
        from torch.nn.parallel import DistributedDataParallel as DDP
        wrapped = DDP(model)
    else:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard
        mesh = init_device_mesh("cpu", (world,))
        for b in model.blocks:
            fully_shard(b, mesh=mesh)
        fully_shard(model, mesh=mesh)
        wrapped = model
    if rank == 0:
        print(json.dumps({"rss_base": base}), flush=True)
    train(wrapped, model, a.vocab, a.batch, a.seq, a.steps, rank, before_step=reset_rss_peak,
          record=lambda: {"rss_peak": rss("VmHWM")})
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
