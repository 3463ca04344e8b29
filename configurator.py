"""The run configuration: every key with its default and meaning, and how a run's config is read.

    python train.py                                    # the defaults below
    python train.py configs/unified_124m.py --max_iters=1000
    python train.py --help                             # every key, its default and meaning

A config is the defaults below, then config files (plain Python assignments,
as nanoGPT's), then `--key=value` overrides. An unknown key is an error with
a did-you-mean hint; a value must have its default's type (an int is
accepted for a float key: `--learning_rate=1`) and lie in its allowed values
(ALLOWED: a range, every float finite, or choices; --help shows them); values
may contain `=`. A key given twice on the command line is an error; one a config
file sets may be set again on the command line, which wins. `check` also
refuses a size whose weights and AdamW states cannot fit in memory, before
anything is built. The keys whose values name a registry (placements,
optimizers, schedules, scale classes) are checked by the code that holds the
registry: ops.check_config runs every check.

This module is a leaf: it imports nothing of this project, and no torch at
load time. Also here, because bad input is the config's business and every
command shares them: `UserError` (bad input, shown as one line), `cli` (the
entry point that shows it, and a Ctrl-C or a full disk as one line), and the
OpenMP settings train.py applies before torch loads, and what a registry entry reads (Reading,
attribute_reads: the registries' contracts check it at start). Devices, signals and compile errors
are ops.py's.
"""

import ast
import difflib
import importlib.util
import math
import os
import re
import traceback


class Range:
    """A number key's allowed values: low (and high) bounds, inclusive unless open; a float must
    also be finite. `why` says what needs the bound. `usual` = (low, high): the plausible values,
    inclusive; a value allowed but outside them (a typo'd 1e6 for 1e-6) gets a note at the start
    of the run (unusual); zero_ok: 0 is usual too (a weight or a clip of 0 turns it off)."""

    def __init__(self, low, high=None, low_open=False, high_open=False, why="", usual=None, zero_ok=False):
        self.low, self.high, self.low_open, self.high_open, self.why = low, high, low_open, high_open, why
        self.usual, self.zero_ok = usual, zero_ok

    def is_usual(self, value):
        return self.usual is None or self.usual[0] <= value <= self.usual[1] or (self.zero_ok and value == 0)

    def describe(self):
        if self.high is None:
            return f"{'>' if self.low_open else '>='} {self.low}"
        return f"in {'(' if self.low_open else '['}{self.low}, {self.high}{')' if self.high_open else ']'}"

    def allows(self, value):
        above = value > self.low if self.low_open else value >= self.low
        below = self.high is None or (value < self.high if self.high_open else value <= self.high)
        return above and below


class Choices:
    """A string key's allowed values (`pattern`: a regex they match, when a choice such as 'cuda:N'
    stands for many)."""

    def __init__(self, *values, pattern=None):
        self.values, self.pattern = values, pattern

    def describe(self):
        return f"one of {', '.join(map(repr, self.values))}"

    def allows(self, value):
        return re.fullmatch(self.pattern, value) is not None if self.pattern else value in self.values


class Path:
    """A path key's value: any string; a leading ~ is the user's home (os.path.expanduser at load,
    as a shell does not expand it after `=`)."""

    def describe(self):
        return "a path"

    def allows(self, value):
        return True


GE0, GE1 = Range(0), Range(1)
MECHANISM_AUTO_MAX = 50_000_000  # mechanism_stats="auto": on up to this many parameters (mechanism.mechanism_on)


def added(default, allowed, meaning, *, absent):
    """The row of a key added after runs were recorded: `absent` is the value those runs trained
    at, which a stored config without the key means (complete) and which a run hash leaves out
    (ABSENT), so adding the key renames no recorded run. A key older than every record has a plain
    3-tuple row and is always hashed."""
    return default, allowed, meaning, absent


# -----------------------------------------------------------------------------
# The one table of config keys: {section: {key: (default, allowed values, meaning)}}. The
# default run is the paper's unified strategy on shakespeare_char, sized to train on 2 CPU
# cores in a few minutes; model.GPTConfig takes its defaults from here. A section is where --help
# lists a key, nothing more: the model's keys are GPTConfig's fields (model.MODEL_KEYS). A key added after runs
# were recorded is an `added(...)` row that declares the value those runs had (absent=). Allowed values beyond
# the default's type: a Range (every float also finite), Choices, or None: any value of the
# type (a path, a bool), or a name of the registry the meaning names (model.CHOICES,
# optim.CHOICES: the code that implements the choices checks them, and --help lists them).
# check_values applies them before anything is built. Bounds across keys (top_k <= n_experts,
# min_lr <= learning_rate, ...) are the model's and optimizer's.
SECTIONS = {
    "I/O": {
        "out_dir": ("out-shakespeare-char", Path(), "folder for ckpt.pt and log.jsonl"),
        "init_from": ("scratch", Choices("scratch", "resume", "auto"),
                      '"scratch" | "resume" (from out_dir/ckpt.pt) | "auto" (resume when out_dir holds '
                      'a checkpoint, else scratch: the one command for a job that may be preempted)'),
        "hf_model": added("", Path(), "a Hugging Face Llama or Qwen3 folder to start from: its config.json sets "
                                      "the model's shape, its weights the start, the scale-vector switches go on "
                                      "top (plumbing/hf_folder.py)", absent=""),
        "hf_check": added(True, None, "with hf_model: compare our reading of the folder with transformers', block by "
                                      "block, at start (False: skip it for a folder already checked)", absent=True),
        "eval_interval": (100, GE0, "iterations between evals + checkpoints (0: only at the end)"),
        "eval_iters": (20, GE1, "validation batches per eval (a fixed set)"),
        "log_interval": (50, GE1, "iterations between progress lines and log writes (the loop reads the device "
                                  "once per interval)"),
        "mechanism_stats": added("off", Choices("auto", "on", "off"),
                                 'the scale vectors\' mechanism in every eval row (mechanism.Mechanism: preconditioner '
                                 'floor, the folded step against the scale-free one and its two parts, update ratios '
                                 f'per optimizer group, gamma\'s state) | "auto": on up to {MECHANISM_AUTO_MAX / 1e6:g}M '
                                 f'parameters (a copy of ~31% of the float32 training state at 124M: memory, not '
                                 f'time) | "off" by default: a step then runs no bookkeeping of them; '
                                 f'configs/ablation_base.py turns them on for every ablation; never changes training, '
                                 f'so no run hash holds it',
                                 absent="off"),
        "sample_tokens": (300, GE0, "tokens sampled and printed at the end (0: none)"),
        "wandb_log": (False, None,
                      "also send every log.jsonl row and the config to Weights & Biases (pip install "
                      "wandb; WANDB_MODE=offline keeps it on disk)"),
        "wandb_project": ("scalevec", None, "the W&B project"),
        "wandb_run_name": ("", None, "the W&B run name (empty: out_dir's folder name)"),
    },
    "data": {
        "dataset": ("shakespeare_char", Path(), "a folder under data/, or a path to one"),
        "batch_size": (32, GE1, "micro-batch per process"),
        "gradient_accumulation_steps": (1, GE1, "global count, divided among DDP processes"),
    },
    "model": {
        "block_size": (128, GE1, "context length (tokens)"),
        "n_layer": (4, GE1, "transformer blocks"),
        "n_head": (4, GE1, "attention (query) heads"),
        "n_kv_head": added(0, GE0, "key/value heads, grouped-query attention (0: n_head; n_head must divide by it)",
                           absent=0),
        "head_dim": added(0, GE0, "width of a head, even (0: n_embd / n_head, which must divide)", absent=0),
        "n_embd": (128, GE1, "width"),
        "d_ff": (0, GE0, "SwiGLU hidden width (0: 8/3 n_embd rounded up to a multiple of 64)"),
        "vocab_size": (0, GE0, "0: from the dataset's meta.pkl; padded to a multiple of 64 inside the model"),
        "tie_embeddings": (True, None, "LM head shares the token embedding"),
        "dropout": (0.0, Range(0, 1, high_open=True, usual=(0, 0.5)), "in [0, 1)"),
        "rope_theta": (10000.0, Range(0, low_open=True, usual=(100, 1e8)), "RoPE base"),
    },
    "scale vectors": {  # the paper's unified strategy: HG + DNP + OR + IWD
        "scale": ("vector", None, "learnable scale vectors, or none of them (normalizations only) (model.SCALES)"),
        "reparam": ("or", None, "how each scale vector is parameterized (norms.SCALE_CLASSES)"),
        "branch_scales": (True, None, "HG: separate scales for q, k, v and gate, up"),
        "attn_placement": ("in", None, "where attention's scale vectors sit (model.ATTN_PLACEMENTS)"),
        "mlp_placement": ("dual_norm", None,
                          "where the MLP's scale vectors and normalizations sit (model.MLP_PLACEMENTS)"),
        "dual_sites": added("prenorm", None,
                            '"prenorm": dual placements put scales on the maps that read the normalized '
                            'input (q, k, v; gate, up) | "all": also around W_o and W_down (the earlier '
                            'reading) (model.DUAL_SITES)', absent="all"),
        "qk_norm": (False, None, "RMSNorm on q and k per head, with output-role scales"),
        "output_norms": (False, None, "Gemma-style RMSNorm on each branch's output before the residual add"),
        "norm_eps": (1e-6, Range(0, low_open=True, usual=(1e-12, 1e-3)),
                     "added to the mean square in every RMSNorm"),
        "scale_wd": ("iwd", None, "which scale vectors weight decay pulls, by role (optim.SCALE_WD)"),
    },
    "mixture of experts": {
        "n_experts": (0, GE0, "0: dense"),
        "top_k": (2, GE1, "experts per token"),
        "moe_every": (1, GE1, "1: every block is MoE; 2: blocks 1, 3, 5, ... (0-based)"),
        "expert_d_ff": (0, GE0, "expert width (0: d_ff)"),
        "shared_expert": (False, None, "one always-on expert beside the routed ones"),
        "aux_loss_coef": (0.01, Range(0, usual=(1e-5, 1), zero_ok=True), "load-balancing loss weight"),
        "z_loss_coef": (0.0, Range(0, usual=(1e-6, 1), zero_ok=True), "router z-loss weight"),
    },
    "optimizer": {
        "optimizer": ("adamw", None, "what steps the hidden matrices; AdamW steps the rest (optim.OPTIMIZERS)"),
        "learning_rate": (3e-3, Range(0, low_open=True, why="0 trains nothing, and min_lr is relative to it",
                                        usual=(1e-6, 1)),
                          "AdamW's peak LR"),
        "muon_lr": (0.02, Range(0, low_open=True, why="0 freezes every matrix Muon steps", usual=(1e-5, 1)),
                    "Muon's peak LR"),
        "muon_momentum": (0.95, Range(0, 1, high_open=True, usual=(0.5, 0.99)), "in [0, 1)"),
        "scale_lr": added(0.0, Range(0, usual=(1e-6, 1), zero_ok=True),
                          "AdamW's peak LR for every scale vector (0: learning_rate's): its own rule across widths, "
                          "apart from the matrices' (configs/ablations/ladder.py keeps it fixed)", absent=0.0),
        "magnitude_lr_mult": (1.0, Range(0, usual=(1e-3, 1e3)),
                              "LR of the OR/ER magnitude scalar over the scale vectors' LR"),
        "weight_decay": (0.1, Range(0, usual=(1e-6, 10), zero_ok=True),
                         "on matrices, the LM head, the router; on scales as scale_wd says"),
        "beta1": (0.9, Range(0, 1, high_open=True, usual=(0.5, 0.99), zero_ok=True), "AdamW, in [0, 1)"),
        "beta2": (0.95, Range(0, 1, high_open=True, usual=(0.9, 0.9999)), "AdamW, in [0, 1)"),
        "grad_clip": (1.0, Range(0, usual=(1e-3, 1e3), zero_ok=True), "global gradient-norm clip (0: off)"),
    },
    "schedule": {
        "lr_schedule": ("cosine", None, "the LR after warmup (optim.LR_SCHEDULES)"),
        "warmup_iters": (50, GE0, "linear warmup iterations"),
        "max_iters": (600, GE0, "training iterations"),
        "min_lr": (3e-4, Range(0, usual=(1e-8, 1), zero_ok=True),
                   "the LR the decay ends at (as a share of each group's peak: min_lr / learning_rate)"),
        "wsd_decay_frac": (0.2, Range(0, 1, usual=(0.01, 0.5)), "WSD: share of max_iters spent decaying, in [0, 1]"),
    },
    "system": {
        "device": ("auto", Choices("auto", "cpu", "cuda", "cuda:N", "mps", pattern=r"auto|cpu|mps|cuda(:\d+)?"),
                   '"auto" | "cpu" | "cuda" | "cuda:N" | "mps" (one this machine has)'),
        "dtype": ("auto", Choices("auto", "float32", "bfloat16"),
                  '"auto" (bfloat16 on CUDA, else float32) | "float32" | "bfloat16"'),
        "compile": (False, None, "torch.compile the model"),
        "fused": added(True, None, "the fast paths (plumbing/fused.py: scales on the weights, SwiGLU and DNP recomputed "
                                   "in the backward on CUDA, a chunked head): the same maps as the formulas, faster; "
                                   "False runs norms.py's and model.py's formulas alone (to step through them)",
                       absent=True),
        "seed": (1337, Range(0, 2**32 - 1, why="numpy's generators need it"), "initial weights and batches"),
        "fsdp": added(False, None, "FSDP2 under torchrun: shard each block's parameters, gradients and AdamW "
                                   "state over the processes (for a model whose state does not fit one GPU under "
                                   "DDP)", absent=False),
        "cpu_numerics": added("native", Choices("native", "portable"),
                              '"native": the CPU kernels this CPU dispatches to | "portable": one kernel level on '
                              'every x86-64 CPU with AVX2 (common.PORTABLE_ENV, set before torch loads; changes the '
                              'numbers, so never pair its runs with native ones)', absent="native"),
        "ddp_timeout_s": (600, Range(1, 10**7, why="a timedelta of it must exist; 10**7 s is 115 days"),
                          "seconds a DDP collective may wait"),
        "max_estimated_hours": added(24.0, Range(0, usual=(1, 10**4), zero_ok=True),
                                     "a run whose time on the device it found is at least this many hours (its FLOPs "
                                     "at the device's best: a lower bound) stops at start, naming it (0: no limit)",
                                     absent=0.0),
    },
}
DEFAULTS = {key: row[0] for keys in SECTIONS.values() for key, row in keys.items()}
ALLOWED = {key: row[1] for keys in SECTIONS.values() for key, row in keys.items()}
ABSENT = {key: row[3] for keys in SECTIONS.values() for key, row in keys.items() if len(row) > 3}  # added() rows
# what a run reports and where, and what it checks at its start, never the numbers it trains to: no run hash
# holds them, a resume may change them
TRACKING_KEYS = ("wandb_log", "wandb_project", "wandb_run_name", "mechanism_stats", "max_estimated_hours")


class UserError(Exception):
    """Bad input: printed as one clear line, exit status 1, nothing lost."""


def not_a_file(path, kind):
    """Why `path`, given where `kind` (e.g. "a config file") is read, is not one; None when it is a regular
    file. A folder, a FIFO, a device or a socket is named as such (reading one would wait or never end)."""
    if os.path.isfile(path):
        return None
    if os.path.isdir(path):
        return f"is a folder: name {kind}"
    if os.path.exists(path):
        return f"is not a file but a FIFO, a device or a socket (reading it would wait or never end): name {kind}"
    return "not found"


def folder_problem(path):
    """Why files cannot be written in the folder `path` (created if missing), or None if they can.

    Checked by trying: a probe file in path, or in its nearest existing parent when path does not
    exist yet (nothing is created there), so a read-only disk or a root-owned folder is seen as such.
    A symbolic link at path is refused before any probe: a command writes in a folder itself, never
    through a link (one planted in a downloaded run folder would have it write elsewhere).
    """
    import shlex
    import tempfile
    if os.path.islink(path.rstrip(os.sep) or path):  # ("link/" would name the folder it points to)
        return (f"a symbolic link (to {os.readlink(path.rstrip(os.sep))}): a command writes only in a folder itself, never "
                f"through a link; name the folder it points to ({shlex.quote(os.path.realpath(path))}) or another")
    if os.path.exists(path) and not os.path.isdir(path):
        return "a file, not a folder: name a folder (it is created if missing)"
    parent = os.path.abspath(path)
    while not os.path.exists(parent):
        parent = os.path.dirname(parent)
    name_max = os.pathconf(parent, "PC_NAME_MAX") if hasattr(os, "pathconf") else 255
    long = next((n for n in os.path.abspath(path).split(os.sep) if len(os.fsencode(n)) > name_max), None)
    if long is not None:  # the file system refuses it (ENAMETOOLONG) wherever a command would make it
        return (f"its name {long[:40]!r}... is {len(os.fsencode(long))} bytes, over the {name_max} a name may have on "
                f"this file system: name a folder with a shorter name")
    if not os.path.isdir(parent):
        return f"{parent} is a file, not a folder: no folder can be made inside it"
    try:
        with tempfile.TemporaryFile(dir=parent):
            pass
    except OSError as e:
        return f"cannot write in {parent} ({e.strerror or type(e).__name__}): name a folder this user can write"
    return None


def usage(doc, choices=None):
    """A command's --help text: its docstring, then every key by section with default and meaning.

    choices: {key: {name: meaning}} of the keys whose values are a registry's names (the
    registries live with their code: ops.choices() gathers them), listed under the key."""
    lines = [doc.strip(), "", "config keys (--key=value; default, then meaning):"]
    for section, keys in SECTIONS.items():
        lines.append(f"\n  {section}")
        for key, (default, allowed, meaning, *_) in keys.items():
            arg = f"--{key}={default!r}" if isinstance(default, str) else f"--{key}={default}"
            listed = (choices or {}).get(key, {})
            named = listed and not any(listed.values()) and not all(f'"{v}"' in meaning for v in listed)
            lines.append(f"    {arg:<40} {meaning}{allowed_note(allowed, meaning)}"
                         + (f" [one of {', '.join(map(repr, listed))}]" if named else ""))
            lines += [f"    {'':<40}   {name!r}: {what}" for name, what in listed.items() if what]
    return "\n".join(lines)


def allowed_note(allowed, meaning):
    """' [>= 1]': a key's allowed values for --help, unless its meaning already says them."""
    if allowed is None or isinstance(allowed, Path) or allowed.describe().removeprefix("in ") in meaning or \
            isinstance(allowed, Choices) and all(f'"{v}"' in meaning for v in allowed.values):
        return ""
    return f" [{allowed.describe()}]"


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
        if isinstance(default, float) and text.strip().lower() in ("nan", "inf", "-inf", "infinity", "-infinity"):
            return float(text)  # a float, refused by check_values as not finite
        raise UserError(f"--{key}={text}: {key} must be {a_type(default)}") from None
    return check_type(key, value, f"--{key}={text}")


def check_type(key, value, where):
    """value converted to the type of DEFAULTS[key] (int -> float allowed), else UserError."""
    default = DEFAULTS[key]
    if isinstance(default, float) and isinstance(value, int) and not isinstance(value, bool):
        try:
            return float(value)
        except OverflowError:
            raise UserError(f"{key}={str(value)[:8]}... ({len(str(value))} digits) is too large for a float: "
                            f"set --{key} to a finite value (default {default!r})") from None
    if type(value) is not type(default):
        raise UserError(f"{where}: {key} must be {a_type(default)}, got {type(value).__name__} {value!r}")
    return value


def not_one_of(key, value, choices):
    """"key='value' is not one of 'a', 'b'" with a did-you-mean for a near miss (--reparam=sofplus):
    the one wording of a value no registry or choice list holds, for every module that checks one."""
    close = difflib.get_close_matches(str(value), [str(c) for c in choices], n=1, cutoff=0.6)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return f"{key}={value!r} is not one of {', '.join(map(repr, choices))}{hint}"


def unknown_key(key, where):
    close = difflib.get_close_matches(key, DEFAULTS, n=3, cutoff=0.6)
    hint = f"; did you mean {', '.join(close)}?" if close else "; python train.py --help lists the keys"
    return UserError(f"{where}: unknown config key {key!r}{hint}")


def run_config_file(path):
    """The names a config file (plain Python) defines; UserError naming its line if it fails to run."""
    namespace = {}
    try:
        with open(path, encoding="utf-8") as f:
            source = f.read()
    except UnicodeDecodeError as e:
        raise UserError(f"config file {path}: byte {e.start} is not UTF-8 text: a config file is Python source "
                        f"(plain assignments); save it as UTF-8") from None
    try:
        exec(compile(source, path, "exec"), namespace)
    except (Exception, SystemExit, KeyboardInterrupt) as e:  # a config file is Python: its error is bad input
        lines = [fr.lineno for fr in traceback.extract_tb(e.__traceback__) if fr.filename == path]
        line = e.lineno if isinstance(e, SyntaxError) else (lines[-1] if lines else "?")
        if isinstance(e, SystemExit):  # sys.exit() would end the command silently
            raise UserError(f"config file {path}, line {line}: calls sys.exit({e.code!r}): a config file only "
                            f"assigns values; remove the call") from None
        raise UserError(f"config file {path}, line {line}: {type(e).__name__}: {e}") from None
    return namespace


class Given(set):
    """The keys a config sets explicitly (load_config), with `where` each was set: {key: "on the
    command line" or "in <config file>"}, so a note about a key says where its value came from."""

    def __init__(self, keys=()):
        super().__init__(keys)
        self.where = {}


def load_config(argv):
    """Defaults, then config files (plain assignments), then --key=value overrides.

    Args: argv without the program name, e.g. ["configs/x.py", "--max_iters=10"].
    Returns: (config dict with every key of DEFAULTS, the keys given explicitly: a Given, a set that
    also says where each was set).
    Raises UserError naming the bad key or value (unknown key, wrong type,
    missing config file, malformed argument, a key given twice on the command
    line (a key a config file sets may be set again on the command line, which
    wins), a value ALLOWED refuses).
    """
    cfg, given, on_line = dict(DEFAULTS), Given(), {}
    for arg in argv:
        if arg.startswith("--"):
            if "=" not in arg:
                raise UserError(f"argument {arg!r}: write --key=value")
            key, text = arg[2:].split("=", 1)
            if key not in DEFAULTS:
                raise unknown_key(key, f"argument {arg!r}")
            if key in on_line:
                raise UserError(f"argument {arg!r}: {key} is given twice on the command line ({on_line[key]!r} "
                                f"and {arg!r}): give it once")
            on_line[key] = arg
            cfg[key] = parse_value(key, text)
            given.add(key)
            given.where[key] = "on the command line"
        else:
            if not os.path.isfile(arg):  # nanoGPT's habit, `key=value` without its dashes, is not a file either
                why = (f"not found: a key is written --{arg}" if not os.path.exists(arg) and "=" in arg
                       and arg.split("=", 1)[0] in DEFAULTS else not_a_file(arg, "a config file"))
                raise UserError(f"config file {arg!r} {why}")
            namespace = run_config_file(arg)
            for key, value in namespace.items():
                if key.startswith("_") or callable(value) or type(value).__name__ == "module":
                    continue
                if key not in DEFAULTS:
                    raise unknown_key(key, arg)
                cfg[key] = check_type(key, value, arg)
                if key not in on_line:  # (a later file sets it again; the command line wins over files)
                    given.add(key)
                    given.where[key] = f"in {arg}"
    for key, allowed in ALLOWED.items():  # ~ in a path: the shell leaves it alone after --key=
        if isinstance(allowed, Path):
            cfg[key] = os.path.expanduser(cfg[key])
    check_values(cfg)
    return cfg, given


# -----------------------------------------------------------------------------
# Checking values, and what is built from them


MOST_BITS = 53  # an int past 2**53 is no real size, count or seed: float estimates of it lose exactness, then overflow


def value_problem(key, value):
    """Why ALLOWED refuses value for key (a float that is nan or inf, a number out of its range,
    a string not among its choices), as one line with the fix; None when it is allowed.
    model.GPTConfig checks its fields with this too: a range is stated once, here."""
    allowed = ALLOWED[key]
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > 2**MOST_BITS:
        return (f"{key}={value if value.bit_length() < 100 else f'a number of {len(str(value))} digits'} is past any "
                f"real size (at most 2**{MOST_BITS}, where size estimates stay exact): set --{key} to a real value "
                f"(default {DEFAULTS[key]!r})")
    finite = not isinstance(value, float) or math.isfinite(value)
    if allowed is None or finite and allowed.allows(value):
        return None
    fix = f"set --{key} to {'one of them' if isinstance(allowed, Choices) else 'such a value'} " \
          f"(default {DEFAULTS[key]!r})"
    why = f" ({allowed.why})" if getattr(allowed, "why", "") else ""
    if isinstance(allowed, Choices):
        return f"{not_one_of(key, value, allowed.values)}: {fix}"
    if not finite:
        return f"{key}={value!r} is not a finite number: {key} must be {allowed.describe()}{why}; {fix}"
    return f"{key}={value!r} must be {allowed.describe()}{why}: {fix}"


def check_values(cfg):
    """UserError, one line, for the first value ALLOWED refuses (value_problem). A key cfg lacks (an
    ablation run's out_dir) is skipped."""
    for key in ALLOWED:
        problem = key in cfg and value_problem(key, cfg[key])
        if problem:
            raise UserError(problem)


def unusual(cfg):
    """[(key, why)]: the values allowed but outside their key's usual range (Range.usual), each a
    note at the start of the run: legal, and rarely meant (norm_eps=1e6 for 1e-6; a Muon LR of 0)."""
    found = []
    for key, allowed in ALLOWED.items():
        if isinstance(allowed, Range) and key in cfg and not allowed.is_usual(cfg[key]):
            low, high = allowed.usual
            found.append((key, f"outside its usual range [{low:g}, {high:g}]"
                               f"{' (or 0: off)' if allowed.zero_ok else ''}; check it is the value you meant"))
    return found


def complete(cfg):
    """A stored config (a record's or a checkpoint's, a dict) with every key: a key added after it
    was written takes the value it meant then (its row's absent=: ABSENT), else its default."""
    return {**DEFAULTS, **ABSENT, **cfg}


def check(cfg_dict):
    """UserError for any value out of its range (ALLOWED) and a W&B setting W&B would refuse: all
    this module can check alone. ops.check_config adds memory (memory.check_memory), the model's
    and the optimizer's checks."""
    check_values(cfg_dict)
    project = cfg_dict.get("wandb_project", "")
    if len(project) > 128 or set(project) & set("/\\#?%:"):
        raise UserError(f"wandb_project={project!r}: W&B project names have at most 128 characters and none of "
                        f"/ \\ # ? % :")
    if cfg_dict.get("wandb_log") and importlib.util.find_spec("wandb") is None:
        raise UserError("wandb_log=True needs the wandb package: pip install wandb (or drop --wandb_log)")
