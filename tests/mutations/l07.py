"""Lesson 07's exercises: plausible wrong answers rejected with their message, correct ones
written differently accepted (the tables are run by tests/test_exercises.py)."""

from __future__ import annotations

import math

import numpy as np
import torch

from course_utils.exercises.l07 import (
    _pre_ln_block_reference,
    is_permutation_equivariant,
    pre_ln_block,
    sinusoidal,
)
from tests.support.exercise_checks import Mutations

# --- the pre-LN block -----------------------------------------------------------------------


def _attn(block, h):
    return block.self_attn(h)[0]


def _post_ln(block, x):
    h = block.norm1(x + _attn(block, x))
    return block.norm2(h + block.ffn(h))


def _normalised_residual(block, x):
    x = block.norm1(x)
    x = x + _attn(block, x)
    x = block.norm2(x)
    return x + block.ffn(x)


def _no_residual(block, x):
    return block.ffn(block.norm2(_attn(block, block.norm1(x))))


def _attention_half_only(block, x):
    return x + _attn(block, block.norm1(x))


def _no_norm2(block, x):
    x = x + _attn(block, block.norm1(x))
    return x + block.ffn(x)


def _norm1_twice(block, x):
    x = x + _attn(block, block.norm1(x))
    return x + block.ffn(block.norm1(x))


def _swapped_norms(block, x):
    x = x + _attn(block, block.norm2(x))
    return x + block.ffn(block.norm1(x))


def _normalised_output(block, x):
    x = x + _attn(block, block.norm1(x))
    return block.norm2(x + block.ffn(block.norm2(x)))


def _returns_tuple(block, x):
    return block.self_attn(block.norm1(x))


def _returns_weights(block, x):
    return block.self_attn(block.norm1(x))[1]


def _in_place(block, x):
    x += _attn(block, block.norm1(x))  # right numbers, but the caller's x changes too
    x += block.ffn(block.norm2(x))
    return x


def _explicit_qkv_and_ffn_by_hand(block, x):
    h = block.norm1(x)
    x = torch.add(x, block.self_attn(h, h, h)[0])
    h = block.norm2(x)
    ffn = block.ffn
    return x + ffn.linear2(torch.relu(ffn.linear1(h)))


def _layer_norm_by_hand(block, x):
    def norm(layer, h):
        mean = h.mean(dim=-1, keepdim=True)
        var = h.var(dim=-1, unbiased=False, keepdim=True)
        return (h - mean) / torch.sqrt(var + layer.eps) * layer.weight + layer.bias

    x = x + _attn(block, norm(block.norm1, x))
    return x + block.ffn(norm(block.norm2, x))


def _sublayers_in_a_loop(block, x):
    for norm, sublayer in ((block.norm1, lambda h: _attn(block, h)), (block.norm2, block.ffn)):
        x = x + sublayer(norm(x))
    return x


# --- the equivariance test ------------------------------------------------------------------


def _reference_equivariance(fn, x, perm):
    return torch.allclose(fn(x[:, perm]), fn(x)[:, perm])


def _inverse_permutation(fn, x, perm):
    inverse = torch.argsort(perm)
    return torch.allclose(fn(x[:, perm])[:, inverse], fn(x), atol=1e-6)


def _isclose_all(fn, x, perm):
    return torch.isclose(fn(x[:, perm]), fn(x)[:, perm], atol=1e-5).all()


def _max_difference(fn, x, perm):
    return (fn(x[:, perm]) - fn(x)[:, perm]).abs().max().item() < 1e-6


def _in_float32(fn, x, perm):
    return torch.allclose(fn(x[:, perm]).float(), fn(x)[:, perm].float(), atol=1e-5)


# --- the sinusoidal table -------------------------------------------------------------------


def _table(seq_len, d_model, first, second, exponent_step=2, start=0, base=10000):
    position = torch.arange(start, start + seq_len, dtype=torch.float32)[:, None]
    angle = position / base ** (torch.arange(0, d_model // 2) * exponent_step / d_model)
    table = torch.zeros(seq_len, d_model)
    table[:, 0::2], table[:, 1::2] = first(angle), second(angle)
    return table


def _concatenated(seq_len, d_model):
    table = _table(seq_len, d_model, torch.sin, torch.cos)
    return torch.cat([table[:, 0::2], table[:, 1::2]], dim=1)


def _column_index_exponent(seq_len, d_model):
    position = torch.arange(seq_len, dtype=torch.float32)[:, None]
    angle = position / 10000 ** (torch.arange(d_model) / d_model)  # uses the column, not 2i
    table = torch.sin(angle)
    table[:, 1::2] = torch.cos(angle[:, 1::2])
    return table


def _integer_table(seq_len, d_model):
    return _table(seq_len, d_model, torch.sin, torch.cos).long()


def _with_nan(seq_len, d_model):
    table = _table(seq_len, d_model, torch.sin, torch.cos)
    table[0, 0] = float("nan")
    return table


def _float64_exp_log(seq_len, d_model):
    position = torch.arange(seq_len, dtype=torch.float64)[:, None]
    frequency = torch.exp(-math.log(10000) * torch.arange(0, d_model, 2) / d_model)
    table = torch.empty(seq_len, d_model, dtype=torch.float64)
    table[:, 0::2] = torch.sin(position * frequency)
    table[:, 1::2] = torch.cos(position * frequency)
    return table


def _stacked_and_flattened(seq_len, d_model):
    angle = torch.arange(seq_len)[:, None] / 10000 ** (torch.arange(0, d_model, 2) / d_model)
    return torch.stack([angle.sin(), angle.cos()], dim=-1).flatten(1)  # interleaves sin, cos


def _python_loops(seq_len, d_model):
    return torch.tensor([[math.sin(pos / 10000 ** (2 * (j // 2) / d_model)) if j % 2 == 0
                          else math.cos(pos / 10000 ** (2 * (j // 2) / d_model))
                          for j in range(d_model)] for pos in range(seq_len)])


def _float64_module(block, x):
    block.double()  # the learner's own copy of the block: converting it in place is allowed
    return _pre_ln_block_reference(block, x.double())  # a float64 result


def _float16_output(block, x):
    return _pre_ln_block_reference(block, x).half()


def _bfloat16_module(block, x):
    block.bfloat16()  # every sublayer in bfloat16: right only to about 3 digits
    return _pre_ln_block_reference(block, x.bfloat16())


def _equivariance_as_numpy_bool(fn, x, perm):
    return np.allclose(fn(x[:, perm]).numpy(), fn(x)[:, perm].numpy())  # numpy's bool


def _equivariance_as_0d_tensor(fn, x, perm):
    return torch.isclose(fn(x[:, perm]), fn(x)[:, perm]).all()  # a 0-d bool tensor


def _sixteen_features_written_in(block, x):
    h = block.norm1(x).reshape(x.shape[0], x.shape[1], 16)  # the first block's d_model
    x = x + _attn(block, h)
    return x + block.ffn(block.norm2(x))


def _two_heads_by_hand(block, x):
    attn, h = block.self_attn, block.norm1(x)
    batch, seq_len, d_model = h.shape
    q, k, v = (linear(h).view(batch, seq_len, 2, -1).transpose(1, 2)  # 2 heads written in
               for linear in (attn.w_q, attn.w_k, attn.w_v))
    weights = torch.softmax(q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5, dim=-1)
    heads = (weights @ v).transpose(1, 2).reshape(batch, seq_len, d_model)
    x = x + attn.w_o(heads)
    return x + block.ffn(block.norm2(x))


def _first_sequence_only(fn, x, perm):
    return torch.allclose(fn(x[:, perm])[0], fn(x)[:, perm][0])


def _assert_close(fn, x, perm):
    try:
        torch.testing.assert_close(fn(x[:, perm]), fn(x)[:, perm])
    except AssertionError:
        return False
    return True


def _table_of_12_rows(seq_len, d_model):
    return _table(12, d_model, torch.sin, torch.cos)[:seq_len]  # the first call's seq_len


def _in_float16(seq_len, d_model):
    position = torch.arange(seq_len, dtype=torch.float16)[:, None]  # the formula in half
    two_i = torch.arange(0, d_model, 2, dtype=torch.float16)
    angle = position / 10000 ** (two_i / d_model)
    return torch.stack([angle.sin(), angle.cos()], dim=-1).flatten(1)


_REMEMBERED = {}


def _first_output_remembered(block, x):  # right for the checker's first x only
    return _REMEMBERED.setdefault("output", _pre_ln_block_reference(block, x))


MUTATIONS = {
    pre_ln_block: Mutations(
        wrong=[
            ("the first output remembered", _first_output_remembered,
             "should have shape (3, 4, 16)"),
            ("post-LN order", _post_ln, "post-LN order"),
            ("normalised residual", _normalised_residual, "residual adds the normalised x"),
            ("no residual", _no_residual, "no residual connection"),
            ("FFN forgotten", _attention_half_only, "FFN sublayer"),
            ("FFN without norm2", _no_norm2, "normalise its input with norm2"),
            ("norm1 twice", _norm1_twice, "norm1 is used before both"),
            ("norms swapped", _swapped_norms, "swapped"),
            ("output normalised", _normalised_output, "output is normalised at the end"),
            ("tuple returned", _returns_tuple, "return only the output tensor"),
            ("weights returned", _returns_weights, "should have shape (2, 5, 16)"),
            ("input returned", lambda block, x: x, "returns its input x unchanged"),
            ("float16 output", _float16_output, "only about 3 significant digits"),
            ("bfloat16 block", _bfloat16_module, "torch.bfloat16, which keeps only"),
            ("integer output", lambda block, x: _pre_ln_block_reference(block, x).long(),
             "floating-point"),
            ("x += in place", _in_place, "changed its argument x in place"),
            ("d_model = 16 written in", _sixteen_features_written_in,
             "your code raised RuntimeError"),
            ("2 heads written in", _two_heads_by_hand, "values are off"),
        ],
        right=[
            ("explicit q, k, v and FFN by hand", _explicit_qkv_and_ffn_by_hand),
            ("LayerNorm by hand", _layer_norm_by_hand),
            ("sublayers in a loop", _sublayers_in_a_loop),
            ("block converted to float64", _float64_module),
        ],
    ),
    is_permutation_equivariant: Mutations(
        wrong=[
            ("the input permuted twice",
             lambda fn, x, perm: torch.allclose(fn(x[:, perm][:, perm]), fn(x)[:, perm]),
             "permuted the same way"),
            ("output not permuted",
             lambda fn, x, perm: torch.allclose(fn(x[:, perm]), fn(x)), "permuted the same way"),
            ("exact comparison",
             lambda fn, x, perm: torch.equal(fn(x[:, perm]), fn(x)[:, perm]), "not exactly"),
            ("shapes only",
             lambda fn, x, perm: fn(x[:, perm]).shape == fn(x)[:, perm].shape,
             "is not equivariant"),
            ("sums over positions",
             lambda fn, x, perm: torch.allclose(fn(x[:, perm]).sum(1), fn(x)[:, perm].sum(1)),
             "x.flip(1)"),
            ("sorted values",
             lambda fn, x, perm: torch.allclose(fn(x[:, perm]).sort(dim=1).values,
                                                fn(x)[:, perm].sort(dim=1).values),
             "sorted values"),
            ("first token only",
             lambda fn, x, perm: torch.allclose(fn(x[:, perm])[:, 0], fn(x)[:, perm][:, 0]),
             "compare every position"),
            ("inverse permutation on the output",
             lambda fn, x, perm: torch.allclose(fn(x[:, perm]), fn(x)[:, torch.argsort(perm)]),
             "permuted the same way"),
            ("batch axis permuted",
             lambda fn, x, perm: torch.allclose(fn(x[perm]), fn(x)[perm]), "dimension 0"),
            ("returns a tensor",
             lambda fn, x, perm: (fn(x[:, perm]) - fn(x)[:, perm]).abs(),
             "return True or False"),
            ("tolerance too loose",
             lambda fn, x, perm: torch.allclose(fn(x[:, perm]), fn(x)[:, perm], atol=0.1),
             "tolerance is too loose"),
            ("int for a bool",
             lambda fn, x, perm: int(torch.allclose(fn(x[:, perm]), fn(x)[:, perm])),
             "return True or False, got int"),
            ("always True", lambda fn, x, perm: True, "says it is"),
            ("the first sequence only", _first_sequence_only, "not only the first"),
        ],
        right=[
            ("default allclose", _reference_equivariance),
            ("inverse permutation", _inverse_permutation),
            ("isclose(...).all()", _isclose_all),
            ("largest difference", _max_difference),
            ("compared in float32", _in_float32),
            ("torch.testing.assert_close", _assert_close),
            ("numpy's bool", _equivariance_as_numpy_bool),
            ("0-d bool tensor", _equivariance_as_0d_tensor),
        ],
    ),
    sinusoidal: Mutations(
        wrong=[
            ("sin and cos swapped", lambda n, d: _table(n, d, torch.cos, torch.sin), "swapped"),
            ("halves not interleaved", _concatenated, "interleave"),
            ("positions from 1", lambda n, d: _table(n, d, torch.sin, torch.cos, start=1),
             "start at 1"),
            ("i instead of 2i",
             lambda n, d: _table(n, d, torch.sin, torch.cos, exponent_step=1),
             "2i runs over 0, 2, 4"),
            ("base 1000", lambda n, d: _table(n, d, torch.sin, torch.cos, base=1000),
             "frequencies of the others"),
            ("column index as exponent", _column_index_exponent, "cosine columns are not"),
            ("transposed", lambda n, d: _table(n, d, torch.sin, torch.cos).T,
             "should have shape"),
            ("integer dtype", _integer_table, "floating-point"),
            ("NaN", _with_nan, "contains NaN"),
            ("float16 table", lambda n, d: sinusoidal.reference(n, d).half(),
             "only about 3 significant digits"),
            ("d_model = 16 of the first call written in",
             lambda n, d: _table(n, 16, torch.sin, torch.cos)[:, :d], "when d_model=10"),
            ("a table of 12 rows", _table_of_12_rows,
             "sinusoidal_positions(40, 6) should have shape (40, 6), got (12, 6)"),
            ("computed in float16", _in_float16, "only about 3 significant digits"),
        ],
        right=[
            ("float64 via exp and log", _float64_exp_log),
            ("stacked then flattened", _stacked_and_flattened),
            ("python loops", _python_loops),
            ("table helper", lambda n, d: _table(n, d, torch.sin, torch.cos)),
        ],
    ),
}

