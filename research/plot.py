"""Tables and figures of an ablation from its run records in results/ alone (no runs/ needed).

    python -m research.plot configs/ablations/c8_unified.py            # after sweep.py on the same file
    python -m research.plot configs/ablations/*.py --out=assets --readme=results/README.md   # the committed tables
    python -m research.plot --run=out-shakespeare-char     # one run's curves: out-plots/out-shakespeare-char.png
    python -m research.plot --run=runs/a --run=runs/b      # runs side by side: out-plots/a_vs_b.png

--run given twice or more draws the runs on shared axes (x: iteration), one colour each, labelled
by folder name: the loss, each optimizer group's update ratio, and per site kind (the site's name
without its block index, averaged over blocks) the preconditioner floor and the amplification
from each eval row's mechanism statistics (mechanism.Mechanism; train with --mechanism_stats=on).
A figure name past FIGURE_NAME_BYTES (long or many run names) keeps each name's head and tail and
ends in a hash of the full names; the command says so, and the figure's title names every run.
A log row without what is drawn from it is one error naming the file, line and key.

For each ablation file, writes to --out (default out-plots/; the committed tables are assets/):
    <name>.md             per setting: the regime (the baseline's parameters, tokens, tokens
                          per parameter, passes over the training data), final val loss mean
                          +- std over seeds, the paired difference to the baseline per seed,
                          its mean with a 95% interval and the verdict; the file's extra
                          comparisons; when the settings differ in their token budget at one
                          model size, the paired difference to the baseline per tokens per
                          parameter; the LR sweep (with tuning_seeds: their mean per multiplier,
                          the chosen one marked); and, with token budgets, the token multiplier
    <name>_curves.png     validation loss vs tokens per variant (mean over seeds, min-max band)
                          and the paired difference to the baseline (same seed) vs tokens, its
                          mean with a 95% t interval as a band
    <name>_scales.png     the final scale statistics (mean, std, min-max of each effective gamma)
                          per site of the lowest seed of the last variant
    <name>_fit.png        with token budgets: the reference's loss-vs-tokens fit per seed and
                          the variants' final losses on it
    <name>_width.png      when the settings vary the width: each variant's paired difference
                          to the baseline against n_embd (per seed, mean and 95% interval)
    <name>_tpp.png        when the settings differ in their token budget at one model size:
                          each variant's paired difference to the baseline against tokens per
                          parameter (per seed, mean and 95% interval)
    <name>_mechanism.png  when its records carry the mechanism statistics: per setting and variant,
                          by site kind, the floor at the end and the amplification and update
                          ratios as means over the run's intervals (mean over seeds, their range)
    <name>_mechanism_question.png   with mechanism_question: per setting, each seed's paired
                          difference of stats.mechanism_scalar with the mean and 95% interval
                          (<name>.md has the question's table: the per-setting paired rows and
                          the between-setting Welch row, BH over these three, verdict
                          "differs" / "unresolved": no direction is claimed)
    lr_schedules.png      the learning rate vs iteration of each setting (from the configs)
    summary.md            every paired comparison of the files given, one row each, with its
                          interval, Benjamini-Hochberg adjusted p (claim rows) and verdict
                          (--readme=results/README.md also writes it into
                          that file's summary block, so it cannot drift from the records)
and prints the tables. Runs without a record, or made in another training mode
(compiled or eager, CPU threads, torch version) than the ablation's other runs, are
left out and named.

Statistics (results/README.md says the same in prose). Per seed s, d_s = val loss of the variant minus that
of its reference, same seed (paired). Over n seeds: mean d, sample standard
deviation s_d, and the 95% interval mean +- t_{0.975, n-1} s_d / sqrt(n) (Student t;
its quantile computed from the exact t distribution for integer df, see t_quantile).
Verdict: "reproduced" when the interval lies wholly on the side the ablation's
`expected` names, "contradicted" when wholly on the other side, "unresolved"
otherwise (an interval touching 0 included); one seed: "unresolved (1 seed)".
The summary adds, per claim row, the two-sided p of the paired t test (t = mean d /
(s_d / sqrt(n)), df = n - 1; p < 0.05 exactly when the interval excludes 0) adjusted by
Benjamini-Hochberg over all claim rows of the table (control rows stay out), and counts the
rows that exclude 0 uncorrected and those with adjusted p <= 0.05; the verdicts stay the
intervals'.

Token multiplier (the paper's headline metric is a compute multiplier; here it is a token
multiplier at the reference's size and token budget, both stated). Per seed, the reference's final
loss at its token budgets D is fitted by L(D) = E + A D^-alpha: for a fixed E, A and
alpha come from the linear least-squares fit of log(L - E) on log D (closed form); E
is the value on a grid over [0, min L), refined by golden-section search, that
minimizes the squared error in L of that fit (not a full least-squares fit in L). The multiplier of a variant
is [D_ref(L_variant) / D_variant] / [D_ref(L_ref) / D_ref]: the tokens the reference needs to
reach the variant's final loss over the tokens the variant used (> 1: the variant is more
token-efficient), divided by the same ratio for the reference's own 1x run, same seed, so that
the reference scores exactly 1 (the fit need not pass through its own 1x point); mean and 95% t
interval over seeds. With 4 budgets the fit has one degree of freedom: a multiplier outside the
budgets' range is an extrapolation, and the table says so. First, the same ratio without a fit
(interpolated_tokens: the reference's loss read linearly in log tokens between the two budgets
that bracket the loss), normalized the same way; beside both, the wall-clock ratio (the
variant's recorded wall_s over the reference's 1x run's, same seed; rough: runs share machines).
"""

import os
import sys

if __package__ in (None, ""):  # run by its path (python research/plot.py): its imports live at the repository root
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import common  # noqa: E402 (from the repository root, the path above)

common.set_omp_env()  # before torch loads: idle OpenMP threads sleep instead of spinning

import argparse
import glob
import json
import math
import re
import statistics
from collections import Counter
from types import SimpleNamespace

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

from common import cli  # noqa: E402
from configurator import UserError, folder_problem  # noqa: E402
from model import GPT, model_config  # noqa: E402
from optim import lr_multiplier  # noqa: E402
from research.ablation import (ROOT, load_ablation, load_records, lr_choice, plan,  # noqa: E402
                               planned_table_seeds, read_rows, tuning_setting, tuning_seeds)
from research.stats import (bh_adjust, fit_power_law, fmt_ci, interpolated_tokens, ladder_multiplier,  # noqa: E402
                            mean_ci, mechanism_scalar, paired_t_p, tokens_to_reach, verdict, welch_t)

# -----------------------------------------------------------------------------
# From records to tables


def final_val(rec):
    return rec["final"]["val_loss"]


def train_flops(config):
    """Training FLOPs of a run: its model's FLOPs per token (forward and backward, attention
    included: GPT.flops_per_token, meta device) times its tokens; None for a config model.py rejects."""
    cfg = dict(config)
    cfg["vocab_size"] = cfg["vocab_size"] or 80
    try:
        with torch.device("meta"):
            return GPT(model_config(cfg)).flops_per_token() * run_tokens(cfg)
    except UserError:
        return None


def param_count(config):
    """Parameters of a run's model (meta device); None for a config this model.py rejects."""
    cfg = dict(config)
    cfg["vocab_size"] = cfg["vocab_size"] or 80  # only the difference between variants matters
    try:
        with torch.device("meta"):
            return GPT(model_config(cfg)).num_params()
    except UserError:
        return None


# Training tokens of a dataset's train split, for the passes over it a table states. Records do not
# carry it and data/ may not be prepared in a clean clone, so it is a constant here:
# shakespeare_char from data/shakespeare_char/prepare.py's output "train 4,531,100 chars" (one token
# per character; train.bin holds 4,531,100 uint16 ids). Other datasets: no passes stated.
TRAIN_TOKENS = {"shakespeare_char": 4_531_100}


def run_tokens(cfg):
    """Training tokens of a run: max_iters x batch_size x block_size x gradient_accumulation_steps."""
    return cfg["max_iters"] * cfg["batch_size"] * cfg["block_size"] * cfg["gradient_accumulation_steps"]


# Characters per GPT-2 BPE token of a character-level dataset's text, so that a character run's
# budget can be read against the paper's (in BPE tokens): tiktoken's r50k_base encode_ordinary on
# shakespeare_char's training text gives 1,390,451 tokens for its 4,531,100 characters
# (tests/test_sweep.py recomputes it where tiktoken's file is at hand).
CHARS_PER_BPE_TOKEN = {"shakespeare_char": 4_531_100 / 1_390_451}


def unit(cfg):
    """What a run's tokens are: "characters" for a character-level dataset (CHARS_PER_BPE_TOKEN),
    else "tokens"."""
    return "characters" if cfg.get("dataset") in CHARS_PER_BPE_TOKEN else "tokens"


def loss_unit(spec, short=False):
    """The unit of an ablation's losses: "nats per character" for a character-level dataset (unit),
    else "nats per token" (short: "nats/char", "nats/token", for axis labels)."""
    chars = unit(plan(spec, "runs")[0]["config"]) == "characters"
    return ("nats/char" if chars else "nats/token") if short else \
        ("nats per character" if chars else "nats per token")


def per_param(cfg, params):
    """'20 tokens per parameter', or for characters '20 characters per parameter (6.14 GPT-2 tokens)'."""
    ratio = run_tokens(cfg) / params
    chars = CHARS_PER_BPE_TOKEN.get(cfg.get("dataset"))
    return f"{ratio:.3g} {unit(cfg)} per parameter" + (f" ({ratio / chars:.3g} GPT-2 tokens)" if chars else "")


def coverage(cfg, train):
    """(never, twice or more): the expected shares of a training split of `train` tokens that the
    run's random windows never cover and cover at least twice. Each of the W = max_iters x
    batch_size x gradient_accumulation_steps windows covers block_size + 1 tokens from a uniform
    start (train.get_batch), so an interior token is in it with p = (block_size + 1) / (train -
    block_size); the count of windows holding it is binomial (W, p)."""
    windows = cfg["max_iters"] * cfg["batch_size"] * cfg["gradient_accumulation_steps"]
    p = (cfg["block_size"] + 1) / (train - cfg["block_size"])
    never = (1 - p) ** windows
    return never, 1 - never - windows * p * (1 - p) ** (windows - 1)


def regime(cfg, params, name):
    """The line stating a setting's regime: the reference's parameters, its tokens (characters for a
    character-level dataset, with the GPT-2 token equivalent), their ratio and, for a dataset in
    TRAIN_TOKENS, what the random windows cover of its training split (passes are expected
    coverage, not epochs); '' without a config or count."""
    if not cfg or not params:
        return ""
    tokens, what = run_tokens(cfg), unit(cfg)
    train = TRAIN_TOKENS.get(cfg.get("dataset"))
    seen = ""
    if train:
        never, again = coverage(cfg, train)
        seen = (f"; expected coverage of the training data {1 - never:.0%} ({never:.0%} of its {what} never in a "
                f"window, {again:.0%} in two or more; {tokens / train:.3g} passes of random windows over "
                f"{cfg['dataset']}'s {train:,} training {what})")
    return (f"Regime: {params / 1e6:.3g}M parameters (`{name}`), {tokens / 1e6:.3g}M {what}, "
            f"{per_param(cfg, params)}{seen}.")


def training_mode(rec):
    """How a run was trained, beyond its config hash: (compiled, CPU threads, torch version); None
    where the record does not know (a run finished before records existed has no thread count)."""
    return rec.get("compile"), rec.get("threads"), rec.get("torch")


def same_mode(mode, reference):
    """Whether a record's mode matches the tables' mode; a field the record does not know matches."""
    return all(a is None or a == b for a, b in zip(mode, reference))


def short_commit(commit):
    """'abc123def456' or 'abc123def456+dirty' (uncommitted changes when the run started); 'unknown'."""
    return "unknown" if not commit else commit[:12] + ("+dirty" if commit.endswith("+dirty") else "")


def mode_text(mode):
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
    results, missing = {}, []
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
        if spec["tuning_seeds"]:
            if run["seed"] in spec["tuning_seeds"] and run["iter_mult"] == 1.0:
                e["tuning"].setdefault(run["lr_mult"], {})[run["seed"]] = rec
        elif run["seed"] == spec["seeds"][0] and run["iter_mult"] == 1.0 and run["lr_mult"] in spec["lr_multipliers"]:
            e["lr"][run["lr_mult"]] = rec
        if run["lr_mult"] == 1.0:
            e["budgets"].setdefault(run["seed"], {})[run["iter_mult"]] = rec
    return results, missing, mode


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


def decay_pull(cfg):
    """(exp(-S), S) with S = sum over the run's iterations of lr_t * weight_decay.

    The factor decoupled weight decay alone (AdamW: p <- p (1 - lr_t wd)) applies to
    a parameter over the run, the schedule's AdamW LR at each iteration (optim.lr_multiplier).
    """
    ns = SimpleNamespace(**cfg)
    total = sum(cfg["learning_rate"] * lr_multiplier(it, ns) for it in range(cfg["max_iters"])) * cfg["weight_decay"]
    return math.exp(-total), total


def method_line(spec):
    return (f"Each row: final val loss ({loss_unit(spec)}); the paired difference to the reference (same seed, "
            "variant minus reference) per seed, and its mean with a 95% Student-t interval over seeds "
            "(df = seeds - 1). Verdict: reproduced / contradicted when the interval lies "
            "wholly on the claimed / the other side of 0, unresolved otherwise. Each row is its own 95% "
            "interval, not corrected for multiple comparisons: across k rows about k x 5% exclude 0 by chance "
            "(the summary table adds Benjamini-Hochberg adjusted p values over every claim row).")


def comparisons(spec, results):
    """Every paired comparison of an ablation, in table order: each variant vs the baseline per
    setting, then the file's extra comparisons. List of dicts(setting, variant, reference, seeds,
    diffs, ci (mean_ci), expected, verdict)."""
    base = list(spec["variants"])[0]
    pairs = [(s, v, base, spec["expected"].get(v)) for s in spec["settings"] for v in spec["variants"] if v != base]
    pairs += [(s, v, ref, exp) for s in spec["settings"] for v, ref, exp in spec["comparisons"]]
    out = []
    for setting, v, ref, expected in pairs:
        planned = planned_seeds(spec, results, setting)
        seeds, diffs = paired(results, setting, v, ref)
        ci = mean_ci(diffs)
        c = dict(setting=setting, variant=v, reference=ref, seeds=seeds, diffs=diffs, ci=ci, expected=expected,
                 verdict=verdict(ci, len(diffs), expected),
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


def decay_caption(decayed):
    """The cumulative decoupled-decay pull of a setting's decayed runs' configs, as a sentence."""
    pull, total = decay_pull(decayed[0])
    mults = sorted({c.get("magnitude_lr_mult", 1) for c in decayed
                    if c["reparam"] != "plain" and c.get("magnitude_lr_mult", 1) != 1})
    return (f"Cumulative decay pull on a decayed scale with no gradient: exp(-sum_t lr_t * wd) = {pull:.3f} "
            f"(sum = {total:.2f}; weight_decay={decayed[0]['weight_decay']:g}, "
            f"{decayed[0]['max_iters']} iterations; the effect needs it well below e^-0.5 = 0.607)"
            + "".join(f"; an OR/ER magnitude at {m:g}x the LR (magnitude_lr_mult) is pulled {m:g}x as "
                      f"hard: exp(-{m:g} sum) = {pull ** m:.3f}" for m in mults) + ".")


def tables(spec, results):
    """Markdown: a results table per setting, the extra comparisons, the LR sweep, the token multiplier,
    the compute multiplier along each ladder."""
    variants, base = list(spec["variants"]), list(spec["variants"])[0]
    rows = {(c["setting"], c["variant"], c["reference"]): c for c in comparisons(spec, results)}
    out = [f"**{spec['claim']}** (`{spec['name']}`; seeds {', '.join(map(str, spec['seeds']))})", "",
           method_line(spec), ""]
    for setting in spec["settings"]:
        out += [f"Setting `{setting}`:", ""]
        line = regime(results[(setting, base)]["config"], results[(setting, base)]["params"], base)
        if line:
            out += [line, ""]
        decayed = [results[(setting, v)]["config"] for v in variants
                   if results[(setting, v)]["config"] and results[(setting, v)]["config"]["scale_wd"] != "none"]
        if decayed:
            out += [decay_caption(decayed), ""]
        out += ["| variant | extra params | val loss (mean +- std) | paired diff vs "
                f"{base}, per seed | mean diff [95% CI] | claim: val loss | verdict |",
                "|---|---|---|---|---|---|---|"]
        b = results[(setting, base)]
        for v in variants:
            e = results[(setting, v)]
            vals = [final_val(r) for r in e["seeds"].values()]
            mean = f"{statistics.fmean(vals):.4f}" if vals else "-"
            std = f"{statistics.stdev(vals):.4f}" if len(vals) > 1 else "-"
            extra = "-" if e["params"] is None or b["params"] is None else \
                f"{e['params'] - b['params']:+,} ({(e['params'] - b['params']) / b['params']:+.2%})"
            if v == base:
                out.append(f"| {v} | {extra} | {mean} +- {std} (n={len(vals)}) | - | - | - | - |")
                continue
            c = rows[(setting, v, base)]
            out.append(f"| {v} | {extra} | {mean} +- {std} (n={len(vals)}) | "
                       f"{', '.join(f'{d:+.4f}' for d in c['diffs']) or '-'} | {fmt_ci(c['ci'])} | "
                       f"{c['expected'] or '-'} | {c['verdict']} |")
        out.append("")
    if spec["comparisons"]:
        out += ["Further paired comparisons (variant minus reference, same seed and setting):", "",
                "| setting | variant - reference | per seed | mean diff [95% CI] | claim: variant's val loss "
                "| verdict |",
                "|---|---|---|---|---|---|"]
        for setting in spec["settings"]:
            for v, ref, _ in spec["comparisons"]:
                c = rows[(setting, v, ref)]
                out.append(f"| {setting} | {v} - {ref} | {', '.join(f'{d:+.4f}' for d in c['diffs']) or '-'} | "
                           f"{fmt_ci(c['ci'])} | {c['expected'] or '-'} | {c['verdict']} |")
        out.append("")
    trend = tpp_trend(spec, results)
    if trend:
        out += tpp_table(spec, trend, results[(next(iter(spec["settings"])), list(spec["variants"])[0])]["config"])
    if spec["lr_multipliers"]:
        out += lr_table(spec, results)
    if spec["iter_multipliers"]:
        out += multiplier_table(spec, results)
    if spec["ladders"]:
        out += ladder_table(spec, results)
    if spec["mechanism_question"]:
        out += question_table(spec, question_rows(spec, results))
    return "\n".join(out)


def rank(c):
    """Which of two nested comparisons of the same runs the summary shows: more seeds, then a claim
    over a control, then one whose verdict says seeds were added after a look."""
    return len(c["seeds"]), bool(c["expected"]), "added after a look" in c["verdict"]


def excludes_zero(ci):
    """Whether a mean_ci interval lies wholly on one side of 0 (one seed: no interval, False)."""
    return ci is not None and ci[1] is not None and (ci[2] < 0 or ci[1] > 0)


def claim_p_values(rows, key="diffs"):
    """{row index: Benjamini-Hochberg adjusted p} over the summary's claim rows with 2 seeds or more
    (paired_t_p, then bh_adjust over all of them at once); control rows stay out of the family.
    rows: [(comparison, names)] as summary builds them; key: "diffs" (every seed) or
    "planned_diffs" (the seeds planned before any look)."""
    claims = [i for i, (c, _) in enumerate(rows) if c["expected"] and len(c[key]) > 1 and complete(c)
              and ("ladder" not in c or c["p"] is not None)]
    return dict(zip(claims, bh_adjust([rows[i][0]["p"] if "ladder" in rows[i][0] else paired_t_p(rows[i][0][key])
                                       for i in claims])))


def complete(c):
    """Whether every planned seed of a comparison is recorded: a row still running is reported
    but stays out of the correction's family (its p would change as seeds arrive)."""
    return len(c["planned_diffs"]) >= c["planned_n"]


def strength(c, p_planned):
    """The word a sentence about a claim row may use, from its planned seeds: "finding" when their
    p survives the Benjamini-Hochberg correction (p_planned <= 0.05), "lead" when their interval
    excludes 0 only uncorrected, "-" otherwise (unresolved); "-" for a control row. A finding or lead
    on the other side of 0 than the claim says so ("lead, against the claim")."""
    ci = c["planned_ci"] if "ladder" in c else mean_ci(c["planned_diffs"])
    if c["expected"] and not complete(c):
        return f"pending ({len(c['planned_diffs'])} of {c['planned_n']} planned seeds)"
    if not c["expected"] or p_planned is None or not excludes_zero(ci):
        return "-"
    word = "finding" if p_planned <= 0.05 else "lead"
    return word if (ci[0] < 0) == (c["expected"] == "lower") else f"{word}, against the claim"


def summary(collected):
    """Markdown: one table of every paired comparison of the given ablations, sorted by file name,
    each claim row's Benjamini-Hochberg adjusted p (claim_p_values; a control row '-'), and a last
    line: how many claim rows would exclude 0 by chance, how many do, how many survive the correction.

    A comparison several files make (the same variant and reference configs as run, seed aside)
    is one row naming them all, showing the largest of their seed sets when these nest (rank
    breaks ties); seed sets that do not nest stay separate rows, so no file's result hides
    another's. A file that claims nothing (no `expected`, e.g. an
    LR sweep) adds no rows; a row without a claim in a file that has some is a control.
    collected: as collect_all returns it."""
    rows = []  # [comparison shown, names of the files that make it]
    for spec, results, _, _ in sorted(collected, key=lambda x: x[0]["name"]):
        if not spec["expected"] and not any(e for *_, e in spec["comparisons"]):
            continue  # a file that claims nothing (an LR sweep): its tables only
        for c in comparisons(spec, results):
            if not c["diffs"]:
                continue
            row = next((r for r in rows if r[0]["key"] == c["key"] and (set(c["seeds"]) <= set(r[0]["seeds"])
                                                                      or set(c["seeds"]) >= set(r[0]["seeds"]))), None)
            if row is None:  # new, or seed sets that do not nest: a row of its own
                rows.append([c, [spec["name"]]])
                continue
            if spec["name"] not in row[1]:  # (a file's own settings can run alike: --scale_down's miniatures)
                row[1].append(spec["name"])
            if rank(c) > rank(row[0]):
                if row[0]["expected"] and not c["expected"] and c["seeds"] != row[0]["seeds"]:
                    c = {**c, "expected": row[0]["expected"],  # a control's larger seed set, the claim kept
                         "verdict": verdict(c["ci"], len(c["diffs"]), row[0]["expected"])}
                row[0] = c
        rows += [[c, [spec["name"]]] for c in ladder_rows(spec, results) if c["diffs"]]
    adjusted, planned = claim_p_values(rows), claim_p_values(rows, "planned_diffs")
    out = ["| ablation | setting | variant - reference | seeds | mean diff [95% CI] | p (BH) | claim | verdict | "
           "strength |", "|---|---|---|---|---|---|---|---|---|"]
    for i, (c, names) in enumerate(rows):
        n, k = len(c["diffs"]), len(c["planned_diffs"])
        p_txt = f"{planned[i]:#.3g}" if i in planned else "-"
        if k < n and i in adjusted:  # seeds added after a look: every seed's p, in its own family, beside
            p_txt += f" (all {n} seeds: {adjusted[i]:#.3g})"
        seeds = f"{n}{f' ({k} planned)' if k < n else ''}" if "ladder" not in c else \
            "per rung " + ", ".join(str(len(x)) for x in c["per_rung"].values())
        diff = fmt_ci(c["ci"]) if "ladder" not in c else f"compute multiplier {ladder_text(c)}"
        out.append(f"| {', '.join(f'`{n}`' for n in names)} | {c['setting']} | {c['variant']} - {c['reference']} | "
                   f"{seeds} | {diff} | {p_txt} | "
                   f"{c['expected'] or '(control)'} | {c['verdict']} | {strength(c, planned.get(i))} |")
    claims = [(i, c) for i, (c, _) in enumerate(rows) if c["expected"] and complete(c)]
    pending = sum(1 for c, _ in rows if c["expected"] and not complete(c))
    words = [strength(c, planned.get(i)) for i, c in claims]
    excluding = sum(excludes_zero(c["ci"]) for _, c in claims)
    family = f"the {len(planned)} claim rows" + (" with 2 seeds or more" if len(planned) < len(claims) else "")
    modes = sorted({mode_text(mode) for *_, mode in collected if mode})
    units = {unit(e["config"]) for _, results, *_ in collected for e in results.values() if e["config"]}
    per = {frozenset({"characters"}): "nats per character", frozenset({"tokens"}): "nats per token"}.get(
        frozenset(units), "nats per token; per character for character-level runs")
    out += ["", f"{len(rows)} comparisons, {len(claims)} of them with a claim whose planned seeds are all recorded"
            f"{f' ({pending} more still running: pending, outside the counts and the correction)' if pending else ''}"
            f", each its own 95% Student-t interval over seeds (final val loss, {per}; negative: the variant "
            f"is lower). p (BH): the two-sided paired t test's p on the seeds planned before any look, adjusted by "
            f"Benjamini-Hochberg over {family}; a row with seeds added after a look also gives the p of all its "
            f"seeds, adjusted over the same rows with all theirs. With no effect anywhere, about "
            f"{len(claims) / 20:.1f} of the {len(claims)} would exclude 0 by chance. On the planned seeds: "
            f"{sum(w.startswith('finding') for w in words)} findings (p (BH) <= 0.05: the correction survived), "
            f"{sum(w.startswith('lead') for w in words)} leads (the interval excludes 0 only uncorrected), "
            f"{sum(w.endswith('against the claim') for w in words)} of these against their claim, the rest "
            f"unresolved. With every seed: {excluding} exclude 0 and {sum(p <= 0.05 for p in adjusted.values())} "
            f"survive the correction (the verdicts stay the intervals'). "
            + ("A ladder's row is its compute multiplier (> 1: the variant reaches the reference's loss with less "
               "compute) with its 95% interval over seeds and rungs; its sign on the loss scale, and its p, join "
               "the same family. " if any("ladder" in c for c, _ in rows) else "")
            + f"Runs: {'; '.join(modes)}. Full tables: <ablation>.md beside this summary."]
    return "\n".join(out)


README_BEGIN = "<!-- summary: python -m research.plot configs/ablations/*.py --out=assets --readme=results/README.md -->"
README_END = "<!-- end of summary -->"


def replace_block(text, block, path):
    """text with what lies between README_BEGIN and README_END replaced by block; UserError if the
    markers are missing."""
    i = text.find(README_BEGIN)
    j = text.find(README_END, i + 1) if i >= 0 else -1
    if j < 0:
        raise UserError(f"{path} has no summary block: put the lines {README_BEGIN!r} and {README_END!r} "
                        f"where the table goes")
    return text[:i + len(README_BEGIN)] + "\n" + block + "\n" + text[j:]


def lr_table(spec, results):
    """Markdown: per setting, the LR sweep of each variant at seeds[0] and its best; with tuning_seeds,
    tuning_lr_table instead."""
    if spec["tuning_seeds"]:
        return tuning_lr_table(spec, results)
    mults, variants = sorted(spec["lr_multipliers"]), list(spec["variants"])
    base, out = variants[0], []
    tuned = " The other seeds run at each variant's best multiplier (tune_lr)." if spec["tune_lr"] else ""
    for setting in spec["settings"]:
        out += [f"LR sweep, `{setting}`, seed {spec['seeds'][0]} (LR keys scaled by the multiplier; "
                f"one seed: a choice, not evidence).{tuned}", "",
                "| variant | " + " | ".join(f"x{m:g}" for m in mults) + " | best | best vs baseline's best |",
                "|---|" + "---|" * (len(mults) + 2)]
        bests = {}
        for v in variants:
            lr_recs = results[(setting, v)]["lr"]
            vals = {m: final_val(lr_recs[m]) for m in mults if m in lr_recs}
            bests[v] = min(vals.items(), key=lambda kv: kv[1]) if len(vals) == len(mults) else None  # as chosen_lr
            edge = ", edge" if bests[v] and bests[v][0] in (mults[0], mults[-1]) else ""
            best_txt = f"{bests[v][1]:.4f} (x{bests[v][0]:g}{edge})" if bests[v] else "-"
            gap = f"{bests[v][1] - bests[base][1]:+.4f}" if bests[v] and bests.get(base) and v != base else "-"
            out.append(f"| {v} | " + " | ".join(f"{vals[m]:.4f}" if m in vals else "-" for m in mults)
                       + f" | {best_txt} | {gap} |")
        out += ["", "edge: the best is the sweep's smallest or largest multiplier; the optimum may lie beyond it.", ""]
    return out


def tuning_lr_table(spec, results):
    """Markdown: the LR sweep on the tuning seeds, in each setting whose sweep chooses an LR (tune_setting):
    per variant and multiplier the mean final val loss over the tuning seeds, then each seed's (a mean
    only once every tuning seed is recorded); the multiplier ablation.lr_choice chooses, in bold and in
    the `chosen` column, or "edge: extend lr_multipliers" when lr_choice finds the lowest mean at the
    grid's edge; and the chosen mean minus the baseline's. The choice is lr_choice's over the records
    shown (those of the tables' training mode)."""
    mults, variants, tuners = sorted(spec["lr_multipliers"]), list(spec["variants"]), tuning_seeds(spec)
    base, out = variants[0], []
    chooses = {}  # sweep setting -> the settings its choice serves
    for s in spec["settings"]:
        chooses.setdefault(tuning_setting(spec, s), []).append(s)
    for setting, served in chooses.items():
        serves = "for this setting" if served == [setting] else \
            f"for {'every setting' if len(served) == len(spec['settings']) else 'the settings'} " \
            f"({', '.join(f'`{s}`' for s in served)})"
        out += [f"LR sweep, `{setting}`, tuning seeds {', '.join(map(str, tuners))} (LR keys scaled by the "
                f"multiplier; each cell: the mean final val loss over the tuning seeds, then per seed). Each "
                f"variant runs at the multiplier of its lowest mean (in bold) {serves}, with every seed of the "
                f"tables ({', '.join(map(str, spec['seeds']))}); the tuning seeds chose it, so they stay out of "
                f"every table.", "",
                "| variant | " + " | ".join(f"x{m:g}" for m in mults) + " | chosen | chosen vs baseline's |",
                "|---|" + "---|" * (len(mults) + 2)]
        means, best = {}, {}
        for v in variants:
            sweep = results[(setting, v)]["tuning"]
            finals = {m: [final_val(sweep[m][s]) if s in sweep.get(m, {}) else None for s in tuners] for m in mults}
            means[v] = {m: statistics.fmean(xs) for m, xs in finals.items() if None not in xs}
            recorded = {r["config_hash"]: r for by_seed in sweep.values() for r in by_seed.values()}
            chosen, why = lr_choice(spec, setting, v, recorded)
            best[v] = means[v].get(chosen)
            cells = []
            for m in mults:
                per_seed = ", ".join("-" if x is None else f"{x:.4f}" for x in finals[m])
                cell = "-" if finals[m] == [None] * len(tuners) else \
                    f"{means[v][m]:.4f} ({per_seed})" if m in means[v] else f"- ({per_seed})"
                cells.append(f"**{cell}**" if m == chosen else cell)
            chosen_txt = (f"x{chosen:g}: {means[v][chosen]:.4f}" if chosen is not None
                          else "edge: extend lr_multipliers" if why == "edge" else "-")
            gap = f"{best[v] - best[base]:+.4f}" if v != base and None not in (best[v], best[base]) else "-"
            out.append(f"| {v} | " + " | ".join(cells) + f" | {chosen_txt} | {gap} |")
        out += ["", "edge: the lowest mean is at the grid's smallest or largest multiplier, and the optimum may lie "
                "beyond it: no multiplier is chosen and the variant's table runs wait (extend lr_multipliers); "
                "-: the sweep is not fully recorded yet.", ""]
    return out


def token_ratios(fit, points, loss, tokens):
    """(fitted, fit-free): the tokens the reference needs to reach `loss`, over `tokens`; fitted from its
    fit (tokens_to_reach: inf at or below the fit's floor E), fit-free read off its budgets
    (interpolated_tokens: None outside them). points: the reference's [(tokens, final loss)] by tokens."""
    read = interpolated_tokens(points, loss)
    return tokens_to_reach(fit, loss) / tokens, None if read is None else read / tokens


def multipliers(spec, results, setting):
    """The token multiplier of each variant against the reference (the first variant with token budgets).

    Returns the reference; {seed: fit or error text}; the budgets' token range per seed; and per
    variant, the reference included, {seed: dict(fitted, free, raw, need, wall)}:
    raw = token_ratios of the variant's final loss and tokens, and fitted, free = raw divided by
    the reference's own raw (its 1x run, same seed), so the reference scores exactly 1 by
    construction (its fit need not pass through its own 1x point; the reference's raw is the
    normalizer); free is None where either read lies outside the budgets; need = the fit's tokens
    (unnormalized, for the extrapolation note); wall = the variant's recorded wall_s over the
    reference's 1x run's, same seed (None where a record lacks it). A seed without a fit or
    without the reference's 1x run has no multiplier."""
    ref = next(v for v in spec["variants"] if v in spec["iter_multipliers"])
    fits, span, points = {}, {}, {}
    for seed, budgets in results[(setting, ref)]["budgets"].items():
        pts = points[seed] = sorted((r["final"]["tokens"], final_val(r)) for r in budgets.values())
        span[seed] = (pts[0][0], pts[-1][0])
        try:
            fits[seed] = fit_power_law(*zip(*pts)) if len(pts) >= 3 else f"{len(pts)} budgets recorded"
        except ValueError as e:
            fits[seed] = str(e)
    per_variant = {}
    ref_runs = results[(setting, ref)]["seeds"]
    for v in [ref, *(v for v in spec["variants"] if v != ref)]:
        for seed, rec in results[(setting, v)]["seeds"].items():
            if not isinstance(fits.get(seed), tuple) or seed not in ref_runs:
                continue
            base_rec = ref_runs[seed]
            norm = token_ratios(fits[seed], points[seed], final_val(base_rec), base_rec["final"]["tokens"])
            raw = token_ratios(fits[seed], points[seed], final_val(rec), rec["final"]["tokens"])
            free = None if None in (raw[1], norm[1]) else raw[1] / norm[1]
            wall = rec["wall_s"] / base_rec["wall_s"] if rec.get("wall_s") and base_rec.get("wall_s") else None
            per_variant.setdefault(v, {})[seed] = dict(fitted=raw[0] / norm[0], free=free, raw=raw,
                                                       need=tokens_to_reach(fits[seed], final_val(rec)),
                                                       wall=wall)
    return ref, fits, span, per_variant


def multiplier_table(spec, results):
    """Markdown: per setting, the token multiplier of each variant (multipliers): without the fit,
    fitted, and the wall-clock ratio, per seed and as a mean with its 95% t interval."""
    out = []
    for setting in spec["settings"]:
        ref, fits, span, per_variant = multipliers(spec, results, setting)
        cfg, params = results[(setting, ref)]["config"], results[(setting, ref)]["params"]
        at = f" at {params / 1e6:.3g}M parameters and {per_param(cfg, params)}" if cfg and params else ""
        out += [f"Token multiplier{at}, `{setting}`: the tokens `{ref}` needs to reach the variant's final val "
                f"loss over the variant's tokens, divided per seed by the same ratio for `{ref}`'s own 1x run "
                f"(the normalizer; so `{ref}` scores exactly 1); > 1: the variant is more token-efficient. "
                f"Without the fit: the tokens read off `{ref}`'s own budgets, linear in (log tokens, loss) "
                f"between the two that bracket the loss (no value outside them); fitted: from its fit "
                f"L(D) = E + A D^-alpha per seed. Where the two agree, the fit's form does not make the number. "
                f"Mean and 95% t interval over seeds. Wall-clock ratio: the variant's recorded wall time over "
                f"`{ref}`'s 1x run's, same seed (each run's last process, compilation included, beside whatever "
                f"else ran on the machine: a rough cost ratio, not a timing).", ""]
        own = per_variant.get(ref, {})
        for seed in sorted(fits):
            f = fits[seed]
            fit_txt = f"E = {f[0]:.4f}, A = {f[1]:.4g}, alpha = {f[2]:.3f}" if isinstance(f, tuple) else f"no fit ({f})"
            if seed in own:
                raw = own[seed]["raw"]
                fit_txt += (f"; normalizer (`{ref}`'s own 1x run): fitted {raw[0]:.4f}, without the fit "
                            + ("-" if raw[1] is None else f"{raw[1]:.4f}"))
            elif isinstance(f, tuple):
                fit_txt += f"; no 1x run of `{ref}` recorded: no multiplier"
            out.append(f"- seed {seed}: {fit_txt}")
        out += ["", "| variant | without the fit: per seed | mean [95% CI] | fitted: per seed | mean [95% CI] | note "
                "| wall-clock ratio: mean [95% CI] |",
                "|---|---|---|---|---|---|---|"]
        for v, by_seed in per_variant.items():
            if v == ref:
                continue
            seeds = sorted(by_seed)
            vals = [by_seed[s]["fitted"] for s in seeds]
            finite = [m for m in vals if math.isfinite(m)]
            outside = [s for s in seeds if not span[s][0] <= by_seed[s]["need"] <= span[s][1]]
            note = []
            if len(finite) < len(vals):  # censored: dropping them would bias the mean down, so no interval
                note.append(f"{len(vals) - len(finite)} seed(s) below the fit's floor E (multiplier unbounded): "
                            f"no mean or interval")
            if outside:
                note.append(f"extrapolated beyond the budgets for seed(s) {', '.join(map(str, outside))}")
            fitted_txt = fmt_ci(mean_ci(vals) if len(finite) == len(vals) else None, ".3f")
            read = [by_seed[s]["free"] for s in seeds]
            read_txt = fmt_ci(mean_ci(read) if None not in read else None, ".3f")  # a seed outside: no interval
            walls = [by_seed[s]["wall"] for s in seeds if by_seed[s]["wall"] is not None]
            wall_txt = fmt_ci(mean_ci(walls), ".2f")
            if walls and len(walls) < len(seeds):  # a record without wall_s
                wall_txt += f" (n={len(walls)})"
            out.append(f"| {v} | {', '.join('-' if m is None else f'{m:.3f}' for m in read)} | {read_txt} | "
                       f"{', '.join(f'{m:.3f}' for m in vals)} | {fitted_txt} | {'; '.join(note) or '-'} | "
                       f"{wall_txt} |")
        out.append("")
    return out


# The paper's regime for its compute multiplier: about 100 (BPE) tokens per parameter.
PAPER_TPP = (80, 125)


def ladder_rows(spec, results):
    """Per ladder (spec["ladders"]: settings of growing size) and variant, the compute multiplier
    against the reference (the first variant) with its interval over seeds: stats.ladder_multiplier
    on each rung's planned seeds that both have (the reference's mean final loss per rung fitted
    against training compute C = train_flops, L(C) = E + A C^-alpha; the seed spreads pooled over
    the rungs with several seeds). A summary row each: setting = the ladder's name; ci on the loss
    scale (-ln M and its interval: negative, the variant reaches the loss with less compute), so
    the summary's words and signs read as the paired rows'; p its t test; claim from expected.
    Keys beyond comparisons': "ladder" (the ladder_multiplier result, or the reason there is none),
    "per_rung" {setting: seeds used}, "tpp" {setting: tokens per parameter}."""
    ref, rows = list(spec["variants"])[0], []
    for name, settings in spec["ladders"].items():
        tpp = {st: run_tokens(results[(st, ref)]["config"]) / results[(st, ref)]["params"]
               for st in settings if results[(st, ref)]["config"] and results[(st, ref)]["params"]}
        for v in (v for v in spec["variants"] if v != ref):
            per_rung, diffs, planned_n, args = {}, [], 0, ([], [], [], [])
            for st in settings:
                a, b = results[(st, v)]["seeds"], results[(st, ref)]["seeds"]
                planned = planned_table_seeds(spec, st)
                planned_n += len(planned)
                seeds = [s for s in planned if s in a and s in b]
                per_rung[st] = seeds
                diffs += [final_val(a[s]) - final_val(b[s]) for s in seeds]
                if seeds:
                    args[0].append(train_flops(b[seeds[0]]["config"]))
                    args[1].append([final_val(b[s]) for s in seeds])
                    args[2].append([final_val(a[s]) for s in seeds])
                    args[3].append(train_flops(a[seeds[0]]["config"]))
            try:
                fit = ladder_multiplier(args[0], args[1], args[2], args[3]) if len(args[0]) == len(settings) else \
                    f"rungs without a paired seed: {', '.join(st for st in settings if not per_rung[st])}"
            except ValueError as e:
                fit = str(e)
            ok = isinstance(fit, dict) and math.isfinite(fit["multiplier"])
            ci = None if not ok else (-math.log(fit["multiplier"]), None, None) if fit["low"] is None else \
                (-math.log(fit["multiplier"]), -math.log(fit["high"]), -math.log(fit["low"]))
            expected = spec["expected"].get(v)
            word = ("-" if not expected else "unresolved" if ci is None else
                    "unresolved (one seed a rung: no interval)" if ci[1] is None else
                    verdict(ci, fit["df"] + 1, expected))
            rows.append(dict(setting=name, variant=v, reference=ref, seeds=sorted({s for x in per_rung.values()
                                                                                   for s in x}),
                             diffs=diffs, planned_diffs=diffs, planned_n=planned_n, ci=ci, planned_ci=ci,
                             p=fit["p"] if ok else None, expected=expected, verdict=word, key=("ladder", name, v),
                             ladder=fit, per_rung=per_rung, tpp=tpp))
    return rows


def ladder_text(c):
    """'M [low, high]' of a ladder row (ladder_rows), or why it has none."""
    fit = c["ladder"]
    if not isinstance(fit, dict):
        return f"no multiplier ({fit})"
    if fit["low"] is None:
        return f"x{fit['multiplier']:.3f} (no rung with two seeds: no interval)"
    return f"x{fit['multiplier']:.3f} [{fit['low']:.3f}, {fit['high']:.3f}]"


def ladder_table(spec, results):
    """Markdown: per ladder and variant the compute multiplier with its 95% interval, p and verdict
    (ladder_rows), the multiplier at each rung, and the seeds each rung used; called the paper's
    quantity only where every rung is at its regime (PAPER_TPP, BPE)."""
    out, rows = [], ladder_rows(spec, results)
    for name, settings in spec["ladders"].items():
        mine = [c for c in rows if c["setting"] == name]
        tpp, ref = mine[0]["tpp"], mine[0]["reference"]
        cfg = results[(settings[0], ref)]["config"] or {}
        paper = unit(cfg) == "tokens" and len(tpp) == len(settings) and \
            all(PAPER_TPP[0] <= t <= PAPER_TPP[1] for t in tpp.values())
        regime_txt = ", ".join(f"`{st}` {t:.3g}" for st, t in tpp.items())
        what = ("the paper's compute multiplier (its regime: about 100 tokens per parameter)" if paper else
                f"a compute multiplier, not the paper's quantity (its regime is about 100 BPE tokens per parameter; "
                f"these rungs: {regime_txt or 'no config yet'} {unit(cfg)} per parameter)")
        out += [f"Ladder `{name}` ({', '.join(f'`{s}`' for s in settings)}): {what}. `{ref}`'s mean final loss per "
                f"rung against its training compute C (FLOPs per token x tokens) is fitted by L(C) = E + A C^-alpha; "
                f"a variant's multiplier at a rung is the compute `{ref}` needs to reach the variant's mean loss over "
                f"the variant's compute, divided by the same ratio for `{ref}`'s own (> 1: the variant is more "
                f"compute-efficient); the ladder's is their geometric mean. 95% t interval by the delta method, the "
                f"seed spreads (paired differences, and `{ref}`'s losses through the fit) pooled over the rungs with "
                f"two seeds or more; p: its t test of a multiplier of 1; verdict from the interval against 1.", ""]
        for c in mine:
            if isinstance(c["ladder"], dict):
                e, amp, alpha = c["ladder"]["fit"]
                out.append(f"- fit of `{ref}`: E = {e:.4f}, A = {amp:.4g}, alpha = {alpha:.3f}")
                break
        out += ["", "| variant | " + " | ".join(f"`{s}`" for s in settings) + " | multiplier [95% CI] | p | df | "
                "verdict | seeds per rung |", "|---|" + "---|" * len(settings) + "---|---|---|---|---|"]
        for c in mine:
            fit = c["ladder"]
            cells = [f"{m:.3f}" for m in fit["per_rung"]] if isinstance(fit, dict) else ["-"] * len(settings)
            p_txt = "-" if c["p"] is None else f"{c['p']:#.3g}"
            df = fit["df"] if isinstance(fit, dict) else "-"
            out.append(f"| {c['variant']} | " + " | ".join(cells) + f" | {ladder_text(c)} | {p_txt} | {df} | "
                       f"{c['verdict']} | {', '.join(str(len(x)) for x in c['per_rung'].values())} |")
        out.append("")
    return out


def width_trend(spec, results):
    """Each variant's paired difference to the baseline against the model width, for an
    ablation whose settings vary n_embd (c8_width): [(variant, [(n_embd, params, comparison)])]
    with params the baseline's count and comparison a dict of comparisons(), widths ascending.
    [] when the settings share one width or a setting has no config yet."""
    base = list(spec["variants"])[0]
    widths = {s: (results[(s, base)]["config"] or {}).get("n_embd") for s in spec["settings"]}
    if None in widths.values() or len(set(widths.values())) < 2:
        return []
    by_variant = {}
    for c in comparisons(spec, results):
        if c["reference"] == base:
            by_variant.setdefault(c["variant"], []).append(
                (widths[c["setting"]], results[(c["setting"], base)]["params"], c))
    return [(v, sorted(points, key=lambda p: p[0])) for v, points in by_variant.items()]


def tpp_trend(spec, results):
    """Each variant's paired difference to the baseline against tokens per parameter, for an ablation
    whose settings differ in their token budget (run_tokens) at one model size (c8_regime):
    [(variant, [(tokens per parameter, tokens, params, comparison)])] with tokens and params the
    baseline's (param_count) and comparison a dict of comparisons(), budgets ascending. [] when the
    settings share one budget, differ in the baseline's parameter count, or a setting has no config yet."""
    base = list(spec["variants"])[0]
    cfgs = {s: results[(s, base)]["config"] for s in spec["settings"]}
    params = {s: results[(s, base)]["params"] for s in spec["settings"]}
    if None in cfgs.values() or None in params.values() or len(set(params.values())) > 1:
        return []
    tokens = {s: run_tokens(cfg) for s, cfg in cfgs.items()}
    if len(set(tokens.values())) < 2:
        return []
    by_variant = {}
    for c in comparisons(spec, results):
        s = c["setting"]
        if c["reference"] == base:  # the first of a pair: the table's row, not an extra comparison's repeat
            by_variant.setdefault(c["variant"], {}).setdefault(s, (tokens[s] / params[s], tokens[s], params[s], c))
    return [(v, sorted(points.values(), key=lambda p: p[1])) for v, points in by_variant.items()]


def tpp_table(spec, trend, cfg):
    """Markdown: the tpp_trend's numbers, one row per variant and token budget (characters per
    parameter with their GPT-2 token equivalent, for a character-level dataset: cfg is a setting's
    config); then, per variant, the paired test of the change of its gap from the smallest to the
    largest budget: per seed (gap at the largest) - (gap at the smallest), mean, 95% t interval, p."""
    base, params = list(spec["variants"])[0], trend[0][1][0][2]
    what, chars = unit(cfg), CHARS_PER_BPE_TOKEN.get(cfg.get("dataset"))
    out = [f"The gap against {what} per parameter at {params / 1e6:.3g}M parameters (`{base}`'s): each variant's "
           f"paired difference to `{base}` (variant minus {base}, same seed and setting; final val loss), its mean "
           f"and 95% t interval over seeds per budget ({spec['name']}_tpp.png).", "",
           f"| variant | {what} per parameter{' (GPT-2 tokens)' if chars else ''} | {what} | seeds | "
           f"mean diff [95% CI] |", "|---|---|---|---|---|"]
    for v, points in trend:
        out += [f"| {v} | {tpp:.3g}{f' ({tpp / chars:.3g})' if chars else ''} | {tokens / 1e6:.3g}M | "
                f"{len(c['diffs'])} | {fmt_ci(c['ci'])} |" for tpp, tokens, _, c in points]
    out += ["", "Does the gap change with the budget? Per seed, the gap at the largest budget minus the gap at the "
                "smallest (same seed in both), its mean, 95% t interval and two-sided paired t p. Against a negative "
                "gap, a positive change means it narrows.", "",
            "| variant | change | seeds | mean [95% CI] | p |", "|---|---|---|---|---|"]
    for v, points in trend:
        (lo_tpp, _, _, first), (hi_tpp, _, _, last) = points[0], points[-1]
        seeds = [s for s in last["seeds"] if s in first["seeds"]]
        change = [last["diffs"][last["seeds"].index(s)] - first["diffs"][first["seeds"].index(s)] for s in seeds]
        p_txt = f"{paired_t_p(change):.3g}" if len(change) > 1 else "-"
        out.append(f"| {v} | at {hi_tpp:.3g} minus at {lo_tpp:.3g} | {len(change)} | {fmt_ci(mean_ci(change))} | "
                   f"{p_txt} |")
    return out + [""]


# -----------------------------------------------------------------------------
# Figures


def eval_curve(rec):
    """(tokens in millions, val loss) of a record's evals after iteration 0."""
    evals = [r for r in rec["evals"] if r["iter"] > 0]
    return [r["tokens"] / 1e6 for r in evals], [r["val_loss"] for r in evals]


def plot_curves(spec, results, path):
    """Top: val loss per variant (mean over seeds, min-max band). Bottom: the paired
    difference to the baseline (same seed), its mean and 95% t interval over seeds."""
    settings, base = list(spec["settings"]), list(spec["variants"])[0]
    fig, axes = plt.subplots(2, len(settings), figsize=(6 * len(settings), 7.5), squeeze=False,
                             sharex="col", gridspec_kw={"height_ratios": [3, 2]})
    for col, setting in enumerate(settings):
        top, bottom = axes[0][col], axes[1][col]
        base_runs = results[(setting, base)]["seeds"]
        for v in spec["variants"]:
            runs = results[(setting, v)]["seeds"]
            if not runs:
                top.plot([], [])
                bottom.plot([], [])  # keep the colours of the two panels in step
                continue
            curves = {seed: eval_curve(rec) for seed, rec in runs.items()}
            n = min(len(c[1]) for c in curves.values())
            tokens = next(iter(curves.values()))[0][:n]
            vals = [[c[1][i] for c in curves.values()] for i in range(n)]
            line, = top.plot(tokens, [statistics.fmean(x) for x in vals], marker="o", ms=3,
                             label=f"{v} (n={len(runs)})")
            top.fill_between(tokens, [min(x) for x in vals], [max(x) for x in vals], color=line.get_color(), alpha=0.2)
            both = [s for s in curves if s in base_runs]
            if v == base or not both:
                bottom.plot([], [])
                continue
            base_curves = {s: eval_curve(base_runs[s])[1] for s in both}
            m = min(n, *(len(c) for c in base_curves.values()))
            cis = [mean_ci([curves[s][1][i] - base_curves[s][i] for s in both]) for i in range(m)]
            bottom.plot(tokens[:m], [c[0] for c in cis], marker="o", ms=3, color=line.get_color(),
                        label=f"{v} (n={len(both)})")
            if len(both) > 1:
                bottom.fill_between(tokens[:m], [c[1] for c in cis], [c[2] for c in cis], color=line.get_color(),
                                    alpha=0.2)
        top.set_ylabel(f"validation loss ({loss_unit(spec, short=True)})")
        top.set_title(f"{spec['name']}: {setting}")
        top.grid(alpha=0.3)
        top.legend()
        bottom.axhline(0.0, color="black", lw=0.8)
        bottom.set_xlabel("training tokens (millions)")
        bottom.set_ylabel(f"val loss minus {base}'s\n(same seed; mean, 95% t band)")
        bottom.grid(alpha=0.3)
        if bottom.get_legend_handles_labels()[0]:
            bottom.legend(fontsize=8)
    fig.suptitle(spec["claim"], fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_scales(spec, results, path):
    """Final scale statistics per site (mean, +- std, min-max) of the lowest seed of the last variant
    (first setting), from its record. Returns False when there is nothing to draw."""
    setting, variant = list(spec["settings"])[0], list(spec["variants"])[-1]
    runs = results[(setting, variant)]["seeds"]
    if not runs or not runs[min(runs)]["scales"]:
        return False
    seed = min(runs)
    stats = runs[seed]["scales"]
    labels = [name.replace("blocks.", "L").replace(".scale", "").replace("_scale", "") for name in stats]
    y = np.arange(len(stats))
    s = list(stats.values())
    fig, ax = plt.subplots(figsize=(7, 0.18 * len(stats) + 1.5))
    ax.hlines(y, [x["min"] for x in s], [x["max"] for x in s], color="0.6", lw=1, label="min-max")
    ax.hlines(y, [x["mean"] - x["std"] for x in s], [x["mean"] + x["std"] for x in s], color="C0", lw=3,
              label="mean +- std")
    ax.plot([x["mean"] for x in s], y, "k|", ms=8, label="mean")
    ax.axvline(1.0, color="black", lw=0.6, ls=":")
    ax.set_yticks(y, labels, fontsize=6)
    ax.invert_yaxis()
    ax.set_xlabel("effective gamma (all channels of the site)")
    ax.set_title(f"learned scale vectors at the end: {variant}, {setting}, seed {seed}", fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def plot_run(out_dir, path):
    """One run's curves from its out_dir/log.jsonl (finished or not): train loss per iteration
    (and its running mean over up to 50 iterations, a fifth of those logged) with the val loss at
    each eval; the LR; and, per kind of scale-vector site (q's in_scale, the final norm's, ...), the
    mean effective gamma at each eval, averaged over the layers with their range as a band. The title
    names the last logged iteration and eval (a run may be unfinished). UserError when the log is
    missing or empty."""
    rows, train, evals = read_run(out_dir)
    sites = list(evals[-1]["scales"]) if evals and evals[-1].get("scales") else []
    fig, axes = plt.subplots(1, 3 if sites else 2, figsize=(15 if sites else 10, 4))
    ax = axes[0]
    if train:
        it, loss = np.array([r["iter"] for r in train]), np.array([r["loss"] for r in train])
        ax.plot(it, loss, color="C0", lw=0.5, alpha=0.4, label="train (per iteration)")
        k = min(50, len(loss) // 5)
        if k > 1:
            ax.plot(it[k - 1:], np.convolve(loss, np.ones(k) / k, mode="valid"), color="C0",
                    label=f"train ({k}-iteration mean)")
    ax.plot([r["iter"] for r in evals], [r["val_loss"] for r in evals], "o-", color="C3", ms=3, label="val")
    ax.set_xlabel("iteration")
    ax.set_ylabel("loss (nats per token; per character for a character-level run)")
    ax.legend(fontsize=8)
    axes[1].plot([r["iter"] for r in train], [r["lr"] for r in train], color="C2")
    axes[1].set_xlabel("iteration")
    axes[1].set_ylabel("learning rate (first group)")
    if sites:
        ax = axes[2]
        kinds = {}  # the same site in every layer is one line (the mean over layers) and a band (their range)
        for site in sites:
            kinds.setdefault(site_kind(site), []).append(site)
        for i, (kind, members) in enumerate(kinds.items()):
            per_eval = [(r["iter"], [r["scales"][s]["mean"] for s in members if s in r.get("scales", {})])
                        for r in evals]
            it, means = zip(*[(i_, m) for i_, m in per_eval if m])
            ax.plot(it, [np.mean(m) for m in means], ".-", lw=0.8, ms=3, color=f"C{i % 10}",
                    label=kind + (f" ({len(members)} layers)" if len(members) > 1 else ""))
            if len(members) > 1:
                ax.fill_between(it, [min(m) for m in means], [max(m) for m in means], color=f"C{i % 10}", alpha=0.15)
        ax.axhline(1.0, color="black", lw=0.6, ls=":")
        ax.set_xlabel("iteration")
        ax.set_ylabel("mean effective gamma")
        ax.set_title("per site: the mean over layers (line) and their range (band)", fontsize=8)
        ax.legend(fontsize=6)
    fig.suptitle(f"{out_dir}: logged to iteration {rows[-1]['iter']}, {len(evals)} evals"
                 + (f"; the last at iteration {evals[-1]['iter']}: val loss {evals[-1]['val_loss']:.4f}"
                    if evals else ""), fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_fit(spec, results, path):
    """Per setting: the reference's final loss vs tokens at each budget and its fit, per seed; the
    variants' final losses (1x) as other markers."""
    settings = list(spec["settings"])
    fig, axes = plt.subplots(1, len(settings), figsize=(6 * len(settings), 4.5), squeeze=False)
    for ax, setting in zip(axes[0], settings):
        ref, fits, _, _ = multipliers(spec, results, setting)
        for i, seed in enumerate(sorted(fits)):
            color = f"C{i % 10}"
            budgets = results[(setting, ref)]["budgets"][seed].values()
            pts = sorted((r["final"]["tokens"], final_val(r)) for r in budgets)
            ax.plot([p[0] / 1e6 for p in pts], [p[1] for p in pts], "o", color=color, label=f"{ref}, seed {seed}")
            if isinstance(fits[seed], tuple):
                e, amp, alpha = fits[seed]
                d = np.geomspace(pts[0][0] * 0.8, pts[-1][0] * 1.25, 100)
                ax.plot(d / 1e6, e + amp * d ** -alpha, "-", color=color, lw=1)
            for j, v in enumerate(v for v in spec["variants"] if v != ref):
                rec = results[(setting, v)]["seeds"].get(seed)
                if rec:
                    ax.plot(rec["final"]["tokens"] / 1e6, final_val(rec), "sD^v<>"[j % 6], color=color, mfc="none",
                            label=v if i == 0 else None)
        loss_against_log(ax, "training tokens (millions, log)", f"{spec['name']}: {setting}; fit L(D) = E + A D^-alpha",
                         spec)
    save_figure(fig, path)


def loss_against_log(ax, xlabel, title, spec):
    """An axis of final val loss (in spec's loss_unit) against a log-scaled x (tokens, compute), with its legend."""
    ax.set_xscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(f"final validation loss ({loss_unit(spec, short=True)})")
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7)


def save_figure(fig, path, top=1.0):
    """Lay out (the axes below `top`, a share of the height: room for a suptitle), save and close."""
    fig.tight_layout(rect=(0, 0, 1, top))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_ladder(spec, results, path):
    """Per ladder: each variant's final loss against training compute at each rung (every seed),
    and the reference's fit L(C) = E + A C^-alpha to its mean per rung (ladder_rows)."""
    ladders, rows = list(spec["ladders"]), ladder_rows(spec, results)
    fig, axes = plt.subplots(1, len(ladders), figsize=(6 * len(ladders), 4.5), squeeze=False)
    for ax, ladder in zip(axes[0], ladders):
        ref = list(spec["variants"])[0]
        for j, v in enumerate(spec["variants"]):
            pts = sorted((train_flops(r["config"]), final_val(r)) for st in spec["ladders"][ladder]
                         for r in results[(st, v)]["seeds"].values())
            ax.plot([p[0] for p in pts], [p[1] for p in pts], "osD^v<>"[j % 7], color=f"C{j % 10}", label=v,
                    mfc=None if v == ref else "none")
        fit = next((c["ladder"] for c in rows if c["setting"] == ladder and isinstance(c["ladder"], dict)), None)
        if fit:
            compute = [train_flops(r["config"]) for st in spec["ladders"][ladder]
                       for r in results[(st, ref)]["seeds"].values()]
            c = np.geomspace(min(compute) * 0.8, max(compute) * 1.25, 100)
            e, amp, alpha = fit["fit"]
            ax.plot(c, e + amp * c ** -alpha, "-", color="C0", lw=1)
        loss_against_log(ax, "training compute (FLOPs, log)", f"{spec['name']}: {ladder}; fit of {ref}: "
                         f"L(C) = E + A C^-alpha", spec)
    save_figure(fig, path)


def draw_gaps(ax, spec, series, reference=None):
    """Per variant, its paired differences to the reference (default: the baseline) at each x (dots:
    seeds) and their mean with a 95% t interval; series: [(variant, [(x, comparison dict with
    "diffs" and "ci")])]."""
    for i, (v, points) in enumerate(series):
        color = f"C{i + 1}"  # C0 is the baseline's colour in the curves
        shown = [(x, c) for x, c in points if c["diffs"]]
        for x, c in shown:
            ax.plot([x] * len(c["diffs"]), c["diffs"], ".", color=color, alpha=0.4)
        with_ci = [(x, c["ci"]) for x, c in shown if len(c["diffs"]) > 1]
        ax.errorbar([x for x, _ in with_ci], [ci[0] for _, ci in with_ci],
                    yerr=[[ci[0] - ci[1] for _, ci in with_ci], [ci[2] - ci[0] for _, ci in with_ci]],
                    fmt="o-", color=color, capsize=4,
                    label=f"{v} - {reference or list(spec['variants'])[0]} (mean, 95% t interval; dots: seeds)")
    ax.axhline(0.0, color="black", lw=0.8)


def save_gaps(fig, ax, spec, against, path):
    """Label, title and save a figure drawn by draw_gaps (the gain against `against`)."""
    ax.set_ylabel(f"final val loss difference ({loss_unit(spec, short=True)})")
    ax.set_title(f"{spec['name']}: the gain vs {against} (negative: the variant is lower)", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_width(trend, spec, path):
    """The paired difference to the baseline (per seed, and its mean with a 95% t interval)
    against the width, one series per variant, from width_trend."""
    fig, ax = plt.subplots(figsize=(6, 4))
    draw_gaps(ax, spec, [(v, [(w, c) for w, _, c in points]) for v, points in trend])
    ax.set_xscale("log", base=2)
    ax.set_xticks([w for w, _, _ in trend[0][1]], [f"{w}\n({p / 1e6:.2f}M)" for w, p, _ in trend[0][1]])
    ax.set_xlabel("width n_embd (baseline's parameters)")
    save_gaps(fig, ax, spec, "width", path)


def plot_tpp(trend, spec, path, what="tokens"):
    """The paired difference to the baseline (per seed, and its mean with a 95% t interval) against
    tokens per parameter (log axis), one series per variant, from tpp_trend; the variants are offset
    a little along x so that their intervals do not hide one another."""
    fig, ax = plt.subplots(figsize=(6, 4))
    k = len(trend)
    shifts = [2 ** (0.04 * (i - (k - 1) / 2)) for i in range(k)]
    draw_gaps(ax, spec, [(v, [(tpp * shift, c) for tpp, _, _, c in points])
                         for (v, points), shift in zip(trend, shifts)])
    ax.set_xscale("log")
    ax.minorticks_off()
    ax.set_xticks([p[0] for p in trend[0][1]],
                  [f"{tpp:.3g}\n({tokens / 1e6:.3g}M)" for tpp, tokens, _, _ in trend[0][1]])
    ax.set_xlabel(f"{what} per parameter ({what}; {trend[0][1][0][2] / 1e6:.3g}M parameters, "
                  f"{list(spec['variants'])[0]}'s; series offset a little)")
    save_gaps(fig, ax, spec, f"{what} per parameter", path)


def plot_lr(configs, path):
    """The AdamW LR vs iteration of each {setting: config}, from optim.lr_multiplier."""
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for setting, cfg in configs.items():
        ns = SimpleNamespace(**cfg)
        iters = range(cfg["max_iters"])
        ax.plot(iters, [cfg["learning_rate"] * lr_multiplier(it, ns) for it in iters], label=setting)
    ax.set_xlabel("iteration")
    ax.set_ylabel("AdamW learning rate")
    ax.set_title("learning-rate schedules\n(Muon's LR follows the same multiplier)", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# -----------------------------------------------------------------------------
# The mechanism statistics (mechanism.Mechanism): runs side by side, a file's runs, its pre-registered question


def read_run(out_dir):
    """(rows, train rows, eval rows) of a run's out_dir/log.jsonl, finished or not; UserError (one
    line naming the folder) when the log is missing or has no rows, and (naming the file, line and
    key: ablation.read_rows) for a row without what is drawn from it."""
    log = os.path.join(out_dir, "log.jsonl")
    if not os.path.isfile(log):
        raise UserError(f"--run={out_dir}: no log.jsonl there (point --run at a train.py out_dir)")
    rows = read_rows(log)
    train = [r for r in rows if r["kind"] == "train"]
    evals = [r for r in rows if r["kind"] == "eval"]
    if not train and not evals:
        raise UserError(f"--run={out_dir}: its log.jsonl has no rows yet")
    return rows, train, evals


def site_kind(site):
    """A scale site's kind: its module name without the block index ('blocks.3.attn_norm.scale' ->
    'attn_norm.scale'); a site outside the blocks (norm_f.scale) is a kind of its own."""
    return re.sub(r"^blocks\.\d+\.", "", site)


# panel: (what it shows, its axis label); the statistics are ratios, unitless
MECHANISM_PANELS = {
    "floor": ("floor: min_j gamma_j^2 (the preconditioner's, mean over blocks)", "min_j gamma_j^2"),
    "amp": ("amplification: amp_ratio = rel. change of W~ / of W (mean over blocks)", "amp_ratio"),
    "update": ("update ratio: ||theta_t - theta_s|| / ||theta_s|| of an optimizer group", "update ratio"),
}


def by_kind(flat):
    """{"floor": {site kind: the mean over its blocks of <site>/g2_min}, "amp": the same of
    <site>/amp_ratio, "update": {group: update/<group>}} of a flat mechanism dict (an eval row's
    "mechanism", or a record's "final" or "mean"). A None (an undefined ratio) is left out of its
    kind's mean, and a kind with none left is absent; kinds in the order the dict first names them."""
    out, values = {"floor": {}, "amp": {}, "update": {}}, {"floor": {}, "amp": {}}
    for key, value in flat.items():
        head, _, stat = key.rpartition("/")
        if value is None:
            continue
        if head == "update":
            out["update"][stat] = value
        elif stat in ("g2_min", "amp_ratio"):
            values["floor" if stat == "g2_min" else "amp"].setdefault(site_kind(head), []).append(value)
    for panel, kinds in values.items():
        out[panel] = {kind: statistics.fmean(xs) for kind, xs in kinds.items()}
    return out


def run_series(evals):
    """{(panel, kind or group): ([iteration], [value])} of one run's mechanism statistics over
    training: by_kind of each eval row's "mechanism", at the row's iteration (an interval's key at
    its end; iteration 0 has none)."""
    series = {}
    for r in evals:
        for panel, values in by_kind(r.get("mechanism") or {}).items():
            for name, v in values.items():
                xs, ys = series.setdefault((panel, name), ([], []))
                xs.append(r["iter"])
                ys.append(v)
    return series


def plot_runs(out_dirs, path):
    """Runs side by side on shared axes (x: iteration), one colour each and labelled by its folder's
    name in the figure's legend: the loss (train per iteration, thin; val at each eval, markers),
    each optimizer group's update ratio, and per site kind its floor and its amplification
    (run_series). A panel one run lacks (a site the other variant has) shows the others. UserError
    (one line naming the folder) for a missing log, or one without mechanism statistics."""
    runs = []
    for d in out_dirs:
        _, train, evals = read_run(d)
        if not any(r.get("mechanism") for r in evals):
            raise UserError(f"--run={d}: its log.jsonl has no mechanism statistics (no eval row carries "
                            f"'mechanism'): train it with --mechanism_stats=on to compare runs side by side")
        runs.append((os.path.basename(os.path.abspath(d)), train, evals, run_series(evals)))
    keys = dict.fromkeys(k for *_, series in runs for k in series)
    kinds = dict.fromkeys(name for panel, name in keys if panel != "update")
    order = [k for k in keys if k[0] == "update"] + [(p, kind) for kind in kinds for p in ("floor", "amp")
                                                     if (p, kind) in keys]
    cols = 4
    rows_n = -(-(len(order) + 1) // cols)
    fig, axes = plt.subplots(rows_n, cols, figsize=(4.5 * cols, 3.2 * rows_n), squeeze=False, sharex=True)
    flat = list(axes.ravel())
    for i, (name, train, evals, series) in enumerate(runs):
        color = f"C{i % 10}"
        flat[0].plot([r["iter"] for r in train], [r["loss"] for r in train], color=color, lw=0.5, alpha=0.4,
                     label=f"_{name} train")  # a leading _ keeps it out of the legend
        flat[0].plot([r["iter"] for r in evals], [r["val_loss"] for r in evals], "o-", ms=3, color=color, label=name)
        for ax, key in zip(flat[1:], order):
            if key in series:
                ax.plot(*series[key], ".-", ms=4, lw=0.8, color=color, label=name)
    flat[0].set_title("loss: train per iteration (thin), val at each eval", fontsize=8)
    flat[0].set_ylabel("loss (nats per token or character)")
    for ax, (panel, name) in zip(flat[1:], order):
        ax.set_title(f"{name}\n{MECHANISM_PANELS[panel][0]}", fontsize=7)
        ax.set_ylabel(f"{MECHANISM_PANELS[panel][1]} (unitless)", fontsize=8)
    for ax in flat[:len(order) + 1]:
        ax.set_xlabel("iteration")
        ax.xaxis.set_tick_params(labelbottom=True)
        ax.grid(alpha=0.3)
    for ax in flat[len(order) + 1:]:
        ax.axis("off")
    fig.legend(*flat[0].get_legend_handles_labels(), loc="upper right", fontsize=8)
    fig.suptitle(f"{' vs '.join(name for name, *_ in runs)}: the mechanism statistics at each eval "
                 f"(mechanism.Mechanism; interval ratios over the steps since the last eval)", fontsize=9)
    save_figure(fig, path, top=1 - 0.5 / (3.2 * rows_n))  # half an inch for the title and legend


# The longest figure name --run writes, in bytes: file systems refuse names over 255 bytes, and six
# sweep-named runs (about 45 characters each) joined by "_vs_" pass that.
FIGURE_NAME_BYTES = 120
FIGURE_HASH_CHARS = 10  # hex digits of SHA-256 over the full names: tells shortened lists apart


def figure_name(names):
    """The file name of --run's figure of the runs `names` (their folders' names, in order):
    "<a>_vs_<b>.png" while that fits FIGURE_NAME_BYTES; else each name longer than an equal share of
    the bytes (at least 8) kept as its head and tail around a "~" (a sweep's run names differ at
    both ends: variant and setting first, seed and config hash last), the whole cut where it still
    passes, and "_<hash>.png" appended, the hash taken over the full names, so two lists that
    shorten alike keep two files. Returns (the name, whether it was shortened)."""
    import hashlib
    full = "_vs_".join(names) + ".png"
    if len(full.encode()) <= FIGURE_NAME_BYTES:
        return full, False
    digest = hashlib.sha256("\n".join(names).encode()).hexdigest()[:FIGURE_HASH_CHARS]
    tail = f"_{digest}.png"
    room = FIGURE_NAME_BYTES - len(tail)
    share = max(8, (room - len("_vs_") * (len(names) - 1)) // len(names))
    stem = "_vs_".join(n if len(n.encode()) <= share else head_tail(n, share) for n in names)
    return cut_bytes(stem, room) + tail, True


def cut_bytes(text, limit, end=False):
    """text's first (end: last) characters that fit `limit` bytes of UTF-8, never half a character."""
    data = text.encode()
    return (data[-limit:] if end else data[:limit]).decode(errors="ignore") if limit > 0 else ""


def head_tail(name, limit):
    """name in `limit` bytes of UTF-8: its head and its tail around a "~"."""
    head = (limit - 1) // 2
    return cut_bytes(name, head) + "~" + cut_bytes(name, limit - 1 - head, end=True)


def draw_runs(out_dirs, out):
    """plot_run's figure for one --run (out/<name>.png), plot_runs' for several (out/<a>_vs_<b>.png;
    figure_name shortens a long one and appends a hash); returns (its path, a note saying it was
    shortened, else ""). UserError for an empty --run or two runs of one folder name (their legend
    labels, the folder names, would not tell them apart)."""
    if any(not d.strip() for d in out_dirs):
        raise UserError("--run is empty: name a train.py out_dir")
    names = [os.path.basename(os.path.abspath(d)) for d in out_dirs]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise UserError(f"--run: {', '.join(twice)} given twice (runs are labelled by their folder's name): "
                        f"give each run once, from folders of different names")
    os.makedirs(out, exist_ok=True)
    name, shortened = figure_name(names)
    path = os.path.join(out, name)
    if len(out_dirs) == 1:
        plot_run(out_dirs[0], path)
    else:
        plot_runs(out_dirs, path)
    note = (f" (the runs' names shortened to fit {FIGURE_NAME_BYTES} bytes, with a hash of the full names; "
            f"the figure's title names each run)" if shortened else "")
    return path, note


def record_by_kind(rec):
    """by_kind of a record's mechanism statistics: the floor at the end (its "final"), the
    amplification and the update ratios as their means over the run's intervals ("mean"); None for
    a record without them."""
    mech = rec.get("mechanism")
    if not mech:
        return None
    final, mean = by_kind(mech["final"]), by_kind(mech["mean"])
    return {"floor": final["floor"], "amp": mean["amp"], "update": mean["update"]}


def mechanism_entries(spec, results):
    """[(setting, variant, seeds, {panel: {kind or group: [value per seed]}})] of record_by_kind over
    each setting's and variant's table seeds that carry the statistics (seeds ascending), in table
    order; [] when no record carries them."""
    out = []
    for setting in spec["settings"]:
        for v in spec["variants"]:
            runs = sorted((seed, record_by_kind(r)) for seed, r in results[(setting, v)]["seeds"].items())
            runs = [(seed, x) for seed, x in runs if x]
            if not runs:
                continue
            panels = {p: {} for p in MECHANISM_PANELS}
            for _, x in runs:
                for panel, values in x.items():
                    for name, value in values.items():
                        panels[panel].setdefault(name, []).append(value)
            out.append((setting, v, [seed for seed, _ in runs], panels))
    return out


def plot_mechanism(entries, spec, path):
    """Per panel (the floor at the end; the amplification and the update ratios as means over the
    intervals), one row per site kind or group: each setting's and variant's mean over seeds (dot)
    and the seeds' range (bar), from mechanism_entries."""
    fig, axes = plt.subplots(1, 3, figsize=(17, 1.5 + 0.3 * max(len(e[3]["floor"]) for e in entries) * len(entries)
                                            ** 0.5), squeeze=False)
    k = len(entries)
    for ax, (panel, (what, label)) in zip(axes[0], MECHANISM_PANELS.items()):
        names = list(dict.fromkeys(n for *_, panels in entries for n in panels[panel]))
        for j, (setting, v, seeds, panels) in enumerate(entries):
            pts = [(i + 0.7 * (j - (k - 1) / 2) / k, panels[panel][n]) for i, n in enumerate(names)
                   if n in panels[panel]]
            y = [p[0] for p in pts]
            ax.hlines(y, [min(p[1]) for p in pts], [max(p[1]) for p in pts], color=f"C{j % 10}", lw=1.5)
            ax.plot([statistics.fmean(p[1]) for p in pts], y, "o", ms=4, color=f"C{j % 10}",
                    label=f"{v}, {setting} (n={len(seeds)})")
        ax.set_yticks(range(len(names)), names, fontsize=7)
        ax.invert_yaxis()
        ax.set_xlabel(f"{label} (unitless)" + (" at the end" if panel == "floor" else ", mean over intervals"))
        ax.set_title(what, fontsize=8)
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=7)
    fig.suptitle(f"{spec['name']}: the mechanism statistics per site kind: mean over seeds (dot) and the seeds' "
                 f"range (bar)", fontsize=9)
    save_figure(fig, path)


def question_rows(spec, results):
    """The rows of the file's mechanism_question (variant v, reference r, settings [a, b]): per
    setting, v - r of stats.mechanism_scalar paired by seed over the planned table seeds both
    record (mean_ci, paired_t_p, df = n - 1); then b's paired differences minus a's, unpaired
    (welch_t: Welch-Satterthwaite df). Dicts of what, test, seeds (text), diffs (per seed; None for
    Welch's), ci, p, df, p_bh, verdict, strength. The three are a family of their own: BH over
    them once each has a p and every planned seed (until then p_bh None, strength "pending"). No
    direction was claimed: verdict "differs" when the interval excludes 0, else "unresolved";
    strength "finding" when also p (BH) <= 0.05, "lead" when only the interval excludes 0, else "-"."""
    q = spec["mechanism_question"]
    v, ref, (s0, s1) = q["variant"], q["reference"], q["settings"]
    rows, per = [], {}
    for st in (s0, s1):
        a, b = results[(st, v)]["seeds"], results[(st, ref)]["seeds"]
        planned = planned_seeds(spec, results, st)
        seeds = [s for s in planned if s in a and s in b
                 and None not in (mechanism_scalar(a[s]), mechanism_scalar(b[s]))]
        per[st] = [mechanism_scalar(a[s]) - mechanism_scalar(b[s]) for s in seeds]
        rows.append(dict(what=f"`{st}`: {v} - {ref}", test="paired t", seeds=f"{len(seeds)} of {len(planned)}",
                         diffs=per[st], complete=len(seeds) == len(planned), ci=mean_ci(per[st]),
                         p=paired_t_p(per[st]), df=len(seeds) - 1 if len(seeds) > 1 else None))
    ci, p, df = welch_t(per[s1], per[s0]) if min(len(per[s0]), len(per[s1])) > 1 else (None, None, None)
    rows.append(dict(what=f"`{s1}` minus `{s0}` of those differences", test="Welch",
                     seeds=f"{len(per[s1])} and {len(per[s0])}", diffs=None,
                     complete=rows[0]["complete"] and rows[1]["complete"], ci=ci, p=p, df=df))
    family = all(r["complete"] and r["p"] is not None for r in rows)
    for r, p_bh in zip(rows, bh_adjust([r["p"] for r in rows]) if family else [None] * 3):
        excludes = excludes_zero(r["ci"])
        r.update(p_bh=p_bh, verdict="differs" if excludes else "unresolved",
                 strength=("pending (the family's planned seeds)" if not family else
                           "finding" if excludes and p_bh <= 0.05 else "lead" if excludes else "-"))
    return rows


def question_table(spec, rows):
    """Markdown: the mechanism question's three rows (question_rows) and what they compute."""
    q = spec["mechanism_question"]
    v, ref, (s0, s1) = q["variant"], q["reference"], q["settings"]
    out = [f"The mechanism question (registered with the file; its three rows are a family of their own, outside "
           f"the summary's): `{v}` - `{ref}` of the mechanism scalar (stats.mechanism_scalar: the mean over a "
           f"run's input-role sites of amp_ratio's mean over its eval intervals; unitless) per setting, paired "
           f"by seed (95% Student t interval, two-sided paired t p, df = seeds - 1); and `{s1}`'s paired "
           f"differences minus `{s0}`'s, unpaired by Welch's t (95% interval with the Welch-Satterthwaite df, "
           f"two-sided p). p (BH): Benjamini-Hochberg over these three rows, once every planned seed is "
           f"recorded. No direction was claimed: verdict \"differs\" when the interval excludes 0, "
           f"\"unresolved\" otherwise; strength \"finding\" when also p (BH) <= 0.05, \"lead\" when only the "
           f"interval excludes 0 ({spec['name']}_mechanism_question.png).", "",
           "| row | test | seeds | per seed | mean [95% CI] | df | p | p (BH) | verdict | strength |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        per_seed = "-" if not r["diffs"] else ", ".join(f"{d:+.4f}" for d in r["diffs"])
        df = "-" if r["df"] is None else f"{r['df']}" if isinstance(r["df"], int) else f"{r['df']:.3g}"
        p, p_bh = ("-" if x is None else f"{x:#.3g}" for x in (r["p"], r["p_bh"]))
        out.append(f"| {r['what']} | {r['test']} | {r['seeds']} | {per_seed} | {fmt_ci(r['ci'])} | {df} | {p} | "
                   f"{p_bh} | {r['verdict']} | {r['strength']} |")
    return out + [""]


def plot_question(spec, rows, path):
    """Per setting of the mechanism question, each seed's paired difference of the mechanism scalar
    (dots) with their mean and 95% t interval (draw_gaps); the Welch row in the title."""
    q = spec["mechanism_question"]
    fig, ax = plt.subplots(figsize=(6, 4))
    draw_gaps(ax, spec, [(q["variant"], list(enumerate(rows[:2])))], reference=q["reference"])
    ax.set_xticks([0, 1], [f"{st}\n(n={len(r['diffs'])})" for st, r in zip(q["settings"], rows)])
    ax.set_xlim(-0.5, 1.5)
    ax.set_xlabel("setting")
    ax.set_ylabel("mechanism scalar difference\n(mean amp_ratio; unitless)")
    ax.set_title(f"{spec['name']}: {q['variant']} - {q['reference']} per seed\n{q['settings'][1]} minus "
                 f"{q['settings'][0]} (Welch): {fmt_ci(rows[2]['ci'])}", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    save_figure(fig, path)


def main(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("ablations", nargs="*", help="ablation files (configs/ablations/*.py)")
    p.add_argument("--run", action="append", default=[], help="instead: draw one run's curves from "
                   "OUT_DIR/log.jsonl; given twice or more, those runs side by side (loss and mechanism statistics)")
    p.add_argument("--results", default=None, help="the run records (sweep.py writes them; default results/)")
    p.add_argument("--out", default="out-plots", help="folder for tables and figures (assets/ is the committed one)")
    p.add_argument("--readme", default="", help="also write the summary table into this file's summary block")
    p.add_argument("--scale_down", action="store_true", help="the files at CPU-miniature size, as sweep.py "
                   "--scale_down ran them (records: default results-scaled-down/)")
    args = p.parse_args(argv)
    problem = folder_problem(args.out) if args.out.strip() else "empty: name a folder for the figures"
    if problem:  # said before anything is read or drawn
        raise UserError(f"--out={args.out!r}: {problem}")
    if args.run:
        if args.ablations or args.results or args.readme:
            raise UserError(f"--run={args.run[0]} draws runs from their logs: give no ablation files, --results "
                            f"or --readme with it")
        path, note = draw_runs(args.run, args.out)
        print(f"wrote {path}{note}")
        return
    if not args.ablations:
        raise UserError("give ablation files (configs/ablations/*.py), or --run=OUT_DIR for one run's curves")
    args.results = args.results or ("results-scaled-down" if args.scale_down else "results")
    records = load_records(args.results)
    if args.readme:  # checked before any drawing
        check_readme(args.readme, args.ablations)
    os.makedirs(args.out, exist_ok=True)
    schedules = {}
    collected, skipped = collect_all(args.ablations, records, args.scale_down)
    for path in skipped:
        print(f"{path}: no run records in {args.results}/ (run: python -m research.sweep {path}); skipped\n")
    for spec, results, missing, mode in collected:
        for (setting, _), e in results.items():
            if e["config"] and setting not in schedules:
                schedules[setting] = e["config"]
        draw_ablation(spec, results, missing, mode, args.out)
    if not schedules:
        raise UserError(f"no run records in {args.results}/ for any of these ablations")
    plot_lr(schedules, os.path.join(args.out, "lr_schedules.png"))
    table = summary(collected)
    with open(os.path.join(args.out, "summary.md"), "w") as f:
        f.write(table + "\n")
    print(table)
    if args.readme:
        with open(args.readme) as f:
            text = replace_block(f.read(), table, args.readme)
        with open(args.readme, "w") as f:
            f.write(text)
        print(f"\nupdated the summary in {args.readme}")
    return 0


def check_readme(readme, ablations):
    """UserError (one line) for a --readme that has no summary block, or results/README.md given
    without every ablation (its summary covers them all)."""
    if not os.path.isfile(readme):
        raise UserError(f"--readme={readme}: no such file")
    with open(readme) as f:
        replace_block(f.read(), "", readme)
    every = sorted(glob.glob(os.path.join(ROOT, "configs", "ablations", "*.py")))
    left = [f for f in every if os.path.realpath(f) not in {os.path.realpath(a) for a in ablations}]
    if os.path.realpath(readme) == os.path.join(ROOT, "results", "README.md") and left:
        raise UserError(f"--readme={readme}: its summary covers every ablation, and "
                        f"{', '.join(os.path.relpath(f, ROOT) for f in left)} were not given: "
                        f"pass configs/ablations/*.py")


def draw_ablation(spec, results, missing, mode, out):
    """One ablation's tables (<name>.md, also printed) and figures in out."""
    md = tables(spec, results)
    commits = sorted({short_commit(r.get("commit")) for e in results.values()
                      for r in [*e["seeds"].values(), *e["lr"].values(),
                                *(x for b in e["budgets"].values() for x in b.values()),
                                *(x for t in e["tuning"].values() for x in t.values())]})
    md += f"\nRuns: {mode_text(mode)} (every row); code at commit {', '.join(commits)}.\n"
    if missing:
        md += f"\n{len(missing)} runs without a record, left out: " + ", ".join(missing)
    with open(os.path.join(out, f"{spec['name']}.md"), "w") as f:
        f.write(md + "\n")
    print(md + "\n")
    if any(e["seeds"] for e in results.values()):  # else only the tuning seeds' sweep so far
        plot_curves(spec, results, os.path.join(out, f"{spec['name']}_curves.png"))
    plot_scales(spec, results, os.path.join(out, f"{spec['name']}_scales.png"))
    if spec["iter_multipliers"]:
        plot_fit(spec, results, os.path.join(out, f"{spec['name']}_fit.png"))
    if spec["ladders"]:
        plot_ladder(spec, results, os.path.join(out, f"{spec['name']}_ladder.png"))
    entries = mechanism_entries(spec, results)
    if entries:
        plot_mechanism(entries, spec, os.path.join(out, f"{spec['name']}_mechanism.png"))
    if spec["mechanism_question"] and any(r["diffs"] for r in question_rows(spec, results)[:2]):
        plot_question(spec, question_rows(spec, results), os.path.join(out, f"{spec['name']}_mechanism_question.png"))
    trend = width_trend(spec, results)
    if trend:
        plot_width(trend, spec, os.path.join(out, f"{spec['name']}_width.png"))
    trend = tpp_trend(spec, results)
    if trend:
        plot_tpp(trend, spec, os.path.join(out, f"{spec['name']}_tpp.png"),
                 unit(results[(next(iter(spec["settings"])), list(spec["variants"])[0])]["config"]))


if __name__ == "__main__":
    cli(main)
