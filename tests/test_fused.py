"""The fast paths (plumbing/fused.py) compute the formulas' maps: for every entry of every model registry
(scale classes, placements, MoE), a model with the fast paths swapped in gives the formula model's logits
and every gradient, eager and compiled, float32 and bf16; what they do not cover stays on its formula; and
a step of train.py runs the formulas under --fused=False and the fast paths by default."""

import copy
import itertools
import sys
from dataclasses import dataclass

import pytest
import torch
import torch.nn.functional as F

import model
import norms
from configurator import load_config
from model import ATTN_PLACEMENTS, GPT, MLP_PLACEMENTS, Placement
from norms import SCALE_CLASSES, ScaledLinear
from plumbing import fused
from test_norms import randomize_scales, tiny
from test_train import make_dataset, tiny_args
from train import train

DEVICE_PATHS = ("cpu", "cuda")  # the fast paths of each device type, both run here on CPU tensors


def registry_cases():
    """{id: GPTConfig overrides}: each scale class under HG and both dual placements, each placement alone
    and with every switch that changes its sites, MoE with each MLP placement, and no scales at all. Read
    from the registries at collection, so a fork's entry joins without an edit here."""
    cases = {f"reparam={r}": dict(reparam=r, branch_scales=True, attn_placement="dual", mlp_placement="dual_norm")
             for r in SCALE_CLASSES}
    for key, registry in (("attn_placement", ATTN_PLACEMENTS), ("mlp_placement", MLP_PLACEMENTS)):
        for name in registry:
            cases[f"{key}={name}"] = {key: name}
            cases[f"{key}={name},hg,qk,out,all"] = dict(reparam="or", branch_scales=True, qk_norm=True,
                                                         output_norms=True, dual_sites="all", **{key: name})
    for name in MLP_PLACEMENTS:
        cases[f"moe,mlp_placement={name}"] = dict(n_experts=4, top_k=2, shared_expert=True, branch_scales=True,
                                                  reparam="or", mlp_placement=name)
    cases["scale=none"] = dict(scale="none")
    cases["untied"] = dict(tie_embeddings=False, reparam="or", branch_scales=True, mlp_placement="dual_norm")
    cases["gqa"] = dict(n_head=4, n_kv_head=2, branch_scales=True, attn_placement="dual", qk_norm=True)
    return cases


CASES = registry_cases()


def pair(overrides, device_type, seed=0):
    """(formula model, the same weights with the fast paths), every scale at a random value (at gamma = 1
    scaling the activations or the weight would agree trivially)."""
    formula = GPT(tiny(**overrides), seed=3)
    randomize_scales(formula, torch.Generator().manual_seed(seed))
    return formula, fused.use(copy.deepcopy(formula), device_type)


def logits_and_grads(m, idx, dtype=None, compiled=None):
    """[loss, logits, every parameter's gradient] of one forward and backward, the targets idx with its first
    positions ignored (-1) and the objective halved (as gradient accumulation divides it: a head that computes
    its gradients in the forward must still follow the gradient it is given); the logits from a forward
    without gradients (the fast head returns none while gradients are taken). compiled: torch.compile's
    backend ("inductor", or "aot_eager": AOTAutograd's graphs and partitioner, which decide what a compiled
    step keeps and recomputes, without generating kernels), None for eager."""
    run = torch.compile(m, backend=compiled, dynamic=False) if compiled else m
    targets = idx.clone()
    targets[0, :3] = -1
    with torch.autocast("cpu", dtype=dtype, enabled=dtype is not None):
        _, loss, aux = run(idx, targets)
        objective = 0.5 * (loss + m.aux_objective(aux))
        with torch.no_grad():
            logits = m(idx, targets)[0]
    grads = torch.autograd.grad(objective, [p for p in m.parameters()], allow_unused=True)
    return [loss.detach().float(), logits.float()] + [g if g is not None else torch.zeros_like(p)
                                                      for g, p in zip(grads, m.parameters())]


def mismatches(got, ref, rtol):
    """Names of the tensors (loss, logits, then each parameter's gradient) where ||got - ref|| > rtol * ||ref||
    (plus a floor for a magnitude-free scale's gradient, which is ~0 in exact arithmetic)."""
    floor = rtol * max(r.norm().item() for r in ref[2:])
    names = ["loss", "logits"] + [n for n, _ in MODEL_NAMES]
    return [name for name, a, b in zip(names, got, ref)
            if (a.double() - b.double()).norm().item() > rtol * b.double().norm().item() + 1e-3 * floor]


MODEL_NAMES = []


def check_parity(overrides, device_type, rtol=1e-5, compiled=None):
    formula, fast = pair(overrides, device_type)
    MODEL_NAMES[:] = list(formula.named_parameters())
    idx = torch.randint(0, 50, (2, 16), generator=torch.Generator().manual_seed(1))
    return mismatches(logits_and_grads(fast, idx, compiled=compiled), logits_and_grads(formula, idx), rtol)


@pytest.mark.parametrize("device_type", DEVICE_PATHS)
@pytest.mark.parametrize("overrides", list(CASES.values()), ids=list(CASES))
def test_the_fast_model_gives_the_formula_models_logits_and_every_gradient(overrides, device_type):
    assert check_parity(overrides, device_type) == []


@pytest.mark.slow
@pytest.mark.parametrize("overrides", list(CASES.values()), ids=list(CASES))
def test_the_compiled_fast_model_gives_the_formula_models_logits_and_every_gradient(overrides):
    """Every registry case through torch.compile's AOTAutograd (its graphs, functionalization, the
    checkpoint region and the partitioner: what a compiled step keeps and recomputes), on the fast
    paths a GPU runs (the CPU's compiled path: INDUCTOR below, and the sweeps)."""
    torch._dynamo.reset()
    assert check_parity(overrides, "cuda", rtol=2e-5, compiled="aot_eager") == []


# the default run's variant, then each MLP placement: the entries whose fast paths differ most
INDUCTOR = {"unified": dict(branch_scales=True, mlp_placement="dual_norm", reparam="or"),
            **{f"mlp_placement={m}": dict(mlp_placement=m, branch_scales=True) for m in MLP_PLACEMENTS}}


@pytest.mark.parametrize("device_type", DEVICE_PATHS)
def test_the_unified_fast_model_through_compiles_graphs_gives_the_formulas_map(device_type):
    torch._dynamo.reset()
    assert check_parity(INDUCTOR["unified"], device_type, rtol=2e-5, compiled="aot_eager") == []


@pytest.mark.slow
@pytest.mark.parametrize("device_type", DEVICE_PATHS)
@pytest.mark.parametrize("overrides", list(INDUCTOR.values()), ids=list(INDUCTOR))
def test_the_inductor_compiled_fast_model_gives_the_formulas_map(overrides, device_type):
    """Inductor's generated kernels too, as training compiles them (the sweeps' CPU path, a GPU's path)."""
    torch._dynamo.reset()
    assert check_parity(overrides, device_type, rtol=2e-5, compiled="inductor") == []


def relative(a, b):
    return ((a.double() - b.double()).norm() / b.double().norm()).item()


@pytest.mark.parametrize("name", ["baseline", "unified", "dp_all", "moe_dnp", "untied"])
def test_in_bf16_the_fast_model_stays_within_the_formulas_own_bf16_error(name):
    """Under bf16 autocast (the matmuls in bf16, as in training on a GPU) the fast model is as far from
    the float32 formula as the bf16 formula is: the loss, the logits, and all gradients together within 1.5x its
    error plus 1e-3, each gradient within 3x plus 1e-2 (a one-element magnitude's gradient is noisy)."""
    overrides = {"baseline": {}, "unified": dict(branch_scales=True, mlp_placement="dual_norm", reparam="or"),
                 "dp_all": dict(branch_scales=True, attn_placement="dual", mlp_placement="dual", dual_sites="all"),
                 "moe_dnp": dict(n_experts=4, top_k=2, branch_scales=True, mlp_placement="dual_norm"),
                 "untied": dict(tie_embeddings=False, branch_scales=True, mlp_placement="dual_norm")}[name]
    formula, fast = pair(overrides, "cuda")
    idx = torch.randint(0, 50, (2, 16), generator=torch.Generator().manual_seed(1))
    exact = logits_and_grads(formula, idx)
    ours, theirs = logits_and_grads(fast, idx, torch.bfloat16), logits_and_grads(formula, idx, torch.bfloat16)
    pooled = [torch.cat([t.flatten() for t in ts[2:]]) for ts in (ours, theirs, exact)]
    for a, b, r in [(ours[0], theirs[0], exact[0]), (ours[1], theirs[1], exact[1]), pooled]:
        assert relative(a, r) <= 1.5 * relative(b, r) + 1e-3, (relative(a, r), relative(b, r))
    for i, (a, b, r) in enumerate(zip(ours, theirs, exact)):
        if r.norm() > 0:
            assert relative(a, r) <= 3 * relative(b, r) + 1e-2, (i, relative(a, r), relative(b, r))


# --- what the fast paths do not cover runs its formula, and the parity check responds ---


@dataclass(frozen=True)
class UpNormPlacement(Placement):  # docs/forks.md's BranchNormPlacement: only the up branch normalized
    norm_branches: tuple = ("up",)

    def normalizes(self, branch):
        return branch in self.norm_branches


def test_a_placement_the_fast_paths_do_not_cover_runs_its_formula_and_start_says_so(monkeypatch):
    monkeypatch.setitem(MLP_PLACEMENTS, "dp_up_norm", UpNormPlacement(dual=True, norm=False, meaning="DP, up normalized"))
    formula, fast = pair(dict(mlp_placement="dp_up_norm", branch_scales=True), "cuda")
    assert all(type(b.mlp) is model.MLP for b in fast.blocks)  # MLP.forward, as written, over fused linears
    assert all(type(b.mlp.up) is fused.FusedLinear for b in fast.blocks)
    line = fused.summary(fast)
    assert "on their formulas" in line and "blocks.0.mlp" in line and "blocks.1.mlp" in line and "\n" not in line
    assert check_parity(dict(mlp_placement="dp_up_norm", branch_scales=True), "cuda") == []


def test_a_subclass_of_a_module_keeps_its_own_forward():
    """A fork's subclass of MLP (its own forward) is not replaced: only the exact classes are, and the
    start line names it."""
    class MyMLP(model.MLP):
        pass

    m = GPT(tiny(mlp_placement="dual_norm"))
    m.blocks[0].mlp.__class__ = MyMLP
    fused.use(m, "cuda")
    assert type(m.blocks[0].mlp) is MyMLP and type(m.blocks[1].mlp) is fused.FusedMLP
    assert "on their formulas (not covered by the fast paths): blocks.0.mlp" in fused.summary(m)


@pytest.mark.parametrize("planted", ["dnp_drops_u", "attention_drops_v_scale", "head_keeps_padding"])
def test_the_parity_check_fails_on_a_fast_path_that_computes_another_map(monkeypatch, planted):
    """The instrument responds: a fast path that forgets DNP's outer scales, or HG's scale on v, or a head
    whose softmax runs over the padded vocab entries too, is found by the same comparison that passes above."""
    if planted == "head_keeps_padding":
        real = fused.FusedGPT.logits_and_loss

        def padded(self, x, targets):  # the loss over all padded_vocab_size logits
            if not torch.is_grad_enabled():
                return real(self, x, targets)
            return None, F.linear_cross_entropy(x.flatten(0, 1), self.lm_head.weight, targets.flatten(), ignore_index=-1)
        monkeypatch.setattr(fused.FusedGPT, "logits_and_loss", padded)
        overrides = {}
    elif planted == "dnp_drops_u":
        def without_u(y_gate, y_up, u_gate, u_up, eps, norm):
            return F.silu(norm(y_gate, eps)) * norm(y_up, eps)
        monkeypatch.setattr(fused, "swiglu", without_u)
        overrides = dict(mlp_placement="dual_norm")
    else:  # a linear on its raw weight: HG's gamma_v (every input scale) left out
        monkeypatch.setattr(fused.FusedLinear, "forward", lambda self, x: F.linear(x, self.weight))
        overrides = dict(branch_scales=True)
    assert check_parity(overrides, "cuda") != []


# --- the fast paths' own pieces ---


def test_the_closed_form_rms_norm_backward_is_the_derivative_and_refuses_a_second():
    gen = torch.Generator().manual_seed(8)
    x = torch.randn(3, 4, 16, dtype=torch.float64, generator=gen, requires_grad=True)
    w = (0.5 + torch.rand(16, dtype=torch.float64, generator=gen)).requires_grad_()
    assert torch.autograd.gradcheck(lambda x, w: fused._RMSNormClosedForm.apply(x, w, 1e-6), (x, w))
    assert torch.autograd.gradcheck(lambda x: fused._RMSNormClosedForm.apply(x, None, 1e-6), (x,))
    with pytest.raises(RuntimeError):
        y = fused._RMSNormClosedForm.apply(x, w, 1e-6)
        torch.autograd.grad(torch.autograd.grad(y.square().sum(), x, create_graph=True)[0].sum(), x)


@pytest.mark.parametrize("placement", ["dual_norm", "in"])
@pytest.mark.parametrize("device_type", DEVICE_PATHS)
def test_an_expert_with_no_tokens_gives_zero_gradients(device_type, placement):
    """An MoE expert is called on zero tokens (so DDP sees every parameter used): an empty output,
    zero gradients for its W and u, under the recompute too (DNP's and the baseline's)."""
    mlp = fused.use(model.MLP(tiny(mlp_placement=placement, branch_scales=True), 16), device_type)
    assert type(mlp) is fused.FusedMLP
    for p in mlp.parameters():
        torch.nn.init.normal_(p) if p.dim() == 2 else None
    h = mlp(torch.zeros(0, 32))
    assert h.shape == (0, 32)
    h.sum().backward()
    assert all(p.grad is not None and not p.grad.any() for p in mlp.parameters())


@pytest.mark.parametrize("device_type", DEVICE_PATHS)
def test_the_head_computes_the_loss_without_logits_under_gradients_and_gives_them_without(device_type):
    """The chunked head runs where it pays (logits wider than n_embd): under gradients the fast model
    returns the formula's loss and no logits (none were made); without gradients (evals, sampling) the
    formula's logits; where the vocabulary is no wider than n_embd the formula runs whole."""
    formula, fast = pair(dict(branch_scales=True), device_type)
    idx = torch.randint(0, 50, (2, 16), generator=torch.Generator().manual_seed(1))
    logits, loss, _ = fast(idx, idx)
    assert logits is None and torch.allclose(loss, formula(idx, idx)[1], rtol=1e-6)
    with torch.no_grad():
        torch.testing.assert_close(fast(idx, idx)[0], formula(idx, idx)[0], rtol=1e-5, atol=1e-6)
    narrow = fused.use(GPT(tiny(vocab_size=30, n_embd=64, n_head=2)), device_type)  # 64 padded entries, 64 wide
    assert not fused.chunked_head(30, 64) and narrow(idx.clamp(max=29), idx.clamp(max=29))[0] is not None


def test_formulas_puts_every_module_back_on_its_formula():
    m = fused.use(GPT(tiny(mlp_placement="dual_norm", branch_scales=True)), "cpu")
    assert any(type(x) in fused.FAST for x in m.modules())
    fused.formulas(m)
    assert not any(type(x) in fused.FAST for x in m.modules())
    assert fused.summary(m).startswith("fast paths off")


# --- the reading path runs in a step of train.py ---


def traced_step(tmp_path, *extra):
    """{(file name, function name)} of every Python function one step of train.py calls, {(id, file,
    function)} of each ScaleVector whose forward ran and what called it, and the run's model."""
    calls, scales = set(), set()

    def profile(frame, event, arg):
        if event == "call":
            code = frame.f_code
            calls.add((code.co_filename.rsplit("/", 1)[-1], code.co_name))
            if code.co_name == "forward" and isinstance(frame.f_locals.get("self"), norms.ScaleVector):
                caller = frame.f_back
                while "/torch/" in caller.f_code.co_filename:  # past nn.Module's __call__
                    caller = caller.f_back
                scales.add((id(frame.f_locals["self"]), caller.f_code.co_filename.rsplit("/", 1)[-1], caller.f_code.co_name))

    args = tiny_args(make_dataset(tmp_path / "ds"), tmp_path / "out", "--max_iters=1", "--eval_interval=0",
                     "--branch_scales=True", "--mlp_placement=dual_norm", "--reparam=or", "--attn_placement=dual",
                     "--qk_norm=True", *extra)
    cfg, given = load_config(args)
    sys.setprofile(profile)
    try:
        result = train(cfg, given)
    finally:
        sys.setprofile(None)
    return calls, scales, result["model"]


def test_a_step_under_fused_false_runs_the_formulas_at_every_scale_site_and_the_default_names_the_fast_paths(tmp_path):
    calls, scales, m = traced_step(tmp_path / "formulas", "--fused=False")
    assert {("norms.py", "forward"), ("model.py", "forward"), ("norms.py", "scaled"), ("norms.py", "rms_norm"),
            ("model.py", "apply_rope")} <= calls
    assert {c for c in calls if c[0] == "fused.py"} <= {("fused.py", "summary"), ("fused.py", "<genexpr>")}  # its line only
    formulas = {("norms.py", "scaled"), ("norms.py", "forward")}  # ScaledLinear's and RMSNorm's forward
    assert {id(sv) for _, sv in m.scale_vectors()} <= {sid for sid, f, fn in scales if (f, fn) in formulas}
    assert all(type(x) in (norms.ScaledLinear, model.Attention, model.MLP, norms.RMSNorm)
               for x in m.modules() if isinstance(x, (norms.ScaledLinear, model.Attention, model.MLP, norms.RMSNorm)))
    calls, scales, m = traced_step(tmp_path / "fast")
    assert {("fused.py", "forward"), ("fused.py", "swiglu")} <= calls
    assert {id(sv) for _, sv in m.scale_vectors()} <= {sid for sid, _, _ in scales}
    assert not {id(sv) for _, sv in m.scale_vectors()} <= {sid for sid, f, fn in scales if (f, fn) in formulas}


def test_the_reading_files_register_no_op_and_stay_under_their_caps():
    """norms.py, model.py, optim.py and train.py hold formulas: no op registration, fake, autograd
    registration or compile gate; and room under their size caps (a fork's entry fits)."""
    import ast
    import os
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for name in ("norms.py", "model.py", "optim.py", "train.py"):
        text = open(os.path.join(root, name)).read()
        for word in ("torch.library", "register_fake", "register_autograd", "custom_op", "is_compiling"):
            assert word not in text, f"{name} holds {word}: a fast path belongs in plumbing/fused.py"
    lines = {name: sum(1 for _ in open(os.path.join(root, name))) for name in ("norms.py", "model.py")}
    assert lines["norms.py"] <= 540 and lines["model.py"] <= 720, lines
    tree = ast.parse(open(os.path.join(root, "train.py")).read())
    fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "train")
    assert fn.end_lineno - fn.lineno + 1 <= 72


def test_no_scaled_linear_calls_the_fast_path_itself():
    """The formula modules never reach into plumbing/: ScaledLinear's forward is u * (W (v * x)) as written
    (checked against a hand computation with random scales)."""
    gen = torch.Generator().manual_seed(2)
    for out_norm in (False, True):
        lin = ScaledLinear(8, 12, norms.PlainScale(8, "input"), norms.ORScale(12, "input"), out_norm=out_norm, eps=1e-6)
        with torch.no_grad():
            lin.weight.normal_(generator=gen)
            for p in itertools.chain(lin.in_scale.parameters(), lin.out_scale.parameters()):
                p.copy_(0.5 + torch.rand(p.shape, generator=gen))
        x = torch.randn(5, 8, generator=gen)
        y = (x * lin.in_scale()) @ lin.weight.T
        if out_norm:
            y = y / torch.sqrt(y.pow(2).mean(-1, keepdim=True) + 1e-6)
        torch.testing.assert_close(lin(x), (y * lin.out_scale()).detach(), rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(fused.use(copy.deepcopy(lin), "cuda")(x), lin(x), rtol=1e-5, atol=1e-6)
