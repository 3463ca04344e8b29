"""An ablation's open runs as Slurm jobs, through submitit (pip install -e '.[cluster]').

    python -m research.sweep configs/ablations/c8_unified.py --slurm --partition=gpu --gpus_per_node=8 \\
        --time_min=1440 [--nodes=2 --account=A --qos=Q] [--dry_run]

One job per open run (neither recorded nor queued): a job runs torchrun on each
node (one node: --standalone; several: c10d rendezvous at the first node's
address, which submitit's job environment gives) over train.py with
--init_from=auto, then writes the run's record exactly as a local sweep does
(research.records.record), so research/plot.py reads cluster and local runs alike.

Time limits and preemption: Slurm warns a job before its limit with SIGUSR2
(submitit asks for it --signal_delay_s ahead; SIGTERM it does not pass on).
submitit then calls TrainJob.checkpoint(), which forwards the warning to
train.py as SIGTERM: train.py finishes its step, saves and exits; submitit
requeues the job, and the requeued job starts train.py again with
--init_from=auto, which resumes from that checkpoint. A requeued attempt is
the first one's job, every field kept (TrainJob.requeued).

Claims: before a run's job is submitted, the submission takes the run's claim
file (slurm_job in its out_dir) under an exclusive lock, so two submissions of
the same file never submit a run twice; the claim then holds the job's id (a local
job's: its controller's pid and host), and the job releases it when it ends (removed
when recorded; "failed ..." with train.py's exit status and last error line when
train.py failed). A claim whose job Slurm no longer has (a node failure, a killed
job), or whose local job's process is gone, is stale and the next submission takes
it over; a run another submission recorded meanwhile is not submitted again. A
run that finished but whose job died before recording it is recorded from its own
log by the next submission, as a local sweep does. `--slurm --status` lists each
planned run as recorded, queued, running, failed or open. A claim that is a symbolic link or
no regular file (a FIFO), or a lock that is either or has another hard link, is refused in one
line before anything reads or writes through it; a claim is only ever replaced by a rename (a
hard-linked one too: its other name keeps its bytes), never written in place.
"""

import copy
import os
import signal
import socket
import subprocess
import sys
import time

from configurator import UserError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# GPU-hour plans (here and research/ladder.py): an H100/H200's dense bf16 peak and the MFU assumed until
# tools/gpu_check measures one; FLOPs are model.GPT.flops_per_token's (attention's T x T term not halved
# for causality: MFU's convention, comparable to published MFUs, 6-12% above the work done here).
H100_PEAK_TFLOPS = 989
MFU_ASSUMED = 0.40
PORT = 29500  # the c10d rendezvous port on the first node
# in a run's out_dir: its claim ("submitting <pid> <host>", "job <id>[ local <host>]" or "failed <id> ...")
JOB_FILE = "slurm_job"


def import_submitit():
    try:
        import submitit
        return submitit
    except ImportError:
        raise UserError("--slurm needs the package submitit: pip install -e '.[cluster]'") from None


class TrainJob:
    """One run as a submitit job: torchrun + train.py (--init_from=auto), then its record.

    run: the sweep's run dict; results: the records folder; gpus_per_node (0: one CPU process);
    nodes; threads: OMP_NUM_THREADS per process; grace_s: how long torchrun lets its processes
    finish their step and save after the warning before it kills them (torchrun's
    --shutdown_timeout; its default, 30 s, can be short of a large model's save). __call__ returns the record's path on the node
    that writes it (the first), None on the others; raises RuntimeError when train.py fails.
    checkpoint() is submitit's hook for the time-limit warning (see the module docstring).
    """

    def __init__(self, run, results, gpus_per_node=0, nodes=1, threads=1, grace_s=30):
        self.run, self.results = run, results
        self.gpus_per_node, self.nodes, self.threads, self.grace_s = gpus_per_node, nodes, threads, grace_s
        self.proc = None

    def command(self, env=None):
        """The command each node runs: train.py alone (CPU, one process), else torchrun."""
        train = [os.path.join(ROOT, "train.py"), *self.run["args"], "--init_from=auto"]
        if not self.gpus_per_node:
            return [sys.executable, *train]
        launcher = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={self.gpus_per_node}",
                    f"--shutdown_timeout={self.grace_s}"]
        if self.nodes == 1:
            return [*launcher, "--standalone", *train]
        head = env.hostnames[0]  # the first node of the allocation hosts the rendezvous
        return [*launcher, f"--nnodes={self.nodes}", "--rdzv_backend=c10d", f"--rdzv_endpoint={head}:{PORT}",
                f"--rdzv_id={env.job_id}", *train]

    def __call__(self):
        from research.records import open_run_log, record, start_provenance
        submitit = import_submitit()
        env = submitit.JobEnvironment()
        first, t0 = env.global_rank == 0, time.time()
        if first:  # as a local sweep's launch: a requeued run must resume on the code it started from
            os.makedirs(self.run["out_dir"], exist_ok=True)
            start_provenance(self.run, self.threads, None)
        with open_run_log(self.run) as log:
            self.proc = subprocess.Popen(self.command(env), stdout=log, stderr=subprocess.STDOUT, cwd=ROOT,
                                         env={**os.environ, "OMP_NUM_THREADS": str(self.threads)})
            while self.proc.poll() is None:  # not proc.wait(): checkpoint() runs as a signal handler in this
                time.sleep(1)                # thread, and a wait() it interrupted would hold the lock it needs
            code = self.proc.returncode
        if code:
            why = f"train.py exited with {code}: {last_error(os.path.join(self.run['out_dir'], 'train.log'))}"
            if first:
                write_claim(self.run, f"failed {env.job_id} {why}")  # released: the next submission retries it
            raise RuntimeError(why)
        if not first:
            return None
        # wall_s: this attempt's time, as a local sweep's record of a resumed run has its last part's
        path = record(self.run, self.results, {}, time.time() - t0, self.threads)
        release(self.run)
        return path

    def checkpoint(self, *args, **kwargs):
        """The time-limit warning: train.py saves at its step and exits (SIGTERM); then the job is
        requeued as a fresh TrainJob (its train.py resumes with --init_from=auto)."""
        submitit = import_submitit()
        if self.proc is not None and self.proc.returncode is None:
            os.kill(self.proc.pid, signal.SIGTERM)  # train.py (or torchrun, which passes it on) saves and exits
            try:
                os.waitpid(self.proc.pid, 0)  # raw: this handler may have interrupted proc.poll() itself
            except ChildProcessError:  # reaped already
                pass
        return submitit.helpers.DelayedSubmission(self.requeued())

    def requeued(self):
        """The job of the next attempt: this one, every field kept (grace_s too), without its process."""
        job = copy.copy(self)
        job.proc = None
        return job

    def __getstate__(self):  # the process handle stays on the node that started it
        return {**self.__dict__, "proc": None}


def last_error(log_path):
    """The last line of a train.log that starts with "error:", else its last non-empty line."""
    try:
        with open(log_path, errors="replace") as f:
            lines = [ln.strip() for ln in f if ln.strip()]
    except OSError:
        return "no train.log"
    return next((ln for ln in reversed(lines) if ln.startswith("error:")), lines[-1] if lines else "no output")


class FakeEnvironment:
    """What --dry_run shows for a job's nodes before Slurm has allocated them."""

    hostnames, job_id = ["$HEAD_NODE"], "$SLURM_JOB_ID"


def claim_path(run):
    return os.path.join(run["out_dir"], JOB_FILE)


def read_claim(run):
    """The run's claim line, or None when it has none. UserError, one line naming it and the fix, for a
    claim that is a symbolic link or no regular file (a FIFO would hold the read forever): open_checked."""
    from plumbing.common import open_checked
    try:
        with open_checked(claim_path(run)) as f:
            return f.read().decode(errors="replace").strip()
    except FileNotFoundError:
        return None


def write_claim(run, line):
    """Replace the run's claim by `line`, atomically (a reader sees the old line or the new one): written
    to a name of this process's own (two writers never share one) by atomic_write, which makes it anew,
    then renamed over the claim, so a link or FIFO at either name is replaced, never written through."""
    from plumbing.checkpoint import atomic_write
    mine = f"{claim_path(run)}.{os.getpid()}"
    with atomic_write(mine) as f:
        f.write(line + "\n")
    os.replace(mine, claim_path(run))


def release(run):
    """Remove the run's claim (its job recorded the run)."""
    try:
        os.remove(claim_path(run))
    except FileNotFoundError:
        pass


def job_state(job_id, folder):
    """Slurm's state of the job as submitit reads it; for a local job (its id: its controller's pid on
    this host), "RUNNING" while that process lives, else "FINISHED" (its result written) or
    "NO PROCESS AND NO RESULT". Not submitit's LocalJob.state: that knows only the processes the
    reading process started, so another submission's live job would read as ended."""
    submitit = import_submitit()
    if submitit.AutoExecutor.which() == "slurm":
        return submitit.SlurmJob(folder=folder, job_id=job_id).state
    if job_id.isdigit() and controller_alive(int(job_id)):
        return "RUNNING"
    done = submitit.local.local.LocalJob(folder=folder, job_id=job_id).paths.result_pickle.exists()
    return "FINISHED" if done else "NO PROCESS AND NO RESULT"


def controller_alive(pid):
    """Whether pid is a live submitit controller here: alive, and where /proc shows command lines, one
    that runs submitit (a pid the system reused for another program, or a zombie, is not the job).
    An empty command line is read again for up to a second: a process caught inside its exec (its
    parent's Popen has returned, its arguments are not yet in place) shows none for a moment."""
    if not pid_alive(pid):
        return False
    if not os.path.isdir("/proc"):  # no command lines to read (macOS): the pid alone
        return True
    for _ in range(20):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                line = f.read()
        except OSError:  # it ended meanwhile
            return False
        if line:
            return b"submitit" in line
        time.sleep(0.05)
    return False  # a zombie (or a kernel thread) keeps an empty one


ENDED = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL", "FINISHED", "INTERRUPTED",
         "UNKNOWN", "NO PROCESS AND NO RESULT", "PREEMPTED", "BOOT_FAIL", "DEADLINE")


def claim_state(run, folder):
    """(state, detail) of the run's claim: ("open", "") with none; ("submitting", who) while another
    submission submits it; ("queued" | "running", job id) while its job is pending or running;
    ("failed", "job N: train.py exited with ...: <its last error line>") after train.py failed;
    ("stale", why) when the job it names ended without releasing it (a node failure, a kill), the
    submission that took it died before it submitted, or the line is none this code writes.
    A claim of another host's submitter or local job is respected as live: its process cannot be
    checked from here (delete the claim file, claim_path, once it is known to be gone)."""
    line = read_claim(run)
    if line is None:
        return "open", ""
    kind, _, rest = line.partition(" ")
    words = rest.split()
    if kind == "failed" and words:
        job_id, _, why = rest.partition(" ")
        return "failed", f"job {job_id}: {why}"
    if kind == "submitting" and len(words) == 2 and words[0].isdigit():
        pid, host = words
        alive = host != socket.gethostname() or pid_alive(int(pid))
        return ("submitting", f"process {pid} on {host}") if alive else ("stale", f"its submitter {pid} died")
    if kind == "job" and (len(words) == 1 or len(words) == 3 and words[1] == "local"):
        job_id, host = words[0], words[2] if len(words) == 3 else None
        if host is not None and host != socket.gethostname():
            return "running", f"{job_id}, a local job on {host}"
        state = job_state(job_id, folder)
        if state in ENDED:
            return "stale", f"job {job_id} ended ({state}) without recording the run"
        return ("running" if state == "RUNNING" else "queued"), job_id
    return "stale", f"its claim {line[:80]!r} is none this code writes"


def pid_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def take_claim(run, folder):
    """Claim the run for a submission: True when this process now holds it (written "submitting
    <pid> <host>"), False when another holds it (queued, running, being submitted). The check and
    the write happen under an exclusive lock (flock on the claim's .lock file), so of two
    submissions, however close, one takes an open, stale or failed claim and the other sees it held.
    UserError, one line naming the file and the fix, when the claim or its lock is a symbolic link or no
    regular file, or the lock has another hard link (start.not_own): nothing is written through them."""
    import fcntl

    from plumbing.start import not_own
    os.makedirs(run["out_dir"], exist_ok=True)
    path = claim_path(run) + ".lock"
    if problem := not_own(path):  # a link, a hard link, a FIFO: the lock is the run's own file or none
        raise UserError(problem)
    # read-only (flock needs no write), no link followed, no wait on a FIFO put there since the check
    with open(os.open(path, os.O_RDONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o644)) as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if claim_state(run, folder)[0] not in ("open", "stale", "failed"):
            return False
        write_claim(run, f"submitting {os.getpid()} {socket.gethostname()}")
        return True


def job_hours(run, gpus):
    """Hours one run trains on `gpus` GPUs: its training FLOPs (flops_per_token x tokens) at
    H100_PEAK_TFLOPS x MFU_ASSUMED per GPU. The vocabulary is the dataset's meta.pkl's, else GPT-2's."""
    import torch

    from plumbing.dataset import recorded_vocab_size
    from model import GPT, model_config
    cfg = run["config"]
    cfg = {**cfg, "vocab_size": cfg["vocab_size"] or recorded_vocab_size(cfg["dataset"]) or 50257}
    with torch.device("meta"):
        per_token = GPT(model_config(cfg)).flops_per_token()
    tokens = cfg["max_iters"] * cfg["batch_size"] * cfg["block_size"] * cfg["gradient_accumulation_steps"]
    return per_token * tokens / (gpus * H100_PEAK_TFLOPS * 1e12 * MFU_ASSUMED) / 3600


def plan_summary(runs, args):
    """--dry_run's closing lines: the jobs, nodes and GPU-hours they would use, and each run whose
    estimate passes --time_min (it lives on requeue: saved at the warning, resumed by the next job)."""
    if not runs:
        return "no jobs to submit"
    gpus = args.gpus_per_node * args.nodes
    if not gpus:
        return f"{len(runs)} jobs, 1 node each, CPU only: no GPU-hour estimate"
    hours = {run["name"]: job_hours(run, gpus) for run in runs}
    long = [f"{name} ({h:.3g} h)" for name, h in hours.items() if h > args.time_min / 60]
    return (f"{len(runs)} jobs on {args.nodes} node(s) of {args.gpus_per_node} GPUs each: about "
            f"{gpus * sum(hours.values()):.3g} GPU-hours of training ({gpus * sum(hours.values()) / len(runs):.3g} "
            f"a run) at {MFU_ASSUMED:.0%} MFU of {H100_PEAK_TFLOPS} TFLOP/s (H100/H200 bf16; the non-causal FLOP "
            f"count), {max(hours.values()):.3g} h the longest"
            + (f"; {len(long)} pass --time_min={args.time_min} min and finish over requeued jobs: "
               + ", ".join(long[:8]) + (" ..." if len(long) > 8 else "") if long else ""))


def sbatch_parameters(args, name):
    """One job's parameters in Slurm's own names (submitit's SlurmExecutor takes these)."""
    params = {"job_name": name, "time": args.time_min, "nodes": args.nodes, "ntasks_per_node": 1,
              "gpus_per_node": args.gpus_per_node or None, "cpus_per_task": args.cpus_per_task,
              "partition": args.partition, "account": args.account, "qos": args.qos,
              "signal_delay_s": args.signal_delay_s, "additional_parameters": {"requeue": True}}
    return {k: v for k, v in params.items() if v is not None}


def executor(folder, args, name):
    """A submitit executor for one job: Slurm where submitit finds it (sbatch, srun), else local
    processes (the same TrainJob, run here: how the tests run it)."""
    submitit = import_submitit()
    if submitit.AutoExecutor.which() == "slurm":
        ex = submitit.SlurmExecutor(folder=folder)
        ex.update_parameters(**sbatch_parameters(args, name))
    else:
        ex = submitit.LocalExecutor(folder=folder)
        ex.update_parameters(timeout_min=args.time_min, signal_delay_s=args.signal_delay_s)
    return ex


def sbatch_script(folder, args, name):
    """The sbatch script submitit would submit for one job (--dry_run prints it; nothing is submitted)."""
    import shlex
    import_submitit()
    from submitit.slurm.slurm import _make_sbatch_string  # what SlurmExecutor writes, without a cluster
    command = " ".join([sys.executable, "-u -m submitit.core._submit", shlex.quote(folder)])
    return _make_sbatch_string(command=command, folder=folder, **sbatch_parameters(args, name))


# A job's settings: flag -> (type, default, meaning). An ablation file may set them too (its `slurm`
# entry, e.g. the GPUs its runs need); a flag given on the command line wins.
JOB_FLAGS = {
    "partition": (str, None, "the Slurm partition"),
    "account": (str, None, "the Slurm account"),
    "qos": (str, None, "the Slurm QOS"),
    "nodes": (int, 1, "nodes per run (torchrun on each)"),
    "gpus_per_node": (int, 1, "processes (GPUs) per node; 0: one CPU process"),
    "cpus_per_task": (int, 8, "CPU cores per node's task"),
    "time_min": (int, 24 * 60, "the job's time limit, minutes"),
    "signal_delay_s": (int, 120, "seconds before the limit at which Slurm warns (SIGUSR2): train.py saves, "
                                 "the job requeues"),
}


def add_flags(parser):
    """sweep.py's --slurm flags (one group); their defaults come in resolve_flags."""
    g = parser.add_argument_group("Slurm, through submitit (--slurm); an ablation file's `slurm` entry sets "
                                  "defaults of its own")
    g.add_argument("--slurm", action="store_true",
                   help="submit each open run as a job instead of running it here (Slurm where sbatch exists, "
                        "else local processes); with --dry_run, print each job's sbatch script")
    g.add_argument("--status", action="store_true",
                   help="with --slurm: list each planned run as recorded, queued, running, failed (train.py's exit "
                        "status and last error line) or open; submit nothing; exit status 1 while a run failed")
    for name, (kind, default, meaning) in JOB_FLAGS.items():
        g.add_argument(f"--{name}", type=kind, default=None, help=f"{meaning} (default: {default})")


def resolve_flags(args, specs):
    """Fill each job flag not given on the command line from the ablation files' `slurm` entries, else
    JOB_FLAGS' default, in place. UserError naming the file for an entry that is no job flag or not
    of its type, and when two files given together set a flag differently (submit them in separate
    commands). sweep.py calls it on every file it reads, --slurm or not."""
    for spec in specs:
        for flag, value in spec["slurm"].items():
            if flag not in JOB_FLAGS or type(value) is not JOB_FLAGS[flag][0]:
                raise UserError(f"{spec['name']}.py: slurm[{flag!r}] = {value!r}: name one of {list(JOB_FLAGS)}, each "
                                f"with a value of its type (an int, or a str for partition, account, qos)")
    for name, (_, default, _) in JOB_FLAGS.items():
        if getattr(args, name) is not None:
            continue
        values = {repr(spec["slurm"][name]): spec["name"] for spec in specs if name in spec["slurm"]}
        if len(values) > 1:
            raise UserError(f"--{name}: the ablation files set it differently ({', '.join(f'{f}: {v}' for v, f in values.items())}): "
                            f"give --{name} or submit the files in separate commands")
        setattr(args, name, next((spec["slurm"][name] for spec in specs if name in spec["slurm"]), default))


def grace_s(args):
    """Seconds torchrun waits for its processes to save after the warning: all but 10 of the warning's lead."""
    return max(10, args.signal_delay_s - 10)


# The most a node holds: a job asking more describes no machine (DGX/HGX nodes hold 8 GPUs, HGX-2 16;
# the largest two-socket nodes about 400 cores, twice that in hardware threads).
MAX_GPUS_PER_NODE = 16
MAX_CPUS_PER_TASK = 1024


def check_flags(args):
    """UserError (one line naming the value and the fix) for --slurm flags that cannot describe a job:
    counts below 1 (GPUs below 0), more GPUs or cores than a node holds (MAX_GPUS_PER_NODE,
    MAX_CPUS_PER_TASK), several CPU-only nodes, a warning not before the time limit."""
    for name in ("nodes", "time_min", "cpus_per_task"):
        if getattr(args, name) < 1:
            raise UserError(f"--{name}={getattr(args, name)}: must be >= 1")
    for name, most, what in (("gpus_per_node", MAX_GPUS_PER_NODE, "GPUs (8 on a DGX/HGX node)"),
                             ("cpus_per_task", MAX_CPUS_PER_TASK, "CPU cores")):
        if getattr(args, name) > most:
            raise UserError(f"--{name}={getattr(args, name)}: more {what} than a node holds (at most {most}): give "
                            f"one node's count; --nodes sets how many nodes")
    if args.gpus_per_node < 0 or args.signal_delay_s < 1:
        raise UserError(f"--gpus_per_node={args.gpus_per_node} / --signal_delay_s={args.signal_delay_s}: need "
                        f">= 0 GPUs and a warning >= 1 s before the limit")
    if args.nodes > 1 and not args.gpus_per_node:
        raise UserError(f"--nodes={args.nodes} with --gpus_per_node=0: several nodes run torchrun over GPUs")
    if args.signal_delay_s >= 60 * args.time_min:
        raise UserError(f"--signal_delay_s={args.signal_delay_s} is not before the end of --time_min="
                        f"{args.time_min}: the warning must come while the job runs")


def submit(runs, args, results, threads=1):
    """Submit each run of `runs` (open: new or partial) that no other submission or job holds
    (take_claim); returns the number of runs whose job failed (known here only for local jobs,
    which this waits for: they are this process's children). The job folder (logs, pickles) is
    <out_root>/slurm."""
    folder = os.path.join(args.out_root, "slurm")
    # the job unpickles TrainJob, which lives in this repository: give the job its path (sbatch and
    # submitit's local processes pass the environment on)
    os.environ["PYTHONPATH"] = os.pathsep.join([ROOT] + [p for p in [os.environ.get("PYTHONPATH")] if p])
    jobs, local = [], False
    for run in runs:
        before = claim_state(run, folder) if os.path.exists(claim_path(run)) else ("open", "")
        if not take_claim(run, folder):
            state, detail = claim_state(run, folder)
            print(f"{state} already: {run['name']} ({detail})")
            continue
        if os.path.exists(os.path.join(results, run["name"] + ".json")):  # its job ended since this one planned
            release(run)
            print(f"recorded already: {run['name']} (by another submission's job)")
            continue
        if before[0] == "failed":
            print(f"resubmitting {run['name']}: its last {before[1]}")
        ex = executor(folder, args, run["name"])
        local = not isinstance(ex, import_submitit().SlurmExecutor)
        try:
            job = ex.submit(TrainJob(run, results, args.gpus_per_node, args.nodes, threads, grace_s(args)))
        except BaseException:
            release(run)
            raise
        # a local job's id is its controller's pid: meaningful on this host only, so the host is kept
        write_claim(run, f"job {job.job_id}" + (f" local {socket.gethostname()}" if local else ""))
        print(f"submitted {run['name']}: job {job.job_id}", flush=True)
        jobs.append((run, job))
    failed = 0
    if local:  # local processes end with this one: wait for them, as a local sweep does
        for run, job in jobs:
            try:
                print(f"recorded {job.result()}", flush=True)
            except Exception:  # train.py's exit and last error line, as the job left them in the claim
                failed += 1
                state, detail = claim_state(run, folder)
                print(f"FAILED {run['name']} ({detail if state == 'failed' else f'job {job.job_id}: {state}'})",
                      flush=True)
    return failed


def status(runs, states, folder):
    """--status: each planned run as recorded, queued, running, failed (train.py's exit status and last
    error line), waiting (for its LR sweep) or open; returns how many failed."""
    failed = 0
    for run, st in zip(runs, states):
        if st in ("recorded", "waiting"):
            print(f"  {st:9s} {run['name']}")
            continue
        state, detail = claim_state(run, folder)
        state = {"stale": "open", "submitting": "queued"}.get(state, state)
        failed += state == "failed"
        print(f"  {state:9s} {run['name']}" + (f" ({detail})" if detail else ""))
    return failed
