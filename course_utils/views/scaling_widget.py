"""A d_k slider and a scaling toggle: the scores' histogram and one row of weights, live.

Three layers, so that everything but the drawing can be tested without a browser:

- ``scaling_state(d_k, scaled)``: the numbers for one setting (pure, seeded);
- ``draw_scaling_state(state)`` / ``scaling_figure()``: a static matplotlib figure;
- ``ScalingWidget``: the ipywidgets view (ipywidgets 7.7 and 8: ``SelectionSlider``,
  ``ToggleButton``, ``Output`` with inline matplotlib, ``observe(..., names="value")``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import ipywidgets as widgets
import matplotlib.pyplot as plt
import torch

from course_utils.checks import require_bool, require_instance, require_one_of
from course_utils.experiments.l03_scaling import max_weight, raw_scores, scale_factor
from course_utils.language import _
from course_utils.nn.attention import row_entropy

# Powers of two: a slider over these moves d_k on a log scale, and d_k stays an integer.
D_K_OPTIONS = tuple(2**power for power in range(11))  # 1 .. 1024
DEFAULT_D_K = 64  # the width of one head in BERT-base
DEFAULT_SCALED = False  # start on the problem; the learner switches the fix on
N_ROWS = 256
N_KEYS = 16


@dataclass(frozen=True)
class ScalingState:
    """What the widget shows for one (d_k, scaled) setting.

    ``scores`` ``(n_rows * n_keys,)`` are all scores entering the softmax (scaled or not),
    ``row`` ``(n_keys,)`` the weights of the first row. The statistics are over all rows.

    Used in lesson 03.
    """

    d_k: int
    scaled: bool
    scores: torch.Tensor
    row: torch.Tensor
    variance: float
    mean_max_weight: float
    mean_entropy: float

    @property
    def uniform_entropy(self) -> float:
        """The entropy of a uniform row, the largest possible: log(n_keys)."""
        return math.log(self.row.numel())

    def summary(self) -> str:
        """One line in the course language; both languages print the same numbers."""
        if self.scaled:
            setting = _("scaled by 1/√d_k")
        else:
            setting = _("not scaled")
        return _(
            "d_k = {d_k}, {setting}: var(scores) = {variance:.1f}, mean max weight = "
            "{mean_max_weight:.2f}, mean entropy = {mean_entropy:.2f} nats (uniform: "
            "{uniform_entropy:.2f})").format(
            d_k=self.d_k, setting=setting, variance=self.variance,
            mean_max_weight=self.mean_max_weight, mean_entropy=self.mean_entropy,
            uniform_entropy=self.uniform_entropy)


def scaling_state(d_k: int, scaled: bool, n_rows: int = N_ROWS, n_keys: int = N_KEYS,
                  seed: int = 0) -> ScalingState:
    """The numbers the widget shows for ``d_k`` with or without the 1/sqrt(d_k) scale.

    The same seed draws the same q and k for both settings, so the toggle rescales the
    very same scores.

    Used in lesson 03.
    """
    require_bool("scaled", scaled)
    scores = raw_scores(d_k, n_rows, n_keys, seed)  # (n_rows, 1, n_keys)
    scores = scores * scale_factor(d_k, "sqrt" if scaled else "none")
    weights = torch.softmax(scores, dim=-1)  # (n_rows, 1, n_keys)
    return ScalingState(
        d_k=d_k, scaled=scaled, scores=scores.flatten(), row=weights[0, 0],
        variance=scores.var().item(),
        mean_max_weight=max_weight(weights).mean().item(),
        mean_entropy=row_entropy(weights).mean().item(),
    )


def draw_scaling_state(state: ScalingState):
    """Histogram of the scores beside the bars of one row of weights; returns the figure.

    Used in lesson 03.
    """
    require_instance("state", state, ScalingState, _("a ScalingState (scaling_state())"))
    fig, (hist, bars) = plt.subplots(1, 2, figsize=(10, 3.4), layout="constrained")
    std = math.sqrt(state.variance)
    hist.axvspan(-1, 1, color="#dddddd", label=_("±1: unit variance"))
    hist.hist(state.scores.numpy(), bins=40, color="#1f77b4")
    limit = max(4.0, 4 * std)
    hist.set_xlim(-limit, limit)
    hist.set_xlabel(_("score entering the softmax"))
    hist.set_ylabel(_("count"))
    hist.set_title(_(
        "scores: variance {variance:.1f} (std {std:.1f})").format(
        variance=state.variance, std=std), fontsize=10)
    hist.legend(loc="upper right", fontsize=8)

    n_keys = state.row.numel()
    bars.bar(range(n_keys), state.row.numpy(), color="#c0392b")
    bars.axhline(1 / n_keys, color="grey", linestyle="--", linewidth=1,
                 label=_("uniform 1/n_k"))
    bars.set_ylim(0, 1.05)
    bars.set_xlabel(_("key"))
    bars.set_ylabel(_("weight"))
    entropy = row_entropy(state.row[None]).item()
    top = state.row.max().item()
    bars.set_title(_("one row: max {top:.2f}, entropy {entropy:.2f} nats").format(
        top=top, entropy=entropy), fontsize=10)
    bars.legend(loc="upper right", fontsize=8)
    setting = "÷ √d_k" if state.scaled else _("no scaling")
    fig.suptitle(_("d_k = {d_k}, {setting}").format(d_k=state.d_k, setting=setting),
                 fontsize=11)
    return fig


def scaling_figure(d_k: int = DEFAULT_D_K, scaled: bool = DEFAULT_SCALED):
    """The static picture of one setting (by default the widget's first view).

    Used in lesson 03.
    """
    return draw_scaling_state(scaling_state(d_k, scaled))


class ScalingWidget:
    """A log-scale d_k slider and a scaling toggle above the live figure and its numbers.

    Display it by making it the last expression of a cell. ``state`` is what is shown now;
    ``summary`` (a Label) repeats it in words.

    Used in lesson 03.
    """

    def __init__(self, d_k: int = DEFAULT_D_K, scaled: bool = DEFAULT_SCALED):
        require_one_of("d_k", d_k, D_K_OPTIONS)
        self.d_k_slider = widgets.SelectionSlider(
            options=D_K_OPTIONS, value=d_k, description="d_k", continuous_update=False)
        self.scale_toggle = widgets.ToggleButton(value=bool(scaled))
        self.summary = widgets.Label()
        self.output = widgets.Output()
        for control in (self.d_k_slider, self.scale_toggle):
            control.observe(self._refresh, names="value")
        self.view = widgets.VBox([
            widgets.HBox([self.d_k_slider, self.scale_toggle]), self.summary, self.output])
        self._refresh()

    @property
    def state(self) -> ScalingState:
        return scaling_state(self.d_k_slider.value, bool(self.scale_toggle.value))

    def _refresh(self, _change=None) -> None:
        from IPython.display import clear_output, display

        state = self.state
        # Say the setting on the toggle itself: a pressed button alone is easy to misread.
        self.scale_toggle.description = (
            _("÷ √d_k: on") if state.scaled else _("÷ √d_k: off"))
        self.summary.value = state.summary()
        with self.output:
            clear_output(wait=True)
            fig = draw_scaling_state(state)
            display(fig)
            plt.close(fig)  # shown once, inside the Output, not again at the cell's end

    def _ipython_display_(self):
        # Both IPython 7.34 (Colab) and 8+ honour _ipython_display_.
        from IPython.display import display

        display(self.view)
