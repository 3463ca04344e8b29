"""An ablation file's figures from its records: the validation curves and the paired difference to the
baseline over training, the final scale statistics, the token-budget fit, the ladder's loss against
compute, the gap against width or tokens per parameter, and the learning-rate schedules (the
layout and saving every figure shares). Every title states what was measured, with the verdicts
and strengths the tables give, and the file's claim only after "claim:" (research/headlines.py)."""

import os
import statistics
from types import SimpleNamespace

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from optim import GROUP_SCHEDULES, lr_multiplier, schedules  # noqa: E402
from research.comparisons import final_val  # noqa: E402
from research.headlines import fit_text, headline, mark, measured, said, setting_lines  # noqa: E402
from research.multipliers import ladder_rows, ladder_text, multiplier_title, multipliers  # noqa: E402
from research.regime import loss_unit, train_flops  # noqa: E402
from research.stats import SCALED_DOWN, mean_ci  # noqa: E402
from research.summary import file_strengths  # noqa: E402


def eval_curve(rec):
    """(tokens in millions, val loss) of a record's evals after iteration 0."""
    evals = [r for r in rec["evals"] if r["iter"] > 0]
    return [r["tokens"] / 1e6 for r in evals], [r["val_loss"] for r in evals]


def plot_curves(spec, results, path, rows=None, head=None):
    """Top: val loss per variant (mean over seeds, min-max band). Bottom: the paired
    difference to the baseline (same seed), its mean and 95% t interval over seeds. Titled by what
    was measured (head; default headlines.headline of rows: headlines.measured, default this file
    alone), each column by its setting's comparisons with their verdicts and strengths."""
    settings, base = list(spec["settings"]), list(spec["variants"])[0]
    rows = measured(spec, results) if rows is None else rows
    titles = {st: "\n".join(fit_text(line, 5, 8) for line in [f"{spec['name']}: {st}", *setting_lines(rows, st)])
              for st in settings}
    fig, axes = plt.subplots(2, len(settings), figsize=(6 * len(settings), 7.5), squeeze=False, sharex="col",
                             gridspec_kw={"height_ratios": [3, 2]})
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
        top.set_title(titles[setting], fontsize=8)
        top.grid(alpha=0.3)
        top.legend()
        bottom.axhline(0.0, color="black", lw=0.8)
        bottom.set_xlabel("training tokens (millions)")
        bottom.set_ylabel(f"val loss minus {base}'s\n(same seed; mean, 95% t band)")
        bottom.grid(alpha=0.3)
        if bottom.get_legend_handles_labels()[0]:
            bottom.legend(fontsize=8)
    suptitle = fit_text(headline(spec, rows) if head is None else head, 6 * len(settings), 10)
    fig.suptitle(suptitle, fontsize=10)
    make_room(fig, (suptitle, 10), (max(titles.values(), key=lambda t: t.count("\n")), 8))
    save_figure(fig, path)


def plot_scales(spec, results, path, head=None):
    """Final scale statistics per site (mean, +- std, min-max) of the lowest seed of the last variant
    (first setting), from its record, under the file's headline (head; default: headlines.headline of
    this file alone). Returns False when there is nothing to draw."""
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
    head = headline(spec, measured(spec, results)) if head is None else head
    title = fit_text(f"{head}\nlearned scale vectors at the end: {variant}, {setting}, seed {seed}", 6, 9)
    ax.set_title(title, fontsize=9)
    make_room(fig, (title, 9))
    ax.legend(fontsize=7)
    save_figure(fig, path)
    return True


def plot_fit(spec, results, path, head=None):
    """Per setting: the reference's final loss vs tokens at each budget and its fit, per seed; the
    variants' final losses (1x) as other markers; titled by the fitted token multiplier of each variant
    with its interval (multipliers.multiplier_title), under the file's headline (head, as plot_scales)."""
    settings = list(spec["settings"])
    fig, axes = plt.subplots(1, len(settings), figsize=(6 * len(settings), 4.5), squeeze=False)
    titles = []
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
        titles.append(fit_text(f"{setting}; fit L(D) = E + A D^-alpha per seed\n"
                               f"{multiplier_title(spec, results, setting)}", 5, 9))
        loss_against_log(ax, "training tokens (millions, log)", titles[-1], spec)
    suptitle = fit_text(headline(spec, measured(spec, results)) if head is None else head, 6 * len(settings), 10)
    fig.suptitle(suptitle, fontsize=10)
    make_room(fig, (suptitle, 10), (max(titles, key=lambda t: t.count("\n")), 9))
    save_figure(fig, path)


def loss_against_log(ax, xlabel, title, spec):
    """An axis of final val loss (in spec's loss_unit) against a log-scaled x (tokens, compute), with its legend."""
    ax.set_xscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(f"final validation loss ({loss_unit(spec, short=True)})")
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7)


def make_room(fig, *titles):
    """Add to a figure's height the lines of its titles ((text, fontsize) each, one per row of axes), so
    that the layout keeps the axes' size under a long title instead of pushing them out of the figure."""
    width, height = fig.get_size_inches()
    fig.set_size_inches(width, height + sum((text.count("\n") + 1) * size * 1.3 / 72 for text, size in titles))


def save_figure(fig, path):
    """Lay out (matplotlib's constrained layout: room for every title, label and legend inside the
    figure, so nothing is clipped), save (checkpoint.atomic_write) and close."""
    from plumbing.checkpoint import atomic_write
    fig.set_layout_engine("constrained")
    with atomic_write(path, "wb") as f:  # a new file: never written through a link or hard link at path
        fig.savefig(f, dpi=110, format=os.path.splitext(path)[1][1:] or "png")
    plt.close(fig)


def plot_ladder(spec, results, path, strengths=None):
    """Per ladder: each variant's final loss against training compute at each rung (every seed),
    and the reference's fit L(C) = E + A C^-alpha to its mean per rung (ladder_rows); titled by each
    variant's compute multiplier with its interval, verdict and strength (strengths: as tables'),
    under the file's headline."""
    ladders, rows = list(spec["ladders"]), ladder_rows(spec, results)
    strengths = file_strengths([(spec, results, [], None)]) if strengths is None else strengths
    fig, axes = plt.subplots(1, len(ladders), figsize=(6 * len(ladders), 4.5), squeeze=False)
    titles = []
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
        said_rows = [f"{c['variant']}: compute multiplier {ladder_text(c)} "
                     f"({said(c['verdict'], strengths.get((spec['name'], ladder, c['variant'], ref)))})"
                     for c in rows if c["setting"] == ladder]
        titles.append(fit_text("\n".join([f"{ladder}; fit of {ref}: L(C) = E + A C^-alpha", *said_rows]), 5, 9))
        loss_against_log(ax, "training compute (FLOPs, log)", titles[-1], spec)
    suptitle = fit_text(headline(spec, measured(spec, results, strengths)), 6 * len(ladders), 10)
    fig.suptitle(suptitle, fontsize=10)
    make_room(fig, (suptitle, 10), (max(titles, key=lambda t: t.count("\n")), 9))
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


def save_gaps(fig, ax, spec, against, path, head=None):
    """Label, title (the file's headline, head, then what is drawn: the gain against `against`) and save
    a figure drawn by draw_gaps."""
    ax.set_ylabel(f"final val loss difference ({loss_unit(spec, short=True)})")
    head = f"{mark(spec)}{spec['name']}" if head is None else head
    title = fit_text(f"{head}\nthe gap vs {against} (negative: the variant's loss is lower)", 5, 9)
    ax.set_title(title, fontsize=9)
    make_room(fig, (title, 9))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    save_figure(fig, path)


def plot_width(trend, spec, path, head=None):
    """The paired difference to the baseline (per seed, and its mean with a 95% t interval)
    against the width, one series per variant, from width_trend; head: the file's headline."""
    fig, ax = plt.subplots(figsize=(6, 4))
    draw_gaps(ax, spec, [(v, [(w, c) for w, _, c in points]) for v, points in trend])
    ax.set_xscale("log", base=2)
    ax.set_xticks([w for w, _, _ in trend[0][1]], [f"{w}\n({p / 1e6:.2f}M)" for w, p, _ in trend[0][1]])
    ax.set_xlabel("width n_embd (baseline's parameters)")
    save_gaps(fig, ax, spec, "width", path, head)


def plot_tpp(trend, spec, path, what="tokens", head=None):
    """The paired difference to the baseline (per seed, and its mean with a 95% t interval) against
    tokens per parameter (log axis), one series per variant, from tpp_trend; the variants are offset
    a little along x so that their intervals do not hide one another; head: the file's headline."""
    fig, ax = plt.subplots(figsize=(6, 4))
    k = len(trend)
    shifts = [2 ** (0.04 * (i - (k - 1) / 2)) for i in range(k)]
    draw_gaps(ax, spec, [(v, [(tpp * shift, c) for tpp, _, _, c in points])
                         for (v, points), shift in zip(trend, shifts)])
    ax.set_xscale("log")
    ax.minorticks_off()
    ax.set_xticks([p[0] for p in trend[0][1]],
                  [f"{tpp:.3g}\n({tokens / 1e6:.3g}M)" for tpp, tokens, _, _ in trend[0][1]])
    ax.set_xlabel(fit_text(f"{what} per parameter ({what}; {trend[0][1][0][2] / 1e6:.3g}M parameters, "
                           f"{list(spec['variants'])[0]}'s; series offset a little)", 6, 10))
    save_gaps(fig, ax, spec, f"{what} per parameter", path, head)


LINESTYLES = ("-", "--", ":", "-.")  # a legend past the 10 colours of matplotlib's cycle goes on in these


def line_style(i):
    """(colour, linestyle) of a figure's i-th legend entry: the 10 colours of matplotlib's cycle, then
    again in the next linestyle, so no two of up to 40 entries share both."""
    return f"C{i % 10}", LINESTYLES[(i // 10) % len(LINESTYLES)]


def plot_lr(configs, path, scale_down=False):
    """The AdamW LR vs iteration of each {setting: config}, from optim.lr_multiplier, one colour and
    linestyle each (line_style), and a dotted line per schedule of its own some groups follow (a fork's:
    optim.GROUP_SCHEDULES); a --scale_down plot's title says so (stats.SCALED_DOWN)."""
    fig, ax = plt.subplots(figsize=(8.5, 3.5 + 0.12 * max(0, len(configs) - 16)))
    for i, (setting, cfg) in enumerate(configs.items()):
        ns = SimpleNamespace(**cfg)
        iters = range(cfg["max_iters"])
        color, style = line_style(i)
        ax.plot(iters, [cfg["learning_rate"] * lr_multiplier(it, ns) for it in iters], label=setting, color=color,
                linestyle=style)
        for name in schedules(ns)[1:]:  # groups on a schedule of their own (optim.GROUP_SCHEDULES): a line each
            groups = ", ".join(g for g, key in GROUP_SCHEDULES.items() if cfg.get(key) == name)
            ax.plot(iters, [cfg["learning_rate"] * lr_multiplier(it, ns, name) for it in iters], color=color,
                    linestyle=":", label=f"{setting}: {groups} ({name})")
    ax.set_xlabel("iteration")
    ax.set_ylabel("AdamW learning rate")
    ax.set_title(fit_text(f"{SCALED_DOWN + ': ' if scale_down else ''}learning-rate schedules\n"
                          f"(Muon's LR follows the same multiplier)", 5, 10), fontsize=10)
    ax.grid(alpha=0.3)
    fig.legend(*ax.get_legend_handles_labels(), fontsize=7, loc="outside right upper")  # beside the axes: hides no line
    save_figure(fig, path)

