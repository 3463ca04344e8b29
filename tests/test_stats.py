"""research/stats.py: t quantiles and intervals, paired t p values, Benjamini-Hochberg, verdicts and
the power-law fit behind the compute multiplier, each against a hand computation or a table."""

import math

import numpy as np
import pytest

from research import plot, stats


@pytest.mark.parametrize("df, value", [(1, 12.706), (2, 4.303), (4, 2.776), (5, 2.571), (10, 2.228), (30, 2.042)])
def test_t_quantile_matches_the_tables(df, value):
    assert stats.t_quantile(0.975, df) == pytest.approx(value, abs=5e-4)


def test_t_cdf_of_one_degree_is_the_cauchy():
    for t in (0.3, 1.0, 7.0):  # P(|T| <= t) = 2 atan(t) / pi for df = 1
        assert stats.t_cdf_two_sided(t, 1) == pytest.approx(2 * math.atan(t) / math.pi)
    assert stats.t_cdf_two_sided(1e6, 7) == pytest.approx(1.0)


def test_mean_ci_against_a_hand_computation():
    xs = [0.010, 0.020, 0.060]  # mean 0.03, sd sqrt(((-.02)^2 + (-.01)^2 + .03^2) / 2) = sqrt(7e-4)
    mean, lo, hi = stats.mean_ci(xs)
    half = 4.302653 * math.sqrt(7e-4) / math.sqrt(3)
    assert mean == pytest.approx(0.03) and lo == pytest.approx(0.03 - half) and hi == pytest.approx(0.03 + half)
    assert stats.mean_ci([0.5]) == (0.5, None, None) and stats.mean_ci([]) is None


def test_paired_t_p_against_a_hand_computation():
    # d = [1, 2, 3]: mean 2, sd 1, t = 2 / (1 / sqrt(3)) = 2 sqrt(3), df 2; for df = 2
    # P(|T| <= t) = t / sqrt(2 + t^2), so p = 1 - 2 sqrt(3) / sqrt(14) = 0.074180
    assert stats.paired_t_p([1, 2, 3]) == pytest.approx(1 - 2 * math.sqrt(3) / math.sqrt(14), rel=1e-12)
    assert stats.paired_t_p([-1, -2, -3]) == stats.paired_t_p([1, 2, 3])  # two-sided
    # d = [1, 3]: mean 2, sd sqrt(2), t = 2 / (sqrt(2) / sqrt(2)) = 2, df 1 (Cauchy): p = 1 - 2 atan(2) / pi
    assert stats.paired_t_p([1, 3]) == pytest.approx(1 - 2 * math.atan(2) / math.pi, rel=1e-12)
    assert stats.paired_t_p([0.5]) is None and stats.paired_t_p([]) is None
    assert stats.paired_t_p([0.1, 0.1]) == 0.0 and stats.paired_t_p([0.0, 0.0]) == 1.0


@pytest.mark.parametrize("diffs", [[0.01, 0.02, 0.06], [-0.0023, -0.0047, -0.0132, -0.0172, -0.0025],
                                   [-0.0103, -0.0185, -0.0214, -0.0190, -0.0020], [0.3, -0.1]])
def test_p_below_005_exactly_when_the_95_interval_excludes_0(diffs):
    assert (stats.paired_t_p(diffs) < 0.05) == plot.excludes_zero(stats.mean_ci(diffs))


def test_benjamini_hochberg_against_hand_worked_examples():
    # sorted 0.005, 0.01, 0.03, 0.04, 0.5 (m = 5): p m / rank = 0.025, 0.025, 0.05, 0.05, 0.5, already
    # non-decreasing; given back in the input's order
    assert stats.bh_adjust([0.01, 0.04, 0.03, 0.005, 0.5]) == pytest.approx([0.025, 0.05, 0.05, 0.025, 0.5])
    # the step-up: sorted 0.01, 0.02, 0.021, 0.04 (m = 4): p m / rank = 0.04, 0.04, 0.028, 0.04; each
    # is the minimum over its rank and above, so the first two drop to the third's 0.028
    assert stats.bh_adjust([0.04, 0.01, 0.021, 0.02]) == pytest.approx([0.04, 0.028, 0.028, 0.028])
    assert stats.bh_adjust([0.3]) == [0.3] and stats.bh_adjust([]) == []
    assert stats.bh_adjust([0.9, 0.95, 0.99]) == pytest.approx([0.99, 0.99, 0.99])  # never above 1


@pytest.mark.parametrize("lo, hi, expected, word", [
    (-0.02, -1e-9, "lower", "reproduced"), (-0.02, 0.0, "lower", "unresolved"),
    (0.0, 0.02, "lower", "unresolved"), (1e-9, 0.02, "lower", "contradicted"),
    (1e-9, 0.02, "higher", "reproduced"), (0.0, 0.02, "higher", "unresolved"),
    (-0.02, -1e-9, "higher", "contradicted"), (-0.01, 0.01, "higher", "unresolved"),
    (-0.02, -1e-9, None, "-")])
def test_verdict_follows_where_the_interval_lies(lo, hi, expected, word):
    assert stats.verdict(((lo + hi) / 2, lo, hi), 3, expected) == word


def test_verdict_with_one_seed_is_unresolved():
    assert stats.verdict((-0.5, None, None), 1, "lower") == "unresolved (1 seed)"
    assert stats.verdict((-0.5, -0.6, -0.4), 2, "lower") == "reproduced (2 seeds)"  # below the 3 the project asks for
    assert stats.verdict(None, 0, "lower") == "-"


def test_fit_free_tokens_interpolate_in_log_tokens_between_bracketing_budgets():
    pts = [(1e6, 2.0), (2e6, 1.8), (4e6, 1.7)]
    # halfway in loss between two budgets is the geometric mean of their tokens
    assert stats.interpolated_tokens(pts, 1.9) == pytest.approx(math.sqrt(1e6 * 2e6))
    assert stats.interpolated_tokens(pts, 1.75) == pytest.approx(math.sqrt(2e6 * 4e6))
    assert stats.interpolated_tokens(pts, 1.8) == pytest.approx(2e6)
    assert stats.interpolated_tokens(pts, 1.6) is None and stats.interpolated_tokens(pts, 2.1) is None


def test_power_law_fit_recovers_known_parameters_and_multiplier():
    d = np.array([0.5, 1.0, 1.5, 2.0]) * 2e6
    e, amp, alpha = stats.fit_power_law(d, 1.5 + 20 * d ** -0.3)
    assert (e, amp, alpha) == pytest.approx((1.5, 20, 0.3), rel=1e-4)
    target = 1.5 + 20 * (1.3 * 2e6) ** -0.3  # a variant that matches the reference at 1.3x its tokens
    assert stats.tokens_to_reach((e, amp, alpha), target) / 2e6 == pytest.approx(1.3, rel=1e-4)
    assert stats.tokens_to_reach((e, amp, alpha), 1.4) == math.inf
    with pytest.raises(ValueError, match="needs >= 3"):
        stats.fit_power_law(d[:2], [3.0, 2.9])
