"""Role-aware parameter groups, AdamW / Muon, and learning-rate schedules.

The rule that matters for the paper (claim C4, "IWD"): weight decay on
input-role scale vectors, none on output-role ones. Roles come from the scale
vectors themselves (norms.ScaleVector.role), never from parameter names.

Groups, and the declared field that puts a parameter there:
    matrix            ScaledLinear weights, optim_group "matrix"  weight_decay  Muon under optimizer="muon"
    embedding         model.wte (tied: also the head)             0
    lm_head           model.lm_head, when untied                  weight_decay
    scale_input       ScaleVector params, role "input"            by scale_wd   scale_lr (0: learning_rate)
    scale_output      ScaleVector params, role "output"           by scale_wd   scale_lr (0: learning_rate)
    magnitude_input   its magnitude_name param, role "input"      by scale_wd   scale_lr x magnitude_lr_mult
    magnitude_output  the same, role "output"                     by scale_wd   scale_lr x magnitude_lr_mult
    router            optim_group "router" (model.Router)         weight_decay  AdamW always
`scale_wd` names a recipe (SCALE_WD: ScaleDecay), the decay it gives each role: "iwd" =
(weight_decay, 0), the paper's; "all" = (weight_decay, weight_decay); "none" = (0, 0), the
usual nanoGPT/Llama practice; "iwd_final" = "iwd" by each scale's `untied_role`, which also
decays the final-norm scale while the head is tied (output-role then; the test of that rule,
configs/ablations/c4_tied_final_norm.py).
Only these declared fields are read (norms.py documents them), never model
classes or names; a module that owns parameters and fits no group is an error.
"""

import math
import weakref
from dataclasses import dataclass
from typing import Callable

import torch

from configurator import UserError, not_one_of
from norms import ROLES, SCALE_CLASSES, ScaledLinear, ScaleVector


def input_role(role, cfg):
    """IWD: weight_decay on input-role scales, none on output-role ones (paper section 4, claim C4)."""
    return cfg.weight_decay if role == "input" else 0.0


def every_role(role, cfg):
    return cfg.weight_decay


def no_role(role, cfg):
    return 0.0


@dataclass(frozen=True)
class ScaleDecay:
    """A weight-decay recipe for the scale vectors (a scale_wd choice), an entry as a Schedule is.

    decay(role, cfg) -> float: the weight decay of the scales of role "input" or "output" (groups
        scale_<role> and magnitude_<role>). AdamW applies it to each raw parameter, p -= lr * decay
        * p: what that does to gamma is the class's (norms.py; for gamma = p / tau, decaying tau
        raises gamma).
    keys: the config keys it reads besides weight_decay (a note says they do nothing under another
        recipe); meaning: --help's line; untied: group each scale by its untied_role
        (norms.ScaleVector), so the tied final-norm scale counts as input-role; check: an optional
        check(cfg) raising ValueError; reads: keys it reads that the run reads anyway (a model key, as
        n_embd): declared, never noted, as an optimizer's and a schedule's are.
    Its contract (plumbing/contracts.py refuses an entry that breaks it, at start, in one line): each key
    it reads has a row in configurator.SECTIONS and is declared in keys or reads (weight_decay aside), each
    key it declares is read for some role, the role is compared only with "input" or "output" and
    comes first (recipe_problem), and under the run's config decay gives a finite number >= 0 for
    each role."""

    decay: Callable
    keys: tuple
    meaning: str
    untied: bool = False
    check: Callable = None
    reads: tuple = ()


SCALE_WD = {
    "iwd": ScaleDecay(input_role, (), "decay input-role scales only (the paper's IWD)"),
    "all": ScaleDecay(every_role, (), "decay every scale"),
    "none": ScaleDecay(no_role, (), "decay no scale (the usual nanoGPT/Llama practice)"),
    "iwd_final": ScaleDecay(input_role, (), "iwd that also decays the tied final-norm scale", untied=True),
}


def param_groups(model, cfg):
    """Split model's parameters into role groups (see the module docstring).

    Args: model (model.GPT); cfg with weight_decay, scale_wd (and its recipe's keys), learning_rate,
        muon_lr, optimizer, scale_lr (the scale vectors' LR; 0 or absent:
        learning_rate), magnitude_lr_mult (the OR/ER magnitude's LR over the
        scale vectors'; paper Theorem 3.2 reads OR as a larger LR on it).
    Returns: list of dicts {name, params, weight_decay, lr, optimizer}, empty
        groups left out; every parameter in exactly one group (tied weights once).
    Raises ValueError for an unknown scale_wd / optimizer, for a module that
        owns parameters and fits no group (a new module type: make it a
        ScaleVector or a ScaledLinear, or give optim.py a rule for it), and
        for an optim_group that is no group here.
    """
    check_choices(cfg, ("scale_wd", "optimizer"))
    wd, recipe = cfg.weight_decay, SCALE_WD[cfg.scale_wd]
    scale_wd = {role: recipe.decay(role, cfg) for role in ROLES}
    buckets = {k: [] for k in ("matrix", "embedding", "lm_head", "scale_input", "scale_output",
                               "magnitude_input", "magnitude_output", "router")}
    seen = set()

    def put(bucket, params):
        for p in params:
            if id(p) not in seen:  # a tied head is the embedding: keep it once
                seen.add(id(p))
                buckets[bucket].append(p)

    for name, module in model.named_modules():
        own = list(module.parameters(recurse=False))
        if isinstance(module, ScaleVector):
            role = module.untied_role if recipe.untied else module.role
            if module.has_magnitude():
                put("magnitude_" + role, [module.get_parameter(module.magnitude_name)])
            put("scale_" + role, module.parameters())
        elif module is model.wte:
            put("embedding", own)
        elif module is model.lm_head:
            put("lm_head", own)
        elif isinstance(module, ScaledLinear):
            if module.optim_group not in buckets:
                raise ValueError(f"{type(module).__name__}.optim_group={module.optim_group!r} is not one of "
                                 f"{list(buckets)}")
            put(module.optim_group, own)
        elif own:
            raise ValueError(
                f"module {name!r} ({type(module).__name__}) owns parameters "
                f"{[n for n, _ in module.named_parameters(recurse=False)]} but fits no optimizer group: "
                f"make it a norms.ScaleVector (role) or norms.ScaledLinear (optim_group), or add a rule "
                f"to optim.param_groups")

    all_params = {id(p) for p in model.parameters()}
    grouped = [id(p) for b in buckets.values() for p in b]
    assert len(grouped) == len(set(grouped)) and set(grouped) == all_params, \
        "optimizer groups must cover every parameter exactly once"

    matrices = OPTIMIZERS[cfg.optimizer]
    # scale_lr 0, or absent (a config from before the key), is learning_rate: the one LR of old runs
    scale_lr = vars(cfg).get("scale_lr") or cfg.learning_rate
    mag_lr = scale_lr * cfg.magnitude_lr_mult
    spec = {  # name -> (weight decay, lr, optimizer)
        "matrix": (wd, vars(cfg)[matrices.lr_key], matrices.name),
        "embedding": (0.0, cfg.learning_rate, "adamw"),
        "lm_head": (wd, cfg.learning_rate, "adamw"),
        "scale_input": (scale_wd["input"], scale_lr, "adamw"),
        "scale_output": (scale_wd["output"], scale_lr, "adamw"),
        "magnitude_input": (scale_wd["input"], mag_lr, "adamw"),
        "magnitude_output": (scale_wd["output"], mag_lr, "adamw"),
        "router": (wd, cfg.learning_rate, "adamw"),
    }
    return [dict(name=name, params=buckets[name], weight_decay=spec[name][0], lr=spec[name][1],
                 initial_lr=spec[name][1], optimizer=spec[name][2])
            for name in buckets if buckets[name]]


def format_groups(groups):
    """A table of the groups: name, optimizer, tensors, parameters, lr, weight decay."""
    lines = [f"{'group':<16} {'optimizer':<9} {'tensors':>7} {'params':>13} {'lr':>9} {'wd':>6}"]
    for g in groups:
        n = sum(p.numel() for p in g["params"])
        lines.append(f"{g['name']:<16} {g['optimizer']:<9} {len(g['params']):>7} {n:>13,} "
                     f"{g['lr']:>9.2e} {g['weight_decay']:>6.3g}")
    return "\n".join(lines)


def build_optimizers(model, cfg, device_type):
    """The optimizers of model's groups: one per optimizer name the groups carry (param_groups:
    "matrix" takes cfg.optimizer's, every other group AdamW's), built by OPTIMIZERS[name].build,
    AdamW first (the order checkpoints store them in).

    Returns: (optimizers, groups); step and zero_grad each optimizer.
    Raises ValueError for a group whose optimizer OPTIMIZERS does not hold (it would never step);
    UserError (one line at start) for a build that returns no torch.optim.Optimizer.
    """
    groups = param_groups(model, cfg)
    names = list(dict.fromkeys(g["optimizer"] for g in groups))
    unknown = [g["name"] for g in groups if g["optimizer"] not in OPTIMIZERS]
    if unknown:
        raise ValueError(f"groups {unknown} name optimizers {sorted({g['optimizer'] for g in groups} - OPTIMIZERS.keys())}"
                         f" that optim.OPTIMIZERS does not hold, so nothing would step them: add the optimizer there")
    names.sort(key=list(OPTIMIZERS).index)
    optimizers = [OPTIMIZERS[n].build([g for g in groups if g["optimizer"] == n], cfg, device_type) for n in names]
    for n, opt in zip(names, optimizers):
        if not isinstance(opt, torch.optim.Optimizer):
            raise UserError(f"OPTIMIZERS[{n!r}].build returned {opt!r}, not a torch.optim.Optimizer: make it return "
                            f"the optimizer it builds")
    return optimizers, groups


def build_adamw(groups, cfg, device_type):
    """torch.optim.AdamW, fused on CUDA and CPU (5x faster than the per-tensor loop on CPU at
    124M, and it does not slow down with the many small scale-vector tensors)."""
    return torch.optim.AdamW(groups, lr=cfg.learning_rate, betas=(cfg.beta1, cfg.beta2), eps=1e-8,
                             fused=device_type in ("cuda", "cpu"))


def build_muon(groups, cfg, device_type):
    """torch.optim.Muon on CUDA, CPUMuon (the same update, Newton-Schulz in float32) elsewhere."""
    cls = torch.optim.Muon if device_type == "cuda" else CPUMuon
    return cls(groups, lr=cfg.muon_lr, momentum=cfg.muon_momentum, nesterov=True)


@dataclass(frozen=True)
class Optimizer:
    """An optimizer=<name> choice: what steps the hidden matrices ("matrix" group); every other
    group steps with AdamW.

    build: (param groups, cfg, device type) -> a torch.optim.Optimizer
    lr_key: the config key of its peak LR for the matrices
    keys: config keys only it reads (a note says they do nothing under another optimizer)
    shards: whether it can step parameters FSDP2 has sharded (an update per element, as AdamW's;
        Muon's orthogonalization needs whole matrices); False, the safe default, refuses fsdp=True
    check: an optional check(cfg) raising ValueError
    reads: keys it reads that the run reads anyway (a model key): declared, never noted
    Its contract (plumbing/contracts.py refuses an entry that breaks it, at start, in one line): its name
    is its key, and each key it reads has a row in configurator.SECTIONS and is declared (lr_key,
    keys; learning_rate, beta1, beta2 aside: AdamW's, which every run reads).
    """

    name: str
    build: Callable
    lr_key: str
    keys: tuple
    meaning: str
    shards: bool = False
    check: Callable = None
    reads: tuple = ()


OPTIMIZERS = {o.name: o for o in (
    Optimizer("adamw", build_adamw, "learning_rate", (), "AdamW for every parameter", shards=True),
    Optimizer("muon", build_muon, "muon_lr", ("muon_lr", "muon_momentum"),
              "Muon for the hidden matrices, AdamW for the rest"),
)}


class CPUMuon(torch.optim.Muon):
    """torch.optim.Muon with the Newton-Schulz iteration in float32.

    torch.optim.Muon always runs the iteration in bfloat16; on CPUs without
    bf16 matrix units that takes ~8 s for one 768x768 step.
    Same coefficients, momentum, Nesterov, decoupled weight decay, LR
    adjustment ("original": lr * sqrt(max(1, rows/cols))) and state layout
    (a "momentum_buffer" per parameter), so checkpoints move between the two.
    tests/test_optim.py checks the update against torch.optim.Muon's.
    Raises ValueError (from torch.optim.Muon) for non-2-D parameters.
    """

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            if group["adjust_lr_fn"] not in (None, "original"):
                raise ValueError(f"CPUMuon implements adjust_lr_fn='original' only, got {group['adjust_lr_fn']!r}")
            lr, wd, mu = group["lr"], group["weight_decay"], group["momentum"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if "momentum_buffer" not in state:
                    state["momentum_buffer"] = torch.zeros_like(p.grad)
                buf = state["momentum_buffer"]
                buf.lerp_(p.grad, 1 - mu)
                update = p.grad.lerp(buf, mu) if group["nesterov"] else buf
                update = newton_schulz_fp32(update, group["ns_coefficients"], group["ns_steps"], group["eps"])
                p.mul_(1 - lr * wd)
                p.add_(update, alpha=-lr * math.sqrt(max(1.0, p.size(0) / p.size(1))))
        return loss


def newton_schulz_fp32(g, coefficients, steps, eps):
    """Approximate U V^T of g = U S V^T by a quintic Newton-Schulz iteration, in float32.

    The iteration of torch.optim.Muon (Keller Jordan's Muon), without its
    bfloat16 cast. g: (m, n) -> (m, n).
    """
    a, b, c = coefficients
    x = g.float()
    tall = x.size(0) > x.size(1)
    if tall:
        x = x.T
    x = x / x.norm().clamp(min=eps)  # spectral norm <= Frobenius norm <= 1
    for _ in range(steps):
        gram = x @ x.T
        x = a * x + (b * gram + c * gram @ gram) @ x
    return (x.T if tall else x).to(g.dtype)


# -----------------------------------------------------------------------------
# Learning-rate schedules: a multiplier of each group's initial_lr, a function
# of the iteration only, so a resumed run gets exactly the LR of a straight one.


def wsd_decay_iters(cfg):
    """Iterations in wsd's decay: wsd_decay_frac of max_iters, rounded, at least 1."""
    return max(1, round(cfg.wsd_decay_frac * cfg.max_iters))


def cosine(it, cfg, floor):
    progress = min(1.0, (it - cfg.warmup_iters) / max(1, cfg.max_iters - cfg.warmup_iters))
    return floor + (1.0 - floor) * 0.5 * (1.0 + math.cos(math.pi * progress))


def linear(it, cfg, floor):
    progress = min(1.0, (it - cfg.warmup_iters) / max(1, cfg.max_iters - cfg.warmup_iters))
    return 1.0 - (1.0 - floor) * progress


def wsd(it, cfg, floor):
    """Stable at 1, then a linear decay over the last wsd_decay_iters(cfg) iterations."""
    n = wsd_decay_iters(cfg)
    decay_start = cfg.max_iters - n
    return 1.0 if it < decay_start else 1.0 - (1.0 - floor) * min(1.0, (it - decay_start + 1) / (n + 1))


def check_wsd(cfg):
    if not 0 < cfg.wsd_decay_frac <= 1:
        raise ValueError(f"wsd_decay_frac={cfg.wsd_decay_frac} must be in (0, 1] (for no decay use "
                         f"--lr_schedule=constant)")
    n = wsd_decay_iters(cfg)
    if cfg.warmup_iters < cfg.max_iters and cfg.max_iters - n < cfg.warmup_iters:
        raise ValueError(
            f"lr_schedule='wsd': the decay (the last {n} of max_iters={cfg.max_iters} iterations) would start "
            f"inside warmup (warmup_iters={cfg.warmup_iters}): set --wsd_decay_frac <= "
            f"{(cfg.max_iters - cfg.warmup_iters) / cfg.max_iters:.3g} or --warmup_iters <= {cfg.max_iters - n}")


@dataclass(frozen=True)
class Schedule:
    """An lr_schedule choice: its multiplier after warmup, multiplier(it, cfg, floor) with floor =
    min_lr / learning_rate; the config keys it reads besides warmup_iters and max_iters (a note
    says the others do nothing); an optional check(cfg) raising ValueError; reads: keys it reads that the run
    reads anyway (a model key): declared, never noted.

    The contract every entry meets (plumbing/contracts.py refuses one that breaks it, at start, naming the
    rule and the entry): each key it reads has a row in configurator.SECTIONS, and from warmup_iters
    to max_iters its multiplier lies in [floor, 1] (in [0, 1] for one that does not read min_lr) and
    never rises (no step jumps above the peak or below the floor the user set)."""

    multiplier: Callable
    keys: tuple
    meaning: str
    check: Callable = None
    reads: tuple = ()


LR_SCHEDULES = {
    "cosine": Schedule(cosine, ("min_lr",), "cosine decay to min_lr"),
    "wsd": Schedule(wsd, ("min_lr", "wsd_decay_frac"), "warmup-stable-decay: constant, then linear to min_lr "
                                                        "over the last wsd_decay_frac", check_wsd),
    "linear": Schedule(linear, ("min_lr",), "linear decay to min_lr"),
    "constant": Schedule(lambda it, cfg, floor: 1.0, (), "constant after warmup"),
}
# The config keys whose values are these registries' names (checked by check, listed by --help).
CHOICES = {"optimizer": OPTIMIZERS, "lr_schedule": LR_SCHEDULES, "scale_wd": SCALE_WD}


def check_choices(cfg, keys):
    """ValueError for the first of keys (of CHOICES) whose value its registry does not hold."""
    for key in keys:
        if vars(cfg)[key] not in CHOICES[key]:
            raise ValueError(not_one_of(key, vars(cfg)[key], CHOICES[key]))


def check(cfg):
    """ValueError naming the fix for an optimizer, schedule or decay recipe these registries do
    not hold, an optimizer that cannot step FSDP2's shards under fsdp=True, and for schedule keys
    whose LR would jump, stall or reach 0.

    For every accepted combination (tests/test_optim.py checks a grid): the LR
    is > 0 at every step, continuous after warmup (no step changes it by more
    than about (1 - floor) * pi/2 / decay_iters), and decaying schedules have a
    non-empty decay that starts after warmup. A run that ends before its
    decay (max_iters <= warmup_iters + 1, e.g. a two-step smoke test) is
    accepted; train.py says so.
    """
    check_choices(cfg, CHOICES)
    if cfg.fsdp and not OPTIMIZERS[cfg.optimizer].shards:
        raise ValueError(f"optimizer={cfg.optimizer!r} cannot step FSDP2's sharded parameters (it needs whole "
                         f"matrices): use --optimizer=adamw with --fsdp=True, or DDP (--fsdp=False)")
    schedule = LR_SCHEDULES[cfg.lr_schedule]
    if "min_lr" in schedule.keys and cfg.min_lr > cfg.learning_rate:
        raise ValueError(f"min_lr={cfg.min_lr} is above learning_rate={cfg.learning_rate}: the decay would "
                         f"raise the LR; set --min_lr <= learning_rate (it is the floor the LR decays to)")
    for entry in (OPTIMIZERS[cfg.optimizer], schedule, SCALE_WD[cfg.scale_wd]):
        if entry.check:
            entry.check(cfg)


def inert_keys(cfg):
    """[(key, why)]: the optimizer, schedule and recipe keys whose value changes nothing under the rest
    of cfg (a namespace with every key): another optimizer's, schedule's or recipe's keys (read from
    OPTIMIZERS, LR_SCHEDULES and SCALE_WD), the OR/ER magnitude's LR without a magnitude, scale_wd and
    its recipe's keys with no scale vectors, scale_wd when every recipe decays scales by 0, or when
    the recipe reads the untied role and the head is untied."""
    inert = []
    for switch, registry in (("optimizer", OPTIMIZERS), ("lr_schedule", LR_SCHEDULES), ("scale_wd", SCALE_WD)):
        chosen = vars(cfg)[switch]
        for key in dict.fromkeys(k for entry in registry.values() for k in entry.keys):
            if key not in registry[chosen].keys:
                readers = [repr(n) for n, e in registry.items() if key in e.keys]
                readers = ", ".join(readers[:-1]) + " or " + readers[-1] if len(readers) > 1 else readers[0]
                inert.append((key, f"{switch} is {chosen!r} (only {switch} {readers} reads it)"))
    recipe = SCALE_WD[cfg.scale_wd]
    if cfg.scale == "none":
        inert += [(k, "scale is 'none' (no scale vectors)") for k in ("magnitude_lr_mult", "scale_wd", "scale_lr", *recipe.keys)]
    if not SCALE_CLASSES[cfg.reparam].has_magnitude():
        inert.append(("magnitude_lr_mult", f"reparam is {cfg.reparam!r} (no separate magnitude parameter)"))
    decays = {name: tuple(r.decay(role, cfg) for role in ROLES) for name, r in SCALE_WD.items()} \
        if cfg.weight_decay == 0 or recipe.untied and not cfg.tie_embeddings else {}  # (only then are they compared)
    if cfg.weight_decay == 0 and not any(any(d) for d in decays.values()):
        inert.append(("scale_wd", "weight_decay is 0 (every scale_wd decays scales by 0)"))
    if recipe.untied and not cfg.tie_embeddings:
        same = [n for n, r in SCALE_WD.items() if not r.untied and decays[n] == decays[cfg.scale_wd]]
        inert.append(("scale_wd", f"tie_embeddings is False (every scale then has its untied role: the run is the "
                                  f"one of scale_wd={same[0]!r})" if same else "tie_embeddings is False"))
    return inert


def lr_multiplier(it, cfg):
    """LR multiplier in (0, 1] at iteration it (0-based) for cfg.lr_schedule.

    Linear warmup over warmup_iters ((it + 1) / warmup_iters, so lr(0) > 0),
    then LR_SCHEDULES[lr_schedule].multiplier: "cosine" to min_lr, "wsd" (stable
    at 1, then a linear decay over the last wsd_decay_iters(cfg) iterations),
    "linear" to min_lr, or "constant". min_lr is in units of learning_rate: the
    floor multiplier is min_lr / learning_rate, and Muon's LR follows the same
    multiplier. Every decay reaches the floor at it = max_iters, one step after
    the last, so no step runs at the floor (with min_lr = 0, at LR 0). Keys are
    validated by check.
    """
    if it < cfg.warmup_iters:
        return (it + 1) / cfg.warmup_iters
    return LR_SCHEDULES[cfg.lr_schedule].multiplier(it, cfg, cfg.min_lr / cfg.learning_rate)


def set_lr(optimizers, multiplier):
    """Set every group's lr to its initial_lr times multiplier."""
    for opt in optimizers:
        for group in opt.param_groups:
            group["lr"] = group["initial_lr"] * multiplier


# model -> its parameters, listed once: model.parameters() walks every module, host work a GPU waits for each
# step; the list keeps the walk's order, so the clipped norm sums in the same order (the same losses, bit for bit)
CLIP_LISTS = weakref.WeakKeyDictionary()


def optimizer_step(model, optimizers, grad_clip, mechanism=None):
    """One optimizer step on the gradients accumulated in model: clip their global norm to grad_clip
    (0: off), let the mechanism statistics read them (mechanism.Mechanism.record_step: the step a
    scale-free model would take; None: off), step every optimizer (each its own groups:
    build_optimizers) and drop the gradients. train.py's loop and tools/bench.py's step both call it,
    so the bench times the step the loop takes."""
    if grad_clip > 0:
        if model not in CLIP_LISTS:
            CLIP_LISTS[model] = list(model.parameters())
        torch.nn.utils.clip_grad_norm_(CLIP_LISTS[model], grad_clip)
    if mechanism is not None:
        mechanism.record_step()
    for opt in optimizers:
        opt.step()
        opt.zero_grad(set_to_none=True)
