"""PyTorch's side of bench/checkpoint: torch.distributed.checkpoint's save and
async_save of the same state Strata saves for gpt2-124m (the model from
bench/ddp/torch_ddp.py, AdamW's moments after one step), one process on Gloo.
Prints one JSON line per save: {"mode": "sync"|"async", "stall_ms", "total_ms", "bytes"}.
"""
import argparse
import json
import os
import shutil
import sys
import tempfile
import time

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "ddp"))
from torch_ddp import Gpt  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--seq", type=int, default=64)
    p.add_argument("--saves", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--dir", default=tempfile.gettempdir())
    a, _ = p.parse_known_args()  # the driver's shared --batch/--steps are not used
    torch.set_num_threads(a.threads)
    dist.init_process_group("gloo")
    model = Gpt(50304, a.seq, 768, 12, 12)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=False)
    # One step on zero gradients: AdamW's moments exist, as in a checkpoint mid-run.
    for prm in model.parameters():
        prm.grad = torch.zeros_like(prm)
    opt.step()
    state = {"model": model.state_dict(), "optim": opt.state_dict()}
    nbytes = sum(t.numel() * t.element_size() for t in model.state_dict().values())
    nbytes += sum(t.numel() * t.element_size() for s in opt.state_dict()["state"].values()
                  for t in s.values() if torch.is_tensor(t))
    root = tempfile.mkdtemp(prefix="strata-bench-dcp-", dir=a.dir)
    try:
        for mode in ("sync", "async"):
            for i in range(a.saves):
                path = os.path.join(root, f"{mode}-{i}")
                t0 = time.perf_counter()
                if mode == "sync":
                    dcp.save(state, checkpoint_id=path)
                    stall = total = time.perf_counter() - t0
                else:
                    fut = dcp.async_save(state, checkpoint_id=path)
                    stall = time.perf_counter() - t0
                    fut.result()
                    total = time.perf_counter() - t0
                print(json.dumps({"mode": mode, "stall_ms": stall * 1e3, "total_ms": total * 1e3,
                                  "bytes": nbytes}), flush=True)
                shutil.rmtree(path, ignore_errors=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
