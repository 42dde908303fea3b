"""Induction heads: the probe that finds them and their scores (lesson 13).

An *induction head* continues a pattern it has seen earlier in the same context: at a token
``A`` it attends to the token that followed the previous ``A`` and copies it, so ``... A B
... A`` predicts ``B``. It needs a *previous-token head* in an earlier layer, which writes
into every position what the token before it was; the induction head's query (``A``) then
matches the keys of positions whose previous token was ``A``.

The classic probe (Olsson et al. 2022) is a block of random tokens repeated: nothing in the
first block can be predicted, everything in the next one can, by copying. On it:

- :func:`induction_scores`: how much each head attends from ``t`` to ``t - period + 1``;
- :func:`previous_token_scores`: how much each head attends from ``t`` to ``t - 1``;
- :func:`head_scores`: both scores of every head, from one run of the model on the probe;
- :func:`repeat_losses`: the model's loss on each repeat (copying makes the later ones low),
  from the model or (:func:`losses_per_repeat`) from logits computed another way;
- ablating heads (:func:`course_utils.nn.ablation.ablated`) shows what they did.

Weights are the model's ``(batch, num_layers, num_heads, n_q, n_k)`` (``GPT(...,
return_weights=True)``); with ``n_q < n_k`` (a KV cache) the queries are the last ``n_q``
positions. A head is named by ``(layer, head)``, both counted from 0.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from course_utils.checks import (
    require_generator,
    require_int_in_range,
    require_positive_int,
    require_tensor,
    require_token_ids,
    require_values,
)
from course_utils.language import _
from course_utils.nn.ablation import attention_layers

WEIGHTS = "(batch, num_layers, num_heads, n_q, n_k)"


def repeated_tokens(batch_size: int, period: int, repeats: int, vocab_size: int,
                    generator: torch.Generator) -> torch.Tensor:
    """``batch_size`` rows of ``period`` random token ids, each row's block repeated
    ``repeats`` times: tokens ``(batch, period * repeats)``, ``tokens[:, t] == tokens[:, t -
    period]`` for every ``t >= period``. Ids are drawn uniformly from ``0..vocab_size-1``.

    Used in lesson 13.
    """
    require_positive_int("batch_size", batch_size)
    require_positive_int("period", period)
    require_int_in_range("repeats", repeats, 2)
    require_positive_int("vocab_size", vocab_size)
    if require_generator("generator", generator) is None:
        raise TypeError(_("generator should be a torch.Generator (e.g. "
                          "torch.Generator().manual_seed(0)): the tokens are drawn with it, "
                          "never with the global random state"))
    block = torch.randint(0, vocab_size, (batch_size, period), generator=generator)
    return block.repeat(1, repeats)  # (batch, period * repeats)


def _require_weights(weights) -> torch.Tensor:
    weights = require_values("weights", require_tensor("weights", weights, WEIGHTS))
    if weights.isnan().any():
        raise ValueError(_("weights should be attention weights (numbers from 0 to 1), got NaN "
                           "in {nans} of {entries} entries")
                         .format(nans=int(weights.isnan().sum()), entries=weights.numel()))
    if weights.dim() != 5:
        raise ValueError(_("weights should have shape {notation} (5 dims), got shape {shape}")
                         .format(notation=WEIGHTS, shape=tuple(weights.shape)))
    n_q, n_k = weights.shape[-2:]
    if n_q > n_k:
        raise ValueError(_("weights {notation} = {shape} have n_q={n_q} > n_k={n_k}: the "
                           "queries should be the last n_q of the n_k positions")
                         .format(notation=WEIGHTS, shape=tuple(weights.shape), n_q=n_q, n_k=n_k))
    return weights


def _score_at_offset(weights: torch.Tensor, back: int, first_query: int) -> torch.Tensor:
    """Mean weight from each query position ``t >= first_query`` to key ``t - back``:
    ``(num_layers, num_heads)``."""
    n_q, n_k = weights.shape[-2:]
    positions = torch.arange(n_k - n_q, n_k, device=weights.device)  # each query's position
    chosen = positions >= first_query
    if not chosen.any():
        raise ValueError(_("weights {notation} = {shape} have no query at position {first} or "
                           "later, so there is nothing to score")
                         .format(notation=WEIGHTS, shape=tuple(weights.shape), first=first_query))
    keys = (positions - back)[chosen]
    # (batch, layers, heads, chosen queries): the weight each query gives its one key
    picked = weights[..., chosen, :].gather(
        -1, keys.view(1, 1, 1, -1, 1).expand(*weights.shape[:3], -1, 1)).squeeze(-1)
    return picked.mean(dim=(0, 3))


def induction_scores(weights, period: int) -> torch.Tensor:
    """Each head's induction score on a sequence repeating every ``period`` tokens.

    The mean, over the batch and every query position ``t >= period`` (a token seen before),
    of the weight from ``t`` to ``t - period + 1``, the token after the previous occurrence
    of ``t``'s token. weights ``(batch, num_layers, num_heads, n_q, n_k)`` -> scores
    ``(num_layers, num_heads)``, each in 0..1 (1: the head attends only there).

    Used in lesson 13.
    """
    weights = _require_weights(weights)
    require_positive_int("period", period)
    if period >= weights.shape[-1]:
        raise ValueError(_("period should be less than n_k={n_k} (the sequence must repeat at "
                           "least once), got period={period}")
                         .format(n_k=weights.shape[-1], period=period))
    return _score_at_offset(weights, back=period - 1, first_query=period)


def previous_token_scores(weights) -> torch.Tensor:
    """Each head's previous-token score: the mean, over the batch and every query position
    ``t >= 1``, of the weight from ``t`` to ``t - 1``. weights ``(batch, num_layers,
    num_heads, n_q, n_k)`` -> scores ``(num_layers, num_heads)``, each in 0..1.

    Used in lesson 13.
    """
    weights = _require_weights(weights)
    return _score_at_offset(weights, back=1, first_query=1)


def head_scores(model, tokens, period: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Every head's previous-token and induction scores on ``tokens``, from one run of
    ``model(tokens, return_weights=True)`` without gradients, in the model's current mode.

    tokens ``(batch, period * repeats)`` (e.g. from :func:`repeated_tokens`) -> ``(previous,
    induction)``, each ``(num_layers, num_heads)``: :func:`previous_token_scores` and
    :func:`induction_scores` of the weights. Cheap enough to call every few steps of training.

    Used in lesson 13.
    """
    tokens = _require_repeats(model, tokens, period)
    with torch.no_grad():
        _logits, weights = model(tokens, return_weights=True)  # (batch, layers, heads, n_q, n_k)
    return previous_token_scores(weights), induction_scores(weights, period)


def _require_repeats(model, tokens, period: int) -> torch.Tensor:
    """``tokens`` checked against ``model``'s vocabulary and cut into whole repeats."""
    attention_layers(model)
    vocab_size = getattr(model, "vocab_size", None)
    require_positive_int("model.vocab_size", vocab_size)
    require_positive_int("period", period)
    return _require_whole_repeats(require_token_ids("tokens", tokens, vocab_size), period)


def _require_whole_repeats(tokens: torch.Tensor, period: int) -> torch.Tensor:
    """``tokens`` ``(batch, period * repeats)`` if it holds 2 or more whole repeats."""
    seq_len = tokens.shape[1]
    if seq_len % period or seq_len < 2 * period:
        raise ValueError(_("{name} (batch, period * repeats) = {shape} should hold at least 2 "
                           "whole repeats of period={period}")
                         .format(name="tokens", shape=tuple(tokens.shape), period=period))
    return tokens


def repeat_losses(model, tokens, period: int) -> torch.Tensor:
    """The model's mean next-token loss (cross-entropy, nats) on each repeat of ``tokens``.

    tokens ``(batch, period * repeats)``, e.g. from :func:`repeated_tokens` -> losses
    ``(repeats,)``, as :func:`losses_per_repeat` counts them: the first token of the first
    repeat is left out, since nothing can predict it. Run without gradients, in the model's
    current mode.

    Used in lesson 13.
    """
    tokens = _require_repeats(model, tokens, period)
    with torch.no_grad():
        logits = model(tokens[:, :-1])  # (batch, seq_len - 1, vocab_size)
    return losses_per_repeat(logits, tokens, period)


def losses_per_repeat(logits, tokens, period: int) -> torch.Tensor:
    """The mean next-token loss (cross-entropy, nats) on each repeat, from ``logits``.

    logits ``(batch, seq_len - 1, vocab_size)``: position ``t`` predicts ``tokens[:, t + 1]``
    (a model run on ``tokens[:, :-1]``); tokens ``(batch, seq_len)`` with ``seq_len = period
    * repeats`` -> losses ``(repeats,)``. Entry ``r`` is the loss on the targets at positions
    ``r * period .. (r + 1) * period - 1``, except two that no model can predict: position 0
    (nothing before it) and position ``period``, the first token of the first repeat: it
    follows the last token of the block, which never had a successor before, so nothing says
    the block starts again. Every other target of a repeat can be copied: its previous token
    was followed by it one period earlier.

    Used in lesson 13.
    """
    require_positive_int("period", period)
    logits = require_values("logits", require_tensor("logits", logits,
                                                     "(batch, seq_len - 1, vocab_size)"))
    tokens = _require_whole_repeats(require_token_ids("tokens", tokens, logits.shape[-1]),
                                    period)
    seq_len = tokens.shape[1]
    if logits.dim() != 3 or logits.shape[:2] != (tokens.shape[0], seq_len - 1):
        raise ValueError(_("logits should have shape (batch, seq_len - 1, vocab_size) = ({batch}, "
                           "{predictions}, vocab_size) for {name} of shape {tokens_shape} "
                           "(position t predicts token t + 1), got {shape}")
                         .format(batch=tokens.shape[0], predictions=seq_len - 1, name="tokens",
                                 tokens_shape=tuple(tokens.shape), shape=tuple(logits.shape)))
    losses = F.cross_entropy(logits.transpose(1, 2), tokens[:, 1:], reduction="none")
    # Prediction i is the target at position i + 1; positions 0 and `period` count as NaN.
    losses = torch.cat([losses.new_full((tokens.shape[0], 1), float("nan")), losses], dim=1)
    losses[:, period] = float("nan")
    per_repeat = losses.view(tokens.shape[0], seq_len // period, period)
    return per_repeat.nanmean(dim=(0, 2))  # (repeats,)
