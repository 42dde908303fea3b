"""What every probe shares: the subject, seeded inputs, and running a check on each layout."""

from __future__ import annotations

import math

import torch

from course_utils.diagnostics.report import FAIL, PASS, Finding
from course_utils.diagnostics.subjects import SELF, Subject, WrongReturn
from course_utils.language import N_, _
from course_utils.learner_code import raised_by_learner
from course_utils.nn.masks import expand_padding_mask, padding_mask

TOLERANCE = 1e-6  # float64 probes: a correct implementation is exact to ~1e-15
FRONT_AXIS_ADVICE = N_(
    "An axis counted from the front (dim=2, q.shape[2], transpose(1, 2)) names another axis once "
    "a heads axis comes in: count from the end (dim=-1, q.shape[-1], transpose(-2, -1)).")
LOG_WEIGHTS = N_(
    "the weights are log-probabilities (log_softmax): every entry is at most 0 and "
    "exp(weights) sums to 1 over each row, not the weights. Attention mixes the values with "
    "the probabilities themselves: weights = torch.softmax(scores, dim=-1).")
# The end of a finding that failed only because the shapes probe did (exercises look for it).
SEE_SHAPES = N_("(see the shapes probe)")


def short_error(error: Exception) -> str:
    """An exception as one line: its type and the first line of its message.

    Used in lesson 08.
    """
    # Only the type: torch's wording changes between versions, our advice does not.
    return type(error).__name__


def shown(value: float) -> str:
    """A size for a finding: two decimals, or two significant digits when two decimals would
    round it to 0 (a leak of 0.0004 must not read "0.00").

    Used in lesson 08.
    """
    if value != 0 and math.isfinite(value) and abs(value) < 0.005:
        return f"{value:.2g}"
    return f"{value:.2f}"


def near(value: float, target: float = 1.0) -> str:
    """``value`` with as many decimals as it takes to tell it from ``target`` (2 to 8): a row
    sum of 0.99951 reads 0.99951, not 1.00.

    Used in lesson 08.
    """
    gap = abs(value - target)
    decimals = 2 if gap == 0 or not math.isfinite(gap) else min(
        8, max(2, 1 - math.floor(math.log10(gap))))
    return f"{value:.{decimals}f}"


def is_log_weights(weights: torch.Tensor) -> bool:
    """Whether ``weights`` are log-probabilities: every entry at most 0 (blocked keys -inf)
    and exp(weights) sums to 1 over each row, while the weights themselves do not.

    Used in lesson 08.
    """
    if weights.isnan().any() or (weights > TOLERANCE).any() or not (weights < 0).any():
        return False
    sums = weights.exp().sum(-1)
    return bool(torch.allclose(sums, torch.ones_like(sums), atol=1e-4))


def reduced_precision(weights: torch.Tensor) -> torch.dtype | None:
    """float16 or bfloat16 when every weight is a number of that dtype (a softmax computed
    in it and cast back), else None.

    Used in lesson 08.
    """
    if weights.dtype not in (torch.float32, torch.float64) or not weights.isfinite().all():
        return None
    for dtype in (torch.bfloat16, torch.float16):  # every in-range bfloat16 is a float16
        if torch.equal(weights, weights.to(dtype).to(weights.dtype)):
            return dtype
    return None


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
        self._batch_mixing: float | None = None

    def varies(self) -> bool:
        """Whether the same inputs give other results from another random state: something
        random (dropout left on) runs inside. Measured once per run."""
        if self._varies is None:
            inputs = self.inputs(12, SELF)
            first, second = (self.subject.call(inputs, SELF.causal(), rng=rng) for rng in (1, 2))
            self._varies = not all(torch.allclose(a, b, atol=TOLERANCE, rtol=0, equal_nan=True)
                                   for a, b in zip(first, second, strict=True))
        return self._varies

    def batch_mixing(self) -> float:
        """How far changing every token of sequence 0 moves the outputs of the other
        sequences (0 when the sequences of a batch are kept apart). Measured once per run,
        without a mask and with a causal one, on the first layout."""
        if self._batch_mixing is None:
            layout = self.subject.layouts[0]
            inputs = self.inputs(15, layout)
            everything = list(range(layout.n_k))
            changed_inputs = self.subject.perturb(inputs, everything, self.generator(150),
                                                  sequence=0, with_queries=True)
            worst = 0.0
            for mask in (None, layout.causal()):
                before, _w = self.subject.call(inputs, mask)
                after, _w = self.subject.call(changed_inputs, mask)
                others_before, others_after = before[1:], after[1:]
                if not torch.equal(others_before.isnan(), others_after.isnan()):
                    worst = math.inf
                    break
                both = others_before.isfinite() & others_after.isfinite()
                worst = max(worst, max_abs((others_after - others_before)[both]))
            self._batch_mixing = worst
        return self._batch_mixing

    def mask_holds(self, weights: torch.Tensor, mask: torch.Tensor) -> bool:
        """Blocked keys have weight 0 and every row sums to 1 (raw: a NaN fails it): the mask
        reached the scores before a softmax over the keys."""
        sums = weights.sum(-1)
        blocked = weights[~mask.expand_as(weights)]
        return bool((blocked.abs() <= TOLERANCE).all()) and torch.allclose(
            sums, torch.ones_like(sums), atol=TOLERANCE)

    def raw_problem(self, output, weights, mask=None, mask_name="", layout=None) -> str | None:
        """What is wrong with raw results for finite inputs, judged before anything else: the
        weights are log-probabilities, or NaN/inf came out (every probe mask leaves each row a
        key it may attend, so no NaN is excusable). None when neither."""
        if is_log_weights(weights):
            return str(LOG_WEIGHTS)
        if bool(output.isfinite().all() and weights.isfinite().all()):
            return None
        bad_rows = ~weights.isfinite().all(-1)  # (..., n_q)
        n_bad, n_rows = int(bad_rows.sum()), bad_rows.numel()
        if mask is None:
            return _(
                "NaN or inf in {n_bad} of {n_rows} rows of the weights (or in the output) for "
                "finite unit-size inputs without a mask: look for a division by zero, log(0), "
                "or inf - inf.").format(n_bad=n_bad, n_rows=n_rows)
        if (self.subject.is_module and layout is not None and mask.shape[-2] == 1
                and bool(bad_rows.any())):
            lengths = torch.tensor(layout.lengths())[:, None]  # (batch, 1)
            padded_queries = torch.arange(layout.n_q) >= lengths  # (batch, n_q)
            per_query = bad_rows.flatten(1, -2).any(1) if bad_rows.dim() > 2 else bad_rows
            if torch.equal(per_query, padded_queries):
                return _(
                    "with the padding mask the rows of the padded queries are NaN: the padding "
                    "was blocked for queries as well as keys, so a padded query sees no key at "
                    "all and its softmax is 0/0. That NaN reaches the next layer through the "
                    "values (0 × NaN is NaN) and the loss. Block keys only, a mask (batch, 1, "
                    "seq_len): a padded query's output is simply ignored.")
        if n_bad == n_rows:
            return _(
                "with the {name} mask every row of the weights is NaN, though the inputs are "
                "finite and every row has a key it may attend (without the mask they are "
                "finite): the masking itself makes the NaN. 0 × (-inf) is NaN, so a mask "
                "built by multiplying with -inf, (~mask) * float('-inf') or (1 - mask) * "
                "-inf, poisons the allowed keys too. Fill instead: scores.masked_fill(~mask, "
                "float('-inf')).").format(name=mask_name)
        return _(
            "with the {name} mask {n_bad} of {n_rows} rows of the weights (or the output) hold "
            "NaN or inf, though the inputs are finite and the mask leaves every row a key it "
            "may attend: the code blocks every key of those rows, so their softmax is 0/0 (a "
            "mask read the other way round or on the wrong axis: see the masked weights "
            "probe), or it makes a NaN where the mask is applied (0 × inf, inf - "
            "inf).").format(name=mask_name, n_bad=n_bad, n_rows=n_rows)

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
                if layout is first or not raised_by_learner(error):
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
