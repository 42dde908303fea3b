"""Probes that catch the classic attention bugs and say, in plain words, where to look.

``diagnose(attention)`` accepts either

- an attention *function* ``f(q, k, v, mask=None) -> (output, weights)`` with q
  ``(..., n_q, d_k)``, k ``(..., n_k, d_k)``, v ``(..., n_k, d_v)``, a bool mask
  broadcastable to ``(..., n_q, n_k)`` (True = may attend), output ``(..., n_q, d_v)`` and
  weights ``(..., n_q, n_k)``; or
- a self-attention *module* whose ``forward(x, mask=None)`` takes x
  ``(batch, seq_len, d_model)`` and returns ``(output, weights)``, weights
  ``(batch, seq_len, seq_len)`` or ``(batch, heads, seq_len, seq_len)``.

It returns a :class:`Report`: one :class:`Finding` per probe (its name, whether it passed,
and a message). Every probe draws its inputs from its own seeded generator, so a report
depends only on the implementation, and the global random state is left alone.
"""

from __future__ import annotations

import copy
import textwrap
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from course_utils.masks import causal_mask, expand_padding_mask, padding_mask

PASS, FAIL, SKIP = "pass", "fail", "skip"

SHAPES = "shapes"
ROWS_SUM_TO_1 = "rows sum to 1"
MASKED_WEIGHTS = "masked weights are 0"
CAUSAL_LEAK = "causal leak"
PADDING_LEAK = "padding leak"
SCORE_SCALE = "score scale"
SHARED_QKV = "shared Q/K/V weights"
NAN_INF = "NaN/inf"
DTYPE_DEVICE = "dtype and device"
FLOAT16_MASKING = "float16 masking"
PROBES = (SHAPES, ROWS_SUM_TO_1, MASKED_WEIGHTS, CAUSAL_LEAK, PADDING_LEAK, SCORE_SCALE,
          SHARED_QKV, NAN_INF, DTYPE_DEVICE, FLOAT16_MASKING)

# Sizes of the probe inputs: every axis gets a different size, so a transposed or
# misplaced axis cannot hide behind a square toy example.
_BATCH, _HEADS, _N_Q, _N_K, _D_K, _D_V = 2, 3, 5, 7, 8, 12
_SEQ_LEN = 6
_LENGTHS = (6, 3)  # sequence 1 has 3 real tokens and 3 padding tokens
_TOLERANCE = 1e-6  # float64 probes: a correct implementation is exact to ~1e-15
_MARKS = {PASS: "✓", FAIL: "✗", SKIP: "-"}


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

    def __getitem__(self, probe: str) -> Finding:
        for finding in self.findings:
            if finding.probe == probe:
                return finding
        names = ", ".join(repr(f.probe) for f in self.findings)
        raise KeyError(f"no probe named {probe!r}; this report has {names}")

    def __str__(self) -> str:
        ran = [f for f in self.findings if f.status != SKIP]
        verdict = (f"all {len(ran)} probes passed" if self.passed
                   else f"{len(self.failures)} of {len(ran)} probes failed")
        lines = [f"diagnose({self.subject}): {verdict}"]
        width = max(len(f.probe) for f in self.findings)
        for finding in self.findings:
            head = f"  {_MARKS[finding.status]} {finding.probe:<{width}}  "
            lines.append(textwrap.fill(finding.message, width=100, initial_indent=head,
                                       subsequent_indent=" " * len(head)))
        return "\n".join(lines)

    __repr__ = __str__

    def show(self) -> None:
        print(self)


class _Subject:
    """What the probes need from an implementation, whether function or module.

    ``inputs`` is a tuple of token tensors ``(batch, seq_len, width)``: (q, k, v) for a
    function, (x,) for a module. Position j of every one of them is "token j".
    """

    is_module = False

    def make_inputs(self, generator, batch, seq_len, dtype, scale=1.0):
        raise NotImplementedError

    def call(self, inputs, mask=None, dtype=torch.float64, device="cpu"):
        raise NotImplementedError


class _FunctionSubject(_Subject):
    def __init__(self, function: Callable):
        self.function = function

    def make_inputs(self, generator, batch, seq_len, dtype, scale=1.0):
        widths = (_D_K, _D_K, _D_V)
        return tuple(scale * torch.randn(batch, seq_len, w, generator=generator, dtype=dtype)
                     for w in widths)

    def call(self, inputs, mask=None, dtype=torch.float64, device="cpu"):
        q, k, v = (t.to(device=device, dtype=dtype) for t in inputs)
        return self.function(q, k, v, mask=None if mask is None else mask.to(device))


class _ModuleSubject(_Subject):
    is_module = True

    def __init__(self, module: nn.Module, d_model: int):
        self.module = module
        self.d_model = d_model
        self._copies: dict = {}

    def make_inputs(self, generator, batch, seq_len, dtype, scale=1.0):
        return (scale * torch.randn(batch, seq_len, self.d_model, generator=generator,
                                    dtype=dtype),)

    def _copy(self, dtype, device):
        # Probe a copy: converting the learner's module in place would change it.
        key = (dtype, str(device))
        if key not in self._copies:
            self._copies[key] = copy.deepcopy(self.module).to(device=device, dtype=dtype).eval()
        return self._copies[key]

    def call(self, inputs, mask=None, dtype=torch.float64, device="cpu"):
        (x,) = inputs
        module = self._copy(dtype, device)
        return module(x.to(device=device, dtype=dtype),
                      mask=None if mask is None else mask.to(device))


def _short_error(error: Exception) -> str:
    # Only the type: torch's wording changes between versions, our advice does not.
    return type(error).__name__


def _perturb(inputs, positions, generator, sequence=None):
    """New inputs where the tokens at ``positions`` (of ``sequence``, or all) are redrawn."""
    changed = []
    for t in inputs:
        t = t.clone()
        rows = slice(None) if sequence is None else sequence
        t[rows, positions] = torch.randn(t[rows, positions].shape, generator=generator,
                                         dtype=t.dtype)
        changed.append(t)
    return tuple(changed)


def _padding_for(weights: torch.Tensor, lengths=_LENGTHS) -> torch.Tensor:
    """Key padding mask shaped to broadcast over ``weights`` (3-D or 4-D)."""
    return expand_padding_mask(padding_mask(list(lengths)), with_heads=weights.dim() == 4)


def _max_abs(t: torch.Tensor) -> float:
    return float(t.abs().max()) if t.numel() else 0.0


class _Probes:
    def __init__(self, subject: _Subject, seed: int):
        self.subject = subject
        self.seed = seed

    def generator(self, offset: int) -> torch.Generator:
        return torch.Generator().manual_seed(self.seed + offset)

    def self_inputs(self, offset, dtype=torch.float64, scale=1.0):
        return self.subject.make_inputs(self.generator(offset), _BATCH, _SEQ_LEN, dtype, scale)

    def padding_mask_for_subject(self):
        inputs = self.self_inputs(0)
        _, weights = self.subject.call(inputs)
        return _padding_for(weights)

    # -- shapes -----------------------------------------------------------------------
    def shapes(self) -> Finding:
        if self.subject.is_module:
            return self._module_shapes()
        generator = self.generator(1)
        problems = {}
        for layout, lead in (("(batch, seq_len, d_k)", (_BATCH,)),
                             ("(batch, heads, seq_len, d_k)", (_BATCH, _HEADS))):
            q = torch.randn(*lead, _N_Q, _D_K, generator=generator, dtype=torch.float64)
            k = torch.randn(*lead, _N_K, _D_K, generator=generator, dtype=torch.float64)
            v = torch.randn(*lead, _N_K, _D_V, generator=generator, dtype=torch.float64)
            sizes = f"q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}"
            try:
                output, weights = self.subject.function(q, k, v)
            except Exception as error:
                problems[layout] = f"on {sizes} it raised {_short_error(error)}"
                continue
            expected_out, expected_w = (*lead, _N_Q, _D_V), (*lead, _N_Q, _N_K)
            if tuple(weights.shape) != expected_w:
                problems[layout] = (f"on {sizes} the weights are {tuple(weights.shape)}, "
                                    f"expected (..., n_q, n_k) = {expected_w}")
            elif tuple(output.shape) != expected_out:
                problems[layout] = (f"on {sizes} the output is {tuple(output.shape)}, "
                                    f"expected (..., n_q, d_v) = {expected_out}")
        if not problems:
            return Finding(SHAPES, PASS, "output (..., n_q, d_v) and weights (..., n_q, n_k), "
                                         "with and without a heads axis")
        with_heads = "(batch, heads, seq_len, d_k)"
        if list(problems) == [with_heads]:
            return Finding(SHAPES, FAIL, (
                f"works on (batch, seq_len, d_k) inputs, but {problems[with_heads]}. "
                "Some axis is counted from the front (like k.transpose(1, 2)), which is the "
                "sequence axis only without heads. Count from the end: k.transpose(-2, -1)."))
        return Finding(SHAPES, FAIL, (
            "; ".join(problems.values()) + ". Follow the shapes: scores = q @ k.transpose(-2, "
            "-1) is (..., n_q, n_k), softmax keeps it, output = weights @ v is (..., n_q, d_v)."))

    def _module_shapes(self) -> Finding:
        (x,) = self.self_inputs(1)
        try:
            output, weights = self.subject.call((x,))
        except Exception as error:
            return Finding(SHAPES, FAIL, f"forward(x) with x {tuple(x.shape)} raised "
                                         f"{_short_error(error)}")
        n = _SEQ_LEN
        if weights.shape[0] != _BATCH or tuple(weights.shape[-2:]) != (n, n):
            return Finding(SHAPES, FAIL, (
                f"for x {tuple(x.shape)} the weights are {tuple(weights.shape)}, expected "
                f"(batch, seq_len, seq_len) = {(_BATCH, n, n)} (or with a heads axis)"))
        if tuple(output.shape[:2]) != (_BATCH, n):
            return Finding(SHAPES, FAIL, (
                f"for x {tuple(x.shape)} the output is {tuple(output.shape)}, expected "
                f"(batch, seq_len, ...) = {(_BATCH, n)}+"))
        return Finding(SHAPES, PASS, f"x {tuple(x.shape)} gives output {tuple(output.shape)} "
                                     f"and weights {tuple(weights.shape)}")

    # -- normalisation ----------------------------------------------------------------
    def rows_sum_to_1(self) -> Finding:
        inputs = self.self_inputs(2)
        _, weights = self.subject.call(inputs)
        sums = weights.sum(-1)
        finite = sums.isfinite()  # NaN rows are the NaN/inf probe's business
        if not torch.allclose(sums[finite], torch.ones_like(sums[finite]), atol=_TOLERANCE):
            if torch.allclose(weights.sum(-2), torch.ones(()).double(), atol=_TOLERANCE):
                return Finding(ROWS_SUM_TO_1, FAIL, (
                    "the columns of the weights sum to 1, not the rows: the softmax "
                    "normalised over the queries. Use softmax(scores, dim=-1), so each "
                    "query's weights over the keys sum to 1."))
            return Finding(ROWS_SUM_TO_1, FAIL, (
                f"rows sum to between {float(sums[finite].min()):.2f} and "
                f"{float(sums[finite].max()):.2f}, not 1: the weights are not a softmax over "
                "the last axis (the keys)"))
        for name, mask in (("causal", causal_mask(_SEQ_LEN)),
                           ("padding", _padding_for(weights))):
            _, masked = self.subject.call(inputs, mask)
            sums = masked.sum(-1)
            finite = sums.isfinite()
            if not torch.allclose(sums[finite], torch.ones_like(sums[finite]), atol=_TOLERANCE):
                return Finding(ROWS_SUM_TO_1, FAIL, (
                    f"without a mask every row sums to 1, but with a {name} mask rows sum to "
                    f"as little as {float(sums[finite].min()):.2f}: the masked weights were "
                    "zeroed after the softmax, which breaks the normalisation. Fill the "
                    "masked *scores* with -inf before the softmax."))
        return Finding(ROWS_SUM_TO_1, PASS, "every query's weights sum to 1, with and "
                                            "without causal and padding masks")

    # -- masks ------------------------------------------------------------------------
    def masked_weights(self) -> Finding:
        inputs = self.self_inputs(3)
        problems: dict[str, list[str]] = {}  # advice -> the masks it applies to
        for name, mask in (("causal", causal_mask(_SEQ_LEN)),
                           ("padding", self.padding_mask_for_subject())):
            _, weights = self.subject.call(inputs, mask)
            allowed = mask.expand_as(weights)
            zero_or_nan = weights.isnan() | (weights.abs() <= _TOLERANCE)
            if zero_or_nan[~allowed].all():
                continue
            if zero_or_nan[allowed].all():
                advice = ("the weights are 0 exactly where the mask is True: the mask is read "
                          "the other way round. In this course True = may attend (as in "
                          "F.scaled_dot_product_attention), so fill where it is False: "
                          "scores.masked_fill(~mask, float('-inf')).")
            elif zero_or_nan[~allowed.transpose(-2, -1)].all():
                advice = ("the zero weights line up with the queries instead of the keys: the "
                          "mask was broadcast over the wrong axis. A key padding mask "
                          "(batch, n_k) must become (batch, 1, n_k), pad[:, None, :], not "
                          "(batch, n_k, 1).")
            else:
                leaked = _max_abs(weights[~allowed].nan_to_num())
                advice = (f"blocked keys still get weights up to {leaked:.2f}: the mask never "
                          "reaches the scores.")
            problems.setdefault(advice, []).append(name)
        if problems:
            return Finding(MASKED_WEIGHTS, FAIL, " ".join(
                f"with the {' and '.join(names)} mask{'s' if len(names) > 1 else ''}, {advice}"
                for advice, names in problems.items()))
        return Finding(MASKED_WEIGHTS, PASS, "blocked keys get weight 0 under causal and "
                                             "padding masks")

    def causal_leak(self) -> Finding:
        inputs = self.self_inputs(4)
        mask = causal_mask(_SEQ_LEN)
        baseline, _ = self.subject.call(inputs, mask)
        worst = (0.0, None, None)
        generator = self.generator(40)
        for j in range(1, _SEQ_LEN):
            changed, _ = self.subject.call(_perturb(inputs, [j], generator), mask)
            diff = (changed - baseline)[:, :j]  # positions before the changed token
            diff = diff[baseline[:, :j].isfinite() & changed[:, :j].isfinite()]
            size = _max_abs(diff)
            if size > worst[0]:
                earliest = int((changed - baseline)[:, :j].abs().amax(dim=(0, 2)).argmax())
                worst = (size, j, earliest)
        size, j, earliest = worst
        if size > _TOLERANCE:
            return Finding(CAUSAL_LEAK, FAIL, (
                f"under a causal mask, changing token {j} changed the output at position "
                f"{earliest} by up to {size:.2f}: information flows from the future. Block the "
                "future scores with -inf before a softmax over the keys: zero weights alone "
                "are not enough, a key inside the softmax's denominator still leaks."))
        return Finding(CAUSAL_LEAK, PASS, "under a causal mask, changing a token never changes "
                                          "the outputs of the positions before it")

    def padding_leak(self) -> Finding:
        inputs = self.self_inputs(5)
        mask = self.padding_mask_for_subject()
        baseline, _ = self.subject.call(inputs, mask)
        length = _LENGTHS[1]
        changed_inputs = _perturb(inputs, list(range(length, _SEQ_LEN)), self.generator(50),
                                  sequence=1)
        changed, _ = self.subject.call(changed_inputs, mask)
        real_before, real_after = baseline[1, :length], changed[1, :length]
        both_finite = real_before.isfinite() & real_after.isfinite()
        size = _max_abs((real_after - real_before)[both_finite])
        if size > _TOLERANCE:
            return Finding(PADDING_LEAK, FAIL, (
                f"changing the padding tokens of a sequence of {length} real tokens changed "
                f"the real tokens' outputs by up to {size:.2f}: padding leaks in. The padding "
                "mask must reach the scores before the softmax, over the keys, with True = "
                "real token."))
        return Finding(PADDING_LEAK, PASS, "changing the padding tokens leaves the real tokens' "
                                           "outputs unchanged")

    # -- scale ------------------------------------------------------------------------
    def score_scale(self) -> Finding:
        if self.subject.is_module:
            return Finding(SCORE_SCALE, SKIP, (
                "measured on attention functions only: in a module the projections set the "
                "variance of q and k; diagnose the function the module calls"))
        d_k, n_q, n_k = 64, 16, 16
        generator = self.generator(6)
        q = torch.randn(4, n_q, d_k, generator=generator, dtype=torch.float64)
        k = torch.randn(4, n_k, d_k, generator=generator, dtype=torch.float64)
        v = torch.randn(4, n_k, _D_V, generator=generator, dtype=torch.float64)
        _, weights = self.subject.function(q, k, v)
        if not torch.allclose(weights.sum(-1), torch.ones(()).double(), atol=_TOLERANCE):
            return Finding(SCORE_SCALE, SKIP, "the rows do not sum to 1, so the scores cannot "
                                              "be read back from the weights")
        # softmax only shifts each row of scores by a constant, so the spread of the
        # log-weights over the keys is the spread of the scores.
        variance = float(weights.log().var(dim=-1).mean())
        if 0.5 < variance < 2:
            return Finding(SCORE_SCALE, PASS, (
                f"for unit-variance q and k with d_k = {d_k}, the scores have variance "
                f"{variance:.2f} ≈ 1"))
        if 0.5 < variance / d_k < 2:
            cause = (f"≈ d_k = {d_k}: the scores were not divided by sqrt(d_k), so the softmax "
                     "saturates towards one-hot (lesson 03)")
        elif 0.5 < variance * d_k < 2:
            cause = "≈ 1/d_k: the scores were divided by d_k instead of sqrt(d_k)"
        else:
            cause = "instead of ≈ 1: check the factor 1/sqrt(d_k) on the scores"
        return Finding(SCORE_SCALE, FAIL, (
            f"for unit-variance q and k with d_k = {d_k}, the scores have variance "
            f"{variance:.2f} {cause}."))

    # -- shared weights ---------------------------------------------------------------
    def shared_qkv(self) -> Finding:
        if not self.subject.is_module:
            return Finding(SHARED_QKV, SKIP, "applies to modules: a function receives q, k "
                                             "and v already projected")
        inputs = self.self_inputs(7)
        _, weights = self.subject.call(inputs)
        log_w = weights.log()
        # A shared projection makes the scores symmetric: score(i, j) = score(j, i). The
        # softmax adds a constant c_i to row i, so log_w - log_wᵀ = c_i - c_j exactly then.
        antisym = log_w - log_w.transpose(-2, -1)
        row_part = antisym.mean(dim=-1, keepdim=True)
        residual = antisym - (row_part - row_part.transpose(-2, -1))
        asymmetry = residual.abs().amax(dim=(-2, -1))  # one number per (batch, head) matrix
        if bool((asymmetry < _TOLERANCE).any()):
            return Finding(SHARED_QKV, FAIL, (
                "score(i, j) = score(j, i) for every pair of tokens: queries and keys come "
                "from one shared projection, so every relation is mutual and each token tends "
                "to favour itself. Give Q, K and V their own nn.Linear (lesson 02)."))
        return Finding(SHARED_QKV, PASS, (
            f"the scores are not symmetric (asymmetry at least {float(asymmetry.min()):.2f}): "
            "queries and keys come from different projections"))

    # -- numerics ---------------------------------------------------------------------
    def nan_inf(self) -> Finding:
        cases = [("unit-size inputs", self.self_inputs(8, torch.float32), None),
                 ("unit-size inputs with a causal mask", self.self_inputs(8, torch.float32),
                  causal_mask(_SEQ_LEN)),
                 ("inputs of size 10 (scores in the hundreds)",
                  self.self_inputs(8, torch.float32, scale=10.0), None)]
        for name, inputs, mask in cases:
            output, weights = self.subject.call(inputs, mask, dtype=torch.float32)
            if not (output.isfinite().all() and weights.isfinite().all()):
                if mask is None and name.startswith("inputs of size"):
                    hint = ("exp() overflowed. torch.softmax subtracts each row's maximum "
                            "before exp(); a hand-written exp(s) / exp(s).sum() does not.")
                else:
                    hint = ("look for a row with no visible key (softmax over only -inf "
                            "is 0/0) or a division by zero.")
                return Finding(NAN_INF, FAIL, f"NaN or inf in float32 for {name}: {hint}")
        return Finding(NAN_INF, PASS, "finite in float32, also for scores in the hundreds")

    def dtype_device(self) -> Finding:
        inputs = self.self_inputs(9)
        mask = causal_mask(_SEQ_LEN)
        output, weights = self.subject.call(inputs, mask, dtype=torch.float64)
        if output.dtype != torch.float64 or weights.dtype != torch.float64:
            return Finding(DTYPE_DEVICE, FAIL, (
                f"for float64 inputs the output is {output.dtype} and the weights "
                f"{weights.dtype}: some tensor made inside has a fixed dtype; create it "
                "with dtype=q.dtype"))
        try:  # 'meta' tensors have shapes but no data: a stand-in for a GPU on any machine
            output, weights = self.subject.call(inputs, mask, device="meta")
        except Exception as error:
            return Finding(DTYPE_DEVICE, FAIL, (
                f"on another device (the data-free 'meta' device stands in for a GPU) it "
                f"raised {_short_error(error)}: some tensor is made on the CPU inside; create "
                "it with device=q.device"))
        if output.device.type != "meta" or weights.device.type != "meta":
            return Finding(DTYPE_DEVICE, FAIL, (
                f"for inputs on the 'meta' device the output is on {output.device} and the "
                f"weights on {weights.device}: results must stay on the inputs' device"))
        return Finding(DTYPE_DEVICE, PASS, "float64 in, float64 out; results stay on the "
                                           "inputs' device")

    def float16_masking(self) -> Finding:
        inputs = self.self_inputs(10, torch.float16)
        try:
            output, weights = self.subject.call(inputs, causal_mask(_SEQ_LEN),
                                                dtype=torch.float16)
        except Exception as error:
            if "overflow" in str(error):
                return Finding(FLOAT16_MASKING, FAIL, (
                    f"in float16 with a mask it raised {_short_error(error)} about an "
                    "overflow: a fill like -1e9 does not fit in float16 (its largest "
                    "magnitude is 65504). Fill with float('-inf') or "
                    "torch.finfo(scores.dtype).min."))
            return Finding(FLOAT16_MASKING, FAIL, f"in float16 with a causal mask it raised "
                                                  f"{_short_error(error)}")
        if output.dtype != torch.float16:
            return Finding(FLOAT16_MASKING, FAIL, (
                f"float16 inputs give a {output.dtype} output: something upcasts; keep the "
                "computation in the inputs' dtype"))
        if not (output.isfinite().all() and weights.isfinite().all()):
            output32, weights32 = self.subject.call(inputs, causal_mask(_SEQ_LEN),
                                                    dtype=torch.float32)
            if not (output32.isfinite().all() and weights32.isfinite().all()):
                return Finding(FLOAT16_MASKING, SKIP, (
                    "float32 gives NaN/inf on the same inputs too, so the cause is not "
                    "float16: see the NaN/inf probe"))
            return Finding(FLOAT16_MASKING, FAIL, (
                "NaN or inf in float16 with a causal mask: the fill value overflowed float16 "
                "(largest magnitude 65504). Fill with float('-inf') or "
                "torch.finfo(scores.dtype).min."))
        return Finding(FLOAT16_MASKING, PASS, "masking works in float16 and the output stays "
                                              "float16")


def _subject_for(attention, d_model) -> _Subject:
    if isinstance(attention, type) and issubclass(attention, nn.Module):
        raise TypeError(f"diagnose() needs an instance, got the class {attention.__name__}; "
                        f"build one first, e.g. {attention.__name__}(d_model, ...)")
    if isinstance(attention, nn.Module):
        d_model = d_model if d_model is not None else getattr(attention, "d_model", None)
        if not isinstance(d_model, int) or isinstance(d_model, bool) or d_model < 1:
            raise ValueError(
                f"diagnose() could not tell the module's d_model (no .d_model attribute); "
                f"pass it: diagnose(module, d_model=...), got d_model={d_model!r}")
        return _ModuleSubject(attention, d_model)
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

    ``d_model`` is needed only for a module without a ``d_model`` attribute. A probe whose
    call raises reports the exception as its failure; the other probes still run.
    """
    subject = _subject_for(attention, d_model)
    probes = _Probes(subject, seed)
    runners = {
        SHAPES: probes.shapes, ROWS_SUM_TO_1: probes.rows_sum_to_1,
        MASKED_WEIGHTS: probes.masked_weights, CAUSAL_LEAK: probes.causal_leak,
        PADDING_LEAK: probes.padding_leak, SCORE_SCALE: probes.score_scale,
        SHARED_QKV: probes.shared_qkv, NAN_INF: probes.nan_inf,
        DTYPE_DEVICE: probes.dtype_device, FLOAT16_MASKING: probes.float16_masking,
    }
    findings = []
    with torch.no_grad():
        for name in PROBES:
            try:
                findings.append(runners[name]())
            except Exception as error:
                findings.append(Finding(name, FAIL, (
                    f"could not run: calling it raised {_short_error(error)}; fix the "
                    "first failing probe above and run diagnose() again")))
    return Report(_name_of(attention), tuple(findings))
