"""How many operations must run one after another to compute a tensor, read from autograd.

Autograd records every operation and the results it needed. The longest path through that
record is the chain no amount of parallel hardware can shorten: each operation on it waits
for the one before. An RNN's chain grows with the sequence; an attention layer's does not.
"""

from __future__ import annotations

import torch

from course_utils.checks import require_instance
from course_utils.language import _


def longest_chain(output: torch.Tensor) -> int:
    """The number of recorded operations on the longest dependency path that ends at
    ``output`` (computed with gradients on, from inputs that require them).

    A fused kernel counts as one operation, so a fused LSTM looks short: the count is that of
    the operations autograd sees.

    Used in lesson 01.
    """
    require_instance("output", output, torch.Tensor, _("a tensor"))
    if output.grad_fn is None:
        raise ValueError(_(
            "output has no autograd history: compute it with gradients on, from an input "
            "with requires_grad=True"))
    depth: dict = {}
    pending = [output.grad_fn]  # iterative: an RNN over thousands of tokens is too deep
    while pending:                # for Python's recursion limit
        node = pending[-1]
        inputs = [parent for parent, _index in node.next_functions if parent is not None]
        waiting = [parent for parent in inputs if parent not in depth]
        if waiting:
            pending.extend(waiting)
            continue
        pending.pop()
        depth[node] = 1 + max((depth[parent] for parent in inputs), default=0)
    return depth[output.grad_fn]
