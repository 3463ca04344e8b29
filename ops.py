"""A run's operations, apart from the training itself: what it checks and says at its start, its
processes, its log and tracker, its progress lines and warnings, its end-of-run sample; and the
process utilities commands share (devices, SIGTERM/SIGINT as a clean stop, compile errors).

train.py reads as set up -> build -> restore -> loop -> finish; what those steps need beyond
the model and the optimizer is here: setup builds the run's one declared `Run`, begin its
`Start` (scratch, resume, auto or a Hugging Face folder, whose reading is hf/folder.py).

The config check: the config module checks what it can alone (types, ranges, memory); the choices of a switch live with the code that implements them (model.CHOICES: scale
classes, placements; optim.CHOICES: optimizers, schedules, decay recipes), and so do the rules
that say when a key does nothing (GPTConfig.inert_keys, optim.inert_keys); check_config and
inert_keys put them together for train.py, research/sweep.py and `--help`.
"""

import datetime
import math
import os
import re
import signal
import threading
import time
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, Callable

import torch

import model
import norms
import optim
from checkpoint import (LOG_NAME, append_log, checkpoint_path, clean_stale, lock_out_dir, newest_checkpoint, read_log, restore,
                        resume_config, trim_log)
from configurator import MECHANISM_AUTO_MAX, UserError, check, complete, folder_problem, not_one_of, unusual
from dataset import check_vocabulary, dataset_dir, load_data, make_codec, meta_vocab_size, recorded_vocab_size
from hf.folder import check_data, check_folder, load_folder, merged_config
from model import model_config, peak_flops
from optim import format_groups, lr_multiplier

PROGRESS_EVERY_S = 15  # a progress line at least this often, whatever log_interval says
CPU_FLOPS = 2e11  # FLOP/s a free, fast CPU reaches on these models (the default run: ~1.4e11 on 2 cores)
STOP_NOTE = "stopping after this step: the checkpoint is saved, then the run exits (a second Ctrl-C quits at once)"


def choices():
    """{key: {name: meaning}} of every key whose values are a registry's names (model.CHOICES,
    optim.CHOICES), for --help: an entry's `meaning`, a class's first docstring line, else ""."""
    def meaning(entry):
        if isinstance(entry, type):  # a scale class: its docstring's first line
            return entry.__doc__.strip().splitlines()[0]
        return getattr(entry, "meaning", "")

    return {key: {name: meaning(registry[name]) if isinstance(registry, dict) else "" for name in registry}
            for key, registry in {**model.CHOICES, **optim.CHOICES}.items()}


def check_config(cfg):
    """UserError, one line, for anything a run would refuse, before it reads data or builds
    anything: every value's range (configurator.check, with the memory estimate), the optimizer's
    and schedule's keys (optim.check) and the model's (model.model_config). sweep.py checks every
    run of an ablation this way before starting any."""
    chosen = optim.OPTIMIZERS.get(cfg["optimizer"])
    check(cfg, can_shard=bool(chosen and chosen.shards))
    try:
        optim.check(SimpleNamespace(**cfg))
    except ValueError as e:
        raise UserError(str(e)) from None
    model.model_config(cfg)


def inert_keys(cfg):
    """[(key, why)]: the keys whose value changes nothing about the run under the rest of cfg (a
    dict with every key; a valid config), each once with the first reason found: the optimizer's
    (optim.inert_keys), the model's (GPTConfig.inert_keys) and W&B's names without W&B.

    Only where certain: every value of the key trains the same run. train.py notes those the
    user gave explicitly (inert_notes); ablation.config_hash leaves a key added later out of a
    run's hash where it does nothing."""
    found = optim.inert_keys(SimpleNamespace(**cfg)) + model.model_config(cfg).inert_keys()
    if not cfg.get("hf_model"):
        found.append(("hf_check", "hf_model is '' (no folder to check)"))
    if not cfg.get("wandb_log"):
        found += [(k, "wandb_log is False (nothing goes to W&B)") for k in ("wandb_project", "wandb_run_name")]
    inert = {}
    for key, why in found:
        inert.setdefault(key, why)
    return list(inert.items())


def unusual_notes(cfg):
    """One 'note: key=value is outside its usual range ...' line per value configurator.unusual
    finds, unless the key does nothing in this config (inert_keys)."""
    inert = dict(inert_keys(cfg))
    return [f"note: {key}={cfg[key]!r} is {why}" for key, why in unusual(cfg) if key not in inert]


def inert_notes(cfg, given):
    """One 'note: --key=value has no effect: why; it is ignored' line per key the user gave
    (`given`, as load_config returns it) that inert_keys says changes nothing."""
    return [f"note: --{key}={cfg[key]} has no effect: {why}; it is ignored"
            for key, why in inert_keys(cfg) if key in given]


# -----------------------------------------------------------------------------
# Starting a run: scratch, resume, auto or a Hugging Face folder, in two calls train.py makes
# around building the model and its optimizers:
#
#     run, ckpt = setup(cfg, given, held)      # which start, the config, device, processes, out_dir, data
#     ...                                      # model.GPT, shard (FSDP2), optim.build_optimizers
#     start = begin(run, ckpt, model, optimizers, val_batch)   # their first state, and the log
#
# setup decides: init_from="auto" becomes "resume" when out_dir holds a checkpoint, else
# "scratch"; a resume takes the checkpoint's config (checkpoint.resume_config); --hf_model takes
# the folder's config.json as the model's shape (hf/folder.py). begin carries it out: the
# checkpoint's weights and optimizer moments (checkpoint.restore), or the folder's weights, or the
# fresh initialization, then trims or starts the log.


@dataclass(frozen=True)
class Run:
    """Everything a run knows before its model exists, built once by setup: what train.py's loop and
    ops.py's helpers read, each field named beside what it holds."""

    # the config
    cfg: SimpleNamespace  # every key; on resume the checkpoint's with this run's changes; device, dtype as asked
    model_cfg: Any  # its model.GPTConfig
    tokens_per_iter: int  # batch_size x block_size x gradient_accumulation_steps
    n_moe: int  # how many blocks are mixture-of-experts blocks
    # where it comes from (a resume)
    resumed_from: Any  # (iteration, the checkpoint's completed config), or None
    tokens: int  # trained on before this run (0 from scratch)
    changed: dict  # what this resume changes, {key: [the checkpoint's, this run's]}
    changes: list  # every resume's, [{"iter", "changed"}] (checkpoint.resume_config)
    # processes and device
    rank: int
    local_rank: int
    world: int  # processes (1 without torchrun)
    ddp: bool  # torch.distributed is initialized (DDP, or FSDP2 with cfg.fsdp)
    master: bool  # rank 0: it logs and writes
    device: torch.device
    dtype: str  # "float32" | "bfloat16", resolved
    ptdtype: torch.dtype
    autocast: AbstractContextManager  # bf16 autocast, or a null context in float32
    # data and outputs
    data: dict  # dataset.load_data's: the token files' paths, meta.pkl's dict, their dtype
    ckpt_path: str  # out_dir/ckpt.pt, or ckpt.dcp under FSDP2
    log_path: str  # out_dir/log.jsonl
    log: Callable  # print on rank 0, nothing elsewhere
    tracker: Any  # a W&B run, or None


# cpu_numerics="portable": the settings that decide which CPU kernels run, each fixed to one level
# every x86-64 CPU with AVX2 has (Intel since 2013, AMD since 2015), so a run's numbers need not
# depend on the CPU type. Each is read when torch (or MKL, or inductor) loads, so it must be in the
# environment before: train.py's command line re-executes itself with them (numerics_env). What
# they cost and what a run made without them varies with: results/README.md (records).
PORTABLE_ENV = {
    "ATEN_CPU_CAPABILITY": "avx2",  # ATen's kernels, and inductor's vector width (its default follows it)
    "MKL_CBWR": "COMPATIBLE",  # MKL's GEMM: the conditional-reproducibility branch that holds on non-Intel CPUs
    "TORCHINDUCTOR_CPP_MARCH": "x86-64-v3",  # inductor's C++ flags: -march=x86-64-v3 (AVX2, FMA), not native
}


def numerics_env(cfg):
    """{variable: value} of PORTABLE_ENV this process lacks under cpu_numerics="portable" ({} when it
    has them all, or for "native"). cfg: a config dict or namespace."""
    if (cfg["cpu_numerics"] if isinstance(cfg, dict) else cfg.cpu_numerics) != "portable":
        return {}
    return {k: v for k, v in PORTABLE_ENV.items() if os.environ.get(k) != v}


def check_numerics(cfg):
    """UserError unless cpu_numerics="portable" found its environment (numerics_env) and torch took it:
    its kernels dispatch to AVX2 (a CPU without AVX2 falls back to less, and is refused)."""
    missing = numerics_env(cfg)
    if missing:
        prefix = " ".join(f"{k}={v}" for k, v in missing.items())
        raise UserError(f"cpu_numerics='portable' needs {prefix} in the environment before torch loads: give "
                        f"--cpu_numerics=portable on train.py's command line (it sets them and restarts), or "
                        f"prefix the command with them")
    if cfg.cpu_numerics == "portable" and torch.backends.cpu.get_cpu_capability() != "AVX2":
        raise UserError(f"cpu_numerics='portable' runs AVX2 kernels, and this CPU dispatches to "
                        f"{torch.backends.cpu.get_cpu_capability()}: use cpu_numerics='native' here")


def setup(cfg, given, held):
    """(Run, the checkpoint dict to resume from or None): the run's state before any model exists.

    cfg: a full config dict; given: the keys the user set. Rank 0 owns out_dir
    (checkpoint.lock_out_dir, into `held`, an ExitStack that releases it) before it reads or writes
    anything there: at once when the folder exists, else once the config and the data are checked
    (a refused run makes no folder). A W&B tracker (wandb_log) starts here, unless the checkpoint's
    run is finished. Raises UserError for bad input, a scratch run on an out_dir that holds one, or
    an out_dir another process owns.
    """
    if not cfg["out_dir"].strip():
        raise UserError(f"out_dir={cfg['out_dir']!r} is empty: set --out_dir=DIR (the run's checkpoint and log go "
                        f"there)")
    owner = int(os.environ.get("RANK", "0")) == 0  # rank 0, as setup_distributed reads it
    new_dir = owner and not os.path.isdir(cfg["out_dir"])
    if owner and not new_dir:  # it may hold a run: own it before reading the checkpoint
        held.enter_context(lock_out_dir(cfg["out_dir"]))
        clean_stale(cfg["out_dir"])  # what a save a SIGKILL cut short left: never the checkpoint
    cfg, ckpt, held_run = start_config(cfg, given)
    check_config({**cfg, "vocab_size": cfg["vocab_size"] or recorded_vocab_size(cfg["dataset"])})  # the real logits
    cfg = SimpleNamespace(**cfg)
    check_numerics(cfg)
    if cfg.hf_model and ckpt is None and cfg.hf_check and owner:  # the folder as transformers reads it (CPU)
        check_folder(cfg, lambda line: print(line, flush=True))
    device_name, dtype = resolve_device(cfg.device, cfg.dtype)
    rank, local_rank, world = setup_distributed(cfg, device_name)
    ddp, master = torch.distributed.is_initialized(), rank == 0
    problem = new_dir and folder_problem(cfg.out_dir)  # said now; the folder is made once the data pass
    if problem:
        raise UserError(f"out_dir={cfg.out_dir!r}: {problem}")
    device = torch.device(f"cuda:{local_rank}" if device_name == "cuda" and ddp else device_name)
    ptdtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}[dtype]
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    if cfg.hf_model and ckpt is None:  # the model's tokenizer first: its advice beats the token files'
        check_data(cfg.hf_model, dataset_dir(cfg.dataset))
    data = load_data(cfg, prepare_here=local_rank == 0)
    cfg.vocab_size = cfg.vocab_size or meta_vocab_size(data["meta"], cfg.dataset)
    check_vocabulary(data["meta"], cfg.vocab_size, ckpt and ckpt.get("meta"), dataset_dir(cfg.dataset))
    if cfg.init_from == "scratch" and held_run:
        raise UserError(f"out_dir={cfg.out_dir!r} already holds a run ({held_run}): continue it with "
                        f"--init_from=resume (or auto), or train from scratch in another --out_dir (or delete it)")
    if new_dir:  # a refused config or dataset leaves no folder behind
        held.enter_context(lock_out_dir(cfg.out_dir))
    model_cfg = model_config(cfg)
    cfg.d_ff = model_cfg.d_ff  # saved resolved: the checkpoint names the shape it holds
    tokens, changed, changes = ckpt.pop("resume") if ckpt else (0, {}, [])
    finished = ckpt is not None and ckpt["iter"] == cfg.max_iters
    return Run(
        cfg=cfg, tokens=tokens, changed=changed, changes=changes, device=device,
        resumed_from=(ckpt["iter"], complete(ckpt["config"])) if ckpt else None, dtype=dtype, ptdtype=ptdtype,
        autocast=torch.autocast(device.type, dtype=ptdtype) if ptdtype != torch.float32 else nullcontext(),
        rank=rank, local_rank=local_rank, world=world, ddp=ddp, master=master, data=data, model_cfg=model_cfg,
        tokens_per_iter=cfg.batch_size * cfg.block_size * cfg.gradient_accumulation_steps,
        n_moe=sum(model_cfg.is_moe(layer) for layer in range(model_cfg.n_layer)),
        ckpt_path=checkpoint_path(cfg.out_dir, cfg.fsdp), log_path=os.path.join(cfg.out_dir, LOG_NAME),
        log=(lambda *a: print(*a, flush=True)) if master else (lambda *a: None),
        tracker=start_tracker(cfg, master, finished, held)), ckpt


def start_config(cfg, given):
    """(config dict, checkpoint or None, the checkpoint file out_dir holds or None): which start.

    "auto" becomes "resume" when out_dir holds a checkpoint, else "scratch"; a resume's config is
    the checkpoint's with the keys the user gave (checkpoint.resume_config; the checkpoint dict
    carries "resume": (tokens seen, changed, changes) for setup); a Hugging Face start's model keys
    are its config.json's (merged_config).
    """
    held_run, passed = newest_checkpoint(cfg["out_dir"])
    held_run = held_run if os.path.exists(held_run) else None
    if held_run and int(os.environ.get("RANK", "0")) == 0:
        for path, why in passed:
            print(f"note: {held_run} is the checkpoint to resume; {path} is passed over ({why})", flush=True)
    if cfg["init_from"] == "auto":
        cfg = {**cfg, "init_from": "resume" if held_run else "scratch"}
    if cfg["init_from"] == "resume":
        cfg, ckpt, tokens, changed, changes = resume_config(cfg, given)
        return cfg, {**ckpt, "resume": (tokens, changed, changes)}, held_run
    if cfg["hf_model"]:
        cfg = merged_config(cfg, given)  # the folder's config.json sets the model's shape
    return cfg, None, held_run


@dataclass(frozen=True)
class Start:
    """Where a run starts (begin): iteration (0 from scratch), tokens seen, the last val loss
    (nan before any eval), eval_due (a kill fell between the checkpoint and its eval row in the
    log, which the loop then completes: same model, same batches; every rank agrees), and the
    last logged train loss (nan when none); mechanism: the checkpoint's open mechanism interval
    (Mechanism.state) when the log has no eval row at `iter` to close it, else None."""

    iter: int
    tokens: int
    val_loss: float
    eval_due: bool
    last_train_loss: float
    mechanism: dict = None


def begin(run, ckpt, model, optimizers, val_batch):
    """The model's and optimizers' first state, in place, and the log; returns the Start.

    Resume: restore ckpt's weights and moments (checkpoint.restore) and trim the log to its
    iteration. Otherwise a new log, and with --hf_model the folder's weights (load_folder, which
    measures a changed function on val_batch(), a function returning (B, T) token ids, called only
    then); else the fresh initialization.
    run: Run. A checkpoint a signal saved between evals (val_loss None) has no eval row to
    complete, unless it is at max_iters (the run's final eval is then still due) or the signal cut
    its eval short ("eval_pending").
    Raises UserError as restore and load_folder do.
    """
    start_iter, val_loss, evaluated = 0, float("nan"), True
    if ckpt is None and run.cfg.hf_model:  # continued pre-training of a Hugging Face model
        load_folder(model, run.cfg.hf_model, val_batch(), run.log)
    if ckpt is not None:
        start_iter, val_loss = restore(ckpt, model, optimizers, run.cfg)
        evaluated = val_loss is not None or ckpt.get("eval_pending", False)  # (an eval a signal cut short)
        val_loss = float("nan") if val_loss is None else val_loss
        if run.master:
            trim_log(run.log_path, start_iter)
            if run.changed:
                append_log(run.log_path, {"kind": "resume", "iter": start_iter, "tokens": run.tokens,
                                          "changed": run.changed})
    else:  # (setup refused a scratch run on an out_dir that holds one)
        if run.master:
            open(run.log_path, "w").close()
    logged = read_log(run.log_path) if run.master and os.path.exists(run.log_path) else []
    trained = [r["iter"] for r in logged if r["kind"] == "train"]
    if run.master and ckpt is not None and trained != list(range(1, start_iter + 1)):
        gap = next((i for i in range(1, start_iter + 1) if i not in set(trained)), None)
        run.log(f"note: {run.log_path} has {len(trained)} train rows for the checkpoint's {start_iter} iterations"
                + (f" (none for iteration {gap})" if gap else "") + ": truncated or edited; the run continues "
                "from its checkpoint, but its log is not one run's (a sweep refuses to record it)")
    missing = torch.tensor(float(start_iter > 0 and (evaluated or start_iter == run.cfg.max_iters) and not any(
        r["kind"] == "eval" and r["iter"] == start_iter for r in logged)), device=run.device)
    if run.ddp:
        torch.distributed.broadcast(missing, 0)  # rank 0 holds the log; every rank evaluates
    last_train_loss = next((r["loss"] for r in reversed(logged) if r["kind"] == "train"), float("nan"))
    closed = any(r["kind"] == "eval" and r["iter"] == start_iter for r in logged)
    interval = None if ckpt is None or closed else ckpt.get("mechanism")
    return Start(start_iter, run.tokens, val_loss, bool(missing.item()), last_train_loss, interval)


# -----------------------------------------------------------------------------
# Processes


def setup_distributed(cfg, device_name):
    """(rank, local_rank, world_size) from torchrun's environment; init the process group.

    NCCL on CUDA, gloo on CPU, whenever torchrun launched us (WORLD_SIZE set),
    even as one process: `--nproc_per_node=1` runs the DDP path of 8 (as in
    nanoGPT). Raises UserError, before any collective (so no rank hangs), when
    gradient_accumulation_steps does not divide by WORLD_SIZE.
    """
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank, local_rank = int(os.environ.get("RANK", "0")), int(os.environ.get("LOCAL_RANK", "0"))
    accum = cfg.gradient_accumulation_steps
    if accum % world:
        k = world // math.gcd(accum, world)  # the fewest extra micro-steps that divide among the processes
        same = f"--gradient_accumulation_steps={accum * k} --batch_size={cfg.batch_size // k} keeps the " \
            f"{cfg.batch_size * accum} sequences per iteration" if cfg.batch_size % k == 0 else \
            f"--gradient_accumulation_steps={accum * k} (then {cfg.batch_size * accum * k} sequences per iteration)"
        raise UserError(f"gradient_accumulation_steps={accum} does not divide by WORLD_SIZE={world} (it is the "
                        f"global count of micro-steps, shared among the processes): {same}")
    if cfg.fsdp and "WORLD_SIZE" not in os.environ:
        raise UserError("fsdp=True (given, or a resumed run's own) shards the model over torchrun's processes: "
                        "launch with `torchrun --standalone --nproc_per_node=N train.py ...` (N >= 1), or pass "
                        "--fsdp=False (a sharded checkpoint resumes in one process too)")
    if "WORLD_SIZE" in os.environ:
        backend = "nccl" if device_name.startswith("cuda") else "gloo"
        if backend == "nccl":
            torch.cuda.set_device(local_rank)
        torch.distributed.init_process_group(backend, timeout=datetime.timedelta(seconds=cfg.ddp_timeout_s))
    return rank, local_rank, world


def shard(model):
    """FSDP2 (torch.distributed.fsdp.fully_shard) over the process group, in place: each block is
    one unit (its parameters gathered for its forward and backward, then freed), the root holds the
    embedding, final norm and head. Parameters become DTensors sharded along their first dimension,
    so call it before the optimizers are built; gradients are reduce-scattered (averaged, as DDP's)
    at every micro-step. Each rank keeps 1/world of the parameters, gradients and AdamW moments.
    Every forward is a collective: all ranks run the same number of them (train.evaluate)."""
    import warnings

    from torch.distributed.fsdp import fully_shard

    # the root returns the logits as a view (the padded vocabulary cut off); nothing writes to them in place
    warnings.filterwarnings("ignore", message="FSDP2-wrapped module .* returned a view tensor")
    for block in model.blocks:
        fully_shard(block)
    fully_shard(model)


# -----------------------------------------------------------------------------
# What a run says: at its start, as it goes, at its end


def describe(run, raw_model, groups, given=frozenset()):
    """Print the parameter report, the optimizer groups, the device and the batch; warn on odd setups,
    and note each key the user gave (`given`) that changes nothing here (inert_keys)."""
    cfg, log = run.cfg, run.log
    log(raw_model.param_report())
    log(format_groups(groups))
    parallel = f" ({'FSDP2' if cfg.fsdp else 'DDP'}, {torch.distributed.get_backend()})" if run.ddp else ""
    log(f"device {run.device} ({run.dtype}{', compiled' if cfg.compile else ''}), {run.world} process(es)"
        f"{parallel}, "
        f"{run.tokens_per_iter:,} tokens/iter = {cfg.batch_size} batch x {cfg.block_size} block x "
        f"{cfg.gradient_accumulation_steps} accumulation; {raw_model.flops_per_token() / 1e6:.1f} MFLOP/token")
    for note in inert_notes(vars(cfg), given) + unusual_notes(vars(cfg)):
        log(note)
    if run.changed:
        it = run.resumed_from[0]
        changed = ", ".join(f"{k}={new!r} (the checkpoint's: {old!r})" for k, (old, new) in run.changed.items())
        log(f"note: resuming at iteration {it} with {changed}: iterations 1-{it} ran on the checkpoint's values "
            f"(the checkpoint's 'changes' and a 'resume' row of the log record it)")
    if run.device.type == "cpu" and cpu_seconds(run, raw_model) > 3600:
        parts = run_flops(run, raw_model)
        per_iter = raw_model.flops_per_token() * run.tokens_per_iter
        log(f"warning: this config needs {sum(parts.values()):.2g} FLOPs ("
            + ", ".join(f"{k} {v:.2g}" for k, v in parts.items() if v) + f"; {per_iter:.2g} per training "
            f"iteration): even at {CPU_FLOPS:.0e} FLOP/s a CPU takes about {fmt_duration(cpu_seconds(run, raw_model))}"
            f". It is sized for a GPU: use --device=cuda there, or a smaller model, fewer --max_iters, --eval_iters "
            f"or --sample_tokens here")
    speed = device_flops(run)
    slow = {part: flops / speed for part, flops in run_flops(run, raw_model).items()
            if speed and part != "training" and flops / speed > 60}
    if slow:
        evals = (cfg.max_iters // cfg.eval_interval + 1 if cfg.eval_interval > 0 else 1) + 1
        what = {"evaluation": f"the {evals} evaluations of eval_iters={cfg.eval_iters} batches take",
                "sample": f"the end-of-run sample of sample_tokens={cfg.sample_tokens} (no KV cache) takes"}
        log("note: " + " and ".join(f"{what[p]} at least {fmt_duration(t)}" for p, t in slow.items())
            + f" ({speed:.2g} FLOP/s, {run.device.type}'s best): lower --eval_iters (or raise --eval_interval) or "
            f"--sample_tokens to shorten them; a SIGTERM stops either at its next batch or token")
    head = 6 * raw_model.config.vocab_size * cfg.n_embd / raw_model.flops_per_token()  # the logits' share
    if run.device.type == "cpu" and head > 0.5 and cpu_seconds(run, raw_model) > 300:  # (softmax over V: slower still)
        log(f"note: the logits over {raw_model.config.vocab_size:,} tokens are {head:.0%} of this model's FLOPs: "
            f"configs/unified_bpe_cpu.py sizes a BPE run for a CPU (a shorter block_size and batch_size)")
    if cfg.compile and cfg.n_experts:
        log("warning: --compile=True with n_experts > 0: each batch routes a different number of tokens to "
            "each expert, so torch.compile recompiles often (minutes each); --compile=False is usually faster")
    decays = "min_lr" in optim.LR_SCHEDULES[cfg.lr_schedule].keys  # a schedule that decays to min_lr
    if decays and all(lr_multiplier(it, cfg) >= 1 for it in range(cfg.warmup_iters, cfg.max_iters)):
        log(f"note: max_iters={cfg.max_iters} ends before the LR decays (warmup_iters={cfg.warmup_iters}): "
            f"fine for a smoke test, not for a result")
    if run.resumed_from and run.resumed_from[1]["max_iters"] != cfg.max_iters and cfg.lr_schedule != "constant":
        it, saved = run.resumed_from
        old = SimpleNamespace(**saved)
        if any(lr_multiplier(j, cfg) != lr_multiplier(j, old) for j in range(it)):  # else (warmup) nothing differs
            log(f"note: max_iters={cfg.max_iters}, the checkpoint's run had {saved['max_iters']}: the LR schedule is "
                f"a function of max_iters, so iterations 1-{it} ran on the {saved['max_iters']}-iteration "
                f"{cfg.lr_schedule} schedule and the rest follow the {cfg.max_iters}-iteration one (LR multiplier "
                f"{lr_multiplier(it, cfg):.3g} at iteration {it}, {lr_multiplier(it, old):.3g} on the checkpoint's): "
                f"the LRs of neither schedule from scratch")


def run_flops(run, raw_model):
    """{"training", "evaluation", "sample"}: the FLOPs of each part of the run. A forward pass is a
    third of a training step's FLOPs per token (flops_per_token counts forward and backward); the
    evals run eval_iters batches at iteration 0, every eval_interval and at the end; the sample
    reruns up to block_size tokens for each of its sample_tokens (no KV cache)."""
    cfg, per_token = run.cfg, raw_model.flops_per_token()
    evals = (cfg.max_iters // cfg.eval_interval + 1 if cfg.eval_interval > 0 else 1) + 1
    return {"training": per_token * run.tokens_per_iter * cfg.max_iters,
            "evaluation": per_token / 3 * evals * cfg.eval_iters * cfg.batch_size * cfg.block_size,
            "sample": per_token / 3 * cfg.sample_tokens * cfg.block_size}


def device_flops(run):
    """The FLOP/s this run's device reaches at best (a time from it is a lower bound): CPU_FLOPS on a
    CPU, the bf16 peak on a CUDA device the peak table knows (model.peak_flops), else None."""
    return CPU_FLOPS if run.device.type == "cpu" else peak_flops(run.device)


def cpu_seconds(run, raw_model):
    """The whole run's FLOPs (run_flops) over CPU_FLOPS: a lower bound on its time on a CPU."""
    return sum(run_flops(run, raw_model).values()) / CPU_FLOPS


def write_log(run, row):
    """Append row to log.jsonl (rank 0), and send it to the tracker when there is one."""
    if run.master:
        append_log(run.log_path, row)
        if run.tracker:
            run.tracker.log(tracker_row(row), step=row["iter"])


def start_tracker(cfg, master, finished, held):
    """A Weights & Biases run (rank 0, wandb_log=True; nanoGPT's keys), finished when `held` (an
    ExitStack) closes: exit code 1 if the run raised. None otherwise, and for a finished run
    (nothing to send); wandb is imported only here. A resumed run starts a new W&B run of the
    same name; log.jsonl stays the record."""
    if not (cfg.wandb_log and master) or finished:
        return None
    import wandb

    tracker = wandb.init(project=cfg.wandb_project, name=cfg.wandb_run_name or os.path.basename(
        os.path.abspath(cfg.out_dir)), config=vars(cfg), dir=cfg.out_dir)
    held.push(lambda kind, exc, tb: tracker.finish(exit_code=1 if kind else 0))
    return tracker


def tracker_row(row, prefix=None):
    """A log.jsonl row as flat tracker keys: {"train/loss", "train/lr", "eval/val_loss",
    "eval/scales/<site>/mean", "eval/max_load/<layer>", ..., "tokens"}; nested dicts and lists
    joined with "/"."""
    if prefix is None:
        return {"tokens": row["tokens"], **tracker_row({k: v for k, v in row.items()
                                                        if k not in ("kind", "iter", "tokens")}, row["kind"])}
    items = row.items() if isinstance(row, dict) else enumerate(row)
    flat = {}
    for key, value in items:
        if isinstance(value, (dict, list)):
            flat.update(tracker_row(value, f"{prefix}/{key}"))
        else:
            flat[f"{prefix}/{key}"] = value
    return flat


def diverged(run, which, value, it, first_step):
    """The message for a non-finite loss: which one, where, what is kept, and what to change:
    before any optimizer step has acted on it (an eval at the start, the first step's loss) the
    configuration made it (the notes at start name unusual values), else try a lower LR."""
    kept = f"the last good checkpoint {run.ckpt_path} is kept" if os.path.exists(run.ckpt_path) else \
        "no checkpoint was written yet"
    odd = [f"{k}={vars(run.cfg)[k]!r}" for k, _ in unusual(vars(run.cfg))]
    fix = "no optimizer step had acted on it yet, so the configuration makes it (check the notes at start and " \
        "keys such as rope_theta, norm_eps, the initial scales), not the learning rate" if first_step else \
        "try a lower learning_rate"
    if odd:  # a value outside its usual range is the likelier cause than a learning rate in range
        fix = f"first check {', '.join(odd)}, outside the usual range (the notes at start), then: {fix}"
    return f"{which} loss is {value} at iter {it}: the run diverged; {kept}; {fix}"


class Progress:
    """Progress lines (loss, LR, tokens/s, ms/iter, MFU on known GPUs, ETA) every log_interval
    iterations and at least every PROGRESS_EVERY_S seconds; one warning when a CPU run would
    take over an hour."""

    def __init__(self, run, raw_model, start_iter):
        self.run, self.start_iter = run, start_iter
        self.flops_per_token = raw_model.flops_per_token()
        self.expected_s = cpu_seconds(run, raw_model)  # the config's own CPU time, at a free CPU's pace
        self.peak = peak_flops(run.device) if run.ptdtype == torch.bfloat16 else None
        self.warned_slow = False
        self.t_start = self.t_line = time.perf_counter()
        self.restart_window()

    def restart_window(self):
        self.t_window, self.iters = time.perf_counter(), 0

    def step(self, row, aux):
        cfg, done = self.run.cfg, row["iter"]
        self.iters += 1
        now = time.perf_counter()
        if not (done % cfg.log_interval == 0 or done == cfg.max_iters or now - self.t_line >= PROGRESS_EVERY_S):
            return
        dt = now - self.t_window
        tok_s = self.iters * self.run.tokens_per_iter / dt
        ms = 1000 * dt / self.iters
        eta = (cfg.max_iters - done) * dt / self.iters  # training steps only, evals add to it
        mfu = f" | MFU {100 * self.flops_per_token * tok_s / (self.peak * self.run.world):.1f}%" if self.peak else ""
        moe = f" | lb {row['lb_loss']:.3f} | max load (last batch) " \
            f"{aux['expert_load'].max().item() * cfg.n_experts:.2f}" if "lb_loss" in row else ""
        self.run.log(f"iter {done}/{cfg.max_iters} | loss {row['loss']:.4f} | lr {row['lr']:.2e} | "
                     f"{tok_s / 1e3:.1f}k tok/s | {ms:.0f} ms/iter{mfu}{moe} | ETA {fmt_duration(eta)}")
        if self.run.device.type == "cpu" and eta > 3600 and not self.warned_slow:
            self.warned_slow = True  # the config is judged at start (describe); here only the machine
            why = "this config is sized for a GPU (use --device=cuda there, or a smaller model / fewer " \
                "--max_iters here)" if self.expected_s > 3600 else \
                f"the config itself needs about {fmt_duration(self.expected_s)} on a free CPU, so this machine is " \
                f"busy or slow (another training process on its cores? OMP_NUM_THREADS above its cores?)"
            self.run.log(f"warning: at the measured {ms:.0f} ms/iter the {cfg.max_iters - done} iterations left "
                         f"take about {fmt_duration(eta)} on this CPU: {why}")
        self.t_line = now
        self.restart_window()


def end_of_run_sample(model, run, signals=None):
    """Print a sample from "\\n"; a sample that cannot be made is one line, never a failed run. A
    SIGTERM/SIGINT (signals: StopSignals) ends it after the token in hand (under FSDP2, where every
    rank samples, after the token all ranks agree on), and what was sampled is printed."""
    cfg = run.cfg
    try:
        codec = make_codec(run.data["meta"], cfg.vocab_size)
        if codec is None:
            run.log("no sample: the dataset has no meta.pkl vocabulary to decode its token ids")
            return
        encode, decode = codec
        try:
            prompt = encode("\n")
        except UserError:  # a vocabulary without "\n": start from token 0
            prompt = [0]
        out = torch.tensor([prompt], dtype=torch.long, device=run.device)
        model.eval()
        cut = ""
        for _ in range(cfg.sample_tokens):  # a token at a time: a signal is honoured at the next one
            with run.autocast:
                out = model.generate(out, 1, temperature=0.8, top_k=200)
            received = signals and (stop_signal(signals, run) if cfg.fsdp else signals.received)
            if received:
                cut = f", cut short by {received}"
                break
        n = out.shape[1] - len(prompt)
        run.log(f"--- sample ({n} tokens{cut}) ---\n{decode(out[0].tolist())}\n---")
    except Exception as e:  # the run is finished and saved: a sample is a courtesy
        run.log(f"no sample ({e if isinstance(e, UserError) else f'{type(e).__name__}: {e}'}); "
                f"the run itself finished and is saved")


# -----------------------------------------------------------------------------
# Mechanism statistics: what the scale vectors do to training, read at every evaluation

def mechanism_on(cfg, raw_model):
    """Whether this run logs the mechanism statistics (mechanism_stats: "on", "off", or "auto": on
    up to MECHANISM_AUTO_MAX parameters, where the copy they need is a few MB)."""
    return cfg.mechanism_stats == "on" or (cfg.mechanism_stats == "auto" and
                                           raw_model.num_params() <= MECHANISM_AUTO_MAX)


def start_mechanism(run, raw_model, optimizers, start):
    """The run's Mechanism, or None when mechanism_on says no; under DDP only rank 0 holds one (it
    writes the log), under FSDP2 every rank (each holds its shards, and the sums are all-reduced).
    Its first interval is the one the checkpoint left open (start.mechanism: a stop between evals, or
    a kill before an eval's row), so a resumed run logs what the uninterrupted one did; else it starts
    at start.iter (a new run, or a resume from an FSDP2 checkpoint, which keeps no interval: its first
    eval row's "since" then says where the interval was cut)."""
    if mechanism_on(run.cfg, raw_model) and (run.master or run.cfg.fsdp):
        return Mechanism(raw_model, optimizers, start.iter, start.mechanism)
    return None


def _local(t):
    """This rank's shard of a parameter FSDP2 sharded (a DTensor), else the tensor itself."""
    return t.to_local() if hasattr(t, "to_local") else t


def _full(t):
    """A whole small tensor (a gamma): gathered from its shards under FSDP2 (a collective)."""
    return t.full_tensor() if hasattr(t, "full_tensor") else t


class Mechanism:
    """The scale vectors' mechanism at every eval, per site and per role, read from the model and
    its optimizers as they are (no_grad, no randomness: training is the same bit for bit); the eval
    row's "mechanism" entry, a flat dict of floats (keys below, docs/reference.md).

    The reading (paper Theorem 2.2, claim C3). In a Pre-Norm map y = W diag(gamma) x_hat, gamma adds
    no function (it folds: W~ = W diag(gamma), GPT.folds), but under gradient flow on (W, gamma) the
    folded columns w~_j = gamma_j w_j move as dw~_j/dt = -P_j dL/dw~_j with the preconditioner
    P_j = gamma_j^2 I + w_j w_j^T, whose smallest eigenvalue is at least gamma_j^2: as gamma grows
    the effective map learns faster. Under Adam (our reading, not the paper's) the step on each
    entry of W is normalized, |dW_ij| ~ lr, so w~_j moves by about gamma_j * lr (+ w_j dgamma_j):
    there the amplification is |gamma_j|, not gamma_j^2 (sqrt of the floor below).

    Point-in-time keys, every eval:
      "<site>/g2_min", "<site>/g2_mean"  min_j and mean_j of gamma_j^2 over the site's channels: the
          preconditioner's floor and its mean (for an output-role site, which has no W to fold into,
          only gamma's statistics); "<site>/spread" max_j |gamma_j| / min_j |gamma_j| (None if a
          gamma_j is 0). <site> is the scale vector's module name, as in the row's "scales".
      "wd/<role>/rms", "wd/<role>/drift"  over every effective gamma of the role ("input", "output"
          as the scale holds it now) together: sqrt(mean gamma^2) and sqrt(mean (gamma - 1)^2), the
          drift from gamma == 1, every scale's init (a Hugging Face start begins elsewhere); weight
          decay on a role pulls its rms toward 0 (paper section 4, claim C4: IWD decays the input role).
    Interval keys, over the steps since the last eval (s, logged as "since"; a resume continues the
    interval its checkpoint kept, so it logs what an uninterrupted run does; an FSDP2 checkpoint keeps
    none, and the resumed step is then s), absent when no step was taken:
      "<site>/amp_folded" ||W~_t - W~_s||_F / ||W~_s||_F and "<site>/amp_plain" ||W_t - W_s||_F / ||W_s||_F
          per input-role site, W the matrices its scale folds into (columns or rows, as folds() says)
          stacked, W~ the same with only this site's gamma multiplied in (norms.fold_factor), so
          each site's ratio isolates its own scale; "<site>/amp_ratio" = amp_folded / amp_plain
          (None if amp_plain is 0): how much faster the effective map moved than its matrix.
      "update/<group>" ||theta_t - theta_s|| / ||theta_s|| per optimizer group (optim.param_groups'
          names) over the group's parameters the copy holds, "held/<group>" that share of the
          group's parameters (1 for the scale, magnitude and router groups; the matrices the
          input-role scales fold into for "matrix"; the embedding is not held). The interval form
          serves every optimizer (Muon's update cannot be read back from its state).

    Memory: a copy of those matrices and of every scale parameter, about 12% of the float32 training
    state (weights, gradients, AdamW moments) of the unified model at 124M (q, k, v, gate, up: 59M
    of 124M parameters); mechanism_stats="auto" takes it only up to MECHANISM_AUTO_MAX parameters.
    Under FSDP2 the copy is of each rank's shards; the squared sums are all-reduced (never a
    matrix's full_tensor), and only the gammas (d entries each) are gathered. Every rank calls row().

    Why in ops.py: what it reads is declared beside the code it describes (the folding relation,
    GPT.folds; the product rule, norms.fold_factor; the groups, optim.param_groups), so it adds no
    rule of its own; what it holds is run state between evals, as Progress does, and a module of
    its own would be a tenth at the top level, which train.py's reading path does not need.
    """

    def __init__(self, model, optimizers, step, saved=None):
        site = {id(sv): name for name, sv in model.scale_vectors()}
        self.model = model
        self.relation = [(site[id(sv)], sv, cols, rows) for sv, cols, rows in model.folds() if sv.role == "input"]
        self.groups = [(g["name"], g["params"]) for opt in optimizers for g in opt.param_groups]
        held = [w for _, _, cols, rows in self.relation for w in (*cols, *rows)]
        held += [p for _, sv in model.scale_vectors() for p in sv.parameters()]
        self.held = {id(p): p for p in held}
        self.sharded = any(hasattr(p, "to_local") for p in model.parameters())
        self.device = next(model.parameters()).device
        self.names = {id(p): name for name, p in model.named_parameters()}
        if saved is not None and saved["since"] <= step and set(saved["copy"]) == {self.names[k] for k in self.held}:
            by_name = {self.names[k]: k for k in self.held}
            self.since, self.gamma = saved["since"], {k: v.to(self.device) for k, v in saved["gamma"].items()}
            self.copy = {by_name[name]: t.to(self.device) for name, t in saved["copy"].items()}
        else:
            self.take(step)

    @torch.no_grad()
    def take(self, step):
        """Copy the held parameters (this rank's shards) and the relation's gammas at `step`: the next
        interval starts there (train.eval_and_save calls it once the eval row is written)."""
        self.since = step
        self.copy = {k: _local(p).detach().clone() for k, p in self.held.items()}
        self.gamma = {name: _full(sv()).detach().float().clone() for name, sv, _, _ in self.relation}

    def state(self):
        """The open interval's start for a checkpoint (plain tensors, keyed by parameter and site
        name): {"since", "copy", "gamma"}; None under FSDP2, whose copies are each rank's shards."""
        if self.sharded:
            return None
        return {"since": self.since, "copy": {self.names[k]: t for k, t in self.copy.items()},
                "gamma": dict(self.gamma)}

    @torch.no_grad()
    def row(self, step):
        """The "mechanism" entry of the eval row at `step` (see the class docstring); the interval
        stays open until take(step)."""
        gammas = {name: _full(sv()).detach().float() for name, sv in self.model.scale_vectors()}
        out = {}
        for name, g in gammas.items():
            low = g.abs().min().item()
            out |= {f"{name}/g2_min": g.square().min().item(), f"{name}/g2_mean": g.square().mean().item(),
                    f"{name}/spread": g.abs().max().item() / low if low > 0 else None}
        for role in norms.ROLES:
            g = [gammas[name] for name, sv in self.model.scale_vectors() if sv.role == role]
            if g:
                g = torch.cat(g)
                out |= {f"wd/{role}/rms": g.square().mean().sqrt().item(),
                        f"wd/{role}/drift": (g - 1).square().mean().sqrt().item()}
        if step > self.since:
            out |= {"since": self.since, **self.interval(gammas)}
        return out

    def interval(self, gammas):
        """The interval keys: every squared sum first (one all-reduce under FSDP2), then the ratios."""
        sums = []  # per site [||dW~||^2, ||W~_s||^2, ||dW||^2, ||W_s||^2]; per group [||dtheta||^2, ||theta_s||^2]
        for name, sv, cols, rows in self.relation:
            acc = torch.zeros(4, dtype=torch.float64, device=self.device)
            for w, side in [(w, "columns") for w in cols] + [(w, "rows") for w in rows]:
                now, then = _local(w), self.copy[id(w)]
                folded_now = now * norms.fold_factor(self._part(gammas[name], now, side), now, side)
                folded_then = then * norms.fold_factor(self._part(self.gamma[name], then, side), then, side)
                acc += torch.stack([_sq(folded_now - folded_then), _sq(folded_then), _sq(now - then), _sq(then)])
            sums.append(acc)
        for _, params in self.groups:
            acc = torch.zeros(2, dtype=torch.float64, device=self.device)
            for p in params:
                if id(p) in self.held:
                    acc += torch.stack([_sq(_local(p) - self.copy[id(p)]), _sq(self.copy[id(p)])])
            sums.append(acc)
        flat = torch.cat(sums) if sums else torch.zeros(0, dtype=torch.float64, device=self.device)
        if self.sharded:
            torch.distributed.all_reduce(flat)
        values, out = flat.sqrt().tolist(), {}
        for i, (name, _, _, _) in enumerate(self.relation):
            d_folded, folded, d_plain, plain = values[4 * i: 4 * i + 4]
            a, b = _ratio(d_folded, folded), _ratio(d_plain, plain)
            out |= {f"{name}/amp_folded": a, f"{name}/amp_plain": b,
                    f"{name}/amp_ratio": _ratio(a, b) if a is not None and b is not None else None}
        base = 4 * len(self.relation)
        for i, (group, params) in enumerate(self.groups):
            d, norm = values[base + 2 * i: base + 2 * i + 2]
            held = sum(p.numel() for p in params if id(p) in self.held)
            if held:
                out |= {f"update/{group}": _ratio(d, norm), f"held/{group}": held / sum(p.numel() for p in params)}
        return out

    @staticmethod
    def _part(gamma, w, side):
        """The entries of a whole gamma that meet this rank's rows of W (FSDP2 shards dim 0 as
        torch.chunk does): all of it for columns, this rank's chunk for rows."""
        if side == "columns" or gamma.numel() == w.size(0):
            return gamma
        chunks = gamma.chunk(torch.distributed.get_world_size())
        rank = torch.distributed.get_rank()
        part = chunks[rank] if rank < len(chunks) else gamma[:0]
        assert part.numel() == w.size(0), (gamma.shape, w.shape)
        return part


def _sq(t):
    """||t||_F^2, accumulated in float64."""
    return t.square().sum(dtype=torch.float64)


def _ratio(a, b):
    return a / b if b > 0 else None


# -----------------------------------------------------------------------------
# Process utilities: devices, signals, compile errors, durations


DEVICE_FORMS = "'auto', 'cpu', 'cuda', 'cuda:N', 'mps'"


def resolve_device(device, dtype="auto"):
    """(device, dtype) with "auto" resolved on this machine: CUDA, else MPS, else CPU; bfloat16 on
    CUDA, else float32. UserError, one line, for any device this machine cannot use: a name not in
    DEVICE_FORMS (as torch spells them: "CPU" and "" are errors), CUDA or MPS absent, cuda:N with
    N >= the number of visible CUDA devices; and for an unknown dtype."""
    import torch

    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "mps" if torch.backends.mps.is_available() else "cpu"
    if not re.fullmatch(r"cpu|mps|cuda(:\d+)?", device):
        raise UserError(f"device={device!r} is not one of {DEVICE_FORMS}")
    if device.startswith("cuda"):
        if not torch.cuda.is_available():
            raise UserError(f"device={device!r} but CUDA is not available: use --device=cpu")
        count, index = torch.cuda.device_count(), int(device.partition(":")[2] or 0)
        if index >= count:
            visible = os.environ.get("CUDA_VISIBLE_DEVICES")
            raise UserError(f"device={device!r} but this machine has {count} CUDA device(s), cuda:0 to "
                            f"cuda:{count - 1}" + (f" (CUDA_VISIBLE_DEVICES={visible})" if visible is not None else "")
                            + ": use --device=cuda or one of those")
    if device == "mps" and not torch.backends.mps.is_available():
        raise UserError("device='mps' but MPS (Apple-silicon GPUs) is not available on this machine: "
                        "use --device=cpu")
    if dtype == "auto":
        dtype = "bfloat16" if device.startswith("cuda") else "float32"
    if dtype not in ("float32", "bfloat16"):
        raise UserError(not_one_of("dtype", dtype, ("auto", "float32", "bfloat16")))
    return device, dtype


def fmt_duration(seconds):
    """'45s', '12m05s' or '3h20m'."""
    s = int(seconds)
    return f"{s}s" if s < 60 else f"{s // 60}m{s % 60:02d}s" if s < 3600 else f"{s // 3600}h{s % 3600 // 60:02d}m"


@contextmanager
def compile_errors(enabled):
    """Turn a torch.compile failure (no C++ compiler, an inductor bug) into one line with the fix."""
    try:
        yield
    except Exception as e:
        if not enabled:
            raise
        import torch._dynamo.exc  # only here: a compile error means torch is loaded
        if isinstance(e, torch._dynamo.exc.TorchDynamoException) or \
                type(e).__module__.startswith(("torch._inductor", "torch._dynamo")):
            first = (str(e).strip().splitlines() or [""])[0][:200]
            raise UserError(f"torch.compile failed ({type(e).__name__}: {first}): run with --compile=False") from None
        raise


def stop_signal(signals, run):
    """The signal ("SIGTERM", "SIGINT") that asks this run to stop, received by any rank, or None.

    Called by every rank at the same point (of every iteration, eval batch, FSDP2 sample token):
    under DDP or FSDP2 (world > 1) the ranks all-reduce the largest signal number, so all stop at
    the same point.
    """
    number = signal.Signals[signals.received].value if signals.received else 0
    if run.ddp and run.world > 1:
        t = torch.tensor(number, device=run.device)
        torch.distributed.all_reduce(t, op=torch.distributed.ReduceOp.MAX)
        number = int(t.item())
    return signal.Signals(number).name if number else None


class StopSignals:
    """A context in which SIGTERM and SIGINT ask the program to stop cleanly instead of killing it.

    Clusters send SIGTERM some seconds before SIGKILL; Ctrl-C sends SIGINT. Inside the context
    the first of them sets `received` (its name, e.g. "SIGTERM") and writes `note` (if any) to
    stderr; the program polls `received` at a point where stopping is clean. A later SIGINT
    raises KeyboardInterrupt when `repeat_quits` (a second Ctrl-C quits at once; cli shows it as
    one line), else it is ignored like a later SIGTERM (schedulers may send several). A signal
    that was ignored when the context began (SIGINT in a background job) stays ignored; outside
    the main thread nothing is installed. The previous handlers come back on exit.
    """

    SIGNALS = (signal.SIGTERM, signal.SIGINT)

    def __init__(self, note="", repeat_quits=True):
        self.note, self.repeat_quits = note, repeat_quits
        self.received, self.previous = None, {}

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            for sig in self.SIGNALS:
                if signal.getsignal(sig) is not signal.SIG_IGN:
                    self.previous[sig] = signal.signal(sig, self.handle)
        return self

    def handle(self, signum, frame):
        name = signal.Signals(signum).name
        if self.received is None:
            self.received = name
            if self.note:  # os.write: a print here could re-enter a print the signal interrupted
                os.write(2, f"{name}: {self.note}\n".encode())
        elif signum == signal.SIGINT and self.repeat_quits:
            raise KeyboardInterrupt

    def __exit__(self, *exc):
        for sig, handler in self.previous.items():
            signal.signal(sig, signal.SIG_DFL if handler is None else handler)  # None: set outside Python
        self.previous = {}
