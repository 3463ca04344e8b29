"""A Pre-Norm, Llama-style GPT whose scale vectors follow the paper's variants.

Read top to bottom: GPTConfig (every switch), RoPE, Attention, MLP, Block,
GPT (forward, fold_scales, parameter report, FLOPs, generate). The scale
vectors themselves live in norms.py; this file only decides which of them
sit at each site (README: The variants):

    x = x + out_norm(Attention(attn_norm(x)))      attn_norm: pre-attention RMSNorm
    x = x + out_norm(MLP(mlp_norm(x)))             out_norm: Gemma-style, optional

With shared scales (the Llama/Gemma baseline) each pre-norm has one gamma;
with branch-specific scales (HG) the pre-norm is bare and q, k, v (gate, up)
each carry their own gamma on their linear map's input.
"""

import math
import warnings
import zlib
from dataclasses import asdict, dataclass, replace

import torch
import torch.nn as nn
import torch.nn.functional as F

from norms import RMSNorm, ScaledLinear, ScaleVector, fold_scale_, make_scale

SCALES = ("vector", "none")
REPARAMS = ("plain", "or", "er")
ATTN_PLACEMENTS = ("in", "dual")
MLP_PLACEMENTS = ("in", "dual", "dual_norm")


@dataclass
class GPTConfig:
    """Every model switch. Defaults: GPT-2 small (124M) with the baseline's scale vectors.

    Raises ValueError (from __post_init__) naming the bad value and the fix.
    """

    n_layer: int = 12
    n_head: int = 12
    n_embd: int = 768
    d_ff: int = 0  # SwiGLU width; 0 = 8/3 n_embd rounded up to a multiple of 64
    block_size: int = 1024
    vocab_size: int = 50257  # padded up to a multiple of 64 inside the model
    tie_embeddings: bool = True
    dropout: float = 0.0
    rope_theta: float = 10000.0
    # scale vectors (README: The variants)
    scale: str = "vector"  # "vector" | "none"
    reparam: str = "plain"  # "plain" | "or" | "er"
    branch_scales: bool = False  # HG: separate gamma for q, k, v and gate, up
    attn_placement: str = "in"  # "in" | "dual" (DP)
    mlp_placement: str = "in"  # "in" | "dual" (DP) | "dual_norm" (DNP)
    qk_norm: bool = False
    output_norms: bool = False  # Gemma-style sandwich norms before the residual add
    norm_eps: float = 1e-6

    def __post_init__(self):
        def check(ok, msg):
            if not ok:
                raise ValueError(msg)

        for key in ("n_layer", "n_head", "n_embd", "block_size", "vocab_size"):
            check(getattr(self, key) > 0, f"{key}={getattr(self, key)} must be positive")
        check(self.d_ff >= 0, f"d_ff={self.d_ff} must be >= 0 (0 = 8/3 n_embd rounded up to 64)")
        check(self.n_embd % self.n_head == 0,
              f"n_embd={self.n_embd} is not divisible by n_head={self.n_head}: "
              f"pick n_embd as a multiple of n_head (e.g. {self.n_head * max(1, self.n_embd // self.n_head)})")
        check((self.n_embd // self.n_head) % 2 == 0,
              f"head size n_embd/n_head={self.n_embd // self.n_head} must be even for RoPE")
        check(0.0 <= self.dropout < 1.0, f"dropout={self.dropout} must be in [0, 1)")
        for key, allowed in (("scale", SCALES), ("reparam", REPARAMS),
                             ("attn_placement", ATTN_PLACEMENTS), ("mlp_placement", MLP_PLACEMENTS)):
            check(getattr(self, key) in allowed, f"{key}={getattr(self, key)!r} is not one of {allowed}")
        if self.scale == "none":
            extras = {"reparam": self.reparam != "plain", "branch_scales": self.branch_scales,
                      "attn_placement": self.attn_placement != "in", "mlp_placement": self.mlp_placement != "in"}
            bad = [k for k, on in extras.items() if on]
            check(not bad, f"scale='none' removes every scale vector, so {', '.join(bad)} cannot be set: "
                           "use the defaults (reparam='plain', branch_scales=False, placements 'in') or scale='vector'")
        check(self.norm_eps > 0, f"norm_eps={self.norm_eps} must be positive")
        if self.d_ff == 0:
            self.d_ff = 64 * math.ceil(8 * self.n_embd / 3 / 64)

    @property
    def padded_vocab_size(self):
        return 64 * math.ceil(self.vocab_size / 64)


def baseline_of(cfg):
    """The baseline (Llama-style shared scale vectors) of the same size."""
    return replace(cfg, scale="vector", reparam="plain", branch_scales=False,
                   attn_placement="in", mlp_placement="in")


# -----------------------------------------------------------------------------


def rope_tables(block_size, head_dim, theta):
    """cos, sin of shape (block_size, head_dim // 2) for rotary embeddings (Su et al. 2021)."""
    inv_freq = 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
    angles = torch.outer(torch.arange(block_size, dtype=torch.float32), inv_freq)
    return angles.cos(), angles.sin()


def apply_rope(x, cos, sin):
    """Rotate channel pairs (i, i + hd/2) of x (B, T, n_head, hd) by position-dependent angles."""
    cos, sin = cos[None, :, None, :].type_as(x), sin[None, :, None, :].type_as(x)
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)


class Attention(nn.Module):
    """Causal self-attention on the normalized input x_hat, with its scale vectors.

    Order inside: W_q -> u_q (DP) -> QK-norm -> RoPE.
    HG puts gamma_q, gamma_k, gamma_v on the inputs of W_q, W_k, W_v; DP adds
    u on their outputs and v, u on both sides of W_o. QK-norm: q = g_q *
    normalize(q) per head, g_q of shape (head_dim,) shared across heads
    (output role). Shapes: (B, T, n_embd) -> (B, T, n_embd).
    """

    def __init__(self, cfg):
        super().__init__()
        d, self.n_head = cfg.n_embd, cfg.n_head
        hd, eps = d // cfg.n_head, cfg.norm_eps
        hg, dp = cfg.branch_scales, cfg.attn_placement == "dual"

        def branch(normalized_after):
            return ScaledLinear(
                d, d,
                in_scale=make_scale(cfg, d, "input", normalized_after) if hg else None,
                out_scale=make_scale(cfg, d, "input", normalized_after) if dp else None)

        self.q, self.k, self.v = branch(cfg.qk_norm), branch(cfg.qk_norm), branch(False)
        self.o = ScaledLinear(
            d, d,
            in_scale=make_scale(cfg, d, "input", cfg.output_norms) if dp else None,
            out_scale=make_scale(cfg, d, "input", cfg.output_norms) if dp else None)
        self.q_norm = RMSNorm(hd, eps, make_scale(cfg, hd, "output")) if cfg.qk_norm else None
        self.k_norm = RMSNorm(hd, eps, make_scale(cfg, hd, "output")) if cfg.qk_norm else None
        self.dropout = cfg.dropout

    def forward(self, x, cos, sin):
        B, T, C = x.shape
        q = self.q(x).view(B, T, self.n_head, -1)  # (B, T, nh, hd)
        k = self.k(x).view(B, T, self.n_head, -1)
        v = self.v(x).view(B, T, self.n_head, -1)
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        y = F.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
            is_causal=True, dropout_p=self.dropout if self.training else 0.0)  # (B, nh, T, hd)
        return self.o(y.transpose(1, 2).reshape(B, T, C))

    @torch.no_grad()
    def fold_(self):
        for lin in (self.q, self.k, self.v, self.o):
            lin.fold_()


class MLP(nn.Module):
    """SwiGLU MLP on the normalized input: down(silu(gate(x_hat)) * up(x_hat)).

    Placements:
      "in"        scales only before gate/up (on the pre-norm, or per branch under HG)
      "dual"      DP: u on the outputs of gate, up, down and v on down's input
      "dual_norm" DNP: gate and up become u * normalize(W (v * x_hat)) over d_ff;
                  down as under DP. u_up is input-role (it folds into down's
                  columns through the elementwise product), u_gate output-role
                  (SiLU follows it).
    Shapes: (B, T, n_embd) -> (B, T, n_embd); d_ff hidden.
    """

    def __init__(self, cfg, d_ff):
        super().__init__()
        d, eps = cfg.n_embd, cfg.norm_eps
        hg, place = cfg.branch_scales, cfg.mlp_placement
        self.dnp = place == "dual_norm"
        dual = place in ("dual", "dual_norm")

        def branch(out_role):
            return ScaledLinear(
                d, d_ff,
                in_scale=make_scale(cfg, d, "input", normalized_after=self.dnp) if hg else None,
                out_scale=make_scale(cfg, d_ff, out_role) if dual else None,
                out_norm=self.dnp, eps=eps)

        self.gate = branch("output" if self.dnp else "input")
        self.up = branch("input")
        self.down = ScaledLinear(
            d_ff, d,
            in_scale=make_scale(cfg, d_ff, "input", cfg.output_norms) if dual else None,
            out_scale=make_scale(cfg, d, "input", cfg.output_norms) if dual else None)

    def forward(self, x):
        return self.down(F.silu(self.gate(x)) * self.up(x))

    @torch.no_grad()
    def fold_(self):
        for lin in (self.gate, self.up, self.down):
            lin.fold_()
        if self.dnp:  # silu(g) * (u_up * n) == (silu(g) * n) * u_up: u_up folds into down's columns
            fold_scale_(self.up.out_scale, columns_of=[self.down.weight])


class Block(nn.Module):
    """One pre-norm transformer block; shapes (B, T, n_embd) -> (B, T, n_embd)."""

    def __init__(self, cfg):
        super().__init__()
        d, eps, hg = cfg.n_embd, cfg.norm_eps, cfg.branch_scales
        dnp = cfg.mlp_placement == "dual_norm"
        # With HG the pre-norms are bare: the branches carry the scales.
        self.attn_norm = RMSNorm(d, eps, None if hg else make_scale(cfg, d, "input"))
        self.attn = Attention(cfg)
        self.mlp_norm = RMSNorm(d, eps, None if hg else make_scale(cfg, d, "input", normalized_after=dnp))
        self.mlp = MLP(cfg, cfg.d_ff)
        if cfg.output_norms:
            self.attn_out_norm = RMSNorm(d, eps, make_scale(cfg, d, "output"))
            self.mlp_out_norm = RMSNorm(d, eps, make_scale(cfg, d, "output"))
        else:
            self.attn_out_norm = self.mlp_out_norm = nn.Identity()
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, x, cos, sin):
        x = x + self.drop(self.attn_out_norm(self.attn(self.attn_norm(x), cos, sin)))
        x = x + self.drop(self.mlp_out_norm(self.mlp(self.mlp_norm(x))))
        return x

    @torch.no_grad()
    def fold_(self):
        a, m = self.attn, self.mlp
        fold_scale_(self.attn_norm.scale, columns_of=[a.q.weight, a.k.weight, a.v.weight])
        fold_scale_(self.mlp_norm.scale, columns_of=[m.gate.weight, m.up.weight])
        a.fold_()
        m.fold_()


class GPT(nn.Module):
    """The language model: token embedding -> n_layer Blocks -> final RMSNorm -> LM head.

    Args: config (GPTConfig); seed for the initial weights. Init: normal(0,
    0.02), residual output projections (W_o, W_down) scaled by
    1/sqrt(2 n_layer), every scale vector 1. Each weight is drawn
    from a generator seeded by (seed, parameter name), so variants that differ
    only in their scale vectors start from identical weights (paired ablations).
    """

    def __init__(self, config, seed=0):
        super().__init__()
        self.config = cfg = config
        d, V = cfg.n_embd, cfg.padded_vocab_size
        self.wte = nn.Embedding(V, d)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.norm_f = RMSNorm(d, cfg.norm_eps, make_scale(cfg, d, "input"))
        self.lm_head = nn.Linear(d, V, bias=False)
        if cfg.tie_embeddings:
            self.lm_head.weight = self.wte.weight
        self.drop = nn.Dropout(cfg.dropout)
        cos, sin = rope_tables(cfg.block_size, d // cfg.n_head, cfg.rope_theta)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)
        self.init_weights(seed)

    @torch.no_grad()
    def init_weights(self, seed):
        """Draw every non-scale weight from a generator seeded by (seed, name); reset scales to 1."""
        residual_out = {id(b.attn.o.weight) for b in self.blocks} | {id(b.mlp.down.weight) for b in self.blocks}
        scale_params = {id(p) for m in self.modules() if isinstance(m, ScaleVector) for p in m.parameters()}
        for name, p in self.named_parameters():
            if id(p) in scale_params or p.is_meta:
                continue
            std = 0.02 / math.sqrt(2 * self.config.n_layer) if id(p) in residual_out else 0.02
            gen = torch.Generator(device=p.device).manual_seed(zlib.crc32(f"{seed}/{name}".encode()))
            p.normal_(0.0, std, generator=gen)
        for m in self.modules():
            if isinstance(m, ScaleVector) and not any(p.is_meta for p in m.parameters()):
                m.reset_()

    def forward(self, idx, targets=None):
        """Logits, and the mean cross-entropy when targets are given.

        Args: idx (B, T) int64 token ids, T <= block_size; targets (B, T) or None
            (-1 = ignore).
        Returns: (logits, loss, aux): logits (B, T, vocab_size) with targets,
            else (B, 1, vocab_size) for the last position; loss a scalar
            cross-entropy (nats/token) or None; aux a dict of extra weighted
            training-loss terms (empty for a dense model). The padded vocab
            entries are cut off, so loss at init is about ln(vocab_size).
        Raises ValueError when T > block_size.
        """
        B, T = idx.shape
        if T > self.config.block_size:
            raise ValueError(f"sequence length {T} exceeds block_size={self.config.block_size}")
        x = self.drop(self.wte(idx))  # (B, T, C)
        cos, sin = self.rope_cos[:T], self.rope_sin[:T]
        for block in self.blocks:
            x = block(x, cos, sin)
        x = self.norm_f(x)
        V = self.config.vocab_size
        if targets is None:
            return self.lm_head(x[:, [-1], :])[..., :V], None, {}
        logits = self.lm_head(x)[..., :V]  # (B, T, V)
        loss = F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1), ignore_index=-1)
        return logits, loss, {}

    # -------------------------------------------------------------------------

    def scale_vectors(self):
        """(name, ScaleVector) for every scale vector of the model."""
        return [(n, m) for n, m in self.named_modules() if isinstance(m, ScaleVector)]

    @torch.no_grad()
    def fold_scales(self):
        """Fold every input-role scale into its adjacent linear map, in place (claim C2).

        After this, input-role scales are 1 and the logits are unchanged up to
        float rounding; output-role scales and all normalizations stay. A tied
        LM head is untied first (with a warning): the final-norm scale cannot
        fold into a matrix that is also the embedding. Paper Theorem 2.2;
        """
        if self.lm_head.weight is self.wte.weight and self.norm_f.scale is not None:
            warnings.warn("fold_scales(): untying the LM head from the embedding so the final-norm "
                          "scale can fold into it", stacklevel=3)
            self.lm_head.weight = nn.Parameter(self.wte.weight.detach().clone())
            self.config.tie_embeddings = False
        for block in self.blocks:
            block.fold_()
        fold_scale_(self.norm_f.scale, columns_of=[self.lm_head.weight])

    def num_params(self):
        """Number of parameters, a tied embedding/head counted once."""
        return sum(p.numel() for p in self.parameters())

    def num_scale_params(self):
        return sum(p.numel() for _, m in self.scale_vectors() for p in m.parameters())

    def param_report(self):
        """A few lines: total parameters, scale-vector parameters by role and their
        share, and the extra parameters over the same-size baseline."""
        total, n_scale = self.num_params(), self.num_scale_params()
        by_role = {"input": 0, "output": 0}
        for _, m in self.scale_vectors():
            by_role[m.role] += sum(p.numel() for p in m.parameters())
        with torch.device("meta"):
            base_total = GPT(baseline_of(self.config)).num_params()
        extra = total - base_total
        return "\n".join([
            f"parameters: {total:,} ({total / 1e6:.2f}M), embedding {self.wte.weight.numel():,}"
            f"{' (tied with the LM head)' if self.lm_head.weight is self.wte.weight else ''}",
            f"scale vectors: {n_scale:,} = {n_scale / total:.3e} of the model "
            f"(input role {by_role['input']:,}, output role {by_role['output']:,})",
            f"extra over the baseline of this size ({base_total:,}): {extra:+,} = {extra / total:.3e} of the model",
        ])

    def flops_per_token(self):
        """Training FLOPs per token: 6 N_active + 12 n_layer n_embd block_size.

        PaLM/nanoGPT convention, no causal halving; N_active counts the LM head
        once and not the embedding lookup.
        """
        cfg = self.config
        n = self.num_params()
        if self.lm_head.weight is not self.wte.weight:
            n -= self.wte.weight.numel()
        return 6 * n + 12 * cfg.n_layer * cfg.n_embd * cfg.block_size

    @torch.no_grad()
    def generate(self, idx, max_new_tokens, temperature=1.0, top_k=None):
        """Sample max_new_tokens tokens after idx (B, T); returns (B, T + max_new_tokens).

        No KV cache: each step reruns the last block_size tokens (nanoGPT-style).
        """
        for _ in range(max_new_tokens):
            logits, _, _ = self(idx[:, -self.config.block_size:])
            logits = logits[:, -1, :].float() / max(temperature, 1e-6)
            if top_k is not None:
                kth = torch.topk(logits, min(top_k, logits.size(-1))).values[:, [-1]]
                logits[logits < kth] = -float("inf")
            idx = torch.cat([idx, torch.multinomial(F.softmax(logits, dim=-1), 1)], dim=1)
        return idx


def config_dict(cfg):
    """The GPTConfig as a plain dict (for checkpoints and logs)."""
    return asdict(cfg)
