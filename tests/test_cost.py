"""What a variant costs on a GPU, counted without one, on the code path a GPU runs: the bytes one block
keeps for its backward (tools.variants.saved_bytes_per_token), the opaque calls a compiled forward makes
(opaque_calls), and the host's work per compiled step (host_calls_per_step, the Python and C calls it
makes). Times belong in the bench and the GPU check."""

from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

import model
from configurator import DEFAULTS
from plumbing import fused
from tools import variants

# a small width (compiling a block takes seconds, not a minute), the bench's dtype on a GPU
CFG = dict(DEFAULTS, n_layer=2, n_embd=128, n_head=4, block_size=256, vocab_size=64, device="cpu", dtype="bfloat16")


def ratio(variant, compile):
    cfg = SimpleNamespace(**{**CFG, "compile": compile})
    return variants.saved_bytes_per_token(cfg, variant) / variants.saved_bytes_per_token(cfg, "baseline")


@pytest.mark.slow
@pytest.mark.parametrize("compile, limit", [(True, 1.01), (False, 1.01)], ids=["compiled", "eager"])
def test_unified_keeps_no_more_for_backward_than_the_baseline_like_for_like(compile, limit):
    """The paper's unified strategy (HG + DNP + OR) keeps at most 1% more bytes per token and layer for its
    backward than the baseline, both with the same fast paths (plumbing/fused.py for "cuda": SwiGLU's
    product recomputed in both, F.rms_norm with CUDA's saved set), compiled and eager: DNP's normalization
    and u are recomputed from the gate and up matmul outputs SwiGLU keeps anyway, and HG's and OR's scales
    sit on the weights (O(d^2) per step, not per token)."""
    assert ratio("unified", compile) <= limit


def test_the_baselines_block_no_longer_keeps_swiglus_product():
    """The baseline's fast path recomputes silu(gate) * up in the backward: its block keeps exactly the
    down projection's input less than the formula's, d_ff bf16 values a token (384 x 2 bytes here)."""
    d_ff = model.GPTConfig(**{k: CFG[k] for k in ("n_embd", "n_head", "vocab_size")}).d_ff
    fast, formulas = (variants.saved_bytes_per_token(SimpleNamespace(**{**CFG, "compile": False, "fused": on}), "baseline")
                      for on in (True, False))
    assert formulas - fast == 2 * d_ff


def test_outside_the_blocks_the_fast_head_keeps_no_logits():
    """Outside the blocks (embedding, final norm, head, loss) the formula keeps the bf16 logits, 2 bytes for
    each of vocab_size entries a token at least; the chunked head keeps a few tensors of n_embd's width
    (the final norm's input, the head's input): under 8 n_embd bytes, whatever the vocabulary. A whole
    model's count is its outside plus n_layer blocks."""
    cfg = dict(CFG, vocab_size=4096, block_size=64, compile=False)
    fast, formulas = (variants.saved_bytes(SimpleNamespace(**{**cfg, "fused": on}), "baseline") for on in (True, False))
    assert formulas["outside"] >= 2 * 4096 and fast["outside"] < 8 * 128
    assert fast["model"] == fast["outside"] + 2 * fast["per_layer"]


def test_the_eager_count_keeps_what_cudas_rms_norm_keeps():
    """Under cuda_rms_norm_saved_set F.rms_norm keeps its float32 input and rstd (the weight is a
    parameter): 4 (d + 1) bytes a row, as CUDA's fused kernel; the CPU's composite keeps more, which an
    eager count on a CPU would otherwise add to every norm."""
    def saved(x, w):
        found = {}

        def pack(t):
            found[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            F.rms_norm(x, (x.size(-1),), w, 1e-6)
        return sum(v for k, v in found.items() if k != w.untyped_storage().data_ptr())

    x, w = torch.randn(10, 64, requires_grad=True), torch.nn.Parameter(torch.ones(64))
    with variants.cuda_rms_norm_saved_set():
        assert saved(x, w) == 10 * 4 * (64 + 1)
    assert saved(x, w) > 10 * 4 * (64 + 1)


@pytest.mark.parametrize("compile", [pytest.param(True, marks=pytest.mark.slow), False], ids=["compiled", "eager"])
def test_the_count_sees_the_formulas_saved_activations(compile):
    """The instrument responds: the formulas alone (--fused=False) keep v * x for each scaled branch's
    matmul and DNP's normalized, scaled gate and up beside the matmul output: the same count reads well
    over the limits above (about 1.17x compiled, 1.6x eager at this width)."""
    cfg = SimpleNamespace(**{**CFG, "compile": compile, "fused": False})
    assert variants.saved_bytes_per_token(cfg, "unified") / variants.saved_bytes_per_token(cfg, "baseline") > 1.1


def test_saved_bytes_per_token_grows_with_the_activations_not_the_weights():
    """Per token, not per call: the weights' bf16 copies (d x d per step) drop out of the difference
    of two batch sizes, so the count is the same at 128 and at 256 tokens; at twice the width it grows as
    the activations do, linearly (less: attention's per-head statistics stay), not as the weights (4x)."""
    cfg = SimpleNamespace(**{**CFG, "compile": False})
    assert variants.saved_bytes_per_token(cfg, "baseline", tokens=128) == variants.saved_bytes_per_token(cfg, "baseline", 256)
    wide = SimpleNamespace(**{**vars(cfg), "n_embd": 256})  # twice the width: activations up to 2x, weights 4x
    assert 1.5 < variants.saved_bytes_per_token(wide, "baseline") / variants.saved_bytes_per_token(cfg, "baseline") <= 2.0
    assert variants.saved_bytes_per_token(cfg, variants.REFERENCE) is None


def one_qkv_buffer(self, x, cos, sin):
    """Attention with q|k|v as one matmul, v a view of its buffer (what the fast paths avoid)."""
    B, T, C = x.shape
    lins = (self.q, self.k, self.v)
    q, k, v = F.linear(x, torch.cat([lin.effective_weight() for lin in lins])).split([lin.weight.size(0) for lin in lins], -1)
    q, k, v = q.view(B, T, self.n_head, -1), k.view(B, T, self.n_kv_head, -1), v.view(B, T, self.n_kv_head, -1)
    q, k = model.apply_rope(q, cos, sin), model.apply_rope(k, cos, sin)
    y = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
    return self.o(y.transpose(1, 2).reshape(B, T, -1))


@pytest.mark.slow
def test_v_in_a_buffer_of_its_own_frees_the_qkv_matmul_output_compiled(monkeypatch):
    """Compiled, a q|k|v buffer that v is a view of stays alive whole beside the roped q and k (SDPA keeps
    v): exactly (n_head + n_kv_head) head_dim bf16 values per token more than with q, k, v as their own
    matmuls, as the formula and the fast paths compute them (4 + 4 heads of 32 here: 512 bytes)."""
    cfg = SimpleNamespace(**{**CFG, "compile": True})
    own = variants.saved_bytes_per_token(cfg, "baseline")
    monkeypatch.setattr(model.Attention, "forward", one_qkv_buffer)
    assert variants.saved_bytes_per_token(cfg, "baseline") - own == (4 + 4) * (128 // 4) * 2


# a tiny width, 12 layers: what the host does per step, with the device's work negligible
HOST = dict(DEFAULTS, n_layer=12, n_embd=16, n_head=2, d_ff=64, block_size=8, batch_size=1, vocab_size=64, device="cpu",
            dtype="float32", compile=True)


@pytest.mark.slow
@pytest.mark.parametrize("variant", ["unified", "baseline"])
def test_no_opaque_call_but_the_heads_and_no_graph_break_in_a_compiled_forward(variant, monkeypatch):
    """torch.compile sees through every fast path of the blocks: no custom op (opaque to CUDA graphs, export
    and DTensor) and one graph per forward; the one opaque call is torch's own chunked head op (its fake
    and autograd registered by torch), which the formula's head does not make."""
    assert variants.opaque_calls(SimpleNamespace(**HOST), variant) == (1, 1)
    monkeypatch.setattr(fused, "chunked_head", lambda vocab_size, n_embd: False)
    assert variants.opaque_calls(SimpleNamespace(**HOST), variant) == (0, 1)


@pytest.mark.slow
def test_the_opaque_call_count_sees_a_custom_op(monkeypatch):
    """The instrument responds: a custom op in DNP's fast path (FusedMLP) counts once per layer."""
    import torch

    @torch.library.custom_op("scalevec_test::silu", mutates_args=())
    def silu(x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.silu(x)

    silu.register_fake(lambda x: torch.empty_like(x))
    real = fused.FusedMLP.forward

    def with_op(self, x):
        return real(self, silu(x))

    monkeypatch.setattr(fused.FusedMLP, "forward", with_op)
    assert variants.opaque_calls(SimpleNamespace(**HOST), "unified") == (12 + 1, 1)  # and the head's


@pytest.mark.slow
@pytest.mark.parametrize("variant", ["unified", "baseline"])
def test_the_blocks_fast_paths_cost_the_host_no_more_than_the_formulas(variant, monkeypatch):
    """The host's calls in one compiled training step of the 12-layer model: the blocks' fast paths make no
    more than the formulas (a fast path is one graph of the same ops; the recompute runs inside it). The
    slack is the few calls dynamo's own counters add from one build to the next (4 of some 10,000). The
    chunked head is left out here: torch's op runs its chunks' loop in Python (next test)."""
    monkeypatch.setattr(fused, "chunked_head", lambda vocab_size, n_embd: False)
    n = variants.host_calls_per_step(SimpleNamespace(**HOST), variant)
    assert n["fast"] <= n["formulas"] + 16, n


@pytest.mark.slow
def test_unified_costs_the_host_no_more_calls_over_the_baseline_than_its_formulas_do():
    """Unified's host calls per compiled step over the baseline's, both with every fast path (the chunked
    head's loop included): at most the formulas' ratio, and at most 1.64x, what the scale vectors' own
    parameters cost (each of unified's 121 more parameter tensors is an input the compiled graph's wrapper
    checks and a tensor the optimizer, the clipping and zero_grad loop over: docs/benchmarks.md)."""
    base, unified = (variants.host_calls_per_step(SimpleNamespace(**HOST), v) for v in ("baseline", "unified"))
    fast, formulas = unified["fast"] / base["fast"], unified["formulas"] / base["formulas"]
    assert fast <= formulas + 0.01 and fast <= 1.64, (base, unified)


@pytest.mark.slow
def test_the_host_call_count_sees_a_graph_break(monkeypatch):
    """The instrument responds: a graph break in every fused linear (a print, say) costs the host a
    resume function and a guard set per linear, 7 per layer of 12, each with calls of its own."""
    real = fused.FusedLinear.forward

    def with_break(self, x):
        torch._dynamo.graph_break()
        return real(self, x)

    monkeypatch.setattr(fused.FusedLinear, "forward", with_break)
    n = variants.host_calls_per_step(SimpleNamespace(**HOST), "baseline")
    assert n["fast"] > n["formulas"] + 12 * 7 * 2, n
