"""Exercises of lesson 03, the scaling factor.

- ``measure_variance``: sample q·k and measure its variance (it should be about d_k);
- ``entropy_of_rows``: the entropy of each row of attention weights, in nats;
- ``jacobian_of_softmax``: diag(p) − p pᵀ, the reason saturated rows pass no gradient.
"""

from __future__ import annotations

import math

import torch

from course_utils.exercises import (
    Exercise,
    Incorrect,
    as_number,
    attempt,
    expect_close,
    expect_shape,
)
from course_utils.experiments.l03_scaling import softmax_jacobian
from course_utils.language import N_, _
from course_utils.nn.attention import row_entropy

# ------------------------------------------------------------------ measure the variance
# The sample variance of 20 000 dot products has a relative standard error of about 2 %
# at d_k = 1 and 1 % above; 12 % is far outside that, so a correct answer always passes.
VARIANCE_TOLERANCE = 0.12
VARIANCE_D_KS = (1, 16, 256, 40)


def _near(value: float, target: float) -> bool:
    return abs(value - target) < VARIANCE_TOLERANCE * target


def _check_it_is_measured(answer, first: float) -> None:
    """A measurement changes with its samples: the same number again on a second call and with
    100 times fewer pairs is a formula (``float(d_k)``), not a variance that was measured."""
    before = torch.get_rng_state()
    again = as_number(attempt(answer, 16), _("dot_product_variance({d_k})").format(d_k=16))
    after = torch.get_rng_state()
    attempt(answer, 16)
    if not torch.equal(after, before) and torch.equal(torch.get_rng_state(), after):
        raise Incorrect(_(
            "dot_product_variance(16) leaves torch's global generator in the same state after "
            "every call: it reseeds it (torch.manual_seed inside the function), which resets the "
            "caller's random state too. Draw from the global generator without reseeding it, or "
            "from a torch.Generator of your own"))
    fewer = as_number(attempt(answer, 16, n_pairs=200), _(
        "dot_product_variance({d_k}, n_pairs={n_pairs})").format(d_k=16, n_pairs=200))
    if first == again == fewer:
        raise Incorrect(_(
            "dot_product_variance(16) gives exactly {value:.6g} on every call, with n_pairs=20000 "
            "and with n_pairs=200: a measured variance changes with its samples, so this is a "
            "formula, not a measurement. Draw n_pairs fresh pairs q, k with torch.randn on each "
            "call and return the variance of their dot products").format(value=first))


def _check_variance(answer) -> None:
    torch.manual_seed(0)  # the learner draws from the global generator; evaluate() restores it
    measured = {}
    for d_k in VARIANCE_D_KS:
        result = attempt(answer, d_k)
        if isinstance(result, torch.Tensor) and result.numel() > 1:
            raise Incorrect(_(
                "dot_product_variance({d_k}) returned a tensor of shape {result_shape}: reduce "
                "the n_pairs dot products to one number with .var()").format(
                d_k=d_k, result_shape=tuple(result.shape)))
        measured[d_k] = as_number(result, _("dot_product_variance({d_k})").format(d_k=d_k))
    if all(abs(value) < VARIANCE_TOLERANCE * math.sqrt(d_k) for d_k, value in measured.items()):
        raise Incorrect(_(
            "your values are all near 0: that is the mean of the dot products (E[q·k] = 0), not "
            "their variance (use .var(), not .mean())"))
    _check_it_is_measured(answer, measured[16])
    if all(_near(value, 1) for value in measured.values()):
        raise Incorrect(_(
            "your variance stays near 1 for every d_k, but Var(q·k) should grow like d_k: measure "
            "the raw dot products (no 1/sqrt(d_k) yet) and sum q*k over the d_k components before "
            "taking the variance"))
    for d_k, value in measured.items():
        if d_k > 1 and _near(value, math.sqrt(d_k)):
            raise Incorrect(_(
                "for d_k={d_k} you got {value:.3g}, about sqrt(d_k): that is the standard "
                "deviation; the variance is its square (use .var(), not .std())").format(
                d_k=d_k, value=value))
    if all(_near(value, d_k * 7 / 144) for d_k, value in measured.items()):
        raise Incorrect(_(
            "your variances are about d_k / 20: torch.rand draws from U(0, 1), not N(0, 1) (then "
            "Var(q_i k_i) = 1/9 − 1/16 = 7/144); draw q and k with torch.randn"))
    for d_k, value in measured.items():
        if d_k > 1 and _near(value, d_k * d_k):
            raise Incorrect(_(
                "for d_k={d_k} you got {value:.3g}, about d_k²: divide, do not multiply (or "
                "measure the raw scores, without any factor)").format(
                d_k=d_k, value=value))
    for d_k, value in measured.items():
        if not _near(value, d_k):
            raise Incorrect(_(
                "for d_k={d_k} you measured a variance of {value:.3g}, but theory says {d_k} "
                "(allowed: ±{VARIANCE_TOLERANCE:.0%}); draw q and k from N(0, 1) with torch.randn "
                "and use n_pairs samples").format(
                d_k=d_k, value=value, VARIANCE_TOLERANCE=VARIANCE_TOLERANCE))


def _reference_variance(d_k, n_pairs=20_000):
    q = torch.randn(n_pairs, d_k)  # (n_pairs, d_k), unit-variance components
    k = torch.randn(n_pairs, d_k)
    scores = (q * k).sum(dim=-1)  # (n_pairs,): one dot product per pair
    return scores.var().item()


measure_variance = Exercise(
    title=N_("Measure Var(q·k)"),
    checker=_check_variance,
    reference=_reference_variance,
    hints=(
        N_("Draw q and k of shape (n_pairs, d_k) with torch.randn."),
        N_(
            "One dot product per pair: multiply elementwise, then sum over the last dim. Do not "
            "build q @ k.T: that (n_pairs, n_pairs) matrix of every query against every key has "
            "400 million entries at n_pairs = 20 000 (1.6 GB) when you need only n_pairs of them."),
        N_("Return the variance of those n_pairs numbers as a float: .var().item()."),
    ),
)


# ------------------------------------------------------------------ entropy of the rows
def _entropy_cases() -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    random = torch.softmax(3 * torch.randn(2, 3, 5, generator=generator), dim=-1)
    uniform = torch.full((1, 4), 0.25)
    with_zeros = torch.tensor([[1.0, 0.0, 0.0], [0.5, 0.5, 0.0]])  # one-hot, then two-way
    # Other shapes (a batch of heads, 40 keys), and rows of scores in the thousands (float64):
    # most weights exactly 0, so 0 · log 0 shows on random rows too.
    heads = torch.softmax(2 * torch.randn(3, 2, 4, 40, generator=generator), dim=-1)
    far = torch.randn(5, 9, generator=generator, dtype=torch.float64) * 1500
    far[:, 1] = far.max(dim=-1).values - torch.rand(5, generator=generator, dtype=torch.float64)
    return [random, uniform, with_zeros, heads, torch.softmax(far, dim=-1)]


def _check_entropy(answer) -> None:
    random, uniform, with_zeros, *others = _entropy_cases()
    expected = row_entropy(random)  # (2, 3)
    result = attempt(answer, random)
    expect_shape(result, random.shape[:-1], _(
        "the entropy of weights (2, 3, 5) (one value per row; sum over the keys)"))
    random_rows = _("the entropy of random rows")
    if not result.is_floating_point() or not torch.isfinite(result).all():
        expect_close(result, expected, random_rows)  # names dtype, NaN, inf
    got = result.detach().double()
    if (got < -1e-6).any():
        raise Incorrect(_("you returned negative entropies: H(p) = −Σ p log p has a minus sign"))
    if torch.allclose(got, expected.double() / math.log(2), atol=1e-4):
        raise Incorrect(_(
            "your values are 1.44 times too big: that is log base 2 (bits); the lesson measures "
            "nats, so use torch.log"))
    if torch.allclose(got, expected.double() / math.log(10), atol=1e-4):
        raise Incorrect(_(
            "your values are 2.3 times too small: that is log base 10; the lesson measures nats, "
            "so use torch.log (the natural log)"))
    if torch.allclose(got, expected.double() / random.shape[-1], atol=1e-4):
        raise Incorrect(_(
            "your values are the entropy divided by n_k: sum over the keys (.sum(dim=-1)), do not "
            "average (.mean(dim=-1))"))
    if torch.allclose(got, expected.double() / math.log(random.shape[-1]), atol=1e-4):
        raise Incorrect(_(
            "you divided by log n_k: that is the normalised entropy, between 0 and 1; return "
            "the entropy itself, in nats"))
    if torch.allclose(got, -torch.log(random.double()).sum(dim=-1), atol=1e-4):
        raise Incorrect(_("you summed −log p without weighting each term by p: H(p) = −Σ p log p"))
    expect_close(result, expected, random_rows, atol=1e-4)
    expect_close(attempt(answer, uniform), torch.tensor([math.log(4)]), _(
        "the entropy of a uniform row over 4 keys (should be log 4)"), atol=1e-4)
    zeros = attempt(answer, with_zeros)
    if isinstance(zeros, torch.Tensor) and torch.isnan(zeros).any():
        raise Incorrect(_(
            "you return NaN for rows with a zero weight: 0 · log 0 counts as 0, e.g. keep only "
            "the terms where p > 0 with torch.where"))
    expect_close(zeros, torch.tensor([0.0, math.log(2)]), _(
        "the entropy of a one-hot row and of a 50/50 row"), atol=1e-4)
    for weights in others:
        what = _("the entropy of weights {shape}").format(shape=tuple(weights.shape))
        result = attempt(answer, weights)
        if isinstance(result, torch.Tensor) and torch.isnan(result).any():
            raise Incorrect(_(
                "{what} contains NaN: some weights are exactly 0 (the softmax of scores in the "
                "thousands); 0 · log 0 counts as 0, e.g. keep only the terms where p > 0 with "
                "torch.where").format(what=what))
        expect_close(result, row_entropy(weights), what, atol=1e-4)


def _reference_entropy(weights):
    logs = torch.log(weights.clamp_min(1e-30))  # avoid log(0); those terms are zeroed next
    terms = torch.where(weights > 0, weights * logs, torch.zeros_like(weights))
    return -terms.sum(dim=-1)  # (..., n_q, n_k) -> (..., n_q)


entropy_of_rows = Exercise(
    title=N_("Entropy of attention rows"),
    checker=_check_entropy,
    reference=_reference_entropy,
    hints=(
        N_("H(p) = −Σ_k p_k log p_k, summed over the last dim (the keys)."),
        N_("torch.log(0) is -inf and 0 · -inf is NaN: zero those terms with torch.where."),
        N_("A one-hot row has entropy 0, a uniform row over n keys has log(n)."),
    ),
)


# ------------------------------------------------------------------ softmax Jacobian
def _check_jacobian(answer) -> None:
    generator = torch.Generator().manual_seed(1)
    scores = torch.randn(4, generator=generator)
    p = torch.softmax(scores, dim=-1)
    expected = torch.autograd.functional.jacobian(lambda s: torch.softmax(s, dim=-1), scores)
    result = attempt(answer, p)
    expect_shape(result, (4, 4), _("the Jacobian of one row p (4,)"))
    if result.is_floating_point() and torch.isfinite(result).all():
        got, p64 = result.detach().double(), p.double()
        outer = torch.outer(p64, p64)
        mistakes = (
            (torch.diag(p64), _(
                "you returned only diag(p): each weight also depends on every other score, "
                "through the shared denominator (subtract the outer product p pᵀ)")),
            (-expected.double(), _(
                "the sign is flipped: it is diag(p) − p pᵀ, so the diagonal is positive")),
            (torch.diag(p64 * (1 - p64)), _(
                "you returned only the diagonal p_i (1 − p_i): the off-diagonal entries −p_i p_j "
                "are missing (∂p_i/∂s_j is not 0 for i ≠ j)")),
            (torch.eye(4, dtype=torch.float64) - outer, _(
                "the diagonal part is diag(p), not the identity: ∂p_i/∂s_i = p_i (1 − p_i)")),
            (-outer, _("you returned only −p pᵀ: add diag(p) (the δ_ij p_i part)")),
        )
        for wrong, message in mistakes:
            if torch.allclose(got, wrong, atol=1e-5):
                raise Incorrect(message)
    expect_close(result, expected, _("the Jacobian of one row (compared with torch.autograd)"))
    batch = torch.softmax(torch.randn(2, 3, 4, generator=generator), dim=-1)
    try:
        batched = attempt(answer, batch)
    except RuntimeError as error:
        raise Incorrect(_(
            "it works for one row but fails on weights (2, 3, 4) ({error}); torch.diag and "
            "torch.outer take only 1-D input: use torch.diag_embed and unsqueeze instead").format(
            error=error)) from None
    expect_shape(batched, (2, 3, 4, 4), _(
        "the Jacobians of weights (2, 3, 4), one (n, n) matrix per row"))
    expect_close(batched, softmax_jacobian(batch), _("the Jacobians of a batch of rows"))
    # Other lengths, and rows of scores in the thousands (weights exactly 0 and 1): nothing
    # written for n = 4 passes.
    far = torch.randn(3, 1, 6, generator=generator, dtype=torch.float64) * 2000
    for weights in (torch.softmax(torch.randn(7, generator=generator), dim=-1),
                    torch.softmax(far, dim=-1)):
        n = weights.shape[-1]
        what = _("the Jacobians of weights {shape}").format(shape=tuple(weights.shape))
        got = attempt(answer, weights)
        expect_shape(got, (*weights.shape, n), what)
        expect_close(got, softmax_jacobian(weights), what)


def _reference_jacobian(p):
    outer = p.unsqueeze(-1) * p.unsqueeze(-2)  # (..., n, n): p_i p_j
    return torch.diag_embed(p) - outer  # diag_embed works on batches, torch.diag does not


jacobian_of_softmax = Exercise(
    title=N_("The softmax Jacobian"),
    checker=_check_jacobian,
    reference=_reference_jacobian,
    hints=(
        N_("∂p_i/∂s_j = p_i (δ_ij − p_j): a diagonal part and an outer-product part."),
        N_("torch.diag_embed(p) builds diag(p) for every row of a batch."),
        N_("p.unsqueeze(-1) * p.unsqueeze(-2) is the outer product p pᵀ for every row."),
    ),
)
