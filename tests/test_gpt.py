"""course_utils.models.gpt.GPT against the same model written with torch's own modules."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from course_utils.data.corpus import sample_windows
from course_utils.models.gpt import GPT, TrainingCurve, text_loss, train_on_text
from course_utils.nn.blocks import EncoderBlock
from course_utils.nn.kv_cache import KVCache
from course_utils.nn.training import fit

VOCAB, MAX_LEN, D_MODEL, HEADS, LAYERS, D_FF = 11, 16, 12, 3, 2, 20
ATOL = 1e-5


@pytest.fixture(scope="module")
def pair():
    """A GPT and torch's layers holding the same (random, non-default) weights."""
    torch.manual_seed(0)
    layers = [nn.TransformerEncoderLayer(D_MODEL, HEADS, D_FF, dropout=0.0, activation="gelu",
                                         batch_first=True, norm_first=True).eval()
              for _ in range(LAYERS)]
    model = GPT(VOCAB, MAX_LEN, D_MODEL, HEADS, LAYERS, d_ff=D_FF).eval()
    with torch.no_grad():
        for layer in layers:  # torch starts biases at 0 and LayerNorms at 1: make them matter
            for name, parameter in layer.named_parameters():
                if "bias" in name or "norm" in name:
                    parameter.normal_()
        for parameter in model.final_norm.parameters():
            parameter.normal_()
    model.blocks = nn.ModuleList(EncoderBlock.from_torch(layer) for layer in layers)
    return model, layers


def _torch_gpt(model, layers, tokens):
    """Logits and every layer's per-head weights, computed by torch's modules."""
    embedding = nn.Embedding.from_pretrained(model.token_embedding.weight)
    positions = nn.Embedding.from_pretrained(model.position_embedding.weight)
    seq_len = tokens.shape[1]
    x = embedding(tokens) + positions(torch.arange(seq_len))
    blocked = nn.Transformer.generate_square_subsequent_mask(seq_len)  # -inf above diagonal
    all_weights = []
    for layer in layers:
        h = layer.norm1(x)
        _, weights = layer.self_attn(h, h, h, attn_mask=blocked, average_attn_weights=False)
        all_weights.append(weights)
        x = layer(x, src_mask=blocked, is_causal=True)
    x = F.layer_norm(x, (D_MODEL,), model.final_norm.weight, model.final_norm.bias)
    return F.linear(x, embedding.weight), torch.stack(all_weights, dim=1)


def test_gpt_matches_torch_modules(pair):
    model, layers = pair
    tokens = torch.randint(0, VOCAB, (3, 9), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        logits, weights = model(tokens, return_weights=True)
        expected, expected_weights = _torch_gpt(model, layers, tokens)
        assert torch.equal(model(tokens), logits)
    assert logits.shape == (3, 9, VOCAB)
    assert weights.shape == (3, LAYERS, HEADS, 9, 9)
    torch.testing.assert_close(logits, expected, atol=ATOL, rtol=0)
    torch.testing.assert_close(weights, expected_weights, atol=ATOL, rtol=0)


def test_the_readout_is_the_token_embedding():
    model = GPT(VOCAB, MAX_LEN, D_MODEL, HEADS, 1)
    names = [name for name, _ in model.named_parameters()]
    assert not any("readout" in name or "lm_head" in name for name in names)
    model(torch.tensor([[1, 2, 3]])).sum().backward()
    assert model.token_embedding.weight.grad[5].abs().sum() > 0, (
        "token 5 is not in the input: only the tied readout gives it a gradient")


def test_a_position_sees_only_the_past(pair):
    model, _ = pair
    tokens = torch.randint(0, VOCAB, (2, 8), generator=torch.Generator().manual_seed(2))
    changed = tokens.clone()
    changed[:, 5:] = (changed[:, 5:] + 1) % VOCAB
    with torch.no_grad():
        torch.testing.assert_close(model(changed)[:, :5], model(tokens)[:, :5], atol=0, rtol=0)


def test_cached_passes_equal_one_pass(pair):
    model, _ = pair
    tokens = torch.randint(0, VOCAB, (2, MAX_LEN), generator=torch.Generator().manual_seed(3))
    cache = KVCache()
    with torch.no_grad():
        whole, whole_weights = model(tokens, return_weights=True)
        first = model(tokens[:, :10], cache=cache)
        rest, rest_weights = model(tokens[:, 10:], cache=cache, return_weights=True)
    assert cache.seq_len == MAX_LEN and cache.num_layers == LAYERS
    torch.testing.assert_close(torch.cat((first, rest), dim=1), whole, atol=ATOL, rtol=0)
    torch.testing.assert_close(rest_weights, whole_weights[:, :, :, 10:], atol=ATOL, rtol=0)


def test_the_starting_logits_are_small():
    model = GPT(65, 32, 64, 4, 2)
    logits = model(torch.randint(0, 65, (4, 32), generator=torch.Generator().manual_seed(0)))
    assert logits.abs().max() < 2, "near-uniform predictions at step 0 (loss ~ log vocab_size)"


def _lesson_12_loop(model, tokens, steps, generator):
    """Lesson 12's training cell as it was written before it called train_on_text."""
    def loss_at_step(step):
        window = sample_windows(tokens, 32, MAX_LEN, generator)  # (batch, seq_len + 1)
        logits = model(window[:, :-1])  # (batch, seq_len, vocab_size)
        return F.cross_entropy(logits.reshape(-1, VOCAB), window[:, 1:].reshape(-1))
    return fit(model, loss_at_step, steps, lr=5e-3)


def test_train_on_text_is_lesson_12s_loop():
    stream = torch.randint(0, VOCAB, (400,), generator=torch.Generator().manual_seed(3))
    models, losses = [], []
    for train in (_lesson_12_loop, train_on_text):
        torch.manual_seed(4)
        models.append(GPT(VOCAB, MAX_LEN, D_MODEL, HEADS, LAYERS))
        losses.append(train(models[-1], stream, 12, torch.Generator().manual_seed(5)))
    assert losses[0] == losses[1], "the same batches and the same updates, bit for bit"
    for (name, theirs), ours in zip(models[0].state_dict().items(),
                                    models[1].state_dict().values(), strict=True):
        assert torch.equal(theirs, ours), name
    assert not models[1].training, "handed back in eval mode, as fit leaves it"
    assert losses[1][-1] < losses[1][0]


def test_train_on_text_reads_max_len_windows():
    model = GPT(VOCAB, 6, D_MODEL, HEADS, 1)
    seen = []
    model.register_forward_pre_hook(lambda module, args: seen.append(args[0].shape))
    train_on_text(model, torch.arange(20) % VOCAB, 2, torch.Generator().manual_seed(0),
                  batch_size=3)
    assert seen == [(3, 6), (3, 6)]


def test_a_seed_gives_the_weights_of_a_global_seed_and_leaves_the_global_state():
    torch.manual_seed(7)
    theirs = GPT(VOCAB, MAX_LEN, D_MODEL, HEADS, LAYERS)
    torch.manual_seed(123)
    before = torch.get_rng_state()
    ours = GPT(VOCAB, MAX_LEN, D_MODEL, HEADS, LAYERS, seed=7)
    assert torch.equal(torch.get_rng_state(), before), "the global random state is untouched"
    for (name, a), b in zip(theirs.state_dict().items(), ours.state_dict().values(),
                            strict=True):
        assert torch.equal(a, b), name


def test_text_loss_is_the_mean_loss_of_non_overlapping_windows():
    model = GPT(VOCAB, 4, D_MODEL, HEADS, 1, seed=0).eval()
    stream = torch.randint(0, VOCAB, (23,), generator=torch.Generator().manual_seed(1))
    inputs, targets = stream[:20].view(5, 4), stream[1:21].view(5, 4)  # (23 - 1) // 4 = 5
    with torch.no_grad():
        expected = F.cross_entropy(model(inputs).reshape(-1, VOCAB), targets.reshape(-1))
    assert text_loss(model, stream) == pytest.approx(expected.item(), abs=1e-6)
    with torch.no_grad():  # two windows, evenly spaced: the first and the last
        two = F.cross_entropy(model(inputs[[0, 4]]).reshape(-1, VOCAB),
                              targets[[0, 4]].reshape(-1))
    assert text_loss(model, stream, max_windows=2) == pytest.approx(two.item(), abs=1e-6)


def test_the_validation_curve_changes_nothing_in_the_training():
    stream = torch.randint(0, VOCAB, (400,), generator=torch.Generator().manual_seed(3))
    held_out = torch.randint(0, VOCAB, (90,), generator=torch.Generator().manual_seed(4))
    plain = GPT(VOCAB, MAX_LEN, D_MODEL, HEADS, LAYERS, seed=4)
    curved = GPT(VOCAB, MAX_LEN, D_MODEL, HEADS, LAYERS, seed=4)
    losses = train_on_text(plain, stream, 12, torch.Generator().manual_seed(5))
    curve = train_on_text(curved, stream, 12, torch.Generator().manual_seed(5),
                          validation_tokens=held_out, eval_every=5, eval_windows=3)
    assert isinstance(losses, list) and isinstance(curve, TrainingCurve)
    assert curve.losses == losses, "the same batches and updates, bit for bit"
    for (name, a), b in zip(plain.state_dict().items(), curved.state_dict().values(),
                            strict=True):
        assert torch.equal(a, b), name
    assert curve.steps == [0, 5, 10, 12], "before training, every 5 steps and at the end"
    assert len(curve.train) == len(curve.validation) == 4
    assert curve.train[-1] == text_loss(curved, stream, 3)
    assert curve.validation[-1] == text_loss(curved, held_out, 3)
    assert not curved.training


_MODEL = GPT(VOCAB, MAX_LEN, D_MODEL, HEADS, 1)
_STREAM = torch.arange(40) % VOCAB
_DRAWS = torch.Generator().manual_seed(0)
_FULL = KVCache()
_MODEL(torch.zeros(1, MAX_LEN, dtype=torch.long), cache=_FULL)

BAD_INPUTS = [
    pytest.param(GPT, (0, MAX_LEN, D_MODEL, HEADS, 1), {}, ValueError,
                 ("vocab_size", "positive int", "0"), id="GPT: vocab_size 0"),
    pytest.param(GPT, (VOCAB, 16.0, D_MODEL, HEADS, 1), {}, TypeError,
                 ("max_len", "positive int", "float"), id="GPT: float max_len"),
    pytest.param(GPT, (VOCAB, MAX_LEN, D_MODEL, 5, 1), {}, ValueError,
                 ("d_model=12", "num_heads=5"), id="GPT: heads do not divide d_model"),
    pytest.param(GPT, (VOCAB, MAX_LEN, D_MODEL, HEADS, 0), {}, ValueError,
                 ("num_layers", "positive int", "0"), id="GPT: no layers"),
    pytest.param(GPT, (VOCAB, MAX_LEN, D_MODEL, HEADS, 1), {"d_ff": -1}, ValueError,
                 ("d_ff", "positive int", "-1"), id="GPT: negative d_ff"),
    pytest.param(_MODEL, (torch.tensor([[0, VOCAB]]),), {}, ValueError,
                 ("tokens", f"0..{VOCAB - 1}", str(VOCAB)), id="GPT: id past the vocabulary"),
    pytest.param(_MODEL, (torch.zeros(1, 3),), {}, TypeError,
                 ("tokens", "integer", "torch.float32"), id="GPT: float tokens"),
    pytest.param(_MODEL, (torch.zeros(3, dtype=torch.long),), {}, ValueError,
                 ("tokens", "(batch, n_new)", "(3,)"), id="GPT: 1-D tokens"),
    pytest.param(_MODEL, (torch.zeros(1, 0, dtype=torch.long),), {}, ValueError,
                 ("tokens", "at least one token", "(1, 0)"), id="GPT: no tokens"),
    pytest.param(_MODEL, (torch.zeros(1, MAX_LEN + 1, dtype=torch.long),), {}, ValueError,
                 ("max_len=16", "position 16", "crop"), id="GPT: longer than max_len"),
    pytest.param(_MODEL, (torch.zeros(1, 1, dtype=torch.long),), {"cache": _FULL}, ValueError,
                 ("16 cached positions", "max_len=16"), id="GPT: a full cache"),
    pytest.param(_MODEL, (torch.zeros(1, 1, dtype=torch.long),), {"cache": []}, TypeError,
                 ("cache", "KVCache", "list"), id="GPT: a list as cache"),
    pytest.param(_MODEL, (torch.zeros(1, 1, dtype=torch.long),), {"return_weights": 1},
                 TypeError, ("return_weights", "True or False", "1"),
                 id="GPT: return_weights=1"),
    pytest.param(train_on_text, (nn.Linear(2, 2), _STREAM, 1, _DRAWS), {}, TypeError,
                 ("model", "GPT", "Linear"), id="train_on_text: not a GPT"),
    pytest.param(train_on_text, (_MODEL, _STREAM[None], 1, _DRAWS), {}, ValueError,
                 ("tokens", "(num_tokens,)", "(1, 40)"), id="train_on_text: 2-D tokens"),
    pytest.param(train_on_text, (_MODEL, _STREAM + VOCAB, 1, _DRAWS), {}, ValueError,
                 ("tokens", f"0..{VOCAB - 1}", str(2 * VOCAB - 1)),
                 id="train_on_text: id past the vocabulary"),
    pytest.param(train_on_text, (_MODEL, _STREAM[:MAX_LEN], 1, _DRAWS), {}, ValueError,
                 ("tokens", "max_len + 1 = 17", "(16,)"), id="train_on_text: too short"),
    pytest.param(train_on_text, (_MODEL, _STREAM, 0, _DRAWS), {}, ValueError,
                 ("steps", "positive int", "0"), id="train_on_text: no steps"),
    pytest.param(train_on_text, (_MODEL, _STREAM, 1, None), {}, TypeError,
                 ("generator", "torch.Generator", "global random state"),
                 id="train_on_text: no generator"),
    pytest.param(train_on_text, (_MODEL, _STREAM, 1, _DRAWS), {"batch_size": 0}, ValueError,
                 ("batch_size", "positive int", "0"), id="train_on_text: batch_size 0"),
    pytest.param(train_on_text, (_MODEL, _STREAM, 1, _DRAWS), {"lr": -1.0}, ValueError,
                 ("lr", "positive", "-1"), id="train_on_text: negative lr"),
    # Integer dtypes nn.Embedding refuses, and tensors with no values.
    pytest.param(_MODEL, (torch.zeros(1, 3, dtype=torch.uint8),), {}, TypeError,
                 ("tokens", "torch.long", "torch.uint8"), id="GPT: uint8 tokens"),
    pytest.param(_MODEL, (torch.zeros(1, 3, dtype=torch.int16),), {}, TypeError,
                 ("tokens", "torch.long", "torch.int16"), id="GPT: int16 tokens"),
    pytest.param(_MODEL, (torch.zeros(1, 3, dtype=torch.long, device="meta"),), {}, ValueError,
                 ("tokens", "meta", "values"), id="GPT: tokens on meta"),
    pytest.param(train_on_text, (_MODEL, _STREAM.to(torch.int8), 1, _DRAWS), {}, TypeError,
                 ("tokens", "torch.long", "torch.int8"), id="train_on_text: int8 stream"),
    pytest.param(train_on_text, (_MODEL, _STREAM.to("meta"), 1, _DRAWS), {}, ValueError,
                 ("tokens", "meta"), id="train_on_text: stream on meta"),
    pytest.param(train_on_text, (_MODEL, _STREAM, 1, _DRAWS),
                 {"validation_tokens": _STREAM[:MAX_LEN]}, ValueError,
                 ("validation_tokens", "max_len + 1 = 17", "(16,)"),
                 id="train_on_text: validation too short"),
    pytest.param(train_on_text, (_MODEL, _STREAM, 1, _DRAWS),
                 {"validation_tokens": _STREAM + VOCAB}, ValueError,
                 ("validation_tokens", f"0..{VOCAB - 1}"),
                 id="train_on_text: validation id past the vocabulary"),
    pytest.param(train_on_text, (_MODEL, _STREAM, 1, _DRAWS), {"eval_every": 0}, ValueError,
                 ("eval_every", "positive int", "0"), id="train_on_text: eval_every 0"),
    pytest.param(train_on_text, (_MODEL, _STREAM, 1, _DRAWS), {"eval_windows": 1.5},
                 TypeError, ("eval_windows", "positive int", "float"),
                 id="train_on_text: float eval_windows"),
    pytest.param(GPT, (VOCAB, MAX_LEN, D_MODEL, HEADS, 1), {"seed": -1}, ValueError,
                 ("seed", "0 to 2**32 - 1", "-1"), id="GPT: negative seed"),
    pytest.param(text_loss, (nn.Linear(2, 2), _STREAM), {}, TypeError,
                 ("model", "GPT", "Linear"), id="text_loss: not a GPT"),
    pytest.param(text_loss, (_MODEL, _STREAM[:MAX_LEN]), {}, ValueError,
                 ("tokens", "max_len + 1 = 17", "(16,)"), id="text_loss: too short"),
    pytest.param(text_loss, (_MODEL, _STREAM), {"max_windows": 0}, ValueError,
                 ("max_windows", "positive int", "0"), id="text_loss: no windows"),
]
