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

The memory-saving idea behind FlashAttention lives in ``course_utils.nn.online_softmax``.
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
    require_callable,
    require_divisible,
    require_float_dtype,
    require_kv_heads,
    require_positive_int,
)
from course_utils.language import _
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

    Used in lesson 06.
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

    Used in lesson 06.
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

    Used in lessons 06 and 08.
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

    Used in lessons 06, 12 and 14.
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

    Used in lessons 06 and 16.
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
    """Run ``fn(*args, **kwargs)`` under FlopCounterMode; FLOPs per aten op, e.g. ``aten.bmm``.

    Used in lesson 06.
    """
    require_callable("fn", fn)
    with FlopCounterMode(display=False) as counter:
        fn(*args, **kwargs)
    return {str(op): flops for op, flops in counter.get_flop_counts()["Global"].items()}


def fitted_exponent(sizes, values) -> float:
    """The slope p of the least-squares line through (log size, log value): value ~ size**p.

    Used in lessons 06 and 16.
    """
    sizes, values = list(sizes), list(values)
    if any(not x > 0 for x in sizes + values):
        raise ValueError(_("sizes and values should all be positive, got {sizes} and {values}")
                         .format(sizes=sizes, values=values))
    xs = [math.log(s) for s in sizes]
    ys = [math.log(v) for v in values]
    if len(xs) < 2 or len(xs) != len(ys):
        raise ValueError(_(
            "need at least two (size, value) pairs of equal length, got {n_sizes} sizes "
            "and {n_values} values"
        ).format(n_sizes=len(xs), n_values=len(ys)))
    x_mean, y_mean = statistics.fmean(xs), statistics.fmean(ys)
    spread = sum((x - x_mean) ** 2 for x in xs)
    if spread == 0:
        raise ValueError(_("the sizes should differ, got {sizes}").format(sizes=list(sizes)))
    return sum((x - x_mean) * (y - y_mean) for x, y in zip(xs, ys, strict=True)) / spread


def cpu_seconds_per_call(calls: dict, repeats: int = 7, min_seconds: float = 0.01) -> dict:
    """Median CPU seconds per call of each zero-argument function in ``calls``, on one thread.

    torch is held to one thread while measuring and the clock is this thread's CPU time
    (``time.thread_time``), not the wall clock: time the operating system gives to other
    programs on a shared machine is not counted. Each function is warmed up once, then
    called in batches of at least ``min_seconds``, so the clock's resolution does not
    matter. The batches run round-robin, one of each function per repeat, so what remains
    of the machine's noise hits all of them alike and their ratios stay meaningful.

    Used in lessons 01, 06, 12 and 19.
    """
    require_positive_int("repeats", repeats)
    if not isinstance(calls, dict) or not calls:
        raise TypeError(_("calls should be a non-empty dict of name -> function, got {calls}")
                        .format(calls=repr(calls)))
    for call in calls.values():
        require_callable(_("every value of calls"), call)
    # time.thread_time() sees only this thread, so torch must not hand work to others.
    with one_thread():
        loops = {}
        for name, call in calls.items():
            start = time.thread_time()
            call()  # warm-up, also measures roughly how long one call takes
            spent = max(time.thread_time() - start, 1e-6)
            loops[name] = max(1, math.ceil(min_seconds / spent))
        samples = {name: [] for name in calls}
        for _repeat in range(repeats):
            for name, call in calls.items():
                start = time.thread_time()
                for _loop in range(loops[name]):
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

    Used in lesson 06.
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
    for _kind, nbytes in events:
        held += nbytes
        peak = max(peak, held)
    return peak
