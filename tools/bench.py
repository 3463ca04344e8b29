"""Step time, throughput and memory of each scale-vector variant against the baseline.

    python -m tools.bench                                    # default CPU model, every dense variant
    python -m tools.bench --variants=unified,unified_moe     # dense vs top-2 MoE of equal active parameters
    python -m tools.bench configs/unified_124m.py --batch_size=1 --block_size=256 --variants=baseline,unified
    python -m tools.bench configs/unified_124m.py --compile=True   # on a GPU: tokens/s, MFU, memory
    python -m tools.bench --memory=True                      # CPU: also the peak RSS of each variant
    python -m tools.bench --variants=gpt2,baseline,unified   # against nanoGPT's GPT-2 at equal FLOPs
    python -m tools.bench --shared=True --variants=unified   # CPU: alone vs beside a copy of itself
    python -m tools.bench --variants=baseline,unified,baseline:formulas,unified:formulas   # fast paths vs formulas

Each variant (tools/variants.py) is the config's size and training keys with the baseline's
scale switches (BASELINE) plus its own overrides (variants()): the config's own scale
switches do not apply; NAME:formulas is the variant under --fused=False (its formulas alone, every
fast path of plumbing/fused.py off), so one run sets fast against formulas like for like. Every
variant trains on the same synthetic batch; one step of each variant is
timed in turn (interleaved), so machine noise hits all of them alike, and
the median over steps after warm-up is reported with its ratio to the
baseline. Memory (--memory=True, the default on CUDA): each variant alone in
a separate process, torch.cuda.max_memory_allocated on CUDA, the peak RSS on
CPU (it includes the Python/torch runtime, so only differences between
variants mean much). Config keys as in train.py; bench-only options:
--variants, --steps, --warmup, --memory, --json=PATH (the table as JSON, for scripts),
--shared, --saved=False (no saved-bytes columns: compiled, it compiles a block and a 1-layer model per
variant twice).

"saved B/token: layer (ratio), outside": what one block keeps for its backward, per token, with its
ratio to the first variant's, and what the model keeps outside its blocks (embedding, final norm,
head, loss) per token (variants.saved_bytes): counts, not times, of the code path a CUDA run takes,
the same on any device.

"stats %": the mechanism statistics' cost (mechanism.Mechanism: under mechanism_stats train.py
reads the gradients at every step, record_step, and computes the row at every eval) as a share of
the training between two evals: (the median time of one row and its new copy + eval_interval x
that of one record_step) / (eval_interval x the median step time), at the config's eval_interval
(max_iters when it is 0); measured for every variant, whatever mechanism_stats says.

--shared=True (CPU) measures a shared machine: the first variant's step time
in one process alone, then in two identical processes at once on the same
cores, under each OpenMP setting of SHARED_SETTINGS (OpenMP's default spins
its idle threads, which starves a second process; train.py sets OMP_THREAD_ENV).
"""

import os
import sys

if __package__ in (None, ""):  # run by its path (python tools/bench.py): its imports live at the repository root
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from plumbing import common  # noqa: E402 (from the repository root, the path above)

common.set_omp_env()  # before torch loads: idle OpenMP threads sleep instead of spinning

import json
import resource
import statistics
import subprocess
import tempfile
import time
from contextlib import nullcontext
from types import SimpleNamespace

import torch

from plumbing.common import OMP_THREAD_ENV, cli, peak_flops, resolve_device
from configurator import UserError, load_config, usage
from plumbing.mechanism import Mechanism
from model import GPT
from tools.variants import FORMULAS, REFERENCE, build, leg, saved_bytes, train_step, variants

# --shared=True: environment of each process (set before torch loads); None: unset.
_UNSET = {"OMP_WAIT_POLICY": None, "GOMP_SPINCOUNT": None, "OMP_NUM_THREADS": None}
SHARED_SETTINGS = {
    "OpenMP default (spin)": _UNSET,
    "train.py's default": {**_UNSET, **OMP_THREAD_ENV},
    "GOMP_SPINCOUNT=10000": {**_UNSET, "GOMP_SPINCOUNT": "10000"},
    "OMP_NUM_THREADS=1": {**_UNSET, "OMP_NUM_THREADS": "1"},
}
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the repository: bench runs as python -m tools.bench
def peak_rss_mib():
    """Peak resident memory of this process in MiB: VmHWM on Linux (reset at exec, unlike
    ru_maxrss, which a child inherits from its parent), else ru_maxrss."""
    try:
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) / 1024 for line in f if line.startswith("VmHWM:"))
    except (OSError, StopIteration):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / (2**20 if sys.platform == "darwin" else 1024)


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def parse_options(argv):
    """(bench options, the other arguments for load_config, steps, warmup) of argv; UserError for a
    bad bench option."""
    opts = {"variants": "all", "steps": "20", "warmup": "3", "memory": "auto", "memory_child": "", "json": "",
            "shared": "False", "saved": "True"}
    rest = []
    for a in argv:
        key = a[2:].split("=", 1)[0] if a.startswith("--") else None
        if key in opts:
            opts[key] = a.split("=", 1)[1]
        else:
            rest.append(a)
    try:
        steps, warmup = int(opts["steps"]), int(opts["warmup"])
    except ValueError:
        raise UserError(f"--steps={opts['steps']} / --warmup={opts['warmup']}: expected integers") from None
    if not (1 <= steps <= 10**5 and 0 <= warmup <= 10**5):
        raise UserError(f"--steps={steps} must be in [1, 1e5] and --warmup={warmup} in [0, 1e5]")
    for key in ("shared", "saved"):
        if opts[key] not in ("True", "False"):
            raise UserError(f"--{key}={opts[key]}: expected True or False")
    if opts["memory"] not in ("True", "False", "auto"):
        raise UserError(f"--memory={opts['memory']}: expected True, False or auto")
    return opts, rest, steps, warmup


def time_steps(built, names, steps, warmup, x, y, ctx, device, grad_clip, host=None):
    """{variant: [seconds of each timed step]} of train_step: warm-up (and compile) first, then one
    step of each variant in turn (interleaved, so machine noise hits all alike). host, a dict, gets
    {variant: [seconds the host took to issue each step]}: from the step's start (the device idle)
    until train_step returns, before the device is waited for; on a GPU what Python, guards and
    launches cost a step, which the device's work hides only while it takes longer."""
    times, host = {n: [] for n in names}, host if host is not None else {}
    host.update({n: [] for n in names})
    for n in names:
        for _ in range(warmup):
            train_step(*built[n], x, y, ctx, grad_clip)
        sync(device)
    for _ in range(steps):
        for n in names:
            sync(device)
            t0 = time.perf_counter()
            train_step(*built[n], x, y, ctx, grad_clip)
            host[n].append(time.perf_counter() - t0)
            sync(device)
            times[n].append(time.perf_counter() - t0)
    return times


def recompiles(built, names, x, y, ctx, grad_clip):
    """{variant: graphs torch.compile made for one more step at the timed shape (0: nothing
    recompiles across steps) and for a step at half the batch (a new shape; a run meets one at
    its eval batch or a last partial batch)}; {} when nothing is compiled."""
    from torch._dynamo.utils import counters
    found = {}
    for n in names:
        if built[n][1] is built[n][0]:
            continue
        before = counters["stats"]["unique_graphs"]
        train_step(*built[n], x, y, ctx, grad_clip)
        same = counters["stats"]["unique_graphs"] - before
        half = max(1, x.size(0) // 2)
        train_step(*built[n], x[:half], y[:half], ctx, grad_clip)
        found[n] = {"same_shape": same, "new_batch_shape": counters["stats"]["unique_graphs"] - before - same}
    return found


def time_mechanism(built, names, device, repeats=5):
    """{variant: (median seconds of one eval's mechanism statistics (Mechanism.row: the point-in-time
    statistics, the interval's; then take, the new copy), median seconds of one step's record_step)};
    GPT2Reference has none."""
    found = {}
    for n in names:
        model, _, opts = built[n]
        if not isinstance(model, GPT):
            continue
        mech, per_eval, per_step = Mechanism(model, opts, 0), [], []
        for p in model.parameters():  # record_step reads the gradients: any values time alike
            p.grad = torch.zeros_like(p)
        for k in range(1, repeats + 1):
            sync(device)
            t0 = time.perf_counter()
            mech.record_step()
            sync(device)
            t1 = time.perf_counter()
            mech.row(k)
            mech.take(k)
            sync(device)
            per_step.append(t1 - t0)
            per_eval.append(time.perf_counter() - t1)
        for p in model.parameters():
            p.grad = None
        found[n] = (statistics.median(per_eval), statistics.median(per_step))
        del mech
    return found


def table(built, names, times, mem, tokens, peak, memory_kind, mech=None, interval=1, saved=None, host=None, graphs=None):
    """Print one row per variant (parameters, median ms/step, its ratio to names[0], per FLOP,
    tokens/s, MFU where the peak is known, the mechanism statistics' share of an eval interval of
    `interval` steps (mech: seconds per eval and per step), peak memory, the bytes per token one
    layer keeps for backward with their ratio and what the model keeps outside its blocks (saved:
    saved_bytes's dicts), and the host's ms to
    issue a step (host: time_steps'); returns the rows as dicts (with graphs: recompiles' counts)."""
    mech, saved, host, graphs = mech or {}, saved or {}, host or {}, graphs or {}
    ref = statistics.median(times[names[0]])
    mem_head = f"  peak {memory_kind} MiB (ratio)" if mem else ""
    print(f"{'variant':<18} {'params':>12} {'ms/step':>9} {'ratio':>7} {'per FLOP':>9} {'tok/s':>10}"
          + ("    MFU" if peak else "") + f" {'stats %':>8}" + mem_head + "  saved B/token: layer (ratio), outside  host ms")
    ref_per_flop = ref / built[names[0]][0].flops_per_token()
    rows = {}
    for n in names:
        med = statistics.median(times[n])
        model = built[n][0]
        per_flop = med / model.flops_per_token() / ref_per_flop  # the step-time ratio at equal FLOPs
        line = (f"{n:<18} {model.num_params():>12,} {1000 * med:>9.1f} {med / ref:>7.3f} {per_flop:>9.3f}"
                f" {tokens / med:>10,.0f}")
        if peak:
            line += f" {100 * model.flops_per_token() * tokens / med / peak:>5.1f}%"
        share = (mech[n][0] + interval * mech[n][1]) / (interval * med) if n in mech else None
        line += f" {100 * share:>8.3f}" if share is not None else f" {'-':>8}"
        if mem:
            line += f"  {mem[n]:>9.0f} ({mem[n] / mem[names[0]]:.3f})"
        layer = {k: saved[k]["per_layer"] for k in (n, names[0]) if k in saved}
        saved_ratio = layer[n] / layer[names[0]] if layer.get(n) and layer.get(names[0]) else None
        line += f"  {layer[n]:>9,.0f} ({saved_ratio:.3f}), {saved[n]['outside']:>9,.0f}" if saved_ratio else f"  {'-':>9}"
        host_ms = 1000 * statistics.median(host[n]) if host.get(n) else None
        line += f"  {host_ms:>7.2f}" if host_ms is not None else f"  {'-':>7}"
        print(line)
        rows[n] = dict(params=model.num_params(), ms_per_step=1000 * med, ratio=med / ref, per_flop=per_flop,
                       tokens_per_s=tokens / med,
                       mfu_percent=100 * model.flops_per_token() * tokens / med / peak if peak else None,
                       peak_mib=mem.get(n), memory_ratio=mem[n] / mem[names[0]] if mem else None,
                       mechanism_ms=1000 * mech[n][0] if n in mech else None,
                       mechanism_step_ms=1000 * mech[n][1] if n in mech else None, mechanism_share=share,
                       saved_bytes_per_token_layer=layer.get(n), saved_ratio=saved_ratio,
                       saved_bytes_per_token_outside=saved[n]["outside"] if n in saved else None, host_ms_per_step=host_ms,
                       recompiles=graphs.get(n))
    print(f"ratios are against {names[0]!r}; stats %: the mechanism statistics' share of the {interval} steps "
          f"between two evals")
    return rows


def main(argv):
    if "-h" in argv or "--help" in argv:
        print(usage(__doc__))
        return
    opts, rest, steps, warmup = parse_options(argv)
    if opts["shared"] == "True":
        return shared(rest, opts["variants"].split(",")[0], steps, warmup)
    cfg = SimpleNamespace(**load_config(rest)[0])
    cfg.device, cfg.dtype = resolve_device(cfg.device, cfg.dtype)
    if cfg.vocab_size == 0:
        cfg.vocab_size = 50257 if cfg.n_embd >= 512 else 80
    device = torch.device(cfg.device)
    ctx = torch.autocast(device.type, dtype=torch.bfloat16) if cfg.dtype == "bfloat16" else nullcontext()
    known = variants()
    names = [n for n in known if "moe" not in n] if opts["variants"] == "all" else opts["variants"].split(",")
    for n in names:
        if leg(cfg, n)[1] not in known and leg(cfg, n)[1] != REFERENCE:
            raise UserError(f"unknown variant {n!r}; known: {', '.join(known)}, {REFERENCE} (each also as "
                            f"NAME{FORMULAS}: its formulas alone)")
    gen = torch.Generator().manual_seed(0)
    x = torch.randint(0, cfg.vocab_size, (cfg.batch_size, cfg.block_size), generator=gen).to(device)
    y = torch.randint(0, cfg.vocab_size, (cfg.batch_size, cfg.block_size), generator=gen).to(device)

    if opts["memory_child"]:  # a separate process: one variant, a few steps, its peak memory
        model, step_model, optimizers = build(cfg, opts["memory_child"])
        for _ in range(3):
            train_step(model, step_model, optimizers, x, y, ctx, cfg.grad_clip)
        sync(device)
        print(torch.cuda.max_memory_allocated(device) / 2**20 if device.type == "cuda" else peak_rss_mib())
        return
    mem = {}
    if opts["memory"] == "True" or (opts["memory"] == "auto" and device.type == "cuda"):
        for n in names:  # before this process holds any model
            out = subprocess.run([sys.executable, "-m", "tools.bench", *rest, f"--memory_child={n}"], cwd=ROOT,
                                 capture_output=True, text=True, check=True).stdout
            mem[n] = float(out.strip().splitlines()[-1])
    built = {n: build(cfg, n) for n in names}
    host = {}
    times = time_steps(built, names, steps, warmup, x, y, ctx, device, cfg.grad_clip, host)
    graphs = recompiles(built, names, x, y, ctx, cfg.grad_clip)
    mech = time_mechanism(built, names, device)
    saved = {n: saved_bytes(cfg, n) for n in names} if opts["saved"] == "True" else {}
    tokens = cfg.batch_size * cfg.block_size
    print(f"device {device} ({cfg.dtype}{', compiled' if cfg.compile else ''}), torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads; n_layer={cfg.n_layer} n_embd={cfg.n_embd} "
          f"batch {cfg.batch_size} x block {cfg.block_size}; median of {steps} interleaved steps")
    rows = table(built, names, times, mem, tokens, peak_flops(device) if cfg.dtype == "bfloat16" else None,
                 "allocated" if device.type == "cuda" else "RSS", mech, cfg.eval_interval or cfg.max_iters, saved, host,
                 graphs)
    if graphs:
        print("recompiles (graphs made): " + ", ".join(f"{n} {g['same_shape']} for one more step, {g['new_batch_shape']} "
                                                       f"at half the batch" for n, g in graphs.items()))
    if opts["json"]:
        with open(opts["json"], "w") as f:
            json.dump(dict(device=str(device), dtype=cfg.dtype, compile=cfg.compile, torch=torch.__version__,
                           threads=torch.get_num_threads(), tokens_per_step=tokens, reference=names[0],
                           variants=rows), f, indent=1)


def shared(rest, variant, steps, warmup):
    """Print the step time of `variant` alone and with a copy of itself running at the same time,
    per SHARED_SETTINGS, and the ratios (shared / alone; alone / OpenMP's default alone)."""
    if variant == "all":
        variant = "unified"

    def median_ms(n, env):
        """Median ms/step of each of n identical bench processes started together."""
        with tempfile.TemporaryDirectory() as tmp:
            env = {**{k: v for k, v in os.environ.items() if k not in env}, **{k: v for k, v in env.items() if v}}
            procs = [subprocess.Popen([sys.executable, "-m", "tools.bench", *rest, f"--variants={variant}", f"--steps={steps}",
                                       f"--warmup={warmup}", "--memory=False", f"--json={tmp}/{i}.json"],
                                      env=env, stdout=subprocess.DEVNULL, cwd=ROOT) for i in range(n)]
            if any(p.wait() for p in procs):
                raise UserError(f"a bench process failed: run python -m tools.bench {' '.join(rest)} --variants={variant}")
            return [json.load(open(f"{tmp}/{i}.json"))["variants"][variant]["ms_per_step"] for i in range(n)]

    print(f"{variant}: median ms/step of {steps} steps, one process alone, then two at once "
          f"({os.cpu_count()} cores, torch's default threads per process)")
    print(f"{'setting':<26} {'alone':>8} {'two at once':>14} {'ratio':>7} {'alone vs spin':>14}")
    first = None
    for name, env in SHARED_SETTINGS.items():
        alone = median_ms(1, env)[0]
        both = median_ms(2, env)
        first = first or alone
        print(f"{name:<26} {alone:>8.0f} {statistics.mean(both):>14.0f} {statistics.mean(both) / alone:>7.2f} "
              f"{alone / first:>14.3f}")


if __name__ == "__main__":
    cli(main)
