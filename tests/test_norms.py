"""Each scale-vector variant against a direct computation of its formula (README: The variants),
its init, its role, and folding (claim C2)."""

import itertools
import math
import warnings
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

import model as model_mod
from conftest import BASELINE
from model import ATTN_PLACEMENTS, GPT, MLP_PLACEMENTS, GPTConfig, rope_tables
from norms import SCALE_CLASSES, ERScale, ORScale, PlainScale, RMSNorm, ScaledLinear, make_scale, rms_norm

EPS = 1e-6


def tiny(**kw):
    base = dict(n_layer=2, n_head=2, n_embd=32, d_ff=48, block_size=16, vocab_size=50, **BASELINE)
    return GPTConfig(**{**base, **kw})


def randomize_scales(model, gen):
    """Every scale-vector parameter to a random non-1 value."""
    with torch.no_grad():
        for _, sv in model.scale_vectors():
            for p in sv.parameters():
                p.copy_(0.5 + torch.rand(p.shape, generator=gen))


# --- a reference implementation, written from the formulas, not from the modules ---

def gamma_ref(sv):
    """Effective gamma from the raw parameters; 1 where the scale is absent."""
    if sv is None:
        return 1.0
    if isinstance(sv, PlainScale):
        return sv.weight
    if not isinstance(sv, (ORScale, ERScale)):  # a class a fork adds: its own test checks its formula,
        return sv()                            # here only where the block puts it
    a = sv.direction
    mag = sv.magnitude if isinstance(sv, ORScale) else torch.exp(sv.log_magnitude)
    return mag * math.sqrt(a.numel()) * a / torch.sqrt((a * a).sum())


def rms_ref(x):
    return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + EPS)


def linear_ref(lin, x):
    """u * (W (v x)), or u * normalize(W (v x)) under DNP."""
    y = (x * gamma_ref(lin.in_scale)) @ lin.weight.T
    if lin.out_norm:
        y = rms_ref(y)
    return y * gamma_ref(lin.out_scale)


def rope_ref(x, theta=10000.0):
    """Rotate pair (x[i], x[i + hd/2]) at position t by angle t * theta^(-2i/hd). x: (B, T, nh, hd)."""
    B, T, nh, hd = x.shape
    out = x.clone()
    for t in range(T):
        for i in range(hd // 2):
            ang = t * theta ** (-2 * i / hd)
            c, s = math.cos(ang), math.sin(ang)
            a, b = x[:, t, :, i], x[:, t, :, i + hd // 2]
            out[:, t, :, i], out[:, t, :, i + hd // 2] = a * c - b * s, a * s + b * c
    return out


def block_ref(block, x, cfg):
    B, T, C = x.shape
    nh, n_kv, hd = cfg.n_head, cfg.n_kv_head, cfg.head_dim
    a = block.attn
    h = rms_ref(x) * gamma_ref(block.attn_norm.scale)
    q = linear_ref(a.q, h).view(B, T, nh, hd)
    k, v = (linear_ref(lin, h).view(B, T, n_kv, hd) for lin in (a.k, a.v))
    if cfg.qk_norm:
        q = rms_ref(q) * gamma_ref(a.q_norm.scale)
        k = rms_ref(k) * gamma_ref(a.k_norm.scale)
    q, k = rope_ref(q), rope_ref(k)
    # grouped-query attention: query head i reads key/value head i // (nh / n_kv)
    k, v = (torch.stack([t[:, :, i // (nh // n_kv)] for i in range(nh)], dim=2) for t in (k, v))
    att = torch.einsum("bthd,bshd->bhts", q, k) / math.sqrt(hd)
    att = att.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf")).softmax(-1)
    y = torch.einsum("bhts,bshd->bthd", att, v).reshape(B, T, nh * hd)
    y = linear_ref(a.o, y)
    if cfg.output_norms:
        y = rms_ref(y) * gamma_ref(block.attn_out_norm.scale)
    x = x + y
    m = block.mlp
    h = rms_ref(x) * gamma_ref(block.mlp_norm.scale)
    y = linear_ref(m.down, F.silu(linear_ref(m.gate, h)) * linear_ref(m.up, h))
    if cfg.output_norms:
        y = rms_ref(y) * gamma_ref(block.mlp_out_norm.scale)
    return x + y


REFERENCE_STEP = "docs/forks.md, 'A placement that builds a module', step 3"


def unknown_to_block_ref(block, x, cfg, name="blocks.0"):
    """None, or the one line naming the first module of `block` (the largest: a module built for a fork, not its
    parts) that block's forward calls and block_ref never reads, and the function to extend: a placement that
    builds a module of its own is a correct fork the reference formula does not know yet. Found by recording each
    module the forward calls (forward hooks) and each one block_ref reads (torch.nn.Module.__getattr__, through
    which every submodule and parameter is read); torch's own modules without parameters (Identity, Dropout) are
    the reference's arithmetic."""
    called, read = {}, set()
    def call(name, module):  # (a hook returns None: the output stays as it is)
        return lambda module_, args, out: called.__setitem__(name, module)

    hooks = [m.register_forward_hook(call(n, m)) for n, m in block.named_modules()]
    cos, sin = rope_tables(cfg.block_size, cfg.head_dim, cfg.rope_theta)
    try:
        with torch.no_grad():
            block(x, cos[:x.size(1)], sin[:x.size(1)])
    finally:
        for h in hooks:
            h.remove()
    getattr_ = torch.nn.Module.__getattr__

    def reading(module, attr):
        found = getattr_(module, attr)
        read.add(id(found))
        return found

    torch.nn.Module.__getattr__ = reading
    try:
        with torch.no_grad():
            block_ref(block, x, cfg)
    finally:
        torch.nn.Module.__getattr__ = getattr_
    unknown = [n for n, m in called.items() if n and id(m) not in read
               and (type(m).__module__ != "torch.nn.modules." + type(m).__module__.rsplit(".", 1)[-1]
                    or any(True for _ in m.parameters()))]
    unknown = [n for n in sorted(unknown) if not any(n.startswith(u + ".") for u in unknown)]
    if not unknown:
        return None
    module = block.get_submodule(unknown[0])
    return (f"block_ref does not know {name}.{unknown[0]} ({type(module).__name__}), which {type(block).__name__}'s "
            f"forward calls: extend tests/test_norms.py:block_ref ({REFERENCE_STEP}) with its formula")


def switches():
    """Every scale-vector switch and its values, read from the registries when called (a scale
    class or placement a fork registers is in every combination)."""
    return dict(reparam=list(SCALE_CLASSES), branch_scales=[False, True], attn_placement=list(ATTN_PLACEMENTS),
                mlp_placement=list(MLP_PLACEMENTS), qk_norm=[False, True], output_norms=[False, True])


def all_variants():
    keys = list(switches())
    for values in itertools.product(*switches().values()):
        yield dict(zip(keys, values))
    yield dict(scale="none")
    yield dict(scale="none", qk_norm=True, output_norms=True)


def test_scale_parameterizations_match_their_formulas():
    gen = torch.Generator().manual_seed(0)
    d = 16
    for cls in (PlainScale, ORScale, ERScale):
        sv = cls(d, "input")
        with torch.no_grad():
            for p in sv.parameters():
                p.copy_(torch.randn(p.shape, generator=gen))
        if cls is PlainScale:
            expected = sv.weight
        else:
            a = sv.direction.detach().double()
            mag = sv.magnitude.double() if cls is ORScale else sv.log_magnitude.double().exp()
            expected = mag * (d ** 0.5) * a / a.pow(2).sum().sqrt()
        torch.testing.assert_close(sv().double(), expected.detach().double(), rtol=1e-6, atol=1e-6)


def test_rmsnorm_matches_formula():
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(3, 5, 16, generator=gen)
    norm = RMSNorm(16, EPS, PlainScale(16, "input"))
    with torch.no_grad():
        norm.scale.weight.copy_(torch.rand(16, generator=gen) + 0.5)
    expected = norm.scale.weight * x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + EPS)
    torch.testing.assert_close(norm(x), expected.detach())


@pytest.mark.parametrize("out_norm", [False, True])
def test_scaled_linear_is_its_formula(out_norm):
    """forward() is u * (W (v * x)) (u * normalize(W (v * x)) under out_norm), against the reference."""
    gen = torch.Generator().manual_seed(2)
    lin = ScaledLinear(24, 40, PlainScale(24, "input"), ORScale(40, "input"), out_norm=out_norm, eps=EPS)
    with torch.no_grad():
        lin.weight.normal_(generator=gen)
        for p in itertools.chain(lin.in_scale.parameters(), lin.out_scale.parameters()):
            p.copy_(0.5 + torch.rand(p.shape, generator=gen))
    x = torch.randn(7, 24, generator=gen)
    torch.testing.assert_close(lin(x), linear_ref(lin, x).detach(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("with_weight", [False, True])
def test_rms_norm_is_x_over_its_rms_values_and_gradients(with_weight):
    """norms.rms_norm against x * w / sqrt(mean(x^2) + eps) written out, values and autograd's gradients."""
    gen = torch.Generator().manual_seed(8)
    x = torch.randn(4, 5, 3, 16, generator=gen, requires_grad=True)
    w = (0.5 + torch.rand(16, generator=gen)).requires_grad_() if with_weight else None
    g = torch.randn(4, 5, 3, 16, generator=gen)
    ref = x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + EPS) * (1 if w is None else w)
    ours = rms_norm(x, w, EPS)
    torch.testing.assert_close(ours, ref)
    inputs = [x] + ([w] if w is not None else [])
    torch.testing.assert_close(torch.autograd.grad(ours, inputs, g), torch.autograd.grad(ref, inputs, g))


def test_rms_norm_under_bf16_autocast_computes_in_float32():
    gen = torch.Generator().manual_seed(9)
    x = (10 * torch.randn(8, 64, generator=gen)).bfloat16()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = rms_norm(x, torch.ones(64), EPS)
    assert y.dtype == torch.bfloat16
    torch.testing.assert_close(y.float(), rms_ref(x.float()), rtol=1e-2, atol=1e-2)


# Grouped-query attention with heads wider than n_embd / n_head: 4 query heads of 12 over 2
# key/value heads on a width of 32, so q's scales have 48 entries, k's and v's 24.
GQA = dict(n_head=4, n_kv_head=2, head_dim=12)


def gqa_variants():
    """Every switch that puts a scale or a normalization on q, k, v or o, under GQA."""
    for attn, hg, qk, out, sites in itertools.product(ATTN_PLACEMENTS, [False, True], [False, True], [False, True],
                                                      ["prenorm", "all"]):
        if sites == "all" and not ATTN_PLACEMENTS[attn].scales_output_map():
            continue
        yield dict(GQA, reparam="or", attn_placement=attn, branch_scales=hg, qk_norm=qk, output_norms=out,
                   dual_sites=sites)


def variant_id(v):
    return "-".join(f"{k}={x}" for k, x in v.items())


def block_cases():
    """Every variant at 10 tokens (each branch scales its activations); those without QK-norm and
    output norms (which do not touch the grouped matmuls) also at 128 tokens (one matmul per group);
    the GQA variants at 10 tokens."""
    for v in all_variants():
        yield pytest.param(v, 2, 5, id=variant_id(v) + "-10tok")
        if not v.get("qk_norm") and not v.get("output_norms"):
            yield pytest.param(v, 8, 16, id=variant_id(v) + "-128tok")
    for v in gqa_variants():
        yield pytest.param(v, 2, 5, id=variant_id(v) + "-10tok")


@pytest.mark.parametrize("variant,B,T", list(block_cases()))
def test_block_forward_matches_formula(variant, B, T):
    cfg = tiny(**variant)
    gen = torch.Generator().manual_seed(3)
    model = GPT(cfg, seed=0)
    randomize_scales(model, gen)
    block = model.blocks[0]
    x = torch.randn(B, T, cfg.n_embd, generator=gen)
    cos, sin = model.rope_cos[:T], model.rope_sin[:T]
    if unknown := unknown_to_block_ref(block, x, cfg):  # a fork's module: one failure says it (the test below)
        pytest.skip(unknown)
    with torch.no_grad():
        torch.testing.assert_close(block(x, cos, sin)[0], block_ref(block, x, cfg), rtol=1e-4, atol=1e-4)


def test_block_ref_knows_every_module_a_block_calls():
    """Every module a block's forward calls under every switch is one block_ref reads; a module a fork adds
    (a placement's own) fails here once, naming it and the function to extend, and the formula tests skip."""
    gen = torch.Generator().manual_seed(12)
    for variant in [*all_variants(), *gqa_variants()]:
        cfg = tiny(**variant)
        model = GPT(cfg, seed=0)
        unknown = unknown_to_block_ref(model.blocks[0], torch.randn(1, 3, cfg.n_embd, generator=gen), cfg)
        assert unknown is None, f"{unknown} (under {variant})"


def test_every_scale_is_one_at_init():
    for variant in all_variants():
        model = GPT(tiny(**variant), seed=0)
        for name, sv in model.scale_vectors():
            torch.testing.assert_close(sv(), torch.ones(sv.dim), msg=f"{name} under {variant}")


@pytest.mark.parametrize("reparam", list(SCALE_CLASSES))
def test_reparam_gives_same_forward_as_vector_at_init(reparam):
    idx = torch.randint(0, 50, (2, 16), generator=torch.Generator().manual_seed(4))
    switches = dict(branch_scales=True, attn_placement="dual", mlp_placement="dual_norm",
                    qk_norm=True, output_norms=True)
    plain = GPT(tiny(**switches), seed=7)(idx)[0]
    other = GPT(tiny(reparam=reparam, **switches), seed=7)(idx)[0]
    torch.testing.assert_close(other, plain)


def expected_role(name, tied=True):
    """README, Roles: QK-norm, output norms, DNP's gate outer scale and, while the head is tied,
    the final-norm scale are output; the rest input."""
    output = ("q_norm" in name or "k_norm" in name or "out_norm" in name or name.endswith("mlp.gate.out_scale")
              or (name == "norm_f.scale" and tied))
    return "output" if output else "input"


def test_roles_of_unified_model():
    cfg = tiny(branch_scales=True, attn_placement="dual", mlp_placement="dual_norm", dual_sites="all", reparam="or",
               qk_norm=True, output_norms=True)
    model = GPT(cfg)
    names = [n for n, _ in model.scale_vectors()]
    assert len(names) == 2 * (8 + 6 + 2 + 2) + 1  # per block: attn 8, mlp 6, qk 2, output norms 2; final norm
    for name, sv in model.scale_vectors():
        assert sv.role == expected_role(name), name


@pytest.mark.parametrize("reparam", list(SCALE_CLASSES))
def test_fold_makes_the_tied_final_norm_scale_input_role_and_folds_it(reparam):
    model = GPT(tiny(reparam=reparam), seed=0)
    assert model.norm_f.scale.role == "output"  # tied: it cannot fold, so no decay under IWD
    randomize_scales(model, torch.Generator().manual_seed(3))
    idx = torch.randint(0, 50, (2, 16), generator=torch.Generator().manual_seed(4))
    before = model(idx)[0]
    with pytest.warns(UserWarning, match="untying"):
        model.fold_scales()
    assert model.norm_f.scale.role == "input"
    torch.testing.assert_close(model.norm_f.scale(), torch.ones(32))
    torch.testing.assert_close(model(idx)[0], before, rtol=1e-4, atol=1e-4)


def test_dual_placement_mlp_gate_scale_is_input_role():
    """Under DP (no normalization) u_gate folds into W_gate's rows, so it is input-role."""
    model = GPT(tiny(mlp_placement="dual"))
    assert model.blocks[0].mlp.gate.out_scale.role == "input"


MAGNITUDE_CONFIGS = [  # every site (dual_sites="all"), and the paper's unified with and without QK-/output norms
    dict(branch_scales=True, attn_placement="dual", mlp_placement="dual_norm", qk_norm=True, output_norms=True,
         dual_sites="all"),
    dict(attn_placement="dual", mlp_placement="dual", qk_norm=True, output_norms=True, dual_sites="all"),
    dict(branch_scales=True, attn_placement="dual", mlp_placement="dual_norm", dual_sites="all"),
    dict(branch_scales=True, mlp_placement="dual", output_norms=True, n_experts=3, top_k=2, shared_expert=True,
         dual_sites="all"),
    dict(branch_scales=True, mlp_placement="dual_norm"),
    dict(branch_scales=True, attn_placement="dual", mlp_placement="dual_norm", qk_norm=True, output_norms=True),
]


@pytest.mark.parametrize("variant", MAGNITUDE_CONFIGS, ids=range(len(MAGNITUDE_CONFIGS)))
def test_reparam_applies_exactly_where_the_magnitude_matters(variant, reparam="or"):
    """Under OR (or another class with a magnitude: its magnitude_name), a scale stays a PlainScale
    iff doubling it leaves the logits unchanged: its magnitude is invisible (everything up to the
    next normalization is linear in it)."""
    model = GPT(tiny(reparam=reparam, norm_eps=1e-12, **variant), seed=0).eval()
    gen = torch.Generator().manual_seed(9)
    randomize_scales(model, gen)
    with torch.no_grad():  # large weights, so that attention is far from uniform; small router
        for name, p in model.named_parameters():  # weights, so that every expert gets tokens
            if p.dim() == 2:
                p.normal_(0.0, 0.05 if "router" in name else 0.5, generator=gen)
    idx = torch.randint(0, 50, (2, 16), generator=torch.Generator().manual_seed(10))
    with torch.no_grad():
        before = model(idx, idx)[0]  # every position's logits (without targets, the last one's only)
        for name, sv in model.scale_vectors():
            param = sv.weight if isinstance(sv, PlainScale) else sv.get_parameter(sv.magnitude_name)
            param.mul_(2.0)
            change = (model(idx, idx)[0] - before).abs().max().item()
            param.div_(2.0)
            assert change < 1e-4 or change > 1e-2, (name, change)  # invariant, or clearly not
            assert isinstance(sv, PlainScale) == (change < 1e-4), (name, change)


def test_scale_classes_declare_magnitude_and_untied_role():
    """has_magnitude() comes from magnitude_name; the one table is the config's reparam choices;
    tie_/untie_ change role and keep untied_role."""
    assert all(cls.has_magnitude() == (cls.magnitude_name is not None) for cls in SCALE_CLASSES.values())
    assert {k for k, cls in SCALE_CLASSES.items() if cls.has_magnitude()} >= {"or", "er"}  # the paper's OR and ER
    assert not SCALE_CLASSES["plain"].has_magnitude() and model_mod.CHOICES["reparam"] is SCALE_CLASSES
    sv = ORScale(8, "input")
    assert sv.role == sv.untied_role == "input"
    sv.tie_("output")
    assert (sv.role, sv.untied_role) == ("output", "input") and "untied_role=input" in repr(sv)
    sv.untie_()
    assert sv.role == "input"
    with pytest.raises(ValueError, match="role must be one of"):
        sv.tie_("both")
    with pytest.raises(ValueError, match="reparam='no_such_class' is not one of"):
        make_scale(SimpleNamespace(scale="vector", reparam="no_such_class"), 8, role="input")


def test_make_scale_none():
    cfg = tiny(scale="none")
    assert make_scale(cfg, 8, role="input") is None
    assert GPT(cfg).num_scale_params() == 0


@pytest.mark.parametrize("tie", [True, False])
@pytest.mark.parametrize("variant", list(all_variants()) + list(gqa_variants()), ids=variant_id)
def test_fold_preserves_logits(variant, tie):
    model = GPT(tiny(tie_embeddings=tie, **variant), seed=0)
    randomize_scales(model, torch.Generator().manual_seed(5))
    idx = torch.randint(0, 50, (2, 16), generator=torch.Generator().manual_seed(6))
    before = model(idx)[0]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model.fold_scales()
    after = model(idx)[0]
    torch.testing.assert_close(after, before, rtol=1e-4, atol=1e-4)
    for name, sv in model.scale_vectors():
        if sv.role == "input":
            torch.testing.assert_close(sv(), torch.ones(sv.dim), msg=name)
    has_final_scale = model.norm_f.scale is not None
    assert any("untying" in str(w.message) for w in caught) == (tie and has_final_scale)
    if has_final_scale:
        assert model.lm_head.weight is not model.wte.weight


def test_fold_keeps_output_scales_and_changes_weights():
    cfg = tiny(branch_scales=True, mlp_placement="dual_norm", qk_norm=True, output_norms=True)
    model = GPT(cfg, seed=0)
    randomize_scales(model, torch.Generator().manual_seed(8))
    out_before = {n: sv().clone() for n, sv in model.scale_vectors() if sv.role == "output"}
    w_before = model.blocks[0].attn.q.weight.clone()
    with pytest.warns(UserWarning, match="untying the LM head"):
        model.fold_scales()
    for n, sv in model.scale_vectors():
        if sv.role == "output":
            torch.testing.assert_close(sv(), out_before[n])
    assert not torch.allclose(model.blocks[0].attn.q.weight, w_before)
