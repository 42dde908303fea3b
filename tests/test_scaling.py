"""Tests of course_utils.experiments.l03_scaling and its widget (lesson 03; exercises:
tests/mutations/l03.py)."""

from __future__ import annotations

import math
import re

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from course_utils.experiments import l03_scaling as scaling  # noqa: E402
from course_utils.language import set_language  # noqa: E402
from course_utils.views import scaling_widget as widget  # noqa: E402


# ------------------------------------------------------------------ scale factor
def test_scale_factor_per_rule():
    assert scaling.scale_factor(64, "none") == 1.0
    assert scaling.scale_factor(64, "sqrt") == pytest.approx(1 / 8)
    assert scaling.scale_factor(64, "linear") == pytest.approx(1 / 64)


@pytest.mark.parametrize("d_k, rule, error", [
    (64, "square", ValueError), (0, "sqrt", ValueError), (8.0, "sqrt", TypeError),
    (True, "sqrt", TypeError),
])
def test_scale_factor_rejects_bad_input(d_k, rule, error):
    with pytest.raises(error, match="rule|d_k"):
        scaling.scale_factor(d_k, rule)


# ------------------------------------------------------------------ 1. variance
@pytest.mark.parametrize("d_k", [1, 8, 128, 1024])
def test_variance_of_dot_products_is_d_k(d_k):
    scores = scaling.dot_products(d_k, n_pairs=20_000, seed=3)
    assert scores.shape == (20_000,)
    # Relative standard error of a sample variance here is at most ~2 %: 10 % is 5 of them.
    assert scores.var().item() == pytest.approx(d_k, rel=0.10)


def test_variance_table_scaled_column_is_unscaled_over_d_k():
    for row in scaling.variance_table([1, 16, 256], n_pairs=5_000):
        assert row["scaled"] == pytest.approx(row["unscaled"] / row["d_k"], rel=1e-4)
        assert row["scaled"] == pytest.approx(1.0, rel=0.15)


def test_dot_products_depend_only_on_the_seed():
    torch.manual_seed(123)
    first = scaling.dot_products(16, n_pairs=100, seed=5)
    torch.manual_seed(456)
    assert torch.equal(first, scaling.dot_products(16, n_pairs=100, seed=5))
    assert not torch.equal(first, scaling.dot_products(16, n_pairs=100, seed=6))


# ------------------------------------------------------------------ 2. saturation
@settings(max_examples=30, deadline=None)
@given(st.integers(1, 4), st.integers(1, 5), st.integers(2, 7), st.floats(0.1, 10.0))
def test_row_entropy_matches_torch_categorical(batch, n_q, n_k, sharpness):
    scores = torch.randn(batch, n_q, n_k, dtype=torch.float64) * sharpness
    weights = torch.softmax(scores, dim=-1)  # (batch, n_q, n_k)
    expected = torch.distributions.Categorical(probs=weights).entropy()
    assert torch.allclose(scaling.row_entropy(weights), expected, atol=1e-9)


def test_row_entropy_of_one_hot_uniform_and_masked_rows():
    weights = torch.tensor([[0.0, 1.0, 0.0, 0.0], [0.25] * 4, [0.5, 0.5, 0.0, 0.0]])
    entropy = scaling.row_entropy(weights)
    assert not torch.isnan(entropy).any()
    assert torch.allclose(entropy, torch.tensor([0.0, math.log(4), math.log(2)]))
    expected = torch.distributions.Categorical(probs=weights).entropy()
    assert torch.allclose(entropy, expected, atol=1e-6)


def test_max_weight_is_the_row_maximum():
    weights = torch.softmax(torch.randn(3, 5, 7), dim=-1)
    assert torch.equal(scaling.max_weight(weights), weights.max(dim=-1).values)


@pytest.mark.parametrize("bad", [[0.5, 0.5], torch.tensor([1, 0])])
def test_row_statistics_reject_non_float_tensors(bad):
    with pytest.raises(TypeError, match="weights"):
        scaling.row_entropy(bad)
    with pytest.raises(TypeError, match="weights"):
        scaling.max_weight(bad)


def test_saturation_unscaled_rows_collapse_and_scaled_rows_do_not():
    table = {(r["d_k"], r["rule"]): r
             for r in scaling.saturation_table([1, 1024], n_rows=300)}
    # At d_k = 1 every rule multiplies by 1: the same scores, the same rows.
    assert table[(1, "none")] == {**table[(1, "sqrt")], "rule": "none"}
    assert table[(1024, "none")]["max_weight"] > 0.9
    assert table[(1024, "sqrt")]["max_weight"] < 0.4
    assert table[(1024, "linear")]["entropy"] > 0.99 * math.log(16)


# ------------------------------------------------------------------ 3. gradients
def test_softmax_jacobian_matches_autograd_for_a_batch():
    scores = torch.randn(2, 3, 5, dtype=torch.float64)
    p = torch.softmax(scores, dim=-1)
    jacobian = scaling.softmax_jacobian(p)  # (2, 3, 5, 5)
    for b in range(2):
        for i in range(3):
            expected = torch.autograd.functional.jacobian(
                lambda s: torch.softmax(s, dim=-1), scores[b, i])
            assert torch.allclose(jacobian[b, i], expected)


def test_softmax_jacobian_of_a_one_hot_row_is_zero():
    assert torch.equal(scaling.softmax_jacobian(torch.tensor([0.0, 1.0, 0.0])),
                       torch.zeros(3, 3))


def test_gradient_norms_agree_with_the_jacobian():
    q, k, upstream = scaling.random_rows(16, n_rows=50, n_keys=6, seed=2)
    p = torch.softmax((q @ k.transpose(-2, -1)) * 0.25, dim=-1)  # (50, 1, 6)
    by_jacobian = (scaling.softmax_jacobian(p) @ upstream.unsqueeze(-1)).squeeze(-1)
    norms = scaling.gradient_norms(16, "sqrt", n_rows=50, n_keys=6, seed=2)
    assert norms["scores"] == pytest.approx(by_jacobian.norm(dim=-1).median().item(), rel=1e-5)


def test_gradient_concentration_is_a_share_of_the_squared_query_gradient():
    q, k, upstream = scaling.random_rows(64, n_rows=40, n_keys=6, seed=3)
    q.requires_grad_(True)
    weights = torch.softmax(q @ k.transpose(-2, -1), dim=-1)
    (weights * upstream).sum().backward()
    squared = q.grad.pow(2).sum(dim=(-2, -1)).sort(descending=True).values
    expected = (squared[:4].sum() / squared.sum()).item()
    share = scaling.gradient_concentration(64, "none", top=0.1, n_rows=40, n_keys=6, seed=3)
    assert share == pytest.approx(expected, rel=1e-5)
    assert scaling.gradient_concentration(256, "none", n_rows=300) > 0.75
    assert scaling.gradient_concentration(256, "sqrt", n_rows=300) < 0.4
    with pytest.raises(ValueError, match="top"):
        scaling.gradient_concentration(4, "sqrt", top=1.5)


def test_gradients_vanish_without_scaling_only():
    table = {(r["d_k"], r["rule"]): r for r in scaling.gradient_table([4, 1024], n_rows=300)}
    assert table[(1024, "none")]["scores"] < 0.01 * table[(4, "none")]["scores"]
    assert table[(1024, "sqrt")]["scores"] > 0.5 * table[(4, "sqrt")]["scores"]
    assert table[(1024, "none")]["q"] < 0.01 * table[(1024, "sqrt")]["q"]


# ------------------------------------------------------------------ 4. training
def test_lookup_batch_targets_are_the_value_stored_under_the_asked_key():
    task = scaling.KeyValueLookupTask(seed=4)
    x, target = task.batch(32)
    assert x.shape == (32, task.n_pairs + 1, task.d_model) and target.shape == (32,)
    for row in range(32):
        asked = (x[row, -1] == task.key_embedding).all(dim=-1).nonzero().item()
        for position in range(task.n_pairs):
            pair = x[row, position] * math.sqrt(2)
            key = (pair - task.key_embedding[asked] - task.value_embedding).norm(dim=-1)
            if key.min() < 1e-4:  # this pair holds the asked key: its value is the target
                assert key.argmin().item() == target[row].item()
                break
        else:
            pytest.fail(f"row {row}: the asked key is in none of the pairs")


def test_lookup_task_rejects_more_pairs_than_keys():
    with pytest.raises(ValueError, match="n_pairs"):
        scaling.KeyValueLookupTask(n_keys=4, n_pairs=5)


@pytest.mark.parametrize("scaled", [True, False])
def test_lookup_model_matches_torch_attention(scaled):
    torch.manual_seed(0)
    model = scaling.LookupModel(d_model=8, d_k=16, n_values=5, scaled=scaled)
    x = torch.randn(3, 6, 8)
    q, k, v = model.w_q(x[:, -1:]), model.w_k(x[:, :-1]), model.w_v(x[:, :-1])
    out = torch.nn.functional.scaled_dot_product_attention(
        q, k, v, scale=None if scaled else 1.0)  # (3, 1, 8)
    assert torch.allclose(model(x), model.readout(out[:, 0]), atol=1e-6)


def test_train_lookup_is_reproducible_and_restores_threads():
    threads = torch.get_num_threads()
    first = scaling.train_lookup(8, scaled=True, steps=5, seed=1)
    assert torch.get_num_threads() == threads
    assert len(first) == 5
    assert first == scaling.train_lookup(8, scaled=True, steps=5, seed=1)
    assert first != scaling.train_lookup(8, scaled=False, steps=5, seed=1)


def test_loss_ratios_divide_unscaled_by_scaled_mean_loss():
    curves = {(4, 0, True): [2.0, 1.0], (4, 0, False): [3.0, 3.0],
              (4, 1, True): [1.0, 1.0], (4, 1, False): [1.0, 1.0]}
    assert scaling.loss_ratios(curves) == {4: [2.0, 1.0]}


# ------------------------------------------------------------------ widget
def test_scaling_state_toggle_rescales_the_same_scores():
    plain = widget.scaling_state(256, scaled=False)
    scaled = widget.scaling_state(256, scaled=True)
    assert torch.allclose(plain.scores / 16, scaled.scores)
    assert plain.variance == pytest.approx(256, rel=0.15)
    assert scaled.variance == pytest.approx(1, rel=0.15)
    assert plain.mean_max_weight > 0.85 > 0.4 > scaled.mean_max_weight
    assert scaled.row.sum().item() == pytest.approx(1.0)
    assert scaled.uniform_entropy == pytest.approx(math.log(widget.N_KEYS))
    assert "d_k = 256, scaled by 1/√d_k" in scaled.summary()


def test_scaling_state_rejects_bad_input():
    with pytest.raises(TypeError, match="scaled"):
        widget.scaling_state(64, scaled="yes")
    with pytest.raises(ValueError, match="d_k"):
        widget.scaling_state(0, scaled=True)


def test_widget_updates_when_the_controls_change():
    view = widget.ScalingWidget()
    assert (view.state.d_k, view.state.scaled) == (widget.DEFAULT_D_K, widget.DEFAULT_SCALED)
    assert view.summary.value == widget.scaling_state(64, False).summary()
    view.scale_toggle.value = True
    assert view.summary.value == widget.scaling_state(64, True).summary()
    assert view.scale_toggle.description.endswith("on")
    view.d_k_slider.value = 1024
    assert view.summary.value == widget.scaling_state(1024, True).summary()
    assert list(view.d_k_slider.options) == [2**p for p in range(11)]
    plt.close("all")


def test_widget_rejects_a_d_k_off_the_slider():
    with pytest.raises(ValueError, match="d_k should be one of"):
        widget.ScalingWidget(d_k=100)


def test_static_figure_shows_histogram_and_row():
    fig = widget.scaling_figure()
    hist, bars = fig.axes
    assert "variance" in hist.get_title()
    assert len(bars.patches) == widget.N_KEYS
    plt.close(fig)


# ------------------------------------------------------------------ figures
def test_lookup_model_starts_with_unit_variance_queries_and_keys():
    task = scaling.KeyValueLookupTask(seed=0)
    x, _ = task.batch(512)  # (512, n_pairs + 1, d_model)
    assert x.var().item() == pytest.approx(1.0, rel=0.15)
    torch.manual_seed(0)
    model = scaling.LookupModel(task.d_model, d_k=256, n_values=task.n_values, scaled=True)
    with torch.no_grad():
        assert model.w_q(x).var().item() == pytest.approx(1.0, rel=0.2)
        assert model.w_k(x).var().item() == pytest.approx(1.0, rel=0.2)


def test_figures_draw_one_line_per_rule_and_one_panel_per_d_k():
    fig = scaling.plot_variance(scaling.variance_table([1, 4], n_pairs=100))
    assert len(fig.axes) == 1 and fig.axes[0].get_xscale() == "log"
    table = scaling.saturation_table([1, 4, 16], n_rows=20)
    fig = scaling.plot_against_d_k(table, ["max_weight", "entropy"], ["none", "sqrt"],
                                   ["max weight", "entropy"], log_y=[False, True])
    assert [len(ax.lines) for ax in fig.axes] == [2, 2]
    assert fig.axes[1].get_yscale() == "log"
    curves = {(d_k, 0, scaled): [1.0] * 12 for d_k in (4, 8) for scaled in (True, False)}
    fig = scaling.plot_loss_curves(curves, [4, 8], window=5)
    assert [ax.get_title() for ax in fig.axes] == ["d_k = 4 (seed 0)", "d_k = 8 (seed 0)"]
    assert len(fig.axes[0].lines[0].get_xdata()) == 12 - 5 + 1
    plt.close("all")


# ------------------------------------------------------------------ the Chinese edition
CJK = re.compile(r"[\u4e00-\u9fff]")


def _figure_texts(fig) -> list[str]:
    """Every title, axis label and legend entry of ``fig``, the suptitle included."""
    texts = [fig._suptitle.get_text()] if fig._suptitle is not None else []
    for ax in fig.axes:
        texts += [ax.get_title(), ax.get_xlabel(), ax.get_ylabel()]
        legend = ax.get_legend()
        if legend is not None:
            texts += [entry.get_text() for entry in legend.get_texts()]
    return [text for text in texts if text]


@pytest.fixture
def chinese():
    set_language("zh-CN")
    yield
    set_language("en")


def test_the_figures_speak_chinese_in_the_chinese_edition(chinese):
    table = scaling.saturation_table([1, 4], n_rows=20)
    curves = {(d_k, 0, scaled): [1.0] * 12 for d_k in (4, 8) for scaled in (True, False)}
    figures = {
        "plot_variance": scaling.plot_variance(scaling.variance_table([1, 4], n_pairs=100)),
        "plot_against_d_k": scaling.plot_against_d_k(table, ["max_weight"], ["none", "sqrt"],
                                                     ["平均最大权重"]),
        "plot_loss_curves": scaling.plot_loss_curves(curves, [4, 8], window=5),
        "scaling_figure": widget.scaling_figure(),
    }
    for name, fig in figures.items():
        texts = _figure_texts(fig)
        assert any(CJK.search(text) for text in texts), f"{name}: no Chinese in {texts}"
    assert "variance of the scores" not in _figure_texts(figures["plot_variance"])
    assert "不缩放（× 1）" in _figure_texts(figures["plot_against_d_k"])
    loss_texts = _figure_texts(figures["plot_loss_curves"])
    assert "训练步数" in loss_texts and "损失（5 步滑动平均）" in loss_texts
    hist, bars = figures["scaling_figure"].axes
    assert "方差" in hist.get_title() and bars.get_xlabel() == "键"
    plt.close("all")


def test_the_widget_and_the_labels_speak_chinese_with_the_same_numbers(chinese):
    state = widget.scaling_state(64, scaled=True)
    summary = state.summary()
    assert CJK.search(summary) and "按 1/√d_k 缩放" in summary
    set_language("en")
    english = state.summary()
    set_language("zh-CN")
    number = re.compile(r"-?\d+(?:\.\d+)?")
    assert sorted(number.findall(summary)) == sorted(number.findall(english))
    assert scaling.SCALE_LABELS["none"] == "不缩放（× 1）"
    assert isinstance(scaling.SCALE_LABELS["sqrt"], str)
    view = widget.ScalingWidget()
    assert view.scale_toggle.description == "÷ √d_k：关"
    plt.close("all")


def test_the_labels_stay_english_by_default():
    assert dict(scaling.SCALE_LABELS) == {
        "none": "no scaling (× 1)", "sqrt": "× 1/√d_k", "linear": "× 1/d_k"}
    fig = scaling.plot_variance(scaling.variance_table([1, 4], n_pairs=100))
    assert fig.axes[0].get_ylabel() == "variance of the scores"
    plt.close(fig)


BAD_INPUTS = [
    *(pytest.param(function, (0,), {}, ValueError, ("d_k", "positive int", "got 0"),
                   id=f"{function.__name__}: d_k 0")
      for function in (scaling.dot_products, scaling.random_rows, scaling.raw_scores)),
    *(pytest.param(function, ([4, 0],), {}, ValueError, ("d_k", "positive int", "got 0"),
                   id=f"{function.__name__}: a d_k of 0")
      for function in (scaling.variance_table, scaling.saturation_table, scaling.gradient_table)),
    pytest.param(scaling.scale_factor, (4, "log"), {}, ValueError,
                 ("rule", "'sqrt'", "'log'"), id="scale_factor: unknown rule"),
    pytest.param(scaling.gradient_concentration, (4, "sqrt"), {"top": 1.5}, ValueError,
                 ("top", "between 0 and 1", "1.5"), id="gradient_concentration: top > 1"),
    pytest.param(scaling.gradient_norms, (4, "cube"), {}, ValueError, ("rule", "'cube'"),
                 id="gradient_norms: unknown rule"),
    pytest.param(scaling.max_weight, ([0.5, 0.5],), {}, TypeError,
                 ("weights", "torch.Tensor", "list"), id="max_weight: a list"),
    pytest.param(scaling.row_entropy, ("w",), {}, TypeError, ("weights", "torch.Tensor", "str"),
                 id="row_entropy: a str"),
    pytest.param(scaling.softmax_jacobian, (torch.tensor([1, 0]),), {}, TypeError,
                 ("p", "floating-point", "int64"), id="softmax_jacobian: int tensor"),
    pytest.param(scaling.KeyValueLookupTask, (), {"n_pairs": 0}, ValueError,
                 ("n_pairs", "positive int", "got 0"), id="KeyValueLookupTask: no pairs"),
    pytest.param(scaling.KeyValueLookupTask, (), {"n_pairs": 20}, ValueError,
                 ("n_pairs (20)", "n_keys (16)"), id="KeyValueLookupTask: more pairs than keys"),
    pytest.param(scaling.LookupModel, (8, 0, 4, True), {}, ValueError,
                 ("d_k", "positive int", "got 0"), id="LookupModel: d_k 0"),
    pytest.param(scaling.LookupModel, (8, 4, 4, 1), {}, TypeError,
                 ("scaled", "True or False", "int 1"), id="LookupModel: scaled an int"),
    pytest.param(scaling.train_lookup, (0, True), {}, ValueError,
                 ("d_k", "positive int", "got 0"), id="train_lookup: d_k 0"),
    pytest.param(scaling.training_comparison, ([0], [0]), {}, ValueError,
                 ("d_k", "positive int", "got 0"), id="training_comparison: d_k 0"),
    pytest.param(scaling.loss_ratios, ([1.0],), {}, TypeError,
                 ("curves", "training_comparison", "list"), id="loss_ratios: a list"),
    pytest.param(widget.scaling_state, (4, 1), {}, TypeError,
                 ("scaled", "True or False", "int 1"), id="scaling_state: scaled an int"),
    pytest.param(widget.scaling_figure, (0,), {}, ValueError,
                 ("d_k", "positive int", "got 0"), id="scaling_figure: d_k 0"),
    pytest.param(widget.draw_scaling_state, ({"d_k": 4},), {}, TypeError,
                 ("state", "ScalingState", "dict"), id="draw_scaling_state: a dict"),
    pytest.param(widget.ScalingWidget, (5,), {}, ValueError, ("d_k", "(1, 2, 4", "got 5"),
                 id="ScalingWidget: d_k not on the slider"),
    pytest.param(scaling.plot_variance, ({"d_k": 4},), {}, TypeError,
                 ("table", "variance_table", "dict"), id="plot_variance: a dict"),
    pytest.param(scaling.plot_against_d_k, (3, ["a"], ["sqrt"], ["y"]), {}, TypeError,
                 ("table", "list of rows", "int 3"), id="plot_against_d_k: an int"),
    pytest.param(scaling.plot_loss_curves, ([1.0], [4]), {}, TypeError,
                 ("curves", "training_comparison", "list"), id="plot_loss_curves: a list"),
]
