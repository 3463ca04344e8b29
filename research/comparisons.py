"""An ablation's paired comparisons from its run records: the records gathered per setting and variant
(one training mode; the runs without a record named), paired by seed against their reference, and
each comparison's mean difference, 95% interval and verdict (stats.verdict), with the verdict of
the planned seeds alone where seeds were added after a look."""

import json
from collections import Counter

from research.ablation import arm_tuned, load_ablation, lr_protocol, plan, planned_table_seeds
from research.records import cpu_type
from research.regime import param_count
from research.stats import SCALED_DOWN, fmt_ci, mean_ci, verdict


def final_val(rec):
    """A record's final val loss."""
    return rec["final"]["val_loss"]


def training_mode(rec):
    """How a run was trained, beyond its config hash: (compiled, CPU threads, torch version); None
    where the record does not know (a run finished before records existed has no thread count)."""
    return rec.get("compile"), rec.get("threads"), rec.get("torch")


def same_mode(mode, reference):
    """Whether a record's mode matches the tables' mode; a field the record does not know matches."""
    return all(a is None or a == b for a, b in zip(mode, reference))


def mode_text(mode):
    """A training mode (training_mode) in words: 'compiled, 1 thread(s) per run, torch 2.9.0'."""
    compiled, threads, version = mode
    return f"{'compiled' if compiled else 'eager'}, {threads or '?'} thread(s) per run, torch {version}"


def collect(spec, records):
    """{(setting, variant): {"seeds": {seed: record}, "lr": {mult: record}, "budgets": {seed: {iter_mult:
    record}}, "tuning": {mult: {tuning seed: record}}, "params": n, "config": a 1x config (with
    tuning_seeds: the tables' config, at the chosen LR, once it is chosen)}}, the names
    of runs without a record (or left out), and the training mode the tables use. "lr" holds the
    sweep at seeds[0]; with tuning_seeds it stays empty and "tuning" holds their sweep instead (in
    tune_setting only, when one is named).

    Paired differences never mix training modes (training_mode): the ablation's most common
    mode is used and a record made another way counts as missing, named with its mode (a
    field a record does not know is not held against it)."""
    runs = plan(spec, "runs", records)
    modes = [training_mode(records[r["hash"]]) for r in runs if r["hash"] in records]
    known = Counter(m for m in modes if None not in m) or Counter(modes)
    mode = known.most_common(1)[0][0] if known else None
    results, missing, table = {}, [], {}
    for run in runs:
        e = results.setdefault((run["setting"], run["variant"]),
                               {"seeds": {}, "lr": {}, "budgets": {}, "tuning": {}, "params": None,
                                "config": None})
        if run.get("waiting"):
            missing.append(run["name"])
            continue
        # the config of the tables' runs where they are planned (with tuning_seeds: at the chosen LR, which
        # the decay pull depends on), else one at 1x LR
        if run["iter_mult"] == 1.0 and (e["config"] is None or run["lr_mult"] == 1.0
                                        or (spec["tuning_seeds"] and run["main"])):
            e["config"] = run["config"]
            e["params"] = param_count(run["config"])
        rec = records.get(run["hash"])
        if rec is None:
            missing.append(run["name"])
            continue
        if not same_mode(training_mode(rec), mode):
            missing.append(f"{run['name']} ({mode_text(training_mode(rec))}: not the tables' mode)")
            continue
        if run["main"]:
            e["seeds"][run["seed"]] = rec
            table.setdefault((run["setting"], run["seed"]), {})[run["variant"]] = [
                r for r in [rec, *getattr(records, "reruns", {}).get(run["hash"], [])]
                if same_mode(training_mode(r), mode)]
        if spec["tuning_seeds"]:
            if run["seed"] in spec["tuning_seeds"] and run["iter_mult"] == 1.0:
                e["tuning"].setdefault(run["lr_mult"], {})[run["seed"]] = rec
        elif run["seed"] == spec["seeds"][0] and run["iter_mult"] == 1.0 and run["lr_mult"] in spec["lr_multipliers"]:
            e["lr"][run["lr_mult"]] = rec
        if run["lr_mult"] == 1.0:
            e["budgets"].setdefault(run["seed"], {})[run["iter_mult"]] = rec
    for (setting, variant), e in results.items():  # the rule's, from the records (ablation.arm_tuned)
        e["tuned"] = arm_tuned(spec, setting, variant, records)
        e["chose"] = spec["tune_lr"] or variant in spec["lr_tuned_in"]  # an LR of its own, chosen somehow
    for (setting, seed), cells in table.items():
        for variant, rec in choose_pairs(cells, table, setting).items():
            results[(setting, variant)]["seeds"][seed] = rec
    return results, missing, mode


def choose_pairs(cells, table, setting):
    """{variant: the record its seed's table uses}, cells: {variant: [the run's records: its own, its
    reruns (records.load_records)]} of one (setting, seed). The rule, one for every table: the arms
    of a seed pair on one CPU type (records.cpu_type), the type most of them have (ties: the one
    whose code comes first below); within it the arms take one commit where they all have one (of
    those, the one with the most of the setting's table records), else each its own by that count;
    then the newest. A seed whose
    arms have no CPU type in common keeps each arm's first record by that order, and its rows say
    so (comparisons: "apart")."""
    counts = Counter(r.get("commit") for s_cells in (c for (st, _), c in table.items() if st == setting)
                     for recs in s_cells.values() for r in recs)
    order = lambda r: (counts[r.get("commit")], r.get("started") or "")  # noqa: E731
    types = Counter(cpu_type(r) for recs in cells.values() for r in {id(r): r for r in recs}.values())
    by_type = {t: sum(any(cpu_type(r) == t for r in recs) for recs in cells.values()) for t in types}
    best = max(by_type, key=lambda t: (by_type[t], max(order(r) for recs in cells.values() for r in recs
                                                        if cpu_type(r) == t)), default=None)
    same = {v: [r for r in recs if cpu_type(r) == best] or recs for v, recs in cells.items()}
    shared = set.intersection(*({r.get("commit") for r in recs} for recs in same.values() if recs)) if same else set()
    if shared:  # a commit every arm has: the seed pairs within one code
        code = max(shared, key=lambda c: counts[c])
        same = {v: [r for r in recs if r.get("commit") == code] for v, recs in same.items()}
    return {v: max(recs, key=order) for v, recs in same.items() if recs}


def collect_all(paths, records, scale_down=False):
    """([(spec, results, missing, mode)] from collect for each ablation file that has any record of
    its tables or of its tuning seeds' LR sweep, in the order given; [paths of those that have none])."""
    collected, skipped = [], []
    for path in paths:
        spec = load_ablation(path, scale_down)
        results, missing, mode = collect(spec, records)
        if any(e["seeds"] or e["tuning"] for e in results.values()):
            collected.append((spec, results, missing, mode))
        else:
            skipped.append(path)
    return collected, skipped


def paired(results, setting, variant, reference):
    """(seeds, differences variant minus reference) over the seeds both have."""
    a, b = results[(setting, variant)]["seeds"], results[(setting, reference)]["seeds"]
    seeds = sorted(set(a) & set(b))
    return seeds, [final_val(a[s]) - final_val(b[s]) for s in seeds]


def apart(results, setting, variant, reference, seeds):
    """The seeds whose two arms' records are of different CPU types (records.cpu_type): a paired
    difference that holds the CPUs' difference too (a cross-CPU replay moved a final loss by about half
    a seed-to-seed SD)."""
    a, b = results[(setting, variant)]["seeds"], results[(setting, reference)]["seeds"]
    return [s for s in seeds if cpu_type(a[s]) != cpu_type(b[s])]


def comparisons(spec, results):
    """Every paired comparison of an ablation, in table order: each variant vs the baseline per
    setting, then the file's extra comparisons. List of dicts(setting, variant, reference, seeds,
    diffs, ci (mean_ci), expected, verdict, lr: "tuned" (each arm at its own LR tuned by the rule) or
    "shared" (ablation.lr_protocol), apart: the seeds whose arms ran on different CPU types, control: the
    file declares itself a control); a
    --scale_down spec's verdicts are stats.SCALED_DOWN."""
    base = list(spec["variants"])[0]
    pairs = [(s, v, base, spec["expected"].get(v)) for s in spec["settings"] for v in spec["variants"] if v != base]
    pairs += [(s, v, ref, exp) for s in spec["settings"] for v, ref, exp in spec["comparisons"]]
    out = []
    for setting, v, ref, expected in pairs:
        planned = planned_seeds(spec, results, setting)
        seeds, diffs = paired(results, setting, v, ref)
        ci = mean_ci(diffs)
        c = dict(setting=setting, variant=v, reference=ref, seeds=seeds, diffs=diffs, ci=ci, expected=expected,
                 verdict=verdict(ci, len(diffs), expected), lr=lr_protocol(results, setting, v, ref),
                 apart=apart(results, setting, v, ref, seeds),
                 control=bool(spec["control"]),
                 planned_diffs=[d for s, d in zip(seeds, diffs) if s in planned], planned_n=len(planned),
                 key=seeds and (config_key(results[(setting, v)]["seeds"][seeds[0]]),
                                config_key(results[(setting, ref)]["seeds"][seeds[0]])))
        if any(s not in planned for s in seeds):  # seeds added after a look at the planned ones
            first = c["planned_diffs"]
            first_ci = mean_ci(first)
            planned_verdict = f" {verdict(first_ci, len(first), expected)}" if expected else ""
            added = [str(s) for s in seeds if s not in planned]
            c["verdict"] += (f" (seed{'s' * (len(added) > 1)} {', '.join(added)} added after a look: "
                             f"nominal 95%; the {len(first)} planned: {fmt_ci(first_ci)}{planned_verdict})")
        if spec.get("scale_down"):  # miniature runs: no word of the claim's (stats.SCALED_DOWN)
            c["verdict"] = SCALED_DOWN
        out.append(c)
    return out


def planned_seeds(spec, results, setting):
    """A setting's table seeds planned before any look (ablation.planned_table_seeds, given the
    setting's recorded final losses, which a pilot's rule reads)."""
    finals = {(w, seed): final_val(rec) for w in spec["variants"]
              for seed, rec in results[(setting, w)]["seeds"].items()}
    return planned_table_seeds(spec, setting, finals)


def config_key(rec):
    """What a recorded run is, seed aside (its LR as run, tuned or not): a comparison two files
    share has the same keys."""
    return json.dumps({k: v for k, v in rec["config"].items() if k != "seed"}, sort_keys=True)

