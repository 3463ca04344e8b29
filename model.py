"""A Pre-Norm, Llama-style GPT whose scale vectors follow the paper's variants.

Read top to bottom: GPTConfig (every switch), RoPE, ScaleSites (which scale sits where, decided once),
Attention, MLP, the top-k mixture of experts (Router, MoE), Block, GPT. The scale vectors themselves
live in norms.py (README: The variants):

    x = x + out_norm(Attention(attn_norm(x)))      attn_norm: pre-attention RMSNorm, its gamma shared
    x = x + out_norm(MLP(mlp_norm(x)))             out_norm: Gemma-style, optional (MoE for MLP in MoE blocks)

HG takes each pre-norm's gamma off and gives q, k, v (gate, up) their own on their linear map's input.
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
    sub-layer's branches (BRANCHES) and its output map (W_o; W_down). Its contract is its three methods:
    every rule about a placement (ScaleSites, config checks, export, --hf_model) asks them, never the
    fields; plumbing/contracts.py holds each entry to it at start. Fields: dual (u on the branches
    `outer` names, None: all; the output map's scales), norm (every branch), meaning (--help's)."""

    dual: bool
    norm: bool
    meaning: str
    outer: tuple = None

    def carries_outer(self, branch):
        """Whether `branch` ("q", ..., "up") gets a scale u on its output (DP; DNP's outer scales)."""
        return self.dual and (self.outer is None or branch in self.outer)

    def normalizes(self, branch):
        """Whether `branch`'s output is normalized before its u (over d_ff in the MLP: DNP, in_norm)."""
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

    attn = property(lambda self: ATTN_PLACEMENTS[self.attn_placement], doc="The Placement of attn_placement.")
    mlp = property(lambda self: MLP_PLACEMENTS[self.mlp_placement], doc="The Placement of mlp_placement.")

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


# -----------------------------------------------------------------------------
# Which scale vectors a block has, and what each one is: decided here once, so that Attention, MLP and
# Block below read as nanoGPT's plus `sites.linear(...)` / `sites.scale(...)` at each site.
#   Where: the placements (ATTN_PLACEMENTS, MLP_PLACEMENTS) say which maps carry a scale u on their output
#     (DP), which normalize it (DNP) and whether W_o, W_down get scales on both sides; HG (branch_scales)
#     takes the pre-norm's shared gamma off and gives each branch (q, k, v; gate, up; the router) its own.
#   Role: a scale is input-role when a linear map reads its output next (it folds into that map: claim
#     C2, and IWD decays it), output-role when a normalization or a nonlinearity comes first: u after DNP's
#     normalization (but up's u, which folds into W_down through the product with silu(gate)).
#   Magnitude hidden ("magnitude-free", norms.make_scale): when a normalization downstream divides a
#     scale's overall size out and only linear maps lie between: q, k under QK-norm; v, o and a dense
#     MLP's up and down under output norms; a branch's input scale under its own normalization (DNP); a
#     shared pre-norm gamma when every branch reading it hides it (never beside a router: an expert's
#     output size sets its share). OR/ER's magnitude would get no gradient there, so it is a plain scale.
#   Tied: the final norm's gamma is output-role while the head is the embedding (GPT.__init__).


class ScaleSites:
    """The scale-vector sites of one block (the paragraph above): `sites` {site: (role, magnitude_free)}, site
    "attn_norm", "mlp_norm" (the pre-norm gammas), "<map>.in" / "<map>.out" (v, u around W of q, k, v, o,
    gate, up, down) or "router.in"; no entry, no scale (scale="none": none at all). moe: the MLP is a mixture
    (its experts' output sizes count). Print one to see a config's sites."""

    def __init__(self, cfg, moe=False):
        self.cfg, self.moe, self.sites = cfg, moe, {}
        # the maps whose output size a later normalization hides (only linear maps between)
        hidden = {"q": cfg.qk_norm, "k": cfg.qk_norm, "v": cfg.output_norms, "o": cfg.output_norms,
                  "gate": False, "up": cfg.output_norms and not moe, "down": cfg.output_norms and not moe}
        for key, pre_norm, out_map in (("attn_placement", "attn_norm", "o"), ("mlp_placement", "mlp_norm", "down")):
            placement, branches = CHOICES[key][getattr(cfg, key)], BRANCHES[key]
            for b in branches:
                norm = placement.normalizes(b)
                if cfg.branch_scales:  # HG
                    self.sites[f"{b}.in"] = ("input", norm or hidden[b])
                if placement.carries_outer(b):  # DP, DNP
                    self.sites[f"{b}.out"] = ("output" if norm and b != "up" else "input", hidden[b])
            if placement.scales_output_map() and cfg.dual_sites == "all":
                self.sites[f"{out_map}.in"] = self.sites[f"{out_map}.out"] = ("input", hidden[out_map])
            if not cfg.branch_scales:
                free = all(placement.normalizes(b) or hidden[b] for b in branches)
                self.sites[pre_norm] = ("input", free and not (moe and key == "mlp_placement"))  # a router reads it
        if cfg.branch_scales and moe:
            self.sites["router.in"] = ("input", False)

    def __repr__(self):
        return "\n".join(f"{k:10} {role}-role{', magnitude-free' if free else ''}" for k, (role, free) in self.sites.items())

    def scale(self, site, width):
        """The ScaleVector of width `width` at `site` (norms.make_scale), or None where there is none."""
        if site not in self.sites:
            return None
        role, free = self.sites[site]
        return make_scale(self.cfg, width, role=role, magnitude_free=free)

    def linear(self, name, d_in, d_out):
        """Map `name`'s ScaledLinear: u * (W (v * x)), normalized before u where its placement says (DNP)."""
        placement = self.cfg.attn if name in BRANCHES["attn_placement"] + ("o",) else self.cfg.mlp
        norm = name not in ("o", "down") and placement.normalizes(name)
        return ScaledLinear(d_in, d_out, self.scale(f"{name}.in", d_in), self.scale(f"{name}.out", d_out),
                            out_norm=norm, eps=self.cfg.norm_eps)


class Attention(nn.Module):
    """Causal self-attention on the normalized input x_hat, its maps scaled as ScaleSites says. Order inside:
    W_q -> u_q (DP) -> QK-norm (q = g_q * normalize(q) per head, g_q (head_dim,), output role) -> RoPE.
    Grouped-query attention (Ainslie et al. 2023): W_k, W_v project to n_kv_head heads, each shared by
    n_head / n_kv_head query heads. Shapes: (B, T, n_embd) -> (B, T, n_embd)."""

    def __init__(self, cfg, sites=None):
        super().__init__()
        sites = sites or ScaleSites(cfg)
        d, hd, eps = cfg.n_embd, cfg.head_dim, cfg.norm_eps
        self.n_head, self.n_kv_head = cfg.n_head, cfg.n_kv_head
        self.q = sites.linear("q", d, cfg.n_head * hd)
        self.k = sites.linear("k", d, cfg.n_kv_head * hd)
        self.v = sites.linear("v", d, cfg.n_kv_head * hd)
        self.o = sites.linear("o", cfg.n_head * hd, d)
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

    def folds(self):  # (scale, columns_of, rows_of) of every scale here that folds (ScaledLinear.folds)
        for lin in (self.q, self.k, self.v, self.o):
            yield from lin.folds()


class MLP(nn.Module):
    """SwiGLU MLP on the normalized input: down(silu(gate(x_hat)) * up(x_hat)), its maps scaled as
    ScaleSites says: under DNP each branch is u * normalize(W (v * x_hat)) over d_ff (paper: gamma_a *
    Norm(W (gamma_b * x))). Shapes: (B, T, n_embd) -> (B, T, n_embd); d_ff hidden. Built alone
    (sites=None), its scales are an expert's: the output's size counts."""

    def __init__(self, cfg, d_ff, sites=None):
        super().__init__()
        sites = sites or ScaleSites(cfg, moe=True)
        self.gate = sites.linear("gate", cfg.n_embd, d_ff)
        self.up = sites.linear("up", cfg.n_embd, d_ff)
        self.down = sites.linear("down", d_ff, cfg.n_embd)

    def forward(self, x):
        return self.down(F.silu(self.gate(x)) * self.up(x))  # each branch u * (W (v * x)), normalized under DNP

    def folds(self):
        """(scale, columns_of, rows_of) of every scale here that folds: each map's, then DNP's u_up into W_down."""
        for lin in (self.gate, self.up, self.down):
            yield from lin.folds()
        if self.up.out_norm and self.up.out_scale is not None:
            # silu(g) * (u_up * n) == (silu(g) * n) * u_up: u_up folds into down's columns
            yield self.up.out_scale, [self.down.weight], []


class Router(ScaledLinear):
    """The MoE router: logits = W_r (gamma_router * x_hat), d -> n_experts; gamma_router under HG, else it
    shares the pre-MLP norm's. `optim_group`: optim.py's "router" group (AdamW, never Muon)."""

    optim_group = "router"


class MoE(nn.Module):
    """Top-k token-choice mixture of SwiGLU experts on the normalized input; dropless.

    p = softmax(router(x_hat)) in float32; each token goes to its top_k experts with weights p
    (renormalized over the k chosen when top_k > 1; at top_k = 1 the raw p, as in Switch, so the router
    gets the loss's gradient):  y = sum over chosen e of w_e * expert_e(x_hat)  [+ shared_expert(x_hat)].
    Each expert is an MLP of width expert_d_ff (HG, DP, DNP, OR apply as to the dense one), called every
    step, even on zero tokens, so DDP sees every parameter used.

    Returns (y, aux): y (B, T, n_embd); aux["expert_load"] (n_experts,), the share of routed (token,
    slot) pairs per expert; in training also aux["lb_loss"] = n_experts / top_k * sum_i f_i P_i (f_i:
    share of tokens routed to i, no gradient, sum_i f_i = top_k; P_i: mean router probability; 1.0 for
    uniform routing; Switch, Fedus et al. 2021) and aux["z_loss"] = mean(logsumexp(logits)^2) (ST-MoE,
    Zoph et al. 2022), both float32.
    """

    # Routed by the router's weights, not by the batch: a batch may send an expert no token, so the start's
    # check (plumbing/contracts.py) runs each one on this module's input, by its own forward.
    routed = ("experts",)

    def __init__(self, cfg, sites=None):
        super().__init__()
        sites = sites or ScaleSites(cfg, moe=True)
        d, self.n_experts, self.top_k = cfg.n_embd, cfg.n_experts, cfg.top_k
        self.router = Router(d, cfg.n_experts, in_scale=sites.scale("router.in", d))
        self.experts = nn.ModuleList(MLP(cfg, cfg.expert_d_ff, sites) for _ in range(cfg.n_experts))
        self.shared_expert = MLP(cfg, cfg.expert_d_ff, sites) if cfg.shared_expert else None

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

    def folds(self):  # (scale, columns_of, rows_of): the router's own scale (HG), then every expert's
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
    """One pre-norm transformer block, dense or MoE. forward: x (B, T, n_embd), RoPE tables -> (x, aux),
    aux the MoE block's dict (MoE) or None for a dense block."""

    def __init__(self, cfg, layer):
        super().__init__()
        d, eps = cfg.n_embd, cfg.norm_eps
        self.moe = cfg.is_moe(layer)
        sites = ScaleSites(cfg, self.moe)  # which scale sits where, its role, whether its size is hidden
        self.attn_norm = RMSNorm(d, eps, sites.scale("attn_norm", d))  # no scale under HG: the branches carry it
        self.attn = Attention(cfg, sites)
        self.mlp_norm = RMSNorm(d, eps, sites.scale("mlp_norm", d))
        self.mlp = MoE(cfg, sites) if self.moe else MLP(cfg, cfg.d_ff, sites)
        if cfg.output_norms:  # Gemma's sandwich norms (output role: the residual stream reads them)
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
        """(scale, columns_of, rows_of) in folding order: each pre-norm scale into the columns of every map
        reading its x_hat (q, k, v; gate, up of the MLP or of every expert, and the router), then the rest."""
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

    Args: config (GPTConfig); seed. Init: normal(0, 0.02), W_o and W_down by 1/sqrt(2 n_layer), every
    scale vector 1; each weight from a generator seeded by (seed, its name), so variants that differ only
    in their scale vectors start from identical weights (paired ablations).
    """

    def __init__(self, config, seed=0):
        super().__init__()
        self.config = cfg = config
        d, V = cfg.n_embd, cfg.padded_vocab_size
        self.wte = nn.Embedding(V, d)
        self.blocks = nn.ModuleList(Block(cfg, layer) for layer in range(cfg.n_layer))
        self.norm_f = RMSNorm(d, cfg.norm_eps, make_scale(cfg, d, role="input"))
        if self.norm_f.scale is not None and cfg.tie_embeddings:
            # Tied, the head is the embedding: gamma cannot fold into it without rescaling the input
            # embeddings too, so it is output-role until fold_scales() unties the head.
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

        Args: idx (B, T) int64 token ids, T <= block_size; targets (B, T) or None (-1 = ignore).
        Returns: (logits, loss, aux): logits (B, T, vocab_size) with targets (None from plumbing/fused.py's
            head while gradients are taken), else (B, 1, vocab_size); loss the mean cross-entropy (nats/token)
            or None (about ln(vocab_size) at init: the padded entries are cut off); aux {} for a dense model,
            else "expert_load" (n_moe_layers, n_experts) and, in training, "lb_loss" and "z_loss" averaged
            over the MoE layers (aux_objective).
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
        aux = {key: torch.stack([a[key] for a in moe_aux]) for key in moe_aux[0]} if moe_aux else {}
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
    def fold_scales(self):
        """Fold every input-role scale into its adjacent linear map, in place (claim C2; paper Theorem 2.2):
        input-role scales become 1, the logits are unchanged up to float rounding, output-role scales and
        every normalization stay. A tied LM head is untied first (with a warning), so the final-norm scale
        becomes input-role and folds."""
        if self.lm_head.weight is self.wte.weight and self.norm_f.scale is not None:
            warnings.warn("fold_scales(): untying the LM head from the embedding so the final-norm "
                          "scale can fold into it", stacklevel=3)
            self.lm_head.weight = nn.Parameter(self.wte.weight.detach().clone())
            self.config = replace(self.config, tie_embeddings=False)
            self.norm_f.scale.untie_()
        fold_all_(self.folds())

    def folds(self):
        """The folding relation: (scale, columns_of, rows_of) for every input-role scale and the matrices it
        multiplies into (norms.fold_scale_), in folding order: each block's, then the final norm's into an
        untied head. fold_scales() consumes it, and so do the mechanism statistics (mechanism.Mechanism)."""
        for block in self.blocks:
            yield from block.folds()
        if self.norm_f.scale is not None and self.lm_head.weight is not self.wte.weight:
            yield self.norm_f.scale, [self.lm_head.weight], []

    def num_params(self):
        """Number of parameters, a tied embedding/head counted once."""
        return sum(p.numel() for p in self.parameters())

    def num_scale_params(self):
        return sum(p.numel() for _, m in self.scale_vectors() for p in m.parameters())

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
        """Training FLOPs per token: 6 N_active + 12 n_layer (n_head head_dim) block_size, the PaLM/nanoGPT
        count MFU uses (README: Model); causal=True halves the T x T term, the work a causal mask leaves."""
        cfg = self.config
        attention = 12 * cfg.n_layer * cfg.n_head * cfg.head_dim * cfg.block_size
        return 6 * self.num_active_params() + (attention // 2 if causal else attention)

    @torch.no_grad()
    def generate(self, idx, max_new_tokens, temperature=1.0, top_k=None):
        """Sample max_new_tokens tokens after idx (B, T); returns (B, T + max_new_tokens). No KV cache: each
        step reruns the last block_size tokens (nanoGPT-style)."""
        for _ in range(max_new_tokens):
            logits, _, _ = self(idx[:, -self.config.block_size:])
            logits = logits[:, -1, :].float() / max(temperature, 1e-6)
            if top_k is not None:
                kth = torch.topk(logits, min(top_k, logits.size(-1))).values[:, [-1]]
                logits[logits < kth] = -float("inf")
            idx = torch.cat([idx, torch.multinomial(F.softmax(logits, dim=-1), 1)], dim=1)
        return idx
