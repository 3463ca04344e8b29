"""Fast paths: the formulas of model.py and norms.py computed faster, the same maps with the same
parameters, swapped into a built model behind one switch (`fused`, on by default; `--fused=False` runs
the formulas alone). As nanoGPT keeps its written-out attention beside `if self.flash:`, each fast path
here sits beside the formula it replaces, and tests/test_fused.py holds it equal to that formula
(logits and every gradient, for every registry entry, eager and compiled).

use(model, device_type) changes the class of each module it recognises to its subclass here (the same
parameters, buffers and state dict; a debugger or a trace then names this file) and returns the line
a run prints at start. What each one changes, and why:

  FusedLinear     norms.ScaledLinear: the scales multiplied into W once a step, u[:, None] * W * v[None, :]
                  (effective_weight, O(d^2)), then one plain matmul. Autograd of the formula keeps v * x
                  (tokens x d_in) for the matmul's backward; this keeps x, which the caller keeps anyway.
  FusedAttention  model.Attention: q and k as one matmul on their effective weights, v as its own, so
                  SDPA keeps the roped q, k and a v with a buffer of its own: no view of one q|k|v buffer
                  keeps that whole buffer alive beside them (2 n_embd values a token and layer).
  FusedMLP        model.MLP: gate and up as one matmul on their effective weights. Under a normalization
                  over d_ff (DNP, in_norm) on CUDA, the normalization, u and SwiGLU's product run under
                  torch.utils.checkpoint: the backward recomputes them from the matmul output, which
                  SwiGLU keeps anyway, where the formula also keeps the normalized, scaled gate and up.
                  Off CUDA memory is not what binds, so they run as written (no recompute).
  FusedRMSNorm    norms.RMSNorm, off CUDA only: a closed-form backward (torch 2.13's F.rms_norm backward
                  on the CPU is autograd of a composite, about 4x F.layer_norm's fused kernel). On CUDA
                  the formula's F.rms_norm is one fused kernel already.

No op registration, no hand-written backward on CUDA, nothing opaque to torch.compile: each fast path is
plain torch code that the compiler sees through. A module of another class (a fork's subclass), or a
placement whose branches these do not cover (gate and up normalized one without the other; a normalized
q, k or v), stays on its formula, and the line says which.
"""

from collections import Counter

import torch
import torch.nn.functional as F
from torch.autograd.function import once_differentiable
from torch.utils.checkpoint import checkpoint

from model import MLP, Attention, apply_rope
from norms import RMSNorm, ScaledLinear, normalize, scaled


def use(model, device_type):
    """Swap the fast paths into `model` in place (module docstring) and return it. device_type ("cuda",
    "cpu", ...) picks the fast paths of that device: on "cuda" DNP's recompute, elsewhere the closed-form
    RMSNorm backward (the count of bytes saved for backward asks for "cuda" on a CPU to count the GPU's
    code path)."""
    for m in model.modules():
        fast = fast_class(m, device_type)
        if fast is not None:
            m.__class__ = fast
            m.on_cuda = device_type == "cuda"
    return model


def summary(model):
    """The line a run prints at start: how many modules of each class run a fast path, and which
    attention and MLP modules stay on their formulas (a placement the fast paths do not cover, or a
    fork's subclass, which keeps its own forward)."""
    fast = Counter(type(m).__bases__[0].__name__ for m in model.modules() if type(m) in FAST)
    if not fast:
        return "fast paths off (--fused=False): norms.py's and model.py's formulas run as written"
    kept = [name for name, m in model.named_modules() if isinstance(m, (Attention, MLP)) and type(m) not in FAST]
    return (f"fast paths (plumbing/fused.py; --fused=False runs the formulas alone): "
            f"{', '.join(f'{n} {name}' for name, n in fast.items())}"
            + (f"; on their formulas (not covered by the fast paths): {', '.join(kept)}" if kept else ""))


def fast_class(m, device_type):
    """The fast-path class for module m, or None: m's class exactly (a fork's subclass keeps its own
    forward), with branches the fast path computes (FusedAttention: no normalized q, k, v; FusedMLP:
    gate and up both normalized over d_ff or neither)."""
    kind = type(m)
    if kind is ScaledLinear:
        return FusedLinear
    if kind is RMSNorm:
        return FusedRMSNorm if device_type != "cuda" else None
    if kind is Attention:
        return FusedAttention if not any(lin.out_norm for lin in (m.q, m.k, m.v)) else None
    if kind is MLP:
        return FusedMLP if m.gate.out_norm == m.up.out_norm else None
    return None


def formulas(model):
    """Undo use(): every module back on its formula, in place (the parameters untouched)."""
    for m in model.modules():
        if type(m) in FAST:
            m.__class__ = type(m).__bases__[0]


# -----------------------------------------------------------------------------


def autocast_dtype(x):
    """The dtype autocast gives a matmul on x; None outside autocast, on a device without it, for float64."""
    on = x.dtype != torch.float64 and torch.amp.is_autocast_available(x.device.type)
    return torch.get_autocast_dtype(x.device.type) if on and torch.is_autocast_enabled(x.device.type) else None


def branch_matmul(x, linears):
    """x (..., d_in) times the branches' effective weights (norms.ScaledLinear.effective_weight)
    concatenated: (..., sum d_out). Each weight is cast to autocast's dtype before the concatenation
    (a float32 concatenation would be twice the bytes, then cast)."""
    w, dtype = [lin.effective_weight() for lin in linears], autocast_dtype(x)
    if len(w) > 1 and dtype is not None:
        w = [t.to(dtype) for t in w]
    return F.linear(x, w[0] if len(w) == 1 else torch.cat(w))


class FusedLinear(ScaledLinear):
    """norms.ScaledLinear with its scales on the weight: u * (W (v * x)) == (u[:, None] * W * v[None, :]) x."""

    def forward(self, x):
        y = branch_matmul(x, (self,))
        return scaled(normalize(y, self.eps), self.out_scale) if self.out_norm else y


class FusedRMSNorm(RMSNorm):
    """norms.RMSNorm with the closed-form backward of _RMSNormClosedForm (off CUDA)."""

    def forward(self, x):
        w = None if self.scale is None else self.scale().float()
        return _RMSNormClosedForm.apply(x.float(), w, self.eps).type_as(x)


class FusedAttention(Attention):
    """model.Attention with q|k as one matmul and v as its own, the scales on the weights."""

    def forward(self, x, cos, sin):
        B, T, C = x.shape
        q, k = branch_matmul(x, (self.q, self.k)).split([self.q.weight.size(0), self.k.weight.size(0)], dim=-1)
        v = branch_matmul(x, (self.v,)).view(B, T, self.n_kv_head, -1)  # (B, T, n_kv, hd), a buffer of its own
        q, k = q.view(B, T, self.n_head, -1), k.view(B, T, self.n_kv_head, -1)
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        return self.attend(apply_rope(q, cos, sin), apply_rope(k, cos, sin), v)


class FusedMLP(MLP):
    """model.MLP with gate|up as one matmul, the scales on the weights; under a normalization over
    d_ff, silu(u_g * normalize(y_g)) * (u_u * normalize(y_u)) recomputed in the backward on CUDA."""

    def forward(self, x):
        gate, up = self.gate, self.up
        y = branch_matmul(x, (gate, up))  # (..., 2 d_ff): gate | up
        if not gate.out_norm:
            g, u = y.split([gate.weight.size(0), up.weight.size(0)], dim=-1)
            return self.down(F.silu(g) * u)
        y = y.view(*y.shape[:-1], 2, gate.weight.size(0))  # (..., 2, d_ff)
        ones = y.new_ones(y.size(-1), dtype=torch.float32)  # a branch without u: x 1 is exact
        u = None if gate.out_scale is None and up.out_scale is None else torch.stack(
            [s() if s is not None else ones for s in (gate.out_scale, up.out_scale)])  # (2, d_ff)
        norm = normalize if self.on_cuda else closed_form_normalize
        if self.on_cuda:
            return self.down(checkpoint(normalized_swiglu, y, u, gate.eps, norm, use_reentrant=False))
        return self.down(normalized_swiglu(y, u, gate.eps, norm))


def normalized_swiglu(y, u, eps, norm):
    """silu(a_gate) * a_up, a = u * norm(y) over d_ff, as the formula computes it (the same casts):
    y (..., 2, d_ff) the gate|up matmul output, u (2, d_ff) or None; returns (..., d_ff)."""
    a = norm(y, eps)
    a = a if u is None else a * u.type_as(a)
    return F.silu(a[..., 0, :]) * a[..., 1, :]


def closed_form_normalize(x, eps):
    """norms.normalize with _RMSNormClosedForm's backward."""
    return _RMSNormClosedForm.apply(x.float(), None, eps).type_as(x)


class _RMSNormClosedForm(torch.autograd.Function):
    """y = x_hat * w with x_hat = x * rstd, rstd = (mean(x^2) + eps)^(-1/2), over the last dim; w (d,) or None.

    The backward is the textbook one: dx = rstd * (g' - x_hat * mean(g' * x_hat)) with g' = g * w
    (LayerNorm's without the mean term); first derivatives only (a second is refused, never wrong)."""

    @staticmethod
    def forward(ctx, x, weight, eps):
        rstd = torch.rsqrt(x.square().mean(-1, keepdim=True) + eps)
        x_hat = x * rstd
        ctx.save_for_backward(x_hat, rstd, weight)
        return x_hat if weight is None else x_hat * weight

    @staticmethod
    @once_differentiable
    def backward(ctx, g):
        x_hat, rstd, weight = ctx.saved_tensors
        gw = g if weight is None else g * weight
        dx = torch.addcmul(gw, x_hat, (gw * x_hat).mean(-1, keepdim=True), value=-1.0).mul_(rstd)
        dweight = None
        if weight is not None and ctx.needs_input_grad[1]:
            dweight = (g * x_hat).sum(dim=tuple(range(g.dim() - weight.dim())))
        return dx, dweight, None


FAST = (FusedLinear, FusedRMSNorm, FusedAttention, FusedMLP)  # each a subclass of the module it replaces
