"""Lesson 08 exercises: fix two broken attention functions, with diagnose() as the judge.

Each exercise starts from a buggy function (printed in the notebook) with two bugs. The
checker runs :func:`course_utils.diagnostics.diagnose` on the learner's fix and reports the
probes that still fail (its float64 probes allow 1e-6), then compares output and weights
with the course's attention within 1e-5 + 1e-4·|expected| on two masked inputs:
``(batch, n_q, d_k)`` with a causal mask, and ``(batch, num_heads, n_q, d_k)`` with
n_q ≠ n_k, d_v ≠ d_k and a key padding mask.
"""

from __future__ import annotations

import math

import torch

from course_utils.attention import scaled_dot_product_attention
from course_utils.diagnostics import SEE_SHAPES, diagnose
from course_utils.exercises import (
    _RAISED_BY_LEARNER,
    Exercise,
    Incorrect,
    attempt,
    expect_close,
)
from course_utils.language import Bilingual, text
from course_utils.masks import causal_mask, expand_padding_mask, padding_mask


def buggy_encoder_attention(q, k, v, mask=None):
    """Attention for a padded encoder batch, copied from code with other conventions.

    q ``(batch, n_q, d_k)``, k ``(batch, n_k, d_k)``, v ``(batch, n_k, d_v)``, mask bool
    broadcastable to ``(batch, n_q, n_k)``, True = may attend. Two bugs: run diagnose() on it.
    """
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(mask, float("-inf"))
    weights = torch.softmax(scores, dim=1)
    return weights @ v, weights


def buggy_half_precision_attention(q, k, v, mask=None):
    """Attention that works in float32 on (batch, seq_len, d_k) and nowhere else.

    It should also work with a heads axis, (batch, heads, seq_len, d_k), and in float16.
    Two bugs: run diagnose() on it.
    """
    scores = q @ k.transpose(1, 2) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, -1e9)
    weights = torch.softmax(scores, dim=-1)
    return weights @ v, weights


def _fixed_encoder_attention(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (batch, n_q, n_k)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))  # True = may attend: fill the False
    weights = torch.softmax(scores, dim=-1)  # over the keys, the last axis
    return weights @ v, weights


def _fixed_half_precision_attention(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # last two axes, heads or not
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))  # -inf exists in every float dtype
    weights = torch.softmax(scores, dim=-1)
    return weights @ v, weights


def _comparison_cases():
    generator = torch.Generator().manual_seed(8)

    def draw(*shape):
        return torch.randn(*shape, generator=generator, dtype=torch.float64)

    yield (Bilingual("under a causal mask, (batch, n_q, d_k) inputs",
                     "（因果掩码下，输入为 (batch, n_q, d_k)）"),
           (draw(2, 6, 8), draw(2, 6, 8), draw(2, 6, 12)), causal_mask(6))
    yield (Bilingual("under a padding mask, (batch, num_heads, n_q, d_k) inputs with n_q ≠ n_k",
                     "（填充掩码下，输入为 (batch, num_heads, n_q, d_k) 且 n_q ≠ n_k）"),
           (draw(2, 3, 5, 8), draw(2, 3, 7, 8), draw(2, 3, 7, 12)),
           expand_padding_mask(padding_mask([7, 4])))


def _require_probes_pass(answer):
    failures = diagnose(answer).failures
    if not failures:
        return
    # Probes that failed only because the shapes probe did are named, not repeated.
    echoes = [f.probe for f in failures if f.message.endswith((SEE_SHAPES.en, SEE_SHAPES.zh))]
    listed = " ".join(f"[{f.probe}] {f.message}" for f in failures
                                if f.probe not in echoes)
    if echoes:
        listed += text(f" [{', '.join(echoes)}] right without heads, raised with a heads axis "
                       "(see shapes).",
                       f" [{'、'.join(echoes)}] 没有头这个轴时正确，加上头这个轴就抛出异常"
                       "（见 shapes）。")
    count = f"{len(failures)} probe{'s' if len(failures) > 1 else ''}"
    raise Incorrect(text(
        f"{count} of diagnose() still fail{'s' if len(failures) == 1 else ''}: {listed}",
        f"diagnose() 仍有 {len(failures)} 个探针未通过：{listed}"))


def _check_with_diagnostics(answer):
    cases = list(_comparison_cases())
    _, (q, k, v), mask = cases[0]
    try:
        result = attempt(answer, q, k, v, mask=mask)
    except Exception as error:
        if getattr(error, _RAISED_BY_LEARNER, False):
            _require_probes_pass(answer)  # their findings say more than the bare exception
        raise
    if isinstance(result, torch.Tensor):
        raise Incorrect(text(
            f"your function returned one tensor of shape {tuple(result.shape)}; "
            "return the pair: return weights @ v, weights",
            f"你的函数只返回了一个形状为 {tuple(result.shape)} 的张量；"
            "应当返回一对张量：return weights @ v, weights"))
    if not isinstance(result, tuple) or len(result) != 2:
        raise Incorrect(text("return two tensors: return weights @ v, weights",
                             "应当返回两个张量：return weights @ v, weights"))
    _require_probes_pass(answer)
    for what, (q, k, v), mask in cases:
        output, weights = attempt(answer, q, k, v, mask=mask)
        expected_output, expected_weights = scaled_dot_product_attention(q, k, v, mask=mask)
        expect_close(weights, expected_weights, text(f"the weights {what.en}",
                                                     f"权重{what.zh}"))
        expect_close(output, expected_output, text(f"the output {what.en}", f"输出{what.zh}"))


fix_encoder_attention = Exercise(
    title=Bilingual("fix the encoder attention", "修好编码器的注意力"),
    checker=_check_with_diagnostics,
    reference=_fixed_encoder_attention,
    hints=(
        Bilingual(
            "Run print(diagnose(buggy_encoder_attention)) and read the failing probes one by "
            "one.",
            "运行 print(diagnose(buggy_encoder_attention))，把未通过的探针逐个读一遍。"),
        Bilingual(
            "For scores (batch, n_q, n_k), which axis holds the keys? The softmax must run "
            "over it.",
            "对于形状为 (batch, n_q, n_k) 的 scores，哪个轴对应键？softmax 必须沿这个轴做。"),
        Bilingual(
            "masked_fill fills where its mask is True; in this course True means 'may attend'.",
            "masked_fill 填的是掩码为 True 的位置；而本课程里 True 表示“可以关注”。"),
    ),
)

fix_half_precision_attention = Exercise(
    title=Bilingual("fix the attention for heads and float16",
                    "修好注意力，让它支持多头和 float16"),
    checker=_check_with_diagnostics,
    reference=_fixed_half_precision_attention,
    hints=(
        Bilingual(
            "Run print(diagnose(buggy_half_precision_attention)): read the 'shapes' and "
            "'float16 masking' probes; the others fail only because the shapes one does.",
            "运行 print(diagnose(buggy_half_precision_attention))：看 'shapes' 和 "
            "'float16 masking' 这两个探针；其他探针未通过，只是因为 shapes 没通过。"),
        Bilingual(
            "With a heads axis, k is (batch, heads, seq_len, d_k): what does transpose(1, 2) "
            "swap?",
            "有了头这个轴，k 的形状是 (batch, heads, seq_len, d_k)：transpose(1, 2) "
            "交换的是哪两个轴？"),
        Bilingual(
            "torch.finfo(torch.float16).max is 65504: -1e9 does not fit, float('-inf') does.",
            "torch.finfo(torch.float16).max 是 65504：-1e9 放不进去，float('-inf') 可以。"),
    ),
)
