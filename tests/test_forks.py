"""docs/forks.md's fork guides, followed literally: a new scale class, a new placement and a
new optimizer, each registered at run time as a fork would register it in the source (one entry
in its registry). Each is then covered by the suite's own generic tests, trains and resumes
exactly, folds (or its export says why not), gets its own run hash, gets the right inert notes,
is measured by bench.py and exports."""

import json
import math
from types import SimpleNamespace

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from tools import bench
import model
import norms
import optim
import test_norms
from research.ablation import config_hash
import configurator
from configurator import DEFAULTS, UserError, load_config
from conftest import add_row
from ops import inert_keys
from test_records import renamed_records
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


TOY_PLACEMENT = model.Placement(dual=True, norm=True, meaning="toy: DNP's sites, named anew")
ASYMMETRIC_PLACEMENT = model.Placement(dual=True, norm=True, meaning="DNP with u on the up branch only",
                                       outer=("up",))


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


@pytest.fixture
def scale_class(monkeypatch):
    monkeypatch.setitem(norms.SCALE_CLASSES, "softplus", SoftplusScale)
    return {"reparam": "softplus"}


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


def flags(switches):
    return [f"--{k}={v}" for k, v in switches.items()]


# -----------------------------------------------------------------------------
# What the suite then holds each of them to


def trains_and_resumes_exactly(tmp_path, switches):
    """4 iterations straight, and 2 then 2 more resumed: the same log, row for row."""
    ds = make_dataset(tmp_path / "ds")
    common = ["--max_iters=4", "--eval_interval=2", *flags(switches)]
    run(tiny_args(ds, tmp_path / "a", *common))
    run(tiny_args(ds, tmp_path / "b", *common[1:], "--max_iters=2"))
    run(tiny_args(ds, tmp_path / "b", "--init_from=resume", "--max_iters=4"))
    straight = read_log(tmp_path / "a")
    resumed = [r for r in read_log(tmp_path / "b") if r["kind"] != "resume"]  # max_iters 2 -> 4, recorded
    assert [(r["kind"], r["iter"]) for r in resumed] == [(r["kind"], r["iter"]) for r in straight]
    for a, b in zip(straight, resumed):
        for key in {"loss", "val_loss", "lr"} & a.keys():
            assert b[key] == pytest.approx(a[key], rel=1e-6, abs=0), (a, b)
    assert read_log(tmp_path / "a")[-1]["val_loss"] < math.log(40) + 0.5  # it trained, finitely
    return tmp_path / "a"


def exports(out_dir):
    """export.py writes a folder whose logits transformers reproduces (it checks), or refuses in one line."""
    pytest.importorskip("transformers", reason="optional extra: pip install -e '.[export]'")
    from tools import export

    try:
        export.main([f"--out_dir={out_dir}", f"--export_dir={out_dir / 'hf'}"])
    except UserError as e:
        assert "\n" not in str(e) and not (out_dir / "hf").exists()
        return
    assert json.loads((out_dir / "hf" / "config.json").read_text())["architectures"]


def bench_measures(switches, capsys, key):
    name = f"{key}={switches[key]}"
    assert bench.variants()[name] == {key: switches[key]}
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
    exports(out)


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
    exports(out)


def test_an_asymmetric_placement_is_data_the_fused_path_reads_trains_folds_benches_and_exports(
        tmp_path, capsys, asymmetric):
    """docs/forks.md's placement guide with the `outer` field: DNP with u on the up branch only. The
    gate branch has no u and the up branch one; the fused path (one matmul, one normalization over
    both branches) computes it with ones for the missing u, equal to the formula branch by branch,
    and the suite's generic tests, training, folding, bench and export take it as they stand."""
    from norms import branch_linears
    generic_model_tests(mlp_placement="dnp_up")
    cfg = model.model_config({**load_config(flags(asymmetric))[0], "vocab_size": 40})
    mlp = model.GPT(cfg).blocks[0].mlp
    assert mlp.gate.out_scale is None and mlp.up.out_scale is not None and mlp.gate.out_norm
    with torch.no_grad():
        mlp.up.out_scale.set_(torch.linspace(0.5, 2.0, cfg.d_ff))
    x = torch.randn(3, 5, cfg.n_embd)
    fused, formula = branch_linears(x, (mlp.gate, mlp.up), True), branch_linears(x, (mlp.gate, mlp.up), False)
    for a, b in zip(fused, formula):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    out = trains_and_resumes_exactly(tmp_path, asymmetric)
    bench_measures(asymmetric, capsys, "mlp_placement")
    exports(out)


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


def test_an_optimizer_name_no_registry_holds_is_an_error_not_a_group_never_stepped(monkeypatch):
    monkeypatch.setitem(optim.OPTIMIZERS, "lion", optim.Optimizer("lion-typo", build_sgd, "learning_rate", (), ""))
    cfg = SimpleNamespace(**{**DEFAULTS, "optimizer": "lion"})
    with pytest.raises(ValueError, match=r"groups \['matrix'\] name optimizers \['lion-typo'\].*nothing would step"):
        optim.build_optimizers(model.GPT(model.model_config({**DEFAULTS, "vocab_size": 40})), cfg, "cpu")
