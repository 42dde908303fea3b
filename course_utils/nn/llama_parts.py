"""What a Llama-style decoder block uses besides attention: RMSNorm and a SwiGLU feed-forward.

Lesson 09's block normalises with LayerNorm and feeds a two-layer ReLU/GELU MLP. Llama (Touvron
et al. 2023), and SmolLM2 after it, replace both:

- :class:`RMSNorm` (Zhang & Sennrich 2019) divides by the root mean square of the features and
  scales; it neither subtracts the mean nor adds a bias;
- :class:`SwiGLUFeedForward` (Shazeer 2020) gates one linear map of ``x`` with the SiLU of
  another, ``down(silu(gate(x)) * up(x))``: three matrices instead of two, no biases.

Both act on each position alone: x ``(batch, seq_len, d_model)`` in, the same shape out. The
tests prove them equal to ``torch.nn.RMSNorm`` and to transformers' ``LlamaMLP``.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from course_utils.checks import (
    require_bool,
    require_matches_module,
    require_positive_int,
    require_positive_number,
    require_tensor,
)
from course_utils.language import _


class RMSNorm(nn.Module):
    """``weight * x / sqrt(mean(x**2) + eps)`` over the last dim (``d_model``).

    x ``(..., d_model)`` -> the same shape and dtype; ``weight`` ``(d_model,)`` starts at ones.
    The mean square is taken in float32 at least (float64 stays float64), as transformers'
    Llama takes it in float32, so that a half-precision ``x`` does not overflow when squared.

    Used in lesson 14.
    """

    def __init__(self, d_model: int, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(require_positive_int("d_model", d_model)))
        self.eps = require_positive_number("eps", eps)

    def forward(self, x):
        x = require_matches_module("x", require_tensor("x", x, "(..., d_model)"), self)
        if x.shape[-1] != self.weight.shape[0]:
            raise ValueError(
                _(
                    "x should have d_model={weight_shape} features in its last dim, got shape "
                    "{shape}"
                ).format(weight_shape=self.weight.shape[0], shape=tuple(x.shape))
            )
        wide = x.to(torch.promote_types(x.dtype, torch.float32))
        normed = wide * torch.rsqrt(wide.square().mean(dim=-1, keepdim=True) + self.eps)
        return self.weight * normed.to(x.dtype)

    def extra_repr(self) -> str:
        return f"{self.weight.shape[0]}, eps={self.eps}"


class SwiGLUFeedForward(nn.Module):
    """The gated FFN of Llama: ``down(silu(gate(x)) * up(x))``.

    x ``(batch, seq_len, d_model)`` -> gate and up ``(batch, seq_len, d_ff)`` -> output
    ``(batch, seq_len, d_model)``. ``gate`` and ``up`` are ``nn.Linear(d_model, d_ff)``,
    ``down`` is ``nn.Linear(d_ff, d_model)``, with biases only if ``bias=True`` (Llama has none).

    Used in lesson 14.
    """

    def __init__(self, d_model: int, d_ff: int, bias: bool = False):
        super().__init__()
        require_positive_int("d_model", d_model)
        require_positive_int("d_ff", d_ff)
        require_bool("bias", bias)
        self.gate = nn.Linear(d_model, d_ff, bias=bias)
        self.up = nn.Linear(d_model, d_ff, bias=bias)
        self.down = nn.Linear(d_ff, d_model, bias=bias)

    def forward(self, x):
        x = require_matches_module("x", require_tensor("x", x, "(batch, seq_len, d_model)"), self)
        if x.shape[-1] != self.gate.in_features:
            raise ValueError(
                _(
                    "x should have d_model={in_features} features in its last dim, got shape "
                    "{shape}"
                ).format(in_features=self.gate.in_features, shape=tuple(x.shape))
            )
        return self.down(F.silu(self.gate(x)) * self.up(x))
