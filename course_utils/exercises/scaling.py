"""Exercises of lesson 03, the scaling factor.

- ``measure_variance``: sample q·k and measure its variance (it should be about d_k);
- ``entropy_of_rows``: the entropy of each row of attention weights, in nats;
- ``jacobian_of_softmax``: diag(p) − p pᵀ, the reason saturated rows pass no gradient.
"""

from __future__ import annotations

import math

import torch

from course_utils.exercises import (
    Exercise,
    Incorrect,
    as_number,
    attempt,
    expect_close,
    expect_shape,
)
from course_utils.language import Bilingual, text
from course_utils.scaling import row_entropy, softmax_jacobian

# ------------------------------------------------------------------ measure the variance
# The sample variance of 20 000 dot products has a relative standard error of about 2 %
# at d_k = 1 and 1 % above; 12 % is far outside that, so a correct answer always passes.
VARIANCE_TOLERANCE = 0.12
VARIANCE_D_KS = (1, 16, 256)


def _near(value: float, target: float) -> bool:
    return abs(value - target) < VARIANCE_TOLERANCE * target


def _check_variance(answer) -> None:
    torch.manual_seed(0)  # the learner draws from the global generator; evaluate() restores it
    measured = {}
    for d_k in VARIANCE_D_KS:
        result = attempt(answer, d_k)
        if isinstance(result, torch.Tensor) and result.numel() > 1:
            raise Incorrect(text(
                f"dot_product_variance({d_k}) returned a tensor of shape "
                f"{tuple(result.shape)}: reduce the n_pairs dot products to one "
                "number with .var()",
                f"dot_product_variance({d_k}) 返回了形状为 {tuple(result.shape)} 的张量："
                "应当用 .var() 把 n_pairs 个点积归约成一个数"))
        measured[d_k] = as_number(result, text(f"dot_product_variance({d_k})",
                                               f"dot_product_variance({d_k}) 的返回值"))
    if all(abs(value) < VARIANCE_TOLERANCE * math.sqrt(d_k) for d_k, value in measured.items()):
        raise Incorrect(text(
            "your values are all near 0: that is the mean of the dot products "
            "(E[q·k] = 0), not their variance (use .var(), not .mean())",
            "你的结果都接近 0：这是点积的均值（E[q·k] = 0），不是它们的方差"
            "（要用 .var()，而不是 .mean()）"))
    if all(_near(value, 1) for value in measured.values()):
        raise Incorrect(text(
            "your variance stays near 1 for every d_k, but Var(q·k) should grow like d_k: "
            "measure the raw dot products (no 1/sqrt(d_k) yet) and sum q*k over the "
            "d_k components before taking the variance",
            "无论 d_k 取多少，你的方差都停在 1 附近，但 Var(q·k) 应当随 d_k 线性增长："
            "要测量原始点积（先不要乘 1/sqrt(d_k)），并且在求方差之前把 q*k 沿 d_k "
            "个分量求和"))
    for d_k, value in measured.items():
        if d_k > 1 and _near(value, math.sqrt(d_k)):
            raise Incorrect(text(
                f"for d_k={d_k} you got {value:.3g}, about sqrt(d_k): that is the standard "
                "deviation; the variance is its square (use .var(), not .std())",
                f"d_k={d_k} 时你得到 {value:.3g}，约等于 sqrt(d_k)：这是标准差，"
                "方差是它的平方（要用 .var()，而不是 .std()）"))
    if all(_near(value, d_k * 7 / 144) for d_k, value in measured.items()):
        raise Incorrect(text(
            "your variances are about d_k / 20: torch.rand draws from U(0, 1), not N(0, 1) "
            "(then Var(q_i k_i) = 1/9 − 1/16 = 7/144); draw q and k with torch.randn",
            "你的方差约为 d_k / 20：torch.rand 是从 U(0, 1) 而不是 N(0, 1) 中采样的"
            "（这时 Var(q_i k_i) = 1/9 − 1/16 = 7/144）；请用 torch.randn 生成 q 和 k"))
    for d_k, value in measured.items():
        if d_k > 1 and _near(value, d_k * d_k):
            raise Incorrect(text(
                f"for d_k={d_k} you got {value:.3g}, about d_k²: divide, do not "
                "multiply (or measure the raw scores, without any factor)",
                f"d_k={d_k} 时你得到 {value:.3g}，约等于 d_k²：应当除，而不是乘"
                "（或者干脆测量不带任何因子的原始分数）"))
    for d_k, value in measured.items():
        if not _near(value, d_k):
            raise Incorrect(text(
                f"for d_k={d_k} you measured a variance of {value:.3g}, but theory says "
                f"{d_k} (allowed: ±{VARIANCE_TOLERANCE:.0%}); draw q and k from N(0, 1) "
                "with torch.randn and use n_pairs samples",
                f"d_k={d_k} 时你测得的方差是 {value:.3g}，而理论值是 {d_k}"
                f"（允许误差 ±{VARIANCE_TOLERANCE:.0%}）；请用 torch.randn 从 N(0, 1) "
                "中采样 q 和 k，并使用 n_pairs 个样本"))


def _reference_variance(d_k, n_pairs=20_000):
    q = torch.randn(n_pairs, d_k)  # (n_pairs, d_k), unit-variance components
    k = torch.randn(n_pairs, d_k)
    scores = (q * k).sum(dim=-1)  # (n_pairs,): one dot product per pair
    return scores.var().item()


measure_variance = Exercise(
    title=Bilingual("Measure Var(q·k)", "测量 Var(q·k)"),
    checker=_check_variance,
    reference=_reference_variance,
    hints=(
        Bilingual("Draw q and k of shape (n_pairs, d_k) with torch.randn.",
                  "用 torch.randn 生成形状为 (n_pairs, d_k) 的 q 和 k。"),
        Bilingual(
            "One dot product per pair: multiply elementwise, then sum over the last dim. Do "
            "not build q @ k.T: that (n_pairs, n_pairs) matrix of every query against every "
            "key has 400 million entries at n_pairs = 20 000 (1.6 GB) when you need only "
            "n_pairs of them.",
            "每一对只算一个点积：先逐元素相乘，再沿最后一维求和。不要算 q @ k.T：这个 "
            "(n_pairs, n_pairs) 矩阵把每个查询和每个键都配了一遍，n_pairs = 20 000 时有 "
            "4 亿个元素（1.6 GB），而你只需要其中 n_pairs 个。"),
        Bilingual("Return the variance of those n_pairs numbers as a float: .var().item().",
                  "把这 n_pairs 个数的方差作为 float 返回：.var().item()。"),
    ),
)


# ------------------------------------------------------------------ entropy of the rows
def _entropy_cases() -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    random = torch.softmax(3 * torch.randn(2, 3, 5, generator=generator), dim=-1)
    uniform = torch.full((1, 4), 0.25)
    with_zeros = torch.tensor([[1.0, 0.0, 0.0], [0.5, 0.5, 0.0]])  # one-hot, then two-way
    return [random, uniform, with_zeros]


def _check_entropy(answer) -> None:
    random, uniform, with_zeros = _entropy_cases()
    expected = row_entropy(random)  # (2, 3)
    result = attempt(answer, random)
    expect_shape(result, random.shape[:-1], text(
        "the entropy of weights (2, 3, 5) (one value per row; sum over the keys)",
        "形状为 (2, 3, 5) 的权重的熵（每行一个值；对键求和）"))
    random_rows = text("the entropy of random rows", "随机行的熵")
    if not result.is_floating_point() or not torch.isfinite(result).all():
        expect_close(result, expected, random_rows)  # names dtype, NaN, inf
    got = result.detach().double()
    if (got < -1e-6).any():
        raise Incorrect(text(
            "you returned negative entropies: H(p) = −Σ p log p has a minus sign",
            "你返回了负的熵：H(p) = −Σ p log p 前面有个负号"))
    if torch.allclose(got, expected.double() / math.log(2), atol=1e-4):
        raise Incorrect(text(
            "your values are 1.44 times too big: that is log base 2 (bits); "
            "the lesson measures nats, so use torch.log",
            "你的结果大了 1.44 倍：这是以 2 为底的对数（比特）；"
            "本课用奈特（自然对数）来度量，所以请用 torch.log"))
    if torch.allclose(got, expected.double() / random.shape[-1], atol=1e-4):
        raise Incorrect(text(
            "your values are the entropy divided by n_k: sum over the keys "
            "(.sum(dim=-1)), do not average (.mean(dim=-1))",
            "你的结果是熵除以 n_k：应当对键求和（.sum(dim=-1)），"
            "而不是求平均（.mean(dim=-1)）"))
    if torch.allclose(got, -torch.log(random.double()).sum(dim=-1), atol=1e-4):
        raise Incorrect(text(
            "you summed −log p without weighting each term by p: H(p) = −Σ p log p",
            "你把 −log p 直接相加了，没有给每一项乘上权重 p：H(p) = −Σ p log p"))
    expect_close(result, expected, random_rows, atol=1e-4)
    expect_close(attempt(answer, uniform), torch.tensor([math.log(4)]), text(
        "the entropy of a uniform row over 4 keys (should be log 4)",
        "4 个键上均匀分布的一行的熵（应当是 log 4）"), atol=1e-4)
    zeros = attempt(answer, with_zeros)
    if isinstance(zeros, torch.Tensor) and torch.isnan(zeros).any():
        raise Incorrect(text(
            "you return NaN for rows with a zero weight: 0 · log 0 counts as 0, "
            "e.g. keep only the terms where p > 0 with torch.where",
            "含有零权重的行你返回了 NaN：0 · log 0 应当记为 0，"
            "例如用 torch.where 只保留 p > 0 的项"))
    expect_close(zeros, torch.tensor([0.0, math.log(2)]), text(
        "the entropy of a one-hot row and of a 50/50 row",
        "一个 one-hot 行和一个五五开的行的熵"), atol=1e-4)


def _reference_entropy(weights):
    logs = torch.log(weights.clamp_min(1e-30))  # avoid log(0); those terms are zeroed next
    terms = torch.where(weights > 0, weights * logs, torch.zeros_like(weights))
    return -terms.sum(dim=-1)  # (..., n_q, n_k) -> (..., n_q)


entropy_of_rows = Exercise(
    title=Bilingual("Entropy of attention rows", "注意力权重各行的熵"),
    checker=_check_entropy,
    reference=_reference_entropy,
    hints=(
        Bilingual("H(p) = −Σ_k p_k log p_k, summed over the last dim (the keys).",
                  "H(p) = −Σ_k p_k log p_k，沿最后一维（键）求和。"),
        Bilingual("torch.log(0) is -inf and 0 · -inf is NaN: zero those terms with torch.where.",
                  "torch.log(0) 是 -inf，而 0 · -inf 是 NaN：用 torch.where 把这些项置为 0。"),
        Bilingual("A one-hot row has entropy 0, a uniform row over n keys has log(n).",
                  "one-hot 行的熵是 0，n 个键上均匀分布的行的熵是 log(n)。"),
    ),
)


# ------------------------------------------------------------------ softmax Jacobian
def _check_jacobian(answer) -> None:
    generator = torch.Generator().manual_seed(1)
    scores = torch.randn(4, generator=generator)
    p = torch.softmax(scores, dim=-1)
    expected = torch.autograd.functional.jacobian(lambda s: torch.softmax(s, dim=-1), scores)
    result = attempt(answer, p)
    expect_shape(result, (4, 4), text("the Jacobian of one row p (4,)",
                                      "单行 p (4,) 的雅可比矩阵"))
    if result.is_floating_point() and torch.isfinite(result).all():
        got, p64 = result.detach().double(), p.double()
        outer = torch.outer(p64, p64)
        mistakes = (
            (torch.diag(p64), text(
                "you returned only diag(p): each weight also depends on every other score, "
                "through the shared denominator (subtract the outer product p pᵀ)",
                "你只返回了 diag(p)：通过共同的分母，每个权重还依赖于其他所有分数"
                "（要减去外积 p pᵀ）")),
            (-expected.double(), text(
                "the sign is flipped: it is diag(p) − p pᵀ, so the diagonal is positive",
                "符号反了：应当是 diag(p) − p pᵀ，所以对角线是正的")),
            (torch.diag(p64 * (1 - p64)), text(
                "you returned only the diagonal p_i (1 − p_i): the off-diagonal entries "
                "−p_i p_j are missing (∂p_i/∂s_j is not 0 for i ≠ j)",
                "你只返回了对角线 p_i (1 − p_i)：缺少非对角元素 −p_i p_j"
                "（i ≠ j 时 ∂p_i/∂s_j 不为 0）")),
            (torch.eye(4, dtype=torch.float64) - outer, text(
                "the diagonal part is diag(p), not the identity: ∂p_i/∂s_i = p_i (1 − p_i)",
                "对角部分是 diag(p)，不是单位矩阵：∂p_i/∂s_i = p_i (1 − p_i)")),
            (-outer, text("you returned only −p pᵀ: add diag(p) (the δ_ij p_i part)",
                          "你只返回了 −p pᵀ：还要加上 diag(p)（即 δ_ij p_i 那一项）")),
        )
        for wrong, message in mistakes:
            if torch.allclose(got, wrong, atol=1e-5):
                raise Incorrect(message)
    expect_close(result, expected, text(
        "the Jacobian of one row (compared with torch.autograd)",
        "单行的雅可比矩阵（与 torch.autograd 的结果比较）"))
    batch = torch.softmax(torch.randn(2, 3, 4, generator=generator), dim=-1)
    try:
        batched = attempt(answer, batch)
    except RuntimeError as error:
        raise Incorrect(text(
            "it works for one row but fails on weights (2, 3, 4) "
            f"({error}); torch.diag and torch.outer take only 1-D input: "
            "use torch.diag_embed and unsqueeze instead",
            f"单行可以，但形状为 (2, 3, 4) 的权重出错了（{error}）；"
            "torch.diag 和 torch.outer 只接受一维输入：请改用 torch.diag_embed 和 unsqueeze"
        )) from None
    expect_shape(batched, (2, 3, 4, 4), text(
        "the Jacobians of weights (2, 3, 4), one (n, n) matrix per row",
        "形状为 (2, 3, 4) 的权重的雅可比矩阵，每行一个 (n, n) 矩阵"))
    expect_close(batched, softmax_jacobian(batch), text(
        "the Jacobians of a batch of rows", "一批行的雅可比矩阵"))


def _reference_jacobian(p):
    outer = p.unsqueeze(-1) * p.unsqueeze(-2)  # (..., n, n): p_i p_j
    return torch.diag_embed(p) - outer  # diag_embed works on batches, torch.diag does not


jacobian_of_softmax = Exercise(
    title=Bilingual("The softmax Jacobian", "softmax 的雅可比矩阵"),
    checker=_check_jacobian,
    reference=_reference_jacobian,
    hints=(
        Bilingual("∂p_i/∂s_j = p_i (δ_ij − p_j): a diagonal part and an outer-product part.",
                  "∂p_i/∂s_j = p_i (δ_ij − p_j)：由一个对角部分和一个外积部分组成。"),
        Bilingual("torch.diag_embed(p) builds diag(p) for every row of a batch.",
                  "torch.diag_embed(p) 为一批中的每一行构造 diag(p)。"),
        Bilingual("p.unsqueeze(-1) * p.unsqueeze(-2) is the outer product p pᵀ for every row.",
                  "p.unsqueeze(-1) * p.unsqueeze(-2) 就是每一行的外积 p pᵀ。"),
    ),
)
