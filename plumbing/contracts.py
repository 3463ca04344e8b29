"""The registries' contracts, checked at start: what an entry of each extension point must satisfy,
and one line naming the entry and the fix when it does not (check, called by plumbing.ops.check_config
before a run reads data or builds anything).

    norms.SCALE_CLASSES        a ScaleVector subclass; forward() is gamma (d,), 1 at init and after reset_();
                               set_, if any, gives the gamma it is given; magnitude_name names a parameter
                               (scale_class_problem)
    model.ATTN_PLACEMENTS,     a model.Placement whose methods answer True or False, whose outer names its
    model.MLP_PLACEMENTS       branches, and, for a subclass, whose fields and methods the model reads
                               and which builds a model no other entry builds (check_placement)
    optim.OPTIMIZERS,          entries of their type, named by their key, reading only the config keys they
    optim.LR_SCHEDULES,        declare (each with a row in configurator.SECTIONS); a schedule's multiplier
    optim.SCALE_WD             within [floor, 1] and never rising, a recipe's decay a number >= 0 per role
                               (check_contracts, check_run_contracts)

The reading files (norms.py, model.py, optim.py) state each contract beside their registry; the probes
that hold an entry to it live here, so the reading path holds formulas only.
"""

import functools
import itertools
import math

import torch

import model
import optim
from configurator import DEFAULTS
from model import BRANCHES, CHOICES, DUAL_SITES, GPT, GPTConfig, Placement
from norms import ROLES, SCALE_CLASSES, ScaleVector
from optim import LR_SCHEDULES, OPTIMIZERS, SCALE_WD, Optimizer, ScaleDecay, Schedule


def check(cfg):
    """ValueError, one line naming the entry, the rule and the fix, when an entry of a registry the run
    config cfg (a namespace with every key) chooses from breaks its contract: every optimizer, schedule
    and recipe (check_contracts), the run's own under its config (check_run_contracts), its placements
    (check_placement) and its scale class (scale_class_problem), with optim.check's value checks in
    their order. A placement or class name no registry holds is left to model.GPTConfig's line."""
    optim.check_choices(cfg, optim.CHOICES)
    check_contracts(cfg)  # first: an entry's own check (optim.check runs it) may read a key that has no row
    optim.check(cfg)
    check_run_contracts(cfg)
    for key in BRANCHES:
        if getattr(cfg, key) in CHOICES[key]:
            check_placement(key, getattr(cfg, key))
    if cfg.reparam in SCALE_CLASSES and (problem := scale_class_problem(cfg.reparam)):
        raise ValueError(problem)


# -----------------------------------------------------------------------------
# Scale classes (norms.ScaleVector says the contract)


def scale_class_problem(name):
    """None, or one line naming the fix when SCALE_CLASSES[name] breaks ScaleVector's contract (checked at start:
    check): its magnitude_name (if any) names one of its parameters, forward() is gamma of shape (d,),
    == 1 at init and again after reset_() from other parameters, and set_, if it has one, gives the gamma it is given."""
    return _class_problem(f"SCALE_CLASSES[{name!r}]", SCALE_CLASSES[name])


@functools.lru_cache(maxsize=None)  # per class: a config is built many times, a class is checked once
def _class_problem(where, cls):
    if not (isinstance(cls, type) and issubclass(cls, ScaleVector)):
        return f"{where} is {cls!r}: make it a norms.ScaleVector subclass"
    if cls.reset_ is ScaleVector.reset_:
        return f"{where} has no reset_(): give it one (folding sets gamma back to 1 through it)"
    with torch.device("cpu"), torch.no_grad():  # real tensors, even while a model is built on the meta device
        sv = cls(3, "input")
        gamma = sv()
        one = isinstance(gamma, torch.Tensor) and tuple(gamma.shape) == (3,) and torch.allclose(gamma.float(), torch.ones(3))
        missed = []  # (method, the gamma it gave, the one it must give)
        for method, target in (("reset_", torch.ones(3)), ("set_", torch.tensor([0.5, 2.0, 1.5]))) if one else ():
            if method == "reset_" or cls.set_ is not ScaleVector.set_:
                for p in sv.parameters():
                    p.add_(0.25)
                getattr(sv, method)(*([target] if method == "set_" else []))
                missed += [] if torch.allclose(sv().float(), target, rtol=1e-5) else [(method, sv().tolist(), target.tolist())]
    names = [n for n, _ in sv.named_parameters()]
    if cls.magnitude_name is not None and cls.magnitude_name not in names:
        return (f"{where}.magnitude_name={cls.magnitude_name!r} is none of its parameters {names}: name the one "
                f"that carries gamma's magnitude, or None")
    if not one:
        return f"{where}'s forward() gives {gamma!r} at init, not gamma == 1 of shape (d,): fix its init or forward()"
    return f"{where}.{missed[0][0]}() gives gamma {missed[0][1]}, not {missed[0][2]}: fix it (folding, --hf_model)" if missed else None



# -----------------------------------------------------------------------------
# Placements (model.Placement says the contract)


def check_placement(key, name):
    """ValueError, one line naming the entry and the fix, for a placement that breaks Placement's contract:
    an answer that is no bool, a bad `outer`; for a subclass's entry, what subclass_problem finds."""
    p, branches, where = CHOICES[key][name], BRANCHES[key], f"{key.split('_')[0].upper()}_PLACEMENTS[{name!r}]"
    if not isinstance(p, Placement):
        raise ValueError(f"{where} is a {type(p).__name__}: make it a model.Placement (or a subclass)")
    if p.outer is not None and not set(p.outer) <= set(branches):
        raise ValueError(f"{where}: outer={p.outer!r} is not a tuple of its branches {branches}: fix its outer")
    for method, args in [(m, (b,)) for m in ("carries_outer", "normalizes") for b in branches] + [("scales_output_map", ())]:
        try:
            answer = getattr(p, method)(*args)
        except AttributeError:  # a misspelt name in a subclass's method: subclass_problem, below, names it
            break
        if not isinstance(answer, bool):
            raise ValueError(f"{where}.{method}({', '.join(map(repr, args))}) answered {answer!r}, not True or False: "
                             f"make it return a bool (model.Placement says the contract)")
    if type(p) is not Placement and (problem := subclass_problem(key, name, p, (model.ScaleSites, model.Attention, model.MLP))):
        raise ValueError(where + problem)


@functools.lru_cache(maxsize=None)  # per entry and code (the classes that build it)
def subclass_problem(key, name, p, code):
    """None, or the rest of one line naming the fix, for the entry p = CHOICES[key][name] of a Placement
    subclass (cached per entry and code: model's ScaleSites, Attention and MLP, looked up at each call), built
    (model_structure) while each attribute read of p is recorded (attribute_reads): reading one it does
    not declare (a typo), leaving one its class adds unread (a field, or a method the ScaleSites edit
    asks: missing), or building what another entry builds (a field left out)."""
    def build(recording):
        CHOICES[key][name] = recording
        models = model_structure(key, name)
        return [n for n in CHOICES[key] if n != name and model_structure(key, n) == models]

    try:
        same, unread, undeclared = attribute_reads(p, Placement, build)
    finally:
        CHOICES[key][name] = p
    if undeclared or unread:
        return (f": building the model reads .{undeclared[0]}, which {type(p).__name__} does not declare: fix the name" if undeclared
                else f": nothing building the model reads {', '.join(unread)} ({type(p).__name__}'s): the code in "
                     f"model.ScaleSites that asks it is missing (docs/forks.md), or drop it")
    fields_ = ", ".join(f"{k}={v!r}" for k, v in vars(p).items() if k != "meaning")
    return f" builds the models {same[0]!r} builds ({fields_}): give the entry the field that makes it differ, or use {same[0]!r}" \
        if same else None


def model_structure(key, name):
    """What tells placement `name`'s models apart: each module's name, class and extra_repr (widths, roles,
    out_norm) in a one-block dense model on the CPU, for every branch_scales, qk_norm, output_norms, dual_sites."""
    with torch.device("cpu"):
        return [(n, type(m).__name__, m.extra_repr()) for hg, qk, out, sites in itertools.product(*[(False, True)] * 3, DUAL_SITES)
                for n, m in GPT(GPTConfig(n_layer=1, n_head=2, n_embd=8, d_ff=16, block_size=4, vocab_size=8, scale="vector",
                                          n_experts=0, branch_scales=hg, qk_norm=qk, output_norms=out, dual_sites=sites,
                                          **{key: name})).named_modules()]


# -----------------------------------------------------------------------------
# Optimizers, schedules, weight-decay recipes (optim.Optimizer, Schedule, ScaleDecay say them)


class NoRow(ValueError):
    """A registry entry read a config key that has no row in SECTIONS (Reading)."""


def no_row(where, key):
    """The line for a key `where` (a registry entry, "LR_SCHEDULES['step']") reads that has no row."""
    return f"{where} reads the key {key!r}, which has no row in configurator.SECTIONS: add its row (default, allowed " \
           f"values, meaning) there"


class Reading:
    """A run config (a namespace) as a registry entry reads it: each key read goes into `read`, each
    string it is compared with into `compared`; a key cfg lacks reads as its default; one with no row
    raises NoRow naming `where` and the fix."""

    def __init__(self, cfg, where):
        self.cfg, self.where, self.read, self.compared = vars(cfg), where, set(), set()

    def __eq__(self, other):  # a recipe given (cfg, role) for (role, cfg) compares the config with a role
        self.compared.add(other if isinstance(other, str) else type(other).__name__)
        return NotImplemented

    __hash__ = object.__hash__

    def __getattr__(self, key):
        if key not in DEFAULTS:
            raise NoRow(no_row(self.where, key))
        self.read.add(key)
        return self.cfg.get(key, DEFAULTS[key])


def attribute_reads(entry, base, run):
    """(run's result, unread, undeclared) of run(copy), where copy is `entry` (a dataclass instance)
    recording each attribute read: unread, the attributes its class adds over the class `base` (fields
    and methods) that nothing read; undeclared, the names read that it lacks (a typo, which getattr's
    default would hide). An AttributeError from run is swallowed when it read an undeclared name
    (the result is None then), else raised."""
    cls, read, undeclared = type(entry), set(), set()

    def recording(self, attr):
        known = hasattr(cls, attr) or attr in object.__getattribute__(self, "__dict__") or attr.startswith("__")
        (read if known else undeclared).add(attr)
        return object.__getattribute__(self, attr)

    result = None
    try:
        result = run(type(cls.__name__, (cls,), {"__getattribute__": recording})(**vars(entry)))
    except AttributeError:
        if not undeclared:
            raise
    added = [name for name in cls.__dataclass_fields__ if name not in base.__dataclass_fields__]
    added += [a for c in cls.__mro__[:cls.__mro__.index(base)] for a in vars(c) if a[0] != "_" and a not in added]
    return result, [a for a in added if a not in read], sorted(undeclared)


# The keys an entry reads without declaring them in its keys: they act whichever entry runs (AdamW
# steps every group but the matrices; every schedule warms up and ends; every recipe scales weight_decay).
SHARED_KEYS = {"OPTIMIZERS": ("learning_rate", "beta1", "beta2"), "LR_SCHEDULES": ("warmup_iters", "max_iters", "learning_rate"),
               "SCALE_WD": ("weight_decay",)}
ENTRY_TYPES = {"OPTIMIZERS": Optimizer, "LR_SCHEDULES": Schedule, "SCALE_WD": ScaleDecay}


def entry_reads(registry, name, entry, cfg):
    """The configurator.Reading of `entry` (registry[name]) under cfg (the keys it read in .read):
    an optimizer building itself for one matrix on the CPU, a schedule's multiplier at a few iterations,
    a recipe's decay of each role (a RoleProbe), and its check. ValueError (Reading) for a key with
    no row; any other error of an entry's code is left to the run, which calls it for real."""
    reading, start, end = Reading(cfg, f"{registry}[{name!r}]"), cfg.warmup_iters, cfg.max_iters
    matrix = {"params": [torch.nn.Parameter(torch.zeros(2, 2))], "lr": 0.0, "initial_lr": 0.0, "weight_decay": 0.0}
    calls = {"OPTIMIZERS": lambda: entry.build([matrix], reading, "cpu"),
             "LR_SCHEDULES": lambda: [entry.multiplier(it, reading, cfg.min_lr / cfg.learning_rate)
                                      for it in (start, (start + end) // 2, end)],
             "SCALE_WD": lambda: [entry.decay(RoleProbe(role, reading), reading) for role in ROLES]}
    for call in (calls[registry], *([lambda: entry.check(reading)] if entry.check else [])):
        try:
            call()
        except NoRow:
            raise
        except Exception:  # the entry's own error: the run meets it where it calls the entry
            pass
    return reading


class RoleProbe(str):
    """A role ("input", "output") handed to a recipe's decay by entry_reads: each string it is compared
    with goes into reading.compared_roles, so a role spelt otherwise ("inputs") is said at start."""

    def __new__(cls, role, reading):
        probe = super().__new__(cls, role)
        probe.reading = reading
        reading.__dict__.setdefault("compared_roles", set())
        return probe

    def __eq__(self, other):
        self.reading.compared_roles.add(other)
        return str.__eq__(self, other)

    def __ne__(self, other):
        self.reading.compared_roles.add(other)
        return str.__ne__(self, other)

    __hash__ = str.__hash__


def recipe_problem(name, entry, reading):
    """None, or the rest of one line naming the fix, for a recipe whose decay read its role or its keys
    otherwise than its contract says: decay(role, cfg), role "input" or "output", each declared key read."""
    where = f"SCALE_WD[{name!r}].decay"
    if any(isinstance(c, str) and c in ROLES for c in reading.compared):
        return f"{where} compares its cfg with a role: its arguments are decay(role, cfg), the role first"
    odd = sorted(c for c in reading.__dict__.get("compared_roles", ()) if isinstance(c, str) and c not in ROLES)
    if odd:
        return f"{where} compares the role with {odd[0]!r}, which is no role: the roles are 'input' and 'output'"
    unread = [key for key in entry.keys if key not in reading.read]
    if unread:
        return f"{where} reads {unread[0]!r}, which the entry declares, for neither role: check how it reads the role"
    return None


def check_contracts(cfg):
    """ValueError (one line naming the rule, the entry and the fix) when a registry entry breaks its
    contract (Optimizer, Schedule, ScaleDecay say it): an entry of the wrong type; an OPTIMIZERS entry
    whose name is not its key (its groups would name an optimizer no key holds); a key an entry
    declares or reads (entry_reads) with no config row, or reads without declaring it (SHARED_KEYS
    aside: no note would say it does nothing under another entry). The run's own entries under its
    config: check_run_contracts."""
    for registry, entries in (("OPTIMIZERS", OPTIMIZERS), ("LR_SCHEDULES", LR_SCHEDULES), ("SCALE_WD", SCALE_WD)):
        for name, entry in entries.items():
            where = f"{registry}[{name!r}]"
            if not isinstance(entry, ENTRY_TYPES[registry]):
                raise ValueError(f"{where} is a {type(entry).__name__}: make it an optim.{ENTRY_TYPES[registry].__name__}")
            if isinstance(entry, Optimizer) and entry.name != name:
                raise ValueError(f"{where} is named {entry.name!r}: its groups would name an optimizer the registry does "
                                 f"not hold; give it its key as its name (Optimizer({name!r}, ...))")
            declared = (*entry.keys, *((entry.lr_key,) if isinstance(entry, Optimizer) else ()))
            for key in declared:
                if key not in DEFAULTS:
                    raise ValueError(no_row(where, key))
            reading = entry_reads(registry, name, entry, cfg)
            undeclared = sorted(reading.read - {*declared, *SHARED_KEYS[registry]})
            if undeclared:
                raise ValueError(f"{where} reads the key {undeclared[0]!r} without declaring it: add it to its keys "
                                 f"(a note then says it does nothing under another entry)")
            if registry == "SCALE_WD" and (problem := recipe_problem(name, entry, reading)):
                raise ValueError(problem)


def check_run_contracts(cfg):
    """ValueError (one line) when the run's own entries break their contract under its config: its
    recipe's decay no finite number >= 0 for a role, its schedule giving no number, leaving [min_lr / learning_rate, 1]
    or rising after warmup (sampled at up to 257 iterations from warmup_iters to max_iters, every one
    for a shorter run)."""
    for role in ROLES:
        wd = SCALE_WD[cfg.scale_wd].decay(role, cfg)
        if isinstance(wd, bool) or not isinstance(wd, (int, float)) or not 0 <= wd < math.inf:
            raise ValueError(f"SCALE_WD[{cfg.scale_wd!r}].decay({role!r}, cfg) gave {wd!r}, not a weight decay (a finite "
                             f"number >= 0): fix its decay (optim.ScaleDecay says the contract)")
    schedule, floor = LR_SCHEDULES[cfg.lr_schedule], cfg.min_lr / cfg.learning_rate
    low = floor if "min_lr" in schedule.keys else 0.0  # (a schedule that never reads min_lr has no floor)
    start, end = cfg.warmup_iters, cfg.max_iters  # (a run inside its warmup never reads the schedule)
    steps = range(start, end + 1) if end - start <= 256 else sorted({start + (end - start) * k // 256 for k in range(257)})
    last = math.inf
    for it in steps:
        m = schedule.multiplier(it, cfg, floor)
        if isinstance(m, bool) or not isinstance(m, (int, float)):
            raise ValueError(f"LR_SCHEDULES[{cfg.lr_schedule!r}].multiplier({it}, cfg, floor) gave {m!r}, not a number: "
                             f"make it return a float (optim.Schedule says the contract)")
        if not low - 1e-9 <= m <= 1 + 1e-9 or m > last + 1e-12:
            rule = "rises after warmup" if low - 1e-9 <= m <= 1 + 1e-9 else f"leaves [min_lr / learning_rate = " \
                f"{low:.4g}, 1]"
            raise ValueError(f"LR_SCHEDULES[{cfg.lr_schedule!r}] breaks the schedules' contract: its multiplier "
                             f"{rule} (at iteration {it}: {m:.4g}); fix its multiplier (optim.Schedule says the contract)")
        last = m


