"""What one attention layer costs: FLOPs and bytes counted part by part, time and memory measured.

The layer is multi-head self-attention on x ``(batch, seq_len, d_model)`` with ``num_heads``
heads of width ``d_k = d_model / num_heads``, in five parts (``PARTS``):

- ``qkv_projections``: q, k, v = x W_Q, x W_K, x W_V, three ``(batch, seq_len, d_model)``;
- ``scores``: q kᵀ in every head, ``(batch, num_heads, n_q, n_k)``;
- ``softmax``: scale, then softmax over the keys, ``(batch, num_heads, n_q, n_k)``;
- ``weighted_sum``: weights @ v in every head, ``(batch, num_heads, seq_len, d_k)``;
- ``output_projection``: concatenated heads @ W_O, ``(batch, seq_len, d_model)``.

A matrix product ``(m, k) @ (k, p)`` costs ``2·m·k·p`` FLOPs (one multiply and one add per
term), the convention of ``torch.utils.flop_counter.FlopCounterMode``. Biases and the softmax
are elementwise and cheap; FlopCounterMode does not count them at all.

Size arguments come in one order everywhere, ``seq_len, d_model, num_heads``, and the
others (``batch_size``, ``num_layers``, ``num_kv_heads``, ``dtype``) are keywords.

This module also holds the memory-saving idea behind FlashAttention in reusable form,
:func:`online_softmax_update` and :func:`chunked_attention`.
"""

from __future__ import annotations

import math
import os
import statistics
import sys
import time
from collections.abc import Callable
from contextlib import contextmanager

import torch
from torch.profiler import ProfilerActivity, profile
from torch.utils.flop_counter import FlopCounterMode

from course_utils.checks import (
    require_bool,
    require_callable,
    require_divisible,
    require_float_dtype,
    require_kv_heads,
    require_positive_int,
    require_same_device,
    require_tensor,
)
from course_utils.notebook import one_thread

PARTS = ("qkv_projections", "scores", "softmax", "weighted_sum", "output_projection")
# Elementwise operations per score in the softmax part: scale, subtract the row max, exp,
# add to the row sum, divide by it. A convention: it is tiny next to the matrix products.
SOFTMAX_FLOPS_PER_SCORE = 5


def _require_layer(seq_len, d_model, num_heads, batch_size) -> int:
    """Check a layer configuration and return d_k."""
    require_positive_int("seq_len", seq_len)
    require_positive_int("batch_size", batch_size)
    return require_divisible(d_model, num_heads)


def _bytes_per_number(dtype) -> int:
    return torch.finfo(require_float_dtype("dtype", dtype)).bits // 8


def attention_flops(seq_len: int, d_model: int, num_heads: int, *,
                    batch_size: int = 1) -> dict[str, int]:
    """FLOPs of one forward pass of multi-head self-attention, part by part (keys: PARTS).

    The four matrix products are counted exactly as FlopCounterMode counts them; the softmax
    entry is an estimate, ``SOFTMAX_FLOPS_PER_SCORE`` per score. Every entry is a total for
    the whole batch of ``seq_len``-token sequences, not a cost per token.
    """
    d_k = _require_layer(seq_len, d_model, num_heads, batch_size)
    n, d, b, h = seq_len, d_model, batch_size, num_heads
    return {
        "qkv_projections": b * 3 * 2 * n * d * d,  # three (n, d) @ (d, d)
        "scores": b * h * 2 * n * n * d_k,  # per head (n, d_k) @ (d_k, n)
        "softmax": b * h * n * n * SOFTMAX_FLOPS_PER_SCORE,
        "weighted_sum": b * h * 2 * n * n * d_k,  # per head (n, n) @ (n, d_k)
        "output_projection": b * 2 * n * d * d,  # (n, d) @ (d, d)
    }


def attention_bytes(seq_len: int, d_model: int, num_heads: int, *, batch_size: int = 1,
                    dtype: torch.dtype = torch.float32) -> dict[str, int]:
    """Bytes of the tensor each part materialises (keys: PARTS), in ``dtype``.

    ``scores`` and ``softmax`` are ``(batch, num_heads, seq_len, seq_len)`` each: the n² terms.
    """
    _require_layer(seq_len, d_model, num_heads, batch_size)
    size = _bytes_per_number(dtype)
    n, d, b = seq_len, d_model, batch_size
    return {
        "qkv_projections": 3 * b * n * d * size,
        "scores": b * num_heads * n * n * size,
        "softmax": b * num_heads * n * n * size,
        "weighted_sum": b * n * d * size,
        "output_projection": b * n * d * size,
    }


def training_weights_bytes(seq_len: int, num_heads: int, *, batch_size: int = 1,
                           num_layers: int = 1, dtype: torch.dtype = torch.float32) -> int:
    """Bytes of the attention weights a training step keeps for the backward pass.

    Every layer's softmax output ``(batch, num_heads, seq_len, seq_len)`` is saved until
    backward runs, so the layers multiply it:
    ``batch_size · num_layers · num_heads · seq_len² · bytes``.
    """
    for name, value in (("seq_len", seq_len), ("num_heads", num_heads),
                        ("batch_size", batch_size), ("num_layers", num_layers)):
        require_positive_int(name, value)
    return batch_size * num_layers * num_heads * seq_len * seq_len * _bytes_per_number(dtype)


def kv_cache_bytes(seq_len: int, d_model: int, num_heads: int, *, batch_size: int = 1,
                   num_layers: int = 1, num_kv_heads: int | None = None,
                   dtype: torch.dtype = torch.float32) -> int:
    """Bytes of the key/value cache a decoder holds after ``seq_len`` tokens.

    Generating token by token, each layer keeps the keys and values of every earlier token,
    ``(batch, num_kv_heads, seq_len, d_k)`` each, with ``d_k = d_model / num_heads``:
    ``2 · batch_size · num_layers · num_kv_heads · seq_len · d_k · bytes``. It grows
    linearly in ``seq_len``. ``num_kv_heads`` defaults to ``num_heads`` (every query head
    has its own keys and values); grouped-query attention shares one key/value head among
    ``num_heads / num_kv_heads`` query heads, multi-query attention has ``num_kv_heads=1``.
    """
    d_k = _require_layer(seq_len, d_model, num_heads, batch_size)
    require_positive_int("num_layers", num_layers)
    num_kv_heads = require_kv_heads(num_heads, num_kv_heads)
    return (2 * batch_size * num_layers * num_kv_heads * seq_len * d_k
            * _bytes_per_number(dtype))


def saved_for_backward(fn: Callable, *args, **kwargs) -> list[tuple[tuple[int, ...], int]]:
    """The tensors autograd keeps from ``fn(*args, **kwargs)`` for the backward pass.

    Returns ``(shape, bytes)`` for each distinct storage saved (a tensor saved by two ops,
    like the weights by softmax and by ``weights @ v``, is listed once).
    """
    require_callable("fn", fn)
    saved = {}

    def pack(tensor):
        storage = tensor.untyped_storage()
        saved.setdefault(storage.data_ptr(), (tuple(tensor.shape), storage.nbytes()))
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        result = fn(*args, **kwargs)
    del result  # the graph, and with it the saved tensors, may go now
    return list(saved.values())


def counted_flops(fn: Callable, *args, **kwargs) -> dict[str, int]:
    """Run ``fn(*args, **kwargs)`` under FlopCounterMode; FLOPs per aten op, e.g. ``aten.bmm``."""
    require_callable("fn", fn)
    with FlopCounterMode(display=False) as counter:
        fn(*args, **kwargs)
    return {str(op): flops for op, flops in counter.get_flop_counts()["Global"].items()}


def fitted_exponent(sizes, values) -> float:
    """The slope p of the least-squares line through (log size, log value): value ~ size**p."""
    sizes, values = list(sizes), list(values)
    if any(not x > 0 for x in sizes + values):
        raise ValueError(f"sizes and values should all be positive, got {sizes} and {values}")
    xs = [math.log(s) for s in sizes]
    ys = [math.log(v) for v in values]
    if len(xs) < 2 or len(xs) != len(ys):
        raise ValueError(
            f"need at least two (size, value) pairs of equal length, got {len(xs)} sizes "
            f"and {len(ys)} values"
        )
    x_mean, y_mean = statistics.fmean(xs), statistics.fmean(ys)
    spread = sum((x - x_mean) ** 2 for x in xs)
    if spread == 0:
        raise ValueError(f"the sizes should differ, got {list(sizes)}")
    return sum((x - x_mean) * (y - y_mean) for x, y in zip(xs, ys, strict=True)) / spread


def cpu_seconds_per_call(calls: dict, repeats: int = 7, min_seconds: float = 0.01) -> dict:
    """Median CPU seconds per call of each zero-argument function in ``calls``, on one thread.

    torch is held to one thread while measuring and the clock is this thread's CPU time
    (``time.thread_time``), not the wall clock: time the operating system gives to other
    programs on a shared machine is not counted. Each function is warmed up once, then
    called in batches of at least ``min_seconds``, so the clock's resolution does not
    matter. The batches run round-robin, one of each function per repeat, so what remains
    of the machine's noise hits all of them alike and their ratios stay meaningful.
    """
    require_positive_int("repeats", repeats)
    if not isinstance(calls, dict) or not calls:
        raise TypeError(f"calls should be a non-empty dict of name -> function, got {calls!r}")
    for call in calls.values():
        require_callable("every value of calls", call)
    # time.thread_time() sees only this thread, so torch must not hand work to others.
    with one_thread():
        loops = {}
        for name, call in calls.items():
            start = time.thread_time()
            call()  # warm-up, also measures roughly how long one call takes
            spent = max(time.thread_time() - start, 1e-6)
            loops[name] = max(1, math.ceil(min_seconds / spent))
        samples = {name: [] for name in calls}
        for _ in range(repeats):
            for name, call in calls.items():
                start = time.thread_time()
                for _ in range(loops[name]):
                    call()
                samples[name].append((time.thread_time() - start) / loops[name])
    return {name: statistics.median(times) for name, times in samples.items()}


@contextmanager
def _quiet_stderr():
    """Silence the profiler's C++ start/stop lines, which go straight to file descriptor 2."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def peak_memory(fn: Callable, *args, **kwargs) -> int:
    """Peak bytes that ``fn(*args, **kwargs)`` holds at once through torch's CPU allocator.

    Measured, not estimated: torch.profiler with ``profile_memory=True`` records every
    allocation and free of the CPU allocator (also the buffers a fused kernel allocates
    inside itself); the running total of those events, in time order, peaks here. Counted
    from zero when ``fn`` starts, so tensors that already existed (the inputs) are not
    included and the result that ``fn`` returns is. (tracemalloc cannot do this: it does
    not see torch's allocations.)
    """
    require_callable("fn", fn)
    with _quiet_stderr(), profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        result = fn(*args, **kwargs)
    events = sorted(
        (event.start_ns(), event.nbytes())
        for event in prof.profiler.kineto_results.events()
        if event.name() == "[memory]"
    )
    del result
    held = peak = 0
    for _, nbytes in events:
        held += nbytes
        peak = max(peak, held)
    return peak


def online_softmax_update(running_max, running_sum, running_out, scores, values):
    """Fold one block of keys into a running softmax-weighted sum of values.

    Args:
        running_max: ``(..., n_q, 1)`` largest score seen so far in each query row
            (``-inf`` before the first block).
        running_sum: ``(..., n_q, 1)`` sum of exp(score - running_max) so far.
        running_out: ``(..., n_q, d_v)`` sum of exp(score - running_max) · value so far.
        scores: ``(..., n_q, block)`` scaled scores of this block (``-inf`` = masked).
        values: ``(..., block, d_v)`` this block's values.

    Returns the updated ``(running_max, running_sum, running_out)``; after the last block,
    ``running_out / running_sum`` is softmax(scores) @ values over all the blocks.
    """
    running_max = require_tensor("running_max", running_max, "(..., n_q, 1)")
    running_sum = require_tensor("running_sum", running_sum, "(..., n_q, 1)")
    running_out = require_tensor("running_out", running_out, "(..., n_q, d_v)")
    scores = require_tensor("scores", scores, "(..., n_q, block)")
    values = require_tensor("values", values, "(..., block, d_v)")
    n_q, block, d_v = scores.shape[-2], scores.shape[-1], values.shape[-1]
    if (running_max.shape[-2:] != (n_q, 1) or running_sum.shape[-2:] != (n_q, 1)
            or running_out.shape[-2:] != (n_q, d_v) or values.shape[-2] != block):
        raise ValueError(
            "expected running_max and running_sum (..., n_q, 1), running_out (..., n_q, d_v), "
            "scores (..., n_q, block) and values (..., block, d_v), got shapes "
            f"{tuple(running_max.shape)}, {tuple(running_sum.shape)}, "
            f"{tuple(running_out.shape)}, {tuple(scores.shape)} and {tuple(values.shape)}"
        )
    require_same_device(running_max=running_max, running_sum=running_sum,
                        running_out=running_out, scores=scores, values=values)
    new_max = torch.maximum(running_max, scores.amax(dim=-1, keepdim=True))
    # A row with no key seen yet has max -inf; subtract 0 there instead of -inf (-inf - -inf
    # is NaN) so that its exp terms come out as exactly 0.
    shift = new_max.masked_fill(new_max == float("-inf"), 0.0)
    # What was summed relative to the old max is rescaled to the new one: exp(m_old - m_new).
    correction = torch.exp(running_max - shift)  # (..., n_q, 1)
    p = torch.exp(scores - shift)  # (..., n_q, block)
    return (
        new_max,
        running_sum * correction + p.sum(dim=-1, keepdim=True),
        running_out * correction + p @ values,
    )


def chunked_attention(q, k, v, block_size: int = 128, window: int | None = None,
                      causal: bool = False):
    """softmax(q kᵀ / sqrt(d_k)) v computed block by block, with an online softmax.

    q ``(..., n_q, d_k)``, k ``(..., n_k, d_k)``, v ``(..., n_k, d_v)`` -> ``(..., n_q, d_v)``.

    Queries are taken ``block_size`` at a time and, for each query block, keys are folded in
    ``block_size`` at a time with :func:`online_softmax_update`: only ``(..., block, block)``
    scores exist at any moment, never ``(..., n_q, n_k)``, so the extra memory grows linearly
    in n (the output itself is ``(..., n_q, d_v)``).

    Query i sits at position ``n_k - n_q + i`` (the queries are the last n_q positions, as
    in :func:`course_utils.masks.causal_mask`). ``causal=True``: query i attends only to keys
    at or before its position. ``window``: only to keys within ``window`` positions of it.
    Key blocks wholly outside what a query block may see are never computed: a causal mask
    skips about half the blocks, a window makes the work grow like ``n · window``, not n².
    A query with no key to attend to (or ``n_k == 0``) gets a zero output, as in
    ``F.scaled_dot_product_attention``.
    """
    q = require_tensor("q", q, "(..., n_q, d_k)")
    k = require_tensor("k", k, "(..., n_k, d_k)")
    v = require_tensor("v", v, "(..., n_k, d_v)")
    require_positive_int("block_size", block_size)
    if q.shape[-1] != k.shape[-1] or k.shape[-2] != v.shape[-2]:
        raise ValueError(
            f"expected q (..., n_q, d_k), k (..., n_k, d_k), v (..., n_k, d_v), got shapes "
            f"{tuple(q.shape)}, {tuple(k.shape)} and {tuple(v.shape)}"
        )
    if window is not None and (not isinstance(window, int) or isinstance(window, bool)
                               or window < 0):
        raise ValueError(f"window should be None or an int >= 0, got {window!r}")
    require_bool("causal", causal)
    require_same_device(q=q, k=k, v=v)
    n_q, n_k = q.shape[-2], k.shape[-2]
    if (window is not None or causal) and n_k < n_q:
        raise ValueError(
            f"a window or causal mask places the queries at the last n_q key positions, so "
            f"it needs n_k >= n_q, got n_q={n_q} and n_k={n_k}"
        )
    shift = n_k - n_q  # query i sits at key position i + shift
    scale = 1.0 / math.sqrt(q.shape[-1])
    batch = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    out = q.new_empty((*batch, n_q, v.shape[-1]))
    for q_start in range(0, n_q, block_size):
        q_end = min(q_start + block_size, n_q)
        q_block = q[..., q_start:q_end, :] * scale  # (..., block, d_k)
        running_max = q.new_full((*batch, q_end - q_start, 1), float("-inf"))
        running_sum = q.new_zeros((*batch, q_end - q_start, 1))
        running_out = q.new_zeros((*batch, q_end - q_start, v.shape[-1]))
        # The key positions this query block may see at all: [first, last).
        first, last = 0, n_k
        if window is not None:
            first = max(0, q_start + shift - window)
            last = min(n_k, q_end + shift + window)
        if causal:
            last = min(last, q_end + shift)
        query_positions = torch.arange(q_start + shift, q_end + shift, device=q.device)
        for k_start in range(first // block_size * block_size, last, block_size):
            k_end = min(k_start + block_size, n_k)
            scores = q_block @ k[..., k_start:k_end, :].transpose(-2, -1)  # (..., block, block)
            offset = query_positions[:, None] - torch.arange(k_start, k_end, device=q.device)
            blocked = torch.zeros_like(offset, dtype=torch.bool)  # (block, block)
            if window is not None:
                blocked |= offset.abs() > window
            if causal:
                blocked |= offset < 0
            scores = scores.masked_fill(blocked, float("-inf"))
            running_max, running_sum, running_out = online_softmax_update(
                running_max, running_sum, running_out, scores, v[..., k_start:k_end, :]
            )
        # A row that saw no key has sum 0 and out 0: divide by 1 there, so it stays 0.
        out[..., q_start:q_end, :] = running_out / running_sum.masked_fill(running_sum == 0, 1)
    return out
