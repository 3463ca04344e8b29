"""The statistics of the ablation tables, apart from drawing: Student t intervals and p values,
Benjamini-Hochberg adjustment, verdicts, and the power-law fit of the token multiplier.

research/plot.py's docstring states the rules these implement (and results/README.md in
prose); tests/test_sweep.py checks each against hand computations and reference values.
"""

import math
import statistics

import numpy as np


def t_cdf_two_sided(t, df):
    """P(|T| <= t) for Student's t with integer df >= 1, exactly.

    Abramowitz & Stegun 26.7.3 (odd df) and 26.7.4 (even df): with
    theta = atan(t / sqrt(df)), finite sums of powers of cos(theta).
    """
    if df < 1 or df != int(df):
        raise ValueError(f"df={df} must be a positive integer")
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


def t_quantile(p, df):
    """The p-quantile of Student's t with integer df >= 1, for p in (0.5, 1).

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
    2,000 values, refined by golden-section search between its grid neighbours.
    Raises ValueError for fewer than 3 points or a fit whose loss does not
    fall with tokens (alpha <= 0).
    """
    d, y = np.asarray(tokens, dtype=np.float64), np.asarray(losses, dtype=np.float64)
    if len(d) < 3 or len(set(d.tolist())) < 3:
        raise ValueError(f"a power law with offset needs >= 3 token budgets, got {sorted(set(d.tolist()))}")
    x = np.log(d)

    def solve(e):
        slope, intercept = np.polyfit(x, np.log(y - e), 1)
        return float(np.sum((e + np.exp(intercept + slope * x) - y) ** 2)), math.exp(intercept), -slope

    top = float(y.min())
    grid = top * np.arange(2000) / 2000
    k = int(np.argmin([solve(e)[0] for e in grid]))
    lo, hi = grid[max(k - 1, 0)], (grid[k + 1] if k + 1 < len(grid) else top * (1 - 1e-9))
    g = (math.sqrt(5) - 1) / 2
    for _ in range(100):
        a, b = hi - g * (hi - lo), lo + g * (hi - lo)
        lo, hi = (lo, b) if solve(a)[0] < solve(b)[0] else (a, hi)
    e = (lo + hi) / 2
    _, amp, alpha = solve(e)
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


