"""A Pre-Norm, Llama-style GPT whose scale vectors follow the paper's variants.

Read top to bottom: GPTConfig (every switch), RoPE, Attention, MLP, the
top-k mixture-of-experts block (Router, MoE), Block, GPT (forward,
fold_scales, parameter report, FLOPs, generate). The scale
vectors themselves live in norms.py; this file only decides which of them
sit at each site (README: The variants):

    x = x + out_norm(Attention(attn_norm(x)))      attn_norm: pre-attention RMSNorm
    x = x + out_norm(MLP(mlp_norm(x)))             out_norm: Gemma-style, optional
                                                   (MoE in place of MLP in MoE blocks)

With shared scales (the Llama/Gemma baseline) each pre-norm has one gamma;
with branch-specific scales (HG) the pre-norm is bare and q, k, v (gate, up)
each carry their own gamma on their linear map's input.
"""

import math
import warnings
import zlib
from dataclasses import dataclass, fields, replace

import torch
import torch.nn as nn
import torch.nn.functional as F

from configurator import DEFAULTS, UserError, complete, not_one_of, value_problem
from norms import SCALE_CLASSES, RMSNorm, ScaledLinear, ScaleVector, fold_all_, make_scale

SCALES = ("vector", "none")  # "none": every learnable scale removed, the normalizations kept (claim C1)
DUAL_SITES = ("prenorm", "all")


@dataclass(frozen=True)
class Placement:
    """Where a placement (attn_placement, mlp_placement) puts scale vectors and normalizations around a
    sub-layer's branches (BRANCHES: the maps that read the normalized input) and its output map (W_o;
    W_down). Its contract is its three methods: every rule about a placement (Attention, MLP, Block's
    magnitude-free pre-norm scales, config checks, notes, export, --hf_model) asks them, never the
    fields; plumbing/contracts.py holds each entry to it at start. The fields answer for the entries here: dual (u
    on the branches `outer` names, None: all; the output map's scales), norm (every branch), meaning (--help's)."""

    dual: bool
    norm: bool
    meaning: str
    outer: tuple = None

    def carries_outer(self, branch):
        """Whether `branch` ("q", ..., "up") gets a scale u on its output (DP; DNP's outer scales): input-role,
        except a gate's u after the gate's normalization (SiLU follows it: output-role)."""
        return self.dual and (self.outer is None or branch in self.outer)

    def normalizes(self, branch):
        """Whether `branch`'s output is normalized (over d_ff in the MLP: DNP, in_norm), before its u. No fold
        removes it: export ships its modeling file for both MLP branches, else refuses."""
        return self.norm

    def scales_output_map(self):
        """Whether dual_sites="all" puts scales on both sides of W_o (W_down)."""
        return self.dual


# The placements, by name (paper section 3; README: The variants). A fork adds an entry here (docs/forks.md).
ATTN_PLACEMENTS = {
    "in": Placement(dual=False, norm=False, meaning="scales only before q, k, v (on the pre-norm, or per branch under HG)"),
    "dual": Placement(dual=True, norm=False, meaning="DP: also a scale on the outputs of q, k, v"),
}
MLP_PLACEMENTS = {
    "in": Placement(dual=False, norm=False, meaning="scales only before gate, up (on the pre-norm, or per branch under HG)"),
    "dual": Placement(dual=True, norm=False, meaning="DP: also a scale on the outputs of gate and up"),
    "dual_norm": Placement(dual=True, norm=True, meaning="DNP: gate and up become u * normalize(W (v * x_hat)), normalized over d_ff"),
    "in_norm": Placement(dual=False, norm=True, meaning="DNP's normalization over d_ff without its scales (the control for DNP)"),
}
# The Llama/Gemma baseline's scale-vector switches (shared scale vectors, placements "in"); with
# scale_wd="none" (optim.py), the baseline of every comparison.
BASELINE = dict(scale="vector", reparam="plain", branch_scales=False, attn_placement="in", mlp_placement="in")
# The config keys whose values are the registries' names (checked by GPTConfig, listed by --help).
CHOICES = {"scale": SCALES, "reparam": SCALE_CLASSES, "attn_placement": ATTN_PLACEMENTS,
           "mlp_placement": MLP_PLACEMENTS, "dual_sites": DUAL_SITES}
BRANCHES = {"attn_placement": ("q", "k", "v"), "mlp_placement": ("gate", "up")}  # the maps a placement's methods name


@dataclass
class GPTConfig:
    """Every model switch. Defaults: configurator.DEFAULTS, the one table (the default run:
    the unified strategy at the CPU miniature's size); model_config() builds one from a run config.

    Raises ValueError (from __post_init__) naming the bad value and the fix; vocab_size=0
    ("from meta.pkl" in a run config) must be resolved first.
    """

    n_layer: int = DEFAULTS["n_layer"]
    n_head: int = DEFAULTS["n_head"]
    n_kv_head: int = DEFAULTS["n_kv_head"]  # grouped-query attention; 0 = n_head
    head_dim: int = DEFAULTS["head_dim"]  # 0 = n_embd // n_head
    n_embd: int = DEFAULTS["n_embd"]
    d_ff: int = DEFAULTS["d_ff"]  # SwiGLU width; 0 = 8/3 n_embd rounded up to a multiple of 64
    block_size: int = DEFAULTS["block_size"]
    vocab_size: int = DEFAULTS["vocab_size"]  # padded up to a multiple of 64 inside the model
    tie_embeddings: bool = DEFAULTS["tie_embeddings"]
    dropout: float = DEFAULTS["dropout"]
    rope_theta: float = DEFAULTS["rope_theta"]
    # scale vectors (README: The variants)
    scale: str = DEFAULTS["scale"]  # "vector" | "none"
    reparam: str = DEFAULTS["reparam"]  # a key of norms.SCALE_CLASSES
    branch_scales: bool = DEFAULTS["branch_scales"]  # HG: separate gamma for q, k, v and gate, up
    attn_placement: str = DEFAULTS["attn_placement"]  # a key of ATTN_PLACEMENTS
    mlp_placement: str = DEFAULTS["mlp_placement"]  # a key of MLP_PLACEMENTS
    dual_sites: str = DEFAULTS["dual_sites"]  # "prenorm": DP/DNP on q, k, v; gate, up | "all": also W_o, W_down
    qk_norm: bool = DEFAULTS["qk_norm"]
    output_norms: bool = DEFAULTS["output_norms"]  # Gemma-style sandwich norms before the residual add
    norm_eps: float = DEFAULTS["norm_eps"]
    # mixture of experts (README: Mixture of experts)
    n_experts: int = DEFAULTS["n_experts"]  # 0 = dense
    top_k: int = DEFAULTS["top_k"]
    moe_every: int = DEFAULTS["moe_every"]  # 1 = every block is MoE, 2 = blocks 1, 3, 5, ... (0-based)
    expert_d_ff: int = DEFAULTS["expert_d_ff"]  # 0 = d_ff
    shared_expert: bool = DEFAULTS["shared_expert"]  # one always-on expert of width expert_d_ff
    aux_loss_coef: float = DEFAULTS["aux_loss_coef"]  # load-balancing loss weight
    z_loss_coef: float = DEFAULTS["z_loss_coef"]  # router z-loss weight

    def __post_init__(self):
        def check(ok, msg):
            if not ok:
                raise ValueError(msg)

        for f in fields(self):  # each key's range, as the config table states it
            problem = value_problem(f.name, getattr(self, f.name))
            check(not problem, problem)
        check(self.vocab_size > 0, f"vocab_size={self.vocab_size} must be positive (0 means 'from meta.pkl' in a "
                                   f"run config: resolve it first)")
        check(self.head_dim or self.n_embd % self.n_head == 0,
              f"n_embd={self.n_embd} is not divisible by n_head={self.n_head}: pick n_embd as a multiple of "
              f"n_head (e.g. {self.n_head * max(1, self.n_embd // self.n_head)}), or set head_dim")
        self.head_dim = self.head_dim or self.n_embd // self.n_head
        check(self.head_dim % 2 == 0, f"head size head_dim={self.head_dim} (n_embd/n_head unless set) must be even "
                                      f"for RoPE")
        self.n_kv_head = self.n_kv_head or self.n_head
        check(self.n_head % self.n_kv_head == 0,
              f"n_head={self.n_head} is not divisible by n_kv_head={self.n_kv_head}: each key/value head serves "
              f"a group of n_head / n_kv_head query heads; pick a divisor of n_head")
        for key, allowed in CHOICES.items():
            check(getattr(self, key) in allowed, not_one_of(key, getattr(self, key), allowed))
        if self.scale == "none":
            scaled = {key: p.scales_output_map() or any(p.carries_outer(b) for b in BRANCHES[key])
                      for key, p in (("attn_placement", self.attn), ("mlp_placement", self.mlp))}
            extras = {"reparam": self.reparam != "plain", "branch_scales": self.branch_scales, **scaled}
            bad = [k for k, on in extras.items() if on]
            now = ", ".join(f"{k}={getattr(self, k)!r}" for k in bad)
            check(not bad, f"scale='none' removes every scale vector, so it cannot go with {now} (the default run's "
                           f"unified strategy sets them): use reparam='plain', branch_scales=False and placements "
                           f"without dual scales (configs/baseline_shakespeare_char.py --scale=none), or "
                           f"scale='vector'")
        if self.n_experts:
            check(self.top_k <= self.n_experts, f"top_k={self.top_k} must be between 1 and n_experts={self.n_experts}")
        if self.d_ff == 0:
            self.d_ff = 64 * math.ceil(8 * self.n_embd / 3 / 64)
        if self.expert_d_ff == 0:
            self.expert_d_ff = self.d_ff

    @property
    def attn(self):
        """The Placement of attn_placement."""
        return ATTN_PLACEMENTS[self.attn_placement]

    @property
    def mlp(self):
        """The Placement of mlp_placement."""
        return MLP_PLACEMENTS[self.mlp_placement]

    def inert_keys(self):
        """[(key, why)]: the model keys whose value changes nothing about this model (MoE keys in a
        dense model, dual_sites without a dual placement)."""
        inert = []
        if self.n_experts == 0:
            inert += [(k, "n_experts is 0 (a dense model: no expert, no router)") for k in MOE_KEYS]
        elif self.moe_every > self.n_layer:
            why = f"moe_every={self.moe_every} is above n_layer={self.n_layer}, so no block is a mixture of experts"
            inert += [(k, why) for k in ("n_experts", *MOE_KEYS) if k != "moe_every"]
        if not (self.attn.scales_output_map() or self.mlp.scales_output_map()):
            inert.append(("dual_sites", f"attn_placement is {self.attn_placement!r} and mlp_placement "
                                        f"{self.mlp_placement!r} (it says where the dual placements put scales, "
                                        f"and neither is one)"))
        return inert

    def is_moe(self, layer):
        """Whether block `layer` (0-based) is a mixture-of-experts block."""
        return self.n_experts > 0 and (layer + 1) % self.moe_every == 0

    @property
    def padded_vocab_size(self):
        return 64 * math.ceil(self.vocab_size / 64)


MOE_KEYS = ("top_k", "moe_every", "expert_d_ff", "shared_expert", "aux_loss_coef", "z_loss_coef")
MODEL_KEYS = frozenset(f.name for f in fields(GPTConfig))  # the run config's model keys, wherever their rows sit


def baseline_of(cfg):
    """The baseline (BASELINE: Llama-style shared scale vectors) of the same size."""
    return replace(cfg, **BASELINE)


def model_config(cfg):
    """The GPTConfig of a run config (a dict, completed as configurator.complete does, or a
    namespace with every key); UserError ("model config: ...") if invalid. vocab_size=0 ('from
    meta.pkl') is checked as 1 until the data is read."""
    get = complete(cfg).get if isinstance(cfg, dict) else lambda k: getattr(cfg, k)
    try:
        return GPTConfig(**{k: get(k) for k in MODEL_KEYS} | {"vocab_size": get("vocab_size") or 1})
    except ValueError as e:
        raise UserError(f"model config: {e}") from None


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
    u on their outputs (the Pre-Norm maps, which read the normalized input),
    and with dual_sites="all" also v, u on both sides of W_o. QK-norm: q = g_q *
    normalize(q) per head, g_q of shape (head_dim,) shared across heads
    (output role). Grouped-query attention (Ainslie et al. 2023): W_k and W_v
    project to n_kv_head heads, each shared by n_head / n_kv_head query heads,
    so u_k, u_v have n_kv_head * head_dim entries, u_q n_head * head_dim.
    Shapes: (B, T, n_embd) -> (B, T, n_embd).

    Magnitude-free scales (see norms.make_scale): under QK-norm those on the q
    and k paths; under output norms those on the v path and on o, since the
    branch output is linear in them up to the normalization.
    """

    def __init__(self, cfg):
        super().__init__()
        d, self.n_head, self.n_kv_head = cfg.n_embd, cfg.n_head, cfg.n_kv_head
        hd, eps = cfg.head_dim, cfg.norm_eps
        q_width, kv_width = cfg.n_head * hd, cfg.n_kv_head * hd
        hg, dp_o = cfg.branch_scales, cfg.attn.scales_output_map() and cfg.dual_sites == "all"  # scales around W_o

        def branch(name, width, magnitude_free):
            norm = cfg.attn.normalizes(name)
            return ScaledLinear(
                d, width,
                in_scale=make_scale(cfg, d, role="input", magnitude_free=norm or magnitude_free) if hg else None,
                # after a normalization a scale cannot fold back into W's rows: output-role then
                out_scale=make_scale(cfg, width, role="output" if norm else "input",
                                     magnitude_free=magnitude_free) if cfg.attn.carries_outer(name) else None,
                out_norm=norm, eps=eps)

        self.q, self.k = branch("q", q_width, cfg.qk_norm), branch("k", kv_width, cfg.qk_norm)
        self.v = branch("v", kv_width, cfg.output_norms)
        self.o = ScaledLinear(
            q_width, d,
            in_scale=make_scale(cfg, q_width, role="input", magnitude_free=cfg.output_norms) if dp_o else None,
            out_scale=make_scale(cfg, d, role="input", magnitude_free=cfg.output_norms) if dp_o else None)
        self.q_norm = RMSNorm(hd, eps, make_scale(cfg, hd, role="output")) if cfg.qk_norm else None
        self.k_norm = RMSNorm(hd, eps, make_scale(cfg, hd, role="output")) if cfg.qk_norm else None
        self.dropout = cfg.dropout

    def forward(self, x, cos, sin):
        B, T, C = x.shape
        q, k, v = self.q(x), self.k(x), self.v(x)  # each u * (W (v * x)): norms.ScaledLinear
        q = q.view(B, T, self.n_head, -1)  # (B, T, nh, hd)
        k, v = k.view(B, T, self.n_kv_head, -1), v.view(B, T, self.n_kv_head, -1)  # (B, T, n_kv, hd)
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        y = F.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True,
            dropout_p=self.dropout if self.training else 0.0,
            enable_gqa=self.n_kv_head != self.n_head)  # (B, nh, T, hd); key/value head j serves group j
        return self.o(y.transpose(1, 2).reshape(B, T, -1))

    def folds(self):
        """(scale, columns_of, rows_of) of every scale here that folds (ScaledLinear.folds)."""
        for lin in (self.q, self.k, self.v, self.o):
            yield from lin.folds()



class MLP(nn.Module):
    """SwiGLU MLP on the normalized input: down(silu(gate(x_hat)) * up(x_hat)).

    The placement (MLP_PLACEMENTS, asked through Placement's methods) puts u on a branch's output
    and may normalize it over d_ff: DNP's u * normalize(W (v * x_hat)) (paper: gamma_a * Norm(W
    (gamma_b * x))), whose u_up is input-role (it folds into down's columns through the product)
    and u_gate output-role (SiLU follows it); with dual_sites="all", v and u on both sides of down.
    Shapes: (B, T, n_embd) -> (B, T, n_embd); d_ff hidden.

    Magnitude-free scales (see norms.make_scale): the input scales of a branch the placement
    normalizes; with magnitude_free=True (the MLP's output magnitude is invisible: output norms on
    a dense block) also those on the up branch and on down, which the output is linear in. In an
    MoE block one expert's scales set its share of the sum, so they matter.
    """

    def __init__(self, cfg, d_ff, magnitude_free=False):
        super().__init__()
        d, eps = cfg.n_embd, cfg.norm_eps
        hg, dual_down = cfg.branch_scales, cfg.mlp.scales_output_map() and cfg.dual_sites == "all"

        def branch(name, magnitude_free):
            out_norm = cfg.mlp.normalizes(name)  # over d_ff; then the gate's u is output-role (SiLU follows it)
            return ScaledLinear(
                d, d_ff,
                in_scale=make_scale(cfg, d, role="input", magnitude_free=out_norm or magnitude_free) if hg else None,
                out_scale=make_scale(cfg, d_ff, role="output" if out_norm and name == "gate" else "input",
                                     magnitude_free=magnitude_free) if cfg.mlp.carries_outer(name) else None,
                out_norm=out_norm, eps=eps)

        # SiLU follows the gate branch, so its magnitude shows even when the MLP's does not
        self.gate = branch("gate", magnitude_free=False)
        self.up = branch("up", magnitude_free)
        self.down = ScaledLinear(
            d_ff, d,
            in_scale=make_scale(cfg, d_ff, role="input", magnitude_free=magnitude_free) if dual_down else None,
            out_scale=make_scale(cfg, d, role="input", magnitude_free=magnitude_free) if dual_down else None)

    def forward(self, x):
        return self.down(F.silu(self.gate(x)) * self.up(x))  # each branch u * (W (v * x)), normalized under DNP

    def folds(self):
        """(scale, columns_of, rows_of) of every scale here that folds: each map's own
        (ScaledLinear.folds), and under DNP the up branch's outer scale into down's columns."""
        for lin in (self.gate, self.up, self.down):
            yield from lin.folds()
        if self.up.out_norm and self.up.out_scale is not None:
            # silu(g) * (u_up * n) == (silu(g) * n) * u_up: u_up folds into down's columns
            yield self.up.out_scale, [self.down.weight], []



class Router(ScaledLinear):
    """The MoE router: logits = W_r (gamma_router * x_hat), d -> n_experts.

    `optim_group` (declared by ScaledLinear, overridden here) puts its weight
    in optim.py's "router" group (AdamW, never Muon; its own scales keep their
    role groups). Under HG it carries its own input scale gamma_router (input
    role); otherwise it shares the pre-MLP norm's scale with the experts.
    """

    optim_group = "router"


class MoE(nn.Module):
    """Top-k token-choice mixture of SwiGLU experts on the normalized input; dropless.

    p = softmax(router(x_hat)) in float32 over all n_experts; each token goes
    to its top_k experts with weights p (renormalized to sum to 1 over the k
    chosen when top_k > 1; at top_k = 1 the raw p is kept, as in Switch, so
    the router gets a gradient from the language-model loss);
        y = sum over chosen e of w_e * expert_e(x_hat)  [+ shared_expert(x_hat)]
    Each expert is an MLP (so HG, DP, DNP and OR apply to it as to the dense
    MLP) of width expert_d_ff, and is called every step, even on zero tokens,
    so DDP sees every parameter used.

    Returns (y, aux): y (B, T, n_embd); aux["expert_load"] (n_experts,), the
    share of routed (token, slot) pairs per expert (sums to 1); in training
    also aux["lb_loss"] = n_experts / top_k * sum_i f_i P_i (f_i = share of
    tokens routed to i, counted without gradient, sum_i f_i = top_k; P_i =
    mean router probability of i; 1.0 for uniform routing at any k; Switch
    Transformer, Fedus et al. 2021) and aux["z_loss"] = mean(logsumexp(logits)^2)
    (ST-MoE, Zoph et al. 2022), both float32.
    """

    # Routed by the router's weights, not by the batch: a batch may send an expert no token, so the start's
    # check (plumbing/contracts.py) runs each one on this module's input, by its own forward.
    routed = ("experts",)

    def __init__(self, cfg):
        super().__init__()
        d, self.n_experts, self.top_k = cfg.n_embd, cfg.n_experts, cfg.top_k
        self.router = Router(d, cfg.n_experts,
                             in_scale=make_scale(cfg, d, role="input") if cfg.branch_scales else None)
        self.experts = nn.ModuleList(MLP(cfg, cfg.expert_d_ff) for _ in range(cfg.n_experts))
        self.shared_expert = MLP(cfg, cfg.expert_d_ff) if cfg.shared_expert else None

    def forward(self, x):
        B, T, C = x.shape
        x = x.reshape(-1, C)  # (N, C), N = B * T tokens
        N, E, k = x.size(0), self.n_experts, self.top_k
        with torch.autocast(x.device.type, enabled=False):  # routing decisions in float32
            logits = self.router(x.float())  # (N, E)
        probs = logits.softmax(dim=-1)
        weights, chosen = probs.topk(k, dim=-1)  # (N, k) each
        if k > 1:
            weights = weights / weights.sum(dim=-1, keepdim=True)
        # Dispatch: sort the N * k (token, slot) pairs by expert, so that expert e
        # gets one contiguous run of its tokens; scatter-add the weighted outputs back.
        expert_of_pair = chosen.flatten()  # (N * k,)
        order = expert_of_pair.argsort(stable=True)
        counts = torch.bincount(expert_of_pair, minlength=E)  # (E,) tokens per expert
        sizes = counts.tolist()  # the one host read of a dropless dispatch: the experts' batch sizes
        token_of_pair = (order // k).split(sizes)
        weight_of_pair = weights.flatten()[order].split(sizes)
        y = torch.zeros_like(x)
        for expert, tokens, w in zip(self.experts, token_of_pair, weight_of_pair):
            y.index_add_(0, tokens, (expert(x[tokens]) * w[:, None]).to(y.dtype))
        if self.shared_expert is not None:
            y = y + self.shared_expert(x)
        aux = {"expert_load": counts.float() / (N * k)}
        if self.training:
            f = counts.float() / N  # share of tokens per expert, no gradient; sums to k
            aux["lb_loss"] = E / k * (f * probs.mean(dim=0)).sum()
            aux["z_loss"] = torch.logsumexp(logits, dim=-1).pow(2).mean()
        return y.view(B, T, C), aux

    def folds(self):
        """(scale, columns_of, rows_of): the router's own scale (HG), then every expert's."""
        yield from self.router.folds()
        for expert in self.mlps():
            yield from expert.folds()


    def mlps(self):
        """The routed experts and the shared one."""
        return list(self.experts) + ([self.shared_expert] if self.shared_expert is not None else [])

    def params_per_expert(self):
        """Number of parameters of one routed expert (they are all the same size)."""
        return sum(p.numel() for p in self.experts[0].parameters())


class Block(nn.Module):
    """One pre-norm transformer block, dense or MoE.

    forward: x (B, T, n_embd), RoPE tables -> (x, aux) where aux is the MoE
    block's dict (see MoE) or None for a dense block.
    """

    def __init__(self, cfg, layer):
        super().__init__()
        d, eps, hg = cfg.n_embd, cfg.norm_eps, cfg.branch_scales
        self.moe = cfg.is_moe(layer)
        # A shared pre-norm scale is magnitude-free when every branch reading it is (as Attention and MLP say): one its
        # placement normalizes, else q, k under QK-norm, v (a dense MLP's up) under output norms; never with a router.
        hidden = {"q": cfg.qk_norm, "k": cfg.qk_norm, "v": cfg.output_norms, "gate": False, "up": cfg.output_norms}
        attn_magnitude_free = all(cfg.attn.normalizes(b) or hidden[b] for b in BRANCHES["attn_placement"])
        mlp_magnitude_free = not self.moe and all(cfg.mlp.normalizes(b) or hidden[b] for b in BRANCHES["mlp_placement"])
        # With HG the pre-norms are bare: the branches carry the scales.
        self.attn_norm = RMSNorm(d, eps, None if hg else make_scale(cfg, d, role="input",
                                                                    magnitude_free=attn_magnitude_free))
        self.attn = Attention(cfg)
        self.mlp_norm = RMSNorm(d, eps, None if hg else make_scale(cfg, d, role="input",
                                                                   magnitude_free=mlp_magnitude_free))
        # under output norms a dense MLP's output magnitude is invisible; an MoE expert's sets its share
        self.mlp = MoE(cfg) if self.moe else MLP(cfg, cfg.d_ff, magnitude_free=cfg.output_norms)
        if cfg.output_norms:
            self.attn_out_norm = RMSNorm(d, eps, make_scale(cfg, d, role="output"))
            self.mlp_out_norm = RMSNorm(d, eps, make_scale(cfg, d, role="output"))
        else:
            self.attn_out_norm = self.mlp_out_norm = nn.Identity()
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, x, cos, sin):
        x = x + self.drop(self.attn_out_norm(self.attn(self.attn_norm(x), cos, sin)))
        y, aux = self.mlp(self.mlp_norm(x)) if self.moe else (self.mlp(self.mlp_norm(x)), None)
        return x + self.drop(self.mlp_out_norm(y)), aux

    def folds(self):
        """The block's folding relation, (scale, columns_of, rows_of) triples in folding order:
        each pre-norm scale into the columns of every map that reads its x_hat (q, k, v; gate and
        up of the MLP, or of every expert and the router), then attention's and the MLP's own."""
        a, m = self.attn, self.mlp
        if self.attn_norm.scale is not None:
            yield self.attn_norm.scale, [a.q.weight, a.k.weight, a.v.weight], []
        if self.mlp_norm.scale is not None:
            mlps = m.mlps() if self.moe else [m]  # every map that reads x_hat
            readers = [w for mlp in mlps for w in (mlp.gate.weight, mlp.up.weight)]
            yield self.mlp_norm.scale, readers + ([m.router.weight] if self.moe else []), []
        yield from a.folds()
        yield from m.folds()



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
        self.blocks = nn.ModuleList(Block(cfg, layer) for layer in range(cfg.n_layer))
        self.norm_f = RMSNorm(d, cfg.norm_eps, make_scale(cfg, d, role="input"))
        if self.norm_f.scale is not None and cfg.tie_embeddings:
            # Tied, the head is the embedding: folding gamma into it would rescale the input
            # embeddings too, so while tied gamma is a scale the model cannot get another way
            # (output-role). fold_scales() unties the head, and then it folds.
            self.norm_f.scale.tie_("output")
        self.lm_head = nn.Linear(d, V, bias=False)
        if cfg.tie_embeddings:
            self.lm_head.weight = self.wte.weight
        self.drop = nn.Dropout(cfg.dropout)
        cos, sin = rope_tables(cfg.block_size, cfg.head_dim, cfg.rope_theta)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)
        self.init_weights(seed)

    @torch.no_grad()
    def init_weights(self, seed):
        """Draw every non-scale weight from a generator seeded by (seed, name); reset scales to 1."""
        residual_out = {id(b.attn.o.weight) for b in self.blocks} | \
            {id(mlp.down.weight) for b in self.blocks for mlp in (b.mlp.mlps() if b.moe else [b.mlp])}
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
        Returns: (logits, loss, aux): logits (B, T, vocab_size) with targets (None from
            plumbing/fused.py's head while gradients are taken), else (B, 1, vocab_size) for the last position; loss a scalar
            cross-entropy (nats/token) or None; aux empty for a dense model,
            else "expert_load" (n_moe_layers, n_experts) and, in training,
            "lb_loss" and "z_loss" averaged over the MoE layers (see MoE;
            `aux_objective` weights them). The padded vocab entries are cut
            off, so loss at init is about ln(vocab_size).
        Raises ValueError when T > block_size.
        """
        B, T = idx.shape
        if T > self.config.block_size:
            raise ValueError(f"sequence length {T} exceeds block_size={self.config.block_size}")
        x = self.drop(self.wte(idx))  # (B, T, C)
        cos, sin = self.rope_cos[:T], self.rope_sin[:T]  # (T, hd / 2)
        moe_aux = []
        for block in self.blocks:
            x, block_aux = block(x, cos, sin)
            if block_aux is not None:
                moe_aux.append(block_aux)
        aux = {key: torch.stack([a[key] for a in moe_aux]) for key in (moe_aux[0] if moe_aux else ())}
        for key in ("lb_loss", "z_loss"):
            if key in aux:
                aux[key] = aux[key].mean()
        x = self.norm_f(x)
        if targets is None:
            return self.lm_head(x[:, [-1], :])[..., :self.config.vocab_size], None, aux
        return *self.logits_and_loss(x, targets), aux

    def logits_and_loss(self, x, targets):
        """(logits (B, T, vocab_size), the mean cross-entropy over targets (B, T), -1 = ignore) of the
        final norm's output x (B, T, n_embd). plumbing/fused.py computes the loss without the logits."""
        V = self.config.vocab_size
        logits = self.lm_head(x)[..., :V]  # the padded entries cut off
        return logits, F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1), ignore_index=-1)

    def aux_objective(self, aux):
        """What training adds to the cross-entropy: aux_loss_coef * lb_loss + z_loss_coef * z_loss (0 if dense)."""
        if "lb_loss" not in aux:
            return 0.0
        return self.config.aux_loss_coef * aux["lb_loss"] + self.config.z_loss_coef * aux["z_loss"]

    # -------------------------------------------------------------------------

    def scale_vectors(self):
        """(name, ScaleVector) for every scale vector of the model."""
        return [(n, m) for n, m in self.named_modules() if isinstance(m, ScaleVector)]

    @torch.no_grad()
    def scale_stats(self):
        """{site: {mean, std, min, max}} of every effective gamma, as floats (for the log's eval rows)."""
        stats = {}
        for name, sv in self.scale_vectors():
            g = sv().float()
            if hasattr(g, "full_tensor"):  # sharded by FSDP2: gathered (a collective: every rank calls this)
                g = g.full_tensor()
            stats[name] = {"mean": g.mean().item(), "std": g.std().item() if g.numel() > 1 else 0.0,
                           "min": g.min().item(), "max": g.max().item()}
        return stats

    @torch.no_grad()
    def fold_scales(self):
        """Fold every input-role scale into its adjacent linear map, in place (claim C2).

        After this, input-role scales are 1 and the logits are unchanged up to
        float rounding; output-role scales and all normalizations stay. A tied
        LM head is untied first (with a warning): the final-norm scale cannot
        fold into a matrix that is also the embedding, so while tied it is
        output-role; once untied it is input-role and folds. Paper Theorem 2.2.
        """
        if self.lm_head.weight is self.wte.weight and self.norm_f.scale is not None:
            warnings.warn("fold_scales(): untying the LM head from the embedding so the final-norm "
                          "scale can fold into it", stacklevel=3)
            self.lm_head.weight = nn.Parameter(self.wte.weight.detach().clone())
            self.config = replace(self.config, tie_embeddings=False)
            self.norm_f.scale.untie_()
        fold_all_(self.folds())

    def folds(self):
        """The model's folding relation: (scale, columns_of, rows_of) for every input-role scale
        and the matrices it multiplies into (norms.fold_scale_), in folding order; Block.folds for
        each block, then the final-norm scale into the LM head's columns when the head is untied
        (tied, that scale is output-role and has no fold). fold_scales() consumes it, and so do the
        mechanism statistics (mechanism.Mechanism), which read W~ = the matrices with gamma multiplied in."""
        for block in self.blocks:
            yield from block.folds()
        if self.norm_f.scale is not None and self.lm_head.weight is not self.wte.weight:
            yield self.norm_f.scale, [self.lm_head.weight], []

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
        active = self.num_active_params()
        moe = f" ({active:,} active per token)" if self.config.n_experts else ""
        return "\n".join([
            f"parameters: {total:,} ({total / 1e6:.2f}M){moe}, embedding {self.wte.weight.numel():,}"
            f"{' (tied with the LM head)' if self.lm_head.weight is self.wte.weight else ''}",
            f"scale vectors: {n_scale:,} = {n_scale / total:.3e} of the model "
            f"(input role {by_role['input']:,}, output role {by_role['output']:,})",
            f"extra over the baseline of this size ({base_total:,}): {extra:+,} = {extra / total:.3e} of the model",
        ])

    def num_active_params(self):
        """Parameters one token uses: all but the embedding lookup (a tied head
        counts once) and, in MoE blocks, all but top_k routed experts."""
        n = self.num_params()
        if self.lm_head.weight is not self.wte.weight:
            n -= self.wte.weight.numel()
        for b in self.blocks:
            if b.moe:
                n -= (b.mlp.n_experts - b.mlp.top_k) * b.mlp.params_per_expert()
        return n

    def flops_per_token(self, causal=False):
        """Training FLOPs per token: 6 N_active + 12 n_layer (n_head head_dim) block_size.

        PaLM/nanoGPT convention (n_head head_dim = n_embd there), no causal halving (README: Model):
        the count MFU uses, comparable to published MFUs. causal=True halves the T x T attention
        term, the work a causal mask leaves (6-12% less at these shapes).
        """
        cfg = self.config
        attention = 12 * cfg.n_layer * cfg.n_head * cfg.head_dim * cfg.block_size
        return 6 * self.num_active_params() + (attention // 2 if causal else attention)

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
