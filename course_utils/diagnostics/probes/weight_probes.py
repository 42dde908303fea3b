"""Probes of what the weights and the output are: rows that sum to 1, the scale of the
scores, output = weights @ v, and scores that are not symmetric."""

from __future__ import annotations

import torch

from course_utils.checks import require_tensor
from course_utils.diagnostics.probe_registry import probe
from course_utils.diagnostics.probing import (
    TOLERANCE,
    Probing,
    max_abs,
    near,
    reduced_precision,
    shown,
)
from course_utils.diagnostics.report import FAIL, PASS, SKIP, Finding, probe_name
from course_utils.diagnostics.subjects import SCALE_LAYOUTS, SELF
from course_utils.language import _

ROWS_SUM_TO_1 = probe_name("rows sum to 1")
SCORE_SCALE = probe_name("score scale")
OUTPUT_MIX = probe_name("output = weights @ v")
SHARED_QKV = probe_name("shared Q/K/V weights")



def score_asymmetry(weights: torch.Tensor) -> torch.Tensor:
    """How far square attention weights ``(..., n, n)`` are from coming from symmetric scores.

    Symmetric scores, score(i, j) = score(j, i), are what one shared projection for Q and K
    gives. The softmax adds a constant c_i to row i of the log-weights, so then
    log w - log wᵀ = c_i - c_j exactly. Returns the largest deviation from that form, one
    number per matrix ``(...,)``: ~1e-7 (float32) or ~1e-15 (float64) for symmetric scores.

    Used in lesson 08.
    """
    weights = require_tensor("weights", weights, "(..., n, n)")
    if weights.shape[-1] != weights.shape[-2]:
        raise ValueError(_(
            "weights should be square attention weights (..., n, n), got shape {weights_shape}"
        ).format(weights_shape=tuple(weights.shape)))
    log_w = weights.log()
    antisym = log_w - log_w.transpose(-2, -1)  # (..., n, n)
    row_part = antisym.mean(dim=-1, keepdim=True)  # (..., n, 1): c_i up to a constant
    residual = antisym - (row_part - row_part.transpose(-2, -1))
    return residual.abs().amax(dim=(-2, -1))


@probe(ROWS_SUM_TO_1, order=20)
def rows_sum_to_1(probing: Probing) -> Finding:
    """Each row of weights must sum to 1 over the keys.

    Used in lesson 08.
    """
    def check(layout):
        inputs = probing.inputs(2, layout)
        output, weights = probing.subject.call(inputs)
        problem = probing.raw_problem(output, weights)  # NaN and log weights first, raw
        if problem is not None:
            return problem
        sums = weights.sum(-1)
        if not torch.allclose(sums, torch.ones_like(sums), atol=TOLERANCE):
            columns = weights.sum(-2)
            if torch.allclose(columns, torch.ones_like(columns), atol=TOLERANCE):
                return _(
                    "the columns of the weights sum to 1, not the rows: the softmax "
                    "normalised over the queries. Use softmax(scores, dim=-1), so each "
                    "query's weights over the keys sum to 1.")
            low, high = float(sums.min()), float(sums.max())
            if probing.varies():
                return _(
                    "rows sum to between {low} and {high}, not 1, and the weights "
                    "change from call to call: dropout on the weights at evaluation zeroes some "
                    "and scales the rest up (see the 'same input, same output' probe); the "
                    "softmax itself may be right.").format(low=near(low), high=near(high))
            dtype = reduced_precision(weights)
            if dtype is not None:
                error = float((sums - 1).abs().max())
                return _(
                    "rows sum to between {low} and {high}, not 1: off by up to {error}, the "
                    "size of {dtype}'s precision (its eps is {eps}), and every weight is a "
                    "{dtype} number. The softmax ran in {dtype} and was cast back: for {input} "
                    "inputs compute in {input} (keep the scores in q's dtype; in mixed "
                    "precision, torch.softmax(scores, dim=-1, dtype=torch.float32)).").format(
                    low=near(low), high=near(high), error=f"{error:.2g}",
                    dtype=str(dtype).removeprefix("torch."),
                    eps=f"{torch.finfo(dtype).eps:.2g}",
                    input=str(weights.dtype).removeprefix("torch."))
            return _(
                "rows sum to between {low} and {high}, not 1: the weights are not a "
                "softmax over the last axis (the keys).").format(low=near(low), high=near(high))
        for name, mask in ((_("causal"), layout.causal()),
                           (_("padding"), probing.padding_for(layout, 2))):
            output, masked = probing.subject.call(inputs, mask)
            problem = probing.raw_problem(output, masked, mask, name, layout)
            if problem is not None:
                return problem
            sums = masked.sum(-1)
            if not torch.allclose(sums, torch.ones_like(sums), atol=TOLERANCE):
                low = float(sums.min())
                return _(
                    "without a mask every row sums to 1, but with a {name} mask rows sum to "
                    "as little as {low}: the masked weights were zeroed after the "
                    "softmax, which breaks the normalisation. Fill the masked *scores* with "
                    "-inf before the softmax.").format(name=name, low=near(low))
        return None

    return probing.over_layouts(ROWS_SUM_TO_1, check, _(
        "every query's weights sum to 1, with and without causal and padding masks"))


@probe(SCORE_SCALE, order=60)
def score_scale(probing: Probing) -> Finding:
    """The scores must be divided by sqrt(d_k).

    Used in lesson 08.
    """
    if probing.subject.is_module:
        return Finding(SCORE_SCALE, SKIP, _(
            "measured on attention functions only: in a module the projections set the "
            "variance of q and k; diagnose the function the module calls"))
    d_k = SCALE_LAYOUTS[0].d_k
    if probing.batch_mixing() > TOLERANCE:
        return Finding(SCORE_SCALE, SKIP, _(
            "the sequences of the batch mix (see the 'sequences kept apart' probe), so the "
            "scores cannot be read back from one sequence's weights"))

    def check(layout):
        n_q, n_k, d_k, d_v = layout.n_q, layout.n_k, layout.d_k, layout.d_v
        inputs = probing.subject.make_inputs(probing.generator(6), layout, torch.float64)
        _output, weights = probing.subject.call(inputs)
        if not torch.allclose(weights.sum(-1), torch.ones(()).double(), atol=TOLERANCE):
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

    finding = probing.over_layouts(SCORE_SCALE, check, "", SCALE_LAYOUTS)
    if finding.passed:
        return Finding(SCORE_SCALE, PASS, _(
            "for unit-variance q and k with d_k = {d_k}, the scores have variance ≈ 1, with "
            "and without a heads axis").format(d_k=d_k))
    return finding


@probe(OUTPUT_MIX, order=70)
def output_mix(probing: Probing) -> Finding:
    """The output must be the weights times the values, query by query.

    Used in lesson 08.
    """
    if probing.subject.is_module:
        return Finding(OUTPUT_MIX, SKIP, _(
            "measured on attention functions only: a module's v is made inside it (and its "
            "output may be projected again)"))

    def check(layout):
        inputs = probing.inputs(11, layout)
        v = inputs[2]
        for mask in (None, layout.causal()):
            output, weights = probing.subject.call(inputs, mask)
            mixed = weights @ v  # (..., n_q, d_v)
            if output.shape != mixed.shape:
                return _(
                    "the output is {output_shape} but weights @ v is {mixed_shape}: return "
                    "weights @ v.").format(
                    output_shape=tuple(output.shape), mixed_shape=tuple(mixed.shape))
            if torch.allclose(output, mixed, atol=TOLERANCE, rtol=TOLERANCE,
                              equal_nan=True):
                continue
            ratio = float((output * mixed).sum() / (mixed * mixed).sum())
            if torch.allclose(output, ratio * mixed, atol=TOLERANCE, rtol=1e-4):
                again = (_(
                    " That is 1/sqrt(d_k): the scale belongs on the scores only, not on the "
                    "output too.")
                         if abs(ratio * layout.d_k**0.5 - 1) < 1e-3 else "")
                return _(
                    "the output is weights @ v times {ratio:.3g}: return weights @ v "
                    "unchanged.{again}").format(ratio=ratio, again=again)
            gap = max_abs((output - mixed).nan_to_num())
            return _(
                "the output differs from weights @ v by up to {gap}: the output must mix "
                "the values with exactly the weights returned, output = weights @ v.").format(
                gap=shown(gap))
        return None

    return probing.over_layouts(OUTPUT_MIX, check, _(
        "the output is the returned weights times v, with and without a mask"))


@probe(SHARED_QKV, order=80)
def shared_qkv(probing: Probing) -> Finding:
    """Q and K must come from separate maps (a shared map forces symmetric scores).

    Used in lesson 08.
    """
    if not probing.subject.is_module:
        return Finding(SHARED_QKV, SKIP, _(
            "applies to modules: a function receives q, k and v already projected"))
    _output, weights = probing.subject.call(probing.inputs(7, SELF))
    asymmetry = score_asymmetry(weights)  # one number per (batch, head) matrix
    if bool((asymmetry < TOLERANCE).any()):
        return Finding(SHARED_QKV, FAIL, _(
            "score(i, j) = score(j, i) for every pair of tokens: queries and keys come from "
            "one shared projection, so every relation is mutual and each token tends to "
            "favour itself. Give Q, K and V their own nn.Linear (lesson 02)."))
    least = float(asymmetry.min())
    return Finding(SHARED_QKV, PASS, _(
        "the scores are not symmetric (asymmetry at least {least:.2f}): queries and keys come "
        "from different projections").format(least=least))
