"""course_utils.nn.positions against transformers' Llama rotary embedding and RoPE's own algebra."""

from __future__ import annotations

import math

import pytest
import torch
from transformers import LlamaConfig
from transformers.models.bloom.modeling_bloom import build_alibi_tensor
from transformers.models.cohere.modeling_cohere import (
    apply_rotary_pos_emb as cohere_apply_rotary_pos_emb,
)
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb

from course_utils.nn.masks import causal_mask
from course_utils.nn.positions import (
    alibi_bias,
    alibi_slopes,
    apply_rope,
    apply_rope_from,
    apply_rope_interleaved,
    rope_frequencies,
    sinusoidal_positions,
)


def _llama_rope(q, k, positions, base):
    """transformers' RoPE for q, k ``(batch, num_heads, seq_len, head_dim)`` at ``positions``."""
    num_heads, head_dim = q.shape[1], q.shape[-1]
    config = LlamaConfig(hidden_size=num_heads * head_dim, num_attention_heads=num_heads,
                         head_dim=head_dim, max_position_embeddings=64,
                         rope_parameters={"rope_type": "default", "rope_theta": base})
    rotary = LlamaRotaryEmbedding(config)
    position_ids = positions[None].expand(q.shape[0], -1)  # (batch, seq_len)
    cos, sin = rotary(q, position_ids)  # (batch, seq_len, head_dim)
    return apply_rotary_pos_emb(q, k, cos, sin)


@pytest.mark.parametrize("base", [10000.0, 500000.0, 100.0])
@pytest.mark.parametrize(("batch", "num_heads", "seq_len", "head_dim"),
                         [(2, 3, 7, 8), (1, 1, 5, 2), (3, 2, 11, 64)])
def test_apply_rope_is_llamas_rotary_embedding(base, batch, num_heads, seq_len, head_dim):
    generator = torch.Generator().manual_seed(seq_len * head_dim)
    q = torch.randn(batch, num_heads, seq_len, head_dim, generator=generator)
    k = torch.randn(batch, num_heads, seq_len, head_dim, generator=generator)
    positions = torch.randint(0, 1000, (seq_len,), generator=generator)
    q_llama, k_llama = _llama_rope(q, k, positions, base)
    torch.testing.assert_close(apply_rope(q, positions, base), q_llama)
    torch.testing.assert_close(apply_rope(k, positions, base), k_llama)


def test_apply_rope_matches_llama_at_consecutive_positions_of_a_cache():
    q = torch.randn(2, 4, 3, 16)
    positions = torch.arange(10, 13)  # three new tokens after a cache of ten
    torch.testing.assert_close(apply_rope(q, positions), _llama_rope(q, q, positions, 1e4)[0])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16])
def test_apply_rope_from_a_start_is_apply_rope_at_the_following_positions(dtype):
    x = torch.randn(2, 3, 5, 8).to(dtype)  # (batch, num_heads, seq_len, d_k)
    for start in (0, 7, 7, 300):  # twice 7: the shared angles give the same numbers again
        assert torch.equal(apply_rope_from(x, start, 500.0),
                           apply_rope(x, torch.arange(start, start + 5), 500.0))


def test_apply_rope_from_under_inference_mode_leaves_training_possible():
    x = torch.randn(1, 4, 8)
    with torch.inference_mode():
        apply_rope_from(x, 3)
    leaf = x.clone().requires_grad_()
    apply_rope_from(leaf, 3).sum().backward()  # inference tensors cannot be saved for backward
    assert leaf.grad is not None


def test_interleaved_rope_is_coheres_interleaved_rotary_embedding():
    generator = torch.Generator().manual_seed(3)
    q, k = torch.randn(2, 2, 3, 5, 12, generator=generator)  # (batch, num_heads, seq_len, d_k)
    positions = torch.randint(0, 1000, (5,), generator=generator)
    angles = positions[:, None].float() * rope_frequencies(12, 500.0)  # (seq_len, d_k / 2)
    angles = torch.repeat_interleave(angles, 2, dim=-1)[None]  # Cohere's adjacent pairs
    q_cohere, k_cohere = cohere_apply_rotary_pos_emb(q, k, angles.cos(), angles.sin())
    torch.testing.assert_close(apply_rope_interleaved(q, positions, 500.0), q_cohere)
    torch.testing.assert_close(apply_rope_interleaved(k, positions, 500.0), k_cohere)


def test_interleaved_rope_is_rotate_half_on_reordered_dimensions():
    x = torch.randn(4, 7, 8, dtype=torch.float64)
    positions = torch.arange(7)
    evens_then_odds = torch.tensor([0, 2, 4, 6, 1, 3, 5, 7])
    torch.testing.assert_close(apply_rope_interleaved(x, positions)[..., evens_then_odds],
                               apply_rope(x[..., evens_then_odds], positions))
    assert not torch.allclose(apply_rope_interleaved(x, positions), apply_rope(x, positions))


def test_frequencies_are_llamas_inverse_frequencies():
    config = LlamaConfig(hidden_size=48, num_attention_heads=2, head_dim=24,
                         rope_parameters={"rope_type": "default", "rope_theta": 1234.0})
    torch.testing.assert_close(rope_frequencies(24, 1234.0), LlamaRotaryEmbedding(config).inv_freq)


def test_pair_i_turns_with_pair_i_plus_half_by_the_angle_of_the_formula():
    d, position, base = 6, 5, 10000.0
    for i in range(d // 2):
        x = torch.zeros(1, d, dtype=torch.float64)
        x[0, i] = 1.0  # the unit vector of dim i turns towards dim i + d/2
        angle = torch.tensor(position * base ** (-2 * i / d), dtype=torch.float64)
        expected = torch.zeros(1, d, dtype=torch.float64)
        expected[0, i], expected[0, i + d // 2] = angle.cos(), angle.sin()
        torch.testing.assert_close(apply_rope(x, torch.tensor([position])), expected)


def test_scores_depend_only_on_the_offset_for_many_random_vectors_and_positions():
    generator = torch.Generator().manual_seed(0)
    d, trials = 32, 500
    q = torch.randn(trials, 1, d, generator=generator, dtype=torch.float64)
    k = torch.randn(trials, 1, d, generator=generator, dtype=torch.float64)
    m, n = (torch.randint(0, 2000, (trials,), generator=generator) for _ in range(2))
    shift = torch.randint(-500, 500, (trials,), generator=generator)

    def score(q_pos, k_pos):  # (trials,) q_m · k_n, one pair of positions per trial
        return torch.stack([
            (apply_rope(q[t], q_pos[t:t + 1]) * apply_rope(k[t], k_pos[t:t + 1])).sum()
            for t in range(trials)
        ])

    moved = score(m + shift + 500, n + shift + 500)  # the same offset m - n, elsewhere
    torch.testing.assert_close(score(m + 500, n + 500), moved, rtol=1e-5, atol=1e-4)
    # and it is not the same score at another offset
    assert (score(m + 500, n + 501) - moved).abs().max() > 0.1


def test_rotation_keeps_norms_and_position_zero_is_the_identity():
    x = torch.randn(4, 9, 10, dtype=torch.float64)  # (batch, seq_len, d)
    positions = torch.randint(0, 5000, (9,))
    torch.testing.assert_close(apply_rope(x, positions).norm(dim=-1), x.norm(dim=-1))
    torch.testing.assert_close(apply_rope(x, torch.zeros(9, dtype=torch.long)), x)


def test_non_square_and_batched_shapes_rotate_each_row_by_its_own_position():
    x = torch.randn(2, 3, 5, 6)  # (batch, num_heads, seq_len, d_k), seq_len != d_k
    positions = torch.tensor([4, 0, 9, 2, 7])
    out = apply_rope(x, positions)
    assert out.shape == x.shape and out.dtype == x.dtype
    for row in range(5):
        torch.testing.assert_close(out[..., row:row + 1, :],
                                   apply_rope(x[..., row:row + 1, :], positions[row:row + 1]))
    torch.testing.assert_close(apply_rope(x[1, 2], positions), out[1, 2])  # (seq_len, d)


def test_dtype_is_kept():
    x = torch.randn(3, 4, dtype=torch.float64)
    positions = torch.arange(3)
    assert apply_rope(x, positions).dtype == torch.float64
    assert apply_rope(x.half(), positions).dtype == torch.float16


def test_sinusoidal_positions_follow_the_formula():
    seq_len, d_model = 7, 10
    table = sinusoidal_positions(seq_len, d_model)
    assert table.shape == (seq_len, d_model) and table.dtype == torch.float32
    for pos in range(seq_len):
        for i in range(d_model // 2):
            angle = pos / 10000 ** (2 * i / d_model)
            assert table[pos, 2 * i].item() == pytest.approx(math.sin(angle), abs=1e-5)
            assert table[pos, 2 * i + 1].item() == pytest.approx(math.cos(angle), abs=1e-5)
    # Every position gets its own pattern: no two rows coincide.
    distances = torch.cdist(table, table) + torch.eye(seq_len)
    assert distances.min() > 0.1


@pytest.mark.parametrize(("args", "error"), [((0, 8), ValueError), ((4, 7), ValueError),
                                             ((4, 0), ValueError), ((4.0, 8), TypeError)])
def test_sinusoidal_positions_reject_bad_sizes(args, error):
    with pytest.raises(error):
        sinusoidal_positions(*args)


def _paper_slopes(n):
    """The slopes as the ALiBi paper's code writes them (Press et al., 2022, attention_with_
    linear_biases, fairseq/models/transformer.py): a geometric sequence from 2^(-8/n)."""
    def power_of_2(n):
        start = 2 ** (-(2 ** -(math.log2(n) - 3)))
        return [start * start**i for i in range(n)]
    if math.log2(n).is_integer():
        return power_of_2(n)
    closest = 2 ** math.floor(math.log2(n))
    return power_of_2(closest) + _paper_slopes(2 * closest)[0::2][: n - closest]


@pytest.mark.parametrize("num_heads", [1, 2, 3, 5, 6, 8, 12, 16, 20])
def test_alibi_slopes_are_the_papers_and_blooms(num_heads):
    slopes = alibi_slopes(num_heads)
    torch.testing.assert_close(slopes, torch.tensor(_paper_slopes(num_heads)))
    # BLOOM's ALiBi tensor is slope_h * j for key j; at key position 1 it is the slope itself
    bloom = build_alibi_tensor(torch.ones(1, 2), num_heads, torch.float32)  # (heads, 1, 2)
    torch.testing.assert_close(slopes, bloom[:, 0, 1])


def test_alibi_slopes_for_a_power_of_two_are_the_closed_form():
    for num_heads in (2, 4, 8, 16):
        expected = torch.tensor([2.0 ** (-8 * (h + 1) / num_heads) for h in range(num_heads)])
        torch.testing.assert_close(alibi_slopes(num_heads), expected)


@pytest.mark.parametrize(("num_heads", "n_q", "n_k"), [(4, 5, 5), (3, 2, 7), (8, 1, 9), (5, 6, 6)])
def test_alibi_bias_is_minus_slope_times_distance_with_queries_last(num_heads, n_q, n_k):
    bias = alibi_bias(num_heads, n_q, n_k)
    assert bias.shape == (num_heads, n_q, n_k)
    slopes = _paper_slopes(num_heads)
    for h in range(num_heads):
        for i in range(n_q):
            for j in range(n_k):
                query_position = n_k - n_q + i
                assert bias[h, i, j].item() == pytest.approx(
                    -slopes[h] * abs(query_position - j), rel=1e-6, abs=1e-7)
    assert (bias[:, :, -1] <= 0).all() and (bias[:, -1, -1] == 0).all()


@pytest.mark.parametrize(("n_q", "n_k"), [(6, 6), (2, 6)])
def test_alibi_attention_weights_are_blooms(n_q, n_k):
    # BLOOM adds slope * j (key position) and masks the future; per query row that differs
    # from -slope * (i - j) by a constant, which the softmax removes.
    num_heads = 6
    scores = torch.randn(num_heads, n_q, n_k)
    mask = causal_mask(n_q, n_k)
    bloom = build_alibi_tensor(torch.ones(1, n_k), num_heads, torch.float32)  # (heads, 1, n_k)
    expected = (scores + bloom).masked_fill(~mask, float("-inf")).softmax(-1)
    ours = (scores + alibi_bias(num_heads, n_q, n_k)).masked_fill(~mask, float("-inf"))
    torch.testing.assert_close(ours.softmax(-1), expected)


BAD_INPUTS = [
    pytest.param(apply_rope, (torch.ones(3, 5), torch.arange(3)), {}, ValueError,
                 ("x", "even", "(3, 5)"), id="apply_rope: odd d"),
    pytest.param(apply_rope, (torch.ones(3, 4), torch.arange(4)), {}, ValueError,
                 ("positions", "seq_len 3", "(4,)"), id="apply_rope: positions too long"),
    pytest.param(apply_rope, (torch.ones(3, 4), torch.arange(3.0)), {}, TypeError,
                 ("positions", "integer", "torch.float32"), id="apply_rope: float positions"),
    pytest.param(apply_rope_interleaved, (torch.ones(3, 5), torch.arange(3)), {}, ValueError,
                 ("x", "even", "(3, 5)"), id="apply_rope_interleaved: odd d"),
    pytest.param(apply_rope_interleaved, ([[1.0, 2.0]], torch.arange(1)), {}, TypeError,
                 ("x", "torch.Tensor", "list"), id="apply_rope_interleaved: a list"),
    pytest.param(apply_rope, (torch.ones(3, 4), [0, 1, 2]), {}, TypeError,
                 ("positions", "torch.Tensor", "list"), id="apply_rope: list positions"),
    pytest.param(apply_rope, (torch.ones(3, 4), torch.arange(3)[None]), {}, ValueError,
                 ("positions", "(seq_len,)", "(1, 3)"), id="apply_rope: 2-D positions"),
    pytest.param(apply_rope_from, (torch.ones(3, 5), 0), {}, ValueError,
                 ("x", "even", "(3, 5)"), id="apply_rope_from: odd d"),
    pytest.param(apply_rope_from, (torch.ones(3, 4), -1), {}, ValueError,
                 ("start", "-1"), id="apply_rope_from: negative start"),
    pytest.param(apply_rope_from, (torch.ones(3, 4), 1.0), {}, TypeError,
                 ("start", "int", "float"), id="apply_rope_from: float start"),
    pytest.param(apply_rope, (torch.ones(3, 4, dtype=torch.long), torch.arange(3)), {},
                 TypeError, ("x", "floating-point", "torch.int64"), id="apply_rope: int x"),
    pytest.param(apply_rope, (torch.ones(4), torch.arange(1)), {}, ValueError,
                 ("x", "(..., seq_len, d)", "(4,)"), id="apply_rope: 1-D x"),
    pytest.param(apply_rope, (torch.ones(3, 4), torch.arange(3)), {"base": 0.0}, ValueError,
                 ("base", "positive", "0.0"), id="apply_rope: zero base"),
    pytest.param(rope_frequencies, (5,), {}, ValueError, ("d", "even", "5"),
                 id="rope_frequencies: odd d"),
    pytest.param(rope_frequencies, (8,), {"base": "1e4"}, TypeError, ("base", "number", "str"),
                 id="rope_frequencies: str base"),
    pytest.param(sinusoidal_positions, (4, 7), {}, ValueError, ("d_model", "even", "7"),
                 id="sinusoidal_positions: odd d_model"),
    pytest.param(sinusoidal_positions, (0, 8), {}, ValueError, ("seq_len", "positive int", "0"),
                 id="sinusoidal_positions: seq_len=0"),
    pytest.param(sinusoidal_positions, (4.0, 8), {}, TypeError,
                 ("seq_len", "positive int", "float"),
                 id="sinusoidal_positions: float seq_len"),
    pytest.param(alibi_slopes, (0,), {}, ValueError, ("num_heads", "positive int", "0"),
                 id="alibi_slopes: zero heads"),
    pytest.param(alibi_bias, (4, 5, 3), {}, ValueError, ("n_k >= n_q", "n_q=5", "n_k=3"),
                 id="alibi_bias: fewer keys than queries"),
    pytest.param(alibi_bias, (4.0, 5), {}, TypeError, ("num_heads", "positive int", "float"),
                 id="alibi_bias: float num_heads"),
    pytest.param(alibi_bias, (4, 0), {}, ValueError, ("n_q", "positive int", "0"),
                 id="alibi_bias: zero queries"),
]
