"""The estimator against measurement over layouts nobody chose: `strata plan` lists every
layout of a model and world that fits, a seeded sample of them (pipelines only with
--pipelines) is trained for 2 steps each, and `strata estimate --compare` sets rank 0's
and the highest rank's tracked peaks beside the estimate of the run's own config. Prints
each layout's two errors and their median, max and how many are within 3%."""
import argparse
import json
import os
import random
import statistics
import subprocess
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--strata", default=os.path.join(ROOT, "build", "strata"))
    p.add_argument("--nproc", type=int, default=4)
    p.add_argument("--flavour", default="debug")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--sample", type=int, default=30, help="layouts to run; 0: all")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--pipelines", action="store_true", help="only layouts with pp > 1")
    p.add_argument("--profile", default="", help="for plan (default: this machine's)")
    p.add_argument("--extra", default="", help="more --section.key=value for plan and train")
    a = p.parse_args()
    base = [f"--model.flavour={a.flavour}", "--data.source=synthetic",
            f"--training.batch_size={a.batch}"] + a.extra.split()
    plan = [a.strata, "plan", "--nproc", str(a.nproc), "--json", "--top", "1000000",
            "--no-measure"] + (["--profile", a.profile] if a.profile else []) + base
    rows = json.loads(subprocess.run(plan, capture_output=True, text=True, check=True).stdout)
    if a.pipelines:
        rows = [r for r in rows if "pp=1 " not in r["layout"]]
    random.seed(a.seed)
    chosen = rows if a.sample == 0 else random.sample(rows, min(a.sample, len(rows)))
    print(f"{a.flavour}, {a.nproc} ranks, batch {a.batch}: {len(rows)} layouts fit; "
          f"running {len(chosen)} for 2 steps each", flush=True)
    errors = []
    for r in chosen:
        with tempfile.TemporaryDirectory() as d:
            train = [a.strata, "train", "--nproc", str(a.nproc), "--training.steps=2",
                     "--training.eval_interval=0", "--checkpoint.save_final=false",
                     "--logging.progress=off", f"--logging.run_dir={d}"] + base + r["overrides"]
            t = subprocess.run(train, capture_output=True, text=True)
            if t.returncode != 0:
                print(f"  failed: {r['layout']}: {t.stderr.strip().splitlines()[-1:]}")
                continue
            out = subprocess.run([a.strata, "estimate", "--json", "--compare", d],
                                 capture_output=True, text=True, check=True).stdout
        c = json.loads(out)["compare"]
        highest = c.get("highest", {})
        e0, eh = c["error"], highest.get("error", c["error"])
        errors += [e0, eh]
        mark = "  <-- over 3%" if max(abs(e0), abs(eh)) > 0.03 else ""
        print(f"  {100 * e0:+6.1f}% rank 0, {100 * eh:+6.1f}% highest (rank "
              f"{highest.get('rank', 0)})  {r['layout']}{mark}", flush=True)
    if errors:
        mags = [abs(x) for x in errors]
        print(f"{len(errors)} figures: median |error| {100 * statistics.median(mags):.2f}%, max "
              f"{100 * max(mags):.2f}%, within 3%: {sum(x <= 0.03 for x in mags)}")


if __name__ == "__main__":
    main()
