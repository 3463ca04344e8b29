"""Claim C3's update rule, checked numerically on the least-squares toy."""

from tools import toy_preconditioner as toy


def test_effective_column_moves_by_the_preconditioned_gradient():
    """delta(gamma_j w_j) = -lr (gamma_j^2 I + w_j w_j^T) g_j + O(lr^2) (paper, Theorem 2.2)."""
    assert toy.first_order_check(seed=0, lr=1e-6) < 1e-5
    # the error is second order: 10x the step, ~10x the relative error, still small
    assert toy.first_order_check(seed=0, lr=1e-5) < 1e-4


def test_scale_vector_speeds_up_gradient_descent_at_a_small_shared_rate():
    x, y, w0 = toy.problem(0)
    plain, _ = toy.train(x, y, w0, lr=0.1, steps=300, with_scale=False)
    scaled, gamma = toy.train(x, y, w0, lr=0.1, steps=300, with_scale=True)
    assert scaled[-1] < 0.8 * plain[-1]
    assert (gamma - 1).abs().max() > 0.1
