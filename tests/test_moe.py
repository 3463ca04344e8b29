"""The top-k mixture-of-experts block: routing, load-balancing loss, folding, groups, training."""

import itertools
import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from conftest import BASELINE
from model import GPT, MLP, MoE, GPTConfig, Router
from optim import OPTIMIZERS, build_optimizers, param_groups
from test_norms import randomize_scales
from test_train import read_log, run, tiny_args

D = 16


def moe_cfg(**kw):
    base = dict(n_layer=2, n_head=2, n_embd=D, d_ff=32, block_size=8, vocab_size=30, n_experts=4, top_k=2,
                **BASELINE)
    return GPTConfig(**{**base, **kw})


def set_router(moe, weight):
    with torch.no_grad():
        moe.router.weight.copy_(weight)


@pytest.mark.parametrize("top_k", [1, 2, 3])
def test_each_token_gets_the_weighted_sum_of_its_top_k_experts(top_k):
    torch.manual_seed(0)
    moe = MoE(moe_cfg(top_k=top_k, shared_expert=True))
    for p in moe.parameters():
        torch.nn.init.normal_(p, 0, 0.3)
    set_router(moe, torch.randn(4, D) * 2)
    x = torch.randn(2, 5, D)
    y, _ = moe(x)
    for b, t in itertools.product(range(2), range(5)):
        xt = x[b, t]
        p = torch.softmax((moe.router.weight @ xt).float(), -1)
        w, chosen = p.topk(top_k)
        if top_k > 1:
            w = w / w.sum()
        expected = sum(w[i] * moe.experts[e](xt[None])[0] for i, e in enumerate(chosen.tolist()))
        expected = expected + moe.shared_expert(xt[None])[0]
        torch.testing.assert_close(y[b, t], expected, rtol=1e-5, atol=1e-5)


def test_one_expert_top_1_equals_the_dense_mlp():
    cfg = moe_cfg(n_experts=1, top_k=1, expert_d_ff=32)
    torch.manual_seed(1)
    moe, mlp = MoE(cfg), MLP(cfg, 32)
    for p in mlp.parameters():
        torch.nn.init.normal_(p, 0, 0.2)
    moe.experts[0].load_state_dict(mlp.state_dict())
    torch.nn.init.normal_(moe.router.weight, 0, 0.2)  # torch.empty until GPT.init_weights: garbage could be inf/NaN
    x = torch.randn(3, 4, D)
    torch.testing.assert_close(moe(x)[0], mlp(x))


def lb_loss_of(moe, x):
    moe.train()
    return moe(x)[1]["lb_loss"]


@pytest.mark.parametrize("top_k", [1, 2])
def test_aux_loss_is_one_for_uniform_routing(top_k):
    """Tokens split evenly over the experts with symmetric probabilities: lb_loss == 1 exactly."""
    moe = MoE(moe_cfg(top_k=top_k))
    set_router(moe, 5.0 * torch.eye(4, D))  # token along axis e prefers expert e
    x = torch.eye(4, D).repeat(3, 1)[None]  # 12 tokens, 3 per expert
    assert lb_loss_of(moe, x).item() == pytest.approx(1.0, abs=1e-6)
    set_router(moe, torch.zeros(4, D))  # uniform probabilities: ties, still 1.0
    assert lb_loss_of(moe, torch.randn(1, 10, D)).item() == pytest.approx(1.0, abs=1e-6)


@pytest.mark.parametrize("top_k", [1, 2])
def test_aux_loss_equals_hand_computed_value_for_uneven_routing(top_k):
    """n_experts / top_k * sum_i f_i P_i with f and P computed here from the router's probabilities."""
    torch.manual_seed(3)
    moe = MoE(moe_cfg(top_k=top_k))
    set_router(moe, torch.randn(4, D) * 2)
    x = torch.randn(1, 9, D)
    probs = torch.softmax(x[0] @ moe.router.weight.T, -1)
    chosen = probs.topk(top_k, -1).indices
    f = torch.tensor([(chosen == e).sum().item() / 9 for e in range(4)])
    expected = 4 / top_k * (f * probs.mean(0)).sum()
    assert lb_loss_of(moe, x).item() == pytest.approx(expected.item(), rel=1e-5)
    assert not torch.allclose(probs.mean(0), torch.full((4,), 0.25), atol=1e-2)  # P is not uniform


@pytest.mark.parametrize("top_k", [1, 2])
def test_aux_loss_is_larger_for_collapsed_routing(top_k):
    moe = MoE(moe_cfg(top_k=top_k))
    weight = torch.zeros(4, D)
    weight[0, 0], weight[1, 0] = 8.0, 4.0  # every token prefers expert 0, then 1
    set_router(moe, weight)
    x = torch.zeros(1, 10, D)
    x[..., 0] = 1.0
    lb = lb_loss_of(moe, x)
    assert lb.item() > 1.5
    lb.backward()
    assert moe.router.weight.grad.abs().sum() > 0  # the gradient reaches the router


def test_eval_mode_adds_no_aux_loss_and_is_deterministic():
    model = GPT(moe_cfg(shared_expert=True), seed=0).eval()
    idx = torch.randint(0, 30, (2, 8), generator=torch.Generator().manual_seed(0))
    logits1, _, aux = model(idx, idx)
    logits2, _, _ = model(idx, idx)
    assert "lb_loss" not in aux and "z_loss" not in aux and model.aux_objective(aux) == 0.0
    assert aux["expert_load"].shape == (2, 4)
    torch.testing.assert_close(aux["expert_load"].sum(-1), torch.ones(2))
    assert torch.equal(logits1, logits2)
    model.train()
    _, _, aux = model(idx, idx)
    assert {"lb_loss", "z_loss"} <= aux.keys()


def test_z_loss_is_mean_squared_logsumexp():
    torch.manual_seed(0)
    moe = MoE(moe_cfg())
    with torch.no_grad():  # a bare module's weights are torch.empty's (GPT.init_weights draws them): any bits, NaN too
        for p in moe.parameters():
            p.normal_(0.0, 0.02)
    x = torch.randn(1, 6, D)
    logits = (x[0] @ moe.router.weight.T).float()
    expected = torch.logsumexp(logits, -1).pow(2).mean()
    torch.testing.assert_close(moe.train()(x)[1]["z_loss"], expected)


def test_every_expert_gets_a_gradient_even_without_tokens():
    """Dropless and every expert called every step: DDP sees every parameter used."""
    moe = MoE(moe_cfg(top_k=1))
    weight = torch.zeros(4, D)
    weight[0] = 10.0
    set_router(moe, weight)
    y, _ = moe(torch.ones(1, 5, D))
    y.sum().backward()
    for e, expert in enumerate(moe.experts):
        assert all(p.grad is not None for p in expert.parameters()), e
    assert moe.experts[3].gate.weight.grad.abs().sum() == 0


def test_moe_every_places_moe_blocks():
    model = GPT(moe_cfg(n_layer=4, moe_every=2))
    assert [b.moe for b in model.blocks] == [False, True, False, True]


def test_flops_count_active_parameters():
    cfg = moe_cfg(n_experts=8, top_k=2, expert_d_ff=24, shared_expert=True)
    model = GPT(cfg)
    per_expert = 3 * D * 24  # no scale vectors of their own without HG/DP
    assert model.blocks[0].mlp.params_per_expert() == per_expert
    assert model.num_active_params() == model.num_params() - 2 * (8 - 2) * per_expert
    assert model.flops_per_token() == 6 * model.num_active_params() + 12 * 2 * D * 8


ALL_SWITCHES = [
    dict(),
    dict(branch_scales=True, attn_placement="dual", mlp_placement="dual_norm", reparam="or",
         qk_norm=True, output_norms=True),
    dict(branch_scales=True, mlp_placement="dual", reparam="er"),
    dict(mlp_placement="dual_norm"),
    dict(scale="none"),
]


@pytest.mark.parametrize("shared", [False, True])
@pytest.mark.parametrize("variant", ALL_SWITCHES, ids=lambda v: "-".join(f"{k}={x}" for k, x in v.items()) or "base")
def test_fold_preserves_logits_of_moe_models(variant, shared):
    model = GPT(moe_cfg(shared_expert=shared, tie_embeddings=False, **variant), seed=0).eval()
    randomize_scales(model, torch.Generator().manual_seed(1))
    idx = torch.randint(0, 30, (2, 8), generator=torch.Generator().manual_seed(2))
    before = model(idx)[0]
    model.fold_scales()
    torch.testing.assert_close(model(idx)[0], before, rtol=1e-4, atol=1e-4)
    for name, sv in model.scale_vectors():
        if sv.role == "input":
            torch.testing.assert_close(sv(), torch.ones(sv.dim), msg=name)


def test_router_has_its_own_scale_under_hg():
    model = GPT(moe_cfg(branch_scales=True, shared_expert=True))
    moe = model.blocks[0].mlp
    assert moe.router.in_scale is not None and moe.router.in_scale.role == "input"
    assert model.blocks[0].mlp_norm.scale is None
    assert all(e.gate.in_scale is not None and e.up.in_scale is not None for e in moe.mlps())


@pytest.mark.parametrize("optimizer", list(OPTIMIZERS))  # every registry entry, a fork's too
def test_moe_groups_cover_everything_and_router_stays_on_adamw(optimizer):
    model = GPT(moe_cfg(shared_expert=True, **ALL_SWITCHES[1]))
    cfg = SimpleNamespace(weight_decay=0.1, scale_wd="iwd", learning_rate=1e-3, muon_lr=0.02,
                          optimizer=optimizer, beta1=0.9, beta2=0.95, muon_momentum=0.95,
                          magnitude_lr_mult=1.0)
    groups = {g["name"]: g for g in param_groups(model, cfg)}
    ids = [id(p) for g in groups.values() for p in g["params"]]
    assert len(ids) == len(set(ids)) and set(ids) == {id(p) for p in model.parameters()}
    routers = {id(m.weight) for m in model.modules() if isinstance(m, Router)}
    assert {id(p) for p in groups["router"]["params"]} == routers and groups["router"]["optimizer"] == "adamw"
    experts = {id(lin.weight) for b in model.blocks for e in b.mlp.mlps() for lin in (e.gate, e.up, e.down)}
    assert experts <= {id(p) for p in groups["matrix"]["params"]}
    if optimizer == "muon":
        optimizers, _ = build_optimizers(model, cfg, "cpu")
        muon = [o for o in optimizers if isinstance(o, torch.optim.Muon)][0]
        assert all(p.dim() == 2 for g in muon.param_groups for p in g["params"])


def test_cpu_moe_run_trains_with_falling_loss(tmp_path):
    """A few dozen steps on a learnable sequence (a repeating pattern with noise)."""
    folder = tmp_path / "ds"
    folder.mkdir()
    rng = np.random.default_rng(0)
    for split, n in (("train", 20000), ("val", 4000)):
        seq = np.tile(np.arange(12), n // 12 + 1)[:n]
        noise = rng.random(n) < 0.1
        seq[noise] = rng.integers(0, 12, noise.sum())
        seq.astype(np.uint16).tofile(folder / f"{split}.bin")
    run(tiny_args(folder, tmp_path / "o", "--vocab_size=12", "--n_experts=4", "--top_k=2", "--expert_d_ff=32",
                  "--max_iters=40", "--eval_interval=20", "--learning_rate=1e-2", "--batch_size=8",
                  "--z_loss_coef=0.001"))
    rows = read_log(tmp_path / "o")
    vals = [r["val_loss"] for r in rows if r["kind"] == "eval"]
    assert vals[0] > math.log(12) - 0.1 and vals[-1] < vals[0] - 1.0, vals
    train_rows = [r for r in rows if r["kind"] == "train"]
    assert all(r["lb_loss"] > 0 and r["z_loss"] > 0 for r in train_rows)
    last_eval = [r for r in rows if r["kind"] == "eval"][-1]
    assert len(last_eval["expert_load"]) == 1 and sum(last_eval["expert_load"][0]) == pytest.approx(1.0)
    assert last_eval["max_load"][0] == pytest.approx(max(last_eval["expert_load"][0]) * 4)


def test_bad_moe_config_is_an_error():
    with pytest.raises(ValueError, match="top_k=5 must be between 1 and n_experts=4"):
        moe_cfg(top_k=5)
