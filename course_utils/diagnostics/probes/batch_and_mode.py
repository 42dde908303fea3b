"""Probes of what a batch and a mode must not change: the sequences of a batch are computed
apart, and a module in training mode adds dropout on the weights at most."""

from __future__ import annotations

import torch

from course_utils.diagnostics.probe_registry import probe
from course_utils.diagnostics.probing import TOLERANCE, Probing, max_abs, near, shown
from course_utils.diagnostics.report import FAIL, PASS, SKIP, Finding, probe_name
from course_utils.diagnostics.subjects import SELF
from course_utils.language import _

BATCH_APART = probe_name("sequences kept apart")
TRAINING_MODE = probe_name("training mode")
# Calls in training mode, each from its own random state: dropout that is there shows.
_TRAINING_CALLS = (1, 2, 3)


@probe(BATCH_APART, order=45)
def batch_apart(probing: Probing) -> Finding:
    """Changing one sequence of a batch must not change the outputs of the others.

    Used in lesson 08.
    """
    size = probing.batch_mixing()
    if size <= TOLERANCE:
        return Finding(BATCH_APART, PASS, _(
            "changing every token of one sequence leaves the other sequences of the batch "
            "unchanged, with and without a causal mask"))
    return Finding(BATCH_APART, FAIL, _(
        "changing the tokens of sequence 0 changed the outputs of sequence 1 by up to {size}: "
        "the sequences of a batch mix. A statistic runs over the batch axis (dim=0), like "
        "q.mean(dim=0), a norm over dim=0, or a mean or max over the whole tensor; or a "
        "reshape moved tokens from one sequence into another. Each sequence must see only "
        "itself: compute statistics per token, over the features (dim=-1).").format(
        size=shown(size)))


def _dropped_from(train: torch.Tensor, weights: torch.Tensor) -> bool:
    """``train`` is ``weights`` with some entries set to 0 and the rest scaled by one factor
    of at least 1, 1/(1-p): inverted dropout on the weights."""
    kept = train != 0
    if not bool(kept.any()):
        return True
    ratio = train[kept] / weights[kept]
    factor = float(ratio.mean())
    return factor >= 1 - TOLERANCE and torch.allclose(
        ratio, torch.full_like(ratio, factor), atol=1e-9, rtol=1e-6)


@probe(TRAINING_MODE, order=120)
def training_mode(probing: Probing) -> Finding:
    """A module in training mode (``module.train()``) gives its eval weights, or those with
    dropout applied after the softmax; never NaN, never weight on a blocked key.

    Used in lesson 08.
    """
    if not probing.subject.is_module:
        return Finding(TRAINING_MODE, SKIP, _(
            "applies to modules: a function has no training mode (model.train())"))
    inputs = probing.inputs(16, SELF)
    for mask, name in ((None, None), (SELF.causal(), _("causal"))):
        output, weights = probing.subject.call(inputs, mask)
        for rng in _TRAINING_CALLS:
            out_t, w_t = probing.subject.call(inputs, mask, rng=rng, training=True)
            if not (out_t.isfinite().all() and w_t.isfinite().all()):
                bad = ~w_t.isfinite().all(-1)
                return Finding(TRAINING_MODE, FAIL, _(
                    "in training mode (model.train()) with a {name} mask, {n_bad} of {n_rows} "
                    "rows of the weights are NaN, while eval() gives none: something that runs "
                    "only in training turns a blocked score's -inf into NaN, as dropout on the "
                    "masked scores does (-inf × 0 = NaN). Dropout belongs on the weights, "
                    "after the softmax: weights = self.dropout(torch.softmax(scores, "
                    "dim=-1)).").format(name=name, n_bad=int(bad.sum()), n_rows=bad.numel()))
            if mask is not None:
                leaked = max_abs(w_t[~mask.expand_as(w_t)])
                if leaked > TOLERANCE:
                    return Finding(TRAINING_MODE, FAIL, _(
                        "in training mode (model.train()) blocked keys get weights up to "
                        "{leaked} under a causal mask, and 0 in eval(): something that runs "
                        "only in training acts on the scores before the mask.").format(
                        leaked=shown(leaked)))
            if torch.equal(w_t, weights) or _dropped_from(w_t, weights):
                continue
            sums = w_t.sum(-1)
            if torch.allclose(sums, torch.ones_like(sums), atol=TOLERANCE):
                return Finding(TRAINING_MODE, FAIL, _(
                    "in training mode (model.train()) the weights differ from eval()'s by up "
                    "to {gap} and change from call to call, yet every row still sums to 1: "
                    "the dropout acts before the softmax, on the scores (or on q and k). A "
                    "dropped score becomes 0, an ordinary score that still takes weight, not "
                    "a removed key, and a dropped -inf becomes NaN. Apply dropout to the "
                    "weights, after the softmax: weights = self.dropout(torch.softmax(scores, "
                    "dim=-1)).").format(gap=shown(max_abs(w_t - weights))))
            return Finding(TRAINING_MODE, FAIL, _(
                "in training mode (model.train()) the weights differ from eval()'s by up to "
                "{gap}, and not as dropout on the weights would make them (some set to 0, the "
                "rest scaled by one factor); rows sum to between {low} and {high}. Only "
                "dropout on the weights, after the softmax, belongs in training "
                "mode.").format(gap=shown(max_abs(w_t - weights)),
                                low=near(float(sums.min())), high=near(float(sums.max()))))
    return Finding(TRAINING_MODE, PASS, _(
        "in training mode the weights are eval()'s, or those with dropout applied after the "
        "softmax; no NaN and no weight on blocked keys"))
