"""The size ladder: its file (shapes, budgets, LR transfer), its plan (research/ladder.py), the
compute-multiplier fit across rungs (research/plot.py), and the sweep's --settings selection."""

import math
import os

import pytest
import torch

from configurator import UserError, estimate_size
from conftest import ROOT
from model import GPT, model_config
from research import ablation, plot, sweep
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
    with pytest.raises(UserError, match="measured no MFU"):
        measured_mfu(str(tmp_path / "s.json"))
    for bad in ('[1]', '{"stages": {"train": {"mfu_percent": "x"}}}'):
        (tmp_path / "s.json").write_text(bad)
        with pytest.raises(UserError, match=r"not a gpu_check summary.json|is not a percentage"):
            measured_mfu(str(tmp_path / "s.json"))
    (tmp_path / "s.json").write_text('{"stages": {"train": {"mfu_percent": 42.5}}}')
    assert measured_mfu(str(tmp_path / "s.json")) == 0.425


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
        c = plot.train_flops(run["config"]) * (k if run["variant"] != "baseline" else 1)
        ablation.write_record(results, ablation.make_record(run, fake_rows(run["config"], E + A * c ** -ALPHA),
                                                            spec["name"]))


def test_the_ladder_fit_recovers_a_known_compute_multiplier(tmp_path):
    path = ladder_file(tmp_path, lambda w: 4)
    spec, results = sweep.load_ablation(path), str(tmp_path / "results")
    record_law(spec, results, k=1.25)
    collected = plot.collect(spec, sweep.load_records(results))[0]
    ref, fits, span, per_variant, tpp = plot.ladder_fit(spec, collected, "widths")
    assert ref == "baseline" and fits[1][2] == pytest.approx(ALPHA, rel=1e-3)
    for setting in spec["settings"]:
        assert per_variant["unified"][setting][1][0] == pytest.approx(1.25, rel=1e-3)
    md = "\n".join(plot.ladder_table(spec, collected))
    assert "| unified | 1.250 | 1.250 | 1.250 | 1.250 | 1.250 |" in md
    assert "not the paper's quantity" in md  # 4 iterations of 64 tokens: far below 100 tokens per parameter
    assert plot.main([path, f"--results={results}", f"--out={tmp_path / 'out'}"]) == 0
    assert (tmp_path / "out" / "tiny_ladder.png").stat().st_size > 0


def test_the_ladder_is_called_the_papers_quantity_only_at_its_regime(tmp_path):
    def iters(width):  # about 100 tokens per parameter: params / 64 tokens per iteration x 100
        cfg = {**ablation.build_config(sweep.load_ablation(ladder_file(tmp_path / "probe", lambda w: 4)),
                                       f"w{width}", "baseline", 1), "vocab_size": 40}
        return round(100 * plot.param_count(cfg) / 64)
    path = ladder_file(tmp_path, iters)
    spec, results = sweep.load_ablation(path), str(tmp_path / "results")
    record_law(spec, results, k=1.1)
    md = "\n".join(plot.ladder_table(spec, plot.collect(spec, sweep.load_records(results))[0]))
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
