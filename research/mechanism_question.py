"""An ablation file's pre-registered question between two settings: its mechanism_question entry (on
stats.mechanism_scalar, a mechanism statistic) or its loss_question entry (on the final val loss).
Per setting, the variant's paired difference to the reference; the Welch test between the two
settings' differences; BH over these three rows, their verdicts and strengths (stats); its table
and its figure (<name>_<key>.png)."""

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from plumbing.mechanism import SITE_STATISTICS  # noqa: E402
from research.ablation import QUESTIONS, lr_protocol  # noqa: E402
from research.comparisons import planned_seeds  # noqa: E402
from research.figures import draw_gaps, make_room, save_figure  # noqa: E402
from research.regime import loss_unit  # noqa: E402
from research.headlines import fit_text, mark, question_phrases  # noqa: E402
from research.stats import (SCALED_DOWN, SCALED_DOWN_STRENGTH, bh_adjust, difference_verdict, fmt_ci,  # noqa: E402
                            mean_ci, mechanism_scalar, paired_t_p, strength, welch_t)


def question_key(spec):
    """The key of the question the file registers ("mechanism_question" or "loss_question"), or None."""
    return next((key for key in QUESTIONS if spec.get(key)), None)


def statistic(spec):
    """What the file's question compares: for a mechanism_question the per-site statistic it
    registered (mechanism.SITE_STATISTICS; "move_ratio" for a file registered before "statistic"
    existed, as amp_ratio); for a loss_question "val_loss", the final val loss."""
    if question_key(spec) == "loss_question":
        return "val_loss"
    return spec["mechanism_question"].get("statistic", "move_ratio")


def scalar(spec, record):
    """The question's one number for a run's record (None where the record lacks it)."""
    stat = statistic(spec)
    return record["final"]["val_loss"] if stat == "val_loss" else mechanism_scalar(record, stat)


def measure(spec):
    """What the question's scalar is, in words and units, for its table and figure."""
    if statistic(spec) == "val_loss":
        return f"the final val loss ({loss_unit(spec)})"
    stat = statistic(spec)
    earlier = " (logged as amp_ratio when these records were made)" if stat == "move_ratio" else ""
    return (f"the mechanism scalar (stats.mechanism_scalar: the mean over a run's input-role sites of {stat}'s mean "
            f"over its eval intervals{earlier}: {SITE_STATISTICS[stat]}; unitless)")


OWN_FAMILY = "significant in its own family"


def own_family(word):
    """A question row's strength: stats.strength's, with "finding" (BH over the summary's claim family)
    said as OWN_FAMILY, since its p (BH) is over the question's three rows only."""
    return word.replace("finding", OWN_FAMILY, 1) if word.startswith("finding") else word


def question_rows(spec, results):
    """The rows of the file's question (question_key; variant v, reference r, settings [a, b]): per
    setting, v - r of its scalar paired by seed over the planned table seeds both
    record (mean_ci, paired_t_p, df = n - 1); then b's paired differences minus a's, unpaired
    (welch_t: Welch-Satterthwaite df). Dicts of what, test, seeds (text), diffs (per seed; None for
    Welch's), ci, p, df, p_bh, verdict, strength, question (its name, QUESTIONS). The three are a family of their own: BH over
    them once each has a p and every planned seed (until then p_bh None, strength "pending"). No
    direction was claimed: verdict stats.difference_verdict ("differs" when the interval excludes 0,
    else "unresolved"); strength stats.strength, own_family ("significant in its own family" when p (BH) <= 0.05, "lead" when only
    the interval excludes 0, else "-"; a mechanism question's arms (two variants) at one shared
    untuned LR make it a lead at most; a loss question's arms differ in an LR by design)."""
    key = question_key(spec)
    q = spec[key]
    v, ref, (s0, s1) = q["variant"], q["reference"], q["settings"]
    rows, per = [], {}
    for st in (s0, s1):
        a, b = results[(st, v)]["seeds"], results[(st, ref)]["seeds"]
        planned = planned_seeds(spec, results, st)
        seeds = [s for s in planned if s in a and s in b and None not in (scalar(spec, a[s]), scalar(spec, b[s]))]
        per[st] = [scalar(spec, a[s]) - scalar(spec, b[s]) for s in seeds]
        rows.append(dict(what=f"`{st}`: {v} - {ref}", test="paired t", seeds=f"{len(seeds)} of {len(planned)}",
                         diffs=per[st], complete=len(seeds) == len(planned), ci=mean_ci(per[st]),
                         p=paired_t_p(per[st]), df=len(seeds) - 1 if len(seeds) > 1 else None))
    ci, p, df = welch_t(per[s1], per[s0]) if min(len(per[s0]), len(per[s1])) > 1 else (None, None, None)
    rows.append(dict(what=f"`{s1}` minus `{s0}` of those differences", test="Welch",
                     seeds=f"{len(per[s1])} and {len(per[s0])}", diffs=None,
                     complete=rows[0]["complete"] and rows[1]["complete"], ci=ci, p=p, df=df))
    for r in rows:
        r["question"] = QUESTIONS[question_key(spec)]  # what the headings call it
    family = all(r["complete"] and r["p"] is not None for r in rows)
    untuned = key == "mechanism_question" and any(lr_protocol(results, st, v, ref) == "shared" for st in (s0, s1))
    for r, p_bh in zip(rows, bh_adjust([r["p"] for r in rows]) if family else [None] * 3):
        r.update(p_bh=p_bh, verdict=difference_verdict(r["ci"]),
                 strength="pending (the family's planned seeds)" if not family else
                 own_family(strength(r["ci"], p_bh, untuned=untuned)))
        if spec.get("scale_down"):  # miniature runs: no word of a finding (stats.SCALED_DOWN)
            r.update(verdict=SCALED_DOWN, strength=SCALED_DOWN_STRENGTH)
    return rows


def question_table(spec, rows):
    """Markdown: the question's three rows (question_rows) and what they compute."""
    key = question_key(spec)
    q = spec[key]
    v, ref, (s0, s1) = q["variant"], q["reference"], q["settings"]
    out = [f"{QUESTIONS[key].capitalize()} (registered with the file; its three rows are a family of their own, "
           f"outside the summary's): `{v}` - `{ref}` of {measure(spec)} per setting, paired "
           f"by seed (95% Student t interval, two-sided paired t p, df = seeds - 1); and `{s1}`'s paired "
           f"differences minus `{s0}`'s, unpaired by Welch's t (95% interval with the Welch-Satterthwaite df, "
           f"two-sided p). p (BH): Benjamini-Hochberg over these three rows, once every planned seed is "
           f"recorded. " + (f"Verdict and strength: {SCALED_DOWN} (miniature runs through the same code)"
                            if spec.get("scale_down") else
                            "No direction was claimed: verdict \"differs\" when the interval excludes 0, "
                            "\"unresolved\" otherwise; strength \"significant in its own family\" when also p (BH) <= 0.05 "
                            "over these three (never a finding: that word is the summary's family's), \"lead\" when "
                            "only the interval excludes 0") + f" ({spec['name']}_{key}.png).", "",
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
    """Per setting of the question, each seed's paired difference of its scalar (dots) with their mean
    and 95% t interval (draw_gaps); the Welch row in the title."""
    q = spec[question_key(spec)]
    fig, ax = plt.subplots(figsize=(6, 4))
    draw_gaps(ax, spec, [(q["variant"], list(enumerate(rows[:2])))], reference=q["reference"])
    ax.set_xticks([0, 1], [f"{st}\n(n={len(r['diffs'])})" for st, r in zip(q["settings"], rows)])
    ax.set_xlim(-0.5, 1.5)
    ax.set_xlabel("setting")
    ax.set_ylabel("final val loss difference\n(" + loss_unit(spec, short=True) + ")" if statistic(spec) == "val_loss"
                  else f"mechanism scalar difference\n(mean {statistic(spec)}; unitless)")
    title = fit_text(question_title(spec, rows), 5, 9)
    ax.set_title(title, fontsize=9)
    make_room(fig, (title, 9))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    save_figure(fig, path)


def question_title(spec, rows):
    """The question figure's title: what is compared, then each of its three rows (question_rows) as
    mean [95% CI] with its verdict and strength, the words its table gives (scaled down: marked)."""
    key = question_key(spec)
    q = spec[key]
    return (f"{mark(spec)}{spec['name']}, {QUESTIONS[key]}: {q['variant']} - {q['reference']} of "
            f"{statistic(spec)} per seed; " + "; ".join(question_phrases(rows)))
