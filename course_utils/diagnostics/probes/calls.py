"""Probes of what a call does besides returning: the same input gives the same result, and
the caller's tensors are left as they were."""

from __future__ import annotations

import torch

from course_utils.diagnostics.probe_registry import probe
from course_utils.diagnostics.probing import TOLERANCE, Probing, max_abs, shown
from course_utils.diagnostics.report import Finding, probe_name
from course_utils.language import _

DETERMINISM = probe_name("same input, same output")
INPUTS_UNCHANGED = probe_name("inputs left unchanged")


@probe(DETERMINISM, order=12)
def determinism(probing: Probing) -> Finding:
    """Two calls on the same inputs must give the same result (no randomness left on in eval).

    Used in lesson 08.
    """
    def check(layout):
        inputs = probing.inputs(12, layout)
        mask = layout.causal()
        # Two calls from two random states: a deterministic implementation cannot tell.
        (out_1, w_1), (out_2, w_2) = (probing.subject.call(inputs, mask, rng=rng)
                                      for rng in (1, 2))
        if all(torch.allclose(a, b, atol=TOLERANCE, rtol=0, equal_nan=True)
               for a, b in ((out_1, out_2), (w_1, w_2))):
            return None
        gap = max_abs((out_1 - out_2).nan_to_num())
        if ((w_1 == 0) != (w_2 == 0)).any():
            return _(
                "the same inputs, called twice, gave outputs that differ by up to {gap}, and "
                "weights that are 0 in one call but not in the other: dropout is active at "
                "evaluation. F.dropout(weights, p) drops at every call (its training argument "
                "defaults to True): pass training=self.training, or use nn.Dropout, which "
                "model.eval() switches off.").format(gap=shown(gap))
        return _(
            "the same inputs, called twice, gave outputs that differ by up to {gap}: "
            "something random runs inside (torch.rand, torch.randn, dropout). At evaluation the "
            "same input must give the same output.").format(gap=shown(gap))

    return probing.over_layouts(DETERMINISM, check, _(
        "the same inputs give the same output and weights on every call"))


@probe(INPUTS_UNCHANGED, order=14)
def inputs_unchanged(probing: Probing) -> Finding:
    """The implementation must not write into its inputs.

    Used in lesson 08.
    """
    def check(layout):
        inputs = probing.inputs(13, layout)
        mask = layout.causal()
        kept, kept_mask = tuple(t.clone() for t in inputs), mask.clone()
        probing.subject.call(inputs, mask, copy=False)  # the caller's own tensors
        names = ("q", "k", "v") if len(inputs) == 3 else ("x",)
        changed = [name for name, before, after in zip(names, kept, inputs, strict=True)
                   if not torch.equal(before, after)]
        if not torch.equal(kept_mask, mask):
            changed.append("mask")
        if not changed:
            return None
        return _(
            "after the call the caller's {names} had changed: an in-place operation such as "
            "q.div_(...), q /= ..., q[...] = ... or mask.logical_not_() edits the tensor it was "
            "given, so the caller's data changes and a second call gives another result. Make a "
            "new tensor instead: q = q / math.sqrt(d_k).").format(names=_(", ").join(changed))

    return probing.over_layouts(INPUTS_UNCHANGED, check, _(
        "q, k, v and the mask are the same after the call as before it"))
