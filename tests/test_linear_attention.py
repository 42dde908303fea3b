"""course_utils.nn.linear_attention: every form of a variant gives the same output (float64)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from course_utils.nn.linear_attention import (
    FORMS,
    delta_rule,
    delta_rule_step,
    linear_attention,
    linear_attention_step,
)


def _inputs(batch=2, heads=3, seq_len=29, d_k=5, d_v=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(batch, heads, seq_len, d_k, generator=g, dtype=torch.float64)
    k = F.normalize(torch.randn(batch, heads, seq_len, d_k, generator=g, dtype=torch.float64),
                    dim=-1)
    v = torch.randn(batch, heads, seq_len, d_v, generator=g, dtype=torch.float64)
    beta = torch.rand(batch, heads, seq_len, generator=g, dtype=torch.float64)
    alpha = 0.5 + 0.5 * torch.rand(batch, heads, seq_len, generator=g, dtype=torch.float64)
    return q, k, v, beta, alpha


@pytest.mark.parametrize("chunk_size", [1, 4, 7, 29, 64])
def test_linear_attention_forms_agree(chunk_size):
    q, k, v, _, _ = _inputs()
    outputs = [linear_attention(q, k, v, form=form, chunk_size=chunk_size) for form in FORMS]
    for out in outputs[1:]:
        torch.testing.assert_close(out, outputs[0], rtol=1e-12, atol=1e-12)


def test_linear_attention_is_softmax_free_causal_attention():
    q, k, v, _, _ = _inputs(seq_len=6)
    expected = torch.stack([sum((q[..., t, :] * k[..., i, :]).sum(-1, keepdim=True) * v[..., i, :]
                                for i in range(t + 1)) for t in range(6)], dim=-2)
    torch.testing.assert_close(linear_attention(q, k, v, form="recurrent"), expected)


@pytest.mark.parametrize("gated", [False, True])
@pytest.mark.parametrize("chunk_size", [1, 5, 8, 29])
def test_delta_rule_forms_agree(gated, chunk_size):
    q, k, v, beta, alpha = _inputs()
    alpha = alpha if gated else None
    outputs = [delta_rule(q, k, v, beta, alpha, form=form, chunk_size=chunk_size)
               for form in FORMS]
    for out in outputs[1:]:
        torch.testing.assert_close(out, outputs[0], rtol=1e-10, atol=1e-10)


def test_delta_rule_with_zero_erase_is_linear_attention_and_beta_one_overwrites():
    q, k, v, beta, _ = _inputs(seq_len=2, d_k=4)
    k = F.normalize(torch.ones_like(k), dim=-1)  # the same key twice
    out = delta_rule(k, k, v, torch.ones_like(beta), form="recurrent")
    torch.testing.assert_close(out[..., 1, :], v[..., 1, :])  # the second value replaced the first


def test_steps_do_not_change_the_state_passed_in():
    q, k, v, beta, alpha = _inputs(seq_len=1)
    state = torch.randn(2, 3, 5, 4, dtype=torch.float64)
    before = state.clone()
    linear_attention_step(state, q[..., 0, :], k[..., 0, :], v[..., 0, :])
    delta_rule_step(state, q[..., 0, :], k[..., 0, :], v[..., 0, :], beta[..., 0], alpha[..., 0])
    assert torch.equal(state, before)


_q, _k, _v, _beta, _alpha = (t.float() for t in _inputs(seq_len=4))
_state = torch.zeros(2, 3, 5, 4)

BAD_INPUTS = [
    pytest.param(linear_attention, (_q, _k, _v), {"form": "fast"}, ValueError,
                 ("form", "'parallel'", "'fast'"), id="linear_attention: unknown form"),
    pytest.param(linear_attention, (_q[0], _k[0], _v[0]), {}, ValueError,
                 ("q", "(batch, heads, seq_len, d_k)", "(3, 4, 5)"),
                 id="linear_attention: no batch axis"),
    pytest.param(linear_attention, (_q, _k[..., :3], _v), {}, ValueError,
                 ("q and k", "same shape", "(2, 3, 4, 3)"), id="linear_attention: k narrower"),
    pytest.param(linear_attention, (_q, _k, _v[:, :, :2]), {}, ValueError,
                 ("v", "(batch, heads, seq_len", "(2, 3, 2, 4)"),
                 id="linear_attention: v shorter"),
    pytest.param(linear_attention, (_q, _k, _v.long()), {}, TypeError,
                 ("v", "floating-point", "int64"), id="linear_attention: int v"),
    pytest.param(linear_attention, (_q, _k, _v.double()), {}, TypeError,
                 ("q, k, v", "one dtype", "float64"), id="linear_attention: mixed dtypes"),
    pytest.param(linear_attention, (_q, _k, _v), {"chunk_size": 0}, ValueError,
                 ("chunk_size", "positive int", "0"), id="linear_attention: zero chunk"),
    pytest.param(delta_rule, (_q, _k, _v, _beta[..., :2]), {}, ValueError,
                 ("beta", "(batch, heads, seq_len)", "(2, 3, 2)"), id="delta_rule: short beta"),
    pytest.param(delta_rule, (_q, _k, _v, _beta), {"alpha": _alpha - 1}, ValueError,
                 ("alpha", "(0, 1]", "from"), id="delta_rule: alpha not a decay"),
    pytest.param(delta_rule, (_q, _k, _v, 0.5), {}, TypeError,
                 ("beta", "torch.Tensor", "float"), id="delta_rule: beta a float"),
    pytest.param(delta_rule, (_q, _k, _v, _beta), {"form": "scan"}, ValueError,
                 ("form", "'chunkwise'", "'scan'"), id="delta_rule: unknown form"),
    pytest.param(linear_attention_step, (_state, _q[..., 0, :], _k[..., 0, :], _v[..., 0, :3]),
                 {}, ValueError, ("v", "(2, 3, 4)", "(2, 3, 3)"),
                 id="linear_attention_step: v too narrow"),
    pytest.param(linear_attention_step, (_state[0], _q[..., 0, :], _k[..., 0, :], _v[..., 0, :]),
                 {}, ValueError, ("state", "(batch, heads, d_k, d_v)", "(3, 5, 4)"),
                 id="linear_attention_step: state without batch"),
    pytest.param(delta_rule_step, (_state, _q[..., 0, :], _k[..., 0, :], _v[..., 0, :],
                                   _beta[..., 0, None]), {}, ValueError,
                 ("beta", "(batch, heads)", "(2, 3, 1)"), id="delta_rule_step: beta shape"),
    pytest.param(delta_rule_step, (_state, _q[..., 0, :], _k[..., 0, :], _v[..., 0, :],
                                   _beta[..., 0].double()), {}, TypeError,
                 ("one dtype", "float64"), id="delta_rule_step: beta dtype"),
]
