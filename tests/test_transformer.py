"""The encoder and decoder blocks against torch's own layers, order blindness, positions,
the toy models (text encoder/decoder, encoder-decoder, ViT), and their bad-input messages.
Lesson 07's exercises are tested in tests/test_exercises_transformer.py."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from course_utils.models.toy_models import (
    TinyEncoderDecoder,
    TinyTransformer,
    TinyViT,
    image_patches,
)
from course_utils.nn.blocks import DecoderBlock, EncoderBlock, FeedForward
from course_utils.nn.masks import causal_mask, padding_mask, to_mha_convention
from course_utils.nn.positions import sinusoidal_positions

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


def test_tiny_transformer_shapes_and_final_norm():
    torch.manual_seed(5)
    model = TinyTransformer(vocab_size=10, seq_len=SEQ_LEN, d_model=16, num_heads=2,
                            num_layers=3, norm_first=True)
    tokens = torch.randint(10, (4, SEQ_LEN))
    logits, weights = model(tokens, return_weights=True)
    assert logits.shape == (4, SEQ_LEN, 10)
    assert weights.shape == (4, 3, 2, SEQ_LEN, SEQ_LEN)
    torch.testing.assert_close(weights.sum(-1), torch.ones(4, 3, 2, SEQ_LEN))
    assert isinstance(model.final_norm, nn.LayerNorm)
    post = TinyTransformer(10, SEQ_LEN, 16, num_heads=2, num_layers=1)
    assert isinstance(post.final_norm, nn.Identity), "post-LN blocks end normalised already"




def test_from_torch_keeps_dtype_and_refuses_layers_without_bias():
    layer = _torch_layer(norm_first=True).double()
    block = EncoderBlock.from_torch(layer)
    x = torch.randn(2, SEQ_LEN, D_MODEL, dtype=torch.float64)
    with torch.no_grad():
        torch.testing.assert_close(block(x)[0], layer(x))
    no_bias = nn.TransformerEncoderLayer(D_MODEL, HEADS, D_FF, batch_first=True, bias=False)
    with pytest.raises(ValueError, match="bias=True"):
        EncoderBlock.from_torch(no_bias)


def test_tiny_transformer_hidden_states_feed_the_readout():
    torch.manual_seed(6)
    model = TinyTransformer(10, SEQ_LEN, 16, num_heads=2, num_layers=2, norm_first=True)
    tokens = torch.randint(10, (3, SEQ_LEN))
    with torch.no_grad():
        hidden, weights = model.hidden_states(tokens)
        logits, same_weights = model(tokens, return_weights=True)
        torch.testing.assert_close(logits, model.readout(model.final_norm(hidden)))
    assert hidden.shape == (3, SEQ_LEN, 16) and torch.equal(weights, same_weights)


@pytest.mark.parametrize("causal", [False, True], ids=["encoder", "decoder"])
def test_tiny_transformer_causal_reads_only_the_past(causal):
    torch.manual_seed(7)
    model = TinyTransformer(10, SEQ_LEN, 16, num_heads=2, num_layers=2, causal=causal)
    tokens = torch.randint(10, (50, SEQ_LEN))
    changed = tokens.clone()
    changed[:, -1] = (changed[:, -1] + 1) % 10
    with torch.no_grad():
        moved = (model.hidden_states(tokens)[0] - model.hidden_states(changed)[0])[:, :-1]
        weights = model(tokens, return_weights=True)[1]
    if causal:
        assert moved.abs().max() < 1e-6
        assert (weights[..., ~causal_mask(SEQ_LEN)] == 0).all()
    else:
        assert (moved.abs().amax(dim=-1) > 1e-4).all()


def test_tiny_transformer_equals_torch_encoder_stack():
    torch.manual_seed(8)
    model = TinyTransformer(10, SEQ_LEN, D_MODEL, num_heads=HEADS, num_layers=2, d_ff=D_FF,
                            causal=True)
    layer = _torch_layer(norm_first=False)
    stack = nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)
    for ours, theirs in zip(model.blocks, stack.layers, strict=True):
        ours.load_state_dict(EncoderBlock.from_torch(theirs).state_dict())
    tokens = torch.randint(10, (3, SEQ_LEN))
    with torch.no_grad():
        x = model.token_embedding(tokens) + model.position_embedding(torch.arange(SEQ_LEN))
        expected = stack(x, mask=to_mha_convention(causal_mask(SEQ_LEN)), is_causal=True)
        torch.testing.assert_close(model.hidden_states(tokens)[0], expected,
                                   atol=1e-5, rtol=1e-5)


# --- the decoder block ----------------------------------------------------------------------

N_SRC, N_TGT = 6, 4  # non-square on purpose


def _torch_decoder_layer(norm_first: bool, activation: str = "relu"):
    layer = nn.TransformerDecoderLayer(D_MODEL, HEADS, dim_feedforward=D_FF, dropout=0.0,
                                       activation=activation, batch_first=True,
                                       norm_first=norm_first)
    for norm in (layer.norm1, layer.norm2, layer.norm3):
        nn.init.normal_(norm.weight, mean=1.0, std=0.3)
        nn.init.normal_(norm.bias, std=0.3)
    return layer


@pytest.mark.parametrize("norm_first", [False, True], ids=["post-LN", "pre-LN"])
@pytest.mark.parametrize("padded", [False, True], ids=["no padding", "padding"])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_decoder_block_equals_torch_decoder_layer(norm_first, padded, activation):
    generator = torch.Generator().manual_seed(1)
    torch.manual_seed(1)
    layer = _torch_decoder_layer(norm_first, activation)
    block = DecoderBlock.from_torch(layer)
    x = torch.randn(3, N_TGT, D_MODEL, generator=generator, requires_grad=True)
    memory = torch.randn(3, N_SRC, D_MODEL, generator=generator, requires_grad=True)
    padding = padding_mask([6, 3, 1], N_SRC).reshape(3, N_SRC) if padded else None
    expected = layer(x, memory, tgt_mask=to_mha_convention(causal_mask(N_TGT)),
                     tgt_is_causal=True,
                     memory_key_padding_mask=None if padding is None else ~padding)
    got, self_weights, cross_weights = block(x, memory, memory_padding_mask=padding)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
    assert self_weights.shape == (3, HEADS, N_TGT, N_TGT)
    assert cross_weights.shape == (3, HEADS, N_TGT, N_SRC)
    assert (self_weights[..., ~causal_mask(N_TGT)] == 0).all()
    if padding is not None:
        assert (cross_weights.transpose(1, 3)[~padding] == 0).all()
    grads_expected = torch.autograd.grad(expected.square().sum(), (x, memory))
    grads_got = torch.autograd.grad(got.square().sum(), (x, memory))
    for g, e in zip(grads_got, grads_expected, strict=True):
        torch.testing.assert_close(g, e, atol=1e-5, rtol=1e-5)


def test_decoder_block_equals_torch_in_eval_mode_and_rejects_what_it_cannot_copy():
    torch.manual_seed(2)
    layer = nn.TransformerDecoderLayer(D_MODEL, HEADS, D_FF, dropout=0.3, batch_first=True)
    block = DecoderBlock.from_torch(layer)
    x, memory = torch.randn(2, N_TGT, D_MODEL), torch.randn(2, N_SRC, D_MODEL)
    with torch.no_grad():
        torch.testing.assert_close(
            block(x, memory)[0],
            layer.eval()(x, memory, tgt_mask=~causal_mask(N_TGT), tgt_is_causal=True),
            atol=1e-5, rtol=1e-5)
    with pytest.raises(TypeError, match="TransformerDecoderLayer"):
        DecoderBlock.from_torch(nn.TransformerEncoderLayer(D_MODEL, HEADS, D_FF,
                                                           batch_first=True))
    with pytest.raises(ValueError, match="batch_first=True"):
        DecoderBlock.from_torch(nn.TransformerDecoderLayer(D_MODEL, HEADS, D_FF))
    with pytest.raises(ValueError, match="relu or gelu"):
        DecoderBlock.from_torch(nn.TransformerDecoderLayer(D_MODEL, HEADS, D_FF,
                                                           batch_first=True,
                                                           activation=torch.tanh))


def test_padding_content_never_reaches_the_decoder():
    torch.manual_seed(3)
    block = DecoderBlock(D_MODEL, HEADS, D_FF, norm_first=True)
    x, memory = torch.randn(2, N_TGT, D_MODEL), torch.randn(2, N_SRC, D_MODEL)
    padding = padding_mask([6, 2], N_SRC)  # (batch, n_src) or (batch, 1, n_src): both taken
    scrambled = memory.clone()
    scrambled[1, 2:] = 1e3 * torch.randn(N_SRC - 2, D_MODEL)
    with torch.no_grad():
        torch.testing.assert_close(block(x, memory, padding)[0],
                                   block(x, scrambled, padding)[0])
        torch.testing.assert_close(block(x, memory, padding.reshape(2, 1, N_SRC))[0],
                                   block(x, memory, padding.reshape(2, N_SRC))[0])


# --- the encoder-decoder and the ViT --------------------------------------------------------

def test_tiny_encoder_decoder_shapes_causality_and_padding():
    torch.manual_seed(4)
    model = TinyEncoderDecoder(vocab_size=11, max_len=8, d_model=16, num_heads=2, num_layers=2)
    src, tgt = torch.randint(11, (3, 7)), torch.randint(11, (3, 5))  # n_src != n_tgt
    padding = padding_mask([7, 4, 1], 7).reshape(3, 7)  # (batch, n_src)
    with torch.no_grad():
        logits, cross = model(src, tgt, src_padding_mask=padding, return_weights=True)
        assert logits.shape == (3, 5, 11) and cross.shape == (3, 2, 2, 5, 7)
        assert (cross.permute(0, 4, 1, 2, 3)[~padding] == 0).all()
        other_src = src.clone()
        other_src[~padding] = (other_src[~padding] + 1) % 11  # change only the padding
        torch.testing.assert_close(model(other_src, tgt, padding), logits)
        later = tgt.clone()
        later[:, -1] = (later[:, -1] + 1) % 11  # change only the last target token
        torch.testing.assert_close(model(src, later, padding)[:, :-1], logits[:, :-1])


def test_image_patches_match_unfold_and_a_strided_convolution():
    generator = torch.Generator().manual_seed(5)
    images = torch.randn(2, 3, 8, 12, generator=generator)  # channels > 1, height != width
    patches = image_patches(images, 4)  # (batch, 6, 48)
    assert patches.shape == (2, 6, 48)
    torch.testing.assert_close(patches, F.unfold(images, 4, stride=4).transpose(1, 2))
    # ViT's patch embedding is a Conv2d with kernel = stride = patch_size: the same map.
    conv = nn.Conv2d(3, 5, kernel_size=4, stride=4)
    linear = nn.Linear(48, 5)
    with torch.no_grad():
        linear.weight.copy_(conv.weight.flatten(1))
        linear.bias.copy_(conv.bias)
        torch.testing.assert_close(linear(patches), conv(images).flatten(2).transpose(1, 2),
                                   atol=1e-5, rtol=1e-5)


def test_tiny_vit_shapes():
    torch.manual_seed(6)
    model = TinyViT(image_size=8, patch_size=2, num_classes=3, d_model=16, num_heads=2,
                    num_layers=2, channels=3)
    logits, weights = model(torch.randn(4, 3, 8, 8), return_weights=True)
    assert logits.shape == (4, 3) and weights.shape == (4, 2, 2, 16, 16)
    assert all(type(block) is EncoderBlock for block in model.blocks)


# --- bad input: a clear ValueError/TypeError naming the argument (run by test_bad_inputs) ---

def _block(norm_first=False):
    torch.manual_seed(0)
    return EncoderBlock(D_MODEL, HEADS, D_FF, norm_first=norm_first)


def _decoder(norm_first=False):
    torch.manual_seed(0)
    return DecoderBlock(D_MODEL, HEADS, D_FF, norm_first=norm_first)


X = torch.randn(2, SEQ_LEN, D_MODEL)
MEMORY = torch.randn(2, N_SRC, D_MODEL)
TOKENS = torch.zeros(2, SEQ_LEN, dtype=torch.long)
_model = TinyTransformer(vocab_size=10, seq_len=SEQ_LEN, d_model=16)
_seq2seq = TinyEncoderDecoder(vocab_size=10, max_len=SEQ_LEN, d_model=16)
_vit = TinyViT(image_size=8, patch_size=2, num_classes=2, d_model=16)
_float64_words = ("x", "dtype torch.float64", "weights are torch.float32")
_token_words = ("tokens", "0..9", "from 10 to 10")


def _row(function, args, error, words, id, **kwargs):
    return pytest.param(function, args, kwargs, error, words, id=id)


BAD_INPUTS = [
    _row(FeedForward, (D_MODEL, D_FF), ValueError, ("activation", "relu", "'tanh'"),
         activation="tanh", id="FeedForward: unknown activation"),
    _row(FeedForward, (D_MODEL, 0), ValueError, ("d_ff", "positive int", "0"),
         id="FeedForward: d_ff=0"),
    _row(FeedForward, (8.0, D_FF), TypeError, ("d_model", "positive int", "float 8.0"),
         id="FeedForward: float d_model"),
    _row(FeedForward(D_MODEL, D_FF), ([1.0],), TypeError, ("x", "torch.Tensor", "list"),
         id="FeedForward: a list"),
    _row(EncoderBlock, (0, 1, D_FF), ValueError, ("d_model", "positive int", "0"),
         id="EncoderBlock: d_model=0"),
    _row(EncoderBlock, (D_MODEL, 5, D_FF), ValueError, ("d_model=12", "num_heads=5"),
         id="EncoderBlock: heads do not divide d_model"),
    _row(EncoderBlock, (D_MODEL, "2", D_FF), TypeError, ("num_heads", "positive int", "str"),
         id="EncoderBlock: str num_heads"),
    _row(EncoderBlock, (D_MODEL, HEADS, -4), ValueError, ("d_ff", "positive int", "-4"),
         id="EncoderBlock: negative d_ff"),
    _row(EncoderBlock, (D_MODEL, HEADS, D_FF), ValueError, ("eps", "positive number", "0"),
         eps=0, id="EncoderBlock: eps=0"),
    _row(EncoderBlock, (D_MODEL, HEADS, D_FF), TypeError, ("eps", "positive number", "str"),
         eps="1e-5", id="EncoderBlock: str eps"),
    _row(EncoderBlock, (D_MODEL, HEADS, D_FF), ValueError, ("eps", "finite", "nan"),
         eps=float("nan"), id="EncoderBlock: eps nan"),
    _row(EncoderBlock, (D_MODEL, HEADS, D_FF), TypeError, ("norm_first", "True or False", "1"),
         norm_first=1, id="EncoderBlock: norm_first=1"),
    _row(_block(), (torch.randn(2, SEQ_LEN, D_MODEL + 1),), ValueError,
         ("x", "d_model=12", "(2, 5, 13)"), id="EncoderBlock: wrong d_model"),
    _row(_block(), (torch.randn(SEQ_LEN, D_MODEL),), ValueError,
         ("x", "(batch, seq_len, d_model)", "(5, 12)"), id="EncoderBlock: 2-D x"),
    _row(_block(), (TOKENS,), TypeError, ("x", "floating-point", "torch.int64"),
         id="EncoderBlock: token ids as x"),
    _row(_block(), (X.double(),), TypeError, _float64_words,
         id="EncoderBlock: post-LN, float64 x"),
    _row(_block(norm_first=True), (X.double(),), TypeError, _float64_words,
         id="EncoderBlock: pre-LN, float64 x"),
    _row(_block(), (X.to("meta"),), ValueError, ("x", "meta", "cpu"),
         id="EncoderBlock: x on another device"),
    _row(_block(), (X,), TypeError, ("mask", "bool", "torch.float32"),
         mask=torch.ones(SEQ_LEN, SEQ_LEN), id="EncoderBlock: float mask"),
    _row(EncoderBlock.from_torch, (nn.Linear(4, 4),), TypeError,
         ("TransformerEncoderLayer", "Linear"), id="EncoderBlock.from_torch: a Linear"),
    _row(DecoderBlock, (D_MODEL, HEADS, D_FF), ValueError, ("eps", "positive number", "-1"),
         eps=-1, id="DecoderBlock: negative eps"),
    _row(DecoderBlock, (D_MODEL, HEADS, 0), ValueError, ("d_ff", "positive int", "0"),
         id="DecoderBlock: d_ff=0"),
    _row(_decoder(), (X, None), TypeError, ("memory", "torch.Tensor", "NoneType"),
         id="DecoderBlock: no memory"),
    _row(_decoder(), (X, torch.randn(2, N_SRC, 4)), ValueError,
         ("memory", "d_model=12", "(2, 6, 4)"), id="DecoderBlock: memory too narrow"),
    _row(_decoder(), (X, torch.randn(3, N_SRC, D_MODEL)), ValueError,
         ("batch size", "2", "3"), id="DecoderBlock: batch sizes differ"),
    _row(_decoder(), (X.double(), MEMORY.double()), TypeError, _float64_words,
         id="DecoderBlock: post-LN, float64"),
    _row(_decoder(norm_first=True), (X, MEMORY.double()), TypeError,
         ("memory", "dtype torch.float64", "weights are torch.float32"),
         id="DecoderBlock: pre-LN, float64 memory"),
    _row(_decoder(), (X, MEMORY), ValueError,
         ("memory_padding_mask", "(batch, n_src) = (2, 6)", "shape (6,)"),
         memory_padding_mask=torch.ones(N_SRC, dtype=torch.bool),
         id="DecoderBlock: padding mask without batch"),
    _row(_decoder(), (X, MEMORY), ValueError,
         ("memory_padding_mask", "bool", "torch.float32"),
         memory_padding_mask=torch.ones(2, N_SRC), id="DecoderBlock: float padding mask"),
    _row(DecoderBlock.from_torch, (_torch_layer(False),), TypeError,
         ("TransformerDecoderLayer", "TransformerEncoderLayer"),
         id="DecoderBlock.from_torch: an encoder layer"),
    _row(TinyTransformer, (0, SEQ_LEN, 16), ValueError, ("vocab_size", "positive int", "0"),
         id="TinyTransformer: vocab_size=0"),
    _row(TinyTransformer, (10, SEQ_LEN, 0), ValueError, ("d_model", "positive int", "0"),
         id="TinyTransformer: d_model=0"),
    _row(TinyTransformer, (10, SEQ_LEN, 16), ValueError, ("num_layers", "positive int", "0"),
         num_layers=0, id="TinyTransformer: num_layers=0"),
    _row(TinyTransformer, (10, SEQ_LEN, 16), TypeError, ("causal", "True or False", "str"),
         causal="yes", id="TinyTransformer: causal a str"),
    _row(_model, (torch.randn(2, SEQ_LEN),), TypeError,
         ("tokens", "integer token ids", "torch.float32"), id="TinyTransformer: float tokens"),
    _row(_model, (torch.zeros(SEQ_LEN, dtype=torch.long),), ValueError,
         ("tokens", "(batch, seq_len)", "(5,)"), id="TinyTransformer: 1-D tokens"),
    _row(_model, (torch.zeros(2, SEQ_LEN + 1, dtype=torch.long),), ValueError,
         ("tokens", "at most 5", "(2, 6)"), id="TinyTransformer: too long"),
    _row(_model, (TOKENS + 10,), ValueError, _token_words,
         id="TinyTransformer: id = vocab_size"),
    _row(_model, (TOKENS - 1,), ValueError, ("tokens", "0..9", "from -1 to -1"),
         id="TinyTransformer: negative id"),
    _row(_model.hidden_states, (TOKENS + 10,), ValueError, _token_words,
         id="TinyTransformer.hidden_states: id too large"),
    _row(TinyEncoderDecoder, (10, 0, 16), ValueError, ("max_len", "positive int", "0"),
         id="TinyEncoderDecoder: max_len=0"),
    _row(_seq2seq, (TOKENS + 10, TOKENS), ValueError, ("src", "0..9", "from 10 to 10"),
         id="TinyEncoderDecoder: src id too large"),
    _row(_seq2seq, (TOKENS, torch.zeros(2, SEQ_LEN + 1, dtype=torch.long)), ValueError,
         ("tgt", "at most 5", "(2, 6)"), id="TinyEncoderDecoder: tgt too long"),
    _row(_seq2seq, (TOKENS, TOKENS[:1]), ValueError, ("batch size", "2", "1"),
         id="TinyEncoderDecoder: batch sizes differ"),
    _row(_seq2seq, (TOKENS, TOKENS, torch.ones(SEQ_LEN, dtype=torch.bool)), ValueError,
         ("src_padding_mask", "(batch, n_src) = (2, 5)", "shape (5,)"),
         id="TinyEncoderDecoder: padding mask without batch"),
    _row(image_patches, (torch.randn(2, 8, 8), 2), ValueError,
         ("images", "(batch, channels, height, width)", "(2, 8, 8)"),
         id="image_patches: 3-D images"),
    _row(image_patches, (torch.randn(2, 1, 8, 8), 3), ValueError,
         ("height and width", "patch_size=3", "(8, 8)"), id="image_patches: not a multiple"),
    _row(image_patches, (torch.randn(2, 1, 8, 8), 0), ValueError,
         ("patch_size", "positive int", "0"), id="image_patches: patch_size=0"),
    _row(TinyViT, (8, 3, 2, 16), ValueError, ("image_size=8", "patch_size=3"),
         id="TinyViT: image_size not a multiple of patch_size"),
    _row(_vit, (torch.randn(2, 1, 6, 6),), ValueError,
         ("images", "(1, 8, 8)", "(2, 1, 6, 6)"), id="TinyViT: wrong image size"),
    _row(_vit, (torch.zeros(2, 1, 8, 8, dtype=torch.uint8),), TypeError,
         ("images", "floating-point", "torch.uint8"), id="TinyViT: 8-bit images"),
    _row(_vit, (torch.randn(2, 1, 8, 8, dtype=torch.float64),), TypeError,
         ("images", "dtype torch.float64", "weights are torch.float32"),
         id="TinyViT: float64 images"),
]
