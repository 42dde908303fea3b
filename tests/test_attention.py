"""The attention core against torch's own implementation, plus its properties and errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from course_utils.nn.attention import (
    MultiHeadAttention,
    SelfAttention,
    scaled_dot_product_attention,
)
from course_utils.nn.masks import causal_mask

TOLERANCE = {torch.float32: 1e-5, torch.float64: 1e-10}


def random_qkv(lead, n_q, n_k, d_k, d_v, dtype, seed=0):
    generator = torch.Generator().manual_seed(seed)
    make = lambda *shape: torch.randn(*shape, generator=generator, dtype=dtype)  # noqa: E731
    return make(*lead, n_q, d_k), make(*lead, n_k, d_k), make(*lead, n_k, d_v)


def key_mask(lengths, n_k):
    """Bool ``(batch, n_k)``, True at the real tokens; built here so these tests do not
    depend on the shape ``masks.padding_mask`` returns."""
    return torch.arange(n_k) < torch.tensor(lengths)[:, None]


def assert_matches_torch(q, k, v, mask=None, scale=None):
    ours, _ = scaled_dot_product_attention(q, k, v, mask=mask, scale=scale)
    reference = F.scaled_dot_product_attention(
        q, k, v, attn_mask=mask, scale=None if scale is None else float(scale))
    atol = TOLERANCE[q.dtype]
    assert torch.allclose(ours, reference, atol=atol, rtol=0), (ours - reference).abs().max()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("lead", [(), (3,), (2, 4)], ids=["no batch", "batch", "batch+heads"])
@pytest.mark.parametrize("scale", [None, 1.0, 0.3], ids=["1/sqrt(d_k)", "off", "0.3"])
def test_equals_torch_without_mask(dtype, lead, scale):
    assert_matches_torch(*random_qkv(lead, 5, 7, 8, 6, dtype), scale=scale)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_equals_torch_with_causal_mask(dtype):
    q, k, v = random_qkv((2, 3), 6, 6, 8, 4, dtype)
    assert_matches_torch(q, k, v, mask=causal_mask(6))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_equals_torch_with_padding_mask(dtype):
    q, k, v = random_qkv((3, 2), 6, 6, 8, 4, dtype)
    mask = key_mask([6, 4, 1], 6)[:, None, None, :]  # (batch, 1, 1, n_k)
    assert_matches_torch(q, k, v, mask=mask)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_equals_torch_with_combined_mask_and_scaling_off(dtype):
    q, k, v = random_qkv((3, 2), 6, 6, 8, 4, dtype)
    mask = causal_mask(6) & key_mask([6, 4, 2], 6)[:, None, None, :]  # (batch, 1, 6, 6)
    assert_matches_torch(q, k, v, mask=mask, scale=1.0)


def test_broadcasts_leading_dims_like_torch():
    q, _, _ = random_qkv((2, 4), 5, 7, 8, 6, torch.float64)
    _, k, v = random_qkv((1, 4), 5, 7, 8, 6, torch.float64, seed=1)
    assert_matches_torch(q, k, v)


def test_fully_masked_row_gives_zero_weights_and_output_not_nan():
    q, k, v = random_qkv((2,), 3, 4, 8, 5, torch.float32)
    mask = torch.ones(3, 4, dtype=torch.bool)
    mask[1] = False  # query 1 may attend to nothing
    output, weights = scaled_dot_product_attention(q, k, v, mask=mask)
    assert torch.equal(weights[:, 1], torch.zeros(2, 4))
    assert torch.equal(output[:, 1], torch.zeros(2, 5))
    assert torch.isfinite(output).all()
    # The other rows are unaffected: they equal torch's result on those rows alone.
    keep = torch.tensor([0, 2])
    reference = F.scaled_dot_product_attention(q[:, keep], k, v, attn_mask=mask[keep])
    assert torch.allclose(output[:, keep], reference, atol=1e-6)


def test_fully_masked_row_has_finite_gradients():
    q, k, v = (t.requires_grad_() for t in random_qkv((), 3, 4, 8, 5, torch.float64))
    mask = torch.ones(3, 4, dtype=torch.bool)
    mask[0] = False
    output, _ = scaled_dot_product_attention(q, k, v, mask=mask)
    output.sum().backward()
    for tensor in (q, k, v):
        assert torch.isfinite(tensor.grad).all()


@settings(max_examples=40, deadline=None)
@given(
    batch=st.integers(1, 3), n_q=st.integers(1, 6), n_k=st.integers(1, 6),
    d_k=st.integers(1, 9), seed=st.integers(0, 2**16), data=st.data(),
)
def test_rows_sum_to_one_over_allowed_keys_and_masked_keys_get_zero(
    batch, n_q, n_k, d_k, seed, data
):
    q, k, v = random_qkv((batch,), n_q, n_k, d_k, 3, torch.float64, seed)
    flat = data.draw(st.lists(st.booleans(), min_size=batch * n_q * n_k,
                              max_size=batch * n_q * n_k))
    mask = torch.tensor(flat).reshape(batch, n_q, n_k)
    _, weights = scaled_dot_product_attention(q, k, v, mask=mask)
    assert (weights[~mask] == 0).all(), "a masked key got non-zero weight"
    row_sums = weights.sum(-1)
    has_key = mask.any(-1)
    assert torch.allclose(row_sums[has_key], torch.ones_like(row_sums[has_key]))
    assert (row_sums[~has_key] == 0).all()


@settings(max_examples=30, deadline=None)
@given(n=st.integers(2, 8), seed=st.integers(0, 2**16))
def test_without_mask_permuting_the_sequence_permutes_the_output(n, seed):
    torch.manual_seed(seed)
    layer = SelfAttention(d_model=6, d_k=4, d_v=5).double()
    x = torch.randn(2, n, 6, dtype=torch.float64)
    permutation = torch.randperm(n)
    output, weights = layer(x)
    permuted_output, permuted_weights = layer(x[:, permutation])
    assert torch.allclose(permuted_output, output[:, permutation], atol=1e-12)
    assert torch.allclose(permuted_weights, weights[:, permutation][:, :, permutation],
                          atol=1e-12)


def test_self_attention_module_uses_separate_maps_and_the_core():
    torch.manual_seed(0)
    layer = SelfAttention(d_model=8, d_k=4, d_v=3)
    x = torch.randn(2, 4, 8)
    output, weights = layer(x)
    assert output.shape == (2, 4, 3) and weights.shape == (2, 4, 4)
    assert len({id(layer.w_q.weight), id(layer.w_k.weight), id(layer.w_v.weight)}) == 3
    reference = F.scaled_dot_product_attention(layer.w_q(x), layer.w_k(x), layer.w_v(x))
    assert torch.allclose(output, reference, atol=1e-6)


def test_a_padding_mask_batch_sized_like_n_q_cannot_be_read_as_n_q_n_k():
    # batch == n_q == 3: a raw (batch, n_k) mask with 3-D scores would broadcast as (n_q, n_k)
    # only if it were 2-D; with its query axis it is (batch, 1, n_k), as it should be.
    q, k, v = random_qkv((3,), 3, 4, 8, 5, torch.float64)
    real = key_mask([4, 2, 1], 4)
    output, weights = scaled_dot_product_attention(q, k, v, mask=real[:, None, :])
    assert (weights[~real[:, None, :].expand(3, 3, 4)] == 0).all()
    for b, n in enumerate([4, 2, 1]):
        expected, _ = scaled_dot_product_attention(q[b], k[b, :n], v[b, :n])
        assert torch.allclose(output[b], expected)
    with pytest.raises(ValueError, match="dims but the scores"):
        # (batch, n_k) with a heads axis put first by mistake: 3-D mask for 4-D scores.
        scaled_dot_product_attention(q[:, None], k[:, None], v[:, None], mask=real[:, None, :])


def test_meta_tensors_flow_through_and_keep_their_device():
    q, k, v = (t.to("meta") for t in random_qkv((2, 3), 4, 5, 8, 6, torch.float32))
    output, weights = scaled_dot_product_attention(q, k, v, mask=causal_mask(5, device="meta")[1:])
    assert output.device.type == weights.device.type == "meta"
    assert output.shape == (2, 3, 4, 6) and weights.shape == (2, 3, 4, 5)
    layer = SelfAttention(8, 4, 3).to("meta")
    output, weights = layer(torch.empty(2, 5, 8, device="meta"))
    assert output.device.type == "meta" and output.shape == (2, 5, 3)
    heads = MultiHeadAttention(8, 2).to("meta")
    output, weights = heads(torch.empty(2, 5, 8, device="meta"),
                            mask=torch.ones(2, 1, 1, 5, dtype=torch.bool, device="meta"))
    assert output.device.type == "meta" and weights.shape == (2, 2, 5, 5)


def test_float64_modules_take_float64_inputs():
    layer = SelfAttention(6, 4, 3).double()
    output, weights = layer(torch.randn(2, 5, 6, dtype=torch.float64))
    assert output.dtype == weights.dtype == torch.float64


def test_valid_scales_are_ints_and_floats_including_negative():
    q, k, v = random_qkv((2,), 4, 5, 8, 3, torch.float64)
    for scale in (2, 0.5, -1.0, 0, np.float32(0.5)):
        assert_matches_torch(q, k, v, scale=scale)
    temperature = torch.tensor(0.5, dtype=torch.float64, requires_grad=True)
    output, _ = scaled_dot_product_attention(q, k, v, scale=temperature)
    assert torch.allclose(output, scaled_dot_product_attention(q, k, v, scale=0.5)[0])
    output.sum().backward()
    assert temperature.grad is not None


q8, k8, v8 = random_qkv((2,), 4, 5, 8, 3, torch.float32)
meta8 = q8.to("meta")
layer_8_4_3 = SelfAttention(8, 4, 3)
x_258 = torch.randn(2, 5, 8)

BAD_INPUTS = [
    pytest.param(scaled_dot_product_attention, (q8[0, 0], k8, v8), {}, ValueError,
                 ("q", "(..., n_q, d_k)", "(8,)"), id="sdpa: q of one dim"),
    pytest.param(scaled_dot_product_attention, (q8, k8[..., :4], v8), {}, ValueError,
                 ("d_k=8", "d_k=4"), id="sdpa: d_k of q and k differ"),
    pytest.param(scaled_dot_product_attention, (q8, k8, v8[:, :3]), {}, ValueError,
                 ("n_k=5", "n_k=3"), id="sdpa: n_k of k and v differ"),
    pytest.param(scaled_dot_product_attention, (q8, k8, v8),
                 {"mask": torch.ones(3, 5, dtype=torch.bool)}, ValueError,
                 ("mask", "(3, 5)", "(..., n_q, n_k)", "(2, 4, 5)"), id="sdpa: mask shape"),
    pytest.param(scaled_dot_product_attention, (q8, k8, v8), {"mask": torch.ones(4, 5)},
                 TypeError, ("mask", "bool", "torch.float32"), id="sdpa: float mask"),
    pytest.param(scaled_dot_product_attention, (q8, k8, v8),
                 {"mask": torch.ones(2, 5, dtype=torch.bool)}, ValueError,
                 ("mask", "(2, 5)", "(2, 4, 5)", "mask[:, None, :]"),
                 id="sdpa: raw padding mask"),
    pytest.param(scaled_dot_product_attention, (q8[:, None], k8[:, None], v8[:, None]),
                 {"mask": torch.ones(2, 1, 5, dtype=torch.bool)}, ValueError,
                 ("mask", "(2, 1, 5)", "3 dims", "(2, 1, 4, 5)", "mask[:, None, None, :]"),
                 id="sdpa: 3-D mask for 4-D scores"),
    pytest.param(scaled_dot_product_attention, (q8.long(), k8, v8), {}, TypeError,
                 ("q", "floating-point", "torch.int64"), id="sdpa: int tensor"),
    pytest.param(scaled_dot_product_attention, (q8.tolist(), k8, v8), {}, TypeError,
                 ("q", "torch.Tensor", "list"), id="sdpa: list"),
    pytest.param(scaled_dot_product_attention, (q8, k8.double(), v8), {}, TypeError,
                 ("q, k, v", "torch.float32", "k is torch.float64"), id="sdpa: dtypes differ"),
    pytest.param(scaled_dot_product_attention,
                 (q8[None].expand(3, 2, 4, 8), k8[None, :1].expand(2, 1, 5, 8), v8[:1]), {},
                 ValueError, ("(3, 2)", "(2, 1)", "do not broadcast"), id="sdpa: batch dims"),
    pytest.param(scaled_dot_product_attention, (meta8, k8, v8), {}, ValueError,
                 ("q, k, v", "one device", "q on meta", "k on cpu"), id="sdpa: q on meta"),
    pytest.param(scaled_dot_product_attention, (q8, k8, v8),
                 {"mask": torch.ones(4, 5, dtype=torch.bool, device="meta")}, ValueError,
                 ("mask", "one device", "q on cpu", "mask on meta"), id="sdpa: mask on meta"),
    pytest.param(scaled_dot_product_attention, (q8, k8, v8), {"scale": "0.5"}, TypeError,
                 ("scale", "real number", "str"), id="sdpa: scale a str"),
    pytest.param(scaled_dot_product_attention, (q8, k8, v8), {"scale": torch.ones(2)},
                 TypeError, ("scale", "real number", "Tensor"), id="sdpa: scale a vector"),
    pytest.param(scaled_dot_product_attention, (q8, k8, v8), {"scale": float("nan")},
                 ValueError, ("scale", "finite", "nan"), id="sdpa: scale nan"),
    pytest.param(SelfAttention, (0, 4, 4), {}, ValueError,
                 ("d_model", "positive int", "got 0"), id="SelfAttention: d_model 0"),
    pytest.param(SelfAttention, (8, -4, 4), {}, ValueError,
                 ("d_k", "positive int", "got -4"), id="SelfAttention: d_k negative"),
    pytest.param(SelfAttention, (8, 4, 4.0), {}, TypeError,
                 ("d_v", "positive int", "float 4.0"), id="SelfAttention: d_v float"),
    pytest.param(SelfAttention, ("8", 4, 4), {}, TypeError,
                 ("d_model", "positive int", "str '8'"), id="SelfAttention: d_model str"),
    pytest.param(layer_8_4_3, (torch.randn(2, 4, 6),), {}, ValueError,
                 ("x", "(batch, seq_len, d_model)", "d_model=8", "(2, 4, 6)"),
                 id="SelfAttention: wrong d_model"),
    pytest.param(layer_8_4_3, (x_258.double(),), {}, TypeError,
                 ("x", "torch.float64", "SelfAttention", "torch.float32"),
                 id="SelfAttention: float64 input, float32 weights"),
    pytest.param(layer_8_4_3, (x_258.to("meta"),), {}, ValueError,
                 ("x", "meta", "SelfAttention", "cpu"), id="SelfAttention: input on meta"),
    pytest.param(layer_8_4_3, (x_258,), {"mask": torch.ones(5, 5, dtype=torch.bool,
                                                             device="meta")}, ValueError,
                 ("x, mask", "x on cpu", "mask on meta"), id="SelfAttention: mask on meta"),
    pytest.param(layer_8_4_3, (x_258.long(),), {}, TypeError,
                 ("x", "floating-point", "torch.int64"), id="SelfAttention: token ids"),
    pytest.param(layer_8_4_3, (x_258,), {"mask": torch.ones(2, 5, dtype=torch.bool)},
                 ValueError, ("mask", "(2, 5)", "(2, 5, 5)", "mask[:, None, :]"),
                 id="SelfAttention: raw padding mask"),
]

