"""Input checks that turn a confusing traceback into a message in the course notation.

Every public function and class of ``course_utils`` validates its arguments with these, so
each rule is written once. A failed check raises ``TypeError`` (wrong kind of thing) or
``ValueError`` (right kind, wrong value or shape) whose message names the argument, what was
expected and what came. Each ``require_*`` returns its (checked) value, so it reads as
``x = require_tensor("x", x, "(batch, seq_len, d_model)")``.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from course_utils.language import _


def _describe(value) -> str:
    """What came, for an error message: a tensor's dtype and shape, else type and value."""
    if isinstance(value, torch.Tensor):
        return _("a {dtype} tensor of shape {shape}").format(dtype=value.dtype,
                                                             shape=tuple(value.shape))
    text = repr(value)
    return f"{type(value).__name__} {text if len(text) <= 40 else text[:37] + '...'}"


def require_tensor(name: str, value, notation: str) -> torch.Tensor:
    """Return ``value`` if it is a floating-point tensor of at least the dims ``notation`` names.

    ``notation`` is the expected shape in the course notation, e.g. ``"(..., n_q, d_k)"``;
    it appears in the error so the learner sees what was expected next to what came.
    """
    if not isinstance(value, torch.Tensor):
        raise TypeError(_("{name} should be a torch.Tensor of shape {notation}, got {kind}").format(
            name=name, notation=notation, kind=type(value).__name__))
    if not value.is_floating_point():
        raise TypeError(_(
            "{name} should be a floating-point tensor of shape {notation}, got dtype {dtype}; "
            "token ids must go through an embedding first"
        ).format(name=name, notation=notation, dtype=value.dtype))
    min_rank = notation.count(",") + 1 - notation.count("...")
    if value.dim() < min_rank:
        raise ValueError(_(
            "{name} should have shape {notation} (at least {min_rank} dims), got shape {shape}"
        ).format(name=name, notation=notation, min_rank=min_rank, shape=tuple(value.shape)))
    return value


def _padding_hint(target_rank: int) -> str:
    """How a key padding mask looks for scores of ``target_rank`` dims (at least 3)."""
    ones, nones = ", 1" * (target_rank - 2), "None, " * (target_rank - 2)
    return _("for these scores a padding mask is (batch{ones}, n_k); from (batch, n_k) that is "
             "mask[:, {nones}:]").format(ones=ones, nones=nones)


def require_bool_mask(mask, target_shape: torch.Size, notation: str) -> torch.Tensor:
    """Return ``mask`` if it is a bool tensor that broadcasts to the scores' ``target_shape``.

    The rank rule removes the one silent mistake broadcasting allows: a mask of 1 or 2 dims
    is ``(n_k,)`` or ``(n_q, n_k)``, shared by every batch element and head; a mask of 3 or
    more dims must have exactly as many dims as the scores (``1`` where it is shared), so a
    padding mask ``(batch, n_k)`` can never be read as ``(n_q, n_k)`` nor a batch axis as a
    heads axis. ``notation`` is the scores' shape in the course notation.
    """
    if not isinstance(mask, torch.Tensor):
        raise TypeError(_("mask should be a bool torch.Tensor broadcastable to {notation}, "
                          "got {kind}").format(notation=notation, kind=type(mask).__name__))
    if mask.dtype != torch.bool:
        raise TypeError(_(
            "mask should be bool (True = may attend), got dtype {dtype}; "
            "for a 0/1 mask use mask.bool(), for an additive float mask see lesson 05"
        ).format(dtype=mask.dtype))
    target_shape = torch.Size(target_shape)
    if mask.dim() >= 3 and mask.dim() != len(target_shape):
        raise ValueError(_(
            "mask of shape {shape} has {dims} dims but the scores {notation} = {target} have "
            "{target_dims}: a mask is either (n_q, n_k), shared by the whole batch, or has one "
            "axis per axis of the scores (size 1 where it is shared); {hint}"
        ).format(shape=tuple(mask.shape), dims=mask.dim(), notation=notation,
                 target=tuple(target_shape), target_dims=len(target_shape),
                 hint=_padding_hint(max(len(target_shape), 3))))
    try:
        broadcast = torch.broadcast_shapes(mask.shape, target_shape)
    except RuntimeError:
        broadcast = None
    if broadcast != target_shape:
        raise ValueError(_(
            "mask of shape {shape} does not broadcast to the scores' shape {notation} = "
            "{target}; {hint}"
        ).format(shape=tuple(mask.shape), notation=notation, target=tuple(target_shape),
                 hint=_padding_hint(max(len(target_shape), 3))))
    return mask


def require_same_device(**tensors) -> torch.device | None:
    """Check that the given tensors (``None`` ones are skipped) share one device; return it.

    Called with the argument names, e.g. ``require_same_device(q=q, k=k, v=v, mask=mask)``,
    so the error names each tensor and where it lives.
    """
    given = {name: t for name, t in tensors.items() if isinstance(t, torch.Tensor)}
    devices = {t.device for t in given.values()}
    if len(devices) > 1:
        where = ", ".join(_("{name} on {device}").format(name=name, device=t.device)
                          for name, t in given.items())
        raise ValueError(_("{names} should be on one device, got {where}; move them with "
                           ".to(device)").format(names=", ".join(given), where=where))
    return next(iter(devices), None)


def require_same_dtype(**tensors) -> torch.dtype | None:
    """Check that the given tensors (``None`` ones are skipped) share one dtype; return it."""
    given = {name: t for name, t in tensors.items() if isinstance(t, torch.Tensor)}
    dtypes = {t.dtype for t in given.values()}
    if len(dtypes) > 1:
        what = ", ".join(_("{name} is {dtype}").format(name=name, dtype=t.dtype)
                         for name, t in given.items())
        raise TypeError(_("{names} should share one dtype, got: {what}; convert with "
                          ".to(dtype)").format(names=", ".join(given), what=what))
    return next(iter(dtypes), None)


def _first_parameter(module: nn.Module) -> nn.Parameter | None:
    """``next(module.parameters(), None)`` without building the generator: models check
    their input in every layer of every decoding step, and the generator costs more than the
    check."""
    for parameter in module._parameters.values():
        if parameter is not None:
            return parameter
    for child in module._modules.values():
        parameter = None if child is None else _first_parameter(child)
        if parameter is not None:
            return parameter
    return None


def require_matches_module(name: str, x: torch.Tensor, module: nn.Module) -> torch.Tensor:
    """Return tensor ``x`` if it has the dtype and device of ``module``'s parameters."""
    parameter = _first_parameter(module)
    if parameter is None:
        return x
    if x.dtype != parameter.dtype:
        raise TypeError(_(
            "{name} has dtype {dtype} but the {module}'s weights are {weights}; convert one of "
            "them, e.g. {name}.to({weights}) or module.to({dtype})"
        ).format(name=name, dtype=x.dtype, module=type(module).__name__, weights=parameter.dtype))
    if x.device != parameter.device:
        raise ValueError(_(
            "{name} is on {device} but the {module}'s weights are on {weights}; move one of "
            "them with .to(device)"
        ).format(name=name, device=x.device, module=type(module).__name__,
                 weights=parameter.device))
    return x


def require_float_dtype(name: str, dtype) -> torch.dtype:
    """Return ``dtype`` if it is a floating-point ``torch.dtype`` (an argument, not a tensor)."""
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise TypeError(_(
            "{name} should be a floating-point torch.dtype such as torch.float32, got {got}"
        ).format(name=name,
                 got=_describe(dtype) if not isinstance(dtype, torch.dtype) else dtype))
    return dtype


def require_positive_int(name: str, value) -> int:
    """Return ``value`` if it is an int >= 1 (a size: seq_len, d_model, num_heads, steps...)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(_("{name} should be a positive int, got {kind} {value!r}").format(
            name=name, kind=type(value).__name__, value=value))
    if value < 1:
        raise ValueError(_("{name} should be a positive int, got {value}").format(
            name=name, value=value))
    return value


def require_bool(name: str, value) -> bool:
    """Return ``value`` if it is ``True`` or ``False`` (a switch such as ``bias``)."""
    if not isinstance(value, bool):
        raise TypeError(_("{name} should be True or False, got {got}").format(
            name=name, got=_describe(value)))
    return value


def require_positive_number(name: str, value) -> float:
    """Return ``value`` if it is a finite real number > 0 (lr, eps, a norm bound...)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(_("{name} should be a positive number, got {got}").format(
            name=name, got=_describe(value)))
    if not (math.isfinite(value) and value > 0):
        raise ValueError(_("{name} should be a positive number (finite, > 0), got {value!r}")
                         .format(name=name, value=value))
    return value


def require_temperature(name: str, value) -> float:
    """Return ``value`` as a float if it is a finite number >= 0 (a sampling temperature;
    0 = greedy)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(_("{name} should be a number >= 0 (0 = greedy), got {got}").format(
            name=name, got=_describe(value)))
    if not (math.isfinite(value) and value >= 0):
        raise ValueError(_("{name} should be a finite number >= 0 (0 = greedy), got {value!r}")
                         .format(name=name, value=value))
    return float(value)


def require_key_padding(name: str, mask, batch_and_n_src) -> torch.Tensor:
    """A padding mask on the memory as ``(batch, n_src)`` (True = real token); ``(batch, 1,
    n_src)``, which broadcasts over the queries, is accepted too."""
    batch, n_src = batch_and_n_src
    if (isinstance(mask, torch.Tensor) and mask.dtype == torch.bool
            and tuple(mask.shape) in ((batch, n_src), (batch, 1, n_src))):
        return mask.reshape(batch, n_src)
    got = (_("{dtype} of shape {shape}").format(dtype=mask.dtype, shape=tuple(mask.shape))
           if isinstance(mask, torch.Tensor) else type(mask).__name__)
    raise ValueError(_("{name} should be a bool (batch, n_src) = {shape} tensor (or (batch, 1, "
                       "n_src)), True at real tokens, got {got}").format(
        name=name, shape=(batch, n_src), got=got))


def require_token_id_list(name: str, ids, vocab_size: int) -> list[int]:
    """Return ``ids`` as a list of ints in ``0 .. vocab_size - 1``: ids to decode, given as a
    list of ints or a ``(seq_len,)`` integer tensor."""
    if isinstance(ids, torch.Tensor):
        ids = require_int_tensor(name, ids, "(seq_len,)", "token ids").tolist()
    if not isinstance(ids, (list, tuple)) or not all(
            isinstance(i, int) and not isinstance(i, bool) for i in ids):
        raise TypeError(_("{name} should be a list of int token ids or a (seq_len,) integer "
                          "tensor, got {got}").format(name=name, got=_describe(ids)))
    bad = [i for i in ids if not 0 <= i < vocab_size]
    if bad:
        raise ValueError(_("{name} should be token ids in 0..{last}, got {got}").format(
            name=name, last=vocab_size - 1, got=bad[0]))
    return list(ids)


def require_seed(name: str, value) -> int:
    """Return ``value`` if it is an int seed that Python, NumPy and torch all accept."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(_("{name} should be an int from 0 to 2**32 - 1, got {got}").format(
            name=name, got=_describe(value)))
    if not 0 <= value < 2**32:
        raise ValueError(_("{name} should be an int from 0 to 2**32 - 1, got {value}").format(
            name=name, value=value))
    return value


def require_generator(name: str, value) -> torch.Generator | None:
    """Return ``value`` if it is a ``torch.Generator`` or None (then the global one is used)."""
    if value is not None and not isinstance(value, torch.Generator):
        raise TypeError(_(
            "{name} should be a torch.Generator (e.g. torch.Generator().manual_seed(0)) or "
            "None, got {got}"
        ).format(name=name, got=_describe(value)))
    return value


def require_divisible(d_model, num_heads, num_heads_name: str = "num_heads") -> int:
    """Check that ``d_model`` splits into ``num_heads`` equal heads; return ``d_k``.

    Both must be positive ints; ``num_heads_name`` is how the caller's argument is called.
    """
    require_positive_int("d_model", d_model)
    require_positive_int(num_heads_name, num_heads)
    if d_model % num_heads:
        raise ValueError(_(
            "d_model={d_model} is not divisible by {heads_name}={heads}: every head needs the "
            "same width d_k = d_model / {heads_name}"
        ).format(d_model=d_model, heads_name=num_heads_name, heads=num_heads))
    return d_model // num_heads


def require_kv_heads(num_heads: int, num_kv_heads) -> int:
    """``num_kv_heads`` (``None``: ``num_heads``) if it splits the query heads into equal groups.

    Grouped-query attention shares each key/value head among ``num_heads / num_kv_heads``
    query heads, so ``num_kv_heads`` must be a positive int that divides ``num_heads``.
    """
    num_kv_heads = num_heads if num_kv_heads is None else num_kv_heads
    require_positive_int("num_kv_heads", num_kv_heads)
    if num_heads % num_kv_heads:
        raise ValueError(_(
            "num_heads={num_heads} is not divisible by num_kv_heads={num_kv_heads}: each "
            "key/value head serves the same number of query heads"
        ).format(num_heads=num_heads, num_kv_heads=num_kv_heads))
    return num_kv_heads


# The integer dtypes nn.Embedding (and the index ops below it) accept.
INDEX_DTYPES = (torch.int64, torch.int32)


def _what(what: str) -> str:
    """The words ``require_int_tensor`` is given for its integers, in the current language."""
    return {"integers": _("integers"), "token ids": _("token ids"),
            "positions": _("positions")}.get(what, what)


def require_int_tensor(name: str, value, notation: str, what: str = "integers") -> torch.Tensor:
    """Return ``value`` if it is an integer tensor with exactly the dims ``notation`` names.

    ``what`` says what the integers are (``"token ids"``, ``"positions"``) in the message.
    Only torch.long and torch.int32, the dtypes ``nn.Embedding`` accepts.
    """
    if not isinstance(value, torch.Tensor):
        raise TypeError(_("{name} should be an integer torch.Tensor of shape {notation}, got "
                          "{kind}").format(name=name, notation=notation,
                                           kind=type(value).__name__))
    if value.dtype not in INDEX_DTYPES:
        # nn.Embedding and indexing take int64 or int32 only: int8/int16/uint8 would pass an
        # "is it an integer?" test here and fail deeper down with torch's own words.
        convertible = not (value.is_floating_point() or value.is_complex()
                           or value.dtype == torch.bool)
        message = (_("{name} should hold integer {what} (torch.long, or torch.int32) of shape "
                     "{notation}, got dtype {dtype}; convert with .long()") if convertible else
                   _("{name} should hold integer {what} (torch.long, or torch.int32) of shape "
                     "{notation}, got dtype {dtype}"))
        raise TypeError(message.format(name=name, what=_what(what), notation=notation,
                                       dtype=value.dtype))
    rank = sum(1 for part in notation.strip("()").split(",") if part.strip())  # "(n,)": 1
    if value.dim() != rank:
        raise ValueError(_("{name} should have shape {notation}, got shape {shape}").format(
            name=name, notation=notation, shape=tuple(value.shape)))
    if what == "token ids":  # ids are looked up, counted and compared: they need values
        require_values(name, value)
    return value


def require_values(name: str, value: torch.Tensor) -> torch.Tensor:
    """Return tensor ``value`` unless it is on the ``meta`` device, which has shapes but no
    values: ids, counts and anything read with ``.item()`` need values."""
    if value.device.type == "meta":
        raise ValueError(_("{name} should be a tensor with values (e.g. on the CPU), got one on "
                           "the 'meta' device, which holds shapes only").format(name=name))
    return value


def require_token_ids(name: str, tokens, vocab_size: int,
                      notation: str = "(batch, seq_len)") -> torch.Tensor:
    """Return ``tokens`` if it is an integer tensor of ids in ``0..vocab_size-1``.

    ``notation`` sets the number of dims (the default: exactly 2).
    """
    require_int_tensor(name, tokens, notation, "token ids")
    if tokens.numel() and (
        tokens.min() < 0 or tokens.max() >= vocab_size
    ):
        raise ValueError(_(
            "{name} should be token ids in 0..{last} (vocab_size={vocab_size}), got ids from "
            "{low} to {high}"
        ).format(name=name, last=vocab_size - 1, vocab_size=vocab_size, low=int(tokens.min()),
                 high=int(tokens.max())))
    return tokens


def require_callable(name: str, value):
    """Return ``value`` if it can be called (a function, a lambda, a module)."""
    if not callable(value):
        raise TypeError(_("{name} should be a function to call, got {got}").format(
            name=name, got=_describe(value)))
    return value


def require_int_in_range(name: str, value, low: int, high: int | None = None) -> int:
    """Return ``value`` if it is an int in ``low..high`` (inclusive; no upper end if None)."""
    span = (_("an int >= {low}").format(low=low) if high is None
            else _("an int in {low}..{high}").format(low=low, high=high))
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(_("{name} should be {expected}, got {got}").format(
            name=name, expected=span, got=_describe(value)))
    if value < low or (high is not None and value > high):
        raise ValueError(_("{name} should be {expected}, got {got}").format(
            name=name, expected=span, got=value))
    return value


def require_one_of(name: str, value, options):
    """Return ``value`` if it is one of ``options`` (a rule, an activation, an edition...)."""
    if value not in tuple(options):
        raise ValueError(_("{name} should be one of {options}, got {got!r}").format(
            name=name, options=tuple(options), got=value))
    return value


def require_instance(name: str, value, kind: type, what: str | None = None):
    """Return ``value`` if it is an instance of ``kind``; ``what`` names it in the error."""
    if not isinstance(value, kind):
        expected = what or _("a {kind}").format(kind=f"{kind.__module__}.{kind.__qualname__}")
        raise TypeError(_("{name} should be {expected}, got {got}").format(
            name=name, expected=expected, got=_describe(value)))
    return value


def require_cache_sizes(caller: str, n_q, n_k) -> tuple[int, int]:
    """``(n_q, n_k)`` for a query block aligned with the last n_q of n_k keys (the KV-cache
    convention): positive ints, ``n_k`` defaulting to ``n_q``, and ``n_k >= n_q``."""
    require_positive_int(_("n_q (the sequence length, or the number of queries)"), n_q)
    n_k = n_q if n_k is None else require_positive_int(_("n_k (the number of keys)"), n_k)
    if n_k < n_q:
        raise ValueError(_(
            "{caller} aligns the n_q queries with the last n_q of the n_k keys, so it needs "
            "n_k >= n_q, got n_q={n_q} and n_k={n_k}"
        ).format(caller=caller, n_q=n_q, n_k=n_k))
    return n_q, n_k
