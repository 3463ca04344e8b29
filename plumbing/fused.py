"""Fast paths: the formulas of model.py and norms.py computed faster, the same maps with the same
parameters, swapped into a built model behind one switch (`fused`, on by default; `--fused=False` runs
the formulas alone). As nanoGPT keeps its written-out attention beside `if self.flash:`, each fast path
here sits beside the formula it replaces, and tests/test_fused.py holds it equal to that formula
(logits and every gradient, for every registry entry, eager and compiled).

use(model, device_type) changes the class of each module it recognises to its subclass here (the same
parameters, buffers and state dict; a debugger or a trace then names this file), and summary(model)
gives the line a run prints at start. What each one changes, and why:

  FusedLinear     norms.ScaledLinear: the scales multiplied into W once a step, u[:, None] * W * v[None, :]
                  (effective_weight, O(d^2)), then one plain matmul. Autograd of the formula keeps v * x
                  (tokens x d_in) for the matmul's backward; this keeps x, which the caller keeps anyway.
                  Attention's q, k and v stay three matmuls, so v has a buffer of its own: SDPA keeps the
                  roped q, k and v, and no view of a q|k|v buffer keeps that buffer alive beside them.
  FusedMLP        model.MLP, every placement whose gate and up are normalized alike (both: DNP, in_norm;
                  neither: the baseline, DP), dense or an MoE expert: on CUDA SwiGLU's product (and under
                  DNP the normalization and u before it) runs under torch.utils.checkpoint, so the backward
                  recomputes it from the two matmul outputs, which SiLU's and the product's backward need
                  anyway. The down projection's input, silu(gate) * up (2 d_ff bytes a token in bf16), is
                  then not kept (the formula also keeps DNP's normalized, scaled gate and up). Off CUDA
                  memory is not what binds: no recompute, and the normalization's closed-form backward.
  FusedGPT        model.GPT whose loss, while gradients are taken, is torch's chunked F.linear_cross_entropy
                  (torch >= 2.13; the formula where torch lacks it or the logits, vocab_size wide, are no
                  wider than the head's input, where torch's docs find chunking no gain): the (tokens x
                  vocab) logits are never materialized; the backward keeps (tokens x n_embd) where the
                  formula keeps the logits (the largest tensor of a GPT-2-sized step). In float32 the op
                  computes each chunk's gradients in the forward; in bf16 its scalar loss would be a bf16
                  number, so the tokens' losses are averaged in float32 and the backward recomputes each
                  chunk's logits (one more head-sized matmul a step). No logits are returned then (None, as Liger's fused
                  loss returns none in training); without gradients (evals, sampling) the formula runs.
  FusedRMSNorm    norms.RMSNorm, off CUDA only: a closed-form backward (torch 2.13's F.rms_norm backward
                  on the CPU is autograd of a composite, about 4x F.layer_norm's fused kernel). On CUDA
                  the formula's F.rms_norm is one fused kernel already.

No op registration, no hand-written backward on CUDA, no concatenated weights: each fast path but the
head is plain torch code torch.compile sees through; the head is torch's own op (one opaque call a
forward, no graph break). Attention runs its formula's forward over fused linears. A module of another
class (a fork's subclass) keeps its own forward, and an MLP whose gate and up are normalized one
without the other runs MLP.forward; the start line names both.
"""

from collections import Counter

import torch
import torch.nn.functional as F
from torch.autograd.function import once_differentiable
from torch.utils.checkpoint import checkpoint

from model import GPT, MLP, Attention
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
    attention and MLP modules run a forward the fast paths do not know: a fork's subclass (its own),
    or an MLP whose gate and up are normalized one without the other (MLP.forward, over fused linears)."""
    fast = Counter(type(m).__bases__[0].__name__ for m in model.modules() if type(m) in FAST
                   and (type(m) is not FusedGPT or chunked_head(m.config.vocab_size, m.config.n_embd)))
    if "GPT" in fast:
        fast["GPT"] = "chunked head of"
    if not any(type(m) in FAST for m in model.modules()):
        return "fast paths off (--fused=False): norms.py's and model.py's formulas run as written"
    kept = [name for name, m in model.named_modules() if isinstance(m, (Attention, MLP)) and type(m) not in FAST
            and (type(m) not in (Attention, MLP) or isinstance(m, MLP) and m.gate.out_norm != m.up.out_norm)]
    return (f"fast paths (plumbing/fused.py; --fused=False runs the formulas alone): "
            f"{', '.join(f'{n} {name}' for name, n in fast.items())}"
            + (f"; on their formulas (not covered by the fast paths): {', '.join(kept)}" if kept else ""))


def fast_class(m, device_type):
    """The fast-path class for module m, or None: m's class exactly (a fork's subclass keeps its own
    forward); FusedMLP where gate and up are normalized over d_ff alike (both or neither)."""
    kind = type(m)
    if kind is ScaledLinear:
        return FusedLinear
    if kind is RMSNorm:
        return FusedRMSNorm if device_type != "cuda" else None
    if kind is MLP:
        return FusedMLP if m.gate.out_norm == m.up.out_norm else None
    if kind is GPT:
        return FusedGPT
    return None


def formulas(model):
    """Undo use(): every module back on its formula, in place (the parameters untouched)."""
    for m in model.modules():
        if type(m) in FAST:
            m.__class__ = type(m).__bases__[0]


# -----------------------------------------------------------------------------


class FusedLinear(ScaledLinear):
    """norms.ScaledLinear with its scales on the weight: u * (W (v * x)) == (u[:, None] * W * v[None, :]) x."""

    def forward(self, x):
        y = F.linear(x, self.effective_weight())
        return scaled(normalize(y, self.eps), self.out_scale) if self.out_norm else y


class FusedGPT(GPT):
    """model.GPT whose loss under gradients is F.linear_cross_entropy, chunked over the tokens (module
    docstring); the same map, the padded vocab entries cut off as the formula's slice does."""

    def logits_and_loss(self, x, targets):
        V = self.config.vocab_size
        if not (torch.is_grad_enabled() and chunked_head(V, x.size(-1))):
            return super().logits_and_loss(x, targets)
        w = self.lm_head.weight[:V]
        if torch.is_autocast_enabled(x.device.type):  # the formula's linear runs in the autocast dtype; this op does not cast
            dtype = torch.get_autocast_dtype(x.device.type)
            x, w = x.to(dtype), w.to(dtype)
        x, targets = x.reshape(-1, x.size(-1)), targets.reshape(-1)
        if x.dtype == torch.float32:  # one pass: the loss and its gradients computed in the forward
            # under torch.compile torch forces allow_retain_graph on (with a warning): asked for there, not in eager
            options = torch.nn.LinearCrossEntropyOptions(allow_retain_graph=torch.compiler.is_compiling())
            return None, F.linear_cross_entropy(x, w, targets, ignore_index=-1, options=options)
        # in bf16 the op's mean is a bf16 number (0.008 nats off at 3.35): each token's loss (the op's
        # accumulation is float32), their mean in float32, as the formula's; the backward recomputes each chunk
        per_token = F.linear_cross_entropy(x, w, targets, ignore_index=-1, reduction="none",
                                           options=torch.nn.LinearCrossEntropyOptions())
        return None, per_token.float().sum() / (targets != -1).sum()


def chunked_head(vocab_size, n_embd):
    """Whether FusedGPT's head runs torch's chunked loss: torch has it (2.13 on), and the logits are wider
    than the head's input (torch's docs: below that the reference path is cheaper, and the logits keep no
    more than the input does)."""
    return hasattr(F, "linear_cross_entropy") and hasattr(torch.nn, "LinearCrossEntropyOptions") and vocab_size > n_embd


class FusedRMSNorm(RMSNorm):
    """norms.RMSNorm with the closed-form backward of _RMSNormClosedForm (off CUDA)."""

    def forward(self, x):
        w = None if self.scale is None else self.scale().float()
        return _RMSNormClosedForm.apply(x.float(), w, self.eps).type_as(x)


class FusedMLP(MLP):
    """model.MLP with gate and up normalized alike, their scales on the weights: silu(g) * up with
    g, up = W x (scales folded in), or under DNP silu(u_g * normalize(y_g)) * (u_u * normalize(y_u));
    on CUDA the product (and DNP's normalization) is recomputed in the backward."""

    def forward(self, x):
        gate, up = self.gate, self.up
        y_gate, y_up = F.linear(x, gate.effective_weight()), F.linear(x, up.effective_weight())  # (..., d_ff)
        # a u after the normalization stays on the activations; without one, effective_weight holds it
        scales = [None if s is None or not gate.out_norm else s() for s in (gate.out_scale, up.out_scale)]
        norm = (normalize if self.on_cuda else closed_form_normalize) if gate.out_norm else None
        if self.on_cuda:
            return self.down(checkpoint(swiglu, y_gate, y_up, *scales, gate.eps, norm, use_reentrant=False))
        return self.down(swiglu(y_gate, y_up, *scales, gate.eps, norm))


def swiglu(y_gate, y_up, u_gate, u_up, eps, norm):
    """SwiGLU's product of the two matmul outputs y_gate, y_up (..., d_ff), as the formula computes it (the
    same casts): silu(y_gate) * y_up, or with a normalization `norm` over d_ff (DNP, in_norm)
    silu(u_gate * norm(y_gate)) * (u_up * norm(y_up)); u_gate, u_up (d_ff,) or None."""
    if norm is None:
        return F.silu(y_gate) * y_up
    return F.silu(scaled_by(norm(y_gate, eps), u_gate)) * scaled_by(norm(y_up, eps), u_up)


def scaled_by(a, u):
    """a * u along the last dim, u cast to a's dtype (norms.scaled, given gamma itself); a for u None."""
    return a if u is None else a * u.type_as(a)


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


FAST = (FusedLinear, FusedRMSNorm, FusedMLP, FusedGPT)  # each a subclass of the module it replaces
