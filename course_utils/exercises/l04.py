"""Lesson 04 exercises: split the features into heads, merge them back, assemble the whole
multi-head module (checked against ``torch.nn.MultiheadAttention``), and count its parameters
for real configurations."""

from __future__ import annotations

import math

import torch
from torch import nn

from course_utils.exercises import (
    Exercise,
    Incorrect,
    as_number,
    attempt,
    expect_close,
    expect_shape,
    expect_stable,
    is_close,
)
from course_utils.language import N_, _
from course_utils.models.sequence_models import count_parameters


def _split_heads_reference(x, num_heads):
    """x (batch, seq_len, d_model) -> (batch, heads, seq_len, d_k), d_k = d_model / heads."""
    batch, seq_len, d_model = x.shape
    d_k = d_model // num_heads
    x = x.view(batch, seq_len, num_heads, d_k)  # cut each token's features into heads
    return x.transpose(1, 2)  # (batch, heads, seq_len, d_k)


def _merge_heads_reference(x):
    """x (batch, heads, seq_len, d_k) -> (batch, seq_len, d_model), heads side by side."""
    batch, heads, seq_len, d_k = x.shape
    x = x.transpose(1, 2)  # (batch, seq_len, heads, d_k)
    return x.reshape(batch, seq_len, heads * d_k)  # reshape copies: x is not contiguous now


def _interleaved_heads(x, num_heads):
    """The classic slip: head h gets every num_heads-th feature instead of one block."""
    batch, seq_len, d_model = x.shape
    return x.view(batch, seq_len, d_model // num_heads, num_heads).permute(0, 3, 1, 2)


def _check_split_heads(answer):
    # batch, seq_len, heads and d_k all differ, so a swapped axis shows up in the shape; then
    # other batches, lengths, widths and head counts (1, odd, even, d_k = 1), so that no size
    # written into the answer passes.
    generator = torch.Generator().manual_seed(4)
    x = torch.randn(2, 5, 12, generator=generator)
    cases = [(x, 3), (x, 4)]
    for shape, num_heads in (((3, 7, 24), 8), ((1, 4, 10), 5), ((4, 3, 18), 1), ((2, 6, 6), 6)):
        cases.append((torch.randn(*shape, generator=generator), num_heads))
    for x, num_heads in cases:
        _check_split_heads_once(answer, x, num_heads)


def _check_split_heads_once(answer, x, num_heads):
    batch, seq_len, d_model = x.shape
    d_k = d_model // num_heads
    call = f"split_heads(x {tuple(x.shape)}, {num_heads})"
    result = attempt(answer, x.clone(), num_heads)
    if isinstance(result, torch.Tensor) and tuple(result.shape) == (
            batch, seq_len, num_heads, d_k) != (batch, num_heads, seq_len, d_k):
        raise Incorrect(_(
            "shape {result_shape} is (batch, seq_len, heads, d_k): now swap seq_len and heads "
            "with .transpose(1, 2)").format(result_shape=tuple(result.shape)))
    expected = _split_heads_reference(x, num_heads)
    expect_shape(result, expected.shape, call)
    if num_heads > 1 and seq_len > 1:
        if torch.equal(result, x.reshape(batch, num_heads, seq_len, d_k).to(result.dtype)):
            raise Incorrect(_(
                "you reshaped straight into (batch, heads, seq_len, d_k): a reshape reads the "
                "numbers in memory order, so head 0's first 'positions' are d_k-sized pieces of "
                "token 0's features, then of token 1's: features of one token end up at several "
                "positions. View as (batch, seq_len, heads, d_k) first (each token's features cut "
                "into heads), then transpose"))
    if num_heads > 1 and d_k > 1:
        if torch.equal(result, _interleaved_heads(x, num_heads).to(result.dtype)):
            raise Incorrect(_(
                "head 0 got features 0, {num_heads}, {twice_num_heads}, ... (a stride of "
                "{num_heads}); it should get one block, features 0..{last_feature}: view as "
                "(batch, seq_len, heads, d_k), not (batch, seq_len, d_k, heads)").format(
                num_heads=num_heads, twice_num_heads=2 * num_heads, last_feature=d_k - 1))
    expect_close(result, expected, call)


def _check_merge_heads(answer):
    generator = torch.Generator().manual_seed(5)
    # A second x, then one head, eight heads, a batch of one: a hard-coded answer fails.
    for shape in ((2, 3, 5, 4), (3, 4, 2, 5), (1, 8, 7, 3), (4, 1, 6, 16)):
        _check_merge_heads_once(answer, torch.randn(*shape, generator=generator))


def _check_merge_heads_once(answer, heads):
    batch, num_heads, seq_len, d_k = heads.shape
    try:
        result = attempt(answer, heads.clone())
    except RuntimeError as error:
        if "view" in str(error):
            raise Incorrect(_(
                "view() failed because after transpose the tensor is no longer contiguous in "
                "memory: use .reshape(...) (or .contiguous().view(...))")) from None
        raise
    expected = _merge_heads_reference(heads)
    if isinstance(result, torch.Tensor) and tuple(result.shape) == (
            batch, seq_len, num_heads, d_k):
        raise Incorrect(_(
            "shape {shape} is (batch, seq_len, heads, d_k): the heads still need to be "
            "concatenated into one feature axis of size heads * d_k").format(
            shape=tuple(result.shape)))
    expect_shape(result, expected.shape, _("merge_heads(x) for x {shape}").format(
        shape=tuple(heads.shape)))
    right = is_close(result, expected)  # with one head, a direct reshape is right too
    if not right and torch.equal(result, heads.reshape(expected.shape).to(result.dtype)):
        raise Incorrect(_(
            "you reshaped (batch, heads, seq_len, d_k) directly, which mixes tokens together. "
            "Move heads next to d_k first: .transpose(1, 2), then reshape"))
    if not right and torch.equal(
            result, heads.permute(0, 2, 3, 1).reshape(expected.shape).to(result.dtype)):
        raise Incorrect(_(
            "the heads are interleaved feature by feature; concatenate them instead, so that "
            "columns 0..d_k-1 are head 0, the next d_k columns head 1, and so on"))
    expect_close(result, expected, "merge_heads(x)")
    if not torch.allclose(_split_heads_reference(result.double(), num_heads), heads.double()):
        raise Incorrect(_("split_heads(merge_heads(x), heads) should give x back"))


split_heads = Exercise(
    title=N_("split the features into heads"),
    checker=_check_split_heads,
    reference=_split_heads_reference,
    hints=(
        N_(
            "With d_k = d_model // num_heads, each token's d_model features become num_heads "
            "blocks of d_k: x.view(batch, seq_len, num_heads, d_k)."),
        N_(
            "That is (batch, seq_len, heads, d_k); attention wants heads next to batch: "
            ".transpose(1, 2) gives (batch, heads, seq_len, d_k)."),
    ),
)

merge_heads = Exercise(
    title=N_("concatenate the heads"),
    checker=_check_merge_heads,
    reference=_merge_heads_reference,
    hints=(
        N_(
            "Undo split_heads in reverse order: first .transpose(1, 2) to get (batch, seq_len, "
            "heads, d_k)."),
        N_(
            "Then glue the last two axes: .reshape(batch, seq_len, heads * d_k). view() fails "
            "here because transpose left the memory non-contiguous."),
    ),
)


# ------------------------------------------------------------------ the whole module
# Non-square on purpose: batch 2, n_q 4, n_k 6, d_model 15 with 3 heads of d_k 5 and then
# 5 heads of d_k 3, so a swapped axis or a hard-coded size changes a shape or the numbers.
MHA_BATCH, MHA_N_Q, MHA_N_K, MHA_D_MODEL = 2, 4, 6, 15


def _multi_head_reference(query, key, value, params, num_heads):
    """Multi-head attention from its weights, as nn.MultiheadAttention computes it.

    query (batch, n_q, d_model), key and value (batch, n_k, d_model); every weight is
    (d_model, d_model) in nn.Linear's layout, y = x @ w.T + b.
    Returns output (batch, n_q, d_model) and weights (batch, num_heads, n_q, n_k).
    """
    batch_size, n_q, d_model = query.shape
    n_k, d_k = key.shape[1], d_model // num_heads
    q = query @ params["w_q"].T + params["b_q"]  # (batch, n_q, d_model)
    k = key @ params["w_k"].T + params["b_k"]  # (batch, n_k, d_model)
    v = value @ params["w_v"].T + params["b_v"]  # (batch, n_k, d_model)
    q = q.view(batch_size, n_q, num_heads, d_k).transpose(1, 2)  # (batch, num_heads, n_q, d_k)
    k = k.view(batch_size, n_k, num_heads, d_k).transpose(1, 2)  # (batch, num_heads, n_k, d_k)
    v = v.view(batch_size, n_k, num_heads, d_k).transpose(1, 2)  # (batch, num_heads, n_k, d_k)
    scores = q @ k.transpose(-2, -1) / math.sqrt(d_k)  # (batch, num_heads, n_q, n_k)
    weights = torch.softmax(scores, dim=-1)  # over the keys
    heads = weights @ v  # (batch, num_heads, n_q, d_k)
    concatenated = heads.transpose(1, 2).reshape(batch_size, n_q, d_model)
    return concatenated @ params["w_o"].T + params["b_o"], weights


def _torch_module_and_params(num_heads: int, d_model: int = MHA_D_MODEL):
    """An ``nn.MultiheadAttention`` with seeded weights, and the same weights as a dict."""
    generator = torch.Generator().manual_seed(40 + num_heads + d_model)
    module = nn.MultiheadAttention(d_model, num_heads, batch_first=True).eval()
    with torch.no_grad():
        for parameter in module.parameters():
            parameter.copy_(0.3 * torch.randn(parameter.shape, generator=generator))
    w_q, w_k, w_v = module.in_proj_weight.detach().chunk(3)
    b_q, b_k, b_v = module.in_proj_bias.detach().chunk(3)
    params = {"w_q": w_q, "b_q": b_q, "w_k": w_k, "b_k": b_k, "w_v": w_v, "b_v": b_v,
              "w_o": module.out_proj.weight.detach(), "b_o": module.out_proj.bias.detach()}
    return module, {name: value.clone() for name, value in params.items()}


def _far_params(params: dict, num_heads: int) -> dict:
    """Float64 copies of ``params`` whose scores are in the thousands, positive and negative:
    in each head, feature 0 of every key is 50 and feature 0 of each query is large (a row's
    softmax still depends on the other features)."""
    params = {name: value.double().clone() for name, value in params.items()}
    first = torch.arange(num_heads) * (params["w_q"].shape[0] // num_heads)
    params["w_k"][first], params["b_k"][first] = 0.0, 50.0
    params["w_q"][first], params["b_q"][first] = 150 * params["w_q"][first], 0.0
    return params


def _variant(query, key, value, params, num_heads, mistake: str):
    """The reference with one classic mistake, to name it when the learner makes it."""
    batch_size, n_q, d_model = query.shape
    n_k, d_k = key.shape[1], d_model // num_heads

    def project(x, name):
        weight = params[f"w_{name}"] if mistake == "untransposed" else params[f"w_{name}"].T
        return x @ weight + (0 if mistake == "no biases" else params[f"b_{name}"])

    def split(x, n):
        if mistake == "reshape split":
            return x.reshape(batch_size, num_heads, n, d_k)
        return x.view(batch_size, n, num_heads, d_k).transpose(1, 2)

    q = split(project(query, "q"), n_q)
    k = split(project(key, "k"), n_k)
    v = split(project(key if mistake == "values from key" else value, "v"), n_k)
    divisor = {"no scale": 1, "scale by d_model": d_model, "scale by d_k": d_k}.get(mistake, d_k)
    divisor = divisor if mistake in ("scale by d_k", "no scale") else math.sqrt(divisor)
    dim = {"softmax over queries": -2, "softmax over heads": 1}.get(mistake, -1)
    weights = torch.softmax(q @ k.transpose(-2, -1) / divisor, dim=dim)
    heads = weights @ v
    if mistake == "reshape merge":
        concatenated = heads.reshape(batch_size, n_q, d_model)
    else:
        concatenated = heads.transpose(1, 2).reshape(batch_size, n_q, d_model)
    return concatenated if mistake == "no W_O" else project(concatenated, "o")


_MHA_MISTAKES = {
    "no scale": N_("the scores are not scaled: divide q @ kᵀ by sqrt(d_k) in every head"),
    "scale by d_model": N_(
        "you divided by sqrt(d_model); each head's scores are divided by sqrt(d_k) of one head, "
        "d_k = d_model / num_heads"),
    "scale by d_k": N_("you divided by d_k; the scale is 1 / sqrt(d_k)"),
    "softmax over queries": N_(
        "softmax over the wrong axis: with a heads axis the scores are (batch, num_heads, n_q, "
        "n_k), so normalise over the keys, dim=-1 (dim=2 is the queries here)"),
    "softmax over heads": N_(
        "softmax over the heads axis (dim=1): normalise over the keys, dim=-1"),
    "untransposed": N_(
        "the projections use the weights untransposed: nn.Linear stores (out_features, "
        "in_features) and computes x @ w.T + b"),
    "no biases": N_("the biases are missing: every projection is x @ w.T + b"),
    "values from key": N_(
        "the values come from `key`; project `value` with w_v (in cross-attention key and value "
        "can be different tensors)"),
    "reshape split": N_(
        "you reshaped straight into (batch, num_heads, seq_len, d_k), which puts pieces of one "
        "token at several positions: view as (batch, seq_len, num_heads, d_k), then transpose(1, "
        "2)"),
    "reshape merge": N_(
        "the heads are merged without transposing back: transpose(1, 2) to (batch, n_q, "
        "num_heads, d_k) before reshaping to (batch, n_q, d_model)"),
    "no W_O": N_("the concatenated heads are not projected: finish with @ w_o.T + b_o"),
}


# (batch, n_q, n_k, d_model, num_heads, far): the first two as before; then other sizes
# with 8 heads and with 1, and scores in the thousands (float64).
MHA_CASES = ((MHA_BATCH, MHA_N_Q, MHA_N_K, MHA_D_MODEL, 3, False),
             (MHA_BATCH, MHA_N_Q, MHA_N_K, MHA_D_MODEL, 5, False),
             (3, 5, 2, 24, 8, False), (1, 3, 7, 8, 1, False), (2, 5, 6, 12, 4, True))


def _check_multi_head(answer) -> None:
    generator = torch.Generator().manual_seed(7)
    for batch_size, n_q, n_k, d_model, num_heads, far in MHA_CASES:
        query = torch.randn(batch_size, n_q, d_model, generator=generator)
        key = torch.randn(batch_size, n_k, d_model, generator=generator)
        value = torch.randn(batch_size, n_k, d_model, generator=generator)
        module, params = _torch_module_and_params(num_heads, d_model)
        if far:
            query, key, value = query.double(), key.double(), value.double()
            params = _far_params(params, num_heads)
            expected, expected_weights = _multi_head_reference(query, key, value, params,
                                                               num_heads)
        else:
            with torch.no_grad():
                expected, expected_weights = module(query, key, value,
                                                    average_attn_weights=False)
        _check_multi_head_once(answer, (query, key, value, params, num_heads), expected,
                               expected_weights, far)


def _check_multi_head_once(answer, args, expected, expected_weights, far):
    query, key, value, params, num_heads = args
    call = f"multi_head_attention(query, key, value, params, num_heads={num_heads})"
    result = attempt(answer, *args)
    if not (isinstance(result, (tuple, list)) and len(result) == 2):  # a list reads the same
        raise Incorrect(_(
            "{call} should return a tuple (output, weights), got {kind}").format(
            call=call, kind=type(result).__name__))
    output, weights = result
    if isinstance(weights, torch.Tensor) and weights.shape == expected_weights.mean(1).shape \
            and num_heads > 1:
        raise Incorrect(_(
            "{call} returned weights of shape {weights_shape}: return the per-head weights "
            "(batch, num_heads, n_q, n_k), not their average over the heads").format(
            call=call, weights_shape=tuple(weights.shape)))
    output_of = _("the output of {call}").format(call=call)
    weights_of = _("the weights of {call}").format(call=call)
    expect_shape(output, expected.shape, output_of)
    expect_shape(weights, expected_weights.shape, weights_of)
    if far:
        expect_stable(weights, weights_of)
        expect_stable(output, output_of)
    if output.is_floating_point() and torch.isfinite(output).all():
        got = output.detach().double()
        if not torch.allclose(got, expected.double(), atol=1e-5, rtol=1e-4):
            for mistake, message in _MHA_MISTAKES.items():
                wrong = _variant(query, key, value, params, num_heads, mistake)
                if torch.allclose(got, wrong.double(), atol=1e-4, rtol=1e-3):
                    raise Incorrect(str(message))
    expect_close(weights, expected_weights, weights_of)
    expect_close(output, expected, _(
        "the output of {call} (compared with nn.MultiheadAttention)").format(call=call))


assemble_multi_head = Exercise(
    title=N_("assemble multi-head attention"),
    checker=_check_multi_head,
    reference=_multi_head_reference,
    hints=(
        N_(
            "Four steps: project (q = query @ w_q.T + b_q, and k, v alike), split into heads, "
            "attend in every head at once, concatenate and project with w_o."),
        N_(
            "Split with .view(batch_size, n, num_heads, d_k).transpose(1, 2); n is n_q for the "
            "queries and n_k for the keys and values."),
        N_("scores = q @ k.transpose(-2, -1) / math.sqrt(d_k), softmax over dim=-1 (the keys)."),
        N_("Merge with .transpose(1, 2).reshape(batch_size, n_q, d_model), then @ w_o.T + b_o."),
    ),
)


# ------------------------------------------------------------------ parameter counts
# (d_model, num_heads, bias): BERT-base and GPT-2 small; BERT-large and GPT-2 medium; a
# 7-billion-parameter decoder without biases; two small ones with num_heads > 1; then one head,
# an odd count and a size no table of the first ones covers.
COUNT_CONFIGS = ((768, 12, True), (1024, 16, True), (4096, 32, False), (10, 2, True),
                 (12, 3, False), (96, 1, True), (40, 5, True), (2048, 8, False))


def _parameter_count_reference(d_model, num_heads, bias=True):
    weights = 4 * d_model * d_model  # W_Q, W_K, W_V, W_O: (d_model, d_model) whatever num_heads
    biases = 4 * d_model if bias else 0  # one bias vector of d_model per projection
    return weights + biases


def _check_parameter_count(answer) -> None:
    for d_model, num_heads, bias in COUNT_CONFIGS:
        with torch.device("meta"):  # counts shapes without allocating 4096² numbers
            module = nn.MultiheadAttention(d_model, num_heads, bias=bias)
        expected = count_parameters(module)
        call = f"attention_parameters({d_model}, {num_heads}, bias={bias})"
        got = as_number(attempt(answer, d_model, num_heads, bias), call)
        if got == expected:
            continue
        d, h, d_k = d_model, num_heads, d_model // num_heads
        biases = 4 * d if bias else 0
        mistakes = [
            (3 * d * d + (3 * d if bias else 0),
             _("that is W_Q, W_K and W_V only: add the output projection W_O")),
            (h * (4 * d * d + biases), _(
                "each head does not get its own d_model × d_model matrices: the heads together "
                "share one d_model-wide projection, so the count does not depend on num_heads")),
            (h * 4 * d_k * d_k + biases, _(
                "a head's matrices are d_model × d_k, not d_k × d_k: every head reads all d_model "
                "input features")),
            (4 * d * d_k + 4 * d_k * bias, _(
                "that is one head's share: multiply by num_heads (or count the four d_model × "
                "d_model matrices directly)")),
        ]
        if bias:
            mistakes += [(4 * d * d, _(
                "the biases are missing: each of the 4 projections has a bias vector of d_model "
                "numbers")),
                         (4 * d * d + d, _(
                             "each of the 4 projections has its own bias of d_model numbers, not "
                             "one bias in total")),
                         (4 * d * d + 3 * d, _(
                             "the output projection W_O has a bias too: 4 bias vectors of "
                             "d_model numbers, not 3"))]
        else:
            mistakes.append((4 * d * d + 4 * d, _(
                "with bias=False the projections have no bias vectors: count the weights only")))
        for value, message in mistakes:
            if got == value:
                raise Incorrect(_("{call} = {got:,.0f}: {message}").format(
                    call=call, got=got, message=message))
        raise Incorrect(_(
            "{call} = {got:,.0f} is not the number of parameters of that layer: count W_Q, W_K, "
            "W_V, W_O and, if bias=True, their biases").format(call=call, got=got))


count_attention_parameters = Exercise(
    title=N_("parameters of a real attention layer"),
    checker=_check_parameter_count,
    reference=_parameter_count_reference,
    hints=(
        N_("List the tensors: W_Q, W_K, W_V, W_O, and with bias=True one bias per projection."),
        N_(
            "Each W is d_model × d_model: num_heads heads of width d_k = d_model / num_heads "
            "stack up to one d_model-wide projection, so num_heads does not change the count."),
    ),
)
