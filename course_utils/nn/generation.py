"""Text from a language model, one token at a time: greedy decoding and sampling, with a KV cache.

Each step feeds the model what it has not seen, reads the logits of the last position,
picks the next token and appends it. Without a cache the model re-reads the whole context
every step (cropped to its last ``model.max_len`` tokens); with one
(:class:`course_utils.nn.kv_cache.KVCache`) it reads only the newest token and its attention
finds the earlier keys and values in the cache: the same tokens and, up to float rounding,
the same logits, for much less work. Any model following the protocol of
:mod:`course_utils.nn.kv_cache` can be driven.
"""

from __future__ import annotations

import torch
from torch import nn

from course_utils.checks import (
    require_bool,
    require_generator,
    require_instance,
    require_int_tensor,
    require_positive_int,
    require_temperature,
    require_values,
)
from course_utils.language import _
from course_utils.nn.kv_cache import KVCache


def _require_max_len(model: nn.Module) -> int | None:
    if not hasattr(model, "max_len"):
        raise TypeError(_(
            "model should expose max_len (an int, or None for no limit) as in "
            "course_utils.nn.kv_cache's protocol; {kind} has none"
        ).format(kind=type(model).__name__))
    max_len = model.max_len
    return None if max_len is None else require_positive_int("model.max_len", max_len)


def _require_pickable(name: str, logits: torch.Tensor) -> torch.Tensor:
    """Logits a token can be picked from: values (not 'meta'), no NaN, and in each row at
    least one entry above -inf (greedy decoding would return a token from NaN, and
    torch.multinomial fails on rows of probabilities that are NaN or all 0)."""
    require_values(name, logits)
    nan_rows = logits.isnan().any(dim=-1)  # (batch,)
    if bool(nan_rows.any()):
        raise ValueError(_(
            "{name} should be numbers (or -inf), got NaN in row(s) {rows}: no token can be "
            "picked from them; find where the NaN is born"
        ).format(name=name, rows=nan_rows.nonzero()[:, 0].tolist()))
    blocked_rows = (logits == float("-inf")).all(dim=-1)
    if bool(blocked_rows.any()):
        raise ValueError(_(
            "{name} should leave each row at least one token above -inf, got row(s) {rows} all "
            "-inf"
        ).format(name=name, rows=blocked_rows.nonzero()[:, 0].tolist()))
    return logits


def _require_sampling(temperature, top_k, generator) -> float:
    """How to pick a token, checked: ``temperature``, ``top_k`` (None or positive) and a
    ``generator`` for sampling; returns the temperature."""
    temperature = require_temperature("temperature", temperature)
    if top_k is not None:
        require_positive_int("top_k", top_k)
    require_generator("generator", generator)
    if temperature > 0 and generator is None:
        raise ValueError(_(
            "sampling (temperature > 0) draws with a generator: pass "
            "generator=torch.Generator().manual_seed(seed)"
        ))
    return temperature


def _require_top_k_fits(top_k: int | None, vocab_size: int) -> None:
    if top_k is not None and top_k > vocab_size:
        raise ValueError(_(
            "top_k should be at most vocab_size={vocab_size}, got {top_k}"
        ).format(vocab_size=vocab_size, top_k=top_k))


def next_token(logits, temperature: float = 0.0, top_k: int | None = None,
               generator: torch.Generator | None = None) -> torch.Tensor:
    """Pick one token per row of ``logits`` ``(batch, vocab_size)``: ``(batch,)`` long.

    ``temperature=0``: the most likely token (greedy). Otherwise sample from
    ``softmax(logits / temperature)``, restricted to the ``top_k`` most likely tokens when
    given, drawing with ``generator`` (required: no global random state).

    Used in lesson 12.
    """
    if not isinstance(logits, torch.Tensor) or not logits.is_floating_point() \
            or logits.dim() != 2:
        got = (f"{logits.dtype} of shape {tuple(logits.shape)}"
               if isinstance(logits, torch.Tensor) else type(logits).__name__)
        raise TypeError(_(
            "logits should be a float tensor (batch, vocab_size), got {got}"
        ).format(got=got))
    temperature = _require_sampling(temperature, top_k, generator)
    _require_top_k_fits(top_k, logits.shape[-1])
    _require_pickable("logits", logits)
    return _pick(logits, temperature, top_k, generator)


def _pick(logits: torch.Tensor, temperature: float, top_k: int | None,
          generator: torch.Generator | None) -> torch.Tensor:
    """:func:`next_token` on arguments already checked (:func:`generate` checks once, then
    picks a token at every step)."""
    if temperature == 0:
        return logits.argmax(dim=-1)
    scaled = logits.float() / temperature
    if top_k is not None:
        # Keep exactly the top_k largest (ties broken by torch.topk), -inf elsewhere.
        kept = scaled.topk(top_k, dim=-1).indices
        scaled = torch.full_like(scaled, float("-inf")).scatter(-1, kept,
                                                                scaled.gather(-1, kept))
    probabilities = torch.softmax(scaled, dim=-1)  # (batch, vocab_size)
    return torch.multinomial(probabilities, 1, generator=generator)[:, 0]


@torch.no_grad()
def generate(model: nn.Module, tokens, max_new_tokens: int, use_cache: bool = True,
             temperature: float = 0.0, top_k: int | None = None,
             generator: torch.Generator | None = None) -> torch.Tensor:
    """Continue ``tokens`` ``(batch, seq_len)`` by ``max_new_tokens`` tokens of ``model``.

    Returns ``(batch, seq_len + max_new_tokens)`` long: the prompt, then what was generated.
    ``temperature``, ``top_k`` and ``generator`` choose each token as :func:`next_token`
    does (``temperature=0``: greedy). ``use_cache=True`` reads each new token once, through
    a :class:`~course_utils.nn.kv_cache.KVCache`, so the model must be able to see all
    ``seq_len + max_new_tokens - 1`` positions it is fed (``model.max_len``);
    ``use_cache=False`` re-reads the context every step, cropped to the last ``max_len``
    tokens, so it can go on for ever.

    Used in lessons 12, 14 and 17.
    """
    require_instance("model", model, nn.Module, _("a torch.nn.Module"))
    tokens = require_int_tensor("tokens", tokens, "(batch, seq_len)", "token ids")
    if tokens.shape[0] == 0 or tokens.shape[1] == 0:
        raise ValueError(_(
            "{name} should hold at least one token per sequence (a prompt), got shape "
            "{tokens_shape}"
        ).format(name="tokens", tokens_shape=tuple(tokens.shape)))
    require_positive_int("max_new_tokens", max_new_tokens)
    require_bool("use_cache", use_cache)
    temperature = _require_sampling(temperature, top_k, generator)
    max_len = _require_max_len(model)
    fed = tokens.shape[1] + max_new_tokens - 1  # the last token is produced, never fed
    if use_cache and max_len is not None and fed > max_len:
        raise ValueError(
            _(
                "with use_cache=True the model reads seq_len + max_new_tokens - 1 = "
                "{seq_len} + {max_new_tokens} - 1 = {fed} positions, more than its "
                "max_len={max_len}; generate fewer tokens, or pass use_cache=False to crop the "
                "context to the last {max_len} tokens"
            ).format(seq_len=tokens.shape[1], max_new_tokens=max_new_tokens, fed=fed,
                     max_len=max_len)
        )
    cache = KVCache() if use_cache else None
    out = tokens
    feed = tokens  # (batch, n_new): what the model has not read yet
    for _step in range(max_new_tokens):
        if cache is None and max_len is not None:
            feed = out[:, -max_len:]
        logits = model(feed, cache=cache)  # (batch, n_new, vocab_size)
        returned = f"the logits {type(model).__name__} returned"
        if not (isinstance(logits, torch.Tensor) and logits.is_floating_point()
                and logits.dim() == 3 and logits.shape[:2] == feed.shape):
            got = (f"{logits.dtype} of shape {tuple(logits.shape)}"
                   if isinstance(logits, torch.Tensor) else type(logits).__name__)
            raise ValueError(_(
                "{returned} should be a float tensor (batch, n_new, vocab_size) with (batch, "
                "n_new) = {feed_shape}, got {got}"
            ).format(returned=returned, feed_shape=tuple(feed.shape), got=got))
        _require_top_k_fits(top_k, logits.shape[-1])
        _require_pickable(returned, logits[:, -1])
        chosen = _pick(logits[:, -1], temperature, top_k, generator)  # (batch,)
        out = torch.cat((out, chosen[:, None].to(out.dtype)), dim=1)
        feed = chosen[:, None] if cache is not None else out
    return out
