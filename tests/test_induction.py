"""course_utils.experiments.l13_induction: the repeated-token probe, head scores,
repeat losses, ablation.

The scores are checked on hand-built patterns and against a loop written from the
definition; the ablation against the same model with the head's columns of ``w_o`` cut out
(an ablated head is a head whose output ``w_o`` never reads).
"""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

from course_utils.experiments.l13_induction import (
    head_scores,
    induction_scores,
    losses_per_repeat,
    previous_token_scores,
    repeat_losses,
    repeated_tokens,
)
from course_utils.models.gpt import GPT
from course_utils.nn.ablation import ablated, attention_layers
from course_utils.nn.kv_cache import KVCache
from course_utils.nn.masks import causal_mask

VOCAB, PERIOD, HEADS, LAYERS, D_MODEL = 13, 6, 3, 2, 12
D_K = D_MODEL // HEADS


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    model = GPT(VOCAB, 3 * PERIOD, D_MODEL, HEADS, LAYERS, d_ff=16).eval()
    with torch.no_grad():  # weights far from initialisation, so every head matters
        for parameter in model.parameters():
            parameter.normal_(0, 0.5)
    return model


@pytest.fixture(scope="module")
def tokens():
    return repeated_tokens(4, PERIOD, 3, VOCAB, torch.Generator().manual_seed(1))


def _pattern(n: int, back: int, first: int) -> torch.Tensor:
    """Causal weights ``(n, n)``: query ``t >= first`` all on key ``t - back``, the others
    uniform over their keys."""
    weights = causal_mask(n).float()
    weights /= weights.sum(-1, keepdim=True)
    for t in range(first, n):
        weights[t] = 0.0
        weights[t, t - back] = 1.0
    return weights


def _looped_score(weights, back: int, first: int) -> torch.Tensor:
    """The definition, one query at a time: ``(num_layers, num_heads)``."""
    batch, layers, heads, n_q, n_k = weights.shape
    scores = torch.zeros(layers, heads, dtype=weights.dtype)
    count = 0
    for i in range(n_q):
        t = n_k - n_q + i  # query i's position
        if t >= first:
            scores += weights[:, :, :, i, t - back].sum(0)
            count += batch
    return scores / count


def test_repeated_tokens_repeat_their_first_block():
    tokens = repeated_tokens(5, 4, 3, 7, torch.Generator().manual_seed(0))
    assert tokens.shape == (5, 12) and tokens.dtype == torch.long
    assert torch.equal(tokens[:, 4:], tokens[:, :-4])
    assert 0 <= tokens.min() and tokens.max() < 7
    assert torch.equal(tokens, repeated_tokens(5, 4, 3, 7, torch.Generator().manual_seed(0)))
    assert not torch.equal(tokens, repeated_tokens(5, 4, 3, 7, torch.Generator().manual_seed(1)))


def test_perfect_patterns_score_one_and_uniform_scores_one_over_n():
    n, period = 10, 4
    induction = _pattern(n, period - 1, period)
    previous = _pattern(n, 1, 1)
    uniform = causal_mask(n).float() / torch.arange(1, n + 1)[:, None]
    # (batch=2, layers=1, heads=3): head 0 induction, head 1 previous-token, head 2 uniform
    weights = torch.stack([induction, previous, uniform])[None, None].expand(2, 1, 3, n, n)
    ind, prev = induction_scores(weights, period), previous_token_scores(weights)
    assert ind.shape == prev.shape == (1, 3)
    assert ind[0, 0] == 1 and prev[0, 1] == 1
    # uniform: query t gives each of its t + 1 keys 1/(t + 1)
    torch.testing.assert_close(ind[0, 2], (1 / torch.arange(period + 1, n + 1.0)).mean())
    torch.testing.assert_close(prev[0, 2], (1 / torch.arange(2, n + 1.0)).mean())
    assert ind[0, 1] == 0 and prev[0, 0] < 0.2  # each pattern misses the other's key


@pytest.mark.parametrize(("n_q", "n_k"), [(11, 11), (7, 11), (1, 9)])
def test_scores_match_the_definition_on_any_shape(n_q, n_k):
    generator = torch.Generator().manual_seed(n_q)
    scores = torch.randn(3, 2, 5, n_q, n_k, generator=generator)
    weights = scores.masked_fill(~causal_mask(n_q, n_k), float("-inf")).softmax(-1)
    ind, prev = induction_scores(weights, 4), previous_token_scores(weights)
    assert ind.shape == prev.shape == (2, 5)
    torch.testing.assert_close(ind, _looped_score(weights, 3, 4))
    torch.testing.assert_close(prev, _looped_score(weights, 1, 1))


def test_scores_from_a_cached_step_are_those_of_its_rows(model, tokens):
    with torch.no_grad():
        _, full = model(tokens, return_weights=True)
        cache = KVCache()
        model(tokens[:, :10], cache=cache)
        _, cached = model(tokens[:, 10:], cache=cache, return_weights=True)
    assert cached.shape == (4, LAYERS, HEADS, 8, 18)
    torch.testing.assert_close(cached, full[..., 10:, :], atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(induction_scores(cached, PERIOD),
                               _looped_score(full[..., 10:, :], PERIOD - 1, PERIOD))


def test_repeat_losses_are_the_cross_entropy_of_each_block_without_the_unpredictable(
        model, tokens):
    losses = repeat_losses(model, tokens, PERIOD)
    with torch.no_grad():
        logits = model(tokens)
    # Targets 1..5, 7..11 (6, the first of the first repeat, follows nothing seen), 12..17.
    blocks = [(1, PERIOD), (PERIOD + 1, 2 * PERIOD), (2 * PERIOD, 3 * PERIOD)]
    expected = [F.cross_entropy(logits[:, start - 1:end - 1].transpose(1, 2),
                                tokens[:, start:end]) for start, end in blocks]
    assert losses.shape == (3,)
    torch.testing.assert_close(losses, torch.stack(expected))
    with torch.no_grad():
        torch.testing.assert_close(losses_per_repeat(model(tokens[:, :-1]), tokens, PERIOD),
                                   losses)


def test_a_perfect_copier_loses_nothing_on_the_repeats():
    tokens = repeated_tokens(3, 5, 3, 7, torch.Generator().manual_seed(2))
    logits = torch.full((3, 14, 7), -30.0)
    logits.scatter_(2, tokens[:, 1:, None], 30.0)  # certain of every next token
    logits[:, 4] = 0.0  # a guess at target 5, the first of the first repeat: left out
    logits[:, 9] = 0.0  # a guess at target 10, the first of the second: copyable, it counts
    losses = losses_per_repeat(logits, tokens, 5)
    assert losses[0] < 1e-6 and losses[1] < 1e-6
    torch.testing.assert_close(losses[2], torch.log(torch.tensor(7.0)) / 5)


def test_head_scores_are_the_scores_of_the_models_weights(model, tokens):
    previous, induction = head_scores(model, tokens, PERIOD)
    with torch.no_grad():
        _, weights = model(tokens, return_weights=True)
    assert previous.shape == induction.shape == (LAYERS, HEADS)
    torch.testing.assert_close(previous, previous_token_scores(weights))
    torch.testing.assert_close(induction, induction_scores(weights, PERIOD))


def _without_columns(model, layer, heads, shift=None):
    """A copy whose ``w_o`` of ``layer`` reads nothing of ``heads`` (plus ``shift`` in its bias)."""
    cut = copy.deepcopy(model)
    w_o = cut.blocks[layer].self_attn.w_o
    with torch.no_grad():
        if shift is not None:
            w_o.bias += shift
        for head in heads:
            w_o.weight[:, head * D_K:(head + 1) * D_K] = 0.0
    return cut


@pytest.mark.parametrize("heads", [[(1, 2)], [(0, 0), (0, 1)], [(0, 1), (1, 0)]])
def test_zero_ablation_is_a_head_that_w_o_never_reads(model, tokens, heads):
    cut = copy.deepcopy(model)
    for layer, head in heads:
        cut = _without_columns(cut, layer, [head])
    with torch.no_grad(), ablated(model, heads) as same:
        assert same is model
        torch.testing.assert_close(model(tokens), cut(tokens), atol=1e-5, rtol=1e-5)


def test_ablating_every_head_of_a_layer_zeroes_its_attention_output(model, tokens):
    def zero_attention_output(module, args, output):
        return torch.zeros_like(output[0]) + module.w_o.bias, output[1]

    handle = model.blocks[0].self_attn.register_forward_hook(zero_attention_output)
    try:
        with torch.no_grad():
            expected = model(tokens)
    finally:
        handle.remove()
    with torch.no_grad(), ablated(model, [(0, h) for h in range(HEADS)]):
        torch.testing.assert_close(model(tokens), expected, atol=1e-5, rtol=1e-5)


def test_mean_ablation_keeps_the_heads_average_output(model, tokens):
    layer, head = 1, 1
    seen = []
    handle = model.blocks[layer].self_attn.w_o.register_forward_pre_hook(
        lambda module, args: seen.append(args[0]))
    try:
        with torch.no_grad():
            model(tokens)
    finally:
        handle.remove()
    mean = seen[0][..., head * D_K:(head + 1) * D_K].mean(dim=(0, 1))  # (d_k,)
    w_o = model.blocks[layer].self_attn.w_o.weight
    cut = _without_columns(model, layer, [head],
                           shift=w_o[:, head * D_K:(head + 1) * D_K].detach() @ mean)
    with torch.no_grad(), ablated(model, [(layer, head)], ablation="mean"):
        torch.testing.assert_close(model(tokens), cut(tokens), atol=1e-5, rtol=1e-5)


def test_ablated_restores_the_model_exactly(model, tokens):
    with torch.no_grad():
        before, weights_before = model(tokens, return_weights=True)
        with ablated(model, [(0, 0), (1, 2)], ablation="mean"):
            assert not torch.equal(model(tokens), before)
        with pytest.raises(RuntimeError, match="inside"), ablated(model, [(1, 0)]):
            raise RuntimeError("an error inside the block")
        after, weights_after = model(tokens, return_weights=True)
    assert torch.equal(after, before) and torch.equal(weights_after, weights_before)
    assert all(not block.self_attn.w_o._forward_pre_hooks for block in model.blocks)


def test_ablation_leaves_the_layers_own_weights_alone(model, tokens):
    with torch.no_grad():
        _, before = model(tokens, return_weights=True)
        with ablated(model, [(1, h) for h in range(HEADS)]):
            _, after = model(tokens, return_weights=True)
    assert torch.equal(after, before)  # layer 1's heads are ablated after they attend


_MODEL = GPT(VOCAB, 3 * PERIOD, D_MODEL, HEADS, LAYERS)
_GENERATOR = torch.Generator().manual_seed(0)
_WEIGHTS = causal_mask(8).float()[None, None, None].expand(2, 1, 1, 8, 8)
_TOKENS = torch.zeros(2, 12, dtype=torch.long)

BAD_INPUTS = [
    pytest.param(attention_layers, (torch.nn.Linear(1, 1),), {}, TypeError,
                 ("model", "GPT, Llama or MiniLM", "Linear"), id="attention_layers: a Linear"),
    pytest.param(repeated_tokens, (0, 4, 2, 5, _GENERATOR), {}, ValueError,
                 ("batch_size", "positive int", "got 0"), id="repeated_tokens: no rows"),
    pytest.param(repeated_tokens, (2, 4, 1, 5, _GENERATOR), {}, ValueError,
                 ("repeats", "int >= 2", "got 1"), id="repeated_tokens: one repeat"),
    pytest.param(repeated_tokens, (2, 4.0, 2, 5, _GENERATOR), {}, TypeError,
                 ("period", "positive int", "float"), id="repeated_tokens: float period"),
    pytest.param(repeated_tokens, (2, 4, 2, 5, None), {}, TypeError,
                 ("generator", "torch.Generator", "global random state"),
                 id="repeated_tokens: no generator"),
    pytest.param(induction_scores, (_WEIGHTS[0], 4), {}, ValueError,
                 ("weights", "(batch, num_layers, num_heads, n_q, n_k)", "(1, 1, 8, 8)"),
                 id="induction_scores: one layer's weights"),
    pytest.param(induction_scores, (_WEIGHTS.bool(), 4), {}, TypeError,
                 ("weights", "floating-point", "torch.bool"), id="induction_scores: bool"),
    pytest.param(induction_scores, (_WEIGHTS, 8), {}, ValueError,
                 ("period", "less than n_k=8", "period=8"), id="induction_scores: no repeat"),
    pytest.param(induction_scores, (_WEIGHTS, 0), {}, ValueError,
                 ("period", "positive int", "got 0"), id="induction_scores: period 0"),
    pytest.param(induction_scores, (_WEIGHTS[..., :3], 2), {}, ValueError,
                 ("n_q=8 > n_k=3", "last n_q"), id="induction_scores: more queries than keys"),
    pytest.param(previous_token_scores, (_WEIGHTS.tolist(),), {}, TypeError,
                 ("weights", "torch.Tensor", "list"), id="previous_token_scores: a list"),
    pytest.param(previous_token_scores, (_WEIGHTS[..., :1, :1],), {}, ValueError,
                 ("no query at position 1",), id="previous_token_scores: one position"),
    pytest.param(ablated, (torch.nn.Linear(2, 2), [(0, 0)]), {}, TypeError,
                 ("model", "blocks[layer].self_attn", "Linear"), id="ablated: not a GPT"),
    pytest.param(ablated, (_MODEL, [(2, 0)]), {}, ValueError,
                 ("layer", "0..1", "got 2"), id="ablated: no such layer"),
    pytest.param(ablated, (_MODEL, [(0, 3)]), {}, ValueError,
                 ("head", "0..2", "got 3"), id="ablated: no such head"),
    pytest.param(ablated, (_MODEL, (1, 0)), {}, TypeError,
                 ("heads", "(layer, head) pairs", "item 1"), id="ablated: one pair unwrapped"),
    pytest.param(ablated, (_MODEL, "all"), {}, TypeError,
                 ("heads", "(layer, head) pairs", "str"), id="ablated: a str"),
    pytest.param(ablated, (_MODEL, [(0, 0)]), {"ablation": "half"}, ValueError,
                 ("ablation", "('zero', 'mean')", "'half'"), id="ablated: unknown ablation"),
    pytest.param(repeat_losses, (_MODEL, _TOKENS.float(), 6), {}, TypeError,
                 ("tokens", "integer", "float32"), id="repeat_losses: float tokens"),
    pytest.param(repeat_losses, (_MODEL, _TOKENS, 5), {}, ValueError,
                 ("(2, 12)", "2 whole repeats", "period=5"), id="repeat_losses: ragged"),
    pytest.param(repeat_losses, (_MODEL, _TOKENS + VOCAB, 6), {}, ValueError,
                 ("tokens", "0..12", "13"), id="repeat_losses: ids out of the vocabulary"),
    pytest.param(repeat_losses, (torch.nn.Linear(2, 2), _TOKENS, 6), {}, TypeError,
                 ("model", "GPT"), id="repeat_losses: not a GPT"),
    pytest.param(head_scores, (_MODEL, _TOKENS, 5), {}, ValueError,
                 ("(2, 12)", "2 whole repeats", "period=5"), id="head_scores: ragged"),
    pytest.param(head_scores, (torch.nn.Linear(2, 2), _TOKENS, 6), {}, TypeError,
                 ("model", "GPT"), id="head_scores: not a GPT"),
    pytest.param(losses_per_repeat, (torch.zeros(2, 12, VOCAB), _TOKENS, 6), {}, ValueError,
                 ("logits", "(2, 11, vocab_size)", "(2, 12, 13)", "t + 1"),
                 id="losses_per_repeat: one logit too many"),
    pytest.param(losses_per_repeat, (torch.zeros(2, 11, VOCAB), _TOKENS.float(), 6), {},
                 TypeError, ("tokens", "integer", "float32"),
                 id="losses_per_repeat: float tokens"),
    pytest.param(losses_per_repeat, (torch.zeros(2, 11, VOCAB, dtype=torch.long), _TOKENS, 6),
                 {}, TypeError, ("logits", "floating-point", "torch.int64"),
                 id="losses_per_repeat: integer logits"),
    pytest.param(losses_per_repeat, (torch.zeros(2, 11, VOCAB), _TOKENS, 0), {}, ValueError,
                 ("period", "positive int", "got 0"), id="losses_per_repeat: period 0"),
    # Values the layer below refuses or cannot read.
    pytest.param(repeat_losses, (_MODEL, _TOKENS.to(torch.int8), 6), {}, TypeError,
                 ("tokens", "torch.long", "torch.int8"), id="repeat_losses: int8 tokens"),
    pytest.param(repeat_losses, (_MODEL, _TOKENS.to("meta"), 6), {}, ValueError,
                 ("tokens", "meta", "values"), id="repeat_losses: tokens on meta"),
    pytest.param(induction_scores, (_WEIGHTS.to("meta"), 4), {}, ValueError,
                 ("weights", "meta", "values"), id="induction_scores: weights on meta"),
    pytest.param(previous_token_scores, (_WEIGHTS.to("meta"),), {}, ValueError,
                 ("weights", "meta"), id="previous_token_scores: weights on meta"),
    pytest.param(induction_scores, (_WEIGHTS * float("nan"), 4), {}, ValueError,
                 ("weights", "NaN", "128 of 128"), id="induction_scores: NaN weights"),
]
