"""Helpers shared by the benchmark drivers (bench/*/run.py and their PyTorch sides)."""
import socket


def free_port():
    """A free TCP port on the loopback address."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss(key):
    """A field of /proc/self/status in bytes (VmRSS, VmHWM), or -1."""
    for line in open("/proc/self/status"):
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
    return -1


def reset_rss_peak():
    """Restarts VmHWM at the current RSS (Linux)."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def add_run_args(p, root, steps, warmup, repeats):
    """The arguments every side-by-side driver takes (binary, world, threads, shapes,
    steps and repeats)."""
    import os
    p.add_argument("--strata", default=os.path.join(root, "build", "strata"))
    p.add_argument("--world", type=int, default=2)
    p.add_argument("--threads", type=int, default=1, help="intra-op threads per rank")
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--batch", type=int, default=1, help="sequences per rank per step")
    p.add_argument("--steps", type=int, default=steps)
    p.add_argument("--warmup", type=int, default=warmup, help="first steps not timed")
    p.add_argument("--repeats", type=int, default=repeats)


def strata_train_records(a, run_dir, flags):
    """Runs `strata train` on the gpt2-124m shapes with synthetic data, a.world ranks
    and the drivers' shared timing settings plus flags; returns the metrics records
    after the warm-up steps."""
    import json
    import os
    import subprocess
    cmd = [a.strata, "train", "--model.flavour=gpt2-124m", "--data.source=synthetic",
           f"--model.seq_len={a.seq}", "--nproc", str(a.world), f"--training.threads={a.threads}",
           f"--training.steps={a.steps}", "--training.eval_interval=0", "--training.lr=1e-4",
           "--training.warmup_steps=1", "--training.deterministic=false",
           "--checkpoint.save_final=false", f"--logging.run_dir={run_dir}",
           "--logging.progress=off"] + flags
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    return [json.loads(l) for l in open(os.path.join(run_dir, "metrics.jsonl"))][a.warmup:]


def torch_peer_lines(a, script, extra):
    """Runs a PyTorch peer script under torch.distributed.run on the loopback address
    with a.world ranks and the shared shape arguments plus extra; returns the JSON
    lines rank 0 printed."""
    import json
    import os
    import subprocess
    import sys
    env = dict(os.environ, OMP_NUM_THREADS=str(a.threads), MASTER_ADDR="127.0.0.1")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(a.world),
           "--master_addr", "127.0.0.1", "--master_port", str(free_port()), script,
           "--seq", str(a.seq), "--batch", str(a.batch), "--steps", str(a.steps),
           "--threads", str(a.threads)] + extra
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env,
                         cwd="/").stdout
    return [json.loads(l) for l in out.splitlines() if l.startswith("{")]


def torch_peer_rss_run(a, script, extra):
    """torch_peer_lines' step times after the warm-up, the highest step's peak RSS and
    the RSS before the model was built."""
    lines = torch_peer_lines(a, script, extra)
    base = next(l["rss_base"] for l in lines if "rss_base" in l)
    recs = [l for l in lines if "step" in l][a.warmup:]
    return {"ms": [r["step_ms"] for r in recs], "peak": max(r["rss_peak"] for r in recs),
            "base": base}
