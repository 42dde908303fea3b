"""Lesson 04's exercises: their reference solutions and lesson cells (the mutation
table is tests/mutations/l04.py)."""

from __future__ import annotations

import torch
from torch import nn

from course_utils.exercises.l04 import (
    assemble_multi_head,
    count_attention_parameters,
    merge_heads,
    split_heads,
)
from course_utils.nn import attention
from course_utils.nn.attention import MultiHeadAttention


def test_references_agree_with_the_package():
    x = torch.randn(2, 5, 12)
    assert torch.equal(split_heads.reference(x, 4), attention.split_heads(x, 4))
    heads = torch.randn(2, 3, 5, 4)
    assert torch.equal(merge_heads.reference(heads), attention.merge_heads(heads))


def test_multi_head_reference_equals_torch_and_the_package():
    module = nn.MultiheadAttention(8, 2, batch_first=True).eval()
    ours = MultiHeadAttention.from_torch(module)
    query, key = torch.randn(3, 4, 8), torch.randn(3, 6, 8)
    params = {"w_q": ours.w_q.weight, "b_q": ours.w_q.bias, "w_k": ours.w_k.weight,
              "b_k": ours.w_k.bias, "w_v": ours.w_v.weight, "b_v": ours.w_v.bias,
              "w_o": ours.w_o.weight, "b_o": ours.w_o.bias}
    with torch.no_grad():
        output, weights = assemble_multi_head.reference(query, key, key, params, 2)
        expected, expected_weights = module(query, key, key, average_attn_weights=False)
    torch.testing.assert_close(output, expected)
    torch.testing.assert_close(weights, expected_weights)


def test_parameter_count_reference_equals_the_modules():
    for d_model, num_heads, bias in [(768, 12, True), (64, 4, False)]:
        expected = count_attention_parameters.reference(d_model, num_heads, bias)
        assert sum(p.numel() for p in MultiHeadAttention(d_model, num_heads, bias).parameters()) \
            == expected
        assert sum(p.numel() for p in nn.MultiheadAttention(d_model, num_heads, bias=bias)
                   .parameters()) == expected
    assert count_attention_parameters.reference(768, 12) == 2_362_368  # BERT-base, GPT-2 small
