"""Lesson 17's exercises: mutation tables (walked by tests/test_exercises.py) and references."""

from __future__ import annotations

import numpy as np
import torch

from course_utils.exercises.l17 import band_mask_for_chunk, layout_reach, ring_order
from course_utils.nn.masks import band_mask, causal_mask
from tests.support.exercise_checks import Mutations

# --- Exercise 1: the ring buffer's order -------------------------------------------------------

RING_WRONG = [
    ("newest first", lambda seen, w: ring_order.reference(seen, w)[::-1], "newest first"),
    ("all slots before the ring is full",
     lambda seen, w: [(seen + i) % w for i in range(w)], "before the ring is full"),
    ("oldest one slot late", lambda seen, w: [(seen + 1 + i) % w for i in range(min(seen, w))],
     "off by one"),
    ("oldest one slot early", lambda seen, w: [(seen - 1 + i) % w for i in range(min(seen, w))],
     "off by one"),
    ("no wrap-around", lambda seen, w: list(range(min(seen, w))), "wrap-around"),
    ("positions, not slots", lambda seen, w: list(range(seen - min(seen, w), seen)),
     "positions, not the slots"),
    ("a float tensor", lambda seen, w: torch.tensor(ring_order.reference(seen, w)).float(),
     "integer slots"),
    ("one slot per window", lambda seen, w: [seen % w], "expected"),
]

RING_RIGHT = [
    ("arange modulo", lambda seen, w: torch.arange(seen - min(seen, w), seen) % w),
    ("roll once full",
     lambda seen, w: torch.arange(w).roll(-(seen % w)) if seen >= w else torch.arange(seen)),
    ("a numpy loop", lambda seen, w: [int(p) % w for p in np.arange(max(0, seen - w), seen)]),
    ("a tuple", lambda seen, w: tuple(p % w for p in range(max(0, seen - w), seen))),
]


# --- Exercise 2: a band mask for new tokens ----------------------------------------------------

def _band_by_loops(n_new, n_k, window):
    mask = torch.zeros(n_new, n_k, dtype=torch.bool)
    for i in range(n_new):
        position = n_k - n_new + i
        for j in range(max(0, position - window + 1), position + 1):
            mask[i, j] = True
    return mask


def _band_from_triangles(n_new, n_k, window):
    ones = torch.ones(n_new, n_k, dtype=torch.bool)
    return ones.tril(n_k - n_new) & ones.triu(n_k - n_new - window + 1)


def _top_left(n_new, n_k, window):
    query = torch.arange(n_new)[:, None]
    gap = query - torch.arange(n_k)[None, :]
    return (gap >= 0) & (gap < window)


BAND_WRONG = [
    ("aligned top-left", _top_left, "last"),
    ("window + 1 keys", lambda n, k, w: band_mask(n, k, window=w + 1), "window + 1 keys"),
    ("diagonal left out", lambda n, k, w: _no_diagonal(n, k, w), "its own key"),
    ("looks ahead", lambda n, k, w: band_mask(n, k, window=w) | _future(n, k, w), "future"),
    ("inverted", lambda n, k, w: ~band_mask(n, k, window=w), "inverted"),
    ("causal only", lambda n, k, w: causal_mask(n, k), "window of"),
    ("float mask", lambda n, k, w: band_mask(n, k, window=w).float(), "bool mask"),
    ("square", lambda n, k, w: band_mask(n, window=w), "shape"),
]


def _no_diagonal(n_new, n_k, window):
    query = torch.arange(n_k - n_new, n_k)[:, None]
    gap = query - torch.arange(n_k)[None, :]
    return (gap >= 1) & (gap < window)


def _future(n_new, n_k, window):
    query = torch.arange(n_k - n_new, n_k)[:, None]
    gap = query - torch.arange(n_k)[None, :]
    return (gap < 0) & (gap > -window)


BAND_RIGHT = [
    ("loops", _band_by_loops),
    ("two triangles", _band_from_triangles),
    ("the package's band_mask", lambda n, k, w: band_mask(n, k, window=w)),
    ("causal minus the far past",
     lambda n, k, w: causal_mask(n, k) & ~torch.ones(n, k, dtype=torch.bool).tril(k - n - w)),
]


# --- Exercise 3: the reach of a layout ---------------------------------------------------------

def _reach_by_masks(windows, seq_len):
    """Compose the layers' masks: who can the last position read after all of them?"""
    reads = torch.eye(seq_len, dtype=torch.bool)
    for window in windows:
        mask = causal_mask(seq_len) if window is None else band_mask(seq_len, window=window)
        reads = (mask.float() @ reads.float()) > 0
    return seq_len - 1 - int(reads[-1].nonzero()[0])


def _reach_by_loop(windows, seq_len):
    reach = 0
    for window in windows:
        if window is None:
            return seq_len - 1
        reach += window - 1
    return min(reach, seq_len - 1)


REACH_WRONG = [
    ("L·W", lambda ws, n: n - 1 if None in ws else min(n - 1, sum(ws)), "off by one"),
    ("one layer only", lambda ws, n: min(n - 1, max(w for w in ws if w is not None) - 1)
     if any(w is not None for w in ws) else 0, "one layer's reach"),
    ("global ignored", lambda ws, n: min(n - 1, sum(w - 1 for w in ws if w is not None)),
     "global layer"),
    ("not capped", lambda ws, n: n - 1 if None in ws else sum(w - 1 for w in ws),
     "cannot exceed"),
    ("first window times layers", lambda ws, n: n - 1 if None in ws
     else min(n - 1, len(ws) * (ws[0] - 1)), "different windows"),
    ("a string", lambda ws, n: "far", "number"),
    ("product of windows", lambda ws, n: n - 1 if None in ws
     else min(n - 1, int(np.prod(ws)) - 1), "expected"),
]

REACH_RIGHT = [
    ("composed masks", _reach_by_masks),
    ("a loop", _reach_by_loop),
    ("a float", lambda ws, n: float(layout_reach.reference(ws, n))),
    ("a tensor", lambda ws, n: torch.tensor(layout_reach.reference(ws, n))),
]


MUTATIONS = {
    ring_order: Mutations(wrong=RING_WRONG, right=RING_RIGHT),
    band_mask_for_chunk: Mutations(wrong=BAND_WRONG, right=BAND_RIGHT),
    layout_reach: Mutations(wrong=REACH_WRONG, right=REACH_RIGHT),
}
