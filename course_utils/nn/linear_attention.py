"""Causal attention without the softmax: an RNN whose state is a matrix.

Drop the softmax from causal attention and the output of position t is
``o_t = Σ_{i ≤ t} (q_t · k_i) v_i = q_t S_t`` with ``S_t = Σ_{i ≤ t} k_iᵀ v_i``, a
``(d_k, d_v)`` matrix that one step updates: ``S_t = S_{t-1} + k_tᵀ v_t``. That is
**linear attention**, and it has three forms that give the same output:

- ``"parallel"``: ``((q kᵀ) ⊙ causal mask) v``, all positions at once (n × n, like attention);
- ``"recurrent"``: one position at a time, carrying only ``S`` (constant memory);
- ``"chunkwise"``: chunks of ``chunk_size`` positions, parallel inside a chunk, with the state
  carried across chunk boundaries (what training kernels use).

The **delta rule** writes with a strength ``β_t`` and first removes what the state already
returns for ``k_t``: ``S_t = S_{t-1} + β_t k_tᵀ (v_t − k_t S_{t-1})``. Its gated form (Gated
DeltaNet) also decays the state by ``α_t`` in (0, 1] first:
``S_t = α_t S_{t-1} + β_t k_tᵀ (v_t − α_t k_t S_{t-1})``. Written with the corrected values
``u_t = β_t (v_t − α_t k_t S_{t-1})``, the delta rule is linear attention over ``u`` (with a
decay), and the ``u`` of a whole sequence or chunk solve one unit lower-triangular system:
that gives its parallel and chunkwise forms.

No feature map, scale or normalisation is applied: the caller prepares ``q`` and ``k`` (the
delta rule wants unit-length keys and ``β`` in (0, 1]). The one-step functions are what a
decoder runs per generated token.
"""

from __future__ import annotations

import torch

from course_utils.checks import (
    require_one_of,
    require_positive_int,
    require_same_device,
    require_same_dtype,
    require_tensor,
)
from course_utils.language import _

FORMS = ("parallel", "recurrent", "chunkwise")
_QK = "(batch, heads, seq_len, d_k)"
_V = "(batch, heads, seq_len, d_v)"
_GATE = "(batch, heads, seq_len)"


def _require_sequences(q, k, v, beta=None, alpha=None, form="parallel", chunk_size=16):
    """Validate the sequence functions' arguments in one call."""
    require_tensor("q", q, _QK)
    require_tensor("k", k, _QK)
    require_tensor("v", v, _V)
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.dim() != 4:
            raise ValueError(_(
                "{name} should have shape {expected} (4 dims), got shape {shape}"
            ).format(name=name, expected=_QK if name != 'v' else _V, shape=tuple(t.shape)))
    if q.shape != k.shape:
        raise ValueError(_(
            "q and k should have the same shape {expected}, got q {q_shape} and k {k_shape}"
        ).format(expected=_QK, q_shape=tuple(q.shape), k_shape=tuple(k.shape)))
    if v.shape[:3] != k.shape[:3]:
        raise ValueError(_(
            "v should have shape {expected} with the (batch, heads, seq_len) of k {k_shape}, "
            "got shape {v_shape}"
        ).format(expected=_V, k_shape=tuple(k.shape[:3]), v_shape=tuple(v.shape)))
    for name, gate in (("beta", beta), ("alpha", alpha)):
        if gate is None:
            continue
        require_tensor(name, gate, _GATE)
        if gate.shape != k.shape[:3]:
            raise ValueError(_(
                "{name} should have shape {notation} = {k_shape}, got shape {gate_shape}"
            ).format(name=name, notation=_GATE, k_shape=tuple(k.shape[:3]),
                     gate_shape=tuple(gate.shape)))
    if alpha is not None and not bool(((alpha > 0) & (alpha <= 1)).all()):
        raise ValueError(_(
            "alpha should hold decays in (0, 1], got values from {lowest:.3g} to {highest:.3g}"
        ).format(lowest=alpha.min().item(), highest=alpha.max().item()))
    require_same_dtype(q=q, k=k, v=v, beta=beta, alpha=alpha)
    require_same_device(q=q, k=k, v=v, beta=beta, alpha=alpha)
    require_one_of("form", form, FORMS)
    require_positive_int("chunk_size", chunk_size)


def _causal(n: int, device, diagonal: int = 0) -> torch.Tensor:
    """(n, n) bool, True where key i may be read by query t: i <= t (i < t for diagonal=-1)."""
    return torch.ones(n, n, dtype=torch.bool, device=device).tril(diagonal)


def linear_attention(q, k, v, form: str = "parallel", chunk_size: int = 16) -> torch.Tensor:
    """Causal linear attention ``o_t = q_t Σ_{i ≤ t} k_iᵀ v_i``, in any of its three forms.

    q, k ``(batch, heads, seq_len, d_k)``, v ``(batch, heads, seq_len, d_v)``; returns
    ``(batch, heads, seq_len, d_v)``. ``form`` is "parallel", "recurrent" or "chunkwise"
    (chunks of ``chunk_size`` positions); every form gives the same output.

    Used in lesson 19.
    """
    _require_sequences(q, k, v, form=form, chunk_size=chunk_size)
    n = q.shape[-2]
    if form == "parallel":
        scores = (q @ k.transpose(-2, -1)).masked_fill(~_causal(n, q.device), 0)  # (..., n, n)
        return scores @ v  # (batch, heads, seq_len, d_v)
    state = q.new_zeros(*q.shape[:2], q.shape[-1], v.shape[-1])  # (batch, heads, d_k, d_v)
    outputs = []
    if form == "recurrent":
        for t in range(n):
            out, state = linear_attention_step(state, q[..., t, :], k[..., t, :], v[..., t, :])
            outputs.append(out)  # (batch, heads, d_v)
        return torch.stack(outputs, dim=-2)
    for start in range(0, n, chunk_size):
        q_c, k_c, v_c = (t[..., start:start + chunk_size, :] for t in (q, k, v))  # (..., C, d)
        inside = (q_c @ k_c.transpose(-2, -1)).masked_fill(
            ~_causal(q_c.shape[-2], q.device), 0)  # (..., C, C)
        outputs.append(q_c @ state + inside @ v_c)  # earlier chunks + this chunk
        state = state + k_c.transpose(-2, -1) @ v_c  # (batch, heads, d_k, d_v)
    return torch.cat(outputs, dim=-2)


def linear_attention_step(state, q, k, v) -> tuple[torch.Tensor, torch.Tensor]:
    """One recurrent step of linear attention: ``S ← S + kᵀ v``, then ``o = q S``.

    state ``(batch, heads, d_k, d_v)``; q, k ``(batch, heads, d_k)``; v ``(batch, heads, d_v)``.
    Returns ``(output (batch, heads, d_v), new state)``; the state passed in is not changed.

    Used in lesson 19.
    """
    _require_step(state, q, k, v)
    state = state + k.unsqueeze(-1) * v.unsqueeze(-2)  # (batch, heads, d_k, d_v): + k v outer
    return (q.unsqueeze(-2) @ state).squeeze(-2), state  # o = q S: (batch, heads, d_v)


def _require_step(state, q, k, v, beta=None, alpha=None):
    """Validate the one-step functions' arguments in one call."""
    require_tensor("state", state, "(batch, heads, d_k, d_v)")
    require_tensor("q", q, "(batch, heads, d_k)")
    require_tensor("k", k, "(batch, heads, d_k)")
    require_tensor("v", v, "(batch, heads, d_v)")
    expected = {"q": state.shape[:-1], "k": state.shape[:-1],
                "v": (*state.shape[:-2], state.shape[-1])}
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.shape != expected[name]:
            raise ValueError(_(
                "{name} should have shape {expected} to match state {state_shape} (batch, heads, "
                "d_k, d_v), got shape {t_shape}"
            ).format(name=name, expected=tuple(expected[name]), state_shape=tuple(state.shape),
                     t_shape=tuple(t.shape)))
    for name, gate in (("beta", beta), ("alpha", alpha)):
        if gate is not None:
            require_tensor(name, gate, "(batch, heads)")
            if gate.shape != state.shape[:-2]:
                raise ValueError(_(
                    "{name} should have shape (batch, heads) = {state_shape}, got shape "
                    "{gate_shape}"
                ).format(name=name, state_shape=tuple(state.shape[:-2]),
                         gate_shape=tuple(gate.shape)))
    require_same_dtype(state=state, q=q, k=k, v=v, beta=beta, alpha=alpha)
    require_same_device(state=state, q=q, k=k, v=v, beta=beta, alpha=alpha)


def delta_rule(q, k, v, beta, alpha=None, form: str = "recurrent",
               chunk_size: int = 16) -> torch.Tensor:
    """The (gated) delta rule: linear attention whose state overwrites what ``k_t`` recalls.

    ``S_t = α_t S_{t-1} + β_t k_tᵀ (v_t − α_t k_t S_{t-1})``, ``o_t = q_t S_t`` (``α_t = 1``
    when ``alpha`` is None: DeltaNet; with ``alpha``: Gated DeltaNet). q, k
    ``(batch, heads, seq_len, d_k)``, v ``(batch, heads, seq_len, d_v)``, beta and alpha
    ``(batch, heads, seq_len)``, alpha in (0, 1]. Returns ``(batch, heads, seq_len, d_v)``.
    ``form`` is "recurrent", "parallel" (one triangular solve over the sequence) or
    "chunkwise" (one per chunk of ``chunk_size``); every form gives the same output.

    Used in lesson 19.
    """
    _require_sequences(q, k, v, beta, alpha, form, chunk_size)
    n = q.shape[-2]
    state = q.new_zeros(*q.shape[:2], q.shape[-1], v.shape[-1])  # (batch, heads, d_k, d_v)
    if form == "recurrent":
        outputs = []
        for t in range(n):
            out, state = delta_rule_step(state, q[..., t, :], k[..., t, :], v[..., t, :],
                                         beta[..., t], None if alpha is None else alpha[..., t])
            outputs.append(out)  # (batch, heads, d_v)
        return torch.stack(outputs, dim=-2)
    size = n if form == "parallel" else chunk_size  # "parallel": the whole sequence, one chunk
    log_alpha = torch.zeros_like(beta) if alpha is None else alpha.log()  # (batch, heads, n)
    outputs = []
    for start in range(0, n, size):
        chunk = slice(start, start + size)
        out, state = _delta_chunk(state, q[..., chunk, :], k[..., chunk, :], v[..., chunk, :],
                                  beta[..., chunk], log_alpha[..., chunk])
        outputs.append(out)
    return torch.cat(outputs, dim=-2)


def _delta_chunk(state, q, k, v, beta, log_alpha):
    """One chunk of C positions, from the state at its start: (output (..., C, d_v), state)."""
    c = q.shape[-2]
    decay_to = log_alpha.cumsum(-1)  # (..., C): log of α_start · … · α_t
    gap = decay_to.unsqueeze(-1) - decay_to.unsqueeze(-2)  # (..., C, C): log(γ_t / γ_i)
    lower = _causal(c, q.device)
    decay = gap.masked_fill(~lower, float("-inf")).exp()  # (..., C, C), 0 above the diagonal
    g = decay_to.exp().unsqueeze(-1)  # (..., C, 1): how much of the chunk's first state is left
    # u_t = β_t (v_t − g_t k_t S − Σ_{i<t} (γ_t/γ_i)(k_t·k_i) u_i): a unit lower-triangular system
    write = (k @ k.transpose(-2, -1)) * decay.masked_fill(~_causal(c, q.device, -1), 0)
    system = torch.eye(c, dtype=q.dtype, device=q.device) + beta.unsqueeze(-1) * write
    u = torch.linalg.solve_triangular(system, beta.unsqueeze(-1) * (v - g * (k @ state)),
                                      upper=False, unitriangular=True)  # (..., C, d_v)
    out = g * (q @ state) + ((q @ k.transpose(-2, -1)) * decay) @ u  # (..., C, d_v)
    to_end = (decay_to[..., -1:] - decay_to).exp().unsqueeze(-1)  # (..., C, 1): γ_C / γ_i
    state = g[..., -1:, :] * state + (k * to_end).transpose(-2, -1) @ u  # (..., d_k, d_v)
    return out, state


def delta_rule_step(state, q, k, v, beta, alpha=None) -> tuple[torch.Tensor, torch.Tensor]:
    """One step of the (gated) delta rule: decay, erase what k recalls, write v at strength β.

    state ``(batch, heads, d_k, d_v)``; q, k ``(batch, heads, d_k)``; v ``(batch, heads, d_v)``;
    beta and alpha ``(batch, heads)``. Returns ``(output (batch, heads, d_v), new state)``;
    the state passed in is not changed.

    Used in lesson 19.
    """
    _require_step(state, q, k, v, beta, alpha)
    if alpha is not None:
        state = alpha[..., None, None] * state  # forget a little everywhere
    recalled = (k.unsqueeze(-2) @ state).squeeze(-2)  # k S: what the state returns for k
    correction = beta.unsqueeze(-1) * (v - recalled)  # (batch, heads, d_v)
    state = state + k.unsqueeze(-1) * correction.unsqueeze(-2)  # + β kᵀ (v − k S)
    return (q.unsqueeze(-2) @ state).squeeze(-2), state
