"""Exercises of lesson 12, a GPT of your own.

- ``inputs_and_targets``: a window of ``seq_len + 1`` tokens becomes what the model reads
  and what it must predict, the same tokens shifted by one;
- ``attend_with_cache``: one cached attention step: append the new keys and values, then
  let the new queries attend to every cached key under the non-square causal mask;
- ``sample_with_temperature``: draw the next token from ``softmax(logits / temperature)``.
"""

from __future__ import annotations

import math

import torch

from course_utils.exercises import (
    Exercise,
    Incorrect,
    attempt,
    expect_close,
    expect_shape,
    expect_stable,
    far_from_zero,
)
from course_utils.language import N_, _
from course_utils.nn.masks import causal_mask


def _as_tuple(result, count: int, names: str, what: str) -> tuple:
    """The learner's tuple (or list) of ``count`` tensors, or Incorrect saying what came."""
    if not isinstance(result, (tuple, list)) or len(result) != count:
        got = (_("{count} values").format(count=len(result))
               if isinstance(result, (tuple, list)) else type(result).__name__)
        raise Incorrect(_("{what} should return {names}, {count} tensors; got {got}").format(
            what=what, names=names, count=count, got=got))
    return tuple(result)


def _expect_tokens(value, expected: torch.Tensor, what: str) -> None:
    """Raise Incorrect unless ``value`` holds exactly the token ids ``expected``."""
    _expect_tokens_shape(value, expected, what)
    if not torch.equal(value.long(), expected):
        raise Incorrect(_("{what} has the right shape but holds other tokens").format(what=what))


# ------------------------------------------------------------------ targets shifted by one
def _reference_inputs_and_targets(window):
    inputs = window[:, :-1]  # (batch, seq_len): tokens 0 .. seq_len - 1 of each window
    targets = window[:, 1:]  # (batch, seq_len): the token after each of them
    return inputs, targets


WINDOW_CASES = ((3, 9), (1, 5), (4, 2), (6, 33))  # batch, seq_len + 1


def _shift_mistakes(window):
    """(inputs, targets, message) for each classic mistake on this window."""
    return (
        (window[:, 1:], window[:, :-1], N_(
            "{what}: inputs and targets are swapped: the model reads window[:, :-1] and "
            "predicts the token after each, window[:, 1:]")),
        (window[:, :-1], window[:, :-1], N_(
            "{what}: your targets are the inputs themselves, so every position would learn to "
            "copy the token it already sees; shift the targets by one: window[:, 1:]")),
        (window[:, 1:], window[:, 1:], N_(
            "{what}: your inputs are the targets themselves, so every position would learn to "
            "copy the token it already sees; the inputs are window[:, :-1]")),
        (window[:-1], window[1:], N_(
            "{what}: you shifted along the batch axis (dim 0), pairing one window with the "
            "next; shift along the sequence (dim 1): window[:, :-1] and window[:, 1:]")),
        (window[:, :-1], window.roll(1, dims=1)[:, :-1], N_(
            "{what}: your targets are the tokens before each input, not after: position t "
            "must predict window[:, t + 1]")),
    )


def _check_inputs_and_targets(answer):
    generator = torch.Generator().manual_seed(0)
    for batch_size, width in WINDOW_CASES:
        window = torch.randint(1000, (batch_size, width), generator=generator)
        what = _("inputs_and_targets(window of shape {shape})").format(shape=(batch_size, width))
        inputs, targets = _as_tuple(attempt(answer, window), 2, "(inputs, targets)", what)
        expected_inputs, expected_targets = _reference_inputs_and_targets(window)
        for wrong_inputs, wrong_targets, message in _shift_mistakes(window):
            if (isinstance(inputs, torch.Tensor) and isinstance(targets, torch.Tensor)
                    and inputs.shape == wrong_inputs.shape and targets.shape == wrong_targets.shape
                    and torch.equal(inputs.long(), wrong_inputs)
                    and torch.equal(targets.long(), wrong_targets)
                    and not (torch.equal(wrong_inputs, expected_inputs)
                             and torch.equal(wrong_targets, expected_targets))):
                raise Incorrect(message.format(what=what))
        for value, name in ((inputs, "inputs"), (targets, "targets")):
            if isinstance(value, torch.Tensor) and value.dim() == 2 \
                    and value.shape[1] in (width - 2, width):
                raise Incorrect(_(
                    "{what}: your {name} hold {count} tokens per window; a window of seq_len + 1 "
                    "= {width} tokens gives seq_len = {seq_len} inputs and as many targets, "
                    "shifted by exactly one").format(what=what, name=name,
                                                      count=value.shape[1], width=width,
                                                      seq_len=width - 1))
        _expect_tokens(inputs, expected_inputs, _("{what}, inputs").format(what=what))
        _expect_tokens(targets, expected_targets, _("{what}, targets").format(what=what))


inputs_and_targets = Exercise(
    title=N_("targets shifted by one"),
    checker=_check_inputs_and_targets,
    reference=_reference_inputs_and_targets,
    hints=(
        N_("Position t reads token t and must predict token t + 1 of the same window."),
        N_("Slice along the sequence axis (dim 1): all tokens but the last are the inputs, all "
           "but the first the targets."),
    ),
)


# ------------------------------------------------------------------ a cached attention step
def _attend(q, k, v, mask=None, scale=True, dim=-1):
    """softmax(q kᵀ / sqrt(d_k)) v in float64, with a bool mask (True = may attend)."""
    scores = q.double() @ k.double().transpose(-2, -1)  # (batch, heads, n_new, n_k)
    if scale:
        scores = scores / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return scores.softmax(dim=dim) @ v.double()  # (batch, heads, n_new, d_k)


def _reference_attend_with_cache(q, k, v, k_cache, v_cache):
    k_cache = torch.cat((k_cache, k), dim=2)  # (batch, heads, past + n_new, d_k)
    v_cache = torch.cat((v_cache, v), dim=2)
    n_new, n_k = q.shape[2], k_cache.shape[2]
    # New token i sits at position past + i: it sees the cache and new tokens 0 .. i.
    mask = causal_mask(n_new, n_k)  # (n_new, n_k), True = may attend
    scores = q @ k_cache.transpose(-2, -1) / math.sqrt(q.shape[-1])
    weights = scores.masked_fill(~mask, float("-inf")).softmax(dim=-1)
    return weights @ v_cache, k_cache, v_cache  # output (batch, heads, n_new, d_k)


# batch, heads, past, n_new, d_k: one new token first, then a chunk of 3 (like a prompt)
# batch, heads, past, n_new, d_k, far: then 6 heads and scores in the thousands (float64).
CACHE_CASES = ((2, 3, 5, 1, 4, False), (1, 2, 0, 1, 8, False), (2, 2, 4, 3, 4, False),
               (3, 6, 7, 2, 5, False), (2, 4, 6, 3, 6, True))


def _cache_mistakes(q, k, v, k_cache, v_cache):
    """(wrong output, message) for each classic mistake of the right shape on this case."""
    keys, values = torch.cat((k_cache, k), dim=2), torch.cat((v_cache, v), dim=2)
    n_new, n_k = q.shape[2], keys.shape[2]
    mask = causal_mask(n_new, n_k)
    mistakes = [
        (_attend(q, keys, values, mask, scale=False), N_(
            "{what}: your scores are not divided by sqrt(d_k)")),
        (_attend(q, keys, values, mask, dim=-2), N_(
            "{what}: your softmax runs over the queries (dim=-2); each new query's weights "
            "must sum to 1 over the keys (dim=-1)")),
        (_attend(q, k, v, causal_mask(n_new)), N_(
            "{what}: your new tokens attend only to the new keys: the cached keys and values "
            "of the earlier tokens are what the cache is for")),
        (_attend(q, keys, values), N_(
            "{what}: without a mask, a new token sees the new tokens after it; new token i sits "
            "at position past + i: mask with causal_mask(n_new, past + n_new)")),
        (_attend(q, keys, values, torch.ones(n_new, n_k, dtype=torch.bool).tril()), N_(
            "{what}: your mask is aligned to the first key, so new token i sees only keys "
            "0 .. i; it sits at position past + i and sees keys 0 .. past + i: "
            "causal_mask(n_new, past + n_new)")),
    ]
    if k_cache.shape[2] > 0:
        mistakes.append((_attend(q, k_cache, v_cache), N_(
            "{what}: your new tokens attend only to the cache: append k and v first, so that "
            "each new token also sees itself")))
    return mistakes


def _check_attend_with_cache(answer):
    generator = torch.Generator().manual_seed(0)
    for batch_size, heads, past, n_new, d_k, far in CACHE_CASES:
        q, k, v = torch.randn(3, batch_size, heads, n_new, d_k, generator=generator).unbind(0)
        k_cache, v_cache = torch.randn(2, batch_size, heads, past, d_k,
                                       generator=generator).unbind(0)
        if far:  # every key, cached or new, gets the same large first feature
            q, keys = far_from_zero(q, torch.cat((k_cache, k), dim=2))
            k_cache, k, v, v_cache = keys[:, :, :past], keys[:, :, past:], v.double(), \
                v_cache.double()
        what = _("attend_with_cache(q {q_shape}, cache of {past} positions)").format(
            q_shape=(batch_size, heads, n_new, d_k), past=past)
        output, new_k_cache, new_v_cache = _as_tuple(
            attempt(answer, q, k, v, k_cache, v_cache), 3, "(output, k_cache, v_cache)", what)
        expected, expected_k, expected_v = _reference_attend_with_cache(q, k, v, k_cache,
                                                                        v_cache)
        expect_shape(output, expected.shape, _("{what}, output").format(what=what))
        if far:
            expect_stable(output, _("{what}, output").format(what=what))
        if output.is_floating_point() and torch.isfinite(output).all() and not torch.allclose(
                output.detach().double(), expected.double(), atol=1e-5):
            for wrong, message in _cache_mistakes(q, k, v, k_cache, v_cache):
                if torch.allclose(output.detach().double(), wrong, atol=1e-5):
                    raise Incorrect(message.format(what=what))
        expect_close(output, expected, _("{what}, output").format(what=what))
        for value, expected_cache, name in ((new_k_cache, expected_k, "k_cache"),
                                            (new_v_cache, expected_v, "v_cache")):
            label = _("{what}, the returned {name}").format(what=what, name=name)
            expect_shape(value, expected_cache.shape, label)
            if past and torch.allclose(value.detach().double(), torch.cat(
                    (expected_cache[:, :, past:], expected_cache[:, :, :past]), dim=2).double()):
                raise Incorrect(_(
                    "{what}: your {name} puts the new positions before the cached ones; "
                    "positions stay in order, so append at the end (dim=2)").format(
                    what=what, name=name))
            expect_close(value, expected_cache, label, atol=1e-6, rtol=0)


attend_with_cache = Exercise(
    title=N_("a cached attention step"),
    checker=_check_attend_with_cache,
    reference=_reference_attend_with_cache,
    hints=(
        N_("First append: torch.cat((k_cache, k), dim=2), and the same for the values."),
        N_("Then attend as in lesson 02, q @ keysᵀ / sqrt(d_k), softmax over the keys, times the "
           "values: n_new queries against past + n_new keys."),
        N_("New token i sits at position past + i: causal_mask(n_new, past + n_new) is the "
           "non-square mask of lesson 05."),
    ),
)


# ------------------------------------------------------------------ temperature sampling
DRAWS = 20000  # per row: enough that every probability is pinned to about ±0.01
# The last two rows are in the thousands, positive and negative: exp(logits / temperature)
# overflows there unless the row's maximum comes off first (torch.softmax does it).
SAMPLE_LOGITS = ((2.0, 1.0, 0.5, 0.0, -1.0), (-1.0, 0.0, 3.0, 0.5, 1.0),
                 (1002.0, 1001.0, 1000.5, 1000.0, 999.0), (-3001.0, -3000.0, -2997.0, -2999.5,
                                                           -2999.0))
TEMPERATURES = (0.5, 2.0)


def _reference_sample_with_temperature(logits, temperature, generator):
    probabilities = torch.softmax(logits / temperature, dim=-1)  # (batch, vocab_size)
    return torch.multinomial(probabilities, 1, generator=generator)[:, 0]  # (batch,)


def _frequencies(tokens, rows: int, vocab_size: int) -> torch.Tensor:
    """How often each token was drawn for each logits row: ``(rows, vocab_size)``."""
    per_row = tokens.long().view(rows, DRAWS)
    return torch.stack([torch.bincount(row, minlength=vocab_size)[:vocab_size].double() / DRAWS
                        for row in per_row])


def _close_to(frequencies, probabilities) -> bool:
    """Within 4.5 standard errors of a multinomial draw (a false alarm about 1 in 10^5)."""
    spread = (probabilities * (1 - probabilities) / DRAWS).sqrt()
    return bool(((frequencies - probabilities).abs() <= 4.5 * spread + 1e-3).all())


def _sampling_mistakes(logits, temperature):
    """(probabilities, message) that a classic mistake draws from."""
    return (
        (torch.softmax(logits * temperature, dim=-1), N_(
            "{what}: you multiplied the logits by the temperature; divide them: a temperature "
            "above 1 flattens the distribution, below 1 sharpens it")),
        (torch.softmax(logits, dim=-1), N_(
            "{what}: your draws follow softmax(logits), as if the temperature were 1: divide the "
            "logits (not the probabilities) by the temperature before the softmax")),
        (torch.nn.functional.one_hot(logits.argmax(-1), logits.shape[-1]).double(), N_(
            "{what}: you always picked the most likely token; that is greedy decoding "
            "(temperature 0): draw from the distribution with torch.multinomial")),
        (torch.full_like(logits, 1 / logits.shape[-1]), N_(
            "{what}: every token came out equally often, so your draws ignore the logits; take "
            "the softmax over the vocabulary (dim=-1) of logits / temperature")),
    )


def _check_sample_with_temperature(answer):
    rows = torch.tensor(SAMPLE_LOGITS, dtype=torch.float64)  # (2, vocab_size)
    logits = rows.repeat_interleave(DRAWS, dim=0).float()  # (2 * DRAWS, vocab_size)
    for temperature in TEMPERATURES:
        what = _("sample_with_temperature(logits, temperature={temperature}, generator)").format(
            temperature=temperature)
        first = attempt(answer, logits, temperature, torch.Generator().manual_seed(1))
        if isinstance(first, torch.Tensor) and tuple(first.shape) == (len(logits), 1):
            raise Incorrect(_(
                "{what}: you returned shape (batch, 1); return one token id per row, shape "
                "(batch,): torch.multinomial(...)[:, 0]").format(what=what))
        expected_ids = torch.zeros(len(logits), dtype=torch.long)
        _expect_tokens_shape(first, expected_ids, what)
        again = attempt(answer, logits, temperature, torch.Generator().manual_seed(1))
        if not (isinstance(again, torch.Tensor) and again.shape == first.shape
                and torch.equal(again, first)):
            raise Incorrect(_(
                "{what}: two calls with generators seeded alike drew different tokens: draw "
                "with the generator you are given (generator=generator), never with torch's "
                "global random state").format(what=what))
        if first.min() < 0 or first.max() >= logits.shape[-1]:
            raise Incorrect(_("{what}: token ids should lie in 0 .. {last}").format(
                what=what, last=logits.shape[-1] - 1))
        frequencies = _frequencies(first, len(rows), rows.shape[-1])
        expected = torch.softmax(rows / temperature, dim=-1)
        if not _close_to(frequencies, expected):
            for probabilities, message in _sampling_mistakes(rows, temperature):
                if _close_to(frequencies, probabilities):
                    raise Incorrect(message.format(what=what))
            gap = (frequencies - expected).abs().max().item()
            raise Incorrect(_(
                "{what}: over {draws} draws per row your tokens come out with frequencies up to "
                "{gap:.3f} away from softmax(logits / temperature)").format(
                what=what, draws=DRAWS, gap=gap))
    _check_the_generator_is_used(answer)


def _check_the_generator_is_used(answer):
    """One generator, two calls: the draws must differ and the generator must advance, or the
    answer reseeds it (or draws from a generator of its own seeded from it), and a decoding
    loop repeats the same token."""
    logits = torch.zeros(64, 5)  # 64 rows of uniform draws over 5 tokens
    what = _("sample_with_temperature(logits, temperature=1.0, generator), called twice with one "
             "generator")
    generator = torch.Generator().manual_seed(3)
    before = generator.get_state()
    first = attempt(answer, logits, 1.0, generator)
    after = generator.get_state()
    second = attempt(answer, logits, 1.0, generator)
    _expect_tokens_shape(first, torch.zeros(64, dtype=torch.long), what)
    if torch.equal(before, after):
        raise Incorrect(_(
            "{what}: the caller's generator did not move, so the next call cannot draw anything "
            "new: draw with it (generator=generator), not with a generator of your own seeded "
            "from it").format(what=what))
    if isinstance(second, torch.Tensor) and second.shape == first.shape \
            and torch.equal(second, first):
        raise Incorrect(_(
            "{what}: both calls drew the same 64 tokens: your function reseeds the generator (or "
            "a copy of it), so a decoding loop would repeat itself. Never call manual_seed "
            "inside; just pass generator=generator to torch.multinomial").format(what=what))


def _expect_tokens_shape(value, expected: torch.Tensor, what: str) -> None:
    """Raise Incorrect unless ``value`` is an integer tensor shaped like ``expected``."""
    expect_shape(value, expected.shape, what)
    if value.is_floating_point() or value.dtype == torch.bool:
        raise Incorrect(_("{what} should hold token ids (an integer tensor), got dtype "
                          "{dtype}").format(what=what, dtype=value.dtype))


sample_with_temperature = Exercise(
    title=N_("temperature sampling"),
    checker=_check_sample_with_temperature,
    reference=_reference_sample_with_temperature,
    hints=(
        N_("Divide the logits by the temperature, then take the softmax over the vocabulary "
           "(dim=-1)."),
        N_("torch.multinomial(probabilities, 1, generator=generator) draws one token per row, "
           "shape (batch, 1); [:, 0] makes it (batch,)."),
    ),
)
