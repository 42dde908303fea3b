"""What every probe shares: the subject, seeded inputs, and running a check on each layout."""

from __future__ import annotations

import torch

from course_utils.diagnostics.report import FAIL, PASS, Finding
from course_utils.diagnostics.subjects import RAISED_BY_SUBJECT, SELF, Subject, WrongReturn
from course_utils.language import N_, _
from course_utils.nn.masks import expand_padding_mask, padding_mask

TOLERANCE = 1e-6  # float64 probes: a correct implementation is exact to ~1e-15
FRONT_AXIS_ADVICE = N_(
    "An axis counted from the front (dim=2, q.shape[2], transpose(1, 2)) names another axis once "
    "a heads axis comes in: count from the end (dim=-1, q.shape[-1], transpose(-2, -1)).")
# The end of a finding that failed only because the shapes probe did (exercises look for it).
SEE_SHAPES = N_("(see the shapes probe)")


def short_error(error: Exception) -> str:
    """An exception as one line: its type and the first line of its message.

    Used in lesson 08.
    """
    # Only the type: torch's wording changes between versions, our advice does not.
    return type(error).__name__


def max_abs(t: torch.Tensor) -> float:
    """The largest absolute entry of a tensor, as a float.

    Used in lesson 08.
    """
    return float(t.abs().max()) if t.numel() else 0.0


def sizes_of(inputs) -> str:
    """The shapes of probe inputs as text, for a finding.

    Used in lesson 08.
    """
    names = ("q", "k", "v") if len(inputs) == 3 else ("x",)
    return ", ".join(f"{n} {tuple(t.shape)}" for n, t in zip(names, inputs, strict=True))


class Probing:
    """One diagnose() run: the subject and its seed; every probe draws its inputs from its
    own generator, ``seed + offset``, so a report depends only on the implementation.

    Used in lesson 08.
    """

    def __init__(self, subject: Subject, seed: int):
        self.subject = subject
        self.seed = seed
        subject.rng_seed = seed
        self._varies: bool | None = None

    def varies(self) -> bool:
        """Whether the same inputs give other results from another random state: something
        random (dropout left on) runs inside. Measured once per run."""
        if self._varies is None:
            inputs = self.inputs(12, SELF)
            first, second = (self.subject.call(inputs, SELF.causal(), rng=rng) for rng in (1, 2))
            self._varies = not all(torch.allclose(a, b, atol=TOLERANCE, rtol=0, equal_nan=True)
                                   for a, b in zip(first, second, strict=True))
        return self._varies

    def mask_holds(self, weights: torch.Tensor, mask: torch.Tensor) -> bool:
        """Blocked keys have weight 0 and every finite row sums to 1: the mask reached the
        scores before a softmax over the keys."""
        sums = weights.sum(-1)
        finite = sums.isfinite()
        blocked = weights[~mask.expand_as(weights)].nan_to_num()
        return bool((blocked.abs() <= TOLERANCE).all()) and torch.allclose(
            sums[finite], torch.ones_like(sums[finite]), atol=TOLERANCE)

    def generator(self, offset: int) -> torch.Generator:
        return torch.Generator().manual_seed(self.seed + offset)

    def inputs(self, offset, layout, dtype=torch.float64, scale=1.0):
        return self.subject.make_inputs(self.generator(offset), layout, dtype, scale)

    def padding_for(self, layout, offset) -> torch.Tensor:
        if not self.subject.is_module:
            return layout.padding()
        # A module's weights may or may not have a heads axis: ask it.
        _output, weights = self.subject.call(self.inputs(offset, layout))
        return expand_padding_mask(padding_mask(layout.lengths(), layout.n_k),
                                   with_heads=weights.dim() == 4)

    def over_layouts(self, name, check, passed: str, layouts=None) -> Finding:
        """Run ``check(layout)`` (a fail message or None) on every layout; first failure wins."""
        layouts = self.subject.layouts if layouts is None else layouts
        first = layouts[0]
        for layout in layouts:
            try:
                message = check(layout)
            except WrongReturn:
                raise
            except Exception as error:
                if layout is first or not getattr(error, RAISED_BY_SUBJECT, False):
                    raise
                return Finding(name, FAIL, _(
                    "right on {label} inputs, but with a heads axis it raised {error} "
                    "{see_shapes}").format(label=first.label, error=short_error(error),
                                           see_shapes=SEE_SHAPES))
            if message is None:
                continue
            if isinstance(message, Finding):
                return message
            if layout is not first:
                message = _(
                    "right on {label} inputs, but with a heads axis and n_q ≠ n_k, d_v ≠ d_k: "
                    "{message} {FRONT_AXIS_ADVICE}").format(
                    label=first.label, message=message, FRONT_AXIS_ADVICE=FRONT_AXIS_ADVICE)
            return Finding(name, FAIL, message)
        return Finding(name, PASS, passed)
