"""Lesson 12's exercises: mutation tables of wrong and right answers (run by test_exercises.py)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from course_utils.exercises.l12 import (
    attend_with_cache,
    inputs_and_targets,
    sample_with_temperature,
)
from course_utils.nn.attention import scaled_dot_product_attention
from course_utils.nn.masks import causal_mask
from tests.support.exercise_checks import Mutations


# ------------------------------------------------------------------ targets shifted by one
def _swapped(window):
    return window[:, 1:], window[:, :-1]


def _targets_are_inputs(window):
    return window[:, :-1], window[:, :-1]


def _inputs_are_targets(window):
    return window[:, 1:], window[:, 1:]


def _batch_axis(window):
    return window[:-1], window[1:]


def _previous_token(window):
    return window[:, :-1], window.roll(1, dims=1)[:, :-1]


def _shift_by_two(window):
    return window[:, :-2], window[:, 2:]


def _not_shifted(window):
    return window, window


def _float_targets(window):
    return window[:, :-1], window[:, 1:].float()


def _one_tensor(window):
    return torch.stack((window[:, :-1], window[:, 1:]))


def _explicit_indices(window):
    seq_len = window.shape[1] - 1
    return window[:, 0:seq_len], window[:, 1:seq_len + 1]


def _narrow_as_list(window):
    seq_len = window.shape[1] - 1
    return [window.narrow(1, 0, seq_len), window.narrow(1, 1, seq_len)]


def _roll(window):
    return window[:, :-1], window.roll(-1, dims=1)[:, :-1]


def _unfold(window):
    pairs = window.unfold(1, window.shape[1] - 1, 1)  # (batch, 2, seq_len)
    return pairs[:, 0], pairs[:, 1]


def _int32(window):
    return window[:, :-1].int(), window[:, 1:].int()


# ------------------------------------------------------------------ a cached attention step
def _attend(q, keys, values, mask=None, scale=True, dim=-1):
    scores = q @ keys.transpose(-2, -1)
    if scale:
        scores = scores / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return scores.softmax(dim=dim) @ values


def _appended(k, v, k_cache, v_cache):
    return torch.cat((k_cache, k), dim=2), torch.cat((v_cache, v), dim=2)


def _no_scale(q, k, v, k_cache, v_cache):
    keys, values = _appended(k, v, k_cache, v_cache)
    mask = causal_mask(q.shape[2], keys.shape[2])
    return _attend(q, keys, values, mask, scale=False), keys, values


def _softmax_over_queries(q, k, v, k_cache, v_cache):
    keys, values = _appended(k, v, k_cache, v_cache)
    return _attend(q, keys, values, causal_mask(q.shape[2], keys.shape[2]), dim=-2), keys, values


def _cache_only(q, k, v, k_cache, v_cache):
    keys, values = _appended(k, v, k_cache, v_cache)
    if k_cache.shape[2] == 0:  # nothing cached yet: attend to the new key
        return _attend(q, keys, values, causal_mask(q.shape[2])), keys, values
    return _attend(q, k_cache, v_cache), keys, values


def _new_keys_only(q, k, v, k_cache, v_cache):
    keys, values = _appended(k, v, k_cache, v_cache)
    return _attend(q, k, v, causal_mask(q.shape[2])), keys, values


def _no_mask(q, k, v, k_cache, v_cache):
    keys, values = _appended(k, v, k_cache, v_cache)
    return _attend(q, keys, values), keys, values


def _mask_aligned_to_start(q, k, v, k_cache, v_cache):
    keys, values = _appended(k, v, k_cache, v_cache)
    mask = torch.ones(q.shape[2], keys.shape[2], dtype=torch.bool).tril()
    return _attend(q, keys, values, mask), keys, values


def _new_positions_first(q, k, v, k_cache, v_cache):
    keys, values = torch.cat((k, k_cache), dim=2), torch.cat((v, v_cache), dim=2)
    past = k_cache.shape[2]
    mask = causal_mask(q.shape[2], keys.shape[2]).roll(-past, dims=1)  # the same weights
    return _attend(q, keys, values, mask), keys, values


def _old_cache_returned(q, k, v, k_cache, v_cache):
    keys, values = _appended(k, v, k_cache, v_cache)
    return _attend(q, keys, values, causal_mask(q.shape[2], keys.shape[2])), k_cache, v_cache


def _course_attention(q, k, v, k_cache, v_cache):
    keys, values = _appended(k, v, k_cache, v_cache)
    output, _ = scaled_dot_product_attention(q, keys, values,
                                             mask=causal_mask(q.shape[2], keys.shape[2]))
    return output, keys, values


def _torch_attention(q, k, v, k_cache, v_cache):
    keys, values = _appended(k, v, k_cache, v_cache)
    mask = causal_mask(q.shape[2], keys.shape[2])
    return F.scaled_dot_product_attention(q, keys, values, attn_mask=mask), keys, values


def _einsum_float64(q, k, v, k_cache, v_cache):
    keys, values = _appended(k, v, k_cache, v_cache)
    n_new, n_k = q.shape[2], keys.shape[2]
    scores = torch.einsum("bhqd,bhkd->bhqk", q.double(), keys.double()) / q.shape[-1] ** 0.5
    allowed = torch.arange(n_k)[None, :] <= torch.arange(n_k - n_new, n_k)[:, None]
    weights = torch.where(allowed, scores, torch.tensor(float("-inf"))).softmax(-1)
    return torch.einsum("bhqk,bhkd->bhqd", weights, values.double()), keys, values


def _one_query_at_a_time(q, k, v, k_cache, v_cache):
    keys, values = _appended(k, v, k_cache, v_cache)
    past, outputs = k_cache.shape[2], []
    for i in range(q.shape[2]):  # new token i sees keys 0 .. past + i
        seen_k, seen_v = keys[:, :, :past + i + 1], values[:, :, :past + i + 1]
        outputs.append(_attend(q[:, :, i:i + 1], seen_k, seen_v))
    return [torch.cat(outputs, dim=2), keys, values]  # a list for the tuple


# ------------------------------------------------------------------ temperature sampling
def _times_temperature(logits, temperature, generator):
    return torch.multinomial(torch.softmax(logits * temperature, -1), 1, generator=generator)[:, 0]


def _no_temperature(logits, temperature, generator):
    return torch.multinomial(torch.softmax(logits, -1), 1, generator=generator)[:, 0]


def _probabilities_divided(logits, temperature, generator):
    probabilities = torch.softmax(logits, -1) / temperature
    return torch.multinomial(probabilities, 1, generator=generator)[:, 0]


def _greedy(logits, temperature, generator):
    return logits.argmax(-1)


def _uniform(logits, temperature, generator):
    return torch.randint(logits.shape[-1], (logits.shape[0],), generator=generator)


def _global_random_state(logits, temperature, generator):
    return torch.multinomial(torch.softmax(logits / temperature, -1), 1)[:, 0]


def _column(logits, temperature, generator):
    return torch.multinomial(torch.softmax(logits / temperature, -1), 1, generator=generator)


def _float_ids(logits, temperature, generator):
    return _reference(logits, temperature, generator).float()


def _reference(logits, temperature, generator):
    return torch.multinomial(torch.softmax(logits / temperature, -1), 1, generator=generator)[:, 0]


def _power_of_probabilities(logits, temperature, generator):
    probabilities = torch.softmax(logits.double(), -1) ** (1 / temperature)
    return torch.multinomial(probabilities, 1, generator=generator).squeeze(1)


def _gumbel_max(logits, temperature, generator):
    uniform = torch.rand(logits.shape, generator=generator).clamp_min(1e-12)
    return (logits / temperature - torch.log(-torch.log(uniform))).argmax(-1)


def _inverse_cdf(logits, temperature, generator):
    cumulative = torch.softmax(logits / temperature, -1).cumsum(-1)  # (batch, vocab_size)
    u = torch.rand(logits.shape[0], 1, generator=generator) * cumulative[:, -1:]
    return torch.searchsorted(cumulative, u)[:, 0].clamp_max(logits.shape[-1] - 1)


def _log_softmax_float64(logits, temperature, generator):
    probabilities = torch.log_softmax(logits.double() / temperature, dim=1).exp()
    return torch.multinomial(probabilities, num_samples=1, generator=generator).view(-1)


def _exp_without_the_max(q, k, v, k_cache, v_cache):
    keys, values = torch.cat((k_cache, k), dim=2), torch.cat((v_cache, v), dim=2)
    n_new, n_k = q.shape[2], keys.shape[2]
    scores = q @ keys.mT / math.sqrt(q.shape[-1])
    scores = scores.masked_fill(~causal_mask(n_new, n_k), float("-inf"))
    exps = scores.exp()  # overflows once a score is in the hundreds
    return exps / exps.sum(-1, keepdim=True) @ values, keys, values


def _fill_of_minus_30(q, k, v, k_cache, v_cache):
    keys, values = torch.cat((k_cache, k), dim=2), torch.cat((v_cache, v), dim=2)
    n_new, n_k = q.shape[2], keys.shape[2]
    scores = q @ keys.mT / math.sqrt(q.shape[-1])
    scores = scores.masked_fill(~causal_mask(n_new, n_k), -30.0)  # "small enough"
    return scores.softmax(-1) @ values, keys, values


def _exp_of_logits(logits, temperature, generator):
    weights = torch.exp(logits / temperature)  # inf once a logit / temperature passes 88
    return torch.multinomial(weights, 1, generator=generator)[:, 0]


def _reseeds_the_generator(logits, temperature, generator):
    generator.manual_seed(0)  # every call starts over: the same tokens again
    return _reference(logits, temperature, generator)


def _private_generator(logits, temperature, generator):
    private = torch.Generator().manual_seed(generator.initial_seed())  # a copy, never advanced
    return _reference(logits, temperature, private)


def _max_subtracted_by_hand(logits, temperature, generator):
    scaled = logits / temperature
    weights = (scaled - scaled.amax(-1, keepdim=True)).exp()  # at most 1: no overflow
    return torch.multinomial(weights, 1, generator=generator).flatten()


MUTATIONS = {
    inputs_and_targets: Mutations(
        wrong=[
            ("swapped", _swapped, "swapped"),
            ("targets are the inputs", _targets_are_inputs, "targets are the inputs"),
            ("inputs are the targets", _inputs_are_targets, "inputs are the targets"),
            ("batch axis", _batch_axis, "batch axis"),
            ("previous token", _previous_token, "before each input"),
            ("shift by two", _shift_by_two, "shifted by exactly one"),
            ("not shifted", _not_shifted, "shifted by exactly one"),
            ("float targets", _float_targets, "integer tensor"),
            ("one tensor", _one_tensor, "(inputs, targets)"),
            ("the first case's width written in", lambda w: (w[:, :8], w[:, 1:9]),
             "tokens per window"),
            ("the first window only", lambda w: (w[:1, :-1], w[:1, 1:]),
             "should have shape (3, 8)"),
        ],
        right=[
            ("explicit indices", _explicit_indices),
            ("narrow, as a list", _narrow_as_list),
            ("roll", _roll),
            ("unfold", _unfold),
            ("int32", _int32),
        ],
    ),
    attend_with_cache: Mutations(
        wrong=[
            ("no scaling", _no_scale, "sqrt(d_k)"),
            ("softmax over the queries", _softmax_over_queries, "dim=-2"),
            ("the cache only", _cache_only, "only to the cache"),
            ("the new keys only", _new_keys_only, "only to the new keys"),
            ("no mask for a chunk", _no_mask, "without a mask"),
            ("mask aligned to the start", _mask_aligned_to_start, "aligned to the first key"),
            ("new positions first", _new_positions_first, "before the cached ones"),
            ("old cache returned", _old_cache_returned, "returned k_cache"),
            ("exp without subtracting the max", _exp_without_the_max,
             "when the scores are in the thousands"),
            ("a finite fill of -30", _fill_of_minus_30, "output has the right shape"),
        ],
        right=[
            ("course attention", _course_attention),
            ("torch's attention", _torch_attention),
            ("einsum in float64", _einsum_float64),
            ("one query at a time", _one_query_at_a_time),
        ],
    ),
    sample_with_temperature: Mutations(
        wrong=[
            ("times the temperature", _times_temperature, "multiplied the logits"),
            ("no temperature", _no_temperature, "as if the temperature were 1"),
            ("probabilities divided", _probabilities_divided, "as if the temperature were 1"),
            ("greedy", _greedy, "greedy"),
            ("uniform", _uniform, "ignore the logits"),
            ("global random state", _global_random_state, "generator you are given"),
            ("(batch, 1)", _column, "(batch,)"),
            ("float ids", _float_ids, "integer tensor"),
            ("exp(logits / temperature)", _exp_of_logits, "your code raised RuntimeError"),
            ("reseeds the caller's generator", _reseeds_the_generator,
             "both calls drew the same 64 tokens"),
            ("a private generator seeded from the caller's", _private_generator,
             "the caller's generator did not move"),
        ],
        right=[
            ("power of the probabilities", _power_of_probabilities),
            ("Gumbel-max", _gumbel_max),
            ("inverse CDF", _inverse_cdf),
            ("log-softmax in float64", _log_softmax_float64),
            ("the row's max subtracted by hand", _max_subtracted_by_hand),
        ],
    ),
}
