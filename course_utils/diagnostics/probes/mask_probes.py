"""Probes of masking: blocked keys get weight 0, and neither the future (causal mask) nor
padding tokens change what the other positions output."""

from __future__ import annotations

import torch

from course_utils.diagnostics.probing import TOLERANCE, Probing, max_abs
from course_utils.diagnostics.registry import probe
from course_utils.diagnostics.report import SKIP, Finding
from course_utils.language import _, join_sentences

MASKED_WEIGHTS = "masked weights are 0"
CAUSAL_LEAK = "causal leak"
PADDING_LEAK = "padding leak"
FINITE_FILL = "fill below every score"
# The real scores of the finite-fill probe: far below any finite fill a learner would pick
# (-1e4, -1e5, -20), far above -1e9, which only float16 cannot hold (its own probe).
_FAR = 1e6



def _constant_blocked_score(probing, inputs, layout, weights, allowed) -> float | None:
    """The one score every blocked key was given, read back from the weights, or None.

    Needs q and k (a function): with real scores s, a row's weights are exp(s) / Z, so a key
    with weight w had the score s_a + log(w / w_a) for any allowed key a of its row.
    """
    if probing.subject.is_module or (weights <= 0).any() or not weights.isfinite().all():
        return None
    q, k, _v = inputs
    scores = q @ k.transpose(-2, -1) / layout.d_k**0.5  # (..., n_q, n_k)
    anchor = weights.masked_fill(~allowed, 0).argmax(dim=-1, keepdim=True)  # (..., n_q, 1)
    log_z = scores.gather(-1, anchor) - weights.gather(-1, anchor).log()  # (..., n_q, 1)
    implied = (weights.log() + log_z)[~allowed]  # the score each blocked key acted as
    if float(implied.max() - implied.min()) > 1e-4:
        return None
    return float(implied.mean())


@probe(MASKED_WEIGHTS, order=30)
def masked_weights(probing: Probing) -> Finding:
    """Masked keys must get exactly zero weight.

    Used in lesson 08.
    """
    def check(layout):
        inputs = probing.inputs(3, layout)
        problems: dict[str, list[str]] = {}  # advice -> the masks it applies to
        for name, mask in ((_("causal"), layout.causal()),
                           (_("padding"), probing.padding_for(layout, 3))):
            _output, weights = probing.subject.call(inputs, mask)
            allowed = mask.expand_as(weights)
            zero_or_nan = weights.isnan() | (weights.abs() <= TOLERANCE)
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
                leaked = max_abs(weights[~allowed].nan_to_num())
                constant = _constant_blocked_score(probing, inputs, layout, weights, allowed)
                if constant is not None and abs(constant) < 1e-4:
                    advice = _(
                        "blocked keys get the weight a score of exactly 0 would get: the mask was "
                        "multiplied into the scores (scores * mask), which makes a blocked score "
                        "0, not -inf. Fill instead: scores.masked_fill(~mask, float('-inf')).")
                elif constant is not None:
                    advice = _(
                        "blocked keys get weights up to {leaked:.2f}, as a score of {constant:.3g} "
                        "would: the blocked scores were filled with a finite number that real "
                        "scores do not stay above. Fill with float('-inf').").format(
                        leaked=leaked, constant=constant)
                else:
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

    return probing.over_layouts(MASKED_WEIGHTS, check, _(
        "blocked keys get weight 0 under causal and padding masks"))


@probe(CAUSAL_LEAK, order=40)
def causal_leak(probing: Probing) -> Finding:
    """Under a causal mask, changing a future token must not change an earlier output.

    Used in lesson 08.
    """
    def check(layout):
        inputs = probing.inputs(4, layout)
        mask = layout.causal()
        baseline, weights = probing.subject.call(inputs, mask)
        worst = (0.0, None, None)
        generator = probing.generator(40)
        for j in range(1, layout.n_k):
            watched = probing.subject.watched_queries(layout, [j])[:layout.n_q]
            if not watched:
                continue
            changed, _weights = probing.subject.call(
                probing.subject.perturb(inputs, [j], generator, with_queries=True), mask)
            diff = (changed - baseline)[..., watched, :]
            finite = baseline[..., watched, :].isfinite() & changed[..., watched, :].isfinite()
            size = max_abs(diff[finite])
            if size > worst[0]:
                per_query = diff.nan_to_num().abs().amax(dim=-1)  # (..., watched)
                earliest = int(per_query.reshape(-1, len(watched)).amax(0).argmax())
                worst = (size, j, earliest)
        size, j, earliest = worst
        if size > TOLERANCE and probing.mask_holds(weights, mask):
            return _(
                "under a causal mask, changing token {j} changed the output at position "
                "{earliest} by up to {size:.2f}, although every future key has weight 0 and "
                "every row sums to 1: the future gets in before the scores, through a statistic "
                "computed across positions (a mean, norm or max over the sequence axis, "
                "dim=-2). Compute per-token statistics over the features, dim=-1.").format(
                j=j, earliest=earliest, size=size)
        if size > TOLERANCE:
            return _(
                "under a causal mask, changing token {j} changed the output at position "
                "{earliest} by up to {size:.2f}: information flows from the future. Block the "
                "future scores with -inf before a softmax over the keys: zero weights alone "
                "are not enough, a key inside the softmax's denominator still leaks.").format(
                j=j, earliest=earliest, size=size)
        return None

    return probing.over_layouts(CAUSAL_LEAK, check, _(
        "under a causal mask, changing a token never changes the outputs of the positions "
        "before it"))


@probe(PADDING_LEAK, order=50)
def padding_leak(probing: Probing) -> Finding:
    """Changing a padding token must not change any real token's output.

    Used in lesson 08.
    """
    def check(layout):
        inputs = probing.inputs(5, layout)
        mask = probing.padding_for(layout, 5)
        baseline, weights = probing.subject.call(inputs, mask)
        length = layout.lengths()[1]
        padded = list(range(length, layout.n_k))
        changed_inputs = probing.subject.perturb(inputs, padded, probing.generator(50),
                                                 sequence=1)
        changed, _weights = probing.subject.call(changed_inputs, mask)
        watched = probing.subject.watched_queries(layout, padded)
        if not probing.subject.is_module:
            watched = list(range(layout.n_q))  # cross-attention: no query is padding
        before, after = baseline[1][..., watched, :], changed[1][..., watched, :]
        both_finite = before.isfinite() & after.isfinite()
        size = max_abs((after - before)[both_finite])
        if size > TOLERANCE and probing.mask_holds(weights, mask):
            return _(
                "changing the padding keys of a sequence of {length} real tokens changed the "
                "other outputs by up to {size:.2f}, although the padding keys have weight 0 and "
                "every row sums to 1: the padding gets in before the scores, through a "
                "statistic computed across positions (over the sequence axis, dim=-2). Compute "
                "per-token statistics over the features, dim=-1.").format(
                length=length, size=size)
        if size > TOLERANCE:
            return _(
                "changing the padding keys of a sequence of {length} real tokens changed the "
                "other outputs by up to {size:.2f}: padding leaks in. The padding mask must "
                "reach the scores before the softmax, over the keys, with True = real token."
            ).format(length=length, size=size)
        return None

    return probing.over_layouts(PADDING_LEAK, check, _(
        "changing the padding tokens leaves the real tokens' outputs unchanged"))


@probe(FINITE_FILL, order=55)
def finite_fill(probing: Probing) -> Finding:
    """A finite fill (e.g. -1e4) leaks weight once the scores are large.

    Used in lesson 08.
    """
    if probing.subject.is_module:
        return Finding(FINITE_FILL, SKIP, _(
            "measured on attention functions only: it needs to set the scores' size through q "
            "and k; diagnose the function the module calls"))

    def check(layout):
        q, k, v = probing.inputs(14, layout)
        for name, mask in ((_("causal"), layout.causal()),
                           (_("padding"), probing.padding_for(layout, 14))):
            _output, weights = probing.subject.call((q, k, v), mask)
            if max_abs(weights[~mask.expand_as(weights)].nan_to_num()) > TOLERANCE:
                return Finding(FINITE_FILL, SKIP, _(
                    "the mask does not block keys even for unit-size scores: see the masked "
                    "weights probe"))
            # Every real score near -_FAR: q and k point in opposite directions.
            direction = torch.ones(layout.d_k, dtype=q.dtype) / layout.d_k**0.5
            far = _FAR**0.5 * layout.d_k**0.25
            inputs = (q + far * direction, k - far * direction, v)
            _output, weights = probing.subject.call(inputs, mask)
            leaked = max_abs(weights[~mask.expand_as(weights)].nan_to_num())
            if leaked > TOLERANCE:
                return _(
                    "with the {name} mask and real scores near {scores:.0e}, blocked keys get "
                    "weights up to {leaked:.2f}: the blocked scores were filled with a finite "
                    "number (like -1e4 or -20) that real scores can fall below, and then it "
                    "blocks nothing. Fill with float('-inf'), or torch.finfo(scores.dtype).min, "
                    "which no score goes below.").format(name=name, scores=-_FAR, leaked=leaked)
        return None

    return probing.over_layouts(FINITE_FILL, check, _(
        "blocked keys get weight 0 even when every real score is near {scores:.0e}").format(
        scores=-_FAR))
