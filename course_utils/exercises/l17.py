"""Exercises of lesson 17, long context.

- ``ring_order``: which slots of a ring buffer of ``window`` slots hold the last positions,
  oldest first, after ``seen`` positions were written (position p in slot p % window);
- ``band_mask_for_chunk``: the sliding-window mask of ``n_new`` new tokens reading ``n_k``
  keys, the new tokens being the last ``n_new`` of them;
- ``layout_reach``: how far back the last position can read through a stack of layers.
"""

from __future__ import annotations

import operator

import torch

from course_utils.exercises import Exercise, Incorrect, as_number, attempt, expect_shape
from course_utils.language import N_, _


def _as_int_list(value, what: str) -> list[int]:
    """The learner's slots (a list, tuple or 1-D integer tensor) as a list of ints."""
    if isinstance(value, torch.Tensor):
        if value.dim() != 1 or value.is_floating_point() or value.dtype == torch.bool:
            raise Incorrect(_("{what} should be a 1-D list of integer slots, got a {dtype} "
                              "tensor of shape {shape}").format(
                what=what, dtype=value.dtype, shape=tuple(value.shape)))
        return [int(item) for item in value.tolist()]
    if isinstance(value, (list, tuple, range)):
        slots = []
        for item in value:
            if isinstance(item, (bool, float)) or (isinstance(item, torch.Tensor) and (
                    item.dim() != 0 or item.is_floating_point() or item.dtype == torch.bool)):
                break
            try:
                slots.append(operator.index(item))  # an int, a NumPy int, a 0-d int tensor
            except TypeError:
                break
        else:
            return slots
    raise Incorrect(_("{what} should be a list of integer slots, got {got!r}").format(
        what=what, got=value))


# ------------------------------------------------------------------ the ring buffer's order
def _reference_ring_order(seen, window):
    held = min(seen, window)  # positions seen - held .. seen - 1 are kept
    oldest = seen - held
    return [(oldest + i) % window for i in range(held)]  # position p sits in slot p % window


RING_CASES = ((10, 4), (3, 4), (4, 4), (13, 5), (7, 7), (9, 3), (1, 6), (6, 1), (25, 8))


def _ring_mistakes(seen, window):
    """(wrong slots, message) for each classic mistake on this case."""
    held = min(seen, window)
    return (
        (_reference_ring_order(seen, window)[::-1], N_(
            "{what}: your slots run newest first; the attention wants them oldest first")),
        ([(seen + i) % window for i in range(window)], N_(
            "{what}: before the ring is full it holds only the {seen} positions seen so far, "
            "in slots 0 .. {last}")),
        ([(seen + 1 + i) % window for i in range(held)], N_(
            "{what}: off by one: the oldest kept position is seen - held, so it sits in slot "
            "(seen - held) % window")),
        ([(seen - 1 + i) % window for i in range(held)], N_(
            "{what}: off by one: the oldest kept position is seen - held, so it sits in slot "
            "(seen - held) % window")),
        (list(range(held)), N_(
            "{what}: you ignored the wrap-around: once the ring is full, new positions "
            "overwrite the oldest slot, so the oldest is no longer in slot 0")),
        (list(range(seen - held, seen)), N_(
            "{what}: those are the positions, not the slots: position p sits in slot "
            "p % window")),
    )


def _check_ring_order(answer):
    for seen, window in RING_CASES:
        what = _("ring_order(seen={seen}, window={window})").format(seen=seen, window=window)
        slots = _as_int_list(attempt(answer, seen, window), what)
        expected = _reference_ring_order(seen, window)
        if slots == expected:
            continue
        for wrong, message in _ring_mistakes(seen, window):
            if slots == wrong:
                raise Incorrect(message.format(what=what, seen=seen, last=seen - 1))
        raise Incorrect(_("{what} gave slots {got}; expected {expected}").format(
            what=what, got=slots, expected=expected))


ring_order = Exercise(
    title=N_("the ring buffer's order"),
    checker=_check_ring_order,
    reference=_reference_ring_order,
    hints=(
        N_("The ring keeps the last min(seen, window) positions: seen - held .. seen - 1."),
        N_("Position p is written to slot p % window; list those slots from the oldest "
           "position to the newest."),
    ),
)


# ------------------------------------------------------------------ the band for new tokens
def _reference_band_mask_for_chunk(n_new, n_k, window):
    query = torch.arange(n_k - n_new, n_k)[:, None]  # (n_new, 1): positions of the new tokens
    key = torch.arange(n_k)[None, :]  # (1, n_k)
    return (key <= query) & (query - key < window)  # (n_new, n_k), True = may attend


BAND_CASES = ((1, 9, 4), (3, 10, 4), (5, 5, 2), (2, 6, 10), (4, 7, 1), (3, 12, 5))


def _band(n_new, n_k, low, high, top_left=False):
    """Keys j with query - j in [low, high), queries at the end (or at 0.. if top_left)."""
    start = 0 if top_left else n_k - n_new
    query = torch.arange(start, start + n_new)[:, None]
    gap = query - torch.arange(n_k)[None, :]
    return (gap >= low) & (gap < high)


def _band_mistakes(n_new, n_k, window):
    """(wrong mask, message) for each classic mistake on this case."""
    return (
        (_band(n_new, n_k, 0, window, top_left=True), N_(
            "{what}: your new tokens sit at positions 0 .. n_new - 1; they are the last "
            "n_new of the n_k positions (new token i is at n_k - n_new + i)")),
        (_band(n_new, n_k, 0, window + 1), N_(
            "{what}: each query sees window + 1 keys: the window of {window} counts the "
            "query itself, so key j is allowed when position - window < j <= position")),
        (_band(n_new, n_k, 1, window), N_(
            "{what}: a query must see its own key too (the diagonal)")),
        (_band(n_new, n_k, 0, window) | _band(n_new, n_k, -window + 1, 1), N_(
            "{what}: your window reaches into the future: a query may not see the new tokens "
            "after it")),
        (~_band(n_new, n_k, 0, window), N_(
            "{what}: your mask is inverted: True means may attend")),
        (_band(n_new, n_k, 0, n_k + 1), N_(
            "{what}: that is the causal mask; the window of {window} is missing")),
    )


def _check_band_mask_for_chunk(answer):
    for n_new, n_k, window in BAND_CASES:
        what = _("band_mask_for_chunk(n_new={n_new}, n_k={n_k}, window={window})").format(
            n_new=n_new, n_k=n_k, window=window)
        mask = attempt(answer, n_new, n_k, window)
        expect_shape(mask, (n_new, n_k), what)
        if mask.dtype != torch.bool:
            raise Incorrect(_("{what} should be a bool mask (True = may attend), got "
                              "{dtype}").format(what=what, dtype=mask.dtype))
        expected = _reference_band_mask_for_chunk(n_new, n_k, window)
        if torch.equal(mask, expected):
            continue
        for wrong, message in _band_mistakes(n_new, n_k, window):
            if torch.equal(mask, wrong):
                raise Incorrect(message.format(what=what, window=window))
        raise Incorrect(_("{what} differs from the sliding window in {count} of its "
                          "entries").format(what=what, count=int((mask != expected).sum())))


band_mask_for_chunk = Exercise(
    title=N_("a band mask for new tokens"),
    checker=_check_band_mask_for_chunk,
    reference=_reference_band_mask_for_chunk,
    hints=(
        N_("New token i sits at position n_k - n_new + i; key j sits at position j."),
        N_("Allow key j when it is not in the future (j <= position) and within the window "
           "(position - j < window)."),
    ),
)


# ------------------------------------------------------------------ the reach of a layout
def _reference_layout_reach(windows, seq_len):
    if any(window is None for window in windows):
        return seq_len - 1  # a global layer links the last position to every earlier one
    return min(seq_len - 1, sum(window - 1 for window in windows))  # W - 1 more per layer


REACH_CASES = (([4, 4, 4], 100), ([6, 3], 100), ([4, None, 4], 50), ([8] * 6, 20),
               ([1, 1], 10), ([2], 10), ([None], 7), ([128, 64], 1000))


def _reach_mistakes(windows, seq_len):
    """(wrong reach, message) for each classic mistake on this case."""
    local = [window for window in windows if window is not None]
    sum_minus_one = sum(window - 1 for window in local)
    return (
        (min(seq_len - 1, sum(local)), N_(
            "{what}: off by one per layer: a window of W reaches W - 1 positions back "
            "(it includes the query itself)")),
        (sum(local), N_(
            "{what}: off by one per layer: a window of W reaches W - 1 positions back "
            "(it includes the query itself)")),
        (min(seq_len - 1, max(local, default=1) - 1), N_(
            "{what}: that is one layer's reach; each stacked layer carries the information "
            "W - 1 positions further")),
        (min(seq_len - 1, sum_minus_one), N_(
            "{what}: a global layer (None) lets the last position read every earlier "
            "position at once")),
        (sum_minus_one, N_(
            "{what}: the reach cannot exceed seq_len - 1 = {limit}: there is nothing further "
            "back")),
        (len(windows) * (windows[0] - 1) if windows[0] is not None else -1, N_(
            "{what}: the layers may have different windows; add up each layer's W - 1")),
    )


def _check_layout_reach(answer):
    for windows, seq_len in REACH_CASES:
        what = _("layout_reach({windows}, seq_len={seq_len})").format(
            windows=windows, seq_len=seq_len)
        value = as_number(attempt(answer, list(windows), seq_len), what)
        expected = _reference_layout_reach(windows, seq_len)
        if value == expected:
            continue
        for wrong, message in _reach_mistakes(windows, seq_len):
            if value == wrong:
                raise Incorrect(message.format(what=what, limit=seq_len - 1))
        raise Incorrect(_("{what} gave {got}; expected {expected}").format(
            what=what, got=value, expected=expected))


layout_reach = Exercise(
    title=N_("the reach of a layout"),
    checker=_check_layout_reach,
    reference=_reference_layout_reach,
    hints=(
        N_("One layer with a window of W lets a position read W - 1 positions back; the next "
           "layer reads positions that have already read theirs."),
        N_("A global layer (None) reaches everything; and nothing lies further back than "
           "seq_len - 1."),
    ),
)
