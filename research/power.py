"""The power of a GPU plan before it runs, beyond stats.py's formulas: its designs simulated with
fixed seeds, and the gaps its rows must detect.

    pilot_design     the pilot rule (research/ablation.py pilot_rule) and the tables' test simulated
                     together: expected seeds, how often each claim row becomes a finding
    ladder_gaps      the gap a constant compute multiplier makes at each rung of L(C) = E + A C^-a
    rung_compute     a run config's training FLOPs, estimated without building its model
    ladder_design    stats.ladder_multiplier itself over simulated ladders: how often it rejects
    cheapest_seeds   the fewest GPU-hours of added seeds that bring a ladder to a power

research/ladder.py prints what these give for a file (`python -m research.ladder FILE`);
tests/test_power.py checks them against the formulas and against the pilot rule run seed by seed.
"""

import math

import numpy as np

from plumbing.memory import estimate_size
from research.stats import ladder_multiplier, ladder_power, t_cdf_two_sided, t_test_power

SIMULATIONS = 40_000  # designs per simulated case: a Monte Carlo SE of 0.0025 at a power of 0.5, 0.0006 at 0.015


def effect_thresholds(alpha, power, most):
    """{n: the smallest effect size gap / sd at which n seeds' paired t test at level alpha reaches
    `power`} for n = 2..most (math.inf past 50): seeds_for_power(gap, sd) is the smallest n whose
    threshold gap / sd reaches. Bisection on stats.t_test_power to 1e-9 relative."""
    out = {}
    for n in range(2, most + 1):
        lo, hi = 0.0, 50.0
        if t_test_power(hi * math.sqrt(n), n - 1, alpha) < power:
            out[n] = math.inf
            continue
        while hi - lo > 1e-9 * hi:
            mid = (lo + hi) / 2
            lo, hi = (lo, mid) if t_test_power(mid * math.sqrt(n), n - 1, alpha) >= power else (mid, hi)
        out[n] = hi
    return out


def arm_means(rows, gaps):
    """{arm: mean final loss} with every row's mean difference variant - reference equal to its gap
    (signed), the first row's reference at 0: least squares over the rows; ValueError when the gaps
    contradict each other (rows a - b, b - c and a - c whose gaps do not add up)."""
    arms = list(dict.fromkeys(a for row in rows for a in row))
    m = np.zeros((len(rows) + 1, len(arms)))
    for i, (v, r) in enumerate(rows):
        m[i, arms.index(v)], m[i, arms.index(r)] = 1.0, -1.0
    m[-1, arms.index(rows[0][1])] = 1.0  # pins the reference's level (differences leave it free)
    target = np.array([*gaps, 0.0])
    means = np.linalg.lstsq(m, target, rcond=None)[0]
    if np.abs(m @ means - target).max() > 1e-12:
        raise ValueError(f"row gaps {list(gaps)} of rows {rows} contradict each other")
    return dict(zip(arms, means.tolist()))


def paired_p_values(diffs, n):
    """Two-sided paired t test p values (stats.paired_t_p) of each simulated design's first n[i]
    seeds. diffs: (sims, most, rows) paired differences; n: (sims,) seeds used. Returns (means,
    p), each (sims, rows)."""
    used = (np.arange(diffs.shape[1])[None, :] < n[:, None])[:, :, None]  # (sims, most, 1)
    means = (diffs * used).sum(1) / n[:, None]
    var = (((diffs - means[:, None, :]) ** 2) * used).sum(1) / (n[:, None] - 1)
    t = np.abs(means) / np.sqrt(np.maximum(var, 1e-300) / n[:, None])
    p = np.empty_like(t)
    for k in np.unique(n):  # exact integer-df t distribution, one df at a time
        cdf = np.frompyfunc(lambda x, df=int(k) - 1: t_cdf_two_sided(x, df), 1, 1)
        p[n == k] = 1.0 - cdf(t[n == k]).astype(np.float64)
    return means, np.maximum(p, 0.0)


def bh_rows(p):
    """Benjamini-Hochberg adjusted p (stats.bh_adjust) of each simulated design's rows: p (sims, rows)."""
    order = np.argsort(p, axis=1)
    m = p.shape[1]
    ranked = np.take_along_axis(p, order, 1) * m / np.arange(1, m + 1)
    ranked = np.minimum(np.minimum.accumulate(ranked[:, ::-1], axis=1)[:, ::-1], 1.0)
    out = np.empty_like(p)
    np.put_along_axis(out, order, ranked, 1)
    return out


def pilot_design(rows, gaps, sd, alpha, power, pilot, most, rule_gap, sims=SIMULATIONS, seed=0, q=0.05):
    """Simulates one setting of a file's design: the pilot rule, then the paired t test of every
    claim row over the seeds it planned, BH over the rows.

    rows: [(variant, reference, direction)] the claim rows ('lower': the claim is variant < reference);
    gaps: each row's true mean difference, in the claim's direction (> 0) or 0 (no effect); sd: the
    paired SD of every row (each arm's final loss its mean plus normal noise of SD sd / sqrt(2), its
    own per seed and arm: a seed's shift common to every arm cancels in a paired difference, and two
    rows that share an arm correlate 0.5). pilot: k seeds first, then n = the fewest seeds from 2 to
    `most` whose paired test at level alpha reaches `power` at rule_gap and at the largest SD of the
    rows over the k (ablation.pilot_rule), at least k, `most` when none does; pilot = 0: a fixed
    design of `most` seeds. The seeds of the pilot are the first of the n. q: BH's false discovery
    rate. Deterministic: numpy's Generator from `seed`.
    Returns dict(seeds: mean n, seeds_share: {n: share of designs}, findings: per row the share in
    which its BH-adjusted p is <= q with the mean on the claimed side (a finding's rule), rejections:
    per row the share with its own p <= alpha, either side, sims).
    """
    signed = [g if d == "lower" else -g for g, (_, _, d) in zip(gaps, rows)]
    means = arm_means([(v, r) for v, r, _ in rows], [-s for s in signed])
    arms = list(means)
    rng = np.random.default_rng(seed)
    loss = rng.normal(0.0, sd / math.sqrt(2), (sims, most, len(arms))) + np.array([means[a] for a in arms])
    diffs = np.stack([loss[:, :, arms.index(v)] - loss[:, :, arms.index(r)] for v, r, _ in rows], -1)
    if pilot:
        spread = diffs[:, :pilot, :].std(1, ddof=1).max(1)  # (sims,) the rule's SD
        n = np.full(sims, most)
        for k, d in sorted(effect_thresholds(alpha, power, most).items(), reverse=True):
            n = np.where(rule_gap / np.maximum(spread, 1e-300) >= d, k, n)  # the fewest k that reaches
        n = np.maximum(n, pilot)
    else:
        n = np.full(sims, most)
    mean, p = paired_p_values(diffs, n)
    side = np.array([1.0 if d == "lower" else -1.0 for *_, d in rows])
    claimed = mean * side < 0
    found = (bh_rows(p) <= q) & claimed
    counts = np.bincount(n, minlength=most + 1)
    return dict(seeds=float(n.mean()), seeds_share={k: float(counts[k] / sims) for k in range(most + 1) if counts[k]},
                findings=found.mean(0).tolist(), rejections=(p <= alpha).mean(0).tolist(), sims=sims)


def ladder_gaps(gap, exponent, compute):
    """The gap a constant compute multiplier m makes at each rung of a ladder whose reference follows
    L(C) = E + A C^-a (a = exponent): the variant at C reaches L(m C), so gap_r = L(C_r) - L(m C_r) =
    A C_r^-a (1 - m^-a), which is gap (C_r / C_1)^-a given the first rung's gap (m, A and E drop
    out). compute: the rungs' training FLOPs, smallest first; exponent 0: the same gap everywhere."""
    return [gap * (c / compute[0]) ** -exponent for c in compute]


def rung_compute(cfg):
    """Training FLOPs of a run config (a dict as ablation.run_config gives it), without building its
    model: tokens x (6 N_active + 12 n_layer n_head head_dim block_size), model.GPT.flops_per_token's
    count (non-causal), N_active from memory.estimate_size less the experts a token skips. A config
    whose vocab_size is 0 (read from the data) is counted at GPT-2's 50,257 tokens, FineWeb's."""
    cfg = {**cfg, "vocab_size": cfg["vocab_size"] or 50257}
    params, _ = estimate_size(cfg)
    n = cfg["n_embd"]
    if cfg["n_experts"]:
        skipped = (cfg["n_experts"] - cfg["top_k"]) * 3 * n * (cfg["expert_d_ff"] or cfg["d_ff"])
        params -= cfg["n_layer"] // cfg["moe_every"] * skipped
    head_dim = cfg.get("head_dim") or n // cfg["n_head"]
    per_token = 6 * params + 12 * cfg["n_layer"] * cfg["n_head"] * head_dim * cfg["block_size"]
    return per_token * cfg["max_iters"] * cfg["batch_size"] * cfg["block_size"] * cfg["gradient_accumulation_steps"]


def ladder_design(compute, seeds, gap, exponent, sd, alpha, null=False, multiplier=1.22, sd_seed=0.0, sims=2000,
                  seed=0, floor=3.0):
    """Simulates stats.ladder_multiplier on ladders whose reference lies on L(C) = floor + A C^-a (a =
    exponent > 0, A such that the multiplier moves the first rung's loss by gap: A C_1^-a (1 -
    multiplier^-a) = gap, so the rungs' gaps are ladder_gaps'): per rung r the reference's n_r
    seeds at L(C_r) plus a shift common to both arms (SD sd_seed), the variant's at L(multiplier C_r),
    or at L(C_r) when null, plus the same shift and its own noise (SD sd: the paired SD). sd and
    sd_seed: one number for every rung, or one per rung (seed spreads that change with size; the
    estimator still pools one of each, as it does on real records).
    compute: FLOPs per rung (as ladder_multiplier takes them); seeds: n_r per rung. Deterministic:
    numpy's Generator from `seed`. Returns dict(claimed: share of ladders with p <= alpha and a
    multiplier > 1, rejections: share with p <= alpha either side, failed: share whose fit raised
    (counted as not rejecting), p and multiplier: each ladder's (nan where the fit raised), sims)."""
    amp = gap / (compute[0] ** -exponent * (1 - multiplier ** -exponent))
    curve = lambda c: floor + amp * c ** -exponent  # noqa: E731
    truth = 1.0 if null else multiplier
    per_rung = lambda x: [x] * len(seeds) if isinstance(x, (int, float)) else list(x)  # noqa: E731
    sd, sd_seed = per_rung(sd), per_rung(sd_seed)
    rng = np.random.default_rng(seed)
    ps, ms = np.full(sims, np.nan), np.full(sims, np.nan)
    for i in range(sims):
        shift = [rng.normal(0.0, s, n) for s, n in zip(sd_seed, seeds)]
        ref = [list(curve(c) + s) for c, s in zip(compute, shift)]
        var = [list(curve(truth * c) + s + rng.normal(0.0, d, n))
               for c, s, d, n in zip(compute, shift, sd, seeds)]
        try:
            r = ladder_multiplier(compute, ref, var)
        except ValueError:  # a fit whose loss does not fall with compute: no multiplier, no rejection
            continue
        ps[i], ms[i] = r["p"], r["multiplier"]
    hit = np.nan_to_num(ps, nan=1.0) <= alpha
    return dict(claimed=float((hit & (np.nan_to_num(ms) > 1)).mean()), rejections=float(hit.mean()),
                failed=float(np.isnan(ps).mean()), p=ps, multiplier=ms, sims=sims)


def cheapest_seeds(gaps, sd, seeds, cost, alpha, power, most=100):
    """(seeds per rung, GPU-hours added) that bring ladder_power to `power` by adding seeds one at a
    time where the noncentrality gains most per GPU-hour (a rung's term of the variance sum,
    1 / (n gap^2), falls by 1 / (n (n + 1) gap^2) for one more seed at its cost); None when a rung would
    pass `most`. cost: GPU-hours of one more seed of every arm, per rung."""
    seeds, added = list(seeds), 0.0
    while ladder_power(gaps, sd, seeds, alpha) < power:
        gain = [1 / (n * (n + 1) * g * g) / c for n, g, c in zip(seeds, gaps, cost)]
        r = int(np.argmax(gain))
        if seeds[r] >= most:
            return None
        seeds[r] += 1
        added += cost[r]
    return seeds, added

