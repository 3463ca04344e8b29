"""The words of the tables' headings and the figures' titles (research/headlines.py): each states what
was measured (the rows' intervals with their verdicts and strengths, from the records) and the
paper's claim only after "claim:", so no title states a direction its rows do not show; a
--scale_down plot says so in every heading and gives no verdict word; and the figures do what they
are for: runs side by side lead with their difference, no two legend entries of the LR schedules
share a colour and a linestyle, the fit's title gives the token multiplier the table gives, and no
text of a saved figure lies outside it."""

import glob
import os
import re
import statistics
from collections import Counter
from unittest import mock

import pytest
from matplotlib.text import Text

from conftest import ROOT
from research import comparisons, figures, headlines, mechanism_question, plot, stats, summary, sweep
from research.records import load_records, make_record, write_record
from test_plot_mechanism import TINY, mechanism_rows, write_log
from test_sweep import UNIFIED, record_runs, write_ablation

# Words that state a direction of the variant against its reference: a title built from its rows
# leaves them to the paper's claim (after "claim:").
DIRECTION = re.compile(r"\b(helps?|hurts?|beats?|wins?|better|worse|faster|slower|improves?|outperforms?)\b",
                       re.IGNORECASE)
CLAIM_WORDS = re.compile(r"\b(reproduced|contradicted|unresolved|findings?|leads?)\b")


def unshown_directions(title):
    """The direction words a title states before "claim:" (the measured part). Its rows are numbers and
    verdicts, never such a word, so any found is a direction the rows do not show."""
    return DIRECTION.findall(re.split(r"claim:", title)[0])


def captured(monkeypatch):
    """The figures the plot code closes, in order (it closes each once saved)."""
    figs = []
    monkeypatch.setattr(figures.plt, "close", figs.append)
    return figs


def title_of(fig):
    """A figure's title, one line: its suptitle, else its first axes' title."""
    text = fig._suptitle.get_text() if fig._suptitle else fig.axes[0].get_title()
    return text.replace("\n", " ")


def outside(fig):
    """[(text, window extent)] of the texts a draw of the figure renders that reach past its edges (1 px
    slack): a title or label that the saved PNG clips. (Texts drawn, not every Text artist: an axis
    keeps tick labels beyond its view that it never draws.)"""
    drawn, draw = [], Text.draw

    def record(text, renderer):
        draw(text, renderer)
        if text.get_visible() and text.get_text().strip():
            drawn.append((text.get_text()[:60], text.get_window_extent(renderer)))

    with mock.patch.object(Text, "draw", record):
        fig.canvas.draw()
    box = fig.bbox
    return [(t, tuple(round(v) for v in e.extents)) for t, e in drawn
            if e.x0 < box.x0 - 1 or e.y0 < box.y0 - 1 or e.x1 > box.x1 + 1 or e.y1 > box.y1 + 1]


def recomputed(results, c):
    """A comparison's interval and verdict from the records themselves: the paired final val losses
    over the seeds both arms recorded, stats.mean_ci and stats.verdict."""
    a, b = results[(c["setting"], c["variant"])]["seeds"], results[(c["setting"], c["reference"])]["seeds"]
    diffs = [a[s]["final"]["val_loss"] - b[s]["final"]["val_loss"] for s in sorted(set(a) & set(b))]
    ci = stats.mean_ci(diffs)
    return ci, stats.verdict(ci, len(diffs), c["expected"])


def summary_strength(table, name, c):
    """The strength column of the summary row that names file `name` and comparison c; None if none does."""
    for line in table.splitlines():
        cells = [x.strip() for x in line.strip().strip("|").split("|")]
        if len(cells) == 10 and f"`{name}`" in cells[0] and cells[1] == c["setting"] \
                and cells[2] == f"{c['variant']} - {c['reference']}":
            return cells[9]
    return None


# -----------------------------------------------------------------------------
# The committed records


@pytest.fixture(scope="module")
def committed():
    """Every ablation file with committed records, collected together as the committed assets are
    (so each row's strength is the summary's), the strengths and the summary table."""
    paths = sorted(glob.glob(os.path.join(ROOT, "configs", "ablations", "*.py")))
    collected, _ = comparisons.collect_all(paths, load_records(os.path.join(ROOT, "results")))
    return collected, summary.file_strengths(collected), summary.summary(collected)


@pytest.mark.slow
def test_every_committed_heading_states_its_rows_and_no_direction_they_do_not_show(committed):
    """Each committed file's figure title, column titles and table heading: no direction word before
    "claim:"; the claim after it; each claim row's interval and verdict as the records give them, with
    the summary's strength; past two claim rows, the title counts each verdict as the rows do."""
    collected, strengths, table = committed
    assert len(collected) >= 10
    for spec, results, _, _ in collected:
        rows = headlines.measured(spec, results, strengths)
        question = mechanism_question.question_rows(spec, results) if spec["mechanism_question"] else []
        head = headlines.headline(spec, rows, question)
        heading = "\n".join(headlines.table_heading(spec, rows, question))
        for r in question:  # a question claims no direction: its verdict says whether the interval excludes 0
            assert f"{stats.fmt_ci(r['ci'])} ({stats.difference_verdict(r['ci'])}" in head
        columns = {st: "\n".join(headlines.setting_lines(rows, st)) for st in spec["settings"]}
        for title in (head, heading, *columns.values()):
            assert not unshown_directions(title), (spec["name"], title)
        assert head.startswith(f"{spec['name']}: ") and head.endswith(f"; claim: {spec['claim']}")
        assert heading.endswith(f"\n\nclaim: {spec['claim']}")
        claims = [c for c, _ in rows if c["expected"]]
        for c in claims:
            if not c["seeds"]:  # a file whose table runs wait for its LR sweep: said so, no interval
                assert f"- `{c['setting']}`: {c['variant']} - {c['reference']} - (no paired seeds recorded yet)" in heading
                continue
            ci, word = recomputed(results, c)
            said = f"{c['variant']} - {c['reference']} {stats.fmt_ci(ci)} ({word}"
            (line,) = [x for x in heading.splitlines() if said in x and x.startswith(f"- `{c['setting']}`: ")]
            assert said in columns[c["setting"]]
            strength = summary_strength(table, spec["name"], c)
            if strength not in (None, "-"):
                assert line.endswith(f"{strength})") and "; " in line, (line, strength)
            else:
                assert not re.search(r"; (finding|lead)", line), line
        if len(claims) > headlines.MOST_ROWS:
            assert f": {len(claims)} claim rows: " in head
            for word, k in Counter(recomputed(results, c)[1].split(" (")[0] for c in claims).items():
                assert re.search(rf"\b{k} {word}\b", head), (head, word, k)


def test_c4_iwds_title_says_its_input_role_rows_are_against_the_claim(committed):
    """The case the titles were wrong about: c4_iwd's delta panel puts wd_iwd above wd_none in both
    settings; its title says so (contradicted, against the claim), and "helps" only as the paper's."""
    collected, strengths, _ = committed
    (spec, results), = [(s, r) for s, r, *_ in collected if s["name"] == "c4_iwd"]
    rows = headlines.measured(spec, results, strengths)
    for st in spec["settings"]:
        (c,) = [c for c, _ in rows if c["setting"] == st and c["reference"] == "wd_none" and c["expected"]]
        assert c["ci"][1] > 0  # the records: wd_iwd's loss above wd_none's, wholly
        assert f"wd_iwd - wd_none {stats.fmt_ci(c['ci'])} (contradicted; " in headlines.setting_lines(rows, st)[0]
        assert "against the claim" in headlines.setting_lines(rows, st)[0]
    head = headlines.headline(spec, rows)
    assert "helps" in head and head.index("helps") > head.index("claim:")


# -----------------------------------------------------------------------------
# Constructed records: a claim that is false, unclear and true


CLAIMED = ("claim = 'tiny: the unified strategy helps'\n"
           "variants = {'baseline': {}, 'unified': " + UNIFIED + "}\nexpected = {'unified': 'lower'}\n"
           "settings = {'adamw': {'optimizer': 'adamw'}}\nseeds = [1, 2, 3]\n")
NOISE = {1: 0.004, 2: -0.003, 3: -0.001}  # sums to 0: an effect of 0 gives a mean of 0


@pytest.mark.parametrize("effect, word", [(0.03, "contradicted"), (0.0, "unresolved"), (-0.03, "reproduced")])
def test_a_claims_title_reads_as_its_rows_do(tmp_path, monkeypatch, effect, word):
    """unified - baseline = effect + noise per seed, under the claim "the unified strategy helps": the
    table's heading and the figures' titles name the verdict the interval gives and say "helps" only
    after "claim:" (a false claim reads "contradicted", an unclear one "unresolved")."""
    path = write_ablation(tmp_path, body=CLAIMED)
    spec, results = sweep.load_ablation(path), str(tmp_path / "results")
    record_runs(spec, results, lambda run: 2.0 + (effect + NOISE[run["seed"]]) * (run["variant"] == "unified"))
    figs = captured(monkeypatch)
    assert plot.main([path, f"--results={results}", f"--out={tmp_path / 'out'}"]) == 0
    diffs = [effect + NOISE[s] for s in (1, 2, 3)]
    ci = stats.mean_ci(diffs)
    assert stats.verdict(ci, 3, "lower") == word
    said = f"unified - baseline {stats.fmt_ci(ci)} ({word}"
    md = (tmp_path / "out" / "tiny.md").read_text()
    assert said in md.split("\n\n")[1] and "claim: tiny: the unified strategy helps" in md
    titles = [title_of(f) for f in figs]
    curves = titles[0]
    assert said in curves and curves.endswith("; claim: tiny: the unified strategy helps")
    for title in [md.split("Each row:")[0], *titles]:
        assert not unshown_directions(title), title
    assert all(word in t for t in titles if "schedules" not in t)
    assert "helps" not in re.split("claim:", curves)[0]


@pytest.mark.parametrize("effect", [0.0, 0.002])
def test_a_forks_heading_gives_seeds_to_resolve_its_unresolved_row_and_its_lr_protocol(tmp_path, monkeypatch, effect):
    """A fork's file at the base's LR (no tune_lr), its row unresolved: the heading labels the claim as the
    file's ("claim:", never "paper:"), says the arms shared one untuned LR and what that means, and how many
    seeds would resolve the observed gap (stats.seeds_for_power at its own mean and SD: fewer for a larger
    gap over the same noise)."""
    path = write_ablation(tmp_path, body=CLAIMED)
    spec, results = sweep.load_ablation(path), str(tmp_path / "results")
    record_runs(spec, results, lambda run: 2.0 + (effect + NOISE[run["seed"]]) * (run["variant"] == "unified"))
    figs = captured(monkeypatch)
    assert plot.main([path, f"--results={results}", f"--out={tmp_path / 'out'}"]) == 0
    md = (tmp_path / "out" / "tiny.md").read_text()
    assert "; arms at one shared untuned LR: a lead at most about the variants; claim:" in title_of(figs[0])
    diffs = [effect + NOISE[s] for s in (1, 2, 3)]
    n = stats.seeds_for_power(statistics.mean(diffs), statistics.stdev(diffs), 0.05, 0.8, most=1000)
    said = f"about {n} seeds" if n else "more than 1,000 seeds"
    assert f"(unresolved); {said} would resolve a gap this size (its own SD {statistics.stdev(diffs):.4f}" in md
    assert "Arms' LR: every claim row ran both arms at one shared LR, tuned for neither" in md
    assert "paper:" not in md and "claim: tiny: the unified strategy helps" in md
    if effect:
        assert 2 < n < 1000


# -----------------------------------------------------------------------------
# --scale_down


SCALED = ("claim = 'C8 at 0.12B: unified beats the baseline'\n"
          "variants = {'norm_only': {}, 'unified': {'reparam': 'or'}}\nexpected = {'unified': 'lower'}\n"
          "settings = {'w32': {'optimizer': 'adamw'}, 'w64': {'optimizer': 'adamw', 'weight_decay': 0.05}}\n"
          "seeds = [1, 2, 3]\n"
          "mechanism_question = {'variant': 'unified', 'reference': 'norm_only', 'settings': ['w32', 'w64']}\n")


def test_a_scaled_down_plot_says_so_everywhere_and_gives_no_verdict(tmp_path, monkeypatch, capsys):
    """Miniature records of a file whose rows would read "reproduced" (unified 0.05 lower at every seed):
    with --scale_down, every table heading, summary row and figure title carries stats.SCALED_DOWN,
    and nothing printed or written names a verdict or a strength."""
    path = write_ablation(tmp_path, body=SCALED)
    spec, results = sweep.load_ablation(path, scale_down=True), str(tmp_path / "results-scaled-down")
    assert spec["scale_down"] and not sweep.load_ablation(path)["scale_down"]
    for run in sweep.plan(spec, "runs"):
        rows = mechanism_rows(run["config"], 1.1 + 0.1 * (run["variant"] == "unified") + 0.01 * run["seed"])
        rows[-1]["val_loss"] = 2.5 - 0.05 * (run["variant"] == "unified") + 0.002 * run["seed"] ** 2
        write_record(results, make_record(run, rows, spec["name"]))
    figs = captured(monkeypatch)
    assert plot.main([path, "--scale_down", f"--results={results}", f"--out={tmp_path / 'out'}"]) == 0
    printed = capsys.readouterr().out
    written = {name: (tmp_path / "out" / name).read_text() for name in ("tiny.md", "summary.md")}
    for text in (printed, *written.values()):
        assert not CLAIM_WORDS.findall(text), CLAIM_WORDS.findall(text)
    assert written["tiny.md"].startswith(f"**{stats.SCALED_DOWN}: `tiny`, measured**")
    table_rows = [line for line in written["summary.md"].splitlines() if line.startswith("| `tiny`")]
    assert len(table_rows) == 2 and all(f"| {stats.SCALED_DOWN} | scaled down |" in r for r in table_rows)
    question = [line for line in written["tiny.md"].splitlines() if line.startswith("| `w")]
    assert len(question) == 3 and all(line.endswith(f"| {stats.SCALED_DOWN} | scaled down |") for line in question)
    assert len(figs) >= 5
    for fig in figs:
        assert stats.SCALED_DOWN in title_of(fig) and not CLAIM_WORDS.findall(title_of(fig)), title_of(fig)
        assert not unshown_directions(title_of(fig)) and not outside(fig), title_of(fig)


# -----------------------------------------------------------------------------
# What each figure is for, and nothing clipped


def test_two_runs_lead_with_their_val_loss_difference(tmp_path, monkeypatch):
    """--run=a --run=b: the first panel is a's val loss minus b's at each shared eval, on its own axis
    (a gap of 0.016 fills it), and the title gives it at the last eval."""
    rows_a, rows_b = mechanism_rows(TINY, 1.1), mechanism_rows(TINY, 1.2)
    rows_b[-1]["val_loss"] = rows_a[-1]["val_loss"] - 0.016
    a, b = write_log(tmp_path / "a", rows_a), write_log(tmp_path / "b", rows_b)
    figs = captured(monkeypatch)
    plot.main([f"--run={a}", f"--run={b}", f"--out={tmp_path / 'plots'}"])
    (fig,) = figs
    first = fig.axes[0]
    (line,) = [ln for ln in first.lines if ln.get_label() == "a - b (val)"]
    evals_a = [r for r in rows_a if r["kind"] == "eval"]
    evals_b = {r["iter"]: r["val_loss"] for r in rows_b if r["kind"] == "eval"}
    assert list(line.get_xdata()) == [r["iter"] for r in evals_a]
    assert list(line.get_ydata()) == pytest.approx([r["val_loss"] - evals_b[r["iter"]] for r in evals_a])
    low, high = first.get_ylim()
    assert high - low < 0.05 and line.get_ydata()[-1] == pytest.approx(0.016)
    assert f"a - b: +0.0160 at iteration {TINY['max_iters']}" in title_of(fig)
    assert not outside(fig)


def test_each_lr_schedule_has_its_own_colour_and_linestyle(tmp_path, monkeypatch):
    """Twelve settings (the committed assets have 12, matplotlib's cycle 10 colours): no two lines share
    both colour and linestyle, each is in the legend, and the legend lies inside the figure."""
    spec = sweep.load_ablation(write_ablation(tmp_path))
    cfg = sweep.plan(spec, "runs")[0]["config"]
    configs = {f"setting_{i}": {**cfg, "max_iters": 20 + i} for i in range(12)}
    figs = captured(monkeypatch)
    figures.plot_lr(configs, str(tmp_path / "lr.png"))
    (fig,) = figs
    lines = fig.axes[0].lines
    assert len(lines) == 12 and len({(ln.get_color(), ln.get_linestyle()) for ln in lines}) == 12
    assert [t.get_text() for t in fig.legends[0].get_texts()] == list(configs)
    assert not outside(fig)


@pytest.mark.slow
def test_committed_figures_keep_every_text_inside_and_the_fit_gives_the_multiplier(tmp_path, monkeypatch):
    """The committed files with the most words (three settings of rows; the token multiplier; the
    mechanism question and its statistics; widths) drawn from their records: no text of any figure
    reaches past its edges, and the fit's title gives each variant's fitted token multiplier with
    the interval its table gives."""
    names = ("c8_regime", "c8_multiplier", "c3_mechanism_width", "c8_width")
    paths = [os.path.join(ROOT, "configs", "ablations", f"{n}.py") for n in names]
    figs = captured(monkeypatch)
    assert plot.main([*paths, f"--out={tmp_path / 'out'}"]) == 0
    assert len(figs) >= 14
    clipped = [(title_of(fig)[:60], out) for fig in figs if (out := outside(fig))]
    assert not clipped, clipped
    (fit,) = [f for f in figs if "fitted token multiplier" in f.axes[0].get_title()]
    md = (tmp_path / "out" / "c8_multiplier.md").read_text()
    section = md[md.index("Token multiplier"):]
    fitted = {cells[0]: cells[4] for cells in ([x.strip() for x in line.strip("|").split("|")]
                                               for line in section.splitlines()[:40] if line.startswith("| "))
              if len(cells) == 7 and cells[0] not in ("variant", "---")}
    assert set(fitted) == {"unified_dp_all", "norm_only"}
    title = fit.axes[0].get_title().replace("\n", " ")
    for variant, cell in fitted.items():
        assert re.match(r"\d\.\d{3} \[\d\.\d{3}, \d\.\d{3}\]$", cell) and f"{variant} x{cell}" in title

