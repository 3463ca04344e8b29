"""Starting a run: scratch, resume, auto or a Hugging Face folder, in the two calls train.py makes
around building the model and its optimizers:

    run, ckpt = setup(cfg, given, cleanup)   # which start, the config, device, processes, out_dir, data
    ...                                      # model.GPT, shard (FSDP2), optim.build_optimizers
    start = begin(run, ckpt, model, optimizers, val_batch)   # their first state, and the log

setup decides: init_from="auto" becomes "resume" when out_dir holds a checkpoint, else "scratch";
a resume takes the checkpoint's config (checkpoint.resume_config); --hf_model takes the folder's
config.json as the model's shape (plumbing/hf_folder.py). begin carries it out: the checkpoint's weights
and optimizer moments (checkpoint.restore), or the folder's weights, or the fresh initialization,
then trims or starts the log. What a run checks and says at its start is ops.py's.
"""

import errno
import fcntl
import os
import shlex
import socket
import stat
import sys
import tempfile
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, Callable

import torch

from plumbing.checkpoint import CKPT_NAMES, checkpoint_path, clean_stale, newest_checkpoint, restore, resume_config
from plumbing.common import (check_numerics, check_processes, distributed_env_problem, file_kind, resolve_device, say,
                             setup_distributed)
from configurator import UserError, complete, folder_problem
from plumbing.dataset import check_vocabulary, dataset_dir, load_data, meta_vocab_size, recorded_vocab_size
from plumbing.hf_folder import check_data, check_folder, load_folder, merged_config
from model import model_config
from plumbing.ops import LOG_NAME, append_log, check_config, read_log, read_rows, start_tracker, trim_log


# -----------------------------------------------------------------------------
# Owning the out_dir: one process trains there, and writes only its own files


LOCK_NAME = ".lock"


# Every name a run writes in its out_dir (a save's .tmp and .old included; wandb's folder): each must be the
# run's own file. A symbolic link, or a hard link (one file under two names: an archive that Python's
# tarfile unpacked without a filter makes them), would have a run write a file elsewhere; a FIFO would
# hold it forever. The folders among them hold files the run writes or replaces (not wandb's: its own
# links, such as latest-run, are wandb's to keep).
RUN_FILES = (LOCK_NAME, LOG_NAME, "wandb", *(name + end for name in (LOG_NAME, *CKPT_NAMES)
                                             for end in ("", ".tmp", ".old")))
RUN_FOLDERS = ("wandb", *(CKPT_NAMES[1] + end for end in ("", ".tmp", ".old")))


def not_own(path, folder=False):
    """Why the file at path is not one a run may write as its own (a line naming it and the fix), or None
    (absent, or a regular file of one link; a folder too when `folder`)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    q = shlex.quote(path)
    if stat.S_ISLNK(st.st_mode):
        return (f"{path} is a symbolic link (to {os.readlink(path)}): a run writes only its own files in out_dir, "
                f"never through a link; remove the link (what it points to stays as it is) or choose another "
                f"--out_dir")
    if stat.S_ISDIR(st.st_mode) and folder:
        return None
    if not stat.S_ISREG(st.st_mode):
        return (f"{path} is not a file but {file_kind(st.st_mode)}: a run writes only its own files in out_dir; "
                f"move it aside (mv {q} {shlex.quote(path + '.aside')}) or choose another --out_dir")
    if st.st_nlink > 1:
        own = shlex.quote(path + ".own")
        return (f"{path} has {st.st_nlink} hard links (the same file under another name, which the run would "
                f"write too): a run writes only its own files in out_dir; make it a copy of its own "
                f"(cp -p {q} {own} && mv {own} {q}) or choose another --out_dir")
    return None


def refuse_not_own(out_dir):
    """UserError (one line, naming the file and the fix: not_own) when a name the run writes in out_dir
    (RUN_FILES) is not the run's own file: a symbolic link, a file with more than one hard link, a FIFO,
    a device; the same for every file in a ckpt.dcp folder (its form and its save's .tmp and .old).
    out_dir itself is no link (configurator.folder_problem refuses one; a link above it is fine). Called
    before the run writes anything."""
    for name in dict.fromkeys(RUN_FILES):
        path = os.path.join(out_dir, name)
        problem = not_own(path, folder=name in RUN_FOLDERS)
        if problem is None and name != "wandb" and os.path.isdir(path) and not os.path.islink(path):
            for top, dirs, files in os.walk(path):  # (os.walk follows no link: not_own names them)
                problem = next(filter(None, (not_own(os.path.join(top, f), folder=f in dirs)
                                             for f in sorted(dirs + files))), None)
                if problem:
                    break
        if problem:
            raise UserError(problem)


class OutDirInUse(UserError):
    """Another process holds an out_dir's lock (lock_out_dir)."""


def lock_out_dir(out_dir):
    """Make out_dir and own it: an exclusive flock on out_dir/.lock, which then holds this
    process's pid and host. Returns the open lock file: closing it releases the lock, and so
    does the end of the process, however it ends (the kernel drops the lock, even on SIGKILL).

    Raises UserError, one line naming the holder's pid and host, when another process holds
    the lock; the refused process writes nothing. Raises UserError when out_dir is not
    writable, or when a file the run would write there is not its own (refuse_not_own: a link, a
    hard link, a FIFO), before anything is written. On a filesystem without flock (some network mounts) warns and goes on unlocked.
    """
    path = os.path.join(out_dir, LOCK_NAME)
    problem = folder_problem(out_dir)
    if problem:
        raise UserError(f"out_dir={out_dir!r}: {problem}")
    refuse_not_own(out_dir)
    try:
        os.makedirs(out_dir, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)  # an existing file is opened, not changed
    except PermissionError as e:
        if os.path.lexists(path) and os.access(out_dir, os.W_OK | os.X_OK):  # the folder is writable; its lock is not
            mode = stat.S_IMODE(os.lstat(path).st_mode)
            raise UserError(f"{path}, the run's lock file, is not writable by this user (mode {mode:03o}): give it "
                            f"back its mode (chmod u+rw {shlex.quote(path)}) or choose another --out_dir") from None
        raise UserError(f"cannot write to out_dir={out_dir!r} ({e.strerror or type(e).__name__}): "
                        f"choose a writable --out_dir") from None
    except OSError as e:
        raise UserError(f"cannot write to out_dir={out_dir!r} ({e.strerror or type(e).__name__}): "
                        f"choose a writable --out_dir") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            print(f"warning: cannot lock {path} ({e.strerror}; this filesystem lacks flock): nothing stops "
                  f"a second process from training in out_dir={out_dir!r} at the same time", file=sys.stderr)
        else:
            pid, _, host = os.pread(fd, 300, 0).decode(errors="replace").strip().partition(" ")
            os.close(fd)
            raise OutDirInUse(f"out_dir={out_dir!r} is in use: process {pid or '?'} on {host or '?'} is training "
                            f"there (it holds {path}); wait for it to end, stop it (kill -TERM {pid or '<pid>'} "
                            f"saves and stops it), or choose another --out_dir") from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()} {socket.gethostname()}\n".encode(), 0)
    try:
        with tempfile.TemporaryFile(dir=out_dir):  # the lock file may exist already: can we create files?
            pass
    except OSError as e:
        os.close(fd)
        raise UserError(f"cannot write to out_dir={out_dir!r} ({e.strerror or type(e).__name__}): "
                        f"choose a writable --out_dir") from None
    return os.fdopen(fd, "w")


# -----------------------------------------------------------------------------
# The start


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


def remove_if_unused(out_dir):
    """Remove out_dir, which this run made, when the run ends with nothing in it but its lock and an
    empty log: it was refused (max_estimated_hours, a model that cannot be built) or stopped before
    its first row, so the folder holds nothing to continue and would only refuse the next try."""
    log = os.path.join(out_dir, LOG_NAME)
    names = set(os.listdir(out_dir))
    if names <= {LOCK_NAME, LOG_NAME} and (LOG_NAME not in names or os.path.getsize(log) == 0):
        for name in names:
            os.unlink(os.path.join(out_dir, name))
        os.rmdir(out_dir)


def setup(cfg, given, cleanup):
    """(Run, the checkpoint dict to resume from or None): the run's state before any model exists.

    cfg: a full config dict; given: the keys the user set. Rank 0 owns out_dir
    (lock_out_dir, into `cleanup`, an ExitStack that releases it) before it reads or writes
    anything there: at once when the folder exists, else once the config and the data are checked
    (a refused run makes no folder). A W&B tracker (wandb_log) starts here, unless the checkpoint's
    run is finished. Raises UserError for bad input, a scratch run on an out_dir that holds one, or
    an out_dir another process owns.
    """
    if not cfg["out_dir"].strip():
        raise UserError(f"out_dir={cfg['out_dir']!r} is empty: set --out_dir=DIR (the run's checkpoint and log go "
                        f"there)")
    problem = distributed_env_problem(os.environ)  # before anything reads RANK
    if problem:
        raise UserError(problem)
    owner = int(os.environ.get("RANK", "0")) == 0  # rank 0, as setup_distributed reads it
    new_dir = owner and not os.path.isdir(cfg["out_dir"])
    if owner and not new_dir:  # it may hold a run: own it before reading the checkpoint
        cleanup.enter_context(lock_out_dir(cfg["out_dir"]))
        clean_stale(cfg["out_dir"])  # what a save a SIGKILL cut short left: never the checkpoint
    cfg, ckpt, held_run = start_config(cfg, given)
    check_config({**cfg, "vocab_size": cfg["vocab_size"] or recorded_vocab_size(cfg["dataset"])})  # the real logits
    cfg = SimpleNamespace(**cfg)
    check_numerics(cfg.cpu_numerics)
    check_processes(cfg.gradient_accumulation_steps, cfg.batch_size, cfg.fsdp)
    if cfg.hf_model and ckpt is None and cfg.hf_check and owner:  # the folder as transformers reads it (CPU)
        check_folder(cfg, lambda line: print(line, flush=True))
    device_name, dtype = resolve_device(cfg.device, cfg.dtype)
    rank, local_rank, world = setup_distributed(device_name, cfg.ddp_timeout_s)
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
    data = load_data(cfg.dataset, cfg.block_size, cfg.vocab_size, prepare_here=local_rank == 0)
    cfg.vocab_size = cfg.vocab_size or meta_vocab_size(data["meta"], cfg.dataset)
    check_vocabulary(data["meta"], cfg.vocab_size, ckpt and ckpt.get("meta"), dataset_dir(cfg.dataset))
    if cfg.init_from == "scratch" and held_run:
        raise UserError(f"out_dir={cfg.out_dir!r} already holds a run ({held_run}): continue it with "
                        f"--init_from=resume (or auto), or train from scratch in another --out_dir (or delete it)")
    if new_dir:  # a refused config or dataset leaves no folder behind
        cleanup.enter_context(lock_out_dir(cfg.out_dir))
        cleanup.callback(remove_if_unused, cfg.out_dir)  # nor one refused later (the duration), before a row
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
        log=say if master else (lambda *a: None),
        tracker=start_tracker(cfg, master, finished, cleanup)), ckpt


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
    Raises UserError as restore and load_folder do, and (ops.read_rows) for a kept log
    row that research code would refuse (an eval row's val_loss that is no number): said at the
    resume, not by the plot or sweep after the run.
    """
    start_iter, val_loss, evaluated = 0, float("nan"), True
    if ckpt is None and run.cfg.hf_model:  # continued pre-training of a Hugging Face model
        load_folder(model, run.cfg.hf_model, val_batch(), run.log)
    if ckpt is not None:
        start_iter, val_loss = restore(ckpt, model, optimizers, run.cfg)
        evaluated = val_loss is not None or ckpt.get("eval_pending", False)  # (an eval a signal cut short)
        val_loss = float("nan") if val_loss is None else val_loss
        if run.master and not os.path.lexists(run.log_path):
            q = shlex.quote(run.log_path)
            raise UserError(f"{run.log_path} is missing (the checkpoint at iteration {start_iter} is there): put the "
                            f"run's log back, or resume with an empty one (touch {q}), which keeps the rows from here "
                            f"on (the run's curves then start at {start_iter}, and a sweep will not record it)")
        if run.master:
            trim_log(run.log_path, start_iter)
            read_rows(run.log_path)  # a row research code would refuse is refused now, not after the run ends
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
    closed = any(r["kind"] == "eval" and r["iter"] == start_iter for r in logged)  # (the interval too)
    flags = torch.tensor([float(start_iter > 0 and (evaluated or start_iter == run.cfg.max_iters) and not closed),
                          float(closed)], device=run.device)
    if run.ddp:  # rank 0 holds the log; every rank evaluates, and under FSDP2 reads the interval's shards
        torch.distributed.broadcast(flags, 0)
    missing, closed = bool(flags[0].item()), bool(flags[1].item())
    last_train_loss = next((r["loss"] for r in reversed(logged) if r["kind"] == "train"), float("nan"))
    interval = None if ckpt is None or closed else ckpt.get("mechanism")
    if interval and interval.get("sharded"):  # its tensors are in ckpt.dcp (Mechanism reads them there)
        interval = {**interval, "dcp": ckpt["dcp"]}
    return Start(start_iter, run.tokens, val_loss, missing, last_train_loss, interval)
