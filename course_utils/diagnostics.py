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
from course_utils.language import Bilingual, current_language, text
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
_FRONT_AXIS_ADVICE = Bilingual(
    "An axis counted from the front (dim=2, q.shape[2], transpose(1, 2)) names another axis "
    "once a heads axis comes in: count from the end (dim=-1, q.shape[-1], "
    "transpose(-2, -1)).",
    "从前往后数的轴（dim=2、q.shape[2]、transpose(1, 2)）一旦多了头这个轴，指的就是另一个轴了："
    "改成从后往前数（dim=-1、q.shape[-1]、transpose(-2, -1)）。")
# The end of a finding that failed only because the shapes probe did (exercises look for it).
SEE_SHAPES = Bilingual("(see the shapes probe)", "（见 shapes 探针）")

# Chinese has no spaces to break lines at: a line may end after any Chinese character, but
# never inside a run of Latin letters or digits (a number is never cut in two).
_WRAP_TOKEN = re.compile(r"\s+|[\u2e80-\u9fff\u3000-\u303f\uff00-\uffef]|"
                         r"[^\s\u2e80-\u9fff\u3000-\u303f\uff00-\uffef]+")
_NO_LINE_START = set("，。：；、）！？”")


def _width(chunk: str) -> int:
    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in chunk)


def _fill(message: str, head: str, width: int = 100) -> str:
    """``textwrap.fill`` in English; in Chinese, lines broken by display width."""
    indent = " " * len(head)
    if current_language() != "zh-CN":
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
        verdict = (text(f"all {ran} probes that ran passed", f"运行的 {ran} 个探针全部通过")
                   if self.passed else
                   text(f"{len(self.failures)} of {ran} probes that ran failed",
                        f"运行的 {ran} 个探针中有 {len(self.failures)} 个未通过"))
        if self.skipped:
            verdict += text(f"; skipped: {', '.join(f.probe for f in self.skipped)}",
                            f"；跳过：{'、'.join(f.probe for f in self.skipped)}")
        return verdict

    def __str__(self) -> str:
        lines = [f"diagnose({self.subject}){text(': ', '：')}{self.verdict()}"]
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
        raise _WrongReturn(text(
            f"it returned one tensor of shape {tuple(result.shape)} instead of the pair "
            "(output, weights): end with `return weights @ v, weights`",
            f"它只返回了一个形状为 {tuple(result.shape)} 的张量，而不是 (output, weights) 这一对："
            "最后一行应当是 `return weights @ v, weights`"))
    if not isinstance(result, (tuple, list)) or len(result) != 2:
        what = (text(f"a {type(result).__name__} of {len(result)} items",
                     f"含 {len(result)} 个元素的 {type(result).__name__}")
                if isinstance(result, (tuple, list)) else type(result).__name__)
        raise _WrongReturn(text(f"it returned {what} instead of the pair (output, weights): end "
                                "with `return weights @ v, weights`",
                                f"它返回的是{what}，而不是 (output, weights) 这一对："
                                "最后一行应当是 `return weights @ v, weights`"))
    if not all(isinstance(t, torch.Tensor) for t in result):
        kinds = ", ".join(type(t).__name__ for t in result)
        raise _WrongReturn(text(
            f"it returned ({kinds}) instead of two tensors (output, weights)",
            f"它返回的是 ({kinds})，而不是 (output, weights) 两个张量"))
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
        _, weights = self.subject.call(self.inputs(offset, layout))
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
                return Finding(name, FAIL, text(
                    f"right on {first.label} inputs, but with a heads axis it raised "
                    f"{_short_error(error)} {SEE_SHAPES.en}",
                    f"在 {first.label} 的输入上正确，但加上头这个轴后抛出了 "
                    f"{_short_error(error)}{SEE_SHAPES.zh}"))
            if message is None:
                continue
            if isinstance(message, Finding):
                return message
            if layout is not first:
                message = text(f"right on {first.label} inputs, but with a heads axis and "
                               f"n_q ≠ n_k, d_v ≠ d_k: {message} {_FRONT_AXIS_ADVICE}",
                               f"在 {first.label} 的输入上正确，但加上头这个轴、且 n_q ≠ n_k、"
                               f"d_v ≠ d_k 时：{message}{_FRONT_AXIS_ADVICE}")
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
                problems[layout] = text(f"on {sizes} it raised {_short_error(error)}",
                                        f"在 {sizes} 上抛出了 {_short_error(error)}")
                continue
            expected_out, expected_w = (*lead, _N_Q, _D_V), (*lead, _N_Q, _N_K)
            if tuple(weights.shape) != expected_w:
                problems[layout] = text(f"on {sizes} the weights are {tuple(weights.shape)}, "
                                        f"expected (..., n_q, n_k) = {expected_w}",
                                        f"在 {sizes} 上权重是 {tuple(weights.shape)}，"
                                        f"应当是 (..., n_q, n_k) = {expected_w}")
            elif tuple(output.shape) != expected_out:
                problems[layout] = text(f"on {sizes} the output is {tuple(output.shape)}, "
                                        f"expected (..., n_q, d_v) = {expected_out}",
                                        f"在 {sizes} 上输出是 {tuple(output.shape)}，"
                                        f"应当是 (..., n_q, d_v) = {expected_out}")
        if not problems:
            return Finding(SHAPES, PASS, text(
                "output (..., n_q, d_v) and weights (..., n_q, n_k), with and without a heads "
                "axis",
                "有没有头这个轴，输出都是 (..., n_q, d_v)，权重都是 (..., n_q, n_k)"))
        with_heads, without = "(batch, num_heads, seq_len, d_k)", "(batch, seq_len, d_k)"
        if list(problems) == [with_heads]:
            return Finding(SHAPES, FAIL, text(
                f"works on {without} inputs, but {problems[with_heads]}. Some axis is counted "
                "from the front (like k.transpose(1, 2)), which is the sequence axis only "
                "without heads. Count from the end: k.transpose(-2, -1).",
                f"在 {without} 的输入上能运行，但{problems[with_heads]}。有个轴是从前往后数的"
                "（比如 k.transpose(1, 2)），只有没有头这个轴时它才是序列轴。"
                "改成从后往前数：k.transpose(-2, -1)。"))
        if list(problems) == [without]:
            return Finding(SHAPES, FAIL, text(
                f"works with a heads axis, but {problems[without]}. Some axis is counted from "
                "the front (like k.transpose(2, 3) or dim=3), which exists only with heads. "
                "Count from the end: k.transpose(-2, -1), softmax(dim=-1).",
                f"有头这个轴时能运行，但{problems[without]}。有个轴是从前往后数的"
                "（比如 k.transpose(2, 3) 或 dim=3），只有加上头这个轴时它才存在。"
                "改成从后往前数：k.transpose(-2, -1)、softmax(dim=-1)。"))
        return Finding(SHAPES, FAIL, text(
            "; ".join(problems.values()) + ". Follow the shapes: scores = q @ k.transpose(-2, "
            "-1) is (..., n_q, n_k), softmax keeps it, output = weights @ v is (..., n_q, d_v).",
            "；".join(problems.values()) + "。顺着形状走一遍：scores = q @ k.transpose(-2, -1) "
            "是 (..., n_q, n_k)，softmax 不改变形状，output = weights @ v 是 (..., n_q, d_v)。"))

    def _module_shapes(self) -> Finding:
        (x,) = self.inputs(1, _SELF)
        try:
            output, weights = self.subject.call((x,))
        except _WrongReturn:
            raise
        except Exception as error:
            return Finding(SHAPES, FAIL, text(
                f"forward(x) with x {tuple(x.shape)} raised {_short_error(error)}",
                f"x 为 {tuple(x.shape)} 时 forward(x) 抛出了 {_short_error(error)}"))
        n = _SEQ_LEN
        if weights.shape[0] != _BATCH or tuple(weights.shape[-2:]) != (n, n):
            return Finding(SHAPES, FAIL, text(
                f"for x {tuple(x.shape)} the weights are {tuple(weights.shape)}, expected "
                f"(batch, seq_len, seq_len) = {(_BATCH, n, n)} (or with a heads axis)",
                f"x 为 {tuple(x.shape)} 时权重是 {tuple(weights.shape)}，应当是 "
                f"(batch, seq_len, seq_len) = {(_BATCH, n, n)}（或者带头这个轴）"))
        if tuple(output.shape[:2]) != (_BATCH, n):
            return Finding(SHAPES, FAIL, text(
                f"for x {tuple(x.shape)} the output is {tuple(output.shape)}, expected "
                f"(batch, seq_len, ...) = {(_BATCH, n)}+",
                f"x 为 {tuple(x.shape)} 时输出是 {tuple(output.shape)}，应当是 "
                f"(batch, seq_len, ...) = {(_BATCH, n)}+"))
        return Finding(SHAPES, PASS, text(
            f"x {tuple(x.shape)} gives output {tuple(output.shape)} and weights "
            f"{tuple(weights.shape)}",
            f"x 为 {tuple(x.shape)} 时，输出为 {tuple(output.shape)}，权重为 "
            f"{tuple(weights.shape)}"))

    # -- normalisation ----------------------------------------------------------------
    def rows_sum_to_1(self) -> Finding:
        def probe(layout):
            inputs = self.inputs(2, layout)
            _, weights = self.subject.call(inputs)
            sums = weights.sum(-1)
            finite = sums.isfinite()  # NaN rows are the NaN/inf probe's business
            if not torch.allclose(sums[finite], torch.ones_like(sums[finite]), atol=_TOLERANCE):
                columns = weights.sum(-2)
                if torch.allclose(columns, torch.ones_like(columns), atol=_TOLERANCE):
                    return text(
                        "the columns of the weights sum to 1, not the rows: the softmax "
                        "normalised over the queries. Use softmax(scores, dim=-1), so each "
                        "query's weights over the keys sum to 1.",
                        "权重是每一列的和为 1，而不是每一行：softmax 是沿查询归一化的。"
                        "改用 softmax(scores, dim=-1)，让每个查询在所有键上的权重之和为 1。")
                low, high = float(sums[finite].min()), float(sums[finite].max())
                return text(f"rows sum to between {low:.2f} and {high:.2f}, not 1: the weights "
                            "are not a softmax over the last axis (the keys).",
                            f"每行之和在 {low:.2f} 到 {high:.2f} 之间，而不是 1："
                            "这些权重不是沿最后一个轴（键）做的 softmax。")
            for name, mask in ((text("causal", "因果"), layout.causal()),
                               (text("padding", "填充"), self.padding_for(layout, 2))):
                _, masked = self.subject.call(inputs, mask)
                sums = masked.sum(-1)
                finite = sums.isfinite()
                if not torch.allclose(sums[finite], torch.ones_like(sums[finite]),
                                      atol=_TOLERANCE):
                    low = float(sums[finite].min())
                    return text(
                        f"without a mask every row sums to 1, but with a {name} mask rows "
                        f"sum to as little as {low:.2f}: the masked "
                        "weights were zeroed after the softmax, which breaks the "
                        "normalisation. Fill the masked *scores* with -inf before the "
                        "softmax.",
                        f"不加掩码时每行之和都是 1，但加上{name}掩码后，有的行之和只有 {low:.2f}："
                        "被屏蔽的权重是在 softmax 之后才置零的，这破坏了归一化。"
                        "应当在 softmax 之前把被屏蔽的*分数*填成 -inf。")
            return None

        return self.over_layouts(ROWS_SUM_TO_1, probe, text(
            "every query's weights sum to 1, with and without causal and padding masks",
            "无论有没有因果掩码或填充掩码，每个查询的权重之和都是 1"))

    # -- masks ------------------------------------------------------------------------
    def masked_weights(self) -> Finding:
        def probe(layout):
            inputs = self.inputs(3, layout)
            problems: dict[str, list[str]] = {}  # advice -> the masks it applies to
            for name, mask in ((text("causal", "因果"), layout.causal()),
                               (text("padding", "填充"), self.padding_for(layout, 3))):
                _, weights = self.subject.call(inputs, mask)
                allowed = mask.expand_as(weights)
                zero_or_nan = weights.isnan() | (weights.abs() <= _TOLERANCE)
                if zero_or_nan[~allowed].all():
                    continue
                if zero_or_nan[allowed].all():
                    advice = text(
                        "the weights are 0 exactly where the mask is True: the mask is "
                        "read the other way round. In this course True = may attend (as "
                        "in F.scaled_dot_product_attention), so fill where it is False: "
                        "scores.masked_fill(~mask, float('-inf')).",
                        "权重恰好在掩码为 True 的位置上是 0：掩码被反过来读了。本课程约定 "
                        "True = 可以关注（与 F.scaled_dot_product_attention 相同），"
                        "所以要填的是 False 的位置：scores.masked_fill(~mask, float('-inf'))。")
                elif layout.n_q == layout.n_k and zero_or_nan[
                        ~allowed.transpose(-2, -1)].all():
                    advice = text(
                        "the zero weights line up with the queries instead of the keys: "
                        "the mask was broadcast over the wrong axis. A key padding mask "
                        "(batch, n_k) must become (batch, 1, n_k), pad[:, None, :], not "
                        "(batch, n_k, 1).",
                        "零权重是按查询排列的，而不是按键：掩码沿错误的轴做了广播。"
                        "键的填充掩码 (batch, n_k) 应当变成 (batch, 1, n_k)，即 pad[:, None, :]，"
                        "而不是 (batch, n_k, 1)。")
                else:
                    leaked = _max_abs(weights[~allowed].nan_to_num())
                    advice = text(f"blocked keys still get weights up to {leaked:.2f}: the mask "
                                  "never reaches the scores.",
                                  f"被屏蔽的键仍然得到了最高 {leaked:.2f} 的权重："
                                  "掩码根本没有作用到分数上。")
                problems.setdefault(advice, []).append(name)
            if not problems:
                return None
            return text(" ", "").join(
                text(f"with the {' and '.join(names)} mask{'s' if len(names) > 1 else ''}, "
                     f"{advice}", f"在{'和'.join(name + '掩码' for name in names)}下，{advice}")
                for advice, names in problems.items())

        return self.over_layouts(MASKED_WEIGHTS, probe, text(
            "blocked keys get weight 0 under causal and padding masks",
            "在因果掩码和填充掩码下，被屏蔽的键权重都是 0"))

    def causal_leak(self) -> Finding:
        def probe(layout):
            inputs = self.inputs(4, layout)
            mask = layout.causal()
            baseline, _ = self.subject.call(inputs, mask)
            worst = (0.0, None, None)
            generator = self.generator(40)
            for j in range(1, layout.n_k):
                watched = self.subject.watched_queries(layout, [j])[:layout.n_q]
                if not watched:
                    continue
                changed, _ = self.subject.call(
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
                return text(
                    f"under a causal mask, changing token {j} changed the output at "
                    f"position {earliest} by up to {size:.2f}: information flows from the "
                    "future. Block the future scores with -inf before a softmax over the "
                    "keys: zero weights alone are not enough, a key inside the softmax's "
                    "denominator still leaks.",
                    f"在因果掩码下，改动第 {j} 个 token 使位置 {earliest} 的输出最多变化了 "
                    f"{size:.2f}：信息从未来流了进来。应当在沿键做 softmax 之前，用 -inf "
                    "屏蔽未来位置的分数：仅仅把权重置零是不够的，只要某个键还在 softmax "
                    "的分母里，信息就会泄漏。")
            return None

        return self.over_layouts(CAUSAL_LEAK, probe, text(
            "under a causal mask, changing a token never changes the outputs of the positions "
            "before it",
            "在因果掩码下，改动一个 token 从不改变它之前各位置的输出"))

    def padding_leak(self) -> Finding:
        def probe(layout):
            inputs = self.inputs(5, layout)
            mask = self.padding_for(layout, 5)
            baseline, _ = self.subject.call(inputs, mask)
            length = layout.lengths()[1]
            padded = list(range(length, layout.n_k))
            changed_inputs = self.subject.perturb(inputs, padded, self.generator(50),
                                                  sequence=1)
            changed, _ = self.subject.call(changed_inputs, mask)
            watched = self.subject.watched_queries(layout, padded)
            if not self.subject.is_module:
                watched = list(range(layout.n_q))  # cross-attention: no query is padding
            before, after = baseline[1][..., watched, :], changed[1][..., watched, :]
            both_finite = before.isfinite() & after.isfinite()
            size = _max_abs((after - before)[both_finite])
            if size > _TOLERANCE:
                return text(
                    f"changing the padding keys of a sequence of {length} real tokens "
                    f"changed the other outputs by up to {size:.2f}: padding leaks in. "
                    "The padding mask must reach the scores before the softmax, over the "
                    "keys, with True = real token.",
                    f"在一个有 {length} 个真实 token 的序列里，改动填充位置的键使其他输出最多"
                    f"变化了 {size:.2f}：填充的信息漏了进来。填充掩码必须在 softmax 之前作用到"
                    "分数上，沿键的方向，且 True = 真实 token。")
            return None

        return self.over_layouts(PADDING_LEAK, probe, text(
            "changing the padding tokens leaves the real tokens' outputs unchanged",
            "改动填充 token 不会改变真实 token 的输出"))

    # -- scale ------------------------------------------------------------------------
    def score_scale(self) -> Finding:
        if self.subject.is_module:
            return Finding(SCORE_SCALE, SKIP, text(
                "measured on attention functions only: in a module the projections set the "
                "variance of q and k; diagnose the function the module calls",
                "只对注意力函数测量：模块里 q 和 k 的方差由投影决定；"
                "请对模块调用的那个函数运行 diagnose"))
        d_k, d_v, n_q, n_k = 64, 40, 16, 24
        layouts = (_Layout((4,), n_q, n_k, _SELF.label),
                   _Layout((_BATCH, _HEADS), n_q, n_k, _HEADS_LAYOUT.label))
        def probe(layout):
            inputs = self.subject.make_inputs(self.generator(6), layout, torch.float64,
                                              d_k=d_k, d_v=d_v)
            _, weights = self.subject.call(inputs)
            if not torch.allclose(weights.sum(-1), torch.ones(()).double(), atol=_TOLERANCE):
                return Finding(SCORE_SCALE, SKIP, text(
                    "the rows do not sum to 1, so the scores cannot be read back from the "
                    "weights",
                    "每行之和不是 1，所以无法从权重反推出分数"))
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
                cause = text(f"≈ d_k = {d_k}: the scores were not divided by sqrt(d_k), so the "
                             "softmax saturates towards one-hot (lesson 03)",
                             f"≈ d_k = {d_k}：分数没有除以 sqrt(d_k)，所以 softmax 会饱和，"
                             "趋向 one-hot（第 03 课）")
            elif name == "d_k":
                cause = text("≈ 1/d_k: the scores were divided by d_k instead of sqrt(d_k)",
                             "≈ 1/d_k：分数除以的是 d_k，而不是 sqrt(d_k)")
            elif name is not None:
                cause = text(f"≈ d_k / {sizes[name]}: the scores were divided by {name} = "
                             f"sqrt({sizes[name]}) instead of sqrt(d_k) = sqrt({d_k}); take d_k "
                             "from the last axis, q.shape[-1]",
                             f"≈ d_k / {sizes[name]}：分数除以的是 {name} = sqrt({sizes[name]})，"
                             f"而不是 sqrt(d_k) = sqrt({d_k})；d_k 要从最后一个轴取，"
                             "即 q.shape[-1]")
            else:
                cause = text("instead of ≈ 1: check the factor 1/sqrt(d_k) on the scores",
                             "，而不是 ≈ 1：检查分数上的缩放因子 1/sqrt(d_k)")
            return text(f"for unit-variance q and k with d_k = {d_k}, the scores have variance "
                        f"{variance:.2f} {cause}.",
                        f"对于单位方差的 q 和 k（d_k = {d_k}），分数的方差为 {variance:.2f}"
                        f"{'' if cause.startswith('，') else ' '}{cause}。")

        finding = self.over_layouts(SCORE_SCALE, probe, "", layouts)
        if finding.passed:
            return Finding(SCORE_SCALE, PASS, text(
                f"for unit-variance q and k with d_k = {d_k}, the scores have variance ≈ 1, "
                "with and without a heads axis",
                f"对于单位方差的 q 和 k（d_k = {d_k}），无论有没有头这个轴，分数的方差都 ≈ 1"))
        return finding

    def output_mix(self) -> Finding:
        if self.subject.is_module:
            return Finding(OUTPUT_MIX, SKIP, text(
                "measured on attention functions only: a module's v is made inside it (and "
                "its output may be projected again)",
                "只对注意力函数测量：模块的 v 是在模块内部算出来的（输出也可能再经过一次投影）"))

        def probe(layout):
            inputs = self.inputs(11, layout)
            v = inputs[2]
            for mask in (None, layout.causal()):
                output, weights = self.subject.call(inputs, mask)
                mixed = weights @ v  # (..., n_q, d_v)
                if output.shape != mixed.shape:
                    return text(f"the output is {tuple(output.shape)} but weights @ v is "
                                f"{tuple(mixed.shape)}: return weights @ v.",
                                f"输出是 {tuple(output.shape)}，而 weights @ v 是 "
                                f"{tuple(mixed.shape)}：应当返回 weights @ v。")
                if torch.allclose(output, mixed, atol=_TOLERANCE, rtol=_TOLERANCE,
                                  equal_nan=True):
                    continue
                ratio = float((output * mixed).sum() / (mixed * mixed).sum())
                if torch.allclose(output, ratio * mixed, atol=_TOLERANCE, rtol=1e-4):
                    again = (text(" That is 1/sqrt(d_k): the scale belongs on the scores only, "
                                  "not on the output too.",
                                  "这正是 1/sqrt(d_k)：缩放只应作用在分数上，不该再作用到输出上。")
                             if abs(ratio * _D_K**0.5 - 1) < 1e-3 else "")
                    return text(f"the output is weights @ v times {ratio:.3g}: return weights @ v "
                                f"unchanged.{again}",
                                f"输出是 weights @ v 乘以 {ratio:.3g}：应当原样返回 weights @ v。"
                                f"{again}")
                gap = _max_abs((output - mixed).nan_to_num())
                return text(f"the output differs from weights @ v by up to {gap:.2f}: the output "
                            "must mix the values with exactly the weights returned, "
                            "output = weights @ v.",
                            f"输出与 weights @ v 最多相差 {gap:.2f}：输出必须恰好用返回的权重"
                            "去混合值，即 output = weights @ v。")
            return None

        return self.over_layouts(OUTPUT_MIX, probe, text(
            "the output is the returned weights times v, with and without a mask",
            "无论有没有掩码，输出都等于返回的权重乘以 v"))

    # -- shared weights ---------------------------------------------------------------
    def shared_qkv(self) -> Finding:
        if not self.subject.is_module:
            return Finding(SHARED_QKV, SKIP, text(
                "applies to modules: a function receives q, k and v already projected",
                "只适用于模块：函数拿到的 q、k、v 已经投影好了"))
        _, weights = self.subject.call(self.inputs(7, _SELF))
        asymmetry = score_asymmetry(weights)  # one number per (batch, head) matrix
        if bool((asymmetry < _TOLERANCE).any()):
            return Finding(SHARED_QKV, FAIL, text(
                "score(i, j) = score(j, i) for every pair of tokens: queries and keys come "
                "from one shared projection, so every relation is mutual and each token tends "
                "to favour itself. Give Q, K and V their own nn.Linear (lesson 02).",
                "对每一对 token 都有 score(i, j) = score(j, i)：查询和键来自同一个共享的投影，"
                "所以每种关系都是相互的，每个 token 也往往最偏向它自己。"
                "给 Q、K、V 各自一个 nn.Linear（第 02 课）。"))
        least = float(asymmetry.min())
        return Finding(SHARED_QKV, PASS, text(
            f"the scores are not symmetric (asymmetry at least {least:.2f}): "
            "queries and keys come from different projections",
            f"分数不对称（不对称度至少为 {least:.2f}）：查询和键来自不同的投影"))

    # -- numerics ---------------------------------------------------------------------
    def nan_inf(self) -> Finding:
        def probe(layout):
            cases = [(text("unit-size inputs", "单位大小的输入"),
                      self.inputs(8, layout, torch.float32), None),
                     (text("unit-size inputs with a causal mask",
                           "单位大小、带因果掩码的输入"),
                      self.inputs(8, layout, torch.float32), layout.causal()),
                     (text("inputs of size 10 (scores in the hundreds)",
                           "大小为 10 量级的输入（分数达到几百）"),
                      self.inputs(8, layout, torch.float32, scale=10.0), None)]
            for number, (name, inputs, mask) in enumerate(cases):
                output, weights = self.subject.call(inputs, mask, dtype=torch.float32)
                if not (output.isfinite().all() and weights.isfinite().all()):
                    if mask is None and number == 2:  # the inputs of size 10
                        hint = text("exp() overflowed. torch.softmax subtracts each row's "
                                    "maximum before exp(); a hand-written exp(s) / exp(s).sum() "
                                    "does not.",
                                    "exp() 溢出了。torch.softmax 在 exp() 之前会先减去每行的"
                                    "最大值；手写的 exp(s) / exp(s).sum() 不会。")
                    else:
                        hint = text("look for a row with no visible key (softmax over only "
                                    "-inf is 0/0) or a division by zero.",
                                    "检查有没有一行看不到任何键（只含 -inf 的 softmax 是 0/0），"
                                    "或者除以了零。")
                    return text(f"NaN or inf in float32 for {name}: {hint}",
                                f"float32 下，{name}得到了 NaN 或 inf：{hint}")
            return None

        return self.over_layouts(NAN_INF, probe, text(
            "finite in float32, also for scores in the hundreds",
            "float32 下结果有限，分数达到几百时也是如此"))

    def dtype_device(self) -> Finding:
        def probe(layout):
            inputs = self.inputs(9, layout)
            mask = layout.causal()
            output, weights = self.subject.call(inputs, mask, dtype=torch.float64)
            if output.dtype != torch.float64 or weights.dtype != torch.float64:
                return text(f"for float64 inputs the output is {output.dtype} and the weights "
                            f"{weights.dtype}: some tensor made inside has a fixed dtype; create "
                            "it with dtype=q.dtype.",
                            f"输入为 float64 时，输出是 {output.dtype}，权重是 {weights.dtype}："
                            "函数内部新建的某个张量用了固定的 dtype；新建时请写 dtype=q.dtype。")
            try:  # 'meta' tensors have shapes but no data: a stand-in for a GPU on any machine
                output, weights = self.subject.call(inputs, mask, device="meta")
            except _WrongReturn:
                raise
            except Exception as error:
                return text(f"on another device (the data-free 'meta' device stands in for "
                            f"a GPU) it raised {_short_error(error)}: some tensor is made on the "
                            "CPU inside; create it with device=q.device.",
                            f"换到另一个设备上（用不含数据的 'meta' 设备代替 GPU）时抛出了 "
                            f"{_short_error(error)}：函数内部有个张量是在 CPU 上新建的；"
                            "新建时请写 device=q.device。")
            if output.device.type != "meta" or weights.device.type != "meta":
                return text(f"for inputs on the 'meta' device the output is on {output.device} "
                            f"and the weights on {weights.device}: results must stay on the "
                            "inputs' device.",
                            f"输入在 'meta' 设备上时，输出在 {output.device} 上，权重在 "
                            f"{weights.device} 上：结果必须留在输入所在的设备上。")
            return None

        return self.over_layouts(DTYPE_DEVICE, probe, text(
            "float64 in, float64 out; results stay on the inputs' device",
            "输入 float64，输出也是 float64；结果留在输入所在的设备上"))

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
                    return text(
                        f"in float16 with a mask it raised {_short_error(error)} about an "
                        "overflow: a fill like -1e9 does not fit in float16 (its largest "
                        "magnitude is 65504). Fill with float('-inf') or "
                        "torch.finfo(scores.dtype).min.",
                        f"float16 下加掩码时抛出了关于溢出的 {_short_error(error)}：-1e9 这样的"
                        "填充值放不进 float16（它能表示的最大绝对值是 65504）。请用 "
                        "float('-inf') 或 torch.finfo(scores.dtype).min 来填充。")
                raise
            if output.dtype != torch.float16:
                return text(f"float16 inputs give a {output.dtype} output: something upcasts; "
                            "keep the computation in the inputs' dtype.",
                            f"输入为 float16，输出却是 {output.dtype}：有一步把精度提升了；"
                            "计算应当保持输入的 dtype。")
            if not (output.isfinite().all() and weights.isfinite().all()):
                output32, weights32 = self.subject.call(inputs, mask, dtype=torch.float32)
                if not (output32.isfinite().all() and weights32.isfinite().all()):
                    return Finding(FLOAT16_MASKING, SKIP, text(
                        "float32 gives NaN/inf on the same inputs too, so the cause is not "
                        "float16: see the NaN/inf probe",
                        "同样的输入在 float32 下也得到 NaN/inf，所以原因不在 float16："
                        "见 NaN/inf 探针"))
                return text("NaN or inf in float16 with a causal mask: the fill value "
                            "overflowed float16 (largest magnitude 65504). Fill with "
                            "float('-inf') or torch.finfo(scores.dtype).min.",
                            "float16 下加因果掩码得到了 NaN 或 inf：填充值超出了 float16 的范围"
                            "（最大绝对值 65504）。请用 float('-inf') 或 "
                            "torch.finfo(scores.dtype).min 来填充。")
            return None

        return self.over_layouts(FLOAT16_MASKING, probe, text(
            "masking works in float16 and the output stays float16",
            "float16 下掩码正常工作，输出也保持 float16"))


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
                    message = text(f"could not run: calling it raised {_short_error(error)}; "
                                   "fix the first failing probe above and run diagnose() again",
                                   f"无法运行：调用它时抛出了 {_short_error(error)}；"
                                   "先修好上面第一个未通过的探针，再运行一次 diagnose()")
                else:
                    message = text(f"could not check what it returned ({_short_error(error)}); "
                                   "fix the first failing probe above and run diagnose() again",
                                   f"无法检查它的返回值（{_short_error(error)}）；"
                                   "先修好上面第一个未通过的探针，再运行一次 diagnose()")
                findings.append(Finding(name, FAIL, message))
    return Report(_name_of(attention), tuple(findings))
