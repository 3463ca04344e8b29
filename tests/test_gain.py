"""What `gain` (plumbing/mechanism.py: per input-role site, the folded map's step over the scale-free
gradient step) reads under each optimizer the runs use, with the folded map W~ and its gradients
dL/dW~ held fixed and the site's gamma frozen at a constant: gamma^2 under SGD (paper Theorem 2.2);
under AdamW and Muon gamma times the optimizer's step per unit of scale-free gradient step, so it
grows as gamma (not gamma^2) and falls as the gradients' scale grows (the loss x10 reads gain / 10).
And the per-site-kind figures results/README.md quotes for c3_mechanism_gain, from its records."""

import math
import os
import re
import statistics

import pytest
import torch

from conftest import ROOT
from model import GPT, GPTConfig
from optim import build_optimizers
from plumbing.mechanism import Mechanism
from test_mechanism import BASELINE, READERS, SITE, TINY, far_from_one, opt_cfg

GAMMAS = (0.5, 1.0, 2.0)
STEPS = 3


def folded_gradients(loss_scale):
    """(W~ of SITE's readers, dL/dW~ of each) for the untied baseline with scales far from 1, at one
    batch, the loss times loss_scale: W~ = W gamma (SITE's gamma along the columns),
    dL/dW~ = dL/dW / gamma."""
    model = GPT(GPTConfig(**BASELINE, **TINY, tie_embeddings=False), seed=0)
    far_from_one(model)
    gen = torch.Generator().manual_seed(1)
    x, y = torch.randint(0, 40, (4, 8), generator=gen), torch.randint(0, 40, (4, 8), generator=gen)
    (loss_scale * model(x, y)[1]).backward()
    params, gamma = dict(model.named_parameters()), dict(model.scale_vectors())[SITE]().detach()
    return ({n: params[n].detach() * gamma[None, :] for n in READERS},
            {n: params[n].grad / gamma[None, :] for n in READERS})


def gain_under(optimizer, gamma, loss_scale=1.0):
    """(gain, gamma x ||dW|| / ||sum_t eta dL/dW~||, the matrix group's LR eta) over STEPS steps of
    `optimizer` ("sgd": plain gradient descent taken by hand at the matrix group's LR; "adamw",
    "muon": the run's optimizers, no weight decay) on SITE's readers alone, W set to W~ / gamma with
    SITE's gamma constant, so the folded map and its gradients are the same at every gamma: each
    step the readers' gradient is gamma dL/dW~ (the chain rule through W~ = W gamma) and every
    other parameter has none (it does not move)."""
    folded, g_folded = folded_gradients(loss_scale)
    model = GPT(GPTConfig(**BASELINE, **TINY, tie_embeddings=False), seed=0)
    far_from_one(model)
    params = dict(model.named_parameters())
    with torch.no_grad():
        dict(model.scale_vectors())[SITE].set_(torch.full((TINY["n_embd"],), gamma))
        for n in READERS:
            params[n].copy_(folded[n] / gamma)
    start = {n: params[n].detach().clone() for n in READERS}
    optimizers, _ = build_optimizers(model, opt_cfg(optimizer="adamw" if optimizer == "sgd" else optimizer,
                                                    weight_decay=0.0), "cpu")
    lr = next(g["lr"] for opt in optimizers for g in opt.param_groups if g["name"] == "matrix")
    mech = Mechanism(model, optimizers, step=0)
    for _ in range(STEPS):
        for p in model.parameters():
            p.grad = None
        for n in READERS:
            params[n].grad = gamma * g_folded[n]
        mech.record_step()
        if optimizer == "sgd":
            with torch.no_grad():
                for n in READERS:
                    params[n] -= lr * params[n].grad
        else:
            for opt in optimizers:
                opt.step()
    moved = math.sqrt(sum((params[n].detach().double() - start[n].double()).square().sum().item() for n in READERS))
    scale_free = STEPS * lr * math.sqrt(sum(g_folded[n].double().square().sum().item() for n in READERS))
    return mech.row(STEPS)[f"{SITE}/gain"], gamma * moved / scale_free, lr


@pytest.mark.parametrize("gamma", GAMMAS)
def test_under_sgd_gain_is_gamma_squared_whatever_the_losss_scale(gamma):
    """The folded step is -eta gamma^2 dL/dW~ (Theorem 2.2 with gamma frozen): gain reads gamma^2
    (0.25, 1, 4), and the same with the loss x10 (both steps scale alike)."""
    gain, by_hand, _ = gain_under("sgd", gamma)
    assert gain == pytest.approx(gamma ** 2, rel=1e-3) and by_hand == pytest.approx(gamma ** 2, rel=1e-3)
    assert gain_under("sgd", gamma, loss_scale=10.0)[0] == pytest.approx(gain, rel=1e-3)


@pytest.mark.parametrize("gamma", GAMMAS)
def test_under_adamw_gain_is_gamma_times_adams_step_per_unit_of_gradient(gamma):
    """With one gradient held fixed, AdamW's bias-corrected step on W is lr g / (|g| + eps) per entry
    at every step (m_hat = g, v_hat = g^2), g = gamma dL/dW~: about lr per entry whatever gamma, so
    gain = gamma ||g / (|g| + eps)|| / ||dL/dW~||, here from the formula, and the logged value equals
    gamma ||dW|| / ||sum eta dL/dW~|| read from the weights."""
    folded, g_folded = folded_gradients(1.0)
    gain, by_hand, _ = gain_under("adamw", gamma)
    g = torch.cat([(gamma * g_folded[n]).double().flatten() for n in READERS])
    adam = (g / (g.abs() + 1e-8)).norm().item()
    want = gamma * adam / math.sqrt(sum(g_folded[n].double().square().sum().item() for n in READERS))
    assert gain == pytest.approx(want, rel=1e-4) and gain == pytest.approx(by_hand, rel=1e-4)


@pytest.mark.parametrize("optimizer", ["adamw", "muon"])
def test_under_adamw_and_muon_gain_grows_as_gamma_not_its_square_and_falls_as_the_losss_scale(optimizer):
    """Adam's step and Muon's (Newton-Schulz normalizes the update first) do not grow with the
    gradient's scale, and a constant gamma only scales the readers' gradient: at gamma 0.5, 1, 2 gain
    reads 0.5, 1, 2 times its value at 1 (Theorem 2.2's gamma^2 would read 0.25, 1, 4: false here), and
    with the loss x10 a tenth of it (under SGD it is unchanged: test above). So under these
    optimizers gain cannot compare sites or variants whose gradients differ in scale."""
    at = {gamma: gain_under(optimizer, gamma) for gamma in GAMMAS}
    one = at[1.0][0]
    for gamma, (gain, by_hand, _) in at.items():
        assert gain == pytest.approx(gamma * one, rel=1e-3), (gamma, gain, one)
        assert gain == pytest.approx(by_hand, rel=1e-4)
    assert abs(at[2.0][0] / one - 4.0) > 1.0  # the gamma^2 reading is false under this optimizer
    assert gain_under(optimizer, 1.0, loss_scale=10.0)[0] == pytest.approx(one / 10, rel=1e-3)


def test_under_muon_the_steps_size_is_its_lr_not_the_gradients():
    """Muon's step on each reader (gate and up: 32 x 16, lr x sqrt(32 / 16) of an orthogonalized
    update whose singular values Newton-Schulz puts near 1) has a Frobenius norm within a factor of
    2 of lr sqrt(2) sqrt(16) per step, the same direction each step (the gradient is held): stacked,
    gain is about gamma sqrt(2) sqrt(2 x 16) / ||dL/dW~|| at gamma 1, which is no reading of gamma^2 = 1:
    it is the optimizer's step over the gradient's size."""
    _, g_folded = folded_gradients(1.0)
    grad_norm = math.sqrt(sum(g_folded[n].double().square().sum().item() for n in READERS))
    gain, _, _ = gain_under("muon", 1.0)
    rough = math.sqrt(2) * math.sqrt(len(READERS) * 16) / grad_norm
    assert rough / 2 < gain < 2 * rough
    assert gain > 10  # the gradients of a tiny model are small: no reading of gamma^2 = 1 here


# --- c3_mechanism_gain's sites: how unified's per-branch sites pool against norm_only's one ---

def kind_gains(record):
    """{site kind: the mean over blocks of <site>/gain's mean over the run's intervals} of a record."""
    kinds = {}
    for key, value in record["mechanism"]["mean"].items():
        if key.endswith("/gain") and value is not None:
            kinds.setdefault(re.sub(r"^blocks\.\d+\.", "", key[:-len("/gain")]), []).append(value)
    return {k: statistics.fmean(v) for k, v in kinds.items()}


ROLES = {"attention": (("attn.q.in_scale", "attn.k.in_scale", "attn.v.in_scale"), ("attn_norm.scale",)),
         "mlp_input": (("mlp.gate.in_scale", "mlp.up.in_scale"), ("mlp_norm.scale",))}


def c3_site_figures():
    """Per width of c3_mechanism_gain, over its 6 seeds: each arm's mean of its site kinds' gains (the
    registered scalar, stats.mechanism_scalar), the relative difference per role (unified's branches
    averaged within the role), DNP's u (mlp.up.out_scale, no counterpart in norm_only), and the
    difference of a role-matched scalar (per role, the mean of its kinds; DNP's u left out)."""
    from research.records import load_records
    from research.stats import mechanism_scalar
    records = load_records(os.path.join(ROOT, "results"))
    out = {}
    for width in ("w32", "w64"):
        arms = {arm: {r["seed"]: r for r in records.values()
                      if (r["variant"], r["setting"]) == (arm, width) and 31 <= r["seed"] <= 36}
                for arm in ("unified_nowd", "norm_only")}
        assert sorted(arms["unified_nowd"]) == sorted(arms["norm_only"]) == [31, 32, 33, 34, 35, 36], width
        kinds = {arm: [kind_gains(r) for _, r in sorted(rs.items())] for arm, rs in arms.items()}
        role = {arm: {name: statistics.fmean(statistics.fmean(k[s] for s in sites[i]) for k in kinds[arm])
                      for name, sites in ROLES.items()} for i, arm in enumerate(("unified_nowd", "norm_only"))}
        scalar = {arm: statistics.fmean(mechanism_scalar(r, "gain") for r in rs.values()) for arm, rs in arms.items()}
        matched = {arm: statistics.fmean(role[arm].values()) for arm in role}
        out[width] = dict(
            registered=scalar["unified_nowd"] - scalar["norm_only"],
            reference=scalar["norm_only"],
            role={name: role["unified_nowd"][name] / role["norm_only"][name] - 1 for name in ROLES},
            dnp_u=statistics.fmean(k["mlp.up.out_scale"] for k in kinds["unified_nowd"]),
            matched=matched["unified_nowd"] - matched["norm_only"],
            rms={site: statistics.fmean(math.sqrt(v) for r in arms[arm].values()
                                        for k, v in r["mechanism"]["final"].items()
                                        if k.endswith(f".{site}/g2_mean"))
                 for arm, site in (("unified_nowd", "attn.q.in_scale"), ("unified_nowd", "attn.k.in_scale"),
                                   ("norm_only", "attn_norm.scale"))})
    return out


def test_the_c3_site_pooling_figures_results_readme_quotes_are_the_records():
    """results/README.md states, per width, the registered difference, norm_only's mean gain, the
    attention and MLP-input roles' relative differences, DNP's u, the role-matched difference and the
    final root mean square of the q, k and attn_norm gammas (the mean over seeds and blocks):
    each is what c3_site_figures computes from the committed records, to the digits quoted. The
    registered difference is also the one assets/c3_mechanism_gain.md's table gives (the
    aggregation here is the registered one)."""
    figures = c3_site_figures()
    with open(os.path.join(ROOT, "results", "README.md")) as f:
        text = re.sub(r"\s+", " ", f.read())
    with open(os.path.join(ROOT, "assets", "c3_mechanism_gain.md")) as f:
        table = f.read()
    for width, fig in figures.items():
        assert f"`{width}`: unified_nowd - norm_only {fig['registered']:+.4f} [" in table
    w32, w64 = figures["w32"], figures["w64"]
    said = (f"attention sites (unified's q, k and v against norm_only's attn_norm) "
            f"{100 * w32['role']['attention']:+.0f}% and {100 * w64['role']['attention']:+.0f}%, "
            f"MLP-input sites (gate and up against mlp_norm) {100 * w32['role']['mlp_input']:+.0f}% and "
            f"{100 * w64['role']['mlp_input']:+.0f}%")
    assert said in text, said
    assert f"DNP's u (into W_down, which norm_only lacks) reads {w32['dnp_u']:,.0f} and {w64['dnp_u']:,.0f}" in text
    assert (f"role-matched (each role the mean of its sites, DNP's u left out) the difference is "
            f"{w32['matched']:+.0f} and {w64['matched']:+.0f}, not {w32['registered']:+.0f} and "
            f"{w64['registered']:+.0f}") in text
    assert f"({w64['reference']:,.0f} and {w32['reference']:,.0f})" in text
    q32, k32, n32, q64, k64, n64 = (f"{fig['rms'][s]:.2f}" for fig in (w32, w64)
                                    for s in ("attn.q.in_scale", "attn.k.in_scale", "attn_norm.scale"))
    assert q32 == k32 and q64 == k64  # (one figure is quoted for both)
    assert (f"HG's q and k gammas end larger (root mean square {q32} against attn_norm's {n32} at width 32, "
            f"{q64} against {n64} at width 64)") in text
