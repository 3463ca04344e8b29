"""Pre-train a scale-vector GPT. Single process, or several with torchrun (DDP, or FSDP2 with --fsdp=True).

    python train.py                                   # unified strategy, shakespeare_char, CPU, ~3 min
    python train.py configs/unified_124m.py --max_iters=1000
    torchrun --standalone --nproc_per_node=8 train.py configs/unified_124m.py
    torchrun --standalone --nproc_per_node=8 train.py configs/unified_124m.py --fsdp=True  # sharded (common.shard)
    python train.py --help                            # every config key, its default and meaning

One training step, as in nanoGPT: for each micro-batch of the step, a forward
under autocast (model.GPT: the scale vectors sit where the config's placements
say, norms.py computes each as its formula; the fast paths of plumbing/fused.py
compute the same maps faster, and --fused=False runs the formulas alone), the
cross-entropy plus the MoE router's losses, a backward; then one optimizer step
(optim.optimizer_step: clip, step every role-aware group, zero) at the step's LR.
Batches are drawn by (seed, iteration, micro-step), so a resumed run and a run
on any number of processes train on the same tokens. Every eval_interval the
loop evaluates on fixed validation batches and saves ckpt.pt (under FSDP2 the
sharded ckpt.dcp/); every log_interval it prints a progress line and appends
the train rows to log.jsonl. The knobs: configurator.py (every default and its
meaning), set in a config file or as --key=value.

Read top to bottom: train() sets up, builds, restores, compiles and wraps, runs the loop and finishes, each stage
under a banner; the pieces it calls follow it. What a run shares with the other commands is in plumbing/: how it
starts (start.py), the built model held to its config (contracts.py), what it says (ops.py), its checkpoints and log
(checkpoint.py), processes and signals (common.py: SIGTERM or Ctrl-C stops after the step under way, saved,
resumable bit for bit with --init_from=auto), the mechanism statistics (mechanism.py), the fast paths (fused.py).
"""

import math
import os
import shlex
import signal
import sys
import time
from contextlib import ExitStack, nullcontext
from dataclasses import dataclass

from plumbing import common

common.set_omp_env()  # before torch loads: idle OpenMP threads sleep instead of spinning

import numpy as np
import torch

from plumbing import contracts, fused
from plumbing.checkpoint import save_run_checkpoint
from plumbing.dataset import id_past_vocab
from plumbing.common import StopSignals, agree, cli, compile_errors, end_distributed, numerics_env, shard, stop_signal
from configurator import UserError, load_config, usage
from plumbing.mechanism import start_mechanism
from model import GPT
from plumbing.ops import STOP_NOTE, Progress, TrainRows, choices, describe, diverged, end_of_run_sample, write_log
from optim import build_optimizers, lr_multiplier, optimizer_step, set_lr
from plumbing.start import begin, setup


def train(cfg, given=frozenset()):
    """Run one training run; returns dict(val_loss, train_loss, wall_s, model (uncompiled), stopped).

    cfg: every key of configurator.DEFAULTS; given: the keys the user set (a resume takes the others from
    its checkpoint). stopped: None, or the signal ("SIGTERM", "SIGINT") that stopped the run, its last
    whole iteration saved. Raises UserError for bad input and FloatingPointError for a non-finite loss."""
    with ExitStack() as cleanup:  # what setup takes (the out_dir's lock) is released however the run ends
        # --- set up: which start (scratch, resume, auto, a Hugging Face folder), device, processes, data (start.py)
        run, ckpt = setup(cfg, given, cleanup)
        cfg, device = run.cfg, run.device
        # --- build: the GPT of run.model_cfg (model.py: which scale vector sits where), its optimizer groups
        raw_model = contracts.check_model(GPT(run.model_cfg, seed=cfg.seed).to(device), cfg)  # all of it used and seen
        if cfg.fsdp:
            shard(raw_model)  # FSDP2 (common.shard): before the optimizers see the parameters
        optimizers, groups = build_optimizers(raw_model, cfg, device.type)  # role-aware groups (optim.py)
        # --- restore: a checkpoint's weights and moments (what it holds: checkpoint.py), a HF folder's, or the init
        start = begin(run, ckpt, raw_model, optimizers, lambda: get_batch(run.data, "val", 0, 0, cfg, device)[0])
        del ckpt  # its weights live in the model now
        start_iter, tokens, val_loss = start.iter, start.tokens, start.val_loss
        # --- fast paths, compile and wrap: the module the loop steps, and the one evals run
        model, fwd = compile_and_wrap(run, raw_model)
        describe(run, raw_model, groups, given)
        mechanism = start_mechanism(run, raw_model, optimizers, start)  # mechanism.Mechanism, or None: off
        signals = StopSignals(STOP_NOTE if run.master else "")
        parts = Parts(raw_model, fwd, optimizers, mechanism, signals)

        # --- the loop: iteration `it` evaluates and saves when one is due (the final eval at max_iters too),
        # then trains one step; it reads the device only in rows.flush (the losses wait there until then)
        my_micro_steps = range(run.rank, cfg.gradient_accumulation_steps, run.world)  # j % world == rank
        zero = torch.zeros((), device=device)
        progress = Progress(run, raw_model, start_iter)
        rows = TrainRows(run, progress)  # log.jsonl's train rows, read from the device every log_interval
        batch, stopped = None, None  # batch: the next micro-batch, read ahead
        with signals, compile_errors(cfg.compile):
            for it in range(start_iter, cfg.max_iters + 1):
                last, due = it == cfg.max_iters, eval_due(it, start_iter, start, cfg)
                if due:  # (None: a SIGTERM/SIGINT stopped the evaluation; it is left for the resume)
                    rows.flush()  # the rows up to `it` go before its checkpoint (a resume drops the later ones)
                    val_loss = eval_and_save(run, parts, it, tokens, save=it > start_iter)
                    progress.restart_window()  # eval time is not training time
                if last and val_loss is not None:
                    break
                # once per iteration, on the host, every rank alike: a SIGTERM/SIGINT, a progress line overdue
                stopped, overdue = agree(run, signals, progress.overdue())
                if stopped:  # (saves iteration it, the last whole one)
                    rows.flush()
                    stop_here(run, parts, start_iter, it, tokens, stopped,
                              eval_at_it=None if not due else "cut" if val_loss is None else "saved")
                    break
                set_lr(optimizers, lr_multiplier(it, cfg))
                if cfg.dropout > 0:  # the same masks on resume; dropout is all a step draws at random (seeding costs host time)
                    torch.manual_seed((cfg.seed * 1_000_003 + it) * 1009 + run.rank)
                losses = []  # cross-entropy, lb_loss, z_loss of each of my micro-steps, on the device
                for n, j in enumerate(my_micro_steps):
                    x, y = batch or get_batch(run.data, "train", it, j, cfg, device)
                    # the next micro-batch (this step's, else the next step's first) is read while the device runs this one
                    at = (it, my_micro_steps[n + 1]) if n + 1 < len(my_micro_steps) else (it + 1, my_micro_steps[0])
                    batch = get_batch(run.data, "train", *at, cfg, device) if at[0] < cfg.max_iters else None
                    sync = model is fwd or n == len(my_micro_steps) - 1  # a DDP wrapper all-reduces on the last
                    with nullcontext() if sync else model.no_sync(), run.autocast:
                        _, loss, aux = model(x, y)
                        objective = loss + raw_model.aux_objective(aux)
                    (objective / len(my_micro_steps)).backward()
                    losses += [t.detach().float() for t in (loss, aux.get("lb_loss", zero), aux.get("z_loss", zero))]
                optimizer_step(raw_model, optimizers, cfg.grad_clip, mechanism)  # clip, step, zero: optim.optimizer_step
                tokens += run.tokens_per_iter
                rows.add({"kind": "train", "iter": it + 1, "tokens": tokens, "lr": optimizers[0].param_groups[0]["lr"]},
                         losses, aux)
                if (it + 1) % cfg.log_interval == 0 or overdue:
                    rows.flush()
            # --- finish: the sample and the final line (a stopped run said how to continue)
            return finish(run, parts, start, val_loss, rows, stopped)


# -----------------------------------------------------------------------------
# Wrap, batches, evaluate, save, report: the pieces train() calls, in its order


def compile_and_wrap(run, raw_model):
    """(the module the loop steps, the one evals run: never the DDP wrapper) for the built model, its fast
    paths swapped in unless --fused=False (fused.summary says which); FSDP2 needs no wrapper (common.shard)."""
    cfg = run.cfg
    if cfg.fused:
        fused.use(raw_model, run.device.type)
    fwd = torch.compile(raw_model) if cfg.compile else raw_model
    if run.ddp and not cfg.fsdp:
        cuda = run.device.type == "cuda"
        return torch.nn.parallel.DistributedDataParallel(fwd, device_ids=[run.local_rank] if cuda else None), fwd
    return fwd, fwd


def eval_due(it, start_iter, start, cfg):
    """Whether iteration `it` evaluates and saves: every eval_interval, at max_iters, at a new run's 0 and
    where a kill left an eval out (start.eval_due)."""
    if it == start_iter:
        return (it == 0 and (cfg.eval_interval > 0 or it == cfg.max_iters)) or start.eval_due
    return it == cfg.max_iters or (cfg.eval_interval > 0 and it % cfg.eval_interval == 0)


@dataclass
class Parts:
    """What the loop steps, evaluates and saves: the uncompiled model (the checkpoint's weights), the module evals
    run (compile_and_wrap), the optimizers, the mechanism statistics (None: off), the stop signals."""

    model: GPT
    fwd: torch.nn.Module
    optimizers: list
    mechanism: object
    signals: StopSignals


def get_batch(data, split, index, micro_step, cfg, device):
    """One micro-batch (x, y), each (batch_size, block_size) int64, y = x shifted by one.

    Train micro-batch j of iteration i comes from a generator seeded by
    (seed, i, j), so a resumed run and a run on any number of processes read
    the same data. Validation batch k is seeded by k alone: every run, every
    seed and every variant is evaluated on the same fixed batches.
    """
    # per batch, as nanoGPT: bounded memory; the dtype is meta.pkl's record (dataset.load_data)
    arr = np.memmap(data["files"][split], dtype=data["dtype"], mode="r")
    entropy = [cfg.seed, index, micro_step, 1] if split == "train" else [index, 2]
    rng = np.random.default_rng(entropy)
    ix = rng.integers(0, len(arr) - cfg.block_size, size=cfg.batch_size)
    window = np.stack([arr[i:i + cfg.block_size + 1] for i in ix]).astype(np.int64)  # one gather for x and y
    n = len(arr)
    del arr
    if int(window.max()) >= cfg.vocab_size:  # checked per batch: a full scan of a 5 GB file is slow
        raise id_past_vocab(f"{split}.bin", window, ix, n, cfg.vocab_size)
    x, y = torch.from_numpy(window[:, :-1].copy()), torch.from_numpy(window[:, 1:].copy())
    if device.type == "cuda":
        return x.pin_memory().to(device, non_blocking=True), y.pin_memory().to(device, non_blocking=True)
    return x.to(device), y.to(device)


@torch.no_grad()
def evaluate(run, fwd, signals=None):
    """(val loss, expert load (n_moe, n_experts) as lists or None) over the fixed val batches, all
    ranks; (None, None) when a SIGTERM/SIGINT (signals: common.StopSignals) stops it at a batch."""
    cfg = run.cfg
    fwd.eval()
    total = torch.zeros((), device=run.device)
    load = torch.zeros(run.n_moe, cfg.n_experts, device=run.device)
    # Every rank runs as many rounds (each a stop check every rank agrees on, and under FSDP2 a
    # forward, a collective): a rank's extra batch in the last round counts nothing.
    for r in range(-(-cfg.eval_iters // run.world)):
        k = r * run.world + run.rank
        if k < cfg.eval_iters or cfg.fsdp:
            x, y = get_batch(run.data, "val", min(k, cfg.eval_iters - 1), 0, cfg, run.device)
            with run.autocast:
                _, loss, aux = fwd(x, y)
            if k < cfg.eval_iters:
                total += loss.float()
                if run.n_moe:
                    load += aux["expert_load"]
        if signals is not None and stop_signal(signals, run):
            fwd.train()
            return None, None
    fwd.train()
    if run.ddp:
        torch.distributed.all_reduce(total)
        torch.distributed.all_reduce(load)
    return total.item() / cfg.eval_iters, (load / cfg.eval_iters).tolist() if run.n_moe else None


def eval_and_save(run, parts, it, tokens, save=True):
    """Evaluate parts.fwd, write the checkpoint (rank 0, it > 0, save) and then the eval row (with the
    mechanism statistics when parts.mechanism is on); returns the val loss, or None when a signal
    stopped the evaluation (nothing written: stop_here saves).

    The checkpoint comes first: a logged final eval means a finished run.
    Raises FloatingPointError for a non-finite val loss.
    """
    raw_model, mechanism = parts.model, parts.mechanism
    val, load = evaluate(run, parts.fwd, parts.signals)
    if val is None:
        return None
    if not math.isfinite(val):
        raise FloatingPointError(diverged(run, "val", val, it, first_step=it == 0))
    row = {"kind": "eval", "iter": it, "tokens": tokens, "val_loss": val, "scales": raw_model.scale_stats()}
    if load is not None:  # per MoE layer: share of routed tokens per expert, and max / mean share
        row["expert_load"] = load
        row["max_load"] = [max(layer) * run.cfg.n_experts for layer in load]
    if mechanism is not None:
        row["mechanism"] = mechanism.row(it)
    saved = ""
    if it > 0 and save:  # (with the interval's start: a kill before the row below, and the resume redoes it)
        write_checkpoint(run, parts, it, tokens, val)
        saved = f" | saved {run.ckpt_path}"
    write_log(run, row)
    if mechanism is not None:
        mechanism.take(it)
    run.log(f"eval iter {it}: val loss {val:.4f}{saved}")
    return val


def write_checkpoint(run, parts, it, tokens, val_loss, eval_pending=False):
    """Write the checkpoint after `it` iterations (every rank calls it; under FSDP2 each saves its
    shards, else rank 0 saves it all); val_loss None: saved between evals, or (eval_pending) during
    the eval at `it`, which a resume then runs. The mechanism statistics' open interval goes with it
    when it started before `it` (start.begin hands it to the resume)."""
    interval = parts.mechanism.state() if parts.mechanism is not None and parts.mechanism.since < it else None
    with parts.signals.saving():  # a second Ctrl-C waits for the file to be whole
        save_run_checkpoint(run.ckpt_path, parts.model, parts.optimizers, {
            "config": vars(run.cfg), "iter": it, "tokens": tokens, "val_loss": val_loss, "meta": run.data["meta"],
            "changes": run.changes, **({"eval_pending": True} if eval_pending else {}),
            **({"mechanism": interval} if interval is not None else {})}, run.master)


def stop_here(run, parts, start_iter, it, tokens, stopped, eval_at_it=None):
    """Stop after `it` iterations (`stopped`: the signal's name): save them, unless the eval at `it`
    just did (eval_at_it "saved"; "cut": a signal stopped it; None: none was due), and say how to go on.
    The checkpoint has "val_loss": None, so a resumed run continues exactly as if never stopped: same
    batches, LRs and dropout masks, and an eval the signal cut short runs first."""
    if it > start_iter and eval_at_it != "saved":
        write_checkpoint(run, parts, it, tokens, None, eval_pending=eval_at_it == "cut")
    if it == start_iter == 0:
        run.log(f"stopped by {stopped} before the first step; nothing to save: start it again with the same command")
        return
    if it > start_iter:
        what = f"stopped by {stopped} after iteration {it}/{run.cfg.max_iters}, saved in {run.ckpt_path}"
    else:
        what = f"stopped by {stopped} before the first step; {run.ckpt_path} (iteration {it}) is unchanged"
    out_dir = shlex.quote(f"--out_dir={run.cfg.out_dir}")  # a command to paste, whatever the folder's name
    how = f"the same torchrun command with `--init_from=resume {out_dir}`" if run.ddp else \
        f"`python train.py --init_from=resume {out_dir}`"
    run.log(f"{what}: continue with {how} (or --init_from=auto, which also starts a run that has no checkpoint)")


def finish(run, parts, start, val_loss, rows, stopped=None):
    """Print a sample (a SIGTERM/SIGINT ends it at the next token: the run is saved) and the final
    line (not for a stopped run: stop_here said it); returns dict(val_loss (the last eval's),
    train_loss (rows': ops.TrainRows), wall_s, model, stopped)."""
    cfg, start_iter, raw_model = run.cfg, start.iter, parts.model
    if start_iter > 0 and start_iter == cfg.max_iters:  # resumed a finished run: nothing trained
        run.log(f"done: the run in {cfg.out_dir} is finished ({start_iter} iterations = max_iters), final val "
                f"loss {val_loss:.4f}; pass a larger --max_iters to continue it")
        return {"val_loss": val_loss, "train_loss": start.last_train_loss, "wall_s": 0.0, "model": raw_model,
                "stopped": None}
    wall = time.perf_counter() - rows.progress.t_start
    if (run.master or cfg.fsdp) and cfg.sample_tokens > 0 and not stopped:  # FSDP2: every rank runs the forwards
        end_of_run_sample(raw_model, run, parts.signals)
    if not stopped:
        run.log(f"done: {cfg.max_iters - start_iter} iterations in {wall:.0f} s, final val loss {val_loss:.4f}")
    return {"val_loss": val_loss, "train_loss": rows.loss, "wall_s": wall, "model": raw_model, "stopped": stopped}


def main(argv):
    """Command-line entry (under cli): bad input and a diverged run become one line on stderr, exit 1;
    a run a signal stopped (saved, resumable) exits with 128 + the signal's number (SIGTERM 143, SIGINT 130)."""
    if "-h" in argv or "--help" in argv:
        print(usage(__doc__, choices()))
        return 0
    clean = False  # True once train() returned: every rank of a run that ended normally is there
    try:
        cfg, given = load_config(argv)
        env = numerics_env(cfg["cpu_numerics"])
        if env:  # read as torch loads: only a fresh process takes them (cpu_numerics="portable")
            os.execve(sys.executable, [sys.executable, os.path.abspath(__file__), *argv], {**os.environ, **env})
        stopped = train(cfg, given)["stopped"]
        clean = True
        if stopped:
            return 128 + signal.Signals[stopped].value
    except FloatingPointError as e:
        raise UserError(str(e)) from None
    finally:
        end_distributed(clean)  # every rank out of every collective before any closes its connections
    return 0


if __name__ == "__main__":
    cli(main)
