"""course_utils.experiments.l06_cost against torch's own counters and kernels (exercises:
tests/mutations/l06.py)."""

from __future__ import annotations

import math
import time

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from course_utils import notebook
from course_utils.experiments.l06_cost import (
    PARTS,
    attention_bytes,
    attention_flops,
    counted_flops,
    cpu_seconds_per_call,
    fitted_exponent,
    kv_cache_bytes,
    peak_memory,
    saved_for_backward,
    training_weights_bytes,
)
from course_utils.nn.attention import MultiHeadAttention, scaled_dot_product_attention
from course_utils.nn.masks import causal_mask
from course_utils.nn.online_softmax import chunked_attention, online_softmax_update


@pytest.fixture
def one_thread():
    """Many small ops run far faster on one thread on a busy machine; restore afterwards."""
    with notebook.one_thread():
        yield


# ---------------------------------------------------------------- counting


def test_the_seed_numbers_at_n512_d768_h12():
    flops = attention_flops(512, 768, 12)
    assert flops["qkv_projections"] == pytest.approx(1.8e9, rel=0.01)
    assert flops["scores"] == pytest.approx(4.0e8, rel=0.01)
    weights_per_head = attention_bytes(512, 768, 12)["softmax"] / 12
    assert weights_per_head == pytest.approx(1e6, rel=0.05)  # about 1 MB per head per sequence


@pytest.mark.parametrize(
    ("seq_len", "d_model", "num_heads", "batch_size"),
    [(32, 64, 4, 1), (17, 48, 6, 2), (64, 32, 1, 3)],
)
def test_matmul_counts_match_flop_counter_mode_on_torch_multihead_attention(
    seq_len, d_model, num_heads, batch_size
):
    torch.manual_seed(0)
    layer = torch.nn.MultiheadAttention(d_model, num_heads, batch_first=True)
    x = torch.randn(batch_size, seq_len, d_model)
    # need_weights=True with autograd on: torch takes its materialised path, whose matrix
    # products FlopCounterMode sees (its fused fast path is not counted).
    measured = counted_flops(lambda: layer(x, x, x, need_weights=True))
    ours = attention_flops(seq_len, d_model, num_heads, batch_size=batch_size)
    batched = sum(count for op, count in measured.items() if "bmm" in op)
    assert batched == ours["scores"] + ours["weighted_sum"]
    assert sum(measured.values()) - batched == ours["qkv_projections"] + ours["output_projection"]


def test_matmul_counts_match_flop_counter_mode_on_the_course_layer():
    layer = MultiHeadAttention(32, 4)
    with torch.no_grad():
        measured = counted_flops(layer, torch.randn(2, 40, 32))
    ours = attention_flops(40, 32, 4, batch_size=2)
    assert sum(measured.values()) == sum(ours[part] for part in PARTS if part != "softmax")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_bytes_match_the_tensors_a_forward_pass_returns(dtype):
    layer = MultiHeadAttention(24, 3).to(dtype)
    with torch.no_grad():
        output, weights = layer(torch.randn(2, 10, 24, dtype=dtype))
    counted = attention_bytes(10, 24, 3, batch_size=2, dtype=dtype)
    assert counted["softmax"] == counted["scores"] == weights.nbytes
    assert counted["output_projection"] == output.nbytes


def test_the_quadratic_parts_grow_four_fold_and_the_linear_ones_two_fold():
    small, large = attention_flops(300, 64, 4), attention_flops(600, 64, 4)
    for part in ("scores", "softmax", "weighted_sum"):
        assert large[part] == 4 * small[part]
    for part in ("qkv_projections", "output_projection"):
        assert large[part] == 2 * small[part]


def test_training_weights_bytes_is_what_autograd_saves():
    seq_len, d_model, num_heads, batch_size, num_layers = 20, 12, 3, 2, 2
    stack = [MultiHeadAttention(d_model, num_heads) for _ in range(num_layers)]

    def forward(x):
        for layer in stack:
            x, _ = layer(x)
        return x

    saved = saved_for_backward(forward, torch.randn(batch_size, seq_len, d_model))
    square = sum(size for shape, size in saved if shape[-2:] == (seq_len, seq_len))
    sizes = {"batch_size": batch_size, "num_layers": num_layers}
    assert square == training_weights_bytes(seq_len, num_heads, **sizes)
    assert training_weights_bytes(seq_len, num_heads, **sizes, dtype=torch.bfloat16) == square // 2


def test_the_old_positional_order_is_refused_not_misread():
    with pytest.raises(TypeError):
        training_weights_bytes(2, 1, 4, 64)  # (batch, layers, heads, seq_len) of the past
    with pytest.raises(TypeError):
        attention_flops(512, 768, 12, 2)


@pytest.mark.parametrize(("num_heads", "num_kv_heads"), [(4, 4), (4, 2), (4, 1), (6, 3)])
def test_kv_cache_bytes_is_the_cache_of_a_decoder_and_gqa_matches_torch(num_heads, num_kv_heads):
    seq_len, d_model, batch_size, num_layers = 9, 24, 2, 3
    d_k = d_model // num_heads
    # A real cache: every layer keeps k and v (batch, num_kv_heads, seq_len, d_k).
    cache = [(torch.randn(batch_size, num_kv_heads, seq_len, d_k),
              torch.randn(batch_size, num_kv_heads, seq_len, d_k)) for _ in range(num_layers)]
    held = sum(k.nbytes + v.nbytes for k, v in cache)
    assert held == kv_cache_bytes(seq_len, d_model, num_heads, batch_size=batch_size,
                                  num_layers=num_layers, num_kv_heads=num_kv_heads)
    assert kv_cache_bytes(seq_len, d_model, num_heads, num_kv_heads=num_kv_heads,
                          dtype=torch.float16) * 2 * batch_size * num_layers == held
    # Grouped-query attention: each kv head serves num_heads / num_kv_heads query heads,
    # exactly as torch's enable_gqa and as repeating the kv heads.
    q = torch.randn(batch_size, num_heads, 1, d_k)  # one new token's queries
    k, v = cache[0]
    group = num_heads // num_kv_heads
    repeated = F.scaled_dot_product_attention(q, k.repeat_interleave(group, dim=1),
                                              v.repeat_interleave(group, dim=1))
    torch.testing.assert_close(F.scaled_dot_product_attention(q, k, v, enable_gqa=True),
                               repeated)


def test_kv_cache_grows_linearly_and_mqa_divides_it_by_num_heads():
    one = kv_cache_bytes(1000, 4096, 32, num_layers=32, dtype=torch.float16)
    assert kv_cache_bytes(2000, 4096, 32, num_layers=32, dtype=torch.float16) == 2 * one
    assert kv_cache_bytes(1000, 4096, 32, num_layers=32, num_kv_heads=8,
                          dtype=torch.float16) * 4 == one
    assert kv_cache_bytes(1000, 4096, 32, num_layers=32, num_kv_heads=1,
                          dtype=torch.float16) * 32 == one


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


@settings(max_examples=30, deadline=None)
@given(
    n_q=st.integers(1, 30),
    extra=st.integers(0, 20),
    window=st.one_of(st.none(), st.integers(0, 12)),
    block_size=st.integers(1, 16),
    seed=st.integers(0, 2**16),
)
def test_causal_chunked_attention_equals_torch_with_the_lower_right_causal_mask(
        n_q, extra, window, block_size, seed):
    generator = torch.Generator().manual_seed(seed)
    n_k = n_q + extra  # the queries are the last n_q positions, as when decoding with a cache
    q = torch.randn(2, n_q, 4, generator=generator, dtype=torch.float64)
    k, v = (torch.randn(2, n_k, 4, generator=generator, dtype=torch.float64) for _ in range(2))
    allowed = causal_mask(n_q, n_k)
    if window is not None:
        offset = torch.arange(extra, n_k)[:, None] - torch.arange(n_k)[None, :]
        allowed = allowed & (offset <= window)
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)
    got = chunked_attention(q, k, v, block_size=block_size, window=window, causal=True)
    assert torch.allclose(got, expected)


def test_a_causal_mask_skips_about_half_the_blocks():
    q, k, v = (torch.randn(1, 1, 1024, 8) for _ in range(3))
    full = sum(counted_flops(chunked_attention, q, k, v, block_size=64).values())
    causal = sum(counted_flops(chunked_attention, q, k, v, block_size=64, causal=True).values())
    blocks = 1024 // 64
    assert causal / full == pytest.approx((blocks + 1) / (2 * blocks))  # diagonal blocks kept


def test_chunked_attention_with_no_keys_returns_zeros_like_torch():
    q, k, v = torch.randn(2, 3, 4), torch.randn(2, 0, 4), torch.randn(2, 0, 5)
    expected = F.scaled_dot_product_attention(q, k, v)
    assert torch.equal(chunked_attention(q, k, v), expected)
    assert torch.equal(expected, torch.zeros(2, 3, 5))


def test_chunked_attention_runs_on_the_inputs_device():
    q, k, v = (torch.randn(1, 2, 40, 8, device="meta") for _ in range(3))
    out = chunked_attention(q, k, v, block_size=16, window=5, causal=True)
    assert out.device.type == "meta" and out.shape == (1, 2, 40, 8)


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


# ---------------------------------------------------------------- bad input

_ones = torch.ones(4, 2)
_state = (torch.full((3, 1), -math.inf), torch.zeros(3, 1), torch.zeros(3, 2))

BAD_INPUTS = [
    pytest.param(attention_flops, (512, 768, 5), {}, ValueError,
                 ("d_model=768", "not divisible by num_heads=5"), id="attention_flops: heads"),
    pytest.param(attention_flops, (0, 768, 12), {}, ValueError,
                 ("seq_len", "positive int", "got 0"), id="attention_flops: zero seq_len"),
    pytest.param(attention_flops, (512.0, 768, 12), {}, TypeError,
                 ("seq_len", "positive int", "float 512.0"), id="attention_flops: float seq_len"),
    pytest.param(attention_flops, (8, 8, 2), {"batch_size": 2.0}, TypeError,
                 ("batch_size", "positive int", "float"), id="attention_flops: float batch"),
    pytest.param(attention_flops, (512, 768, 12, 2), {}, TypeError, ("positional",),
                 id="attention_flops: batch_size given by position"),
    pytest.param(attention_bytes, (8, 8, 2), {"dtype": torch.int32}, TypeError,
                 ("dtype", "floating-point", "int32"), id="attention_bytes: int dtype"),
    pytest.param(attention_bytes, (8, 0, 2), {}, ValueError, ("d_model", "positive int"),
                 id="attention_bytes: zero d_model"),
    pytest.param(training_weights_bytes, (8, 2), {"num_layers": 0}, ValueError,
                 ("num_layers", "positive int", "got 0"), id="training_weights_bytes: layers"),
    pytest.param(training_weights_bytes, (2, 1, 4, 64), {}, TypeError, ("positional",),
                 id="training_weights_bytes: the old positional order"),
    pytest.param(training_weights_bytes, (8, 2), {"dtype": "float16"}, TypeError,
                 ("dtype", "floating-point", "str"), id="training_weights_bytes: str dtype"),
    pytest.param(kv_cache_bytes, (8, 8, 4), {"num_kv_heads": 3}, ValueError,
                 ("num_heads=4", "not divisible by num_kv_heads=3"), id="kv_cache_bytes: groups"),
    pytest.param(kv_cache_bytes, (8, 8, 4), {"num_kv_heads": 0}, ValueError,
                 ("num_kv_heads", "positive int", "got 0"), id="kv_cache_bytes: zero kv heads"),
    pytest.param(kv_cache_bytes, (8, 8, 4), {"dtype": torch.int8}, TypeError,
                 ("dtype", "floating-point", "int8"), id="kv_cache_bytes: int dtype"),
    pytest.param(kv_cache_bytes, (8, 8, 3), {}, ValueError, ("not divisible by num_heads=3",),
                 id="kv_cache_bytes: d_model and heads"),
    pytest.param(fitted_exponent, ([4], [16]), {}, ValueError, ("at least two",),
                 id="fitted_exponent: one pair"),
    pytest.param(fitted_exponent, ([4, 4], [16, 17]), {}, ValueError, ("sizes should differ",),
                 id="fitted_exponent: same sizes"),
    pytest.param(fitted_exponent, ([4, 8], [16, 0]), {}, ValueError, ("positive", "0"),
                 id="fitted_exponent: zero value"),
    pytest.param(cpu_seconds_per_call, ({"f": lambda: None},), {"repeats": 0}, ValueError,
                 ("repeats", "positive int", "got 0"), id="cpu_seconds_per_call: repeats"),
    pytest.param(cpu_seconds_per_call, ({"f": 3},), {}, TypeError,
                 ("every value of calls", "function to call", "int 3"),
                 id="cpu_seconds_per_call: not callable"),
    pytest.param(cpu_seconds_per_call, ({},), {}, TypeError, ("calls", "non-empty dict"),
                 id="cpu_seconds_per_call: empty"),
    pytest.param(peak_memory, (torch.ones(3),), {}, TypeError,
                 ("fn", "function to call", "tensor of shape (3,)"), id="peak_memory: a tensor"),
    pytest.param(counted_flops, ("sdpa",), {}, TypeError, ("fn", "function to call", "str"),
                 id="counted_flops: a string"),
    pytest.param(saved_for_backward, (None,), {}, TypeError, ("fn", "function to call"),
                 id="saved_for_backward: None"),
    pytest.param(chunked_attention, (torch.ones(4, 3), _ones, _ones), {}, ValueError,
                 ("expected q (..., n_q, d_k)", "(4, 3)"), id="chunked_attention: d_k"),
    pytest.param(chunked_attention, (_ones, _ones, _ones), {"block_size": 0}, ValueError,
                 ("block_size", "positive int", "got 0"), id="chunked_attention: block"),
    pytest.param(chunked_attention, (torch.ones(5, 2), _ones, _ones), {"window": 1}, ValueError,
                 ("n_k >= n_q", "n_q=5", "n_k=4"), id="chunked_attention: window, n_q > n_k"),
    pytest.param(chunked_attention, (_ones, _ones, _ones), {"causal": 1}, TypeError,
                 ("causal", "True or False", "int 1"), id="chunked_attention: causal an int"),
    pytest.param(chunked_attention, (_ones, _ones, _ones), {"window": -1}, ValueError,
                 ("window", "int >= 0", "-1"), id="chunked_attention: negative window"),
    pytest.param(chunked_attention, (_ones.long(), _ones, _ones), {}, TypeError,
                 ("q", "floating-point", "int64"), id="chunked_attention: int q"),
    pytest.param(chunked_attention, (_ones, _ones.to("meta"), _ones), {}, ValueError,
                 ("q on cpu", "k on meta"), id="chunked_attention: two devices"),
    pytest.param(online_softmax_update, (*_state, torch.randn(3, 4), torch.randn(5, 2)), {},
                 ValueError, ("values (..., block, d_v)", "(5, 2)"),
                 id="online_softmax_update: values of another block"),
    pytest.param(online_softmax_update, (*_state[:2], torch.zeros(2, 2), torch.randn(3, 4),
                                         torch.randn(4, 2)), {}, ValueError,
                 ("running_out (..., n_q, d_v)", "(2, 2)"),
                 id="online_softmax_update: running_out of other queries"),
    pytest.param(online_softmax_update, (*_state, [[1.0]], torch.randn(4, 2)), {}, TypeError,
                 ("scores", "torch.Tensor", "list"), id="online_softmax_update: a list"),
]
