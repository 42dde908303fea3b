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
)
from course_utils.language import Bilingual, text


def _distances(n: int) -> torch.Tensor:
    positions = torch.arange(n)
    return (positions[:, None] - positions[None, :]).abs()  # (n, n)


def reference_cnn_path_lengths(n: int, kernel_size: int) -> torch.Tensor:
    """(n, n): layers of a stack of convolutions before position j can influence position i."""
    reach = (kernel_size - 1) // 2  # positions one layer sees on each side
    positions = torch.arange(n)
    distance = (positions[:, None] - positions[None, :]).abs()  # (n, n): |i - j|
    return torch.div(distance + reach - 1, reach, rounding_mode="floor")  # ceil(distance/reach)


def _check_cnn_path_lengths(answer) -> None:
    for n, kernel_size in ((6, 3), (10, 5), (9, 7)):
        got = attempt(answer, n, kernel_size)
        what = f"cnn_path_lengths({n}, kernel_size={kernel_size})"
        expect_shape(got, (n, n), what)
        if got.dtype == torch.bool or got.is_complex():
            raise Incorrect(text(
                f"{what} should hold whole numbers of layers, got dtype {got.dtype}",
                f"{what}应当是整数个层数，实际的 dtype 是 {got.dtype}"))
        if got.is_floating_point():
            expect_finite(got, what)
            if not torch.equal(got, got.round()):
                raise Incorrect(text(
                    f"{what}: a number of layers is a whole number, got "
                    f"{got[got != got.round()][0].item():g}; round up (torch.ceil)",
                    f"{what}：层数应当是整数，你的结果里有 "
                    f"{got[got != got.round()][0].item():g}；请向上取整（torch.ceil）"))
        got = got.long()
        expected = reference_cnn_path_lengths(n, kernel_size)
        if torch.equal(got, expected):
            continue
        distance = _distances(n)
        reach = (kernel_size - 1) // 2
        if got.diagonal().ne(0).any():
            raise Incorrect(text(
                f"{what}: the diagonal should be 0, a position reaches itself without any layer",
                f"{what}：对角线应当是 0，一个位置不经过任何层就能到达它自己"))
        if torch.equal(got, distance):
            raise Incorrect(text(
                f"{what}: that is |i - j|, the RNN's path length. One convolution layer "
                f"reaches (kernel_size - 1) // 2 = {reach} positions to each side, so divide "
                "the distance by that reach (rounding up)",
                f"{what}：这是 |i - j|，也就是 RNN 的路径长度。一层卷积向每一侧能覆盖 "
                f"(kernel_size - 1) // 2 = {reach} 个位置，所以要用距离除以这个覆盖范围"
                "（向上取整）"))
        if torch.equal(got, distance // reach):
            raise Incorrect(text(
                f"{what}: you rounded down. With kernel_size={kernel_size} one layer reaches "
                f"{reach} positions to each side, so positions {reach + 1} apart need 2 layers, "
                "not 1: round up (ceil)",
                f"{what}：你向下取整了。kernel_size={kernel_size} 时一层向每一侧覆盖 "
                f"{reach} 个位置，所以相距 {reach + 1} 的两个位置需要 2 层而不是 1 层："
                "请向上取整（ceil）"))
        by_width = [-(-distance // width) for width in (kernel_size, kernel_size - 1)]
        by_width += [distance // width for width in (kernel_size, kernel_size - 1)]
        if any(torch.equal(got, wrong) for wrong in by_width):
            raise Incorrect(text(
                f"{what}: a kernel of size {kernel_size} is centred on its position, so one "
                f"layer reaches (kernel_size - 1) // 2 = {reach} positions to each side, "
                f"not {kernel_size} or {kernel_size - 1}",
                f"{what}：大小为 {kernel_size} 的卷积核以它所在的位置为中心，所以一层向每一侧"
                f"覆盖 (kernel_size - 1) // 2 = {reach} 个位置，而不是 {kernel_size} 或 "
                f"{kernel_size - 1} 个"))
        if not torch.equal(got, got.T):
            raise Incorrect(text(f"{what}: the matrix should be symmetric, |i - j| = |j - i|",
                                 f"{what}：这个矩阵应当是对称的，|i - j| = |j - i|"))
        i, j = (got != expected).nonzero()[0].tolist()
        raise Incorrect(text(
            f"{what}: entry [{i}, {j}] (positions {abs(i - j)} apart) should be "
            f"{int(expected[i, j])}, got {int(got[i, j])}",
            f"{what}：元素 [{i}, {j}]（两个位置相距 {abs(i - j)}）应当是 "
            f"{int(expected[i, j])}，你的结果是 {int(got[i, j])}"))


cnn_path_lengths = Exercise(
    title=Bilingual("Path length through a stack of convolutions", "多层卷积堆叠中的路径长度"),
    checker=_check_cnn_path_lengths,
    reference=reference_cnn_path_lengths,
    hints=(
        Bilingual("Start from the distance matrix |i - j|, built with broadcasting: "
                  "positions[:, None] - positions[None, :].",
                  "先用广播构造距离矩阵 |i - j|：positions[:, None] - positions[None, :]。"),
        Bilingual("A kernel of size w covers its own position and (w - 1) // 2 neighbours on "
                  "each side, so each layer extends the reach by (w - 1) // 2 positions.",
                  "大小为 w 的卷积核覆盖它自己的位置和两侧各 (w - 1) // 2 个邻居，"
                  "所以每多一层，覆盖范围就向外扩展 (w - 1) // 2 个位置。"),
        Bilingual("The number of layers is the distance divided by the reach, rounded up: for "
                  "integers, (distance + reach - 1) // reach.",
                  "层数等于距离除以每层的覆盖范围再向上取整；对整数可以写成 "
                  "(distance + reach - 1) // reach。"),
    ),
)


def reference_gradient_through_linear_rnn(w: torch.Tensor, max_k: int) -> torch.Tensor:
    """‖∂h_T/∂h_{T-k}‖ = ‖W^k‖ (Frobenius) for k = 0..max_k of h_t = W h_{t-1} + x_t."""
    return torch.stack(
        [torch.linalg.matrix_norm(torch.linalg.matrix_power(w, k)) for k in range(max_k + 1)]
    )  # (max_k + 1,)


def _check_gradient_through_linear_rnn(answer) -> None:
    generator = torch.Generator().manual_seed(0)
    w = torch.randn(4, 4, generator=generator) / 2  # not symmetric; ‖W‖^k ≠ ‖W^k‖
    max_k = 6
    what = f"gradient_through_linear_rnn(w, max_k={max_k})"
    got = attempt(answer, w, max_k)
    expect_shape(got, (max_k + 1,), what)
    if not got.is_floating_point():
        raise Incorrect(text(f"{what} should be a floating-point tensor, got dtype {got.dtype}",
                             f"{what}应当是浮点张量，实际的 dtype 是 {got.dtype}"))
    expect_finite(got, what)
    got = got.detach().double()
    expected = reference_gradient_through_linear_rnn(w, max_k)
    if is_close(got, expected):
        return
    norms = torch.linalg.matrix_norm
    power = torch.linalg.matrix_power
    if is_close(got, torch.stack([norms(w**k) for k in range(max_k + 1)])):
        raise Incorrect(text(
            f"{what}: w ** k raises each entry to the power k. Going back k steps multiplies "
            "k Jacobians, a matrix power: torch.linalg.matrix_power(w, k)",
            f"{what}：w ** k 是把每个元素各自求 k 次幂。往回走 k 步是把 k 个雅可比矩阵相乘，"
            "也就是矩阵的幂：torch.linalg.matrix_power(w, k)"))
    if is_close(got, torch.stack([norms(power(w, k + 1)) for k in range(max_k + 1)])):
        raise Incorrect(text(
            f"{what}: entry k should be ‖W^k‖ starting at k = 0, where W^0 is the identity "
            f"and ‖I‖ = sqrt(4) = 2; your entries are shifted by one step",
            f"{what}：第 k 个元素应当是 ‖W^k‖，从 k = 0 开始，此时 W^0 是单位矩阵，"
            f"‖I‖ = sqrt(4) = 2；你的结果整体错开了一步"))
    if is_close(got[1:], expected[1:]):
        raise Incorrect(text(
            f"{what}: entry 0 should be ‖W^0‖ = ‖I‖ = sqrt(4) = 2 (zero steps back, the "
            f"gradient passes unchanged), got {got[0].item():.3g}",
            f"{what}：第 0 个元素应当是 ‖W^0‖ = ‖I‖ = sqrt(4) = 2（往回零步，梯度原样通过），"
            f"你的结果是 {got[0].item():.3g}"))
    if is_close(got, torch.stack([norms(power(w, k), ord=2) for k in range(max_k + 1)])):
        raise Incorrect(text(
            f"{what}: use the Frobenius norm (the default of torch.linalg.matrix_norm), "
            "not the spectral norm, to match the measurement in the lesson",
            f"{what}：请用 Frobenius 范数（torch.linalg.matrix_norm 的默认值），"
            "不要用谱范数，这样才和课上的测量一致"))
    if is_close(got, norms(w) ** torch.arange(max_k + 1)) or is_close(
            got[1:], norms(w) ** torch.arange(1, max_k + 1)):
        raise Incorrect(text(
            f"{what}: ‖W‖^k (the norm raised to the power k) is only an upper bound; take the "
            "norm of the matrix power, ‖W^k‖",
            f"{what}：‖W‖^k（范数的 k 次幂）只是一个上界；应当取矩阵幂的范数 ‖W^k‖"))
    expect_close(got, expected, what)


gradient_through_linear_rnn = Exercise(
    title=Bilingual("The gradient through k steps of a linear RNN",
                    "线性 RNN 中经过 k 步的梯度"),
    checker=_check_gradient_through_linear_rnn,
    reference=reference_gradient_through_linear_rnn,
    hints=(
        Bilingual("For h_t = W h_{t-1} + x_t the Jacobian of one step is W, so k steps back it "
                  "is W @ W @ ... @ W (k times).",
                  "对 h_t = W h_{t-1} + x_t，一步的雅可比矩阵就是 W，所以往回 k 步就是 "
                  "W @ W @ ... @ W（共 k 个）。"),
        Bilingual("torch.linalg.matrix_power(w, k) computes that product; k = 0 gives the "
                  "identity.",
                  "torch.linalg.matrix_power(w, k) 计算的正是这个乘积；k = 0 时得到单位矩阵。"),
        Bilingual("Return torch.stack([torch.linalg.matrix_norm(torch.linalg.matrix_power(w, k)) "
                  "for k in range(max_k + 1)]).",
                  "对 k = 0, 1, …, max_k 逐个计算 "
                  "torch.linalg.matrix_norm(torch.linalg.matrix_power(w, k))，"
                  "再用 torch.stack 把它们拼成一个张量返回。"),
    ),
)
