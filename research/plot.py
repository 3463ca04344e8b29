"""Tables and figures of an ablation from its run records in results/ alone (no runs/ needed).

    python -m research.plot configs/ablations/c8_unified.py            # after sweep.py on the same file
    python -m research.plot configs/ablations/*.py --out=assets --readme=results/README.md   # the committed tables
    python -m research.plot --run=out-shakespeare-char     # one run's curves: out-plots/out-shakespeare-char.png
    python -m research.plot --run=runs/a --run=runs/b      # runs side by side: out-plots/a_vs_b.png

--run given twice or more draws the runs on shared axes (x: iteration), one colour each, labelled
by folder name: first the difference of their val losses at each shared eval (the first run minus
each other one; its title gives the last), then the loss, each optimizer group's update ratio, and per site kind (the site's name
without its block index, averaged over blocks) the preconditioner floor, the gain (the folded step
over the scale-free gradient step) and move_ratio (gamma's change: 1 for any constant gamma) from
each eval row's mechanism statistics (mechanism.Mechanism; train with --mechanism_stats=on).
Each run is one seed: the command prints the SD of a one-seed difference that the committed
records' paired comparisons give at the first run's size and dataset (run_figures.one_seed_note), or
that none is near, and that a comparison is an ablation file through research.sweep.
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
                          by site kind, the floor at the end, the gain, move_ratio and the update
                          ratios as means over the run's intervals (mean over seeds, their range)
    <name>_<question>.png with mechanism_question (or loss_question): per setting, each seed's paired
                          difference of stats.mechanism_scalar (the final val loss) with the mean and 95% interval
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

Headings (research/headlines.py): every table heading and figure title states what was measured,
each claim row as "variant - reference mean [95% CI] (verdict; strength)" (the tables' verdict, the
summary's strength over the files plotted together), or their tally past two rows, and the file's
claim after it marked "claim:"; a title states no direction its rows do not show. With
--scale_down, every heading, summary row and figure title says "scaled down (machinery check, not
evidence)" and no verdict or strength is given (stats.SCALED_DOWN).

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

from plumbing import common  # noqa: E402 (from the repository root, the path above)

common.set_omp_env()  # before torch loads: idle OpenMP threads sleep instead of spinning

import argparse
import glob

from plumbing.checkpoint import atomic_write  # noqa: E402
from plumbing.common import cli, open_checked  # noqa: E402
from configurator import UserError, folder_problem  # noqa: E402
from research.ablation import ROOT  # noqa: E402
from research.comparisons import collect_all, mode_text  # noqa: E402
from research.figures import plot_curves, plot_fit, plot_ladder, plot_lr, plot_scales, plot_tpp, plot_width  # noqa: E402
from research.headlines import headline, measured  # noqa: E402
from research.mechanism_figures import mechanism_entries, plot_mechanism  # noqa: E402
from research.mechanism_question import plot_question, question_key, question_rows  # noqa: E402
from research.records import cpu_text, cpu_type, load_records  # noqa: E402
from research.regime import unit  # noqa: E402
from research.run_figures import draw_runs  # noqa: E402
from research.summary import file_strengths, replace_block, summary  # noqa: E402
from research.tables import tables  # noqa: E402
from research.trends import tpp_trend, width_trend  # noqa: E402


def main(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("ablations", nargs="*", help="ablation files (configs/ablations/*.py)")
    p.add_argument("--run", action="append", default=[], help="instead: draw one run's curves from "
                   "OUT_DIR/log.jsonl; given twice or more, those runs side by side (loss and mechanism statistics)")
    p.add_argument("--mechanism", action="store_true", help="with --run given twice or more: also the mechanism "
                   "statistics of every site (the loss curves and their gap come first either way)")
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
        path, note = draw_runs(args.run, args.out, args.mechanism)
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
        where = "" if args.results in ("results", "results-scaled-down") else f" --results={args.results} and your --out_root"
        print(f"{path}: no run records in {args.results}/ (run: python -m research.sweep {path}{where}); skipped\n")
    strengths = file_strengths(collected)  # each row's strength in the summary's family: the headings say it
    for spec, results, missing, mode in collected:
        for (setting, _), e in results.items():
            if e["config"] and setting not in schedules:
                schedules[setting] = e["config"]
        draw_ablation(spec, results, missing, mode, args.out, strengths)
    if not schedules:
        raise UserError(f"no run records in {args.results}/ for any of these ablations")
    plot_lr(schedules, os.path.join(args.out, "lr_schedules.png"), args.scale_down)
    table = summary(collected)
    with atomic_write(os.path.join(args.out, "summary.md")) as f:  # (never through a link at the name)
        f.write(table + "\n")
    print(table)
    if args.readme:
        with open_checked(args.readme, links=True) as f:  # (a FIFO never holds the read)
            text = replace_block(f.read().decode("utf-8", errors="replace"), table, args.readme)
        with atomic_write(os.path.realpath(args.readme)) as f:  # the file a link names, replaced whole
            f.write(text)
        print(f"\nupdated the summary in {args.readme}")
    return 0


def check_readme(readme, ablations):
    """UserError (one line) for a --readme that has no summary block, or results/README.md given
    without every ablation (its summary covers them all)."""
    if not os.path.isfile(readme):
        raise UserError(f"--readme={readme}: no such file")
    with open_checked(readme, links=True) as f:
        replace_block(f.read().decode("utf-8", errors="replace"), "", readme)
    every = sorted(glob.glob(os.path.join(ROOT, "configs", "ablations", "*.py")))
    left = [f for f in every if os.path.realpath(f) not in {os.path.realpath(a) for a in ablations}]
    if os.path.realpath(readme) == os.path.join(ROOT, "results", "README.md") and left:
        raise UserError(f"--readme={readme}: its summary covers every ablation, and "
                        f"{', '.join(os.path.relpath(f, ROOT) for f in left)} were not given: "
                        f"pass configs/ablations/*.py")


def short_commit(commit):
    """'abc123def456' or 'abc123def456+dirty' (uncommitted changes when the run started); 'unknown'."""
    return "unknown" if not commit else commit[:12] + ("+dirty" if commit.endswith("+dirty") else "")


def draw_ablation(spec, results, missing, mode, out, strengths=None):
    """One ablation's tables (<name>.md, also printed) and figures in out, each headed by what was
    measured with its verdict and strength (headlines; strengths: summary.file_strengths of the files
    plotted together, default this file alone)."""
    strengths = file_strengths([(spec, results, missing, mode)]) if strengths is None else strengths
    rows = measured(spec, results, strengths)
    question = question_rows(spec, results) if question_key(spec) else []
    head = headline(spec, rows, question)
    md = tables(spec, results, strengths)
    commits = sorted({short_commit(r.get("commit")) for e in results.values()
                      for r in [*e["seeds"].values(), *e["lr"].values(),
                                *(x for b in e["budgets"].values() for x in b.values()),
                                *(x for t in e["tuning"].values() for x in t.values())]})
    cpus = " / ".join(sorted({cpu_text(cpu_type(r)) for e in results.values() for r in e["seeds"].values()}))
    md += (f"\nRuns: {mode_text(mode)} (every row); code at commit {', '.join(commits)}"
           + (f"; seed tables on {cpus} (each seed's arms on one CPU type, or the table says so)" if cpus else "")
           + ".\n")
    if missing:
        md += f"\n{len(missing)} runs without a record, left out: " + ", ".join(missing)
    with atomic_write(os.path.join(out, f"{spec['name']}.md")) as f:
        f.write(md + "\n")
    print(md + "\n")
    if any(e["seeds"] for e in results.values()):  # else only the tuning seeds' sweep so far
        plot_curves(spec, results, os.path.join(out, f"{spec['name']}_curves.png"), rows, head)
    plot_scales(spec, results, os.path.join(out, f"{spec['name']}_scales.png"), head)
    if spec["iter_multipliers"]:
        plot_fit(spec, results, os.path.join(out, f"{spec['name']}_fit.png"), head)
    if spec["ladders"]:
        plot_ladder(spec, results, os.path.join(out, f"{spec['name']}_ladder.png"), strengths)
    entries = mechanism_entries(spec, results)
    if entries:
        plot_mechanism(entries, spec, os.path.join(out, f"{spec['name']}_mechanism.png"), head)
    if question and any(r["diffs"] for r in question[:2]):
        plot_question(spec, question, os.path.join(out, f"{spec['name']}_{question_key(spec)}.png"))
    trend = width_trend(spec, results)
    if trend:
        plot_width(trend, spec, os.path.join(out, f"{spec['name']}_width.png"), head)
    trend = tpp_trend(spec, results)
    if trend:
        plot_tpp(trend, spec, os.path.join(out, f"{spec['name']}_tpp.png"),
                 unit(results[(next(iter(spec["settings"])), list(spec["variants"])[0])]["config"]), head)


if __name__ == "__main__":
    cli(main)
