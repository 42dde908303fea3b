"""The encoder block against torch.nn.TransformerEncoderLayer, order blindness, positions,
the toy model, and lesson 07's exercises."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from course_utils.exercises import CORRECT, NOT_ATTEMPTED
from course_utils.exercises.transformer import (
    is_permutation_equivariant,
    pre_ln_block,
    sinusoidal,
)
from course_utils.masks import causal_mask, to_mha_convention
from course_utils.transformer import (
    EncoderBlock,
    FeedForward,
    TinyTransformer,
    sinusoidal_positions,
)
from tests.exercise_checks import assert_incorrect

D_MODEL, HEADS, D_FF, SEQ_LEN = 12, 3, 24, 5


def _torch_layer(norm_first: bool, activation: str = "relu") -> nn.TransformerEncoderLayer:
    return nn.TransformerEncoderLayer(D_MODEL, HEADS, dim_feedforward=D_FF, dropout=0.0,
                                      activation=activation, batch_first=True,
                                      norm_first=norm_first)


def _random_mask(generator) -> torch.Tensor:
    """(n_q, n_k) bool, True = may attend, every query keeps at least one key."""
    mask = torch.rand(SEQ_LEN, SEQ_LEN, generator=generator) < 0.5
    mask[torch.arange(SEQ_LEN), torch.randint(SEQ_LEN, (SEQ_LEN,), generator=generator)] = True
    return mask


@pytest.mark.parametrize("norm_first", [False, True], ids=["post-LN", "pre-LN"])
@pytest.mark.parametrize("mask_kind", ["none", "causal", "random"])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_block_equals_torch_encoder_layer(norm_first, mask_kind, activation):
    generator = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    layer = _torch_layer(norm_first, activation)
    # Non-trivial LayerNorm parameters, so a misplaced or missing norm would show.
    for norm in (layer.norm1, layer.norm2):
        nn.init.normal_(norm.weight, mean=1.0, std=0.3)
        nn.init.normal_(norm.bias, std=0.3)
    block = EncoderBlock.from_torch(layer)
    assert block.norm_first is norm_first
    mask = {"none": None, "causal": causal_mask(SEQ_LEN),
            "random": _random_mask(generator)}[mask_kind]
    x = torch.randn(3, SEQ_LEN, D_MODEL, generator=generator, requires_grad=True)

    expected = layer(x, src_mask=None if mask is None else to_mha_convention(mask))
    got, weights = block(x, mask=mask)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
    assert weights.shape == (3, HEADS, SEQ_LEN, SEQ_LEN)
    if mask is not None:
        assert (weights[:, :, ~mask] == 0).all(), "masked keys must get zero weight"

    # The same function, so the same gradient with respect to the input.
    (grad_expected,) = torch.autograd.grad(expected.square().sum(), x)
    (grad_got,) = torch.autograd.grad(got.square().sum(), x)
    torch.testing.assert_close(grad_got, grad_expected, atol=1e-5, rtol=1e-5)


def test_block_equals_torch_in_eval_mode_despite_dropout():
    torch.manual_seed(1)
    layer = nn.TransformerEncoderLayer(D_MODEL, HEADS, D_FF, dropout=0.3, batch_first=True)
    block = EncoderBlock.from_torch(layer)
    x = torch.randn(2, SEQ_LEN, D_MODEL)
    with torch.no_grad():
        torch.testing.assert_close(block(x)[0], layer.eval()(x), atol=1e-5, rtol=1e-5)


def test_post_and_pre_ln_differ_with_the_same_weights():
    torch.manual_seed(2)
    post = EncoderBlock(D_MODEL, HEADS, D_FF)
    pre = EncoderBlock(D_MODEL, HEADS, D_FF, norm_first=True)
    pre.load_state_dict(post.state_dict())
    x = 3 * torch.randn(2, SEQ_LEN, D_MODEL)
    with torch.no_grad():
        assert not torch.allclose(post(x)[0], pre(x)[0], atol=1e-3)


def test_from_torch_rejects_what_it_cannot_copy():
    with pytest.raises(TypeError, match="TransformerEncoderLayer"):
        EncoderBlock.from_torch(nn.Linear(4, 4))
    with pytest.raises(ValueError, match="batch_first=True"):
        EncoderBlock.from_torch(nn.TransformerEncoderLayer(D_MODEL, HEADS, D_FF))
    custom = nn.TransformerEncoderLayer(D_MODEL, HEADS, D_FF, batch_first=True,
                                        activation=torch.tanh)
    with pytest.raises(ValueError, match="relu or gelu"):
        EncoderBlock.from_torch(custom)


def test_switches_remove_residual_and_layer_norm():
    torch.manual_seed(3)
    bare = EncoderBlock(D_MODEL, HEADS, D_FF, residual=False, layer_norm=False)
    x = torch.randn(2, SEQ_LEN, D_MODEL)
    with torch.no_grad():
        attended, _ = bare.self_attn(x)
        torch.testing.assert_close(bare(x)[0], bare.ffn(attended))

    no_residual = EncoderBlock(D_MODEL, HEADS, D_FF, residual=False)
    no_residual.load_state_dict(EncoderBlock(D_MODEL, HEADS, D_FF).state_dict())
    with torch.no_grad():
        h = no_residual.norm1(no_residual.self_attn(x)[0])
        torch.testing.assert_close(no_residual(x)[0], no_residual.norm2(no_residual.ffn(h)))


def test_block_rejects_bad_input():
    block = EncoderBlock(D_MODEL, HEADS, D_FF)
    with pytest.raises(ValueError, match=r"\(batch, seq_len, d_model\) with d_model=12"):
        block(torch.randn(2, SEQ_LEN, D_MODEL + 1))
    with pytest.raises(TypeError, match="floating-point"):
        block(torch.ones(2, SEQ_LEN, D_MODEL, dtype=torch.long))
    with pytest.raises(ValueError, match="activation"):
        FeedForward(D_MODEL, D_FF, activation="tanh")


def test_ffn_acts_on_each_position_alone():
    torch.manual_seed(4)
    ffn = FeedForward(D_MODEL, D_FF)
    x = torch.randn(2, SEQ_LEN, D_MODEL)
    with torch.no_grad():
        one_by_one = torch.cat([ffn(x[:, i:i + 1]) for i in range(SEQ_LEN)], dim=1)
        torch.testing.assert_close(ffn(x), one_by_one)


@pytest.mark.parametrize("seed", range(4))
def test_block_without_positions_is_permutation_equivariant(seed):
    torch.manual_seed(seed)
    block = EncoderBlock(D_MODEL, HEADS, D_FF, norm_first=bool(seed % 2))
    x = torch.randn(2, SEQ_LEN, D_MODEL)
    perm = torch.randperm(SEQ_LEN)
    with torch.no_grad():
        torch.testing.assert_close(block(x[:, perm])[0], block(x)[0][:, perm],
                                   atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("seed", range(4))
def test_positions_break_permutation_equivariance(seed):
    torch.manual_seed(seed)
    block = EncoderBlock(D_MODEL, HEADS, D_FF, norm_first=bool(seed % 2))
    x = torch.randn(2, SEQ_LEN, D_MODEL)
    perm = torch.roll(torch.arange(SEQ_LEN), 1)  # moves every token
    positions = sinusoidal_positions(SEQ_LEN, D_MODEL)
    with torch.no_grad():
        permuted_first = block(x[:, perm] + positions)[0]
        permuted_after = block(x + positions)[0][:, perm]
    assert (permuted_first - permuted_after).abs().max() > 1e-2


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


def test_tiny_transformer_shapes_and_final_norm():
    torch.manual_seed(5)
    model = TinyTransformer(vocab_size=10, seq_len=SEQ_LEN, d_model=16, num_heads=2, depth=3,
                            norm_first=True)
    tokens = torch.randint(10, (4, SEQ_LEN))
    logits, weights = model(tokens)
    assert logits.shape == (4, SEQ_LEN, 10)
    assert weights.shape == (4, 3, 2, SEQ_LEN, SEQ_LEN)
    torch.testing.assert_close(weights.sum(-1), torch.ones(4, 3, 2, SEQ_LEN))
    assert isinstance(model.final_norm, nn.LayerNorm)
    post = TinyTransformer(10, SEQ_LEN, 16, num_heads=2, depth=1)
    assert isinstance(post.final_norm, nn.Identity), "post-LN blocks end normalised already"


def test_tiny_transformer_rejects_bad_tokens():
    model = TinyTransformer(vocab_size=10, seq_len=SEQ_LEN, d_model=16)
    with pytest.raises(TypeError, match=r"long tensor of ids \(batch, seq_len\)"):
        model(torch.randn(2, SEQ_LEN))
    with pytest.raises(ValueError, match="seq_len=5"):
        model(torch.zeros(2, SEQ_LEN + 1, dtype=torch.long))


# --- exercises ------------------------------------------------------------------------------

def stub(*args):
    raise NotImplementedError


EXERCISES = [pre_ln_block, is_permutation_equivariant, sinusoidal]


@pytest.mark.parametrize("exercise", EXERCISES, ids=lambda e: e.title)
def test_reference_is_correct_and_stub_is_not_attempted(exercise):
    assert exercise.evaluate(exercise.reference).status == CORRECT
    assert exercise.evaluate(stub).status == NOT_ATTEMPTED


def _post_ln(block, x):
    h = block.norm1(x + block.self_attn(x)[0])
    return block.norm2(h + block.ffn(h))


def _normalised_residual(block, x):
    x = block.norm1(x)
    x = x + block.self_attn(x)[0]
    x = block.norm2(x)
    return x + block.ffn(x)


def _no_residual(block, x):
    return block.ffn(block.norm2(block.self_attn(block.norm1(x))[0]))


def _attention_half_only(block, x):
    return x + block.self_attn(block.norm1(x))[0]


def _returns_tuple(block, x):
    return block.self_attn(block.norm1(x))


PRE_LN_WRONG = {
    "post-LN order": (_post_ln, "post-LN order"),
    "normalised residual": (_normalised_residual, "residual adds the normalised x"),
    "no residual": (_no_residual, "no residual connection"),
    "no FFN": (_attention_half_only, "FFN sublayer"),
    "tuple": (_returns_tuple, "return only the output tensor"),
}


@pytest.mark.parametrize("name", PRE_LN_WRONG)
def test_pre_ln_block_catches_typical_mistakes(name):
    answer, message = PRE_LN_WRONG[name]
    assert_incorrect(pre_ln_block, answer, message)


EQUIVARIANCE_WRONG = {
    "output not permuted": (
        lambda fn, x, perm: torch.allclose(fn(x[:, perm]), fn(x), atol=1e-5),
        "the output permuted the same way",
    ),
    "exact comparison": (
        lambda fn, x, perm: torch.equal(fn(x[:, perm]), fn(x)[:, perm]),
        "torch.allclose(..., atol=1e-5), not exactly",
    ),
    "shapes only": (
        lambda fn, x, perm: fn(x[:, perm]).shape == fn(x)[:, perm].shape,
        "is not equivariant",
    ),
    "returns a tensor": (
        lambda fn, x, perm: (fn(x[:, perm]) - fn(x)[:, perm]).abs(),
        "return True or False",
    ),
}


@pytest.mark.parametrize("name", EQUIVARIANCE_WRONG)
def test_equivariance_test_catches_typical_mistakes(name):
    answer, message = EQUIVARIANCE_WRONG[name]
    assert_incorrect(is_permutation_equivariant, answer, message)


def _table(seq_len, d_model, first, second, exponent_step=2, start=0):
    position = torch.arange(start, start + seq_len, dtype=torch.float32)[:, None]
    angle = position / 10000 ** (torch.arange(0, d_model // 2) * exponent_step / d_model)
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


SINUSOIDAL_WRONG = {
    "sin and cos swapped": (lambda n, d: _table(n, d, torch.cos, torch.sin), "swapped"),
    "halves not interleaved": (_concatenated, "interleave"),
    "positions from 1": (lambda n, d: _table(n, d, torch.sin, torch.cos, start=1),
                         "start at 1"),
    "i instead of 2i": (lambda n, d: _table(n, d, torch.sin, torch.cos, exponent_step=1),
                        "2i runs over 0, 2, 4"),
    "column index as exponent": (_column_index_exponent, "cosine columns are not"),
    "wrong shape": (lambda n, d: _table(n, d, torch.sin, torch.cos).T, "should have shape"),
}


@pytest.mark.parametrize("name", SINUSOIDAL_WRONG)
def test_sinusoidal_catches_typical_mistakes(name):
    answer, message = SINUSOIDAL_WRONG[name]
    assert_incorrect(sinusoidal, answer, message)


def test_from_torch_keeps_dtype_and_refuses_layers_without_bias():
    layer = _torch_layer(norm_first=True).double()
    block = EncoderBlock.from_torch(layer)
    x = torch.randn(2, SEQ_LEN, D_MODEL, dtype=torch.float64)
    with torch.no_grad():
        torch.testing.assert_close(block(x)[0], layer(x))
    no_bias = nn.TransformerEncoderLayer(D_MODEL, HEADS, D_FF, batch_first=True, bias=False)
    with pytest.raises(ValueError, match="bias=True"):
        EncoderBlock.from_torch(no_bias)
