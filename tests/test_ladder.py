"""The size ladder and the 0.12B protocol: their files (shapes, budgets, LR transfer, power
analyses), their plans (research/ladder.py), the compute-multiplier fit across rungs with its
interval (research/plot.py), the pilot rule, the sweep's --settings selection, and both files run
end to end at miniature size (--scale_down)."""

import math
import os
import re

import numpy as np
import pytest
import torch

from configurator import UserError
from plumbing.memory import estimate_size
from conftest import ROOT
from model import GPT, model_config
from research import ablation, comparisons, multipliers, plot, regime, stats, summary, sweep
from research.records import make_record, write_record
from research.ladder import main as ladder_main, plan_table, subset_for
from test_sweep import fake_rows, write_ablation

LADDER = os.path.join(ROOT, "configs", "ablations", "ladder.py")


def test_the_ladder_files_stated_parameters_are_the_models_and_its_budgets_its_labels():
    spec = ablation.load_ablation(LADDER)
    rungs = ablation.run_config_file(LADDER)["_RUNGS"]
    for setting in spec["settings"]:
        cfg, _ = ablation.run_config(spec, setting, "baseline", 1)
        with torch.device("meta"):
            model = GPT(model_config({**cfg, "vocab_size": 50257}))
        rung = setting.split("_")[1]
        assert model.num_active_params() == rungs[rung][1], setting  # the file's count is the model's
        tokens = cfg["max_iters"] * cfg["batch_size"] * cfg["block_size"] * cfg["gradient_accumulation_steps"]
        label = int(setting.rsplit("_tpp", 1)[1])
        assert tokens / model.num_active_params() == pytest.approx(label, rel=2e-3), setting
        assert cfg["gradient_accumulation_steps"] % 16 == 0  # divides among 8 or 16 GPUs
        # the LR transfer rule: 1 / n_embd from 6e-4 at 768; Muon's LR the same at every width
        assert cfg["learning_rate"] == pytest.approx(6e-4 * 768 / cfg["n_embd"]) and cfg["min_lr"] == \
            pytest.approx(cfg["learning_rate"] / 10)
        if cfg["optimizer"] == "muon":
            assert cfg["muon_lr"] == 0.02 and cfg["lr_schedule"] == "wsd"
        # the scale vectors' LR is the smallest rung's at every width: size and their LR never change together
        assert cfg["scale_lr"] == 6e-4
        # the LR comes from the largest tuned rung at or below this one (0.12B, 0.5B), at its own budget
        # where that rung tuned at it (0.12B at 100 tokens/parameter), else at 20
        opt, tpp = setting.split("_")[0], int(setting.rsplit("_tpp", 1)[1])
        tuner = f"{rung[0]}012" if rung in ("d012", "m012") else f"{rung[0]}05"
        expected_tuner = f"{opt}_{tuner}_tpp{tpp if tuner.endswith('012') else 20}"
        assert ablation.tuning_setting(spec, setting) == expected_tuner, setting
    tuned = {s for s in spec["settings"] if ablation.tuning_setting(spec, s) == s}
    assert tuned == {f"{o}_{r}_tpp{t}" for o in ("adamw", "muon") for r, t in
                     (("d012", 20), ("d05", 20), ("d012", 100), ("m012", 20), ("m05", 20), ("m012", 100))}
    for name, settings in spec["ladders"].items():  # one optimizer, family and budget per ladder, smallest first
        assert len({s.split("_")[0] for s in settings}) == 1 and len({s[-6:] for s in settings}) == 1, name
        actives = [rungs[s.split("_")[1]][1] for s in settings]
        assert actives == sorted(actives) and len(settings) >= 3, name


def test_the_scale_vectors_lr_rule_is_read_from_the_plan_and_reaches_the_optimizer():
    """Every run the ladder plans (sweeps included) gives its scale vectors scale_lr x its multiplier,
    the same at every rung of a multiplier, while the matrices' AdamW LR follows 1 / n_embd; the
    optimizer's scale groups (and the OR magnitudes, x magnitude_lr_mult) take it."""
    from types import SimpleNamespace

    from optim import param_groups
    spec = ablation.load_ablation(LADDER)
    by_mult = {}
    for run in sweep.plan(spec, "runs"):
        if run.get("waiting"):  # a table run: its multiplier is its sweep's choice, still to come
            continue
        cfg = run["config"]
        by_mult.setdefault(run["lr_mult"], set()).add(cfg["scale_lr"])
        assert cfg["scale_lr"] == pytest.approx(6e-4 * run["lr_mult"])
        assert cfg["learning_rate"] == pytest.approx(6e-4 * 768 / cfg["n_embd"] * run["lr_mult"])
    assert all(len(values) == 1 for values in by_mult.values())  # one scale LR per multiplier, at every size
    cfg, _ = ablation.run_config(spec, "adamw_d2_tpp100", "unified", 1)
    with torch.device("meta"):
        model = GPT(model_config({**cfg, "vocab_size": 50257}))
    groups = {g["name"]: g["lr"] for g in param_groups(model, SimpleNamespace(**cfg))}
    assert groups["scale_input"] == groups["scale_output"] == 6e-4 and groups["magnitude_input"] == 6e-4
    assert groups["matrix"] == pytest.approx(6e-4 * 768 / 2560)


def test_the_committed_plan_is_what_the_planning_command_prints(tmp_path):
    """configs/ablations/ladder.md states the ladder's figures; it is regenerated, never edited."""
    out = tmp_path / "plan.md"
    assert ladder_main([LADDER, f"--out={out}"]) == 0  # the command, in this process
    with open(os.path.join(ROOT, "configs", "ablations", "ladder.md")) as f:
        assert f.read() == out.read_text(), "regenerate: python -m research.ladder configs/ablations/ladder.py " \
                                            "--out=configs/ablations/ladder.md"


def test_the_plan_states_each_rungs_decay_per_step_and_the_rule_it_follows(capsys):
    """Each rung's row gives the matrices' and the IWD scales' decay per step at the peak LR (lr x
    weight_decay, torch's decoupled decay), from its run config; under AdamW the matrices' falls
    against the scales' as 768 / n_embd, under Muon both are width-free: what the file's comment says."""
    spec = ablation.load_ablation(LADDER)
    assert ladder_main([LADDER]) == 0
    rows = {line.split("|")[1].strip().strip("`"): line for line in capsys.readouterr().out.splitlines()
            if line.startswith("| `")}
    for setting in spec["settings"]:
        cfg = ablation.run_config(spec, setting, "unified", spec["seeds"][0])[0]
        matrix_lr = cfg["muon_lr"] if cfg["optimizer"] == "muon" else cfg["learning_rate"]
        m, s = re.search(r"decay per step: matrices ([\d.e-]+), input scales \(IWD\) ([\d.e-]+)", rows[setting]).groups()
        assert float(m) == pytest.approx(matrix_lr * cfg["weight_decay"], rel=0.01)
        assert float(s) == pytest.approx(cfg["scale_lr"] * cfg["weight_decay"], rel=0.01)
        width_ratio = 768 / cfg["n_embd"] if cfg["optimizer"] == "adamw" else 0.02 / 6e-4
        assert float(m) / float(s) == pytest.approx(width_ratio, rel=0.02)


def test_the_plan_says_what_fits_a_smaller_gpu_and_what_a_run_costs():
    """On a 40 GB GPU: AdamW's 2B rung does not fit under DDP (20 bytes a parameter of weights,
    gradients, DDP's buckets and moments, beside its micro-batch) and no micro-batch fixes it, so
    FSDP2 over the fewest GPUs (a power of two) whose 16 bytes a parameter fit beside the micro-batch;
    Muon cannot shard. The 0.5B rung fits with a smaller micro-batch."""
    spec = ablation.load_ablation(LADDER)
    table = plan_table(spec, 40, 989, 0.4, "assumed").splitlines()
    row = {line.split(" | ")[0][3:-1]: line for line in table if line.startswith("| `")}

    def sizes(setting):
        cfgs = [{**ablation.run_config(spec, setting, v, 1)[0], "vocab_size": 50257} for v in spec["variants"]]
        with torch.device("meta"):
            total = max(GPT(model_config(c)).num_params() for c in cfgs)
        return cfgs[0], total, estimate_size(cfgs[0])[1]

    cfg, total, activations = sizes("adamw_d2_tpp100")
    assert 20 * total + activations > 40e9 and 20 * total > 40e9 - activations / cfg["batch_size"]
    gpus = 2 ** math.ceil(math.log2(16 * total / (40e9 - activations)))
    assert f"| no: --fsdp=True over {gpus} GPUs |" in row["adamw_d2_tpp100"]
    assert "| no: a GPU with more memory |" in row["muon_d2_tpp100"]
    cfg, total, activations = sizes("adamw_d05_tpp100")
    fit = int((40e9 - 20 * total) / (activations / cfg["batch_size"]))  # sequences beside the state
    micro = max(b for b in range(1, fit + 1) if 512 % b == 0)  # that divide the iteration's 512
    assert 0 < micro < cfg["batch_size"]
    assert f"| no: --batch_size={micro} --gradient_accumulation_steps={512 // micro}" in row["adamw_d05_tpp100"]
    assert "| yes |" in row["adamw_d012_tpp100"]
    # GPU-hours: FLOPs over peak x MFU
    cfg, _, _ = sizes("adamw_d2_tpp100")
    tokens = cfg["max_iters"] * cfg["batch_size"] * cfg["block_size"] * cfg["gradient_accumulation_steps"]
    with torch.device("meta"):
        flops = GPT(model_config(cfg)).flops_per_token() * tokens
    assert f" | {flops / (989e12 * 0.4) / 3600:,.0f} | " in row["adamw_d2_tpp100"]
    assert subset_for(9e9) == "sample-10BT" and subset_for(2.02e11) == "sample-350BT" and subset_for(4e11) is None


def test_a_missing_or_cpu_gpu_check_summary_is_one_line(tmp_path):
    from research.ladder import measured_mfu
    with pytest.raises(UserError, match="not a gpu_check summary.json"):
        measured_mfu(str(tmp_path / "none.json"))
    (tmp_path / "s.json").write_text('{"stages": {"train": {"mfu_percent": null}}}')
    with pytest.raises(UserError, match="measured an MFU"):
        measured_mfu(str(tmp_path / "s.json"))
    for bad in ('[1]', '{"stages": {"train": {"mfu_percent": "x"}}}'):
        (tmp_path / "s.json").write_text(bad)
        with pytest.raises(UserError, match=r"not a gpu_check summary.json|is not a percentage"):
            measured_mfu(str(tmp_path / "s.json"))
    (tmp_path / "s.json").write_text('{"stages": {"train": {"mfu_percent": 42.5}}}')
    assert measured_mfu(str(tmp_path / "s.json")) == (0.425, "train")
    # the protocol stage (the smallest rung's own shape) wins where it measured one
    (tmp_path / "s.json").write_text('{"stages": {"protocol": {"mfu_percent": 39.0}, "train": {"mfu_percent": 42.5}}}')
    assert measured_mfu(str(tmp_path / "s.json")) == (0.39, "protocol")
    (tmp_path / "s.json").write_text('{"stages": {"protocol": {"rc": 1}, "train": {"mfu_percent": 42.5}}}')
    assert measured_mfu(str(tmp_path / "s.json")) == (0.425, "train")


@pytest.mark.parametrize("flag, words", [
    ("--mfu=1e-300", "--mfu=1e-300: must be from 0.01 to 1: MFU is a fraction such as 0.4"),
    ("--mfu=0.005", "--mfu=0.005: must be from 0.01 to 1"),
    ("--mfu=0", "--mfu=0.0: must be from 0.01 to 1"),
    ("--mfu=40", "--mfu=40.0: must be from 0.01 to 1: MFU is a fraction such as 0.4 (40%), not a percentage"),
    ("--mfu=nan", "--mfu=nan: must be from 0.01 to 1"),
    ("--peak_tflops=1e-300", "--peak_tflops=1e-300: must be from 1 to 20000: one GPU's dense bf16 peak in TFLOP/s"),
    ("--peak_tflops=inf", "--peak_tflops=inf: must be from 1 to 20000"),
    ("--gpu_memory_gb=1e-300", "--gpu_memory_gb=1e-300: must be from 1 to 2048: one GPU's memory in GB"),
    ("--gpu_memory_gb=1e300", "--gpu_memory_gb=1e+300: must be from 1 to 2048"),
])
def test_a_machine_figure_that_describes_no_gpu_is_one_line_naming_it(flag, words):
    """--mfu, --peak_tflops and --gpu_memory_gb outside what any GPU or training run has (a 300-digit
    total from --mfu=1e-300, a percentage given as a fraction) are refused before the plan."""
    with pytest.raises(UserError, match=re.escape(words)):
        ladder_main([LADDER, flag])


def test_a_meaningless_mfu_from_the_command_line_is_one_line_without_a_traceback(tmp_path):
    """python -m research.ladder --mfu=1e-300: exit 1, one line naming the value and the fix; and a
    gpu_check summary whose MFU is below 1% (no training run's) alike, naming the file."""
    import subprocess
    import sys
    (tmp_path / "s.json").write_text('{"stages": {"train": {"mfu_percent": 1e-298}}}')
    for flag, line in (("--mfu=1e-300", "error: --mfu=1e-300: must be from 0.01 to 1: MFU is a fraction such as 0.4"),
                       (f"--gpu_check={tmp_path / 's.json'}",
                        f"error: --gpu_check={tmp_path / 's.json'}: train stage's mfu_percent=1e-298 (MFU 1e-300; give "
                        f"--mfu instead): must be from 0.01 to 1")):
        done = subprocess.run([sys.executable, "-m", "research.ladder", LADDER, flag], capture_output=True, text=True,
                              cwd=ROOT, env={**os.environ, "OMP_NUM_THREADS": "1"}, timeout=300)
        assert done.returncode == 1 and "Traceback" not in done.stderr and done.stdout == "", done.stderr
        assert len(done.stderr.strip().splitlines()) == 1 and done.stderr.startswith(line), done.stderr


# -----------------------------------------------------------------------------
# The fit across rungs


def ladder_file(tmp_path, iters):
    """Four rungs of growing width; `iters(n_embd)` sets each one's max_iters."""
    rungs = {f"w{w}": {"n_embd": w, "n_head": 2, "max_iters": iters(w), "warmup_iters": 2, "eval_interval": iters(w)}
             for w in (16, 32, 48, 64)}
    return write_ablation(tmp_path, body=(
        "variants = {'baseline': {}, 'unified': {'reparam': 'or'}}\nexpected = {'unified': 'lower'}\n"
        f"settings = {rungs!r}\nseeds = [1]\nladders = {{'widths': {list(rungs)!r}}}\n"))


E, A, ALPHA = 1.5, 40.0, 0.3


def record_law(spec, results, k):
    """Records whose final losses follow L(C) = E + A C^-alpha: the baseline at its compute C, the
    other variant as if it had k times its compute (a compute multiplier of exactly k)."""
    for run in sweep.plan(spec, "runs"):
        c = regime.train_flops(run["config"]) * (k if run["variant"] != "baseline" else 1)
        write_record(results, make_record(run, fake_rows(run["config"], E + A * c ** -ALPHA),
                                                            spec["name"]))


def test_the_ladder_fit_recovers_a_known_compute_multiplier(tmp_path):
    path = ladder_file(tmp_path, lambda w: 4)
    spec, results = sweep.load_ablation(path), str(tmp_path / "results")
    record_law(spec, results, k=1.25)
    collected = comparisons.collect(spec, sweep.load_records(results))[0]
    [row] = multipliers.ladder_rows(spec, collected)
    assert row["ladder"]["fit"][2] == pytest.approx(ALPHA, rel=1e-3)
    assert row["ladder"]["per_rung"] == pytest.approx([1.25] * 4, rel=1e-3)
    assert row["ladder"]["multiplier"] == pytest.approx(1.25, rel=1e-3) and row["ladder"]["low"] is None
    md = "\n".join(multipliers.ladder_table(spec, collected))
    assert "| unified | 1.250 | 1.250 | 1.250 | 1.250 | x1.250 (no rung with two seeds: no interval) | - | 0 | " \
           "unresolved (one seed a rung: no interval) | 1, 1, 1, 1 |" in md
    assert "not the paper's quantity" in md  # 4 iterations of 64 tokens: far below 100 tokens per parameter
    assert plot.main([path, f"--results={results}", f"--out={tmp_path / 'out'}"]) == 0
    assert (tmp_path / "out" / "tiny_ladder.png").stat().st_size > 0


def test_a_ladders_interval_over_seeds_is_in_its_table_and_the_summary_with_its_strength(tmp_path):
    """Seeds 1-3 at the two smaller rungs, one at the larger ones (setting_seeds), losses on the law
    with a per-seed noise: the table's multiplier, interval and p are stats.ladder_multiplier's on
    the records' own numbers, and the summary carries the ladder as a claim row in the BH family,
    its sign on the loss scale (negative: the variant needs less compute)."""
    rungs = {f"w{w}": {"n_embd": w, "n_head": 2, "max_iters": 4, "warmup_iters": 2, "eval_interval": 4}
             for w in (16, 32, 48, 64)}
    path = write_ablation(tmp_path, body=(
        "variants = {'baseline': {}, 'unified': {'reparam': 'or'}}\nexpected = {'unified': 'lower'}\n"
        f"settings = {rungs!r}\nseeds = [1, 2, 3]\nladders = {{'widths': {list(rungs)!r}}}\n"
        "setting_seeds = {'w48': 1, 'w64': 1}\n"))
    spec, results = sweep.load_ablation(path), str(tmp_path / "results")
    noise = {(s, v): 0.002 * ((7 * s + 3 * (v == "unified")) % 5 - 2) for s in (1, 2, 3) for v in spec["variants"]}
    losses = {}
    for run in sweep.plan(spec, "runs"):
        c = regime.train_flops(run["config"]) * (1.2 if run["variant"] != "baseline" else 1)
        losses[(run["setting"], run["variant"], run["seed"])] = loss = E + A * c ** -ALPHA + noise[(run["seed"],
                                                                                                     run["variant"])]
        write_record(results, make_record(run, fake_rows(run["config"], loss), spec["name"]))
    assert sorted(s for st, v, s in losses if st == "w64") == [1, 1] and len([k for k in losses if k[0] == "w16"]) == 6
    collected = comparisons.collect(spec, sweep.load_records(results))[0]
    [row] = multipliers.ladder_rows(spec, collected)
    seeds = {st: [1, 2, 3] if st in ("w16", "w32") else [1] for st in rungs}
    flops = {st: regime.train_flops(ablation.build_config(spec, st, "baseline", 1)) for st in rungs}
    flops_u = {st: regime.train_flops(ablation.build_config(spec, st, "unified", 1)) for st in rungs}
    want = stats.ladder_multiplier([flops[st] for st in rungs],
                                   [[losses[(st, "baseline", s)] for s in seeds[st]] for st in rungs],
                                   [[losses[(st, "unified", s)] for s in seeds[st]] for st in rungs],
                                   [flops_u[st] for st in rungs])
    assert row["ladder"]["multiplier"] == pytest.approx(want["multiplier"], rel=1e-9)
    assert (row["ladder"]["low"], row["ladder"]["high"], row["p"]) == pytest.approx(
        (want["low"], want["high"], want["p"]), rel=1e-9)
    assert row["ci"][0] == pytest.approx(-math.log(want["multiplier"])) and row["ci"][1] < row["ci"][0] < row["ci"][2]
    md = "\n".join(multipliers.ladder_table(spec, collected))
    assert f"x{want['multiplier']:.3f} [{want['low']:.3f}, {want['high']:.3f}] | {want['p']:#.3g} |" in md
    assert "| 3, 3, 1, 1 |" in md
    table = summary.summary([(spec, collected, [], None)])
    line = next(ln for ln in table.splitlines() if "| widths |" in ln)
    assert f"compute multiplier x{want['multiplier']:.3f}" in line and "per rung 3, 3, 1, 1" in line
    paired = [stats.paired_t_p([losses[(st, "unified", s)] - losses[(st, "baseline", s)] for s in (1, 2, 3)])
              for st in ("w16", "w32")]  # the rungs with 3 seeds are claim rows of their own; 1 seed: none
    assert f"| {stats.bh_adjust(paired + [want['p']])[2]:#.3g} |" in line  # the ladder's p, BH over all three
    word = "reproduced" if want["low"] > 1 else "unresolved" if want["high"] > 1 else "contradicted"
    assert f"| lower | {word} |" in line
    assert "A ladder's row is its compute multiplier" in table


def test_the_ladder_is_called_the_papers_quantity_only_at_its_regime(tmp_path):
    def iters(width):  # about 100 tokens per parameter: params / 64 tokens per iteration x 100
        cfg = {**ablation.build_config(sweep.load_ablation(ladder_file(tmp_path / "probe", lambda w: 4)),
                                       f"w{width}", "baseline", 1), "vocab_size": 40}
        return round(100 * regime.param_count(cfg) / 64)
    path = ladder_file(tmp_path, iters)
    spec, results = sweep.load_ablation(path), str(tmp_path / "results")
    record_law(spec, results, k=1.1)
    md = "\n".join(multipliers.ladder_table(spec, comparisons.collect(spec, sweep.load_records(results))[0]))
    assert "the paper's compute multiplier (its regime: about 100 tokens per parameter)" in md


@pytest.mark.parametrize("line, match", [
    ("ladders = {'l': ['a', 'b']}", r"ladders\['l'\] = \['a', 'b'\]: write a list of 3 or more settings"),
    ("ladders = {'l': ['a', 'b', 'nope']}", r"ladders\['l'\]"),
    ("tune_lr = True\nlr_multipliers = [1, 2]\ntuning_seeds = [9]\ntune_setting = {'b': 'nope'}", "tune_setting"),
    # a setting that tunes another must tune itself: no chains
    ("tune_lr = True\nlr_multipliers = [1, 2]\ntuning_seeds = [9]\ntune_setting = {'b': 'a', 'a': 'c'}", "tune_setting"),
])
def test_malformed_ladders_and_tuning_maps_are_named(tmp_path, line, match):
    path = write_ablation(tmp_path, body=("variants = {'baseline': {}, 'unified': {'reparam': 'or'}}\n"
                                          "settings = {'a': {}, 'b': {}, 'c': {}}\nseeds = [1]\n" + line + "\n"))
    with pytest.raises(UserError, match=match):
        sweep.load_ablation(path)


def test_a_tuning_map_runs_one_sweep_per_source_and_the_settings_flag_keeps_it(tmp_path, capsys):
    path = write_ablation(tmp_path, body=(
        "variants = {'baseline': {}, 'unified': {'reparam': 'or'}}\n"
        "settings = {'small': {}, 'big': {'n_embd': 64}, 'other': {'max_iters': 6}}\nseeds = [1]\n"
        "tune_lr = True\nlr_multipliers = [0.5, 1, 2]\ntuning_seeds = [9]\ntune_setting = {'big': 'small'}\n"))
    spec = sweep.load_ablation(path)
    runs = sweep.plan(spec, "runs")
    sweeps = {r["setting"] for r in runs if r["seed"] == 9}
    assert sweeps == {"small", "other"}  # big takes small's choice; other, named by nobody, tunes itself
    assert ablation.tuning_setting(spec, "big") == "small" and ablation.tuning_setting(spec, "other") == "other"
    picked = sweep.all_runs([spec], "runs", {}, ["big"])
    assert {(r["setting"], r["seed"]) for r in picked} == {("small", 9), ("big", 1)}  # its LR's sweep comes along
    with pytest.raises(UserError, match=r"--settings: 'huge' match no setting"):
        sweep.main([path, "--settings=huge", "--dry_run", f"--results={tmp_path / 'r'}"])


# -----------------------------------------------------------------------------
# The 0.12B protocol: its power analysis, its pilot rule, and both GPU files at miniature size

PROTOCOL = os.path.join(ROOT, "configs", "ablations", "c8_d012.py")


def test_the_protocol_registers_its_power_and_shares_the_ladders_runs():
    """c8_d012.py: 2 claim rows (level 0.025), a pilot of 4 of 10 seeds, and at its assumed SD the
    seeds stats.seeds_for_power gives; its baseline and unified runs are the ladder's adamw_d012_tpp20
    runs (same hashes), so records serve both; the plan prints the pilot's GPU-hours; the share row
    is registered at a third to a half of the main gap, exploratory."""
    spec, ladder = sweep.load_ablation(PROTOCOL), sweep.load_ablation(LADDER)
    assert ablation.claim_rows(spec) == [("unified", "baseline"), ("unified", "norm_only")]
    assert ablation.power_alpha(spec) == 0.025 and ablation.power_alpha(ladder) == 0.05 / 8
    assert [r["seed"] for r in sweep.plan(spec, "runs") if r["main"] and r["variant"] == "baseline"] == [1, 2, 3, 4]
    mine = {(r["variant"], r["seed"], r["lr_mult"]): r["hash"] for r in sweep.plan(spec, "runs") if r["hash"]}
    theirs = {(r["variant"], r["seed"], r["lr_mult"]): r["hash"] for r in sweep.plan(ladder, "runs")
              if r["hash"] and r["setting"] == "adamw_d012_tpp20"}
    shared = mine.keys() & theirs.keys()
    assert len(shared) == 12 and all(mine[k] == theirs[k] for k in shared)  # 2 arms x 2 tuning seeds x 3 LRs
    text = plan_table(spec, 80, 989, 0.4, "assumed")
    n = stats.seeds_for_power(0.009, 0.005, 0.025, 0.8)
    assert f"the rule plans {n} seeds: `unified - baseline` power {stats.paired_power(0.009, 0.005, n, 0.025):.2f}" in text
    assert "level 0.025 (0.05 over its 2 claim rows" in text and "(causal " in text
    assert ablation.powered_rows(spec) == ["unified - baseline"]  # the share row: exploratory, a lead at most
    assert ablation.row_gaps(spec, "unified - norm_only") == (0.003, 0.0045)
    seeds, main = re.search(r"expected seeds ([\d.]+) .* `unified - baseline` ([\d.]+) at 0.009", text).groups()
    with open(PROTOCOL) as f:  # the file's comment quotes the simulated design the plan prints
        comment = " ".join(line[1:].strip() for line in f if line.startswith("#"))
    assert f"{seeds} seeds expected, unified - baseline a finding in {main} of designs" in comment


def test_the_pilots_sd_sets_the_planned_seeds_by_the_registered_rule(tmp_path):
    """Four pilot seeds recorded with paired differences of a known SD: the plan then holds seeds
    1..n with n = seeds_for_power at the larger of the two claim rows' SDs (at least the pilot, at
    most every seed), and the tables count them as planned, never as added after a look."""
    path = write_ablation(tmp_path, body=(
        "variants = {'baseline': {}, 'unified': {'reparam': 'or'}, 'norm_only': {'mlp_placement': 'in_norm'}}\n"
        "expected = {'unified': 'lower'}\ncomparisons = [('unified', 'norm_only', 'lower')]\n"
        "settings = {'s': {}}\nseeds = list(range(1, 13))\n"
        "power = {'sd': 0.005, 'gap': 0.009, 'power': 0.8, 'pilot': 4}\n"))
    spec, results = sweep.load_ablation(path), str(tmp_path / "results")
    pilot_runs = sweep.plan(spec, "runs")
    assert sorted({r["seed"] for r in pilot_runs}) == [1, 2, 3, 4]
    spread = {1: -0.004, 2: 0.004, 3: -0.002, 4: 0.002}  # unified's own noise; norm_only's is half of it
    loss = {"baseline": 3.0, "unified": 2.99, "norm_only": 2.995}
    for r in pilot_runs:
        noise = spread[r["seed"]] * {"baseline": 0, "unified": 1, "norm_only": 0.5}[r["variant"]]
        write_record(results, make_record(r, fake_rows(r["config"], loss[r["variant"]] + noise),
                                                            spec["name"]))
    sd = max(np.std([spread[s] for s in range(1, 5)], ddof=1),
             np.std([0.5 * spread[s] for s in range(1, 5)], ddof=1))
    want = max(4, stats.seeds_for_power(0.009, sd, 0.025, 0.8) or 12)
    records = sweep.load_records(results)
    planned = sorted({r["seed"] for r in sweep.plan(spec, "runs", records)})
    assert planned == list(range(1, want + 1)) and 4 < want < 12
    assert ablation.pilot_rule(spec, {(v, s): loss[v] + spread[s] * {"baseline": 0, "unified": 1, "norm_only": 0.5}[v]
                                      for v in loss for s in range(1, 5)}) == (want, pytest.approx(sd))
    for r in sweep.plan(spec, "runs", records):
        if r["seed"] > 4:
            write_record(results, make_record(r, fake_rows(r["config"], loss[r["variant"]]),
                                                                spec["name"]))
    collected = comparisons.collect(spec, sweep.load_records(results))[0]
    rows = comparisons.comparisons(spec, collected)
    assert all(len(c["seeds"]) == want and "added after a look" not in c["verdict"] for c in rows)


@pytest.mark.parametrize("line, match", [
    ("power = {'sd': 0.005, 'gap': 0.009, 'power': 0.8}", r"setting 's' plans 3 seeds: power 0\.\d\d .* needs \d+"),
    ("power = {'sd': 0.5, 'gap': 0.009, 'power': 0.8}", r"plans 3 seeds: .* needs more than 100 seeds \(or a pilot\)"),
    ("power = {'sd': 0.005, 'gap': 0.009, 'power': 0.5}", r"power = .*'power': 0.8 to 1"),
    ("power = {'sd': 0.005, 'gap': 0.009, 'power': 0.8, 'pilot': 2}", r"'pilot': 4 or more of its 3 table seeds"),
    ("power = {'sd': -1, 'gap': 0.009, 'power': 0.8}", r"'sd': SD > 0"),
    ("power = {'sd': 0.005, 'gap': 0.009, 'power': 0.8, 'seeds': 3}", r"power = "),
    ("setting_seeds = {'nope': 1}", r"setting_seeds\['nope'\] = 1: name a setting of \['s'\]"),
    ("setting_seeds = {'s': 9}", r"setting_seeds\['s'\] = 9: .* a count from 1 to its 3 table seeds"),
    ("power = {'sd': 0.02, 'gap': 0.009, 'power': 0.8}\nsettings = {'a': {}, 'b': {}, 'c': {}}\n"
     "ladders = {'l': ['a', 'b', 'c']}", r"ladders\['l'\] plans \[3, 3, 3\] seeds per rung: power 0\.\d\d"),
])
def test_a_file_that_cannot_reach_its_registered_power_is_refused(tmp_path, line, match):
    path = write_ablation(tmp_path, body=(
        "variants = {'baseline': {}, 'unified': {'reparam': 'or'}}\nexpected = {'unified': 'lower'}\n"
        f"settings = {{'s': {{}}}}\nseeds = [1, 2, 3]\n{line}\n"))
    with pytest.raises(UserError, match=match):
        sweep.load_ablation(path)


@pytest.mark.parametrize("sd, seeds, cap", [(0.01, 8, None), (0.012, 8, None), (0.5, 8, None), (0.004, 8, None),
                                           (0.004, 8, 3)])
def test_a_pilot_design_that_cannot_reach_its_registered_power_at_its_cap_is_refused(tmp_path, sd, seeds, cap):
    """With a pilot the rule runs at most every table seed of the setting (its setting_seeds' cap): a
    file whose power at that cap, at its registered SD, is below the registered power is refused at
    load with the power it reaches and the seeds it needs (stats.paired_power and seeds_for_power,
    at one claim row's level 0.05), as a fixed design's shortfall is; a cap below the pilot, which
    could never finish, too. A design that reaches it loads."""
    extra = f"setting_seeds = {{'s': {cap}}}\n" if cap else ""
    path = write_ablation(tmp_path, body=(
        "variants = {'baseline': {}, 'unified': {'reparam': 'or'}}\nexpected = {'unified': 'lower'}\n"
        f"settings = {{'s': {{}}}}\nseeds = list(range(1, {seeds + 1}))\n{extra}"
        f"power = {{'sd': {sd}, 'gap': 0.009, 'power': 0.8, 'pilot': 4}}\n"))
    if cap:
        with pytest.raises(UserError, match=rf"setting_seeds\['s'\] = {cap} is below the pilot's 4 seeds: .* "
                                            rf"give it 4"):
            sweep.load_ablation(path)
        return
    got, need = stats.paired_power(0.009, sd, seeds, 0.05), stats.seeds_for_power(0.009, sd, 0.05, 0.8, most=100)
    assert (got < 0.8) == (need is None or need > seeds)  # the two computations agree on the shortfall
    if got >= 0.8:
        assert sweep.load_ablation(path)["power"]["pilot"] == 4
        return
    with pytest.raises(UserError, match=rf"setting 's': its pilot rule stops at {seeds} seeds, where the power is "
                                        rf"{got:.2f} at sd={sd}, .* below the registered 0.8: it needs "
                                        rf"{need if need else 'more than 100'} seeds") as e:
        sweep.load_ablation(path)
    assert "\n" not in str(e.value)


@pytest.mark.slow
def test_the_protocol_and_the_ladders_first_rung_run_end_to_end_at_miniature_size(tmp_path):
    """sweep.py --scale_down: c8_d012.py's LR sweep, pilot, the rule's further seeds, then the
    ladder's smallest AdamW dense rung, whose runs are all the protocol's (recorded once, none run
    again), all on the CPU, uncompiled, with every rule of the files; plot.py --scale_down draws both.
    (A larger rung's own runs: tests/test_sweep.py's tiny files run the same code.)"""
    results, runs = str(tmp_path / "results"), str(tmp_path / "runs")
    flags = [f"--results={results}", f"--out_root={runs}", "--scale_down", "--parallel=2"]
    assert sweep.main([PROTOCOL, *flags]) == 0
    spec, records = sweep.load_ablation(PROTOCOL, scale_down=True), sweep.load_records(results)
    plan = sweep.plan(spec, "runs", records)
    assert all(r["hash"] in records for r in plan)  # nothing waits: tuned, piloted, planned, run
    finals = {(r["variant"], r["seed"]): records[r["hash"]]["final"]["val_loss"] for r in plan if r["main"]}
    sd = max(np.std([finals[(v, s)] - finals[(ref, s)] for s in range(1, 5)], ddof=1)
             for v, ref in ablation.claim_rows(spec))
    n = max(4, stats.seeds_for_power(0.009, sd, 0.025, 0.8, most=10) or 10)
    assert sorted({s for _, s in finals}) == list(range(1, n + 1))
    assert all(not rec["config"]["compile"] and rec["config"]["device"] == "cpu" for rec in records.values())
    before = len(records)
    assert sweep.main([LADDER, *flags, "--settings=adamw_d012_tpp20"]) == 0
    ladder, records = sweep.load_ablation(LADDER, scale_down=True), sweep.load_records(results)
    wanted = [r for r in sweep.plan(ladder, "runs", records) if r["setting"] == "adamw_d012_tpp20"]
    assert all(r["hash"] in records for r in wanted) and len(records) == before  # every run the protocol's
    assert plot.main([PROTOCOL, LADDER, f"--results={results}", f"--out={tmp_path / 'out'}", "--scale_down"]) == 0
    summary = (tmp_path / "out" / "summary.md").read_text()  # the protocol's runs are the ladder's: one row, both named
    assert f"| `c8_d012`, `ladder` | adamw_d012_tpp20 | unified - baseline | {n} |" in summary
