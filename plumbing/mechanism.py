"""The mechanism statistics: what the scale vectors do to training (paper Theorem 2.2, claim C3),
read from the model and its optimizers at every evaluation, into the eval row's "mechanism" entry.

What each key measures, and what it cannot, is the Mechanism class's docstring; what it reads is
declared beside the code it describes (the folding relation, GPT.folds; the product rule,
norms.fold_factor; the optimizer groups, optim.param_groups), so it adds no rule of its own.
"""

from itertools import islice

import torch

import norms
from configurator import MECHANISM_AUTO_MAX


def mechanism_on(mechanism_stats, n_params):
    """Whether a run of n_params parameters logs the mechanism statistics (mechanism_stats: "on", "off",
    or "auto": on up to MECHANISM_AUTO_MAX parameters, where the copy they need is a few MB)."""
    return mechanism_stats == "on" or (mechanism_stats == "auto" and n_params <= MECHANISM_AUTO_MAX)


def start_mechanism(run, raw_model, optimizers, start):
    """The run's Mechanism, or None when mechanism_on says no; under DDP only rank 0 holds one (it
    writes the log), under FSDP2 every rank (each holds its shards, and the sums are all-reduced).
    Its first interval is the one the checkpoint left open (start.mechanism: a stop between evals, or
    a kill before an eval's row), in either form and under any number of processes (ckpt.dcp keeps
    each rank's shards of it), so a resumed run logs what the uninterrupted one did; else it starts
    at start.iter (a new run, or a checkpoint from before the interval was kept: its first eval row's
    "since" then says where the interval was cut)."""
    on = mechanism_on(run.cfg.mechanism_stats, raw_model.num_params())
    run.log(f"mechanism statistics (claim C3): {'in every eval row' if on else 'off'} "
            f"(mechanism_stats={run.cfg.mechanism_stats!r}" + ("" if on else "; --mechanism_stats=on logs them") + ")")
    if on and (run.master or run.cfg.fsdp):
        return Mechanism(raw_model, optimizers, start.iter, start.mechanism)
    return None


class BatchedGammas:
    """The gammas of a fixed list of scale vectors, computed in a few ops whatever their number.

    Scales of one kind (class, width, parameter shapes and dtypes) are stacked, an op per parameter
    name, and their own forward() runs once over the stack under torch.func.vmap, so no rule of
    norms.py is repeated here and a call costs a few ops per kind, not per scale (the unified model's
    input-role scales are three kinds at any depth). Under FSDP2 each parameter is gathered whole
    first (a collective per parameter, where sv().full_tensor() was one per scale).

    Call: [gamma (d,) of each scale, in the list's order], in the parameters' dtype, no autograd.
    Raises what vmap raises for a forward() it cannot batch (one that reads a value on the host).
    """

    def __init__(self, scales):
        self.scales = list(scales)
        kinds = {}
        for i, sv in enumerate(self.scales):
            kind = (type(sv), sv.dim, tuple((name, t.shape, t.dtype) for name, t in _tensors(sv).items()))
            kinds.setdefault(kind, []).append(i)
        # per kind: a scale of it to run, its scales' positions in the list, {name: [that tensor of each]}
        self.kinds = []
        for at in kinds.values():
            first = self.scales[at[0]]
            self.kinds.append((first, at, {name: [_tensors(self.scales[i])[name] for i in at] for name in _tensors(first)}))

    @torch.no_grad()
    def __call__(self):
        out = [None] * len(self.scales)
        for sv, at, tensors in self.kinds:
            stacked = {name: torch.stack([_full(t) for t in ts]) for name, ts in tensors.items()}
            gammas = torch.func.vmap(lambda ts: torch.func.functional_call(sv, ts, ()))(stacked)
            for i, g in zip(at, gammas.unbind(0)):
                out[i] = g
        return out


def _tensors(sv):
    """A scale vector's parameters and buffers by name: what its forward() reads."""
    return dict(sv.named_parameters()) | dict(sv.named_buffers())


def _local(t):
    """This rank's shard of a parameter FSDP2 sharded (a DTensor), else the tensor itself."""
    return t.to_local() if hasattr(t, "to_local") else t


def _mine(t, p):
    """This rank's part of t, a tensor shaped as parameter p: its shard when t is a DTensor, or when
    p is one and t whole (cut as FSDP2 cut p, with no collective), else t."""
    if hasattr(t, "to_local"):
        return t.to_local()
    if hasattr(p, "to_local"):
        from torch.distributed.tensor import distribute_tensor
        return distribute_tensor(t.to(p.device), p.device_mesh, p.placements, src_data_rank=None).to_local()
    return t


def _full(t):
    """A whole small tensor (a gamma): gathered from its shards under FSDP2 (a collective)."""
    return t.full_tensor() if hasattr(t, "full_tensor") else t


class Mechanism:
    """The scale vectors' mechanism at every eval, per site and per role, read from the model and
    its optimizers as they are (no_grad, no randomness: training is the same bit for bit); the eval
    row's "mechanism" entry, a flat dict of floats (keys below, docs/reference.md).

    The reading (paper Theorem 2.2, claim C3). In a Pre-Norm map y = W diag(gamma) x_hat, gamma adds
    no function (it folds: W~ = W diag(gamma), GPT.folds), but gradient descent on (W, gamma) moves
    the folded column w~_j = gamma_j w_j, to first order in the LR eta, by
        dw~_j = gamma_j dW_j + w_j dgamma_j = -eta (gamma_j^2 I + w_j w_j^T) g_j,   g_j = dL/dw~_j:
    the step a scale-free model (W~ trained directly) would take, -eta g_j, scaled by gamma_j^2 (the
    preconditioner's floor) plus a rank-one term along w_j that comes from gamma's own update. The
    keys below read each part: "gain" (the folded step against the scale-free one on the same
    gradients), "step_matrix" (gamma * dW: the gamma^2 term) and "step_scale" (dgamma * W: the
    rank-one term). With a constant gamma, gain = gamma ||dW|| / ||sum_t eta_t G~_t||: gamma times
    the optimizer's step on W per unit of the scale-free gradient step, and so what it reads depends
    on the optimizer (tests/test_gain.py pins each, gamma frozen at 0.5, 1, 2):
      plain SGD: dW = -eta gamma G~, so gain is gamma^2 (0.25, 1, 4), whatever the loss's scale:
          Theorem 2.2's preconditioner;
      AdamW: each entry's step is normalized by its own second moment (about lr per entry), Muon: the
          matrix's step is orthogonalized as a whole (its size set by the LR and the matrix's shape):
          neither grows with the gradient, so dW does not carry gamma, and gain reads gamma times the
          optimizer's step per unit of gradient: proportional to gamma, not gamma^2, and to 1 / the
          gradients' scale (the same run with the loss x10 reads gain / 10). Decoupled weight decay
          adds -lr wd W~ to the folded step, a part that does not scale with gamma at all.
    So under AdamW or Muon gain compares runs, sites or variants only where their gradients dL/dW~
    have the same scale; where they differ (one site against another, or variants whose scale vectors
    change the gradients) a difference in gain mixes gamma with the gradients it acts on, and it never
    compares across optimizers. No statistic free of the gradients' scale is logged for it: with a
    constant gamma, gain over the optimizer's step per unit of raw gradient, ||dW|| / ||eta dL/dW||,
    is gamma^2 again, which g2_mean (and g2_min, the floor) already read. step_matrix and step_scale
    keep their meaning (each part's size relative to ||W~||) under every optimizer.
    "move_ratio" compares the folded map's relative motion with its own matrix's: 1 for any constant
    gamma (a fixed gamma scales both alike), so it measures gamma's change over the interval, not the
    preconditioner.

    Point-in-time keys, every eval:
      "<site>/g2_min", "<site>/g2_mean"  min_j and mean_j of gamma_j^2 over the site's channels: the
          preconditioner's floor and its mean (for an output-role site, which has no W to fold into,
          only gamma's statistics); "<site>/spread" max_j |gamma_j| / min_j |gamma_j| (None if a
          gamma_j is 0). <site> is the scale vector's module name, as in the row's "scales".
      "gamma/<role>/rms", "gamma/<role>/drift"  over every effective gamma of the role ("input",
          "output" as the scale holds it now) together: sqrt(mean gamma^2) and sqrt(mean (gamma - 1)^2),
          the drift from gamma == 1, every scale's init (a Hugging Face start begins elsewhere). They
          are gamma's state, whatever moves it: weight decay (paper section 4, claim C4: IWD decays the
          input role) pulls the rms toward 0, and the gradients move it with no decay at all.
    Interval keys, over the steps since the last eval (s, logged as "since"; a resume continues the
    interval its checkpoint kept, so it logs what an uninterrupted run does, a ckpt.dcp's too; one that
    kept none starts at the resumed step, s), absent when no step was taken:
      per input-role site, W the matrices its scale folds into (columns or rows, as folds() says)
          stacked, W~ the same with only this site's gamma multiplied in (norms.fold_factor), so each
          site's keys isolate its own scale; every norm is Frobenius, dX = X_t - X_s:
      "<site>/move_folded" ||dW~|| / ||W~_s||, "<site>/move_plain" ||dW|| / ||W_s||, "<site>/move_ratio"
          their ratio (None if move_plain is 0): 1 for a constant gamma (see above).
      "<site>/step_matrix" ||gamma_s * dW|| / ||W~_s|| and "<site>/step_scale" ||dgamma * W_s|| / ||W~_s||:
          the two first-order parts of dW~ (their cross term dgamma * dW is second order).
      "<site>/gain" ||dW~|| / ||sum_t eta_t G~_t||: the folded map's step against the step plain
          gradient descent on W~ itself would take with the same LRs (the matrix group's) and the same
          gradients G~_t = dL/dW~ at each step t (record_step reads them before the optimizer steps,
          after clipping); None when no step was recorded.
      "update/<group>" ||theta_t - theta_s|| / ||theta_s|| per optimizer group (optim.param_groups'
          names) over the group's parameters the copy holds, "held/<group>" that share of the
          group's parameters (1 for the scale, magnitude and router groups; the matrices the
          input-role scales fold into for "matrix"; the embedding is not held). The interval form
          serves every optimizer (Muon's update cannot be read back from its state).

    Memory: a copy of those matrices and of every scale parameter, and the scale-free step's sum per
    site and matrix, about 31% of the float32 training state (weights, gradients, AdamW moments) of
    the unified model at 124M (q, k, v, gate, up and, under DNP, down: 78M of 124M parameters, 594 MiB
    in all); mechanism_stats="auto" takes them only up to MECHANISM_AUTO_MAX parameters.
    Time: record_step dispatches a fixed few dozen ops per step whatever the model's depth (the
    gammas and their inverses batched, one foreach product per batch of matrices), row() one
    transfer to the host.
    Under FSDP2 the copy is of each rank's shards; the squared sums are all-reduced (never a
    matrix's full_tensor), and only the scales' parameters (d entries each) are gathered. Every rank calls row().
    """

    def __init__(self, model, optimizers, step, saved=None):
        site = {id(sv): name for name, sv in model.scale_vectors()}
        self.model = model
        self.relation = [(site[id(sv)], sv, cols, rows) for sv, cols, rows in model.folds() if sv.role == "input"]
        self.groups = [(g["name"], g["params"]) for opt in optimizers for g in opt.param_groups]
        held = [w for _, _, cols, rows in self.relation for w in (*cols, *rows)]
        held += [p for _, sv in model.scale_vectors() for p in sv.parameters()]
        self.held = {id(p): p for p in held}
        self.sharded = any(hasattr(p, "to_local") for p in model.parameters())
        self.device = next(model.parameters()).device
        self.names = {id(p): name for name, p in model.named_parameters()}
        self.group_of = {id(p): g for opt in optimizers for g in opt.param_groups for p in g["params"]}
        self.pairs = [(name, w, side) for name, _, cols, rows in self.relation
                      for w, side in [(w, "columns") for w in cols] + [(w, "rows") for w in rows]]
        # record_step runs every step: its work is batched once here, so that it dispatches a fixed
        # number of ops whatever the number of sites (one op per site and matrix cost 42% of a 124M step)
        self.site_gammas = BatchedGammas([sv for _, sv, _, _ in self.relation])
        self.all_gammas = BatchedGammas([sv for _, sv in model.scale_vectors()])
        self.batches = self._pair_batches()
        tensors = self._saved_tensors(saved, step)
        if tensors is not None:  # the checkpoint's open interval, continued: the row is the uninterrupted run's
            self.since, self.gamma = saved["since"], {k: v.to(self.device) for k, v in saved["gamma"].items()}
            self.copy = {k: tensors[0][self.names[k]] for k in self.held}
            self.sgd = {self._key(name, w): tensors[1][self._key(name, w)] for name, w, _ in self.pairs}
            self.steps = saved.get("steps", 0)
        else:
            self.take(step)

    def _saved_tensors(self, saved, step):
        """(copy, sgd) of a checkpoint's open interval (Mechanism.state), keyed by name, as this rank
        holds them (its shards under FSDP2, else whole), or None when it has none that fits (another
        model's, or one that starts after `step`: a new interval starts). A ckpt.pt holds them whole
        (each rank takes its shards); a ckpt.dcp's ("dcp": its path) are read from the folder, resharded
        for any number of processes (checkpoint.read_sharded_entries; UserError for a damaged one)."""
        if saved is None or saved["since"] > step:
            return None
        names = {self.names[k]: p for k, p in self.held.items()}
        keys = {self._key(name, w): w for name, w, _ in self.pairs}
        if "dcp" in saved:  # every FSDP2 rank calls this: the read is a collective there
            from plumbing.checkpoint import read_sharded_entries
            copy = {name: torch.empty_like(p.detach()) for name, p in names.items()}  # (DTensors: this rank's shards)
            sgd = {key: torch.zeros_like(w.detach(), dtype=torch.float32) for key, w in keys.items()}
            read_sharded_entries(saved["dcp"], {"mechanism": {"copy": copy, "sgd": sgd}}, self.sharded)
        else:
            copy, sgd = saved["copy"], saved.get("sgd", {})
            if set(copy) != set(names) or set(sgd) != set(keys) or \
                    any(copy[name].shape != p.shape for name, p in names.items()):
                return None
        return ({name: _mine(t, names[name]).to(self.device) for name, t in copy.items()},
                {key: _mine(t, keys[key]).to(self.device) for key, t in sgd.items()})

    def _key(self, site, w):
        return f"{site}|{self.names[id(w)]}"

    @torch.no_grad()
    def take(self, step):
        """Copy the held parameters (this rank's shards) and the relation's gammas at `step`: the next
        interval starts there (train.eval_and_save calls it once the eval row is written)."""
        self.since, self.steps = step, 0
        self.copy = {k: _local(p).detach().clone() for k, p in self.held.items()}
        self.gamma = {name: g.double().clone() for (name, *_), g in zip(self.relation, self.site_gammas())}
        self.sgd = {self._key(name, w): torch.zeros_like(_local(w), dtype=torch.float32) for name, w, _ in self.pairs}

    def _pair_batches(self):
        """The pairs grouped for record_step's foreach ops: one batch per optimizer group (its LR is
        one scalar), side and length of the gamma entries a matrix meets, each a tuple (group, the
        matrices, their sums' keys, index (n, length) of those entries in the sites' gammas
        concatenated, the shape that stands each pair's entries along its side: (n, 1, length) for
        columns, (n, length, 1) for rows)."""
        entries, at = {}, 0  # the positions of each site's gamma in the concatenation
        for name, sv, _, _ in self.relation:
            entries[name], at = torch.arange(at, at + sv.dim), at + sv.dim
        batches = {}
        for name, w, side in self.pairs:
            index = self._part(entries[name], _local(w), side)  # (as _part picks gamma's entries)
            group = self.group_of[id(w)]
            batch = batches.setdefault((id(group), side, index.numel()), (group, side, [], [], []))
            batch[2].append(w)
            batch[3].append(self._key(name, w))
            batch[4].append(index)
        out = []
        for group, side, ws, keys, index in batches.values():
            n, length = len(index), index[0].numel()
            out.append((group, ws, keys, torch.stack(index).to(self.device),
                        (n, 1, length) if side == "columns" else (n, length, 1)))
        return out

    @torch.no_grad()
    def record_step(self):
        """Add this step's scale-free gradient step, eta * dL/dW~, to each site's sum ("gain"): call it
        after the backward (and clipping), before the optimizers step. dL/dW~ = dL/dW / gamma (W~ = W
        with gamma multiplied in, so dL/dW = dL/dW~ * gamma); a channel whose gamma is 0 adds nothing,
        a matrix without a gradient neither. A fixed number of ops whatever the model's depth: every
        site's 1 / gamma at once, then one foreach product per batch of pairs (_pair_batches).
        Under FSDP2 each rank adds its shards (every rank calls it)."""
        if not self.batches:  # (no input-role site)
            self.steps += 1
            return
        g = torch.cat(self.site_gammas()).float()
        inverse = torch.where(g != 0, 1 / torch.where(g != 0, g, 1), 0)
        for group, ws, keys, index, shape in self.batches:
            factors = inverse[index].view(shape).unbind(0)  # each pair's 1 / gamma, shaped as fold_factor's
            have = [i for i, w in enumerate(ws) if w.grad is not None]
            if have:
                torch._foreach_addcmul_([self.sgd[keys[i]] for i in have], [_local(ws[i].grad) for i in have],
                                        [factors[i] for i in have], value=group["lr"])
        self.steps += 1

    def state(self):
        """The open interval's start for a checkpoint, keyed by parameter and site name: {"since",
        "copy", "gamma", "sgd", "steps"}; under FSDP2 copy's and sgd's tensors are DTensors of this
        rank's shards (laid out as their parameters), which ckpt.dcp saves as it saves the weights."""
        copy = {self.names[k]: _as_param(t, self.held[k]) for k, t in self.copy.items()}
        sgd = {self._key(name, w): _as_param(self.sgd[self._key(name, w)], w) for name, w, _ in self.pairs}
        return {"since": self.since, "copy": copy, "gamma": dict(self.gamma), "sgd": sgd, "steps": self.steps}

    @torch.no_grad()
    def row(self, step):
        """The "mechanism" entry of the eval row at `step` (see the class docstring); the interval
        stays open until take(step). Every statistic is reduced on the device and read to the host
        at once (one transfer per row: a read per scalar would wait on the device each time)."""
        scales = list(self.model.scale_vectors())  # (name, scale), in all_gammas' order; the roles as they are now
        gammas = {name: g.double() for (name, _), g in zip(scales, self.all_gammas())}
        point = [s for g in gammas.values() for s in (g.square().min(), g.square().mean(), g.abs().min(), g.abs().max())]
        roles = [role for role in norms.ROLES if any(sv.role == role for _, sv in scales)]
        for role in roles:
            g = torch.cat([gammas[name] for name, sv in scales if sv.role == role])
            point += [g.square().mean().sqrt(), (g - 1).square().mean().sqrt()]
        reads = [torch.stack(point)] if point else []
        if step > self.since:
            reads.append(self._interval_norms(gammas))
        values = iter(torch.cat(reads).tolist() if reads else [])
        out = {}
        for name in gammas:
            g2_min, g2_mean, low, high = islice(values, 4)
            out |= {f"{name}/g2_min": g2_min, f"{name}/g2_mean": g2_mean, f"{name}/spread": high / low if low > 0 else None}
        for role in roles:
            rms, drift = islice(values, 2)
            out |= {f"gamma/{role}/rms": rms, f"gamma/{role}/drift": drift}
        if step > self.since:
            out |= {"since": self.since, **self._interval_keys(list(values))}
        return out

    def _interval_norms(self, gammas):
        """The interval's norms, a float64 vector on the device (the square roots of every squared sum,
        summed over the ranks under FSDP2: one all-reduce); _interval_keys reads them."""
        # per site [||dW~||^2, ||W~_s||^2, ||dW||^2, ||W_s||^2, ||gamma_s dW||^2, ||dgamma W_s||^2, ||sum eta G~||^2];
        # per group [||dtheta||^2, ||theta_s||^2]
        per_site = {name: torch.zeros(SITE_SUMS, dtype=torch.float64, device=self.device) for name, *_ in self.relation}
        for name, w, side in self.pairs:  # in float64: an interval's step is a small difference of large weights
            now, then = _local(w).double(), self.copy[id(w)].double()
            g_now = norms.fold_factor(self._part(gammas[name], now, side), now, side)
            g_then = norms.fold_factor(self._part(self.gamma[name], then, side), then, side)
            per_site[name] += torch.stack([_sq(now * g_now - then * g_then), _sq(then * g_then), _sq(now - then), _sq(then),
                                           _sq(g_then * (now - then)), _sq((g_now - g_then) * then),
                                           _sq(self.sgd[self._key(name, w)])])
        sums = list(per_site.values())
        for _, params in self.groups:
            acc = torch.zeros(2, dtype=torch.float64, device=self.device)
            for p in params:
                if id(p) in self.held:
                    acc += torch.stack([_sq(_local(p) - self.copy[id(p)]), _sq(self.copy[id(p)])])
            sums.append(acc)
        flat = torch.cat(sums) if sums else torch.zeros(0, dtype=torch.float64, device=self.device)
        if self.sharded:
            torch.distributed.all_reduce(flat)
        return flat.sqrt()

    def _interval_keys(self, values):
        """The interval keys from _interval_norms' values (a list of floats): the ratios."""
        out = {}
        for i, (name, _, _, _) in enumerate(self.relation):
            d_folded, folded, d_plain, plain, by_matrix, by_scale, scale_free = values[SITE_SUMS * i: SITE_SUMS * (i + 1)]
            a, b = _ratio(d_folded, folded), _ratio(d_plain, plain)
            out |= {f"{name}/move_folded": a, f"{name}/move_plain": b,
                    f"{name}/move_ratio": _ratio(a, b) if a is not None and b is not None else None,
                    f"{name}/step_matrix": _ratio(by_matrix, folded), f"{name}/step_scale": _ratio(by_scale, folded),
                    f"{name}/gain": _ratio(d_folded, scale_free) if self.steps else None}
        base = SITE_SUMS * len(self.relation)
        for i, (group, params) in enumerate(self.groups):
            d, norm = values[base + 2 * i: base + 2 * i + 2]
            held = sum(p.numel() for p in params if id(p) in self.held)
            if held:
                out |= {f"update/{group}": _ratio(d, norm), f"held/{group}": held / sum(p.numel() for p in params)}
        return out

    @staticmethod
    def _part(gamma, w, side):
        """The entries of a whole gamma that meet this rank's rows of W (FSDP2 shards dim 0 as
        torch.chunk does): all of it for columns, this rank's chunk for rows."""
        if side == "columns" or gamma.numel() == w.size(0):
            return gamma
        chunks = gamma.chunk(torch.distributed.get_world_size())
        rank = torch.distributed.get_rank()
        part = chunks[rank] if rank < len(chunks) else gamma[:0]
        assert part.numel() == w.size(0), (gamma.shape, w.shape)
        return part


SITE_SUMS = 7  # squared norms per input-role site (Mechanism.interval)

# The per-site interval statistics an ablation file's mechanism_question may register as its scalar
# (research/stats.py mechanism_scalar: the mean over the run's input-role sites and its intervals).
SITE_STATISTICS = {
    "gain": "the folded map's step over the scale-free gradient step (gamma^2 under SGD, constant gamma; under "
            "AdamW or Muon gamma times the optimizer's step per unit of gradient, so 1 / the gradients' scale)",
    "step_matrix": "||gamma dW|| / ||W~||, the gamma^2 term of the folded step",
    "step_scale": "||dgamma W|| / ||W~||, the rank-one term of the folded step",
    "move_ratio": "the folded map's relative motion over its matrix's (1 for any constant gamma: gamma's change)",
}


def renamed_mechanism(flat):
    """A flat mechanism dict (an eval row's, a record's "final" or "mean") with every key under its
    current name (renamed_key)."""
    return {renamed_key(k): v for k, v in flat.items()}

# Keys an earlier version logged under other names (the committed records keep theirs): readers of a
# record or a log map them with renamed_key, so one name means one statistic everywhere.
RENAMED = {"/amp_folded": "/move_folded", "/amp_plain": "/move_plain", "/amp_ratio": "/move_ratio", "wd/": "gamma/"}


def renamed_key(key):
    """key under its current name (RENAMED), e.g. "wd/input/rms" -> "gamma/input/rms"."""
    for old, new in RENAMED.items():
        if old in key:
            return key.replace(old, new, 1)
    return key


def _as_param(t, p):
    """t, this rank's part of a tensor shaped as parameter p, as a DTensor laid out as p when p is one
    (no collective), else t."""
    if not hasattr(p, "to_local"):
        return t
    from torch.distributed.tensor import DTensor
    return DTensor.from_local(t, p.device_mesh, p.placements, shape=p.shape, stride=p.stride())


def _sq(t):
    """||t||_F^2, accumulated in float64."""
    return t.square().sum(dtype=torch.float64)


def _ratio(a, b):
    return a / b if b > 0 else None
