"""Run an ablation: every variant x setting x seed, paired, resumable, and recorded in results/.

    python -m research.sweep configs/ablations/c8_unified.py              # run what has no record yet
    python -m research.sweep configs/ablations/c8_unified.py --parallel=2 # two runs at a time (CPU: 1 thread each)
    python -m research.sweep configs/ablations/*.py --dry_run --parallel=2  # the runs, their state, the open ones' time
    python -m research.plot configs/ablations/c8_unified.py               # then: tables and figures from results/
    python -m research.sweep configs/ablations/c8_unified.py --slurm --partition=gpu --gpus_per_node=8  # as Slurm jobs
    python -m research.sweep configs/ablations/ladder.py --settings='*_tpp20' --dry_run  # some settings only
    python -m research.sweep configs/ablations/c8_d012.py --scale_down   # a GPU file, end to end on a CPU (~minutes)

The ablation file format and how runs are paired and named: ablation.py; their records: records.py.

SIGTERM or SIGINT (Ctrl-C) stops a sweep cleanly: it starts no more runs, passes a
SIGTERM to each running train.py (which finishes its step, saves its checkpoint and
exits), waits for them, and exits with 128 + the signal's number (143, 130). The
same command later resumes the stopped runs. (A second Ctrl-C at a terminal reaches
the runs too, and they quit at once, keeping their last checkpoints.)
"""

import os
import sys

if __package__ in (None, ""):  # run by its path (python research/sweep.py): its imports live at the repository root
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from plumbing import common  # noqa: E402 (from the repository root, the path above)

common.set_omp_env()  # before torch loads: idle OpenMP threads sleep instead of spinning

import argparse
import fnmatch
import signal
import statistics
import subprocess
import time

from research.ablation import load_ablation, plan, state, tuning_seeds, tuning_setting
from research.records import code_state, load_records, open_run_log, record, start_provenance
from plumbing.common import StopSignals, cli, fmt_duration
from configurator import UserError, folder_problem
from research import slurm
from plumbing.start import OutDirInUse, lock_out_dir

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the repository


# -----------------------------------------------------------------------------


SHAPE_KEYS = ("n_layer", "n_embd", "n_head", "block_size", "batch_size", "gradient_accumulation_steps",
              "compile", "device")


def estimate_open(runs, states, records):
    """(seconds, runs estimated, runs open): the open runs' iterations at the median wall time per
    iteration of recorded runs of the same shape (SHAPE_KEYS). A run waiting for its LR sweep
    counts with its 1x config, a partial run as a whole one. Wall times are as recorded: the
    pace of the parallelism and threads those runs had (a resumed run's covers its last part
    only, which makes the pace look faster)."""
    pace = {}
    for rec in records.values():
        if rec.get("wall_s"):
            shape = tuple(rec["config"].get(k) for k in SHAPE_KEYS)
            pace.setdefault(shape, []).append(rec["wall_s"] / max(1, rec["config"]["max_iters"]))
    total, known, n_open = 0.0, 0, 0
    for run, st in zip(runs, states):
        if st not in ("new", "partial", "waiting"):
            continue
        n_open += 1
        per_iter = pace.get(tuple(run["config"].get(k) for k in SHAPE_KEYS))
        if per_iter:
            total += statistics.median(per_iter) * run["config"]["max_iters"]
            known += 1
    return total, known, n_open


def launch(run, threads, gpu):
    """Start train.py on run (resuming it when it has a checkpoint); (process, its log file).
    Raises UserError, starting nothing, when a run resumes on code other than its start's."""
    os.makedirs(run["out_dir"], exist_ok=True)
    start_provenance(run, threads, gpu)
    resume = ["--init_from=resume"] if state(run) == "partial" else []
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    if gpu is not None:
        env["CUDA_VISIBLE_DEVICES"] = str(gpu)
    log = open_run_log(run)
    proc = subprocess.Popen([sys.executable, os.path.join(ROOT, "train.py"), *run["args"], *resume],
                            stdout=log, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
    return proc, log


def all_runs(specs, out_root, records, patterns=()):
    """The runs of several ablations, a run they share (same config hash) once. patterns (fnmatch,
    e.g. "*_tpp20"): only the settings they match, with the LR sweeps that choose those settings'
    LRs (ablation.tuning_setting), wherever those live."""
    runs, seen = [], set()
    for spec in specs:
        chosen = [s for s in spec["settings"] if not patterns or any(fnmatch.fnmatch(s, p) for p in patterns)]
        sweeps = {tuning_setting(spec, s) for s in chosen}
        for run in plan(spec, out_root, records):
            key = run["hash"] or run["name"]
            keep = run["setting"] in chosen or (run["setting"] in sweeps and run["seed"] in tuning_seeds(spec)
                                                and not run["main"])
            if keep and key not in seen:
                seen.add(key)
                runs.append({**run, "ablation": spec["name"]})
    return runs


def elsewhere(run, results):
    """Why another process has this run (a second sweep on the same file): its record appeared in
    results/, or another process holds its out_dir (start.lock_out_dir); None when neither."""
    if os.path.exists(os.path.join(results, run["name"] + ".json")):
        return "recorded by another process"
    if os.path.isdir(run["out_dir"]):
        try:
            lock_out_dir(run["out_dir"]).close()
        except OutDirInUse:
            return "trained by another process (its sweep records it)"
    return None


def run_queue(todo, parallel, threads, results, records, signals, skipped):
    """Train the runs of todo, `parallel` at a time; record each as it finishes. Returns the failed ones.

    Once `signals` (an common.StopSignals) has received a signal, starts no more runs,
    sends SIGTERM to the running ones (they save and exit) and waits for them."""
    import torch  # only to count GPUs

    gpus = torch.cuda.device_count()
    free_gpus = list(range(gpus)) if gpus else []
    active, failed, durations, started, passed_on = [], [], [], 0, False
    while todo or active:
        if signals.received and not passed_on:  # once: a second SIGTERM to train.py changes nothing
            passed_on = True
            todo.clear()
            for _, proc, *_ in active:
                proc.send_signal(signal.SIGTERM)
        while todo and len(active) < parallel:
            run = todo.pop(0)
            other = elsewhere(run, results)
            if other:
                print(f"skipped {run['name']}: {other}", flush=True)
                skipped.add(run["name"])
                continue
            gpu = free_gpus.pop(0) if free_gpus else None
            try:
                proc, log = launch(run, threads, gpu)
            except UserError as e:
                failed.append(run)
                print(f"FAILED {run['name']}: {e}", flush=True)
                if gpu is not None:
                    free_gpus.append(gpu)
                continue
            started += 1
            active.append((run, proc, log, gpu, time.time()))
            eta = ""
            if durations:
                left = (len(todo) + len(active)) * (sum(durations) / len(durations)) / parallel
                eta = f", ETA {fmt_duration(left)}"
            print(f"[{started}/{started + len(todo)}] {run['name']}"
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
            if proc.returncode == 0 and state(run) == "done":
                durations.append(time.time() - t_start)
                try:  # a log another process wrote into too is refused: the run fails, the sweep goes on
                    print(f"recorded {record(run, results, records, time.time() - t_start, threads)}", flush=True)
                except UserError as e:
                    failed.append(run)
                    print(f"FAILED {run['name']}: {e}", flush=True)
            elif signals.received:
                print(f"stopped {run['name']} (exit {proc.returncode}): the sweep resumes it from its last "
                      f"checkpoint", flush=True)
            elif elsewhere(run, results):  # another sweep took it in between: its run, not a failure
                print(f"skipped {run['name']}: {elsewhere(run, results)}", flush=True)
                skipped.add(run["name"])
            else:
                failed.append(run)
                print(f"FAILED {run['out_dir']} (exit {proc.returncode}); see its train.log", flush=True)
    return failed


def record_finished(runs, states, results, records):
    """Record each run that finished without a record (its job or sweep died before recording it, or
    it ran before records existed) from its own log, as its sweep would have; updates records.
    Returns the runs refused (records.record: a log not one run's, a run not the planned one)."""
    refused = []
    for r, s in zip(runs, states):
        if s == "done":
            try:
                print(f"recorded {record(r, results, records)} (from an existing log)")
            except UserError as e:
                refused.append(r)
                print(f"FAILED {r['name']}: {e}", flush=True)
    return refused


def submit_jobs(runs, states, args):
    """--slurm: each open run as a job (research/slurm.py); with --dry_run, each job's sbatch script
    and the command its nodes run, nothing submitted. Runs waiting for their LR sweep are submitted
    by a later call, once the sweep's records exist."""
    ready = [r for r, s in zip(runs, states) if s in ("new", "partial")]
    waiting = sum(s == "waiting" for s in states)
    threads = max(1, args.cpus_per_task // max(1, args.gpus_per_node))
    if args.status:
        return 1 if slurm.status(runs, states, os.path.join(args.out_root, "slurm")) else 0
    if args.dry_run:
        for run in ready:
            job = slurm.TrainJob(run, args.results, args.gpus_per_node, args.nodes, threads, slurm.grace_s(args))
            head = slurm.FakeEnvironment() if args.nodes > 1 else None
            print(f"--- {run['name']}\n{slurm.sbatch_script(os.path.join(args.out_root, 'slurm'), args, run['name'])}"
                  f"# each node runs: {' '.join(job.command(head))}")
        print(slurm.plan_summary(ready, args))
        return 0
    failed = slurm.submit(ready, args, args.results, threads)
    if waiting:
        print(f"{waiting} runs wait for their LR sweep: submit again once its runs are recorded")
    return 1 if failed else 0


# Runs at once, or CPU threads a run: past the cores of any one machine (and its hardware threads) a
# count means nothing; a record would state threads that torch never ran.
MOST_AT_ONCE = 1024


def parse_flags(argv):
    """The command's flags, checked (UserError, one line): counts from 0 to MOST_AT_ONCE; --out_root and
    --results absolute (train.py runs with cwd = this folder) and writable, before any training."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("ablations", nargs="+", help="ablation files (configs/ablations/*.py)")
    p.add_argument("--out_root", default="", help="where runs train (checkpoints, logs; not committed; default runs/)")
    p.add_argument("--results", default="", help="where run records go (committed; default results/)")
    p.add_argument("--parallel", type=int, default=0, help="runs at a time (default: GPUs present, else 1)")
    p.add_argument("--threads", type=int, default=0, help="CPU threads per run (default: cores / parallel)")
    p.add_argument("--dry_run", action="store_true", help="list the runs and their state; run nothing")
    p.add_argument("--settings", default="", help="comma-separated patterns (e.g. '*_tpp20'): only the settings "
                   "they match, with the LR sweeps that choose their LRs")
    p.add_argument("--scale_down", action="store_true", help="a GPU file at CPU-miniature size, end to end through "
                   "the same code (miniature.scaled_down: every rule kept, the shapes shrunk; default folders "
                   "runs-scaled-down/ and results-scaled-down/, never the committed results/)")
    slurm.add_flags(p)
    args = p.parse_args(argv)
    if args.status and not args.slurm:
        raise UserError("--status lists the runs' Slurm jobs: give it with --slurm")
    if args.parallel < 0 or args.threads < 0:
        raise UserError(f"--parallel={args.parallel} / --threads={args.threads}: must be >= 1 (0 = the default)")
    for name in ("parallel", "threads"):
        if getattr(args, name) > MOST_AT_ONCE:
            raise UserError(f"--{name}={getattr(args, name)}: more than any one machine has cores (at most "
                            f"{MOST_AT_ONCE}; this one has {os.cpu_count()}): give a count such as {os.cpu_count()}, "
                            f"or 0 for the default")
    suffix = "-scaled-down" if args.scale_down else ""
    args.out_root = os.path.abspath(args.out_root or "runs" + suffix)
    args.results = os.path.abspath(args.results or "results" + suffix)
    for flag, folder in (("--out_root", args.out_root), ("--results", args.results)):
        problem = folder_problem(folder)
        if problem and not (args.dry_run and os.path.isdir(folder)):  # a dry run writes nothing
            raise UserError(f"{flag}={folder}: {problem}")
    return args


def print_plan(runs, states, records, parallel):
    """--dry_run: each run's state, then the open runs' time at the pace of recorded runs of their shape
    (records: --results' and the repository's committed results/, so a fresh folder has a pace too)."""
    for r, s in zip(runs, states):
        print(f"  {s:8s} {r['name']}")
    total, known, n_open = estimate_open(runs, states, records)
    if n_open and not known:
        print(f"open: {n_open} runs; no recorded run of the same shape to estimate their time from")
    elif n_open:
        print(f"open: {n_open} runs; {known} of them at the pace of recorded runs of the same shape: about "
              f"{fmt_duration(total / parallel)} at --parallel={parallel}"
              + (f" (the other {n_open - known} have no comparable record)" if known < n_open else ""))


def main(argv):
    args = parse_flags(argv)
    specs = [load_ablation(path, args.scale_down) for path in args.ablations]
    slurm.resolve_flags(args, specs)
    if args.slurm:
        slurm.check_flags(args)
    patterns = [p for p in args.settings.split(",") if p]
    unmatched = [p for p in patterns if not any(fnmatch.fnmatch(s, p) for spec in specs for s in spec["settings"])]
    if unmatched:
        raise UserError(f"--settings: {', '.join(map(repr, unmatched))} match no setting of "
                        f"{', '.join(args.ablations)}: choose from {', '.join(s for sp in specs for s in sp['settings'])}")
    damaged = []  # records that cannot be read: skipped, their runs run again (a new record replaces each)
    records = load_records(args.results, damaged)
    runs = all_runs(specs, args.out_root, records, patterns)
    states = [state(r, records) for r in runs]
    counts = {s: states.count(s) for s in ("recorded", "done", "partial", "new", "waiting", "damaged")}
    print(f"{len(runs)} runs: {counts['recorded']} recorded, {counts['done']} finished without a record, "
          f"{counts['partial'] + counts['new']} to run"
          + (f", {counts['waiting']} waiting for their LR sweep" if counts["waiting"] else "")
          + (f", {counts['damaged']} with a damaged log (skipped)" if counts["damaged"] else ""))
    for line in damaged + [r["damaged"] for r in runs if r.get("damaged")]:
        print(f"skipped: {line}")
    if args.dry_run and not args.slurm:
        committed = os.path.join(ROOT, "results")  # the repository's records pace a fresh --results folder too
        paced = {**load_records(committed, []), **records} if os.path.isdir(committed) else records
        print_plan(runs, states, paced, args.parallel or 1)
        return 0
    refused = record_finished(runs, states, args.results, records) if not args.dry_run and not args.status else []
    if args.slurm:
        return submit_jobs(runs, [state(r, records) for r in runs], args)

    import torch  # only to count GPUs

    parallel = args.parallel or max(1, torch.cuda.device_count())
    threads = args.threads or max(1, (os.cpu_count() or 1) // parallel)
    code = code_state()
    if code and code["diff"]:
        print(f"note: the tracked files differ from commit {code['commit'][:12]} "
              f"({code['diff'].count(chr(10))} diff lines): each record stores that diff; for results, run "
              f"sweeps from a clean clone of a commit")
    t0, failed, skipped = time.time(), [], set()  # skipped: runs another process has (a second sweep)
    note = "passing SIGTERM to the running runs: each saves its checkpoint and exits, then the sweep exits"
    with StopSignals(note, repeat_quits=False) as signals:
        while True:  # again after a pass: an LR sweep that finished may unlock its seeds (tune_lr)
            todo = [r for r in all_runs(specs, args.out_root, records, patterns)
                    if state(r, records) in ("new", "partial") and r["name"] not in skipped]
            if not todo or failed or signals.received:
                break
            # The seed table first (LR sweeps and budgets after), setting by setting, seed-major: a sweep
            # stopped early leaves whole seeds, every variant of a seed paired.
            setting_rank = {s: i for i, s in enumerate(dict.fromkeys(r["setting"] for r in todo))}
            todo.sort(key=lambda r: (not r["main"], setting_rank[r["setting"]], r["seed"]))
            failed = run_queue(todo, parallel, threads, args.results, records, signals, skipped)
            records.update(load_records(args.results, []))  # another sweep's records too: they may unlock seeds
    if signals.received:
        print(f"stopped by {signals.received} after {fmt_duration(time.time() - t0)}; {len(failed)} failed; "
              f"the same command continues the sweep", flush=True)
        return 128 + signal.Signals[signals.received].value
    failed += refused
    print(f"done in {fmt_duration(time.time() - t0)}; {len(failed)} failed"
          + (f"; {len(skipped)} left to another process (another sweep of the same file)" if skipped else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    cli(main)
