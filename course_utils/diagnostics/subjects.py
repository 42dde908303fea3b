"""What the probes run on: the implementation under test (a function or a module) and the
shapes of the inputs it is probed with.

A :class:`Subject` wraps the implementation: it makes probe inputs for a :class:`Layout`,
calls the implementation on copies of them (so an implementation that edits its inputs in
place cannot move the baseline) and checks that it returned the pair (output, weights).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from course_utils.checks import require_positive_int
from course_utils.language import _
from course_utils.learner_code import call_learners_code, kept_random_state
from course_utils.nn.masks import expand_padding_mask, padding_mask

# Sizes of the probe inputs: every axis gets a different size, so a transposed or
# misplaced axis cannot hide behind a square toy example.
_BATCH, _HEADS, _N_Q, _N_K, _D_K, _D_V = 2, 3, 5, 7, 8, 12
_SEQ_LEN = 6


class WrongReturn(Exception):
    """The implementation returned something other than the pair (output, weights).

    Used in lesson 08.
    """


@dataclass(frozen=True)
class Layout:
    """One shape of probe inputs: leading dims, n_q, n_k, d_k and d_v.

    Used in lesson 08.
    """

    lead: tuple[int, ...]
    n_q: int
    n_k: int
    label: str
    d_k: int = _D_K
    d_v: int = _D_V

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


# Self-attention, where square shapes hide transposes, and a heads axis with n_q != n_k and
# d_v != d_k, so that an axis counted from the front cannot pass: most probes run on both.
SELF = Layout((_BATCH,), _SEQ_LEN, _SEQ_LEN, "(batch, seq_len, d_k)")
HEADS = Layout((_BATCH, _HEADS), _N_Q, _N_K, "(batch, num_heads, n_q, d_k) with n_q ≠ n_k")
# The shapes probe: n_q != n_k even without heads, so a transposed result shows in its shape.
SHAPES_LAYOUTS = (Layout((_BATCH,), _N_Q, _N_K, "(batch, seq_len, d_k)"),
                  Layout((_BATCH, _HEADS), _N_Q, _N_K, "(batch, num_heads, seq_len, d_k)"))
# The score-scale probe: a d_k large enough for the variance of the scores to be measured,
# and every size different, so the size wrongly divided by can be named.
SCALE_LAYOUTS = (Layout((4,), 16, 24, SELF.label, d_k=64, d_v=40),
                 Layout((_BATCH, _HEADS), 16, 24, HEADS.label, d_k=64, d_v=40))


def check_pair(result) -> tuple[torch.Tensor, torch.Tensor]:
    """``result`` as ``(output, weights)``, or WrongReturn saying what came instead.

    Used in lesson 08.
    """
    if isinstance(result, torch.Tensor):
        raise WrongReturn(_(
            "it returned one tensor of shape {result_shape} instead of the pair (output, "
            "weights): end with `return weights @ v, weights`").format(
            result_shape=tuple(result.shape)))
    if not isinstance(result, (tuple, list)) or len(result) != 2:
        what = (_(
            "a {kind} of {n_result} items").format(
            kind=type(result).__name__, n_result=len(result))
                if isinstance(result, (tuple, list)) else type(result).__name__)
        raise WrongReturn(_(
            "it returned {what} instead of the pair (output, weights): end with `return weights @ "
            "v, weights`").format(what=what))
    if not all(isinstance(t, torch.Tensor) for t in result):
        kinds = ", ".join(type(t).__name__ for t in result)
        raise WrongReturn(_(
            "it returned ({kinds}) instead of two tensors (output, weights)").format(
            kinds=kinds))
    return tuple(result)


class Subject:
    """What the probes need from an implementation, whether function or module.

    ``inputs`` is a tuple of tensors: (q, k, v) for a function, (x,) for a module. Key
    position j of every one of them is "token j".

    Used in lesson 08.
    """

    is_module = False
    layouts: tuple[Layout, ...] = ()
    # The random state every call starts from: an implementation that draws random numbers
    # (dropout left on) gives the same result on every call, so one seed gives one report.
    rng_seed = 0

    def make_inputs(self, generator, layout, dtype, scale=1.0):
        raise NotImplementedError

    def run(self, inputs, mask):
        raise NotImplementedError

    def call(self, inputs, mask=None, dtype=torch.float64, device="cpu", rng=0, copy=True,
             training=False):
        """Run the implementation from random state ``rng_seed + rng``; the global random
        state is left as it was, and an exception it raises is marked as the learner's
        (:mod:`course_utils.learner_code`). ``copy=False`` hands it the caller's own tensors (when
        their dtype and device already match); ``training=True`` runs a module in training
        mode (``module.train()``; a function has no mode)."""
        # Clones: an implementation that edits its inputs in place cannot move the baseline.
        inputs = tuple(t.to(device=device, dtype=dtype, copy=copy) for t in inputs)
        mask = None if mask is None else mask.to(device=device, copy=copy)
        with kept_random_state(self.rng_seed + rng):
            result = call_learners_code(self.run, inputs, mask)
        return check_pair(result)

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


class FunctionSubject(Subject):
    """An attention function ``f(q, k, v, mask=None) -> (output, weights)`` under test.

    Used in lesson 08.
    """
    layouts = (SELF, HEADS)

    def __init__(self, function: Callable):
        self.function = function

    def make_inputs(self, generator, layout, dtype, scale=1.0):
        sizes = ((layout.n_q, layout.d_k), (layout.n_k, layout.d_k), (layout.n_k, layout.d_v))
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


class ModuleSubject(Subject):
    """An attention module ``m(x, mask=None) -> (output, weights)`` under test.

    Used in lesson 08.
    """
    is_module = True
    layouts = (SELF,)

    def __init__(self, module: nn.Module, d_model: int):
        self.module = module
        self.d_model = d_model
        self._copies: dict = {}

    def make_inputs(self, generator, layout, dtype, scale=1.0):
        return (scale * torch.randn(*layout.lead, layout.n_k, self.d_model, generator=generator,
                                    dtype=dtype),)

    def _copy(self, dtype, device, training):
        # Probe a copy: converting the learner's module in place would change it.
        key = (dtype, str(device), training)
        if key not in self._copies:
            module = copy.deepcopy(self.module).to(device=device, dtype=dtype)
            self._copies[key] = module.train(training)
        return self._copies[key]

    def call(self, inputs, mask=None, dtype=torch.float64, device="cpu", rng=0, copy=True,
             training=False):
        self._current = (dtype, device, training)
        return super().call(inputs, mask, dtype, device, rng, copy)

    def run(self, inputs, mask):
        (x,) = inputs
        return self._copy(*self._current)(x, mask=mask)

    def perturb(self, inputs, positions, generator, sequence=None, with_queries=True):
        return (_redraw(inputs[0], positions, generator, sequence),)


def subject_for(attention, d_model) -> Subject:
    """The :class:`Subject` that wraps ``attention`` (a function or a module).

    Used in lesson 08.
    """
    if isinstance(attention, type) and issubclass(attention, nn.Module):
        raise TypeError(_(
            "diagnose() needs an instance, got the class {kind}; build one first, e.g. "
            "{kind}(d_model, ...)"
        ).format(kind=attention.__name__))
    if isinstance(attention, nn.Module):
        if d_model is None:
            d_model = getattr(attention, "d_model", None)
            if d_model is None:
                raise ValueError(
                    _(
                        "diagnose() could not tell the module's d_model (no .d_model attribute); "
                        "pass it: diagnose(module, d_model=...)"
                    ))
        return ModuleSubject(attention, require_positive_int("d_model", d_model))
    if callable(attention):
        if d_model is not None:
            raise ValueError(_(
                "d_model is only for modules: an attention function receives q, k and v directly"
            ))
        return FunctionSubject(attention)
    raise TypeError(_(
        "diagnose() expects an attention function f(q, k, v, mask=None) or an nn.Module with "
        "forward(x, mask=None), got {kind}"
    ).format(kind=type(attention).__name__))


def name_of(attention) -> str:
    """A readable name of the implementation, for the report's title.

    Used in lesson 08.
    """
    if isinstance(attention, nn.Module):
        return type(attention).__name__
    return getattr(attention, "__name__", type(attention).__name__)
