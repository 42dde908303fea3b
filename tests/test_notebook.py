"""setup() and claim(), the two calls every lesson makes."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from course_utils.notebook import CLAIMS_LOG, claim, lesson_generator, seeds, setup


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


def test_the_lessons_seeds_derive_from_the_setup_seed(capsys):
    setup(seed=0)
    stored = seeds(3), lesson_generator(2).initial_seed()
    assert stored == ((0, 1, 2), 2)  # the stored run keeps the seeds it always had
    setup(seed=7)
    other = seeds(3), lesson_generator(2).initial_seed()
    assert other == ((7000, 7001, 7002), 7002)
    setup(seed=8)
    assert not set(seeds(1000)) & set(range(7000, 8000))  # runs never share a seed
    draw = torch.rand(3, generator=lesson_generator(1))
    assert torch.equal(draw, torch.rand(3, generator=lesson_generator(1)))  # re-run: same
    setup(seed=0)
    capsys.readouterr()


def test_under_the_audit_claims_are_recorded_and_a_failing_one_does_not_stop(
        tmp_path, monkeypatch, capsys):
    log = tmp_path / "claims.jsonl"
    monkeypatch.setenv(CLAIMS_LOG, str(log))
    claim(True, "rows sum to 1")
    claim(False, "every row is one-hot")
    assert capsys.readouterr().out.splitlines() == ["✓ rows sum to 1", "✗ every row is one-hot"]
    assert [json.loads(line) for line in log.read_text().splitlines()] == [
        {"statement": "rows sum to 1", "holds": True},
        {"statement": "every row is one-hot", "holds": False}]
