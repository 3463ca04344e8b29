"""research/slurm.py: an ablation's runs as Slurm jobs through submitit, tested with submitit's
local executor (the same job code, local processes; no cluster)."""

import json
import os
import signal
import subprocess
import time

import pytest

from conftest import snapshot
from research import slurm, sweep
from test_sweep import write_ablation

pytest.importorskip("submitit", reason="optional: pip install -e '.[cluster]'")

TWO_RUNS = ("variants = {'baseline': {}, 'hg': {'branch_scales': True}}\nexpected = {'hg': 'lower'}\n"
            "settings = {'adamw': {'optimizer': 'adamw'}}\nseeds = [1]\n")
CPU = ["--gpus_per_node=0", "--cpus_per_task=1", "--time_min=10"]


def records(folder):
    return {name: json.load(open(os.path.join(folder, name))) for name in sorted(os.listdir(folder))}


@pytest.mark.slow
def test_jobs_record_what_the_local_sweep_records(tmp_path, monkeypatch):
    """The same two runs, swept here and submitted as jobs: the same record names (config hashes) and
    final losses; a second submission finds them recorded and submits nothing."""
    monkeypatch.setattr(slurm.import_submitit().AutoExecutor, "which", staticmethod(lambda: "local"))
    path = write_ablation(tmp_path, TWO_RUNS)
    assert sweep.main([path, f"--results={tmp_path / 'r_local'}", f"--out_root={tmp_path / 'o_local'}",
                       "--threads=1"]) == 0
    assert sweep.main([path, "--slurm", *CPU, f"--results={tmp_path / 'r_jobs'}",
                       f"--out_root={tmp_path / 'o_jobs'}"]) == 0
    here, jobs = records(tmp_path / "r_local"), records(tmp_path / "r_jobs")
    assert list(here) == list(jobs) and len(here) == 2
    for name in here:
        assert jobs[name]["final"] == here[name]["final"], name
    before = sorted(os.listdir(tmp_path / "o_jobs" / "slurm"))
    assert sweep.main([path, "--slurm", *CPU, f"--results={tmp_path / 'r_jobs'}",
                       f"--out_root={tmp_path / 'o_jobs'}"]) == 0
    assert sorted(os.listdir(tmp_path / "o_jobs" / "slurm")) == before  # nothing submitted


@pytest.mark.slow
def test_a_time_limit_warning_saves_requeues_and_resumes_to_the_uninterrupted_run(tmp_path, monkeypatch):
    """SIGUSR2 (Slurm's warning before the limit) mid-run: train.py saves at its step and exits, the
    job is requeued and resumes with --init_from=auto; the record equals an uninterrupted run's."""
    submitit = slurm.import_submitit()
    path = write_ablation(tmp_path, TWO_RUNS.replace("'hg': {'branch_scales': True}", "")
                          .replace("expected = {'hg': 'lower'}", "expected = {}"))
    spec = sweep.load_ablation(path)
    monkeypatch.setenv("PYTHONPATH", slurm.ROOT)
    results = {}
    for case in ("straight", "warned"):
        run = {**sweep.plan(spec, str(tmp_path / case))[0], "ablation": spec["name"]}
        run["args"] = [a for a in run["args"] if not a.startswith("--max_iters")] + ["--max_iters=300"]
        run["config"] = {**run["config"], "max_iters": 300}
        ex = submitit.AutoExecutor(folder=str(tmp_path / case / "slurm"), cluster="local")
        ex.update_parameters(timeout_min=10)
        job = ex.submit(slurm.TrainJob(run, str(tmp_path / f"r_{case}"), 0, 1, 1))
        if case == "warned":
            log = os.path.join(run["out_dir"], "log.jsonl")
            deadline = time.time() + 120
            while time.time() < deadline and not (os.path.exists(log) and open(log).read().count('"train"') >= 10):
                time.sleep(0.2)
            # what Slurm sends the job's task before the time limit (submitit's local controller,
            # job._process, forwards only SIGTERM: signal its task, the process running TrainJob)
            tasks = subprocess.run(["pgrep", "-P", str(job._process.pid)], capture_output=True, text=True)
            for pid in tasks.stdout.split():
                os.kill(int(pid), signal.SIGUSR2)
        job.result()
        rec = next(iter(records(tmp_path / f"r_{case}").values()))
        rows = [json.loads(line) for line in open(os.path.join(run["out_dir"], "log.jsonl"))]
        results[case], results[f"{case}_dir"] = (rec, rows), run["out_dir"]
    (straight, rows_a), (warned, rows_b) = results["straight"], results["warned"]
    printed = open(os.path.join(results["warned_dir"], "train.log")).read()
    assert "SIGTERM" in printed and printed.count("parameters:") == 2  # stopped, saved, started again
    assert warned["final"] == straight["final"]
    train = lambda rows: [(r["iter"], r["loss"]) for r in rows if r["kind"] == "train"]  # noqa: E731
    assert train(rows_b) == train(rows_a)


def test_the_sbatch_script_of_a_two_node_run_and_its_torchrun_line(tmp_path, capsys):
    """--dry_run prints, per open run, what sbatch would get: 2 nodes, one task per node, 8 GPUs
    each, the partition, account, QoS and time limit, the requeue flag and the warning signal; and
    the torchrun line with c10d rendezvous at the first node. Nothing is submitted."""
    path = write_ablation(tmp_path, TWO_RUNS)
    assert sweep.main([path, "--slurm", "--dry_run", "--nodes=2", "--gpus_per_node=8", "--partition=gpu",
                       "--account=proj", "--qos=high", "--time_min=1440", "--signal_delay_s=300",
                       f"--results={tmp_path / 'r'}", f"--out_root={tmp_path / 'o'}"]) == 0
    out = capsys.readouterr().out
    script = out.split("--- ")[1]
    for line in ("#SBATCH --nodes=2", "#SBATCH --ntasks-per-node=1", "#SBATCH --gpus-per-node=8",
                 "#SBATCH --partition=gpu", "#SBATCH --account=proj", "#SBATCH --qos=high", "#SBATCH --time=1440",
                 "#SBATCH --requeue", "#SBATCH --signal=USR2@300"):
        assert line in script, (line, script)
    assert "--nnodes=2 --rdzv_backend=c10d --rdzv_endpoint=$HEAD_NODE:29500" in script
    assert "--nproc_per_node=8" in script and "train.py" in script and "--init_from=auto" in script
    assert "--shutdown_timeout=290" in script  # torchrun lets its processes save for the warning's lead less 10 s
    assert out.count("--- ") == 2 and not (tmp_path / "o").exists()


@pytest.mark.parametrize("flags, words", [(["--nodes=0"], "--nodes=0: must be >= 1"),
                                          (["--nodes=2", "--gpus_per_node=0"], "several nodes run torchrun"),
                                          (["--time_min=1", "--signal_delay_s=90"], "not before the end"),
                                          (["--gpus_per_node=1000"], r"--gpus_per_node=1000: more GPUs .* "
                                                                     r"\(at most 16\)"),
                                          (["--cpus_per_task=100000"], r"--cpus_per_task=100000: more CPU cores .* "
                                                                       r"\(at most 1024\)")])
def test_bad_slurm_flags_are_one_line(tmp_path, flags, words):
    from configurator import UserError
    with pytest.raises(UserError, match=words):
        sweep.main([write_ablation(tmp_path, TWO_RUNS), "--slurm", *flags])


def test_an_ablation_files_slurm_entry_sets_the_jobs_and_a_flag_wins(tmp_path, capsys):
    path = write_ablation(tmp_path, TWO_RUNS + "slurm = {'nodes': 2, 'gpus_per_node': 8, 'partition': 'gpu', "
                                               "'time_min': 600}\n")
    assert sweep.main([path, "--slurm", "--dry_run", "--time_min=30", f"--results={tmp_path / 'r'}",
                       f"--out_root={tmp_path / 'o'}"]) == 0
    script = capsys.readouterr().out.split("--- ")[1]
    for line in ("#SBATCH --nodes=2", "#SBATCH --gpus-per-node=8", "#SBATCH --partition=gpu", "#SBATCH --time=30"):
        assert line in script, (line, script)


@pytest.mark.parametrize("entry, words", [("{'gpus': 8}", r"slurm\['gpus'\] = 8: name one of"),
                                          ("{'nodes': '2'}", r"slurm\['nodes'\] = '2'")])
def test_a_bad_slurm_entry_is_one_line_in_any_sweep(tmp_path, entry, words):
    from configurator import UserError
    with pytest.raises(UserError, match=words):
        sweep.main([write_ablation(tmp_path, TWO_RUNS + f"slurm = {entry}\n"), "--dry_run",
                    f"--results={tmp_path / 'r'}"])


def test_two_files_that_set_a_job_flag_differently_need_the_flag(tmp_path):
    from configurator import UserError
    a = write_ablation(tmp_path / "a", TWO_RUNS + "slurm = {'gpus_per_node': 8}\n", name="a")
    b = write_ablation(tmp_path / "b", TWO_RUNS + "slurm = {'gpus_per_node': 4}\n", name="b")
    with pytest.raises(UserError, match=r"--gpus_per_node: the ablation files set it differently .* give "
                                        r"--gpus_per_node or submit the files in separate commands"):
        sweep.main([a, b, "--slurm", "--dry_run", f"--results={tmp_path / 'r'}"])
    assert sweep.main([a, b, "--slurm", "--dry_run", "--gpus_per_node=2", f"--results={tmp_path / 'r'}",
                       f"--out_root={tmp_path / 'o'}"]) == 0


# -----------------------------------------------------------------------------
# Nothing a cluster does to a job loses a record, runs a run twice or hides a failure


def test_a_requeued_attempt_carries_every_field_of_the_first():
    job = slurm.TrainJob({"name": "r", "out_dir": "/o", "args": ["--x=1"]}, "/results", gpus_per_node=8, nodes=2,
                         threads=4, grace_s=290)
    job.proc = object()  # a live process handle stays behind
    again = job.requeued()
    assert {k: v for k, v in vars(again).items() if k != "proc"} == {k: v for k, v in vars(job).items() if k != "proc"}
    assert again.proc is None and again is not job


def test_a_run_is_claimed_by_one_submission_and_a_stale_claim_by_one_taker(tmp_path, monkeypatch):
    """take_claim checks and writes under a lock: of eight submissions racing on one run exactly one holds it; a
    claim whose job ended without a record (a node failure) is stale, and of eight racing takers
    exactly one takes it over."""
    import threading
    run = {"name": "r", "out_dir": str(tmp_path / "run")}
    folder = str(tmp_path / "slurm")

    def race():
        won, go = [], threading.Barrier(8)

        def one():
            go.wait()
            won.append(slurm.take_claim(run, folder))

        threads = [threading.Thread(target=one) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return won.count(True)

    assert race() == 1 and slurm.claim_state(run, folder)[0] == "submitting"
    slurm.write_claim(run, "job 4242")
    monkeypatch.setattr(slurm, "job_state", lambda job_id, folder: "RUNNING")
    assert race() == 0 and slurm.claim_state(run, folder) == ("running", "4242")
    monkeypatch.setattr(slurm, "job_state", lambda job_id, folder: "NODE_FAIL")
    assert slurm.claim_state(run, folder)[0] == "stale"
    assert race() == 1 and slurm.read_claim(run).startswith("submitting")
    slurm.write_claim(run, "submitting 999999999 " + __import__("socket").gethostname())  # a submitter that died
    assert slurm.claim_state(run, folder)[0] == "stale"


def local_jobs(monkeypatch):
    monkeypatch.setattr(slurm.import_submitit().AutoExecutor, "which", staticmethod(lambda: "local"))


@pytest.mark.slow
def test_a_killed_jobs_finished_run_is_recorded_by_the_next_submission(tmp_path, monkeypatch, capsys):
    """The job's own process is killed (SIGKILL, as a node failure would) while its train.py trains:
    train.py finishes alone and no record is written; the next submission records it from its log,
    submits nothing for it, and says so."""
    local_jobs(monkeypatch)
    path = write_ablation(tmp_path, TWO_RUNS.replace("'hg': {'branch_scales': True}", "")
                          .replace("expected = {'hg': 'lower'}", "expected = {}") + "\n")
    spec = sweep.load_ablation(path)
    run = {**sweep.plan(spec, str(tmp_path / "o"))[0], "ablation": spec["name"]}
    args = [path, "--slurm", *CPU, f"--results={tmp_path / 'r'}", f"--out_root={tmp_path / 'o'}"]
    submitit = slurm.import_submitit()
    ex = submitit.AutoExecutor(folder=str(tmp_path / "o" / "slurm"), cluster="local")
    ex.update_parameters(timeout_min=10)
    monkeypatch.setenv("PYTHONPATH", slurm.ROOT)
    assert slurm.take_claim(run, str(tmp_path / "o" / "slurm"))
    job = ex.submit(slurm.TrainJob(run, str(tmp_path / "r"), 0, 1, 1))
    slurm.write_claim(run, f"job {job.job_id}")
    log = os.path.join(run["out_dir"], "log.jsonl")
    deadline = time.time() + 120
    while time.time() < deadline and not os.path.exists(log):
        time.sleep(0.1)
    tasks = subprocess.run(["pgrep", "-P", str(job._process.pid)], capture_output=True, text=True).stdout.split()
    for pid in tasks:  # the job's task (TrainJob): its train.py lives on
        os.kill(int(pid), signal.SIGKILL)
    while time.time() < deadline and '"iter": 4, "tokens"' not in (["", *open(log).read().split("\n")])[-2]:  # (rows come at flushes)
        time.sleep(0.2)
    time.sleep(1)
    assert not os.path.exists(tmp_path / "r") or not os.listdir(tmp_path / "r")  # finished, unrecorded
    capsys.readouterr()
    assert sweep.main(args) == 0
    out = capsys.readouterr().out
    assert "(from an existing log)" in out and "submitted" not in out
    assert len(records(tmp_path / "r")) == 1


@pytest.mark.slow
def test_a_failed_job_is_reported_with_train_pys_exit_and_error_and_the_sweep_exits_non_zero(tmp_path, monkeypatch,
                                                                                           capsys):
    """A run that diverges: its job fails; the submission that waited for it names train.py's exit
    status and last error line and exits 1; --status lists it as failed (exit 1), and the next
    submission resubmits it, saying why."""
    local_jobs(monkeypatch)
    path = write_ablation(tmp_path, TWO_RUNS.replace("'hg': {'branch_scales': True}", "'hot': {'learning_rate': 1e9}")
                          .replace("expected = {'hg': 'lower'}", "expected = {'hot': 'lower'}"))
    args = [path, "--slurm", *CPU, f"--results={tmp_path / 'r'}", f"--out_root={tmp_path / 'o'}"]
    assert sweep.main(args) == 1
    out = capsys.readouterr().out
    assert "FAILED hot_adamw_s1_" in out and "train.py exited with 1: error: " in out
    assert "the run diverged" in out
    assert sweep.main([*args, "--status"]) == 1
    out = capsys.readouterr().out
    assert "  recorded  baseline_adamw_s1_" in out and "  failed    hot_adamw_s1_" in out and "exited with 1" in out
    assert sweep.main(args) == 1
    assert "resubmitting hot_adamw_s1_" in capsys.readouterr().out


def test_a_dry_run_ends_with_the_jobs_gpu_hours_and_the_runs_past_the_time_limit(tmp_path, capsys, monkeypatch):
    """--slurm --dry_run closes with the jobs, their nodes and GPU-hours (each run's FLOPs per token x
    tokens at 40% of 989 TFLOP/s, recomputed here from the model), and names each run whose estimate
    passes --time_min: it finishes over requeued jobs."""
    import torch

    from model import GPT, model_config
    path = write_ablation(tmp_path, TWO_RUNS)
    args = [path, "--slurm", "--dry_run", "--gpus_per_node=8", "--time_min=60", f"--results={tmp_path / 'r'}",
            f"--out_root={tmp_path / 'o'}"]
    assert sweep.main(args) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    hours = 0.0
    for run in sweep.plan(sweep.load_ablation(path), str(tmp_path / "o")):
        cfg = {**run["config"], "vocab_size": 40}  # the test dataset's meta.pkl
        with torch.device("meta"):
            per_token = GPT(model_config(cfg)).flops_per_token()
        hours += per_token * cfg["max_iters"] * cfg["batch_size"] * cfg["block_size"] / (989e12 * 0.4) / 3600
    assert last.startswith(f"2 jobs on 1 node(s) of 8 GPUs each: about {hours:.3g} GPU-hours of training")
    assert "pass --time_min" not in last
    monkeypatch.setattr(slurm, "job_hours", lambda run, gpus: 30.0)
    assert sweep.main(args) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert "about 480 GPU-hours" in last and "2 pass --time_min=60 min and finish over requeued jobs: baseline_" in last


# -----------------------------------------------------------------------------
# Concurrent submissions: a run another live process has submitted is its, not stale

# A submitter as `python -m research.sweep` runs it, whose local jobs wait for a gate file before
# they start (submitit's `setup` runs first in the job's shell): the test decides when they train,
# so the second submission's claim check always meets the first one's jobs alive.
GATED_SUBMITTER = """
import shlex
import sys

from plumbing.common import cli
from research import slurm, sweep

gate = sys.argv.pop(1)
made = slurm.executor


def gated(folder, args, name):
    ex = made(folder, args, name)
    ex.update_parameters(setup=[f"while [ ! -e {shlex.quote(gate)} ]; do sleep 0.1; done"])
    return ex


slurm.executor = gated
cli(sweep.main)
"""


def lines_of(proc):
    """A queue of proc's stdout lines (None at its end), read on a thread so a wait can time out."""
    import queue
    import threading
    out = queue.Queue()

    def pump():
        for line in proc.stdout:
            out.put(line.rstrip("\n"))
        out.put(None)

    threading.Thread(target=pump, daemon=True).start()
    return out


def wait_for(out, seen, count, pattern, what, timeout=120):
    """Read lines into `seen` until `count` of them match `pattern` (re.match); fail naming `what`."""
    import re
    deadline = time.time() + timeout
    while sum(bool(re.match(pattern, ln)) for ln in seen) < count:
        line = out.get(timeout=max(0.1, deadline - time.time()))
        assert line is not None, f"{what} ended early: {seen}"
        seen.append(line)


@pytest.mark.slow
def test_two_concurrent_local_submissions_submit_each_run_once(tmp_path):
    """Submission A submits both runs as local jobs (held at a gate, so they are alive and unrecorded);
    submission B, started meanwhile on the same file, finds each claimed by A's live job and
    submits nothing. Then the jobs train: each run trains once, both commands exit 0, two records."""
    import sys
    path = write_ablation(tmp_path, TWO_RUNS)
    driver, gate = tmp_path / "submitter.py", tmp_path / "gate"
    driver.write_text(GATED_SUBMITTER)
    cmd = [sys.executable, str(driver), str(gate), path, "--slurm", *CPU, f"--results={tmp_path / 'r'}",
           f"--out_root={tmp_path / 'o'}"]
    env = {**os.environ, "PYTHONPATH": slurm.ROOT, "OMP_NUM_THREADS": "1"}
    procs, seen = {}, {"a": [], "b": []}
    try:
        procs["a"] = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=slurm.ROOT,
                                      env=env)
        out_a = lines_of(procs["a"])
        wait_for(out_a, seen["a"], 2, r"submitted ", "submission A")
        procs["b"] = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=slurm.ROOT,
                                      env=env)
        out_b = lines_of(procs["b"])
        wait_for(out_b, seen["b"], 2, r"submitted |\w+ already: ", "submission B")  # B's claim checks, done
    finally:
        gate.touch()  # the jobs may train now (whatever happened: no job waits forever)
    codes = {k: p.wait(timeout=300) for k, p in procs.items()}
    for key, out in (("a", out_a), ("b", out_b)):
        while (line := out.get(timeout=30)) is not None:
            seen[key].append(line)
    errors = {k: p.stderr.read() for k, p in procs.items()}
    assert codes == {"a": 0, "b": 0}, (seen, errors)
    assert not any(ln.startswith("submitted ") for ln in seen["b"]), seen["b"]
    assert sum(ln.startswith(("running already: ", "queued already: ")) for ln in seen["b"]) == 2, seen["b"]
    assert sum(ln.startswith("recorded ") for ln in seen["a"]) == 2 and not any("FAILED" in ln for ln in seen["a"])
    spec = sweep.load_ablation(path)
    for run in sweep.plan(spec, str(tmp_path / "o")):
        assert open(os.path.join(run["out_dir"], "train.log")).read().count("parameters:") == 1, run["name"]
    assert len(records(tmp_path / "r")) == 2


def test_a_run_recorded_after_the_submission_planned_it_is_not_submitted(tmp_path, monkeypatch, capsys):
    """Another submission's job recorded the run (and released its claim) between this submission's
    plan and its claim: the claim is open, but the record is there, so nothing is submitted."""
    from types import SimpleNamespace
    local_jobs(monkeypatch)
    spec = sweep.load_ablation(write_ablation(tmp_path, TWO_RUNS))
    run = {**sweep.plan(spec, str(tmp_path / "o"))[0], "ablation": spec["name"]}
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / f"{run['name']}.json").write_text("{}")

    def executor(folder, args, name):
        raise AssertionError(f"{name} submitted")

    monkeypatch.setattr(slurm, "executor", executor)
    args = SimpleNamespace(out_root=str(tmp_path / "o"), gpus_per_node=0, nodes=1, signal_delay_s=120)
    assert slurm.submit([run], args, str(tmp_path / "r")) == 0
    assert f"recorded already: {run['name']}" in capsys.readouterr().out
    assert slurm.read_claim(run) is None  # released: nothing holds the run


def test_a_local_jobs_claim_is_live_while_its_controller_lives_here(tmp_path, monkeypatch):
    """A local job's claim names its controller's pid and host: running while a submitit process has that
    pid here; stale once it is gone, or when the pid is another program's (reused); running when the
    host is another (its processes cannot be checked from here); a line no code writes is stale."""
    import socket
    import sys
    local_jobs(monkeypatch)
    run, folder, here = {"name": "r", "out_dir": str(tmp_path / "run")}, str(tmp_path / "slurm"), socket.gethostname()
    os.makedirs(run["out_dir"])
    # a process whose command line names submitit, as submitit.local._local's does
    controller = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "submitit.local._local"])
    try:
        slurm.write_claim(run, f"job {controller.pid} local {here}")
        assert slurm.claim_state(run, folder) == ("running", str(controller.pid))
        assert not slurm.take_claim(run, folder)
    finally:
        controller.kill()
        controller.wait()
    assert slurm.claim_state(run, folder)[0] == "stale"
    slurm.write_claim(run, f"job {os.getpid()} local {here}")  # alive, but pytest: not a submitit controller
    assert slurm.claim_state(run, folder)[0] == "stale"
    slurm.write_claim(run, f"job {controller.pid} local another-host")
    assert slurm.claim_state(run, folder) == ("running", f"{controller.pid}, a local job on another-host")
    slurm.write_claim(run, "job")
    assert slurm.claim_state(run, folder)[0] == "stale" and slurm.take_claim(run, folder)


# -----------------------------------------------------------------------------
# The claim files (slurm_job, its .lock, the writer's own name): a link or a FIFO is refused in one line
# or replaced, never written through, never waited on

HAZARDS = ("symlink", "relative symlink", "dangling symlink", "hard link", "FIFO")


def plant(path, hazard, outside):
    """hazard at path, pointing at a file of outside's that holds bytes nobody may lose (a dangling
    symlink: at a name in outside that nothing holds; opening it to write would make it)."""
    target = os.path.join(outside, f"{len(os.listdir(outside))}_{os.path.basename(path)}")
    if hazard == "FIFO":
        os.mkfifo(path)
        return
    if hazard != "dangling symlink":
        with open(target, "w") as f:
            f.write("precious\n")
    if hazard == "hard link":
        os.link(target, path)
    else:
        os.symlink(os.path.relpath(target, os.path.dirname(path)) if hazard == "relative symlink" else target, path)


def capped(fn, *fifos, timeout=10):
    """fn()'s result (or the exception it raised), or "hung" when it still runs after timeout s: a thread
    blocked in opening one of fifos is then freed (its other end opened and closed)."""
    import threading
    done = []

    def call():
        try:
            done.append(fn())
        except BaseException as e:  # noqa: BLE001 (the test inspects it)
            done.append(e)

    t = threading.Thread(target=call, daemon=True)
    t.start()
    t.join(timeout)
    if t.is_alive():
        for fifo in fifos:
            for flags in (os.O_RDONLY | os.O_NONBLOCK, os.O_WRONLY | os.O_NONBLOCK):
                try:
                    os.close(os.open(fifo, flags))
                except OSError:
                    pass
        t.join(5)
        return "hung"
    return done[0]


@pytest.mark.parametrize("name", ["slurm_job", "slurm_job.lock", "slurm_job.{pid}"])
@pytest.mark.parametrize("hazard", HAZARDS)
def test_a_claim_file_that_is_a_link_or_fifo_is_refused_or_replaced_never_written_through(tmp_path, name, hazard):
    """take_claim (and the claim it writes) meets a link or a FIFO at the claim, at its lock, at the name the
    writer renames from: it ends, writes nothing outside the run folder, and either refuses in one line
    naming the file (a symbolic link or FIFO claim; any link or FIFO lock) or takes the run (a hard-linked
    claim, or anything at the writer's own name: replaced by a rename, the other name keeps its bytes)."""
    from configurator import UserError
    run, folder = {"name": "r", "out_dir": str(tmp_path / "run")}, str(tmp_path / "slurm")
    outside = tmp_path / "outside"
    outside.mkdir()
    os.makedirs(run["out_dir"])
    path = os.path.join(run["out_dir"], name.format(pid=os.getpid()))
    plant(path, hazard, str(outside))
    before = snapshot(outside)
    got = capped(lambda: slurm.take_claim(run, folder), path)
    assert got != "hung", f"take_claim waits forever on {name} as a {hazard}"
    assert snapshot(outside) == before, f"written through {name} ({hazard})"
    refused = name == "slurm_job.lock" or (name == "slurm_job" and hazard != "hard link")
    if refused:
        assert isinstance(got, UserError), got
        assert path in str(got) and "\n" not in str(got), got
        assert not os.path.exists(slurm.claim_path(run)) or name == "slurm_job"  # nothing claimed
    else:
        assert got is True, got
        assert slurm.read_claim(run).startswith(f"submitting {os.getpid()} ")
        assert os.stat(slurm.claim_path(run)).st_nlink == 1 and not os.path.islink(slurm.claim_path(run))
        assert sorted(os.listdir(run["out_dir"])) == ["slurm_job", "slurm_job.lock"]  # the writer's names gone


def test_status_with_a_fifo_at_a_claim_is_one_line_not_a_wait(tmp_path):
    """--slurm --status reads each open run's claim: a FIFO there is named in one line, never waited on."""
    from configurator import UserError
    path = write_ablation(tmp_path, TWO_RUNS)
    run = sweep.plan(sweep.load_ablation(path), str(tmp_path / "o"))[0]
    os.makedirs(run["out_dir"])
    claim = slurm.claim_path(run)
    os.mkfifo(claim)
    got = capped(lambda: sweep.main([path, "--slurm", "--status", *CPU, f"--results={tmp_path / 'r'}",
                                     f"--out_root={tmp_path / 'o'}"]), claim)
    assert isinstance(got, UserError) and claim in str(got) and "named pipe" in str(got), got
