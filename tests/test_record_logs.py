"""A record is made only from the log of one run (records.check_log), and a record whose evals are
not those of one finished run is refused wherever records are read (records.load_records, plot.py)."""

import json
import os
import re
import subprocess

import pytest

from research import ablation
from research import plot
from research import records
from plumbing.ops import append_log, read_log, trim_log
from conftest import ROOT
from configurator import DEFAULTS, UserError
from test_sweep import fake_rows, write_ablation

PER_ITER = 2 * 8 * 1  # batch_size x block_size x gradient_accumulation_steps below


def make_run(tmp_path, max_iters=10, eval_interval=4):
    cfg = dict(DEFAULTS, max_iters=max_iters, eval_interval=eval_interval, batch_size=2, block_size=8,
               gradient_accumulation_steps=1)
    cfg.pop("out_dir")
    return dict(name="baseline_adamw_s1_0123abcd", hash=ablation.config_hash(cfg), variant="baseline",
                setting="adamw", seed=1, lr_mult=1.0, iter_mult=1.0, config=cfg,
                out_dir=str(tmp_path / "runs" / "baseline_adamw_s1_0123abcd"))


def train_row(it):
    return {"kind": "train", "iter": it, "tokens": it * PER_ITER, "lr": 1e-3, "loss": 4.0 - it / 100}


def eval_row(it):
    return {"kind": "eval", "iter": it, "tokens": it * PER_ITER, "val_loss": 4.0 - it / 100,
            "scales": {"norm_f.scale": {"mean": 1.0, "std": 0.0, "min": 1.0, "max": 1.0}}}


def log_rows(cfg, start=0, stop=None):
    """The rows train.py writes for iterations start..stop (an eval at start when it is 0)."""
    stop = cfg["max_iters"] if stop is None else stop
    rows = [eval_row(0)] if start == 0 and cfg["eval_interval"] > 0 else []
    for it in range(start + 1, stop + 1):
        rows.append(train_row(it))
        if it == cfg["max_iters"] or cfg["eval_interval"] > 0 and it % cfg["eval_interval"] == 0:
            rows.append(eval_row(it))
    return rows


# -----------------------------------------------------------------------------
# make_record: only from a consistent log


def test_a_log_with_duplicated_train_iterations_is_refused(tmp_path):
    run = make_run(tmp_path)
    rows = log_rows(run["config"])
    rows.insert(5, train_row(3))  # a second process wrote iteration 3 again
    with pytest.raises(UserError, match=r"runs/baseline_adamw_s1_0123abcd.*train rows at iterations .*"
                                        r"iteration 3 twice.*two processes.*delete the run's folder"):
        records.make_record(run, rows, "tiny")


def test_two_processes_in_one_out_dir_are_refused_naming_the_first_duplicate(tmp_path):
    run = make_run(tmp_path, max_iters=80, eval_interval=20)
    one, other = log_rows(run["config"]), log_rows(run["config"])
    rows = [r for pair in zip(one, other) for r in pair]  # interleaved, as two writers append
    with pytest.raises(UserError, match=r"iteration 0 twice|iteration 1 twice"):
        records.make_record(run, rows, "tiny")


def test_a_log_with_eval_iterations_out_of_order_is_refused(tmp_path):
    run = make_run(tmp_path)
    rows = [r for r in log_rows(run["config"]) if not (r["kind"] == "eval" and r["iter"] == 4)]
    rows.insert(rows.index(eval_row(8)) + 1, eval_row(4))  # evals 0, 8, 4, 10
    with pytest.raises(UserError, match=r"runs/baseline_adamw_s1_0123abcd.*eval rows at iterations "
                                        r"\[0, 8, 4, 10\]: iteration 4 after 8"):
        records.make_record(run, rows, "tiny")


def test_a_log_with_a_duplicated_eval_is_refused(tmp_path):
    run = make_run(tmp_path)
    rows = log_rows(run["config"])
    rows.insert(rows.index(eval_row(4)) + 1, eval_row(4))
    with pytest.raises(UserError, match=r"eval rows at iterations \[0, 4, 4, 8, 10\]: iteration 4 twice"):
        records.make_record(run, rows, "tiny")


@pytest.mark.parametrize("missing", [1, 6, 10])
def test_a_log_with_a_missing_train_row_is_refused(tmp_path, missing):
    run = make_run(tmp_path)
    rows = [r for r in log_rows(run["config"]) if not (r["kind"] == "train" and r["iter"] == missing)]
    with pytest.raises(UserError, match=rf"runs/baseline_adamw_s1_0123abcd.*no train row at iteration {missing}"):
        records.make_record(run, rows, "tiny")


def test_an_eval_off_the_configs_grid_is_refused(tmp_path):
    run = make_run(tmp_path)
    rows = log_rows(run["config"])
    rows.insert(rows.index(train_row(6)) + 1, eval_row(6))  # eval_interval=4: no eval is due at 6
    with pytest.raises(UserError, match=r"eval row at iteration 6 .*eval_interval=4.*max_iters=10"):
        records.make_record(run, rows, "tiny")


def test_tokens_that_are_not_iterations_times_tokens_per_iteration_are_refused(tmp_path):
    run = make_run(tmp_path)
    rows = log_rows(run["config"])
    rows[rows.index(train_row(7))] = dict(train_row(7), tokens=6 * PER_ITER)
    with pytest.raises(UserError, match=rf"train, iteration 7\) has tokens={6 * PER_ITER}.*= {7 * PER_ITER}"):
        records.make_record(run, rows, "tiny")


def test_a_log_without_its_final_eval_is_still_named_so(tmp_path):
    run = make_run(tmp_path)
    with pytest.raises(UserError, match="no eval at max_iters=10"):
        records.make_record(run, log_rows(run["config"], stop=9), "tiny")


def test_a_consistent_log_whose_last_eval_is_off_the_interval_is_recorded(tmp_path):
    run = make_run(tmp_path)  # max_iters=10, eval_interval=4: evals at 0, 4, 8 and 10
    rows = log_rows(run["config"])
    records.check_log(run, rows)
    rec = records.make_record(run, rows, "tiny")
    assert [(e["iter"], e["tokens"]) for e in rec["evals"]] == [(i, i * PER_ITER) for i in (0, 4, 8, 10)]
    assert rec["final"]["iter"] == 10 and records.record_problem(rec) is None


def test_a_resumed_runs_trimmed_log_is_recorded(tmp_path):
    run = make_run(tmp_path)
    os.makedirs(run["out_dir"])
    path = os.path.join(run["out_dir"], "log.jsonl")
    for r in log_rows(run["config"], stop=7):  # killed after iteration 7; its last checkpoint is at 4
        append_log(path, r)
    trim_log(path, 4)  # what train.py does when it resumes from that checkpoint
    for r in log_rows(run["config"], start=4):
        append_log(path, r)
    rows = read_log(path)
    records.check_log(run, rows)
    assert rows == log_rows(run["config"])
    # a checkpoint a signal saved between evals (iteration 6) writes no eval row: trimmed, resumed, the same
    path2 = os.path.join(run["out_dir"], "log2.jsonl")
    for r in log_rows(run["config"], stop=6):
        append_log(path2, r)
    trim_log(path2, 6)
    for r in log_rows(run["config"], start=6):
        append_log(path2, r)
    assert records.make_record(run, read_log(path2), "tiny")["evals"][-1]["iter"] == 10


def test_a_run_without_evals_between_is_recorded(tmp_path):
    run = make_run(tmp_path, eval_interval=0)  # train.py then evaluates at max_iters only
    rows = log_rows(run["config"])
    assert [r["iter"] for r in rows if r["kind"] == "eval"] == [10]
    records.check_log(run, rows)


# -----------------------------------------------------------------------------
# Reading records: load_records and plot.py refuse one that is not of one finished run


def write_bad_record(tmp_path, evals_at=(0, 20, 20, 40), max_iters=40):
    run = make_run(tmp_path, max_iters=max_iters, eval_interval=20)
    rec = records.make_record(run, log_rows(run["config"]), "tiny")
    rec["evals"] = [{"iter": i, "tokens": i * PER_ITER, "val_loss": 3.0} for i in evals_at]
    return records.write_record(str(tmp_path / "results"), rec)


def test_load_records_refuses_a_record_with_duplicated_evals(tmp_path):
    path = write_bad_record(tmp_path)
    with pytest.raises(UserError, match=rf"{re.escape(path)}: its evals' iterations \[0, 20, 20, 40\] do not increase.*"
                                        r"remove it.*run its run again"):
        records.load_records(str(tmp_path / "results"))


def test_load_records_refuses_a_record_that_ends_before_max_iters(tmp_path):
    path = write_bad_record(tmp_path, evals_at=(0, 20), max_iters=40)
    with pytest.raises(UserError, match=rf"{re.escape(path)}: its last eval is at iteration 20.*max_iters=40.*"
                                        r"remove it"):
        records.load_records(str(tmp_path / "results"))


def test_plot_refuses_a_record_with_duplicated_evals(tmp_path):
    path = write_bad_record(tmp_path)
    with pytest.raises(UserError, match=rf"{re.escape(path)}: its evals' iterations \[0, 20, 20, 40\]"):
        plot.main([os.path.join(ROOT, "configs", "ablations", "none.py"), f"--results={tmp_path / 'results'}",
                   f"--out={tmp_path / 'plots'}"])
    assert not (tmp_path / "plots").exists()


def test_every_committed_record_passes_the_check():
    listed = subprocess.run(["git", "ls-files", "results/*.json"], cwd=ROOT, capture_output=True, text=True)
    paths = listed.stdout.split() if listed.returncode == 0 else []
    if not paths:  # not a git checkout: every record present
        paths = [os.path.join("results", n) for n in os.listdir(os.path.join(ROOT, "results")) if n.endswith(".json")]
    assert paths
    refused = {}
    for p in paths:
        with open(os.path.join(ROOT, p)) as f:
            problem = records.record_problem(json.load(f))
        if problem:
            refused[p] = problem
    assert refused == {}
    records.load_records(os.path.join(ROOT, "results"))


@pytest.mark.parametrize("line", ['{"kind": "train", "iter": 2, "lo', "null", "[1, 2]", '{"kind": "eval"}'])
def test_a_damaged_log_line_is_one_error_naming_the_file_and_line(tmp_path, line):
    """Mid-file (a torn last line alone is a crash's and is skipped): bad JSON, null, a list, a row
    without iter and tokens; and a binary file."""
    from plumbing.ops import read_log

    path = tmp_path / "log.jsonl"
    good = json.dumps({"kind": "train", "iter": 1, "tokens": 8})
    path.write_text(f"{good}\n{line}\n{good}\n")
    with pytest.raises(UserError, match=r"log\.jsonl, line 2: .* is not a log row") as e:
        read_log(str(path))
    assert "\n" not in str(e.value)
    path.write_text(f"{good}\n{line}")  # the last line, torn or not: skipped only when it is bad JSON
    if line.startswith('{"kind": "train", "iter": 2, "lo'):
        assert len(read_log(str(path))) == 1
    path.write_bytes(b"\xff\xfe\x00binary")  # not the start of a row: not a torn one either
    with pytest.raises(UserError, match=r"log\.jsonl, line 1: .* is not a log row"):
        read_log(str(path))


@pytest.mark.parametrize("bad", [float("nan"), "1.5", None, True])
def test_a_record_with_a_val_loss_that_is_no_number_is_refused_by_name(tmp_path, bad):
    spec = ablation.load_ablation(write_ablation(tmp_path))
    results = tmp_path / "results"
    run = ablation.plan(spec, "runs")[0]
    rec = records.make_record(run, fake_rows(run["config"], 2.0), "tiny")
    rec["final"]["val_loss"] = bad
    path = records.write_record(str(results), rec)
    with pytest.raises(UserError, match=rf"{os.path.basename(path)}: it holds a val_loss of"):
        records.load_records(str(results))


def test_a_sweep_skips_what_it_cannot_read_names_it_and_goes_on(tmp_path, capsys):
    from research import sweep

    path = write_ablation(tmp_path)
    spec = ablation.load_ablation(path)
    results, out_root = tmp_path / "results", tmp_path / "runs"
    runs = ablation.plan(spec, str(out_root))
    (results).mkdir()
    (results / "garbage.json").write_bytes(b"\x00\x01 not json")
    os.makedirs(runs[0]["out_dir"])
    with open(os.path.join(runs[0]["out_dir"], "log.jsonl"), "w") as f:
        f.write('null\n{"kind": "train", "iter": 1, "tokens": 64}\n')
    assert sweep.main([path, f"--results={results}", f"--out_root={out_root}", "--dry_run"]) == 0
    out = capsys.readouterr().out
    assert "1 with a damaged log (skipped)" in out and "skipped: " in out and "garbage.json is not a run record" in out
    assert f"damaged  {runs[0]['name']}" in out
