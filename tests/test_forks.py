"""docs/forks.md's fork guides, followed literally: new scale classes (one with two parameters),
new placements (one with a field of its own, one with a method of its own), a new optimizer, a new
schedule and a new weight-decay recipe (whose code is run from the guide's page), each registered
at run time as a fork would register it in the source (one entry in its registry, and its config
rows). Each is then covered by the suite's own generic tests (tests/test_registries.py: trains and
resumes bit for bit, folds, exports or says in one line why not, reads a Hugging Face folder
exactly), gets its own run hash, gets the right inert notes, is measured by bench.py; a broken entry
of each registry (a forgotten row, a misspelt field, a skipped edit) is refused at start in one line
naming its fix."""
import copy
import itertools
import json
import math
import os
import re
import textwrap
from dataclasses import dataclass
from types import SimpleNamespace

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from tools import bench, variants
import model
import norms
import optim
import test_norms
import test_optim
from research.ablation import config_hash
import configurator
from configurator import DEFAULTS, UserError, load_config
from conftest import BASELINE, ROOT, add_row
from plumbing.ops import inert_keys
from test_records import renamed_records
from test_registries import REGISTRIES, exports, flags, folds, reads_a_folder, trains_and_resumes_exactly
from test_registries import llama_folder_fixture  # noqa: F401 (the fixture llama_folder)
from test_train import make_dataset, read_log, run, tiny_args


# -----------------------------------------------------------------------------
# What a fork writes: the examples of docs/forks.md


class SoftplusScale(norms.ScaleVector):
    """gamma = softplus(p), p init log(e - 1) so that gamma == 1; gamma > 0. Parameters: d."""

    def __init__(self, dim, role):
        super().__init__(dim, role)
        self.raw = nn.Parameter(torch.full((dim,), math.log(math.e - 1)))

    def forward(self):
        return F.softplus(self.raw)

    @torch.no_grad()
    def reset_(self):
        self.raw.fill_(math.log(math.e - 1))


class MagnitudeSoftplusScale(norms.ScaleVector):
    """gamma = m * softplus(p): m of shape (1,) carries the magnitude (magnitude_name), p (d,) the rest;
    m init 1 and p log(e - 1), so that gamma == 1. Parameters: d + 1."""

    magnitude_name = "m"

    def __init__(self, dim, role):
        super().__init__(dim, role)
        self.m = nn.Parameter(torch.ones(1))
        self.p = nn.Parameter(torch.full((dim,), math.log(math.e - 1)))

    def forward(self):
        return self.m * F.softplus(self.p)

    @torch.no_grad()
    def reset_(self):
        self.m.fill_(1.0)
        self.p.fill_(math.log(math.e - 1))


TOY_PLACEMENT = model.Placement(dual=True, norm=True, meaning="toy: DNP's sites, named anew")
ASYMMETRIC_PLACEMENT = model.Placement(dual=True, norm=True, meaning="DNP with u on the up branch only",
                                       outer=("up",))


@dataclass(frozen=True)
class BranchNormPlacement(model.Placement):
    norm_branches: tuple = ()  # the branches normalized over d_ff

    def normalizes(self, branch):
        return branch in self.norm_branches


BRANCH_NORM_PLACEMENT = BranchNormPlacement(dual=True, norm=False, norm_branches=("up",),
                                            meaning="DP with the up branch normalized over d_ff")


def has_input_scale(self, branch):
    """Whether HG gives `branch` its own input scale."""
    return True


@dataclass(frozen=True)
class BarePlacement(model.Placement):
    bare: tuple = ()  # the branches HG leaves without an input scale

    def has_input_scale(self, branch):
        return branch not in self.bare


BARE_PLACEMENT = BarePlacement(dual=False, norm=False, bare=("q",), meaning="HG without gamma on q")


class BareSites(model.ScaleSites):
    """model.ScaleSites with the guide's edit (its HG line asks `placement.has_input_scale(b)`), written as a
    subclass: the same sites."""

    method = "has_input_scale"

    def __init__(self, cfg, moe=False):
        super().__init__(cfg, moe)
        for key, branches in model.BRANCHES.items():
            placement = model.CHOICES[key][getattr(cfg, key)]
            for b in branches:
                if cfg.branch_scales and not getattr(placement, self.method)(b):
                    del self.sites[f"{b}.in"]


def edit_sites(monkeypatch, attention=BareSites):
    """The guide's two edits of model.py for a new method: Placement's has_input_scale, ScaleSites' question."""
    monkeypatch.setattr(model.Placement, "has_input_scale", has_input_scale, raising=False)
    if attention is not None:
        monkeypatch.setattr(model, "ScaleSites", attention)


def guide_code(section):
    """The ```python blocks of docs/forks.md's `## section`, in order, as written there."""
    with open(os.path.join(ROOT, "docs", "forks.md")) as f:
        body = f.read().split(f"## {section}\n", 1)[1].split("\n## ", 1)[0]
    return [textwrap.dedent(block) for block in re.findall(r"```python\n(.*?)```", body, re.S)]


def recipe_guide():
    """docs/forks.md's weight-decay recipe, run from the page: ({name: ScaleDecay} its optim.py code
    registers, {key: row} of its row for configurator.py's "scale vectors" section)."""
    code, row = guide_code("A new weight-decay recipe")
    namespace = {**vars(optim), "SCALE_WD": {}}
    exec(code, namespace)
    return namespace["SCALE_WD"], eval("{" + row + "}", dict(vars(configurator)))


RECIPES, RECIPE_ROWS = recipe_guide()


def build_sgd(groups, cfg, device_type):
    """SGD with momentum; each group's weight_decay reaches it as coupled L2 (added to the gradient)."""
    return torch.optim.SGD(groups, lr=cfg.sgd_lr, momentum=cfg.sgd_momentum)


TOY_OPTIMIZER = optim.Optimizer("sgd", build_sgd, "sgd_lr", ("sgd_lr", "sgd_momentum"),
                                "SGD with momentum for the hidden matrices")
SGD_ROWS = {  # the guide's two rows in configurator.SECTIONS["optimizer"]
    "sgd_lr": configurator.added(0.05, configurator.Range(0, low_open=True, usual=(1e-4, 10)),
                                 "SGD's peak LR for the matrices", absent=0.05),
    "sgd_momentum": configurator.added(0.9, configurator.Range(0, 1, high_open=True, usual=(0.5, 0.99)),
                                       "SGD's momentum", absent=0.9),
}


def step(it, cfg, floor):
    """The guide's step decay: times step_gamma every step_every iterations after warmup, down to the floor."""
    return max(floor, cfg.step_gamma ** ((it - cfg.warmup_iters) // cfg.step_every))


TOY_SCHEDULE = optim.Schedule(step, ("min_lr", "step_gamma", "step_every"),
                              "times step_gamma every step_every iterations, down to min_lr")
STEP_ROWS = {  # the guide's two rows in configurator.SECTIONS["schedule"]
    "step_gamma": configurator.added(0.5, configurator.Range(0, 1, low_open=True, high_open=True, usual=(0.1, 0.9)),
                                     "step: the LR's factor at each step", absent=0.5),
    "step_every": configurator.added(1000, configurator.GE1, "step: iterations between two steps", absent=1000),
}


@pytest.fixture
def scale_class(monkeypatch):
    monkeypatch.setitem(norms.SCALE_CLASSES, "softplus", SoftplusScale)
    return {"reparam": "softplus"}


@pytest.fixture
def two_parameters(monkeypatch):
    monkeypatch.setitem(norms.SCALE_CLASSES, "softplus_m", MagnitudeSoftplusScale)
    return {"reparam": "softplus_m"}


@pytest.fixture
def placement(monkeypatch):
    monkeypatch.setitem(model.MLP_PLACEMENTS, "toy", TOY_PLACEMENT)
    return {"mlp_placement": "toy"}


@pytest.fixture
def asymmetric(monkeypatch):
    monkeypatch.setitem(model.MLP_PLACEMENTS, "dnp_up", ASYMMETRIC_PLACEMENT)
    return {"mlp_placement": "dnp_up"}


@pytest.fixture
def optimizer(monkeypatch):
    monkeypatch.setitem(optim.OPTIMIZERS, "sgd", TOY_OPTIMIZER)
    for key, row in SGD_ROWS.items():
        add_row(monkeypatch, "optimizer", key, row)
    return {"optimizer": "sgd", "sgd_lr": 0.1}


@pytest.fixture
def branch_norm(monkeypatch):
    monkeypatch.setitem(model.MLP_PLACEMENTS, "dp_up_norm", BRANCH_NORM_PLACEMENT)
    return {"mlp_placement": "dp_up_norm"}


@pytest.fixture
def bare(monkeypatch):
    edit_sites(monkeypatch)
    monkeypatch.setitem(model.ATTN_PLACEMENTS, "bare_q", BARE_PLACEMENT)
    return {"attn_placement": "bare_q"}


@pytest.fixture
def recipe(monkeypatch):
    for name, entry in RECIPES.items():
        monkeypatch.setitem(optim.SCALE_WD, name, entry)
    for key, row in RECIPE_ROWS.items():
        add_row(monkeypatch, "scale vectors", key, row)
    return {"scale_wd": "iwd_scaled", "scale_wd_mult": 3.0}


@pytest.fixture
def schedule(monkeypatch):
    monkeypatch.setitem(optim.LR_SCHEDULES, "step", TOY_SCHEDULE)
    for key, row in STEP_ROWS.items():
        add_row(monkeypatch, "schedule", key, row)
    return {"lr_schedule": "step", "step_gamma": 0.7, "step_every": 1}


# -----------------------------------------------------------------------------
# What the suite then holds each of them to


def bench_measures(switches, capsys, key):
    name = f"{key}={switches[key]}"
    assert variants.variants()[name] == {key: switches[key]}
    bench.main(["--n_layer=1", "--n_head=2", "--n_embd=32", "--block_size=16", "--batch_size=2", "--vocab_size=40",
                f"--variants=baseline,{name}", "--steps=1", "--warmup=1", "--memory=False"])
    assert any(line.split()[:1] == [name] for line in capsys.readouterr().out.splitlines())


def hashes_differ(key, value, **context):
    cfg = {**load_config([])[0], **context}
    cfg.pop("out_dir")
    assert config_hash({**cfg, key: value}) != config_hash(cfg)


def generic_model_tests(reparam=None, mlp_placement=None):
    """The suite's every-combination tests of norms and the model, on the combinations with the new entry."""
    key, name = ("reparam", reparam) if reparam else ("mlp_placement", mlp_placement)
    variants = [v for v in test_norms.all_variants() if v.get(key) == name]
    others = test_norms.switches()
    assert len(variants) == math.prod(len(values) for k, values in others.items() if k != key)  # every combination
    for v in variants[::7]:  # a spread over the other switches; the fold test over all tie settings
        test_norms.test_block_forward_matches_formula(v, 2, 5)
        for tie in (True, False):
            test_norms.test_fold_preserves_logits(v, tie)
    test_norms.test_every_scale_is_one_at_init()


# -----------------------------------------------------------------------------


def test_a_new_scale_class_is_covered_trains_resumes_folds_hashes_notes_benches_and_exports(
        tmp_path, capsys, scale_class):
    generic_model_tests(reparam="softplus")
    out = trains_and_resumes_exactly(tmp_path, scale_class)
    hashes_differ("reparam", "softplus")
    cfg = load_config(flags(scale_class))[0]
    assert ("magnitude_lr_mult", "reparam is 'softplus' (no separate magnitude parameter)") in inert_keys(cfg)
    bench_measures(scale_class, capsys, "reparam")
    exports(out, writes=True)


@pytest.mark.parametrize("init", ["as written", "off by one at init"])
def test_the_guides_scale_class_passes_the_guides_test_and_a_wrong_one_fails_it(monkeypatch, init):
    """docs/forks.md's SoftplusScale and the test it tells a fork to add, both run from the page: the
    class passes; the same class started at gamma = softplus(1) (not 1) fails that test."""
    class_code, test_code = guide_code("A new scale class")[:2]
    if init != "as written":
        class_code = class_code.replace("torch.full((dim,), math.log(math.e - 1))", "torch.ones(dim)")
    space = {"math": math, "torch": torch, "nn": nn, "F": F, "ScaleVector": norms.ScaleVector}
    exec(class_code, space)
    monkeypatch.setattr(norms, "SoftplusScale", space["SoftplusScale"], raising=False)
    tests = {"norms": norms, "torch": torch}
    exec(test_code, tests)
    (name,) = [k for k in tests if k.startswith("test_")]
    if init == "as written":
        tests[name]()
    else:
        with pytest.raises(AssertionError):
            tests[name]()


def test_the_guides_ablation_file_gives_each_variant_its_lr_from_seeds_of_its_own_before_any_verdict(
        tmp_path, scale_class):
    """docs/forks.md's ablation file, as written there: an LR sweep on tuning seeds no table uses, the
    base's LR inside its grid. Runs at the base's LR with a gap (as a file without the sweep would
    run) make no table row while the sweep is unrecorded, so no verdict and no finding; a best at the
    grid's edge is not taken until the grid is widened; once softplus's best is a doubled LR, the table
    compares each variant at its own, and the untuned gap is gone."""
    import os
    import re
    import textwrap

    from conftest import ROOT
    from research import ablation, comparisons, summary
    from research.records import make_record
    from test_sweep import fake_rows

    with open(os.path.join(ROOT, "docs", "forks.md")) as f:
        (code,) = re.findall(r"`configs/ablations/c9_softplus.py`:\n\n   ```python\n(.*?)   ```", f.read(), re.S)
    path = tmp_path / "c9_softplus.py"
    path.write_text(textwrap.dedent(code))
    spec = ablation.load_ablation(str(path))
    assert spec["variants"]["softplus"] == scale_class and spec["tune_lr"]
    assert spec["tuning_seeds"] and not set(spec["tuning_seeds"]) & set(spec["seeds"])
    assert min(spec["lr_multipliers"]) < 1.0 < max(spec["lr_multipliers"])  # a best at the base's LR can be taken
    (setting,) = spec["settings"]
    records = {}

    def record(variant, seed, lr_mult, loss):
        cfg, digest = ablation.run_config(spec, setting, variant, seed, lr_mult)
        run = dict(name=f"{variant}_{seed}_{lr_mult:g}", hash=digest, variant=variant, setting=setting, seed=seed,
                   lr_mult=lr_mult, iter_mult=1.0, config=cfg, out_dir=str(tmp_path / digest))
        records[digest] = json.loads(json.dumps(make_record(run, fake_rows(cfg, loss), spec["name"])))

    def words():
        collected = [(spec, *comparisons.collect(spec, records))]
        return [c for c in comparisons.comparisons(spec, collected[0][1]) if c["diffs"]], summary.file_strengths(collected)

    for seed in spec["seeds"]:  # at the base's LR, softplus 0.05 lower on every seed, +-0.001
        record("baseline", seed, 1.0, 2.0)
        record("softplus", seed, 1.0, 1.95 + 0.001 * (seed % 2))
    planned = ablation.plan(spec, "runs", records)
    assert {r["seed"] for r in planned if not r.get("waiting")} == set(spec["tuning_seeds"])  # the sweep first
    assert words() == ([], {})  # no row: no verdict, no word
    best = {"baseline": 1.0, "softplus": 2.0}
    for variant in spec["variants"]:
        for seed in spec["tuning_seeds"]:
            for m in spec["lr_multipliers"]:
                record(variant, seed, m, 2.0 + 0.05 * abs(math.log2(m / best[variant])))
    assert ablation.lr_choice(spec, setting, "softplus", records) == (None, "edge") and words()[0] == []
    path.write_text(path.read_text().replace("lr_multipliers = [0.5, 1.0, 2.0]", "lr_multipliers = [0.5, 1.0, 2.0, 4.0]"))
    spec = ablation.load_ablation(str(path))  # the grid widened past its edge, as the guide says
    for variant in spec["variants"]:
        for seed in spec["tuning_seeds"]:
            record(variant, seed, 4.0, 2.0 + 0.05 * abs(math.log2(4.0 / best[variant])))
    assert ablation.lr_choice(spec, setting, "softplus", records) == (2.0, "")
    assert words()[0] == []  # softplus's table runs wait for their records at x2
    for seed in spec["seeds"]:
        record("softplus", seed, 2.0, 2.0 + 0.002 * (seed - 2))  # at its own LR: no gap
    (row,), strengths = words()
    assert row["diffs"] == pytest.approx([-0.002, 0.0, 0.002]) and row["verdict"] == "unresolved"
    assert "finding" not in " ".join(strengths.values()) and "lead" not in " ".join(strengths.values())


def test_a_new_placement_is_covered_trains_resumes_folds_hashes_notes_benches_and_exports(
        tmp_path, capsys, placement):
    generic_model_tests(mlp_placement="toy")
    out = trains_and_resumes_exactly(tmp_path, placement)
    # dual=True: dual_sites acts on it (its parameter count and its run hash change), and no note says otherwise
    cfg = load_config(flags(placement))[0]
    assert "dual_sites" not in dict(inert_keys(cfg))
    sizes = {s: model.GPT(model.model_config({**cfg, "dual_sites": s})).num_params() for s in ("prenorm", "all")}
    assert sizes["all"] > sizes["prenorm"]
    hashes_differ("dual_sites", "prenorm", mlp_placement="toy", dual_sites="all")
    hashes_differ("mlp_placement", "toy")
    # norm=True: a normalization over d_ff, so the export ships the modeling file, as DNP's does
    from tools import export
    assert export.needs_code(model.model_config(cfg))
    bench_measures(placement, capsys, "mlp_placement")
    exports(out, writes=True)


def test_an_asymmetric_placement_is_data_the_fused_path_reads_trains_folds_benches_and_exports(
        tmp_path, capsys, asymmetric):
    """docs/forks.md's placement guide with the `outer` field: DNP with u on the up branch only. The
    gate branch has no u and the up branch one; the fast path (one matmul, one normalization over
    both branches) computes it with ones for the missing u, equal to the formula branch by branch,
    and the suite's generic tests, training, folding, bench and export take it as they stand."""
    from plumbing import fused
    generic_model_tests(mlp_placement="dnp_up")
    cfg = model.model_config({**load_config(flags(asymmetric))[0], "vocab_size": 40})
    mlp = model.GPT(cfg).blocks[0].mlp
    assert mlp.gate.out_scale is None and mlp.up.out_scale is not None and mlp.gate.out_norm
    with torch.no_grad():
        mlp.up.out_scale.set_(torch.linspace(0.5, 2.0, cfg.d_ff))
    x = torch.randn(3, 5, cfg.n_embd)
    for device_type in ("cpu", "cuda"):
        fast = fused.use(copy.deepcopy(mlp), device_type)
        assert type(fast) is fused.FusedMLP
        torch.testing.assert_close(fast(x), mlp(x), rtol=1e-5, atol=1e-6)
    out = trains_and_resumes_exactly(tmp_path, asymmetric)
    bench_measures(asymmetric, capsys, "mlp_placement")
    exports(out, writes=True)


def test_a_new_optimizer_steps_its_groups_trains_resumes_hashes_and_notes(tmp_path, capsys, optimizer):
    out = trains_and_resumes_exactly(tmp_path, optimizer)
    ckpt = torch.load(out / "ckpt.pt", weights_only=True)
    built, _ = optim.build_optimizers(model.GPT(model.model_config(ckpt["config"])), SimpleNamespace(**ckpt["config"]),
                                      "cpu")
    assert [type(o).__name__ for o in built] == ["AdamW", "SGD"]
    sgd = ckpt["optimizers"][1]  # the matrices, and SGD stepped them: a momentum buffer for each
    assert [g["name"] for g in sgd["param_groups"]] == ["matrix"]
    assert len(sgd["state"]) == len(sgd["param_groups"][0]["params"]) > 0
    assert all("momentum_buffer" in s for s in sgd["state"].values())
    hashes_differ("optimizer", "sgd")
    hashes_differ("sgd_lr", 0.2, optimizer="sgd")
    assert renamed_records() == ([], "")  # its two keys, added at their absent values, rename no record
    cfg = load_config([*flags(optimizer), "--muon_lr=0.1"])
    assert ("muon_lr", "optimizer is 'sgd' (only optimizer 'muon' reads it)") in inert_keys(cfg[0])
    cfg = load_config(["--sgd_momentum=0.5"])[0]
    assert ("sgd_momentum", "optimizer is 'adamw' (only optimizer 'sgd' reads it)") in inert_keys(cfg)
    bench.main(["--n_layer=1", "--n_head=2", "--n_embd=32", "--block_size=16", "--batch_size=2", "--vocab_size=40",
                "--variants=baseline", "--steps=1", "--warmup=1", "--memory=False", *flags(optimizer)])
    assert "baseline" in capsys.readouterr().out


def test_the_optimizer_guides_sgd_reads_its_own_keys_and_takes_weight_decay_coupled(optimizer):
    """One step by hand: the matrices move by sgd_lr * (g + weight_decay * W), the first momentum
    buffer being that gradient (torch.optim.SGD's coupled L2, as the guide says), not AdamW's LR."""
    cfg = SimpleNamespace(**{**DEFAULTS, "vocab_size": 40, "n_layer": 1, "n_embd": 16, "n_head": 2, "block_size": 8,
                             **optimizer, "sgd_momentum": 0.7})
    gpt = model.GPT(model.model_config(vars(cfg)))
    opts, groups = optim.build_optimizers(gpt, cfg, "cpu")
    sgd = opts[1]
    assert [(g["name"], g["lr"], g["momentum"], g["weight_decay"]) for g in sgd.param_groups] == \
        [("matrix", 0.1, 0.7, cfg.weight_decay)]
    w = sgd.param_groups[0]["params"][0]
    before = w.detach().clone()
    x = torch.randint(0, 40, (2, 8))
    gpt(x, x)[1].backward()
    g = w.grad.clone()
    sgd.step()
    assert torch.allclose(w.detach(), before - 0.1 * (g + cfg.weight_decay * before), atol=1e-7)


def test_an_optimizer_whose_build_returns_no_optimizer_is_an_error_naming_it_not_a_traceback_later(monkeypatch):
    monkeypatch.setitem(optim.OPTIMIZERS, "sgd", optim.Optimizer("sgd", lambda groups, cfg, device_type: None,
                                                                 "learning_rate", (), ""))  # `return` forgotten
    cfg = SimpleNamespace(**{**DEFAULTS, "optimizer": "sgd"})
    with pytest.raises(UserError, match=r"^OPTIMIZERS\['sgd'\]\.build returned None, not a torch\.optim\.Optimizer"):
        optim.build_optimizers(model.GPT(model.model_config({**DEFAULTS, "vocab_size": 40})), cfg, "cpu")
    monkeypatch.setitem(optim.OPTIMIZERS, "sgd", optim.Optimizer("sgd", build_sgd, "learning_rate", (), ""))
    monkeypatch.setitem(DEFAULTS, "sgd_lr", 0.05)  # the guide's build reads its own keys
    monkeypatch.setitem(DEFAULTS, "sgd_momentum", 0.9)
    cfg = SimpleNamespace(**{**DEFAULTS, "optimizer": "sgd"})
    optimizers, _ = optim.build_optimizers(model.GPT(model.model_config({**DEFAULTS, "vocab_size": 40})), cfg, "cpu")
    assert [type(o) for o in optimizers] == [torch.optim.AdamW, torch.optim.SGD]  # a real one passes


def test_an_optimizer_name_no_registry_holds_is_an_error_not_a_group_never_stepped(monkeypatch):
    monkeypatch.setitem(optim.OPTIMIZERS, "misnamed", optim.Optimizer("no_such_optimizer", build_sgd, "learning_rate",
                                                                      (), ""))
    cfg = SimpleNamespace(**{**DEFAULTS, "optimizer": "misnamed"})
    with pytest.raises(ValueError, match=r"groups \['matrix'\] name optimizers \['no_such_optimizer'\].*nothing would step"):
        optim.build_optimizers(model.GPT(model.model_config({**DEFAULTS, "vocab_size": 40})), cfg, "cpu")


def test_a_scale_class_with_two_parameters_keeps_its_magnitude_where_it_shows_trains_resumes_folds_and_exports(
        tmp_path, capsys, two_parameters):
    """gamma = m * softplus(p): its formula, both parameters in the optimizer's groups (m with the
    magnitudes, at their own LR), and, as OR's, a plain vector exactly where doubling the scale
    leaves the logits unchanged (the suite's own test of that rule, run on this class)."""
    generic_model_tests(reparam="softplus_m")
    sv = MagnitudeSoftplusScale(5, "input")
    with torch.no_grad():
        sv.m.fill_(1.5)
        sv.p.copy_(torch.linspace(-1.0, 2.0, 5))
    torch.testing.assert_close(sv(), 1.5 * torch.log1p(torch.exp(torch.linspace(-1.0, 2.0, 5))))
    for variant in test_norms.MAGNITUDE_CONFIGS:
        test_norms.test_reparam_applies_exactly_where_the_magnitude_matters(variant, reparam="softplus_m")
    cfg = load_config(flags(two_parameters))[0]  # the default run: HG and DNP, whose inner scales are magnitude-free
    gpt = model.GPT(model.model_config({**cfg, "vocab_size": 40}))
    kept = [s for _, s in gpt.scale_vectors() if isinstance(s, MagnitudeSoftplusScale)]
    assert kept and any(isinstance(s, norms.PlainScale) for _, s in gpt.scale_vectors())
    groups = {g["name"]: g for g in optim.param_groups(gpt, SimpleNamespace(**cfg))}
    magnitudes = {id(p) for name in ("magnitude_input", "magnitude_output") for p in groups.get(name, {"params": []})["params"]}
    assert magnitudes == {id(s.m) for s in kept}
    assert groups["magnitude_input"]["lr"] == pytest.approx(groups["scale_input"]["lr"] * cfg["magnitude_lr_mult"])
    out = trains_and_resumes_exactly(tmp_path, two_parameters)
    hashes_differ("reparam", "softplus_m")
    assert "magnitude_lr_mult" not in dict(inert_keys(cfg))  # it has a magnitude: the key acts on it
    bench_measures(two_parameters, capsys, "reparam")
    exports(out, writes=True)


def test_a_placement_with_a_field_of_its_own_answers_through_the_methods_everywhere(
        tmp_path, capsys, monkeypatch, branch_norm):
    """docs/forks.md's BranchNormPlacement: DP with the up branch alone normalized over d_ff, said in
    a field no shipped code reads (its `norm` is False). Every rule asks normalizes(): the modules,
    which scales are magnitude-free (against a hand rule, and against doubling each scale), folding,
    the notes and the hash, bench; export refuses it in one line naming it. Given DNP's answers
    through the field, it is DNP's model everywhere (the model builds; the contract is checked at start), so the start
    refuses it in one line as 'dual_norm' under another name (plumbing/contracts.py)."""
    generic_model_tests(mlp_placement="dp_up_norm")
    for hg, out_norms, sites in itertools.product((False, True), (False, True), ("prenorm", "all")):
        variant = dict(branch_scales=hg, output_norms=out_norms, dual_sites=sites, mlp_placement="dp_up_norm")
        block = model.GPT(test_norms.tiny(reparam="or", **variant)).blocks[0]
        mlp = block.mlp
        assert (mlp.gate.out_norm, mlp.up.out_norm) == (False, True)
        assert mlp.gate.out_scale.role == mlp.up.out_scale.role == "input"  # into W_gate's rows, W_down's columns
        # The hand rule: under OR a scale is plain where its magnitude is hidden: the up branch's input
        # scale (its normalization follows); under output norms also the up branch's u and down's
        # scales (the MLP's output is linear in them); never the gate's or the shared pre-norm's,
        # which the gate reads without a normalization (SiLU shows their magnitude).
        hand = {"mlp_norm": False, "gate.in": False, "up.in": True, "gate.out": False, "up.out": out_norms,
                "down.in": out_norms, "down.out": out_norms}
        found = {"mlp_norm": block.mlp_norm.scale, "gate.in": mlp.gate.in_scale, "up.in": mlp.up.in_scale,
                 "gate.out": mlp.gate.out_scale, "up.out": mlp.up.out_scale, "down.in": mlp.down.in_scale,
                 "down.out": mlp.down.out_scale}
        present = {k for k, s in found.items() if s is not None}
        assert present == {"gate.out", "up.out"} | ({"gate.in", "up.in"} if hg else {"mlp_norm"}) | \
            ({"down.in", "down.out"} if sites == "all" else set())
        assert {k: isinstance(found[k], norms.PlainScale) for k in present} == {k: hand[k] for k in present}, variant
        test_norms.test_reparam_applies_exactly_where_the_magnitude_matters(variant)
        if sites == "all":
            test_norms.test_fold_preserves_logits({**variant, "reparam": "or"}, tie=not hg)
    cfg = load_config(flags(branch_norm))[0]
    assert "dual_sites" not in dict(inert_keys(cfg))  # scales_output_map(): dual_sites acts on it
    hashes_differ("mlp_placement", "dp_up_norm")
    out = trains_and_resumes_exactly(tmp_path, branch_norm)
    bench_measures(branch_norm, capsys, "mlp_placement")
    exports(out, refused="mlp_placement='dp_up_norm' normalizes up over d_ff but not gate")

    monkeypatch.setitem(model.MLP_PLACEMENTS, "dnp_by_field", BranchNormPlacement(
        dual=True, norm=False, norm_branches=("gate", "up"), meaning="DNP, said through the field"))
    idx = torch.randint(0, 50, (2, 16), generator=torch.Generator().manual_seed(0))
    for variant in (dict(branch_scales=False), dict(branch_scales=True, output_norms=True, dual_sites="all")):
        dnp, field = (model.GPT(test_norms.tiny(reparam="or", mlp_placement=p, **variant)) for p in ("dual_norm", "dnp_by_field"))
        assert [(n, type(s), s.role) for n, s in field.scale_vectors()] == [(n, type(s), s.role) for n, s in dnp.scale_vectors()]
        torch.testing.assert_close(field(idx, idx)[0], dnp(idx, idx)[0], rtol=0, atol=0)
    with pytest.raises(UserError) as e:
        run(tiny_args(make_dataset(tmp_path / "ds2"), tmp_path / "dnp_by_field", "--mlp_placement=dnp_by_field"))
    words = ["MLP_PLACEMENTS['dnp_by_field'] builds the models 'dual_norm' builds", "norm_branches=('gate', 'up')",
             "give the entry the field that makes it differ, or use 'dual_norm'"]
    assert "\n" not in str(e.value) and all(w in str(e.value) for w in words), str(e.value)


def test_a_placement_with_a_method_of_its_own_builds_what_it_answers_trains_folds_exports_and_reads_a_folder_exactly(
        tmp_path, monkeypatch, capsys, llama_folder, bare):
    """docs/forks.md's BarePlacement: a new method (has_input_scale), which Attention asks, answered
    through a field. Under HG q has no input scale and k, v have theirs; with shared scales it is
    "in"'s model. It trains, resumes, folds, exports, hashes, benches, and a Llama folder read into it
    gives transformers' logits: q's weight takes the checkpoint's gamma in its columns. With gamma put
    only where a scale holds it (plumbing/hf_folder.put_gamma before that rule), the reading is silently
    another function, which the generic reading test catches."""
    from plumbing import hf_folder as folder_io
    for hg in (False, True):
        attn = model.GPT(test_norms.tiny(branch_scales=hg, attn_placement="bare_q")).blocks[0].attn
        assert [getattr(attn, b).in_scale is not None for b in "qkv"] == ([False, True, True] if hg else [False] * 3)
    out = trains_and_resumes_exactly(tmp_path, bare)
    folds(out)
    exports(out, writes=True)
    hashes_differ("attn_placement", "bare_q")
    bench_measures(bare, capsys, "attn_placement")
    folder, hf = llama_folder
    switches = {**BASELINE, "branch_scales": True, **bare}
    assert reads_a_folder(folder, hf, switches) == []

    def put_gamma_in_scales_only(gamma, shared, branches):
        for scale in [shared] if shared is not None else [lin.in_scale for lin in branches if lin.in_scale is not None]:
            folder_io.set_gamma(scale, gamma)

    monkeypatch.setattr(folder_io, "put_gamma", put_gamma_in_scales_only)
    with pytest.raises(AssertionError):
        reads_a_folder(folder, hf, switches)


def test_the_recipe_guide_run_from_its_page_decays_by_its_rule_trains_resumes_folds_exports_hashes_and_notes(
        tmp_path, recipe):
    """docs/forks.md's iwd_scaled, its code and row run as the page writes them: the input-role scales
    (and their magnitudes) decay by weight_decay * scale_wd_mult, the output-role ones not; the run
    trains and resumes bit for bit, folds and exports; its key gets a hash, renames no record, and a
    note under another recipe or without scale vectors."""
    cfg = SimpleNamespace(**{**DEFAULTS, **recipe})
    gpt = model.GPT(model.model_config({**vars(cfg), "vocab_size": 40}))
    decay = {g["name"]: g["weight_decay"] for g in optim.param_groups(gpt, cfg)}
    assert {"scale_input", "magnitude_input", "scale_output"} <= decay.keys()  # the default run has all three
    assert decay["scale_input"] == decay["magnitude_input"] == pytest.approx(3.0 * cfg.weight_decay)
    assert decay.get("magnitude_output", 0.0) == decay["scale_output"] == 0.0 and decay["matrix"] == cfg.weight_decay
    out = trains_and_resumes_exactly(tmp_path, recipe)
    folds(out)
    exports(out, writes=True)
    hashes_differ("scale_wd", "iwd_scaled")
    hashes_differ("scale_wd_mult", 2.0, scale_wd="iwd_scaled")
    assert renamed_records() == ([], "")
    assert ("scale_wd_mult", "scale_wd is 'iwd' (only scale_wd 'iwd_scaled' reads it)") in \
        inert_keys(load_config(["--scale_wd_mult=2"])[0])
    assert "scale_wd_mult" not in dict(inert_keys(load_config(flags(recipe))[0]))
    off = ["--scale=none", "--reparam=plain", "--branch_scales=False", "--mlp_placement=in", *flags(recipe)]
    assert ("scale_wd_mult", "scale is 'none' (no scale vectors)") in inert_keys(load_config(off)[0])


class TauScale(norms.ScaleVector):
    """gamma = p / tau (docs/forks.md's recipe guide: decaying tau raises gamma)."""

    def __init__(self, dim, role):
        super().__init__(dim, role)
        self.p, self.tau = nn.Parameter(torch.ones(dim)), nn.Parameter(torch.ones(1))

    def forward(self):
        return self.p / self.tau

    @torch.no_grad()
    def reset_(self):
        self.p.fill_(1.0)
        self.tau.fill_(1.0)


def test_weight_decay_acts_on_a_classs_raw_parameters(monkeypatch):
    """The recipe guide's note, in one decay-only AdamW step (no gradient) of lr 0.1, decay 0.5: a plain
    gamma shrinks by 1 - 0.05; gamma = p / tau, both decayed at the one rate a recipe gives a scale's
    parameters, does not move (decaying tau alone raises it: p / (0.95 tau) > p / tau)."""
    monkeypatch.setitem(norms.SCALE_CLASSES, "tau", TauScale)
    for reparam, factor in (("plain", 0.95), ("tau", 1.0)):
        gpt = model.GPT(test_norms.tiny(reparam=reparam))
        cfg = SimpleNamespace(**{**DEFAULTS, "scale_wd": "all", "weight_decay": 0.5, "learning_rate": 0.1})
        optimizers, _ = optim.build_optimizers(gpt, cfg, "cpu")
        before = [s().detach().clone() for _, s in gpt.scale_vectors()]
        for p in gpt.parameters():
            p.grad = torch.zeros_like(p)
        for o in optimizers:
            o.step()
        for (_, s), gamma in zip(gpt.scale_vectors(), before):
            torch.testing.assert_close(s().detach(), factor * gamma, rtol=1e-6, atol=0)


def test_a_new_schedule_with_its_own_keys_trains_resumes_hashes_notes_and_keeps_the_contract(tmp_path, schedule):
    """docs/forks.md's step schedule with its two keys: its LR in the log follows its rule, a resumed
    run's equals a straight one's, its keys get a hash and notes without renaming a record, and the
    suite's generic schedule test holds it to warmup, [floor, 1] and never rising."""
    out = trains_and_resumes_exactly(tmp_path, schedule)
    lr = {r["iter"]: r["lr"] for r in read_log(out) if r["kind"] == "train"}  # row i: iteration i - 1
    assert lr[2] == pytest.approx(2 * lr[1]) and lr[3] == pytest.approx(lr[2]) and lr[4] == pytest.approx(0.7 * lr[3])
    ns = SimpleNamespace(**{**DEFAULTS, **schedule, "warmup_iters": 10, "max_iters": 100})
    assert optim.lr_multiplier(99, ns) == pytest.approx(ns.min_lr / ns.learning_rate)  # down to the floor, no lower
    test_optim.test_every_registered_schedule_warms_up_then_never_rises_and_stays_above_its_floor("step")
    hashes_differ("lr_schedule", "step")
    hashes_differ("step_gamma", 0.3, lr_schedule="step")
    assert renamed_records() == ([], "")  # its two keys, added at their absent values, rename no record
    cfg = load_config(flags(schedule))[0]
    assert ("wsd_decay_frac", "lr_schedule is 'step' (only lr_schedule 'wsd' reads it)") in inert_keys(cfg)
    assert not {"min_lr", "step_gamma", "step_every"} & dict(inert_keys(cfg)).keys()
    cfg = load_config(["--step_gamma=0.3"])[0]
    assert ("step_gamma", "lr_schedule is 'cosine' (only lr_schedule 'step' reads it)") in inert_keys(cfg)


# -----------------------------------------------------------------------------
# A broken entry of each registry, refused at start: one line (configurator.UserError) naming the fix


class DoubledSoftplusScale(SoftplusScale):
    def forward(self):
        return 2 * F.softplus(self.raw)  # 2 at init


class StuckSoftplusScale(SoftplusScale):
    @torch.no_grad()
    def reset_(self):
        self.raw.fill_(0.0)  # gamma = softplus(0) = log 2, not 1


class ResetlessSoftplusScale(norms.ScaleVector):
    def __init__(self, dim, role):
        super().__init__(dim, role)
        self.raw = nn.Parameter(torch.full((dim,), math.log(math.e - 1)))

    def forward(self):
        return F.softplus(self.raw)


class DoublingPlainScale(norms.PlainScale):
    @torch.no_grad()
    def set_(self, gamma):
        self.weight.copy_(2 * gamma)


class MisnamedMagnitudeScale(MagnitudeSoftplusScale):
    magnitude_name = "magnitude"  # its parameter is m


@dataclass(frozen=True)
class ForgetfulPlacement(BranchNormPlacement):
    def normalizes(self, branch):
        """Forgets its return: answers None."""
        _ = branch in self.norm_branches


@dataclass(frozen=True)
class MisspeltBarePlacement(BarePlacement):
    def has_input_scale(self, branch):
        return branch not in getattr(self, "bare_branches", ())  # its field is `bare`: getattr's default hides it


@dataclass(frozen=True)
class MisspeltBranchNormPlacement(model.Placement):
    norm_branches: tuple = ()

    def normalizes(self, branch):  # one of the three methods contracts.check_placement asks before it builds a model
        return branch in self.norm_branch  # its field is norm_branches: an AttributeError, not a getattr default


class MisspeltSites(BareSites):
    """The guide's ScaleSites edit with the method's name misspelt."""

    method = "has_input_scales"


def iwd_from_a_rowless_key(role, cfg):
    return cfg.weight_decay * cfg.scale_wd_mul if role == "input" else 0.0  # its row is scale_wd_mult


def broken(kind, entry, switches, rows=None, attention=False):
    """One case: the entry at kind's registry under switches[kind], `rows` ({section: {key: row}}) added, and with
    attention (None or an Attention class) the guide's edits of model.py for a new method (edit_sites)."""
    return kind, entry, switches, rows or {}, attention


STEP = {"lr_schedule": "step", "step_gamma": 0.7, "step_every": 1}
BARE = {"attn_placement": "broken", "branch_scales": True}
IWD_SCALED = RECIPES["iwd_scaled"]
BROKEN = {  # broken(...) -> the line's words
    "scale class not 1 at init": (
        broken("reparam", DoubledSoftplusScale, {"reparam": "broken"}),
        ["SCALE_CLASSES['broken']'s forward() gives", "not gamma == 1", "fix its init or forward()"]),
    "scale class naming no magnitude": (
        broken("reparam", MisnamedMagnitudeScale, {"reparam": "broken"}),
        ["SCALE_CLASSES['broken'].magnitude_name='magnitude' is none of its parameters", "name the one"]),
    "scale class whose reset_ misses 1": (
        broken("reparam", StuckSoftplusScale, {"reparam": "broken"}),
        ["SCALE_CLASSES['broken'].reset_() gives gamma [0.69", "not [1.0, 1.0, 1.0]: fix it"]),
    "scale class without reset_": (
        broken("reparam", ResetlessSoftplusScale, {"reparam": "broken"}),
        ["SCALE_CLASSES['broken'] has no reset_(): give it one"]),
    "scale class whose set_ misses its gamma": (
        broken("reparam", DoublingPlainScale, {"reparam": "broken"}),
        ["SCALE_CLASSES['broken'].set_() gives gamma [1.0, 4.0, 3.0], not [0.5, 2.0, 1.5]: fix it"]),
    "placement answering None": (
        broken("mlp_placement", ForgetfulPlacement(dual=True, norm=False, meaning=""), {"mlp_placement": "broken"}),
        ["MLP_PLACEMENTS['broken'].normalizes('gate') answered None", "make it return a bool"]),
    "placement with outer a string": (
        broken("mlp_placement", model.Placement(dual=True, norm=True, meaning="", outer="up"),
               {"mlp_placement": "broken"}),
        ["MLP_PLACEMENTS['broken']: outer='up' is not a tuple of its branches", "fix its outer"]),
    "placement with its field left out": (
        broken("attn_placement", BarePlacement(dual=False, norm=False, meaning=""), BARE, attention=BareSites),
        ["ATTN_PLACEMENTS['broken'] builds the models 'in' builds", "bare=()", "give the entry the field that makes it differ"]),
    "placement misspelling its field": (
        broken("attn_placement", MisspeltBarePlacement(dual=False, norm=False, bare=("q",), meaning=""), BARE,
               attention=BareSites),
        ["ATTN_PLACEMENTS['broken']: building the model reads .bare_branches, which MisspeltBarePlacement does not declare",
         "fix the name"]),
    "placement misspelling its field in normalizes": (
        broken("mlp_placement", MisspeltBranchNormPlacement(dual=True, norm=False, norm_branches=("up",), meaning=""),
               {"mlp_placement": "broken"}),
        ["MLP_PLACEMENTS['broken']: building the model reads .norm_branch, which MisspeltBranchNormPlacement does not "
         "declare", "fix the name"]),
    "placement whose ScaleSites edit misspells its method": (
        broken("attn_placement", BARE_PLACEMENT, BARE, attention=MisspeltSites),
        ["ATTN_PLACEMENTS['broken']: building the model reads .has_input_scales, which BarePlacement does not declare",
         "fix the name"]),
    "placement whose ScaleSites edit is forgotten": (
        broken("attn_placement", BARE_PLACEMENT, BARE, attention=None),
        ["ATTN_PLACEMENTS['broken']: nothing building the model reads bare, has_input_scale (BarePlacement's)",
         "the code in model.ScaleSites that asks it is missing"]),
    "optimizer not named its key": (
        broken("optimizer", optim.Optimizer("no_such_optimizer", build_sgd, "learning_rate", (), ""),
               {"optimizer": "broken"}),
        ["OPTIMIZERS['broken'] is named 'no_such_optimizer'", "give it its key as its name"]),
    "optimizer key without a row": (
        broken("optimizer", TOY_OPTIMIZER, {"optimizer": "sgd"}),
        ["OPTIMIZERS['sgd'] reads the key 'sgd_lr', which has no row", "add its row"]),
    "optimizer reading a key it does not declare": (
        broken("optimizer", optim.Optimizer("sgd", build_sgd, "sgd_lr", ("sgd_lr",), ""), {"optimizer": "sgd"},
               {"optimizer": SGD_ROWS}),
        ["OPTIMIZERS['sgd'] reads the key 'sgd_momentum' without declaring it", "add it to its keys"]),
    "schedule key without a row": (
        broken("lr_schedule", TOY_SCHEDULE, {"lr_schedule": "step"}),
        ["LR_SCHEDULES['step'] reads the key 'step_gamma', which has no row", "add its row"]),
    "schedule above 1": (
        broken("lr_schedule", optim.Schedule(lambda it, c, floor: 2 * step(it, c, floor), TOY_SCHEDULE.keys, ""),
               STEP, {"schedule": STEP_ROWS}),
        ["LR_SCHEDULES['step'] breaks the schedules' contract: its multiplier leaves [min_lr / learning_rate",
         "at iteration 2: 2", "fix its multiplier"]),
    "schedule below the floor": (
        broken("lr_schedule", optim.Schedule(lambda it, c, floor: c.step_gamma ** ((it - c.warmup_iters) // c.step_every),
                                             TOY_SCHEDULE.keys, ""), STEP, {"schedule": STEP_ROWS}),
        ["LR_SCHEDULES['step'] breaks the schedules' contract: its multiplier leaves [min_lr / learning_rate = 0.1, 1]",
         "fix its multiplier"]),
    "schedule rising after warmup": (
        broken("lr_schedule", optim.Schedule(lambda it, c, floor: floor / step(it, c, floor), TOY_SCHEDULE.keys, ""),
               STEP, {"schedule": STEP_ROWS}),
        ["LR_SCHEDULES['step'] breaks the schedules' contract: its multiplier rises after warmup", "fix its multiplier"]),
    "schedule answering None": (
        broken("lr_schedule", optim.Schedule(lambda it, c, floor: None, (), ""), {"lr_schedule": "broken"}),
        ["LR_SCHEDULES['broken'].multiplier(2, cfg, floor) gave None, not a number", "make it return a float"]),
    "schedule answering a tensor": (
        broken("lr_schedule", optim.Schedule(lambda it, c, floor: torch.tensor(1.0), (), ""), {"lr_schedule": "broken"}),
        ["LR_SCHEDULES['broken'].multiplier(2, cfg, floor) gave tensor(1.), not a number", "make it return a float"]),
    "recipe key without a row": (
        broken("scale_wd", IWD_SCALED, {"scale_wd": "iwd_scaled"}),
        ["SCALE_WD['iwd_scaled'] reads the key 'scale_wd_mult', which has no row", "add its row"]),
    "recipe reading a key it does not declare": (
        broken("scale_wd", optim.ScaleDecay(IWD_SCALED.decay, (), ""), {"scale_wd": "iwd_scaled"},
               {"scale vectors": RECIPE_ROWS}),
        ["SCALE_WD['iwd_scaled'] reads the key 'scale_wd_mult' without declaring it", "add it to its keys"]),
    "recipe reading a misspelt key": (
        broken("scale_wd", optim.ScaleDecay(iwd_from_a_rowless_key, ("scale_wd_mult",), ""), {"scale_wd": "iwd_scaled"},
               {"scale vectors": RECIPE_ROWS}),
        ["SCALE_WD['iwd_scaled'] reads the key 'scale_wd_mul', which has no row", "add its row"]),
    "recipe comparing the role with a misspelt role": (
        broken("scale_wd", optim.ScaleDecay(lambda role, c: c.weight_decay * c.scale_wd_mult if role == "inputs" else 0.0,
                                            ("scale_wd_mult",), ""), {"scale_wd": "iwd_scaled"}, {"scale vectors": RECIPE_ROWS}),
        ["SCALE_WD['iwd_scaled'].decay compares the role with 'inputs', which is no role", "'input' and 'output'"]),
    "recipe taking (cfg, role)": (
        broken("scale_wd", optim.ScaleDecay(lambda c, role: c.weight_decay if role == "input" else 0.0, (), ""),
               {"scale_wd": "broken"}),
        ["SCALE_WD['broken'].decay compares its cfg with a role", "decay(role, cfg), the role first"]),
    "recipe declaring a key its decay never reads": (
        broken("scale_wd", optim.ScaleDecay(lambda role, c: c.weight_decay if role == "input" else 0.0,
                                            ("scale_wd_mult",), ""), {"scale_wd": "iwd_scaled"}, {"scale vectors": RECIPE_ROWS}),
        ["SCALE_WD['iwd_scaled'].decay reads 'scale_wd_mult', which the entry declares, for neither role"]),
    "recipe with a negative decay": (
        broken("scale_wd", optim.ScaleDecay(lambda role, c: -c.weight_decay, (), ""), {"scale_wd": "broken"}),
        ["SCALE_WD['broken'].decay('input', cfg) gave -0.1, not a weight decay", "fix its decay"]),
}


@pytest.mark.parametrize("case", BROKEN)
def test_a_broken_entry_of_each_registry_is_refused_at_start_in_one_line_naming_its_fix(tmp_path, monkeypatch, case):
    (key, entry, switches, rows, attention), words = BROKEN[case]
    monkeypatch.setitem(REGISTRIES[key], switches[key], entry)
    for section, section_rows in rows.items():
        for row_key, row in section_rows.items():
            add_row(monkeypatch, section, row_key, row)
    if attention is not False:
        edit_sites(monkeypatch, attention)
    with pytest.raises(UserError) as e:  # train.py's start (the command prints it as one 'error: ...' line)
        run(tiny_args(make_dataset(tmp_path / "ds"), tmp_path / "o", *flags(switches)))
    assert "\n" not in str(e.value) and all(w in str(e.value) for w in words), str(e.value)
    assert not (tmp_path / "o").exists()  # refused before the run made its folder


# -----------------------------------------------------------------------------
# A per-group schedule (docs/forks.md: "A per-group LR or schedule"): the scale groups on a constant LR


SCALE_GROUPS = ("scale_input", "scale_output", "magnitude_input", "magnitude_output")


def scale_schedule_fork(monkeypatch):
    """docs/forks.md's fork: a config row naming the scale groups' schedule, and optim.GROUP_SCHEDULES."""
    add_row(monkeypatch, "schedule", "scale_lr_schedule",
            ("", None, "the scale groups' LR schedule (optim.LR_SCHEDULES; '': lr_schedule's)", ""))
    for group in SCALE_GROUPS:
        monkeypatch.setitem(optim.GROUP_SCHEDULES, group, "scale_lr_schedule")


def test_a_per_group_schedule_steps_logs_and_draws_each_groups_lr(tmp_path, monkeypatch):
    from research.run_figures import lr_series
    scale_schedule_fork(monkeypatch)
    ds = make_dataset(tmp_path / "ds")
    common = ("--max_iters=8", "--warmup_iters=2", "--lr_schedule=cosine", "--learning_rate=1e-3", "--min_lr=1e-4")
    run(tiny_args(ds, tmp_path / "fork", *common, "--scale_lr_schedule=constant"))
    rows = [r for r in read_log(tmp_path / "fork") if r["kind"] == "train"]
    ns = SimpleNamespace(max_iters=8, warmup_iters=2, lr_schedule="cosine", learning_rate=1e-3, min_lr=1e-4)
    for r in rows:  # row i holds iteration i - 1's LR
        assert r["lrs"]["matrix"] == pytest.approx(1e-3 * optim.lr_multiplier(r["iter"] - 1, ns))
        assert r["lrs"]["scale_input"] == pytest.approx(1e-3 * min(1.0, r["iter"] / 2))  # warmup, then constant
        assert r["lr"] == r["lrs"]["matrix"]
    assert rows[-1]["lrs"]["matrix"] < rows[-1]["lrs"]["scale_input"]
    assert set(lr_series(rows)) >= {"matrix", "scale_input"}
    # the fork's key unset: one schedule, so the rows (and the figure) keep the one "lr"
    run(tiny_args(ds, tmp_path / "plain", *common))
    plain = [r for r in read_log(tmp_path / "plain") if r["kind"] == "train"]
    assert all("lrs" not in r for r in plain) and list(lr_series(plain)) == ["lr"]


def test_the_lr_figure_draws_a_line_per_groups_schedule(tmp_path, monkeypatch):
    from research import figures
    scale_schedule_fork(monkeypatch)
    drawn = {}
    monkeypatch.setattr(figures, "save_figure", lambda fig, path: drawn.update(
        {line.get_label(): line.get_ydata() for ax in fig.axes for line in ax.get_lines()}))
    base = {**load_config(["--max_iters=20", "--warmup_iters=2"])[0], "lr_schedule": "cosine"}
    figures.plot_lr({"a": {**base, "scale_lr_schedule": "constant"}, "b": base}, str(tmp_path / "lr.png"))
    assert set(drawn) == {"a", "a: scale_input, scale_output, magnitude_input, magnitude_output (constant)", "b"}
    constant = drawn["a: scale_input, scale_output, magnitude_input, magnitude_output (constant)"]
    assert constant[-1] == pytest.approx(base["learning_rate"]) and drawn["a"][-1] < constant[-1]


def test_a_key_a_groups_schedule_reads_is_never_called_inert(monkeypatch):
    """lr_schedule=constant reads no min_lr, but a group on cosine does: min_lr is not 'no effect' then."""
    scale_schedule_fork(monkeypatch)
    cfg, _ = load_config(["--lr_schedule=constant", "--scale_lr_schedule=cosine"])
    assert "min_lr" not in dict(inert_keys(cfg))
    cfg, _ = load_config(["--lr_schedule=constant"])
    assert "min_lr" in dict(inert_keys(cfg))  # (no group reads it: the note is right)
    from plumbing.ops import check_config
    with pytest.raises(UserError, match="scale_lr_schedule='cosin' is not one of"):
        check_config(load_config(["--scale_lr_schedule=cosin"])[0])


# -----------------------------------------------------------------------------
# A placement that builds a module (docs/forks.md), and its half-done versions: refused at start by
# plumbing/contracts.check_model (built is used, magnitudes seen, no scale under scale="none") or
# check_placement (a field naming no branch), each in one line; the correct one starts, and the
# reference formula names the one function to extend.


def post_normalizes(self, branch):
    """Placement's new question, with the shipped entries' answer (docs/forks.md, step 1)."""
    return False


@dataclass(frozen=True)
class PostNormPlacement(model.Placement):
    post_norm: tuple = ()  # the branches of q, k, v normalized per head after their map

    def post_normalizes(self, branch):
        return branch in self.post_norm


Q_POST = PostNormPlacement(dual=False, norm=False, post_norm=("q",), meaning="q normalized per head after W_q")


class PostNormAttention(model.Attention):
    """model.Attention with docs/forks.md's step-2 edits, written as a subclass: each post-normalized branch's
    scales rebuilt magnitude-free (the guide's line in ScaleSites), the post-norms built through make_scale,
    and the forward applying them after the views. The half-done versions below leave one edit out."""

    magnitude_free = True  # the guide's ScaleSites line
    scale = staticmethod(norms.make_scale)  # how the post-norm's scale is built

    def __init__(self, cfg, sites=None):
        super().__init__(cfg, sites)
        hd = cfg.head_dim
        for name in model.BRANCHES["attn_placement"]:
            post = cfg.attn.post_normalizes(name)
            lin = getattr(self, name)
            if post and self.magnitude_free:
                for side in ("in_scale", "out_scale"):
                    sv = getattr(lin, side)
                    if sv is not None:
                        setattr(lin, side, norms.make_scale(cfg, sv.dim, role=sv.role, magnitude_free=True))
            setattr(self, f"{name}_post",
                    norms.RMSNorm(hd, cfg.norm_eps, self.scale(cfg, hd, role="output")) if post else None)

    def forward(self, x, cos, sin):
        B, T, C = x.shape
        q, k, v = self.q(x), self.k(x), self.v(x)
        q = q.view(B, T, self.n_head, -1)
        k, v = k.view(B, T, self.n_kv_head, -1), v.view(B, T, self.n_kv_head, -1)
        q, k, v = (t if post is None else post(t) for t, post in ((q, self.q_post), (k, self.k_post), (v, self.v_post)))
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = model.apply_rope(q, cos, sin), model.apply_rope(k, cos, sin)
        y = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True,
                                           enable_gqa=self.n_kv_head != self.n_head)
        return self.o(y.transpose(1, 2).reshape(B, T, -1))


class ForwardlessAttention(PostNormAttention):
    """Half done: the post-norms built, the forward not edited."""

    forward = model.Attention.forward


class UnkeptAttention(PostNormAttention):
    """Half done: the magnitude bookkeeping missed (ScaleSites not told that a normalization follows)."""

    magnitude_free = False


class UnconditionalAttention(PostNormAttention):
    """Half done: the post-norm's scale built as a class directly, so it exists under scale="none" too."""

    scale = staticmethod(lambda cfg, dim, *, role: SoftplusScale(dim, role))


class SpareMLP(model.MLP):
    """Half done: an extra map built and never called (an idea the forward never runs)."""

    def __init__(self, cfg, d_ff, sites=None):
        super().__init__(cfg, d_ff, sites)
        self.spare = norms.ScaledLinear(cfg.n_embd, d_ff)


class GainAttention(model.Attention):
    """Half done: a bare nn.Parameter; used (gain) it fits no optimizer group, unused (spare_gain) it is never reached."""

    used = True

    def __init__(self, cfg, sites=None):
        super().__init__(cfg, sites)
        setattr(self, "gain" if self.used else "spare_gain", nn.Parameter(torch.ones(1)))

    def forward(self, x, cos, sin):
        y = super().forward(x, cos, sin)
        return y * self.gain if self.used else y


class SpareGainAttention(GainAttention):
    used = False


class MisroledAttention(PostNormAttention):
    """Half done: the post-norm's scale given a role that is none ("outputs")."""

    scale = staticmethod(lambda cfg, dim, *, role: norms.make_scale(cfg, dim, role="outputs"))


def post_norm(monkeypatch, attention=PostNormAttention, entry=Q_POST):
    """docs/forks.md's 'A placement that builds a module', applied: Placement's question, the entry, Attention."""
    monkeypatch.setattr(model, "Attention", attention)
    if entry is None:  # (an Attention edit alone)
        return {}
    monkeypatch.setattr(model.Placement, "post_normalizes", post_normalizes, raising=False)
    monkeypatch.setitem(model.ATTN_PLACEMENTS, "q_post", entry)
    return {"attn_placement": "q_post"}


HALF_DONE = {  # (Attention class, MLP class, entry, switches) -> the line's words
    "forward not edited": ((ForwardlessAttention, None, Q_POST, {}),
                           ["blocks.0.attn.q_post (RMSNorm): built by ForwardlessAttention, never reached by forward",
                            "use it in the forward"]),
    "a field misspelt": ((PostNormAttention, None, PostNormPlacement(dual=False, norm=False, post_norm=("qq",), meaning=""),
                          {}),
                         ["ATTN_PLACEMENTS['q_post']: post_norm=('qq',) names 'qq', which is none of its branches",
                          "did you mean 'q'?"]),
    "a scale built under scale='none'": ((UnconditionalAttention, None, Q_POST, {"scale": "none", "reparam": "plain",
                                                                                "branch_scales": False, "mlp_placement": "in"}),
                                         ["blocks.0.attn.q_post.scale (SoftplusScale): built by UnconditionalAttention under "
                                          "scale='none'", "build it through norms.make_scale"]),
    "magnitude bookkeeping missed": ((UnkeptAttention, None, Q_POST, {"reparam": "or", "branch_scales": True}),
                                     ["blocks.0.attn.q.in_scale.magnitude: the magnitude of a ORScale that UnkeptAttention "
                                      "builds where a normalization follows it", "magnitude_free=True"]),
    "the shared scale's bookkeeping missed (Block)": (
        (PostNormAttention, None, PostNormPlacement(dual=False, norm=False, post_norm=("q", "k", "v"), meaning=""),
         {"reparam": "or", "branch_scales": False, "mlp_placement": "in"}),
        ["blocks.0.attn_norm.scale.magnitude: the magnitude of a ORScale that Block builds", "magnitude_free=True"]),
    "a role misspelt": ((MisroledAttention, None, Q_POST, {}),
                        ["building the model: role must be one of ('input', 'output'), got 'outputs'"]),
    "an unused module": ((PostNormAttention, SpareMLP, Q_POST, {}),
                         ["blocks.0.mlp.spare (ScaledLinear): built by SpareMLP, never reached by forward"]),
    "an unused parameter": ((SpareGainAttention, None, None, {}),
                            ["blocks.0.attn.spare_gain: built by SpareGainAttention, never reached by forward"]),
    "a parameter in no optimizer group": ((GainAttention, None, None, {}),
                                          ["module 'blocks.0.attn' (GainAttention) owns parameters ['gain'] but fits no "
                                           "optimizer group"]),
}


@pytest.mark.parametrize("case", HALF_DONE)
def test_a_half_done_placement_fork_is_refused_at_start_in_one_line_with_nothing_written(tmp_path, monkeypatch, case):
    (attention, mlp, entry, switches), words = HALF_DONE[case]
    switches = {**post_norm(monkeypatch, attention, entry), **switches}
    if mlp is not None:
        monkeypatch.setattr(model, "MLP", mlp)
    with pytest.raises(UserError) as e:  # train.py's start (the command prints it as one 'error: ...' line)
        run(tiny_args(make_dataset(tmp_path / "ds"), tmp_path / "o", "--max_iters=1", *flags(switches)))
    assert "\n" not in str(e.value) and all(w in str(e.value) for w in words), str(e.value)
    assert not (tmp_path / "o").exists()  # refused before the run made its folder


def test_the_correct_placement_fork_starts_and_trains_on_its_module(tmp_path, monkeypatch):
    """The guide's three steps done: the start accepts it (under OR and HG, where the bookkeeping matters) and
    the step reaches the post-norm's scale (it moves)."""
    switches = {**post_norm(monkeypatch), "reparam": "or", "branch_scales": True}
    out = run(tiny_args(make_dataset(tmp_path / "ds"), tmp_path / "o", "--max_iters=2", *flags(switches)))
    gamma = out["model"].blocks[0].attn.q_post.scale()
    assert not torch.equal(gamma, torch.ones_like(gamma))


def guide_reference():
    """tests/test_norms.py:block_ref with docs/forks.md's step 3 inserted after the line that views k and v, as
    the guide says: the extended function, compiled in test_norms' namespace."""
    import inspect
    step = [b for b in guide_code("A new placement, a new optimizer or a new schedule") if "rms_ref" in b]
    source = inspect.getsource(test_norms.block_ref)
    anchor = "    k, v = (linear_ref(lin, h).view(B, T, n_kv, hd) for lin in (a.k, a.v))\n"
    assert len(step) == 1 and anchor in source
    source = source.replace(anchor, anchor + textwrap.indent(step[0], "    "))
    namespace = dict(vars(test_norms))
    exec(source, namespace)
    return namespace["block_ref"]


def test_the_reference_names_the_one_function_a_correct_fork_extends_and_passes_once_extended(monkeypatch):
    """With the correct fork, the reference check fails once naming blocks.0.attn.q_post and the step to follow,
    and the formula tests skip (not 174 bare assert_close failures); with docs/forks.md's step 3 added to
    block_ref, both pass on every combination with the fork's placement (and still fail when the model's
    formula differs: the post-norm's scale doubled)."""
    post_norm(monkeypatch)
    with pytest.raises(AssertionError) as e:
        test_norms.test_block_ref_knows_every_module_a_block_calls()
    assert ("block_ref does not know blocks.0.attn.q_post (RMSNorm), which Block's forward calls: extend "
            "tests/test_norms.py:block_ref (docs/forks.md, 'A placement that builds a module', step 3)") in str(e.value)
    fork_variants = [v for v in test_norms.all_variants() if v.get("attn_placement") == "q_post"]
    with pytest.raises(pytest.skip.Exception, match="block_ref does not know blocks.0.attn.q_post"):
        test_norms.test_block_forward_matches_formula(fork_variants[0], 2, 5)
    monkeypatch.setattr(test_norms, "block_ref", guide_reference())
    test_norms.test_block_ref_knows_every_module_a_block_calls()
    for v in fork_variants[::5]:
        test_norms.test_block_forward_matches_formula(v, 2, 5)
    monkeypatch.setattr(norms.RMSNorm, "forward", lambda self, x: norms.rms_norm(
        x, None if self.scale is None else 2 * self.scale() if self.dim == 16 else self.scale(), self.eps))
    with pytest.raises(AssertionError):  # (head_dim 16: the post-norm's and QK-norm's scales read doubled)
        test_norms.test_block_forward_matches_formula(dict(fork_variants[0], reparam="plain"), 2, 5)


def test_a_recipe_reading_the_width_declares_it_in_reads_and_no_other_recipe_gets_a_note(tmp_path, monkeypatch):
    """docs/forks.md's recipe guide: a decay that reads n_embd. Undeclared, or in its keys, it is refused in one
    line saying to put it in its reads; in its reads it starts, and no recipe gets a note about n_embd."""
    def by_width(role, cfg):
        return cfg.weight_decay * 64 / cfg.n_embd if role == "input" else 0.0

    ds = make_dataset(tmp_path / "ds")
    for entry, words in ((optim.ScaleDecay(by_width, (), ""), "reads the key 'n_embd' without declaring it: the run "
                          "reads it anyway, so add it to its reads (ScaleDecay(..., reads=('n_embd',))), not to its keys"),
                         (optim.ScaleDecay(by_width, ("n_embd",), ""), "declares 'n_embd' in its keys, which says only "
                          "it reads the key: the run reads it anyway, so every other entry would print a false note")):
        monkeypatch.setitem(optim.SCALE_WD, "by_width", entry)
        with pytest.raises(UserError, match=re.escape(words)):
            run(tiny_args(ds, tmp_path / "o", "--max_iters=1", "--scale_wd=by_width"))
        assert not (tmp_path / "o").exists()
    monkeypatch.setitem(optim.SCALE_WD, "by_width", optim.ScaleDecay(by_width, (), "", reads=("n_embd",)))
    run(tiny_args(ds, tmp_path / "o", "--max_iters=1", "--scale_wd=by_width"))
    for recipe in ("iwd", "by_width"):
        assert "n_embd" not in dict(inert_keys(load_config([f"--scale_wd={recipe}", "--n_embd=64"])[0]))


def missing_names(text):
    """(the names checked, [one line per name that does not exist]) for each `module.NAME` (and `path.py:NAME`) of
    the project that text gives: imported, the longest prefix that imports, and each attribute after it read."""
    import importlib
    projects = ("model", "norms", "optim", "configurator", "plumbing", "research", "tools", "tests")
    names = set(re.findall(r"`([A-Za-z_][\w.]*\.[A-Za-z_]\w*)", text))
    names |= {f"{path[:-3].replace('/', '.')}.{name}" for path, name in re.findall(r"`([\w/]+\.py):(\w+)", text)}
    checked, missing = [], []
    for name in sorted(names):
        parts = name.split(".")
        if parts[0] not in projects or parts[-1] in ("py", "md"):
            continue
        checked.append(name)
        for cut in range(len(parts) - 1, 0, -1):  # the longest prefix that imports
            try:
                obj = importlib.import_module(".".join(parts[:cut]).removeprefix("tests."))
            except ImportError:
                continue
            for attr in parts[cut:]:
                if not hasattr(obj, attr):
                    missing.append(f"{name}: {'.'.join(parts[:cut])} has no {attr}")
                    break
                obj = getattr(obj, attr)
            break
        else:
            missing.append(f"{name}: does not import")
    return checked, missing


def test_every_name_docs_forks_gives_as_module_dot_name_exists():
    """Each `module.NAME` (and `path.py:NAME`) docs/forks.md names is imported and holds that attribute: the
    guide points only at what exists (it once named optim.SHARED_KEYS, which had moved: that reads as missing)."""
    with open(os.path.join(ROOT, "docs", "forks.md")) as f:
        checked, missing = missing_names(f.read())
    assert missing == []
    assert {"model.BRANCHES", "optim.param_groups", "tests.test_norms.block_ref"} <= set(checked)
    assert missing_names("`optim.SHARED_KEYS` and `tests/test_norms.py:no_such_ref`")[1] == [
        "optim.SHARED_KEYS: optim has no SHARED_KEYS", "tests.test_norms.no_such_ref: tests.test_norms has no no_such_ref"]


# -----------------------------------------------------------------------------
# The start's model check on what ships: every config and ablation run passes without an exemption, and MoE's
# experts pass because MoE declares them routed (each is run by its own forward), not by a guess


def shipped_switches():
    """The model switches of every committed config file and every ablation run (its first seed), each combination
    once, at a tiny width and depth (the switches decide which module sits where; n_layer keeps one MoE block)."""
    import glob

    from research.ablation import build_config, load_ablation
    configs = [load_config([path])[0] for path in sorted(glob.glob(os.path.join(ROOT, "configs", "*.py")))]
    for path in sorted(glob.glob(os.path.join(ROOT, "configs", "ablations", "*.py"))):
        spec = load_ablation(path)
        configs += [build_config(spec, setting, variant, spec["seeds"][0]) for setting in spec["settings"]
                    for variant in spec["variants"]]
    tiny = dict(n_embd=32, n_head=2, n_kv_head=0, head_dim=0, d_ff=0, expert_d_ff=0, block_size=16, vocab_size=40)
    seen = {}
    for cfg in configs:
        switches = {k: v for k, v in cfg.items() if k in model.MODEL_KEYS and k not in tiny and k != "n_layer"}
        switches["n_layer"] = min(cfg["n_layer"], max(2, cfg["moe_every"]))
        seen.setdefault(json.dumps(switches, sort_keys=True), {**cfg, **switches, **tiny})
    return list(seen.values())


def test_every_shipped_config_and_ablation_run_passes_the_start_check_without_an_exemption():
    from plumbing.contracts import check_model
    cases = shipped_switches()
    assert len(cases) >= 10 and any(c["n_experts"] for c in cases) and any(c["qk_norm"] for c in cases)
    assert any(c["output_norms"] for c in cases) and any(not c["tie_embeddings"] for c in cases)
    for cfg in cases:
        gpt = model.GPT(model.model_config(cfg))
        assert check_model(gpt, SimpleNamespace(**cfg)) is gpt


def test_moe_experts_pass_because_moe_declares_them_routed_each_by_its_own_forward(monkeypatch):
    """Two tokens, top-1 of 8 experts: six or more get no token, so no gradient from the batch. Declared routed
    (model.MoE.routed) each is run by its own forward and the start passes; the declaration taken away, the start
    names an expert's parameter; an expert that builds a map it never calls is named through its own forward."""
    from plumbing import contracts
    monkeypatch.setattr(contracts, "PROBE_TOKENS", (1, 2))
    cfg = {**DEFAULTS, "n_layer": 1, "n_head": 2, "n_embd": 32, "block_size": 16, "vocab_size": 40, "n_experts": 8,
           "top_k": 1}
    contracts.check_model(model.GPT(model.model_config(cfg)), SimpleNamespace(**cfg))
    monkeypatch.setattr(model.MoE, "routed", ())
    with pytest.raises(UserError, match=r"^blocks\.0\.mlp\.experts\.\d \(MLP\): built by MoE, never reached by forward"):
        contracts.check_model(model.GPT(model.model_config(cfg)), SimpleNamespace(**cfg))
    monkeypatch.setattr(model.MoE, "routed", ("experts",))
    monkeypatch.setattr(model, "MLP", SpareMLP)
    with pytest.raises(UserError, match=r"^blocks\.0\.mlp\.experts\.0\.spare \(ScaledLinear\): built by SpareMLP"):
        contracts.check_model(model.GPT(model.model_config(cfg)), SimpleNamespace(**cfg))


def test_the_start_check_leaves_the_model_and_the_random_state_as_they_were():
    """check_model probes a copy with generators of its own: the model's weights, its gradients (none) and the
    global random state after it are those before it (so a run's losses are those it had without the check)."""
    from plumbing.contracts import check_model
    cfg = {**DEFAULTS, "n_layer": 2, "n_head": 2, "n_embd": 32, "block_size": 16, "vocab_size": 40, "dropout": 0.1}
    gpt = model.GPT(model.model_config(cfg))
    before = {k: v.clone() for k, v in gpt.state_dict().items()}
    torch.manual_seed(5)
    state = torch.get_rng_state()
    check_model(gpt, SimpleNamespace(**cfg))
    assert torch.equal(torch.get_rng_state(), state)
    assert all(torch.equal(before[k], v) for k, v in gpt.state_dict().items())
    assert all(p.grad is None for p in gpt.parameters())


def test_the_magnitude_check_runs_the_whole_model_once_and_each_block_alone(monkeypatch):
    """A magnitude scale inside a block is doubled on that block alone, run on its input from one forward of
    the whole model: a block whose output is unchanged leaves the logits unchanged, and the check costs one
    whole forward, not one per scale (SmolLM2-135M under OR: 152 whole forwards, 22 s of its start on the
    CPU). A scale held by no layer (the final norm's) is doubled on the whole model."""
    from plumbing import contracts
    cfg = {**DEFAULTS, "n_layer": 3, "n_head": 2, "n_embd": 32, "block_size": 16, "vocab_size": 40, "reparam": "or",
           "branch_scales": True}
    gpt = model.GPT(model.model_config(cfg))
    magnitudes = [n for n, m in gpt.named_modules() if isinstance(m, norms.ScaleVector) and m.has_magnitude()]
    calls = {"whole": 0, "blocks": 0}
    real_gpt, real_block = model.GPT.forward, model.Block.forward
    monkeypatch.setattr(model.GPT, "forward", lambda *a, **k: calls.__setitem__("whole", calls["whole"] + 1) or
                        real_gpt(*a, **k))
    monkeypatch.setattr(model.Block, "forward", lambda *a, **k: calls.__setitem__("blocks", calls["blocks"] + 1) or
                        real_block(*a, **k))
    probe = copy.deepcopy(gpt)
    with torch.random.fork_rng():
        ran = contracts.probe_model(probe, gpt.config, torch.device("cpu"))
    outside = [n for n in magnitudes if not n.startswith("blocks.")]
    assert len(magnitudes) - len(outside) >= 3 * 3 and outside == ["norm_f.scale"], magnitudes
    assert contracts.enclosing_layer(gpt, "norm_f.scale") is None
    assert contracts.enclosing_layer(gpt, magnitudes[0]) is gpt.blocks[int(magnitudes[0].split(".")[1])]
    # the probe's step, the one forward that gives each block its input, then one per scale outside the blocks
    assert calls["whole"] == 2 + len(outside)
    inside = len(magnitudes) - len(outside)  # each block run alone: its output before, then once per doubling
    assert calls["blocks"] == 3 * calls["whole"] + 3 + inside
    assert ran["forwards"] == 2 + 3 + len(magnitudes)
