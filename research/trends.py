"""The gap's trend across settings: each variant's paired difference to the baseline against the model
width (settings that vary n_embd) or against tokens per parameter (settings that differ in their
token budget at one model size), and the table of the latter with the paired test of its change."""

from research.comparisons import comparisons
from research.regime import CHARS_PER_BPE_TOKEN, run_tokens, unit
from research.stats import fmt_ci, mean_ci, paired_t_p


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

