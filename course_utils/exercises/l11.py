"""Exercises of lesson 11, positions.

- ``rotate_pair``: turn one RoPE pair of dimensions by the angle ``position * frequency``;
- ``alibi_slopes_exercise``: the ALiBi slope of every head, the paper's rule included;
- ``accuracy_by_position``: a copy-k-back model's accuracy at every position, to see where a
  scheme fails on a longer sequence than it was trained on.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from course_utils.exercises import (
    Exercise,
    Incorrect,
    attempt,
    expect_close,
    expect_shape,
    reject_half_precision,
    reject_low_precision,
)
from course_utils.language import N_, _
from course_utils.nn.positions import alibi_slopes


# ------------------------------------------------------------------ rotate a pair
def _turn(x1, x2, angle, cos=torch.cos, sin=torch.sin):
    """(x1, x2) turned counterclockwise by ``angle`` radians (``cos``/``sin`` swappable)."""
    angle = torch.tensor(angle, dtype=x1.dtype)
    return x1 * cos(angle) - x2 * sin(angle), x2 * cos(angle) + x1 * sin(angle)


def _reference_rotate_pair(x1, x2, position, frequency):
    angle = torch.tensor(position * frequency, dtype=x1.dtype)  # radians
    cos, sin = torch.cos(angle), torch.sin(angle)
    return x1 * cos - x2 * sin, x2 * cos + x1 * sin  # the pair turned counterclockwise


def _pair_cases():
    generator = torch.Generator().manual_seed(0)
    x1 = torch.randn(3, 5, dtype=torch.float64, generator=generator)
    x2 = torch.randn(3, 5, dtype=torch.float64, generator=generator)
    # Then angles no small-angle approximation or table covers: past 2π, far past it (500
    # radians), position 0, and a middle frequency at a long position.
    return x1, x2, ((7, 0.3), (2, 1.0), (100, 0.01), (5, 0.0001), (3, 2.5), (1000, 0.5),
                    (0, 0.7), (4096, 0.0031))


def _as_pair(result, shape, what):
    if not isinstance(result, (tuple, list)) or len(result) != 2:
        got = (_("{count} values").format(count=len(result))
               if isinstance(result, (tuple, list)) else type(result).__name__)
        raise Incorrect(_(
            "{what} should return the turned pair (x1_new, x2_new), two tensors; got "
            "{got}").format(what=what, got=got))
    for value in result:
        expect_shape(value, shape, what)
    return result


def _pair_mistakes(x1, x2, position, frequency):
    """(wrong pair, message) for each classic mistake, at this position and frequency."""
    angle = position * frequency
    return (
        (_turn(x1, x2, -angle), N_(
            "{what}: your pair turned the other way (clockwise): x1_new = x1 cos − x2 sin and "
            "x2_new = x2 cos + x1 sin")),
        (_turn(x1, x2, angle)[::-1], N_(
            "{what}: your two outputs are swapped: return (x1_new, x2_new) in that order")),
        (_turn(x1, x2, position), N_(
            "{what}: you turned by the position alone; the angle is position × frequency (each "
            "pair turns at its own speed)")),
        (_turn(x1, x2, frequency), N_(
            "{what}: you turned by the frequency alone; the angle is position × frequency, so it "
            "grows with the position")),
        (_turn(x1, x2, position / frequency), N_(
            "{what}: you divided the position by the frequency; multiply: the angle is "
            "position × frequency")),
        (_turn(x1, x2, angle, cos=torch.sin, sin=torch.cos), N_(
            "{what}: sin and cos are swapped: x1_new = x1 cos − x2 sin")),
        (_turn(x1, x2, math.radians(angle)), N_(
            "{what}: you read the angle in degrees; torch.cos and torch.sin take radians, and the "
            "angle position × frequency is in radians already")),
    )


def _check_rotate_pair(answer):
    x1, x2, cases = _pair_cases()
    for position, frequency in cases:
        what = _("rotate_pair(x1, x2, position={position}, frequency={frequency})").format(
            position=position, frequency=frequency)
        new1, new2 = _as_pair(attempt(answer, x1, x2, position, frequency), x1.shape, what)
        expected = _reference_rotate_pair(x1, x2, position, frequency)
        # float16 rounding first: the mistakes below would misread it as another slip.
        reject_half_precision(new1, expected[0], _("{what}, x1_new").format(what=what))
        reject_half_precision(new2, expected[1], _("{what}, x2_new").format(what=what))
        if new1.is_floating_point() and new2.is_floating_point():
            got = torch.stack([new1.detach().double(), new2.detach().double()])

            def near(pair, got=got):
                return torch.allclose(got, torch.stack(pair).double(), atol=1e-6)

            if not near(expected):
                for value, want, part in ((new1, expected[0], "x1_new"),
                                          (new2, expected[1], "x2_new")):
                    reject_low_precision(value, want, f"{what}, {part}")
                for mistake, message in _pair_mistakes(x1, x2, position, frequency):
                    if near(mistake):
                        raise Incorrect(message.format(what=what))
                if not torch.allclose(got.square().sum(0), x1.square() + x2.square(), atol=1e-5):
                    raise Incorrect(_(
                        "{what}: the length of the pair changed, so this is not a rotation: a "
                        "rotation keeps x1² + x2²").format(what=what))
        expect_close(new1, expected[0], _("{what}, x1_new").format(what=what), atol=1e-6)
        expect_close(new2, expected[1], _("{what}, x2_new").format(what=what), atol=1e-6)


rotate_pair = Exercise(
    title=N_("turn a RoPE pair"),
    checker=_check_rotate_pair,
    reference=_reference_rotate_pair,
    hints=(
        N_("The angle is position * frequency, in radians."),
        N_("A rotation of (x1, x2) by the angle a counterclockwise is (x1 cos a − x2 sin a, "
           "x2 cos a + x1 sin a)."),
        N_("torch.cos and torch.sin need a tensor: torch.tensor(angle, dtype=x1.dtype)."),
    ),
)


# ------------------------------------------------------------------ the ALiBi slopes
# Powers of two and not; then other counts of both kinds, so that no special case for the
# counts tried first passes.
SLOPE_HEADS = (8, 4, 1, 16, 12, 6, 5, 3, 24, 2, 10, 32, 7)


def _reference_slopes(num_heads):
    def power_of_two(n):  # 2^(-8/n), 2^(-16/n), ..., 2^(-8)
        return [2.0 ** (-8.0 * (h + 1) / n) for h in range(n)]
    power = 1
    while 2 * power <= num_heads:
        power *= 2
    return torch.tensor(power_of_two(power) + power_of_two(2 * power)[0::2][:num_heads - power])


def _check_slopes(answer):
    for num_heads in SLOPE_HEADS:
        what = _("alibi_slopes({num_heads})").format(num_heads=num_heads)
        result = attempt(answer, num_heads)
        if isinstance(result, (list, tuple, np.ndarray)):
            result = torch.tensor([float(value) for value in result], dtype=torch.float64)
        expected = alibi_slopes(num_heads).double()
        expect_shape(result, expected.shape, _("{what} (one slope per head)").format(what=what))
        got = result.detach().double() if result.is_floating_point() else result
        if got.is_floating_point() and num_heads > 1 and not torch.allclose(
                got, expected, rtol=2e-3):
            if torch.allclose(got, expected.flip(0), rtol=1e-4):
                raise Incorrect(_(
                    "{what}: your slopes are in reverse order: head 0 gets the steepest slope "
                    "2^(-8/num_heads), the last head the gentlest").format(what=what))
            if torch.allclose(got, expected * 2.0 ** (8.0 / num_heads), rtol=1e-4):
                raise Incorrect(_(
                    "{what}: your first slope is 1: the exponent is -8(h+1)/num_heads for head "
                    "h = 0, 1, ..., so the first slope is 2^(-8/num_heads)").format(what=what))
            if torch.allclose(got, 0.5 ** torch.arange(1, num_heads + 1).double(), rtol=1e-4):
                raise Incorrect(_(
                    "{what}: your slopes halve from head to head whatever the number of heads; "
                    "the ratio is 2^(-8/num_heads), 1/2 only for 8 heads").format(what=what))
            closed = torch.tensor([2.0 ** (-8.0 * (h + 1) / num_heads) for h in range(num_heads)],
                                  dtype=torch.float64)
            if num_heads & (num_heads - 1) and torch.allclose(got, closed, rtol=1e-4):
                raise Incorrect(_(
                    "{what}: {num_heads} is not a power of two, and the paper's rule is then "
                    "different: the slopes of the largest power of two p below num_heads, then "
                    "every other slope of 2p heads").format(what=what, num_heads=num_heads))
        expect_close(result, expected, what, atol=1e-7, rtol=2e-3)  # float16 too


alibi_slopes_exercise = Exercise(
    title=N_("the ALiBi slopes"),
    checker=_check_slopes,
    reference=_reference_slopes,
    hints=(
        N_("For a power of two n, head h (from 0) gets the slope 2^(-8(h+1)/n)."),
        N_("Otherwise take p, the largest power of two below num_heads: the p slopes of p heads, "
           "then the slopes of 2p heads at even indices 0, 2, 4, ... until you have num_heads."),
    ),
)


# ------------------------------------------------------------------ accuracy at every position
def _reference_accuracy_by_position(logits, tokens, k):
    predictions = logits.argmax(dim=-1)  # (batch, seq_len): the predicted token ids
    right = predictions[:, k:] == tokens[:, :-k]  # position t answers the token at t - k
    return right.float().mean(dim=0)  # (seq_len - k,): positions k, k + 1, ..., seq_len - 1


def _planted_case(batch_size, seq_len, vocab_size, k, generator):
    """Logits whose argmax is right at position t with a rate that changes with t.

    The wrong predictions are the token k + 1 places back, so comparing with the wrong
    offset, or in the wrong direction, gives other numbers than the right comparison.
    """
    tokens = torch.randint(vocab_size, (batch_size, seq_len), generator=generator)
    logits = torch.randn(batch_size, seq_len, vocab_size, generator=generator)
    rate = torch.linspace(0.9, 0.1, seq_len)  # (seq_len,) the share of right answers per position
    right = torch.rand(batch_size, seq_len, generator=generator) < rate
    for t in range(seq_len):
        answer = tokens[:, t - k] if t >= k else tokens[:, t]
        fallback = tokens[:, t - k - 1] if t > k else (answer + 1) % vocab_size
        planted = torch.where(right[:, t], answer, fallback)
        logits[torch.arange(batch_size), t, planted] += 10.0  # the argmax of position t
    return logits, tokens


# batch, seq_len, vocab, k: then other batch sizes (one sequence too) and token ids in the
# hundreds, so that no batch size or small id table written in passes.
ACCURACY_CASES = ((40, 12, 7, 3), (40, 9, 5, 1), (40, 11, 6, 4), (13, 10, 300, 2),
                  (1, 8, 50, 5), (7, 15, 1000, 1))


def _accuracy_mistakes(logits, tokens, k):
    """(wrong answer, message) for each classic mistake of the right shape on this case."""
    predictions = logits.argmax(dim=-1)  # (batch, seq_len)
    expected = _reference_accuracy_by_position(logits, tokens, k)
    probability = logits.softmax(dim=-1)[:, k:].gather(-1, tokens[:, :-k, None])[..., 0]
    return (
        ((predictions[:, :-k] == tokens[:, k:]).float().mean(0), N_(
            "{what}: you compared the prediction at position t with the token k places ahead "
            "(at t + k); the answer at position t is the token k places back, at t - k")),
        ((predictions[:, k:] == tokens[:, k:]).float().mean(0), N_(
            "{what}: you compared each prediction with the token at its own position; the "
            "answer at position t is the token k places back, at t - k")),
        (expected * 100, N_(
            "{what}: your accuracies are percentages; return fractions between 0 and 1")),
        (expected * tokens.shape[0], N_(
            "{what}: you counted the right answers; divide by the batch size to get a "
            "fraction")),
        (probability.mean(0), N_(
            "{what}: you averaged the probability of the right token; accuracy counts a "
            "position as right when the argmax is the right token")),
    )


def _check_accuracy_by_position(answer):
    generator = torch.Generator().manual_seed(0)
    for batch_size, seq_len, vocab_size, k in ACCURACY_CASES:
        logits, tokens = _planted_case(batch_size, seq_len, vocab_size, k, generator)
        what = _("accuracy_by_position(logits {shape}, tokens, k={k})").format(
            shape=tuple(logits.shape), k=k)
        result = attempt(answer, logits, tokens, k)
        if isinstance(result, (list, tuple, np.ndarray)):
            result = torch.tensor(np.asarray(result, dtype=np.float64))
        expected = _reference_accuracy_by_position(logits, tokens, k)
        if isinstance(result, torch.Tensor) and result.dim() == 0:
            raise Incorrect(_(
                "{what}: you returned one number for all positions; return one accuracy per "
                "position k, k + 1, ..., seq_len - 1, shape {shape}").format(
                what=what, shape=tuple(expected.shape)))
        if isinstance(result, torch.Tensor) and tuple(result.shape) == (seq_len,):
            raise Incorrect(_(
                "{what}: positions 0 .. k-1 have no token k places back, so they have no "
                "answer: return positions k .. seq_len - 1, shape {shape}").format(
                what=what, shape=tuple(expected.shape)))
        if isinstance(result, torch.Tensor) and tuple(result.shape) in (
                (seq_len - k - 1,), (seq_len - k + 1,)):
            raise Incorrect(_(
                "{what}: your offset is off by one: you returned {count} positions; the token "
                "exactly k places back gives positions k .. seq_len - 1, shape {shape}").format(
                what=what, count=result.shape[0], shape=tuple(expected.shape)))
        if isinstance(result, torch.Tensor) and tuple(result.shape) == (batch_size,):
            raise Incorrect(_(
                "{what}: you averaged over the positions, one number per sequence; average "
                "over the batch (dim 0), one number per position").format(what=what))
        expect_shape(result, expected.shape, what)
        got = result.detach().double()
        if not torch.allclose(got, expected.double(), atol=1e-6):
            for wrong, message in _accuracy_mistakes(logits, tokens, k):
                if torch.allclose(got, wrong.double(), atol=1e-6):
                    raise Incorrect(message.format(what=what))
        if not result.is_floating_point():
            raise Incorrect(_(
                "{what} has dtype {dtype}: turn the right/wrong booleans into floats before "
                "averaging (.float().mean(dim=0))").format(what=what, dtype=result.dtype))
        expect_close(result, expected, what, atol=1e-6, rtol=0)


accuracy_by_position = Exercise(
    title=N_("accuracy at every position"),
    checker=_check_accuracy_by_position,
    reference=_reference_accuracy_by_position,
    hints=(
        N_("The prediction at every position is logits.argmax(dim=-1), shape (batch, seq_len)."),
        N_("Position t answers tokens[:, t - k]: compare predictions[:, k:] with tokens[:, :-k]."),
        N_("Average the right/wrong booleans over the batch: .float().mean(dim=0)."),
    ),
)
