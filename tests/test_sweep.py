"""sweep.py + plot.py on a reduced ablation (tiny model, a few steps, 1 seed): a smoke test."""

import math
import os
import re
import subprocess
import sys

import pytest

import plot
import sweep
from train import UserError
from conftest import ROOT
from test_train import make_dataset


def write_ablation(tmp_path):
    ds = make_dataset(tmp_path / "ds")
    base = tmp_path / "base.py"
    base.write_text(f"dataset = {str(ds)!r}\nn_layer = 1\nn_head = 2\nn_embd = 32\nblock_size = 16\n"
                    "batch_size = 4\nmax_iters = 4\neval_interval = 2\neval_iters = 2\nsample_tokens = 0\n"
                    "scale_wd = 'none'\nbranch_scales = False\nattn_placement = 'in'\nmlp_placement = 'in'\n"
                    "reparam = 'plain'\n")
    ablation = tmp_path / "tiny.py"
    ablation.write_text(f"claim = 'tiny: unified vs baseline'\nbase = {str(base)!r}\n"
                        "variants = {'baseline': {}, 'unified': {'branch_scales': True, "
                        "'attn_placement': 'dual', 'mlp_placement': 'dual_norm', 'reparam': 'or', "
                        "'scale_wd': 'iwd'}}\n"
                        "settings = {'adamw': {'optimizer': 'adamw'}}\nseeds = [1]\nlr_multipliers = [1.0, 2.0]\n")
    return str(ablation)


def test_sweep_runs_skips_resumes_and_plot_writes_tables_and_figures(tmp_path, capsys):
    ablation = write_ablation(tmp_path)
    out_root, assets = str(tmp_path / "runs"), str(tmp_path / "assets")
    runs = sweep.plan(sweep.load_ablation(ablation), out_root)
    assert len(runs) == 4 and {r["lr_mult"] for r in runs} == {1.0, 2.0}
    # an interrupted run: its first half, with a checkpoint at iteration 2
    first = runs[0]
    subprocess.run([sys.executable, os.path.join(ROOT, "train.py"), *first["args"], "--max_iters=2"],
                   check=True, capture_output=True, cwd=ROOT)
    assert sweep.state(first) == "partial"

    assert sweep.main([ablation, f"--out_root={out_root}", "--parallel=1"]) == 0
    printed = capsys.readouterr().out
    assert "4 runs, 0 finished, 4 to run" in printed and "(resuming)" in printed
    assert all(sweep.state(r) == "done" for r in runs)
    assert sweep.main([ablation, f"--out_root={out_root}"]) == 0
    assert "4 runs, 4 finished, 0 to run" in capsys.readouterr().out

    assert plot.main([ablation, f"--out_root={out_root}", f"--out={assets}"]) == 0
    for name in ("tiny.md", "tiny_curves.png", "tiny_scales.png", "lr_schedules.png"):
        assert os.path.getsize(os.path.join(assets, name)) > 0, name
    md = open(os.path.join(assets, "tiny.md")).read()
    unified_row = next(line for line in md.splitlines() if line.startswith("| unified |") and "+-" in line)
    numbers = [float(x) for x in re.findall(r"[-+]?\d+\.\d+", unified_row)]
    assert numbers and all(math.isfinite(x) for x in numbers)
    lr_row = next(line for line in md.splitlines() if line.startswith("| unified |") and "(x" in line)
    assert re.search(r"\d\.\d{4} \(x[12]\)", lr_row)
    assert "not finished" not in md


def test_ablation_files_in_configs_are_valid():
    folder = os.path.join(ROOT, "configs", "ablations")
    for name in sorted(os.listdir(folder)):
        spec = sweep.load_ablation(os.path.join(folder, name))
        assert list(spec["variants"])[0] in ("baseline", "gemma_wd_none"), name
        assert len(spec["seeds"]) >= 3, name
        assert sweep.plan(spec, "runs")


def test_plot_without_finished_runs_is_an_error_and_draws_nothing(tmp_path):
    ablation = os.path.join(ROOT, "configs", "ablations", "c5_hg.py")
    with pytest.raises(UserError, match="no finished runs"):
        plot.main([ablation, f"--out_root={tmp_path / 'runs'}", f"--out={tmp_path / 'plots'}"])
    assert not [f for f in os.listdir(tmp_path / "plots") if f.endswith(".png")]


def test_ablation_file_that_fails_to_run_names_its_line(tmp_path):
    path = tmp_path / "bad.py"
    path.write_text("claim = 'x'\nvariants = {'baseline': {}}\nseeds = [1, 2, 3] +\n")
    with pytest.raises(UserError, match=f"config file {path}, line 3: SyntaxError"):
        sweep.load_ablation(str(path))
