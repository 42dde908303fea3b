"""MultiHeadAttention, split_heads and merge_heads, checked against torch.nn.MultiheadAttention."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from course_utils.nn.attention import (
    MultiHeadAttention,
    merge_heads,
    scaled_dot_product_attention,
    split_heads,
)
from course_utils.nn.masks import causal_mask

ATOL = 1e-5
D_MODEL = 12


def torch_and_ours(num_heads: int, bias: bool = True, seed: int = 0):
    torch.manual_seed(seed)
    reference = nn.MultiheadAttention(D_MODEL, num_heads, bias=bias, batch_first=True).eval()
    if bias:
        # torch starts the biases at zero; random ones make the bias copy matter.
        with torch.no_grad():
            reference.in_proj_bias.normal_()
            reference.out_proj.bias.normal_()
    return reference, MultiHeadAttention.from_torch(reference)


def assert_same(ours, reference, what):
    gap = (ours - reference).abs().max().item()
    assert ours.shape == reference.shape, f"{what}: shape {ours.shape} vs {reference.shape}"
    assert torch.allclose(ours, reference, atol=ATOL), f"{what} differs by {gap:.3g}"


LENGTHS = [5, 3, 1]  # three sequences padded to 5; the last has one real token
MASK_CASES = ["none", "padding", "causal", "both"]


def masks_for(case: str, n_q: int, n_k: int):
    """Our mask (True = may attend) and torch's (key_padding_mask, attn_mask), True = blocked."""
    ours, key_padding, attn = None, None, None
    if case in ("padding", "both"):
        real = torch.arange(n_k) < torch.tensor(LENGTHS)[:, None]  # (batch, n_k)
        ours, key_padding = real[:, None, None, :], ~real  # ours (batch, 1, 1, n_k)
    if case in ("causal", "both"):
        allowed = causal_mask(n_k)[-n_q:]  # (n_q, n_k)
        ours = allowed if ours is None else ours & allowed
        attn = ~allowed
    return ours, key_padding, attn


@pytest.mark.parametrize("num_heads", [1, 2, 4])
@pytest.mark.parametrize("case", MASK_CASES)
def test_self_attention_matches_torch(num_heads, case):
    reference, ours = torch_and_ours(num_heads)
    x = torch.randn(len(LENGTHS), 5, D_MODEL)
    mask, key_padding, attn = masks_for(case, 5, 5)
    expected, expected_weights = reference(
        x, x, x, key_padding_mask=key_padding, attn_mask=attn, average_attn_weights=False
    )
    output, weights = ours(x, mask=mask)
    assert_same(output, expected, f"output ({case} mask)")
    assert_same(weights, expected_weights, f"per-head weights ({case} mask)")
    _, averaged = reference(x, x, x, key_padding_mask=key_padding, attn_mask=attn)
    assert_same(weights.mean(dim=1), averaged, f"head-averaged weights ({case} mask)")


@pytest.mark.parametrize("case", MASK_CASES)
def test_cross_attention_matches_torch(case):
    reference, ours = torch_and_ours(num_heads=3)
    query = torch.randn(len(LENGTHS), 4, D_MODEL)  # n_q = 4 queries ...
    key = torch.randn(len(LENGTHS), 5, D_MODEL)  # ... read n_k = 5 keys
    value = torch.randn(len(LENGTHS), 5, D_MODEL)
    mask, key_padding, attn = masks_for(case, 4, 5)
    expected, expected_weights = reference(
        query, key, value, key_padding_mask=key_padding, attn_mask=attn,
        average_attn_weights=False,
    )
    output, weights = ours(query, key, value, mask=mask)
    assert output.shape == (3, 4, D_MODEL) and weights.shape == (3, 3, 4, 5)
    assert_same(output, expected, f"cross-attention output ({case} mask)")
    assert_same(weights, expected_weights, f"cross-attention weights ({case} mask)")


def test_value_defaults_to_key_and_key_to_query():
    _, ours = torch_and_ours(num_heads=2)
    query, memory = torch.randn(2, 3, D_MODEL), torch.randn(2, 6, D_MODEL)
    assert_same(ours(query, memory)[0], ours(query, memory, memory)[0], "value=None")
    assert_same(ours(query)[0], ours(query, query, query)[0], "key=None")


def test_without_bias_matches_torch():
    reference, ours = torch_and_ours(num_heads=4, bias=False)
    assert all(layer.bias is None for layer in (ours.w_q, ours.w_k, ours.w_v, ours.w_o))
    x = torch.randn(2, 5, D_MODEL)
    assert_same(ours(x)[0], reference(x, x, x)[0], "output without biases")


def test_gradients_match_torch():
    reference, ours = torch_and_ours(num_heads=3)
    x = torch.randn(2, 5, D_MODEL, requires_grad=True)
    mask, key_padding, attn = masks_for("causal", 5, 5)
    (grad_ours,) = torch.autograd.grad(ours(x, mask=mask)[0].square().sum(), x)
    expected = reference(x, x, x, attn_mask=attn)[0]
    (grad_torch,) = torch.autograd.grad(expected.square().sum(), x)
    assert_same(grad_ours, grad_torch, "gradient with respect to the input")


def test_from_torch_keeps_dtype_and_copies_rather_than_shares():
    reference = nn.MultiheadAttention(8, 2, batch_first=True, dtype=torch.float64)
    ours = MultiHeadAttention.from_torch(reference)
    assert ours.w_q.weight.dtype == torch.float64
    with torch.no_grad():
        reference.in_proj_weight.zero_()
    assert ours.w_q.weight.abs().sum() > 0, "from_torch should copy, not alias, the weights"


def test_parameter_count_is_four_d_model_squared_plus_biases_for_any_heads():
    for num_heads in (1, 2, 3, 4, 6, 12):
        ours = MultiHeadAttention(D_MODEL, num_heads)
        count = sum(p.numel() for p in ours.parameters())
        assert count == 4 * D_MODEL**2 + 4 * D_MODEL
        torch_count = sum(
            p.numel() for p in nn.MultiheadAttention(D_MODEL, num_heads).parameters()
        )
        assert count == torch_count


def test_one_head_is_plain_scaled_dot_product_attention_of_the_projections():
    torch.manual_seed(0)
    ours = MultiHeadAttention(D_MODEL, 1)
    x = torch.randn(2, 4, D_MODEL)
    heads, weights = scaled_dot_product_attention(ours.w_q(x), ours.w_k(x), ours.w_v(x))
    output, our_weights = ours(x)
    assert_same(output, ours.w_o(heads), "one-head output")
    assert_same(our_weights[:, 0], weights, "one-head weights")


def test_split_heads_gives_each_head_a_contiguous_slice_of_features():
    x = torch.randn(2, 5, D_MODEL)
    heads = split_heads(x, 3)  # d_k = 4
    assert heads.shape == (2, 3, 5, 4)
    for head in range(3):
        assert torch.equal(heads[:, head], x[..., head * 4 : (head + 1) * 4])


def test_merge_heads_undoes_split_heads():
    x = torch.randn(2, 5, D_MODEL)
    for num_heads in (1, 2, 3, 4, 6, 12):
        assert torch.equal(merge_heads(split_heads(x, num_heads)), x)
    heads = torch.randn(2, 3, 5, 4)
    assert torch.equal(split_heads(merge_heads(heads), 3), heads)


x_258 = torch.randn(2, 5, 8)
heads_8_2 = MultiHeadAttention(8, 2)

BAD_INPUTS = [
    pytest.param(split_heads, (torch.randn(2, 3, 10), 4), {}, ValueError,
                 ("d_model=10", "num_heads=4", "divisible"), id="split_heads: 10 by 4"),
    pytest.param(split_heads, (torch.randn(3, 10), 2), {}, ValueError,
                 ("x", "(batch, seq_len, d_model)", "(3, 10)"), id="split_heads: 2-D x"),
    pytest.param(split_heads, (torch.randn(2, 3, 8), 2.0), {}, TypeError,
                 ("num_heads", "positive int", "float 2.0"), id="split_heads: float heads"),
    pytest.param(merge_heads, (torch.randn(2, 3, 4),), {}, ValueError,
                 ("x", "(batch, heads, seq_len, d_k)", "(2, 3, 4)"), id="merge_heads: 3-D x"),
    pytest.param(merge_heads, (torch.ones(2, 3, 4, 5, dtype=torch.long),), {}, TypeError,
                 ("x", "floating-point", "torch.int64"), id="merge_heads: int x"),
    pytest.param(MultiHeadAttention, (10, 4), {}, ValueError,
                 ("d_model=10", "num_heads=4", "divisible"), id="MHA: 10 by 4"),
    pytest.param(MultiHeadAttention, (8, 0), {}, ValueError,
                 ("num_heads", "positive int", "got 0"), id="MHA: zero heads"),
    pytest.param(MultiHeadAttention, (8.0, 2), {}, TypeError,
                 ("d_model", "positive int", "float 8.0"), id="MHA: float d_model"),
    pytest.param(MultiHeadAttention, (8, 2), {"bias": "no"}, TypeError,
                 ("bias", "True or False", "str 'no'"), id="MHA: bias a str"),
    pytest.param(heads_8_2, (x_258.double(),), {}, TypeError,
                 ("query", "torch.float64", "MultiHeadAttention", "torch.float32"),
                 id="MHA: float64 input"),
    pytest.param(heads_8_2, (x_258, x_258.to("meta")), {}, ValueError,
                 ("key", "meta", "MultiHeadAttention", "cpu"), id="MHA: key on meta"),
    pytest.param(heads_8_2, (x_258,), {"mask": torch.ones(5, 5, dtype=torch.bool,
                                                          device="meta")},
                 ValueError, ("query on cpu", "mask on meta"), id="MHA: mask on meta"),
    pytest.param(heads_8_2, (x_258,), {"mask": torch.ones(2, 5, dtype=torch.bool)},
                 ValueError, ("mask", "(2, 5)", "(batch, heads, n_q, n_k) = (2, 2, 5, 5)",
                              "mask[:, None, None, :]"), id="MHA: raw padding mask"),
    pytest.param(heads_8_2, (x_258,), {"mask": torch.ones(2, 5, 5, dtype=torch.bool)},
                 ValueError, ("mask", "(2, 5, 5)", "3 dims", "(2, 2, 5, 5)"),
                 id="MHA: (batch, n_q, n_k) mask, batch == heads"),
    pytest.param(MultiHeadAttention.from_torch, (nn.Linear(4, 4),), {}, TypeError,
                 ("torch.nn.MultiheadAttention", "Linear"), id="MHA.from_torch: a Linear"),
    pytest.param(MultiHeadAttention.from_torch, (nn.MultiheadAttention(8, 2, kdim=4),), {},
                 ValueError, ("kdim=4", "embed_dim=8"), id="MHA.from_torch: kdim"),
    pytest.param(MultiHeadAttention.from_torch, (nn.MultiheadAttention(8, 2, add_bias_kv=True),),
                 {}, ValueError, ("add_bias_kv",), id="MHA.from_torch: add_bias_kv"),
    pytest.param(heads_8_2, (x_258[..., :6],), {}, ValueError,
                 ("query", "(batch, n_q, d_model)", "d_model=8", "(2, 5, 6)"),
                 id="MHA: wrong d_model"),
    pytest.param(heads_8_2, (x_258[0],), {}, ValueError,
                 ("query", "(batch, n_q, d_model)", "(5, 8)"), id="MHA: no batch axis"),
    pytest.param(heads_8_2, (x_258.long(),), {}, TypeError,
                 ("query", "floating-point", "torch.int64"), id="MHA: token ids"),
    pytest.param(heads_8_2, (x_258, x_258[:1]), {}, ValueError,
                 ("batch size", "2", "1"), id="MHA: batch sizes differ"),
    pytest.param(heads_8_2, (x_258, x_258, x_258[:, :3]), {}, ValueError,
                 ("key", "value", "n_k=5", "n_k=3"), id="MHA: n_k differ"),
    pytest.param(heads_8_2, (x_258,), {"mask": torch.ones(5, 5)}, TypeError,
                 ("mask", "bool", "True = may attend", "torch.float32"), id="MHA: float mask"),
    pytest.param(heads_8_2, (x_258,), {"mask": torch.ones(2, 4, dtype=torch.bool)}, ValueError,
                 ("mask", "(2, 4)", "(batch, heads, n_q, n_k)", "(2, 2, 5, 5)"),
                 id="MHA: mask does not broadcast"),
]
