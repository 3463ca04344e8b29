"""Prove or break the GPU path in one command; write the numbers to a folder.

    python -m tools.gpu_check --out=gpu_check_out                 # one CUDA GPU: within 9 minutes
    python -m tools.gpu_check --out=/tmp/check --device=cpu       # without CUDA: a CPU-sized run, a few minutes

Stages, each a separate process with its own limit (s, on CUDA); a failure is recorded and the
next stage runs, all in one time budget (--budget_s: 500 s on CUDA, the command within 9 minutes;
a stage the budget no longer covers is skipped and says so). What the goals judge runs first, what
only proves a path runs last, so a short window or a smaller budget cuts the least:
  bench (300)   bench.py at 124M, compile + bf16, 16 x 1024 tokens per micro-step, four legs: baseline
          and unified with the fast paths, and each with its formulas alone (NAME:formulas, --fused=False),
          each leg's peak memory alone in its process: step-time and memory ratios like for like (fast
          against fast, formulas against formulas), tokens/s, MFU, the mechanism statistics' share, the
          host's ms to issue a step, and the graphs compiled for one more step and at a new batch shape
  train (120)   200 iterations of configs/unified_124m.py (one micro-step per iteration, the bench's
          model and batch) on a synthetic dataset: the validation loss must fall; its ms per
          iteration over the bench's step
  resume (75)   that run resumed for 20 more iterations: the log continues, no loss jump; 15 of them
          profiled (tools.step_profile --syncs): host syncs per iteration
  profile (100) tools.step_profile at the bench's shape: baseline, unified and nanoGPT's GPT-2, 2
          profiled steps each after 5 timed ones: kernel time by kind (GEMM, attention, inductor's
          generated kernels, other), kernels per step, the baseline's step time per FLOP over GPT-2's
  ddp (75)      torchrun --nproc_per_node=1 train.py: the DDP path under NCCL, compiled and bf16 as
          in the configs (a small model)
  fsdp (75)     torchrun over every GPU with --fsdp=True (FSDP2, a small model), where there are 2
          or more (else skipped, said so): trains, saves its sharded checkpoint, and resumes from
          it for 5 more iterations
  protocol (100)  bench.py's baseline at the 0.12B protocol's own shape (configs/ablations/c8_d012.py:
          12 x 768, context 2048, 16 sequences a micro-step), compile + bf16: the tokens/s and MFU
          that research.ladder --gpu_check turns into GPU-hours
  bench_1b (100)  bench.py at the 1B width (configs/ablations/ladder.py's d1: n_embd 2048, 16 heads,
          context 2048), 4 of its 18 layers, 8 sequences, baseline vs unified: the step-time ratio
  tests (120)   pytest -k cuda tests/test_devices.py: bf16 autocast per variant, folding under
          bf16, fused AdamW, torch.optim.Muon, torch.compile (dense and MoE), sampling, checkpoints
          moved between CUDA and CPU
Measured on one H200 with older code (s): tests 88, ddp 48, bench 157 (two legs), protocol 53; the rest
not yet. Where the stages pass the budget the last ones (tests, then bench_1b, protocol) are skipped:
a larger --budget_s runs them.
Without CUDA (or with --device=cpu) each stage runs a tiny equivalent (gloo for the ddp stage, 2
gloo processes for fsdp, bench, profile and train on a small model, a few iterations) and the
summary says that CUDA was absent; the goals are then reported, not judged.
The CPU limits follow the machine: a probe (cpu_slowdown) measures how much
slower than a free 2-core machine it runs now, and every limit is scaled by that.

Data: written by this script, no network needed: token ids of a fixed random
Markov chain over n_states token ids out of GPT-2's 50257 (512 on the CPU),
each state with 4 successors of random probabilities. Its entropy rate
(nats/token) is the floor of the loss, reported beside it; a model that learns
the transitions falls from ln(50257) = 10.8 towards it.

Outputs in --out: summary.json (every stage: ok, seconds, numbers, error; the goals, each judged),
<stage>.log (each stage's full output), train_log.jsonl (the run's log). Goals (GOALS: benchmarks,
not tests; printed with pass/FAIL on CUDA): unified/baseline step time <= 1.02 and peak memory
<= 1.01 at 124M, step time <= 1.02 at the 1B width, the baseline's step per FLOP <= GPT-2's, the
baseline's MFU >= 45% at 124M, the training loop <= 1.03x the bench's step, the mechanism
statistics <= 2% of a step. Exit status 1 if a stage failed, else 0.
"""

import argparse
import datetime
import json
import math
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field

if __package__ in (None, ""):  # run by its path: imports live at the repository root
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from plumbing import common  # noqa: E402  (no torch at import)
from configurator import folder_problem  # noqa: E402  (a leaf: no torch)

common.set_omp_env()  # before torch loads: idle OpenMP threads sleep instead of spinning

from tools.gpu_report import bench_config, comparison, judge_goals, loop_vs_bench, report  # noqa: E402

import numpy as np  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the repository
# Per device: stage timeouts (s), dataset size, and the small models of the CPU run.
SIZES = {
    "cuda": dict(timeouts=dict(tests=120, ddp=75, fsdp=75, bench=300, profile=100, train=120, resume=75, bench_1b=100,
                               protocol=100), n_states=2048, vocab_size=50257, n_train=8_000_000, n_val=500_000,
                 train_iters=200, resume_iters=20, syncs="2:15"),
    "cpu": dict(timeouts=dict(tests=60, ddp=60, fsdp=60, bench=90, profile=60, train=60, resume=60, bench_1b=60,
                              protocol=60), n_states=64, vocab_size=512, n_train=200_000, n_val=20_000, train_iters=30,
                resume_iters=5, syncs="1:3"),
}  # syncs: the resume's iterations START:COUNT profiled for host syncs (after START: the first ones compile)
TINY = ["--n_layer=2", "--n_head=2", "--n_embd=64", "--block_size=64"]
# The 0.12B protocol's shape (configs/ablations/c8_d012.py's setting, the ladder's smallest rung): its
# micro-batch of 16 x 2048 tokens on GPT-2 small; on the CPU, TINY at twice its context.
PROTOCOL = {"cuda": ["configs/baseline_124m.py", "--block_size=2048", "--batch_size=16", "--compile=True",
                     "--dtype=bfloat16", "--steps=10", "--warmup=3", "--memory=False"],
            "cpu": [*TINY[:-1], "--block_size=128", "--batch_size=2", "--vocab_size=512", "--steps=2", "--warmup=1",
                    "--memory=False", "--device=cpu"]}
# The 1B width: configs/ablations/ladder.py's d1 rung (n_embd 2048, 16 heads, context 2048) at 4 of its 18 layers
# (the head then weighs more in a step than at 18) and 8 sequences; on the CPU, TINY at twice its width.
WIDTH_1B = {"cuda": ["configs/baseline_124m.py", "--n_layer=4", "--n_embd=2048", "--n_head=16", "--block_size=2048",
                     "--batch_size=8", "--compile=True", "--dtype=bfloat16", "--steps=10", "--warmup=2", "--memory=False"],
            "cpu": [*TINY[:2], "--n_embd=128", "--block_size=64", "--batch_size=2", "--vocab_size=512", "--steps=2",
                    "--warmup=1", "--memory=False", "--device=cpu"]}
# The bench's legs: each variant with the fast paths and with its formulas alone, so each ratio is like for like.
BENCH_LEGS = ("baseline", "unified", "baseline:formulas", "unified:formulas")
# The CPU limits above fit a free 2-core machine whose probe (cpu_slowdown) takes this long; a
# slower or busier machine gets them multiplied by its measured slowdown.
PROBE_REFERENCE_S = 0.095  # measured: 0.094-0.096 s on that machine, idle (torch 2.13, 2 threads)


def write_markov_dataset(folder, n_states, n_train, n_val, vocab_size=50257, branching=4, seed=0):
    """Write train.bin / val.bin (uint16) sampled from a fixed random Markov chain; no meta.pkl.

    The chain lives on n_states distinct token ids drawn from [0, vocab_size); each
    state moves to `branching` random states with Dirichlet(1) probabilities.
    Sampled as 1024 independent chains, concatenated (a boundary is one random jump). Returns the entropy rate
    H = -sum_s pi_s sum_t P(s, t) ln P(s, t) in nats/token (pi: the stationary
    distribution, by power iteration): no model's expected loss is below it.
    """
    rng = np.random.default_rng(seed)
    ids = rng.choice(vocab_size, n_states, replace=False).astype(np.uint16)
    succ = rng.integers(0, n_states, (n_states, branching))
    probs = rng.dirichlet(np.ones(branching), n_states)
    P = np.zeros((n_states, n_states))
    np.add.at(P, (np.repeat(np.arange(n_states), branching), succ.ravel()), probs.ravel())
    pi = np.full(n_states, 1.0 / n_states)
    for _ in range(500):
        pi = 0.5 * pi + 0.5 * pi @ P  # lazy chain: converges even if P is periodic
    with np.errstate(divide="ignore", invalid="ignore"):
        entropy = float(-(pi[:, None] * np.where(P > 0, P * np.log(P), 0.0)).sum())
    cum = probs.cumsum(axis=1)
    os.makedirs(folder, exist_ok=True)
    for split, n in (("train", n_train), ("val", n_val)):
        chains, length = 1024, -(-n // 1024)
        state = rng.integers(0, n_states, chains)
        out = np.empty((chains, length), dtype=np.uint16)
        for t in range(length):
            out[:, t] = ids[state]
            pick = (rng.random(chains)[:, None] > cum[state]).sum(axis=1).clip(max=branching - 1)
            state = succ[state, pick]
        out.ravel()[:n].tofile(os.path.join(folder, f"{split}.bin"))
    return entropy


def cpu_slowdown(reference_s=PROBE_REFERENCE_S, repeats=3):
    """How many times slower this CPU is now than the one the CPU limits were sized on (>= 1.0).

    Times a fixed float32 workload on torch's threads (forward and backward of a width-256 MLP
    on 64 rows, 100 times: about 10 GFLOP), the median of `repeats`, against reference_s, so a
    slow machine, or a busy one (another process on its cores), gets limits in proportion.
    """
    import torch

    gen = torch.Generator().manual_seed(0)
    x = torch.randn(64, 256, generator=gen)
    ws = [torch.randn(256, 256, generator=gen, requires_grad=True) for _ in range(4)]
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(100):
            h = x
            for w in ws:
                h = torch.tanh(h @ w)
            h.sum().backward()
        times.append(time.perf_counter() - t0)
    return max(1.0, sorted(times)[len(times) // 2] / reference_s)


# -----------------------------------------------------------------------------
# Running a stage


def stage_commands(device, work, out, gpus=0):
    """{stage: argv} of every stage for device "cuda" or "cpu" (sizes from SIZES); gpus: how many
    processes the fsdp stage runs on CUDA (2 gloo processes on the CPU).

    Paths: work/markov (the dataset), work/ddp, work/fsdp and work/train (run folders), out (the
    junit file). "fsdp" is a list of two commands: the run, then its resume.
    """
    size, py = SIZES[device], sys.executable
    data = [f"--dataset={os.path.join(work, 'markov')}", f"--vocab_size={size['vocab_size']}", "--sample_tokens=0",
            f"--device={device}"]
    run_dir, total = os.path.join(work, "train"), size["train_iters"] + size["resume_iters"]
    if device == "cuda":  # the bench's shape (and the profile's): the train stage's model and batch
        shape = ["configs/unified_124m.py", "--batch_size=16", "--block_size=1024", "--compile=True", "--dtype=bfloat16"]
        bench = [*shape, "--steps=20", "--warmup=3", "--saved=False"]  # the saved bytes: counted in the suite
        train = [py, "train.py", "configs/unified_124m.py", "--gradient_accumulation_steps=1", "--warmup_iters=20",
                 "--eval_interval=100", "--eval_iters=10", "--log_interval=20"]
    else:
        shape = [*TINY, "--batch_size=8", "--vocab_size=512", "--device=cpu"]
        bench = [*shape, "--steps=3", "--warmup=1", "--memory=True"]
        train = [py, "train.py", *TINY, "--batch_size=8", "--warmup_iters=5", "--eval_interval=15", "--eval_iters=4",
                 "--log_interval=10", "--learning_rate=1e-2", "--min_lr=1e-3"]
    bench = [py, "-m", "tools.bench", *bench, f"--variants={','.join(BENCH_LEGS)}", f"--json={os.path.join(out, 'bench.json')}"]
    select = ["-k", "cuda" if device == "cuda" else "cpu and fused_adamw"]  # the CPU cases run in the suite
    fsdp = [py, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={gpus if device == 'cuda' else 2}",
            "train.py"]
    fsdp_dir = f"--out_dir={os.path.join(work, 'fsdp')}"
    return {
        "tests": [py, "-m", "pytest", "-q", "-rs", "tests/test_devices.py",
                  f"--junitxml={os.path.join(out, 'tests.xml')}", *select],
        "ddp": [py, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=1", "train.py", *TINY,
                "--batch_size=8", "--max_iters=10", "--eval_interval=10", "--eval_iters=2", "--log_interval=5",
                f"--compile={device == 'cuda'}", f"--out_dir={os.path.join(work, 'ddp')}", *data],
        "fsdp": [[*fsdp, *TINY, "--fsdp=True", "--batch_size=8", "--gradient_accumulation_steps=2", "--max_iters=10",
                  "--eval_interval=5", "--eval_iters=3", "--log_interval=5", fsdp_dir, *data],
                 [*fsdp, "--init_from=resume", "--max_iters=15", fsdp_dir]],
        "bench": bench,
        "profile": [py, "-m", "tools.step_profile", *shape, "--variants=baseline,unified,gpt2", "--steps=5", "--warmup=2",
                    "--profile_steps=2", f"--json={os.path.join(out, 'profile.json')}"],
        "train": [*train, f"--max_iters={size['train_iters']}", f"--out_dir={run_dir}", *data],
        "resume": [py, "-m", "tools.step_profile", f"--syncs={size['syncs']}", f"--json={os.path.join(out, 'syncs.json')}",
                   "--", "train.py", "--init_from=resume", f"--out_dir={run_dir}", f"--max_iters={total}"],
        "bench_1b": [py, "-m", "tools.bench", *WIDTH_1B[device], "--variants=baseline,unified", "--saved=False",
                     f"--json={os.path.join(out, 'bench_1b.json')}"],
        "protocol": [py, "-m", "tools.bench", *PROTOCOL[device], "--variants=baseline", "--saved=False",
                     f"--json={os.path.join(out, 'protocol.json')}"],
    }


def run_command(name, cmd, timeout, out):
    """Run cmd in its own process group, output to <out>/<name>.log; kill the group on timeout.

    Returns (result dict: rc (None on timeout), seconds, log, timeout_s; the output text).
    """
    log_path = os.path.join(out, f"{name}.log")
    t0 = time.perf_counter()
    with open(log_path, "w") as log:
        log.write("$ " + " ".join(shlex.quote(c) for c in cmd) + "\n")
        log.flush()
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT, start_new_session=True,
                                env={**os.environ, "PYTHONUNBUFFERED": "1"})
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # torchrun's and bench's children too
            proc.wait()
            rc = None
    with open(log_path) as f:
        text = f.read()
    result = {"rc": rc, "seconds": round(time.perf_counter() - t0, 1), "timeout_s": round(timeout), "log": f"{name}.log"}
    if rc is None:
        result["error"] = f"timed out after {timeout:.0f} s"
    elif rc != 0:
        tail = [ln for ln in text.strip().splitlines() if ln.strip()][-3:]
        result["error"] = f"exit status {rc}: " + " | ".join(tail)[-500:]
    return result, text


def parse_junit(path):
    """{passed, failed: [names], skipped} from a pytest --junitxml file."""
    cases = ET.parse(path).getroot().iter("testcase")
    passed, failed, skipped = 0, [], 0
    for case in cases:
        kinds = {child.tag for child in case}
        if kinds & {"failure", "error"}:
            failed.append(case.get("name"))
        elif "skipped" in kinds:
            skipped += 1
        else:
            passed += 1
    return {"passed": passed, "failed": failed, "skipped": skipped}


def read_bench(path, variants):
    """bench.py --json's {variant: {params, ms_per_step, ratio, per_flop, tokens_per_s, mfu_percent,
    peak_mib, memory_ratio}}; ValueError if a variant is missing."""
    with open(path) as f:
        rows = json.load(f)["variants"]
    missing = [v for v in variants if v not in rows]
    if missing:
        raise ValueError(f"bench.py wrote no row for {missing}")
    return rows


TRAIN_SPEED = re.compile(r"\| ([\d.]+)([kM]?) tok/s \| \d+ ms/iter(?: \| MFU ([\d.]+)%)?")  # ops.fmt_rate's units


def mean(values):
    return sum(values) / len(values) if values else float("nan")


# -----------------------------------------------------------------------------


@dataclass
class Check:
    """What the stages share: the device ("cuda" | "cpu"), SIZES[device], the commands of
    stage_commands, the output folder, the training run's folder, the dataset's entropy rate, the
    number of CUDA devices (0 on the CPU) and the results of the stages run so far (by name)."""

    device: str
    size: dict
    commands: dict
    out: str
    run_dir: str
    entropy: float
    gpus: int
    results: dict = field(default_factory=dict)


def stage_tests(check, timeout):
    junit = os.path.join(check.out, "tests.xml")
    result, _ = run_command("tests", check.commands["tests"], timeout, check.out)
    if os.path.exists(junit):
        result.update(parse_junit(junit))
        if result["failed"]:
            result["error"] = f"failed: {', '.join(result['failed'])}"
        elif result["passed"] == 0:
            result["error"] = "no test ran (all skipped or deselected)"
    return result


def stage_ddp(check, timeout):
    result, text = run_command("ddp", check.commands["ddp"], timeout, check.out)
    backend = "nccl" if check.device == "cuda" else "gloo"
    result["backend_seen"] = f"(DDP, {backend})" in text
    if result["rc"] == 0 and not result["backend_seen"]:
        result["error"] = f"train.py did not report running under DDP with {backend}"
    return result


def stage_fsdp(check, timeout):
    from plumbing.ops import read_log

    if check.device == "cuda" and check.gpus < 2:
        return {"rc": 0, "seconds": 0, "not_run": f"FSDP2 needs 2 or more GPUs; this machine has {check.gpus}"}
    t0 = time.perf_counter()
    result, text = run_command("fsdp", check.commands["fsdp"][0], timeout, check.out)
    if result["rc"] == 0:
        result, more = run_command("fsdp_resume", check.commands["fsdp"][1], timeout - result["seconds"], check.out)
        text += more
    result["seconds"] = round(time.perf_counter() - t0, 1)
    backend = "nccl" if check.device == "cuda" else "gloo"
    result["backend_seen"] = f"(FSDP2, {backend})" in text
    log_path = os.path.join(os.path.dirname(check.run_dir), "fsdp", "log.jsonl")
    if result["rc"] == 0:
        rows = read_log(log_path)
        result["val_loss"] = {r["iter"]: round(r["val_loss"], 4) for r in rows if r["kind"] == "eval"}
        if not result["backend_seen"]:
            result["error"] = f"train.py did not report running under FSDP2 with {backend}"
        elif [r["iter"] for r in rows if r["kind"] == "train"] != list(range(1, 16)):
            result["error"] = "the log's train iterations are not 1..15 once each after the resume"
    return result


def stage_bench(check, timeout):
    result, _ = run_command("bench", check.commands["bench"], timeout, check.out)
    if result["rc"] == 0:
        with open(os.path.join(check.out, "bench.json")) as f:
            result.update({k: v for k, v in json.load(f).items() if k in ("tokens_per_step", "dtype", "compile")})
        result["variants"] = rows = read_bench(os.path.join(check.out, "bench.json"), BENCH_LEGS)
        result["step_time_ratio"] = rows["unified"]["ratio"]  # fast against fast
        result["memory_ratio"] = rows["unified"]["memory_ratio"]
        formulas = rows["unified:formulas"], rows["baseline:formulas"]  # formulas against formulas
        result["formulas_step_time_ratio"] = formulas[0]["ms_per_step"] / formulas[1]["ms_per_step"]
        result["formulas_memory_ratio"] = (formulas[0]["peak_mib"] / formulas[1]["peak_mib"]
                                           if formulas[0].get("peak_mib") and formulas[1].get("peak_mib") else None)
        result["baseline_mfu"] = rows["baseline"]["mfu_percent"]
        share = rows["unified"].get("mechanism_share")
        result["mechanism_percent"] = None if share is None else 100 * share
        result["host_ms_per_step"] = {v: rows[v].get("host_ms_per_step") for v in ("baseline", "unified")}
        result["recompiles"] = {v: rows[v].get("recompiles") for v in ("baseline", "unified")}
    return result


def stage_profile(check, timeout):
    result, _ = run_command("profile", check.commands["profile"], timeout, check.out)
    if result["rc"] == 0:
        with open(os.path.join(check.out, "profile.json")) as f:
            found = json.load(f)
        result["variants"] = {n: {k: r[k] for k in ("ms", "ms_total", "kernels", "ms_per_step", "top")}
                              for n, r in found["variants"].items()}
        result["baseline_vs_gpt2"] = found["baseline_vs_gpt2_per_flop"]
        result["unit"] = "device kernels" if found["device"].startswith("cuda") else "CPU ops (self time)"
    return result


def stage_bench_1b(check, timeout):
    cmd = check.commands["bench_1b"]
    result, _ = run_command("bench_1b", cmd, timeout, check.out)
    if result["rc"] == 0:
        rows = read_bench(os.path.join(check.out, "bench_1b.json"), ["baseline", "unified"])
        c = bench_config(cmd[cmd.index("tools.bench") + 1:])
        result.update(step_time_ratio_1b=rows["unified"]["ratio"], ms_per_step=rows["baseline"]["ms_per_step"],
                      baseline_mfu=rows["baseline"]["mfu_percent"], shape=f"{c['n_layer']} layers of width "
                      f"{c['n_embd']}, {c['batch_size']} x {c['block_size']} tokens")
    return result


def stage_protocol(check, timeout):
    result, _ = run_command("protocol", check.commands["protocol"], timeout, check.out)
    if result["rc"] == 0:
        row = read_bench(os.path.join(check.out, "protocol.json"), ["baseline"])["baseline"]
        result.update(tokens_per_s=row["tokens_per_s"], mfu_percent=row["mfu_percent"])
    return result


def stage_train(check, timeout):
    from plumbing.ops import read_log
    from configurator import load_config

    cmd = check.commands["train"]
    cfg = load_config(cmd[cmd.index("train.py") + 1:])[0]
    result, text = run_command("train", cmd, timeout, check.out)
    result.update(tokens_per_iter=cfg["batch_size"] * cfg["block_size"] * cfg["gradient_accumulation_steps"],
                  compile=cfg["compile"], dtype=cfg["dtype"] if cfg["dtype"] != "auto" else
                  "bfloat16" if check.device == "cuda" else "float32")
    params, speed = re.search(r"parameters: ([\d,]+) \(", text), TRAIN_SPEED.findall(text)
    result["params"] = int(params[1].replace(",", "")) if params else None
    if speed:  # the last progress line (tokens/s to 3 digits; its ms are whole): the training loop itself
        rate, unit, mfu = speed[-1]
        result["tokens_per_s"] = float(rate) * {"": 1, "k": 1e3, "M": 1e6}[unit]
        result["mfu_percent"] = float(mfu) if mfu else None
        result["ms_per_iter"] = 1000 * result["tokens_per_iter"] / result["tokens_per_s"]
    result["loop_vs_bench"], note = loop_vs_bench(result, check.results.get("bench", {}))
    if note:
        result["loop_vs_bench_note"] = note
    log_path = os.path.join(check.run_dir, "log.jsonl")
    if os.path.exists(log_path):
        shutil.copy(log_path, os.path.join(check.out, "train_log.jsonl"))
        evals = [r for r in read_log(log_path) if r["kind"] == "eval"]
        result["val_loss"] = {r["iter"]: round(r["val_loss"], 4) for r in evals}
        result["entropy_rate"] = round(check.entropy, 4)
        if result["rc"] == 0:
            first, last = evals[0]["val_loss"], evals[-1]["val_loss"]
            result["loss_fell"] = last < first - 1.0
            if not result["loss_fell"]:
                result["error"] = f"val loss {first:.3f} -> {last:.3f}: fell by less than 1 nat"
    return result


def stage_resume(check, timeout):
    from plumbing.ops import read_log

    total, n = check.size["train_iters"] + check.size["resume_iters"], check.size["resume_iters"]
    result, _ = run_command("resume", check.commands["resume"], timeout, check.out)
    if result["rc"] == 0:
        rows = [r for r in read_log(os.path.join(check.run_dir, "log.jsonl")) if r["kind"] == "train"]
        shutil.copy(os.path.join(check.run_dir, "log.jsonl"), os.path.join(check.out, "train_log.jsonl"))
        before = mean([r["loss"] for r in rows if total - 2 * n < r["iter"] <= total - n])
        after = mean([r["loss"] for r in rows if r["iter"] > total - n])
        result.update(loss_before=round(before, 4), loss_after=round(after, 4))
        if [r["iter"] for r in rows] != list(range(1, total + 1)):
            result["error"] = "the log's train iterations are not 1..max_iters once each after the resume"
        elif not after < before + 0.1:  # a lost optimizer state shows as a jump
            result["error"] = f"loss jumped on resume: {before:.3f} before, {after:.3f} after"
    if result["rc"] == 0:  # tools.step_profile --syncs wrote what its profiled iterations waited for
        with open(os.path.join(check.out, "syncs.json")) as f:
            syncs = json.load(f)
        result.update(host_syncs_per_iter=syncs.get("host_syncs_per_iter"), sync_iters=syncs["iterations"],
                      scalar_reads_per_iter=syncs.get("scalar_reads_per_iter"), **{"syncs_note": syncs["error"]}
                      if "error" in syncs else {})
    return result


# The stages, in their order: name -> stage(check, timeout) -> result dict (rc, seconds, error, ...). What the goals
# judge first (the bench, then the loop it is compared with, warmed by the bench's compiled graphs), what only
# proves a path runs last: the budget cuts from the end.
STAGES = {"bench": stage_bench, "train": stage_train, "resume": stage_resume, "profile": stage_profile, "ddp": stage_ddp,
          "fsdp": stage_fsdp, "protocol": stage_protocol, "bench_1b": stage_bench_1b, "tests": stage_tests}


def run_stages(check, summary, timeouts, budget, t_start):
    """Run STAGES in order within the budget, each within its limit; summary.json after each."""
    for name, fn in STAGES.items():
        timeout = min(timeouts[name], budget - (time.perf_counter() - t_start))
        if timeout < 5:  # not run is not failed: the summary says so, and what runs it
            result = {"ok": None, "skipped": f"the {budget:.0f} s budget is spent (a larger --budget_s runs it)"}
        else:
            print(f"[{name}] running (timeout {timeout:.0f} s)", flush=True)
            try:
                result = fn(check, timeout)
                result["ok"] = result.get("ok", True) and result["rc"] == 0 and "error" not in result
            except Exception as e:  # a parsing fault is this stage's failure, not the script's
                result = {"ok": False, "error": f"{type(e).__name__}: {e}"}
        summary["stages"][name] = result
        status = "ok" if result["ok"] else f"skipped: {result['skipped']}" if result["ok"] is None else \
            f"FAILED ({result.get('error', '')})"
        print(f"[{name}] {status} in {result.get('seconds', 0)} s", flush=True)
        with open(os.path.join(check.out, "summary.json"), "w") as f:  # after every stage: a kill loses nothing
            json.dump(summary, f, indent=2)


def main(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, help="folder for summary.json and the logs (created)")
    p.add_argument("--device", default="auto", choices=["auto", "cuda", "cpu"],
                   help="auto: cuda when available, else the CPU-sized run")
    p.add_argument("--budget_s", type=float, default=0,
                   help="total time for all stages (0: 500 on CUDA, 240 on CPU times its measured slowdown)")
    p.add_argument("--work", default="", help="folder for the dataset and checkpoints (default: a temporary one, removed)")
    args = p.parse_args(argv)
    if not math.isfinite(args.budget_s):
        sys.exit(f"error: --budget_s={args.budget_s}: not a number of seconds: give the seconds all stages may take "
                 f"together, or 0 for the default (500 on CUDA)")
    for flag, folder in (("--out", args.out), ("--work", args.work)):
        problem = (folder_problem(folder) if folder.strip() else "empty: name a folder") \
            if folder or flag == "--out" else None
        if problem:
            sys.exit(f"error: {flag}={folder!r}: {problem}")

    import torch  # after argparse: --help is instant

    cuda_available = torch.cuda.is_available()
    if args.device == "cuda" and not cuda_available:
        sys.exit("error: --device=cuda but CUDA is not available: use --device=auto or --device=cpu")
    device = "cuda" if args.device == "cuda" or (args.device == "auto" and cuda_available) else "cpu"
    size = SIZES[device]
    slowdown = 1.0 if device == "cuda" else round(cpu_slowdown(), 2)
    timeouts = {name: limit * slowdown for name, limit in size["timeouts"].items()}
    budget = args.budget_s or (500 if device == "cuda" else 240 * slowdown)  # CUDA: the command within 9 minutes
    args.out = os.path.abspath(args.out)  # the stages run with cwd = the repository
    os.makedirs(args.out, exist_ok=True)
    work = args.work or tempfile.mkdtemp(prefix="gpu_check_")
    os.makedirs(work, exist_ok=True)
    t_start = time.perf_counter()
    summary = {
        "device": device, "cuda_available": cuda_available,
        "gpu": torch.cuda.get_device_name(0) if cuda_available else None,
        "torch": torch.__version__, "cuda": torch.version.cuda,
        "nccl": str(torch.cuda.nccl.version()) if cuda_available else None,
        "started": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "budget_s": round(budget), "cpu_slowdown": slowdown if device == "cpu" else None, "stages": {},
    }
    if device == "cpu":
        summary["note"] = ("CUDA absent: CPU-sized equivalent (tiny models, gloo); goals not judged" if not cuda_available
                           else "--device=cpu: CPU-sized equivalent on a machine with CUDA; goals not judged")
    print(f"gpu_check: {device} ({summary['gpu'] or 'no CUDA'}), torch {torch.__version__}; out {args.out}", flush=True)
    if "note" in summary:
        print(f"gpu_check: {summary['note']}", flush=True)
    if slowdown > 1.0:
        print(f"gpu_check: this CPU runs {slowdown:.1f}x slower than the one its limits were sized on (slow or "
              f"busy): every stage limit and the budget scaled by {slowdown:.1f}", flush=True)

    dataset = os.path.join(work, "markov")
    entropy = write_markov_dataset(dataset, size["n_states"], size["n_train"], size["n_val"], size["vocab_size"])
    summary["dataset"] = {"kind": "synthetic Markov chain (written by gpu_check.py)", "n_states": size["n_states"],
                          "vocab_size": size["vocab_size"],
                          "train_tokens": size["n_train"], "entropy_rate": round(entropy, 4)}
    gpus = torch.cuda.device_count() if device == "cuda" else 0
    check = Check(device, size, stage_commands(device, work, args.out, gpus), args.out, os.path.join(work, "train"),
                  entropy, gpus, results=summary["stages"])
    if device == "cuda":
        os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", os.path.join(work, "inductor"))  # bench warms train
    run_stages(check, summary, timeouts, budget, t_start)

    judged = device == "cuda"
    summary["goals"] = judge_goals(summary, judged)
    summary["compare"] = comparison(summary, check.commands["train"], PROTOCOL[device], size["vocab_size"])
    summary["ok"] = all(s["ok"] is not False for s in summary["stages"].values())  # a skipped stage is no failure
    summary["total_s"] = round(time.perf_counter() - t_start, 1)
    with open(os.path.join(args.out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=2)
    if not args.work:
        shutil.rmtree(work, ignore_errors=True)
    report(summary, judged, entropy, args.out)
    return 0 if summary["ok"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
