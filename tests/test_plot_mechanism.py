"""plot.py and the mechanism statistics: runs side by side (--run twice), a file's per-site-kind
figure, and the mechanism question's table and figure, each against the logs' or records' own
numbers (the question's rows recomputed here with research/stats.py)."""

import os
import re
import statistics

import numpy as np
import pytest

from configurator import UserError
from research import ablation, comparisons, mechanism_figures, mechanism_question, plot, regime, run_figures, stats, sweep
from research.records import load_records, make_record, write_record
from test_sweep import fake_rows, record_runs, write_ablation
from test_train import make_dataset, read_log, run, tiny_args

# c3_mechanism_width's two arms (the defaults are unified's; norm_only sets its scales back to the baseline's)
NORM_ONLY = ["--branch_scales=False", "--mlp_placement=in_norm", "--reparam=plain", "--scale_wd=none"]


def captured(monkeypatch):
    """The figures plot.py closes, in order (it closes each once saved)."""
    figures = []
    monkeypatch.setattr(run_figures.plt, "close", figures.append)
    return figures


def panel(fig, kind, which):
    """The axes of a site kind's (or group's) panel: floor, gain, move or update (mechanism_figures.MECHANISM_PANELS)."""
    (ax,) = [a for a in fig.axes if a.get_title() == f"{kind}\n{mechanism_figures.MECHANISM_PANELS[which][0]}"]
    return ax


def kind_means(evals, stat):
    """{site kind: (iterations, mean over blocks of <site>/<stat>)}, computed here from the rows."""
    out = {}
    for r in evals:
        per = {}
        for key, value in r.get("mechanism", {}).items():
            site, _, s = key.rpartition("/")
            if s == stat and value is not None:
                per.setdefault(re.sub(r"^blocks\.\d+\.", "", site), []).append(value)
        for kind, values in per.items():
            xs, ys = out.setdefault(kind, ([], []))
            xs.append(r["iter"])
            ys.append(float(np.mean(values)))
    return out


@pytest.mark.slow
def test_two_runs_side_by_side_draw_the_logged_values_labelled_by_folder(tmp_path, monkeypatch, capsys):
    ds = make_dataset(tmp_path / "ds")
    common = ["--max_iters=4", "--eval_interval=2", "--n_layer=2", "--mechanism_stats=on"]
    run(tiny_args(ds, tmp_path / "norm_only", *common, *NORM_ONLY))
    run(tiny_args(ds, tmp_path / "unified", *common))
    figures = captured(monkeypatch)
    capsys.readouterr()
    plot.main([f"--run={tmp_path / 'norm_only'}", f"--run={tmp_path / 'unified'}", f"--out={tmp_path / 'plots'}"])
    (first,) = figures  # without --mechanism: the val-loss gap and the loss curves, nothing else
    assert len([ax for ax in first.axes if ax.axison]) == 2 and "--mechanism draws" in first._suptitle.get_text()
    figures.clear()
    capsys.readouterr()
    plot.main([f"--run={tmp_path / 'norm_only'}", f"--run={tmp_path / 'unified'}", f"--out={tmp_path / 'plots'}",
               "--mechanism"])
    wrote, note = capsys.readouterr().out.strip().splitlines()
    assert note.startswith("note: each --run is one training run, one seed") and "python -m research.sweep" in note
    assert f"No committed comparison on {ds} is within" in note and "(none is on that dataset)" in note  # a tmp dataset
    assert (tmp_path / "plots" / "norm_only_vs_unified.png").read_bytes()[:4] == b"\x89PNG"
    (fig,) = figures
    assert [t.get_text() for t in fig.legends[0].get_texts()] == ["norm_only", "unified"]
    panels = {}
    for name in ("norm_only", "unified"):
        rows = read_log(tmp_path / name)
        train = [r for r in rows if r["kind"] == "train"]
        evals = [r for r in rows if r["kind"] == "eval"]
        loss = fig.axes[1]  # (the first: the val loss difference, test_figure_words)
        (val,) = [ln for ln in loss.lines if ln.get_label() == name]
        (tr,) = [ln for ln in loss.lines if ln.get_label() == f"_{name} train"]
        assert list(val.get_ydata()) == [r["val_loss"] for r in evals]
        assert list(tr.get_ydata()) == [r["loss"] for r in train]
        expected = {("floor", k): v for k, v in kind_means(evals, "g2_min").items()}
        expected |= {("gain", k): v for k, v in kind_means(evals, "gain").items()}
        expected |= {("move", k): v for k, v in kind_means(evals, "move_ratio").items()}
        expected |= {("update", k.split("/", 1)[1]): ([r["iter"] for r in evals if k in r["mechanism"]],
                                                      [r["mechanism"][k] for r in evals if k in r["mechanism"]])
                     for k in evals[-1]["mechanism"] if k.startswith("update/")}
        assert ("gain", "attn_norm.scale" if name == "norm_only" else "attn.q.in_scale") in expected
        assert ("floor", "norm_f.scale") in expected
        for (which, kind), (xs, ys) in expected.items():
            ax = panel(fig, kind, which)
            (line,) = [ln for ln in ax.lines if ln.get_label() == name]
            assert list(line.get_xdata()) == xs and np.allclose(line.get_ydata(), ys, rtol=1e-12)
            assert ax.get_xlabel() == "iteration" and "unitless" in ax.get_ylabel()
        panels[name] = set(expected)
    a, b = panels["norm_only"], panels["unified"]
    assert a - b and b - a  # each arm has sites the other lacks: a panel each, with the lines of those that have it
    assert sum(ax.axison for ax in fig.axes) == 2 + len(a | b)  # the difference, the loss, then one per panel
    # two blocks: each kind's line is the mean of its two sites
    evals = [r for r in read_log(tmp_path / "unified") if r["kind"] == "eval"]
    (line,) = [ln for ln in panel(fig, "attn.q.in_scale", "floor").lines if ln.get_label() == "unified"]
    assert line.get_ydata()[-1] == pytest.approx(statistics.fmean(
        evals[-1]["mechanism"][f"blocks.{i}.attn.q.in_scale/g2_min"] for i in range(2)))


def test_single_runs_side_by_side_are_one_seed_each_beside_the_records_seed_spread_at_their_size(tmp_path, monkeypatch):
    """one_seed_note: the SD over seeds of each paired difference of the records' comparisons at the runs'
    size and dataset, their median (of two rows: the mean of the two) and 1.96 of it as the gap seeds
    alone pass 1 time in 20; where no comparison is within SIZE_NEAR of the size or on the dataset, it
    says the records give none; runs of different seeds are said to be unpaired."""
    path = write_ablation(tmp_path, body="variants = {'baseline': {}, 'wd_all': {'scale_wd': 'all'}, "
                                         "'wd_iwd': {'scale_wd': 'iwd'}}\nsettings = {'adamw': {}}\nseeds = [1, 2, 3, 4]\n")
    spec = sweep.load_ablation(path)
    gaps = {1: 0.010, 2: -0.020, 3: 0.031, 4: 0.002}
    scale = {"baseline": 0.0, "wd_all": 1.0, "wd_iwd": 3.0}
    loss = lambda r: 2.0 + scale[r["variant"]] * gaps[r["seed"]]  # noqa: E731
    results = str(tmp_path / "results")
    record_runs(spec, results, loss)
    runs = sweep.plan(spec, "runs")
    cfg = runs[0]["config"]
    sds = [statistics.stdev(loss(r) - 2.0 for r in runs if r["variant"] == v) for v in ("wd_all", "wd_iwd")]
    median, params = sum(sds) / 2, regime.param_count(cfg)

    def note(a, b=None):
        """The note for runs "a" and "b" whose checkpoints hold configs a and b (default a)."""
        monkeypatch.setattr(run_figures, "run_config", lambda d: b if d == "b" and b else a)
        return run_figures.one_seed_note(["a", "b"], results, [path])

    said = note(cfg)
    assert f"within 1.5x of {params:,} parameters on {cfg['dataset']} (2 rows of 1 files, 4-4 seeds each)" in said
    assert f"at {median:.4f} (median; {sds[0]:.4f}-{sds[1]:.4f})" in said and f"+-{1.96 * median:.4f} about" in said
    assert "one seed" in said and "unpaired" not in said and "python -m research.sweep FILE" in said
    wide = dict(cfg, n_embd=4 * cfg["n_embd"])  # about 10x the parameters: none near, the nearest named
    assert regime.param_count(wide) > 1.5 * params
    said = note(wide)
    assert f"No committed comparison on {cfg['dataset']} is within 1.5x" in said and f"(the nearest has {params:,})" in said
    assert "no seed spread at this size" in said and "median" not in said
    said = note(dict(cfg, dataset="shakespeare_char"))
    assert "(none is on that dataset)" in said and "median" not in said
    assert "unpaired" in note(cfg, dict(cfg, seed=cfg["seed"] + 1))
    monkeypatch.setattr(run_figures, "run_config", lambda d: None)
    assert "a has no checkpoint to read its size from" in run_figures.one_seed_note(["a", "b"], results, [path])


@pytest.mark.slow
def test_run_comparison_refuses_a_missing_log_a_log_without_statistics_and_one_name_twice(tmp_path):
    ds = make_dataset(tmp_path / "ds")
    run(tiny_args(ds, tmp_path / "with", "--max_iters=2", "--mechanism_stats=on"))
    run(tiny_args(ds, tmp_path / "without", "--max_iters=2", "--mechanism_stats=off"))
    (tmp_path / "empty").mkdir()
    out = f"--out={tmp_path / 'plots'}"
    with pytest.raises(UserError, match=r"--run=.*empty: no log.jsonl there \(point --run at a train.py out_dir\)"):
        plot.main([f"--run={tmp_path / 'with'}", f"--run={tmp_path / 'empty'}", out])
    with pytest.raises(UserError, match=r"--run=.*without: its log.jsonl has no mechanism statistics.*"
                                        r"--mechanism_stats=on"):
        plot.main([f"--run={tmp_path / 'with'}", f"--run={tmp_path / 'without'}", out, "--mechanism"])
    plot.main([f"--run={tmp_path / 'with'}", f"--run={tmp_path / 'without'}", out])  # the loss needs no statistics
    (tmp_path / "elsewhere").mkdir()
    os.symlink(tmp_path / "with", tmp_path / "elsewhere" / "with")
    with pytest.raises(UserError, match=r"with given twice"):
        plot.main([f"--run={tmp_path / 'with'}", f"--run={tmp_path / 'elsewhere' / 'with'}", out])
    with pytest.raises(UserError, match=r"--run is empty"):
        plot.main(["--run=", out])
    plot.main([f"--run={tmp_path / 'without'}", out])  # one run: today's figure, statistics or not
    assert (tmp_path / "plots" / "without.png").is_file()


# -----------------------------------------------------------------------------
# A file's records: synthetic, with constructed mechanism means

BODY = ("variants = {'norm_only': {}, 'unified': {'reparam': 'or'}}\n"
        "settings = {'w32': {'optimizer': 'adamw'}, 'w64': {'optimizer': 'adamw', 'weight_decay': 0.05}}\n"
        "seeds = [1, 2, 3, 4, 5]\n"
        "mechanism_question = {'variant': 'unified', 'reference': 'norm_only', 'settings': ['w32', 'w64']}\n")
EFFECT = {"w32": 0.0, "w64": 0.2}  # the true unified - norm_only of the scalar per setting
NOISE = {1: 0.013, 2: -0.021, 3: 0.004, 4: 0.017, 5: -0.009}


def amp_of(run):
    """The constructed scalar (mean amp_ratio) of a run: 1.1, plus the effect for unified, plus noise
    that differs between the arms (so the paired differences have a spread)."""
    unified = run["variant"] == "unified"
    return 1.1 + (EFFECT[run["setting"]] + NOISE[run["seed"]] if unified else NOISE[run["seed"]] / 3)


def mechanism_rows(cfg, amp):
    """fake_rows with the mechanism statistics: two blocks' q in_scale (amp_ratio amp -+ 0.01, so
    their mean is amp) and norm_f; iteration 0 has the point-in-time keys only."""
    rows = fake_rows(cfg, 2.5)
    first, last = [r for r in rows if r["kind"] == "eval"]
    point = {f"blocks.{i}.attn.q.in_scale/g2_min": amp * (1 + i / 10) for i in range(2)} | {"norm_f.scale/g2_min": 0.9}
    first["mechanism"] = dict(point)
    last["mechanism"] = {**point, "since": 0, "blocks.0.attn.q.in_scale/amp_ratio": amp - 0.01,
                         "blocks.1.attn.q.in_scale/amp_ratio": amp + 0.01, "update/matrix": amp / 10,
                         "update/scale_input": None}
    return rows


def write_records(tmp_path, skip=()):
    path = write_ablation(tmp_path, BODY, name="mech")
    spec = sweep.load_ablation(path)
    results = str(tmp_path / "results")
    for r in sweep.plan(spec, "runs"):
        if (r["setting"], r["variant"], r["seed"]) not in skip:
            write_record(results, make_record(r, mechanism_rows(r["config"], amp_of(r)), "mech"))
    return path, spec, results


def recomputed(records, spec):
    """The question's three rows from the records' own numbers: (paired diffs per setting, [(ci, p)], BH)."""
    by = {(r["setting"], r["variant"], r["seed"]): stats.mechanism_scalar(r) for r in records.values()}
    diffs = {st: [by[(st, "unified", s)] - by[(st, "norm_only", s)] for s in spec["seeds"]] for st in ("w32", "w64")}
    tests = [(stats.mean_ci(diffs[st]), stats.paired_t_p(diffs[st])) for st in ("w32", "w64")]
    ci, p, _ = stats.welch_t(diffs["w64"], diffs["w32"])
    tests.append((ci, p))
    return diffs, tests, stats.bh_adjust([p for _, p in tests])


def test_the_mechanism_question_table_equals_stats_on_the_records(tmp_path, monkeypatch):
    path, spec, results = write_records(tmp_path)
    figures = captured(monkeypatch)
    plot.main([path, f"--results={results}", f"--out={tmp_path / 'out'}"])
    records = load_records(results)
    diffs, tests, adjusted = recomputed(records, spec)
    for st in ("w32", "w64"):  # the constructed truth, to the records' 5 digits
        assert np.allclose(diffs[st], [EFFECT[st] + NOISE[s] * 2 / 3 for s in spec["seeds"]], atol=1e-4)
    md = (tmp_path / "out" / "mech.md").read_text()
    table = [line for line in md.splitlines() if line.startswith("| `w")]
    assert len(table) == 3
    # the file's arms share the base's LR, untuned: a row past the correction is a lead at most (stats.UNTUNED_CAP)
    words = [("unresolved", "-"), ("differs", "lead" + stats.UNTUNED_CAP), ("differs", "lead" + stats.UNTUNED_CAP)]
    for line, (ci, p), p_bh, (verdict, strength) in zip(table, tests, adjusted, words):
        cells = [c.strip() for c in line.strip("|").split("|")]
        assert cells[4] == stats.fmt_ci(ci) and cells[6] == f"{p:#.3g}" and cells[7] == f"{p_bh:#.3g}"
        assert cells[8:] == [verdict, strength]
    assert table[0].split("|")[4].strip() == ", ".join(f"{d:+.4f}" for d in diffs["w32"])
    assert [line.split("|")[3].strip() for line in table] == ["5 of 5", "5 of 5", "5 and 5"]
    welch = stats.welch_t(diffs["w64"], diffs["w32"])
    assert table[2].split("|")[6].strip() == f"{welch[2]:.3g}" and welch[0][0] == pytest.approx(0.2, abs=0.02)
    rows = mechanism_question.question_rows(spec, comparisons.collect(spec, records)[0])
    assert [r["ci"] for r in rows] == [ci for ci, _ in tests] and [r["p_bh"] for r in rows] == adjusted

    (question,) = [f for f in figures if any("the mechanism question:" in a.get_title().replace("\n", " ")
                                             and "(Welch)" in a.get_title() for a in f.axes)]
    ax = question.axes[0]
    dots = [ln for ln in ax.lines if ln.get_linestyle() == "None" and ln.get_marker() == "."]
    assert [list(d.get_ydata()) for d in dots] == [diffs["w32"], diffs["w64"]]
    assert (tmp_path / "out" / "mech_mechanism_question.png").is_file()


LOSS_BODY = BODY.replace("mechanism_question", "loss_question")


def test_a_loss_question_is_the_same_three_rows_on_the_final_val_loss(tmp_path, monkeypatch):
    """loss_question: per setting the paired difference of the final val loss, then Welch between the
    settings; a width effect (0 at w32, 0.2 at w64) reads as w32 unresolved, w64 and the Welch row
    differing, and the table, heading and figure call it the loss question, in the loss's units."""
    path = write_ablation(tmp_path, LOSS_BODY, name="lossq")
    spec = sweep.load_ablation(path)
    results = str(tmp_path / "results")
    for r in sweep.plan(spec, "runs"):
        write_record(results, make_record(r, fake_rows(r["config"], amp_of(r)), "lossq"))
    figures = captured(monkeypatch)
    plot.main([path, f"--results={results}", f"--out={tmp_path / 'out'}"])
    records = load_records(results)
    by = {(r["setting"], r["variant"], r["seed"]): r["final"]["val_loss"] for r in records.values()}
    diffs = {st: [by[(st, "unified", s)] - by[(st, "norm_only", s)] for s in spec["seeds"]] for st in ("w32", "w64")}
    tests = [(stats.mean_ci(diffs[st]), stats.paired_t_p(diffs[st])) for st in ("w32", "w64")]
    tests.append(stats.welch_t(diffs["w64"], diffs["w32"])[:2])
    md = (tmp_path / "out" / "lossq.md").read_text()
    assert "The loss question (registered with the file" in md and "of the final val loss (nats per token)" in md
    assert "loss question (no direction claimed" in md and "mechanism question" not in md
    table = [line for line in md.splitlines() if line.startswith("| `w")]
    for line, (ci, p), verdict in zip(table, tests, ("unresolved", "differs", "differs")):
        cells = [c.strip() for c in line.strip("|").split("|")]
        assert cells[4] == stats.fmt_ci(ci) and cells[6] == f"{p:#.3g}" and cells[8] == verdict
    (question,) = [f for f in figures if any("the loss question:" in a.get_title().replace("\n", " ") for a in f.axes)]
    assert "nats/token" in question.axes[0].get_ylabel()  # (write_ablation's dataset is not character-level)
    assert (tmp_path / "out" / "lossq_loss_question.png").is_file()
    with pytest.raises(UserError, match=r"at most one of mechanism_question and loss_question"):
        sweep.load_ablation(write_ablation(tmp_path, BODY + LOSS_BODY.splitlines()[-1] + "\n", name="both"))


def test_the_mechanism_figure_draws_each_site_kinds_mean_and_range_over_seeds(tmp_path, monkeypatch):
    path, spec, results = write_records(tmp_path)
    figures = captured(monkeypatch)
    plot.main([path, f"--results={results}", f"--out={tmp_path / 'out'}"])
    assert (tmp_path / "out" / "mech_mechanism.png").read_bytes()[:4] == b"\x89PNG"
    (fig,) = [f for f in figures if "per site kind" in (f._suptitle.get_text() if f._suptitle else "")]
    floor, gain, move, update = fig.axes  # (these records, made as before the rename, carry no gain)
    assert len(gain.lines) == 0 and "not in these records" in gain.get_title()
    assert [t.get_text() for t in floor.get_yticklabels()] == ["attn.q.in_scale", "norm_f.scale"]
    assert [t.get_text() for t in update.get_yticklabels()] == ["matrix"]  # a None ratio is left out
    records = list(load_records(results).values())
    for line in floor.lines:
        variant, setting = re.match(r"(\w+), (\w+) \(n=5\)", line.get_label()).groups()
        mine = [r for r in records if r["variant"] == variant and r["setting"] == setting]
        final = [r["mechanism"]["final"] for r in mine]
        q = [statistics.fmean(f[f"blocks.{i}.attn.q.in_scale/g2_min"] for i in range(2)) for f in final]
        assert np.allclose(line.get_xdata(), [statistics.fmean(q), 0.9], rtol=1e-12)
        (amp_line,) = [ln for ln in move.lines if ln.get_label() == line.get_label()]
        assert amp_line.get_xdata()[0] == pytest.approx(statistics.fmean(stats.mechanism_scalar(r) for r in mine))
    assert [ln.get_label() for ln in floor.lines] == [f"{v}, {s} (n=5)" for s in ("w32", "w64")
                                                      for v in ("norm_only", "unified")]
    lows = floor.collections[0].get_segments()[0][:, 0]  # the seeds' range: min to max
    q0 = [statistics.fmean(r["mechanism"]["final"][f"blocks.{i}.attn.q.in_scale/g2_min"] for i in range(2))
          for r in records if r["variant"] == "norm_only" and r["setting"] == "w32"]
    assert list(lows) == pytest.approx([min(q0), max(q0)])


def test_the_question_waits_for_its_planned_seeds_before_the_correction(tmp_path):
    path, spec, results = write_records(tmp_path, skip={("w64", "unified", 5)})
    plot.main([path, f"--results={results}", f"--out={tmp_path / 'out'}"])
    table = [line for line in (tmp_path / "out" / "mech.md").read_text().splitlines() if line.startswith("| `w")]
    assert [line.split("|")[3].strip() for line in table] == ["5 of 5", "4 of 5", "4 and 5"]
    assert all(line.split("|")[8].strip() == "-" and "pending" in line.split("|")[10] for line in table)


# -----------------------------------------------------------------------------
# --run from the command line: long names, and log rows without what is drawn from them

TINY = {"batch_size": 4, "block_size": 16, "gradient_accumulation_steps": 1, "max_iters": 4}


def write_log(folder, rows):
    import json
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "log.jsonl"), "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
    return str(folder)


def plot_command(*args):
    """python -m research.plot ARGS, as a user runs it: (exit status, stdout, stderr)."""
    import subprocess
    import sys
    done = subprocess.run([sys.executable, "-m", "research.plot", *args], capture_output=True, text=True,
                          cwd=ablation.ROOT, env={**os.environ, "OMP_NUM_THREADS": "1"}, timeout=300)
    return done.returncode, done.stdout, done.stderr


@pytest.mark.slow
def test_runs_with_long_names_get_a_bounded_stated_figure_name(tmp_path):
    """Three runs named as a sweep names them, each 90 characters: joined with _vs_ they pass the
    255 bytes a file name may have. The figure's name is at most run_figures.FIGURE_NAME_BYTES, each
    name's head and tail kept, with a hash of the full names (two lists that shorten alike: two
    files), and the command says so; one run of a 252-character folder (with .png: 256) alike."""
    import hashlib
    names = [f"unified_adamw_d012_tpp20_s{s}_lrx0.5_itx4_" + "h" * 48 + "_cfg" + str(s) for s in (1, 2, 3)]
    dirs = [write_log(tmp_path / n, mechanism_rows(TINY, 1.1)) for n in names]
    assert len("_vs_".join(names).encode()) + 4 > 255
    out = tmp_path / "plots"
    code, stdout, stderr = plot_command(*(f"--run={d}" for d in dirs), f"--out={out}")
    assert code == 0 and "Traceback" not in stderr, stderr
    (made,) = os.listdir(out)
    digest = hashlib.sha256("\n".join(names).encode()).hexdigest()[:run_figures.FIGURE_HASH_CHARS]
    assert made.endswith(f"_{digest}.png") and len(made.encode()) <= run_figures.FIGURE_NAME_BYTES
    assert made.startswith("unified_adamw") and made.count("_vs_") == 2 and "_cfg1_vs_" in made
    assert (out / made).read_bytes()[:4] == b"\x89PNG"
    wrote, note = stdout.strip().splitlines()
    assert wrote == (f"wrote {out / made} (the runs' names shortened to fit {run_figures.FIGURE_NAME_BYTES} bytes, "
                     f"with a hash of the full names; the figure's title names each run)")
    assert note.startswith("note: each --run is one training run, one seed") and "no checkpoint" in note  # logs only
    # the same three shortened alike but for a middle character: another file, not an overwrite
    other = [n.replace("h" * 48, "h" * 20 + "X" + "h" * 27) for n in names]
    dirs = [write_log(tmp_path / "other" / n, mechanism_rows(TINY, 1.1)) for n in other]
    code, _, stderr = plot_command(*(f"--run={d}" for d in dirs), f"--out={out}")
    assert code == 0 and len(os.listdir(out)) == 2, stderr
    long_one = write_log(tmp_path / ("r" * 252), fake_rows(TINY, 2.5))
    code, stdout, stderr = plot_command(f"--run={long_one}", f"--out={out}")
    assert code == 0 and "Traceback" not in stderr and "shortened" in stdout, stderr
    assert max(len(n.encode()) for n in os.listdir(out)) <= run_figures.FIGURE_NAME_BYTES and len(os.listdir(out)) == 3


@pytest.mark.parametrize("where, change, words", [
    ("eval", lambda r: r.pop("val_loss"), r"the eval row of iteration 4 has no 'val_loss'"),
    ("eval", lambda r: r.update(val_loss="2.5"), r"the eval row of iteration 4 has 'val_loss' = '2.5', not a finite"),
    ("eval", lambda r: r.update(val_loss=float("nan")),
     r"the eval row of iteration 4 has 'val_loss' = nan, not a finite"),
    ("train", lambda r: r.pop("loss"), r"the train row of iteration 2 has no 'loss'"),
    ("train", lambda r: r.update(lr=True), r"the train row of iteration 2 has 'lr' = True, not a finite number"),
    ("eval", lambda r: r["mechanism"].update({"update/matrix": "0.11"}),
     r"the eval row of iteration 4 has 'mechanism'\['update/matrix'\] = '0.11', not a number or null"),
    ("eval", lambda r: r["mechanism"].update({"since": 0.5}),
     r"the eval row of iteration 4 has 'mechanism'\['since'\] = 0.5, not an iteration"),
    ("eval", lambda r: r.update(scales={"norm_f.scale": {"mean": "1"}}),
     r"the eval row of iteration 4 has 'scales'\['norm_f.scale'\] = \{'mean': '1'\}, not a dict of numbers"),
])
def test_a_log_row_without_what_is_read_is_one_error_naming_file_line_and_key(tmp_path, where, change, words):
    """A row of a run's log that lacks a value plot.py and the sweep read, or holds one of another type
    there, is one error naming the file, its line number, the key and the fix: from plot.py --run
    (one run, and runs side by side), and from the sweep's reading of the run (ablation.state: a
    damaged log, skipped with that line)."""
    rows = mechanism_rows(TINY, 1.1)
    line = next(n for n, r in enumerate(rows, 1) if r["kind"] == where and r["iter"] == (4 if where == "eval" else 2))
    change(rows[line - 1])
    bad, good = write_log(tmp_path / "bad", rows), write_log(tmp_path / "good", mechanism_rows(TINY, 1.2))
    log = os.path.join(bad, "log.jsonl")
    message = rf"^{re.escape(log)}, line {line}: {words}.*; delete the line"
    for runs in ([bad], [good, bad]):
        with pytest.raises(UserError, match=message) as e:
            plot.main([*(f"--run={d}" for d in runs), f"--out={tmp_path / 'plots'}"])
        assert "\n" not in str(e.value)
    run = {"out_dir": bad, "hash": "h", "config": TINY}
    assert ablation.state(run) == "damaged" and re.match(message, run["damaged"])
    assert ablation.state({**run, "out_dir": good}) == "done"


def test_a_bad_log_row_from_the_command_line_is_one_line_without_a_traceback(tmp_path):
    """python -m research.plot --run: an eval row without val_loss (one run), and a mechanism value that
    is a string (runs side by side): exit 1, one line on stderr naming the file, line and key."""
    rows = mechanism_rows(TINY, 1.1)
    del rows[-1]["val_loss"]
    no_val = write_log(tmp_path / "no_val", rows)
    rows = mechanism_rows(TINY, 1.1)
    rows[-1]["mechanism"]["update/matrix"] = "0.11"
    text = write_log(tmp_path / "text", rows)
    good = write_log(tmp_path / "good", mechanism_rows(TINY, 1.2))
    for runs, key in (([no_val], "has no 'val_loss'"), ([good, text], "has 'mechanism'['update/matrix'] = '0.11'")):
        code, stdout, stderr = plot_command(*(f"--run={d}" for d in runs), f"--out={tmp_path / 'plots'}")
        assert code == 1 and "Traceback" not in stderr and len(stderr.strip().splitlines()) == 1, stderr
        assert stderr.startswith(f"error: {os.path.join(runs[-1], 'log.jsonl')}, line {len(rows)}: the eval row "
                                 f"of iteration 4 {key}"), stderr
