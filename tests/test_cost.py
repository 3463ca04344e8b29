"""What a variant costs on a GPU, counted without one: the bytes one block keeps for its backward
(tools.variants.saved_bytes_per_token), held against the baseline's. Counts, not times: times belong in
the bench and the GPU check."""

from types import SimpleNamespace

import pytest

import model
from configurator import DEFAULTS
from tools import variants

# a small width (compiling a block takes seconds, not a minute), the bench's dtype on a GPU
CFG = dict(DEFAULTS, n_layer=2, n_embd=128, n_head=4, block_size=256, vocab_size=64, device="cpu", dtype="bfloat16")


def ratio(variant, compile):
    cfg = SimpleNamespace(**{**CFG, "compile": compile})
    return variants.saved_bytes_per_token(cfg, variant) / variants.saved_bytes_per_token(cfg, "baseline")


@pytest.mark.parametrize("compile, limit", [(True, 1.01), (False, 1.05)], ids=["compiled", "eager"])
def test_unified_keeps_no_more_for_backward_than_the_baseline(compile, limit):
    """The paper's unified strategy (HG + DNP + OR) keeps at most 1% more bytes per token and layer
    for its backward than the baseline compiled, 5% eager: DNP's op (norms.dnp_swiglu) saves the
    matmul output SwiGLU's backward keeps anyway, plus rstd (8 bytes per token), and HG's and OR's
    scales sit on the weights (O(d^2) per step, not per token)."""
    assert ratio("unified", compile) <= limit


def dnp_as_the_formula(monkeypatch):
    """DNP computed by its branch formulas through autograd (what ran before dnp_swiglu)."""
    monkeypatch.setattr(model, "dnp_fusable", lambda gate, up: False)


@pytest.mark.parametrize("compile", [pytest.param(True, marks=pytest.mark.slow), False], ids=["compiled", "eager"])
def test_the_count_sees_the_formulas_saved_activations(monkeypatch, compile):
    """The instrument responds: DNP through autograd of its formulas keeps the normalized, scaled gate
    and up beside the matmul output, (2 d_ff) more values per token: the same count then reads well
    over the limits above (about 1.18x compiled, 1.3x eager at this width)."""
    dnp_as_the_formula(monkeypatch)
    assert ratio("unified", compile) > 1.1


def test_saved_bytes_per_token_grows_with_the_activations_not_the_weights():
    """Per token, not per call: the weights' bf16 copies (d x d per step) drop out of the difference
    of two batch sizes, so the count is the same at 128 and at 256 tokens (both past the token count where
    eager branches take the weight side: norms.branch_linears); at twice the width it grows as the
    activations do, linearly (less: attention's per-head statistics stay), not as the weights (4x)."""
    cfg = SimpleNamespace(**{**CFG, "compile": False})
    assert variants.saved_bytes_per_token(cfg, "baseline", tokens=128) == variants.saved_bytes_per_token(cfg, "baseline", 256)
    wide = SimpleNamespace(**{**vars(cfg), "n_embd": 256})  # twice the width: activations up to 2x, weights 4x
    assert 1.5 < variants.saved_bytes_per_token(wide, "baseline") / variants.saved_bytes_per_token(cfg, "baseline") <= 2.0
    assert variants.saved_bytes_per_token(cfg, variants.REFERENCE) is None


def test_ropes_op_frees_the_qkv_matmul_output_compiled():
    """Compiled, the baseline block with RoPE as plain ops keeps the q|k|v matmul output alive for v
    beside the roped q and k: exactly (n_head + n_kv_head) head_dim bf16 values per token more than with
    model.rope_qkv, whose buffer is all SDPA keeps (4 + 4 heads of 32 here: 512 bytes)."""
    cfg = SimpleNamespace(**{**CFG, "compile": True})
    with_op = variants.saved_bytes_per_token(cfg, "baseline")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(model, "rope_qkv", lambda q, k, v, cos, sin, fused: model._rope_qkv(q, k, v, cos, sin))
        plain = variants.saved_bytes_per_token(cfg, "baseline")
    assert plain - with_op == (4 + 4) * (128 // 4) * 2


def test_the_ops_compiled_bodies_compute_what_their_eager_bodies_do():
    """Inside a compiled model (and on CUDA) dnp_swiglu's and rope_qkv's bodies run compiled
    (norms.fused_body): the same values as their bodies as written, forward and backward, float32."""
    import torch
    from norms import fused_body
    gen = torch.Generator().manual_seed(0)
    y = torch.randn(3, 5, 2, 48, generator=gen, requires_grad=True)
    u = (0.5 + torch.rand(2, 48, generator=gen)).requires_grad_()
    q, k, v = (torch.randn(2, 6, 2, 8, generator=gen, requires_grad=True) for _ in range(3))
    cos, sin = model.rope_tables(6, 8, 10000.0)
    assert not fused_body()  # outside a compiled model: as written
    for fused in (False, True):
        h = torch.ops.scalevec.dnp_swiglu(y, u, 1e-6, fused)[0]
        r = model.rope_qkv(q, k, v, cos, sin, fused)
        grads = torch.autograd.grad(h.square().sum() + r.square().sum(), [y, u, q, k, v])
        if not fused:
            ref = [h, r, *grads]
    for a, b in zip([h, r, *grads], ref):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
