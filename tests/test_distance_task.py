"""Lesson 01's experiment: the flagged-token task, its training and its learning curves."""

from __future__ import annotations

import pytest
import torch

from course_utils.experiments import l01_distance as distance_module
from course_utils.experiments.l01_distance import (
    DistanceTask,
    accuracy_by_distance,
    learning_curve,
    train_reader,
)
from course_utils.models.sequence_models import AttentionReader


def generator(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def test_batch_places_one_flag_at_the_asked_distance():
    task = DistanceTask(num_symbols=5, max_len=30)
    tokens, targets, distances = task.batch(64, seq_len=20, distance=7, generator=generator())
    assert tokens.shape == (64, 20) and targets.shape == (64,) and distances.shape == (64,)
    assert (distances == 7).all()
    assert (tokens[:, -1] == task.query_token).all()
    flagged = (tokens >= task.num_symbols) & (tokens != task.query_token)  # (batch, seq_len)
    assert (flagged.sum(dim=1) == 1).all(), "exactly one flag per sequence"
    assert (flagged.float().argmax(dim=1) == 20 - 1 - 7).all()
    assert torch.equal(tokens[:, 20 - 1 - 7] - task.num_symbols, targets)


def test_batch_draws_every_distance_when_none_is_given():
    task = DistanceTask(num_symbols=4, max_len=12)
    tokens, targets, distances = task.batch(2000, generator=generator())
    assert set(distances.tolist()) == set(range(1, 12))
    rows = torch.arange(2000)
    assert torch.equal(tokens[rows, 11 - distances] - task.num_symbols, targets)
    assert targets.unique().numel() == 4


def test_min_distance_draws_only_long_distances():
    task = DistanceTask(num_symbols=4, max_len=12)
    tokens, targets, distances = task.batch(2000, min_distance=8, generator=generator())
    assert set(distances.tolist()) == set(range(8, 12))
    assert torch.equal(tokens[torch.arange(2000), 11 - distances] - task.num_symbols, targets)



def test_unflagged_answers_are_the_symbol_exactly_distance_back():
    task = DistanceTask(num_symbols=4, max_len=12, flagged=False)
    tokens, targets, distances = task.batch(500, distance=3, generator=generator())
    context = tokens[:, :-1]
    assert (context < task.num_symbols).all()  # no flagged twin anywhere
    assert torch.equal(tokens[:, -1 - 3], targets)
    assert (tokens[:, -1] == task.query_token).all() and (distances == 3).all()

def test_show_marks_flag_and_query():
    task = DistanceTask(num_symbols=3, max_len=5)
    assert task.show(torch.tensor([0, 4, 2, 1, 6])) == "0 [1] 2 1 ?"


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"seq_len": 1}, ValueError, "seq_len should be an int in 2..10"),
        ({"seq_len": 11}, ValueError, "seq_len should be an int in 2..10"),
        ({"distance": 0}, ValueError, "distance should be None or an int in 1..9"),
        ({"seq_len": 5, "distance": 5}, ValueError, "distance should be None or an int in 1..4"),
        ({"seq_len": 5, "min_distance": 5}, ValueError, "min_distance should be below seq_len=5"),
        ({"min_distance": 0}, ValueError, "min_distance should be a positive int"),
        ({"min_distance": 2.0}, TypeError, "min_distance should be a positive int"),
    ],
)
def test_batch_rejects_bad_lengths_and_distances(kwargs, error, message):
    with pytest.raises(error, match=message):
        DistanceTask(num_symbols=4, max_len=10).batch(2, **kwargs)


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"num_symbols": 1}, ValueError, "num_symbols should be an int >= 2"),
        ({"max_len": 1}, ValueError, "max_len should be an int >= 2"),
        ({"max_len": 3.5}, TypeError, "max_len should be an int >= 2, got float 3.5"),
    ],
)
def test_task_rejects_bad_sizes(kwargs, error, message):
    with pytest.raises(error, match=message):
        DistanceTask(**kwargs)


def test_training_teaches_attention_the_task_and_accuracy_sweeps_distances():
    task = DistanceTask(num_symbols=4, max_len=16)
    with torch.random.fork_rng():
        torch.manual_seed(0)
        model = AttentionReader(task.vocab_size, task.num_symbols, d_model=16)
    before = accuracy_by_distance(model, task, [1, 15], samples=200, generator=generator(1))
    losses = train_reader(model, task, steps=150, lr=1e-2, generator=generator())
    after = accuracy_by_distance(model, task, [1, 15], samples=200, generator=generator(1))
    assert len(losses) == 150 and sum(losses[-10:]) < sum(losses[:10])
    assert before.shape == after.shape == (2,)
    assert after.min() > 0.9 > before.max()


def test_train_reader_calls_after_steps_once_the_updates_are_done():
    task = DistanceTask(num_symbols=4, max_len=8)
    model = AttentionReader(task.vocab_size, 4, d_model=4)
    seen = []
    snapshot = {}

    def record(step):
        return lambda: (seen.append(step),
                        snapshot.__setitem__(step, model.readout.weight.detach().clone()))

    train_reader(model, task, steps=3, generator=generator(),
                 after_steps={0: record(0), 2: record(2), 3: record(3)})
    assert seen == [0, 2, 3]
    assert not torch.equal(snapshot[0], snapshot[2]) and not torch.equal(snapshot[2], snapshot[3])
    assert torch.equal(snapshot[3], model.readout.weight)


def test_train_reader_with_min_distance_only_sees_long_sequences(monkeypatch):
    task = DistanceTask(num_symbols=4, max_len=12)
    lengths, distances = [], []
    batch = task.batch

    def spy(*args, **kwargs):
        tokens, targets, drawn = batch(*args, **kwargs)
        lengths.append(tokens.shape[1])
        distances.extend(drawn.tolist())
        return tokens, targets, drawn

    monkeypatch.setattr(DistanceTask, "batch", lambda self, *a, **k: spy(*a, **k))
    train_reader(AttentionReader(task.vocab_size, 4, d_model=4), task, steps=20,
                 min_distance=8, generator=generator())
    assert min(lengths) >= 9 and min(distances) >= 8
    lengths.clear(), distances.clear()
    train_reader(AttentionReader(task.vocab_size, 4, d_model=4), task, steps=20,
                 distance=3, generator=generator())
    assert min(lengths) >= 4 and set(distances) == {3}


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"steps": 0}, ValueError, "steps should be a positive int, got 0"),
        ({"steps": 2, "min_distance": 8}, ValueError, "min_distance should be below max_len=8"),
        ({"steps": 2, "distance": 8}, ValueError, "distance should be an int in 1..7"),
    ],
)
def test_train_reader_rejects_bad_arguments(kwargs, error, message):
    task = DistanceTask(num_symbols=4, max_len=8)
    with pytest.raises(error, match=message):
        train_reader(AttentionReader(task.vocab_size, 4, d_model=4), task, **kwargs)


def test_learning_curve_is_reproducible_measures_every_budget_and_keeps_the_global_rng():
    task = DistanceTask(num_symbols=4, max_len=10)

    def build():
        return AttentionReader(task.vocab_size, 4, d_model=8)

    torch.manual_seed(123)
    expected_draw = torch.rand(())
    torch.manual_seed(123)
    curve, model = learning_curve(build, task, [5, 1, 10], [1, 9], seed=3, samples=50)
    assert torch.rand(()) == expected_draw, "the global random state must not move"
    again, _ = learning_curve(build, task, [1, 5, 10], [1, 9], seed=3, samples=50)
    assert curve.shape == (3, 2) and torch.equal(curve, again)
    assert torch.equal(curve[-1], accuracy_by_distance(model, task, [1, 9], samples=50,
                                                       generator=generator(10_003)))
    other, _ = learning_curve(build, task, [1, 5, 10], [1, 9], seed=4, samples=50)
    assert not torch.equal(curve, other)


_TASK = distance_module.DistanceTask(num_symbols=4, max_len=8)

BAD_INPUTS = [
    pytest.param(distance_module.DistanceTask, (), {"num_symbols": 1}, ValueError,
                 ("num_symbols", "int >= 2", "got 1"), id="DistanceTask: one symbol"),
    pytest.param(distance_module.DistanceTask, (), {"flagged": 1}, TypeError,
                 ("flagged", "True or False", "int"), id="DistanceTask: flagged an int"),
    pytest.param(_TASK.batch, (2,), {"seq_len": 9}, ValueError,
                 ("seq_len", "2..8", "got 9"), id="batch: too long"),
    pytest.param(distance_module.train_reader, (torch.nn.Linear(1, 1), "task", 1), {}, TypeError,
                 ("task", "DistanceTask", "str"), id="train_reader: task a str"),
    pytest.param(distance_module.accuracy_by_distance, ("model", _TASK, [1]), {}, TypeError,
                 ("model", "torch.nn.Module", "str"), id="accuracy_by_distance: model a str"),
    pytest.param(distance_module.learning_curve, (3, _TASK, [1], [1], 0), {}, TypeError,
                 ("build", "function", "int 3"), id="learning_curve: build not callable"),
]
