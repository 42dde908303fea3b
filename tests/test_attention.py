"""The attention core against torch's own implementation, plus its properties and errors."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from course_utils.attention import SelfAttention, scaled_dot_product_attention
from course_utils.masks import causal_mask, expand_padding_mask, padding_mask

TOLERANCE = {torch.float32: 1e-5, torch.float64: 1e-10}


def random_qkv(lead, n_q, n_k, d_k, d_v, dtype, seed=0):
    generator = torch.Generator().manual_seed(seed)
    make = lambda *shape: torch.randn(*shape, generator=generator, dtype=dtype)  # noqa: E731
    return make(*lead, n_q, d_k), make(*lead, n_k, d_k), make(*lead, n_k, d_v)


def assert_matches_torch(q, k, v, mask=None, scale=None):
    ours, _ = scaled_dot_product_attention(q, k, v, mask=mask, scale=scale)
    reference = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)
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
    mask = expand_padding_mask(padding_mask([6, 4, 1]))  # (batch, 1, 1, n_k)
    assert_matches_torch(q, k, v, mask=mask)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_equals_torch_with_combined_mask_and_scaling_off(dtype):
    q, k, v = random_qkv((3, 2), 6, 6, 8, 4, dtype)
    mask = causal_mask(6) & expand_padding_mask(padding_mask([6, 4, 2]))  # (batch, 1, 6, 6)
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


def test_masks_have_the_course_convention():
    assert torch.equal(causal_mask(3), torch.tensor([[1, 0, 0], [1, 1, 0], [1, 1, 1]]).bool())
    assert torch.equal(padding_mask([2, 3]), torch.tensor([[1, 1, 0], [1, 1, 1]]).bool())
    assert padding_mask([1], max_len=4).shape == (1, 4)
    assert expand_padding_mask(padding_mask([2, 3])).shape == (2, 1, 1, 3)
    assert expand_padding_mask(padding_mask([2, 3]), with_heads=False).shape == (2, 1, 3)


q8, k8, v8 = random_qkv((2,), 4, 5, 8, 3, torch.float32)


@pytest.mark.parametrize(
    ("call", "error", "words"),
    [
        (lambda: scaled_dot_product_attention(q8[0, 0], k8, v8), ValueError,
         ["(..., n_q, d_k)", "(8,)"]),
        (lambda: scaled_dot_product_attention(q8, k8[..., :4], v8), ValueError,
         ["d_k=8", "d_k=4"]),
        (lambda: scaled_dot_product_attention(q8, k8, v8[:, :3]), ValueError,
         ["n_k=5", "n_k=3"]),
        (lambda: scaled_dot_product_attention(q8, k8, v8, mask=torch.ones(3, 5).bool()),
         ValueError, ["(3, 5)", "(..., n_q, n_k)", "(2, 4, 5)"]),
        (lambda: scaled_dot_product_attention(q8, k8, v8, mask=torch.ones(4, 5)), TypeError,
         ["bool", "torch.float32"]),
        (lambda: scaled_dot_product_attention(q8.long(), k8, v8), TypeError,
         ["floating-point", "torch.int64"]),
        (lambda: scaled_dot_product_attention(q8.tolist(), k8, v8), TypeError,
         ["torch.Tensor", "list"]),
        (lambda: scaled_dot_product_attention(q8, k8.double(), v8), TypeError,
         ["torch.float32", "torch.float64"]),
        (lambda: scaled_dot_product_attention(q8[None].expand(3, 2, 4, 8), k8[None, :1].expand(
            2, 1, 5, 8), v8[:1]), ValueError, ["do not broadcast"]),
        (lambda: SelfAttention(8, 4, 4)(torch.randn(2, 4, 6)), ValueError,
         ["d_model=8", "(2, 4, 6)"]),
        (lambda: causal_mask(0), ValueError, ["sequence length", "positive int", "got 0"]),
        (lambda: padding_mask([2.5, 1.0]), ValueError, ["integer"]),
        (lambda: padding_mask([2, 5], max_len=3), ValueError, ["max_len=3", "5"]),
        (lambda: expand_padding_mask(torch.ones(2, 3)), ValueError, ["(batch, n_k)", "float32"]),
    ],
    ids=["rank", "d_k", "n_k", "mask shape", "float mask", "int tensor", "list", "dtypes",
         "batch dims", "d_model", "causal n", "float lengths", "max_len", "pad dtype"],
)
def test_bad_input_names_what_was_expected_and_what_came(call, error, words):
    with pytest.raises(error) as raised:
        call()
    for word in words:
        assert word in str(raised.value), f"{word!r} missing from: {raised.value}"
