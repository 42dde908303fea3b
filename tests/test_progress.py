"""course_utils.progress outside a kernel: bars count, nest and validate; what they show."""

from __future__ import annotations

import pytest

from course_utils.language import N_, current_language, set_language, translate
from course_utils.progress import BAR_WIDTH, Progress, counted


def test_a_bar_counts_without_a_kernel_and_never_past_its_total():
    with Progress(3, "steps") as bar:
        for _ in range(5):
            bar.advance()
        assert bar.done == 3
    assert bar.line() == f"steps ▕{'█' * BAR_WIDTH}▏ 3/3"


@pytest.mark.parametrize("language", ["en", "zh-CN"])
def test_a_line_shows_the_share_done_and_the_label_in_the_learners_language(language):
    bar = Progress(4, N_("training steps"))
    bar.advance()
    filled = BAR_WIDTH // 4
    before = current_language()
    set_language(language)
    try:
        line = bar.line()
    finally:
        set_language(before)
    drawn = "█" * filled + "░" * (BAR_WIDTH - filled)
    assert line == f"{translate('training steps', language)} ▕{drawn}▏ 1/4"
    assert language == "en" or not line.startswith("training steps")


def test_counted_yields_every_item_in_order_and_nothing_for_nothing():
    assert list(counted(["a", "b", "c"], "models")) == ["a", "b", "c"]
    assert list(counted((), "models")) == []


BAD_INPUTS = [
    pytest.param(Progress, (0, "steps"), {}, ValueError, ("total", "positive int", "got 0"),
                 id="Progress: total 0"),
    pytest.param(Progress, (2.5, "steps"), {}, TypeError, ("total", "positive int", "float"),
                 id="Progress: a float total"),
    pytest.param(Progress, (3, 7), {}, TypeError, ("label", "str", "int"),
                 id="Progress: a number as label"),
    pytest.param(lambda: Progress(3, "steps").advance(0), (), {}, ValueError,
                 ("n", "positive int", "got 0"), id="Progress.advance: 0 units"),
    pytest.param(counted, ({1, 2}, "models"), {}, TypeError, ("items", "sequence", "set"),
                 id="counted: a set"),
    pytest.param(counted, ([], 3), {}, TypeError, ("label", "str", "int"),
                 id="counted: a number as label"),
]
