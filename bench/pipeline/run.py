"""bench/pipeline: Strata's pipeline parallelism against torch.distributed.pipelining,
side by side in one invocation, plus the bubble table and the balance check.

1. Schedules. Both train the same gpt2-124m-shaped GPT (12 layers, d=768, 12 heads,
   untied head, vocabulary 50257 padded to 50304) on random tokens, pp = 2 over Gloo on
   loopback, m = 8 micro-batches of one sequence per step, the same intra-op threads
   per rank, the blocks split evenly, runs alternating:
     strata gpipe / 1f1b / interleaved (v=2) / zb-h1 (v=1, split backward)
     pytorch ScheduleGPipe / Schedule1F1B / ScheduleInterleaved1F1B (v=2) /
             ScheduleInterleavedZeroBubble (v=2: PyTorch's zero-bubble schedules need
             two stages per rank) from torch_pp.py.
   For each: the median step time after the warm-up and rank 0's (stage 0's) peak RSS
   during a step (VmHWM reset at each step's start), also less the RSS before the model.
2. Bubble. For Strata's runs: the measured bubble (metrics' pp.bubble, the median over
   the timed steps), the theory's with unit costs (F 1, B 2 = I 1 + W 1), and the step
   the schedule simulation predicts from each step's measured action durations
   (pp.predicted_ms; `strata schedule --costs trace.json` for the traced step) against
   that step's measured span (the longest stage's), median over the timed steps.
3. Balance. A GPT with a heavy head (gpt2-124m shapes, 4 blocks, vocabulary 50257,
   tied) at pp = 2: parallel.pp_partition auto against uniform, median step time.

  ~/.cache/strata/venv/bin/python bench/pipeline/run.py [--repeats 1] [--seq 128] ...

Not a test: numbers depend on the machine. Strata runs from build/strata.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "bench"))
from common import add_run_args, torch_peer_rss_run  # noqa: E402
MiB = 1024.0 * 1024.0
SCHEDULES = [("gpipe", "gpipe", 1), ("1f1b", "1f1b", 1), ("interleaved", "interleaved", 2),
             ("zb-h1", "zb", 1)]
THEORY = {"gpipe": lambda p, m, v: (p - 1) / (m + p - 1),
          "1f1b": lambda p, m, v: (p - 1) / (m + p - 1),
          "interleaved": lambda p, m, v: (p - 1) / (v * m + p - 1),
          "zb-h1": lambda p, m, v: (p - 1) / (3 * m + p - 1)}


def strata_run(a, run_dir, flags):
    """`strata train` on the gpt2-124m shapes with synthetic data at pp = a.world;
    returns (the records after the warm-up, the log)."""
    cmd = [a.strata, "train", "--model.flavour=gpt2-124m", "--data.source=synthetic",
           f"--model.seq_len={a.seq}", "--nproc", str(a.world), f"--training.threads={a.threads}",
           f"--training.steps={a.steps}", "--training.eval_interval=0", "--training.lr=1e-4",
           "--training.warmup_steps=1", "--training.deterministic=false",
           "--checkpoint.save_final=false", f"--logging.run_dir={run_dir}",
           "--logging.progress=off", f"--parallel.pp={a.world}",
           f"--training.batch_size={a.micro}", "--training.micro_batch_size=1",
           f"--logging.trace_step={a.steps}"] + flags
    out = subprocess.run(cmd, check=True, capture_output=True, text=True)
    recs = [json.loads(l) for l in open(os.path.join(run_dir, "metrics.jsonl"))]
    return recs[a.warmup:], out.stdout + out.stderr


def predicted_step_ms(a, schedule, v, trace):
    out = subprocess.run([a.strata, "schedule", "--pp", str(a.world), "--microbatches",
                          str(a.micro), "--schedule", schedule, "--virtual", str(v),
                          "--costs", trace], check=True, capture_output=True, text=True).stdout
    return float(re.search(r"predicted step ([0-9.]+) ms", out).group(1))


def main():
    p = argparse.ArgumentParser()
    add_run_args(p, ROOT, steps=4, warmup=1, repeats=1)
    p.add_argument("--micro", type=int, default=8, help="micro-batches per step")
    p.add_argument("--parts", default="schedules,balance",
                   help="which parts to run: schedules (1 and 2), balance (3)")
    a = p.parse_args()
    print(f"bench/pipeline: gpt2-124m shapes (untied head), seq {a.seq}, pp {a.world}, "
          f"{a.micro} micro-batches of 1 sequence, {a.threads} thread(s) per rank, Gloo, "
          f"{a.steps} steps ({a.warmup} warm-up), {a.repeats} repeat(s)", flush=True)
    res, bubbles, predictions = {}, {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        for rep in range(a.repeats if "schedules" in a.parts else 0):
            order = SCHEDULES if rep % 2 == 0 else list(reversed(SCHEDULES))
            for mine, theirs, v in order:
                for side in ("strata", "pytorch") if rep % 2 == 0 else ("pytorch", "strata"):
                    if side == "strata":
                        run_dir = os.path.join(tmp, f"{mine}-{rep}")
                        recs, _ = strata_run(a, run_dir, [
                            "--model.tied_embedding=false", "--parallel.pp_partition=uniform",
                            f"--parallel.pp_schedule={mine}", f"--parallel.pp_virtual={v}"])
                        r = {"ms": [x["step_ms"] for x in recs],
                             "peak": max(x["rss"]["peak"] for x in recs),
                             "base": recs[0]["rss"]["base"]}
                        bubbles.setdefault(mine, []).extend(x["pp"]["bubble"] for x in recs)
                        predictions.setdefault(mine, []).extend(
                            (x["pp"]["predicted_ms"], max(x["pp"]["span_ms"])) for x in recs)
                        if rep == 0:  # the CLI's prediction from trace.json agrees
                            traced = recs[-1]  # logging.trace_step is the last step
                            print(f"    strata schedule --costs trace.json: "
                                  f"{predicted_step_ms(a, mine, v, os.path.join(run_dir, 'trace.json')):.1f}"
                                  f" ms predicted, {max(traced['pp']['span_ms']):.1f} ms measured",
                                  flush=True)
                        name = f"strata {mine}"
                    else:
                        r = torch_peer_rss_run(a, os.path.join(ROOT, "bench", "pipeline",
                                                               "torch_pp.py"),
                                               ["--schedule", theirs, "--micro", str(a.micro)])
                        name = f"pytorch {theirs}"
                    res.setdefault(name, []).append(r)
                    print(f"  repeat {rep + 1}: {name:20s} median step "
                          f"{statistics.median(r['ms']):9.1f} ms  peak RSS "
                          f"{r['peak'] / MiB:7.1f} MiB", flush=True)

        if "schedules" in a.parts:
            print()
            print(f"{'':21s} {'step ms':>9s} {'peak RSS MiB':>13s} {'above base MiB':>15s}")
            summary = {}
            for n, runs in res.items():
                summary[n] = {"ms": statistics.median([m for r in runs for m in r["ms"]]),
                              "peak": max(r["peak"] for r in runs),
                              "train": max(r["peak"] - r["base"] for r in runs)}
                s = summary[n]
                print(f"{n:21s} {s['ms']:9.1f} {s['peak'] / MiB:13.1f} {s['train'] / MiB:15.1f}")
            print()
            for mine, theirs, _ in SCHEDULES:
                s, t = summary[f"strata {mine}"], summary[f"pytorch {theirs}"]
                print(f"strata {mine} / pytorch {theirs}: step time {s['ms'] / t['ms']:.3f}, peak RSS "
                      f"{s['peak'] / t['peak']:.3f}, peak above base {s['train'] / t['train']:.3f}")
                print(f"RESULT {mine}_vs_pipelining time={s['ms'] / t['ms']:.3f} "
                      f"peak_rss={s['peak'] / t['peak']:.3f} "
                      f"peak_above_base={s['train'] / t['train']:.3f}")

            print()
            print(f"bubble at p={a.world}, m={a.micro} (Strata, measured over the timed steps)")
            print(f"{'':12s} {'measured':>9s} {'theory':>8s} {'predicted ms':>13s} "
                  f"{'measured ms':>12s} {'error':>7s}")
            for mine, _, v in SCHEDULES:
                pred = statistics.median(x[0] for x in predictions[mine])
                meas = statistics.median(x[1] for x in predictions[mine])
                print(f"{mine:12s} {statistics.median(bubbles[mine]) * 100:8.1f}% "
                      f"{THEORY[mine](a.world, a.micro, v) * 100:7.1f}% {pred:13.1f} {meas:12.1f} "
                      f"{(pred - meas) / meas * 100:+6.1f}%")
                print(f"RESULT bubble_{mine} measured={statistics.median(bubbles[mine]):.4f} "
                      f"theory={THEORY[mine](a.world, a.micro, v):.4f} "
                      f"prediction_error={(pred - meas) / meas:+.4f}")

        if "balance" not in a.parts:
            return
        print()
        print("balance: gpt2-124m shapes with 4 blocks (vocabulary 50257, tied), pp "
              f"{a.world}, 1f1b, runs alternating")
        ms, split = {"auto": [], "uniform": []}, {}
        for rep in range(a.repeats):
            for how in ("auto", "uniform") if rep % 2 == 0 else ("uniform", "auto"):
                recs, log = strata_run(a, os.path.join(tmp, f"balance-{how}-{rep}"), [
                    "--model.n_layer=4", f"--parallel.pp_partition={how}"])
                ms[how] += [x["step_ms"] for x in recs]
                split[how] = re.search(r"pipeline partition: ([0-9,]+) blocks", log).group(1)
        for how in ("auto", "uniform"):
            print(f"  {how:8s} partition {split[how]:8s} median step "
                  f"{statistics.median(ms[how]):9.1f} ms")
            print(f"RESULT balance_{how} partition={split[how]} "
                  f"step_ms={statistics.median(ms[how]):.1f}")
        ratio = statistics.median(ms["auto"]) / statistics.median(ms["uniform"])
        print(f"auto / uniform step time {ratio:.3f}")


if __name__ == "__main__":
    main()
