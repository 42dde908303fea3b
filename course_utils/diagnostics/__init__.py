"""Probes that catch the classic attention bugs and say, in plain words, where to look.

``diagnose(attention)`` accepts either

- an attention *function* ``f(q, k, v, mask=None) -> (output, weights)`` with q
  ``(..., n_q, d_k)``, k ``(..., n_k, d_k)``, v ``(..., n_k, d_v)``, a bool mask
  broadcastable to ``(..., n_q, n_k)`` (True = may attend), output ``(..., n_q, d_v)`` and
  weights ``(..., n_q, n_k)``; or
- a self-attention *module* whose ``forward(x, mask=None)`` takes x
  ``(batch, seq_len, d_model)`` and returns ``(output, weights)``, weights
  ``(batch, seq_len, seq_len)`` or ``(batch, num_heads, seq_len, seq_len)``. A module is
  probed in ``eval()`` and, by the training-mode probe, in ``train()`` as well.

It returns a :class:`Report`: one :class:`Finding` per probe (its name, whether it passed,
and a message). A function is probed on two layouts, ``(batch, n_q, d_k)`` with n_q = n_k
(self-attention, where square shapes hide transposes) and ``(batch, num_heads, n_q, d_k)``
with n_q ≠ n_k and d_v ≠ d_k, so an axis counted from the front (``dim=2``,
``q.shape[2]``, ``transpose(1, 2)``) cannot pass. Every layout has a batch of at least two
different sequences, so a bug that mixes them is named as such. Probes judge the raw results:
a NaN is evidence, never cleaned away first. Every probe draws its inputs from its own
seeded generator, so a report depends only on the implementation, and the global random
state is left alone.

The package: :mod:`~course_utils.diagnostics.probe_registry` (each probe declared once, with
its place in the report), :mod:`~course_utils.diagnostics.probes` (the probes, by theme),
:mod:`~course_utils.diagnostics.subjects` (the implementation under test and the layouts of
the probe inputs), :mod:`~course_utils.diagnostics.probing` (what every probe shares) and
:mod:`~course_utils.diagnostics.report` (``Finding``, ``Report``; its lines are wrapped by
display width with :func:`course_utils.text_layout.fill`, in any language).
"""

from __future__ import annotations

import torch

from course_utils.checks import require_seed
from course_utils.diagnostics.probe_registry import registered
from course_utils.diagnostics.probes.batch_and_mode import BATCH_APART, TRAINING_MODE
from course_utils.diagnostics.probes.calls import DETERMINISM, INPUTS_UNCHANGED
from course_utils.diagnostics.probes.mask_probes import (
    CAUSAL_LEAK,
    FINITE_FILL,
    MASKED_WEIGHTS,
    PADDING_LEAK,
)
from course_utils.diagnostics.probes.numerics import DTYPE_DEVICE, FLOAT16_MASKING, NAN_INF
from course_utils.diagnostics.probes.shapes import SHAPES
from course_utils.diagnostics.probes.weight_probes import (
    OUTPUT_MIX,
    ROWS_SUM_TO_1,
    SCORE_SCALE,
    SHARED_QKV,
    score_asymmetry,
)
from course_utils.diagnostics.probing import SEE_SHAPES, Probing, short_error
from course_utils.diagnostics.report import FAIL, PASS, SKIP, Finding, Report
from course_utils.diagnostics.subjects import WrongReturn, name_of, subject_for
from course_utils.language import _
from course_utils.learner_code import raised_by_learner

# Every probe's name, in report order.
PROBES = tuple(p.name for p in registered())

__all__ = [
    "BATCH_APART", "CAUSAL_LEAK", "DETERMINISM", "DTYPE_DEVICE", "FAIL", "FINITE_FILL",
    "FLOAT16_MASKING", "INPUTS_UNCHANGED", "MASKED_WEIGHTS", "NAN_INF",
    "OUTPUT_MIX", "PADDING_LEAK", "PASS", "PROBES", "ROWS_SUM_TO_1", "SCORE_SCALE", "SEE_SHAPES",
    "SHAPES", "SHARED_QKV", "SKIP", "TRAINING_MODE", "Finding", "Report", "diagnose",
    "score_asymmetry",
]


def diagnose(attention, d_model: int | None = None, seed: int = 0) -> Report:
    """Run every probe on ``attention`` (a function or a module) and return a Report.

    ``d_model`` is needed only for a module without a ``d_model`` attribute; ``seed`` picks
    the probes' random inputs. Bad arguments of ``diagnose`` itself raise TypeError or
    ValueError. When the implementation raises, that probe fails with the exception's type
    and the other probes still run; when it returns something other than
    ``(output, weights)``, every probe says so.

    Used in lesson 08.
    """
    seed = require_seed("seed", seed)
    subject = subject_for(attention, d_model)
    probing = Probing(subject, seed)
    findings = []
    with torch.no_grad():
        for registered_probe in registered():
            name = registered_probe.name
            try:
                findings.append(registered_probe.run(probing))
            except WrongReturn as wrong:
                findings.append(Finding(name, FAIL, str(wrong)))
            except Exception as error:
                if raised_by_learner(error):
                    message = _(
                        "could not run: calling it raised {error}; fix the first failing probe "
                        "above and run diagnose() again").format(
                        error=short_error(error))
                else:
                    message = _(
                        "could not check what it returned ({error}); fix the first failing probe "
                        "above and run diagnose() again").format(
                        error=short_error(error))
                findings.append(Finding(name, FAIL, message))
    return Report(name_of(attention), tuple(findings))
