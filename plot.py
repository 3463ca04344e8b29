"""Tables and figures of an ablation from its runs' log.jsonl and ckpt.pt files.

    python plot.py configs/ablations/c8_unified.py            # after sweep.py on the same file
    python plot.py configs/ablations/*.py --out=assets

For each ablation file, writes to --out:
    <name>.md             results per setting: final val loss mean +- std over seeds,
                          the paired difference to the baseline per seed and its mean,
                          extra parameters; and the LR sweep, each variant at its best LR
    <name>_curves.png     validation loss vs tokens per variant (mean over seeds, min-max band)
                          and the paired difference to the baseline (same seed) vs tokens
    <name>_scales.png     the learned scale vectors (effective gamma) per layer and site of
                          the lowest seed of the last variant, one heatmap row per (layer, site)
    lr_schedules.png      the learning rate vs iteration of each setting (from the logs)
and prints the tables. Runs that are missing or unfinished are left out and named.
A claim counts as reproduced only if every seed's paired difference has the sign the
ablation file's `expected` names ("contradicted": every seed has the other sign; "mixed"
otherwise); at CPU sizes that often fails, and the table says so.
"""

import argparse
import math
import os
import statistics
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402

from model import GPT, GPTConfig  # noqa: E402
from sweep import load_ablation, plan, state  # noqa: E402
from train import MODEL_KEYS, UserError, read_log  # noqa: E402


def final_val(rows):
    return [r for r in rows if r["kind"] == "eval"][-1]["val_loss"]


def param_count(config):
    cfg = dict(config)
    cfg["vocab_size"] = cfg["vocab_size"] or 80  # only the difference between variants matters
    with torch.device("meta"):
        return GPT(GPTConfig(**{k: cfg[k] for k in MODEL_KEYS})).num_params()


def collect(spec, out_root):
    """{(setting, variant): {"seeds": {seed: rows}, "lr": {mult: rows}, "params": n}}, and skipped runs."""
    results, skipped = {}, []
    for run in plan(spec, out_root):
        key = (run["setting"], run["variant"])
        entry = results.setdefault(key, {"seeds": {}, "lr": {}, "params": param_count(run["config"]),
                                         "out_dirs": {}})
        if state(run) != "done":
            skipped.append(run["out_dir"])
            continue
        rows = read_log(os.path.join(run["out_dir"], "log.jsonl"))
        if run["lr_mult"] == 1.0:
            entry["seeds"][run["seed"]] = rows
            entry["out_dirs"][run["seed"]] = run["out_dir"]
        if run["seed"] == spec["seeds"][0]:
            entry["lr"][run["lr_mult"]] = rows
    return results, skipped


def fmt(x, digits=4):
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"


def verdict(diffs, expected):
    """'reproduced' when every seed's difference has the expected sign, 'contradicted' when
    every one has the other, else 'mixed (k/n)'; '-' without an expectation or runs."""
    if not expected or not diffs:
        return "-"
    agree = sum((d < 0) if expected == "lower" else (d > 0) for d in diffs)
    if agree == len(diffs):
        return f"reproduced ({agree}/{len(diffs)})"
    if agree == 0 and all(d != 0 for d in diffs):
        return f"contradicted (0/{len(diffs)})"
    return f"mixed ({agree}/{len(diffs)})"


def tables(spec, results):
    """Markdown: one results table per setting, then the LR sweep if there is one."""
    variants, base = list(spec["variants"]), list(spec["variants"])[0]
    out = [f"**{spec['claim']}** (`{spec['name']}`; seeds {', '.join(map(str, spec['seeds']))})", ""]
    for setting in spec["settings"]:
        out += [f"Setting `{setting}`:", "",
                "| variant | extra params | val loss (mean +- std) | paired diff vs "
                f"{base}, per seed | mean diff | claim: val loss | verdict |",
                "|---|---|---|---|---|---|---|"]
        b = results[(setting, base)]
        for v in variants:
            e = results[(setting, v)]
            vals = [final_val(r) for r in e["seeds"].values()]
            mean = statistics.mean(vals) if vals else None
            std = statistics.stdev(vals) if len(vals) > 1 else 0.0
            extra = e["params"] - b["params"]
            share = f"{extra:+,} ({extra / b['params']:+.2%})"
            seeds = sorted(set(e["seeds"]) & set(b["seeds"]))
            diffs = [final_val(e["seeds"][s]) - final_val(b["seeds"][s]) for s in seeds]
            diff_txt = ", ".join(f"{d:+.4f}" for d in diffs) if v != base and diffs else "-"
            mean_diff = f"{statistics.mean(diffs):+.4f}" if v != base and diffs else "-"
            expected = spec["expected"].get(v)
            out.append(f"| {v} | {share} | {fmt(mean)} +- {fmt(std)} (n={len(vals)}) | {diff_txt} | "
                       f"{mean_diff} | {expected or '-'} | {verdict(diffs, expected)} |")
        out.append("")
    if spec["lr_multipliers"]:
        mults = sorted(spec["lr_multipliers"])
        for setting in spec["settings"]:
            out += [f"LR sweep, `{setting}`, seed {spec['seeds'][0]} (LR keys scaled by the multiplier):", "",
                    "| variant | " + " | ".join(f"x{m:g}" for m in mults) + " | best | best vs baseline's best |",
                    "|---|" + "---|" * (len(mults) + 2)]
            bests = {}
            for v in variants:
                lr_rows = results[(setting, v)]["lr"]
                vals = {m: final_val(lr_rows[m]) if m in lr_rows else None for m in mults}
                done = {m: x for m, x in vals.items() if x is not None}
                bests[v] = min(done.items(), key=lambda kv: kv[1]) if done else None
                best_txt = f"{bests[v][1]:.4f} (x{bests[v][0]:g})" if bests[v] else "-"
                gap = f"{bests[v][1] - bests[base][1]:+.4f}" if bests[v] and bests.get(base) and v != base else "-"
                out.append(f"| {v} | " + " | ".join(fmt(vals[m]) for m in mults) + f" | {best_txt} | {gap} |")
            out.append("")
    return "\n".join(out)


def eval_curve(rows):
    """(tokens in millions, val loss) of a run's eval rows after iteration 0."""
    evals = [r for r in rows if r["kind"] == "eval" and r["iter"] > 0]
    return [r["tokens"] / 1e6 for r in evals], [r["val_loss"] for r in evals]


def plot_curves(spec, results, path):
    """Top: val loss per variant (mean over seeds, min-max band). Bottom: the paired
    difference to the baseline (same seed), mean and min-max band over seeds."""
    settings, base = list(spec["settings"]), list(spec["variants"])[0]
    fig, axes = plt.subplots(2, len(settings), figsize=(6 * len(settings), 7.5), squeeze=False,
                             sharex="col", gridspec_kw={"height_ratios": [3, 2]})
    for col, setting in enumerate(settings):
        top, bottom = axes[0][col], axes[1][col]
        base_runs = results[(setting, base)]["seeds"]
        for v in spec["variants"]:
            runs = results[(setting, v)]["seeds"]
            if not runs:
                continue
            curves = {seed: eval_curve(rows) for seed, rows in runs.items()}
            n = min(len(c[1]) for c in curves.values())
            tokens = next(iter(curves.values()))[0][:n]
            vals = [[c[1][i] for c in curves.values()] for i in range(n)]
            line, = top.plot(tokens, [statistics.mean(x) for x in vals], marker="o", ms=3,
                             label=f"{v} (n={len(runs)})")
            top.fill_between(tokens, [min(x) for x in vals], [max(x) for x in vals],
                             color=line.get_color(), alpha=0.2)
            paired = [s for s in curves if s in base_runs]
            if v == base or not paired:
                bottom.plot([], [])  # keep the colours of the two panels in step
                continue
            base_curves = {s: eval_curve(base_runs[s])[1] for s in paired}
            m = min(n, *(len(c) for c in base_curves.values()))
            diffs = [[curves[s][1][i] - base_curves[s][i] for s in paired] for i in range(m)]
            bottom.plot(tokens[:m], [statistics.mean(d) for d in diffs], marker="o", ms=3,
                        color=line.get_color(), label=v)
            bottom.fill_between(tokens[:m], [min(d) for d in diffs], [max(d) for d in diffs],
                                color=line.get_color(), alpha=0.2)
        top.set_ylabel("validation loss (nats/token)")
        top.set_title(f"{spec['name']}: {setting}")
        top.grid(alpha=0.3)
        top.legend()
        bottom.axhline(0.0, color="black", lw=0.8)
        bottom.set_xlabel("training tokens (millions)")
        bottom.set_ylabel(f"val loss minus {base}'s\n(same seed; nats/token)")
        bottom.grid(alpha=0.3)
    fig.suptitle(spec["claim"], fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_scales(spec, results, path):
    """Heatmap of every effective gamma of the lowest seed of the last variant (first setting)."""
    setting, variant = list(spec["settings"])[0], list(spec["variants"])[-1]
    out_dirs = results[(setting, variant)]["out_dirs"]
    if not out_dirs:
        return False
    from sample import load_model

    model, _ = load_model(os.path.join(out_dirs[min(out_dirs)], "ckpt.pt"))
    rows, labels = [], []
    with torch.no_grad():
        for name, sv in model.scale_vectors():
            if sv.dim == model.config.n_embd:  # the d-wide scales share a channel axis
                rows.append(sv().detach().float())
                labels.append(name.replace("blocks.", "L").replace(".scale", "").replace("_scale", ""))
    if not rows:
        return False
    data = torch.stack(rows).numpy()
    fig, ax = plt.subplots(figsize=(10, 0.18 * len(rows) + 1.5))
    lim = max(abs(data - 1).max(), 1e-3)
    im = ax.imshow(data, aspect="auto", cmap="RdBu_r", vmin=1 - lim, vmax=1 + lim, interpolation="nearest")
    ax.set_yticks(range(len(labels)), labels, fontsize=6)
    ax.set_xlabel("channel")
    ax.set_title(f"learned scale vectors (effective gamma, the n_embd-wide ones): {variant}, {setting}, "
                 f"seed {min(out_dirs)}")
    fig.colorbar(im, ax=ax, label="gamma")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def plot_lr(all_results, path):
    fig, ax = plt.subplots(figsize=(6, 3.5))
    seen = set()
    for results in all_results:
        for (setting, _), e in results.items():
            if setting in seen or not e["seeds"]:
                continue
            seen.add(setting)
            rows = [r for r in next(iter(e["seeds"].values())) if r["kind"] == "train"]
            ax.plot([r["iter"] for r in rows], [r["lr"] for r in rows], label=setting)
    ax.set_xlabel("iteration")
    ax.set_ylabel("AdamW learning rate")
    ax.set_title("learning-rate schedules\n(Muon's LR follows the same multiplier)", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("ablations", nargs="+")
    p.add_argument("--out_root", default="runs")
    p.add_argument("--out", default="assets")
    args = p.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    all_results = []
    for path in args.ablations:
        spec = load_ablation(path)
        results, skipped = collect(spec, args.out_root)
        if not any(e["seeds"] for e in results.values()):
            print(f"{path}: no finished runs under {args.out_root}/ (run: python sweep.py {path}); skipped\n")
            continue
        all_results.append(results)
        md = tables(spec, results)
        if skipped:
            md += f"\n{len(skipped)} runs not finished, left out: " + ", ".join(map(os.path.basename, skipped))
        with open(os.path.join(args.out, f"{spec['name']}.md"), "w") as f:
            f.write(md + "\n")
        print(md + "\n")
        plot_curves(spec, results, os.path.join(args.out, f"{spec['name']}_curves.png"))
        plot_scales(spec, results, os.path.join(args.out, f"{spec['name']}_scales.png"))
    if not all_results:
        raise UserError(f"no finished runs under {args.out_root}/ for any of these ablations")
    plot_lr(all_results, os.path.join(args.out, "lr_schedules.png"))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(1)
