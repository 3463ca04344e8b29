"""The bench's variants, each built and stepped as training builds and steps it: one per claim of the
paper (VARIANTS, and one per registry entry a fork adds: variants()), nanoGPT's GPT-2 as the reference
for the cost per FLOP (GPT2Reference), and what one block of a variant keeps for its backward
(saved_bytes_per_token). A library: tools/bench.py times them, tools/step_profile.py profiles them.
"""

from contextlib import contextmanager, nullcontext
from dataclasses import replace
from types import SimpleNamespace

import torch
import torch.nn as nn
import torch.nn.functional as F

import model
from configurator import DEFAULTS
from model import GPT, model_config
from optim import build_optimizers, optimizer_step
from plumbing import fused

# The baseline: the Llama/Gemma scale switches (model.BASELINE), no decay on scales.
BASELINE = {**model.BASELINE, "scale_wd": "none"}
# The paper's unified strategy is the default run's (configurator.DEFAULTS): HG + DNP + OR + IWD.
UNIFIED = {k: DEFAULTS[k] for k in (*BASELINE, "dual_sites")}
# Overrides on top of the baseline: one per claim of the paper (README: claims table); variants()
# adds one per registry entry no named variant covers (a scale class or placement a fork adds).
VARIANTS = {
    "baseline": dict(),
    "none": dict(scale="none"),
    "hg": dict(branch_scales=True),
    "dp": dict(attn_placement="dual", mlp_placement="dual", dual_sites="prenorm"),
    "dnp": dict(mlp_placement="dual_norm", dual_sites="prenorm"),
    "or": dict(reparam="or"),
    "er": dict(reparam="er"),
    "unified": UNIFIED,
    "unified_dp_all": {**UNIFIED, "attn_placement": "dual", "dual_sites": "all"},  # the project's earlier one
    # top-2 of 8 experts, each d_ff / 2 wide: the active parameters of the dense MLP
    "moe": dict(n_experts=8, top_k=2),
    "unified_moe": {**UNIFIED, "n_experts": 8, "top_k": 2},
}


def variants():
    """VARIANTS, then "<key>=<name>" for each scale class and placement (model.CHOICES) that is
    not the baseline's and that no variant of VARIANTS sets alone."""
    found = dict(VARIANTS)
    for key in ("reparam", "attn_placement", "mlp_placement"):
        for name in model.CHOICES[key]:
            if name != BASELINE[key] and not any(v.get(key) == name and len(v.keys() - {"dual_sites"}) == 1
                                                 for v in VARIANTS.values()):
                found[f"{key}={name}"] = {key: name}
    return found
REFERENCE = "gpt2"  # --variants=gpt2,baseline: the baseline's cost per FLOP against nanoGPT's GPT-2


class GPT2Reference(nn.Module):
    """nanoGPT's GPT-2 at the config's size, the reference for the cost per FLOP (bench only).

    LayerNorm with bias, GELU MLP of width 4 n_embd, learned positions, tied head, SDPA:
    the model whose CPU and GPU speed people know. forward(idx, targets) -> (logits, loss, {}).
    """

    def __init__(self, cfg):
        super().__init__()
        d, V, self.n_head = cfg.n_embd, cfg.padded_vocab_size, cfg.n_head
        self.config = cfg
        self.wte, self.wpe = nn.Embedding(V, d), nn.Embedding(cfg.block_size, d)
        self.blocks = nn.ModuleList(nn.ModuleDict(dict(
            ln_1=nn.LayerNorm(d), c_attn=nn.Linear(d, 3 * d), c_proj=nn.Linear(d, d),
            ln_2=nn.LayerNorm(d), c_fc=nn.Linear(d, 4 * d), mlp_proj=nn.Linear(4 * d, d)))
            for _ in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(d)
        self.lm_head = nn.Linear(d, V, bias=False)
        self.lm_head.weight = self.wte.weight

    def forward(self, idx, targets):
        B, T = idx.shape
        x = self.wte(idx) + self.wpe(torch.arange(T, device=idx.device))
        for b in self.blocks:
            q, k, v = (t.view(B, T, self.n_head, -1).transpose(1, 2)
                       for t in b["c_attn"](b["ln_1"](x)).split(x.size(-1), dim=-1))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(B, T, -1)
            x = x + b["c_proj"](y)
            x = x + b["mlp_proj"](F.gelu(b["c_fc"](b["ln_2"](x))))
        logits = self.lm_head(self.ln_f(x))[..., :self.config.vocab_size]
        return logits, F.cross_entropy(logits.flatten(0, 1), targets.flatten()), {}

    def aux_objective(self, aux):
        return 0.0

    def num_params(self):
        return sum(p.numel() for p in self.parameters())

    def flops_per_token(self):
        """6 N + 12 n_layer n_embd block_size, N without the embedding lookups (as GPT's)."""
        cfg = self.config
        n = self.num_params() - self.wpe.weight.numel()
        return 6 * n + 12 * cfg.n_layer * cfg.n_embd * cfg.block_size


FORMULAS = ":formulas"  # a variant's name with this suffix: the same variant under --fused=False (the formulas leg)


def leg(cfg, variant):
    """(cfg, the variant's name) for a name of variants() or REFERENCE, or such a name with FORMULAS
    appended: then cfg with fused=False, the formulas alone (bench.py's like-for-like legs)."""
    if variant.endswith(FORMULAS):
        return SimpleNamespace(**{**vars(cfg), "fused": False}), variant[:-len(FORMULAS)]
    return cfg, variant


def build(cfg, variant):
    """(model, the model to step (compiled if cfg.compile), optimizers) for one variant of cfg (its
    formulas alone for a name ending in FORMULAS)."""
    cfg, variant = leg(cfg, variant)
    if variant == REFERENCE:
        model = GPT2Reference(model_config(cfg)).to(cfg.device)
        opts = [torch.optim.AdamW(model.parameters(), lr=cfg.learning_rate, weight_decay=cfg.weight_decay,
                                  fused=True)]
        return model, torch.compile(model) if cfg.compile else model, opts
    c, model_cfg = variant_config(cfg, variant)
    model = GPT(model_cfg, seed=c.seed).to(cfg.device)
    if getattr(cfg, "fused", True):  # as train.py builds it (plumbing/fused.py)
        fused.use(model, torch.device(cfg.device).type)
    opts, _ = build_optimizers(model, c, torch.device(cfg.device).type)
    step_model = torch.compile(model) if cfg.compile else model
    return model, step_model, opts


def variant_config(cfg, variant):
    """(the run config, the GPTConfig) of one variant of VARIANTS (variants()) at cfg's size and training keys."""
    overrides = variants()[variant]
    c = SimpleNamespace(**{**vars(cfg), **BASELINE, **overrides})
    model_cfg = model_config(c)
    if "n_experts" in overrides and cfg.expert_d_ff == 0:
        model_cfg = replace(model_cfg, expert_d_ff=model_cfg.d_ff // model_cfg.top_k)
    return c, model_cfg


class _CudaSavedSetRMSNorm(torch.autograd.Function):
    """F.rms_norm keeping what CUDA's fused kernel keeps for its backward: its input, rstd and the weight
    (not its output: a weightless norm's output is another tensor, which the next matmul keeps too)."""

    @staticmethod
    def forward(ctx, x, weight, eps):
        rstd = torch.rsqrt(x.square().mean(-1, keepdim=True) + eps)
        ctx.save_for_backward(x, rstd, weight)
        return x * rstd if weight is None else x * rstd * weight

    @staticmethod
    def backward(ctx, g):  # plumbing/fused.py's closed form, x_hat recomputed from the input
        x, rstd, weight = ctx.saved_tensors
        x_hat = x * rstd
        gw = g if weight is None else g * weight
        dx = (gw - x_hat * (gw * x_hat).mean(-1, keepdim=True)) * rstd
        dweight = None if weight is None else (g * x_hat).sum(dim=tuple(range(g.dim() - 1)))
        return dx, dweight, None


@contextmanager
def cuda_rms_norm_saved_set():
    """Within: F.rms_norm keeps for its backward what CUDA's fused kernel keeps (its float32 input, rstd and
    the weight; _CudaSavedSetRMSNorm). On a CPU F.rms_norm's autograd is a composite that keeps one more
    float32 tensor of the input's size: an eager count on a CPU would then not be the GPU's."""
    real = F.rms_norm

    def rms_norm(x, normalized_shape, weight=None, eps=None):
        return _CudaSavedSetRMSNorm.apply(x, weight, eps)

    F.rms_norm = rms_norm
    try:
        yield
    finally:
        F.rms_norm = real


def saved_bytes(cfg, variant, tokens=None):
    """{"per_layer", "outside", "model"}: bytes per token the model of `variant` keeps for its backward, per
    block (saved_bytes_per_token; for the gpt2 reference the 2-layer model's count less the 1-layer one's),
    outside the blocks (the 1-layer model's count less one block's: the embedding, the final norm, the head
    and the loss) and for the whole model at cfg.n_layer (outside + n_layer x per layer). Counted as
    saved_bytes_per_token counts a block: the code path a CUDA run takes, batch 2 less batch 1 of `tokens`
    (default block_size), parameters and buffers left out, eager with CUDA's saved set for F.rms_norm
    (cuda_rms_norm_saved_set). Compiled, it resets torch._dynamo."""
    cfg, variant = leg(cfg, variant)
    model_cfg = model_config(cfg) if variant == REFERENCE else variant_config(cfg, variant)[1]
    T = min(tokens or model_cfg.block_size, model_cfg.block_size)
    ctx = torch.autocast(torch.device(cfg.device).type, dtype=torch.bfloat16) if cfg.dtype == "bfloat16" else nullcontext()

    def whole(n_layer):
        c = replace(model_cfg, n_layer=n_layer)
        m = (GPT2Reference(c) if variant == REFERENCE else GPT(c)).to(cfg.device)
        if getattr(cfg, "fused", True) and variant != REFERENCE:
            fused.use(m, "cuda")
        if cfg.compile:
            torch._dynamo.reset()
        run = torch.compile(m, dynamic=False) if cfg.compile else m
        skip = {t.untyped_storage().data_ptr() for t in (*m.parameters(), *m.buffers())}

        def saved(batch):
            idx = torch.randint(0, c.vocab_size, (batch, T), generator=torch.Generator().manual_seed(batch)).to(cfg.device)
            return bytes_saved(run, (idx, idx), skip, ctx)

        with nullcontext() if cfg.compile else cuda_rms_norm_saved_set():
            return (saved(2) - saved(1)) / T

    one = whole(1)
    per_layer = whole(2) - one if variant == REFERENCE else saved_bytes_per_token(cfg, variant, T)
    return {"per_layer": per_layer, "outside": one - per_layer, "model": one - per_layer + cfg.n_layer * per_layer}


def bytes_saved(run, args, skip, ctx):
    """Bytes autograd keeps for the backward of one call run(*args) under ctx, each storage once (views of it
    included), the storages whose data_ptr is in `skip` (parameters, tables) left out. A first call runs before
    the count: compiled, it compiles, and the count is of the call that follows."""
    with ctx:
        run(*args)
    found = {}

    def pack(t):
        storage = t.untyped_storage()
        if storage.data_ptr() not in skip:
            found[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), ctx:
        run(*args)
    return sum(found.values())


def saved_bytes_per_token(cfg, variant, tokens=None):
    """Bytes that one block of `variant` keeps for its backward per token (one layer: block 0 of cfg's
    model, on cfg.device, under bf16 autocast when cfg.dtype says so, compiled when cfg.compile).

    The block runs the code path a CUDA run takes, whatever cfg.device is: the fast paths of "cuda"
    (plumbing/fused.use: SwiGLU's recompute, F.rms_norm with the saved set of CUDA's kernel,
    cuda_rms_norm_saved_set; cfg.fused=False: the formulas alone). What
    autograd saves is read with saved-tensor hooks, each storage once (views of it included), parameters
    and the RoPE tables left out, at batch 1 and 2 of `tokens` (default block_size): the difference over
    `tokens` is the activations' share, without what does not grow with the batch (the weights' bf16
    copies). A count, not a time: inductor's partitioner decides what to save from the graph, so a test
    holds it where no GPU is at hand. None for the gpt2 reference. Compiled, it resets torch._dynamo
    first (the graphs compiled before are forgotten: count after timing).
    """
    cfg, variant = leg(cfg, variant)
    if variant == REFERENCE:
        return None
    _, model_cfg = variant_config(cfg, variant)
    T = min(tokens or model_cfg.block_size, model_cfg.block_size)
    block = GPT(replace(model_cfg, n_layer=1)).blocks[0].to(cfg.device)  # initialized as in training
    if getattr(cfg, "fused", True):
        fused.use(block, "cuda")
    if cfg.compile:  # a fresh start: past dynamo's recompile limit (one Block.forward per variant) it runs eager
        torch._dynamo.reset()
    run = torch.compile(block, dynamic=False) if cfg.compile else block  # static shapes, as a training step's
    ctx = torch.autocast(torch.device(cfg.device).type, dtype=torch.bfloat16) if cfg.dtype == "bfloat16" else nullcontext()
    cos, sin = (t.to(cfg.device) for t in model.rope_tables(T, model_cfg.head_dim, model_cfg.rope_theta))
    skip = {t.untyped_storage().data_ptr() for t in (*block.parameters(), cos, sin)}

    def saved(batch):
        x = torch.randn(batch, T, model_cfg.n_embd, device=cfg.device, requires_grad=True)
        return bytes_saved(run, (x, cos, sin), skip, ctx)

    with nullcontext() if cfg.compile else cuda_rms_norm_saved_set():  # compiled, inductor decomposes it
        return (saved(2) - saved(1)) / T


def train_step(model, step_model, opts, x, y, ctx, grad_clip):
    """One training step as train.py's loop takes it with one micro-step: forward (the objective
    with the MoE terms), backward, then the loop's own optimizer_step (clip to grad_clip, step,
    zero the gradients)."""
    with ctx:
        _, loss, aux = step_model(x, y)
        objective = loss + model.aux_objective(aux)
    objective.backward()
    optimizer_step(model, opts, grad_clip)




def opaque_calls(cfg, variant):
    """(opaque calls, graphs) of one forward of `variant`'s model as torch.compile's graph capture sees
    it: calls of ops outside torch's own namespaces (a custom op the compiler cannot see into, which
    CUDA graphs, export and DTensor must take as a black box), and the number of graphs (one: no
    graph break). Built as train.py builds it (cfg.fused: the fast paths of "cuda")."""
    _, model_cfg = variant_config(cfg, variant)
    m = GPT(model_cfg)
    if getattr(cfg, "fused", True):
        fused.use(m, "cuda")
    graphs = []

    def capture(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    torch._dynamo.reset()
    idx = torch.zeros(2, min(16, model_cfg.block_size), dtype=torch.long)
    torch.compile(m, backend=capture, dynamic=False)(idx, idx)
    torch._dynamo.reset()
    ops = (torch._ops.OpOverload, torch._ops.OpOverloadPacket)
    opaque = [n for g in graphs for n in g.graph.nodes if n.op == "call_function" and isinstance(n.target, ops)
              and n.target.namespace not in ("aten", "prims")]
    return len(opaque), len(graphs)


def host_calls_per_step(cfg, variant, by_function=False):
    """{"fast": n, "formulas": n}: the Python and C function calls the host makes in one compiled
    training step of `variant` (train_step after warm-up), with the fast paths a CUDA run takes
    (plumbing/fused.use(..., "cuda")) and with the formulas alone. Each call is host work a GPU run
    pays per step whatever the device's speed: guards, the compiled graph's wrapper and its kernel
    calls, the optimizer's loop. A count, the same on every machine and under any load; the seconds
    belong in tools/bench.py. by_function: each leg a collections.Counter of "file:function" (C calls
    as "<C>:name") instead of its total, the profile of where the calls go. Raises nothing of its own;
    the counter is sys.setprofile, so it must not run under another profiler or a debugger that
    installs one."""
    import os
    import sys
    from collections import Counter
    _, model_cfg = variant_config(cfg, variant)
    idx = torch.randint(0, model_cfg.vocab_size, (cfg.batch_size, model_cfg.block_size), generator=torch.Generator().manual_seed(0))
    counts = {}
    for name, on in (("fast", True), ("formulas", False)):
        torch._dynamo.reset()  # each alone: another model's cached graphs would add their guard checks
        m, step_model, opts = build(SimpleNamespace(**{**vars(cfg), "fused": False}), variant)
        if on:  # the fast paths a CUDA run takes (no CPU-only closed-form norm), before the first compile
            fused.use(m, "cuda")
        for _ in range(3):  # compile, then the steps the compiled graphs settle in
            train_step(m, step_model, opts, idx, idx, nullcontext(), cfg.grad_clip)
        calls = Counter()

        def count(frame, event, arg):
            if event == "call":
                calls[f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_code.co_name}"] += 1
            elif event == "c_call":
                calls[f"<C>:{getattr(arg, '__qualname__', getattr(arg, '__name__', '?'))}"] += 1

        sys.setprofile(count)
        try:
            train_step(m, step_model, opts, idx, idx, nullcontext(), cfg.grad_clip)
        finally:
            sys.setprofile(None)
        counts[name] = calls if by_function else calls.total()
    torch._dynamo.reset()
    return counts
