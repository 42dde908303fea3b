"""Lesson 03's exercises: mutation tables of wrong and right answers (run by test_exercises.py)."""

from __future__ import annotations

import math

import numpy as np
import torch

from course_utils.exercises.l03 import entropy_of_rows, jacobian_of_softmax, measure_variance
from tests.support.exercise_checks import Mutations


# ------------------------------------------------------------------ Var(q·k)
def _pairs(d_k, n_pairs=20_000, dtype=torch.float32):
    return torch.randn(n_pairs, d_k, dtype=dtype), torch.randn(n_pairs, d_k, dtype=dtype)


def _variance_without_sum(d_k, n_pairs=20_000):
    q, k = _pairs(d_k, n_pairs)
    return (q * k).var().item()


def _variance_of_scaled_scores(d_k, n_pairs=20_000):
    q, k = _pairs(d_k, n_pairs)
    return ((q * k).sum(-1) / math.sqrt(d_k)).var().item()


def _standard_deviation(d_k, n_pairs=20_000):
    q, k = _pairs(d_k, n_pairs)
    return (q * k).sum(-1).std().item()


def _scores_not_their_variance(d_k, n_pairs=20_000):
    q, k = _pairs(d_k, n_pairs)
    return (q * k).sum(-1)


def _uniform_in_place_of_normal(d_k, n_pairs=20_000):
    q, k = torch.rand(n_pairs, d_k), torch.rand(n_pairs, d_k)
    return (q * k).sum(-1).var().item()


def _mean_not_variance(d_k, n_pairs=20_000):
    q, k = _pairs(d_k, n_pairs)
    return (q * k).sum(-1).mean().item()


def _summed_over_the_pairs(d_k, n_pairs=20_000):
    q, k = _pairs(d_k, n_pairs)
    return (q * k).sum(0).var().item()  # NaN at d_k = 1: the variance of a single number


def _multiplied_by_d_k(d_k, n_pairs=20_000):
    q, k = _pairs(d_k, n_pairs)
    return ((q * k).sum(-1) * math.sqrt(d_k)).var().item()


def _einsum(d_k, n_pairs=20_000):
    q, k = _pairs(d_k, n_pairs)
    return torch.einsum("nd,nd->n", q, k).var().item()


def _float64_tensor_result(d_k, n_pairs=20_000):
    q, k = _pairs(d_k, n_pairs, dtype=torch.float64)
    return (q * k).sum(dim=1).var()  # a 0-dim tensor, not a float


def _second_moment(d_k, n_pairs=20_000):
    q, k = _pairs(d_k, n_pairs)
    return ((q * k).sum(-1) ** 2).mean().item()  # E[s²] = Var(s) since E[s] = 0


def _batched_matmul(d_k, n_pairs=20_000):
    q, k = _pairs(d_k, n_pairs)
    return (q.unsqueeze(1) @ k.unsqueeze(2)).flatten().var(correction=0).item()


def _numpy(d_k, n_pairs=20_000):
    q, k = np.random.randn(n_pairs, d_k), np.random.randn(n_pairs, d_k)
    return (q * k).sum(axis=1).var()  # a numpy float64


def _own_generator(d_k, n_pairs=20_000):
    generator = torch.Generator().manual_seed(d_k)  # same number every call: still measured
    q = torch.randn(n_pairs, d_k, generator=generator)
    k = torch.randn(n_pairs, d_k, generator=generator)
    return (q * k).sum(-1).var().item()


def _reseeds_the_global_generator(d_k, n_pairs=20_000):
    torch.manual_seed(0)  # the caller's random state is reset on every call
    q, k = _pairs(d_k, n_pairs)
    return (q * k).sum(-1).var().item()


_MEASURED = {1: 0.99, 16: 16.2, 256: 251.0}  # a table of the sizes tried


# ------------------------------------------------------------------ entropy
def _log_base_2(w):
    return -(w * torch.log2(w.clamp_min(1e-30))).sum(-1)


def _no_minus_sign(w):
    return (w * torch.log(w.clamp_min(1e-30))).sum(-1)


def _nan_on_zero_weights(w):
    return -(w * torch.log(w)).sum(-1)


def _summed_over_the_batch(w):
    return -(w * torch.log(w.clamp_min(1e-30))).sum(0)


def _averaged_over_the_keys(w):
    return -(w * torch.log(w.clamp_min(1e-30))).mean(-1)


def _unweighted_logs(w):
    return -torch.log(w.clamp_min(1e-30)).sum(-1)


def _summed_over_the_queries(w):
    return -(w * torch.log(w.clamp_min(1e-30))).sum(-2)


def _special_entr(w):
    return torch.special.entr(w).sum(dim=-1)


def _categorical(w):
    return torch.distributions.Categorical(probs=w).entropy()


def _nan_to_num_float64(w):
    w = w.double()
    return -torch.nan_to_num(w * w.log()).sum(-1)


def _in_place_with_epsilon(w):
    w.add_(1e-12)  # the caller's weights change too
    return -(w * torch.log(w)).sum(-1)


def _first_sequence_only(w):
    w = w[0] if w.dim() > 2 else w  # the first sequence of the batch
    return -(w * torch.log(w.clamp_min(1e-30))).sum(-1)


def _five_keys_written_in(w):
    return -(w * torch.log(w.clamp_min(1e-30))).mean(-1) * 5  # n_k of the first case


def _log_of_clamped_float32(w):
    w = w.float()
    return -(w * w.clamp_min(1e-8).log()).sum(dim=-1)


def _entropy_as_logsumexp(w):  # H = -Σ p log p through the log-weights, zeros dropped
    logs = torch.where(w > 0, w.log(), torch.zeros_like(w))
    return -(w * logs).sum(-1)


# ------------------------------------------------------------------ Jacobian
def _diag_only(p):
    return torch.diag_embed(p)


def _flipped_sign(p):
    return p.unsqueeze(-1) * p.unsqueeze(-2) - torch.diag_embed(p)


def _one_dimensional_only(p):
    return torch.diag(p) - torch.outer(p, p)


def _wrong_outer_product(p):
    return torch.diag_embed(p) - p.unsqueeze(-2) * p.unsqueeze(-2)


def _diagonal_of_p_times_one_minus_p(p):
    return torch.diag_embed(p * (1 - p))


def _identity_minus_outer(p):
    return torch.eye(p.shape[-1]) - p.unsqueeze(-1) * p.unsqueeze(-2)


def _outer_only(p):
    return -p.unsqueeze(-1) * p.unsqueeze(-2)


def _einsum_jacobian(p):
    return torch.diag_embed(p) - torch.einsum("...i,...j->...ij", p, p)


def _kronecker_form(p):
    eye = torch.eye(p.shape[-1], dtype=torch.float64)
    return p.double()[..., :, None] * (eye - p.double()[..., None, :])  # p_i (δ_ij − p_j)


def _in_place_diagonal(p):
    jacobian = -(p.unsqueeze(-1) @ p.unsqueeze(-2))
    jacobian.diagonal(dim1=-2, dim2=-1).add_(p)
    return jacobian


def _transposed(p):
    return (torch.diag_embed(p) - p.unsqueeze(-1) * p.unsqueeze(-2)).mT  # it is symmetric


def _eye_4_written_in(p):
    return torch.eye(4) * p.unsqueeze(-1) - p.unsqueeze(-1) * p.unsqueeze(-2)


def _in_float16(p):
    p = p.half()  # the right formula, in half precision
    return torch.diag_embed(p) - p.unsqueeze(-1) * p.unsqueeze(-2)


def _by_autograd(p):
    scores = p.log().clamp_min(-1e4)  # softmax(log p) = p (a zero: any very negative score)
    rows = scores.reshape(-1, p.shape[-1])  # (rows, n)
    jacobians = torch.vmap(torch.func.jacrev(lambda s: s.softmax(-1)))(rows)  # (rows, n, n)
    return jacobians.reshape(*p.shape, p.shape[-1])


MUTATIONS = {
    measure_variance: Mutations(
        wrong=[
            ("no sum over d_k", _variance_without_sum, "stays near 1 for every d_k"),
            ("scaled scores", _variance_of_scaled_scores, "stays near 1 for every d_k"),
            ("std not var", _standard_deviation, "that is the standard deviation"),
            ("scores returned", _scores_not_their_variance, "reduce the n_pairs dot products"),
            ("torch.rand", _uniform_in_place_of_normal, "torch.rand draws from U(0, 1)"),
            ("mean not var", _mean_not_variance, "mean of the dot products"),
            ("sum over pairs: NaN", _summed_over_the_pairs, "nan, not a finite number"),
            ("times sqrt(d_k)", _multiplied_by_d_k, "about d_k²"),
            ("a string", lambda d_k, n_pairs=20_000: "64", "should be a number, got str"),
            ("d_k returned, a float", lambda d_k, n_pairs=20_000: float(d_k),
             "a formula, not a measurement"),
            ("d_k returned, an int", lambda d_k, n_pairs=20_000: d_k,
             "a formula, not a measurement"),
            ("d_k + 0.01 as a 0-d tensor", lambda d_k, n_pairs=20_000: torch.tensor(d_k + 0.01),
             "a formula, not a measurement"),
            ("variance of the input", lambda d_k, n_pairs=20_000: torch.tensor([d_k, 0.0]).var(),
             "a formula, not a measurement"),
            ("reseeds the global generator", _reseeds_the_global_generator,
             "torch.manual_seed inside the function"),
            ("a table of the sizes tried", lambda d_k, n_pairs=20_000: _MEASURED[d_k],
             "your code raised KeyError"),
        ],
        right=[
            ("einsum", _einsum),
            ("float64, 0-dim tensor", _float64_tensor_result),
            ("second moment", _second_moment),
            ("batched matmul, correction=0", _batched_matmul),
            ("numpy", _numpy),
            ("own generator, seeded once per call", _own_generator),
        ],
    ),
    entropy_of_rows: Mutations(
        wrong=[
            ("log base 2", _log_base_2, "log base 2"),
            ("log base 10", lambda w: -(w * torch.log10(w.clamp_min(1e-30))).sum(-1),
             "log base 10"),
            ("normalised by log n_k", lambda w: -(w * torch.log(w.clamp_min(1e-30))).sum(-1)
             / math.log(w.shape[-1]), "divided by log n_k"),
            ("no minus sign", _no_minus_sign, "minus sign"),
            ("0 · log 0 = NaN", _nan_on_zero_weights, "0 · log 0 counts as 0"),
            ("sum over dim 0", _summed_over_the_batch, "should have shape (2, 3)"),
            ("sum over queries", _summed_over_the_queries, "should have shape (2, 3)"),
            ("mean over keys", _averaged_over_the_keys, "do not average"),
            ("unweighted logs", _unweighted_logs, "without weighting each term by p"),
            ("int result", lambda w: torch.zeros(w.shape[:-1], dtype=torch.long),
             "floating-point"),
            ("epsilon added in place", _in_place_with_epsilon, "changed its argument w in place"),
            ("the first sequence only", _first_sequence_only, "should have shape (2, 3)"),
            ("n_k = 5 written in", _five_keys_written_in, "the entropy of a uniform row"),
        ],
        right=[
            ("torch.special.entr", _special_entr),
            ("Categorical.entropy", _categorical),
            ("float64 with nan_to_num", _nan_to_num_float64),
            ("xlogy", lambda w: -torch.special.xlogy(w, w).sum(dim=-1)),
            ("float32, log of weights clamped at 1e-8", _log_of_clamped_float32),
            ("zero terms dropped with torch.where", _entropy_as_logsumexp),
        ],
    ),
    jacobian_of_softmax: Mutations(
        wrong=[
            ("diag only", _diag_only, "only diag(p)"),
            ("sign flipped", _flipped_sign, "sign is flipped"),
            ("1-D functions", _one_dimensional_only, "use torch.diag_embed"),
            ("wrong outer product", _wrong_outer_product, "values are off"),
            ("diagonal p(1-p) only", _diagonal_of_p_times_one_minus_p, "off-diagonal"),
            ("identity minus outer", _identity_minus_outer, "not the identity"),
            ("outer only", _outer_only, "add diag(p)"),
            ("eye(4) written in", _eye_4_written_in, "your code raised RuntimeError"),
            ("computed in float16", _in_float16, "only about 3 significant digits"),
        ],
        right=[
            ("einsum", _einsum_jacobian),
            ("p_i (δ_ij − p_j) in float64", _kronecker_form),
            ("in-place diagonal", _in_place_diagonal),
            ("transposed (symmetric)", _transposed),
            ("autograd through softmax(log p)", _by_autograd),
        ],
    ),
}
