"""Why attention divides its scores by sqrt(d_k), measured (lesson 03).

Every experiment draws its own random numbers from a seeded ``torch.Generator``, so a
result depends only on its arguments, never on what ran before.

Notation: queries ``(n_rows, 1, d_k)`` (one query per row), keys ``(n_rows, n_keys, d_k)``,
scores and weights ``(n_rows, 1, n_keys)``, i.e. ``(..., n_q, n_k)`` with ``n_q = 1``.
The *scale* multiplies the raw dot products ``q·k`` before the softmax; a *rule* names how
it depends on d_k: ``"none"`` (× 1), ``"sqrt"`` (× 1/sqrt(d_k)) or ``"linear"`` (× 1/d_k).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence

import matplotlib.pyplot as plt
import torch
from torch import nn

from course_utils.checks import (
    require_bool,
    require_instance,
    require_one_of,
    require_positive_int,
    require_seed,
    require_tensor,
)
from course_utils.language import N_, Message, _
from course_utils.nn.attention import row_entropy, scaled_dot_product_attention
from course_utils.nn.training import fit
from course_utils.progress import MODELS, counted

SCALE_RULES = ("none", "sqrt", "linear")


class _Labels(Mapping):
    """Labels by rule, each read in the course language when looked up (a plain str)."""

    def __init__(self, labels: Mapping[str, Message]):
        self._labels = dict(labels)

    def __getitem__(self, rule: str) -> str:
        return str(self._labels[rule])

    def __iter__(self) -> Iterator[str]:
        return iter(self._labels)

    def __len__(self) -> int:
        return len(self._labels)

    def __repr__(self) -> str:
        return repr(dict(self))


SCALE_LABELS = _Labels({
    "none": N_("no scaling (× 1)"),
    "sqrt": N_("× 1/√d_k"),
    "linear": N_("× 1/d_k"),
})


def scale_factor(d_k: int, rule: str) -> float:
    """The factor the raw scores ``q·k`` are multiplied by under ``rule``.

    Used in lesson 03.
    """
    d_k = require_positive_int("d_k", d_k)
    require_one_of("rule", rule, SCALE_RULES)
    if rule == "none":
        return 1.0
    if rule == "sqrt":
        return 1.0 / math.sqrt(d_k)
    return 1.0 / d_k  # rule == "linear"


# ---------------------------------------------------------------- 1. variance of q·k
def dot_products(d_k: int, n_pairs: int = 10_000, scale: float = 1.0, seed: int = 0):
    """``scale · q·k`` for ``n_pairs`` independent q, k with N(0, 1) components.

    Returns a tensor ``(n_pairs,)``.

    Used in lesson 03.
    """
    d_k = require_positive_int("d_k", d_k)
    n_pairs = require_positive_int("n_pairs", n_pairs)
    generator = torch.Generator().manual_seed(seed)
    q = torch.randn(n_pairs, d_k, generator=generator)  # (n_pairs, d_k)
    k = torch.randn(n_pairs, d_k, generator=generator)  # (n_pairs, d_k)
    return (q * k).sum(dim=-1) * scale  # (n_pairs,)


def variance_table(d_ks: Sequence[int], n_pairs: int = 10_000, seed: int = 0) -> list[dict]:
    """Sample variance of q·k, unscaled and scaled by 1/sqrt(d_k), for each d_k.

    One dict per d_k: ``{"d_k", "unscaled", "scaled"}``. Both columns come from the same
    samples, so ``scaled == unscaled / d_k`` up to rounding.

    Used in lesson 03.
    """
    rows = []
    for d_k in d_ks:
        scores = dot_products(d_k, n_pairs, seed=seed)  # (n_pairs,)
        unscaled = scores.var().item()
        scaled = (scores * scale_factor(d_k, "sqrt")).var().item()
        rows.append({"d_k": d_k, "unscaled": unscaled, "scaled": scaled})
    return rows


# ---------------------------------------------------------------- 2. saturated rows
def max_weight(weights: torch.Tensor) -> torch.Tensor:
    """The largest weight of each row: ``(..., n_q, n_k)`` -> ``(..., n_q)``; 1 means one-hot.

    Used in lesson 03.
    """
    weights = require_tensor("weights", weights, "(..., n_q, n_k)")
    return weights.amax(dim=-1)


def random_rows(d_k: int, n_rows: int = 1000, n_keys: int = 16, seed: int = 0):
    """Random queries, keys and upstream gradients with N(0, 1) components.

    Returns q ``(n_rows, 1, d_k)``, k ``(n_rows, n_keys, d_k)`` and upstream
    ``(n_rows, 1, n_keys)``: a stand-in for ∂L/∂weights, which in a real model is
    whatever the loss sends back through ``weights @ v``.

    Used in lesson 03.
    """
    d_k = require_positive_int("d_k", d_k)
    n_rows = require_positive_int("n_rows", n_rows)
    n_keys = require_positive_int("n_keys", n_keys)
    generator = torch.Generator().manual_seed(seed)
    q = torch.randn(n_rows, 1, d_k, generator=generator)
    k = torch.randn(n_rows, n_keys, d_k, generator=generator)
    upstream = torch.randn(n_rows, 1, n_keys, generator=generator)
    return q, k, upstream


def raw_scores(d_k: int, n_rows: int = 1000, n_keys: int = 16, seed: int = 0):
    """Unscaled scores ``q·k`` of random rows: ``(n_rows, 1, n_keys)``.

    Used in lesson 03.
    """
    q, k, _values = random_rows(d_k, n_rows, n_keys, seed)
    return q @ k.transpose(-2, -1)  # (n_rows, 1, n_keys)


def saturation_table(d_ks: Sequence[int], rules: Sequence[str] = SCALE_RULES,
                     n_rows: int = 1000, n_keys: int = 16, seed: int = 0) -> list[dict]:
    """Mean max weight and mean entropy (nats) of random rows, per d_k and rule.

    One dict per (d_k, rule): ``{"d_k", "rule", "max_weight", "entropy"}``. Every rule
    sees the same raw scores, so only the scale differs between them.

    Used in lesson 03.
    """
    rows = []
    for d_k in d_ks:
        scores = raw_scores(d_k, n_rows, n_keys, seed)  # (n_rows, 1, n_keys)
        for rule in rules:
            weights = torch.softmax(scores * scale_factor(d_k, rule), dim=-1)
            rows.append({
                "d_k": d_k, "rule": rule,
                "max_weight": max_weight(weights).mean().item(),
                "entropy": row_entropy(weights).mean().item(),
            })
    return rows


# ---------------------------------------------------------------- 3. vanishing gradients
def softmax_jacobian(p: torch.Tensor) -> torch.Tensor:
    """∂softmax/∂scores = diag(p) − p pᵀ for rows of weights: ``(..., n)`` -> ``(..., n, n)``.

    Used in lesson 03.
    """
    p = require_tensor("p", p, "(..., n)")
    return torch.diag_embed(p) - p.unsqueeze(-1) * p.unsqueeze(-2)


def gradient_norms(d_k: int, rule: str, n_rows: int = 1000, n_keys: int = 16,
                   seed: int = 0) -> dict:
    """Median over rows of ‖∂L/∂scores‖ and ‖∂L/∂q‖ for L = Σ weights · upstream.

    ``scores`` are what enters the softmax (already scaled). The median describes a
    typical row: the mean is dominated by the rare rows whose two top scores tie.
    Returns ``{"scores": float, "q": float}``.

    Used in lesson 03.
    """
    q, k, upstream = random_rows(d_k, n_rows, n_keys, seed)
    q.requires_grad_(True)
    scores = (q @ k.transpose(-2, -1)) * scale_factor(d_k, rule)  # (n_rows, 1, n_keys)
    scores.retain_grad()
    weights = torch.softmax(scores, dim=-1)  # (n_rows, 1, n_keys)
    (weights * upstream).sum().backward()
    return {
        "scores": scores.grad.norm(dim=-1).median().item(),
        "q": q.grad.norm(dim=-1).median().item(),
    }


def gradient_concentration(d_k: int, rule: str, top: float = 0.1, n_rows: int = 1000,
                           n_keys: int = 16, seed: int = 0) -> float:
    """Share of the total squared query gradient Σ‖∂L/∂q‖² carried by the ``top`` rows.

    Same rows and loss as :func:`gradient_norms`. A share near ``top`` means every row
    contributes alike; near 1 means a few rows (those whose best keys nearly tie) send
    all the gradient, so an optimiser that rescales the step (Adam) learns from them alone.

    Used in lesson 03.
    """
    if not (isinstance(top, float) and 0 < top < 1):
        raise ValueError(_("top should be a fraction between 0 and 1, got {top!r}").format(top=top))
    q, k, upstream = random_rows(d_k, n_rows, n_keys, seed)
    q.requires_grad_(True)
    scores = (q @ k.transpose(-2, -1)) * scale_factor(d_k, rule)  # (n_rows, 1, n_keys)
    (torch.softmax(scores, dim=-1) * upstream).sum().backward()
    squared = q.grad.pow(2).sum(dim=(-2, -1))  # (n_rows,)
    largest = squared.sort(descending=True).values[: max(1, round(top * n_rows))]
    return (largest.sum() / squared.sum()).item()


def gradient_table(d_ks: Sequence[int], rules: Sequence[str] = ("none", "sqrt"),
                   n_rows: int = 1000, n_keys: int = 16, seed: int = 0) -> list[dict]:
    """``gradient_norms`` per (d_k, rule): dicts ``{"d_k", "rule", "scores", "q"}``.

    Used in lesson 03.
    """
    return [
        {"d_k": d_k, "rule": rule, **gradient_norms(d_k, rule, n_rows, n_keys, seed)}
        for d_k in d_ks for rule in rules
    ]


# ---------------------------------------------------------------- 4. a toy training run
class KeyValueLookupTask:
    """Key-value lookup: find the value stored under the key the last token asks for.

    A sequence holds ``n_pairs`` tokens, each the (scaled) sum of a key embedding and a
    value embedding, then one query token carrying only a key that appears earlier.
    The target is that pair's value id. Embeddings are fixed N(0, 1) vectors, so token
    components have variance 1, as the derivation assumes.

    Used in lesson 03.
    """

    def __init__(self, d_model: int = 32, n_keys: int = 16, n_values: int = 16,
                 n_pairs: int = 8, seed: int = 0):
        for name, size in (("d_model", d_model), ("n_keys", n_keys), ("n_values", n_values),
                           ("n_pairs", n_pairs)):
            require_positive_int(name, size)
        require_seed("seed", seed)
        if n_pairs > n_keys:
            raise ValueError(_(
                "n_pairs ({n_pairs}) cannot exceed n_keys ({n_keys}): keys within a sequence are "
                "distinct"
            ).format(n_pairs=n_pairs, n_keys=n_keys))
        self.d_model, self.n_keys, self.n_values, self.n_pairs = d_model, n_keys, n_values, n_pairs
        self.generator = torch.Generator().manual_seed(seed)
        self.key_embedding = torch.randn(n_keys, d_model, generator=self.generator)
        self.value_embedding = torch.randn(n_values, d_model, generator=self.generator)

    def batch(self, batch_size: int):
        """x ``(batch, n_pairs + 1, d_model)`` and target value ids ``(batch,)``."""
        batch_size = require_positive_int("batch_size", batch_size)
        keys = torch.rand(batch_size, self.n_keys, generator=self.generator).argsort(dim=-1)
        keys = keys[:, : self.n_pairs]  # (batch, n_pairs), distinct per row
        values = torch.randint(self.n_values, (batch_size, self.n_pairs),
                               generator=self.generator)
        asked = torch.randint(self.n_pairs, (batch_size,), generator=self.generator)
        rows = torch.arange(batch_size)
        pairs = (self.key_embedding[keys] + self.value_embedding[values]) / math.sqrt(2)
        query = self.key_embedding[keys[rows, asked]].unsqueeze(1)  # (batch, 1, d_model)
        return torch.cat([pairs, query], dim=1), values[rows, asked]


class LookupModel(nn.Module):
    """One attention head read out from the last position.

    W_q and W_k start as N(0, 1/d_model), so q and k components have variance about 1
    (the assumption of the derivation); ``scaled`` switches the 1/sqrt(d_k) factor.
    ``forward(x)`` maps ``(batch, seq_len, d_model)`` to logits ``(batch, n_values)``.

    Used in lesson 03.
    """

    def __init__(self, d_model: int, d_k: int, n_values: int, scaled: bool):
        super().__init__()
        for name, size in (("d_model", d_model), ("d_k", d_k), ("n_values", n_values)):
            require_positive_int(name, size)
        require_bool("scaled", scaled)
        self.w_q = nn.Linear(d_model, d_k, bias=False)
        self.w_k = nn.Linear(d_model, d_k, bias=False)
        self.w_v = nn.Linear(d_model, d_model, bias=False)
        for projection in (self.w_q, self.w_k):
            nn.init.normal_(projection.weight, std=d_model ** -0.5)
        self.readout = nn.Linear(d_model, n_values)
        self.scale = None if scaled else 1.0  # None = 1/sqrt(d_k) in scaled_dot_product_attention

    def forward(self, x):
        q = self.w_q(x[:, -1:])  # (batch, 1, d_k): only the last token asks
        k = self.w_k(x[:, :-1])  # (batch, n_pairs, d_k)
        v = self.w_v(x[:, :-1])  # (batch, n_pairs, d_model)
        out, _weights = scaled_dot_product_attention(q, k, v, scale=self.scale)
        # out: (batch, 1, d_model)
        return self.readout(out[:, 0])


def train_lookup(d_k: int, scaled: bool, steps: int = 200, seed: int = 0,
                 batch_size: int = 64, lr: float = 3e-3) -> list[float]:
    """Train a ``LookupModel`` on ``KeyValueLookupTask`` with Adam; return the loss of every step.

    The same seed gives both settings the same task, initial weights and batches, so
    the only difference between two runs is the scaling.

    Used in lesson 03.
    """
    d_k = require_positive_int("d_k", d_k)
    steps = require_positive_int("steps", steps)
    task = KeyValueLookupTask(seed=seed)
    torch.manual_seed(seed)
    model = LookupModel(task.d_model, d_k, task.n_values, scaled)

    def loss_at_step(step):
        x, target = task.batch(batch_size)
        return nn.functional.cross_entropy(model(x), target)

    return fit(model, loss_at_step, steps, lr=lr)


def training_comparison(d_ks: Sequence[int], seeds: Sequence[int], steps: int = 200) -> dict:
    """Loss curves for every (d_k, seed, scaled): ``{(d_k, seed, scaled): [loss per step]}``.

    Used in lesson 03.
    """
    runs = [(d_k, seed, scaled) for d_k in d_ks for seed in seeds for scaled in (True, False)]
    return {
        (d_k, seed, scaled): train_lookup(d_k, scaled, steps=steps, seed=seed)
        for d_k, seed, scaled in counted(runs, MODELS)
    }


def loss_ratios(curves: dict) -> dict[int, list[float]]:
    """Mean loss without scaling ÷ mean loss with it, per d_k, one ratio per seed.

    ``curves`` is what ``training_comparison`` returns. The mean over all steps is the
    area under the loss curve: a run that learns sooner has a smaller one, so a ratio
    above 1 means scaling helped.

    Used in lesson 03.
    """
    require_instance("curves", curves, dict, _("the dict training_comparison returns"))
    ratios: dict[int, list[float]] = {}
    for (d_k, seed, scaled), losses in sorted(curves.items()):
        if scaled:
            unscaled = curves[(d_k, seed, False)]
            ratios.setdefault(d_k, []).append(
                (sum(unscaled) / len(unscaled)) / (sum(losses) / len(losses))
            )
    return ratios


# ---------------------------------------------------------------- figures
_RULE_STYLE = {"none": ("#c0392b", "o"), "sqrt": ("#1f77b4", "s"), "linear": ("#7f7f7f", "^")}


def plot_variance(table: list[dict]):
    """Log-log plot of a ``variance_table``: measured points against the theory lines.

    Used in lesson 03.
    """
    require_instance("table", table, list, _("the list variance_table returns"))
    d_ks = [row["d_k"] for row in table]
    fig, ax = plt.subplots(figsize=(5.5, 3.8), layout="constrained")
    ax.loglog(d_ks, d_ks, color="#c0392b", linewidth=1,
              label=_("theory: d_k"))
    ax.loglog(d_ks, [1] * len(d_ks), color="#1f77b4", linewidth=1,
              label=_("theory: 1"))
    ax.loglog(d_ks, [row["unscaled"] for row in table], "o", color="#c0392b",
              label=_("measured Var(q·k)"))
    ax.loglog(d_ks, [row["scaled"] for row in table], "s", color="#1f77b4",
              label=_("measured Var(q·k / √d_k)"))
    ax.set_xlabel("d_k")
    ax.set_ylabel(_("variance of the scores"))
    ax.legend(fontsize=8)
    return fig


def plot_against_d_k(table: list[dict], columns: Sequence[str], rules: Sequence[str],
                     ylabels: Sequence[str], log_y: Sequence[bool] | None = None):
    """One panel per column of a per-(d_k, rule) table, one line per rule; x is log d_k.

    Used in lesson 03.
    """
    require_instance("table", table, list, _("a list of rows (saturation_table, gradient_table)"))
    log_y = [False] * len(columns) if log_y is None else log_y
    fig, axes = plt.subplots(1, len(columns), figsize=(5 * len(columns), 3.6),
                             layout="constrained", squeeze=False)
    for ax, column, ylabel, log in zip(axes[0], columns, ylabels, log_y, strict=True):
        for rule in rules:
            rows = [row for row in table if row["rule"] == rule]
            colour, marker = _RULE_STYLE[rule]
            ax.plot([row["d_k"] for row in rows], [row[column] for row in rows],
                    marker=marker, color=colour, label=SCALE_LABELS[rule])
        ax.set_xscale("log", base=2)
        if log:
            ax.set_yscale("log")
        ax.set_xlabel("d_k")
        ax.set_ylabel(ylabel)
        ax.legend(fontsize=8)
    return fig


def plot_loss_curves(curves: dict, d_ks: Sequence[int], seed: int = 0, window: int = 10):
    """Loss per step (moving average over ``window`` steps), scaled vs not, one panel per d_k.

    Used in lesson 03.
    """
    require_instance("curves", curves, dict, _("the dict training_comparison returns"))
    fig, axes = plt.subplots(1, len(d_ks), figsize=(5 * len(d_ks), 3.4), sharey=True,
                             layout="constrained", squeeze=False)
    kernel = torch.ones(1, 1, window) / window
    for ax, d_k in zip(axes[0], d_ks, strict=True):
        for scaled, rule in ((False, "none"), (True, "sqrt")):
            losses = torch.tensor(curves[(d_k, seed, scaled)])[None, None]
            smooth = torch.nn.functional.conv1d(losses, kernel)[0, 0]
            ax.plot(range(window, window + len(smooth)), smooth, color=_RULE_STYLE[rule][0],
                    label=SCALE_LABELS[rule])
        ax.set_title(_("d_k = {d_k} (seed {seed})").format(d_k=d_k, seed=seed),
                     fontsize=10)
        ax.set_xlabel(_("training step"))
        ax.legend(fontsize=8)
    axes[0, 0].set_ylabel(_("loss ({window}-step average)").format(window=window))
    return fig
