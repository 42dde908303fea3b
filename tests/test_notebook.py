"""setup() and claim(), the two calls every lesson makes."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from course_utils.notebook import claim, setup


def test_claim_prints_a_check_mark_line_when_it_holds(capsys):
    claim(True, "rows sum to 1")
    claim(torch.tensor(True), "a tensor truth value works too")
    claim(np.bool_(True), "and a numpy one")
    assert capsys.readouterr().out.splitlines() == [
        "✓ rows sum to 1", "✓ a tensor truth value works too", "✓ and a numpy one"]


def test_claim_stops_the_lesson_naming_the_claim_when_it_does_not_hold(capsys):
    with pytest.raises(AssertionError, match="the lesson claims: rows sum to 1"):
        claim(torch.tensor(False), "rows sum to 1")
    assert capsys.readouterr().out == ""


@pytest.mark.parametrize(("holds", "error"), [(torch.ones(2, dtype=torch.bool), ValueError),
                                              (1, TypeError), ("yes", TypeError)])
def test_claim_refuses_what_is_not_one_truth_value(holds, error):
    with pytest.raises(error):
        claim(holds, "x")


def test_setup_seeds_everything_and_uses_one_thread(capsys):
    threads = torch.get_num_threads()
    try:
        setup(seed=3)
        first = torch.rand(()).item()
        setup(seed=3)
        assert torch.rand(()).item() == first
        assert torch.get_num_threads() == 1
        assert "seed 3" in capsys.readouterr().out
    finally:
        torch.set_num_threads(threads)
