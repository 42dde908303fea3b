"""Lesson 05 exercises: build a causal + padding mask; attention weights without NaN."""

from __future__ import annotations

import torch

from course_utils.exercises import (
    Exercise,
    Incorrect,
    attempt,
    expect_close,
    expect_finite,
    expect_shape,
)
from course_utils.language import Bilingual, text
from course_utils.masks import causal_mask, combine_masks, padding_mask


def _combined_mask_reference(lengths, seq_len):
    """lengths: real length of each sentence (batch,) -> bool (batch, 1, seq_len, seq_len).

    True = may attend: query i sees key j when j <= i and key j is a real token.
    """
    causal = causal_mask(seq_len)  # (seq_len, seq_len)
    keys = padding_mask(lengths, max_len=seq_len)[:, None]  # (batch, 1, 1, seq_len)
    return combine_masks(causal, keys)  # (batch, 1, seq_len, seq_len)


def _first_position(where: torch.Tensor) -> str:
    b, _, i, j = (int(index) for index in where.nonzero()[0])
    return text(f"sentence {b}, query {i}, key {j}", f"句子 {b}、查询 {i}、键 {j}")


def _check_combined_mask(answer):
    # seq_len longer than every sentence: the padding must come from seq_len, not max(lengths).
    for lengths, seq_len in (([4, 2, 3], 4), ([3, 1], 5)):
        try:
            result = attempt(answer, list(lengths), seq_len)
        except RuntimeError as error:  # typically a shape mismatch
            raise Incorrect(text(
                f"with lengths={lengths} and seq_len={seq_len} your code raised "
                f"RuntimeError: {error}. A batch can be padded beyond its longest sentence: "
                "build the padding mask with max_len=seq_len",
                f"批次可以填充得比最长的句子还长，所以构造填充掩码时要传 max_len=seq_len。"
                f"在 lengths={lengths}、seq_len={seq_len} 时，你的代码抛出了 "
                f"RuntimeError：{error}")
            ) from None
        expected = _combined_mask_reference(lengths, seq_len)
        if not isinstance(result, torch.Tensor) or result.dtype != torch.bool:
            got = result.dtype if isinstance(result, torch.Tensor) else type(result).__name__
            raise Incorrect(text(f"return a bool tensor (True = may attend), got {got}",
                                 f"应当返回布尔张量（True = 可以关注），实际得到 {got}"))
        if tuple(result.shape) == tuple(expected.shape[:1] + expected.shape[2:]):
            raise Incorrect(text(
                f"shape {tuple(result.shape)} is (batch, n_q, n_k): add the heads axis, "
                f"(batch, 1, seq_len, seq_len) = {tuple(expected.shape)}, so that it "
                "broadcasts over scores (batch, heads, n_q, n_k)",
                f"形状 {tuple(result.shape)} 是 (batch, n_q, n_k)：还要加上头这个轴，即 "
                f"(batch, 1, seq_len, seq_len) = {tuple(expected.shape)}，这样它才能在分数 "
                "(batch, heads, n_q, n_k) 上广播"
            ))
        expect_shape(result, expected.shape, text("the mask (batch, 1, seq_len, seq_len)",
                                                  "掩码 (batch, 1, seq_len, seq_len) "))
        if torch.equal(result, ~expected):
            raise Incorrect(text(
                "your mask is exactly flipped: True should mean 'may attend' (the convention "
                "of this course and of F.scaled_dot_product_attention), not 'blocked'",
                "你的掩码正好取反了：True 应当表示“可以关注”（这是本课程和 "
                "F.scaled_dot_product_attention 的约定），而不是“屏蔽”"
            ))
        future = torch.ones(seq_len, seq_len, dtype=torch.bool).triu(diagonal=1)
        if (result & future).any():
            raise Incorrect(text(
                f"a query may see a later key ({_first_position(result & future)}): the causal "
                "part is missing, uses triu where tril belongs, or was combined with `|` "
                "instead of `&`",
                f"有查询能看到后面的键（{_first_position(result & future)}）：因果部分缺失了，"
                "或者该用 tril 的地方用了 triu，或者组合时用了 `|` 而不是 `&`"
            ))
        padded_keys = ~padding_mask(lengths, max_len=seq_len)[:, None]  # (batch, 1, 1, n_k)
        if (result & padded_keys).any():
            raise Incorrect(text(
                f"a padded key is allowed ({_first_position(result & padded_keys)}): the padding "
                "mask must block keys, i.e. sit on the last axis, (batch, 1, 1, seq_len)",
                f"有填充的键被允许了（{_first_position(result & padded_keys)}）：填充掩码必须"
                "屏蔽键，也就是位于最后一个轴上，形状为 (batch, 1, 1, seq_len)"
            ))
        empty_rows = ~result.any(dim=-1) & expected.any(dim=-1)  # (batch, 1, seq_len)
        real_queries = padding_mask(lengths, max_len=seq_len)  # (batch, 1, seq_len)
        if (empty_rows & real_queries).any():
            b, _, i = (int(index) for index in (empty_rows & real_queries).nonzero()[0])
            raise Incorrect(text(
                f"query {i} of sentence {b} allows no key at all: a token must see itself, "
                "so keep the diagonal (tril(), not tril(diagonal=-1))",
                f"句子 {b} 的查询 {i} 一个键都不允许：词元必须看得到它自己，"
                "所以要保留对角线（用 tril()，不是 tril(diagonal=-1)）"
            ))
        if empty_rows.any():
            raise Incorrect(text(
                "the padded query rows allow no key at all: you masked the padded *queries*. "
                "A row with no allowed key gives NaN in a plain softmax; mask only the keys",
                "填充位置的查询行一个键都不允许：你屏蔽了填充的*查询*。没有允许键的行在普通 "
                "softmax 中会得到 NaN；只屏蔽键就够了"
            ))
        if not torch.equal(result, expected):
            raise Incorrect(text(
                f"your mask blocks a key it should allow ({_first_position(expected & ~result)}); "
                "a query sees itself and every earlier real token",
                f"你的掩码屏蔽了一个本应允许的键（{_first_position(expected & ~result)}）；"
                "查询应当看得到它自己以及前面的每个真实词元"
            ))


build_combined_mask = Exercise(
    title=Bilingual("build a causal + padding mask", "构造因果 + 填充掩码"),
    checker=_check_combined_mask,
    reference=_combined_mask_reference,
    hints=(
        Bilingual("Two masks: causal_mask(seq_len) is (seq_len, seq_len); "
                  "padding_mask(lengths, max_len=seq_len) is (batch, 1, seq_len).",
                  "两个掩码：causal_mask(seq_len) 的形状是 (seq_len, seq_len)；"
                  "padding_mask(lengths, max_len=seq_len) 的形状是 (batch, 1, seq_len)。"),
        Bilingual("The padding mask is about keys, so it sits on the last axis; add the heads "
                  "axis with [:, None] to make it (batch, 1, 1, seq_len).",
                  "填充掩码管的是键，所以它位于最后一个轴上；用 [:, None] 加上头这个轴，"
                  "把它变成 (batch, 1, 1, seq_len)。"),
        Bilingual("A key is allowed only if both masks allow it: combine with & (or "
                  "combine_masks).",
                  "只有两个掩码都允许时，一个键才被允许：用 &（或 combine_masks）组合。"),
    ),
)


_FLIPPED = Bilingual(
    "the mask is flipped: True means 'may attend', so the blocked keys are where the mask is "
    "False",
    "掩码取反了：True 表示“可以关注”，所以被屏蔽的键是掩码为 False 的位置")


def _safe_weights_reference(scores, mask):
    """scores (..., n_q, n_k), bool mask broadcastable to it -> weights (..., n_q, n_k).

    Softmax over the allowed keys; a row with no allowed key gets all-zero weights.
    """
    row_has_key = mask.any(dim=-1, keepdim=True)  # (..., n_q, 1)
    # Give the empty rows a finite score (0) so their softmax is not 0/0; zero them after.
    scores = scores.masked_fill(~mask, float("-inf")).masked_fill(~row_has_key, 0.0)
    weights = torch.softmax(scores, dim=-1)
    return weights.masked_fill(~row_has_key, 0.0)


def _left_padded_case(generator):
    """Scores (batch, num_heads, n_q, n_k) and a causal + left-padding mask with empty rows."""
    lengths = torch.tensor([6, 3, 1])  # real tokens at the end of each sentence of 6
    real = padding_mask(lengths, max_len=6).flip(-1)  # (3, 1, 6), pads on the left
    mask = causal_mask(6) & real[:, None]  # (3, 1, 6, 6)
    scores = 4 * torch.randn(3, 2, 6, 6, generator=generator)
    scores[0, 0, 3, 2] = 120.0  # exp(120) overflows float32: the row max must come off first
    return scores, mask


def _cached_case(generator):
    """Non-square: 3 new queries over 7 keys, with rows whose every key is masked."""
    mask = torch.rand(2, 1, 3, 7, generator=generator) < 0.5  # (2, 1, n_q, n_k)
    mask[:, :, :, 0] = True
    mask[0, 0, 1] = False  # an empty row in each sentence
    mask[1, 0, 2] = False
    scores = 3 * torch.randn(2, 4, 3, 7, generator=generator)  # (batch, num_heads, n_q, n_k)
    return scores, mask


def _weights_of(answer, scores, mask, expected_shape):
    weights = attempt(answer, scores, mask)
    expect_shape(weights, expected_shape, text("weights (batch, num_heads, n_q, n_k)",
                                               "权重 (batch, num_heads, n_q, n_k) "))
    if not weights.is_floating_point():
        raise Incorrect(text(f"weights should be floating-point, got dtype {weights.dtype}",
                             f"权重应当是浮点数，实际的 dtype 是 {weights.dtype}"))
    return weights


def _check_safe_weights(answer):
    generator = torch.Generator().manual_seed(7)
    # First every key allowed (n_q != n_k): only the softmax itself is tested.
    scores = torch.randn(2, 3, 4, 5, generator=generator)
    weights = _weights_of(answer, scores, torch.ones(4, 5, dtype=torch.bool), scores.shape)
    if ((weights == 0) | weights.isnan()).all():
        raise Incorrect(text(
            "with every key allowed (a mask of all True) every weight is 0 or NaN: "
            "the mask is flipped. True means 'may attend', so the blocked keys are "
            "where the mask is False",
            "所有键都被允许（掩码全为 True）时，每个权重却都是 0 或 NaN：掩码取反了。"
            "True 表示“可以关注”，所以被屏蔽的键是掩码为 False 的位置"))
    if weights.isfinite().all() and torch.allclose(
            weights.double().sum(dim=-2), torch.ones(2, 3, 5, dtype=torch.float64), atol=1e-4):
        raise Incorrect(text(
            "the softmax runs over the queries (dim=-2): it must normalise each row "
            "over the keys, dim=-1",
            "softmax 是沿查询做的（dim=-2）：它必须把每一行在键上归一化，即 dim=-1"))
    expect_close(weights, torch.softmax(scores.double(), dim=-1),
                 text("weights with every key allowed (a plain softmax over dim=-1)",
                      "所有键都被允许时的权重（即沿 dim=-1 的普通 softmax）"),
                 atol=1e-6, rtol=1e-5)

    for scores, mask in (_left_padded_case(generator), _cached_case(generator)):
        empty = ~mask.any(dim=-1).expand(scores.shape[:-1])  # (..., n_q) no allowed key
        full = mask.all(dim=-1).expand(scores.shape[:-1])  # (..., n_q) every key allowed
        expected = _safe_weights_reference(scores.double(), mask)
        got = _weights_of(answer, scores, mask, expected.shape).double()
        nan_rows = got.isnan().any(dim=-1)
        if nan_rows.any():
            if not (nan_rows & ~empty).any():
                raise Incorrect(text(
                    "the rows with no allowed key are NaN: softmax over a row of -inf is "
                    "0/0. Give those rows a finite score before the softmax (or replace their "
                    "NaN), then set their weights to 0",
                    "没有允许键的行是 NaN：对一整行 -inf 做 softmax 就是 0/0。在 softmax 之前"
                    "给这些行一个有限的分数（或者替换掉它们的 NaN），再把它们的权重设为 0"
                ))
            if torch.equal(nan_rows, full):
                raise Incorrect(_FLIPPED)
            raise Incorrect(text(
                "weights contain NaN in rows that do have allowed keys: did you subtract "
                "each row's maximum before exp? exp(120) overflows float32",
                "有允许键的行里出现了 NaN：你在做 exp 之前减去每行的最大值了吗？"
                "exp(120) 在 float32 中会溢出"
            ))
        expect_finite(got, text("weights", "权重"))
        allowed = mask.expand_as(got)
        if (got[~allowed] != 0).any() and (got[allowed] == 0).all():
            raise Incorrect(_FLIPPED)
        sums = got.sum(dim=-1)  # (..., n_q)
        if torch.allclose(sums[empty], torch.ones_like(sums[empty]), atol=1e-3):
            raise Incorrect(text(
                "the rows with no allowed key sum to 1: a finite fill such as -1e9 or "
                "finfo.min spreads the weight uniformly over keys that are all blocked. "
                "Those rows should be all zero",
                "没有允许键的行之和是 1：-1e9 或 finfo.min 这样的有限填入值，会把权重均匀地"
                "分给一批全都被屏蔽的键。这些行应当全为零"
            ))
        if not torch.allclose(sums[~empty], torch.ones_like(sums[~empty]), atol=1e-4):
            raise Incorrect(text(
                "rows that have allowed keys do not sum to 1: mask the scores before the "
                "softmax, not the weights after it",
                "有允许键的行之和不是 1：应当在 softmax 之前屏蔽分数，而不是在之后屏蔽权重"
            ))
        if (got[~allowed] != 0).any():
            raise Incorrect(text("a blocked key gets weight: set blocked scores to -inf before "
                                 "the softmax",
                                 "被屏蔽的键得到了权重：在 softmax 之前把被屏蔽的分数设为 -inf"))
        if (got[empty] != 0).any():
            raise Incorrect(text("a row with no allowed key should be all zero",
                                 "没有允许键的行应当全为零"))
        expect_close(got, expected, text("weights", "权重"), atol=1e-6, rtol=1e-5)
    _check_gradient(answer)


def _check_gradient(answer):
    """The NaN must stay out of the backward pass too: gradients finite, as the reference's."""
    generator = torch.Generator().manual_seed(8)
    scores, mask = _left_padded_case(generator)
    upstream = torch.randn(scores.shape, generator=generator)
    leaf = scores.clone().requires_grad_(True)
    # The learner's function gets a clone of the leaf, so in-place edits are allowed and the
    # gradient still reaches the leaf.
    weights = attempt(lambda m: answer(leaf.clone(), m), mask)
    if not weights.requires_grad:
        raise Incorrect(text(
            "the weights carry no gradient: keep every step in torch (no .detach(), "
            "numpy or .tolist()), so a model can train through them",
            "权重不带梯度：每一步都要留在 torch 里（不用 .detach()、numpy 或 .tolist()），"
            "模型才能通过它们训练"))
    try:
        (grad,) = torch.autograd.grad((weights * upstream).sum(), leaf)
    except RuntimeError as error:
        if "inplace" not in str(error):
            raise
        raise Incorrect(text(
            "the weights are right but the backward pass fails: an in-place operation "
            "(a method ending in _) changed a tensor that autograd needs, such as the "
            "softmax's output. Use the out-of-place version there (masked_fill, not "
            "masked_fill_)",
            "权重是对的，但反向传播失败了：一个原地操作（名字以 _ 结尾的方法）修改了 autograd "
            "需要的张量，比如 softmax 的输出。那里要用非原地的版本（masked_fill，而不是 "
            "masked_fill_）"
        )) from None
    reference = scores.double().requires_grad_(True)
    (expected,) = torch.autograd.grad(
        (_safe_weights_reference(reference, mask) * upstream.double()).sum(), reference)
    if not torch.isfinite(grad).all():
        raise Incorrect(text(
            "the weights are right but the gradient of the scores contains NaN: a NaN made "
            "in the forward pass (softmax of a row of -inf) comes back in the backward pass "
            "even when it was replaced afterwards, e.g. when -inf was added to the scores. "
            "Make sure no row of the softmax's input is all -inf",
            "权重是对的，但分数的梯度中有 NaN：前向传播中产生的 NaN（对一整行 -inf 做 "
            "softmax）即使事后被替换掉，也会在反向传播中回来，比如把 -inf 加到分数上时。"
            "要确保 softmax 的输入中没有哪一行全是 -inf"
        ))
    expect_close(grad, expected, text("the gradient of the scores", "分数的梯度"),
                 atol=1e-6, rtol=1e-5)


safe_weights = Exercise(
    title=Bilingual("attention weights without NaN", "不含 NaN 的注意力权重"),
    checker=_check_safe_weights,
    reference=_safe_weights_reference,
    hints=(
        Bilingual("Find the empty rows first: mask.any(dim=-1, keepdim=True) is False exactly "
                  "there.",
                  "先找出空行：mask.any(dim=-1, keepdim=True) 恰好在空行处为 False。"),
        Bilingual("Block the disallowed keys with -inf as usual, but give the empty rows a finite "
                  "score (any number, e.g. 0) before the softmax, so it never sees a row of only "
                  "-inf.",
                  "像往常一样用 -inf 屏蔽不允许的键，但在 softmax 之前给空行一个有限的分数"
                  "（任何数都行，比如 0），让 softmax 永远不会遇到一整行 -inf。"),
        Bilingual("After the softmax, set the empty rows' weights to 0 with masked_fill.",
                  "softmax 之后，用 masked_fill 把空行的权重设为 0。"),
    ),
)
