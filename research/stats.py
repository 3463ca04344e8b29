"""The statistics of the ablation tables, apart from drawing: Student t intervals and p values,
Benjamini-Hochberg adjustment, the words a row may use (every verdict and strength is decided here:
verdict, ladder_verdict, difference_verdict, strength), the power-law fit of the token multiplier,
the power of a paired protocol (how many seeds it plans), and a ladder's compute multiplier with
its interval. A scaled-down run's rows get SCALED_DOWN instead of a verdict and a strength.

research/plot.py's docstring states the rules these implement (and results/README.md in
prose); tests/test_stats.py checks each against hand computations and reference values.
"""

import math
import statistics

import numpy as np


def t_cdf_two_sided(t, df):
    """P(|T| <= t) for Student's t with df > 0 degrees of freedom.

    Integer df: exactly, Abramowitz & Stegun 26.7.3 (odd df) and 26.7.4 (even df): with
    theta = atan(t / sqrt(df)), finite sums of powers of cos(theta). Fractional df (Welch's
    Welch-Satterthwaite df): 1 - I_x(df / 2, 1 / 2) with x = df / (df + t^2), the regularized
    incomplete beta function (A&S 26.7.1; regularized_beta).
    """
    if not df > 0 or not math.isfinite(df):
        raise ValueError(f"df={df} must be a positive number")
    if df != int(df):
        return 1.0 - regularized_beta(df / (df + t * t), df / 2, 0.5)
    df = int(df)  # 4.0 from a formula: the exact sums below
    theta = math.atan(abs(t) / math.sqrt(df))
    s, c2 = math.sin(theta), math.cos(theta) ** 2
    if df % 2:  # (2/pi) (theta + sin cos (1 + 2/3 cos^2 + 2*4/(3*5) cos^4 + ...)), df - 2 the last power
        term, total = math.cos(theta), 0.0
        for j in range(1, (df - 1) // 2 + 1):
            total += term
            term *= c2 * (2 * j) / (2 * j + 1)
        return 2 / math.pi * (theta + s * total)
    term, total = 1.0, 0.0  # sin (1 + 1/2 cos^2 + 1*3/(2*4) cos^4 + ...), df - 2 the last power
    for j in range(1, df // 2 + 1):
        total += term
        term *= c2 * (2 * j - 1) / (2 * j)
    return s * total


def regularized_beta(x, a, b):
    """I_x(a, b), the regularized incomplete beta function, for x in [0, 1] and a, b > 0.

    Its continued fraction (A&S 26.5.8) evaluated by the modified Lentz method to 1e-15 relative,
    on x < (a + 1) / (a + b + 2) where it converges fast, else through I_x(a, b) = 1 - I_{1-x}(b, a).
    """
    if x <= 0 or x >= 1:
        return 0.0 if x <= 0 else 1.0
    if x > (a + 1) / (a + b + 2):
        return 1.0 - regularized_beta(1 - x, b, a)
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)) / a
    tiny, f, c, d = 1e-300, 1.0, 1.0, 0.0
    for i in range(1, 400):  # the terms d_1, d_2, ... of the fraction 1 / (1 + d_1 / (1 + d_2 / ...))
        m = (i - 1) // 2
        num = 1.0 if i == 1 else (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)) if i % 2 else
                                  -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1)))
        d = 1.0 + num * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + num / c
        c = c if abs(c) > tiny else tiny
        f *= c * d
        if abs(c * d - 1.0) < 1e-15:
            break
    return front * (f - 1.0)


def t_quantile(p, df):
    """The p-quantile of Student's t with df > 0 (integer or fractional), for p in (0.5, 1).

    Bisection on t_cdf_two_sided(t, df) = 2p - 1 to 1e-12 relative; e.g.
    t_quantile(0.975, 2) = 4.303, (0.975, 4) = 2.776 (any statistics table).
    """
    if not 0.5 < p < 1:
        raise ValueError(f"p={p} must be in (0.5, 1)")
    target, lo, hi = 2 * p - 1, 0.0, 1.0
    while t_cdf_two_sided(hi, df) < target:
        hi *= 2
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if t_cdf_two_sided(mid, df) < target else (lo, mid)
        if hi - lo < 1e-12 * hi:
            break
    return (lo + hi) / 2


def mean_ci(xs, level=0.95):
    """(mean, low, high) of the two-sided Student-t interval of the mean of xs; low = high = None
    for a single value; None for none."""
    n = len(xs)
    if n == 0:
        return None
    mean = statistics.fmean(xs)
    if n == 1:
        return mean, None, None
    half = t_quantile(0.5 + level / 2, n - 1) * statistics.stdev(xs) / math.sqrt(n)
    return mean, mean - half, mean + half


def paired_t_p(diffs):
    """Two-sided p value of the paired t test that the mean of diffs is 0; None for fewer than 2.

    t = mean / (s_d / sqrt(n)) with df = n - 1, p = P(|T| >= |t|) = 1 - t_cdf_two_sided(t, df)
    (absolute error about 1e-16: fine for the 3 digits shown). p < 0.05 exactly when the 95%
    interval of mean_ci excludes 0. Zero spread: p = 0 for a nonzero mean, 1 for a zero one.
    """
    n = len(diffs)
    if n < 2:
        return None
    mean, sd = statistics.fmean(diffs), statistics.stdev(diffs)
    if sd == 0:
        return 0.0 if mean else 1.0
    return max(0.0, 1.0 - t_cdf_two_sided(mean / (sd / math.sqrt(n)), n - 1))


def welch_t(a, b, level=0.95):
    """Welch's unpaired t test of mean(a) - mean(b), for two independent samples of 2 or more each
    with variances not assumed equal.

    With v_a = s_a^2 / n_a and v_b = s_b^2 / n_b (s: sample standard deviation): the difference
    D = mean(a) - mean(b), its standard error SE = sqrt(v_a + v_b), t = D / SE, and the
    Welch-Satterthwaite df = (v_a + v_b)^2 / (v_a^2 / (n_a - 1) + v_b^2 / (n_b - 1)) (fractional);
    the interval D +- t_{(1 + level) / 2, df} SE, p = P(|T_df| >= |t|) two-sided
    (scipy.stats.ttest_ind(a, b, equal_var=False) gives the same). Zero spread in both: the
    interval is D itself, p = 0 for a nonzero D and 1 for a zero one, df = n_a + n_b - 2.
    Returns ((D, low, high) as mean_ci, p, df); raises ValueError for a sample of fewer than 2.
    """
    if len(a) < 2 or len(b) < 2:
        raise ValueError(f"Welch's t test needs 2 values or more in each sample, got {len(a)} and {len(b)}")
    diff = statistics.fmean(a) - statistics.fmean(b)
    va, vb = statistics.variance(a) / len(a), statistics.variance(b) / len(b)
    if va + vb == 0:
        return (diff, diff, diff), (0.0 if diff else 1.0), len(a) + len(b) - 2
    se = math.sqrt(va + vb)
    df = (va + vb) ** 2 / (va ** 2 / (len(a) - 1) + vb ** 2 / (len(b) - 1))
    half = t_quantile(0.5 + level / 2, df) * se
    p = max(0.0, 1.0 - t_cdf_two_sided(diff / se, df))
    return (diff, diff - half, diff + half), p, df


def bh_adjust(ps):
    """Benjamini-Hochberg adjusted p values of ps, in the order given.

    Step-up: with p_(1) <= ... <= p_(m) sorted, p_adj(i) = min over j >= i of p_(j) m / j, capped
    at 1; a hypothesis is rejected at false discovery rate q when p_adj <= q (q = 0.05: at most
    5% of the rejections false in expectation, for independent or positively dependent tests).
    """
    m = len(ps)
    order = sorted(range(m), key=lambda i: ps[i])
    adjusted, running = [0.0] * m, 1.0
    for j, i in reversed(list(enumerate(order, start=1))):
        running = min(running, ps[i] * m / j)
        adjusted[i] = running
    return adjusted


def verdict(ci, n, expected):
    """The claim's verdict from a (mean, low, high) interval over n seeds.

    'reproduced' when the interval lies wholly (strictly) on the expected side of 0
    ('lower': below), 'contradicted' when wholly on the other side, else 'unresolved';
    'unresolved (1 seed)' for n == 1; with 2 seeds the word carries "(2 seeds)": a
    df = 1 interval is exact under normality but rests on one spread estimate, and
    the project asks for 3 seeds at least; '-' without an expectation or runs.
    """
    if not expected or not n:
        return "-"
    if n == 1:
        return "unresolved (1 seed)"
    _, lo, hi = ci
    below, above = hi < 0, lo > 0
    few = " (2 seeds)" if n == 2 else ""
    if (below and expected == "lower") or (above and expected == "higher"):
        return "reproduced" + few
    if below or above:
        return "contradicted" + few
    return "unresolved" + few


# The verdict and strength of every row of a --scale_down plot (miniature.scaled_down: a GPU file's
# rules run at CPU-miniature size through the same code): its numbers check the machinery, and a
# 0.04M-parameter model says nothing about the claim at 0.12B, so no claim word is given for it.
SCALED_DOWN = "scaled down (machinery check, not evidence)"
SCALED_DOWN_STRENGTH = "scaled down"


def ladder_verdict(ci, df, expected):
    """The verdict of a ladder's compute multiplier, from its interval on the loss scale (ci: -ln M and
    its interval, as a ladder row carries it; None without a multiplier) and its t interval's df:
    '-' without an expectation, 'unresolved' without a multiplier, 'unresolved (one seed a rung: no
    interval)' without an interval, else verdict over df + 1 seeds."""
    if not expected:
        return "-"
    if ci is None:
        return "unresolved"
    if ci[1] is None:
        return "unresolved (one seed a rung: no interval)"
    return verdict(ci, df + 1, expected)


def excludes_zero(ci):
    """Whether a mean_ci interval lies wholly on one side of 0 (one seed: no interval, False)."""
    return ci is not None and ci[1] is not None and (ci[2] < 0 or ci[1] > 0)


def difference_verdict(ci):
    """The verdict of a row that claims no direction (a mechanism question's): 'differs' when its
    interval excludes 0, else 'unresolved'."""
    return "differs" if excludes_zero(ci) else "unresolved"


EXPLORATORY_CAP = " (an exploratory row: a lead at most)"
UNTUNED_CAP = " (its arms shared one untuned LR: it tells about that LR, a lead at most about the variants)"
UNTUNED_OWN_CAP = (" (its arms' LRs were not tuned by the rule, the mean of 2 tuning seeds or more with every choice "
                   "interior: a lead at most about the variants)")
APART_CAP = ": a lead at most"


def apart_mark(seeds):
    """What a row whose arms ran on different CPU types at some seeds says beside its strength."""
    return f" (seed{'s' * (len(seeds) > 1)} {', '.join(map(str, seeds))}: arms on different CPU types{APART_CAP})"


def strength(ci, p_bh, expected=None, exploratory=False, untuned=False, apart=()):
    """The word a sentence about a row may use, beside its verdict: "finding" when its interval
    excludes 0 and its Benjamini-Hochberg adjusted p (p_bh, over the row's family) is <= 0.05,
    "lead" when the interval excludes 0 only uncorrected, "-" otherwise (unresolved) or without a
    p_bh. With the claim's direction (expected: 'lower' or 'higher'), a finding or lead on the other
    side of 0 says so ("lead, against the claim"); a row that claims none gets the word alone.
    exploratory: the row's file declared it underpowered (its `power` entry's "exploratory"), so a
    row that would be a finding is a lead, and says why (EXPLORATORY_CAP). untuned: both arms ran at
    one shared LR that was not tuned for either (no tune_lr; True or "shared"): a gap may be that LR
    suiting one variant better, so the row is a lead at most about the variants, and says why
    (UNTUNED_CAP); "untuned": each arm chose its own LR, but not by the rule (UNTUNED_OWN_CAP). apart:
    the seeds whose two arms ran on different CPU types (comparisons.apart): their differences hold the
    CPUs' too, so the row is a lead at most and names them (apart_mark), whatever its word."""
    mark = apart_mark(apart) if apart else ""
    if p_bh is None or not excludes_zero(ci):
        return "-" + mark
    capped = (exploratory or untuned or bool(apart)) and p_bh <= 0.05
    word = "lead" if capped or p_bh > 0.05 else "finding"
    if expected and (ci[0] < 0) != (expected == "lower"):
        word = f"{word}, against the claim"
    cap = EXPLORATORY_CAP if exploratory else (UNTUNED_OWN_CAP if untuned == "untuned" else UNTUNED_CAP) if untuned else ""
    return word + (cap if capped else "") + mark


def fmt_ci(ci, spec="+.4f"):
    """'mean [low, high]' of a mean_ci result in format spec; '-' for none."""
    if ci is None:
        return "-"
    mean, lo, hi = ci
    return f"{mean:{spec}}" + (f" [{lo:{spec}}, {hi:{spec}}]" if lo is not None else "")


# -----------------------------------------------------------------------------
# Compute multiplier: L(D) = E + A D^-alpha


def fit_power_law(tokens, losses):
    """Least-squares fit of L(D) = E + A * D**-alpha; returns (E, A, alpha).

    Args: tokens D (> 0) and final losses L, >= 3 points (3 parameters).
    For a fixed E in [0, min L), A and alpha come from the linear least-squares
    fit of log(L - E) = log A - alpha log D (a fit in log space, not in L); E
    is then chosen to minimize the squared error in L itself over a grid of
    2,000 values, refined by golden-section search between its grid neighbours
    to 1e-12 of min L.
    Raises ValueError for fewer than 3 points or a fit whose loss does not
    fall with tokens (alpha <= 0).
    """
    d, y = np.asarray(tokens, dtype=np.float64), np.asarray(losses, dtype=np.float64)
    if len(d) < 3 or len(set(d.tolist())) < 3:
        raise ValueError(f"a power law with offset needs >= 3 token budgets, got {sorted(set(d.tolist()))}")
    x = np.log(d)
    xc = x - x.mean()

    def solve(e):  # e: an array of offsets; the log-space line for each (closed-form least squares)
        z = np.log(y - np.asarray(e, dtype=np.float64)[..., None])
        slope = (z * xc).sum(-1) / (xc * xc).sum()
        intercept = z.mean(-1) - slope * x.mean()
        fitted = e[..., None] + np.exp(intercept[..., None] + slope[..., None] * x)
        return ((fitted - y) ** 2).sum(-1), np.exp(intercept), -slope

    top = float(y.min())
    grid = top * np.arange(2000) / 2000
    k = int(np.argmin(solve(grid)[0]))
    lo, hi = grid[max(k - 1, 0)], (grid[k + 1] if k + 1 < len(grid) else top * (1 - 1e-9))
    g = (math.sqrt(5) - 1) / 2
    for _ in range(100):
        if hi - lo <= 1e-12 * top:  # E to 12 digits: beyond what the losses' float noise resolves
            break
        a, b = hi - g * (hi - lo), lo + g * (hi - lo)
        err = solve(np.array([a, b]))[0]
        lo, hi = (lo, b) if err[0] < err[1] else (a, hi)
    e = (lo + hi) / 2
    _, amp, alpha = solve(np.array(e))
    amp, alpha = float(amp), float(alpha)
    if alpha <= 0:
        raise ValueError(f"the loss does not fall with tokens (alpha={alpha:.3g}): no multiplier")
    return e, amp, alpha


def interpolated_tokens(points, loss):
    """Tokens at which the reference reaches `loss`, read off its budgets without a fit: linear in
    (log D, L) between the first two adjacent budgets whose losses bracket it; None when no pair
    does (the loss lies outside the budgets' range). points: [(tokens, final loss)] by tokens."""
    for (d0, l0), (d1, l1) in zip(points, points[1:]):
        if min(l0, l1) <= loss <= max(l0, l1) and l0 != l1:
            return math.exp(math.log(d0) + (loss - l0) / (l1 - l0) * (math.log(d1) - math.log(d0)))
    return None


def tokens_to_reach(fit, loss):
    """Tokens D at which the fit L(D) = E + A D^-alpha reaches `loss`; inf at or below E."""
    e, amp, alpha = fit
    return math.inf if loss <= e else (amp / (loss - e)) ** (1 / alpha)




# -----------------------------------------------------------------------------
# Power: how many seeds a protocol needs before it runs


def t_test_power(ncp, df, alpha=0.05):
    """Power of a two-sided t test at level alpha: P(|T'| > t_{1-alpha/2, df}), T' a noncentral
    Student t with integer df >= 1 and noncentrality ncp (the true effect over its standard error).

    T' = (Z + ncp) / S with S = sqrt(chi2_df / df), so the power is the expectation over S of
    Phi(ncp - c S) + Phi(-ncp - c S); S's density, df^(df/2) s^(df-1) exp(-df s^2 / 2) /
    (2^(df/2 - 1) Gamma(df/2)), is integrated by the trapezoid rule on 4,001 points up to where it
    is below 1e-16 (absolute error below 1e-6 against Monte Carlo and published tables: a paired
    test with effect size 1 over 10 seeds at alpha 0.05 has power 0.803, Cohen 1988, Table 2.3.5).
    """
    if df < 1 or df != int(df):
        raise ValueError(f"df={df} must be a positive integer")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha={alpha} must be in (0, 1)")
    c = t_quantile(1 - alpha / 2, df)
    top = 1 + 12 / math.sqrt(df) + 12  # the density of S is negligible past it
    s = np.linspace(0.0, top, 4001)
    log_density = (df / 2) * math.log(df) - (df / 2 - 1) * math.log(2) - math.lgamma(df / 2) - df * s ** 2 / 2
    with np.errstate(divide="ignore"):
        density = np.exp(log_density + (df - 1) * np.log(s)) if df > 1 else np.exp(log_density)
    erf = np.vectorize(math.erf)
    tails = 0.5 * (1 + erf((ncp - c * s) / math.sqrt(2))) + 0.5 * (1 + erf((-ncp - c * s) / math.sqrt(2)))
    return float(np.trapezoid(tails * density, s))


def paired_power(gap, sd, n, alpha=0.05):
    """Power of the two-sided paired t test (paired_t_p) at level alpha over n >= 2 seeds, when the
    true mean paired difference is gap and the paired differences' SD is sd (same units, > 0):
    t_test_power(gap sqrt(n) / sd, n - 1, alpha)."""
    if n < 2:
        raise ValueError(f"n={n}: a paired t test needs at least 2 seeds")
    if sd <= 0:
        raise ValueError(f"sd={sd} must be > 0")
    return t_test_power(abs(gap) * math.sqrt(n) / sd, n - 1, alpha)


def seeds_for_power(gap, sd, alpha=0.05, power=0.8, most=100):
    """The fewest seeds n >= 2 whose paired t test (paired_power) reaches `power` for this gap and
    SD at level alpha; None when more than `most` would be needed."""
    return next((n for n in range(2, most + 1) if paired_power(gap, sd, n, alpha) >= power), None)


def family_alpha(rows, q=0.05):
    """The per-row level that BH at false discovery rate q never asks less of: q / rows (Bonferroni;
    BH rejects every row Bonferroni rejects, and more when several rows are real). A power
    computed at it holds for a row of a BH family of `rows` rows whatever the other rows show."""
    return q / rows


# -----------------------------------------------------------------------------
# A ladder's compute multiplier with an interval over seeds


def ladder_multiplier(compute, ref_losses, variant_losses, variant_compute=None, level=0.95):
    """The compute multiplier of a variant along a ladder of R >= 3 rungs, with a t interval over seeds.

    compute: the reference's training FLOPs per rung (R,); ref_losses, variant_losses: per rung, the
    final losses of the seeds run there, paired (the same seeds, in the same order; a rung may have
    one); variant_compute: the variant's FLOPs per rung (default: the reference's).
    The reference's mean loss per rung is fitted by L(C) = E + A C^-alpha (fit_power_law); at
    rung r, ln M_r = ln C(V_r) - ln C(L_r) - ln(C_var,r / C_r), where C(L) = (A / (L - E))^(1/alpha)
    inverts the fit and V_r, L_r are the rung's mean losses (so the reference scores exactly 1);
    the ladder's multiplier is M = exp(mean_r ln M_r) (> 1: the variant reaches the reference's
    loss with less compute).
    Interval, by the delta method on ln M, from two seed spreads pooled over the rungs that have two
    seeds or more (df = sum_r (n_r - 1) each): s_D^2 of the paired differences D = variant -
    reference, which move ln M_r by -D / (alpha (L_r - E)) (the fit's local slope), and s_L^2 of the
    reference's losses, a seed's shift common to both arms, which moves ln M only through the fit
    (its gradient taken numerically, one refit per rung). SE(ln M)^2 = sum_r [s_D^2 / (n_r (alpha
    (L_r - E))^2) / R^2 + g_r^2 s_L^2 / n_r]; the interval is exp(ln M +- t SE) with the
    Welch-Satterthwaite df of the two parts, the p value the two-sided t test of ln M = 0.
    Pooling, not a bootstrap within rungs: a rung of one seed (the costly rungs) has no spread of
    its own, and a bootstrap within rungs treats it as exact (an interval too narrow: the test
    shows it). Pooling assumes the seed SDs do not grow with size (published spreads shrink with
    size, so the interval errs wide). tests/test_stats.py checks the coverage by simulation.
    Returns dict(multiplier, low, high, p, df, se_log, per_rung [M_r], fit (E, A, alpha)); low,
    high, p are None when no rung has two seeds. Raises ValueError as fit_power_law, and for
    unpaired inputs.
    """
    rungs = len(compute)
    if not (len(ref_losses) == len(variant_losses) == rungs) or any(
            len(a) != len(b) or not a for a, b in zip(ref_losses, variant_losses)):
        raise ValueError("ref_losses and variant_losses need the same seeds per rung, at least one each")
    variant_compute = compute if variant_compute is None else variant_compute
    ref_mean = [statistics.fmean(r) for r in ref_losses]
    var_mean = [statistics.fmean(v) for v in variant_losses]
    flops_ratio = [math.log(cv / c) for c, cv in zip(compute, variant_compute)]

    def log_multipliers(ref_at, var_at):
        e, amp, alpha = fit = fit_power_law(compute, ref_at)
        need = lambda loss: math.inf if loss <= e else math.log(amp / (loss - e)) / alpha  # noqa: E731
        return [need(v) - need(r) - f for v, r, f in zip(var_at, ref_at, flops_ratio)], fit

    logs, fit = log_multipliers(ref_mean, var_mean)
    e, _, alpha = fit
    log_m = statistics.fmean(logs)
    diffs = [[b - a for a, b in zip(r, v)] for r, v in zip(ref_losses, variant_losses)]
    df = sum(len(d) - 1 for d in diffs)
    out = dict(multiplier=math.exp(log_m) if math.isfinite(log_m) else math.inf, low=None, high=None, p=None,
               df=df, se_log=None, per_rung=[math.exp(x) if math.isfinite(x) else math.inf for x in logs], fit=fit)
    if df == 0 or not math.isfinite(log_m):
        return out
    pooled = lambda groups: sum(sum((x - statistics.fmean(g)) ** 2 for x in g) for g in groups) / df  # noqa: E731
    part_d = sum(pooled(diffs) / (len(d) * (alpha * (r - e)) ** 2) for d, r in zip(diffs, ref_mean)) / rungs ** 2
    h, gradient = 1e-4, []
    for k in range(rungs):  # a common shift of rung k's seeds: both arms move, the fit with them
        shift = [h if i == k else 0.0 for i in range(rungs)]
        moved, _ = log_multipliers([r + s for r, s in zip(ref_mean, shift)], [v + s for v, s in zip(var_mean, shift)])
        gradient.append((statistics.fmean(moved) - log_m) / h)
    part_l = sum(g ** 2 * pooled(ref_losses) / len(r) for g, r in zip(gradient, ref_losses))
    se = math.sqrt(part_d + part_l)
    dof = df if se == 0 else (part_d + part_l) ** 2 / ((part_d ** 2 + part_l ** 2) / df)
    half = t_quantile(0.5 + level / 2, max(1, round(dof))) * se
    p = (0.0 if log_m else 1.0) if se == 0 else max(0.0, 1.0 - t_cdf_two_sided(log_m / se, max(1, round(dof))))
    return {**out, "low": math.exp(log_m - half), "high": math.exp(log_m + half), "p": p, "se_log": se,
            "df": max(1, round(dof))}


def ladder_power(gap, sd, seeds_per_rung, alpha=0.05):
    """Power of ladder_multiplier's t test to tell a multiplier m from 1, where at rung r m moves the
    loss by gap_r (so its local slope is gap_r / ln m) and the paired SD is sd: its noncentrality
    ln M / SE(ln M) is R / (sd sqrt(sum_r 1 / (n_r gap_r^2))), with df = sum_r (n_r - 1) (a constant
    gap: gap R / (sd sqrt(sum_r 1 / n_r))). gap: one number for every rung, or one per rung (a
    constant multiplier on L(C) = E + A C^-a moves the loss less at larger rungs: research/power.py
    ladder_gaps); seeds_per_rung: n_r per rung (>= 1; some rung >= 2). It leaves out the
    reference's own seed spread and the fit's error, which move ln M only through the fit: in
    synthetic ladders of 8, 3, 1, 1 seeds the spread widens SE(ln M) by about 1% at the paired SD and
    5% at twice it (ladder_multiplier counts it; tests/test_power.py simulates the estimator itself)."""
    df = sum(n - 1 for n in seeds_per_rung)
    if df < 1 or min(seeds_per_rung) < 1:
        raise ValueError(f"seeds per rung {seeds_per_rung}: each >= 1, and some rung >= 2 (a spread to pool)")
    gaps = [gap] * len(seeds_per_rung) if isinstance(gap, (int, float)) else list(gap)
    if len(gaps) != len(seeds_per_rung) or min(abs(g) for g in gaps) == 0:
        raise ValueError(f"gaps {gaps}: one nonzero gap, or one per rung of {seeds_per_rung}")
    ncp = len(seeds_per_rung) / (sd * math.sqrt(sum(1 / (n * g * g) for n, g in zip(seeds_per_rung, gaps))))
    return t_test_power(ncp, df, alpha)


# -----------------------------------------------------------------------------
# The mechanism statistics' one scalar per run


def mechanism_scalar(record, statistic="move_ratio"):
    """One number per run for a mechanism question: the mean over a run's input-role sites of
    `<site>/<statistic>`'s mean over its evaluation intervals (a record's "mechanism" -> "mean",
    research/records.py mechanism_record; the statistics and their meanings: mechanism.SITE_STATISTICS,
    paper Theorem 2.2, claim C3). Only input-role sites have one; a site whose value is undefined
    (None) is left out. None for a record without the statistics or without any such site.
    statistic: "move_ratio" (the default: what files registered before "statistic" existed did, as
    amp_ratio, its earlier name), "gain", "step_matrix" or "step_scale"."""
    means = (record.get("mechanism") or {}).get("mean", {})
    values = [v for k, v in means.items() if k.endswith(f"/{statistic}") and v is not None]
    return statistics.fmean(values) if values else None
