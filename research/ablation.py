"""An ablation file: its format and checks (the registered power analysis among them) and the runs it
plans (paired, named by config hash): each run's config, its seeds and LR, and its state.

An ablation file (plain Python, configs/ablations/) sets
    claim            a line saying what is tested (names starting with _ are helpers)
    base             a train.py config file every run starts from
    variants         {name: {config overrides}}; the first is the baseline the others are compared to
    expected         {variant: "lower" or "higher"}: the claim's direction for its val loss vs the baseline
    settings         {name: {config overrides}}: optimizer/schedule settings, each a separate comparison
    seeds            every (variant, setting) runs with each seed
  optional:
    control          a line saying which other comparison's choice this file checks (an LR, a
                     budget): every row of it is a control, shown with its verdict and never in the
                     claim family the Benjamini-Hochberg correction counts (summary.py)
    lr_tuned_in      {variant: file name}: variants whose LR (set in their overrides) another file's
                     tuning seeds chose for them (a replication at the tuned LRs); a row both of
                     whose arms are named here counts as run at tuned LRs, as under tune_lr
    comparisons      [(variant, reference, "lower" | "higher" | None)]: more paired differences
                     than variant vs baseline (e.g. unified vs dnp)
    lr_multipliers   LR sweep at seeds[0]: learning_rate, min_lr and muon_lr scaled together
    tune_lr          True: each arm runs at its own tuned LR (without it every arm shares the base's
                     LR, untuned, and a claim row is a lead at most about the variants:
                     stats.strength). seeds[1:] run at the multiplier with the lowest final val loss at
                     seeds[0], per (setting, variant); they wait until that sweep is recorded;
                     seeds[0] chose the LR, so it stays out of the seed table (its best-of-3 is
                     biased low) and shows in the LR table only
    tuning_seeds     with tune_lr: seeds of their own for the LR sweep, never in a table; the
                     LR is chosen by the mean final val loss over them, every seed of `seeds`
                     runs at it, and a best at the grid's smallest or largest multiplier is
                     not chosen (the table runs wait: extend lr_multipliers)
    tune_setting     with tuning_seeds: the setting whose sweep chooses the LR of every setting
                     (e.g. one token budget for all), or {setting: the setting whose sweep chooses
                     its LR} (a ladder: each optimizer's smallest rung for its larger ones); a
                     setting it does not name chooses its own; default: each setting its own
    slurm            {flag: value}: defaults of sweep.py's --slurm job flags for this file's runs
                     (research/slurm.py's JOB_FLAGS: nodes, gpus_per_node, time_min, partition, ...,
                     checked there); a flag on the command line wins
    ladders          {name: [setting, ...]}: settings of growing size (a ladder of model sizes at
                     one optimizer and tokens per parameter, >= 3) over which plot.py fits the
                     first variant's final loss against training compute (FLOPs) for the compute
                     multiplier of the others
    planned_seeds    n: only seeds[:n] were planned before any result was seen; the later ones
                     were added after a look (sequential testing), and plot.py marks each verdict
                     that uses them as nominal, beside the verdict of the planned seeds alone
    iter_multipliers {variant: [m, ...]}: token budgets; the variant also runs at each m x
                     max_iters (warmup_iters and eval_interval scaled alike: a full schedule each),
                     for plot.py's compute multiplier
    setting_seeds    {setting: n}: that setting runs the first n table seeds only (a ladder's
                     costly rungs); its rows and fits use those
    power            the power analysis, registered before the first record: {"sd": the paired
                     differences' SD it assumes, "gap": the smallest gap a row must detect (both in
                     the loss's units), "power": >= 0.8, optional: "pilot": k, "gaps": {row: gap, or
                     (low, high), a range of plausible gaps}, "exploratory": [row, ...],
                     "exponent": a}. Its rows (power_rows) are the claim rows, named as the tables
                     name them ("unified - norm_only"), or the ladders when the file has some. A row
                     must detect its "gaps" entry (a range: its low end), else "gap"; a ladder its
                     gap at its smallest rung, and at the others what a constant compute multiplier
                     makes on L(C) = E + A C^-a with a = exponent (research/power.py ladder_gaps;
                     absent: the same gap everywhere). At the level BH asks of a row at worst, 0.05
                     over the file's rows (stats.family_alpha), the planned seeds must give every
                     row the power at sd (stats.paired_power per setting; a ladder:
                     stats.ladder_power over its rungs' seeds), or the file is refused, unless the
                     row is declared exploratory: then its strength is a lead at most
                     (stats.strength), whatever its p. With pilot = k (>= 4, no ladders): a
                     setting's first k table seeds run first; once every variant has them
                     recorded, the largest SD of the claim rows' paired differences over them sets
                     the planned seeds, the first n with n = stats.seeds_for_power(the smallest gap
                     of the rows not exploratory, that SD) (at least k; at most every seed of the
                     file: the shortfall is said), so the seeds after the pilot are planned by a
                     rule written before it ran; a file whose every seed (a setting's setting_seeds
                     cap) does not give a powered row the power at sd, or caps a setting below k,
                     is refused, as a fixed design's shortfall is
    mechanism_question {"variant": v, "reference": r, "settings": [a, b], "statistic": s}: a
                     pre-registered question on the mechanism statistics rather than the loss
                     (research/mechanism_question.py: per setting, v - r of stats.mechanism_scalar of
                     the per-site statistic s (mechanism.SITE_STATISTICS; absent: "move_ratio")
                     paired by seed; between the two settings, Welch on those differences; a family
                     of these three rows of its own, BH over them)
    loss_question    {"variant": v, "reference": r, "settings": [a, b]}: the same three rows on the
                     final val loss (a question between two settings, such as whether a best LR
                     moves with width); a file registers at most one of the two questions
Runs are paired: one seed gives every variant the same initial matrices and the
same batches (model.GPT.init_weights, train.get_batch), and validation is on
the same fixed batches for all. A run is named <variant>_<setting>_s<seed>
[_lrx<m>][_itx<m>]_<hash>, the hash taken over its full config (out_dir aside),
and is trained in <out_root>/<name>. When it finishes, a record of a few KB
(results/<name>.json: config, hash, val-loss curve, final scale statistics,
wall time, and what pins it: commit and diff, device, threads, the token
files' SHA-256, package versions) is written from its log.jsonl (research/records.py). A run whose config
hash has a record is skipped, whatever its name: a run two ablation files share
(the baseline) runs once, and seeds accumulate across machines by committing
results/. An interrupted run resumes from its checkpoint.
"""

import hashlib
import json
import os
import statistics

from plumbing.mechanism import SITE_STATISTICS
from plumbing.checkpoint import checkpoint_in
from configurator import (ABSENT, DEFAULTS, TRACKING_KEYS, UserError, check_type, load_config, not_a_file,
                          run_config_file)
from plumbing.ops import check_config, inert_keys, read_rows
from research.miniature import MINIATURE_GRID, scaled_down
from research.power import ladder_gaps, rung_compute
from research.stats import family_alpha, ladder_power, paired_power, seeds_for_power

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the repository
REQUIRED = {"claim", "base", "variants", "settings", "seeds"}
# The questions between two settings a file may register (at most one), by key: what tables call them
QUESTIONS = {"mechanism_question": "the mechanism question", "loss_question": "the loss question"}
OPTIONAL = {"expected": {}, "comparisons": [], "lr_multipliers": [], "tune_lr": False, "iter_multipliers": {},
            "planned_seeds": 0, "tuning_seeds": [], "tune_setting": "", "ladders": {}, "slurm": {},
            "setting_seeds": {}, "power": {}, "mechanism_question": {}, "loss_question": {}, "control": "",
            "lr_tuned_in": {}}
DIRECTIONS = ("lower", "higher")
LR_KEYS = ("learning_rate", "min_lr", "muon_lr", "scale_lr")  # the tuned multiplier scales each (0 stays 0)
ITER_KEYS = ("max_iters", "warmup_iters", "eval_interval")  # scaled together by a token budget

def load_ablation(path, scale_down=False):
    """The ablation file as a dict; UserError naming a missing, unknown or malformed entry.
    scale_down: its settings at CPU-miniature size (scaled_down), every rule kept."""
    if not os.path.isfile(path):
        raise UserError(f"ablation file {path!r} {not_a_file(path, 'an ablation file (configs/ablations/*.py)')}")
    spec = {k: v for k, v in run_config_file(path).items() if not k.startswith("_")}
    unknown = spec.keys() - REQUIRED - OPTIONAL.keys()
    missing = REQUIRED - spec.keys()
    if unknown or missing:
        raise UserError(f"{path}: unknown entries {sorted(unknown)}, missing {sorted(missing)}; "
                        f"an ablation file sets {sorted(REQUIRED | OPTIONAL.keys())}")
    for key, default in OPTIONAL.items():
        spec.setdefault(key, default)
    shapes = {"claim": (str, "a line of text"), "base": (str, "a config file path"),
              "variants": (dict, "{name: {config overrides}}"), "settings": (dict, "{name: {config overrides}}"),
              "seeds": ((list, tuple), "a list of ints, e.g. [1, 2, 3]"),
              "expected": (dict, "{variant: 'lower' | 'higher'}"), "comparisons": ((list, tuple), "a list of triples"),
              "lr_multipliers": ((list, tuple), "a list of numbers, e.g. [0.5, 2]"), "tune_lr": (bool, "True or False"),
              "iter_multipliers": (dict, "{variant: [multipliers]}"), "planned_seeds": (int, "a count, e.g. 5"),
              "tuning_seeds": ((list, tuple), "a list of ints, e.g. [101, 102]"),
              "tune_setting": ((str, dict), "a setting's name, or {setting: setting}"),
              "ladders": (dict, "{name: [setting, ...]}"), "slurm": (dict, "{flag: value}, e.g. {'gpus_per_node': 8}"),
              "setting_seeds": (dict, "{setting: n}"),
              "control": (str, "a line saying which comparison's choice it checks"),
              "lr_tuned_in": (dict, "{variant: 'c8_regime'}, the file whose tuning seeds chose its LR"),
              "power": (dict, "{'sd': 0.004, 'gap': 0.009, 'power': 0.8} (and 'pilot': 4, 'gaps', 'exploratory')"),
              "mechanism_question": (dict, "{'variant': 'unified', 'reference': 'norm_only', 'settings': ['w32', 'w64']}"),
              "loss_question": (dict, "{'variant': 'slr_x4', 'reference': 'slr_x0.25', 'settings': ['w32', 'w64']}")}
    for key, (kind, example) in shapes.items():
        if not isinstance(spec[key], kind):
            raise UserError(f"{path}: {key} = {spec[key]!r} is of type {type(spec[key]).__name__}; write {example}")
    for group in ("variants", "settings"):
        bad = [name for name, o in spec[group].items() if not (isinstance(name, str) and isinstance(o, dict))]
        if not spec[group] or bad:
            raise UserError(f"{path}: {group} must map names to dicts of config overrides, e.g. "
                            f"{{'baseline': {{}}}}; bad entries: {bad or 'none given'}")
    seeds = spec["seeds"]
    if not seeds or not all(type(x) is int for x in seeds) or len(set(seeds)) != len(seeds):
        raise UserError(f"{path}: seeds = {seeds!r}: write a non-empty list of distinct ints, e.g. [1, 2, 3]")
    if type(spec["planned_seeds"]) is not int or not 0 <= spec["planned_seeds"] <= len(seeds):
        raise UserError(f"{path}: planned_seeds = {spec['planned_seeds']!r}: the number of seeds planned "
                        f"before any result was seen, an int from 1 to {len(seeds)} (0, the default: all of them)")
    if not all(isinstance(ms, (list, tuple)) for ms in spec["iter_multipliers"].values()):
        raise UserError(f"{path}: iter_multipliers = {spec['iter_multipliers']!r}: write {{variant: [m, ...]}}")
    variants = spec["variants"]
    for variant, direction in spec["expected"].items():
        if variant not in variants or direction not in DIRECTIONS:
            raise UserError(f"{path}: expected[{variant!r}] = {direction!r}: name a variant and 'lower' or 'higher'")
    for item in spec["comparisons"]:
        if not (isinstance(item, (tuple, list)) and len(item) == 3 and item[0] in variants
                and item[1] in variants and item[0] != item[1] and item[2] in (*DIRECTIONS, None)):
            raise UserError(f"{path}: comparisons entry {item!r}: write (variant, reference, 'lower' | "
                            f"'higher' | None) with two different variants of {list(variants)}")
    if set(spec["lr_tuned_in"]) - set(variants) or not all(isinstance(f, str) for f in spec["lr_tuned_in"].values()):
        raise UserError(f"{path}: lr_tuned_in = {spec['lr_tuned_in']!r}: write {{variant: 'the ablation file whose "
                        f"tuning seeds chose its LR'}} for variants of {list(variants)}")
    check_tuning(spec, path)
    check_question(spec, path)
    spec["base"] = os.path.join(ROOT, spec["base"]) if not os.path.isabs(spec["base"]) else spec["base"]
    if not os.path.isfile(spec["base"]):
        raise UserError(f"{path}: base = {spec['base']!r} not found (a path relative to the repository root)")
    for group in ("variants", "settings"):
        for name, overrides in spec[group].items():
            for key in overrides:
                if key not in DEFAULTS:
                    raise UserError(f"{path}: {group}[{name!r}] sets unknown config key {key!r}")
    check_power(spec, path)  # a ladder's rungs are read from their run configs: after base and the keys
    if scale_down:
        spec["settings"] = {name: scaled_down(o) for name, o in spec["settings"].items()}
        spec["lr_multipliers"] = MINIATURE_GRID if spec["lr_multipliers"] else []
    check_runs(spec, path)
    spec["name"] = os.path.splitext(os.path.basename(path))[0]
    spec["folder"] = os.path.dirname(os.path.abspath(path))  # where a file it names (lr_tuned_in) is looked for first
    spec["scale_down"] = bool(scale_down)  # its tables and figures say so and give no verdict (stats.SCALED_DOWN)
    return spec


def check_tuning(spec, path):
    """UserError naming the entry for a bad LR or token multiplier, LR tuning entry or ladder."""
    variants, seeds, tuners = spec["variants"], spec["seeds"], spec["tuning_seeds"]
    mults = list(spec["lr_multipliers"]) + [m for ms in spec["iter_multipliers"].values() for m in ms]
    if not all(isinstance(m, (int, float)) and m > 0 for m in mults):
        raise UserError(f"{path}: lr_multipliers and iter_multipliers must be positive numbers, got {mults}")
    if set(spec["iter_multipliers"]) - set(variants):
        raise UserError(f"{path}: iter_multipliers names unknown variants "
                        f"{sorted(set(spec['iter_multipliers']) - set(variants))}")
    if spec["tune_lr"] and (not spec["lr_multipliers"] or spec["iter_multipliers"]):
        raise UserError(f"{path}: tune_lr=True needs lr_multipliers to choose from, and no iter_multipliers")
    if tuners and (not spec["tune_lr"] or not all(type(x) is int for x in tuners)
                   or len(set(tuners)) != len(tuners) or set(tuners) & set(seeds)):
        raise UserError(f"{path}: tuning_seeds = {tuners!r}: with tune_lr = True, a list of distinct ints "
                        f"none of which is in seeds")
    named = spec["tune_setting"].items() if isinstance(spec["tune_setting"], dict) else \
        [(s, spec["tune_setting"]) for s in spec["settings"] if spec["tune_setting"]]
    for setting, tuner in named:
        if not tuners or setting not in spec["settings"] or tuner not in spec["settings"] \
                or tuning_setting(spec, tuner) != tuner:
            raise UserError(f"{path}: tune_setting = {spec['tune_setting']!r}: name one of {list(spec['settings'])} "
                            f"(or map settings to those, each of which tunes itself), with tuning_seeds")
    for name, ladder in spec["ladders"].items():
        if not (isinstance(ladder, (list, tuple)) and len(set(ladder)) == len(ladder) >= 3
                and set(ladder) <= set(spec["settings"])):
            raise UserError(f"{path}: ladders[{name!r}] = {ladder!r}: write a list of 3 or more settings of "
                            f"{list(spec['settings'])}, smallest model first")


POWER_KEYS = {"sd", "gap", "power", "pilot", "gaps", "exploratory", "exponent"}


def claim_rows(spec):
    """[(variant, reference)] of the file's claim rows: each variant with an expected direction
    against the baseline, and each extra comparison that has one."""
    base = list(spec["variants"])[0]
    return [(v, base) for v in spec["expected"]] + [(v, r) for v, r, d in spec["comparisons"] if d]


def power_rows(spec):
    """The names of the rows the power analysis plans: the file's ladders when it has some, else its
    claim rows as the tables write them, "variant - reference"."""
    return list(spec["ladders"]) or [f"{v} - {r}" for v, r in claim_rows(spec)]


def row_gaps(spec, row):
    """(low, high): the gap a power row (power_rows) must detect, from its `power` entry: its "gaps"
    entry (a number, or a (low, high) range of plausible gaps), else "gap"; low = high for a number.
    A ladder's is its smallest rung's (ladder_gaps gives the others)."""
    gap = spec["power"].get("gaps", {}).get(row, spec["power"]["gap"])
    return (gap, gap) if isinstance(gap, (int, float)) else tuple(gap)


def is_exploratory(spec, row):
    """Whether the file declares a power row (power_rows) exploratory: planned without the power, so
    its strength is a lead at most (stats.strength)."""
    return row in spec["power"].get("exploratory", ())


def powered_rows(spec):
    """The power rows (power_rows) the planned seeds must give the registered power: all but the
    exploratory ones."""
    return [row for row in power_rows(spec) if not is_exploratory(spec, row)]


def ladder_gaps_of(spec, name):
    """The gap of each rung of a ladder of the file at its low gap (row_gaps): power.ladder_gaps on
    the rungs' training FLOPs (power.rung_compute of the first variant's config), with the `power`
    entry's exponent (absent: 0, the same gap at every rung)."""
    compute = [rung_compute(run_config(spec, s, list(spec["variants"])[0], spec["seeds"][0])[0])
               for s in spec["ladders"][name]]
    return ladder_gaps(row_gaps(spec, name)[0], spec["power"].get("exponent", 0), compute)


def power_alpha(spec):
    """The level the power analysis uses: stats.family_alpha over the file's rows (its ladders when
    it has some, else its claim rows)."""
    return family_alpha(len(spec["ladders"]) or len(claim_rows(spec)))


def check_question(spec, path):
    """UserError (one line) unless the file's question, if any, names two different variants, two of
    its settings and (a mechanism_question) a statistic of mechanism.SITE_STATISTICS; at most one."""
    variants, keys = list(spec["variants"]), [k for k in QUESTIONS if spec[k]]
    if len(keys) > 1:
        raise UserError(f"{path}: at most one of mechanism_question and loss_question: a file asks one question "
                        f"between two settings (split the other into a file of its own)")
    for key in keys:
        q, allowed = spec[key], {"variant", "reference", "settings"} | ({"statistic"} if key == "mechanism_question" else set())
        if not ({"variant", "reference", "settings"} <= q.keys() <= allowed
                and q.get("statistic", "move_ratio") in SITE_STATISTICS and q["variant"] in variants
                and q["reference"] in variants and q["variant"] != q["reference"]
                and isinstance(q["settings"], (list, tuple)) and len(q["settings"]) == 2
                and all(st in spec["settings"] for st in q["settings"])):
            statistic = (f", 'statistic': s}} with s one of {list(SITE_STATISTICS)} (absent: 'move_ratio'),"
                         if key == "mechanism_question" else "},")
            raise UserError(f"{path}: {key} = {q!r}: write {{'variant': v, 'reference': r, 'settings': [a, b]{statistic} "
                            f"two different variants of {list(variants)} and two settings of {list(spec['settings'])}")


def check_power_entry(spec, path):
    """UserError, one line naming the entry, for bad setting_seeds or a malformed `power` entry (module
    docstring: its keys, gaps, exploratory rows and exponent)."""
    table = table_seeds(spec)
    for setting, n in spec["setting_seeds"].items():
        if setting not in spec["settings"] or type(n) is not int or not 1 <= n <= len(table):
            raise UserError(f"{path}: setting_seeds[{setting!r}] = {n!r}: name a setting of {list(spec['settings'])} "
                            f"and a count from 1 to its {len(table)} table seeds")
    p, number = spec["power"], lambda x: type(x) in (int, float) and x > 0  # noqa: E731
    if not p:
        return
    pilot = p.get("pilot", 0)
    if (p.keys() - POWER_KEYS or not all(number(p.get(k)) for k in ("sd", "gap", "power")) or not 0.8 <= p["power"] < 1
            or type(pilot) is not int or not (pilot == 0 or 4 <= pilot <= len(table)) or not claim_rows(spec)
            or (pilot and spec["ladders"])):
        raise UserError(f"{path}: power = {p!r}: write {{'sd': SD > 0, 'gap': gap > 0, 'power': 0.8 to 1}}, and "
                        f"optionally 'pilot': 4 or more of its {len(table)} table seeds (not with ladders), 'gaps', "
                        f"'exploratory' and (with ladders) 'exponent', for a file with claim rows")
    rows, gaps = power_rows(spec), p.get("gaps", {})
    ranged = lambda g: isinstance(g, (list, tuple)) and len(g) == 2 and all(map(number, g)) and g[0] < g[1]  # noqa: E731
    if not isinstance(gaps, dict) or spec["ladders"] and gaps or any(
            row not in rows or not (number(g) or ranged(g)) for row, g in gaps.items()):
        raise UserError(f"{path}: power['gaps'] = {gaps!r}: map claim rows of {rows} to the gap each must detect, "
                        f"a number > 0 or a (low, high) range (not with ladders: their exponent shrinks the gap)")
    exploratory = p.get("exploratory", [])
    if (not isinstance(exploratory, (list, tuple)) or len(set(exploratory)) != len(exploratory)
            or not set(exploratory) <= set(rows) or pilot and set(exploratory) == set(rows)):
        raise UserError(f"{path}: power['exploratory'] = {exploratory!r}: a list of rows of {rows}, each once"
                        f"{' (a pilot sizes its seeds by a powered row: leave one out)' if pilot else ''}")
    if "exponent" in p and not (spec["ladders"] and type(p["exponent"]) in (int, float) and 0 < p["exponent"] < 1):
        raise UserError(f"{path}: power['exponent'] = {p['exponent']!r}: the exponent a of the loss-vs-compute curve "
                        f"L(C) = E + A C^-a along a ladder, a number in (0, 1), for a file with ladders")


def check_power(spec, path):
    """UserError naming the entry for a malformed `power` entry (check_power_entry), and for planned
    seeds that do not give a powered row (powered_rows) the registered power at its sd and its low
    gap, a pilot's at its cap of seeds (the power reached and the seeds needed; module docstring)."""
    check_power_entry(spec, path)
    p, table = spec["power"], table_seeds(spec)
    if not p:
        return
    alpha, need = power_alpha(spec), p["power"]
    for name in powered_rows(spec) if spec["ladders"] else []:
        seeds = [len(setting_table_seeds(spec, s)) for s in spec["ladders"][name]]
        gaps = ladder_gaps_of(spec, name)
        got = ladder_power(gaps, p["sd"], seeds, alpha) if sum(n - 1 for n in seeds) else 0.0
        if got < need:
            raise UserError(f"{path}: ladders[{name!r}] plans {seeds} seeds per rung: power {got:.2f} at sd={p['sd']}, "
                            f"gaps {', '.join(f'{g:.2g}' for g in gaps)}, alpha={alpha:.3g}, below the registered "
                            f"{need}: plan more seeds (setting_seeds), or declare it exploratory")
    for setting in [] if spec["ladders"] else spec["settings"]:
        cap = len(table[:spec["setting_seeds"].get(setting, len(table))])
        if p.get("pilot") and cap < p["pilot"]:
            raise UserError(f"{path}: setting_seeds[{setting!r}] = {cap} is below the pilot's {p['pilot']} seeds: its "
                            f"pilot could never finish; give it {p['pilot']} or more")
        n = cap if p.get("pilot") else len(setting_table_seeds(spec, setting))  # a pilot may run every seed
        for row in powered_rows(spec):
            gap = row_gaps(spec, row)[0]
            got = paired_power(gap, p["sd"], n, alpha) if n >= 2 else 0.0
            if got < need:
                what, fix = ((f": its pilot rule stops at {n} seeds, where the power is", "; add seeds (seeds, "
                              "setting_seeds)") if p.get("pilot") else (f" plans {n} seeds: power", " (or a pilot)"))
                raise UserError(f"{path}: setting {setting!r}{what} {got:.2f} at sd={p['sd']}, gap={gap} (row {row!r}), "
                                f"alpha={alpha:.3g}, below the registered {need}: it needs "
                                f"{seeds_needed(gap, p['sd'], need, alpha)}{fix}, or declare the row exploratory")


def seeds_needed(gap, sd, power, alpha):
    """How many seeds a paired test needs to reach `power` for this gap and SD at level alpha, as a
    phrase: "N seeds", or "more than 100 seeds" past stats.seeds_for_power's search."""
    n = seeds_for_power(gap, sd, alpha, power, most=100)
    return f"{n} seeds" if n else "more than 100 seeds"


def check_runs(spec, path):
    """check_config on every run an ablation plans (each setting, variant, LR and token multiplier),
    so a bad value fails at load (and in --dry_run), not hours in; UserError naming the run."""
    variants, seeds = spec["variants"], spec["seeds"]
    built = set()  # each model shape is built once: LR multipliers and seeds share their variant's model
    for setting in spec["settings"]:
        for variant in variants:
            for lr_mult in [1.0, *spec["lr_multipliers"]]:
                for iter_mult in [1.0, *spec["iter_multipliers"].get(variant, [])]:
                    try:
                        check_config(build_config(spec, setting, variant, seeds[0], lr_mult, iter_mult), built)
                    except UserError as e:
                        raise UserError(f"{path}: variant {variant!r} in setting {setting!r}"
                                        f"{f' at {lr_mult}x LR' if lr_mult != 1 else ''}"
                                        f"{f' at {iter_mult}x iterations' if iter_mult != 1 else ''}: {e}") from None


def run_config(spec, setting, variant, seed, lr_mult=1.0, iter_mult=1.0):
    """(full config without out_dir, its SHA-1 hex digest) of one run of an ablation (checked by load_ablation)."""
    cfg = build_config(spec, setting, variant, seed, lr_mult, iter_mult)
    return cfg, config_hash(cfg)


def build_config(spec, setting, variant, seed, lr_mult=1.0, iter_mult=1.0):
    """The full config of one run of an ablation, without out_dir and the tracking keys."""
    overrides = {**spec["settings"][setting], **spec["variants"][variant], "seed": seed}
    cfg, _ = load_config([spec["base"]])
    for key, value in overrides.items():  # Python values, typed as in a config file
        cfg[key] = check_type(key, value, f"{key}={value!r}")
    for key in LR_KEYS:
        cfg[key] *= lr_mult
    if iter_mult != 1.0:
        for key in ITER_KEYS:
            cfg[key] = round(cfg[key] * iter_mult)
    for key in ("out_dir", *TRACKING_KEYS):
        cfg.pop(key)
    return cfg


def config_hash(cfg):
    """SHA-1 hex digest of a run config (without out_dir and TRACKING_KEYS), stable when keys are added.

    The rule: a key whose row was added after runs were recorded (configurator's `added`, its
    absent= value in ABSENT) is left out when it has that value, or when it does nothing in this
    config (dual_sites without a dual placement, as ops.inert_keys says). So adding a key at the
    value the recorded runs had renames none of them, and only runs the new key changes get new
    hashes. Keys older than the records are always hashed.
    """
    changed = [k for k in ABSENT if k in cfg and cfg[k] != ABSENT[k]]
    inert = dict(inert_keys(cfg)) if changed else {}  # read from the registries (ops.inert_keys)
    kept = {k: v for k, v in cfg.items()
            if k not in TRACKING_KEYS and not (k in ABSENT and (v == ABSENT[k] or k in inert))}
    return hashlib.sha1(json.dumps(kept, sort_keys=True).encode()).hexdigest()


def lr_protocol(results, setting, variant, reference):
    """How a row's arms got their LRs: "tuned" when each ran at an LR tuned by the rule (arm_tuned, as
    collect computed it into results[(setting, arm)]["tuned"]); "untuned" when each arm's LR was chosen
    for it, but not by the rule (on one seed, or at the grid's edge); else "shared" (one LR, the base's
    or one arm's, tuned for neither by the rule)."""
    arms = [results.get((setting, v), {}) for v in (variant, reference)]
    return "tuned" if all(e.get("tuned") for e in arms) else "untuned" if all(e.get("chose") for e in arms) else "shared"


def arm_tuned(spec, setting, variant, records, seen=()):
    """Whether one arm's LR is tuned by the rule, computed from the file and its records, never from the
    file's intent: chosen by the mean over at least 2 tuning seeds (tuning_seeds; seeds[0] alone is
    one), every multiplier of the grid recorded, the best interior to it (lr_choice). An arm whose LR
    another file chose (lr_tuned_in) is tuned when that file's same-named arm is, in any of its
    settings (that file beside this one, else in configs/ablations/; neither: not tuned, as nothing shows it)."""
    if variant in spec["lr_tuned_in"]:
        name = spec["lr_tuned_in"][variant]
        found = [p for p in (os.path.join(spec.get("folder", ""), f"{name}.py"),
                             os.path.join(ROOT, "configs", "ablations", f"{name}.py")) if os.path.isfile(p)]
        if name in seen or not found:
            return False
        other = load_ablation(found[0])
        return variant in other["variants"] and any(
            arm_tuned(other, s, variant, records, (*seen, spec["name"])) for s in other["settings"])
    if not spec["tune_lr"] or len(tuning_seeds(spec)) < 2:
        return False
    best, why = lr_choice(spec, setting, variant, records)
    return best is not None and min(spec["lr_multipliers"]) < best < max(spec["lr_multipliers"])


def table_seeds(spec):
    """The seeds of the seed table: all of seeds, except seeds[0] when it chose the LR (tune_lr
    without tuning_seeds: its best-of-the-grid is biased low)."""
    return spec["seeds"] if spec["tuning_seeds"] or not spec["tune_lr"] else spec["seeds"][1:]


def setting_table_seeds(spec, setting, finals=None):
    """The table seeds one setting runs: its setting_seeds' first n; with a pilot, the pilot's until
    it is recorded, then as many as its SD asks (pilot_rule). finals: {(variant, seed): final val
    loss} of the setting's table runs recorded so far."""
    seeds = table_seeds(spec)[:spec["setting_seeds"].get(setting, len(spec["seeds"]))]
    return seeds[:pilot_rule(spec, finals)[0]] if spec["power"].get("pilot") else seeds


def pilot_rule(spec, finals=None):
    """(n, the pilot's SD or None): how many table seeds a setting plans under power's pilot rule
    (module docstring): the pilot's k until every variant has them in finals ({(variant, seed):
    final val loss} of that setting), then stats.seeds_for_power at the largest paired SD of the
    claim rows over them (exploratory ones too: the cautious estimate of the noise) and the smallest
    low gap of the powered rows (row_gaps, powered_rows), at least k and at most every table seed."""
    p, seeds = spec["power"], table_seeds(spec)
    pilot, finals = seeds[:p["pilot"]], finals or {}
    if any((v, s) not in finals for v in spec["variants"] for s in pilot):
        return p["pilot"], None
    sd = max(statistics.stdev([finals[(v, s)] - finals[(r, s)] for s in pilot]) for v, r in claim_rows(spec))
    gap = min(row_gaps(spec, row)[0] for row in powered_rows(spec))
    n = seeds_for_power(gap, sd, power_alpha(spec), p["power"], most=len(seeds)) if sd > 0 else p["pilot"]
    return max(p["pilot"], n or len(seeds)), sd


def planned_table_seeds(spec, setting=None, finals=None):
    """The table seeds planned before any look: those of seeds[:planned_seeds] (all when 0), of the
    setting's own when one is named (setting_table_seeds: a pilot's rule plans its later seeds
    before they run, so they count as planned)."""
    planned = spec["seeds"][:spec["planned_seeds"]] if spec["planned_seeds"] else spec["seeds"]
    own = table_seeds(spec) if setting is None else setting_table_seeds(spec, setting, finals)
    return [s for s in own if s in planned]


def tuning_seeds(spec):
    """The seeds of the LR sweep: tuning_seeds, else seeds[0] (which then stays out of the table)."""
    return list(spec["tuning_seeds"]) or spec["seeds"][:1]


def tuning_setting(spec, setting):
    """The setting whose LR sweep chooses `setting`'s LR (tune_setting), setting itself by default."""
    named = spec["tune_setting"]
    return (named.get(setting, setting) if isinstance(named, dict) else named) or setting


def lr_choice(spec, setting, variant, records):
    """(multiplier, why): the LR multiplier with the lowest mean final val loss over the tuning
    seeds, in tune_setting's sweep if one is named, else this setting's; (None, "sweep") until
    every sweep run is recorded; with tuning_seeds, (None, "edge") when the best is the grid's
    smallest or largest multiplier (the optimum may lie beyond: extend lr_multipliers)."""
    sweep_setting = tuning_setting(spec, setting)
    finals = {}
    for m in spec["lr_multipliers"]:
        recs = [(records or {}).get(run_config(spec, sweep_setting, variant, s, m)[1]) for s in tuning_seeds(spec)]
        if None in recs:
            return None, "sweep"
        finals[m] = sum(r["final"]["val_loss"] for r in recs) / len(recs)
    best = min(finals, key=finals.get)
    if spec["tuning_seeds"] and best in (min(finals), max(finals)):
        return None, "edge"
    return best, ""


def chosen_lr(spec, setting, variant, records):
    """The chosen LR multiplier (see lr_choice), or None while there is none."""
    return lr_choice(spec, setting, variant, records)[0]


def plan(spec, out_root, records=None):
    """Every run of an ablation: list of dicts(name, hash, variant, setting, seed, lr_mult,
    iter_mult, main, config, args, out_dir). `main` marks the runs of the seed table (the
    chosen LR, 1x tokens). Under tune_lr, before the LR sweep is recorded, seeds[1:] are
    placeholders with waiting=True. records: {hash: record} (load_records)."""
    runs = []
    sweeps = {tuning_setting(spec, s) for s in spec["settings"]}
    for setting in spec["settings"]:
        table = seeds = setting_table_seeds(spec, setting, recorded_finals(spec, setting, records))
        for variant in spec["variants"]:
            chosen, why = lr_choice(spec, setting, variant, records) if spec["tune_lr"] else (1.0, "")
            jobs = [] if spec["tune_lr"] else [(s, 1.0, 1.0) for s in seeds]
            if setting in sweeps:
                jobs += [(s, m, 1.0) for s in tuning_seeds(spec) for m in spec["lr_multipliers"]]
            if spec["tune_lr"] and chosen is not None:
                jobs += [(s, chosen, 1.0) for s in table]
            jobs += [(s, 1.0, m) for m in spec["iter_multipliers"].get(variant, []) if m != 1.0 for s in seeds]
            for seed, lr_mult, iter_mult in dict.fromkeys(jobs):
                cfg, digest = run_config(spec, setting, variant, seed, lr_mult, iter_mult)
                name = (f"{variant}_{setting}_s{seed}{f'_lrx{lr_mult:g}' if lr_mult != 1.0 else ''}"
                        f"{f'_itx{iter_mult:g}' if iter_mult != 1.0 else ''}_{digest[:8]}")
                out_dir = os.path.join(out_root, name)
                args = [f"--{k}={v}" for k, v in cfg.items() if v != DEFAULTS[k]] + [f"--out_dir={out_dir}"]
                main = iter_mult == 1.0 and lr_mult == chosen and seed in table
                runs.append(dict(name=name, hash=digest, variant=variant, setting=setting, seed=seed,
                                 lr_mult=lr_mult, iter_mult=iter_mult, main=main,
                                 config=cfg, args=args, out_dir=out_dir))
            if spec["tune_lr"] and chosen is None:
                label = "best" if why == "sweep" else "edge: extend lr_multipliers"
                runs += [dict(name=f"{variant}_{setting}_s{s}_lrx({label})", hash=None, variant=variant,
                              setting=setting, seed=s, lr_mult=None, iter_mult=1.0, main=True, waiting=True,
                              config=run_config(spec, setting, variant, s)[0])  # at 1x: for estimates only
                         for s in table]
    return runs


def recorded_finals(spec, setting, records):
    """{(variant, seed): final val loss} of a setting's table runs (at the chosen LR) in records,
    for a pilot's rule; {} without a pilot."""
    if not spec["power"].get("pilot") or not records:
        return {}
    out = {}
    for variant in spec["variants"]:
        chosen = chosen_lr(spec, setting, variant, records) if spec["tune_lr"] else 1.0
        for seed in table_seeds(spec) if chosen else []:
            rec = records.get(run_config(spec, setting, variant, seed, chosen)[1])
            if rec is not None:
                out[(variant, seed)] = rec["final"]["val_loss"]
    return out


def state(run, records=None):
    """'waiting' (its LR is not chosen yet), 'recorded' (a record in results/), 'done' (final
    eval logged, no record yet), 'damaged' (its log cannot be read: run["damaged"] says why),
    'partial' (a checkpoint to resume) or 'new'."""
    if run.get("waiting"):
        return "waiting"
    if records is not None and run["hash"] in records:
        return "recorded"
    log = os.path.join(run["out_dir"], "log.jsonl")
    try:
        rows = read_rows(log) if os.path.exists(log) else []
    except UserError as e:
        run["damaged"] = str(e)
        return "damaged"
    if any(r["kind"] == "eval" and r["iter"] == run["config"]["max_iters"] for r in rows):
        return "done"
    return "partial" if os.path.exists(checkpoint_in(run["out_dir"])) else "new"
