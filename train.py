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
import time
import traceback
from contextlib import nullcontext
from dataclasses import fields
from types import SimpleNamespace

import numpy as np
import torch

from model import GPT, GPTConfig
from optim import LR_SCHEDULES, OPTIMIZERS, SCALE_WD, build_optimizers, format_groups, lr_multiplier, set_lr

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


class UserError(Exception):
    """Bad input: printed as one clear line, exit status 1, nothing lost."""


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
        raise UserError(f"--{key}={text}: expected True or False")
    if isinstance(default, str):
        try:  # accept quoted strings too
            value = ast.literal_eval(text)
            return value if isinstance(value, str) else text
        except (ValueError, SyntaxError):
            return text
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        raise UserError(f"--{key}={text}: expected a {type(default).__name__}") from None
    return check_type(key, value, f"--{key}={text}")


def check_type(key, value, where):
    """value converted to the type of DEFAULTS[key] (int -> float allowed), else UserError."""
    default = DEFAULTS[key]
    if isinstance(default, float) and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if type(value) is not type(default):
        raise UserError(f"{where}: {key} must be a {type(default).__name__}, "
                        f"got {type(value).__name__} {value!r}")
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


def load_data(cfg, prepare_here=True):
    """Memory-map train.bin / val.bin and read meta.pkl; prepare shakespeare data if missing.

    prepare_here: this process may run the prepare script (under DDP: local rank 0;
    every rank then meets at a barrier, whether or not anything was prepared).

    Returns dict(train=memmap, val=memmap, meta=dict or None).
    Raises UserError for a missing file or one shorter than block_size + 1 tokens.
    """
    folder = dataset_dir(cfg.dataset)
    paths = {split: os.path.join(folder, f"{split}.bin") for split in ("train", "val")}
    prepare = os.path.join(folder, "prepare.py")
    local = os.path.basename(folder.rstrip(os.sep)) in ("shakespeare_char", "shakespeare")
    missing = not all(os.path.exists(p) for p in paths.values())
    if missing and local and os.path.exists(prepare) and prepare_here:
        print(f"{paths['train']} not found: running {os.path.relpath(prepare)} to make it", flush=True)
        subprocess.run([sys.executable, prepare], check=True)
    if torch.distributed.is_initialized():
        torch.distributed.barrier()
    data = {}
    for split, path in paths.items():
        if not os.path.exists(path):
            hint = f"run python {os.path.relpath(prepare)}" if os.path.exists(prepare) else \
                "write uint16 token ids to train.bin and val.bin there (see data/*/prepare.py)"
            raise UserError(f"data file {path} not found for dataset={cfg.dataset!r}: {hint}")
        arr = np.memmap(path, dtype=np.uint16, mode="r")
        if len(arr) < cfg.block_size + 1:
            raise UserError(f"{path} holds {len(arr)} tokens, fewer than block_size + 1 = "
                            f"{cfg.block_size + 1}: use a smaller --block_size or more data")
        data[split] = arr
    meta_path = os.path.join(folder, "meta.pkl")
    data["meta"] = None
    if os.path.exists(meta_path):
        with open(meta_path, "rb") as f:
            data["meta"] = pickle.load(f)
    return data


def get_batch(data, split, index, micro_step, cfg, device):
    """One micro-batch (x, y), each (batch_size, block_size) int64, y = x shifted by one.

    Train micro-batch j of iteration i comes from a generator seeded by
    (seed, i, j), so a resumed run and a run on any number of processes read
    the same data. Validation batch k is seeded by k alone: every run, every
    seed and every variant is evaluated on the same fixed batches.
    """
    arr = data[split]
    entropy = [cfg.seed, index, micro_step, 1] if split == "train" else [index, 2]
    rng = np.random.default_rng(entropy)
    ix = rng.integers(0, len(arr) - cfg.block_size, size=cfg.batch_size)
    window = np.stack([arr[i:i + cfg.block_size + 1] for i in ix]).astype(np.int64)  # one gather for x and y
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
    """
    if meta and "stoi" in meta:
        stoi, itos = meta["stoi"], meta["itos"]
        return (lambda s: [stoi[c] for c in s if c in stoi]), (lambda ids: "".join(itos[i] for i in ids))
    if not (meta and "encoding" in meta) and vocab_size < 50257:
        return None
    import tiktoken
    enc = tiktoken.get_encoding((meta or {}).get("encoding", "r50k_base"))
    return (lambda s: enc.encode(s, allowed_special={"<|endoftext|>"})), enc.decode


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
                     ("weight_decay", 0), ("grad_clip", 0), ("ddp_timeout_s", 1)):
        if getattr(cfg, key) < low:
            raise UserError(f"{key}={getattr(cfg, key)} must be >= {low}")
    if cfg.learning_rate == 0:
        raise UserError("learning_rate=0 trains nothing (and min_lr is relative to it): set a positive value")
    if not 0 <= cfg.wsd_decay_frac <= 1:
        raise UserError(f"wsd_decay_frac={cfg.wsd_decay_frac} must be in [0, 1]")
    for key, allowed in (("init_from", ("scratch", "resume")), ("optimizer", OPTIMIZERS),
                         ("scale_wd", SCALE_WD), ("lr_schedule", LR_SCHEDULES)):
        if getattr(cfg, key) not in allowed:
            raise UserError(f"{key}={getattr(cfg, key)!r} is not one of {', '.join(map(repr, allowed))}")


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
    ckpt = None
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
    elif cfg_dict["init_from"] != "scratch":
        raise UserError(f"init_from={cfg_dict['init_from']!r} is not 'scratch' or 'resume'")
    cfg = SimpleNamespace(**cfg_dict)
    check_training_config(cfg)
    resolve_device(cfg)
    rank, local_rank, world = setup_distributed(cfg)
    ddp = torch.distributed.is_initialized()
    master = rank == 0
    log = (lambda *a: print(*a, flush=True)) if master else (lambda *a: None)
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
    try:
        model_cfg = GPTConfig(**{k: getattr(cfg, k) for k in MODEL_KEYS})
    except ValueError as e:
        raise UserError(f"model config: {e}") from None
    cfg.d_ff = model_cfg.d_ff
    raw_model = GPT(model_cfg, seed=cfg.seed).to(device)
    optimizers, groups = build_optimizers(raw_model, cfg, device.type)
    start_iter = 0
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
        start_iter = ckpt["iter"]
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

    def eval_and_save(it):
        val, load = evaluate()
        if not math.isfinite(val):
            raise FloatingPointError(f"val loss is {val} at iter {it}: the run diverged; the last good "
                                     f"checkpoint {ckpt_path} is kept (try a lower learning_rate)")
        row = {"kind": "eval", "iter": it, "tokens": it * tokens_per_iter, "val_loss": val,
               "scales": scale_stats(raw_model)}
        if load is not None:  # per MoE layer: share of routed tokens per expert, and max / mean share
            row["expert_load"] = load
            row["max_load"] = [max(layer) * cfg.n_experts for layer in load]
        saved = ""
        if master and it > 0:  # the checkpoint first: a logged final eval means a finished run
            save_checkpoint(ckpt_path, {
                "model": raw_model.state_dict(), "optimizers": [o.state_dict() for o in optimizers],
                "config": vars(cfg), "iter": it, "val_loss": val, "meta": data["meta"]})
            saved = f" | saved {ckpt_path}"
        write_log(row)
        log(f"eval iter {it}: val loss {val:.4f}{saved}")
        return val

    val_loss = float("nan")
    if start_iter == 0 and cfg.eval_interval > 0:
        val_loss = eval_and_save(0)
    t_window, iters_window, t_start = time.perf_counter(), 0, time.perf_counter()
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
            with (model.no_sync() if ddp and not last else nullcontext()), autocast:
                _, loss, aux = model(x, y)
                objective = loss + raw_model.aux_objective(aux)
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
        if not math.isfinite(loss_val):
            raise FloatingPointError(f"train loss is {loss_val} at iter {done}: the run diverged; the last "
                                     f"good checkpoint {ckpt_path} is kept (try a lower learning_rate)")
        row = {"kind": "train", "iter": done, "tokens": done * tokens_per_iter,
               "lr": optimizers[0].param_groups[0]["lr"], "loss": loss_val}
        if n_moe:
            row |= {"lb_loss": lb_loss, "z_loss": z_loss}
        write_log(row)
        iters_window += 1
        if done % cfg.log_interval == 0 or done == cfg.max_iters:
            dt = time.perf_counter() - t_window
            tok_s = iters_window * tokens_per_iter / dt
            mfu = f" | MFU {100 * flops_per_token * tok_s / (peak * world):.1f}%" if peak else ""
            moe = f" | lb {lb_loss:.3f} | max load (last batch) " \
                f"{aux['expert_load'].max().item() * cfg.n_experts:.2f}" if n_moe else ""
            log(f"iter {done}/{cfg.max_iters} | loss {loss_val:.4f} | lr {row['lr']:.2e} | "
                f"{tok_s / 1e3:.1f}k tok/s | {1000 * dt / iters_window:.0f} ms/iter{mfu}{moe}")
            t_window, iters_window = time.perf_counter(), 0
        if (cfg.eval_interval > 0 and done % cfg.eval_interval == 0) or done == cfg.max_iters:
            val_loss = eval_and_save(done)
            t_window, iters_window = time.perf_counter(), 0  # eval time is not training time

    wall = time.perf_counter() - t_start
    codec = make_codec(data["meta"], cfg.vocab_size) if master and cfg.sample_tokens > 0 else None
    if master and cfg.sample_tokens > 0 and codec is None:
        log("no sample: the dataset has no meta.pkl vocabulary to decode its token ids")
    if codec is not None:
        encode, decode = codec
        start = torch.tensor([encode("\n") or [0]], dtype=torch.long, device=device)  # token 0 if no "\n"
        raw_model.eval()
        with autocast:
            out = raw_model.generate(start, cfg.sample_tokens, temperature=0.8, top_k=200)
        log(f"--- sample ({cfg.sample_tokens} tokens) ---\n{decode(out[0].tolist())}\n---")
    log(f"done: {cfg.max_iters - start_iter} iterations in {wall:.0f} s, final val loss {val_loss:.4f}")
    return {"val_loss": val_loss, "train_loss": loss_val, "wall_s": wall, "model": raw_model}


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
    main()
