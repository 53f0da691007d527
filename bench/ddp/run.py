"""bench/ddp: Strata DDP against PyTorch DDP, side by side in one invocation.

Both train the same gpt2-124m-shaped GPT (12 layers, d=768, 12 heads, vocabulary
50257, tied head) on random tokens, at the same world size on this machine, with
Gloo on loopback and the same intra-op threads per rank; runs alternate between the
two, several repeats. Prints tokens/s for each (median step time over the steps
after the warm-up), their ratio, and for Strata the fraction of all-reduce time
hidden behind backward (from its metrics).

  ~/.cache/strata/venv/bin/python bench/ddp/run.py [--repeats 3] [--seq 128] ...

Not a test: numbers depend on the machine. Strata runs from build/strata.
"""
import argparse
import os
import statistics
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "bench"))
from common import add_run_args, strata_train_records, torch_peer_lines  # noqa: E402


def run_strata(a, run_dir):
    recs = strata_train_records(a, run_dir, [f"--training.batch_size={a.batch * a.world}",
                                             f"--parallel.bucket_cap_mb={a.bucket_cap_mb}"]
                                + a.strata_arg)
    return ([r["step_ms"] for r in recs], [r["ddp"]["hidden_fraction"] for r in recs],
            [r["ddp"]["comm_ms"] for r in recs])


def run_torch(a, extra):
    recs = torch_peer_lines(a, os.path.join(ROOT, "bench", "ddp", "torch_ddp.py"),
                            ["--bucket-cap-mb", str(a.bucket_cap_mb)] + extra)
    return [r["step_ms"] for r in recs[a.warmup:]]


def main():
    p = argparse.ArgumentParser()
    add_run_args(p, ROOT, steps=8, warmup=3, repeats=3)
    p.add_argument("--bucket-cap-mb", type=float, default=25)
    p.add_argument("--no-view-variant", action="store_true",
                   help="skip PyTorch with gradient_as_bucket_view=True")
    p.add_argument("--strata-arg", action="append", default=[],
                   help="extra flag for strata train (repeatable)")
    a = p.parse_args()
    tokens = a.batch * a.world * a.seq
    variants = [("pytorch", [])] + ([] if a.no_view_variant else
                                    [("pytorch-view", ["--grad-as-bucket-view"])])
    res = {"strata": [], "hidden": [], "comm": []}
    for name, _ in variants:
        res[name] = []
    print(f"bench/ddp: gpt2-124m shapes, seq {a.seq}, {a.batch} per rank, world {a.world}, "
          f"{a.threads} thread(s) per rank, Gloo, {a.steps} steps ({a.warmup} warm-up), "
          f"{a.repeats} repeats", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        for rep in range(a.repeats):
            order = ["strata"] + [v[0] for v in variants]
            if rep % 2:
                order.reverse()
            for who in order:
                if who == "strata":
                    ms, hid, comm = run_strata(a, os.path.join(tmp, f"s{rep}"))
                    res["strata"] += ms
                    res["hidden"] += hid
                    res["comm"] += comm
                else:
                    res[who] += run_torch(a, dict(variants)[who])
                print(f"  repeat {rep + 1}: {who:13s} median step "
                      f"{statistics.median(res[who][-(a.steps - a.warmup):]):8.1f} ms", flush=True)
    med = {k: statistics.median(v) for k, v in res.items() if v}
    tps = {k: tokens / (med[k] / 1000) for k in ["strata"] + [v[0] for v in variants]}
    print()
    print(f"{'':14s} {'median step ms':>15s} {'tokens/s':>10s} {'strata / this':>14s}")
    for k in tps:
        print(f"{k:14s} {med[k]:15.1f} {tps[k]:10.1f} {tps['strata'] / tps[k]:14.3f}")
    print(f"strata: all-reduce busy {statistics.mean(res['comm']):.1f} ms per step, "
          f"{100 * statistics.mean(res['hidden']):.1f}% of it hidden behind backward")
    print(f"RESULT strata_vs_pytorch_ddp={tps['strata'] / tps['pytorch']:.3f}")


if __name__ == "__main__":
    main()
