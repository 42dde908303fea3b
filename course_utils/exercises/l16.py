"""Lesson 16 exercises: the backward pass of one tile, a sink in the logsumexp, merging (O, L).

Every checker builds attention over more keys than the learner's function sees, with scores
of a few units in one case and in the hundreds in another (where ``exp(score)`` overflows,
even in float64).
"""

from __future__ import annotations

import math

import torch

from course_utils.exercises import (
    Exercise,
    Incorrect,
    attempt,
    expect_close,
    expect_shape,
    is_close,
    reject_half_precision,
)
from course_utils.language import N_, _

# (batch, heads, block_q, block_k, d_k, d_v, size of q and k): block_q != block_k and
# d_k != d_v everywhere, so a transposed product shows as a wrong shape.
_TILE_CASES = ((2, 3, 4, 5, 6, 3, 1.0), (1, 2, 3, 6, 4, 5, 20.0))


def _attention_parts(q, k, v):
    """Naive attention over all keys: (output, logsumexp), both in float64."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (batch, heads, n_q, n_k)
    return torch.softmax(scores, dim=-1) @ v, torch.logsumexp(scores, dim=-1, keepdim=True)


def _made(got, mistake, want) -> bool:
    """True if ``got`` is what a known ``mistake`` gives, where that differs from ``want``."""
    return is_close(got, mistake) and not is_close(mistake, want)


def _returned(result, count, what):
    if not isinstance(result, (tuple, list)) or len(result) != count:
        raise Incorrect(_("return {what} as a tuple of {count} tensors").format(
            what=what, count=count))
    return result


# --- Exercise 1: the backward pass of one tile ----------------------------------------------

def _tile_backward_reference(q, k, v, output, d_output, logsumexp):
    """Gradient contributions of one tile: q, output, d_output, logsumexp are the query block's
    rows, k and v the key block's. Returns (grad_q, grad_k, grad_v)."""
    scale = 1.0 / math.sqrt(q.shape[-1])
    scores = q @ k.transpose(-2, -1) * scale  # (batch, heads, block_q, block_k)
    p = torch.exp(scores - logsumexp)  # the weights, recomputed from the row's logsumexp
    delta = (d_output * output).sum(dim=-1, keepdim=True)  # D: (batch, heads, block_q, 1)
    d_p = d_output @ v.transpose(-2, -1)  # (batch, heads, block_q, block_k)
    d_s = p * (d_p - delta)
    return d_s @ k * scale, d_s.transpose(-2, -1) @ q * scale, p.transpose(-2, -1) @ d_output


def _tile_variants(q, k, v, output, d_output, logsumexp):
    """What the known mistakes return, by name."""
    scale = 1.0 / math.sqrt(q.shape[-1])
    scores = q @ k.transpose(-2, -1) * scale
    p = torch.exp(scores - logsumexp)
    d_p = d_output @ v.transpose(-2, -1)
    delta = (d_output * output).sum(dim=-1, keepdim=True)

    def from_p_and_ds(p, d_s, grad_scale=scale):
        return d_s @ k * grad_scale, d_s.transpose(-2, -1) @ q * grad_scale, \
            p.transpose(-2, -1) @ d_output

    local = torch.softmax(scores, dim=-1)
    unscaled = torch.exp(q @ k.transpose(-2, -1) - logsumexp)
    return {
        "local softmax": from_p_and_ds(local, local * (d_p - delta)),
        "no delta": from_p_and_ds(p, p * d_p),
        "tile delta": from_p_and_ds(p, p * (d_p - (p * d_p).sum(-1, keepdim=True))),
        "gradient scale": from_p_and_ds(p, p * (d_p - delta), 1.0),
        "score scale": from_p_and_ds(unscaled, unscaled * (d_p - delta)),
    }


_TILE_MESSAGES = {
    "local softmax": N_(
        "your weights are a softmax over this tile's keys only; the row's other tiles count "
        "too. Recompute them from the saved logsumexp: P = exp(S - L)"),
    "no delta": N_(
        "dS should be P ∘ (dP - D): the softmax's backward subtracts D = rowsum(dO ∘ O) "
        "from dP before multiplying by P"),
    "tile delta": N_(
        "your D is rowsum(P ∘ dP) over this tile alone; it needs the whole row, which is "
        "what D = rowsum(dO ∘ O) gives without seeing the other tiles"),
    "gradient scale": N_(
        "grad_q and grad_k are off by the factor 1/sqrt(d_k): the scores were q kᵀ / sqrt(d_k), "
        "so dQ = dS K / sqrt(d_k) and dK = dSᵀ Q / sqrt(d_k)"),
    "score scale": N_(
        "recompute the scores exactly as the forward pass made them, S = q kᵀ / sqrt(d_k): "
        "without the scale, exp(S - L) is not the weights"),
}


def _check_tile_backward(answer):
    generator = torch.Generator().manual_seed(16)
    for batch, heads, block_q, block_k, d_k, d_v, size in _TILE_CASES:
        n_k = 3 * block_k  # the row's keys come in three tiles
        q = torch.randn(batch, heads, block_q, d_k, generator=generator, dtype=torch.float64)
        k = torch.randn(batch, heads, n_k, d_k, generator=generator, dtype=torch.float64)
        v = torch.randn(batch, heads, n_k, d_v, generator=generator, dtype=torch.float64)
        q, k = (q * size).requires_grad_(), (k * size).requires_grad_()
        v.requires_grad_()
        d_output = torch.randn(batch, heads, block_q, d_v, generator=generator,
                               dtype=torch.float64)
        output, logsumexp = _attention_parts(q, k, v)
        grad_q = torch.zeros_like(q)
        for start in range(0, n_k, block_k):
            inputs = (q.detach(), k.detach()[..., start:start + block_k, :],
                      v.detach()[..., start:start + block_k, :], output.detach(), d_output,
                      logsumexp.detach())
            result = _returned(attempt(answer, *inputs), 3, "(grad_q, grad_k, grad_v)")
            _check_tile_result(result, _tile_backward_reference(*inputs), inputs, size)
            grad_q = grad_q + result[0].double()
        # Summed over the row's tiles, the contributions are autograd's gradient.
        expect_close(grad_q, torch.autograd.grad(output, q, d_output)[0],
                     _("grad_q summed over the row's tiles"))


def _check_tile_result(result, wanted, inputs, size):
    names = ("grad_q", "grad_k", "grad_v")
    shapes = [tuple(getattr(got, "shape", ())) for got in result]
    if shapes[0] == tuple(wanted[1].shape) != tuple(wanted[0].shape) or \
            shapes[1] == tuple(wanted[0].shape) != tuple(wanted[1].shape):
        raise Incorrect(_("return the three gradients in the order (grad_q, grad_k, grad_v), "
                          "each with the shape of its input"))
    for name, got, want in zip(names, result, wanted, strict=True):
        expect_shape(got, want.shape, name)
        if not got.is_floating_point():
            raise Incorrect(_("{name} should be floating-point, got {dtype}").format(
                name=name, dtype=got.dtype))
        if not torch.isfinite(got).all():
            if size > 1:
                raise Incorrect(_(
                    "{name} holds inf or NaN when the scores are in the hundreds: exp(S) "
                    "overflows on its own, so compute exp(S - L) in one go").format(name=name))
            raise Incorrect(_("{name} contains inf or NaN").format(name=name))
        reject_half_precision(got, want, name)
    for mistake, variant in _tile_variants(*inputs).items():
        if all(is_close(got, want) for got, want in zip(result, variant, strict=True)) and \
                not all(is_close(got, want) for got, want in zip(result, wanted, strict=True)):
            raise Incorrect(str(_TILE_MESSAGES[mistake]))
    for name, got, want in zip(names, result, wanted, strict=True):
        expect_close(got, want, name)


tile_backward = Exercise(
    title=N_("the backward pass of one tile"),
    checker=_check_tile_backward,
    reference=_tile_backward_reference,
    hints=(
        N_("Recompute S = q kᵀ / sqrt(d_k) and the weights P = exp(S - logsumexp); "
           "D = (d_output * output).sum(-1, keepdim=True)."),
        N_("dV = Pᵀ dO, dP = dO Vᵀ, dS = P ∘ (dP - D), dQ = dS K / sqrt(d_k), "
           "dK = dSᵀ Q / sqrt(d_k)."),
    ),
)


# --- Exercise 2: a sink in the logsumexp ----------------------------------------------------

def _add_sink_reference(output, logsumexp, sink):
    """(output, logsumexp) over the keys -> the same with a per-head sink logit (heads,)."""
    sink = sink.view(1, -1, 1, 1)  # one logit per head: (1, heads, 1, 1)
    with_sink = torch.logaddexp(logsumexp, sink)  # log(Σ exp(s) + exp(sink))
    return output * torch.exp(logsumexp - with_sink), with_sink


def _concatenated_form(scores, v, sink):
    """The sink as one more column of the softmax, dropped after it: (output, logsumexp)."""
    column = sink.view(1, -1, 1, 1).expand(*scores.shape[:-1], 1)
    extended = torch.cat([scores, column], dim=-1)  # (batch, heads, n_q, n_k + 1)
    return (torch.softmax(extended, dim=-1)[..., :-1] @ v,
            torch.logsumexp(extended, dim=-1, keepdim=True))


# (batch, heads, n_q, n_k, size of q and k): batch == heads in the first case, so a sink
# broadcast along the batch axis gives wrong numbers instead of an error.
_SINK_CASES = ((3, 3, 4, 5, 1.0), (2, 4, 3, 6, 20.0))


def _check_add_sink(answer):
    generator = torch.Generator().manual_seed(160)
    for batch, heads, n_q, n_k, size in _SINK_CASES:
        q = torch.randn(batch, heads, n_q, 8, generator=generator, dtype=torch.float64) * size
        k = torch.randn(batch, heads, n_k, 8, generator=generator, dtype=torch.float64) * size
        v = torch.randn(batch, heads, n_k, 5, generator=generator, dtype=torch.float64)
        scores = q @ k.transpose(-2, -1) / math.sqrt(8)
        output, logsumexp = _attention_parts(q, k, v)
        # Sinks near the rows' logsumexp, so that the sink takes a real share of the weight.
        sink = logsumexp.mean(dim=(0, 2, 3)) + torch.randn(heads, generator=generator,
                                                            dtype=torch.float64)
        result = _returned(attempt(answer, output, logsumexp, sink), 2,
                           "(output, logsumexp)")
        wanted = _concatenated_form(scores, v, sink)
        _check_sink_result(result, wanted, output, logsumexp, sink, size)


def _check_sink_result(result, wanted, output, logsumexp, sink, size):
    for name, got, want in zip(("output", "logsumexp"), result, wanted, strict=True):
        expect_shape(got, want.shape, name)
        if not got.is_floating_point():
            raise Incorrect(_("{name} should be floating-point, got {dtype}").format(
                name=name, dtype=got.dtype))
        if not torch.isfinite(got).all():
            if size > 1:
                raise Incorrect(_(
                    "{name} holds inf or NaN when the logsumexp is in the hundreds: "
                    "exp(logsumexp) overflows; torch.logaddexp(L, sink) never leaves the "
                    "log").format(name=name))
            raise Incorrect(_("{name} contains inf or NaN").format(name=name))
        reject_half_precision(got, want, name)
    got_output, got_lse = result
    want_output, want_lse = wanted
    per_head = sink.view(1, -1, 1, 1)
    if logsumexp.shape[0] == sink.shape[0] and _made(
            got_lse, torch.logaddexp(logsumexp, sink.view(-1, 1, 1, 1)), want_lse):
        raise Incorrect(_("the sink is one logit per head, so it lines up with axis 1 of "
                          "(batch, heads, n_q, 1): sink.view(1, -1, 1, 1)"))
    if _made(got_lse, logsumexp + per_head, want_lse):
        raise Incorrect(_("the sink adds exp(sink) to the sum inside the log, it does not add "
                          "sink to L: L' = log(exp(L) + exp(sink)) = logaddexp(L, sink)"))
    if _made(got_lse, torch.maximum(logsumexp, per_head), want_lse):
        raise Incorrect(_("max(L, sink) is only the larger term; L' = log(exp(L) + exp(sink)) "
                          "counts both"))
    if _made(got_lse, logsumexp, want_lse):
        raise Incorrect(_("the logsumexp should grow by the sink's term: "
                          "L' = logaddexp(L, sink)"))
    expect_close(got_lse, want_lse, "logsumexp")
    if _made(got_output, output, want_output):
        raise Incorrect(_("the output must shrink too: the sink takes a share of every row's "
                          "weight, so multiply the output by exp(L - L')"))
    if _made(got_output, output * torch.exp(want_lse - logsumexp), want_output):
        raise Incorrect(_("the output is rescaled the wrong way: the factor is exp(L - L'), "
                          "at most 1"))
    if _made(got_output, output * torch.exp(per_head - want_lse), want_output):
        raise Incorrect(_("exp(sink - L') is the sink's own weight; the keys keep "
                          "exp(L - L') of theirs"))
    expect_close(got_output, want_output, _("the output with the sink"))


add_sink = Exercise(
    title=N_("a sink in the logsumexp"),
    checker=_check_add_sink,
    reference=_add_sink_reference,
    hints=(
        N_("The sink adds exp(sink) to every row's sum of exponentials: "
           "L' = torch.logaddexp(L, sink) with sink.view(1, -1, 1, 1)."),
        N_("The keys' weights were exp(s - L); now they are exp(s - L'), so the output is "
           "multiplied by exp(L - L')."),
    ),
)


# --- Exercise 3: merge two partial results (O, L) -------------------------------------------

def _merge_results_reference(a, b):
    """(output, logsumexp) over two sets of keys -> the same over all of them."""
    out_a, lse_a = a
    out_b, lse_b = b
    lse = torch.logaddexp(lse_a, lse_b)  # (..., n_q, 1)
    # Each output is normalised over its own keys; weight it by its share of the total.
    return out_a * torch.exp(lse_a - lse) + out_b * torch.exp(lse_b - lse), lse


def _part(scores, v):
    """(output, logsumexp) over some keys; a row with none gets (0, -inf)."""
    lse = torch.logsumexp(scores, dim=-1, keepdim=True)
    finite = lse.masked_fill(torch.isinf(lse), 0.0)
    return torch.exp(scores - finite) @ v, lse


def _check_merge_results(answer):
    generator = torch.Generator().manual_seed(1616)
    # First no mask and scores of a few units; then causal (the first queries see none of
    # part b's keys: L_b = -inf, output 0 there) with scores in the hundreds.
    for batch, heads, n_q, split, n_k, size, causal in ((2, 3, 5, 4, 9, 1.0, False),
                                                        (1, 2, 4, 5, 7, 20.0, True)):
        q = torch.randn(batch, heads, n_q, 8, generator=generator, dtype=torch.float64) * size
        k = torch.randn(batch, heads, n_k, 8, generator=generator, dtype=torch.float64) * size
        v = torch.randn(batch, heads, n_k, 3, generator=generator, dtype=torch.float64)
        scores = q @ k.transpose(-2, -1) / math.sqrt(8)
        if causal:  # over the last n_q positions, as causal_mask(n_q, n_k)
            hidden = torch.arange(n_q)[:, None] + n_k - n_q < torch.arange(n_k)
            scores = scores.masked_fill(hidden, float("-inf"))
        a, b = _part(scores[..., :split], v[..., :split, :]), _part(scores[..., split:],
                                                                     v[..., split:, :])
        result = _returned(attempt(answer, a, b), 2, "(output, logsumexp)")
        wanted = _part(scores, v)
        _check_merge_result(result, wanted, a, b, size)


def _check_merge_result(result, wanted, a, b, size):
    for name, got, want in zip(("output", "logsumexp"), result, wanted, strict=True):
        expect_shape(got, want.shape, _("the merged {name}").format(name=name))
        if not got.is_floating_point():
            raise Incorrect(_("{name} should be floating-point, got {dtype}").format(
                name=name, dtype=got.dtype))
        if not torch.isfinite(got).all():  # every row sees some key, so all is finite
            if size > 1:
                raise Incorrect(_(
                    "the merged {name} holds inf or NaN when the logsumexps are in the "
                    "hundreds: exp(L) overflows; weigh the parts by exp(L_a - L) with "
                    "L = logaddexp(L_a, L_b)").format(name=name))
            raise Incorrect(_(
                "the merged {name} holds inf or NaN; some rows see none of part b's keys "
                "(L_b = -inf, output 0): their weight exp(L_b - L) is 0").format(name=name))
        reject_half_precision(got, want, _("the merged {name}").format(name=name))
    (got_out, got_lse), (want_out, want_lse) = result, wanted
    (out_a, lse_a), (out_b, lse_b) = a, b
    if _made(got_lse, torch.maximum(lse_a, lse_b), want_lse):
        raise Incorrect(_("max(L_a, L_b) is only the larger part; the total is "
                          "L = log(exp(L_a) + exp(L_b)) = logaddexp(L_a, L_b)"))
    if _made(got_lse, torch.logaddexp(lse_a, lse_b) - math.log(2), want_lse):
        raise Incorrect(_("that is the log of the mean of exp(L_a) and exp(L_b); the total "
                          "is the log of their sum: logaddexp(L_a, L_b)"))
    if _made(got_lse, lse_a + lse_b, want_lse):
        raise Incorrect(_("adding two logs multiplies the sums; the total is the log of their "
                          "sum: L = logaddexp(L_a, L_b)"))
    expect_close(got_lse, want_lse, _("the merged logsumexp"))
    if _made(got_out, (out_a + out_b) / 2, want_out):
        raise Incorrect(_("the two outputs are not worth the same: weight each by its share "
                          "of the total, exp(L_a - L) and exp(L_b - L)"))
    if _made(got_out, out_a + out_b, want_out):
        raise Incorrect(_("each output is already normalised over its own keys: adding them "
                          "counts every row twice; weight each by exp(L_a - L), exp(L_b - L)"))
    top = torch.maximum(lse_a, lse_b)
    if _made(got_out, out_a * torch.exp(lse_a - top) + out_b * torch.exp(lse_b - top),
             want_out):
        raise Incorrect(_("rescaling to the larger logsumexp is lesson 06's merge of "
                          "unnormalised sums; these outputs are normalised, so divide by the "
                          "total: the weights are exp(L_a - L) and exp(L_b - L)"))
    upside_down = out_a * torch.exp(want_lse - lse_a) + out_b * torch.exp(want_lse - lse_b)
    if _made(got_out, upside_down, want_out):
        raise Incorrect(_("the weights run the wrong way: part a's share is exp(L_a - L), at "
                          "most 1"))
    expect_close(got_out, want_out, _("the merged output"))


merge_results = Exercise(
    title=N_("merge two partial results (O, L)"),
    checker=_check_merge_results,
    reference=_merge_results_reference,
    hints=(
        N_("exp(L_a) and exp(L_b) are the two parts' sums of exponentials; the total's log "
           "is L = torch.logaddexp(L_a, L_b)."),
        N_("Part a's output is its weighted mean; its share of the whole row is "
           "exp(L_a - L). So O = O_a · exp(L_a - L) + O_b · exp(L_b - L)."),
    ),
)
