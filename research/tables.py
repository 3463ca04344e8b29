"""An ablation file's tables (<name>.md): per setting its regime, final losses and paired differences
to the baseline with their verdicts, the file's extra comparisons, and the sections its entries
ask for: the gap against tokens per parameter, the LR sweep (or the tuning seeds' sweep), the
token multiplier, the ladders' compute multiplier and the mechanism question."""

import math
import statistics

from research.ablation import lr_choice, tuning_seeds, tuning_setting
from research.comparisons import final_val
from research.headlines import measured, table_heading
from research.mechanism_question import question_key, question_rows, question_table
from research.multipliers import ladder_table, multiplier_table
from research.records import cpu_text, cpu_type
from research.regime import decay_caption, loss_unit, regime, uniform_loss
from research.stats import SCALED_DOWN, fmt_ci
from research.trends import tpp_table, tpp_trend


def method_line(spec):
    """The tables' first paragraph: what each row's numbers are and how its verdict reads (a --scale_down
    file's: that it has none, stats.SCALED_DOWN)."""
    words = (f"Verdict: {SCALED_DOWN}: miniature runs of the file's rules through the same code, so no row "
             "gets a verdict. " if spec.get("scale_down") else
             "Verdict: reproduced / contradicted when the interval lies wholly on the claimed / the other side of "
             "0, unresolved otherwise. ")
    return (f"Each row: final val loss ({loss_unit(spec)}); the paired difference to the reference (same seed, "
            "variant minus reference) per seed, and its mean with a 95% Student-t interval over seeds "
            "(df = seeds - 1). " + words + "Each row is its own 95% "
            "interval, not corrected for multiple comparisons: across k rows about k x 5% exclude 0 by chance "
            "(the summary table adds Benjamini-Hochberg adjusted p values over every claim row).")


def setting_marks(spec, results, setting, comparisons):
    """Lines under a setting's table that a reader must see beside its numbers: each table run whose
    final loss is above ln(vocab size) (worse than a uniform guess: a diverged arm, kept in the means),
    and each comparison whose arms ran on different CPU types at some seeds (comparisons.apart)."""
    lines = []
    for v in spec["variants"]:
        for seed, rec in sorted(results[(setting, v)]["seeds"].items()):
            ceiling = uniform_loss(rec["config"])
            if ceiling is not None and final_val(rec) > ceiling:
                lines.append(f"- **Above ln(vocab size)**: {v}, seed {seed}, final val loss {final_val(rec):.4f} > "
                             f"ln {round(math.exp(ceiling))} = {ceiling:.4f}, worse than a uniform guess: a diverged "
                             f"arm, kept in the means above.")
    for c in comparisons:
        if c.get("apart"):
            a, b = results[(setting, c["variant"])]["seeds"], results[(setting, c["reference"])]["seeds"]
            lines.append(f"- **Arms on different CPU types**: {c['variant']} - {c['reference']} at seed"
                         f"{'s' * (len(c['apart']) > 1)} " + "; ".join(
                             f"{s} ({cpu_text(cpu_type(a[s]))} vs {cpu_text(cpu_type(b[s]))})" for s in c["apart"])
                         + ": each such difference holds the CPUs' too (a lead at most).")
    return [""] + lines if lines else []


def tables(spec, results, strengths=None):
    """Markdown: the heading (what was measured, with each claim row's verdict and strength, then the
    paper's claim: headlines.table_heading; strengths: summary.file_strengths of the files plotted
    together, default this file alone), a results table per setting, the extra comparisons, the LR
    sweep, the token multiplier, the compute multiplier along each ladder."""
    variants, base = list(spec["variants"]), list(spec["variants"])[0]
    measured_rows = measured(spec, results, strengths)
    rows = {(c["setting"], c["variant"], c["reference"]): c for c, _ in measured_rows}
    question = question_rows(spec, results) if question_key(spec) else []
    out = table_heading(spec, measured_rows, question) + ["", method_line(spec), ""]
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
        out += setting_marks(spec, results, setting, [rows[k] for k in rows if k[0] == setting])
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
    if question_key(spec):
        out += question_table(spec, question)
    return "\n".join(out)


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

