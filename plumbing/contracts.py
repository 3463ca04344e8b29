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

import copy
import difflib
import functools
import itertools
import math

import torch

import model
import optim
from configurator import DEFAULTS, UserError
from model import BRANCHES, CHOICES, DUAL_SITES, GPT, GPTConfig, Placement
from norms import ROLES, SCALE_CLASSES, ScaleVector
from optim import LR_SCHEDULES, OPTIMIZERS, SCALE_WD, Optimizer, ScaleDecay, Schedule


def check(cfg, built=None):
    """ValueError, one line naming the entry, the rule and the fix, when an entry of a registry the run
    config cfg (a namespace with every key) chooses from breaks its contract: every optimizer, schedule
    and recipe (check_contracts), the run's own under its config (check_run_contracts), its placements
    (check_placement) and its scale class (scale_class_problem), with optim.check's value checks in
    their order; then the model is built on the meta device, so a value its code refuses (a role that is
    none) is a line too. A placement or class name no registry holds is left to model.GPTConfig's line.
    built: a set of the model configs (their repr) whose build a caller checking many runs already saw
    pass in this process; each is built once (an ablation's LR multipliers share their variant's model)."""
    optim.check_choices(cfg, optim.CHOICES)
    check_contracts(cfg)  # first: an entry's own check (optim.check runs it) may read a key that has no row
    optim.check(cfg)
    check_run_contracts(cfg)
    for key in BRANCHES:
        if getattr(cfg, key) in CHOICES[key]:
            check_placement(key, getattr(cfg, key))
    if cfg.reparam in SCALE_CLASSES and (problem := scale_class_problem(cfg.reparam)):
        raise ValueError(problem)
    shape = model.model_config(cfg)
    if built is not None and repr(shape) in built:
        return
    try:  # the model's code at the run's shape, on the meta device (no memory): a fork's bad value (a role) is a line
        with torch.device("meta"):
            GPT(shape)
    except ValueError as e:
        raise ValueError(f"building the model: {e}") from None
    if built is not None:
        built.add(repr(shape))


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
    if p.outer is not None and not isinstance(p.outer, tuple):
        raise ValueError(f"{where}: outer={p.outer!r} is not a tuple of its branches {branches}: fix its outer")
    if problem := names_problem(p, branches):
        raise ValueError(where + problem)
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


def names_problem(p, branches):
    """None, or the rest of one line naming the fix, for a field of placement p (outer, or a subclass's) that names
    something the model does not have: each string in a tuple field must be one of its branches, a role or a
    dual_sites value (a misspelt branch would leave the placement silently unapplied); did-you-mean by difflib."""
    names = (*branches, *ROLES, *DUAL_SITES)
    for field, value in vars(p).items():
        for given in value if isinstance(value, tuple) else ():
            if isinstance(given, str) and given not in names:
                close = difflib.get_close_matches(given, names, n=1)
                return (f": {field}={value!r} names {given!r}, which is none of its branches {branches} (nor a role or "
                        f"a dual_sites value): " + (f"did you mean {close[0]!r}?" if close else "fix the name"))
    return None


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
    try:
        with torch.device("cpu"):
            return [(n, type(m).__name__, m.extra_repr()) for hg, qk, out, sites in itertools.product(*[(False, True)] * 3, DUAL_SITES)
                    for n, m in GPT(GPTConfig(n_layer=1, n_head=2, n_embd=8, d_ff=16, block_size=4, vocab_size=8, scale="vector",
                                              n_experts=0, branch_scales=hg, qk_norm=qk, output_norms=out, dual_sites=sites,
                                              **{key: name})).named_modules()]
    except ValueError as e:  # a value the model's code refuses (a role that is none): said as check's is
        raise ValueError(f"building the model: {e}") from None


# -----------------------------------------------------------------------------
# Optimizers, schedules, weight-decay recipes (optim.Optimizer, Schedule, ScaleDecay say them)


class NoRow(ValueError):
    """A registry entry read a config key that has no row in SECTIONS (Reading)."""


def no_row(where, key):
    """The line for a key `where` (a registry entry, "LR_SCHEDULES['step']") reads that has no row."""
    close = difflib.get_close_matches(key, DEFAULTS, n=1, cutoff=0.85)
    return f"{where} reads the key {key!r}, which has no row in configurator.SECTIONS: add its row (default, allowed " \
           f"values, meaning) there" + (f" (or did you mean {close[0]!r}?)" if close else "")


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


def core_keys(registry):
    """The keys the run reads whichever entry of `registry` runs: the model's (model.MODEL_KEYS), every SHARED_KEYS
    and the keys of the other registries' entries. An entry that reads one declares it in its reads, never its
    keys (keys get a note saying they do nothing under another entry)."""
    others = [e for r, entries in (("OPTIMIZERS", OPTIMIZERS), ("LR_SCHEDULES", LR_SCHEDULES), ("SCALE_WD", SCALE_WD))
              if r != registry for e in entries.values()]
    return {*model.MODEL_KEYS, *(k for keys in SHARED_KEYS.values() for k in keys),
            *(k for e in others for k in (*e.keys, *((e.lr_key,) if isinstance(e, Optimizer) else ())))}


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
            declared = (*entry.keys, *entry.reads, *((entry.lr_key,) if isinstance(entry, Optimizer) else ()))
            for key in declared:
                if key not in DEFAULTS:
                    raise ValueError(no_row(where, key))
            core = core_keys(registry)
            shared = [key for key in entry.keys if key in core]
            if shared:
                raise ValueError(f"{where} declares {shared[0]!r} in its keys, which says only it reads the key: the run "
                                 f"reads it anyway, so every other entry would print a false note that it has no effect; "
                                 f"move it to its reads ({ENTRY_TYPES[registry].__name__}(..., reads=({shared[0]!r},)))")
            reading = entry_reads(registry, name, entry, cfg)
            undeclared = sorted(reading.read - {*declared, *SHARED_KEYS[registry]})
            if undeclared:
                key = undeclared[0]
                raise ValueError(f"{where} reads the key {key!r} without declaring it: " + (
                    f"the run reads it anyway, so add it to its reads ({ENTRY_TYPES[registry].__name__}(..., "
                    f"reads=({key!r},))), not to its keys (a note would say it has no effect under every other entry)"
                    if key in core else "add it to its keys (a note then says it does nothing under another entry), "
                    "or, if the run reads it anyway (a model key), to its reads"))
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




# -----------------------------------------------------------------------------
# The built model: what its config says is what it runs (train.py calls check_model on the model it built)


PROBE_TOKENS = (2, 8)  # the probe step's batch and length (at most block_size)
# A magnitude is hidden when doubling it moves the output by less than this, relative: with eps 0 a hidden one moves
# it by nothing (doubling is exact in floating point), a seen one by 8% or more over every switch combination.
HIDDEN = 1e-4


def check_model(model, cfg):
    """UserError, one line naming the module or parameter, the class that built it (builder) and the fix, when
    the model train.py built is not the one its config describes, before it trains or writes anything:

      scale="none" and a norms.ScaleVector anywhere in it, whoever built it;
      a parameter the training objective never reaches (reach: no gradient, or one exactly zero, after one forward
          and backward of PROBE_TOKENS on a copy);
      a scale whose magnitude a normalization hides (hidden_magnitude: a ScaleVector with a magnitude_name whose
          doubling leaves the output unchanged; that parameter's gradient is only eps's);
      a parameter in no optimizer group (optim.param_groups' rule; cfg: the run config).

    The probes run on a deep copy with its own generators, inside torch.random.fork_rng: the model, the run's
    random state and so its losses are unchanged. Cost: one forward and backward of 16 tokens, one more whole forward,
    then one forward per magnitude scale of the block that holds it alone (its routed member's alone inside an
    MoE), on a second copy of the weights and their gradients, freed before the run goes on (probe_model counts
    them). Returns the model, as it was."""
    none_scale = cfg.scale == "none" and next((n for n, m in model.named_modules() if isinstance(m, ScaleVector)), None)
    if none_scale:
        raise UserError(f"{none_scale} ({type(model.get_submodule(none_scale)).__name__}): built by "
                        f"{builder(model, none_scale)} under scale='none', which means no scale vector anywhere: build it "
                        f"through norms.make_scale (None under scale='none'), or drop it")
    probe = copy.deepcopy(model)
    device = next(probe.parameters()).device
    try:
        with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
            probe_model(probe, model.config, device)
    finally:
        del probe
        if device.type == "cuda":
            torch.cuda.empty_cache()
    try:
        optim.param_groups(model, cfg)
    except ValueError as e:
        raise UserError(str(e)) from None
    return model


def probe_model(probe, config, device):
    """check_model's probes on `probe` (a copy it may change): every parameter outside a scale vector redrawn, a
    matrix at std 1/sqrt(fan-in), any other at std 1 (so activations are O(1), attention is not uniform, eps is
    negligible and no small gain damps a branch), and a scale's all-zero parameter at std 1 (a zero-initialized
    projection would hide what follows it), from generators of its own; then reach, then
    hidden_magnitude. The members a module routes (its `routed` names: model.MoE's experts, chosen by the router's
    weights, not by the batch) are each run on that module's input, so each is checked by its own forward. Returns
    {"forwards": n, "backwards": 1, "tokens": the probe's}: what it ran."""
    gens, scales = {}, {id(p) for m in probe.modules() if isinstance(m, ScaleVector) for p in m.parameters()}
    with torch.no_grad():
        for p in probe.parameters():
            gen = gens.setdefault(p.device, torch.Generator(device=p.device).manual_seed(0))
            if id(p) not in scales or not p.any():
                p.copy_(torch.randn(p.shape, generator=gen, device=p.device) * (p.size(-1) ** -0.5 if p.dim() >= 2 else 1))
    gen = gens.setdefault(device, torch.Generator(device=device).manual_seed(0))
    B, T = PROBE_TOKENS[0], min(PROBE_TOKENS[1], config.block_size)
    idx, targets = (torch.randint(0, config.vocab_size, (B, T), generator=gen, device=device) for _ in range(2))
    inputs = {}  # routing module -> its input, as its forward got it

    def keep(module, args):  # (returns None: the forward's input is left as it is)
        inputs.setdefault(module, tuple(a.detach() for a in args))

    hooks = [m.register_forward_pre_hook(keep) for m in probe.modules() if getattr(m, "routed", ())]
    try:
        probe.train()
        torch.manual_seed(0)  # dropout's masks (fork_rng gives the run's state back)
        _, loss, aux = probe(idx, targets)
        objective = loss + probe.aux_objective(aux)
    finally:
        for h in hooks:
            h.remove()
    members = {id(member): (member, args) for m, args in inputs.items() for name in m.routed for member in getattr(m, name)}
    for member, args in members.values():
        objective = objective + member(*args).float().pow(2).mean()
    objective.backward()
    unreached = [n for n, p in probe.named_parameters() if p.grad is None or not p.grad.any()]
    if unreached:
        raise UserError(unreached_line(probe, unreached))
    forwards = hidden_magnitude(probe, idx, targets, members)
    return {"forwards": 1 + len(members) + forwards, "backwards": 1, "tokens": B * T}


@torch.no_grad()
def hidden_magnitude(probe, idx, targets, members):
    """UserError for the first scale (a ScaleVector with a magnitude_name) whose doubled gamma leaves the output the
    same to within HIDDEN: a normalization follows it with nothing between but maps linear in it, so its magnitude
    parameter gets a gradient only through eps (the site needed make_scale's magnitude_free=True, a PlainScale).
    The output is the layer's that holds the scale (a member of an nn.ModuleList: a block, run alone on its input
    from one forward of the whole model; what follows a layer is a function of its output alone, so a layer
    whose output is unchanged leaves the logits unchanged), a routed member's own (members: {id: (member, its
    input)}) for a scale inside one, else the logits; the copy's normalizations are made exact (eps 0 where a
    module holds one) and dropout is off. Returns the number of forwards it ran (a layer's alone counts one)."""
    probe.eval()
    for m in probe.modules():
        if isinstance(getattr(m, "eps", None), float):
            m.eps = 0.0
    inside = {id(sub): key for key, (member, _) in members.items() for sub in member.modules()}
    scales = [(name, sv) for name, sv in probe.named_modules() if isinstance(sv, ScaleVector) and sv.has_magnitude()]
    layers, keys = {}, {}  # id -> (layer, its input (args, kwargs) from the whole model's forward); scale -> its key
    for name, sv in scales:
        layer = None if id(sv) in inside else enclosing_layer(probe, name)
        if layer is not None:
            layers.setdefault(id(layer), (layer, None))
        keys[name] = inside.get(id(sv)) if layer is None else id(layer)  # (None: the logits)

    def keep(module, args, kwargs):
        layers[id(module)] = (module, (tuple(a.detach() if torch.is_tensor(a) else a for a in args), kwargs))

    hooks = [layer.register_forward_pre_hook(keep, with_kwargs=True) for layer, _ in layers.values()]
    try:
        logits = probe(idx, targets)[0].float() if scales else None
    finally:
        for h in hooks:
            h.remove()

    def output(key):
        if key is None:
            return probe(idx, targets)[0].float()
        if key in members:
            member, args = members[key]
            return member(*args).float()
        layer, (args, kwargs) = layers[key]
        return torch.cat([t.float().flatten() for t in tensors_of(layer(*args, **kwargs))])

    before, forwards = {None: logits}, 1 if scales else 0
    for name, sv in scales:
        key = keys[name]
        if key not in before:
            before[key], forwards = output(key), forwards + 1
        sv.forward = functools.partial(lambda gamma: 2 * gamma(), sv.forward)
        try:
            after = output(key)
        finally:
            del sv.forward
        forwards += 1
        if (after - before[key]).abs().max() <= HIDDEN * before[key].abs().max():
            raise UserError(f"{name}.{sv.magnitude_name}: the magnitude of a {type(sv).__name__} that {builder(probe, name)} "
                            f"builds where a normalization follows it (doubling gamma leaves the output unchanged), so it "
                            f"gets a gradient only through eps: build that scale with make_scale(..., magnitude_free=True) "
                            f"(norms.make_scale), which puts a PlainScale there")
    return forwards


def enclosing_layer(model, name):
    """The deepest module holding the module `name` of model that is a member of an nn.ModuleList (a block of
    model.blocks), or None where none is."""
    parts = name.split(".")
    for end in range(len(parts) - 1, 0, -1):
        if isinstance(model.get_submodule(".".join(parts[:end - 1])), torch.nn.ModuleList):
            return model.get_submodule(".".join(parts[:end]))
    return None


def tensors_of(out):
    """The floating-point tensors of a module's output, in order (a tensor, or tuples, lists and dicts of them)."""
    if torch.is_tensor(out):
        return [out] if out.is_floating_point() else []
    items = out.values() if isinstance(out, dict) else out if isinstance(out, (tuple, list)) else ()
    return [t for item in items for t in tensors_of(item)]


def builder(model, name):
    """The class that built the module or parameter `name` of model: its nearest enclosing module defined outside
    norms.py and torch (norms' pieces, a ScaledLinear, an RMSNorm, a scale, are built by the module that holds them)."""
    parts = name.split(".")
    for end in range(len(parts) - 1, -1, -1):
        module = model.get_submodule(".".join(parts[:end]))
        kind = type(module).__module__
        if kind != "norms" and not kind.startswith("torch."):
            return type(module).__name__
    return type(model).__name__


def unreached_line(model, names):
    """The one line for the parameters `names` of model that no gradient reached: the first, named as the largest
    enclosing module whose parameters all went unreached (a module built and never called), the class that built
    it, and how many more there are."""
    unreached, parts = set(names), names[0].split(".")
    where, label = names[0], names[0]
    for end in range(len(parts) - 1, 0, -1):
        prefix = ".".join(parts[:end])
        module = model.get_submodule(prefix)
        if not all(f"{prefix}.{n}" in unreached for n, _ in module.named_parameters()):
            break
        where, label = prefix, f"{prefix} ({type(module).__name__})"
    more = sum(1 for n in names if n != where and not n.startswith(where + "."))
    return (f"{label}: built by {builder(model, where)}, never reached by forward (no gradient in one training step "
            f"on a copy of the model{f'; {more} more parameters neither' if more else ''}): use it in the forward, "
            f"or do not build it")
