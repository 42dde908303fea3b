"""Switching heads off: run a model with chosen heads' outputs replaced, to see what they did.

One helper for every model of the course whose blocks hold a
:class:`~course_utils.nn.attention.MultiHeadAttention` as ``blocks[layer].self_attn`` (lesson
12's GPT, lesson 14's Llama, lesson 10's MiniLM). A head's output enters its block only through
its ``d_k`` columns of ``w_o``, so replacing that slice of ``w_o``'s input removes the head and
keeps everything else.

A finer cut removes one **edge** instead of a head: :func:`cut_edges` forbids chosen queries
to read chosen keys in chosen heads, as a mask does, so their weight goes to the other keys
and everything else the head does stays.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager

import torch
from torch import nn

from course_utils.checks import require_instance, require_int_in_range, require_one_of
from course_utils.language import _
from course_utils.nn.attention import MultiHeadAttention

ABLATIONS = ("zero", "mean")


def attention_layers(model) -> list[MultiHeadAttention]:
    """The self-attention of every block of ``model``, in layer order.

    Used in lessons 10 and 13.
    """
    require_instance("model", model, nn.Module, _("a model with blocks (GPT, Llama, MiniLM)"))
    blocks = getattr(model, "blocks", None)
    if not isinstance(blocks, nn.ModuleList) or not all(
            isinstance(getattr(block, "self_attn", None), MultiHeadAttention)
            for block in blocks):
        raise TypeError(_(
            "model should be a GPT, Llama or MiniLM: an nn.Module whose blocks[layer].self_attn "
            "is a MultiHeadAttention, got a {kind} without them"
        ).format(kind=type(model).__name__))
    return [block.self_attn for block in blocks]


def _require_heads(heads, layers: list[MultiHeadAttention]) -> dict[int, list[int]]:
    """``heads`` as {layer: [head, ...]}, each pair checked against the model's sizes."""
    what = _("an iterable of (layer, head) pairs, e.g. [(1, 0)]")
    if isinstance(heads, (str, bytes)) or not hasattr(heads, "__iter__"):
        raise TypeError(_(
            "heads should be {what}, got {kind} {heads!r}"
        ).format(what=what, kind=type(heads).__name__, heads=heads))
    chosen: dict[int, list[int]] = {}
    for pair in heads:
        if not isinstance(pair, (tuple, list)) or len(pair) != 2:
            raise TypeError(_(
                "heads should be {what}, got the item {pair!r}"
            ).format(what=what, pair=pair))
        layer, head = pair
        require_int_in_range(_("layer (of a pair in heads)"), layer, 0, len(layers) - 1)
        require_int_in_range(_("head (of a pair in heads)"), head, 0, layers[layer].num_heads - 1)
        chosen.setdefault(layer, []).append(head)
    return chosen


def ablated(model, heads, ablation: str = "zero") -> AbstractContextManager[nn.Module]:
    """``with ablated(model, heads): ...``: inside the block, ``model`` runs with the chosen
    heads' outputs replaced.

    ``heads``: ``(layer, head)`` pairs. ``ablation="zero"`` sets each chosen head's output
    ``(batch, n_q, d_k)`` (its slice of the concatenated heads, the input of ``w_o``) to 0;
    ``"mean"`` sets it to its mean over the batch and the positions of that same forward
    call, ``(1, 1, d_k)``: what the head writes on average stays, what depends on the token
    goes. ``MultiHeadAttention`` is not changed: a forward pre-hook on each layer's ``w_o``
    does the replacing, and leaving the block (even by an exception) removes it. The
    attention weights the model returns are still every head's own. The arguments are
    checked at the call, before anything is hooked.

    Used in lessons 10 and 13.
    """
    layers = attention_layers(model)
    chosen = _require_heads(heads, layers)
    require_one_of("ablation", ablation, ABLATIONS)
    return _hooked(model, layers, chosen, ablation)


@contextmanager
def _hooked(model, layers: list[MultiHeadAttention], chosen: dict[int, list[int]],
            ablation: str) -> Iterator[nn.Module]:
    handles = []
    try:
        for layer, layer_heads in chosen.items():
            attention = layers[layer]
            handles.append(attention.w_o.register_forward_pre_hook(
                _head_replacer(sorted(set(layer_heads)), attention.d_k, ablation)))
        yield model
    finally:
        for handle in handles:
            handle.remove()


def _head_replacer(heads: list[int], d_k: int, ablation: str):
    def replace(module, args):
        merged = args[0].clone()  # (batch, n_q, d_model): the heads side by side, head-major
        for head in heads:
            part = merged[..., head * d_k:(head + 1) * d_k]  # (batch, n_q, d_k), a view
            if ablation == "zero":
                part.zero_()
            else:
                part.copy_(part.mean(dim=(0, 1), keepdim=True).expand_as(part))
        return (merged, *args[1:])
    return replace


def _require_edges(edges, layers: list[MultiHeadAttention]) -> dict[int, list[tuple]]:
    """``edges`` as {layer: [(head, query, key), ...]}, each checked against the sizes."""
    what = _("an iterable of (layer, head, query, key) tuples, e.g. [(3, 1, 7, 2)]")
    if isinstance(edges, (str, bytes)) or not hasattr(edges, "__iter__"):
        raise TypeError(_("edges should be {what}, got {kind} {edges!r}").format(
            what=what, kind=type(edges).__name__, edges=edges))
    chosen: dict[int, list[tuple]] = {}
    for edge in edges:
        if not isinstance(edge, (tuple, list)) or len(edge) != 4:
            raise TypeError(_("edges should be {what}, got the item {edge!r}").format(
                what=what, edge=edge))
        layer, head, query, key = edge
        require_int_in_range(_("layer (of an edge)"), layer, 0, len(layers) - 1)
        require_int_in_range(_("head (of an edge)"), head, 0, layers[layer].num_heads - 1)
        require_int_in_range(_("query (of an edge)"), query, 0)
        require_int_in_range(_("key (of an edge)"), key, 0)
        chosen.setdefault(layer, []).append((head, query, key))
    return chosen


def cut_edges(model, edges) -> AbstractContextManager[nn.Module]:
    """``with cut_edges(model, edges): ...``: inside the block, in each ``(layer, head, query,
    key)`` of ``edges`` the query position may not attend to the key position.

    The cut is a mask: the edge's score becomes -inf before the softmax, so its weight is 0
    and the rest of the row shares what it had (attention knockout, Geva et al. 2023). The
    head keeps everything else: its other rows, its values, its slice of ``w_o``. Positions
    count from 0 in the model's input (``[CLS]`` is 0 in MiniLM). A forward pre-hook on each
    chosen layer's attention adds the cut to the mask it is given (``(batch, heads, n_q,
    n_k)``); leaving the block removes it. The arguments are checked at the call; a position
    beyond the input's length raises at the forward call.

    Used in lesson 10.
    """
    layers = attention_layers(model)
    return _masked(model, layers, _require_edges(edges, layers))


@contextmanager
def _masked(model, layers: list[MultiHeadAttention], chosen: dict[int, list[tuple]]
            ) -> Iterator[nn.Module]:
    handles = []
    try:
        for layer, layer_edges in chosen.items():
            handles.append(layers[layer].register_forward_pre_hook(
                _edge_cutter(layer_edges, layers[layer].num_heads), with_kwargs=True))
        yield model
    finally:
        for handle in handles:
            handle.remove()


def _edge_cutter(edges: list[tuple], num_heads: int):
    def cut(module, args, kwargs):
        query = args[0] if args else kwargs["query"]  # (batch, n_q, d_model), self-attention
        batch, n = query.shape[:2]
        highest = max(max(q, k) for _head, q, k in edges)
        if highest >= n:
            raise ValueError(_(
                "edges name positions up to {highest}, but the input has seq_len={seq_len}"
            ).format(highest=highest, seq_len=n))
        keep = torch.ones(batch, num_heads, n, n, dtype=torch.bool, device=query.device)
        for head, q, k in edges:
            keep[:, head, q, k] = False
        mask = kwargs.get("mask")
        kwargs["mask"] = keep if mask is None else keep & mask
        return args, kwargs
    return cut
