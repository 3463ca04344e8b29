"""The run configuration: every key with its default and meaning, and how a run's config is read.

    python train.py                                    # the defaults below
    python train.py configs/unified_124m.py --max_iters=1000
    python train.py --help                             # every key, its default and meaning

A config is the defaults below, then config files (plain Python assignments,
as nanoGPT's), then `--key=value` overrides. An unknown key is an error with
a did-you-mean hint; a value must have its default's type (an int is
accepted for a float key: `--learning_rate=1`); values may contain `=`.
This module imports no torch at load time, so `--help` answers at once.

Also here, because every command shares them: `UserError` (bad input, shown
as one line), `cli` (the entry point that shows it, and a Ctrl-C as one line),
`compile_errors` (a torch.compile failure as one line), `StopSignals` (SIGTERM
and SIGINT as a request to stop cleanly), the checks of a config's values,
device resolution, and the one way to build a model config (`model_config`).
"""

import ast
import difflib
import os
import re
import signal
import sys
import threading
import traceback
from contextlib import contextmanager
from types import SimpleNamespace

# -----------------------------------------------------------------------------
# The one table of defaults: {section: {key: (default, meaning)}}. The default
# run is the paper's unified strategy on shakespeare_char, sized to train on 2
# CPU cores in a few minutes. model.GPTConfig takes its defaults from here.
SECTIONS = {
    "I/O": {
        "out_dir": ("out-shakespeare-char", "folder for ckpt.pt and log.jsonl"),
        "init_from": ("scratch", '"scratch" | "resume" (from out_dir/ckpt.pt) | "auto" (resume when out_dir holds '
                                 'a checkpoint, else scratch: the one command for a job that may be preempted)'),
        "eval_interval": (100, "iterations between evals + checkpoints (0: only at the end)"),
        "eval_iters": (20, "validation batches per eval (a fixed set)"),
        "log_interval": (50, "iterations between progress lines"),
        "sample_tokens": (300, "tokens sampled and printed at the end (0: none)"),
    },
    "data": {
        "dataset": ("shakespeare_char", "a folder under data/, or a path to one"),
        "batch_size": (32, "micro-batch per process"),
        "gradient_accumulation_steps": (1, "global count, divided among DDP processes"),
    },
    "model": {
        "block_size": (128, "context length (tokens)"),
        "n_layer": (4, "transformer blocks"),
        "n_head": (4, "attention heads (n_embd must divide by it)"),
        "n_embd": (128, "width"),
        "d_ff": (0, "SwiGLU hidden width (0: 8/3 n_embd rounded up to a multiple of 64)"),
        "vocab_size": (0, "0: from the dataset's meta.pkl; padded to a multiple of 64 inside the model"),
        "tie_embeddings": (True, "LM head shares the token embedding"),
        "dropout": (0.0, "in [0, 1)"),
        "rope_theta": (10000.0, "RoPE base"),
    },
    "scale vectors": {  # the paper's unified strategy: HG + DNP + OR + IWD
        "scale": ("vector", '"vector" (learnable scale vectors) | "none" (normalizations only)'),
        "reparam": ("or", '"plain" | "or" | "er" (magnitude-direction); any key of norms.SCALE_CLASSES'),
        "branch_scales": (True, "HG: separate scales for q, k, v and gate, up"),
        "attn_placement": ("in", '"in" | "dual" (DP: scales on both sides of the linear maps)'),
        "mlp_placement": ("dual_norm", '"in" | "dual" (DP) | "dual_norm" (DNP) | "in_norm" (DNP\'s '
                                       'normalization without its scales)'),
        "dual_sites": ("prenorm", '"prenorm": DP/DNP scales on the maps that read the normalized input '
                                  '(q, k, v; gate, up) | "all": also around W_o and W_down (the earlier reading)'),
        "qk_norm": (False, "RMSNorm on q and k per head, with output-role scales"),
        "output_norms": (False, "Gemma-style RMSNorm on each branch's output before the residual add"),
        "norm_eps": (1e-6, "added to the mean square in every RMSNorm"),
        "scale_wd": ("iwd", '"iwd" (decay input-role scales only) | "all" | "none" | "iwd_final" (iwd + '
                            'the tied final-norm scale)'),
    },
    "mixture of experts": {
        "n_experts": (0, "0: dense"),
        "top_k": (2, "experts per token"),
        "moe_every": (1, "1: every block is MoE; 2: blocks 1, 3, 5, ... (0-based)"),
        "expert_d_ff": (0, "expert width (0: d_ff)"),
        "shared_expert": (False, "one always-on expert beside the routed ones"),
        "aux_loss_coef": (0.01, "load-balancing loss weight"),
        "z_loss_coef": (0.0, "router z-loss weight"),
    },
    "optimizer": {
        "optimizer": ("adamw", '"adamw" | "muon" (Muon for hidden matrices, AdamW for the rest)'),
        "learning_rate": (3e-3, "AdamW's peak LR"),
        "muon_lr": (0.02, "Muon's peak LR"),
        "muon_momentum": (0.95, "in [0, 1)"),
        "magnitude_lr_mult": (1.0, "LR of the OR/ER magnitude scalar over learning_rate"),
        "weight_decay": (0.1, "on matrices, the LM head, the router; on scales as scale_wd says"),
        "beta1": (0.9, "AdamW, in [0, 1)"),
        "beta2": (0.95, "AdamW, in [0, 1)"),
        "grad_clip": (1.0, "global gradient-norm clip (0: off)"),
    },
    "schedule": {
        "lr_schedule": ("cosine", '"cosine" | "wsd" | "linear" | "constant"'),
        "warmup_iters": (50, "linear warmup iterations"),
        "max_iters": (600, "training iterations"),
        "min_lr": (3e-4, "the LR the decay ends at (as a share of each group's peak: min_lr / learning_rate)"),
        "wsd_decay_frac": (0.2, "WSD: share of max_iters spent decaying, in [0, 1]"),
    },
    "system": {
        "device": ("auto", '"auto" | "cpu" | "cuda" | "cuda:N" | "mps" (one this machine has)'),
        "dtype": ("auto", '"auto" (bfloat16 on CUDA, else float32) | "float32" | "bfloat16"'),
        "compile": (False, "torch.compile the model"),
        "seed": (1337, "initial weights and batches"),
        "ddp_timeout_s": (600, "seconds a DDP collective may wait"),
    },
}
DEFAULTS = {key: default for keys in SECTIONS.values() for key, (default, _) in keys.items()}
# Keys added after runs were recorded, with the value those runs trained at: a config
# (record, checkpoint) without the key means this value, and a run hash leaves it out.
LEGACY = {"dual_sites": "all"}
MODEL_KEYS = frozenset(k for s in ("model", "scale vectors", "mixture of experts") for k in SECTIONS[s]) - \
    {"scale_wd"}  # the model's config (model.GPTConfig); scale_wd is the optimizer's


class UserError(Exception):
    """Bad input: printed as one clear line, exit status 1, nothing lost."""


def cli(main):
    """Run a command's main(argv): a UserError becomes one 'error: ...' line on stderr (exit 1), a
    Ctrl-C (KeyboardInterrupt) one 'interrupted' line (exit 130, as a shell reports SIGINT);
    output piped into a reader that closes early (`| head`) ends quietly."""
    try:
        try:
            code = main(sys.argv[1:])
        finally:  # a piped stdout is block-buffered: its last write happens here, inside the handler
            sys.stdout.flush()
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(1)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        sys.exit(128 + signal.SIGINT)
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit's flush
        sys.exit(1)
    sys.exit(code)


def usage(doc):
    """A command's --help text: its docstring, then every key by section with default and meaning."""
    lines = [doc.strip(), "", "config keys (--key=value; default, then meaning):"]
    for section, keys in SECTIONS.items():
        lines.append(f"\n  {section}")
        for key, (default, meaning) in keys.items():
            arg = f"--{key}={default!r}" if isinstance(default, str) else f"--{key}={default}"
            lines.append(f"    {arg:<40} {meaning}")
    return "\n".join(lines)


# -----------------------------------------------------------------------------
# Reading a config: defaults, config files, --key=value


def a_type(default):
    """How an error names the type of a default: 'an int', 'a float', 'a string', 'True or False'."""
    return {bool: "True or False", int: "an int", float: "a float", str: "a string"}[type(default)]


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
    hint = f"; did you mean {', '.join(close)}?" if close else "; python train.py --help lists the keys"
    return UserError(f"{where}: unknown config key {key!r}{hint}")


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
# Checking values, and what is built from them


def check_training_config(cfg):
    """UserError for training keys out of range (model keys are checked by model.GPTConfig)."""
    from optim import OPTIMIZERS, SCALE_WD, check_schedule  # imports torch: not needed for --help

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
    for key, allowed in (("init_from", ("scratch", "resume", "auto")), ("optimizer", OPTIMIZERS),
                         ("scale_wd", SCALE_WD)):
        if getattr(cfg, key) not in allowed:
            raise UserError(f"{key}={getattr(cfg, key)!r} is not one of {', '.join(map(repr, allowed))}")
    try:
        check_schedule(cfg)
    except ValueError as e:
        raise UserError(str(e)) from None


def complete(cfg):
    """A stored config (a record's or a checkpoint's, a dict) with every key: a key added after it
    was written takes the value it meant then (LEGACY), else its default."""
    return {**DEFAULTS, **LEGACY, **cfg}


def model_config(cfg):
    """The model.GPTConfig of a run config (a dict, completed as `complete` does, or a namespace
    with every key); UserError if invalid. vocab_size=0 ('from meta.pkl') is checked as 1 until
    the data is read.
    """
    from model import GPTConfig

    get = complete(cfg).get if isinstance(cfg, dict) else lambda k: getattr(cfg, k)
    try:
        return GPTConfig(**{k: get(k) for k in MODEL_KEYS} | {"vocab_size": get("vocab_size") or 1})
    except ValueError as e:
        raise UserError(f"model config: {e}") from None


def check_config(cfg_dict):
    """UserError for any value out of range, training and model keys alike: what a run checks
    before it reads data (sweep.py checks every run of an ablation this way before starting any)."""
    check_training_config(SimpleNamespace(**cfg_dict))
    model_config(cfg_dict)


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
        raise UserError(f"dtype={dtype!r} is not one of 'auto', 'float32', 'bfloat16'")
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
