"""Lesson 13's exercises: mutation tables of wrong and right answers (run by test_exercises.py)."""

from __future__ import annotations

import numpy as np
import torch

from course_utils.exercises.l13 import induction_score, induction_targets, previous_token_score
from tests.support.exercise_checks import Mutations


# ------------------------------------------------------------------ the induction score
def _at_offset(weights, back, first):
    queries = torch.arange(first, weights.shape[-1])
    return weights[..., queries, queries - back].mean(dim=(0, 3))


def _duplicate_token(weights, period):  # the earlier copy itself
    return _at_offset(weights, period, period)


def _two_after(weights, period):
    return _at_offset(weights, period - 2, period)


def _from_period_minus_one(weights, period):
    return _at_offset(weights, period - 1, period - 1)


def _first_block_too(weights, period):
    return _at_offset(weights, period - 1, 0)


def _previous_token_instead(weights, period):
    return _at_offset(weights, 1, 1)


def _key_query_swapped(weights, period):
    return _at_offset(weights.transpose(-1, -2), period - 1, period)


def _summed(weights, period):
    queries = torch.arange(period, weights.shape[-1])
    return weights[..., queries, queries - period + 1].sum(dim=(0, 3))


def _batch_kept(weights, period):
    queries = torch.arange(period, weights.shape[-1])
    return weights[..., queries, queries - period + 1].mean(dim=-1)


def _heads_by_layers(weights, period):
    return _at_offset(weights, period - 1, period).T


def _induction_loop(weights, period):
    batch, layers, heads, n, _ = weights.shape
    total = torch.zeros(layers, heads, dtype=torch.float64)
    for t in range(period, n):
        total += weights[:, :, :, t, t - period + 1].double().sum(0)
    return total / (batch * (n - period))


def _induction_diagonal(weights, period):
    stripe = torch.diagonal(weights, offset=-(period - 1), dim1=-2, dim2=-1)
    return stripe[..., 1:].mean(dim=(0, 3))  # drop query period - 1, the first block's last


def _induction_numpy(weights, period):
    w = weights.numpy()
    n = w.shape[-1]
    return np.stack([w[..., t, t - period + 1] for t in range(period, n)], -1).mean(axis=(0, 3))


def _induction_float32_einsum(weights, period):
    n = weights.shape[-1]
    pick = torch.zeros(n, n)
    for t in range(period, n):
        pick[t, t - period + 1] = 1.0 / (n - period)
    return torch.einsum("blhqk,qk->lh", weights.float(), pick) / weights.shape[0]


# ------------------------------------------------------------------ the previous-token score
def _itself(weights):
    return _at_offset(weights, 0, 0)


def _two_back(weights):
    return _at_offset(weights, 2, 2)


def _position_zero_wrapped(weights):
    return _at_offset(weights, 1, 0)


def _over_seq_len(weights):
    n = weights.shape[-1]
    return torch.diagonal(weights, offset=-1, dim1=-2, dim2=-1).sum(-1).mean(0) / n


def _previous_swapped(weights):
    return _at_offset(weights.transpose(-1, -2), 1, 1)


def _previous_summed(weights):
    return torch.diagonal(weights, offset=-1, dim1=-2, dim2=-1).sum(dim=(0, 3))


def _previous_over_heads(weights):
    return torch.diagonal(weights, offset=-1, dim1=-2, dim2=-1).mean(dim=(2, 3))


def _previous_loop(weights):
    n = weights.shape[-1]
    return sum(weights[..., t, t - 1].double() for t in range(1, n)).mean(0) / (n - 1)


def _previous_indexing(weights):
    return _at_offset(weights, 1, 1)


def _previous_numpy(weights):
    w = weights.numpy()
    n = w.shape[-1]
    return w[..., np.arange(1, n), np.arange(n - 1)].mean(axis=(0, 3))


def _previous_masked_sum(weights):
    n = weights.shape[-1]
    below = torch.eye(n, dtype=torch.bool).roll(1, dims=0)  # row t: True at key t - 1
    below[0] = False  # the roll wrapped row 0's key around to the last key
    return (weights * below).sum(dim=(-1, -2)).mean(0) / (n - 1)


# ------------------------------------------------------------------ where to look
def _occurrence_itself(tokens):
    targets = []
    for t in range(len(tokens)):
        earlier = [s for s in range(t) if tokens[s] == tokens[t]]
        targets.append(earlier[-1] if earlier else -1)
    return torch.tensor(targets)


def _first_occurrence(tokens):
    targets = []
    for t in range(len(tokens)):
        earlier = [s for s in range(t) if tokens[s] == tokens[t]]
        targets.append(earlier[0] + 1 if earlier else -1)
    return torch.tensor(targets)


def _stored_before_lookup(tokens):
    last, targets = {}, []
    for t, token in enumerate(tokens.tolist()):
        last[token] = t
        targets.append(last[token] + 1)
    return torch.tensor(targets)


def _zero_for_new(tokens):
    last, targets = {}, []
    for t, token in enumerate(tokens.tolist()):
        targets.append(last[token] + 1 if token in last else 0)
        last[token] = t
    return torch.tensor(targets)


def _plus_two(tokens):
    last, targets = {}, []
    for t, token in enumerate(tokens.tolist()):
        targets.append(last[token] + 2 if token in last else -1)
        last[token] = t
    return torch.tensor(targets)


def _float_positions(tokens):
    last, targets = {}, []
    for t, token in enumerate(tokens.tolist()):
        targets.append(last[token] + 1 if token in last else -1)
        last[token] = t
    return torch.tensor(targets, dtype=torch.float32)


def _targets_dict_list(tokens):
    last, targets = {}, []
    for t, token in enumerate(tokens.tolist()):
        targets.append(last.get(token, -2) + 1)  # -2 + 1: never seen
        last[token] = t
    return targets


def _targets_matrix(tokens):
    n = len(tokens)
    earlier = (tokens[:, None] == tokens[None, :]) & torch.ones(n, n, dtype=torch.bool).tril(-1)
    latest = torch.where(earlier, torch.arange(n), -1).max(dim=1).values
    return torch.where(latest >= 0, latest + 1, -1)


def _targets_numpy(tokens):
    array = tokens.numpy()
    out = np.full(len(array), -1, dtype=np.int32)
    for t in range(len(array)):
        hits = np.flatnonzero(array[:t] == array[t])
        if hits.size:
            out[t] = hits[-1] + 1
    return out


def _targets_backwards(tokens):
    targets = torch.full((len(tokens),), -1, dtype=torch.long)
    for t in range(len(tokens)):
        for s in range(t - 1, -1, -1):
            if tokens[s] == tokens[t]:
                targets[t] = s + 1
                break
    return targets


def _median_not_mean(weights, period):
    queries = torch.arange(period, weights.shape[-1])
    picked = weights[..., queries, queries - period + 1].movedim(0, -2)  # (layers, heads, b, q)
    return picked.flatten(-2).median(dim=-1).values


def _first_sequence_only(weights, period):
    queries = torch.arange(period, weights.shape[-1])
    return weights[0][..., queries, queries - period + 1].mean(dim=-1)


def _previous_first_sequence_only(weights):
    n = weights.shape[-1]
    return weights[0][..., torch.arange(1, n), torch.arange(n - 1)].mean(dim=-1)


def _previous_median(weights):
    picked = weights.diagonal(offset=-1, dim1=-2, dim2=-1).movedim(0, -2)  # (layers, heads, b, q)
    return picked.flatten(-2).median(dim=-1).values


def _table_of_ten_ids(tokens):
    last_seen = torch.full((10,), -1)  # one slot per token id: ids up to 9 only
    targets = torch.full_like(tokens, -1)
    for t, token in enumerate(tokens.tolist()):
        if last_seen[token] >= 0:
            targets[t] = last_seen[token] + 1
        last_seen[token] = t
    return targets


def _targets_in_a_tensor_table(tokens):
    last_seen = torch.full((int(tokens.max()) + 1,), -1)  # sized by the ids that came
    targets = torch.full_like(tokens, -1)
    for t, token in enumerate(tokens.tolist()):
        if last_seen[token] >= 0:
            targets[t] = last_seen[token] + 1
        last_seen[token] = t
    return targets


def _first_thirty_positions(tokens):
    return _targets_dict_list(tokens[:30]) + [-1] * max(0, len(tokens) - 30)


MUTATIONS = {
    induction_score: Mutations(
        wrong=[
            ("t - period (duplicate token)", _duplicate_token, "earlier copy"),
            ("t - period + 2", _two_after, "off by one"),
            ("query period - 1 included", _from_period_minus_one, "t = period - 1"),
            ("first block too", _first_block_too, "first block"),
            ("previous-token score", _previous_token_instead, "previous-token score"),
            ("key and query swapped", _key_query_swapped, "(query, key)"),
            ("summed", _summed, "summed"),
            ("batch kept", _batch_kept, "kept the batch"),
            ("(heads, layers)", _heads_by_layers, "(heads, layers)"),
            ("median instead of mean", _median_not_mean, "values are off"),
            ("the first sequence of the batch only", _first_sequence_only, "values are off"),
        ],
        right=[
            ("loop in float64", _induction_loop),
            ("diagonal", _induction_diagonal),
            ("numpy", _induction_numpy),
            ("einsum in float32", _induction_float32_einsum),
        ],
    ),
    previous_token_score: Mutations(
        wrong=[
            ("the token itself", _itself, "diagonal"),
            ("t - 2", _two_back, "t - 2"),
            ("position 0 wrapped", _position_zero_wrapped, "seq_len - 1"),
            ("divided by seq_len", _over_seq_len, "seq_len - 1"),
            ("key and query swapped", _previous_swapped, "(query, key)"),
            ("summed", _previous_summed, "summed"),
            ("mean over heads", _previous_over_heads, "(layers, heads)"),
            ("median instead of mean", _previous_median, "values are off"),
            ("the first sequence of the batch only", _previous_first_sequence_only,
             "values are off"),
        ],
        right=[
            ("loop in float64", _previous_loop),
            ("indexing", _previous_indexing),
            ("numpy", _previous_numpy),
            ("masked sum", _previous_masked_sum),
        ],
    ),
    induction_targets: Mutations(
        wrong=[
            ("the occurrence itself", _occurrence_itself, "occurrence itself"),
            ("first occurrence", _first_occurrence, "first occurrence"),
            ("t itself counted", _stored_before_lookup, "position t itself"),
            ("0 for a new token", _zero_for_new, "not 0"),
            ("+ 2", _plus_two, "one too far"),
            ("float positions", _float_positions, "integer positions"),
            ("a table for token ids below 10", _table_of_ten_ids, "your code raised IndexError"),
            ("the first 30 positions only", _first_thirty_positions,
             "… (200 ids)]) has the right shape"),
        ],
        right=[
            ("dict, list of ints", _targets_dict_list),
            ("comparison matrix", _targets_matrix),
            ("numpy int32", _targets_numpy),
            ("search backwards", _targets_backwards),
            ("a table sized by the largest id", _targets_in_a_tensor_table),
        ],
    ),
}
