"""Checkpoints: atomic save, checked load, resume, and a model back for sampling/export (log.jsonl is
written and read by ops.py: append_log, read_log, trim_log).

A run's out_dir holds
    ckpt.pt    {"model": state dict (uncompiled, unwrapped), "optimizers": [state dicts],
                "config": the run's full config, "iter", "tokens", "val_loss", "meta": meta.pkl's dict}
               written at every eval and at the end, atomically (a crash never leaves half a file);
               also when a signal stops the run between evals, with "val_loss": None (no eval there);
               "mechanism": the mechanism statistics' open interval, when it began before "iter"
    log.jsonl  one JSON object per train step and per eval ("kind": "train" | "eval", "iter", "tokens",
               then "loss" and "lr", or "val_loss" and per-site scale statistics)
    .lock      the pid and host of the process training there (start.lock_out_dir): one owner per run
A run with fsdp=True writes ckpt.dcp/ instead of ckpt.pt: a torch.distributed.checkpoint folder
(each rank writes its shards of the weights and AdamW moments, keyed by parameter name) with
run.pt beside them (ckpt.pt's other keys, and the optimizer groups' layout); also written so
that a crash leaves the old one or the new one. Either form resumes under either mode and any
number of processes (the folder is resharded on load), and load_model reads either, so sample.py
and export.py need no conversion. A save removes the other form: out_dir holds one checkpoint.
Resume (`--init_from=resume`) continues exactly: the model shape and every key the
user does not set again come from the checkpoint; rows logged after it are dropped.
"""

import io
import os
import pickle
import shlex
import shutil
import warnings
from contextlib import contextmanager

import torch

from plumbing.common import checked_stat, open_checked
from plumbing.disk import present, writing
from plumbing.memory import check_buildable, shape_problems
from configurator import TRACKING_KEYS, UserError, complete


@contextmanager
def atomic_write(path, mode="w", encoding=None):
    """Open path + '.tmp' for writing, made anew (whatever has that name goes first: a FIFO would hold
    the open, a link or a hard-linked file would be written through); on a clean exit fsync it and
    rename it over path, so a reader sees the old file or the new one, never a part, and nothing at
    path is written through. On any error (a full disk, Ctrl-C) the .tmp is removed, path is untouched,
    and an OSError is raised again with path as its filename (also one a library wrapped in a
    RuntimeError, as torch.save does)."""
    tmp = path + ".tmp"
    if os.path.isdir(tmp) and not os.path.islink(tmp):  # not ours to remove: said, nothing written
        raise UserError(f"{tmp} is a folder, where {os.path.basename(path)}'s temporary is written: move it aside "
                        f"(mv {shlex.quote(tmp)} {shlex.quote(tmp + '.aside')}), then run again")
    made = False
    try:
        if os.path.lexists(tmp):
            os.remove(tmp)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        made = True
        with open(fd, mode, encoding=encoding) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        if made and os.path.lexists(tmp):
            os.remove(tmp)
        if isinstance(e, RuntimeError) and isinstance(e.__context__, OSError):  # torch.save wraps the file's error
            e = e.__context__
        if isinstance(e, OSError) and e.errno is not None and e.filename in (None, tmp):  # os.write names no file
            raise OSError(e.errno, e.strerror, path) from None
        raise


def save_checkpoint(path, state):
    """torch.save, atomically (atomic_write): a crash or a full disk never leaves a half-written ckpt."""
    with atomic_write(path, "wb") as f:
        torch.save(state, f)


CKPT_NAMES = ("ckpt.pt", "ckpt.dcp")  # one file; the sharded folder of an fsdp=True run


def checkpoint_path(out_dir, fsdp=False):
    """Where a run writes its checkpoint: out_dir/ckpt.pt, or out_dir/ckpt.dcp under fsdp."""
    return os.path.join(out_dir, CKPT_NAMES[bool(fsdp)])


def checkpoint_in(out_dir):
    """The checkpoint out_dir holds (newest_checkpoint): ckpt.pt or ckpt.dcp; ckpt.pt's path when it
    holds neither (load_checkpoint then says so)."""
    return newest_checkpoint(out_dir)[0]


def newest_checkpoint(out_dir):
    """(path, passed): the whole checkpoint of either form in out_dir that holds the most iterations,
    and [(path, why)] for each one it passes over (damaged, or older). Both forms exist only when a
    kill fell between a save and the removal of the other form, so either may be the newer one, and a
    half-removed one is damaged. When none is whole, path is a damaged one (load_checkpoint then says
    why) or, when there is none, ckpt.pt's path."""
    found = []
    for path in (checkpoint_path(out_dir), checkpoint_path(out_dir, fsdp=True)):
        if os.path.exists(path):
            found.append((path, *whole_iteration(path)))
    good = sorted((it, path) for path, it, _ in found if it is not None)
    if not good:
        return (found[0][0] if found else checkpoint_path(out_dir)), []
    newest = good[-1][1]
    passed = [(path, why or f"older: iteration {it}, the newer one holds {good[-1][0]}") for path, it, why in found
              if path != newest]
    return newest, passed


def whole_iteration(path):
    """(iteration, None) when the checkpoint at path reads whole, else (None, why), without loading its
    weights: ckpt.pt by torch.load(mmap=True) (its tensors stay on disk); ckpt.dcp by its run.pt and
    the shard files its metadata names, each a regular file inside the folder as long as the metadata
    says. Nothing is opened that is not a regular file (common.checked_stat): a FIFO never blocks."""
    try:
        if os.path.isdir(path):
            it = load_checkpoint(os.path.join(path, "run.pt"))["iter"]
            for info in sharded_reader(path).read_metadata().storage_data.values():
                shard = os.path.join(path, info.relative_path)
                if not os.path.lexists(shard) or checked_stat(shard, path).st_size < info.offset + info.length:
                    return None, f"damaged: {info.relative_path} is missing or cut short"
            return it, None
        checked_stat(path)  # (torch.load maps it by name)
        with open_checked(path) as f:
            refuse_foreign_records(f, path)
        ckpt = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
        return ckpt["iter"], None
    except Exception as e:  # (UserError too: run.pt missing or unreadable)
        return None, f"damaged ({type(e).__name__}: {str(e)[:80]})"


# torch.distributed.checkpoint's own reader unpickles ckpt.dcp/.metadata with a plain pickle.load and
# its non-tensor entries (the optimizer groups' lr, betas, names) with torch.load(weights_only=False):
# either runs whatever a downloaded folder's pickle names. These two read the same files as data.
DCP_METADATA_CLASSES = {
    ("torch.distributed.checkpoint.metadata", name) for name in (
        "Metadata", "TensorStorageMetadata", "TensorProperties", "ChunkStorageMetadata",
        "BytesStorageMetadata", "MetadataIndex", "StorageMeta", "_MEM_FORMAT_ENCODING")} | {
    ("torch.distributed.checkpoint.filesystem", "_StorageInfo"), ("torch.serialization", "_get_layout"),
    ("torch", "Size"), ("pathlib", "PosixPath"), ("pathlib", "PurePosixPath"), ("collections", "OrderedDict")}


class DcpMetadataUnpickler(pickle.Unpickler):
    """Reads a ckpt.dcp/.metadata pickle as data: it may build torch.distributed.checkpoint's metadata
    dataclasses, torch dtypes, torch.Size, a layout by name and a path, nothing else (DCP_METADATA_CLASSES).
    Any other global (os.system, a class with __reduce__) raises pickle.UnpicklingError before it is
    imported or called, as dataset.PlainUnpickler does for meta.pkl."""

    def find_class(self, module, name):
        if (module, name) in DCP_METADATA_CLASSES or (
                module == "torch" and isinstance(getattr(torch, name, None), torch.dtype)):
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"it would build {module}.{name}")


def sharded_reader(path):
    """A torch.distributed.checkpoint FileSystemReader for the ckpt.dcp folder at path whose metadata
    is read by DcpMetadataUnpickler (pickle.UnpicklingError, naming the global, for anything else), and
    whose every file is opened by common.open_checked inside the folder: UserError, before any read, for
    a relative_path the metadata names outside it, and for a file that is a link, a FIFO or a device."""
    from torch.distributed.checkpoint import FileSystemReader
    from torch.distributed.checkpoint.metadata import Metadata, StorageMeta

    @contextmanager
    def checked_stream(file, mode):
        with open_checked(file, path) as f:
            yield f

    class Reader(FileSystemReader):
        def __init__(self, folder):
            super().__init__(folder)
            self.fs.create_stream = checked_stream  # how FileSystemReader opens .metadata and the shards

        def read_metadata(self, *args, **kwargs):
            with self.fs.create_stream(self._get_metadata_path(kwargs.get("rank")), "rb") as f:
                metadata = DcpMetadataUnpickler(f).load()
            if not isinstance(metadata, Metadata):
                raise pickle.UnpicklingError(f"it holds a {type(metadata).__name__}, not a checkpoint's Metadata")
            for info in (metadata.storage_data or {}).values():  # said now, before any shard is read
                relative = getattr(info, "relative_path", None)
                if not isinstance(relative, str) or os.path.isabs(relative) or ".." in relative.split(os.sep):
                    raise UserError(f"{path}/.metadata names the shard file {relative!r}, which lies outside "
                                    f"{path}: a checkpoint's files are read only inside its folder, and nothing "
                                    f"of it was read; use a checkpoint that train.py wrote")
            if getattr(metadata, "storage_meta", None) is None:
                metadata.storage_meta = StorageMeta()
            metadata.storage_meta.load_id = self.load_id
            return metadata

    return Reader(path)


def sharded_planner():
    """torch.distributed.checkpoint's DefaultLoadPlanner whose non-tensor entries load with
    torch.load(weights_only=True): plain values only, as every ckpt.pt is read."""
    from torch.distributed.checkpoint import DefaultLoadPlanner
    from torch.distributed.checkpoint._traverse import set_element  # (what DefaultLoadPlanner uses)

    class Planner(DefaultLoadPlanner):
        def load_bytes(self, read_item, value):
            loaded = torch.load(io.BytesIO(value.read()), weights_only=True)
            if self.flatten_state_dict:
                set_element(self.original_state_dict, self.mappings[read_item.dest_index.fqn], loaded)
            else:
                self.state_dict[read_item.dest_index.fqn] = loaded

    return Planner()


def clean_stale(out_dir):
    """Remove what a save that a SIGKILL cut short left in out_dir (never the checkpoint): ckpt.pt.tmp,
    ckpt.dcp.tmp; a ckpt.dcp.old whose replacement was not yet in place becomes ckpt.dcp again."""
    dcp = checkpoint_path(out_dir, fsdp=True)
    if os.path.exists(dcp + ".old") and not os.path.exists(dcp):
        os.replace(dcp + ".old", dcp)
    for stale in (checkpoint_path(out_dir) + ".tmp", dcp + ".tmp", dcp + ".old"):
        if os.path.isdir(stale):
            shutil.rmtree(stale)
        elif os.path.exists(stale):
            os.remove(stale)


def optimizer_layout(param_groups):
    """[[(group name, parameter count)] per optimizer] from each optimizer's param_groups (live, or a
    saved state dict's): how the parameters split into groups."""
    return [[(g.get("name"), len(g["params"])) for g in groups] for groups in param_groups]


def saved_params(saved, opt):
    """{index in a saved optimizer state dict: this run's parameter}: the indices follow the
    optimizer's own order (restore checks that the groups match first)."""
    return dict(zip((i for g in saved["param_groups"] for i in g["params"]),
                    (p for g in opt.param_groups for p in g["params"])))


# The open mechanism interval's entries of a tensor per parameter (Mechanism.state): ckpt.dcp keeps them beside the weights
SHARDED_INTERVAL = ("copy", "sgd")


def save_run_checkpoint(path, model, optimizers, state, master):
    """Write a run's checkpoint at path: `state` (config, iter, tokens, ...) with the weights and the
    optimizer moments. path ckpt.pt: rank 0 saves the whole state dicts (save_checkpoint). path
    ckpt.dcp (FSDP2: call on every rank): torch.distributed.checkpoint saves each rank's shards
    (and those of state["mechanism"]'s SHARDED_INTERVAL tensors, run.pt's "mechanism" then holding
    the rest and "sharded": True; read_sharded_entries reads them back)
    into ckpt.dcp.tmp, rank 0 adds run.pt and swaps it in (old -> .old, tmp -> path, .old removed;
    clean_stale completes a swap a kill cut). Then rank 0 removes the other form, if any."""
    if path.endswith(".pt"):
        if master:
            save_checkpoint(path, {"model": model.state_dict(), "optimizers": [o.state_dict() for o in optimizers],
                                   **state})
    else:
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_optimizer_state_dict

        tmp = path + ".tmp"
        if master and os.path.exists(tmp):
            shutil.rmtree(tmp)
        torch.distributed.barrier()
        interval = state.get("mechanism")  # its tensors are each rank's shards (DTensors): saved as the weights are
        shards = {"mechanism": {k: interval[k] for k in SHARDED_INTERVAL}} if interval else {}
        with writing(tmp):  # (dcp wraps a full disk's OSError in its CheckpointException)
            dcp.save({"model": get_model_state_dict(model), "optimizers": get_optimizer_state_dict(model, optimizers),
                      **shards}, checkpoint_id=tmp)  # a collective: it returns once every rank's shards are written
        if interval:  # run.pt keeps the rest, and says where the tensors are
            state = {**state, "mechanism": {**{k: v for k, v in interval.items() if k not in SHARDED_INTERVAL},
                                            "sharded": True}}
        if master:
            save_checkpoint(os.path.join(tmp, "run.pt"), {**state, "layout": optimizer_layout(o.param_groups for o in optimizers)})
            if os.path.exists(path):
                os.replace(path, path + ".old")
            os.replace(tmp, path)
            shutil.rmtree(path + ".old", ignore_errors=True)
        torch.distributed.barrier()
    other = checkpoint_path(os.path.dirname(path), fsdp=path.endswith(".pt"))
    if master and os.path.exists(other):
        shutil.rmtree(other) if os.path.isdir(other) else os.remove(other)


def refuse_foreign_records(f, path):
    """UserError (one line) when the zip archive f (a ckpt.pt or run.pt, open for reading at its start)
    holds a record torch.save never writes: a compressed one (torch stores every record as is), or one
    whose stated size is past the archive's own. Read from the archive's directory alone, before any
    record: a 2 MB file that inflates to 2 GB (a zip bomb) costs nothing. A file that is no zip passes
    to torch.load, which names it."""
    import zipfile
    size = os.fstat(f.fileno()).st_size
    try:
        records = zipfile.ZipFile(f).infolist()
    except (zipfile.BadZipFile, OSError, ValueError):
        f.seek(0)
        return
    f.seek(0)
    for info in records:
        if info.compress_type != zipfile.ZIP_STORED or info.file_size > size:
            how = "compressed" if info.compress_type != zipfile.ZIP_STORED else "larger than the file"
            raise UserError(f"checkpoint {path} is refused: its record {info.filename} is {how} ({info.file_size:,} "
                            f"bytes stated, in a file of {size:,}), which torch.save never writes; nothing of it was "
                            f"read. Use a checkpoint that train.py wrote")


def load_checkpoint(path):
    """The checkpoint dict (tensors on the CPU); UserError if it is missing, unreadable or incomplete,
    or not a regular file of its folder (a link, a FIFO, a device: common.open_checked). A sharded
    ckpt.dcp folder gives its run.pt (no tensors) with "dcp": path (restore, load_model read the
    tensors from there)."""
    if not present(path):
        raise UserError(f"no checkpoint at {path}: point --out_dir at a run that train.py wrote")
    if os.path.isdir(path) and not os.path.islink(path):
        if os.path.basename(os.path.normpath(path)) != CKPT_NAMES[1]:  # a folder where ckpt.pt belongs: not sharded
            q = shlex.quote(path)
            raise UserError(f"{path} is a folder, not the checkpoint file train.py writes there: move it aside "
                            f"(mv {q} {shlex.quote(path + '.aside')}) or point --out_dir at the run")
        return {**load_checkpoint(os.path.join(path, "run.pt")), "dcp": path}
    try:
        with open_checked(path, os.path.dirname(path)) as f:  # a FIFO, a device or a link: one line, never a wait
            refuse_foreign_records(f, path)
            ckpt = torch.load(f, map_location="cpu", weights_only=True)
    except (UserError, PermissionError):  # (this user's access, not damage: cli says which)
        raise
    except Exception as e:  # torch raises several types for a damaged zip/pickle
        raise UserError(f"checkpoint {path} is unreadable ({type(e).__name__}: {str(e)[:200]}); "
                        f"it is damaged or not a scalevec checkpoint: restore it from a copy, or "
                        f"train again into a new --out_dir") from None
    needed = {"config", "iter", "layout"} if path.endswith("run.pt") else {"model", "optimizers", "config", "iter"}
    missing = needed - set(ckpt if isinstance(ckpt, dict) else ())
    if missing:
        raise UserError(f"checkpoint {path} lacks {sorted(missing)}: not a scalevec checkpoint")
    for key, (kinds, ok, what) in CKPT_FIELDS.items():
        value = ckpt.get(key)
        a_bool = isinstance(value, bool) and kinds is not bool  # (True is an int to isinstance)
        if key in ckpt and (a_bool or not isinstance(value, kinds) or not ok(value)):
            raise UserError(f"checkpoint {path} holds {key}={str(ckpt[key])[:60]!r}: it must be {what}; the file was "
                            f"edited or is not a scalevec checkpoint: use the checkpoint as train.py wrote it")
    return ckpt


# What each field of a checkpoint train.py writes holds: (types, a check of the value, its words).
CKPT_FIELDS = {
    "iter": (int, lambda v: v >= 0, "a whole number of iterations >= 0"),
    "tokens": (int, lambda v: v >= 0, "a whole number of tokens >= 0"),
    "config": (dict, lambda v: all(isinstance(k, str) for k in v), "a dict of config keys"),
    "val_loss": ((float, int, type(None)), lambda v: v is None or v == v, "a number or None"),
    "meta": ((dict, type(None)), lambda v: True, "meta.pkl's dict or None"),
    "changes": (list, lambda v: all(isinstance(c, dict) for c in v), "a list of {iter, changed}"),
    "eval_pending": (bool, lambda v: True, "True or False"),
    "mechanism": (dict, lambda v: {"since", "gamma"} <= set(v) and type(v["since"]) is int
                  and ("copy" in v or v.get("sharded") is True),
                  "the open interval's {since, copy, gamma} (copy in ckpt.dcp when sharded)"),
}


# -----------------------------------------------------------------------------
# Resume


def resume_config(cfg, given):
    """(config, checkpoint, tokens seen, changed, changes) for `--init_from=resume` from cfg["out_dir"]'s
    checkpoint (ckpt.pt or ckpt.dcp).

    The model's shape keys come from the checkpoint (UserError if the user set one
    to another value; d_ff and vocab_size of 0 mean "as before"); the keys the user
    gave win over the checkpoint's others (e.g. a larger --max_iters). changed: this
    resume's {key: [checkpoint's value, this run's]} ({} when none); changes: the
    checkpoint's record of earlier changes plus this one, [{"iter", "changed"}], so a run's
    config never hides what part of it ran on other values (the run writes it into every
    later checkpoint, and this resume's into the log).
    Raises UserError for a missing/damaged checkpoint or one past max_iters.
    """
    from model import MODEL_KEYS
    ckpt = load_checkpoint(checkpoint_in(cfg["out_dir"]))
    saved = complete(ckpt["config"])  # a key added since it was written takes the value it meant then
    for key in MODEL_KEYS & given:
        if cfg[key] != saved[key] and not (key in ("d_ff", "vocab_size") and cfg[key] == 0):
            raise UserError(f"--init_from=resume: {key}={cfg[key]!r} differs from the checkpoint's "
                            f"{saved[key]!r}; the model shape comes from the checkpoint")
    merged = {**saved, **{k: cfg[k] for k in given - MODEL_KEYS}, "init_from": "resume"}
    if ckpt["iter"] > merged["max_iters"]:
        raise UserError(f"--init_from=resume: the checkpoint is at iteration {ckpt['iter']}, past "
                        f"max_iters={merged['max_iters']}: pass a larger --max_iters to continue")
    c = ckpt["config"]  # a checkpoint without the count: its run kept one batch size
    tokens = ckpt.get("tokens", ckpt["iter"] * c["batch_size"] * c["block_size"] * c["gradient_accumulation_steps"])
    changed = {k: [saved[k], cfg[k]] for k in sorted(given - MODEL_KEYS - {"init_from", "out_dir", *TRACKING_KEYS})
               if cfg[k] != saved[k]}
    changes = list(ckpt.get("changes", [])) + ([{"iter": ckpt["iter"], "changed": changed}] if changed else [])
    return merged, ckpt, tokens, changed, changes


# The keys that decide how the parameters split into optimizer groups (optim.param_groups),
# beside the model's shape (which a resume takes from the checkpoint).
GROUP_KEYS = ("optimizer", "scale_wd")


def restore(ckpt, model, optimizers, cfg):
    """Load the checkpoint's weights and optimizer moments into model and optimizers, in place.

    The optimizers keep this run's hyperparameters (lr, weight decay, betas):
    a resumed run may change them (--learning_rate=...); only the moments and
    step counts come from the checkpoint. Returns (iteration, val loss); the val loss is None
    for a checkpoint saved between evals (a run stopped by a signal).
    Raises UserError, one line naming the keys (GROUP_KEYS) that differ from the checkpoint's and
    the fix, when this config splits the parameters into other optimizer groups than the
    checkpoint's (another optimizer; scale_wd "iwd" vs "iwd_final" with a tied head).
    """
    layout = ckpt["layout"] if "dcp" in ckpt else optimizer_layout(s["param_groups"] for s in ckpt["optimizers"])
    if [[tuple(g) for g in o] for o in layout] != optimizer_layout(o.param_groups for o in optimizers):
        saved = complete(ckpt["config"])
        changed = [k for k in GROUP_KEYS if vars(cfg)[k] != saved[k]]
        keys = " and ".join(f"{k}={vars(cfg)[k]!r} (the checkpoint's: {saved[k]!r})" for k in changed) or \
            "this code"
        fix = " ".join(f"--{k}={saved[k]}" for k in changed)
        raise UserError(f"--init_from=resume: {keys} splits the parameters into other optimizer groups than the "
                        f"checkpoint's, so its optimizer state cannot be restored: resume with {fix or 'the code that saved it'}"
                        f", or start a new run in another --out_dir")
    hyper = [[{k: v for k, v in g.items() if k != "params"} for g in opt.param_groups] for opt in optimizers]
    if "dcp" in ckpt:
        load_sharded(ckpt["dcp"], model, optimizers)
    else:
        load_weights(model, ckpt["model"], "the checkpoint")
        states = [reshaped_moments(state, opt) for opt, state in zip(optimizers, ckpt["optimizers"])]
        if is_sharded(model):  # a ckpt.pt resumed under FSDP2: each rank takes its shards of the whole state
            from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict
            set_optimizer_state_dict(model, optimizers, by_name(states, optimizers, model),
                                     options=StateDictOptions(full_state_dict=True))
        else:
            for opt, state in zip(optimizers, states):
                opt.load_state_dict(state)
    for opt, h in zip(optimizers, hyper):  # the load restored the checkpoint's hyperparameters: this run's win
        for group, this_run in zip(opt.param_groups, h):
            group.update(this_run)
    return ckpt["iter"], ckpt.get("val_loss", float("nan"))  # None: saved between evals


def is_sharded(model):
    """Whether FSDP2 shards model (common.shard)."""
    from torch.distributed.fsdp import FSDPModule
    return isinstance(model, FSDPModule)


def by_name(states, optimizers, model):
    """torch's optimizer state dicts (parameters as indices) as one keyed by parameter name, the form
    torch.distributed.checkpoint.state_dict reads: the indices follow the optimizers' own order."""
    names = {id(p): n for n, p in model.named_parameters()}
    state, groups = {}, []
    for opt, saved in zip(optimizers, states):
        name = {i: names[id(p)] for i, p in saved_params(saved, opt).items()}
        state |= {name[i]: s for i, s in saved["state"].items()}
        groups += [{**g, "params": [name[i] for i in g["params"]]} for g in saved["param_groups"]]
    return {"state": state, "param_groups": groups}


def load_sharded(path, model, optimizers=()):
    """Read a ckpt.dcp folder's weights (and the optimizers' moments) into model, in place, whether FSDP2
    shards it (each rank reads its shards) or not (the whole tensors), in one process or several:
    torch.distributed.checkpoint reshards what was saved under any number of processes.
    Raises UserError naming the folder when it cannot be read into this model (a shard file
    missing or cut, another shape)."""
    from torch.distributed.checkpoint.state_dict import (get_model_state_dict, get_optimizer_state_dict,
                                                         set_model_state_dict, set_optimizer_state_dict)

    state = {"model": get_model_state_dict(model)}
    if optimizers:  # (a fresh optimizer's state is made first, by a step at LR 0, to have tensors to fill)
        state["optimizers"] = get_optimizer_state_dict(model, optimizers)

    def into_model():
        set_model_state_dict(model, state["model"])
        if optimizers:
            set_optimizer_state_dict(model, optimizers, state["optimizers"])
    read_sharded_entries(path, state, torch.distributed.is_initialized(), then=into_model)


def read_sharded_entries(path, state, collective, then=None):
    """Fill `state`, a nested dict of tensors named as the ckpt.dcp folder at path names them, in place
    from the folder (a DTensor takes this rank's shards, a plain tensor the whole), then call then().
    collective: every rank of the process group reads together (a DTensor needs it); else this
    process reads alone. Raises UserError naming the folder for a pickle that names code, a file
    that is not the folder's own, or an entry missing, cut or of another shape."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.api import CheckpointException

    try:  # the metadata first, so a pickle that names code is refused as such, not as a damaged file
        sharded_reader(path).read_metadata()
    except UserError:  # a file that is not the folder's own (a link, a FIFO, outside it): said as such
        raise
    except pickle.UnpicklingError as e:
        raise UserError(f"{path} is refused: its .metadata {e}, and a checkpoint's metadata holds data only; "
                        f"nothing of it ran. Use a checkpoint that train.py wrote") from None
    except PermissionError:  # this user's access, not the folder's damage: cli says which
        raise
    except Exception:
        pass  # (missing or damaged: dcp.load says which below)
    try:
        with warnings.catch_warnings():  # one process reading the folder whole is what load_model means
            warnings.filterwarnings("ignore", message="torch.distributed is disabled, unavailable or uninit")
            dcp.load(state, storage_reader=sharded_reader(path), planner=sharded_planner(), no_dist=not collective)
        if then is not None:
            then()
    except (Exception, CheckpointException) as e:  # (a BaseException): a shard missing or cut, another shape
        cause = e.failures[min(e.failures)] if isinstance(e, CheckpointException) and e.failures else e
        cause = cause[0] if isinstance(cause, tuple) else cause  # a rank's failure: (exception, its stack)
        if isinstance(cause, PermissionError):  # (a shard this user may not read: not damage)
            raise cause from None
        if isinstance(cause, pickle.UnpicklingError) and (  # ours (.metadata) or torch's (an entry's bytes)
                str(cause).startswith("it would build") or "Weights only load failed" in str(cause)):
            raise UserError(f"{path} is refused: a pickle in it names code ({str(cause)[:120]}), and a checkpoint holds "
                            f"data only; nothing of it ran. Use a checkpoint that train.py wrote") from None
        first = (str(cause).strip().splitlines() or [""])[0][:200]
        raise UserError(f"{path} cannot be read into the model its config describes ({type(cause).__name__}: "
                        f"{first}): a file of the folder is missing or damaged, or run.pt was edited; use the "
                        f"checkpoint as saved, or train again") from None


def reshaped_moments(state, opt):
    """An optimizer state dict whose 0-d moments of (1,) parameters take their parameter's shape: the
    OR/ER magnitudes were 0-d before they became (1,) (FSDP2 shards no 0-d tensor), and an in-place
    update of a 0-d moment by a (1,) gradient fails. The step counts (0-d by design) stay."""
    shape = {i: p.shape for i, p in saved_params(state, opt).items()}
    moments = {i: {k: v.reshape(1) if k != "step" and torch.is_tensor(v) and v.dim() == 0 and shape.get(i) == (1,)
                   else v for k, v in per_param.items()} for i, per_param in state["state"].items()}
    return {**state, "state": moments}


def load_model(ckpt_path, device="cpu"):
    """(model.GPT in eval mode on device, checkpoint dict) for sampling and export, from ckpt.pt or
    a sharded ckpt.dcp folder (read whole in this process).

    Works for checkpoints saved with or without compile/DDP (their "_orig_mod." /
    "module." prefixes are stripped). Raises UserError if the file is unreadable, or (check_buildable,
    before anything is built) when its config is not the shape of its weights or past this machine's memory.
    """
    from model import GPT, model_config

    ckpt = load_checkpoint(ckpt_path)
    check_buildable(ckpt["config"], saved_shapes(ckpt), ckpt_path, device)
    model = GPT(model_config(ckpt["config"]))
    if "dcp" in ckpt:
        load_sharded(ckpt["dcp"], model)
        load_weights(model, model.state_dict(), ckpt_path)  # its checks: no NaN or inf
    else:
        load_weights(model, ckpt["model"], ckpt_path)
    return model.to(device).eval(), ckpt


def saved_shapes(ckpt):
    """{weight name: shape} of a checkpoint's weights, without its compile/DDP prefixes: ckpt.pt's tensors,
    or a ckpt.dcp folder's metadata (nothing of its shards is read)."""
    if "dcp" in ckpt:
        try:
            entries = sharded_reader(ckpt["dcp"]).read_metadata().state_dict_metadata
        except pickle.UnpicklingError as e:
            raise UserError(f"{ckpt['dcp']} is refused: its .metadata {e}, and a checkpoint's metadata holds data "
                            f"only; nothing of it ran. Use a checkpoint that train.py wrote") from None
        except (UserError, PermissionError):
            raise
        except Exception:  # missing or damaged: load_sharded says which
            return None
        return {k[len("model."):]: tuple(getattr(v, "size", ())) for k, v in entries.items() if k.startswith("model.")}
    return {k: tuple(v.shape) for k, v in unprefixed(ckpt["model"]).items()}


def unprefixed(state):
    """A state dict's keys without the compile/DDP prefixes ("module.", "_orig_mod.")."""
    weights = {}
    for key, value in state.items():
        for prefix in ("module.", "_orig_mod."):
            key = key[len(prefix):] if key.startswith(prefix) else key
        weights[key] = value
    return weights


def load_weights(model, state, source):
    """model.load_state_dict(state) for a checkpoint's weights, with its problems as one line.

    Keys saved with compile/DDP prefixes ("_orig_mod.", "module.") are stripped. Raises UserError
    naming source and the first keys when the weights do not match the model its config builds
    (missing, unexpected or differently shaped tensors: a config edited by hand, or other code), or
    when a weight holds NaN/inf (a run saved after it diverged: nothing it computes means anything).
    """
    weights = unprefixed(state)
    expected = model.state_dict()
    for key, value in weights.items():  # OR/ER magnitudes were 0-d before they became (1,) (for FSDP2)
        if value.dim() == 0 and key in expected and expected[key].shape == (1,):
            weights[key] = value.reshape(1)
    problems = shape_problems({k: tuple(v.shape) for k, v in expected.items()},
                              {k: tuple(v.shape) for k, v in weights.items()})
    if problems:
        raise UserError(f"{source}'s weights do not match the model its config describes: {problems}; the config "
                        f"or the weights were changed, or other code wrote them: use the checkpoint as saved, or "
                        f"train again")
    bad = [k for k, v in weights.items() if v.is_floating_point() and not torch.isfinite(v).all()]
    if bad:
        raise UserError(f"{source}'s weights hold NaN or inf (in {len(bad)} tensors, first {bad[0]}): the run "
                        f"diverged before it saved them, and nothing computed from them means anything; use an "
                        f"earlier checkpoint, or train again with a lower --learning_rate")
    if is_sharded(model):  # each rank takes its shards of the whole tensors
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict
        set_model_state_dict(model, weights, options=StateDictOptions(full_state_dict=True))
    else:
        model.load_state_dict(weights)
