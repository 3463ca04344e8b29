"""An ablation file's figures from its records: the validation curves and the paired difference to the
baseline over training, the final scale statistics, the token-budget fit, the ladder's loss against
compute, the gap against width or tokens per parameter, and the learning-rate schedules (the
layout and saving every figure shares)."""

import statistics
from types import SimpleNamespace

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from optim import lr_multiplier  # noqa: E402
from research.comparisons import final_val  # noqa: E402
from research.multipliers import ladder_rows, multipliers  # noqa: E402
from research.regime import loss_unit, train_flops  # noqa: E402
from research.stats import mean_ci  # noqa: E402


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

