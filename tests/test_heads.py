"""The two-relation task, its model, and the heads sweep of lesson 04."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from course_utils.experiments import l04_heads as heads_module
from course_utils.experiments.l04_heads import (
    NO_TARGET,
    TwoRelationModel,
    head_roles,
    head_specialisation,
    heads_sweep,
    make_two_relation_batch,
    previous_accuracy_by_position,
    train_two_relation_model,
    two_relation_accuracy,
    two_relation_test_set,
)


def batch_of(size=64, seq_len=8, seed=0):
    return make_two_relation_batch(size, seq_len, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("seq_len", [4, 8, 12])
def test_every_letter_appears_exactly_twice(seq_len):
    batch = batch_of(seq_len=seq_len)
    counts = torch.stack([(batch.letters == letter).sum(dim=1) for letter in range(seq_len // 2)])
    assert (counts == 2).all()


def test_targets_are_the_previous_and_the_partner_digit():
    batch = batch_of()
    for row in range(len(batch.letters)):
        letters, digits = batch.letters[row].tolist(), batch.digits[row].tolist()
        assert batch.previous_digit[row, 0] == NO_TARGET
        for i in range(1, len(letters)):
            assert batch.previous_digit[row, i] == digits[i - 1]
        for i, letter in enumerate(letters):
            (j,) = [j for j, other in enumerate(letters) if other == letter and j != i]
            assert batch.partner_digit[row, i] == digits[j]


def test_same_generator_seed_gives_the_same_batch():
    first, second = batch_of(seed=3), batch_of(seed=3)
    assert torch.equal(first.letters, second.letters) and torch.equal(first.digits, second.digits)


def test_labels_are_letter_then_digit():
    batch = batch_of()
    labels = batch.labels(1)
    assert len(labels) == 8
    assert labels[2] == "ABCD"[batch.letters[1, 2]] + str(int(batch.digits[1, 2]))


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"batch_size": 4, "seq_len": 7}, ["seq_len", "even", "7"]),
        ({"batch_size": 4, "seq_len": 2}, ["seq_len", "2"]),
        ({"batch_size": 0}, ["batch_size", "0"]),
        ({"batch_size": 4, "num_digits": 1}, ["num_digits", "1"]),
    ],
)
def test_bad_task_arguments_are_named(kwargs, words):
    with pytest.raises(ValueError) as info:
        make_two_relation_batch(**kwargs)
    for word in words:
        assert word in str(info.value)


def test_model_shapes_and_no_token_attends_to_itself():
    torch.manual_seed(0)
    model = TwoRelationModel(d_model=16, num_heads=4)
    batch = batch_of(size=5)
    previous, partner, weights = model(batch.letters, batch.digits)
    assert previous.shape == partner.shape == (5, 8, 10)
    assert weights.shape == (5, 4, 8, 8)
    assert (weights.diagonal(dim1=-2, dim2=-1) == 0).all()
    torch.testing.assert_close(weights.sum(-1), torch.ones(5, 4, 8))


def test_model_rejects_the_wrong_sequence_length():
    model = TwoRelationModel(d_model=8, num_heads=2)
    batch = batch_of(seq_len=6)
    with pytest.raises(ValueError, match="seq_len=8"):
        model(batch.letters, batch.digits)


class _Oracle(nn.Module):
    """Answers from the targets: right on the partner, right on the previous digit if asked."""

    def __init__(self, batch, previous_right: bool, weights=None):
        super().__init__()
        self.batch, self.previous_right, self.weights = batch, previous_right, weights

    def forward(self, letters, digits):
        previous = self.batch.previous_digit.clamp(min=0)
        if not self.previous_right:
            previous = (previous + 1) % 10
        one_hot = nn.functional.one_hot
        return one_hot(previous, 10).float(), one_hot(self.batch.partner_digit, 10).float(), \
            self.weights


def test_accuracy_counts_each_relation_and_both():
    batch = batch_of()
    assert two_relation_accuracy(_Oracle(batch, True), batch) == {
        "previous": 1.0, "partner": 1.0, "both": 1.0,
    }
    assert two_relation_accuracy(_Oracle(batch, False), batch) == {
        "previous": 0.0, "partner": 1.0, "both": 0.0,
    }


def test_head_roles_recognise_a_previous_head_a_partner_head_and_a_uniform_head():
    batch = batch_of()
    n = 8
    previous_head = torch.eye(n).roll(-1, dims=1).expand(len(batch.letters), n, n)
    same_letter = batch.letters[:, :, None] == batch.letters[:, None, :]
    partner_head = (same_letter & ~torch.eye(n, dtype=torch.bool)).float()
    uniform_head = (1 - torch.eye(n)).expand(len(batch.letters), n, n) / (n - 1)
    weights = torch.stack([previous_head, partner_head, uniform_head], dim=1)
    roles = head_roles(_Oracle(batch, True, weights), batch)
    assert roles.shape == (3, 2)
    assert roles[0, 0] == 1.0 and roles[1, 1] == 1.0
    torch.testing.assert_close(roles[2], torch.full((2,), 1 / (n - 1)))
    assert roles[0, 1] < 0.5 and roles[1, 0] < 0.5


def test_specialisation_splits_the_roles_by_letter_and_by_position():
    batch = batch_of()
    n = 8
    previous_head = torch.eye(n).roll(-1, dims=1).expand(len(batch.letters), n, n)
    same_letter = batch.letters[:, :, None] == batch.letters[:, None, :]
    partner_of_a = (same_letter & ~torch.eye(n, dtype=torch.bool)).float()
    partner_of_a = torch.where((batch.letters == 0)[:, :, None], partner_of_a,
                               previous_head)  # a head that fetches the partner of A only
    weights = torch.stack([previous_head, partner_of_a], dim=1)
    by_letter, by_position = head_specialisation(_Oracle(batch, True, weights), batch)
    assert by_letter.shape == (2, 4) and by_position.shape == (2, n)
    torch.testing.assert_close(by_letter[1, 0], torch.tensor(1.0))
    assert (by_letter[1, 1:] < 0.5).all()
    torch.testing.assert_close(by_position[0, 1:], torch.ones(n - 1))
    assert by_position[0, 0] == 0


def test_previous_accuracy_by_position():
    batch = batch_of()
    right = previous_accuracy_by_position(_Oracle(batch, True), batch)
    assert right.shape == (8,) and right[0].isnan() and (right[1:] == 1).all()


def test_two_heads_learn_both_relations_and_one_head_does_not():
    # The lesson's claim, at a short budget so that the test stays quick.
    _, one = train_two_relation_model(num_heads=1, steps=150, seed=1)
    _, two = train_two_relation_model(num_heads=2, steps=150, seed=1)
    assert two["both"] > 0.9 > 0.5 > one["both"]


def test_sweep_trains_one_model_per_head_count_and_seed_at_fixed_width():
    sweep = heads_sweep([1, 4], seeds=(0, 5), d_model=8, steps=2)
    assert list(sweep) == [(1, 0), (4, 0), (1, 5), (4, 5)]
    for (num_heads, _), (model, accuracy) in sweep.items():
        assert model.attention.num_heads == num_heads
        assert model.attention.d_k == 8 // num_heads
        assert set(accuracy) == {"previous", "partner", "both"}
    with pytest.raises(ValueError, match="num_heads=3"):
        heads_sweep([3], d_model=8, steps=1)


def test_test_set_depends_only_on_the_seed_and_holds_1000_sequences():
    first, again, other = (two_relation_test_set(8, seed) for seed in (3, 3, 4))
    assert first.letters.shape == (1000, 8)
    assert torch.equal(first.digits, again.digits) and not torch.equal(first.digits, other.digits)


_BATCH = heads_module.make_two_relation_batch(2)

BAD_INPUTS = [
    pytest.param(heads_module.make_two_relation_batch, (0,), {}, ValueError,
                 ("batch_size", "positive int", "got 0"), id="make_two_relation_batch: zero"),
    pytest.param(heads_module.make_two_relation_batch, (2,), {"num_digits": 1}, ValueError,
                 ("num_digits", "int >= 2", "got 1"), id="make_two_relation_batch: 1 digit"),
    pytest.param(heads_module.two_relation_test_set, (), {"seq_len": 3}, ValueError,
                 ("seq_len", "even int", "got 3"), id="two_relation_test_set: odd"),
    pytest.param(heads_module.TwoRelationModel, (16, 3), {}, ValueError,
                 ("d_model=16", "num_heads=3", "divisible"), id="TwoRelationModel: 16 by 3"),
    pytest.param(heads_module.two_relation_accuracy, ("model", _BATCH), {}, TypeError,
                 ("model", "TwoRelationModel", "str"), id="two_relation_accuracy: model a str"),
    pytest.param(heads_module.head_roles, (heads_module.TwoRelationModel(16, 2), "batch"), {},
                 TypeError, ("batch", "TwoRelationBatch", "str"), id="head_roles: batch a str"),
    pytest.param(heads_module.head_specialisation, (None, _BATCH), {}, TypeError,
                 ("model", "TwoRelationModel", "NoneType"), id="head_specialisation: None"),
    pytest.param(heads_module.previous_accuracy_by_position, ([nn.Linear(1, 1)], _BATCH), {},
                 TypeError, ("model", "TwoRelationModel", "list"),
                 id="previous_accuracy_by_position: a list"),
    pytest.param(heads_module.train_two_relation_model, (0,), {}, ValueError,
                 ("num_heads", "positive int", "got 0"), id="train_two_relation_model: zero"),
    pytest.param(heads_module.heads_sweep, ([0],), {}, ValueError,
                 ("num_heads", "positive int", "got 0"), id="heads_sweep: zero heads"),
]
