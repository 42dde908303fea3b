"""Probes of masking: blocked keys get weight 0, and neither the future (causal mask) nor
padding tokens change what the other positions output."""

from __future__ import annotations

import torch

from course_utils.diagnostics.probe_registry import probe
from course_utils.diagnostics.probing import (
    TOLERANCE,
    Probing,
    max_abs,
    reduced_precision,
    shown,
)
from course_utils.diagnostics.report import SKIP, Finding, probe_name
from course_utils.language import _, join_sentences

MASKED_WEIGHTS = probe_name("masked weights are 0")
CAUSAL_LEAK = probe_name("causal leak")
PADDING_LEAK = probe_name("padding leak")
FINITE_FILL = probe_name("fill below every score")
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
        raw: list[str] = []
        for name, mask in ((_("causal"), layout.causal()),
                           (_("padding"), probing.padding_for(layout, 3))):
            output, weights = probing.subject.call(inputs, mask)
            problem = probing.raw_problem(output, weights, mask, name, layout)
            allowed = mask.expand_as(weights)
            zero = weights.abs() <= TOLERANCE
            if problem is None and zero[~allowed].all():
                continue
            # A NaN row is one where the code blocked every key: it counts as blocked here,
            # to recognise a mask read the wrong way round or on the wrong axis.
            blocked = zero | weights.isnan()
            if blocked[allowed].all() and (weights[~allowed] > TOLERANCE).any():
                advice = _(
                    "the weights are 0 exactly where the mask is True: the mask is read the "
                    "other way round. In this course True = may attend (as in "
                    "F.scaled_dot_product_attention), so fill where it is False: "
                    "scores.masked_fill(~mask, float('-inf')).")
            elif layout.n_q == layout.n_k and blocked[~allowed.transpose(-2, -1)].all() and (
                    weights[~allowed] > TOLERANCE).any():
                advice = _(
                    "the zero weights line up with the queries instead of the keys: the mask "
                    "was broadcast over the wrong axis. A key padding mask (batch, n_k) must "
                    "become (batch, 1, n_k), pad[:, None, :], not (batch, n_k, 1).")
            elif problem is not None:  # judged raw: a NaN weight is not a zero weight
                raw.append(problem)
                continue
            else:
                leaked = max_abs(weights[~allowed])
                constant = _constant_blocked_score(probing, inputs, layout, weights, allowed)
                if constant is not None and abs(constant) < 1e-4:
                    advice = _(
                        "blocked keys get the weight a score of exactly 0 would get: the mask was "
                        "multiplied into the scores (scores * mask), which makes a blocked score "
                        "0, not -inf. Fill instead: scores.masked_fill(~mask, float('-inf')).")
                elif constant is not None:
                    advice = _(
                        "blocked keys get weights up to {leaked}, as a score of {constant:.3g} "
                        "would: the blocked scores were filled with a finite number that real "
                        "scores do not stay above. Fill with float('-inf').").format(
                        leaked=shown(leaked), constant=constant)
                else:
                    advice = _(
                        "blocked keys still get weights up to {leaked}: the mask never "
                        "reaches the scores.").format(leaked=shown(leaked))
            problems.setdefault(advice, []).append(name)
        if raw and not problems:  # NaN or log weights, and no mask pattern explains them
            return raw[0]  # the first mask's finding names the cause; the next repeats it
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
        problem = probing.raw_problem(baseline, weights, mask, _("causal"), layout)
        if problem is not None:
            return problem
        worst = (0.0, None, None)
        generator = probing.generator(40)
        for j in range(1, layout.n_k):
            watched = probing.subject.watched_queries(layout, [j])[:layout.n_q]
            if not watched:
                continue
            # Only sequence 0 changes, and only its own earlier outputs are watched: what
            # reaches the other sequences is the 'sequences kept apart' probe's business.
            changed, _weights = probing.subject.call(
                probing.subject.perturb(inputs, [j], generator, sequence=0, with_queries=True),
                mask)
            diff = (changed - baseline)[0][..., watched, :]  # raw: a new NaN is a change
            size = float("inf") if diff.isnan().any() else max_abs(diff)
            if size > worst[0]:
                per_query = diff.nan_to_num(nan=float("inf")).abs().amax(dim=-1)
                earliest = int(per_query.reshape(-1, len(watched)).amax(0).argmax())
                worst = (size, j, earliest)
        size, j, earliest = worst
        if size > TOLERANCE and probing.mask_holds(weights, mask):
            if probing.batch_mixing() > TOLERANCE:
                return _(
                    "under a causal mask, changing token {j} changed the output at position "
                    "{earliest} by up to {size}, although every future key has weight 0 and "
                    "every row sums to 1: the future gets in before the scores, through a "
                    "statistic computed over the whole tensor, across the positions and the "
                    "sequences of the batch (see the 'sequences kept apart' probe), like "
                    "scores.mean() or q.std(). Compute per-token statistics over the "
                    "features, dim=-1.").format(j=j, earliest=earliest, size=shown(size))
            return _(
                "under a causal mask, changing token {j} changed the output at position "
                "{earliest} by up to {size}, although every future key has weight 0 and "
                "every row sums to 1: the future gets in before the scores, through a statistic "
                "computed across positions (a mean, norm or max over the sequence axis, "
                "dim=-2). Compute per-token statistics over the features, dim=-1.").format(
                j=j, earliest=earliest, size=shown(size))
        if size > TOLERANCE:
            return _(
                "under a causal mask, changing token {j} changed the output at position "
                "{earliest} by up to {size}: information flows from the future. Block the "
                "future scores with -inf before a softmax over the keys: zero weights alone "
                "are not enough, a key inside the softmax's denominator still leaks.").format(
                j=j, earliest=earliest, size=shown(size))
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
        problem = probing.raw_problem(baseline, weights, mask, _("padding"), layout)
        if problem is not None:
            return problem
        length = layout.lengths()[1]
        padded = list(range(length, layout.n_k))
        changed_inputs = probing.subject.perturb(inputs, padded, probing.generator(50),
                                                 sequence=1)
        changed, _weights = probing.subject.call(changed_inputs, mask)
        watched = probing.subject.watched_queries(layout, padded)
        if not probing.subject.is_module:
            watched = list(range(layout.n_q))  # cross-attention: no query is padding
        before, after = baseline[1][..., watched, :], changed[1][..., watched, :]
        diff = after - before  # raw: a new NaN is a change
        size = float("inf") if diff.isnan().any() else max_abs(diff)
        if size > TOLERANCE and probing.mask_holds(weights, mask):
            return _(
                "changing the padding keys of a sequence of {length} real tokens changed the "
                "other outputs by up to {size}, although the padding keys have weight 0 and "
                "every row sums to 1: the padding gets in before the scores, through a "
                "statistic computed across positions (over the sequence axis, dim=-2). Compute "
                "per-token statistics over the features, dim=-1.").format(
                length=length, size=shown(size))
        if size > TOLERANCE:
            return _(
                "changing the padding keys of a sequence of {length} real tokens changed the "
                "other outputs by up to {size}: padding leaks in. The padding mask must "
                "reach the scores before the softmax, over the keys, with True = real token."
            ).format(length=length, size=shown(size))
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
            output, weights = probing.subject.call((q, k, v), mask)
            if probing.raw_problem(output, weights, mask, name, layout) is not None:
                return Finding(FINITE_FILL, SKIP, _(
                    "the weights are NaN or log-probabilities even for unit-size scores: see "
                    "the masked weights probe"))
            if max_abs(weights[~mask.expand_as(weights)]) > TOLERANCE:
                return Finding(FINITE_FILL, SKIP, _(
                    "the mask does not block keys even for unit-size scores: see the masked "
                    "weights probe"))
            # Every real score near -_FAR: q and k point in opposite directions.
            direction = torch.ones(layout.d_k, dtype=q.dtype) / layout.d_k**0.5
            far = _FAR**0.5 * layout.d_k**0.25
            inputs = (q + far * direction, k - far * direction, v)
            unit_weights = weights
            output, weights = probing.subject.call(inputs, mask)
            if not (output.isfinite().all() and weights.isfinite().all()):
                if reduced_precision(unit_weights) == torch.float16:
                    return _(
                        "with the {name} mask and real scores near {scores:.0e}, NaN or inf came "
                        "out, and every weight is a float16 number: the scores were cast to "
                        "float16, whose range ends at 65504, so every real score became -inf and "
                        "the softmax 0/0. Keep the scores in q's dtype (see the 'rows sum to 1' "
                        "probe).").format(name=name, scores=-_FAR)
                return _(
                    "with the {name} mask and real scores near {scores:.0e}, NaN or inf came "
                    "out: a row whose real scores are all far below 0 must still give "
                    "finite weights (torch.softmax subtracts the row's maximum first).").format(
                    name=name, scores=-_FAR)
            leaked = max_abs(weights[~mask.expand_as(weights)])
            if leaked > TOLERANCE:
                return _(
                    "with the {name} mask and real scores near {scores:.0e}, blocked keys get "
                    "weights up to {leaked}: the blocked scores were filled with a finite "
                    "number (like -1e4 or -20) that real scores can fall below, and then it "
                    "blocks nothing. Fill with float('-inf'), or torch.finfo(scores.dtype).min, "
                    "which no score goes below.").format(
                    name=name, scores=-_FAR, leaked=shown(leaked))
        return None

    return probing.over_layouts(FINITE_FILL, check, _(
        "blocked keys get weight 0 even when every real score is near {scores:.0e}").format(
        scores=-_FAR))
