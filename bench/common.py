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
