"""generate() and next_token(): the cache changes the work, never the answer."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from course_utils.models.gpt import GPT
from course_utils.nn.generation import generate, next_token
from course_utils.nn.kv_cache import KVCache

VOCAB, MAX_LEN = 13, 24


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(1)
    model = GPT(VOCAB, MAX_LEN, 16, 2, 2).eval()
    with torch.no_grad():  # larger weights than at initialisation: logits far from uniform
        for parameter in model.parameters():
            if parameter.dim() > 1:
                parameter.normal_(0, 0.5)
    return model


@pytest.fixture(scope="module")
def prompt():
    return torch.randint(0, VOCAB, (3, 4), generator=torch.Generator().manual_seed(1))


def test_greedy_is_the_same_with_and_without_the_cache(model, prompt):
    cached = generate(model, prompt, 12)
    uncached = generate(model, prompt, 12, use_cache=False)
    assert cached.shape == (3, 16) and cached.dtype == torch.long
    assert torch.equal(cached[:, :4], prompt)
    assert torch.equal(cached, uncached)
    assert len(set(cached[:, 4:].flatten().tolist())) > 1, "a model that repeats one token"


def test_logits_agree_at_every_step(model, prompt):
    out = generate(model, prompt, 12)
    cache = KVCache()
    with torch.no_grad():
        steps = [model(prompt, cache=cache)[:, -1]]
        for position in range(4, 15):
            steps.append(model(out[:, position:position + 1], cache=cache)[:, -1])
        cached = torch.stack(steps, dim=1)  # (batch, 12, vocab_size): the logits that chose
        recomputed = torch.stack([model(out[:, :n])[:, -1] for n in range(4, 16)], dim=1)
    torch.testing.assert_close(cached, recomputed, atol=1e-5, rtol=1e-5)
    assert torch.equal(cached.argmax(-1), out[:, 4:])


def test_sampling_is_the_same_with_and_without_the_cache(model, prompt):
    def sample(use_cache, seed=7):
        return generate(model, prompt, 12, use_cache=use_cache, temperature=1.0, top_k=5,
                        generator=torch.Generator().manual_seed(seed))

    assert torch.equal(sample(True), sample(False))
    assert not torch.equal(sample(True), sample(True, seed=8)), "the seed should matter"


def test_low_temperature_and_top_k_1_are_greedy(model, prompt):
    greedy = generate(model, prompt, 10)
    for temperature, top_k in ((1e-4, None), (1.0, 1), (3.0, 1)):
        sampled = generate(model, prompt, 10, temperature=temperature, top_k=top_k,
                           generator=torch.Generator().manual_seed(0))
        assert torch.equal(sampled, greedy), (temperature, top_k)


def test_top_k_never_samples_outside_the_top_k():
    logits = torch.randn(2000, 50, generator=torch.Generator().manual_seed(0))
    generator = torch.Generator().manual_seed(1)
    for top_k in (1, 3, 10):
        chosen = next_token(logits, temperature=2.0, top_k=top_k, generator=generator)
        allowed = logits.topk(top_k, dim=-1).indices
        assert (allowed == chosen[:, None]).any(dim=-1).all()
        if top_k > 1:
            assert (allowed[:, 0] != chosen).any(), "sampling, not always the top token"


def test_sampling_follows_the_softmax():
    logits = torch.tensor([[0.0, 1.0, 2.0]]).expand(20000, 3)
    chosen = next_token(logits, temperature=1.0, generator=torch.Generator().manual_seed(0))
    share = torch.bincount(chosen, minlength=3) / len(chosen)
    torch.testing.assert_close(share, torch.softmax(logits[0], -1), atol=0.015, rtol=0)


def test_without_the_cache_the_context_is_cropped(model, prompt):
    out = generate(model, prompt, 2 * MAX_LEN, use_cache=False)
    assert out.shape == (3, 4 + 2 * MAX_LEN)
    # The last token was chosen from the last MAX_LEN tokens only.
    with torch.no_grad():
        last = model(out[:, -MAX_LEN - 1:-1])[:, -1].argmax(-1)
    assert torch.equal(last, out[:, -1])


def test_the_cache_stops_at_max_len(model, prompt):
    generate(model, prompt, MAX_LEN - 3)  # feeds exactly MAX_LEN positions
    with pytest.raises(ValueError, match="use_cache=False"):
        generate(model, prompt, MAX_LEN - 2)


class _Bigram(nn.Module):
    """The protocol at its smallest: no positions, so no max_len."""

    max_len = None

    def __init__(self):
        super().__init__()
        self.table = nn.Embedding(VOCAB, VOCAB)

    def forward(self, tokens, cache=None):
        if cache is not None:  # no keys to keep, but the positions still advance
            cache.append(0, *(torch.zeros(tokens.shape[0], 1, tokens.shape[1], 1),) * 2)
        return self.table(tokens)


def test_any_model_of_the_protocol(prompt):
    torch.manual_seed(0)
    bigram = _Bigram()
    out = generate(bigram, prompt, 40)
    assert out.shape == (3, 44) and torch.equal(out, generate(bigram, prompt, 40,
                                                               use_cache=False))
    assert torch.equal(out[:, -1], bigram.table.weight[out[:, -2]].argmax(-1))


class _NoMaxLen(nn.Module):
    def forward(self, tokens, cache=None):
        return torch.zeros(*tokens.shape, VOCAB)


_TINY = GPT(VOCAB, 8, 8, 2, 1)
_PROMPT = torch.zeros(1, 3, dtype=torch.long)


class _NaNModel(nn.Module):
    """A model of the protocol whose logits went NaN (a diverged training run)."""

    max_len = None

    def forward(self, tokens, cache=None):
        return torch.full((*tokens.shape, VOCAB), float("nan"))


class _FlatModel(nn.Module):
    """A model of the protocol that forgot the positions axis: (batch, vocab_size)."""

    max_len = None

    def forward(self, tokens, cache=None):
        return torch.zeros(tokens.shape[0], VOCAB)


_NAN_ROW = torch.tensor([[0.0, 1.0, 2.0, 3.0], [0.0, float("nan"), 1.0, 2.0]])
_BLOCKED_ROW = torch.tensor([[0.0, 1.0, 2.0, 3.0], [float("-inf")] * 4])

BAD_INPUTS = [
    pytest.param(generate, (lambda tokens, cache=None: tokens, _PROMPT, 2), {}, TypeError,
                 ("model", "torch.nn.Module", "function"), id="generate: a function"),
    pytest.param(generate, (_NoMaxLen(), _PROMPT, 2), {}, TypeError,
                 ("max_len", "_NoMaxLen"), id="generate: model without max_len"),
    pytest.param(generate, (_TINY, _PROMPT.float(), 2), {}, TypeError,
                 ("tokens", "integer", "torch.float32"), id="generate: float tokens"),
    pytest.param(generate, (_TINY, _PROMPT[0], 2), {}, ValueError,
                 ("tokens", "(batch, seq_len)", "(3,)"), id="generate: 1-D tokens"),
    pytest.param(generate, (_TINY, _PROMPT[:, :0], 2), {}, ValueError,
                 ("tokens", "at least one token", "(1, 0)"), id="generate: empty prompt"),
    pytest.param(generate, (_TINY, _PROMPT, 0), {}, ValueError,
                 ("max_new_tokens", "positive int", "0"), id="generate: zero new tokens"),
    pytest.param(generate, (_TINY, _PROMPT, 2), {"use_cache": "yes"}, TypeError,
                 ("use_cache", "True or False", "str"), id="generate: str use_cache"),
    pytest.param(generate, (_TINY, _PROMPT, 2), {"temperature": -1.0}, ValueError,
                 ("temperature", ">= 0", "-1.0"), id="generate: negative temperature"),
    pytest.param(generate, (_TINY, _PROMPT, 2), {"temperature": "hot"}, TypeError,
                 ("temperature", "number", "str"), id="generate: str temperature"),
    pytest.param(generate, (_TINY, _PROMPT, 2), {"top_k": 0}, ValueError,
                 ("top_k", "positive int", "0"), id="generate: top_k 0"),
    pytest.param(generate, (_TINY, _PROMPT, 2), {"generator": 0}, TypeError,
                 ("generator", "torch.Generator", "int"), id="generate: int generator"),
    pytest.param(generate, (_TINY, _PROMPT, 2), {"temperature": 1.0}, ValueError,
                 ("temperature > 0", "generator"), id="generate: sampling without a generator"),
    pytest.param(generate, (_TINY, _PROMPT, 7), {}, ValueError,
                 ("3 + 7 - 1 = 9", "max_len=8", "use_cache=False"),
                 id="generate: the cache would pass max_len"),
    pytest.param(next_token, (torch.zeros(2, 3, 4),), {}, TypeError,
                 ("logits", "(batch, vocab_size)", "(2, 3, 4)"), id="next_token: 3-D logits"),
    pytest.param(next_token, (torch.zeros(2, 4, dtype=torch.long),), {}, TypeError,
                 ("logits", "float", "torch.int64"), id="next_token: integer logits"),
    pytest.param(next_token, (torch.zeros(2, 4),), {"temperature": float("inf")}, ValueError,
                 ("temperature", "finite", "inf"), id="next_token: infinite temperature"),
    pytest.param(next_token, (torch.zeros(2, 4),), {"top_k": 5}, ValueError,
                 ("top_k", "vocab_size=4", "5"), id="next_token: top_k past the vocabulary"),
    pytest.param(next_token, (torch.zeros(2, 4),), {"temperature": 0.5}, ValueError,
                 ("temperature > 0", "generator"), id="next_token: sampling without a generator"),
    # Values the layer below would choke on, or pick a token from silently.
    pytest.param(generate, (_TINY, _PROMPT.to(torch.int8), 2), {}, TypeError,
                 ("tokens", "torch.long", "torch.int8"), id="generate: int8 tokens"),
    pytest.param(generate, (_TINY, _PROMPT.to(torch.uint8), 2), {}, TypeError,
                 ("tokens", "torch.long", "torch.uint8"), id="generate: uint8 tokens"),
    pytest.param(generate, (_TINY, _PROMPT.to("meta"), 2), {}, ValueError,
                 ("tokens", "meta", "values"), id="generate: tokens on meta"),
    pytest.param(generate, (_NaNModel(), _PROMPT, 2), {}, ValueError,
                 ("logits _NaNModel returned", "NaN", "row(s) [0]"),
                 id="generate: the model's logits are NaN"),
    pytest.param(generate, (_FlatModel(), _PROMPT, 2), {}, ValueError,
                 ("logits _FlatModel returned", "(batch, n_new, vocab_size)", "(1, 3)", "(1, 13)"),
                 id="generate: the model's logits lack the positions axis"),
    pytest.param(next_token, (_NAN_ROW,), {}, ValueError,
                 ("logits", "NaN", "row(s) [1]"), id="next_token: greedy from NaN logits"),
    pytest.param(next_token, (_NAN_ROW,),
                 {"temperature": 1.0, "generator": torch.Generator().manual_seed(0)},
                 ValueError, ("logits", "NaN", "row(s) [1]"),
                 id="next_token: sampling from NaN logits"),
    pytest.param(next_token, (_BLOCKED_ROW,),
                 {"temperature": 1.0, "generator": torch.Generator().manual_seed(0)},
                 ValueError, ("logits", "above -inf", "row(s) [1]"),
                 id="next_token: a row of all -inf logits"),
    pytest.param(next_token, (torch.zeros(2, 4, device="meta"),), {}, ValueError,
                 ("logits", "meta", "values"), id="next_token: logits on meta"),
]
