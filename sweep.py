"""Run an ablation: every variant x setting x seed, plus an optional LR sweep; paired and resumable.

    python sweep.py configs/ablations/c8_unified.py              # run what is not finished yet
    python sweep.py configs/ablations/c8_unified.py --parallel=2 # two runs at a time (CPU: 1 thread each)
    python sweep.py configs/ablations/*.py --dry_run             # list the runs and their state
    python plot.py configs/ablations/c8_unified.py               # then: tables and figures

An ablation file (plain Python, configs/ablations/) sets
    claim           a line saying what is tested (names starting with _ are helpers)
    base            a train.py config file every run starts from
    variants        {name: {config overrides}}; the first is the baseline the others are compared to
    expected        {variant: "lower" or "higher"}: the claim's direction for its val loss vs the baseline
    settings        {name: {config overrides}}: optimizer/schedule settings, each a separate comparison
    seeds           every (variant, setting) runs with each seed
    lr_multipliers  optional LR sweep at seeds[0]: learning_rate, min_lr and muon_lr scaled together
Runs are paired: one seed gives every variant the same initial matrices and the
same batches (model.GPT.init_weights, train.get_batch), and validation is on
the same fixed batches for all. Each run lives in <out_root>/<variant>_<setting>_
s<seed>[_lrx<m>]_<hash>, the hash taken over its full config, so a run two
ablation files share (the baseline) runs once. A finished run is skipped; an
interrupted one resumes from its checkpoint.
"""

import argparse
import hashlib
import json
import os
import subprocess
import sys
import time

from train import DEFAULTS, UserError, load_config, read_log, run_config_file

HERE = os.path.dirname(os.path.abspath(__file__))
ABLATION_KEYS = {"claim", "base", "variants", "expected", "settings", "seeds", "lr_multipliers"}
OPTIONAL = {"lr_multipliers": [], "expected": {}}
LR_KEYS = ("learning_rate", "min_lr", "muon_lr")


def load_ablation(path):
    """The ablation file as a dict; UserError naming a missing, unknown or malformed entry."""
    if not os.path.isfile(path):
        raise UserError(f"ablation file {path!r} not found")
    spec = {k: v for k, v in run_config_file(path).items() if not k.startswith("_")}
    unknown = spec.keys() - ABLATION_KEYS
    missing = (ABLATION_KEYS - OPTIONAL.keys()) - spec.keys()
    if unknown or missing:
        raise UserError(f"{path}: unknown entries {sorted(unknown)}, missing {sorted(missing)}; "
                        f"an ablation file sets {sorted(ABLATION_KEYS)}")
    for key, default in OPTIONAL.items():
        spec.setdefault(key, default)
    for variant, direction in spec["expected"].items():
        if variant not in spec["variants"] or direction not in ("lower", "higher"):
            raise UserError(f"{path}: expected[{variant!r}] = {direction!r}: name a variant and 'lower' or 'higher'")
    spec["base"] = os.path.join(HERE, spec["base"]) if not os.path.isabs(spec["base"]) else spec["base"]
    for group in ("variants", "settings"):
        for name, overrides in spec[group].items():
            for key in overrides:
                if key not in DEFAULTS:
                    raise UserError(f"{path}: {group}[{name!r}] sets unknown config key {key!r}")
    spec["name"] = os.path.splitext(os.path.basename(path))[0]
    return spec


def plan(spec, out_root):
    """Every run of an ablation: list of dicts(variant, setting, seed, lr_mult, args, out_dir)."""
    runs = []
    for setting, s_over in spec["settings"].items():
        for variant, v_over in spec["variants"].items():
            jobs = [(seed, 1.0) for seed in spec["seeds"]]
            jobs += [(spec["seeds"][0], m) for m in spec["lr_multipliers"] if m != 1.0]
            for seed, mult in jobs:
                overrides = {**s_over, **v_over, "seed": seed}
                cfg, _ = load_config([spec["base"]] + [f"--{k}={v}" for k, v in overrides.items()])
                for key in LR_KEYS:
                    cfg[key] *= mult
                cfg.pop("out_dir")
                digest = hashlib.sha1(json.dumps(cfg, sort_keys=True).encode()).hexdigest()[:8]
                lr = f"_lrx{mult:g}" if mult != 1.0 else ""
                out_dir = os.path.join(out_root, f"{variant}_{setting}_s{seed}{lr}_{digest}")
                args = [f"--{k}={v}" for k, v in cfg.items() if v != DEFAULTS[k]] + [f"--out_dir={out_dir}"]
                runs.append(dict(variant=variant, setting=setting, seed=seed, lr_mult=mult,
                                 config=cfg, args=args, out_dir=out_dir))
    return runs


def state(run):
    """'done' (final eval logged), 'partial' (a checkpoint to resume) or 'new'."""
    log = os.path.join(run["out_dir"], "log.jsonl")
    if os.path.exists(log) and any(r["kind"] == "eval" and r["iter"] == run["config"]["max_iters"]
                                   for r in read_log(log)):
        return "done"
    return "partial" if os.path.exists(os.path.join(run["out_dir"], "ckpt.pt")) else "new"


def launch(run, threads, gpu):
    os.makedirs(run["out_dir"], exist_ok=True)
    resume = ["--init_from=resume"] if state(run) == "partial" else []
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    if gpu is not None:
        env["CUDA_VISIBLE_DEVICES"] = str(gpu)
    log = open(os.path.join(run["out_dir"], "train.log"), "a")
    proc = subprocess.Popen([sys.executable, os.path.join(HERE, "train.py"), *run["args"], *resume],
                            stdout=log, stderr=subprocess.STDOUT, env=env, cwd=HERE)
    return proc, log


def fmt_time(seconds):
    return f"{int(seconds // 3600)}h{int(seconds % 3600 // 60):02d}m"


def main(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("ablations", nargs="+", help="ablation files (configs/ablations/*.py)")
    p.add_argument("--out_root", default="runs")
    p.add_argument("--parallel", type=int, default=0, help="runs at a time (default: GPUs present, else 1)")
    p.add_argument("--threads", type=int, default=0, help="CPU threads per run (default: cores / parallel)")
    p.add_argument("--dry_run", action="store_true", help="list the runs and their state; run nothing")
    args = p.parse_args(argv)

    runs, seen = [], set()
    for path in args.ablations:
        for run in plan(load_ablation(path), args.out_root):
            if run["out_dir"] not in seen:  # a run shared by several ablations runs once
                seen.add(run["out_dir"])
                runs.append(run)
    todo = sorted((r for r in runs if state(r) != "done"), key=lambda r: r["lr_mult"] != 1.0)  # LR sweep last
    print(f"{len(runs)} runs, {len(runs) - len(todo)} finished, {len(todo)} to run")
    if args.dry_run:
        for r in runs:
            print(f"  {state(r):8s} {r['out_dir']}")
        return 0

    import torch  # only to count GPUs

    gpus = torch.cuda.device_count()
    parallel = args.parallel or max(1, gpus)
    threads = args.threads or max(1, (os.cpu_count() or 1) // parallel)
    free_gpus = list(range(gpus)) if gpus else []
    active, failed, durations, started = [], [], [], 0
    t0 = time.time()
    while todo or active:
        while todo and len(active) < parallel:
            run = todo.pop(0)
            gpu = free_gpus.pop(0) if free_gpus else None
            proc, log = launch(run, threads, gpu)
            started += 1
            active.append((run, proc, log, gpu, time.time()))
            eta = ""
            if durations:
                left = (len(todo) + len(active)) * (sum(durations) / len(durations)) / parallel
                eta = f", ETA {fmt_time(left)}"
            print(f"[{started}/{started + len(todo)}] {os.path.basename(run['out_dir'])}"
                  f"{' (resuming)' if '--init_from=resume' in proc.args else ''}{eta}", flush=True)
        time.sleep(1)
        for item in list(active):
            run, proc, log, gpu, t_start = item
            if proc.poll() is None:
                continue
            active.remove(item)
            log.close()
            if gpu is not None:
                free_gpus.append(gpu)
            if proc.returncode == 0:
                durations.append(time.time() - t_start)
            else:
                failed.append(run)
                print(f"FAILED {run['out_dir']} (exit {proc.returncode}); see its train.log", flush=True)
    print(f"done in {fmt_time(time.time() - t0)}; {len(failed)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(1)
