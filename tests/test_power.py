"""The GPU plans' power (research/power.py and the `power` entry of an ablation file): the pilot
design and the ladder simulated with fixed seeds against the formulas, the level and the file's own
pilot rule; per-row gaps and exploratory rows, from the file's checks to the summary's words; and the
figures the protocol's comment derives from the committed records, recomputed from them."""

import math
import os
import re
import statistics

import numpy as np
import pytest
import torch

from configurator import UserError
from conftest import ROOT
from model import GPT, model_config
from research import ablation, comparisons, power, stats, summary, sweep
from research.ladder import RUN_OVERHEAD_MIN, node_hours, plan_table
from research.records import make_record, write_record
from test_sweep import fake_rows, tuning_file, write_ablation

PROTOCOL = os.path.join(ROOT, "configs", "ablations", "c8_d012.py")
LADDER = os.path.join(ROOT, "configs", "ablations", "ladder.py")
ROWS = [("unified", "baseline", "lower"), ("unified", "norm_only", "lower")]
THREE_ARMS = ("variants = {'baseline': {}, 'unified': {'reparam': 'or'}, 'norm_only': {'mlp_placement': 'in_norm'}}\n"
              "expected = {'unified': 'lower'}\ncomparisons = [('unified', 'norm_only', 'lower')]\n"
              "settings = {'s': {}}\n")


def mc_bound(p, sims, k=4):
    """k Monte Carlo standard errors of a share p over `sims` independent designs."""
    return k * math.sqrt(max(p * (1 - p), 1e-4) / sims)


def comment_text(path):
    """A config file's comment lines joined into one line of prose."""
    with open(path) as f:
        return " ".join(line[1:].strip() for line in f if line.startswith("#"))


# -----------------------------------------------------------------------------
# The pieces of the pilot simulation against their scalar references


def test_the_vectorized_t_test_and_bh_are_stats_own():
    rng = np.random.default_rng(3)
    diffs = rng.normal(0.002, 0.005, (50, 10, 3))
    n = rng.integers(2, 11, 50)
    means, p = power.paired_p_values(diffs, n)
    for i in range(50):
        for r in range(3):
            assert p[i, r] == pytest.approx(stats.paired_t_p(list(diffs[i, :n[i], r])), abs=1e-12)
            assert means[i, r] == pytest.approx(np.mean(diffs[i, :n[i], r]))
    adjusted = power.bh_rows(p)
    for i in range(50):
        assert adjusted[i] == pytest.approx(stats.bh_adjust(list(p[i])))


def test_the_effect_thresholds_give_seeds_for_powers_answer():
    """n reaches the power exactly when gap / sd reaches n's threshold: the same n as
    stats.seeds_for_power over SDs that cross every threshold (10 seeds at most, as c8_d012's)."""
    thresholds = power.effect_thresholds(0.025, 0.8, 10)
    for sd in np.linspace(0.001, 0.012, 45):
        want = stats.seeds_for_power(0.009, sd, 0.025, 0.8, most=10)
        got = next((n for n, d in thresholds.items() if 0.009 / sd >= d), None)
        assert got == want, sd


def test_arm_means_give_every_rows_gap_and_refuse_contradictions():
    means = power.arm_means([("unified", "baseline"), ("unified", "norm_only")], [-0.009, -0.003])
    assert means["unified"] - means["baseline"] == pytest.approx(-0.009)
    assert means["unified"] - means["norm_only"] == pytest.approx(-0.003) and means["baseline"] == pytest.approx(0)
    with pytest.raises(ValueError, match="contradict"):
        power.arm_means([("a", "b"), ("b", "c"), ("a", "c")], [0.01, 0.01, 0.01])


# -----------------------------------------------------------------------------
# The 0.12B protocol's designs, simulated


def test_a_fixed_design_rejects_at_its_level_and_has_the_formulas_power():
    """40,000 fixed designs of 6 seeds (pilot = 0): with no effect each row's two-sided p <= 0.025 in
    0.025 of them, and with unified 0.009 below the baseline and 0.003 below norm_only, in
    stats.paired_power's share, within 4 Monte Carlo standard errors."""
    none = power.pilot_design(ROWS, [0.0, 0.0], 0.005, 0.025, 0.8, 0, 6, 0.009)
    for rate in none["rejections"]:
        assert abs(rate - 0.025) < mc_bound(0.025, none["sims"])
    effect = power.pilot_design(ROWS, [0.009, 0.003], 0.005, 0.025, 0.8, 0, 6, 0.009)
    for rate, gap in zip(effect["rejections"], (0.009, 0.003)):
        want = stats.paired_power(gap, 0.005, 6, 0.025)
        assert abs(rate - want) < mc_bound(want, effect["sims"]), (gap, rate, want)
    assert effect["seeds"] == 6 and effect["seeds_share"] == {6: 1.0}


def test_the_pilot_design_costs_a_little_level_and_gains_power():
    """The pilot's SD, read again by the test over n seeds, makes the two-sided rate under no effect
    a little larger than the level (it is stated, not corrected), and the rule's extra seeds give the
    main row more power than the fixed design of the seeds the formula plans."""
    args = (0.005, 0.025, 0.8)
    none = power.pilot_design(ROWS, [0.0, 0.0], *args, 4, 10, 0.009)
    assert all(0.025 < rate < 0.025 * 1.3 for rate in none["rejections"]), none["rejections"]
    assert all(0.0125 < rate < 0.0125 * 1.5 for rate in none["findings"]), none["findings"]
    effect = power.pilot_design(ROWS, [0.009, 0.003], *args, 4, 10, 0.009)
    fixed = power.pilot_design(ROWS, [0.009, 0.003], *args, 0, stats.seeds_for_power(0.009, 0.005, 0.025, 0.8), 0.009)
    assert effect["findings"][0] > fixed["findings"][0] + 0.05 and 6 < effect["seeds"] < 8
    assert effect["seeds"] == none["seeds"]  # the rule reads the SDs only: the same draws, the same seeds


@pytest.mark.slow
def test_the_pilot_simulation_is_the_files_own_rule_run_design_by_design():
    """The same draws as pilot_design's (its Generator, its layout: designs x seeds x arms), decided
    one design at a time by c8_d012.py's own rule (ablation.pilot_rule), stats.paired_t_p and
    stats.bh_adjust: the same seeds and the same findings, design for design."""
    spec = sweep.load_ablation(PROTOCOL)
    sims, sd = 300, 0.005
    for gaps in ([0.009, 0.003], [0.0, 0.0]):
        fast = power.pilot_design(ROWS, gaps, sd, 0.025, 0.8, 4, 10, 0.009, sims=sims, seed=5)
        means = power.arm_means([r[:2] for r in ROWS], [-g for g in gaps])
        arms = list(means)
        loss = np.random.default_rng(5).normal(0.0, sd / math.sqrt(2), (sims, 10, len(arms)))
        loss += np.array([means[a] for a in arms])
        seeds, found = [], np.zeros(2)
        for design in loss:
            finals = {(a, s + 1): design[s, k] for k, a in enumerate(arms) for s in range(10)}
            n, _ = ablation.pilot_rule(spec, {k: v for k, v in finals.items() if k[1] <= 4})
            diffs = [[finals[(v, s)] - finals[(r, s)] for s in range(1, n + 1)] for v, r, _ in ROWS]
            adjusted = stats.bh_adjust([stats.paired_t_p(d) for d in diffs])
            found += [p <= 0.05 and statistics.fmean(d) < 0 for p, d in zip(adjusted, diffs)]
            seeds.append(n)
        assert fast["seeds"] == pytest.approx(statistics.fmean(seeds), abs=1e-12)
        assert fast["findings"] == pytest.approx(list(found / sims), abs=1e-12), gaps


def plan_of(tmp_path, gaps, name):
    """The plan's power text of a tiny three-arm pilot file with these per-row gaps."""
    path = write_ablation(tmp_path, name=name, body=THREE_ARMS + (
        "seeds = list(range(1, 11))\npower = {'sd': 0.005, 'gap': 0.009, 'power': 0.8, 'pilot': 4, "
        f"'gaps': {gaps!r}, 'exploratory': ['unified - norm_only']}}\n"))
    return plan_table(sweep.load_ablation(path), 80, 989, 0.4, "assumed")


def test_the_plan_states_a_power_for_each_row_and_a_smaller_share_gap_reads_lower(tmp_path):
    """A share registered at a third of the main gap prints a lower power (by formula and simulated)
    than the main row; registered at the main gap, the same power; and with no effect the simulated
    rate is near the level, far below either."""
    found = r"each row a finding \(BH over the claim rows, on the claimed side\) in: `unified - baseline` ([\d.]+) at " \
            r"0.009; `unified - norm_only` ([\d.]+) at ([\d.]+)"
    third = plan_of(tmp_path, {"unified - norm_only": 0.003}, "third")
    main, share, gap = re.search(found, third).groups()
    assert float(share) < float(main) - 0.4 and gap == "0.003"
    formula = re.search(r"`unified - baseline` power ([\d.]+) at 0.009; `unified - norm_only` power ([\d.]+) at 0.003",
                        third).groups()
    assert formula == (f"{stats.paired_power(0.009, 0.005, 6, 0.025):.2f}", f"{stats.paired_power(0.003, 0.005, 6, 0.025):.2f}")
    same = plan_of(tmp_path, {"unified - norm_only": 0.009}, "same")
    main, share, _ = re.search(found, same).groups()
    assert abs(float(share) - float(main)) < 0.03
    none = re.search(r"with no effect anywhere, in ([\d.]+) and ([\d.]+) of designs", third).groups()
    assert all(float(x) < 0.03 for x in none)


def test_the_node_hours_count_each_runs_start_up():
    flops, gpus = 1e21, 8
    gpu_hours, wall = node_hours(flops, 30, gpus, 989, 0.4)
    assert gpu_hours == pytest.approx(1e21 / (989e12 * 0.4) / 3600)
    assert wall == pytest.approx(gpu_hours / 8 + 30 * RUN_OVERHEAD_MIN / 60)
    assert node_hours(flops, 30, gpus, 989, 0.3)[1] > wall > node_hours(flops, 30, gpus, 989, 0.5)[1]


# -----------------------------------------------------------------------------
# The ladder: gaps that shrink with compute, and its estimator simulated


def test_a_constant_multiplier_moves_the_loss_less_at_larger_rungs():
    """On L(C) = E + A C^-a the gap of a multiplier m at C is L(C) - L(mC), computed here directly, which
    ladder_gaps gives from the first rung's alone; ladder_power with one gap per rung is the noncentral
    t of the per-rung slopes, and with equal gaps the constant-gap formula."""
    e, amp, a, m = 2.0, 40.0, 0.15, 1.22
    compute = [1e19, 1.8e20, 5.9e20, 2.3e21]
    curve = lambda c: e + amp * c ** -a  # noqa: E731
    direct = [curve(c) - curve(m * c) for c in compute]
    assert power.ladder_gaps(direct[0], a, compute) == pytest.approx(direct, rel=1e-12)
    assert direct[-1] < direct[0] * 0.5
    seeds, sd, alpha = [8, 3, 1, 1], 0.005, 0.05 / 8
    ncp = len(seeds) / (sd * math.sqrt(sum(1 / (n * g * g) for n, g in zip(seeds, direct))))
    assert stats.ladder_power(direct, sd, seeds, alpha) == pytest.approx(stats.t_test_power(ncp, 9, alpha))
    assert stats.ladder_power([0.009] * 4, sd, seeds, alpha) == stats.ladder_power(0.009, sd, seeds, alpha)
    assert stats.ladder_power(direct, sd, seeds, alpha) < stats.ladder_power(direct[0], sd, seeds, alpha)


def test_the_rung_compute_estimate_is_the_models_flops():
    spec = ablation.load_ablation(LADDER)
    for setting in ("adamw_d012_tpp20", "adamw_d2_tpp100", "muon_m1_tpp20"):
        cfg, _ = ablation.run_config(spec, setting, "baseline", 1)
        with torch.device("meta"):
            model = GPT(model_config({**cfg, "vocab_size": 50257}))
        tokens = cfg["max_iters"] * cfg["batch_size"] * cfg["block_size"] * cfg["gradient_accumulation_steps"]
        assert power.rung_compute(cfg) == pytest.approx(model.flops_per_token() * tokens, rel=1e-3)


def test_the_cheapest_seeds_reach_the_power_and_add_nothing_when_it_is_reached():
    gaps, sd, alpha = [0.009, 0.0058, 0.0049, 0.004], 0.005, 0.05 / 8
    seeds, added = power.cheapest_seeds(gaps, sd, [8, 3, 1, 1], [3.4, 60, 210, 840], alpha, 0.8)
    assert stats.ladder_power(gaps, sd, seeds, alpha) >= 0.8 and all(n >= k for n, k in zip(seeds, [8, 3, 1, 1]))
    assert added == pytest.approx(sum((n - k) * c for n, k, c in zip(seeds, [8, 3, 1, 1], [3.4, 60, 210, 840])))
    assert power.cheapest_seeds([0.009] * 4, sd, [8, 3, 1, 1], [1] * 4, alpha, 0.8) == ([8, 3, 1, 1], 0.0)
    assert power.cheapest_seeds([1e-5] * 4, sd, [2, 2, 2, 2], [1] * 4, alpha, 0.8, most=5) is None


@pytest.mark.slow
def test_the_ladders_printed_power_is_what_its_estimator_shows():
    """stats.ladder_multiplier itself on 2,000 simulated dense ladders of the file's seeds (8, 3, 1, 1)
    and rungs' FLOPs, on a curve whose gaps are the registered ones, each seed's reference shifted by a
    spread as large as the paired SD (0.005; the estimator counts it, stats.ladder_power leaves it
    out): with no effect it rejects at its level (0.05 here, where 2,000 ladders resolve it), and with
    1.22x in the share stats.ladder_power gives and the plan prints, within 4 Monte Carlo standard
    errors; ladder.md states that figure."""
    spec = ablation.load_ablation(LADDER)
    name = "adamw dense 20 tokens/parameter"
    compute = [power.rung_compute(ablation.run_config(spec, s, "baseline", 1)[0]) for s in spec["ladders"][name]]
    gaps, seeds, alpha = ablation.ladder_gaps_of(spec, name), [8, 3, 1, 1], ablation.power_alpha(spec)
    assert gaps == pytest.approx(power.ladder_gaps(0.009, 0.15, compute))
    none = power.ladder_design(compute, seeds, 0.009, 0.15, 0.005, alpha, null=True, sd_seed=0.005, seed=1)
    level = float((np.nan_to_num(none["p"], nan=1.0) <= 0.05).mean())
    assert abs(level - 0.05) < mc_bound(0.05, none["sims"]) and none["failed"] == 0
    effect = power.ladder_design(compute, seeds, 0.009, 0.15, 0.005, alpha, sd_seed=0.005, seed=2)
    want = stats.ladder_power(gaps, 0.005, seeds, alpha)
    assert abs(effect["claimed"] - want) < mc_bound(want, effect["sims"]), (effect["claimed"], want)
    with open(os.path.join(ROOT, "configs", "ablations", "ladder.md")) as f:
        assert f"- ladder `{name}`: seeds per rung {seeds}, gaps " in (text := f.read())
        assert f"power {want:.2f} (exploratory)" in text


@pytest.mark.slow
@pytest.mark.parametrize("family, seeds", [("dense", [8, 3, 1, 1]), ("moe", [10, 3, 1])])
def test_seed_spreads_shrinking_with_size_leave_the_pooled_estimators_power_where_the_plan_puts_it(family, seeds):
    """ladder.py's comment: were the paired SD to shrink as parameters^-0.31 (c8_d012.py's slope),
    the formula with each rung's SD known gives power 0.85 (dense) and 0.87 (MoE), computed here; but
    stats.ladder_multiplier pools one SD over the rungs that have seeds and applies it to the
    one-seed rungs, so on 2,000 simulated ladders with those shrinking SDs (and a reference seed
    spread of 0.005) its power is the plan's, stats.ladder_power at a constant 0.005 (within 4 Monte
    Carlo standard errors), far below the known-SD figure: the comment says so."""
    spec = ablation.load_ablation(LADDER)
    name = f"adamw {family} 20 tokens/parameter"
    settings = spec["ladders"][name]
    compute = [power.rung_compute(ablation.run_config(spec, s, "baseline", 1)[0]) for s in settings]
    active = [ladder_rungs()[s.split("_")[1]][1] for s in settings]
    gaps, alpha = ablation.ladder_gaps_of(spec, name), ablation.power_alpha(spec)
    sds = [0.005 * (n / active[0]) ** -0.31 for n in active]
    ncp = len(seeds) / math.sqrt(sum(sd * sd / (n * g * g) for sd, n, g in zip(sds, seeds, gaps)))
    known = stats.t_test_power(ncp, sum(n - 1 for n in seeds), alpha)
    planned = stats.ladder_power(gaps, 0.005, seeds, alpha)
    shrinking = power.ladder_design(compute, seeds, 0.009, 0.15, sds, alpha, sd_seed=0.005, seed=3)
    assert abs(shrinking["claimed"] - planned) < mc_bound(planned, shrinking["sims"]), (shrinking["claimed"], planned)
    assert known > shrinking["claimed"] + 0.4
    text = comment_text(LADDER)
    assert ladder_known_powers()[family] == f"{known:.2f}", (ladder_known_powers(), known)
    assert f"its power stays about the plan's {planned_powers()['dense']} and {planned_powers()['moe']}" in text


def ladder_rungs():
    """ladder.py's _RUNGS: {rung: (shape, active parameters, sequences, micro-batch)}."""
    import runpy
    return runpy.run_path(LADDER)["_RUNGS"]


def ladder_known_powers():
    """{"dense", "moe": the known-SD power ladder.py's comment quotes}."""
    found = re.search(r"the formula with each rung's SD known would give power ([\d.]+) dense, ([\d.]+) MoE",
                      comment_text(LADDER))
    return dict(zip(("dense", "moe"), found.groups()))


def planned_powers():
    """{"dense", "moe": the power ladder.md prints for the AdamW 20 tokens/parameter ladder}."""
    with open(os.path.join(ROOT, "configs", "ablations", "ladder.md")) as f:
        plan = f.read()
    return {family: re.search(rf"ladder `adamw {family} 20 tokens/parameter`: .*: power ([\d.]+) \(exploratory\)",
                              plan).group(1) for family in ("dense", "moe")}


def test_the_ladders_comment_quotes_its_plan():
    """ladder.py's comment states the power ladder.md prints (itself the planning command's output,
    tests/test_ladder.py) for its dense and MoE ladders, and the seeds 80% would take."""
    with open(os.path.join(ROOT, "configs", "ablations", "ladder.md")) as f:
        plan = f.read()
    got = {family: re.search(rf"ladder `adamw {family} 20 tokens/parameter`: .*: power ([\d.]+) \(exploratory\).* "
                             rf"80% needs \[([\d, ]+)\] seeds per rung", plan).groups() for family in ("dense", "moe")}
    text = comment_text(LADDER)
    assert f"power {got['dense'][0]} (dense) and {got['moe'][0]} (MoE;" in text
    assert f"80% would take {got['dense'][1]} seeds (dense) and {got['moe'][1]} (MoE)" in text


# -----------------------------------------------------------------------------
# Per-row gaps and exploratory rows: the file's checks, the pilot rule, the summary's words


@pytest.mark.parametrize("entry, match", [
    ("'gaps': {'nope': 0.003}", r"power\['gaps'\] = \{'nope': 0.003\}: map claim rows of \['unified - baseline', "
                                r"'unified - norm_only'\]"),
    ("'gaps': {'unified - norm_only': 0}", r"power\['gaps'\] = .* a number > 0 or a \(low, high\) range"),
    ("'gaps': {'unified - norm_only': (0.005, 0.003)}", r"power\['gaps'\] = "),
    ("'gaps': [0.003]", r"power\['gaps'\] = "),
    ("'exploratory': 'unified - norm_only'", r"power\['exploratory'\] = 'unified - norm_only': a list of rows of"),
    ("'exploratory': ['unified - norm_only', 'unified - norm_only']", r"power\['exploratory'\] = .* each once"),
    ("'exploratory': ['unified - baseline', 'unified - norm_only'], 'pilot': 4",
     r"a pilot sizes its seeds by a powered row"),
    ("'exponent': 0.15", r"power\['exponent'\] = 0.15: .* for a file with ladders"),
    ("'gaps': {'unified - norm_only': 0.003}", r"setting 's' plans 10 seeds: power 0\.\d\d at sd=0.005, gap=0.003 "
                                               r"\(row 'unified - norm_only'\), .* it needs 29 seeds \(or a pilot\), "
                                               r"or declare the row exploratory"),
])
def test_a_malformed_or_underpowered_row_entry_is_one_line(tmp_path, entry, match):
    path = write_ablation(tmp_path, body=THREE_ARMS + (
        f"seeds = list(range(1, 11))\npower = {{'sd': 0.005, 'gap': 0.009, 'power': 0.8, {entry}}}\n"))
    with pytest.raises(UserError, match=match) as e:
        sweep.load_ablation(path)
    assert "\n" not in str(e.value)


def test_an_exploratory_row_loads_and_leaves_the_pilot_rule_to_the_powered_rows(tmp_path):
    """Declared exploratory, the underpowered share row loads; the rule sizes the seeds by the
    powered row's gap (0.009) at the largest SD of both rows, so a share of 0.003 adds no seeds."""
    path = write_ablation(tmp_path, body=THREE_ARMS + (
        "seeds = list(range(1, 11))\npower = {'sd': 0.005, 'gap': 0.009, 'power': 0.8, 'pilot': 4, "
        "'gaps': {'unified - norm_only': (0.003, 0.0045)}, 'exploratory': ['unified - norm_only']}\n"))
    spec = sweep.load_ablation(path)
    assert ablation.powered_rows(spec) == ["unified - baseline"] and ablation.is_exploratory(spec, "unified - norm_only")
    spread = {1: -0.004, 2: 0.004, 3: -0.002, 4: 0.002}
    finals = {(v, s): 3.0 + spread[s] * {"baseline": 0, "unified": 1, "norm_only": 0.5}[v]
              for v in spec["variants"] for s in spread}
    sd = statistics.stdev(spread.values())
    assert ablation.pilot_rule(spec, finals) == (max(4, stats.seeds_for_power(0.009, sd, 0.025, 0.8)), pytest.approx(sd))


def test_an_exploratory_row_is_a_lead_at_most_in_the_summary(tmp_path):
    """Both rows far past BH: the powered row is a finding; the exploratory one a lead, saying why."""
    path = write_ablation(tmp_path, body=THREE_ARMS + (
        "seeds = [1, 2, 3, 4, 5, 6]\npower = {'sd': 0.002, 'gap': 0.009, 'power': 0.8, "
        "'gaps': {'unified - norm_only': 0.003}, 'exploratory': ['unified - norm_only']}\n"
        "lr_tuned_in = {v: 'tuning' for v in ('baseline', 'unified', 'norm_only')}\n"))
    spec, results = sweep.load_ablation(path), str(tmp_path / "results")
    tuning_file(tmp_path, THREE_ARMS, "tuning", results)  # the file lr_tuned_in names: tuned by the rule
    loss = {"baseline": 3.0, "unified": 2.95, "norm_only": 2.97}
    for r in sweep.plan(spec, "runs"):
        noise = 0.001 * ((r["seed"] * 7 + len(r["variant"])) % 5)
        write_record(results, make_record(r, fake_rows(r["config"], loss[r["variant"]] + noise), spec["name"]))
    collected, _ = comparisons.collect_all([path], sweep.load_records(results))
    text = summary.summary(collected)
    assert re.search(r"\| unified - baseline \| 6 \| .* \| reproduced \| finding \|", text)
    assert re.search(r"\| unified - norm_only \| 6 \| .* \| reproduced \| lead \(an exploratory row: a lead at most\) \|",
                     text)
    assert stats.strength((-0.02, -0.03, -0.01), 0.01, "lower", exploratory=True) == "lead" + stats.EXPLORATORY_CAP
    assert stats.strength((-0.02, -0.03, -0.01), 0.2, "lower", exploratory=True) == "lead"
    assert stats.strength((0.02, 0.01, 0.03), 0.01, "lower", exploratory=True) == \
        "lead, against the claim" + stats.EXPLORATORY_CAP
    assert stats.strength((-0.02, -0.03, -0.01), 0.01, "lower", untuned=True) == "lead" + stats.UNTUNED_CAP
    assert stats.strength((-0.02, -0.03, -0.01), 0.01, "lower") == "finding"


# -----------------------------------------------------------------------------
# The protocol's comment: its figures are the committed records'


def test_the_protocols_sd_and_share_figures_are_what_the_committed_records_give():
    """c8_d012.py's SD derivation from c8_width_x1's records (paired SDs over 4 seeds, parameters of
    the baseline at the Shakespeare character set's 65 tokens, characters per parameter, the
    least-squares slope in logs, its extrapolation to the d012 rung in nats per token at 3.3-4.5
    characters a token) and its share estimates (unified - norm_only over unified - baseline in
    c8_replication and c8_regime), recomputed and found in its comment."""
    records = sweep.load_records(os.path.join(ROOT, "results"))
    spec = sweep.load_ablation(os.path.join(ROOT, "configs", "ablations", "c8_width_x1.py"))
    results = comparisons.collect(spec, records)[0]
    sds, params, budget = [], [], set()
    for c in comparisons.comparisons(spec, results):
        assert len(c["diffs"]) == 4
        cfg = results[(c["setting"], "baseline")]["config"]
        with torch.device("meta"):
            params.append(GPT(model_config({**cfg, "vocab_size": 65})).num_params())
        sds.append(statistics.stdev(c["diffs"]))
        budget |= {rec["final"]["tokens"] for rec in results[(c["setting"], "baseline")]["seeds"].values()}
    (chars,) = budget
    slope, intercept = np.polyfit(np.log(params), np.log(sds), 1)
    d012 = 123_587_328  # the ladder's d012 rung (tests/test_ladder.py checks it against the model)
    per_char = math.exp(intercept + slope * math.log(d012))
    text = comment_text(PROTOCOL)
    assert (f"paired SDs of {sds[0]:.4f}, {sds[1]:.4f} and {sds[2]:.4f} nats per character at {params[0] / 1e6:.2f}M, "
            f"{params[1] / 1e6:.2f}M and {params[2] / 1e6:.2f}M parameters") in text
    assert f"one budget of {chars / 1e6:.2f}M characters, so at " + ", ".join(
        f"{chars / p:.2g}" for p in params[:2]) + f" and {chars / params[2]:.2g} characters per parameter" in text
    assert f"parameters, {slope:.2f} (least squares in logs)" in text
    assert f"Extrapolated {d012 / params[2]:.0f}x past 3.25M to 0.12B it gives {per_char:.2g} nats per character: " \
           f"{3.3 * per_char:.4f}-{4.5 * per_char:.4f} nats per token" in text
    shares = {}
    for name, setting in (("c8_replication", "tpp20"), ("c8_regime", "tpp20"), ("c8_regime", "tpp10"),
                          ("c8_regime", "tpp40")):
        spec = sweep.load_ablation(os.path.join(ROOT, "configs", "ablations", f"{name}.py"))
        rows = {(c["setting"], c["variant"], c["reference"]): c for c in
                comparisons.comparisons(spec, comparisons.collect(spec, records)[0])}
        shares[(name, setting)] = (rows[(setting, "unified", "norm_only")]["ci"][0]
                                   / rows[(setting, "unified", "baseline")]["ci"][0])
    assert (f"at {shares[('c8_replication', 'tpp20')]:.0%} and {shares[('c8_regime', 'tpp20')]:.0%} of unified - "
            f"baseline at 20 characters per parameter (c8_replication, c8_regime; {shares[('c8_regime', 'tpp10')]:.0%} "
            f"and {shares[('c8_regime', 'tpp40')]:.0%} at 10 and 40") in text
