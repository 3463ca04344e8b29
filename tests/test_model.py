"""The GPT as a language model: loss at init, learning, parameter accounting, config errors."""

import math

import pytest
import torch

from conftest import BASELINE
from model import GPT, GPTConfig, baseline_of
from plumbing.ops import param_report

GPT2_SMALL = dict(n_layer=12, n_head=12, n_embd=768, block_size=1024, vocab_size=50257)


def config(**kw):
    """A model config from the baseline's scale vectors (GPTConfig's defaults are the unified run's)."""
    return GPTConfig(**{**BASELINE, **kw})


UNIFIED = dict(branch_scales=True, attn_placement="in", mlp_placement="dual_norm", reparam="or")  # the paper's
UNIFIED_DP_ALL = dict(branch_scales=True, attn_placement="dual", mlp_placement="dual_norm", dual_sites="all",
                      reparam="or")  # the project's earlier definition


@pytest.mark.parametrize("variant", [dict(), UNIFIED, dict(scale="none")], ids=["baseline", "unified", "none"])
def test_loss_at_init_is_about_ln_vocab(variant):
    """At init the logits are nearly uniform: loss ~ ln(V) + 0.5 * 0.02^2 * d."""
    V = 500
    cfg = config(n_layer=2, n_head=4, n_embd=256, block_size=64, vocab_size=V, **variant)
    gen = torch.Generator().manual_seed(0)
    idx = torch.randint(0, V, (8, 64), generator=gen)
    targets = torch.randint(0, V, (8, 64), generator=gen)
    with torch.no_grad():
        loss = GPT(cfg, seed=0)(idx, targets)[1].item()
    assert abs(loss - math.log(V)) < 0.1, loss


@pytest.mark.parametrize("variant", [dict(), UNIFIED], ids=["baseline", "unified"])
def test_tiny_model_overfits_one_batch(variant):
    cfg = config(n_layer=2, n_head=2, n_embd=32, block_size=16, vocab_size=30, **variant)
    model = GPT(cfg, seed=0)
    gen = torch.Generator().manual_seed(1)
    x = torch.randint(0, 30, (4, 16), generator=gen)
    y = torch.randint(0, 30, (4, 16), generator=gen)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    first = None
    for _ in range(150):
        loss = model(x, y)[1]
        first = first if first is not None else loss.item()
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert first > 3.0 and loss.item() < 0.1, (first, loss.item())


def test_vocab_is_padded_and_logits_are_cut():
    model = GPT(config(n_layer=1, n_head=2, n_embd=32, block_size=8, vocab_size=65))
    assert model.wte.weight.shape[0] == 128
    logits = model(torch.zeros(1, 8, dtype=torch.long), torch.zeros(1, 8, dtype=torch.long))[0]
    assert logits.shape == (1, 8, 65)


def test_unified_extra_parameters_at_124m_match_the_site_count():
    """The paper's unified (HG + DNP on gate/up + OR): per block HG +3d, DNP's outer scales
    +2 d_ff, OR +1 per scale it reparameterizes; about 6e-4 of the model."""
    cfg = config(**GPT2_SMALL, **UNIFIED)
    with torch.device("meta"):
        unified, base = GPT(cfg), GPT(baseline_of(cfg))
    d, f, L = cfg.n_embd, cfg.d_ff, cfg.n_layer
    # OR scales per block: q/k/v in, gate/up out = 5 (gate/up in-scales are followed by DNP's
    # normalization and stay plain); plus the final norm
    expected = L * (3 * d + 2 * f + 5) + 1
    extra = unified.num_params() - base.num_params()
    assert extra == expected == 76_861
    assert 5e-4 < extra / unified.num_params() < 7e-4
    assert f"{extra:+,}" in param_report(unified)


def test_the_earlier_unified_extra_parameters_at_124m_match_the_site_count():
    """The earlier definition (DP on attention, dual_sites="all"): per block HG +3d, DP attention
    +5d (u on q, k, v; v and u around W_o), DNP +2 d_ff + (d_ff + d around W_down), OR +12."""
    cfg = config(**GPT2_SMALL, **UNIFIED_DP_ALL)
    with torch.device("meta"):
        unified, base = GPT(cfg), GPT(baseline_of(cfg))
    d, f, L = cfg.n_embd, cfg.d_ff, cfg.n_layer
    # OR scales per block: q/k/v in and out, o in and out, gate/up out, down in and out = 12
    expected = L * (3 * d + 5 * d + 3 * f + d + 12) + 1
    assert unified.num_params() - base.num_params() == expected == 156_817


@pytest.mark.parametrize("sites", ["prenorm", "all"])
def test_dual_sites_put_the_extra_scales_on_the_prenorm_maps_or_also_around_wo_and_wdown(sites):
    model = GPT(config(n_layer=1, n_head=2, n_embd=32, block_size=8, vocab_size=50, attn_placement="dual",
                       mlp_placement="dual", dual_sites=sites))
    attn, mlp = model.blocks[0].attn, model.blocks[0].mlp
    assert all(lin.out_scale is not None for lin in (attn.q, attn.k, attn.v, mlp.gate, mlp.up))
    around = [attn.o.in_scale, attn.o.out_scale, mlp.down.in_scale, mlp.down.out_scale]
    assert all((s is not None) == (sites == "all") for s in around)


def test_flops_per_token_counts_head_once_and_not_the_embedding():
    cfg = config(n_layer=2, n_head=2, n_embd=32, block_size=16, vocab_size=64, tie_embeddings=False)
    model = GPT(cfg)
    n_active = model.num_params() - 64 * 32
    assert model.flops_per_token() == 6 * n_active + 12 * 2 * 32 * 16


def test_grouped_query_attention_and_head_dim_size_every_map_and_scale():
    """n_head=4 query heads of head_dim=12 over n_kv_head=2 on a width of 32: W_q is 48 x 32, W_k
    and W_v 24 x 32, W_o 32 x 48; DP's scales on q, k, v and around W_o take those widths; the
    parameter count, the FLOPs' attention term and configurator's estimate (before any build) follow."""
    from configurator import DEFAULTS
    from plumbing.memory import estimate_size
    kw = dict(n_layer=2, n_head=4, n_kv_head=2, head_dim=12, n_embd=32, d_ff=64, block_size=16, vocab_size=64,
              tie_embeddings=False, branch_scales=True, attn_placement="dual", dual_sites="all")
    model = GPT(config(**kw))
    a = model.blocks[0].attn
    assert [tuple(getattr(a, n).weight.shape) for n in "qkvo"] == [(48, 32), (24, 32), (24, 32), (32, 48)]
    assert [a.q.out_scale.dim, a.k.out_scale.dim, a.v.out_scale.dim, a.o.in_scale.dim, a.o.out_scale.dim] == \
        [48, 24, 24, 48, 32]
    assert a.k.in_scale.dim == a.v.in_scale.dim == 32  # HG's scales sit on the input (n_embd)
    weights = 2 * (48 * 32 + 2 * 24 * 32 + 32 * 48 + 3 * 32 * 64) + 2 * 64 * 32
    assert model.num_params() == weights + model.num_scale_params()
    assert model.flops_per_token() == 6 * (model.num_params() - 64 * 32) + 12 * 2 * (4 * 12) * 16
    params, _ = estimate_size({**DEFAULTS, **kw})
    assert params == weights
    plain = GPT(config(**{**kw, "n_kv_head": 0, "head_dim": 0}))  # 0: n_head heads of n_embd / n_head
    assert plain.config.n_kv_head == 4 and plain.config.head_dim == 8
    assert tuple(plain.blocks[0].attn.k.weight.shape) == (32, 32)


@pytest.mark.parametrize("bad, message", [
    (dict(n_embd=100, n_head=3), "not divisible by n_head=3"),
    (dict(scale="none", branch_scales=True), "branch_scales"),
    (dict(reparam="no_such_class"), "reparam='no_such_class'"),
    (dict(mlp_placement="dual_norm", scale="none"), "mlp_placement"),
    (dict(n_embd=15, n_head=5), "even for RoPE"),
    (dict(n_embd=32, n_head=4, head_dim=7), "head_dim=7 (n_embd/n_head unless set) must be even"),
    (dict(n_embd=32, n_head=4, n_kv_head=3), "n_head=4 is not divisible by n_kv_head=3"),
    (dict(n_embd=30, n_head=4), "or set head_dim"),
])
def test_bad_model_config_names_the_value(bad, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        config(**{"vocab_size": 50, **bad})


def test_sequence_longer_than_block_size_is_an_error():
    model = GPT(config(n_layer=1, n_head=2, n_embd=32, block_size=8, vocab_size=10))
    with pytest.raises(ValueError, match="exceeds block_size=8"):
        model(torch.zeros(1, 9, dtype=torch.long))


def test_paired_init_shares_weights_across_variants():
    """Variants of one seed start from identical matrices and embeddings."""
    small = dict(n_layer=2, n_head=2, n_embd=32, block_size=16, vocab_size=50)
    a = dict(GPT(config(**small), seed=3).named_parameters())
    b = dict(GPT(config(**small, **UNIFIED), seed=3).named_parameters())
    c = dict(GPT(config(**small), seed=4).named_parameters())
    shared = [n for n in a if n in b and n.endswith(".weight") and a[n].dim() == 2]
    assert len(shared) == 2 * 7 + 1
    for n in shared:
        assert torch.equal(a[n], b[n]), n
        assert not torch.equal(a[n], c[n]), n


def test_generate_extends_the_sequence_within_vocab():
    model = GPT(config(n_layer=1, n_head=2, n_embd=32, block_size=8, vocab_size=65))
    out = model.generate(torch.zeros(1, 3, dtype=torch.long), 12, top_k=5)
    assert out.shape == (1, 15) and int(out.max()) < 65


def test_apply_rope_is_a_rotation_its_transpose_undoes():
    """RoPE rotates channel pairs (i, i + hd/2): norms per pair unchanged, and the rotation by -angle
    (sin negated) gives x back; position 0 is not rotated."""
    from model import apply_rope, rope_tables
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(2, 6, 4, 8, dtype=torch.float64, generator=gen)
    cos, sin = (t.double() for t in rope_tables(6, 8, 10000.0))
    y = apply_rope(x, cos, sin)
    pair = lambda t: t[..., :4].square() + t[..., 4:].square()  # noqa: E731
    torch.testing.assert_close(pair(y), pair(x))
    torch.testing.assert_close(apply_rope(y, cos, -sin), x)
    torch.testing.assert_close(y[:, 0], x[:, 0])


def test_a_model_runs_on_the_meta_device_and_in_float64_under_autocast():
    """A model runs on the meta device (shapes only, no autocast there) and as a float64 model under
    autocast (which leaves float64 alone): RoPE's tables take x's dtype where they are applied."""
    cfg = GPTConfig(n_layer=1, n_head=2, n_embd=32, block_size=16, vocab_size=65)
    idx = torch.zeros(2, 16, dtype=torch.long)
    with torch.device("meta"):
        logits, _, _ = GPT(cfg)(idx.to("meta"), idx.to("meta"))
    assert logits.shape == (2, 16, 65) and logits.is_meta
    model = GPT(cfg).double()
    plain = model(idx, idx)[1]
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = model(idx, idx)[1]
    assert loss.dtype == torch.float64 and torch.equal(loss, plain)
