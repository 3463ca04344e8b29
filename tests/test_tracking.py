"""Optional experiment tracking (wandb_log) and one run's curves (plot.py --run)."""

import importlib.machinery
import os
import subprocess
import sys
import types

import numpy as np
import pytest

from plumbing import ops
from conftest import ROOT
from configurator import UserError
from test_train import make_dataset, read_log, run, tiny_args


class FakeRun:
    """What train.py uses of a wandb run, recording the calls."""

    def __init__(self, **init):
        self.init, self.logged, self.exit_code = init, [], None

    def log(self, data, step):
        self.logged.append((step, data))

    def finish(self, exit_code=0):
        self.exit_code = exit_code


def fake_wandb(monkeypatch):
    runs = []
    module = types.ModuleType("wandb")
    module.__spec__ = importlib.machinery.ModuleSpec("wandb", None)  # found by find_spec
    module.init = lambda **kw: runs.append(FakeRun(**kw)) or runs[-1]
    monkeypatch.setitem(sys.modules, "wandb", module)
    return runs


def test_every_log_row_goes_to_the_tracker_with_the_config(tmp_path, monkeypatch):
    runs = fake_wandb(monkeypatch)
    ds = make_dataset(tmp_path / "ds")
    run(tiny_args(ds, tmp_path / "o", "--max_iters=4", "--eval_interval=2", "--wandb_log=True",
                  "--wandb_project=p1"))
    (tracker,) = runs
    assert tracker.init["project"] == "p1" and tracker.init["name"] == "o"  # out_dir's name by default
    assert tracker.init["config"]["max_iters"] == 4 and tracker.exit_code == 0
    rows = read_log(tmp_path / "o")
    assert [step for step, _ in tracker.logged] == [r["iter"] for r in rows]
    for (_, data), row in zip(tracker.logged, rows):
        assert data["tokens"] == row["tokens"]
        if row["kind"] == "train":
            assert data == {"tokens": row["tokens"], "train/lr": row["lr"], "train/loss": row["loss"]}
        else:
            assert data["eval/val_loss"] == row["val_loss"]
            for site, stats in row["scales"].items():
                assert all(data[f"eval/scales/{site}/{k}"] == v for k, v in stats.items())
            for key, value in row["mechanism"].items():  # (mechanism.Mechanism: flat already)
                assert data[f"eval/mechanism/{key}"] == value
            assert len(data) == 2 + 4 * len(row["scales"]) + len(row["mechanism"])  # nothing else, nothing nested


def test_a_failed_run_finishes_its_tracker_run_as_failed(tmp_path, monkeypatch):
    runs = fake_wandb(monkeypatch)
    ds = make_dataset(tmp_path / "ds")

    def no_space(*args):
        raise OSError(28, "No space left on device", "log.jsonl")

    monkeypatch.setattr(ops, "append_log", lambda path, row: no_space() if row["iter"] == 2 else None)
    with pytest.raises(OSError):
        run(tiny_args(ds, tmp_path / "o", "--max_iters=4", "--wandb_log=True"))
    assert runs[0].exit_code == 1


def test_wandb_log_without_the_package_is_one_line_before_anything_is_built(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "wandb", None)  # as if not installed: find_spec gives None
    ds = make_dataset(tmp_path / "ds")
    with pytest.raises(UserError, match=r"wandb_log=True needs the wandb package: pip install wandb"):
        run(tiny_args(ds, tmp_path / "o", "--wandb_log=True"))
    assert not (tmp_path / "o").exists()


def test_the_core_never_imports_wandb_when_tracking_is_off(tmp_path):
    ds = make_dataset(tmp_path / "ds")
    code = ("import sys, train, configurator\n"
            f"train.train(configurator.complete(configurator.load_config({tiny_args(ds, tmp_path / 'o', '--max_iters=2')!r})[0]))\n"
            "assert 'wandb' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, capture_output=True, timeout=120)


@pytest.mark.slow
def test_offline_wandb_writes_its_files_in_out_dir(tmp_path):
    pytest.importorskip("wandb", reason="optional: pip install wandb")
    ds = make_dataset(tmp_path / "ds")
    env = {**os.environ, "WANDB_MODE": "offline", "WANDB_SILENT": "true"}
    proc = subprocess.run([sys.executable, "train.py", *tiny_args(ds, tmp_path / "o", "--max_iters=3",
                                                                  "--wandb_log=True", "--wandb_run_name=tiny")],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-2000:]
    (folder,) = [f for f in os.listdir(tmp_path / "o" / "wandb") if f.startswith("offline-run-")]
    (data,) = [f for f in os.listdir(tmp_path / "o" / "wandb" / folder) if f.endswith(".wandb")]
    data = (tmp_path / "o" / "wandb" / folder / data).read_bytes()  # the records, to sync later
    assert b"max_iters" in data and b"train/loss" in data and b"eval/val_loss" in data


def test_plot_run_draws_the_logged_losses_lr_and_scales(tmp_path, monkeypatch):
    from research import plot, run_figures
    ds = make_dataset(tmp_path / "ds")
    run(tiny_args(ds, tmp_path / "o", "--max_iters=6", "--eval_interval=3"))
    figures = []
    monkeypatch.setattr(run_figures.plt, "close", figures.append)
    plot.main([f"--run={tmp_path / 'o'}", f"--out={tmp_path / 'plots'}"])
    assert (tmp_path / "plots" / "o.png").read_bytes()[:4] == b"\x89PNG"
    rows = read_log(tmp_path / "o")
    train = [r for r in rows if r["kind"] == "train"]
    evals = [r for r in rows if r["kind"] == "eval"]
    loss_ax, lr_ax, scale_ax = figures[0].axes
    val_line = next(line for line in loss_ax.lines if line.get_label() == "val")
    assert list(val_line.get_ydata()) == [r["val_loss"] for r in evals]
    assert list(lr_ax.lines[0].get_ydata()) == [r["lr"] for r in train]
    # one labeled line per kind of site (the mean over layers), and the gamma = 1 line
    sites = list(evals[-1]["scales"])
    kinds = list(dict.fromkeys(s.split(".", 2)[2] if s.startswith("blocks.") else s for s in sites))
    assert len(scale_ax.lines) == len(kinds) + 1 and "norm_f.scale" in kinds
    layers = [s for s in sites if s.endswith("." + kinds[0]) and s.startswith("blocks.")]
    assert len(layers) == 1 and scale_ax.lines[0].get_label() == kinds[0]  # 1 layer: no count, no band
    assert list(scale_ax.lines[0].get_ydata()) == [r["scales"][layers[0]]["mean"] for r in evals]
    assert [line.get_label() for line in scale_ax.lines[:-1]] == [h.get_label() for h in scale_ax.get_legend().legend_handles]
    assert [line.get_label() for line in loss_ax.lines] == ["train (per iteration)", "val"]  # 6 rows: no mean
    assert "logged to iteration 6" in figures[0]._suptitle.get_text()

    run(tiny_args(ds, tmp_path / "o2", "--max_iters=2", "--eval_interval=1", "--n_layer=3"))
    plot.main([f"--run={tmp_path / 'o2'}", f"--out={tmp_path / 'plots'}"])
    scale_ax = figures[1].axes[2]
    evals = [r for r in read_log(tmp_path / "o2") if r["kind"] == "eval"]
    q = [f"blocks.{i}.attn.q.in_scale" for i in range(3)]
    line = next(ln for ln in scale_ax.lines if ln.get_label() == "attn.q.in_scale (3 layers)")
    assert np.allclose(line.get_ydata(), [np.mean([r["scales"][s]["mean"] for s in q]) for r in evals])
    assert len(scale_ax.collections) == len(scale_ax.lines) - 2  # a band per kind in 3 layers (not norm_f)


def test_plot_run_takes_no_ablation_options(tmp_path):
    from research import plot
    for extra in (["--readme=results/README.md"], ["--results=results"], ["configs/ablations/c8_regime.py"]):
        with pytest.raises(UserError, match="draws runs from their logs"):
            plot.main([f"--run={tmp_path}", *extra])


@pytest.mark.parametrize("make,message", [
    (lambda d: None, r"no log.jsonl there"),
    (lambda d: (d / "log.jsonl").write_text(""), r"has no rows yet"),
])
def test_plot_run_on_a_folder_without_a_log_is_one_line(tmp_path, make, message):
    from research import plot
    (tmp_path / "o").mkdir()
    make(tmp_path / "o")
    with pytest.raises(UserError, match=message):
        plot.main([f"--run={tmp_path / 'o'}", f"--out={tmp_path / 'plots'}"])


@pytest.mark.parametrize("project", ["a/b", "x" * 129, "what?"])
def test_a_project_name_wandb_refuses_is_one_line_before_anything_is_made(tmp_path, monkeypatch, project):
    runs = fake_wandb(monkeypatch)
    ds = make_dataset(tmp_path / "ds")
    with pytest.raises(UserError, match=r"wandb_project=.*at most 128 characters and none of / \\ # \? % :"):
        run(tiny_args(ds, tmp_path / "o", "--wandb_log=True", f"--wandb_project={project}"))
    assert not (tmp_path / "o").exists() and runs == []


def test_resuming_a_finished_run_starts_no_tracker_run(tmp_path, monkeypatch):
    """A requeued job (--init_from=auto) on a finished run trains nothing: no empty W&B run either."""
    runs = fake_wandb(monkeypatch)
    ds = make_dataset(tmp_path / "ds")
    run(tiny_args(ds, tmp_path / "o", "--max_iters=2", "--wandb_log=True"))
    run(["--init_from=auto", f"--out_dir={tmp_path / 'o'}"])
    assert len(runs) == 1
    run(["--init_from=resume", f"--out_dir={tmp_path / 'o'}", "--max_iters=3"])  # more to train: a new one
    assert len(runs) == 2 and [step for step, _ in runs[1].logged] == [3, 3]
