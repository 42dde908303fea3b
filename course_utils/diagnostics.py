"""Probes that catch the classic attention bugs and say, in plain words, where to look.

``diagnose(attention)`` accepts either

- an attention *function* ``f(q, k, v, mask=None) -> (output, weights)`` with q
  ``(..., n_q, d_k)``, k ``(..., n_k, d_k)``, v ``(..., n_k, d_v)``, a bool mask
  broadcastable to ``(..., n_q, n_k)`` (True = may attend), output ``(..., n_q, d_v)`` and
  weights ``(..., n_q, n_k)``; or
- a self-attention *module* whose ``forward(x, mask=None)`` takes x
  ``(batch, seq_len, d_model)`` and returns ``(output, weights)``, weights
  ``(batch, seq_len, seq_len)`` or ``(batch, num_heads, seq_len, seq_len)``.

It returns a :class:`Report`: one :class:`Finding` per probe (its name, whether it passed,
and a message). A function is probed on two layouts, ``(batch, n_q, d_k)`` with n_q = n_k
(self-attention, where square shapes hide transposes) and ``(batch, num_heads, n_q, d_k)``
with n_q ≠ n_k and d_v ≠ d_k, so an axis counted from the front (``dim=2``,
``q.shape[2]``, ``transpose(1, 2)``) cannot pass. Every probe draws its inputs from its own
seeded generator, so a report depends only on the implementation, and the global random
state is left alone.
"""

from __future__ import annotations

import copy
import re
import textwrap
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from course_utils.checks import require_positive_int, require_seed, require_tensor
from course_utils.language import N_, _, join_sentences
from course_utils.masks import expand_padding_mask, padding_mask

PASS, FAIL, SKIP = "pass", "fail", "skip"

SHAPES = "shapes"
ROWS_SUM_TO_1 = "rows sum to 1"
MASKED_WEIGHTS = "masked weights are 0"
CAUSAL_LEAK = "causal leak"
PADDING_LEAK = "padding leak"
SCORE_SCALE = "score scale"
OUTPUT_MIX = "output = weights @ v"
SHARED_QKV = "shared Q/K/V weights"
NAN_INF = "NaN/inf"
DTYPE_DEVICE = "dtype and device"
FLOAT16_MASKING = "float16 masking"
PROBES = (SHAPES, ROWS_SUM_TO_1, MASKED_WEIGHTS, CAUSAL_LEAK, PADDING_LEAK, SCORE_SCALE,
          OUTPUT_MIX, SHARED_QKV, NAN_INF, DTYPE_DEVICE, FLOAT16_MASKING)

# Sizes of the probe inputs: every axis gets a different size, so a transposed or
# misplaced axis cannot hide behind a square toy example.
_BATCH, _HEADS, _N_Q, _N_K, _D_K, _D_V = 2, 3, 5, 7, 8, 12
_SEQ_LEN = 6
_TOLERANCE = 1e-6  # float64 probes: a correct implementation is exact to ~1e-15
_MARKS = {PASS: "✓", FAIL: "✗", SKIP: "-"}
_FRONT_AXIS_ADVICE = N_(
    "An axis counted from the front (dim=2, q.shape[2], transpose(1, 2)) names another axis once "
    "a heads axis comes in: count from the end (dim=-1, q.shape[-1], transpose(-2, -1)).")
# The end of a finding that failed only because the shapes probe did (exercises look for it).
SEE_SHAPES = N_("(see the shapes probe)")

# Chinese has no spaces to break lines at: a line may end after any Chinese character, but
# never inside a run of Latin letters or digits (a number is never cut in two).
_WRAP_TOKEN = re.compile(r"\s+|[\u2e80-\u9fff\u3000-\u303f\uff00-\uffef]|"
                         r"[^\s\u2e80-\u9fff\u3000-\u303f\uff00-\uffef]+")
# Full-width comma, full stop, colon, semicolon, enumeration comma, closing bracket, !, ? and
# closing quote: CJK typography never starts a line with them.
_NO_LINE_START = set("\uff0c\u3002\uff1a\uff1b\u3001\uff09\uff01\uff1f\u201d")


def _width(chunk: str) -> int:
    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in chunk)


def _fill(message: str, head: str, width: int = 100) -> str:
    """``textwrap.fill`` for text without wide (CJK) characters; otherwise lines broken by
    display width, at any wide character."""
    indent = " " * len(head)
    if all(_width(character) == 1 for character in message):
        return textwrap.fill(message, width=width, initial_indent=head, subsequent_indent=indent)
    lines, line, space = [], head, False
    for token in _WRAP_TOKEN.findall(message):
        if token.isspace():
            space = True
            continue
        piece = (" " if space else "") + token
        space = False
        if (_width(line + piece) > width and line.strip() and token not in _NO_LINE_START
                and line != head):
            lines.append(line)
            line, piece = indent, token
        line += piece
    lines.append(line)
    return "\n".join(lines)


@dataclass(frozen=True)
class Finding:
    """The result of one probe: ``status`` is ``"pass"``, ``"fail"`` or ``"skip"``."""

    probe: str
    status: str
    message: str

    @property
    def passed(self) -> bool:
        return self.status == PASS


@dataclass(frozen=True, repr=False)
class Report:
    """All findings for one implementation; ``print(report)`` shows them one per line."""

    subject: str
    findings: tuple[Finding, ...]

    @property
    def passed(self) -> bool:
        """True when no probe failed (skipped probes do not count against it)."""
        return not self.failures

    @property
    def failures(self) -> tuple[Finding, ...]:
        return tuple(f for f in self.findings if f.status == FAIL)

    @property
    def skipped(self) -> tuple[Finding, ...]:
        return tuple(f for f in self.findings if f.status == SKIP)

    def __getitem__(self, probe: str) -> Finding:
        for finding in self.findings:
            if finding.probe == probe:
                return finding
        names = ", ".join(repr(f.probe) for f in self.findings)
        raise KeyError(f"no probe named {probe!r}; this report has {names}")

    def verdict(self) -> str:
        """One line: how many probes ran, how many failed, which were skipped."""
        ran = len(self.findings) - len(self.skipped)
        verdict = (_("all {ran} probes that ran passed").format(ran=ran)
                   if self.passed else
                   _(
                       "{n_failures} of {ran} probes that ran failed").format(
                       n_failures=len(self.failures), ran=ran))
        if self.skipped:
            verdict += _("; skipped: {probes}").format(
                probes=_(", ").join(f.probe for f in self.skipped))
        return verdict

    def __str__(self) -> str:
        lines = [_("diagnose({subject}): {verdict}").format(subject=self.subject,
                                                             verdict=self.verdict())]
        width = max(len(f.probe) for f in self.findings)
        for finding in self.findings:
            head = f"  {_MARKS[finding.status]} {finding.probe:<{width}}  "
            lines.append(_fill(finding.message, head))
        return "\n".join(lines)

    __repr__ = __str__

    def show(self) -> None:
        print(self)


class _WrongReturn(Exception):
    """The implementation returned something other than the pair (output, weights)."""


# Set on an exception raised inside the implementation, to tell it from one of diagnose's.
_RAISED_BY_SUBJECT = "_raised_by_the_diagnosed_code"


def score_asymmetry(weights: torch.Tensor) -> torch.Tensor:
    """How far square attention weights ``(..., n, n)`` are from coming from symmetric scores.

    Symmetric scores, score(i, j) = score(j, i), are what one shared projection for Q and K
    gives. The softmax adds a constant c_i to row i of the log-weights, so then
    log w - log wᵀ = c_i - c_j exactly. Returns the largest deviation from that form, one
    number per matrix ``(...,)``: ~1e-7 (float32) or ~1e-15 (float64) for symmetric scores.
    """
    weights = require_tensor("weights", weights, "(..., n, n)")
    if weights.shape[-1] != weights.shape[-2]:
        raise ValueError("weights should be square attention weights (..., n, n), got shape "
                         f"{tuple(weights.shape)}")
    log_w = weights.log()
    antisym = log_w - log_w.transpose(-2, -1)  # (..., n, n)
    row_part = antisym.mean(dim=-1, keepdim=True)  # (..., n, 1): c_i up to a constant
    residual = antisym - (row_part - row_part.transpose(-2, -1))
    return residual.abs().amax(dim=(-2, -1))


@dataclass(frozen=True)
class _Layout:
    """One shape of probe inputs: leading dims, n_q and n_k."""

    lead: tuple[int, ...]
    n_q: int
    n_k: int
    label: str

    @property
    def has_heads(self) -> bool:
        return len(self.lead) == 2

    def causal(self) -> torch.Tensor:
        """Bool ``(n_q, n_k)``: query i sees keys 0..i."""
        return torch.ones(self.n_q, self.n_k, dtype=torch.bool).tril()

    def lengths(self) -> list[int]:
        """Real lengths of the key sequences: the second sequence is half padding."""
        return [self.n_k, self.n_k // 2] + [self.n_k] * (self.lead[0] - 2)

    def padding(self) -> torch.Tensor:
        """Key padding mask broadcastable over the scores ``(*lead, n_q, n_k)``."""
        return expand_padding_mask(padding_mask(self.lengths(), self.n_k),
                                   with_heads=self.has_heads)


_SELF = _Layout((_BATCH,), _SEQ_LEN, _SEQ_LEN, "(batch, seq_len, d_k)")
_HEADS_LAYOUT = _Layout((_BATCH, _HEADS), _N_Q, _N_K,
                        "(batch, num_heads, n_q, d_k) with n_q ≠ n_k")


def _check_pair(result) -> tuple[torch.Tensor, torch.Tensor]:
    if isinstance(result, torch.Tensor):
        raise _WrongReturn(_(
            "it returned one tensor of shape {result_shape} instead of the pair (output, "
            "weights): end with `return weights @ v, weights`").format(
            result_shape=tuple(result.shape)))
    if not isinstance(result, (tuple, list)) or len(result) != 2:
        what = (_(
            "a {kind} of {n_result} items").format(
            kind=type(result).__name__, n_result=len(result))
                if isinstance(result, (tuple, list)) else type(result).__name__)
        raise _WrongReturn(_(
            "it returned {what} instead of the pair (output, weights): end with `return weights @ "
            "v, weights`").format(what=what))
    if not all(isinstance(t, torch.Tensor) for t in result):
        kinds = ", ".join(type(t).__name__ for t in result)
        raise _WrongReturn(_(
            "it returned ({kinds}) instead of two tensors (output, weights)").format(
            kinds=kinds))
    return tuple(result)


class _Subject:
    """What the probes need from an implementation, whether function or module.

    ``inputs`` is a tuple of tensors: (q, k, v) for a function, (x,) for a module. Key
    position j of every one of them is "token j".
    """

    is_module = False
    layouts: tuple[_Layout, ...] = ()

    def make_inputs(self, generator, layout, dtype, scale=1.0):
        raise NotImplementedError

    def run(self, inputs, mask):
        raise NotImplementedError

    def call(self, inputs, mask=None, dtype=torch.float64, device="cpu"):
        # Clones: an implementation that edits its inputs in place cannot move the baseline.
        inputs = tuple(t.to(device=device, dtype=dtype, copy=True) for t in inputs)
        mask = None if mask is None else mask.to(device=device, copy=True)
        try:
            result = self.run(inputs, mask)
        except Exception as error:
            setattr(error, _RAISED_BY_SUBJECT, True)
            raise
        return _check_pair(result)

    def perturb(self, inputs, positions, generator, sequence=None):
        """New inputs where the keys (and values) at ``positions`` are redrawn."""
        raise NotImplementedError

    def watched_queries(self, layout, positions):
        """Queries that must not move when the tokens at ``positions`` change under a causal
        mask: the ones before the first changed position."""
        return list(range(min(positions))) if positions else []


def _redraw(t, positions, generator, sequence):
    t = t.clone()
    rows = slice(None) if sequence is None else sequence
    index = (rows, *([slice(None)] * (t.dim() - 3)), positions)
    t[index] = torch.randn(t[index].shape, generator=generator, dtype=t.dtype)
    return t


class _FunctionSubject(_Subject):
    layouts = (_SELF, _HEADS_LAYOUT)

    def __init__(self, function: Callable):
        self.function = function

    def make_inputs(self, generator, layout, dtype, scale=1.0, d_k=_D_K, d_v=_D_V):
        sizes = ((layout.n_q, d_k), (layout.n_k, d_k), (layout.n_k, d_v))
        return tuple(scale * torch.randn(*layout.lead, n, w, generator=generator, dtype=dtype)
                     for n, w in sizes)

    def run(self, inputs, mask):
        q, k, v = inputs
        return self.function(q, k, v, mask=mask)

    def perturb(self, inputs, positions, generator, sequence=None, with_queries=False):
        """Redraw keys and values at ``positions``; also the queries if ``with_queries``.

        Token j of a self-attention is query j too: under a causal mask changing all three
        must leave the queries before j alone. A padding token's query is not watched by
        the padding probe of a function, so there only keys and values change.
        """
        q, k, v = inputs
        if with_queries:
            q = _redraw(q, [p for p in positions if p < q.shape[-2]], generator, sequence)
        return q, _redraw(k, positions, generator, sequence), _redraw(v, positions, generator,
                                                                     sequence)



class _ModuleSubject(_Subject):
    is_module = True
    layouts = (_SELF,)

    def __init__(self, module: nn.Module, d_model: int):
        self.module = module
        self.d_model = d_model
        self._copies: dict = {}

    def make_inputs(self, generator, layout, dtype, scale=1.0):
        return (scale * torch.randn(*layout.lead, layout.n_k, self.d_model, generator=generator,
                                    dtype=dtype),)

    def _copy(self, dtype, device):
        # Probe a copy: converting the learner's module in place would change it.
        key = (dtype, str(device))
        if key not in self._copies:
            self._copies[key] = copy.deepcopy(self.module).to(device=device, dtype=dtype).eval()
        return self._copies[key]

    def call(self, inputs, mask=None, dtype=torch.float64, device="cpu"):
        self._current = (dtype, device)
        return super().call(inputs, mask, dtype, device)

    def run(self, inputs, mask):
        (x,) = inputs
        return self._copy(*self._current)(x, mask=mask)

    def perturb(self, inputs, positions, generator, sequence=None, with_queries=True):
        return (_redraw(inputs[0], positions, generator, sequence),)



def _short_error(error: Exception) -> str:
    # Only the type: torch's wording changes between versions, our advice does not.
    return type(error).__name__


def _max_abs(t: torch.Tensor) -> float:
    return float(t.abs().max()) if t.numel() else 0.0


def _sizes(inputs) -> str:
    names = ("q", "k", "v") if len(inputs) == 3 else ("x",)
    return ", ".join(f"{n} {tuple(t.shape)}" for n, t in zip(names, inputs, strict=True))


class _Probes:
    def __init__(self, subject: _Subject, seed: int):
        self.subject = subject
        self.seed = seed

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

    def over_layouts(self, name, probe, passed: str, layouts=None) -> Finding:
        """Run ``probe(layout)`` (a fail message or None) on every layout; first failure wins."""
        layouts = self.subject.layouts if layouts is None else layouts
        first = layouts[0]
        for layout in layouts:
            try:
                message = probe(layout)
            except _WrongReturn:
                raise
            except Exception as error:
                if layout is first or not getattr(error, _RAISED_BY_SUBJECT, False):
                    raise
                return Finding(name, FAIL, _(
                    "right on {label} inputs, but with a heads axis it raised {error} "
                    "{see_shapes}").format(label=first.label, error=_short_error(error),
                                           see_shapes=SEE_SHAPES))
            if message is None:
                continue
            if isinstance(message, Finding):
                return message
            if layout is not first:
                message = _(
                    "right on {label} inputs, but with a heads axis and n_q ≠ n_k, d_v ≠ d_k: "
                    "{message} {FRONT_AXIS_ADVICE}").format(
                    label=first.label, message=message, FRONT_AXIS_ADVICE=_FRONT_AXIS_ADVICE)
            return Finding(name, FAIL, message)
        return Finding(name, PASS, passed)

    # -- shapes -----------------------------------------------------------------------
    def shapes(self) -> Finding:
        if self.subject.is_module:
            return self._module_shapes()
        generator = self.generator(1)
        problems = {}
        for layout, lead in (("(batch, seq_len, d_k)", (_BATCH,)),
                             ("(batch, num_heads, seq_len, d_k)", (_BATCH, _HEADS))):
            q = torch.randn(*lead, _N_Q, _D_K, generator=generator, dtype=torch.float64)
            k = torch.randn(*lead, _N_K, _D_K, generator=generator, dtype=torch.float64)
            v = torch.randn(*lead, _N_K, _D_V, generator=generator, dtype=torch.float64)
            sizes = _sizes((q, k, v))
            try:
                output, weights = self.subject.call((q, k, v))
            except _WrongReturn:
                raise
            except Exception as error:
                problems[layout] = _(
                    "on {sizes} it raised {error}").format(
                    sizes=sizes, error=_short_error(error))
                continue
            expected_out, expected_w = (*lead, _N_Q, _D_V), (*lead, _N_Q, _N_K)
            if tuple(weights.shape) != expected_w:
                problems[layout] = _(
                    "on {sizes} the weights are {weights_shape}, expected (..., n_q, n_k) = "
                    "{expected_w}").format(
                    sizes=sizes, weights_shape=tuple(weights.shape), expected_w=expected_w)
            elif tuple(output.shape) != expected_out:
                problems[layout] = _(
                    "on {sizes} the output is {output_shape}, expected (..., n_q, d_v) = "
                    "{expected_out}").format(
                    sizes=sizes, output_shape=tuple(output.shape), expected_out=expected_out)
        if not problems:
            return Finding(SHAPES, PASS, _("output (..., n_q, d_v) and weights (..., n_q, n_k), "
                                           "with and without a heads axis"))
        with_heads, without = "(batch, num_heads, seq_len, d_k)", "(batch, seq_len, d_k)"
        if list(problems) == [with_heads]:
            return Finding(SHAPES, FAIL, _(
                "works on {without} inputs, but {problems}. Some axis is counted from the front "
                "(like k.transpose(1, 2)), which is the sequence axis only without heads. Count "
                "from the end: k.transpose(-2, -1).").format(
                without=without, problems=problems[with_heads]))
        if list(problems) == [without]:
            return Finding(SHAPES, FAIL, _(
                "works with a heads axis, but {problems}. Some axis is counted from the front "
                "(like k.transpose(2, 3) or dim=3), which exists only with heads. Count from the "
                "end: k.transpose(-2, -1), softmax(dim=-1).").format(
                problems=problems[without]))
        return Finding(SHAPES, FAIL, _(
            "{problems}. Follow the shapes: scores = q @ k.transpose(-2, -1) is (..., n_q, n_k), "
            "softmax keeps it, output = weights @ v is (..., n_q, d_v).").format(
            problems=_("; ").join(problems.values())))

    def _module_shapes(self) -> Finding:
        (x,) = self.inputs(1, _SELF)
        try:
            output, weights = self.subject.call((x,))
        except _WrongReturn:
            raise
        except Exception as error:
            return Finding(SHAPES, FAIL, _(
                "forward(x) with x {x_shape} raised {error}").format(
                x_shape=tuple(x.shape), error=_short_error(error)))
        n = _SEQ_LEN
        if weights.shape[0] != _BATCH or tuple(weights.shape[-2:]) != (n, n):
            return Finding(SHAPES, FAIL, _(
                "for x {x_shape} the weights are {weights_shape}, expected (batch, seq_len, "
                "seq_len) = {expected_shape} (or with a heads axis)").format(
                x_shape=tuple(x.shape), weights_shape=tuple(weights.shape),
                expected_shape=(_BATCH, n, n)))
        if tuple(output.shape[:2]) != (_BATCH, n):
            return Finding(SHAPES, FAIL, _(
                "for x {x_shape} the output is {output_shape}, expected (batch, seq_len, ...) = "
                "{expected_shape}+").format(
                x_shape=tuple(x.shape), output_shape=tuple(output.shape),
                expected_shape=(_BATCH, n)))
        return Finding(SHAPES, PASS, _(
            "x {x_shape} gives output {output_shape} and weights {weights_shape}").format(
            x_shape=tuple(x.shape), output_shape=tuple(output.shape),
            weights_shape=tuple(weights.shape)))

    # -- normalisation ----------------------------------------------------------------
    def rows_sum_to_1(self) -> Finding:
        def probe(layout):
            inputs = self.inputs(2, layout)
            _output, weights = self.subject.call(inputs)
            sums = weights.sum(-1)
            finite = sums.isfinite()  # NaN rows are the NaN/inf probe's business
            if not torch.allclose(sums[finite], torch.ones_like(sums[finite]), atol=_TOLERANCE):
                columns = weights.sum(-2)
                if torch.allclose(columns, torch.ones_like(columns), atol=_TOLERANCE):
                    return _(
                        "the columns of the weights sum to 1, not the rows: the softmax "
                        "normalised over the queries. Use softmax(scores, dim=-1), so each "
                        "query's weights over the keys sum to 1.")
                low, high = float(sums[finite].min()), float(sums[finite].max())
                return _(
                    "rows sum to between {low:.2f} and {high:.2f}, not 1: the weights are not a "
                    "softmax over the last axis (the keys).").format(
                    low=low, high=high)
            for name, mask in ((_("causal"), layout.causal()),
                               (_("padding"), self.padding_for(layout, 2))):
                _output, masked = self.subject.call(inputs, mask)
                sums = masked.sum(-1)
                finite = sums.isfinite()
                if not torch.allclose(sums[finite], torch.ones_like(sums[finite]),
                                      atol=_TOLERANCE):
                    low = float(sums[finite].min())
                    return _(
                        "without a mask every row sums to 1, but with a {name} mask rows sum to "
                        "as little as {low:.2f}: the masked weights were zeroed after the "
                        "softmax, which breaks the normalisation. Fill the masked *scores* with "
                        "-inf before the softmax.").format(name=name, low=low)
            return None

        return self.over_layouts(ROWS_SUM_TO_1, probe, _(
            "every query's weights sum to 1, with and without causal and padding masks"))

    # -- masks ------------------------------------------------------------------------
    def masked_weights(self) -> Finding:
        def probe(layout):
            inputs = self.inputs(3, layout)
            problems: dict[str, list[str]] = {}  # advice -> the masks it applies to
            for name, mask in ((_("causal"), layout.causal()),
                               (_("padding"), self.padding_for(layout, 3))):
                _output, weights = self.subject.call(inputs, mask)
                allowed = mask.expand_as(weights)
                zero_or_nan = weights.isnan() | (weights.abs() <= _TOLERANCE)
                if zero_or_nan[~allowed].all():
                    continue
                if zero_or_nan[allowed].all():
                    advice = _(
                        "the weights are 0 exactly where the mask is True: the mask is read the "
                        "other way round. In this course True = may attend (as in "
                        "F.scaled_dot_product_attention), so fill where it is False: "
                        "scores.masked_fill(~mask, float('-inf')).")
                elif layout.n_q == layout.n_k and zero_or_nan[
                        ~allowed.transpose(-2, -1)].all():
                    advice = _(
                        "the zero weights line up with the queries instead of the keys: the mask "
                        "was broadcast over the wrong axis. A key padding mask (batch, n_k) must "
                        "become (batch, 1, n_k), pad[:, None, :], not (batch, n_k, 1).")
                else:
                    leaked = _max_abs(weights[~allowed].nan_to_num())
                    advice = _(
                        "blocked keys still get weights up to {leaked:.2f}: the mask never "
                        "reaches the scores.").format(leaked=leaked)
                problems.setdefault(advice, []).append(name)
            if not problems:
                return None
            return join_sentences(
                (_("with the {masks} masks, {advice}") if len(names) > 1
                 else _("with the {masks} mask, {advice}")).format(
                    masks=_(" and ").join(names), advice=advice)
                for advice, names in problems.items())

        return self.over_layouts(MASKED_WEIGHTS, probe, _(
            "blocked keys get weight 0 under causal and padding masks"))

    def causal_leak(self) -> Finding:
        def probe(layout):
            inputs = self.inputs(4, layout)
            mask = layout.causal()
            baseline, _weights = self.subject.call(inputs, mask)
            worst = (0.0, None, None)
            generator = self.generator(40)
            for j in range(1, layout.n_k):
                watched = self.subject.watched_queries(layout, [j])[:layout.n_q]
                if not watched:
                    continue
                changed, _weights = self.subject.call(
                    self.subject.perturb(inputs, [j], generator, with_queries=True), mask)
                diff = (changed - baseline)[..., watched, :]
                finite = baseline[..., watched, :].isfinite() & changed[..., watched, :].isfinite()
                size = _max_abs(diff[finite])
                if size > worst[0]:
                    per_query = diff.nan_to_num().abs().amax(dim=-1)  # (..., watched)
                    earliest = int(per_query.reshape(-1, len(watched)).amax(0).argmax())
                    worst = (size, j, earliest)
            size, j, earliest = worst
            if size > _TOLERANCE:
                return _(
                    "under a causal mask, changing token {j} changed the output at position "
                    "{earliest} by up to {size:.2f}: information flows from the future. Block the "
                    "future scores with -inf before a softmax over the keys: zero weights alone "
                    "are not enough, a key inside the softmax's denominator still leaks.").format(
                    j=j, earliest=earliest, size=size)
            return None

        return self.over_layouts(CAUSAL_LEAK, probe, _(
            "under a causal mask, changing a token never changes the outputs of the positions "
            "before it"))

    def padding_leak(self) -> Finding:
        def probe(layout):
            inputs = self.inputs(5, layout)
            mask = self.padding_for(layout, 5)
            baseline, _weights = self.subject.call(inputs, mask)
            length = layout.lengths()[1]
            padded = list(range(length, layout.n_k))
            changed_inputs = self.subject.perturb(inputs, padded, self.generator(50),
                                                  sequence=1)
            changed, _weights = self.subject.call(changed_inputs, mask)
            watched = self.subject.watched_queries(layout, padded)
            if not self.subject.is_module:
                watched = list(range(layout.n_q))  # cross-attention: no query is padding
            before, after = baseline[1][..., watched, :], changed[1][..., watched, :]
            both_finite = before.isfinite() & after.isfinite()
            size = _max_abs((after - before)[both_finite])
            if size > _TOLERANCE:
                return _(
                    "changing the padding keys of a sequence of {length} real tokens changed the "
                    "other outputs by up to {size:.2f}: padding leaks in. The padding mask must "
                    "reach the scores before the softmax, over the keys, with True = real token."
                ).format(length=length, size=size)
            return None

        return self.over_layouts(PADDING_LEAK, probe, _(
            "changing the padding tokens leaves the real tokens' outputs unchanged"))

    # -- scale ------------------------------------------------------------------------
    def score_scale(self) -> Finding:
        if self.subject.is_module:
            return Finding(SCORE_SCALE, SKIP, _(
                "measured on attention functions only: in a module the projections set the "
                "variance of q and k; diagnose the function the module calls"))
        d_k, d_v, n_q, n_k = 64, 40, 16, 24
        layouts = (_Layout((4,), n_q, n_k, _SELF.label),
                   _Layout((_BATCH, _HEADS), n_q, n_k, _HEADS_LAYOUT.label))
        def probe(layout):
            inputs = self.subject.make_inputs(self.generator(6), layout, torch.float64,
                                              d_k=d_k, d_v=d_v)
            _output, weights = self.subject.call(inputs)
            if not torch.allclose(weights.sum(-1), torch.ones(()).double(), atol=_TOLERANCE):
                return Finding(SCORE_SCALE, SKIP, _(
                    "the rows do not sum to 1, so the scores cannot be read back from the weights"))
            # softmax only shifts each row of scores by a constant, so the spread of the
            # log-weights over the keys is the spread of the scores.
            variance = float(weights.log().var(dim=-1).mean())
            if 0.75 < variance < 1.33:
                return None
            # Unit-variance q and k: the variance is d_k / divisor**2. Which size divided?
            sizes = {"nothing": 1, "d_k": d_k**2, "sqrt(n_q)": n_q, "sqrt(n_k)": n_k,
                     "sqrt(d_v)": d_v, "sqrt(batch)": layout.lead[0]}
            if layout.has_heads:
                sizes["sqrt(num_heads)"] = layout.lead[1]
            divisor_squared = d_k / variance
            name = next((name for name, size in sizes.items()
                         if 0.75 < divisor_squared / size < 1.33), None)
            if name == "nothing":
                cause = _(
                    "≈ d_k = {d_k}: the scores were not divided by sqrt(d_k), so the softmax "
                    "saturates towards one-hot (lesson 03)").format(d_k=d_k)
            elif name == "d_k":
                cause = _("≈ 1/d_k: the scores were divided by d_k instead of sqrt(d_k)")
            elif name is not None:
                cause = _(
                    "≈ d_k / {sizes}: the scores were divided by {name} = sqrt({sizes}) instead "
                    "of sqrt(d_k) = sqrt({d_k}); take d_k from the last axis, q.shape[-1]").format(
                    sizes=sizes[name], name=name, d_k=d_k)
            else:
                cause = _("instead of ≈ 1: check the factor 1/sqrt(d_k) on the scores")
            return _("for unit-variance q and k with d_k = {d_k}, the scores have variance "
                     "{variance:.2f} {cause}.").format(d_k=d_k, variance=variance, cause=cause)

        finding = self.over_layouts(SCORE_SCALE, probe, "", layouts)
        if finding.passed:
            return Finding(SCORE_SCALE, PASS, _(
                "for unit-variance q and k with d_k = {d_k}, the scores have variance ≈ 1, with "
                "and without a heads axis").format(d_k=d_k))
        return finding

    def output_mix(self) -> Finding:
        if self.subject.is_module:
            return Finding(OUTPUT_MIX, SKIP, _(
                "measured on attention functions only: a module's v is made inside it (and its "
                "output may be projected again)"))

        def probe(layout):
            inputs = self.inputs(11, layout)
            v = inputs[2]
            for mask in (None, layout.causal()):
                output, weights = self.subject.call(inputs, mask)
                mixed = weights @ v  # (..., n_q, d_v)
                if output.shape != mixed.shape:
                    return _(
                        "the output is {output_shape} but weights @ v is {mixed_shape}: return "
                        "weights @ v.").format(
                        output_shape=tuple(output.shape), mixed_shape=tuple(mixed.shape))
                if torch.allclose(output, mixed, atol=_TOLERANCE, rtol=_TOLERANCE,
                                  equal_nan=True):
                    continue
                ratio = float((output * mixed).sum() / (mixed * mixed).sum())
                if torch.allclose(output, ratio * mixed, atol=_TOLERANCE, rtol=1e-4):
                    again = (_(
                        " That is 1/sqrt(d_k): the scale belongs on the scores only, not on the "
                        "output too.")
                             if abs(ratio * _D_K**0.5 - 1) < 1e-3 else "")
                    return _(
                        "the output is weights @ v times {ratio:.3g}: return weights @ v "
                        "unchanged.{again}").format(ratio=ratio, again=again)
                gap = _max_abs((output - mixed).nan_to_num())
                return _(
                    "the output differs from weights @ v by up to {gap:.2f}: the output must mix "
                    "the values with exactly the weights returned, output = weights @ v.").format(
                    gap=gap)
            return None

        return self.over_layouts(OUTPUT_MIX, probe, _(
            "the output is the returned weights times v, with and without a mask"))

    # -- shared weights ---------------------------------------------------------------
    def shared_qkv(self) -> Finding:
        if not self.subject.is_module:
            return Finding(SHARED_QKV, SKIP, _(
                "applies to modules: a function receives q, k and v already projected"))
        _output, weights = self.subject.call(self.inputs(7, _SELF))
        asymmetry = score_asymmetry(weights)  # one number per (batch, head) matrix
        if bool((asymmetry < _TOLERANCE).any()):
            return Finding(SHARED_QKV, FAIL, _(
                "score(i, j) = score(j, i) for every pair of tokens: queries and keys come from "
                "one shared projection, so every relation is mutual and each token tends to "
                "favour itself. Give Q, K and V their own nn.Linear (lesson 02)."))
        least = float(asymmetry.min())
        return Finding(SHARED_QKV, PASS, _(
            "the scores are not symmetric (asymmetry at least {least:.2f}): queries and keys come "
            "from different projections").format(least=least))

    # -- numerics ---------------------------------------------------------------------
    def nan_inf(self) -> Finding:
        def probe(layout):
            cases = [(_("unit-size inputs"),
                      self.inputs(8, layout, torch.float32), None),
                     (_("unit-size inputs with a causal mask"),
                      self.inputs(8, layout, torch.float32), layout.causal()),
                     (_("inputs of size 10 (scores in the hundreds)"),
                      self.inputs(8, layout, torch.float32, scale=10.0), None)]
            for number, (name, inputs, mask) in enumerate(cases):
                output, weights = self.subject.call(inputs, mask, dtype=torch.float32)
                if not (output.isfinite().all() and weights.isfinite().all()):
                    if mask is None and number == 2:  # the inputs of size 10
                        hint = _(
                            "exp() overflowed. torch.softmax subtracts each row's maximum before "
                            "exp(); a hand-written exp(s) / exp(s).sum() does not.")
                    else:
                        hint = _(
                            "look for a row with no visible key (softmax over only -inf is 0/0) "
                            "or a division by zero.")
                    return _(
                        "NaN or inf in float32 for {name}: {hint}").format(
                        name=name, hint=hint)
            return None

        return self.over_layouts(NAN_INF, probe, _(
            "finite in float32, also for scores in the hundreds"))

    def dtype_device(self) -> Finding:
        def probe(layout):
            inputs = self.inputs(9, layout)
            mask = layout.causal()
            output, weights = self.subject.call(inputs, mask, dtype=torch.float64)
            if output.dtype != torch.float64 or weights.dtype != torch.float64:
                return _(
                    "for float64 inputs the output is {dtype} and the weights {dtype2}: some "
                    "tensor made inside has a fixed dtype; create it with dtype=q.dtype.").format(
                    dtype=output.dtype, dtype2=weights.dtype)
            try:  # 'meta' tensors have shapes but no data: a stand-in for a GPU on any machine
                output, weights = self.subject.call(inputs, mask, device="meta")
            except _WrongReturn:
                raise
            except Exception as error:
                return _(
                    "on another device (the data-free 'meta' device stands in for a GPU) it "
                    "raised {error}: some tensor is made on the CPU inside; create it with "
                    "device=q.device.").format(error=_short_error(error))
            if output.device.type != "meta" or weights.device.type != "meta":
                return _(
                    "for inputs on the 'meta' device the output is on {device} and the weights on "
                    "{device2}: results must stay on the inputs' device.").format(
                    device=output.device, device2=weights.device)
            return None

        return self.over_layouts(DTYPE_DEVICE, probe, _(
            "float64 in, float64 out; results stay on the inputs' device"))

    def float16_masking(self) -> Finding:
        def probe(layout):
            inputs = self.inputs(10, layout, torch.float16)
            mask = layout.causal()
            try:
                output, weights = self.subject.call(inputs, mask, dtype=torch.float16)
            except _WrongReturn:
                raise
            except Exception as error:
                if "overflow" in str(error):
                    return _(
                        "in float16 with a mask it raised {error} about an overflow: a fill like "
                        "-1e9 does not fit in float16 (its largest magnitude is 65504). Fill with "
                        "float('-inf') or torch.finfo(scores.dtype).min.").format(
                        error=_short_error(error))
                raise
            if output.dtype != torch.float16:
                return _(
                    "float16 inputs give a {dtype} output: something upcasts; keep the "
                    "computation in the inputs' dtype.").format(dtype=output.dtype)
            if not (output.isfinite().all() and weights.isfinite().all()):
                output32, weights32 = self.subject.call(inputs, mask, dtype=torch.float32)
                if not (output32.isfinite().all() and weights32.isfinite().all()):
                    return Finding(FLOAT16_MASKING, SKIP, _(
                        "float32 gives NaN/inf on the same inputs too, so the cause is not "
                        "float16: see the NaN/inf probe"))
                return _(
                    "NaN or inf in float16 with a causal mask: the fill value overflowed float16 "
                    "(largest magnitude 65504). Fill with float('-inf') or "
                    "torch.finfo(scores.dtype).min.")
            return None

        return self.over_layouts(FLOAT16_MASKING, probe, _(
            "masking works in float16 and the output stays float16"))


def _subject_for(attention, d_model) -> _Subject:
    if isinstance(attention, type) and issubclass(attention, nn.Module):
        raise TypeError(f"diagnose() needs an instance, got the class {attention.__name__}; "
                        f"build one first, e.g. {attention.__name__}(d_model, ...)")
    if isinstance(attention, nn.Module):
        if d_model is None:
            d_model = getattr(attention, "d_model", None)
            if d_model is None:
                raise ValueError(
                    "diagnose() could not tell the module's d_model (no .d_model attribute); "
                    "pass it: diagnose(module, d_model=...)")
        return _ModuleSubject(attention, require_positive_int("d_model", d_model))
    if callable(attention):
        if d_model is not None:
            raise ValueError("d_model is only for modules: an attention function receives q, "
                             "k and v directly")
        return _FunctionSubject(attention)
    raise TypeError("diagnose() expects an attention function f(q, k, v, mask=None) or an "
                    f"nn.Module with forward(x, mask=None), got {type(attention).__name__}")


def _name_of(attention) -> str:
    if isinstance(attention, nn.Module):
        return type(attention).__name__
    return getattr(attention, "__name__", type(attention).__name__)


def diagnose(attention, d_model: int | None = None, seed: int = 0) -> Report:
    """Run every probe on ``attention`` (a function or a module) and return a Report.

    ``d_model`` is needed only for a module without a ``d_model`` attribute; ``seed`` picks
    the probes' random inputs. Bad arguments of ``diagnose`` itself raise TypeError or
    ValueError. When the implementation raises, that probe fails with the exception's type
    and the other probes still run; when it returns something other than
    ``(output, weights)``, every probe says so.
    """
    seed = require_seed("seed", seed)
    subject = _subject_for(attention, d_model)
    probes = _Probes(subject, seed)
    runners = {
        SHAPES: probes.shapes, ROWS_SUM_TO_1: probes.rows_sum_to_1,
        MASKED_WEIGHTS: probes.masked_weights, CAUSAL_LEAK: probes.causal_leak,
        PADDING_LEAK: probes.padding_leak, SCORE_SCALE: probes.score_scale,
        OUTPUT_MIX: probes.output_mix, SHARED_QKV: probes.shared_qkv,
        NAN_INF: probes.nan_inf, DTYPE_DEVICE: probes.dtype_device,
        FLOAT16_MASKING: probes.float16_masking,
    }
    findings = []
    with torch.no_grad():
        for name in PROBES:
            try:
                findings.append(runners[name]())
            except _WrongReturn as wrong:
                findings.append(Finding(name, FAIL, str(wrong)))
            except Exception as error:
                if getattr(error, _RAISED_BY_SUBJECT, False):
                    message = _(
                        "could not run: calling it raised {error}; fix the first failing probe "
                        "above and run diagnose() again").format(
                        error=_short_error(error))
                else:
                    message = _(
                        "could not check what it returned ({error}); fix the first failing probe "
                        "above and run diagnose() again").format(
                        error=_short_error(error))
                findings.append(Finding(name, FAIL, message))
    return Report(_name_of(attention), tuple(findings))
