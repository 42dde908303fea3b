"""Lesson 19's recall experiment: the data, the model, a short training run."""

from __future__ import annotations

import pytest
import torch

from course_utils.experiments.l19_recall import (
    MODELS,
    Mixer,
    RecallModel,
    mqar_batch,
    recall_accuracy,
    train_recall,
)


def test_mqar_batch_asks_for_stored_values():
    key_ids, value_ids, targets = mqar_batch(8, 10, generator=torch.Generator().manual_seed(0))
    assert key_ids.shape == value_ids.shape == (8, 20) and targets.shape == (8, 10)
    for b in range(8):
        stored = dict(zip(key_ids[b, :10].tolist(), value_ids[b, :10].tolist(), strict=True))
        assert len(stored) == 10  # distinct keys
        assert (value_ids[b, 10:] == 64).all()
        assert [stored[key] for key in key_ids[b, 10:].tolist()] == targets[b].tolist()
        assert len(set(key_ids[b, 10:].tolist())) == 10  # each question asks another key


def test_every_model_runs_and_the_state_is_fixed():
    key_ids, value_ids, targets = mqar_batch(2, 6)
    for layers in MODELS.values():
        logits = RecallModel(layers)(key_ids, value_ids, targets.shape[1])
        assert logits.shape == (2, 6, 64)
    assert RecallModel(MODELS["delta rule"]).state_numbers() == 4 * 8 * 8
    assert RecallModel(MODELS["hybrid 3:1"]).state_numbers() == 3 * 8 * 8


def test_a_short_run_learns_softmax_recall():
    model = train_recall(MODELS["softmax"][:1], seed=0, pairs=(4,), steps=150)
    accuracy = recall_accuracy(model, pairs=(4,), generator=torch.Generator().manual_seed(1))
    assert accuracy.shape == (1,) and accuracy.item() > 0.5


BAD_INPUTS = [
    pytest.param(mqar_batch, (4, 65), {}, ValueError, ("num_pairs", "1..64", "65"),
                 id="mqar_batch: more pairs than keys"),
    pytest.param(mqar_batch, (0, 4), {}, ValueError, ("batch_size", "positive int", "0"),
                 id="mqar_batch: zero batch"),
    pytest.param(Mixer, ("mamba", 16, 1, 8), {}, ValueError, ("kind", "'softmax'", "'mamba'"),
                 id="Mixer: unknown kind"),
    pytest.param(RecallModel, (("linear", "rnn"),), {}, ValueError,
                 ("every entry of layers", "'delta'", "'rnn'"), id="RecallModel: unknown layer"),
    pytest.param(RecallModel, ("linear",), {}, TypeError, ("layers", "tuple", "str"),
                 id="RecallModel: a str"),
    pytest.param(train_recall, (MODELS["linear"], -1), {}, ValueError, ("seed", ">= 0", "-1"),
                 id="train_recall: negative seed"),
    pytest.param(train_recall, (MODELS["linear"], 0), {"pairs": ()}, ValueError,
                 ("pairs", "at least one", "empty"), id="train_recall: no pairs"),
    pytest.param(recall_accuracy, (torch.nn.Linear(2, 2),), {}, TypeError,
                 ("model", "RecallModel", "Linear"), id="recall_accuracy: not a RecallModel"),
]
