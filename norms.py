"""Scale vectors and the normalizations around them: every variant, side by side.

Paper: "Negligible in Size, Significant in Effect: On Scale Vectors in Large
Language Models" (arXiv 2605.26895). A *scale vector* gamma is a learnable
per-channel multiplier next to a normalization or a linear map. This file
holds, in the order of the paper:

    1. the normalization x_hat = x / rms(x)            (normalize, RMSNorm)
    2. how gamma is parameterized                      (PlainScale = the baseline
       "vector"; ORScale, ERScale = magnitude-direction reparameterization, C7)
    3. where gamma sits around a linear map            (ScaledLinear: input side
       v, output side u, dual placement DP; DNP adds a normalization, C6)
    4. folding: an input-role gamma multiplied into    (fold_scale_, C2; the
       its adjacent linear map changes nothing          relation as data: folds())

Branch-specific scales (HG, C5), QK-norm and Gemma-style output norms are
*which* of these pieces model.py puts at each site; `make_scale` is the one
place that turns the config into a scale vector, and `SCALE_CLASSES` the one
table of parameterizations (config value `reparam` -> class).

Each piece here is its formula, and `python train.py --fused=False` runs
exactly these. The default run swaps some modules for faster versions of the
same maps (scales multiplied into the weights, DNP's normalization
recomputed in the backward): plumbing/fused.py, one switch,
each held equal to the formula here by tests/test_fused.py.

Every scale vector declares what optim.py reads about it:
  role            "input": it folds exactly into an adjacent linear map (pre-norm scales, both sides
                  of a linear map under DP, DNP's up-branch outer scale, the final-norm scale when the
                  head is untied); "output": it sets a scale the model cannot get another way (QK-norm,
                  output norms, DNP's gate-branch outer scale, which SiLU follows, the final-norm scale
                  while the head is tied). IWD (C4): decay on input-role scales only.
  untied_role     the role once the LM head is untied: `role`, except for the final-norm scale while
                  tied (tie_, untie_). scale_wd="iwd_final" decays by it.
  magnitude_name  (class) the parameter carrying the overall magnitude (OR, ER), which gets its own
                  learning rate; None when gamma has no separate magnitude (PlainScale).
A ScaledLinear declares `optim_group`, its weight's group ("matrix";
model.Router overrides it with "router").
"""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

ROLES = ("input", "output")


def rms_norm(x, weight, eps):
    """weight * x / rms(x) over the last dim, rms(x) = sqrt(mean(x^2) + eps), computed in float32,
    returned in x's dtype (torch's F.rms_norm: one fused kernel on CUDA).

    Args: x (..., d); weight None or of shape (d,); eps added to the mean square (pass it:
    F.rms_norm's default depends on the dtype).
    """
    return F.rms_norm(x.float(), (x.size(-1),), None if weight is None else weight.float(), eps).type_as(x)


def normalize(x, eps):
    """x / rms(x) over the last dim, computed in float32, returned in x's dtype.

    Args: x (..., d); eps added to the mean square.
    """
    return rms_norm(x, None, eps)


# -----------------------------------------------------------------------------
# How gamma is parameterized. Each class returns the effective gamma, shape (d,),
# from forward(); gamma == 1 at init; reset_() sets it back to 1 (for folding).


def _check_role(role):
    if role not in ROLES:
        raise ValueError(f"role must be one of {ROLES}, got {role!r}")
    return role


class ScaleVector(nn.Module):
    """Base class: a learnable per-channel scale gamma of shape (d,) with a role.

    Args: dim d; role "input" (folds into an adjacent linear map, paper Theorem 2.2) or "output"
    (see the module docstring). Declares:
      role, untied_role  instance fields: the role now, and the role once the LM head is untied (the
          role it was built with; tie_() changes only `role`, for while the head is tied).
      magnitude_name     class field: the name of the parameter that carries the overall magnitude
          (OR, ER), None when gamma has no separate magnitude; has_magnitude() is derived from it.
    Subclasses (SCALE_CLASSES' contract, held at start: plumbing/contracts.py): forward() -> gamma (d,), == 1 at init;
    reset_() sets it back to 1 (folding); set_(gamma), if any, makes it a given one (--hf_model). ValueError: a bad role.
    """

    magnitude_name = None

    def __init__(self, dim, role):
        super().__init__()
        self.dim = dim
        self.role = self.untied_role = _check_role(role)

    @classmethod
    def has_magnitude(cls):
        """Whether a separate parameter carries gamma's magnitude (it would get no gradient at a
        magnitude-free site, so make_scale puts a PlainScale there)."""
        return cls.magnitude_name is not None

    def tie_(self, role):
        """Take `role` while the LM head is tied to the embedding; untie_() restores the role the
        scale was built with (the final-norm scale: built "input", "output" while tied)."""
        self.role = _check_role(role)

    def untie_(self):
        """Take `untied_role` (GPT.fold_scales, once it has untied the LM head)."""
        self.role = self.untied_role

    def reset_(self):
        """Set the parameters so that gamma == 1 again (in place)."""
        raise NotImplementedError(f"{type(self).__name__} has no reset_(): give it one (folding sets gamma back to 1)")

    def set_(self, gamma):
        """Set the parameters so that gamma equals `gamma` (d,) exactly (in place): a loaded
        checkpoint's RMSNorm weight becomes this scale's start, the function unchanged.
        Raises NotImplementedError for a class that cannot (a fork's, until it says how)."""
        raise NotImplementedError(f"{type(self).__name__} cannot start from a loaded gamma: give it a set_() method")

    def extra_repr(self):
        untied = f", untied_role={self.untied_role}" if self.untied_role != self.role else ""
        return f"dim={self.dim}, role={self.role}{untied}"


class PlainScale(ScaleVector):
    """gamma = p, p init 1: the ordinary RMSNorm weight of Llama and Gemma.

    Stored as gamma itself (not Gemma's 1 + w), so weight decay pulls gamma to 0.
    Parameters: d.
    """

    def __init__(self, dim, role):
        super().__init__(dim, role)
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self):
        return self.weight

    @torch.no_grad()
    def reset_(self):
        self.weight.fill_(1.0)

    @torch.no_grad()
    def set_(self, gamma):
        self.weight.copy_(gamma)


class ORScale(ScaleVector):
    """Magnitude-direction reparameterization "OR": gamma = beta * sqrt(d) * a / ||a||.

    beta (shape (1,): FSDP2 shards no 0-d tensor) carries the magnitude and a (d,) the direction; both init 1,
    so gamma == 1 at init. Weight decay (optim.py) acts on both: on beta it
    pulls gamma toward 0; on a, which only enters through a / ||a||, it only
    enlarges the direction's effective step. Paper section 3 (Theorem 3.2: an anisotropic
    preconditioner, about d-fold learning rate on the magnitude). The exact
    formula is our reading of the paper. Parameters: d + 1.
    """

    magnitude_name = "magnitude"

    def __init__(self, dim, role):
        super().__init__(dim, role)
        self.direction = nn.Parameter(torch.ones(dim))
        self.magnitude = nn.Parameter(torch.ones(1))

    def forward(self):
        a = self.direction
        return self.magnitude * math.sqrt(self.dim) * a / a.norm().clamp_min(1e-12)

    @torch.no_grad()
    def reset_(self):
        self.direction.fill_(1.0)
        self.magnitude.fill_(1.0)

    @torch.no_grad()
    def set_(self, gamma):  # a = gamma, beta = ||gamma|| / sqrt(d): beta sqrt(d) a / ||a|| == gamma
        self.direction.copy_(gamma)
        self.magnitude.fill_(gamma.norm().item() / math.sqrt(self.dim))


class ERScale(ScaleVector):
    """Exponential reparameterization "ER": gamma = exp(s) * sqrt(d) * a / ||a||.

    As ORScale with the magnitude stored as a log, s init 0, so the magnitude
    stays positive and moves multiplicatively. Weight decay on s pulls the
    magnitude toward 1, not 0. Our reading of the paper.
    Parameters: d + 1.
    """

    magnitude_name = "log_magnitude"

    def __init__(self, dim, role):
        super().__init__(dim, role)
        self.direction = nn.Parameter(torch.ones(dim))
        self.log_magnitude = nn.Parameter(torch.zeros(1))

    def forward(self):
        a = self.direction
        return self.log_magnitude.exp() * math.sqrt(self.dim) * a / a.norm().clamp_min(1e-12)

    @torch.no_grad()
    def reset_(self):
        self.direction.fill_(1.0)
        self.log_magnitude.zero_()

    @torch.no_grad()
    def set_(self, gamma):  # as ORScale's, the magnitude as its log (gamma must not be all 0)
        self.direction.copy_(gamma)
        self.log_magnitude.fill_(math.log(gamma.norm().item() / math.sqrt(self.dim)))


SCALE_CLASSES = {"plain": PlainScale, "or": ORScale, "er": ERScale}  # cfg.reparam -> class


def make_scale(cfg, dim, *, role, magnitude_free=False):
    """The scale vector a site gets under `cfg`, or None when `cfg.scale == "none"`.

    Args:
        cfg: anything with `scale` ("vector" | "none") and `reparam` (a key of
            SCALE_CLASSES), e.g. model.GPTConfig.
        dim: width d of the scale.
        role: "input" or "output".
        magnitude_free: True when everything between this scale and the next
            normalization is linear in it (linear maps, other scales,
            attention's mixing of v, the up branch's product with
            silu(gate)): DNP's inner scales, the q/k scales under QK-norm, the
            v, o, up and down scales under output norms. Its overall
            magnitude is then invisible to the loss (up to eps), so a class
            with a separate magnitude parameter (OR, ER: has_magnitude())
            gives way to a PlainScale there: that parameter would get no
            gradient. A class without one is built as it is.
    Returns: an instance of SCALE_CLASSES[cfg.reparam] or PlainScale, or None.
    Raises ValueError for a reparam not in SCALE_CLASSES.
    """
    if cfg.scale == "none":
        return None
    if cfg.reparam not in SCALE_CLASSES:
        raise ValueError(f"reparam={cfg.reparam!r} is not one of {', '.join(map(repr, SCALE_CLASSES))}")
    cls = SCALE_CLASSES[cfg.reparam]
    if magnitude_free and cls.has_magnitude():
        cls = PlainScale
    return cls(dim, role)


def scaled(x, scale):
    """x * gamma along the last dim; x unchanged when scale is None. x: (..., d)."""
    return x if scale is None else x * scale().type_as(x)


# -----------------------------------------------------------------------------
# Where gamma sits.


class RMSNorm(nn.Module):
    """y = gamma * x / rms(x) over the last dim, in float32; gamma optional.

    Used for the pre-attention and pre-MLP norms (shared scale, role "input"),
    the final norm before the LM head ("input"; "output" while the head is tied), QK-norm per head with gamma of
    shape (head_dim,) ("output") and Gemma-style output norms before the
    residual add ("output"). With scale=None it is the bare normalization:
    the `scale="none"` ablation, or a site whose scale lives on the branches (HG).

    Args: dim d; eps; scale a ScaleVector of width d or None.
    Shapes: x (..., d) -> (..., d), same dtype as x.
    """

    def __init__(self, dim, eps, scale=None):
        super().__init__()
        self.dim, self.eps, self.scale = dim, eps, scale

    def forward(self, x):
        return rms_norm(x, None if self.scale is None else self.scale(), self.eps)


class ScaledLinear(nn.Module):
    """A bias-free linear map with optional scale vectors on both sides.

        y = u * (W (v * x))                 placement "in" / "dual" (DP)
        y = u * normalize(W (v * x))        out_norm=True: "dual_norm" (DNP)

    v (in_scale, width d_in) folds into W's columns and u (out_scale, width
    d_out) into W's rows, so both cost nothing after `fold_()`. Under DNP the
    normalization sits between W and u, so u cannot fold into W: the caller
    gives u its role (model.py folds the up branch's u into the down
    projection; the gate branch's u, which SiLU follows, is output-role).
    With out_norm and no scales it is the bare normalization over d_out (the
    "in_norm" control of DNP). Paper section 3, Theorem 3.1 (DP descends at
    least as fast).

    forward() computes it as it reads (scale the activations); the fast
    path (plumbing/fused.py) scales the weight instead, effective_weight(),
    and does one plain matmul: the same map.

    `optim_group`: optim.py's group for the weight, "matrix" (Muon under
    optimizer="muon"); a subclass may declare another (model.Router). The
    scales keep their own role groups.

    Args: d_in, d_out; in_scale, out_scale: ScaleVector or None;
    out_norm: normalize W's output over d_out (eps required then).
    Shapes: x (..., d_in) -> (..., d_out).
    """

    optim_group = "matrix"

    def __init__(self, d_in, d_out, in_scale=None, out_scale=None, out_norm=False, eps=None):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(d_out, d_in))
        self.in_scale, self.out_scale = in_scale, out_scale
        self.out_norm, self.eps = out_norm, eps
        if out_norm and eps is None:
            raise ValueError("ScaledLinear(out_norm=True) needs eps")

    def forward(self, x):
        y = F.linear(scaled(x, self.in_scale), self.weight)
        if self.out_norm:
            y = normalize(y, self.eps)
        return scaled(y, self.out_scale)

    def effective_weight(self):
        """u[:, None] * W * v[None, :], shape (d_out, d_in): W with its foldable scales multiplied in
        (what fold_() leaves in W; export writes it). u stays out under out_norm (it follows the
        normalization, so it is applied to the activations)."""
        w = self.weight
        if self.in_scale is not None:
            w = w * self.in_scale()[None, :].type_as(w)
        if self.out_scale is not None and not self.out_norm:
            w = self.out_scale()[:, None].type_as(w) * w
        return w

    def folds(self):
        """The folding relation of this map's own scales, as (scale, columns_of, rows_of) triples
        (see fold_scale_): v into W's columns and, unless out_norm, u into W's rows. A caller that
        knows more (model.MLP: DNP's u_up into down's columns) adds its own triples."""
        if self.in_scale is not None:
            yield self.in_scale, [self.weight], []
        if self.out_scale is not None and not self.out_norm:
            yield self.out_scale, [], [self.weight]

    @torch.no_grad()
    def fold_(self):
        """Fold v into W's columns and (unless out_norm) u into W's rows; reset them to 1."""
        fold_all_(self.folds())

    def extra_repr(self):
        d_out, d_in = self.weight.shape
        return f"d_in={d_in}, d_out={d_out}, out_norm={self.out_norm}"


# -----------------------------------------------------------------------------
# Folding (paper Theorem 2.2, claim C2).


def fold_factor(gamma, w, side):
    """gamma shaped to multiply W (d_out, d_in) elementwise, in W's dtype: (1, d_in) for
    side="columns" (W diag(gamma)), (d_out, 1) for side="rows" (diag(gamma) W). The one product
    rule of folding: fold_scale_ applies it in place, the statistics (mechanism.Mechanism) out of place."""
    g = gamma.to(w.dtype)
    return g[None, :] if side == "columns" else g[:, None]


@torch.no_grad()
def fold_scale_(scale, columns_of=(), rows_of=()):
    """Multiply an input-role scale into adjacent linear weights, then reset it to 1.

    W (d_out, d_in) @ (gamma * x) == (W * gamma[None, :]) @ x  -> columns_of
    gamma * (W @ x)              == (gamma[:, None] * W) @ x  -> rows_of
    A scale shared by several maps (the pre-attention scale feeds q, k and v)
    is folded into all of them at once. Does nothing for scale=None.

    Raises ValueError for an output-role scale: it has no exact fold.
    """
    if scale is None:
        return
    if scale.role != "input":
        raise ValueError(f"cannot fold an output-role scale ({scale})")
    gamma = scale().detach().clone()
    for w in columns_of:
        w.mul_(fold_factor(gamma, w, "columns"))
    for w in rows_of:
        w.mul_(fold_factor(gamma, w, "rows"))
    scale.reset_()


@torch.no_grad()
def fold_all_(relation):
    """fold_scale_ each (scale, columns_of, rows_of) triple of a folding relation, in order (a
    module's folds(): the relation is declared once, and folding and the statistics read it)."""
    for scale, columns_of, rows_of in relation:
        fold_scale_(scale, columns_of=columns_of, rows_of=rows_of)
