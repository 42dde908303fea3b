"""Exercises of lesson 01: how far information travels, and what the trip does to a gradient.

``cnn_path_lengths``: how many stacked convolutions lie between two positions (compared
exactly; a float answer must hold whole numbers).
``gradient_through_linear_rnn``: ‖W^k‖, the gradient of a linear RNN k steps back
(tolerance, stated in the lesson: 1e-5 + 1e-4·|expected|, any float dtype).
"""

from __future__ import annotations

import torch

from course_utils.exercises import (
    Exercise,
    Incorrect,
    attempt,
    expect_close,
    expect_finite,
    expect_shape,
    is_close,
    reject_half_precision,
)
from course_utils.language import N_, _


def _distances(n: int) -> torch.Tensor:
    positions = torch.arange(n)
    return (positions[:, None] - positions[None, :]).abs()  # (n, n)


def reference_cnn_path_lengths(n: int, kernel_size: int) -> torch.Tensor:
    """(n, n): layers of a stack of convolutions before position j can influence position i.

    Used in lesson 01.
    """
    reach = (kernel_size - 1) // 2  # positions one layer sees on each side
    positions = torch.arange(n)
    distance = (positions[:, None] - positions[None, :]).abs()  # (n, n): |i - j|
    return torch.div(distance + reach - 1, reach, rounding_mode="floor")  # ceil(distance/reach)


def _check_cnn_path_lengths(answer) -> None:
    # Small cases first, then sizes and kernels no small lookup table or list of kernels covers.
    for n, kernel_size in ((6, 3), (10, 5), (9, 7), (23, 9), (31, 3), (17, 13)):
        got = attempt(answer, n, kernel_size)
        what = f"cnn_path_lengths({n}, kernel_size={kernel_size})"
        expect_shape(got, (n, n), what)
        if got.dtype == torch.bool or got.is_complex():
            raise Incorrect(_(
                "{what} should hold whole numbers of layers, got dtype {dtype}").format(
                what=what, dtype=got.dtype))
        if got.is_floating_point():
            expect_finite(got, what)
            if not torch.equal(got, got.round()):
                raise Incorrect(_(
                    "{what}: a number of layers is a whole number, got {item:g}; round up "
                    "(torch.ceil)").format(
                    what=what, item=got[got != got.round()][0].item()))
        got = got.long()
        expected = reference_cnn_path_lengths(n, kernel_size)
        if torch.equal(got, expected):
            continue
        distance = _distances(n)
        reach = (kernel_size - 1) // 2
        if got.diagonal().ne(0).any():
            raise Incorrect(_(
                "{what}: the diagonal should be 0, a position reaches itself without any layer"
            ).format(what=what))
        if torch.equal(got, distance):
            raise Incorrect(_(
                "{what}: that is |i - j|, the RNN's path length. One convolution layer reaches "
                "(kernel_size - 1) // 2 = {reach} positions to each side, so divide the distance "
                "by that reach (rounding up)").format(what=what, reach=reach))
        if torch.equal(got, distance // reach):
            raise Incorrect(_(
                "{what}: you rounded down. With kernel_size={kernel_size} one layer reaches "
                "{reach} positions to each side, so positions {beyond_reach} apart need 2 layers, "
                "not 1: round up (ceil)").format(
                what=what, kernel_size=kernel_size, reach=reach, beyond_reach=reach + 1))
        by_width = [-(-distance // width) for width in (kernel_size, kernel_size - 1)]
        by_width += [distance // width for width in (kernel_size, kernel_size - 1)]
        if any(torch.equal(got, wrong) for wrong in by_width):
            raise Incorrect(_(
                "{what}: a kernel of size {kernel_size} is centred on its position, so one layer "
                "reaches (kernel_size - 1) // 2 = {reach} positions to each side, not "
                "{kernel_size} or {kernel_size_less_1}").format(
                what=what, kernel_size=kernel_size, reach=reach,
                kernel_size_less_1=kernel_size - 1))
        if not torch.equal(got, got.T):
            raise Incorrect(_(
                "{what}: the matrix should be symmetric, |i - j| = |j - i|").format(
                what=what))
        i, j = (got != expected).nonzero()[0].tolist()
        raise Incorrect(_(
            "{what}: entry [{i}, {j}] (positions {distance} apart) should be {expected}, got {got}"
        ).format(what=what, i=i, j=j, distance=abs(i - j), expected=int(expected[i, j]),
                 got=int(got[i, j])))


cnn_path_lengths = Exercise(
    title=N_("Path length through a stack of convolutions"),
    checker=_check_cnn_path_lengths,
    reference=reference_cnn_path_lengths,
    hints=(
        N_(
            "Start from the distance matrix |i - j|, built with broadcasting: positions[:, None] "
            "- positions[None, :]."),
        N_(
            "A kernel of size w covers its own position and (w - 1) // 2 neighbours on each side, "
            "so each layer extends the reach by (w - 1) // 2 positions."),
        N_(
            "The number of layers is the distance divided by the reach, rounded up: for integers, "
            "(distance + reach - 1) // reach."),
    ),
)


def reference_gradient_through_linear_rnn(w: torch.Tensor, max_k: int) -> torch.Tensor:
    """‖∂h_T/∂h_{T-k}‖ = ‖W^k‖ (Frobenius) for k = 0..max_k of h_t = W h_{t-1} + x_t.

    Used in lesson 01.
    """
    return torch.stack(
        [torch.linalg.matrix_norm(torch.linalg.matrix_power(w, k)) for k in range(max_k + 1)]
    )  # (max_k + 1,)


def _check_gradient_through_linear_rnn(answer) -> None:
    generator = torch.Generator().manual_seed(0)
    # A second W and max_k, then other sizes: an answer hard-coded to the first one, or to a
    # 4 × 4 matrix (torch.eye(4), ‖I‖ = 2), fails.
    for max_k, size in ((6, 4), (3, 4), (5, 3), (9, 7)):
        w = torch.randn(size, size, generator=generator) / 2  # not symmetric; ‖W‖^k ≠ ‖W^k‖
        _check_gradient_once(answer, w, max_k)


def _check_gradient_once(answer, w: torch.Tensor, max_k: int) -> None:
    what = f"gradient_through_linear_rnn(w, max_k={max_k})"
    got = attempt(answer, w, max_k)
    expect_shape(got, (max_k + 1,), what)
    if not got.is_floating_point():
        raise Incorrect(_(
            "{what} should be a floating-point tensor, got dtype {dtype}").format(
            what=what, dtype=got.dtype))
    expect_finite(got, what)
    expected = reference_gradient_through_linear_rnn(w, max_k)
    reject_half_precision(got, expected, what)
    got = got.detach().double()
    if is_close(got, expected):
        return
    norms = torch.linalg.matrix_norm
    power = torch.linalg.matrix_power
    if is_close(got, torch.stack([norms(w**k) for k in range(max_k + 1)])):
        raise Incorrect(_(
            "{what}: w ** k raises each entry to the power k. Going back k steps multiplies k "
            "Jacobians, a matrix power: torch.linalg.matrix_power(w, k)").format(what=what))
    if is_close(got, torch.stack([norms(power(w, k + 1)) for k in range(max_k + 1)])):
        raise Incorrect(_(
            "{what}: entry k should be ‖W^k‖ starting at k = 0, where W^0 is the identity and ‖I‖ "
            "= sqrt({size}) for a {size} × {size} W; your entries are shifted by one step").format(
            what=what, size=w.shape[0]))
    if is_close(got[1:], expected[1:]):
        raise Incorrect(_(
            "{what}: entry 0 should be ‖W^0‖ = ‖I‖ = sqrt({size}) for a {size} × {size} W (zero "
            "steps back, the gradient passes unchanged), got {item:.3g}").format(
            what=what, size=w.shape[0], item=got[0].item()))
    if is_close(got, torch.stack([norms(power(w, k), ord=2) for k in range(max_k + 1)])):
        raise Incorrect(_(
            "{what}: use the Frobenius norm (the default of torch.linalg.matrix_norm), not the "
            "spectral norm, to match the measurement in the lesson").format(what=what))
    if is_close(got, norms(w) ** torch.arange(max_k + 1)) or is_close(
            got[1:], norms(w) ** torch.arange(1, max_k + 1)):
        raise Incorrect(_(
            "{what}: ‖W‖^k (the norm raised to the power k) is only an upper bound; take the norm "
            "of the matrix power, ‖W^k‖").format(what=what))
    expect_close(got, expected, what)


gradient_through_linear_rnn = Exercise(
    title=N_("The gradient through k steps of a linear RNN"),
    checker=_check_gradient_through_linear_rnn,
    reference=reference_gradient_through_linear_rnn,
    hints=(
        N_(
            "For h_t = W h_{t-1} + x_t the Jacobian of one step is W, so k steps back it is W @ W "
            "@ ... @ W (k times)."),
        N_("torch.linalg.matrix_power(w, k) computes that product; k = 0 gives the identity."),
        N_(
            "Return torch.stack([torch.linalg.matrix_norm(torch.linalg.matrix_power(w, k)) for k "
            "in range(max_k + 1)])."),
    ),
)
