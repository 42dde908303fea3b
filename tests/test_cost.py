"""course_utils.cost against torch's own counters and kernels, and lesson 06's exercises."""

from __future__ import annotations

import math
import time

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from course_utils.attention import MultiHeadAttention, scaled_dot_product_attention
from course_utils.cost import (
    PARTS,
    attention_bytes,
    attention_flops,
    chunked_attention,
    counted_flops,
    cpu_seconds_per_call,
    fitted_exponent,
    online_softmax_update,
    peak_memory,
    saved_for_backward,
    training_weights_bytes,
)
from course_utils.exercises import CORRECT
from course_utils.exercises.cost import layer_flops, merge_partials
from tests.exercise_checks import assert_incorrect


@pytest.fixture
def one_thread():
    """Many small ops run far faster on one thread on a busy machine; restore afterwards."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


# ---------------------------------------------------------------- counting


def test_the_seed_numbers_at_n512_d768_h12():
    flops = attention_flops(512, 768, 12)
    assert flops["qkv_projections"] == pytest.approx(1.8e9, rel=0.01)
    assert flops["scores"] == pytest.approx(4.0e8, rel=0.01)
    weights_per_head = attention_bytes(512, 768, 12)["softmax"] / 12
    assert weights_per_head == pytest.approx(1e6, rel=0.05)  # about 1 MB per head per sequence


@pytest.mark.parametrize(
    ("batch", "seq_len", "d_model", "heads"),
    [(1, 32, 64, 4), (2, 17, 48, 6), (3, 64, 32, 1)],
)
def test_matmul_counts_match_flop_counter_mode_on_torch_multihead_attention(
    batch, seq_len, d_model, heads
):
    torch.manual_seed(0)
    layer = torch.nn.MultiheadAttention(d_model, heads, batch_first=True)
    x = torch.randn(batch, seq_len, d_model)
    # need_weights=True with autograd on: torch takes its materialised path, whose matrix
    # products FlopCounterMode sees (its fused fast path is not counted).
    measured = counted_flops(lambda: layer(x, x, x, need_weights=True))
    ours = attention_flops(seq_len, d_model, heads, batch=batch)
    batched = sum(count for op, count in measured.items() if "bmm" in op)
    assert batched == ours["scores"] + ours["weighted_sum"]
    assert sum(measured.values()) - batched == ours["qkv_projections"] + ours["output_projection"]


def test_matmul_counts_match_flop_counter_mode_on_the_course_layer():
    layer = MultiHeadAttention(32, 4)
    with torch.no_grad():
        measured = counted_flops(layer, torch.randn(2, 40, 32))
    ours = attention_flops(40, 32, 4, batch=2)
    assert sum(measured.values()) == sum(ours[part] for part in PARTS if part != "softmax")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_bytes_match_the_tensors_a_forward_pass_returns(dtype):
    layer = MultiHeadAttention(24, 3).to(dtype)
    with torch.no_grad():
        output, weights = layer(torch.randn(2, 10, 24, dtype=dtype))
    counted = attention_bytes(10, 24, 3, batch=2, dtype=dtype)
    assert counted["softmax"] == counted["scores"] == weights.nbytes
    assert counted["output_projection"] == output.nbytes


def test_the_quadratic_parts_grow_four_fold_and_the_linear_ones_two_fold():
    small, large = attention_flops(300, 64, 4), attention_flops(600, 64, 4)
    for part in ("scores", "softmax", "weighted_sum"):
        assert large[part] == 4 * small[part]
    for part in ("qkv_projections", "output_projection"):
        assert large[part] == 2 * small[part]


def test_training_weights_bytes_is_what_autograd_saves():
    batch, layers, heads, seq_len, d_model = 2, 2, 3, 20, 12
    stack = [MultiHeadAttention(d_model, heads) for _ in range(layers)]

    def forward(x):
        for layer in stack:
            x, _ = layer(x)
        return x

    saved = saved_for_backward(forward, torch.randn(batch, seq_len, d_model))
    square = sum(size for shape, size in saved if shape[-2:] == (seq_len, seq_len))
    assert square == training_weights_bytes(batch, layers, heads, seq_len)
    assert training_weights_bytes(batch, layers, heads, seq_len, torch.bfloat16) == square // 2


@pytest.mark.parametrize(
    ("call", "error", "words"),
    [
        (lambda: attention_flops(512, 768, 5), ValueError, "not divisible by heads=5"),
        (lambda: attention_flops(0, 768, 12), ValueError, "seq_len should be a positive int"),
        (lambda: attention_flops(512.0, 768, 12), TypeError, "got float 512.0"),
        (lambda: attention_bytes(8, 8, 2, dtype=torch.int32), TypeError, "floating-point"),
        (lambda: training_weights_bytes(1, 0, 2, 8), ValueError, "layers should be"),
        (lambda: fitted_exponent([4], [16]), ValueError, "at least two"),
        (lambda: fitted_exponent([4, 4], [16, 17]), ValueError, "sizes should differ"),
        (lambda: fitted_exponent([4, 8], [16, 0]), ValueError, "positive"),
        (lambda: cpu_seconds_per_call({"f": lambda: None}, repeats=0), ValueError, "repeats"),
        (lambda: cpu_seconds_per_call({"f": 3}), TypeError, "function to call"),
        (lambda: peak_memory(torch.ones(3)), TypeError, "function to call, got Tensor"),
    ],
    ids=["heads", "seq_len", "float", "dtype", "layers", "one pair", "same sizes", "zero value",
         "repeats", "not callable", "tensor"],
)
def test_bad_input_gets_a_message_naming_what_was_expected(call, error, words):
    with pytest.raises(error, match=words):
        call()


# ---------------------------------------------------------------- measuring


@pytest.mark.parametrize("power", [1.0, 2.0, 0.5])
def test_fitted_exponent_recovers_a_power_law(power):
    sizes = [100, 200, 400, 800]
    assert fitted_exponent(sizes, [3.0 * s**power for s in sizes]) == pytest.approx(power)


def test_peak_memory_sees_torch_allocations_and_frees():
    numbers = 250_000  # 1 MB of float32

    def one_at_a_time():
        first = torch.ones(numbers)
        del first  # freed before the second: the peak is one tensor
        return torch.ones(numbers)

    def two_at_once():
        first, second = torch.ones(numbers), torch.ones(numbers)
        return first + second  # three alive at the moment of the sum

    assert peak_memory(one_at_a_time) == 4 * numbers
    assert peak_memory(two_at_once) == 3 * 4 * numbers
    assert peak_memory(lambda: None) == 0


def test_peak_memory_of_materialised_attention_holds_two_n_by_n_tensors(one_thread):
    q, k, v = (torch.randn(1, 2, 256, 16) for _ in range(3))
    square = 2 * 256 * 256 * 4  # one (1, 2, n, n) float32 tensor
    peak = peak_memory(scaled_dot_product_attention, q, k, v)
    assert 2 * square <= peak <= 3 * square  # scores and weights alive at once
    assert peak_memory(F.scaled_dot_product_attention, q, k, v) < square
    assert peak_memory(chunked_attention, q, k, v, block_size=32) < square


def test_cpu_seconds_per_call_does_not_count_sleep_and_restores_threads():
    threads = torch.get_num_threads()
    seconds = cpu_seconds_per_call({"sleep": lambda: time.sleep(0.02)}, repeats=3,
                                   min_seconds=1e-4)
    assert set(seconds) == {"sleep"}
    assert seconds["sleep"] < 0.01  # sleeping costs wall time, not CPU time
    assert torch.get_num_threads() == threads


# ---------------------------------------------------------------- online softmax


@settings(max_examples=30, deadline=None)
@given(
    n_q=st.integers(1, 40),
    n_k=st.integers(1, 40),
    d_k=st.integers(1, 8),
    block_size=st.integers(1, 17),
    seed=st.integers(0, 2**16),
)
def test_chunked_attention_equals_torch_sdpa(n_q, n_k, d_k, block_size, seed):
    generator = torch.Generator().manual_seed(seed)
    q = torch.randn(2, 3, n_q, d_k, generator=generator, dtype=torch.float64)
    k = torch.randn(2, 3, n_k, d_k, generator=generator, dtype=torch.float64)
    v = torch.randn(2, 3, n_k, 5, generator=generator, dtype=torch.float64)
    expected = F.scaled_dot_product_attention(q, k, v)
    assert torch.allclose(chunked_attention(q, k, v, block_size=block_size), expected)


@settings(max_examples=30, deadline=None)
@given(
    n=st.integers(1, 50),
    window=st.integers(0, 12),
    block_size=st.integers(1, 16),
    seed=st.integers(0, 2**16),
)
def test_windowed_chunked_attention_equals_torch_sdpa_with_a_band_mask(n, window, block_size,
                                                                        seed):
    generator = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(1, 2, n, 4, generator=generator, dtype=torch.float64)
               for _ in range(3))
    positions = torch.arange(n)
    band = (positions[:, None] - positions[None, :]).abs() <= window
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=band)
    got = chunked_attention(q, k, v, block_size=block_size, window=window)
    assert torch.allclose(got, expected)


def test_chunked_attention_broadcasts_and_keeps_the_dtype():
    q = torch.randn(2, 4, 9, 8)  # (batch, heads, n_q, d_k)
    k, v = torch.randn(1, 4, 13, 8), torch.randn(1, 4, 13, 6)  # shared across the batch
    got = chunked_attention(q, k, v, block_size=4)
    assert got.shape == (2, 4, 9, 6) and got.dtype == torch.float32
    assert torch.allclose(got, F.scaled_dot_product_attention(q, k, v), atol=1e-6)


def test_chunked_work_equals_the_materialised_work_and_a_window_makes_it_linear(one_thread):
    def flops(fn, n, **kwargs):
        q, k, v = (torch.randn(1, 1, n, 8) for _ in range(3))
        return sum(counted_flops(fn, q, k, v, **kwargs).values())

    full = flops(scaled_dot_product_attention, 256)
    assert flops(chunked_attention, 256, block_size=64) == full  # same work, other order
    assert flops(scaled_dot_product_attention, 512) == 4 * full
    windowed = flops(chunked_attention, 512, block_size=32, window=32)
    assert 1.9 < flops(chunked_attention, 1024, block_size=32, window=32) / windowed < 2.2
    assert windowed < 4 * full / 5


def test_online_softmax_update_survives_rows_with_nothing_seen_yet():
    scores = torch.tensor([[float("-inf"), float("-inf")], [0.0, 1.0]])  # (n_q=2, block=2)
    values = torch.tensor([[1.0], [2.0]])
    state = (torch.full((2, 1), float("-inf")), torch.zeros(2, 1), torch.zeros(2, 1))
    row_max, row_sum, acc = online_softmax_update(*state, scores, values)
    assert not any(t.isnan().any() for t in (row_max, row_sum, acc))
    assert row_sum[0].item() == 0.0 and acc[0].item() == 0.0  # nothing added to row 0
    assert torch.allclose(acc[1] / row_sum[1], torch.softmax(scores[1], 0) @ values)


@pytest.mark.parametrize(
    ("call", "error", "words"),
    [
        (lambda: chunked_attention(torch.ones(4, 3), torch.ones(4, 2), torch.ones(4, 2)),
         ValueError, "expected q"),
        (lambda: chunked_attention(torch.ones(4, 2), torch.ones(4, 2), torch.ones(4, 2),
                                   block_size=0), ValueError, "block_size"),
        (lambda: chunked_attention(torch.ones(3, 2), torch.ones(4, 2), torch.ones(4, 2),
                                   window=1), ValueError, "n_q == n_k"),
        (lambda: chunked_attention(torch.ones(4, 2), torch.ones(4, 2), torch.ones(4, 2),
                                   window=-1), ValueError, "window should be"),
        (lambda: chunked_attention(torch.ones(4, 2, dtype=torch.long), torch.ones(4, 2),
                                   torch.ones(4, 2)), TypeError, "floating-point"),
    ],
    ids=["d_k", "block", "window shape", "window value", "dtype"],
)
def test_chunked_attention_rejects_bad_input(call, error, words):
    with pytest.raises(error, match=words):
        call()


# ---------------------------------------------------------------- exercises


def test_layer_flops_reference_passes_and_equals_our_count():
    assert layer_flops.evaluate(layer_flops.reference).status == CORRECT
    counts = attention_flops(100, 64, 8, batch=3)
    assert layer_flops.reference(3, 100, 64, 8) == sum(counts.values()) - counts["softmax"]


def _with(change):
    """A wrong answer to layer_flops: the reference with one typical mistake."""
    return lambda batch, n, d, h: change(layer_flops.reference(batch, n, d, h), batch, n, d, h)


@pytest.mark.parametrize(
    ("answer", "words"),
    [
        (_with(lambda total, b, n, d, h: total // 2), "multiply-add is 2 FLOPs"),
        (_with(lambda total, b, n, d, h: total // b), "multiply by batch"),
        (_with(lambda total, b, n, d, h: total - 2 * b * n * d * d), "W_O"),
        (_with(lambda total, b, n, d, h: total - 2 * b * n * n * d), "weights @ V costs as much"),
        (_with(lambda total, b, n, d, h: total + 2 * (h - 1) * 2 * b * n * n * d),
         "heads times too big"),
        (_with(lambda total, b, n, d, h: total + 5 * b * h * n * n), "leave the softmax out"),
        (_with(lambda total, b, n, d, h: total + 1), "FlopCounterMode counts"),
        (lambda batch, n, d, h: "lots", "as a number"),
    ],
    ids=["MACs", "batch", "W_O", "AV", "heads", "softmax", "off by one", "not a number"],
)
def test_layer_flops_catches_typical_mistakes(answer, words):
    assert_incorrect(layer_flops, answer, words)


def test_merge_partials_reference_passes_and_merges_online_states():
    assert merge_partials.evaluate(merge_partials.reference).status == CORRECT
    scores, values = torch.randn(3, 10), torch.randn(10, 2)
    empty = (torch.full((3, 1), -math.inf), torch.zeros(3, 1), torch.zeros(3, 2))
    a = online_softmax_update(*empty, scores[:, :4], values[:4])
    b = online_softmax_update(*empty, scores[:, 4:], values[4:])
    _, total, out = merge_partials.reference(a, b)
    assert torch.allclose(out / total, torch.softmax(scores, -1) @ values, atol=1e-6)


def _merge_without_rescaling(a, b):
    return torch.maximum(a[0], b[0]), a[1] + b[1], a[2] + b[2]


def _merge_normalised(a, b):
    new_max, total, out = merge_partials.reference(a, b)
    return new_max, total, out / total


def _merge_rescaled_the_wrong_way(a, b):
    new_max = torch.maximum(a[0], b[0])
    grow_a, grow_b = torch.exp(new_max - a[0]), torch.exp(new_max - b[0])
    return new_max, a[1] * grow_a + b[1] * grow_b, a[2] * grow_a + b[2] * grow_b


def _merge_keeping_the_first_max(a, b):
    return a[0], a[1] + b[1], a[2] + b[2]


def _merge_only_the_sum_rescaled(a, b):
    new_max, total, _ = merge_partials.reference(a, b)
    return new_max, total, a[2] + b[2]


@pytest.mark.parametrize(
    ("answer", "words"),
    [
        (_merge_without_rescaling, "added the two sums as they are"),
        (_merge_normalised, "out should stay unnormalised"),
        (_merge_rescaled_the_wrong_way, "runs the wrong way"),
        (_merge_keeping_the_first_max, "larger of the two"),
        (_merge_only_the_sum_rescaled, "added the two outs as they are"),
        (lambda a, b: a[0], "tuple of three tensors"),
    ],
    ids=["no rescaling", "normalised", "wrong way", "first max", "out not rescaled", "not a tuple"],
)
def test_merge_partials_catches_typical_mistakes(answer, words):
    assert_incorrect(merge_partials, answer, words)
