"""FlashAttention by tiles (course_utils.nn.flash_attention): exact in value and gradients."""

from __future__ import annotations

import math

import pytest
import torch

from course_utils.cost import saved_for_backward
from course_utils.masks import causal_mask
from course_utils.nn.flash_attention import (
    attention_tiles,
    flash_attention,
    flash_backward,
    flash_forward,
)


def _naive(q, k, v, causal=False, window=None, sink=None):
    """Materialised attention; a sink is one more column of the softmax, dropped after it."""
    n_q, n_k = q.shape[-2], k.shape[-2]
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (batch, heads, n_q, n_k)
    offset = torch.arange(n_q)[:, None] + n_k - n_q - torch.arange(n_k)
    hidden = torch.zeros_like(offset, dtype=torch.bool)
    if causal:
        hidden |= offset < 0
    if window is not None:
        hidden |= offset.abs() > window
    scores = scores.masked_fill(hidden, float("-inf"))
    if sink is not None:
        column = sink.view(1, -1, 1, 1).expand(*scores.shape[:-1], 1)
        return torch.softmax(torch.cat([scores, column], dim=-1), dim=-1)[..., :-1] @ v
    return torch.softmax(scores, dim=-1) @ v


def _inputs(n_q, n_k, sink=False, batch=2, heads=3, d_k=4, d_v=5, seed=0):
    generator = torch.Generator().manual_seed(seed)
    shapes = [(batch, heads, n_q, d_k), (batch, heads, n_k, d_k), (batch, heads, n_k, d_v)]
    tensors = [torch.randn(*shape, generator=generator, dtype=torch.float64).requires_grad_()
               for shape in shapes]
    if sink:
        tensors.append(torch.randn(heads, generator=generator, dtype=torch.float64)
                       .requires_grad_())
    return tensors


CASES = [  # n_q, n_k, causal, window, block_size, sink
    pytest.param(7, 7, False, None, 3, False, id="square, blocks that do not divide n"),
    pytest.param(5, 9, False, None, 4, False, id="non-square"),
    pytest.param(5, 9, True, None, 2, False, id="non-square causal"),
    pytest.param(1, 6, True, None, 4, False, id="a single query"),
    pytest.param(8, 8, True, 2, 3, False, id="causal window"),
    pytest.param(9, 9, False, 1, 2, False, id="two-sided window"),
    pytest.param(6, 10, True, None, 4, True, id="sink, causal"),
    pytest.param(4, 4, False, None, 8, True, id="sink, one tile"),
]


@pytest.mark.parametrize(("n_q", "n_k", "causal", "window", "block_size", "sink"), CASES)
def test_flash_attention_equals_naive_attention_in_value_and_gradcheck(
        n_q, n_k, causal, window, block_size, sink):
    inputs = _inputs(n_q, n_k, sink, batch=1, heads=2, d_k=3, d_v=2)

    def flash(q, k, v, *rest):
        return flash_attention(q, k, v, causal=causal, block_size=block_size, window=window,
                               sink=rest[0] if rest else None)

    torch.testing.assert_close(flash(*inputs), _naive(*inputs[:3], causal, window,
                                                      inputs[3] if sink else None))
    assert torch.autograd.gradcheck(flash, inputs)


def test_causal_follows_the_course_mask_convention():
    q, k, v = _inputs(3, 8)
    mask = causal_mask(3, 8)  # the queries are the last 3 positions
    scores = (q @ k.transpose(-2, -1) / 2).masked_fill(~mask, float("-inf"))
    torch.testing.assert_close(flash_attention(q, k, v, causal=True, block_size=2),
                               torch.softmax(scores, -1) @ v)


def test_forward_logsumexp_is_the_rows_logsumexp_with_the_sink():
    q, k, v, sink = _inputs(6, 6, sink=True)
    scores = q @ k.transpose(-2, -1) / 2
    _, logsumexp = flash_forward(q, k, v, block_size=4, sink=sink)
    with_sink = torch.cat([scores, sink.view(1, -1, 1, 1).expand(2, 3, 6, 1)], dim=-1)
    torch.testing.assert_close(logsumexp, torch.logsumexp(with_sink, -1, keepdim=True))


def test_backward_gradients_equal_autograds_through_naive_attention():
    q, k, v, sink = _inputs(6, 11, sink=True)
    d_output = torch.randn(2, 3, 6, 5, dtype=torch.float64)
    output, logsumexp = flash_forward(q, k, v, causal=True, block_size=4, sink=sink)
    ours = flash_backward(q, k, v, output, logsumexp, d_output, causal=True, block_size=4,
                          sink=sink)
    theirs = torch.autograd.grad(_naive(q, k, v, True, None, sink), (q, k, v, sink), d_output)
    for mine, reference in zip(ours, theirs, strict=True):
        torch.testing.assert_close(mine, reference)
    assert flash_backward(q, k, v, output, logsumexp, d_output, causal=True)[3] is None


def test_a_query_with_no_key_to_see_gets_zeros_not_nan():
    q, k, v = _inputs(4, 4)
    # window 0 without causal: each query sees only its own key; query 0 of 1 sees key 3 only.
    output = flash_attention(q[..., :1, :], k, v, window=0, block_size=2)
    torch.testing.assert_close(output, v[..., 3:, :])
    empty_scores = flash_forward(q, k, v, causal=True, block_size=2)[1]
    assert torch.isfinite(empty_scores).all()


def test_saved_tensors_grow_linearly_and_hold_no_n_by_n_tensor():
    for n in (64, 128):
        q, k, v = (torch.randn(1, 2, n, 8, requires_grad=True) for _ in range(3))
        shapes = [shape for shape, _ in saved_for_backward(flash_attention, q, k, v,
                                                            causal=True, block_size=16)]
        assert all(shape.count(n) <= 1 for shape in shapes), shapes
        assert len(shapes) == 5  # q, k, v, the output and the logsumexp


def test_tiles_skip_what_the_mask_hides_and_nothing_else():
    n, block = 12, 4
    assert len(attention_tiles(n, n, block)) == 9
    assert len(attention_tiles(n, n, block, causal=True)) == 6
    assert len(attention_tiles(n, n, block, causal=True, window=1)) == 5
    for tile in attention_tiles(n, n, block, causal=True, window=1):
        rows = torch.arange(tile[0], tile[1])[:, None]
        cols = torch.arange(tile[2], tile[3])
        assert ((rows >= cols) & (rows - cols <= 1)).any()  # something in every tile is seen


def test_float32_and_gradients_reach_every_input_of_a_training_graph():
    q, k, v = (torch.randn(2, 2, 16, 8, requires_grad=True) for _ in range(3))
    sink = torch.zeros(2, requires_grad=True)
    flash_attention(q, k, v, causal=True, block_size=5, sink=sink).square().sum().backward()
    assert all(t.grad is not None and torch.isfinite(t.grad).all() for t in (q, k, v, sink))


_q, _k, _v = (torch.randn(1, 2, 4, 8) for _ in range(3))

BAD_INPUTS = [
    pytest.param(flash_attention, (_q[0], _k, _v), {}, ValueError,
                 ("(batch, heads, n_q, d_k)", "(2, 4, 8)"), id="flash_attention: 3-D q"),
    pytest.param(flash_attention, (_q, _k[..., :3], _v), {}, ValueError,
                 ("k (batch, heads, n_k, d_k)", "(1, 2, 4, 3)"), id="flash_attention: d_k"),
    pytest.param(flash_attention, (_q, _k, _v.long()), {}, TypeError,
                 ("v", "floating-point", "int64"), id="flash_attention: integer v"),
    pytest.param(flash_attention, (_q, _k, _v), {"block_size": 0}, ValueError,
                 ("block_size", "positive int", "got 0"), id="flash_attention: block 0"),
    pytest.param(flash_attention, (_q, _k, _v), {"causal": 1}, TypeError,
                 ("causal", "True or False", "int 1"), id="flash_attention: causal=1"),
    pytest.param(flash_attention, (_q, _k[..., :2, :], _v[..., :2, :]), {"causal": True},
                 ValueError, ("n_k >= n_q", "n_q=4", "n_k=2"), id="flash_attention: n_k < n_q"),
    pytest.param(flash_attention, (_q, _k, _v), {"window": -1}, ValueError,
                 ("window", "int >= 0", "-1"), id="flash_attention: negative window"),
    pytest.param(flash_attention, (_q, _k, _v), {"sink": torch.zeros(3)}, ValueError,
                 ("sink", "(heads,) = (2,)", "(3,)"), id="flash_attention: sink per batch"),
    pytest.param(flash_attention, (_q, _k, _v), {"sink": torch.zeros(2, dtype=torch.float64)},
                 TypeError, ("sink", "one dtype", "torch.float64"),
                 id="flash_attention: float64 sink"),
    pytest.param(flash_forward, (_q, _k, "v"), {}, TypeError, ("v", "torch.Tensor", "str"),
                 id="flash_forward: v a str"),
    pytest.param(flash_backward, (_q, _k, _v, _q, _q, _q[..., :3]), {}, ValueError,
                 ("logsumexp", "(batch, heads, n_q, 1)", "(1, 2, 4, 8)"),
                 id="flash_backward: logsumexp shape"),
    pytest.param(attention_tiles, (8, 8, 0), {}, ValueError,
                 ("block_size", "positive int", "got 0"), id="attention_tiles: block 0"),
    pytest.param(attention_tiles, (8, 4, 2), {"causal": True}, ValueError,
                 ("n_k >= n_q", "n_q=8", "n_k=4"), id="attention_tiles: n_k < n_q"),
]
