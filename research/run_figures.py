"""Figures of runs from their logs (python -m research.plot --run): one run's curves (loss, LR, the
scale statistics per site kind), or several runs side by side with their mechanism statistics,
under a figure name bounded in bytes, and what a gap between single runs can say (one_seed_note)."""

import math
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from configurator import UserError  # noqa: E402
from research.figures import make_room, save_figure  # noqa: E402
from research.headlines import fit_text  # noqa: E402
from research.mechanism_figures import MECHANISM_PANELS, by_kind, site_kind  # noqa: E402
from plumbing.ops import read_rows  # noqa: E402


def read_run(out_dir):
    """(rows, train rows, eval rows) of a run's out_dir/log.jsonl, finished or not; UserError (one
    line naming the folder) when the log is missing or has no rows, and (naming the file, line and
    key: ops.read_rows) for a row without what is drawn from it."""
    log = os.path.join(out_dir, "log.jsonl")
    if not os.path.isfile(log):
        raise UserError(f"--run={out_dir}: no log.jsonl there (point --run at a train.py out_dir)")
    rows = read_rows(log)
    train = [r for r in rows if r["kind"] == "train"]
    evals = [r for r in rows if r["kind"] == "eval"]
    if not train and not evals:
        raise UserError(f"--run={out_dir}: its log.jsonl has no rows yet")
    return rows, train, evals


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
    series = lr_series(train)
    for i, (group, (its, lrs)) in enumerate(series.items()):
        axes[1].plot(its, lrs, color=f"C{(i + 2) % 10}", label=group)
    axes[1].set_xlabel("iteration")
    if len(series) > 1:  # groups on schedules of their own (optim.GROUP_SCHEDULES): one line each
        axes[1].set_ylabel("learning rate per optimizer group")
        axes[1].legend(fontsize=7)
    else:
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
    fig.suptitle(fit_text(f"{out_dir}: logged to iteration {rows[-1]['iter']}, {len(evals)} evals"
                          + (f"; the last at iteration {evals[-1]['iter']}: val loss {evals[-1]['val_loss']:.4f}"
                             if evals else ""), 15 if sites else 10, 9), fontsize=9)
    save_figure(fig, path)


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


def val_gaps(runs):
    """[(label 'a - b', [iteration], [val loss of a minus b])] of the first run against each other one, at
    the eval iterations both logged (runs: [(name, train rows, eval rows, series)] as plot_runs reads them)."""
    name, _, evals, _ = runs[0]
    first = {r["iter"]: r["val_loss"] for r in evals}
    out = []
    for other, _, other_evals, _ in runs[1:]:
        shared = [(r["iter"], first[r["iter"]] - r["val_loss"]) for r in other_evals if r["iter"] in first]
        out.append((f"{name} - {other}", [i for i, _ in shared], [d for _, d in shared]))
    return out


def draw_val_gaps(ax, runs):
    """The first panel of plot_runs: val_gaps at each shared eval, with 0 marked, so a gap of 0.01 reads
    on its own axis rather than beside losses of 1.5-4.5. Returns its words for the figure's title:
    each difference at the last shared eval."""
    said = []
    for i, (label, iters, gaps) in enumerate(val_gaps(runs)):
        ax.plot(iters, gaps, "o-", ms=3, color=f"C{i + 1}", label=f"{label} (val)")
        said.append(f"{label}: {gaps[-1]:+.4f} at iteration {iters[-1]}" if gaps else f"{label}: no shared eval")
    ax.axhline(0.0, color="black", lw=0.8)
    ax.set_title("val loss difference at each shared eval\n(negative: the first run's loss is lower)", fontsize=8)
    ax.set_ylabel("val loss difference (nats per token or character)", fontsize=8)
    ax.legend(fontsize=7)
    return "; ".join(said)


def lr_series(train):
    """{group: ([iteration], [lr])} of a run's train rows: every group's LR where the rows carry "lrs" (groups on
    schedules of their own, optim.set_lr), else {"lr": the first group's}."""
    if not any("lrs" in r for r in train):
        return {"lr": ([r["iter"] for r in train], [r["lr"] for r in train])}
    out = {}
    for r in train:
        for group, lr in r.get("lrs", {}).items():
            out.setdefault(group, ([], []))
            out[group][0].append(r["iter"])
            out[group][1].append(lr)
    return out


def plot_runs(out_dirs, path, mechanism=False):
    """Runs side by side on shared axes (x: iteration), one colour each and labelled by its folder's
    name in the figure's legend: first the difference of their val losses at each shared eval (the
    first run minus each other one: draw_val_gaps; the title gives it at the last), then the loss
    (train per iteration, thin; val at each eval, markers); with mechanism=True also each optimizer
    group's update ratio, and per site kind its floor, its gain (the folded step over the scale-free
    one) and its move_ratio (run_series). A panel one run lacks (a site the other variant has) shows
    the others. UserError (one line naming the folder) for a missing log, or, with mechanism, one
    without mechanism statistics."""
    runs = []
    for d in out_dirs:
        _, train, evals = read_run(d)
        if mechanism and not any(r.get("mechanism") for r in evals):
            raise UserError(f"--run={d}: its log.jsonl has no mechanism statistics (no eval row carries "
                            f"'mechanism'): train it with --mechanism_stats=on to compare runs side by side")
        runs.append((os.path.basename(os.path.abspath(d)), train, evals, run_series(evals)))
    keys = dict.fromkeys(k for *_, series in runs for k in series)
    kinds = dict.fromkeys(name for panel, name in keys if panel != "update")
    order = [k for k in keys if k[0] == "update"] + [(p, kind) for kind in kinds for p in ("floor", "gain", "move")
                                                     if (p, kind) in keys]
    order = order if mechanism else []  # the loss and its gap first; the statistics on request
    cols = 4 if mechanism else 2
    rows_n = -(-(len(order) + 2) // cols)
    fig, axes = plt.subplots(rows_n, cols, figsize=(4.5 * cols, 3.2 * rows_n), squeeze=False, sharex=True)
    gap_ax, *flat = list(axes.ravel())
    gaps = draw_val_gaps(gap_ax, runs)
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
    for ax in [gap_ax, *flat[:len(order) + 1]]:
        ax.set_xlabel("iteration")
        ax.xaxis.set_tick_params(labelbottom=True)
        ax.grid(alpha=0.3)
    for ax in flat[len(order) + 1:]:
        ax.axis("off")
    fig.legend(*flat[0].get_legend_handles_labels(), loc="outside right upper", fontsize=8)
    what = ("the mechanism statistics at each eval (mechanism.Mechanism; interval ratios over the steps since the "
            "last eval)" if mechanism else "loss curves (--mechanism draws the mechanism statistics too)")
    suptitle = fit_text(f"val loss {gaps}\n{' vs '.join(name for name, *_ in runs)}: {what}", 4.5 * cols, 9)
    fig.suptitle(suptitle, fontsize=9)
    make_room(fig, (suptitle, 9))
    save_figure(fig, path)


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


def draw_runs(out_dirs, out, mechanism=False):
    """plot_run's figure for one --run (out/<name>.png), plot_runs' for several (out/<a>_vs_<b>.png;
    figure_name shortens a long one and appends a hash); returns (its path, a note saying it was
    shortened, else "", and for several runs one_seed_note on its own line). UserError for an empty
    --run or two runs of one folder name (their legend labels, the folder names, would not tell them apart)."""
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
        plot_runs(out_dirs, path, mechanism)
    note = (f" (the runs' names shortened to fit {FIGURE_NAME_BYTES} bytes, with a hash of the full names; "
            f"the figure's title names each run)" if shortened else "")
    return path, note + ("\n" + one_seed_note(out_dirs) if len(out_dirs) > 1 else "")


# A committed comparison is "at the runs' size" when its reference has within this factor of their parameters.
SIZE_NEAR = 1.5


def one_seed_note(out_dirs, results=None, ablations=None):
    """What a gap between runs drawn side by side can say: each is one seed, and the committed records'
    paired comparisons at the first run's size and dataset (committed_spread; results, ablations: as
    there) put the SD of a one-seed difference at their median, 1.96 of which a gap from seeds alone
    passes about 1 time in 20; a comparison is an ablation file through research.sweep. The size is
    unknown where a run has no readable checkpoint."""
    from research.regime import param_count

    cfgs = [run_config(d) for d in out_dirs]
    unpaired = " (and their seeds differ: unpaired, wider still)" if len({c and c.get("seed") for c in cfgs}) > 1 else ""
    head = f"note: each --run is one training run, one seed, so a difference between them is one draw of seed noise{unpaired}. "
    route = ("For a comparison, write an ablation file (docs/forks.md: 'One ablation file') and run "
             "python -m research.sweep FILE, then python -m research.plot FILE: paired seeds, a 95% interval, a verdict.")
    if cfgs[0] is None:
        return head + f"{out_dirs[0]} has no checkpoint to read its size from. " + route
    params, dataset = param_count(cfgs[0]), cfgs[0].get("dataset")
    rows, nearest = committed_spread(params, dataset, results, ablations)
    if not rows:
        where = f"the nearest has {nearest:,}" if nearest else "none is on that dataset"
        return head + (f"No committed comparison on {dataset} is within {SIZE_NEAR:g}x of {out_dirs[0]}'s "
                       f"{params:,} parameters ({where}): the records give no seed spread at this size. " + route)
    sds = sorted(r[0] for r in rows)
    median = (sds[(len(sds) - 1) // 2] + sds[len(sds) // 2]) / 2
    seeds = sorted(r[1] for r in rows)
    return head + (f"The committed paired comparisons within {SIZE_NEAR:g}x of {params:,} parameters on {dataset} "
                   f"({len(rows)} rows of {len({r[2] for r in rows})} files, {seeds[0]}-{seeds[-1]} seeds each) put "
                   f"the SD of a one-seed difference at {median:.4f} (median; {sds[0]:.4f}-{sds[-1]:.4f}): seeds "
                   f"alone move a one-seed gap past +-{1.96 * median:.4f} about 1 time in 20. " + route)


def run_config(out_dir):
    """The config in out_dir's checkpoint (either form), or None where none reads."""
    from plumbing.checkpoint import checkpoint_in, load_checkpoint

    try:
        return load_checkpoint(checkpoint_in(out_dir))["config"]
    except UserError:
        return None


def committed_spread(params, dataset, results=None, ablations=None):
    """([(SD over seeds of the paired differences, seeds, ablation name, setting)] of every distinct
    comparison (comparisons.comparisons; 2 seeds or more; one that several files make of the same runs
    counted once, with its largest seed set) of the ablation files (default configs/ablations/*.py)
    over the records in results (default the committed results/) whose reference trained on `dataset`
    with parameters within SIZE_NEAR of `params`; and the parameters of the reference nearest to
    `params` on that dataset, None where there is none)."""
    import glob
    import statistics

    from research.ablation import ROOT
    from research.comparisons import collect_all, comparisons
    from research.records import load_records

    records = {h: r for h, r in load_records(results or os.path.join(ROOT, "results")).items()
               if r["config"].get("dataset") == dataset}  # (the others' models are never built)
    paths = ablations or sorted(glob.glob(os.path.join(ROOT, "configs", "ablations", "*.py")))
    by_runs, sizes = {}, []  # one row per comparison of the same runs (several files make some), its most seeds
    for spec, found, _, _ in collect_all(paths, records)[0]:
        for c in comparisons(spec, found):
            n = found[(c["setting"], c["reference"])]["params"]
            if len(c["diffs"]) < 2 or not n:
                continue
            sizes.append(n)
            row = (statistics.stdev(c["diffs"]), len(c["diffs"]), spec["name"], c["setting"])
            if max(n, params) / min(n, params) <= SIZE_NEAR and row[1] > by_runs.get(tuple(c["key"]), (0, 0))[1]:
                by_runs[tuple(c["key"])] = row
    nearest = min(sizes, key=lambda n: abs(math.log(n / params))) if sizes else None
    return list(by_runs.values()), nearest
