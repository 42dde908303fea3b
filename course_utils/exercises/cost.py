"""Lesson 06 exercises: count a layer's FLOPs, and merge two partial softmax results."""

from __future__ import annotations

import math

import torch

from course_utils.attention import MultiHeadAttention
from course_utils.cost import counted_flops, online_softmax_update
from course_utils.exercises import (
    Exercise,
    Incorrect,
    as_number,
    attempt,
    expect_close,
    expect_finite,
    expect_shape,
    is_close,
)
from course_utils.language import Bilingual, text

# (seq_len, d_model, num_heads, batch_size): batch_size > 1 first, so a forgotten batch shows
# at once; seq_len != d_model everywhere, so swapping them shows too.
_CONFIGS = ((24, 32, 4, 3), (40, 48, 6, 2), (96, 16, 2, 1))


def _layer_flops_reference(seq_len, d_model, num_heads, batch_size):
    """Matrix-product FLOPs of one multi-head self-attention forward pass."""
    d_k = d_model // num_heads
    projections = 4 * 2 * batch_size * seq_len * d_model * d_model  # W_Q, W_K, W_V and W_O
    scores = 2 * batch_size * num_heads * seq_len * seq_len * d_k  # q kᵀ in every head
    weighted_sum = 2 * batch_size * num_heads * seq_len * seq_len * d_k  # weights @ v
    return projections + scores + weighted_sum


def _measured_flops(seq_len, d_model, num_heads, batch_size) -> int:
    """What FlopCounterMode counts on a real forward pass of the course's layer."""
    layer = MultiHeadAttention(d_model, num_heads)  # the FLOPs do not depend on the weights
    x = torch.zeros(batch_size, seq_len, d_model)
    with torch.no_grad():
        return sum(counted_flops(layer, x).values())


def _check_layer_flops(answer):
    for n, d, h, batch in _CONFIGS:
        got = as_number(attempt(answer, n, d, h, batch), text("the FLOP count", "FLOP 数"))
        expected = _measured_flops(n, d, h, batch)
        if math.isclose(got, expected, rel_tol=1e-9):
            continue
        quadratic = 2 * batch * h * n * n * (d // h)  # one of q kᵀ or weights @ v
        projection = 2 * batch * n * d * d  # one of the four projections
        where = text(f"for seq_len={n}, d_model={d}, num_heads={h}, batch_size={batch}",
                     f"当 seq_len={n}、d_model={d}、num_heads={h}、batch_size={batch} 时，")
        if math.isclose(2 * got, expected):
            raise Incorrect(text(
                f"{where} you count half of FlopCounterMode's {expected}: a multiply-add is "
                "2 FLOPs, so (m, k) @ (k, p) costs 2·m·k·p",
                f"{where}你数出的只有 FlopCounterMode 所数 {expected} 的一半：一次乘加算 "
                "2 个 FLOP，所以 (m, k) @ (k, p) 的代价是 2·m·k·p"))
        if math.isclose(batch * got, expected):
            raise Incorrect(text(
                f"{where} your count is 1/batch of the real one: multiply by batch_size",
                f"{where}你的计数只有实际值的 1/batch：要乘上 batch_size"))
        if math.isclose(got + projection, expected):
            raise Incorrect(text(
                f"{where} you are one projection short (2·batch·n·d_model²): there are four, "
                "W_Q, W_K, W_V and the output projection W_O",
                f"{where}你少算了一个投影（2·batch·n·d_model²）：投影一共有四个，"
                "W_Q、W_K、W_V，以及输出投影 W_O"))
        if math.isclose(got + quadratic, expected):
            raise Incorrect(text(
                f"{where} you are missing 2·batch·num_heads·n²·d_k: weights @ V costs as much "
                "as Q Kᵀ",
                f"{where}你漏掉了 2·batch·num_heads·n²·d_k：weights @ V 的代价和 Q Kᵀ 一样大"))
        if math.isclose(got - 2 * (h - 1) * quadratic, expected):
            raise Incorrect(text(
                f"{where} your Q Kᵀ and weights @ V are num_heads times too big: each head "
                "works in d_k = d_model / num_heads dimensions",
                f"{where}你算的 Q Kᵀ 和 weights @ V 大了 num_heads 倍：每个头只在 "
                "d_k = d_model / num_heads 维上计算"))
        if math.isclose(got, _layer_flops_reference(d, n, h, batch)):
            raise Incorrect(text(
                f"{where} you swapped seq_len and d_model: the arguments come in "
                "the order (seq_len, d_model, num_heads, batch_size)",
                f"{where}你把 seq_len 和 d_model 弄反了：参数的顺序是 "
                "(seq_len, d_model, num_heads, batch_size)"))
        if got > expected and (got - expected) % (batch * h * n * n) == 0:
            raise Incorrect(text(
                f"{where} you count {got - expected:.0f} more than FlopCounterMode, a multiple "
                "of batch·num_heads·n²: leave the softmax out, only matrix products are counted",
                f"{where}你比 FlopCounterMode 多数了 {got - expected:.0f}，恰好是 "
                "batch·num_heads·n² 的整数倍：不要算 softmax，这里只统计矩阵乘法"))
        raise Incorrect(text(
            f"{where} you count {got:.0f} FLOPs; FlopCounterMode counts {expected}",
            f"{where}你数出 {got:.0f} 个 FLOP，而 FlopCounterMode 数出 {expected} 个"))


layer_flops = Exercise(
    title=Bilingual("count the FLOPs of one attention layer", "数出一层注意力的 FLOPs"),
    checker=_check_layer_flops,
    reference=_layer_flops_reference,
    hints=(
        Bilingual(
            "Count the four projections (each (n, d_model) @ (d_model, d_model)), then Q Kᵀ "
            "and weights @ V in every head (each (n, d_k) @ (d_k, n) or (n, n) @ (n, d_k)).",
            "先数四个投影（每个都是 (n, d_model) @ (d_model, d_model)），再数每个头里的 "
            "Q Kᵀ 和 weights @ V（分别是 (n, d_k) @ (d_k, n) 和 (n, n) @ (n, d_k)）。"),
        Bilingual(
            "A product (m, k) @ (k, p) costs 2·m·k·p FLOPs; everything is done batch_size "
            "times; d_k = d_model // num_heads.",
            "乘积 (m, k) @ (k, p) 的代价是 2·m·k·p 个 FLOP；所有计算都要做 batch_size 遍；"
            "d_k = d_model // num_heads。"),
    ),
)


def _merge_partials_reference(a, b):
    """Merge two partial softmax states (max, sum, out) taken over two sets of keys.

    max and sum are (..., n_q, 1), out is (..., n_q, d_v) and still unnormalised.
    """
    max_a, sum_a, out_a = a
    max_b, sum_b, out_b = b
    new_max = torch.maximum(max_a, max_b)
    # Each part was summed relative to its own max: bring both to the common one.
    scale_a = torch.exp(max_a - new_max)  # (..., n_q, 1), at most 1
    scale_b = torch.exp(max_b - new_max)
    return new_max, sum_a * scale_a + sum_b * scale_b, out_a * scale_a + out_b * scale_b


def _partial(scores, values):
    """The (max, sum, out) state of one set of keys, from the empty state."""
    n_q, d_v = scores.shape[-2], values.shape[-1]
    empty = (torch.full((*scores.shape[:-1], 1), float("-inf"), dtype=scores.dtype),
             torch.zeros((*scores.shape[:-1], 1), dtype=scores.dtype),
             torch.zeros((*scores.shape[:-2], n_q, d_v), dtype=scores.dtype))
    return online_softmax_update(*empty, scores, values)


def _check_merge_partials(answer):
    generator = torch.Generator().manual_seed(6)
    q = torch.randn(2, 5, 8, generator=generator, dtype=torch.float64)
    k = torch.randn(2, 12, 8, generator=generator, dtype=torch.float64)
    v = torch.randn(2, 12, 3, generator=generator, dtype=torch.float64)
    k[:, 7:] *= 3  # the second part's scores are larger, so the two maxes really differ
    scores = q @ k.transpose(-2, -1) / math.sqrt(8)  # (2, 5, 12)
    a = _partial(scores[..., :7], v[:, :7])
    b = _partial(scores[..., 7:], v[:, 7:])
    result = attempt(answer, a, b)
    if not isinstance(result, tuple) or len(result) != 3:
        raise Incorrect(text(
            "return the merged state as a tuple of three tensors: (max, sum, out)",
            "合并后的状态应当以三个张量组成的元组返回：(max, sum, out)"))
    want_max, want_sum, want_out = _merge_partials_reference(a, b)
    got_max, got_sum, got_out = result
    for name, got, want in (("max", got_max, want_max), ("sum", got_sum, want_sum),
                            ("out", got_out, want_out)):
        merged = text(f"the merged {name}", f"合并后的 {name} ")
        expect_shape(got, want.shape, merged)
        if not got.is_floating_point():
            raise Incorrect(text(f"the merged {name} should be floating-point, got {got.dtype}",
                                 f"合并后的 {name} 应当是浮点张量，实际的 dtype 是 {got.dtype}"))
        expect_finite(got, merged)
    if not is_close(got_max, want_max):
        raise Incorrect(text("the merged max should be the larger of the two, row by row: "
                             "torch.maximum(max_a, max_b)",
                             "合并后的 max 应当逐行取两者中较大的那个："
                             "torch.maximum(max_a, max_b)"))
    if is_close(got_out, want_out / want_sum):
        raise Incorrect(text(
            "out should stay unnormalised: divide by the sum once, at the very end",
            "out 应当保持未归一化：只在最后除以 sum 一次"))
    for name, got, part_a, part_b in (("sum", got_sum, a[1], b[1]),
                                      ("out", got_out, a[2], b[2])):
        if is_close(got, part_a + part_b):
            raise Incorrect(text(
                f"you added the two {name}s as they are, but each was taken relative to its "
                f"own max: multiply {name}_a by exp(max_a - new_max), and b likewise, first",
                f"你把两个 {name} 直接相加了，可它们各自是相对于自己的 max 算的："
                f"先把 {name}_a 乘上 exp(max_a - new_max)，b 也照此处理，再相加"))
        grown = part_a * torch.exp(want_max - a[0]) + part_b * torch.exp(want_max - b[0])
        if is_close(got, grown):
            raise Incorrect(text(
                f"the rescaling of the {name}s runs the wrong way: the factor is "
                "exp(old max - new max), which is at most 1",
                f"{name} 的重新缩放方向反了：因子应当是 exp(old max - new max)，它不超过 1"))
    expect_close(got_sum, want_sum, text("the merged sum", "合并后的 sum "))
    expect_close(got_out, want_out, text("the merged out", "合并后的 out "))
    expected = torch.softmax(scores, dim=-1) @ v  # (2, 5, 3): attention over all 12 keys
    expect_close(got_out.double() / got_sum.double(), expected,
                 text("out / sum after your merge", "你合并之后的 out / sum "))


merge_partials = Exercise(
    title=Bilingual("merge two partial softmax results", "合并两个部分 softmax 结果"),
    checker=_check_merge_partials,
    reference=_merge_partials_reference,
    hints=(
        Bilingual("The merged max is torch.maximum(max_a, max_b).",
                  "合并后的 max 就是 torch.maximum(max_a, max_b)。"),
        Bilingual(
            "Part a's sum and out were computed with exp(score - max_a). To express them "
            "with the new max, multiply both by exp(max_a - new_max); same for b; then add.",
            "a 部分的 sum 和 out 是用 exp(score - max_a) 算出来的。要换成以新的 max 为基准，"
            "把两者都乘上 exp(max_a - new_max)；b 部分同理；然后相加。"),
    ),
)
