"""Lesson 11's exercises: mutation tables of wrong and right answers (run by test_exercises.py)."""

from __future__ import annotations

import math

import numpy as np
import torch

from course_utils.exercises.l11 import accuracy_by_position, alibi_slopes_exercise, rotate_pair
from course_utils.nn.positions import alibi_slopes
from tests.support.exercise_checks import Mutations


# ------------------------------------------------------------------ rotate a pair
def _turned(x1, x2, angle):
    angle = torch.tensor(angle, dtype=x1.dtype)
    return x1 * angle.cos() - x2 * angle.sin(), x2 * angle.cos() + x1 * angle.sin()


def _clockwise(x1, x2, position, frequency):
    return _turned(x1, x2, -position * frequency)


def _swapped_outputs(x1, x2, position, frequency):
    return _turned(x1, x2, position * frequency)[::-1]


def _position_alone(x1, x2, position, frequency):
    return _turned(x1, x2, float(position))


def _frequency_alone(x1, x2, position, frequency):
    return _turned(x1, x2, frequency)


def _divided(x1, x2, position, frequency):
    return _turned(x1, x2, position / frequency)


def _sin_cos_swapped(x1, x2, position, frequency):
    angle = torch.tensor(position * frequency, dtype=x1.dtype)
    return x1 * angle.sin() - x2 * angle.cos(), x2 * angle.sin() + x1 * angle.cos()


def _degrees(x1, x2, position, frequency):
    return _turned(x1, x2, math.radians(position * frequency))


def _not_a_rotation(x1, x2, position, frequency):  # adds the angle: "RoPE adds a vector"
    return x1 + position * frequency, x2 + position * frequency


def _one_output(x1, x2, position, frequency):
    return _turned(x1, x2, position * frequency)[0]


def _rotation_matrix(x1, x2, position, frequency):
    angle = position * frequency
    rotation = torch.tensor([[math.cos(angle), -math.sin(angle)],
                             [math.sin(angle), math.cos(angle)]], dtype=x1.dtype)
    pairs = torch.stack([x1, x2], dim=-1)[..., None]  # (3, 5, 2, 1): column vectors
    turned = (rotation @ pairs)[..., 0]  # (3, 5, 2)
    return turned[..., 0], turned[..., 1]


def _complex_numbers(x1, x2, position, frequency):
    z = torch.complex(x1, x2) * torch.polar(torch.ones((), dtype=x1.dtype),
                                            torch.tensor(position * frequency, dtype=x1.dtype))
    return z.real, z.imag


def _numpy_floats(x1, x2, position, frequency):
    angle = np.float64(position) * np.float64(frequency)
    return x1 * float(np.cos(angle)) - x2 * float(np.sin(angle)), \
        x2 * float(np.cos(angle)) + x1 * float(np.sin(angle))


def _float32_list(x1, x2, position, frequency):
    angle = torch.tensor(position * frequency, dtype=torch.float32)
    a, b = x1.float(), x2.float()
    return [a * angle.cos() - b * angle.sin(), b * angle.cos() + a * angle.sin()]


# ------------------------------------------------------------------ the ALiBi slopes
def _closed_form_always(num_heads):
    return torch.tensor([2.0 ** (-8 * (h + 1) / num_heads) for h in range(num_heads)])


def _reversed(num_heads):
    return alibi_slopes(num_heads).flip(0)


def _starts_at_one(num_heads):
    return torch.tensor([2.0 ** (-8 * h / num_heads) for h in range(num_heads)])


def _halving(num_heads):
    return 0.5 ** torch.arange(1, num_heads + 1, dtype=torch.float32)


def _rounded_up_power(num_heads):
    power = 2 ** math.ceil(math.log2(num_heads))
    return _closed_form_always(power)[:num_heads]


def _one_fewer(num_heads):
    return alibi_slopes(num_heads)[:-1]


def _integer_exponent(num_heads):
    return torch.tensor([2.0 ** -(8 * (h + 1) // num_heads) for h in range(num_heads)])


def _recursive_float64(num_heads):
    def power_of_two(n):
        start = 2 ** (-8 / n)
        return [start ** (h + 1) for h in range(n)]
    if math.log2(num_heads).is_integer():
        return torch.tensor(power_of_two(num_heads), dtype=torch.float64)
    closest = 2 ** math.floor(math.log2(num_heads))
    rest = _recursive_float64(2 * closest)[0::2][: num_heads - closest]
    return torch.cat([torch.tensor(power_of_two(closest), dtype=torch.float64), rest])


def _python_list(num_heads):
    power = 2 ** int(math.log2(num_heads))
    slopes = [2 ** (-8 * (h + 1) / power) for h in range(power)]
    extra = [2 ** (-8 * (h + 1) / (2 * power)) for h in range(0, 2 * power, 2)]
    return (slopes + extra)[:num_heads]


def _numpy_array(num_heads):
    return torch.from_numpy(np.array(_python_list(num_heads), dtype=np.float32))


def _float16(num_heads):
    return alibi_slopes(num_heads).half()


# ------------------------------------------------------------------ accuracy at every position
def _ahead(logits, tokens, k):
    return (logits.argmax(-1)[:, :-k] == tokens[:, k:]).float().mean(0)


def _own_position(logits, tokens, k):
    return (logits.argmax(-1)[:, k:] == tokens[:, k:]).float().mean(0)


def _percent(logits, tokens, k):
    return 100 * (logits.argmax(-1)[:, k:] == tokens[:, :-k]).float().mean(0)


def _count(logits, tokens, k):
    return (logits.argmax(-1)[:, k:] == tokens[:, :-k]).sum(0)


def _probability(logits, tokens, k):
    probabilities = logits.softmax(-1)[:, k:]  # (batch, seq_len - k, vocab_size)
    return probabilities.gather(-1, tokens[:, :-k, None]).squeeze(-1).mean(0)


def _one_number(logits, tokens, k):
    return (logits.argmax(-1)[:, k:] == tokens[:, :-k]).float().mean()


def _rolled(logits, tokens, k):  # positions 0..k-1 compared with the end of the sequence
    return (logits.argmax(-1) == tokens.roll(k, dims=1)).float().mean(0)


def _over_positions(logits, tokens, k):
    return (logits.argmax(-1)[:, k:] == tokens[:, :-k]).float().mean(1)


def _k_plus_one(logits, tokens, k):
    return (logits.argmax(-1)[:, k + 1:] == tokens[:, :-k - 1]).float().mean(0)


def _loop(logits, tokens, k):
    accuracies = []
    for t in range(k, tokens.shape[1]):
        right = logits[:, t].argmax(-1) == tokens[:, t - k]
        accuracies.append(right.double().mean())
    return torch.stack(accuracies)


def _max_equals(logits, tokens, k):
    wanted = logits[:, k:].gather(-1, tokens[:, :-k, None]).squeeze(-1)  # the answer's logit
    return (wanted == logits[:, k:].amax(-1)).to(torch.float64).mean(0)


def _numpy(logits, tokens, k):
    predictions = logits.numpy().argmax(axis=-1)
    return list((predictions[:, k:] == tokens.numpy()[:, :-k]).mean(axis=0))


def _sum_over_batch(logits, tokens, k):
    right = torch.eq(logits.argmax(dim=2)[:, k:], tokens[:, : tokens.shape[1] - k])
    return right.sum(dim=0) / tokens.shape[0]


def _small_angle(x1, x2, position, frequency):  # cos a ≈ 1 - a²/2, sin a ≈ a
    a = position * frequency
    cos, sin = 1 - a * a / 2, a
    return x1 * cos - x2 * sin, x2 * cos + x1 * sin


def _in_float16_cast_back(x1, x2, position, frequency):
    h1, h2 = x1.half(), x2.half()  # the right formula, in half precision
    angle = torch.tensor(position * frequency, dtype=torch.float16)
    return (h1 * angle.cos() - h2 * angle.sin()).to(x1.dtype), \
        (h2 * angle.cos() + h1 * angle.sin()).to(x1.dtype)


def _modulo_pi(x1, x2, position, frequency):  # a half turn taken for a whole one
    return _turned(x1, x2, math.fmod(position * frequency, math.pi))


def _angle_modulo_two_pi(x1, x2, position, frequency):
    return _turned(x1, x2, math.remainder(position * frequency, 2 * math.pi))


_TRIED = (8, 4, 1, 16, 12, 6)
_SLOPE_TABLE = {n: alibi_slopes(n) for n in range(1, 17)}


def _batch_of_40(logits, tokens, k):
    right = logits.argmax(-1)[:, k:] == tokens[:, :-k]
    return right.float().sum(dim=0) / 40  # the first cases' batch size


def _first_sequence_only(logits, tokens, k):
    return (logits[0].argmax(-1)[k:] == tokens[0, :-k]).float()


def _ids_below_ten(logits, tokens, k):
    answers = torch.nn.functional.one_hot(tokens, 10).argmax(-1)  # ids up to 9 only
    return (logits.argmax(-1)[:, k:] == answers[:, :-k]).float().mean(0)


def _gathered_logits(logits, tokens, k):
    answer_logits = logits[:, k:].gather(-1, tokens[:, :-k, None])[..., 0]  # (batch, n - k)
    return (answer_logits >= logits[:, k:].amax(-1)).double().mean(0)


MUTATIONS = {
    rotate_pair: Mutations(
        wrong=[
            ("clockwise", _clockwise, "other way"),
            ("outputs swapped", _swapped_outputs, "swapped"),
            ("position alone", _position_alone, "position alone"),
            ("frequency alone", _frequency_alone, "frequency alone"),
            ("divided", _divided, "divided"),
            ("sin and cos swapped", _sin_cos_swapped, "sin and cos"),
            ("degrees", _degrees, "degrees"),
            ("adds the angle", _not_a_rotation, "not a rotation"),
            ("one output", _one_output, "two tensors"),
            ("float16 pair", lambda x1, x2, position, frequency: tuple(
                t.half() for t in _turned(x1, x2, position * frequency)),
             "only about 3 significant digits"),
            ("small-angle approximation", _small_angle, "not a rotation"),
            ("computed in float16, cast back", _in_float16_cast_back,
             "right to about 3 significant digits only"),
            ("angle modulo π", _modulo_pi, "position=1000, frequency=0.5), x1_new has the right"),
        ],
        right=[
            ("angle reduced modulo 2π first", _angle_modulo_two_pi),
            ("rotation matrix", _rotation_matrix),
            ("complex numbers", _complex_numbers),
            ("numpy floats", _numpy_floats),
            ("float32 list", _float32_list),
        ],
    ),
    alibi_slopes_exercise: Mutations(
        wrong=[
            ("closed form for 12 heads", _closed_form_always, "not a power of two"),
            ("reversed", _reversed, "reverse order"),
            ("starts at 1", _starts_at_one, "first slope is 1"),
            ("halving", _halving, "halve"),
            ("rounded up power", _rounded_up_power, "alibi_slopes(12)"),
            ("one fewer", _one_fewer, "one slope per head"),
            ("integer exponent", _integer_exponent, "alibi_slopes(16)"),
            ("the counts tried special-cased",
             lambda n: alibi_slopes(n) if n in _TRIED else _closed_form_always(n),
             "alibi_slopes(5): 5 is not a power of two"),
            ("a table up to 16 heads", lambda n: _SLOPE_TABLE[n], "your code raised KeyError"),
        ],
        right=[
            ("recursive float64", _recursive_float64),
            ("python list", _python_list),
            ("numpy array", _numpy_array),
            ("float16", _float16),
        ],
    ),
    accuracy_by_position: Mutations(
        wrong=[
            ("k places ahead", _ahead, "k places ahead"),
            ("own position", _own_position, "its own position"),
            ("percent", _percent, "percentages"),
            ("count", _count, "counted"),
            ("probability", _probability, "probability"),
            ("one number", _one_number, "one number"),
            ("first k positions included", _rolled, "no token k places back"),
            ("averaged over positions", _over_positions, "averaged over the positions"),
            ("k + 1 back", _k_plus_one, "off by one"),
            ("batch size 40 written in", _batch_of_40,
             "accuracy_by_position(logits (13, 10, 300), tokens, k=2) has the right shape"),
            ("the first sequence only", _first_sequence_only, "has the right shape"),
            ("token ids below 10 only", _ids_below_ten, "your code raised RuntimeError"),
        ],
        right=[
            ("loop in float64", _loop),
            ("max equals the answer's logit", _max_equals),
            ("numpy list", _numpy),
            ("sum over the batch", _sum_over_batch),
            ("the answer's logit is the row's max", _gathered_logits),
        ],
    ),
}
