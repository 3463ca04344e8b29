"""Pre-train a scale-vector GPT. Single process, or several with torchrun (DDP).

    python train.py                                   # unified strategy, shakespeare_char, CPU, < 5 min
    python train.py configs/unified_124m.py --max_iters=1000
    torchrun --standalone --nproc_per_node=8 train.py configs/unified_124m.py

Config: the defaults below, then a config file (plain assignments), then
--key=value overrides. An unknown key or a value of the wrong type is an error.
Outputs in out_dir: ckpt.pt (written atomically at every eval and at the end)
and log.jsonl (one JSON object per train step and per eval).
"""

import ast
import datetime
import difflib
import json
import math
import os
import pickle
import subprocess
import sys
import tempfile
import time
import traceback
from contextlib import contextmanager, nullcontext
from dataclasses import fields
from types import SimpleNamespace

import numpy as np
import torch

from model import GPT, GPTConfig
from optim import (OPTIMIZERS, SCALE_WD, build_optimizers, check_schedule, format_groups, lr_multiplier,
                   set_lr)

HERE = os.path.dirname(os.path.abspath(__file__))

# -----------------------------------------------------------------------------
# The default config: the paper's unified strategy on shakespeare_char, sized to
# train on 2 CPU cores in a few minutes. Every key here can be set in a config
# file or on the command line; there are no others.
DEFAULTS = dict(
    # I/O
    out_dir="out-shakespeare-char",
    init_from="scratch",  # "scratch" | "resume" (from out_dir/ckpt.pt)
    eval_interval=100,  # iterations between evals + checkpoints (0: only at the end)
    eval_iters=20,  # validation batches per eval (a fixed set)
    log_interval=50,  # iterations between progress lines
    sample_tokens=300,  # tokens sampled and printed at the end (0: none)
    # data
    dataset="shakespeare_char",  # a folder under data/, or a path to one
    batch_size=32,  # micro-batch per process
    gradient_accumulation_steps=1,  # global count, divided among DDP processes
    block_size=128,
    # model
    n_layer=4,
    n_head=4,
    n_embd=128,
    d_ff=0,  # 0: 8/3 n_embd rounded up to a multiple of 64
    vocab_size=0,  # 0: from the dataset's meta.pkl
    tie_embeddings=True,
    dropout=0.0,
    rope_theta=10000.0,
    # scale vectors: the unified strategy (HG + DP attention + DNP MLP + OR + IWD)
    scale="vector",
    reparam="or",
    branch_scales=True,
    attn_placement="dual",
    mlp_placement="dual_norm",
    qk_norm=False,
    output_norms=False,
    norm_eps=1e-6,
    scale_wd="iwd",
    # mixture of experts (n_experts=0: dense)
    n_experts=0,
    top_k=2,
    moe_every=1,
    expert_d_ff=0,  # 0: d_ff
    shared_expert=False,
    aux_loss_coef=0.01,
    z_loss_coef=0.0,
    # optimizer
    optimizer="adamw",  # "adamw" | "muon" (Muon for hidden matrices, AdamW for the rest)
    learning_rate=3e-3,  # AdamW
    muon_lr=0.02,
    muon_momentum=0.95,
    magnitude_lr_mult=1.0,  # LR of the OR/ER magnitude scalar over learning_rate (C7)
    weight_decay=0.1,
    beta1=0.9,
    beta2=0.95,
    grad_clip=1.0,  # 0: off
    # schedule
    lr_schedule="cosine",  # "cosine" | "wsd" | "linear" | "constant"
    warmup_iters=50,
    max_iters=600,
    min_lr=3e-4,
    wsd_decay_frac=0.2,
    # system
    device="auto",  # "auto" | "cpu" | "cuda" | "cuda:N" | "mps"
    dtype="auto",  # "auto" (bfloat16 on CUDA, else float32) | "float32" | "bfloat16"
    compile=False,
    seed=1337,
    ddp_timeout_s=600,
)
MODEL_KEYS = {f.name for f in fields(GPTConfig)}
assert MODEL_KEYS <= DEFAULTS.keys(), f"DEFAULTS lacks model keys {MODEL_KEYS - DEFAULTS.keys()}"

# Dense bf16 tensor-core peaks (FLOP/s, vendor datasheets); matched against the
# CUDA device name, most specific entry first. MFU is omitted for other devices.
PEAK_BF16_FLOPS = [
    ("H100 PCIe", 756e12), ("H100 NVL", 835e12), ("GH200", 989e12), ("H200", 989e12),
    ("H100", 989e12), ("B200", 2250e12), ("A100", 312e12), ("L40S", 362e12),
    ("L40", 181e12), ("L4", 121e12), ("RTX 4090", 165e12),
]


PROGRESS_EVERY_S = 15  # a progress line at least this often, whatever log_interval says


class UserError(Exception):
    """Bad input: printed as one clear line, exit status 1, nothing lost."""


def a_type(default):
    """How an error names the type of a default: 'an int', 'a float', 'a string', 'True or False'."""
    return {bool: "True or False", int: "an int", float: "a float", str: "a string"}[type(default)]


# -----------------------------------------------------------------------------
# Config


def parse_value(key, text):
    """A --key=value string to the type of DEFAULTS[key]; `--learning_rate=1` gives 1.0."""
    default = DEFAULTS[key]
    if isinstance(default, bool):
        low = text.lower()
        if low in ("true", "1", "yes"):
            return True
        if low in ("false", "0", "no"):
            return False
        raise UserError(f"--{key}={text}: {key} must be True or False")
    if isinstance(default, str):
        try:  # accept quoted strings too
            value = ast.literal_eval(text)
            return value if isinstance(value, str) else text
        except (ValueError, SyntaxError):
            return text
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        raise UserError(f"--{key}={text}: {key} must be {a_type(default)}") from None
    return check_type(key, value, f"--{key}={text}")


def check_type(key, value, where):
    """value converted to the type of DEFAULTS[key] (int -> float allowed), else UserError."""
    default = DEFAULTS[key]
    if isinstance(default, float) and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if type(value) is not type(default):
        raise UserError(f"{where}: {key} must be {a_type(default)}, got {type(value).__name__} {value!r}")
    return value


def unknown_key(key, where):
    close = difflib.get_close_matches(key, DEFAULTS, n=3, cutoff=0.6)
    hint = f"; did you mean {', '.join(close)}?" if close else "; see DEFAULTS in train.py for the keys"
    return UserError(f"{where}: unknown config key {key!r}{hint}")


def usage(doc):
    """A script's --help text: its docstring, then every config key with its default."""
    keys = "\n".join(f"  --{k}={v!r}" if isinstance(v, str) else f"  --{k}={v}" for k, v in DEFAULTS.items())
    return f"{doc.strip()}\n\nconfig keys (default value; comments in train.py DEFAULTS):\n{keys}"


def run_config_file(path):
    """The names a config file (plain Python) defines; UserError naming its line if it fails to run."""
    namespace = {}
    with open(path) as f:
        source = f.read()
    try:
        exec(compile(source, path, "exec"), namespace)
    except Exception as e:  # a config file is Python: its error is bad input, not a crash
        lines = [fr.lineno for fr in traceback.extract_tb(e.__traceback__) if fr.filename == path]
        line = e.lineno if isinstance(e, SyntaxError) else (lines[-1] if lines else "?")
        raise UserError(f"config file {path}, line {line}: {type(e).__name__}: {e}") from None
    return namespace


def load_config(argv):
    """Defaults, then config files (plain assignments), then --key=value overrides.

    Args: argv without the program name, e.g. ["configs/x.py", "--max_iters=10"].
    Returns: (config dict with every key of DEFAULTS, set of keys given explicitly).
    Raises UserError naming the bad key or value (unknown key, wrong type,
    missing config file, malformed argument).
    """
    cfg, given = dict(DEFAULTS), set()
    for arg in argv:
        if arg.startswith("--"):
            if "=" not in arg:
                raise UserError(f"argument {arg!r}: write --key=value")
            key, text = arg[2:].split("=", 1)
            if key not in DEFAULTS:
                raise unknown_key(key, f"argument {arg!r}")
            cfg[key] = parse_value(key, text)
            given.add(key)
        else:
            if not os.path.isfile(arg):
                raise UserError(f"config file {arg!r} not found")
            namespace = run_config_file(arg)
            for key, value in namespace.items():
                if key.startswith("_") or callable(value) or type(value).__name__ == "module":
                    continue
                if key not in DEFAULTS:
                    raise unknown_key(key, arg)
                cfg[key] = check_type(key, value, arg)
                given.add(key)
    return cfg, given


# -----------------------------------------------------------------------------
# Data: uint16 token files data/<dataset>/{train,val}.bin and meta.pkl


def dataset_dir(dataset):
    return dataset if os.sep in dataset or os.path.isabs(dataset) else os.path.join(HERE, "data", dataset)


def plain(value, where):
    """value with numpy scalars and arrays turned into Python ints, floats, lists (recursively).

    What train.py writes must load with torch.load(weights_only=True) and
    json; a meta.pkl built with numpy (`vocab_size = arr.max() + 1` is a
    np.uint16) would otherwise give a checkpoint that its own readers refuse.
    Raises UserError naming `where` for a value of any other type.
    """
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (np.generic, np.ndarray)):
        return value.tolist()
    if isinstance(value, (list, tuple)):
        return type(value)(plain(v, where) for v in value)
    if isinstance(value, dict):
        return {plain(k, where): plain(v, where) for k, v in value.items()}
    raise UserError(f"{where} holds a {type(value).__name__} ({str(value)[:60]!r}): store plain Python "
                    f"values there (ints, floats, strings, lists, dicts)")


def prepare_hint(prepare):
    """How to make a dataset's bins: run its prepare.py, after the `pip install` its docstring names."""
    with open(prepare) as f:
        needs = [ln.strip() for ln in f.read().split('"""')[1].splitlines() if ln.strip().startswith("pip install")]
    return " && ".join(needs + [f"python {os.path.relpath(prepare)}"])


def load_data(cfg, prepare_here=True):
    """Check train.bin / val.bin and read meta.pkl; prepare shakespeare data if missing.

    prepare_here: this process may run the prepare script (under DDP: local rank 0;
    every rank then meets at a barrier, whether or not anything was prepared).

    Returns dict(train=path, val=path, meta=dict of plain Python values or None);
    get_batch maps the file per batch (a map kept open for the whole run grows
    the resident set to the file's size).
    Raises UserError for a missing, empty or odd-sized file, one shorter than
    block_size + 1 tokens, an unreadable meta.pkl, or a failed prepare script.
    """
    folder = dataset_dir(cfg.dataset)
    paths = {split: os.path.join(folder, f"{split}.bin") for split in ("train", "val")}
    prepare = os.path.join(folder, "prepare.py")
    local = os.path.basename(folder.rstrip(os.sep)) in ("shakespeare_char", "shakespeare")
    missing = not all(os.path.exists(p) for p in paths.values())
    if missing and local and os.path.exists(prepare) and prepare_here:
        print(f"{paths['train']} not found: running {os.path.relpath(prepare)} to make it", flush=True)
        proc = subprocess.run([sys.executable, prepare], capture_output=True, text=True)
        if proc.returncode:
            why = (proc.stderr.strip().splitlines() or [f"exit status {proc.returncode}"])[-1]
            raise UserError(f"{os.path.relpath(prepare)} failed: {why}")
        print(proc.stdout, end="", flush=True)
    if torch.distributed.is_initialized():
        torch.distributed.barrier()
    data = {}
    for split, path in paths.items():
        if not os.path.isfile(path):
            hint = prepare_hint(prepare) if os.path.exists(prepare) else \
                "write uint16 token ids to train.bin and val.bin there (see data/*/prepare.py)"
            raise UserError(f"data file {path} not found for dataset={cfg.dataset!r}: {hint}")
        size = os.path.getsize(path)
        if size == 0 or size % 2:
            raise UserError(f"{path} holds {size} bytes, {'none' if size == 0 else 'an odd number'}: it must be "
                            f"uint16 token ids (np.array(ids, dtype=np.uint16).tofile(path)); write it again")
        if size // 2 < cfg.block_size + 1:
            raise UserError(f"{path} holds {size // 2} tokens, fewer than block_size + 1 = "
                            f"{cfg.block_size + 1}: use a smaller --block_size or more data")
        data[split] = path
    meta_path = os.path.join(folder, "meta.pkl")
    data["meta"] = None
    if os.path.exists(meta_path):
        try:
            with open(meta_path, "rb") as f:
                meta = pickle.load(f)
        except Exception as e:  # a pickle can fail in many ways; each is a bad file
            raise UserError(f"{meta_path} is unreadable ({type(e).__name__}: {str(e)[:100]}): write it again "
                            f"with pickle.dump(dict(vocab_size=...), f), or delete it and set --vocab_size") from None
        if not isinstance(meta, dict):
            raise UserError(f"{meta_path} holds a {type(meta).__name__}, not a dict such as {{'vocab_size': 50257}}")
        data["meta"] = plain(meta, meta_path)
    return data


def get_batch(data, split, index, micro_step, cfg, device):
    """One micro-batch (x, y), each (batch_size, block_size) int64, y = x shifted by one.

    Train micro-batch j of iteration i comes from a generator seeded by
    (seed, i, j), so a resumed run and a run on any number of processes read
    the same data. Validation batch k is seeded by k alone: every run, every
    seed and every variant is evaluated on the same fixed batches.
    """
    arr = np.memmap(data[split], dtype=np.uint16, mode="r")  # per batch, as nanoGPT: bounded memory
    entropy = [cfg.seed, index, micro_step, 1] if split == "train" else [index, 2]
    rng = np.random.default_rng(entropy)
    ix = rng.integers(0, len(arr) - cfg.block_size, size=cfg.batch_size)
    window = np.stack([arr[i:i + cfg.block_size + 1] for i in ix]).astype(np.int64)  # one gather for x and y
    del arr
    top = int(window.max())  # checked per batch: a full scan of a 5 GB file is slow
    if top >= cfg.vocab_size:
        raise UserError(f"{split}.bin holds token id {top} >= vocab_size={cfg.vocab_size}: set --vocab_size "
                        f"(or meta.pkl's vocab_size) to the tokenizer's size")
    x, y = torch.from_numpy(window[:, :-1].copy()), torch.from_numpy(window[:, 1:].copy())
    if device.type == "cuda":
        return x.pin_memory().to(device, non_blocking=True), y.pin_memory().to(device, non_blocking=True)
    return x.to(device), y.to(device)


def make_codec(meta, vocab_size):
    """(encode, decode) for a dataset: its char vocab, else GPT-2 BPE (tiktoken r50k_base).

    None when neither fits: no char vocabulary in meta.pkl and a vocabulary
    smaller than GPT-2's, so the ids are some other tokenizer's.
    encode raises UserError naming the characters a char vocabulary lacks;
    make_codec raises UserError (with the TIKTOKEN_CACHE_DIR fix) when the
    BPE vocabulary cannot be loaded.
    """
    if meta and "stoi" in meta:
        stoi, itos = meta["stoi"], meta["itos"]

        def encode(s):
            unknown = sorted(set(s) - stoi.keys())
            if unknown:
                known = "".join(sorted(stoi))
                raise UserError(f"{''.join(unknown)!r} not in this vocabulary of {len(stoi)} characters: "
                                f"use only its characters ({known[:40]!r}{'...' if len(known) > 40 else ''})")
            return [stoi[c] for c in s]
        return encode, (lambda ids: "".join(itos[i] for i in ids))
    if not (meta and "encoding" in meta) and vocab_size < 50257:
        return None
    enc = bpe_encoding((meta or {}).get("encoding", "r50k_base"))
    return (lambda s: enc.encode(s, allowed_special={"<|endoftext|>"})), enc.decode


def bpe_encoding(name):
    """tiktoken's encoding `name`; UserError saying how to get its vocabulary file offline."""
    try:
        import tiktoken
        return tiktoken.get_encoding(name)
    except ImportError:
        raise UserError("GPT-2 BPE needs the package tiktoken: pip install tiktoken") from None
    except Exception as e:  # no network: requests' ConnectionError, an HTTP error, ...
        raise UserError(f"cannot load the {name} vocabulary ({type(e).__name__}); offline, set "
                        f"TIKTOKEN_CACHE_DIR to a folder holding tiktoken's cached vocabulary file") from None


# -----------------------------------------------------------------------------
# Checkpoints and the log


def save_checkpoint(path, state):
    """torch.save to path + '.tmp', fsync, then rename: a crash never leaves a half-written ckpt."""
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        torch.save(state, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def load_checkpoint(path):
    """The checkpoint dict; UserError if it is missing, unreadable or incomplete."""
    if not os.path.exists(path):
        raise UserError(f"no checkpoint at {path}: point --out_dir at a run that train.py wrote")
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # torch raises several types for a damaged zip/pickle
        raise UserError(f"checkpoint {path} is unreadable ({type(e).__name__}: {str(e)[:200]}); "
                        f"it is damaged or not a scalevec checkpoint: restore it from a copy, or "
                        f"train again into a new --out_dir") from None
    missing = {"model", "optimizers", "config", "iter"} - set(ckpt if isinstance(ckpt, dict) else ())
    if missing:
        raise UserError(f"checkpoint {path} lacks {sorted(missing)}: not a scalevec checkpoint")
    return ckpt


def read_log(path):
    """The rows of a log.jsonl; a last line torn by a crash mid-write is skipped."""
    rows = []
    with open(path) as f:
        lines = f.read().splitlines()
    for n, line in enumerate(lines):
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            if n < len(lines) - 1:
                raise
    return rows


def trim_log(path, last_iter):
    """Drop log rows past last_iter (rows of a run that went on after its checkpoint)."""
    if not os.path.exists(path):
        return
    rows = [r for r in read_log(path) if r["iter"] <= last_iter]
    with open(path + ".tmp", "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
    os.replace(path + ".tmp", path)


def scale_stats(model):
    """{site: {mean, std, min, max}} of every effective gamma (for eval log rows)."""
    stats = {}
    with torch.no_grad():
        for name, sv in model.scale_vectors():
            g = sv().float()
            stats[name] = {"mean": g.mean().item(), "std": g.std().item() if g.numel() > 1 else 0.0,
                           "min": g.min().item(), "max": g.max().item()}
    return stats


def peak_flops(device):
    """Dense bf16 peak FLOP/s of a CUDA device from PEAK_BF16_FLOPS, else None."""
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    return next((peak for key, peak in PEAK_BF16_FLOPS if key in name), None)


# -----------------------------------------------------------------------------


def setup_distributed(cfg):
    """(rank, local_rank, world_size) from torchrun's environment; init the process group.

    NCCL on CUDA, gloo on CPU, whenever torchrun launched us (WORLD_SIZE set),
    even as one process: `--nproc_per_node=1` runs the DDP path of 8 (as in
    nanoGPT). Raises UserError, before any collective (so no rank hangs), when
    gradient_accumulation_steps does not divide by WORLD_SIZE.
    """
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank, local_rank = int(os.environ.get("RANK", "0")), int(os.environ.get("LOCAL_RANK", "0"))
    if cfg.gradient_accumulation_steps % world:
        raise UserError(f"gradient_accumulation_steps={cfg.gradient_accumulation_steps} does not divide "
                        f"by WORLD_SIZE={world}: set it to a multiple of {world} (it is the global count)")
    if "WORLD_SIZE" in os.environ:
        backend = "nccl" if cfg.device.startswith("cuda") else "gloo"
        if backend == "nccl":
            torch.cuda.set_device(local_rank)
        torch.distributed.init_process_group(backend, timeout=datetime.timedelta(seconds=cfg.ddp_timeout_s))
    return rank, local_rank, world


def check_training_config(cfg):
    """UserError for training keys out of range (model keys are checked by GPTConfig)."""
    for key, low in (("batch_size", 1), ("gradient_accumulation_steps", 1), ("eval_iters", 1),
                     ("log_interval", 1), ("max_iters", 0), ("warmup_iters", 0), ("eval_interval", 0),
                     ("sample_tokens", 0), ("learning_rate", 0), ("min_lr", 0), ("muon_lr", 0),
                     ("weight_decay", 0), ("magnitude_lr_mult", 0), ("grad_clip", 0), ("ddp_timeout_s", 1)):
        if getattr(cfg, key) < low:
            raise UserError(f"{key}={getattr(cfg, key)} must be >= {low}")
    if cfg.learning_rate == 0:
        raise UserError("learning_rate=0 trains nothing (and min_lr is relative to it): set a positive value")
    if not 0 <= cfg.wsd_decay_frac <= 1:
        raise UserError(f"wsd_decay_frac={cfg.wsd_decay_frac} must be in [0, 1]")
    for key in ("beta1", "beta2", "muon_momentum"):
        if not 0 <= getattr(cfg, key) < 1:
            raise UserError(f"{key}={getattr(cfg, key)} must be in [0, 1) (Adam's betas, Muon's momentum; e.g. 0.9)")
    for key, allowed in (("init_from", ("scratch", "resume")), ("optimizer", OPTIMIZERS),
                         ("scale_wd", SCALE_WD)):
        if getattr(cfg, key) not in allowed:
            raise UserError(f"{key}={getattr(cfg, key)!r} is not one of {', '.join(map(repr, allowed))}")
    try:
        check_schedule(cfg)
    except ValueError as e:
        raise UserError(str(e)) from None


def check_config(cfg_dict):
    """UserError for any value out of range, training and model keys alike: what a run checks
    before it reads data (sweep.py checks every run of an ablation this way before starting any).
    vocab_size=0 ('from meta.pkl') is checked once the data is read."""
    check_training_config(SimpleNamespace(**cfg_dict))
    try:
        GPTConfig(**{k: cfg_dict[k] for k in MODEL_KEYS} | {"vocab_size": cfg_dict["vocab_size"] or 1})
    except ValueError as e:
        raise UserError(f"model config: {e}") from None


def check_out_dir(out_dir):
    """Make out_dir and write a probe file in it; UserError naming the folder if that fails."""
    try:
        os.makedirs(out_dir, exist_ok=True)
        with tempfile.TemporaryFile(dir=out_dir):
            pass
    except OSError as e:
        raise UserError(f"cannot write to out_dir={out_dir!r} ({e.strerror or type(e).__name__}): "
                        f"choose a writable --out_dir") from None


@contextmanager
def compile_errors(enabled):
    """Turn a torch.compile failure (no C++ compiler, an inductor bug) into one line with the fix."""
    try:
        yield
    except Exception as e:
        if not enabled:
            raise
        import torch._dynamo.exc
        if isinstance(e, torch._dynamo.exc.TorchDynamoException) or \
                type(e).__module__.startswith(("torch._inductor", "torch._dynamo")):
            first = (str(e).strip().splitlines() or [""])[0][:200]
            raise UserError(f"torch.compile failed ({type(e).__name__}: {first}): run with --compile=False") from None
        raise


def fmt_duration(seconds):
    """'45s', '12m05s' or '3h20m'."""
    s = int(seconds)
    return f"{s}s" if s < 60 else f"{s // 60}m{s % 60:02d}s" if s < 3600 else f"{s // 3600}h{s % 3600 // 60:02d}m"


def resolve_device(cfg):
    if cfg.device == "auto":
        cfg.device = "cuda" if torch.cuda.is_available() else \
            "mps" if torch.backends.mps.is_available() else "cpu"
    if cfg.device.startswith("cuda") and not torch.cuda.is_available():
        raise UserError(f"device={cfg.device!r} but CUDA is not available: use --device=cpu")
    if cfg.dtype == "auto":
        cfg.dtype = "bfloat16" if cfg.device.startswith("cuda") else "float32"
    if cfg.dtype not in ("float32", "bfloat16"):
        raise UserError(f"dtype={cfg.dtype!r} is not one of 'auto', 'float32', 'bfloat16'")


def train(cfg_dict, given=frozenset()):
    """Run one training run; returns dict(val_loss, train_loss, wall_s, model (uncompiled)).

    cfg_dict: a full config (see DEFAULTS); given: the keys the user set
    explicitly (on resume, the others come from the checkpoint).
    Raises UserError for bad input and FloatingPointError for a non-finite loss.
    """
    ckpt, tokens = None, 0
    if cfg_dict["init_from"] == "resume":
        ckpt = load_checkpoint(os.path.join(cfg_dict["out_dir"], "ckpt.pt"))
        for key in MODEL_KEYS & given:
            if cfg_dict[key] != ckpt["config"][key] and not (key in ("d_ff", "vocab_size") and cfg_dict[key] == 0):
                raise UserError(f"--init_from=resume: {key}={cfg_dict[key]!r} differs from the checkpoint's "
                                f"{ckpt['config'][key]!r}; the model shape comes from the checkpoint")
        cfg_dict = {**DEFAULTS, **ckpt["config"], **{k: cfg_dict[k] for k in given - MODEL_KEYS}}
        if ckpt["iter"] > cfg_dict["max_iters"]:
            raise UserError(f"--init_from=resume: the checkpoint is at iteration {ckpt['iter']}, past "
                            f"max_iters={cfg_dict['max_iters']}: pass a larger --max_iters to continue")
        cfg_dict["init_from"] = "resume"
        c = ckpt["config"]  # a checkpoint without the count: its run kept one batch size
        tokens = ckpt.get("tokens", ckpt["iter"] * c["batch_size"] * c["block_size"] * c["gradient_accumulation_steps"])
    elif cfg_dict["init_from"] != "scratch":
        raise UserError(f"init_from={cfg_dict['init_from']!r} is not 'scratch' or 'resume'")
    check_config(cfg_dict)
    if not cfg_dict["out_dir"].strip():
        raise UserError(f"out_dir={cfg_dict['out_dir']!r} is empty: set --out_dir=DIR (the run's checkpoint and log go there)")
    cfg = SimpleNamespace(**cfg_dict)
    requested = {"device": cfg.device, "dtype": cfg.dtype}  # saved as asked: each machine resolves "auto"
    resolve_device(cfg)
    rank, local_rank, world = setup_distributed(cfg)
    ddp = torch.distributed.is_initialized()
    master = rank == 0
    log = (lambda *a: print(*a, flush=True)) if master else (lambda *a: None)
    if master:
        check_out_dir(cfg.out_dir)
    device = torch.device(f"cuda:{local_rank}" if cfg.device == "cuda" and ddp else cfg.device)
    ptdtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}[cfg.dtype]
    autocast = torch.autocast(device.type, dtype=ptdtype) if ptdtype != torch.float32 else nullcontext()
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True

    data = load_data(cfg, prepare_here=local_rank == 0)
    if cfg.vocab_size == 0:
        if not data["meta"] or "vocab_size" not in data["meta"]:
            raise UserError(f"vocab_size=0 means 'from meta.pkl', but {dataset_dir(cfg.dataset)} has "
                            f"none: set --vocab_size (50257 for GPT-2 BPE)")
        cfg.vocab_size = data["meta"]["vocab_size"]
        if type(cfg.vocab_size) is not int:
            raise UserError(f"meta.pkl's vocab_size={cfg.vocab_size!r} must be an int")
    try:
        model_cfg = GPTConfig(**{k: getattr(cfg, k) for k in MODEL_KEYS})
    except ValueError as e:
        raise UserError(f"model config: {e}") from None
    cfg.d_ff = model_cfg.d_ff
    raw_model = GPT(model_cfg, seed=cfg.seed).to(device)
    optimizers, groups = build_optimizers(raw_model, cfg, device.type)
    start_iter, stored_val = 0, float("nan")
    out_dir, log_path = cfg.out_dir, os.path.join(cfg.out_dir, "log.jsonl")
    ckpt_path = os.path.join(out_dir, "ckpt.pt")
    if ckpt is not None:
        raw_model.load_state_dict(ckpt["model"])
        if len(ckpt["optimizers"]) != len(optimizers):
            raise UserError(f"checkpoint has {len(ckpt['optimizers'])} optimizer states, this config "
                            f"builds {len(optimizers)}: resume with the checkpoint's optimizer")
        for opt, state in zip(optimizers, ckpt["optimizers"]):
            hyper = [{k: v for k, v in g.items() if k != "params"} for g in opt.param_groups]
            opt.load_state_dict(state)  # restores the moments, and the checkpoint's hyperparameters:
            for group, h in zip(opt.param_groups, hyper):  # this run's config wins (--learning_rate=...)
                group.update(h)
        start_iter, stored_val = ckpt["iter"], ckpt.get("val_loss", float("nan"))
        if master:
            trim_log(log_path, start_iter)
        del ckpt
    else:
        if os.path.exists(ckpt_path):
            raise UserError(f"out_dir={out_dir!r} already holds a run ({ckpt_path}): continue it with "
                            f"--init_from=resume, or train from scratch in another --out_dir (or delete it)")
        if master:
            os.makedirs(out_dir, exist_ok=True)
            open(log_path, "w").close()

    if cfg.compile and cfg.n_experts:
        log("warning: --compile=True with n_experts > 0: each batch routes a different number of tokens to "
            "each expert, so torch.compile recompiles often (minutes each); --compile=False is usually faster")
    model = torch.compile(raw_model) if cfg.compile else raw_model
    fwd = model  # eval runs without the DDP wrapper
    if ddp:
        model = torch.nn.parallel.DistributedDataParallel(
            model, device_ids=[local_rank] if device.type == "cuda" else None)

    tokens_per_iter = cfg.batch_size * cfg.block_size * cfg.gradient_accumulation_steps
    my_micro_steps = [j for j in range(cfg.gradient_accumulation_steps) if j % world == rank]
    peak = peak_flops(device) if ptdtype == torch.bfloat16 else None
    flops_per_token = raw_model.flops_per_token()
    log(raw_model.param_report())
    log(format_groups(groups))
    log(f"device {device} ({cfg.dtype}{', compiled' if cfg.compile else ''}), {world} process(es)"
        f"{f' (DDP, {torch.distributed.get_backend()})' if ddp else ''}, "
        f"{tokens_per_iter:,} tokens/iter = {cfg.batch_size} batch x {cfg.block_size} block x "
        f"{cfg.gradient_accumulation_steps} accumulation; {flops_per_token / 1e6:.1f} MFLOP/token")

    def all_reduce_mean(t):
        if ddp:
            torch.distributed.all_reduce(t)
        return t / world

    n_moe = sum(b.moe for b in raw_model.blocks)
    zero = torch.zeros((), device=device)

    @torch.no_grad()
    def evaluate():
        """(val loss, expert load (n_moe, n_experts) as lists or None) over the fixed val batches."""
        fwd.eval()
        total = torch.zeros((), device=device)
        load = torch.zeros(n_moe, cfg.n_experts, device=device)
        for k in range(rank, cfg.eval_iters, world):
            x, y = get_batch(data, "val", k, 0, cfg, device)
            with autocast:
                _, loss, aux = fwd(x, y)
            total += loss.float()
            if n_moe:
                load += aux["expert_load"]
        fwd.train()
        if ddp:
            torch.distributed.all_reduce(total)
            torch.distributed.all_reduce(load)
        return total.item() / cfg.eval_iters, (load / cfg.eval_iters).tolist() if n_moe else None

    def write_log(row):
        if master:
            with open(log_path, "a") as f:
                f.write(json.dumps(row) + "\n")

    def eval_and_save(it, tokens, save=True):
        val, load = evaluate()
        if not math.isfinite(val):
            raise FloatingPointError(f"val loss is {val} at iter {it}: the run diverged; the last good "
                                     f"checkpoint {ckpt_path} is kept (try a lower learning_rate)")
        row = {"kind": "eval", "iter": it, "tokens": tokens, "val_loss": val,
               "scales": scale_stats(raw_model)}
        if load is not None:  # per MoE layer: share of routed tokens per expert, and max / mean share
            row["expert_load"] = load
            row["max_load"] = [max(layer) * cfg.n_experts for layer in load]
        saved = ""
        if master and it > 0 and save:  # the checkpoint first: a logged final eval means a finished run
            save_checkpoint(ckpt_path, {
                "model": raw_model.state_dict(), "optimizers": [o.state_dict() for o in optimizers],
                "config": {**vars(cfg), **requested}, "iter": it, "tokens": tokens, "val_loss": val,
                "meta": data["meta"]})
            saved = f" | saved {ckpt_path}"
        write_log(row)
        log(f"eval iter {it}: val loss {val:.4f}{saved}")
        return val

    val_loss = stored_val
    logged = read_log(log_path) if master and os.path.exists(log_path) else []
    # killed between the checkpoint and its log row: complete the row (the same model, the same batches)
    row_missing = torch.tensor(float(start_iter > 0 and not any(
        r["kind"] == "eval" and r["iter"] == start_iter for r in logged)), device=device)
    if ddp:
        torch.distributed.broadcast(row_missing, 0)  # rank 0 holds the log; every rank evaluates
    with compile_errors(cfg.compile):
        if start_iter == 0 and cfg.eval_interval > 0:
            val_loss = eval_and_save(0, 0)
        elif row_missing.item():
            val_loss = eval_and_save(start_iter, tokens, save=False)
    if start_iter > 0 and start_iter == cfg.max_iters:
        train_rows = [r for r in logged if r["kind"] == "train"]
        log(f"done: the run in {out_dir} is finished ({start_iter} iterations = max_iters), final val loss "
            f"{val_loss:.4f}; pass a larger --max_iters to continue it")
        return {"val_loss": val_loss, "train_loss": train_rows[-1]["loss"] if train_rows else float("nan"),
                "wall_s": 0.0, "model": raw_model}
    if cfg.lr_schedule != "constant" and cfg.max_iters <= cfg.warmup_iters + (cfg.lr_schedule != "wsd"):
        log(f"note: max_iters={cfg.max_iters} ends before the LR decays (warmup_iters={cfg.warmup_iters}): "
            f"fine for a smoke test, not for a result")
    t_window, iters_window, t_start = time.perf_counter(), 0, time.perf_counter()
    t_line, warned_slow = t_window, False
    loss_val = float("nan")
    for it in range(start_iter, cfg.max_iters):
        lr_mult = lr_multiplier(it, cfg)
        set_lr(optimizers, lr_mult)
        # dropout masks from (seed, iteration, rank): a resumed run draws the same ones
        torch.manual_seed((cfg.seed * 1_000_003 + it) * 1009 + rank)
        sums = torch.zeros(3, device=device)  # cross-entropy, lb_loss, z_loss over my micro-steps
        for n, j in enumerate(my_micro_steps):
            x, y = get_batch(data, "train", it, j, cfg, device)
            last = n == len(my_micro_steps) - 1
            with compile_errors(cfg.compile), (model.no_sync() if ddp and not last else nullcontext()), \
                    autocast:
                _, loss, aux = model(x, y)
                objective = loss + raw_model.aux_objective(aux)
            with compile_errors(cfg.compile):
                (objective / len(my_micro_steps)).backward()
            sums += torch.stack([loss.detach().float(), aux.get("lb_loss", zero).detach(),
                                 aux.get("z_loss", zero).detach()])
        if cfg.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(raw_model.parameters(), cfg.grad_clip)
        for opt in optimizers:
            opt.step()
        for opt in optimizers:
            opt.zero_grad(set_to_none=True)
        loss_val, lb_loss, z_loss = all_reduce_mean(sums / len(my_micro_steps)).tolist()
        done = it + 1
        tokens += tokens_per_iter
        if not math.isfinite(loss_val):
            raise FloatingPointError(f"train loss is {loss_val} at iter {done}: the run diverged; the last "
                                     f"good checkpoint {ckpt_path} is kept (try a lower learning_rate)")
        row = {"kind": "train", "iter": done, "tokens": tokens,
               "lr": optimizers[0].param_groups[0]["lr"], "loss": loss_val}
        if n_moe:
            row |= {"lb_loss": lb_loss, "z_loss": z_loss}
        write_log(row)
        iters_window += 1
        now = time.perf_counter()
        if done % cfg.log_interval == 0 or done == cfg.max_iters or now - t_line >= PROGRESS_EVERY_S:
            dt = now - t_window
            tok_s = iters_window * tokens_per_iter / dt
            eta = (cfg.max_iters - done) * dt / iters_window  # training steps only, evals add to it
            mfu = f" | MFU {100 * flops_per_token * tok_s / (peak * world):.1f}%" if peak else ""
            moe = f" | lb {lb_loss:.3f} | max load (last batch) " \
                f"{aux['expert_load'].max().item() * cfg.n_experts:.2f}" if n_moe else ""
            log(f"iter {done}/{cfg.max_iters} | loss {loss_val:.4f} | lr {row['lr']:.2e} | "
                f"{tok_s / 1e3:.1f}k tok/s | {1000 * dt / iters_window:.0f} ms/iter{mfu}{moe} | "
                f"ETA {fmt_duration(eta)}")
            if device.type == "cpu" and eta > 3600 and not warned_slow:
                warned_slow = True
                log(f"warning: at the measured {1000 * dt / iters_window:.0f} ms/iter the {cfg.max_iters - done} "
                    f"iterations left take about {fmt_duration(eta)} on this CPU: this config is sized for a GPU "
                    f"(use --device=cuda there, or a smaller model / fewer --max_iters here)")
            t_window, iters_window, t_line = time.perf_counter(), 0, time.perf_counter()
        if (cfg.eval_interval > 0 and done % cfg.eval_interval == 0) or done == cfg.max_iters:
            with compile_errors(cfg.compile):
                val_loss = eval_and_save(done, tokens)
            t_window, iters_window = time.perf_counter(), 0  # eval time is not training time

    wall = time.perf_counter() - t_start
    if master and cfg.sample_tokens > 0:
        end_of_run_sample(raw_model, data["meta"], cfg, device, autocast, log)
    log(f"done: {cfg.max_iters - start_iter} iterations in {wall:.0f} s, final val loss {val_loss:.4f}")
    return {"val_loss": val_loss, "train_loss": loss_val, "wall_s": wall, "model": raw_model}


def end_of_run_sample(model, meta, cfg, device, autocast, log):
    """Print a sample from "\n"; a sample that cannot be made is one line, never a failed run."""
    try:
        codec = make_codec(meta, cfg.vocab_size)
        if codec is None:
            log("no sample: the dataset has no meta.pkl vocabulary to decode its token ids")
            return
        encode, decode = codec
        try:
            prompt = encode("\n")
        except UserError:  # a vocabulary without "\n": start from token 0
            prompt = [0]
        start = torch.tensor([prompt], dtype=torch.long, device=device)
        model.eval()
        with autocast:
            out = model.generate(start, cfg.sample_tokens, temperature=0.8, top_k=200)
        log(f"--- sample ({cfg.sample_tokens} tokens) ---\n{decode(out[0].tolist())}\n---")
    except Exception as e:  # the run is finished and saved: a sample is a courtesy
        log(f"no sample ({e if isinstance(e, UserError) else f'{type(e).__name__}: {e}'}); "
            f"the run itself finished and is saved")


def cli(main):
    """Run a script's main(argv) as a command: a UserError becomes one 'error: ...' line on stderr
    (exit 1); output piped into a reader that closes early (`| head`) ends quietly."""
    try:
        try:
            code = main(sys.argv[1:])
        finally:  # a piped stdout is block-buffered: its last write happens here, inside the handler
            sys.stdout.flush()
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(1)
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit's flush
        sys.exit(1)
    sys.exit(code)


def main(argv=None):
    """Command-line entry: errors become one line on stderr and exit status 1."""
    argv = sys.argv[1:] if argv is None else argv
    if "-h" in argv or "--help" in argv:
        print(usage(__doc__))
        return
    try:
        cfg, given = load_config(argv)
        train(cfg, given)
    except (UserError, FloatingPointError) as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(1)
    finally:
        if torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()


if __name__ == "__main__":
    cli(main)
