"""Lesson 10 exercises: one head's attention from a layer's raw weights; find the
previous-token head in a stack of attention maps. Messages, titles and hints follow the
course language (``course_utils.language``)."""

from __future__ import annotations

import copy
import math

import torch

from course_utils.attention import MultiHeadAttention
from course_utils.exercises import (
    Exercise,
    Incorrect,
    attempt,
    expect_close,
    expect_finite,
    expect_shape,
)
from course_utils.language import Bilingual, text

# ---------------------------------------------------------------------------------------
# Exercise 1: one head's attention weights from w_q, w_k and the padding mask
# ---------------------------------------------------------------------------------------


def _one_head_weights_reference(x, attention_mask, attn, head):
    """Head ``head``'s weights (batch, seq_len, seq_len) of ``attn`` on x (batch, seq_len, d_model).

    attention_mask (batch, seq_len) bool: True = real token; padded keys get weight 0.
    """
    d_k = attn.d_k
    columns = slice(head * d_k, (head + 1) * d_k)  # head h owns one block of d_k features
    q = x @ attn.w_q.weight[columns].T + attn.w_q.bias[columns]  # (batch, seq_len, d_k)
    k = x @ attn.w_k.weight[columns].T + attn.w_k.bias[columns]  # (batch, seq_len, d_k)
    scores = q @ k.transpose(-2, -1) / math.sqrt(d_k)  # (batch, n_q, n_k)
    scores = scores.masked_fill(~attention_mask[:, None, :], float("-inf"))  # padded keys
    return torch.softmax(scores, dim=-1)  # (batch, n_q, n_k), each row sums to 1


def _variant(x, attention_mask, attn, head, *, scale=None, columns=None, bias=True,
             transpose_weights=False, mask="keys"):
    """The reference with one classic slip switched on, to name a wrong answer's mistake."""
    d_k = attn.d_k
    columns = slice(head * d_k, (head + 1) * d_k) if columns is None else columns

    def project(linear):
        weight = linear.weight.T if transpose_weights else linear.weight
        out = x @ weight[columns].T
        return out + linear.bias[columns] if bias else out

    scale = 1 / math.sqrt(d_k) if scale is None else scale
    scores = project(attn.w_q) @ project(attn.w_k).transpose(-2, -1) * scale
    keys = attention_mask[:, None, :]  # (batch, 1, n_k)
    if mask == "keys":
        scores = scores.masked_fill(~keys, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    if mask == "after softmax":
        weights = weights.masked_fill(~keys, 0.0)
    return weights


_SLIPS = [
    (dict(scale=1.0), Bilingual(
        "you did not scale the scores: divide q kᵀ by sqrt(d_k)",
        "你没有缩放分数：请把 q kᵀ 除以 sqrt(d_k)")),
    ("sqrt_d_model", Bilingual(
        "you scaled by 1/sqrt(d_model); each head compares vectors of width d_k, "
        "so divide by sqrt(d_k) = sqrt(d_model / num_heads)",
        "你按 1/sqrt(d_model) 缩放了；每个头比较的是宽度为 d_k 的向量，"
        "所以应除以 sqrt(d_k) = sqrt(d_model / num_heads)")),
    ("d_k", Bilingual("you divided by d_k; the scale is 1/sqrt(d_k), not 1/d_k",
                      "你除以的是 d_k；缩放因子是 1/sqrt(d_k)，而不是 1/d_k")),
    (dict(bias=False), Bilingual(
        "the projections lack their bias: nn.Linear computes x Wᵀ + b "
        "(use attn.w_q(x) or add attn.w_q.bias)",
        "投影缺少偏置：nn.Linear 计算的是 x Wᵀ + b（用 attn.w_q(x)，或者加上 attn.w_q.bias）")),
    (dict(transpose_weights=True), Bilingual(
        "the weight matrices are transposed: nn.Linear stores W as "
        "(out_features, in_features) and computes x @ W.T + b",
        "权重矩阵转置了：nn.Linear 把 W 存为 (out_features, in_features)，"
        "计算的是 x @ W.T + b")),
    ("strided", Bilingual(
        "head h got every num_heads-th feature: it owns one block, features "
        "h*d_k .. (h+1)*d_k - 1",
        "第 h 个头拿到的是每隔 num_heads 个取一个的特征：它拥有的是连续的一块，"
        "即特征 h*d_k .. (h+1)*d_k - 1")),
    (dict(mask="after softmax"), Bilingual(
        "rows do not sum to 1: the padding was zeroed after the "
        "softmax. Fill the padded keys' scores with -inf before it",
        "各行之和不为 1：填充是在 softmax 之后才置零的。请在 softmax 之前把填充键的分数填成 -inf")),
]
_OVER_QUERIES = Bilingual(
    "the softmax runs over the queries (dim=-2), so columns sum to 1 instead of "
    "rows: it belongs on the keys, dim=-1",
    "softmax 是沿查询（dim=-2）做的，所以和为 1 的是列而不是行：它应当沿键做，即 dim=-1")


def _named_slip(result, x, attention_mask, attn, head):
    """The message of the first classic slip ``result`` reproduces, or None."""
    for change, message in _SLIPS:
        if change == "sqrt_d_model":
            change = dict(scale=1 / math.sqrt(attn.d_model))
        elif change == "d_k":
            change = dict(scale=1 / attn.d_k)
        elif change == "strided":
            change = dict(columns=slice(head, None, attn.num_heads))
        with torch.no_grad():
            slip = _variant(x, attention_mask, attn, head, **change)
        if torch.allclose(result, slip.double(), atol=1e-5, rtol=1e-4):
            return str(message)
    return None


def _random_attention(d_model, num_heads, seed):
    """A MultiHeadAttention whose scores are of order 1, like a trained model's."""
    generator = torch.Generator().manual_seed(seed)
    attn = MultiHeadAttention(d_model, num_heads)
    with torch.no_grad():
        for linear in (attn.w_q, attn.w_k, attn.w_v, attn.w_o):
            linear.weight.copy_(torch.randn(linear.weight.shape, generator=generator)
                                * 2 / math.sqrt(d_model))
            linear.bias.copy_(torch.randn(linear.bias.shape, generator=generator))
    return attn


def _check_one_head_weights(answer):
    # Non-square everywhere: batch, seq_len, d_model, num_heads and d_k all differ; the
    # second sentence of each batch is padded.
    for d_model, num_heads, seq_len, lengths, head, seed in (
        (20, 4, 7, [7, 4], 2, 1),
        (24, 3, 6, [3, 6, 5], 0, 2),
    ):
        attn = _random_attention(d_model, num_heads, seed)
        x = torch.randn(len(lengths), seq_len, d_model,
                        generator=torch.Generator().manual_seed(seed + 10))
        attention_mask = torch.arange(seq_len) < torch.tensor(lengths)[:, None]  # (batch, n)
        with torch.no_grad():
            expected = _one_head_weights_reference(x, attention_mask, attn, head)
        # The learner gets a copy of the module: changing its weights changes nothing here.
        result = attempt(answer, x, attention_mask, copy.deepcopy(attn), head)
        batch = len(lengths)
        if isinstance(result, torch.Tensor) and tuple(result.shape) == (
                batch, num_heads, seq_len, seq_len):
            shape = tuple(result.shape)
            raise Incorrect(text(
                f"shape {shape} holds every head (batch, num_heads, n_q, n_k): "
                f"return only head {head}, (batch, seq_len, seq_len)",
                f"形状 {shape} 包含了所有的头 (batch, num_heads, n_q, n_k)："
                f"只返回第 {head} 个头，即 (batch, seq_len, seq_len)"))
        expect_shape(result, expected.shape,
                     Bilingual("the weights (batch, seq_len, seq_len)",
                               "权重 (batch, seq_len, seq_len)"))
        if not result.is_floating_point():
            raise Incorrect(text(
                f"the weights should be a floating-point tensor, got {result.dtype}",
                f"权重应当是浮点张量，而你返回的是 {result.dtype}"))
        result = result.detach().double()
        padded_keys = ~attention_mask[:, None, :].expand_as(expected)  # (batch, n_q, n_k)
        padded_queries = ~attention_mask[:, :, None].expand_as(expected)
        if torch.equal(result.isnan(), padded_keys):
            raise Incorrect(str(_OVER_QUERIES) + text(
                " (a padded key's column is all -inf, hence NaN)",
                "（填充键的那一列全是 -inf，所以得到 NaN）"))
        if torch.equal(result.isnan(), padded_queries):
            raise Incorrect(text(
                "the padded *queries'* rows are NaN: you masked the rows (queries). Mask the "
                "keys, the last axis: attention_mask[:, None, :]",
                "填充*查询*所在的行是 NaN：你遮住的是行（查询）。应当遮住键，也就是最后一个轴："
                "attention_mask[:, None, :]"))
        expect_finite(result, Bilingual("the weights", "权重"))
        if torch.allclose(result, expected.double(), atol=1e-5, rtol=1e-4):
            continue
        real_rows = attention_mask[:, :, None].expand_as(expected)  # rows of real queries
        if (torch.allclose(result[real_rows], expected.double()[real_rows], atol=1e-5, rtol=1e-4)
                and (result[~real_rows] == 0).all()):
            raise Incorrect(text(
                "the padded queries' rows are all 0: only keys are masked, and a padded query "
                "still attends to the real keys as the model computes it; give those rows the "
                "same softmax as any other",
                "填充查询所在的行全是 0：只有键被遮住，按模型的算法，填充查询仍然会关注真实的键；"
                "请对这些行做和其他行一样的 softmax"))
        if torch.allclose(result.transpose(-2, -1), expected.double(), atol=1e-5, rtol=1e-4):
            raise Incorrect(text("the result is transposed: row i should be query i's weights "
                                 "over the keys, (batch, n_q, n_k)",
                                 "结果被转置了：第 i 行应当是第 i 个查询对各个键的权重，"
                                 "即 (batch, n_q, n_k)"))
        column_sums = result.sum(dim=-2)  # (batch, n_k)
        if torch.allclose(column_sums, torch.ones_like(column_sums), atol=1e-4):
            raise Incorrect(str(_OVER_QUERIES))
        if (result[padded_keys].abs() > 1e-6).any():
            raise Incorrect(text(
                "padded keys get weight: the mask must remove the padded *keys* (the last "
                "axis, attention_mask[:, None, :]) by filling their scores with -inf before "
                "the softmax",
                "填充键分到了权重：掩码必须去掉填充*键*（最后一个轴，attention_mask[:, None, :]），"
                "做法是在 softmax 之前把它们的分数填成 -inf"))
        with torch.no_grad():
            for other in range(num_heads):
                theirs = _one_head_weights_reference(x, attention_mask, attn, other).double()
                if other != head and torch.allclose(result, theirs, atol=1e-5, rtol=1e-4):
                    raise Incorrect(text(
                        f"these are the weights of head {other}, not head {head}: head h "
                        "owns features h*d_k .. (h+1)*d_k - 1 of q and k",
                        f"这是第 {other} 个头的权重，不是第 {head} 个头的：第 h 个头拥有 q 和 k "
                        "的特征 h*d_k .. (h+1)*d_k - 1"))
        message = _named_slip(result, x, attention_mask, attn, head)
        if message is not None:
            raise Incorrect(message)
        row_sums = result.sum(dim=-1)
        if not torch.allclose(row_sums, torch.ones_like(row_sums), atol=1e-4):
            low, high = row_sums.min().item(), row_sums.max().item()
            raise Incorrect(text(
                f"rows sum to between {low:.2f} and "
                f"{high:.2f}, not 1: are these the scores before the softmax?",
                f"各行之和在 {low:.2f} 到 {high:.2f} 之间，而不是 1："
                "这些是 softmax 之前的分数吗？"))
        expect_close(result, expected, Bilingual(
            f"head {head}'s weights (d_model={d_model}, {num_heads} heads)",
            f"第 {head} 个头的权重（d_model={d_model}，共 {num_heads} 个头）"))


one_head_weights = Exercise(
    title=Bilingual("one head's attention from the raw weights", "用原始权重算出一个头的注意力"),
    checker=_check_one_head_weights,
    reference=_one_head_weights_reference,
    hints=(
        Bilingual(
            "Head h owns features h*d_k .. (h+1)*d_k - 1 of q and k, with d_k = attn.d_k: slice "
            "those rows of attn.w_q.weight (out_features come first), or slice attn.w_q(x).",
            "第 h 个头拥有 q 和 k 的特征 h*d_k .. (h+1)*d_k - 1，其中 d_k = attn.d_k："
            "切出 attn.w_q.weight 的这些行（out_features 在前），或者直接切 attn.w_q(x)。"),
        Bilingual("scores = q @ k.transpose(-2, -1) / sqrt(d_k) is (batch, n_q, n_k).",
                  "scores = q @ k.transpose(-2, -1) / sqrt(d_k) 的形状是 (batch, n_q, n_k)。"),
        Bilingual(
            "Padded keys: scores.masked_fill(~attention_mask[:, None, :], float('-inf')), then "
            "softmax over the keys (dim=-1).",
            "填充键：scores.masked_fill(~attention_mask[:, None, :], float('-inf'))，"
            "然后沿键做 softmax（dim=-1）。"),
    ),
)

# ---------------------------------------------------------------------------------------
# Exercise 2: which head attends to the previous token?
# ---------------------------------------------------------------------------------------


def _previous_token_head_reference(weights):
    """weights (num_layers, num_heads, seq_len, seq_len) of one sentence -> (layer, head).

    The head whose queries 1..n-1 put, on average, the most weight on the key just before them.
    """
    to_previous = weights.diagonal(offset=-1, dim1=-2, dim2=-1)  # (layers, heads, n-1): w[i, i-1]
    score = to_previous.mean(dim=-1)  # (num_layers, num_heads)
    layer, head = divmod(int(score.argmax()), weights.shape[1])
    return layer, head


def _stack(num_layers, num_heads, seq_len, generator):
    """Random attention rows (each sums to 1), sharpish like a trained model's."""
    scores = torch.randn(num_layers, num_heads, seq_len, seq_len, generator=generator) * 1.5
    return torch.softmax(scores, dim=-1)


def _plant(weights, layer, head, offset, strength, rows=None):
    """Make head (layer, head) put ``strength`` of query i's weight on key i + offset."""
    seq_len = weights.shape[-1]
    rows = range(seq_len) if rows is None else rows
    for i in rows:
        j = (i + offset) % seq_len
        row = weights[layer, head, i] * (1 - strength)
        row[j] += strength
        weights[layer, head, i] = row


def _previous_token_cases():
    """Stacks with a planted previous-token head and heads that catch the classic slips."""
    cases = []
    for seed, (num_layers, num_heads, seq_len), target, decoys in (
        (3, (3, 5, 8), (2, 1),
         dict(next=(1, 3), self=(0, 0), spike=(2, 4), wrap=(1, 0), sink=(0, 4))),
        (4, (4, 3, 7), (0, 2),
         dict(next=(3, 0), self=(1, 1), spike=(2, 2), wrap=(0, 0), sink=(3, 2))),
    ):
        weights = _stack(num_layers, num_heads, seq_len, torch.Generator().manual_seed(seed))
        _plant(weights, *target, offset=-1, strength=0.7, rows=range(1, seq_len))
        weights[target[0], target[1], 0] = 1.0 / seq_len  # query 0: no previous token
        _plant(weights, *decoys["next"], offset=+1, strength=0.9)  # attends to the next token
        _plant(weights, *decoys["self"], offset=0, strength=0.95)  # attends to itself
        # one query leans fully on its previous token, the rest ignore it: a max, not a mean
        _plant(weights, *decoys["spike"], offset=-1, strength=1.0, rows=[seq_len // 2])
        # 0.6 on the previous token, and query 0 fully on the last key: wins only if the
        # wrap-around from query 0 to key n-1 is (wrongly) counted as "previous"
        _plant(weights, *decoys["wrap"], offset=-1, strength=0.6, rows=range(1, seq_len))
        _plant(weights, *decoys["wrap"], offset=-1, strength=1.0, rows=[0])
        # every query on the last key: exactly 0 on the previous token, the least of all
        weights[decoys["sink"]] = 0.0
        weights[decoys["sink"]][:, -1] = 1.0
        cases.append((weights, target, decoys))
    return cases


def _as_index(value, what: str) -> int:
    if isinstance(value, torch.Tensor) and value.numel() == 1 and not (
            value.is_floating_point() or value.dtype == torch.bool):
        return int(value.item())
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        got = f"{type(value).__name__} {value!r}"
        raise Incorrect(text(f"{what} should be an int, got {got}",
                             f"{what} 应当是 int，而你返回的是 {got}"))
    return int(value)


def _check_previous_token_head(answer):
    for weights, target, decoys in _previous_token_cases():
        num_layers, num_heads, seq_len, _ = weights.shape
        result = attempt(answer, weights)
        if not isinstance(result, (tuple, list)) or len(result) != 2:
            got = (text(f"a tensor of shape {tuple(result.shape)}",
                        f"形状为 {tuple(result.shape)} 的张量")
                   if isinstance(result, torch.Tensor) else type(result).__name__)
            raise Incorrect(text(f"return two ints, (layer, head); got {got}",
                                 f"请返回两个 int，即 (layer, head)；而你返回的是 {got}"))
        layer, head = (_as_index(v, w) for v, w in zip(result, ("layer", "head"), strict=True))
        if (layer, head) == target:
            continue
        if (head, layer) == target:
            raise Incorrect(text(f"({layer}, {head}) is (head, layer): return (layer, head)",
                                 f"({layer}, {head}) 是 (head, layer)：请返回 (layer, head)"))
        if not (0 <= layer < num_layers and 0 <= head < num_heads):
            raise Incorrect(text(
                f"({layer}, {head}) is not a head of this stack of {num_layers} layers x "
                f"{num_heads} heads: a flat index over (num_layers, num_heads) unravels as "
                "divmod(index, num_heads)",
                f"({layer}, {head}) 不是这组 {num_layers} 层 × 每层 {num_heads} 个头里的头："
                "(num_layers, num_heads) 上的扁平下标要用 divmod(index, num_heads) 还原"))
        slips = {
            "next": text(
                "this head attends to the *next* token (w[i, i+1], diagonal offset=+1); the "
                "previous token is w[i, i-1], diagonal offset=-1",
                "这个头关注的是*后一个*词元（w[i, i+1]，对角线 offset=+1）；"
                "前一个词元是 w[i, i-1]，对角线 offset=-1"),
            "self": text(
                "this head attends to the token itself (the main diagonal); the previous "
                "token is one below it, diagonal offset=-1",
                "这个头关注的是词元自己（主对角线）；前一个词元在它下面一条，对角线 offset=-1"),
            "spike": text(
                "this head puts all its weight on the previous token for one query only: "
                "average w[i, i-1] over the queries, do not take the max",
                "这个头只在一个查询上把全部权重放在前一个词元上：请对所有查询求 w[i, i-1] 的"
                "平均值，而不是取最大值"),
            "wrap": text(
                "this head wins only because query 0's weight on the last key was counted: "
                "query 0 has no previous token (torch.roll wraps around), so average over "
                "queries 1..n-1",
                "这个头胜出，只是因为算进了查询 0 在最后一个键上的权重：查询 0 没有前一个词元"
                "（torch.roll 会首尾相接），所以只对查询 1..n-1 求平均"),
        }
        for name, message in slips.items():
            if (layer, head) == decoys[name]:
                raise Incorrect(message)
        score = weights.diagonal(offset=-1, dim1=-2, dim2=-1).mean(-1)
        if score[layer, head] == score.min():
            raise Incorrect(text(f"({layer}, {head}) is the head with the *least* weight on the "
                                 "previous token: argmax, not argmin",
                                 f"({layer}, {head}) 是放在前一个词元上的权重*最少*的头："
                                 "应当用 argmax，而不是 argmin"))
        share = score[layer, head].item()
        raise Incorrect(text(
            f"head ({layer}, {head}) puts on average {share:.2f} of a "
            "query's weight on the previous token; another head puts more. Score each head by "
            "the mean of w[i, i-1] over queries i = 1..n-1",
            f"头 ({layer}, {head}) 平均把一个查询 {share:.2f} 的权重放在前一个词元上；"
            "另有一个头放得更多。请用 w[i, i-1] 在查询 i = 1..n-1 上的平均值给每个头打分"))


previous_token_head = Exercise(
    title=Bilingual("find the previous-token head", "找出关注前一个词元的头"),
    checker=_check_previous_token_head,
    reference=_previous_token_head_reference,
    hints=(
        Bilingual(
            "w[i, i-1] for every query i >= 1 is one diagonal of the (n_q, n_k) map: "
            "weights.diagonal(offset=-1, dim1=-2, dim2=-1) gives (num_layers, num_heads, n-1).",
            "对每个查询 i >= 1，w[i, i-1] 构成 (n_q, n_k) 图中的一条对角线："
            "weights.diagonal(offset=-1, dim1=-2, dim2=-1) 给出 (num_layers, num_heads, n-1)。"),
        Bilingual("Average it over the last axis to score each head, then take the argmax.",
                  "沿最后一个轴求平均，给每个头打分，再取 argmax。"),
        Bilingual(
            "A flat argmax over (num_layers, num_heads) unravels with divmod(index, num_heads).",
            "(num_layers, num_heads) 上的扁平 argmax 用 divmod(index, num_heads) 还原。"),
    ),
)
