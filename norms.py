"""Scale vectors and the normalizations around them: every variant, side by side.

Paper: "Negligible in Size, Significant in Effect: On Scale Vectors in Large
Language Models" (arXiv 2605.26895). A *scale vector* gamma is a learnable
per-channel multiplier next to a normalization or a linear map. This file
holds, in the order of the paper:

    1. the normalization x_hat = x / rms(x)            (normalize, RMSNorm)
    2. how gamma is parameterized                      (PlainScale = the baseline
       "vector"; ORScale, ERScale = magnitude-direction reparameterization, C7)
    3. where gamma sits around a linear map            (ScaledLinear: input side
       v, output side u, dual placement DP; DNP adds a normalization, C6;
       branch_linears: the branches that read one input as one matmul;
       dnp_swiglu: DNP's gate and up with SwiGLU, one op that saves little)
    4. folding: an input-role gamma multiplied into    (fold_scale_, C2; the
       its adjacent linear map changes nothing          relation as data: folds())

Branch-specific scales (HG, C5), QK-norm and Gemma-style output norms are
*which* of these pieces model.py puts at each site; `make_scale` is the one
place that turns the config into a scale vector, and `SCALE_CLASSES` the one
table of parameterizations (config value `reparam` -> class).

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

import functools
import math
from typing import Optional

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.autograd.function import once_differentiable

ROLES = ("input", "output")


def rms_norm(x, weight, eps):
    """weight * x / rms(x) over the last dim, computed in float32, returned in x's dtype.

    Args: x (..., d); weight None or of shape (d,), or (n, d) to normalize n branches of x (..., n, d)
    in one call; eps added to the mean square (pass it: F.rms_norm's default depends on the dtype).
    F.rms_norm on CUDA (a fused kernel, forward and backward); on other devices _RMSNormClosedForm,
    the same map with a closed-form backward (first derivatives only; tests/test_norms.py checks both).
    """
    w = None if weight is None else weight.float()
    if not x.is_cuda:
        return _RMSNormClosedForm.apply(x.float(), w, eps).type_as(x)
    if w is not None and w.dim() > 1:  # F.rms_norm's weight must have the normalized shape (d,)
        return (F.rms_norm(x.float(), (x.size(-1),), None, eps) * w).type_as(x)
    return F.rms_norm(x.float(), (x.size(-1),), w, eps).type_as(x)


class _RMSNormClosedForm(torch.autograd.Function):
    """y = x_hat * w with x_hat = x * rstd, rstd = (mean(x^2) + eps)^(-1/2), over the last dim.

    Why: in torch 2.13 F.rms_norm's CPU backward is autograd of a composite, about 4x F.layer_norm's fused
    kernel. The backward is the textbook one (rms_norm_grad), which DNP's op (dnp_swiglu) shares."""

    @staticmethod
    def forward(ctx, x, weight, eps):
        rstd = torch.rsqrt(x.square().mean(-1, keepdim=True) + eps)
        x_hat = x * rstd
        ctx.save_for_backward(x_hat, rstd, weight)
        return x_hat if weight is None else x_hat * weight

    @staticmethod
    @once_differentiable  # the closed form is a first derivative only: refuse a second, never give a wrong one
    def backward(ctx, g):
        x_hat, rstd, weight = ctx.saved_tensors
        dx = rms_norm_grad(g if weight is None else g * weight, x_hat, rstd)
        dweight = None
        if weight is not None and ctx.needs_input_grad[1]:
            dweight = (g * x_hat).sum(dim=tuple(range(g.dim() - weight.dim())))
        return dx, dweight, None


def rms_norm_grad(g, x_hat, rstd):
    """dL/dx of x_hat = x * rstd over the last dim, given g = dL/dx_hat: rstd * (g - x_hat * mean(g * x_hat))
    (LayerNorm's backward without the mean term). Args: g, x_hat (..., d) float32; rstd (..., 1)."""
    return torch.addcmul(g, x_hat, (g * x_hat).mean(-1, keepdim=True), value=-1.0).mul_(rstd)


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
    Subclasses (SCALE_CLASSES' contract, held at start: scale_class_problem): forward() -> gamma (d,), == 1 at init;
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


def scale_class_problem(name):
    """None, or one line naming the fix when SCALE_CLASSES[name] breaks ScaleVector's contract (checked at start:
    model.GPTConfig): its magnitude_name (if any) names one of its parameters, forward() is gamma of shape (d,),
    == 1 at init and again after reset_() from other parameters, and set_, if it has one, gives the gamma it is given."""
    return _class_problem(f"SCALE_CLASSES[{name!r}]", SCALE_CLASSES[name])


@functools.lru_cache(maxsize=None)  # per class: a config is built many times, a class is checked once
def _class_problem(where, cls):
    if not (isinstance(cls, type) and issubclass(cls, ScaleVector)):
        return f"{where} is {cls!r}: make it a norms.ScaleVector subclass"
    if cls.reset_ is ScaleVector.reset_:
        return f"{where} has no reset_(): give it one (folding sets gamma back to 1 through it)"
    with torch.device("cpu"), torch.no_grad():  # real tensors, even while a model is built on the meta device
        sv = cls(3, "input")
        gamma = sv()
        one = isinstance(gamma, torch.Tensor) and tuple(gamma.shape) == (3,) and torch.allclose(gamma.float(), torch.ones(3))
        missed = []  # (method, the gamma it gave, the one it must give)
        for method, target in (("reset_", torch.ones(3)), ("set_", torch.tensor([0.5, 2.0, 1.5]))) if one else ():
            if method == "reset_" or cls.set_ is not ScaleVector.set_:
                for p in sv.parameters():
                    p.add_(0.25)
                getattr(sv, method)(*([target] if method == "set_" else []))
                missed += [] if torch.allclose(sv().float(), target, rtol=1e-5) else [(method, sv().tolist(), target.tolist())]
    names = [n for n, _ in sv.named_parameters()]
    if cls.magnitude_name is not None and cls.magnitude_name not in names:
        return (f"{where}.magnitude_name={cls.magnitude_name!r} is none of its parameters {names}: name the one "
                f"that carries gamma's magnitude, or None")
    if not one:
        return f"{where}'s forward() gives {gamma!r} at init, not gamma == 1 of shape (d,): fix its init or forward()"
    return f"{where}.{missed[0][0]}() gives gamma {missed[0][1]}, not {missed[0][2]}: fix it (folding, --hf_model)" if missed else None


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

    `formula` computes it as it reads (scale the activations). forward() goes
    through branch_linears, which may instead scale the weight, u[:, None] *
    W * v[None, :] (effective_weight), and do one plain matmul: an
    optimization for many tokens, the same map (tests/test_norms.py).

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
        return branch_linears(x, (self,))[0]  # the formula below, computed the cheaper way

    def formula(self, x):
        """y = u * (W (v * x)), or u * normalize(W (v * x)) under out_norm, as it reads."""
        y = F.linear(scaled(x, self.in_scale), self.weight)
        if self.out_norm:
            y = normalize(y, self.eps)
        return scaled(y, self.out_scale)

    def effective_weight(self):
        """u[:, None] * W * v[None, :], shape (d_out, d_in); u stays out under out_norm (it follows
        the normalization, so it is applied to the activations)."""
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


def branch_linears(x, linears, weight_side=None):
    """[lin(x) for lin in linears] for ScaledLinears that read the same x (q, k, v; gate, up): each
    branch's formula, y_i = u_i * (W_i (v_i * x)), or u_i * normalize(W_i (v_i * x)) under out_norm
    (ScaledLinear.formula). That is the map; what runs is the cheaper of two equal computations of it:

      the formula, branch by branch    cost ~ tokens * (d_in + sum d_out): few tokens
      fused_branches (an optimization) cost ~ d_in * sum d_out: many tokens, or under torch.compile
                                       (a batch-size-dependent choice would recompile)

    tests/test_norms.py checks the two equal on every switch (weight_side forces one: True / False;
    None picks the cheaper).
    Args: x (..., d_in); linears: ScaledLinears of equal d_in.
    Returns: tuple of (..., d_out_i) tensors, one per branch.
    """
    if weight_side is None:
        d_in, d_out = linears[0].weight.size(1), sum(lin.weight.size(0) for lin in linears)
        weight_side = torch.compiler.is_compiling() or x.numel() // d_in * (d_in + d_out) > d_in * d_out
    if weight_side and fusable(linears):
        return fused_branches(x, linears)
    return tuple(lin.formula(x) for lin in linears)


def fusable(linears):
    """Whether fused_branches computes these branches: they agree on out_norm, and under out_norm
    (one normalization over all branches at once) on d_out. A placement whose branches differ
    there (a fork's) runs the formula branch by branch: the same map."""
    if len({lin.out_norm for lin in linears}) != 1:
        return False
    return not linears[0].out_norm or len({lin.weight.size(0) for lin in linears}) == 1


def branch_matmul(x, linears):
    """x (..., d_in) times the branches' effective weights, concatenated: (..., sum d_out). Each weight is
    cast to autocast's dtype before the concatenation (not concatenated in float32, then cast)."""
    w, dtype = [lin.effective_weight() for lin in linears], autocast_dtype(x)
    if len(w) > 1 and dtype is not None:
        w = [t.to(dtype) for t in w]
    return F.linear(x, w[0] if len(w) == 1 else torch.cat(w))


def autocast_dtype(x):
    """The dtype autocast gives a matmul on x; None outside autocast, on a device without it, for float64."""
    on = x.dtype != torch.float64 and torch.amp.is_autocast_available(x.device.type)
    return torch.get_autocast_dtype(x.device.type) if on and torch.is_autocast_enabled(x.device.type) else None


def fused_branches(x, linears):
    """An optimization of branch_linears, the same map: the branches' effective weights
    (ScaledLinear.effective_weight: the scales folded into W for this step) concatenated into one
    matmul, and under out_norm (DNP) one normalization over all branches, x (..., n, d_out), with
    the n output scales stacked as its weight (a branch without u contributes ones: x 1 is exact)."""
    d_out = [lin.weight.size(0) for lin in linears]
    y = branch_matmul(x, linears)  # (..., sum d_out)
    if not linears[0].out_norm:
        return y.split(d_out, dim=-1)
    scales = [lin.out_scale for lin in linears]
    u = None if all(s is None for s in scales) else torch.stack(
        [s() if s is not None else torch.ones(d_out[0], device=y.device) for s in scales])  # (n, d_out)
    y = rms_norm(y.view(*y.shape[:-1], len(linears), d_out[0]), u, linears[0].eps)  # (..., n, d_out)
    return y.unbind(-2)


def dnp_swiglu(x, gate, up):
    """SwiGLU's hidden h = silu(u_g * normalize(W_g (v_g * x))) * (u_u * normalize(W_u (v_u * x))) of DNP's
    branches (paper section 3): one matmul, then one op for the normalization over d_ff, u and the product.
    Why an op: autograd of the formula (and torch.compile's partitioner, which inlines an autograd.Function)
    saves the normalized, scaled gate and up beside the matmul output SwiGLU keeps anyway; this op saves
    the matmul output, rstd (2 float32 a token) and u, and its backward recomputes the rest.
    Args: x (..., d_in); gate, up: dnp_fusable. Returns (..., d_ff) in the matmul's dtype, computed in float32."""
    y = branch_matmul(x, (gate, up))
    y = y.view(*y.shape[:-1], 2, gate.weight.size(0))  # (..., 2, d_ff): gate, up
    scales = (gate.out_scale, up.out_scale)
    u = None if scales == (None, None) else torch.stack(
        [s().float() if s is not None else y.new_ones(y.size(-1), dtype=torch.float32) for s in scales])  # (2, d_ff)
    return torch.ops.scalevec.dnp_swiglu(y, u, gate.eps, fused_body())[0]


def dnp_fusable(gate, up):  # whether dnp_swiglu computes silu(gate(x)) * up(x)
    return gate.out_norm and up.out_norm and gate.weight.size(0) == up.weight.size(0)


def _wide(t):  # float32 for bf16; float64 stays (gradcheck)
    return t.to(torch.promote_types(t.dtype, torch.float32))


def _dnp_swiglu_forward(y, u, eps):
    """(h (..., d_ff) in y's dtype, rstd (..., 2) at least float32): dnp_swiglu's forward."""
    yf = _wide(y)
    rstd = torch.rsqrt(yf.square().mean(-1) + eps)  # (..., 2)
    a = yf * rstd[..., None] if u is None else yf * rstd[..., None] * u
    return (F.silu(a[..., 0, :]) * a[..., 1, :]).to(y.dtype), rstd


def fused_body():  # an op's body runs compiled in a model being compiled: it cannot fuse into an op it does not see into
    return torch.compiler.is_compiling()


_compiled_forward = functools.cache(lambda: torch.compile(_dnp_swiglu_forward, dynamic=True))  # once, on first use


@torch.library.custom_op("scalevec::dnp_swiglu", mutates_args=())
def _dnp_swiglu_op(y: torch.Tensor, u: Optional[torch.Tensor], eps: float, fused: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """(h, rstd) of y (..., 2, d_ff), u (2, d_ff) or None (dnp_swiglu); fused: compile the body (fused_body)."""
    return (_compiled_forward() if fused else _dnp_swiglu_forward)(y, u, eps)


@_dnp_swiglu_op.register_fake
def _(y, u, eps, fused):
    return y.new_empty(*y.shape[:-2], y.size(-1)), y.new_empty(y.shape[:-1], dtype=_wide(y).dtype)


def _dnp_swiglu_save(ctx, inputs, output):
    ctx.save_for_backward(inputs[0], inputs[1], output[1])  # all the backward needs: the matmul output y, u, rstd


def dnp_swiglu_backward(ctx, dh, _):
    """dL/dy, dL/du of h = silu(a_g) * a_u, a = u * x_hat, x_hat = y * rstd, from the saved y, u, rstd:
    da_u = dh silu(a_g), da_g = dh a_u sigmoid(a_g) (1 + a_g (1 - sigmoid(a_g))), du = sum over tokens of
    da * x_hat, dy = rms_norm_grad(da * u, x_hat, rstd). First derivatives only: a second is refused."""
    if torch.is_grad_enabled() and not torch.compiler.is_compiling():  # backward(create_graph=True)
        raise RuntimeError("dnp_swiglu has first derivatives only: double backward through DNP is not supported")
    y, u, rstd = ctx.saved_tensors
    x_hat = _wide(y) * rstd[..., None]  # (..., 2, d_ff)
    a = x_hat if u is None else x_hat * u
    a_g, a_u, dh = a[..., 0, :], a[..., 1, :], _wide(dh)
    sig = torch.sigmoid(a_g)
    da = torch.stack([dh * a_u * sig * (1 + a_g * (1 - sig)), dh * a_g * sig], dim=-2)
    du = None if u is None else (da * x_hat).reshape(-1, *u.shape).sum(0)
    dy = rms_norm_grad(da if u is None else da * u, x_hat, rstd[..., None])
    return dy.to(y.dtype), du, None, None


_dnp_swiglu_op.register_autograd(dnp_swiglu_backward, setup_context=_dnp_swiglu_save)


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
