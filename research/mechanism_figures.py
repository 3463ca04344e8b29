"""The mechanism statistics (mechanism.Mechanism) per site kind: a log row's or a record's flat
statistics reduced to each site kind (the site's name without its block index) and optimizer
group, and an ablation file's figure of them from its records (<name>_mechanism.png)."""

import re
import statistics

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from research.figures import make_room, save_figure  # noqa: E402
from research.headlines import fit_text, mark  # noqa: E402


def site_kind(site):
    """A scale site's kind: its module name without the block index ('blocks.3.attn_norm.scale' ->
    'attn_norm.scale'); a site outside the blocks (norm_f.scale) is a kind of its own."""
    return re.sub(r"^blocks\.\d+\.", "", site)


# panel: (what it shows, its axis label); the statistics are ratios, unitless
MECHANISM_PANELS = {
    "floor": ("floor: min_j gamma_j^2 (the preconditioner's, mean over blocks)", "min_j gamma_j^2"),
    "gain": ("gain: the folded step over the scale-free gradient step (mean over blocks)", "gain"),
    "move": ("gamma's change: move_ratio = rel. change of W~ / of W (mean over blocks)", "move_ratio"),
    "update": ("update ratio: ||theta_t - theta_s|| / ||theta_s|| of an optimizer group", "update ratio"),
}


def by_kind(flat):
    """{"floor": {site kind: the mean over its blocks of <site>/g2_min}, "gain" and "move": the same
    of <site>/gain and <site>/move_ratio, "update": {group: update/<group>}} of a flat mechanism dict
    (an eval row's "mechanism", or a record's "final" or "mean", keys under their current names). A
    None (an undefined ratio) is left out of its kind's mean, and a kind with none left is absent;
    kinds in the order the dict first names them."""
    panel_of = {"g2_min": "floor", "gain": "gain", "move_ratio": "move"}
    out, values = {p: {} for p in MECHANISM_PANELS}, {p: {} for p in panel_of.values()}
    for key, value in flat.items():
        head, _, stat = key.rpartition("/")
        if value is None:
            continue
        if head == "update":
            out["update"][stat] = value
        elif stat in panel_of:
            values[panel_of[stat]].setdefault(site_kind(head), []).append(value)
    for panel, kinds in values.items():
        out[panel] = {kind: statistics.fmean(xs) for kind, xs in kinds.items()}
    return out


def record_by_kind(rec):
    """by_kind of a record's mechanism statistics: the floor at the end (its "final"), the gain,
    move_ratio and the update ratios as their means over the run's intervals ("mean"); None for
    a record without them."""
    mech = rec.get("mechanism")
    if not mech:
        return None
    final, mean = by_kind(mech["final"]), by_kind(mech["mean"])
    return {"floor": final["floor"], "gain": mean["gain"], "move": mean["move"], "update": mean["update"]}


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


def plot_mechanism(entries, spec, path, head=None):
    """Per panel (the floor at the end; the gain, move_ratio and the update ratios as means over the
    intervals), one row per site kind or group: each setting's and variant's mean over seeds (dot)
    and the seeds' range (bar), from mechanism_entries; under the file's headline (head:
    headlines.headline; default its name)."""
    fig, axes = plt.subplots(1, len(MECHANISM_PANELS), figsize=(22, 1.5 + 0.3 * max(len(e[3]["floor"]) for e in entries) * len(entries)
                                            ** 0.5), squeeze=False)
    k = len(entries)
    for ax, (panel, (what, label)) in zip(axes[0], MECHANISM_PANELS.items()):
        names = list(dict.fromkeys(n for *_, panels in entries for n in panels[panel]))
        if not names:  # a statistic added after these records were made
            ax.set_title(f"{what}\n(not in these records: logged since)", fontsize=8)
            ax.set_axis_off()
            continue
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
    head = f"{mark(spec)}{spec['name']}" if head is None else head
    suptitle = (fit_text(head, 22, 9) + f"\n{spec['name']}: the mechanism statistics per site kind: mean over seeds "
                f"(dot) and the seeds' range (bar)")
    fig.suptitle(suptitle, fontsize=9)
    make_room(fig, (suptitle, 9))
    save_figure(fig, path)

