"""The mechanism statistics (mechanism.Mechanism): each key against its formula on a step taken by hand,
the folding relation they read, training unchanged by them, every site in the row, and resume."""

import collections
import copy
import math
import os
import shutil
from types import SimpleNamespace

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from configurator import DEFAULTS, UserError, load_config
from conftest import ROOT
from model import GPT, GPTConfig, model_config
from plumbing.mechanism import Mechanism
from optim import build_optimizers
from research.ablation import config_hash
from test_reliability import signal_at
from test_train import make_dataset, read_log, run, tiny_args
import train as train_mod

BASELINE = dict(scale="vector", reparam="plain", branch_scales=False, attn_placement="in", mlp_placement="in")
TINY = dict(n_layer=1, n_head=2, n_embd=16, d_ff=32, block_size=8, vocab_size=40)


def opt_cfg(**kw):
    return SimpleNamespace(**{**DEFAULTS, "learning_rate": 1e-2, "weight_decay": 0.1, **kw})


def far_from_one(model, seed=0):
    """Every scale vector set to gammas spread over [0.2, 5] (at init they are all 1, where W~ == W)."""
    gen = torch.Generator().manual_seed(seed)
    for _, sv in model.scale_vectors():
        sv.set_(torch.exp(torch.empty(sv.dim).uniform_(math.log(0.2), math.log(5.0), generator=gen)))


def step(model, optimizers, seed=1):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randint(0, 40, (4, 8), generator=gen)
    y = torch.randint(0, 40, (4, 8), generator=gen)
    model(x, y)[1].backward()
    for opt in optimizers:
        opt.step()
        opt.zero_grad(set_to_none=True)


def rel(after, before):
    """||after - before||_F / ||before||_F over lists of tensors, in float64."""
    after, before = [t.detach().double() for t in after], [t.detach().double() for t in before]
    d = sum((a - b).square().sum() for a, b in zip(after, before))
    return math.sqrt(d / sum(b.square().sum() for b in before))


def test_one_step_by_hand_gives_every_logged_value():
    """Baseline, untied head, n_layer=1, scales far from 1, one AdamW step: the relative motion of the
    pre-norm and final-norm sites' folded maps, the floor, the update ratios and gamma's state equal
    their formulas computed here from the parameters before and after, with W~ taken from
    fold_scales() on a copy of the model; the same ratio without gamma is far from the logged one."""
    model = GPT(GPTConfig(**BASELINE, **TINY, tie_embeddings=False), seed=0)
    far_from_one(model)
    optimizers, _ = build_optimizers(model, opt_cfg(), "cpu")
    mech = Mechanism(model, optimizers, step=7)
    before = copy.deepcopy(model)
    step(model, optimizers)
    row = mech.row(8)

    folded_before, folded_after = copy.deepcopy(before), copy.deepcopy(model)
    folded_before.fold_scales()
    folded_after.fold_scales()
    sites = {"blocks.0.attn_norm.scale": ["blocks.0.attn.q.weight", "blocks.0.attn.k.weight",
                                          "blocks.0.attn.v.weight"],
             "blocks.0.mlp_norm.scale": ["blocks.0.mlp.gate.weight", "blocks.0.mlp.up.weight"],
             "norm_f.scale": ["lm_head.weight"]}
    assert row["since"] == 7
    for site, names in sites.items():
        p0, p1 = dict(before.named_parameters()), dict(model.named_parameters())
        f0, f1 = dict(folded_before.named_parameters()), dict(folded_after.named_parameters())
        amp_folded = rel([f1[n] for n in names], [f0[n] for n in names])
        amp_plain = rel([p1[n] for n in names], [p0[n] for n in names])
        assert row[f"{site}/move_folded"] == pytest.approx(amp_folded, rel=1e-5), site
        assert row[f"{site}/move_plain"] == pytest.approx(amp_plain, rel=1e-5), site
        assert row[f"{site}/move_ratio"] == pytest.approx(amp_folded / amp_plain, rel=1e-5), site
        # a statistic that left gamma out of W~ would log move_plain as move_folded: far apart here
        assert abs(amp_folded - amp_plain) > 1e-3 * amp_plain, site
        g = p1[site + ".weight"].detach().double()
        assert row[f"{site}/g2_min"] == pytest.approx(g.square().min().item(), rel=1e-6)
        assert row[f"{site}/g2_mean"] == pytest.approx(g.square().mean().item(), rel=1e-6)
        assert row[f"{site}/spread"] == pytest.approx((g.abs().max() / g.abs().min()).item(), rel=1e-6)

    p0, p1 = dict(before.named_parameters()), dict(model.named_parameters())
    held_matrices = [n for names in sites.values() for n in names if n != "lm_head.weight"]
    all_matrices = held_matrices + ["blocks.0.attn.o.weight", "blocks.0.mlp.down.weight"]
    assert row["update/matrix"] == pytest.approx(rel([p1[n] for n in held_matrices], [p0[n] for n in held_matrices]),
                                                 rel=1e-5)
    assert row["held/matrix"] == sum(p0[n].numel() for n in held_matrices) / sum(p0[n].numel() for n in all_matrices)
    scales = [n + ".weight" for n in sites]
    assert row["update/scale_input"] == pytest.approx(rel([p1[n] for n in scales], [p0[n] for n in scales]), rel=1e-5)
    assert row["update/lm_head"] == pytest.approx(rel([p1["lm_head.weight"]], [p0["lm_head.weight"]]), rel=1e-5)
    assert "update/embedding" not in row  # the copy holds no embedding
    g = torch.cat([p1[n].detach().double() for n in scales])
    assert row["gamma/input/rms"] == pytest.approx(g.square().mean().sqrt().item(), rel=1e-6)
    assert row["gamma/input/drift"] == pytest.approx((g - 1).square().mean().sqrt().item(), rel=1e-6)
    assert "gamma/output/rms" not in row  # the baseline untied has no output-role scale


def test_the_folded_map_of_a_dp_outer_scale_and_a_dnp_up_scale_is_the_fold_of_their_matrices():
    """DP's u_q folds into W_q's rows and DNP's u_up into W_down's columns: move_folded over one step
    equals the relative change of those matrices with only that gamma multiplied in, rows or columns."""
    model = GPT(GPTConfig(**{**BASELINE, "attn_placement": "dual", "mlp_placement": "dual_norm"}, **TINY), seed=0)
    far_from_one(model, seed=3)
    optimizers, _ = build_optimizers(model, opt_cfg(), "cpu")
    mech = Mechanism(model, optimizers, step=0)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    step(model, optimizers)
    row, after = mech.row(1), dict(model.named_parameters())
    q = "blocks.0.attn.q"
    u0, u1 = before[f"{q}.out_scale.weight"], after[f"{q}.out_scale.weight"].detach()
    expected = rel([u1[:, None] * after[f"{q}.weight"].detach()], [u0[:, None] * before[f"{q}.weight"]])
    assert row[f"{q}.out_scale/move_folded"] == pytest.approx(expected, rel=1e-5)
    up, down = "blocks.0.mlp.up.out_scale.weight", "blocks.0.mlp.down.weight"
    expected = rel([after[down].detach() * after[up].detach()[None, :]], [before[down] * before[up][None, :]])
    assert row["blocks.0.mlp.up.out_scale/move_folded"] == pytest.approx(expected, rel=1e-5)
    assert "blocks.0.mlp.gate.out_scale/move_folded" not in row  # output-role under DNP: SiLU follows it
    assert "blocks.0.mlp.gate.out_scale/g2_min" in row


VARIANTS = {
    "dense": dict(BASELINE),
    "moe": dict(BASELINE, n_experts=3, top_k=2),
    "moe_hg": dict(BASELINE, n_experts=3, top_k=2, branch_scales=True),
    "dp": dict(BASELINE, attn_placement="dual", mlp_placement="dual", dual_sites="all"),
    "dnp": dict(BASELINE, mlp_placement="dual_norm"),
    "unified": dict(branch_scales=True, attn_placement="in", mlp_placement="dual_norm", reparam="or"),
    "unified_qk_out": dict(branch_scales=True, mlp_placement="dual_norm", reparam="or", qk_norm=True,
                           output_norms=True),
}


@pytest.mark.parametrize("tie", [True, False], ids=["tied", "untied"])
@pytest.mark.parametrize("variant", VARIANTS)
def test_every_scale_site_is_in_the_row_and_every_input_role_site_has_its_ratios(variant, tie):
    model = GPT(GPTConfig(**{**TINY, **VARIANTS[variant], "n_layer": 2, "tie_embeddings": tie}), seed=0)
    optimizers, _ = build_optimizers(model, opt_cfg(), "cpu")
    mech = Mechanism(model, optimizers, step=0)
    step(model, optimizers)
    row = mech.row(1)
    for name, sv in model.scale_vectors():
        assert {f"{name}/g2_min", f"{name}/g2_mean", f"{name}/spread"} <= row.keys(), name
        assert (f"{name}/move_folded" in row) == (sv.role == "input"), name
        assert row.get(f"{name}/move_folded", 1.0) > 0, name
    assert ("norm_f.scale/move_folded" in row) == (not tie)  # tied, the final-norm scale has no fold
    groups = {g["name"] for opt in optimizers for g in opt.param_groups}
    assert {k.split("/")[1] for k in row if k.startswith("update/")} == groups - {"embedding"}  # (not held)
    if model.config.n_experts:  # the shared pre-MLP scale (or, under HG, each branch's) reaches every expert
        moe = model.blocks[0].mlp
        readers = [cols for sv, cols, _ in model.blocks[0].folds() if sv is model.blocks[0].mlp_norm.scale]
        if variant == "moe":
            assert readers == [[w for e in moe.experts for w in (e.gate.weight, e.up.weight)] + [moe.router.weight]]
        else:
            assert readers == [] and "blocks.0.mlp.router.in_scale/move_folded" in row
            assert all(f"blocks.0.mlp.experts.{i}.{b}.in_scale/move_folded" in row for i in range(3)
                       for b in ("gate", "up"))


def test_training_is_the_same_bit_for_bit_with_the_statistics_and_no_hash_holds_the_switch(tmp_path):
    ds = make_dataset(tmp_path / "ds")
    common = ["--max_iters=6", "--eval_interval=3", "--dropout=0.1", "--n_experts=2", "--top_k=1"]
    run(tiny_args(ds, tmp_path / "on", *common, "--mechanism_stats=on"))
    run(tiny_args(ds, tmp_path / "off", *common, "--mechanism_stats=off"))
    on, off = read_log(tmp_path / "on"), read_log(tmp_path / "off")
    assert [{k: v for k, v in r.items() if k != "mechanism"} for r in on] == off
    assert all("mechanism" in r for r in on if r["kind"] == "eval") and not any("mechanism" in r for r in off)
    cfg, _ = load_config(common)
    base = {k: v for k, v in cfg.items() if k not in ("out_dir", "mechanism_stats")}
    assert config_hash({**base, "mechanism_stats": "off"}) == config_hash({**base, "mechanism_stats": "on"}) == \
        config_hash(base)
    assert config_hash({**base, "max_iters": 7}) != config_hash(base)  # (the hash does read the config)


def test_auto_is_on_at_cpu_sizes_and_a_bad_value_is_one_line(tmp_path):
    ds = make_dataset(tmp_path / "ds")
    run(tiny_args(ds, tmp_path / "o", "--max_iters=2", "--eval_interval=2"))
    assert all("mechanism" in r for r in read_log(tmp_path / "o") if r["kind"] == "eval")
    with pytest.raises(UserError, match="mechanism_stats='yes' is not one of 'auto', 'on', 'off'"):
        load_config(["--mechanism_stats=yes"])


def test_a_resumed_run_logs_the_interval_the_stop_left_open(tmp_path, monkeypatch):
    """A SIGTERM during step 5 (0-based: batch 6 is read ahead in it) saves iteration 6 between the evals
    at 4 and 8: the checkpoint keeps the interval's start (the weights at 4), so the resumed run's eval
    at 8 measures the interval
    since 4, as the uninterrupted run's does, bit for bit. Without it (a checkpoint that holds no
    interval, as an FSDP2 one) the row says it measures since 6, and moves less."""
    ds = make_dataset(tmp_path / "ds")
    common = ["--max_iters=8", "--eval_interval=4"]
    run(tiny_args(ds, tmp_path / "a", *common))
    monkeypatch.setattr(train_mod, "get_batch", signal_at(6))
    assert run(tiny_args(ds, tmp_path / "b", *common))["stopped"] == "SIGTERM"
    monkeypatch.undo()
    shutil.copytree(tmp_path / "b", tmp_path / "c")
    ckpt = torch.load(tmp_path / "c" / "ckpt.pt", weights_only=True)
    assert (ckpt["iter"], ckpt["mechanism"]["since"]) == (6, 4)
    del ckpt["mechanism"]
    torch.save(ckpt, tmp_path / "c" / "ckpt.pt")
    for out in ("b", "c"):
        run(["--init_from=resume", f"--out_dir={tmp_path / out}"])
    straight, resumed, cut = ({r["iter"]: r["mechanism"] for r in read_log(tmp_path / d) if r["kind"] == "eval"}
                              for d in ("a", "b", "c"))
    assert [straight[i].get("since") for i in (0, 4, 8)] == [None, 0, 4]
    assert resumed == straight
    assert [cut[i].get("since") for i in (0, 4, 8)] == [None, 0, 6]
    amp = "blocks.0.attn.q.in_scale/move_plain"
    assert cut[8][amp] < straight[8][amp]  # 2 steps of movement against 4


def test_a_record_carries_the_final_statistics_and_each_interval_keys_mean(tmp_path):
    """research.records.make_record on a real run's log: "mechanism" holds the last eval row's entry
    and, per key, the mean over the eval rows that close an interval (computed here from the log);
    a log without the statistics gives a record without the field."""
    from research import records
    data = make_dataset(tmp_path / "data")
    out = str(tmp_path / "on")
    run(tiny_args(data, out, "--max_iters=6", "--eval_interval=2", "--mechanism_stats=on"))
    rows = read_log(out)
    evals = [r for r in rows if r["kind"] == "eval"]
    planned = {"name": "x", "hash": "h", "out_dir": out, "variant": "v", "setting": "s", "seed": 1, "lr_mult": 1.0, "iter_mult": 1.0,
               "config": {**load_config(tiny_args(data, out, "--max_iters=6", "--eval_interval=2"))[0]}}
    rec = records.make_record(planned, rows, "abl")["mechanism"]
    intervals = [r["mechanism"] for r in evals if "since" in r["mechanism"]]
    assert rec["intervals"] == len(intervals) == 3 and rec["final"]["since"] == 4
    key = next(k for k in intervals[-1] if k.endswith("/move_ratio"))
    want = sum(m[key] for m in intervals) / len(intervals)
    assert rec["mean"][key] == pytest.approx(want, rel=1e-4) and rec["final"][key] == pytest.approx(intervals[-1][key],
                                                                                                       rel=1e-4)
    floor = next(k for k in intervals[-1] if k.endswith("/g2_min"))  # a point-in-time key: its mean over the intervals
    assert rec["mean"][floor] == pytest.approx(sum(m[floor] for m in intervals) / 3, rel=1e-4)
    assert "since" not in rec["mean"]
    bare = [{k: v for k, v in r.items() if k != "mechanism"} for r in rows]
    assert "mechanism" not in records.make_record(planned, bare, "abl")


def test_the_registered_scalar_is_the_mean_of_the_input_role_sites_move_ratio():
    from research.stats import mechanism_scalar
    rec = {"mechanism": {"mean": {"a.scale/move_ratio": 1.5, "b.scale/move_ratio": 2.5, "c.scale/move_ratio": None,
                                  "a.scale/move_folded": 9.0, "a.scale/g2_min": 7.0}}}
    assert mechanism_scalar(rec) == 2.0  # the two defined ratios, nothing else
    assert mechanism_scalar({"mechanism": {"mean": {"a.scale/g2_min": 1.0}}}) is None and mechanism_scalar({}) is None


# --- Theorem 2.2 under plain SGD: what each statistic must read ---

SITE = "blocks.0.mlp_norm.scale"  # the pre-MLP scale, folded into the columns of W_gate and W_up
READERS = ("blocks.0.mlp.gate.weight", "blocks.0.mlp.up.weight")


def sgd_step(model, mech, lr, frozen=(), seed=1):
    """One plain-SGD step on every parameter but `frozen` (their gradients dropped), with the
    gradients the mechanism reads first; returns {name: (value before, gradient)}."""
    gen = torch.Generator().manual_seed(seed)
    x, y = torch.randint(0, 40, (4, 8), generator=gen), torch.randint(0, 40, (4, 8), generator=gen)
    model(x, y)[1].backward()
    before = {n: (p.detach().clone(), None if p.grad is None else p.grad.detach().clone())
              for n, p in model.named_parameters()}
    mech.record_step()
    with torch.no_grad():
        for n, p in model.named_parameters():
            if p.grad is not None and n not in frozen:
                p -= lr * p.grad
            p.grad = None
    return before


def sgd_model(gamma=None, lr=1e-3, readers_times=1.0, dtype=torch.float32):
    """The untied baseline with every scale vector far from 1 (or SITE's gamma constant at `gamma`) and
    SITE's readers' weights times readers_times, and a Mechanism whose matrix group steps at lr (plain
    SGD is taken by hand: the groups give the LR)."""
    model = GPT(GPTConfig(**BASELINE, **TINY, tie_embeddings=False), seed=0).to(dtype)
    far_from_one(model)
    with torch.no_grad():
        for name in READERS:
            dict(model.named_parameters())[name].mul_(readers_times)
    if gamma is not None:
        dict(model.scale_vectors())[SITE].set_(torch.full((TINY["n_embd"],), float(gamma)))
    optimizers, _ = build_optimizers(model, opt_cfg(learning_rate=lr, weight_decay=0.0), "cpu")
    return model, Mechanism(model, optimizers, step=0)


def test_under_sgd_the_folded_step_is_the_theorems_first_order_prediction():
    """One SGD step of LR eta: the folded columns w~_j = gamma_j w_j of SITE's readers move by
    -eta (gamma_j^2 I + w_j w_j^T) g_j (paper Theorem 2.2), g_j = dL/dw~_j = dL/dw_j / gamma_j, up to
    the second-order term eta^2 dgamma_j dw_j; step_matrix reads the gamma^2 term, step_scale the
    rank-one term, gain the folded step over eta ||g||: each equals its hand computation here. The
    readers' weights are 10x their init, so that ||w_j||^2 is near gamma_j^2 and the rank-one term
    is a large part of the step (at init it is ~1%)."""
    lr = 1e-4  # (in float64: no rounding of the weights the step lands on)
    model, mech = sgd_model(lr=lr, readers_times=10.0, dtype=torch.float64)
    before = sgd_step(model, mech, lr)
    row = mech.row(1)
    gamma, g_gamma = before[SITE + ".weight"]
    params = dict(model.named_parameters())
    gamma64 = gamma.double()
    g = {n: before[n][1].double() / gamma64[None, :] for n in READERS}  # dL/dW~, column by column
    # w_j is the column j of every reader stacked (the scale multiplies all of them): w_j . g_j sums over both
    dot = sum((before[n][0].double() * g[n]).sum(0, keepdim=True) for n in READERS)
    assert torch.allclose(g_gamma.double()[None, :], dot, rtol=1e-4, atol=1e-9)  # dL/dgamma_j = w_j . g_j
    predicted, moved, folded, by_matrix, by_scale, scale_free = [], [], [], [], [], []
    for name in READERS:
        w = before[name][0].double()
        # -(gamma_j^2 I + w_j w_j^T) g_j for every column j at once
        predicted.append(-lr * (gamma64[None, :] ** 2 * g[name] + w * dot))
        moved.append(params[name].detach().double() * params[SITE + ".weight"].detach().double()[None, :]
                     - w * gamma64[None, :])
        folded.append(w * gamma64[None, :])
        by_matrix.append(-lr * gamma64[None, :] ** 2 * g[name])
        by_scale.append(-lr * w * dot)
        scale_free.append(-lr * g[name])
    norm = lambda ts: math.sqrt(sum(t.square().sum().item() for t in ts))  # noqa: E731
    error = norm([m - p for m, p in zip(moved, predicted)]) / norm(predicted)
    assert error < 2e-2  # second order in eta
    # the rank-one term is no rounding: dropping it misses by far more
    assert norm([m - b for m, b in zip(moved, by_matrix)]) / norm(predicted) > 10 * error
    assert row[f"{SITE}/step_matrix"] == pytest.approx(norm(by_matrix) / norm(folded), rel=1e-2)
    assert row[f"{SITE}/step_scale"] == pytest.approx(norm(by_scale) / norm(folded), rel=1e-2)
    assert row[f"{SITE}/gain"] == pytest.approx(norm(moved) / norm(scale_free), rel=1e-4)
    assert row[f"{SITE}/move_folded"] == pytest.approx(norm(moved) / norm(folded), rel=1e-4)


@pytest.mark.parametrize("gamma", [1.0, 2.0, 0.5])
def test_a_frozen_gamma_reads_as_its_square_in_gain_and_as_one_in_move_ratio(gamma):
    """gamma held constant (its gradient dropped) under SGD: the folded map steps by
    -eta gamma^2 dL/dW~, so gain is gamma^2 (4 at gamma = 2, 1 at 1, 0.25 at 0.5) and step_scale 0,
    while move_ratio, which compares the folded map with its own matrix, is 1 at every gamma: it
    cannot tell a gamma of 2 from 1, and is named for what it reads (gamma's change)."""
    model, mech = sgd_model(gamma=gamma, lr=1e-2)
    for k in range(3):
        sgd_step(model, mech, 1e-2, frozen={SITE + ".weight"}, seed=k)
    row = mech.row(3)
    # (to the float32 rounding of the weights the steps land on, ~1e-5 of a step here)
    assert row[f"{SITE}/gain"] == pytest.approx(gamma ** 2, rel=1e-3)
    assert row[f"{SITE}/move_ratio"] == pytest.approx(1.0, rel=1e-5)
    assert row[f"{SITE}/step_scale"] == 0.0
    assert row[f"{SITE}/step_matrix"] == pytest.approx(row[f"{SITE}/move_folded"], rel=1e-6)


# --- what the statistics cost: ops per step, host reads per row ---

class DispatchCount(TorchDispatchMode):
    """Counts the ATen ops dispatched while it is on, by op (on any device, meta included: each is one
    kernel launch on a GPU, or the dispatch of one)."""

    def __init__(self):
        super().__init__()
        self.ops = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops[func] += 1
        return func(*args, **(kwargs or {}))


def unified_124m(*overrides):
    """(model, optimizers) of configs/unified_124m.py with overrides, on the CPU."""
    cfg, _ = load_config([os.path.join(ROOT, "configs", "unified_124m.py"), "--vocab_size=50257", *overrides])
    cfg = SimpleNamespace(**cfg)
    model = GPT(model_config(cfg), seed=0)
    return model, build_optimizers(model, cfg, "cpu")[0]


def record_step_ops(n_layer):
    """The ATen ops of one record_step on the 124M unified model at n_layer, on the meta device (shapes
    only, no memory), every parameter with a gradient; and the model's parameter count."""
    with torch.device("meta"):
        model, optimizers = unified_124m(f"--n_layer={n_layer}")
        for p in model.parameters():
            p.grad = torch.zeros_like(p)
    mech = Mechanism(model, optimizers, step=0)
    with DispatchCount() as count:
        mech.record_step()
    return sum(count.ops.values()), model.num_params()


def test_record_step_dispatches_under_60_ops_at_124m_and_as_many_at_2_layers():
    """record_step runs every step: its ATen ops at 124M (12 layers x 768, the unified variant: 72 input-role
    sites, 72 matrices) stay under 60 and do not grow with depth (the same count at 2 layers). The loop over
    every site and matrix this replaced dispatched 1,104 at 124M and 184 at 2 layers (counted the same way)."""
    ops_12, params = record_step_ops(12)
    ops_2, _ = record_step_ops(2)
    assert 120e6 < params < 130e6
    assert ops_12 < 60
    assert ops_12 == ops_2


def test_record_step_sums_lr_times_the_gradient_over_gamma_per_matrix_at_its_groups_lr():
    """Two steps of random gradients, gammas and LRs, read by record_step, against the sum computed here
    matrix by matrix from the formula: sum_t lr_t dL/dW / gamma_t, gamma along W's columns or rows as its
    site folds (DP's outer attention scales fold into rows, the pre-norm scales into columns), at the LR
    of the matrix's own optimizer group (every group a different LR: the untied head's is not the
    matrices'); a channel whose gamma is 0 adds exactly nothing, and a matrix without a gradient at the
    first step adds the second step only."""
    model = GPT(GPTConfig(**{**BASELINE, "attn_placement": "dual"}, **{**TINY, "n_layer": 2}, tie_embeddings=False), seed=0)
    optimizers, _ = build_optimizers(model, opt_cfg(), "cpu")
    mech = Mechanism(model, optimizers, step=0)
    names = {id(p): n for n, p in model.named_parameters()}
    sites = {id(sv): n for n, sv in model.scale_vectors()}
    pairs = [(sites[id(sv)], sv, w, side) for sv, cols, rows in model.folds() if sv.role == "input"
             for w, side in [(w, "columns") for w in cols] + [(w, "rows") for w in rows]]
    zeroed = [next(p for p in pairs if p[3] == side) for side in ("columns", "rows")]  # gamma_0 = 0 at these sites
    dropped = model.blocks[1].attn.k.weight
    expected = {f"{site}|{names[id(w)]}": torch.zeros(w.shape, dtype=torch.float64) for site, _, w, _ in pairs}
    gen = torch.Generator().manual_seed(0)
    for t in range(2):
        far_from_one(model, seed=t)
        for _, sv, _, _ in zeroed:
            sv.set_(torch.cat([torch.zeros(1), sv().detach()[1:]]))
        for k, group in enumerate(g for opt in optimizers for g in opt.param_groups):
            group["lr"] = 1e-2 * (k + 1) * (t + 1)
        for p in model.parameters():
            p.grad = torch.randn(p.shape, generator=gen)
        if t == 0:
            dropped.grad = None
        mech.record_step()
        lr = {id(p): g["lr"] for opt in optimizers for g in opt.param_groups for p in g["params"]}
        for site, sv, w, side in pairs:
            if w.grad is not None:
                g = sv().detach().double()
                inverse = torch.where(g == 0, 0.0, 1 / g)
                expected[f"{site}|{names[id(w)]}"] += lr[id(w)] * w.grad.double() * (inverse[None, :] if side == "columns"
                                                                                      else inverse[:, None])
    assert mech.sgd.keys() == expected.keys() and mech.steps == 2
    for key, want in expected.items():
        torch.testing.assert_close(mech.sgd[key].double(), want, rtol=1e-5, atol=1e-7, msg=key)
    for site, _, w, side in zeroed:
        total = mech.sgd[f"{site}|{names[id(w)]}"]
        assert not total[:, 0].any() if side == "columns" else not total[0].any()
        assert (total[:, 1] if side == "columns" else total[1]).all()
    assert len({lr[id(w)] for _, _, w, _ in pairs}) > 1  # (the pairs span groups of different LRs)


def test_a_row_reads_the_device_once(monkeypatch):
    """The 12-layer unified model (at width 32, 85 scale vectors): row() reads its values to the
    host in one transfer, with an interval and without: no scalar read (.item(), float() or bool() of a
    tensor: each an aten._local_scalar_dense, counted under a dispatch mode) and one Tensor.tolist (counted
    by a wrapper). The reads this replaced: one .item() per statistic, 4 per scale and 2 per role (344
    here), plus one tolist."""
    model, optimizers = unified_124m("--n_embd=32", "--n_head=2")
    mech = Mechanism(model, optimizers, step=0)
    gen = torch.Generator().manual_seed(0)
    for p in model.parameters():
        p.grad = torch.randn(p.shape, generator=gen)
    mech.record_step()
    for opt in optimizers:
        opt.step()
    tolist, lists = torch.Tensor.tolist, []
    monkeypatch.setattr(torch.Tensor, "tolist", lambda t: lists.append(t.numel()) or tolist(t))
    rows = []
    for step in (0, 1):  # without an interval (it starts at 0), then with one
        with DispatchCount() as count:
            rows.append(mech.row(step))
        assert count.ops[torch.ops.aten._local_scalar_dense.default] == 0
    assert len(lists) == 2
    assert len(list(model.scale_vectors())) == 85
    assert len(rows[0]) == 3 * 85 + 2 * 2 < len(rows[1])  # 3 keys per scale, 2 per role; the interval's keys
    assert rows[1]["since"] == 0 and rows[1]["blocks.0.attn.q.in_scale/move_folded"] > 0
