"""Efficiency multipliers: the token multiplier of a variant at the reference's size (the reference's
loss-vs-tokens fit per seed, and the same ratio read off its budgets without a fit), and the
compute multiplier along a ladder of model sizes (stats.ladder_multiplier, its interval over seeds
and rungs), with their tables."""

import math

from research.ablation import planned_table_seeds
from research.comparisons import final_val
from research.regime import per_param, run_tokens, train_flops, unit
from research.stats import (SCALED_DOWN, fit_power_law, fmt_ci, interpolated_tokens, ladder_multiplier, ladder_verdict,
                            mean_ci, tokens_to_reach)


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


def fitted_ci(by_seed):
    """The fitted token multiplier's mean with its 95% t interval over seeds (mean_ci) of one variant's
    {seed: multipliers() entry}; None when a seed's is unbounded (its loss below the fit's floor E:
    dropping it would bias the mean down)."""
    vals = [by_seed[s]["fitted"] for s in sorted(by_seed)]
    return mean_ci(vals) if all(math.isfinite(m) for m in vals) else None


def multiplier_title(spec, results, setting):
    """A fit figure's words for a setting: each variant's fitted token multiplier against the
    reference with its 95% interval (fitted_ci, as multiplier_table gives it), or why it has none."""
    ref, _, _, per_variant = multipliers(spec, results, setting)
    parts = []
    for v, by_seed in per_variant.items():
        if v != ref:
            ci = fitted_ci(by_seed)
            parts.append(f"{v} x{fmt_ci(ci, '.3f')} (n={len(by_seed)})" if ci else
                         f"{v}: no interval (a seed below the fit's floor)")
    return (f"fitted token multiplier vs {ref} (mean [95% CI] over seeds; > 1: fewer tokens to its loss): "
            + ("; ".join(parts) or "none yet (no seed with a fit and both runs)"))


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
            fitted = fitted_ci(by_seed)
            outside = [s for s in seeds if not span[s][0] <= by_seed[s]["need"] <= span[s][1]]
            note = []
            if len(finite) < len(vals):  # censored: dropping them would bias the mean down, so no interval
                note.append(f"{len(vals) - len(finite)} seed(s) below the fit's floor E (multiplier unbounded): "
                            f"no mean or interval")
            if outside:
                note.append(f"extrapolated beyond the budgets for seed(s) {', '.join(map(str, outside))}")
            fitted_txt = fmt_ci(fitted, ".3f")
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
            word = SCALED_DOWN if spec.get("scale_down") else ladder_verdict(ci, fit["df"] if ok else None, expected)
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

