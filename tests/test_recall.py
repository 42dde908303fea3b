"""The flagged-token recall task, the three sequence readers and the training loop."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from course_utils.attention import scaled_dot_product_attention
from course_utils.recall import RecallTask, accuracy_by_distance, train
from course_utils.sequence_models import AttentionReader, RecurrentReader, count_parameters


def generator(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def test_batch_places_one_flag_at_the_asked_distance():
    task = RecallTask(num_symbols=5, max_len=30)
    tokens, targets, distances = task.batch(64, seq_len=20, distance=7, generator=generator())
    assert tokens.shape == (64, 20) and targets.shape == (64,) and distances.shape == (64,)
    assert (distances == 7).all()
    assert (tokens[:, -1] == task.query_token).all()
    flagged = (tokens >= task.num_symbols) & (tokens != task.query_token)  # (batch, seq_len)
    assert (flagged.sum(dim=1) == 1).all(), "exactly one flag per sequence"
    assert (flagged.float().argmax(dim=1) == 20 - 1 - 7).all()
    assert torch.equal(tokens[:, 20 - 1 - 7] - task.num_symbols, targets)


def test_batch_draws_every_distance_when_none_is_given():
    task = RecallTask(num_symbols=4, max_len=12)
    tokens, targets, distances = task.batch(2000, generator=generator())
    assert set(distances.tolist()) == set(range(1, 12))
    rows = torch.arange(2000)
    assert torch.equal(tokens[rows, 11 - distances] - task.num_symbols, targets)
    assert targets.unique().numel() == 4


def test_show_marks_flag_and_query():
    task = RecallTask(num_symbols=3, max_len=5)
    assert task.show(torch.tensor([0, 4, 2, 1, 6])) == "0 [1] 2 1 ?"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"seq_len": 1}, "seq_len should be an int in 2..10"),
        ({"seq_len": 11}, "seq_len should be an int in 2..10"),
        ({"distance": 0}, "distance should be None or an int in 1..9"),
        ({"seq_len": 5, "distance": 5}, "distance should be None or an int in 1..4"),
    ],
)
def test_batch_rejects_bad_lengths_and_distances(kwargs, message):
    with pytest.raises(ValueError, match=message):
        RecallTask(num_symbols=4, max_len=10).batch(2, **kwargs)


def test_task_rejects_bad_sizes():
    with pytest.raises(ValueError, match="num_symbols should be an int >= 2"):
        RecallTask(num_symbols=1)
    with pytest.raises(ValueError, match="max_len should be an int >= 2"):
        RecallTask(max_len=1)


@pytest.mark.parametrize("model_factory", [
    lambda: RecurrentReader("rnn", 9, 4, d_embed=5, d_hidden=7),
    lambda: RecurrentReader("lstm", 9, 4, d_embed=5, d_hidden=7),
    lambda: AttentionReader(9, 4, d_model=6),
])
def test_readers_map_tokens_to_logits_and_reject_bad_tokens(model_factory):
    model = model_factory()
    tokens = RecallTask(num_symbols=4, max_len=12).batch(3, generator=generator())[0]
    assert model(tokens).shape == (3, 4)
    with pytest.raises(TypeError, match="integer token ids"):
        model(tokens.float())
    with pytest.raises(ValueError, match=r"shape \(batch, seq_len\)"):
        model(tokens[0])
    with pytest.raises(ValueError, match="token ids should lie in 0..8"):
        model(tokens + 9)
    with pytest.raises(TypeError, match="torch.Tensor"):
        model(tokens.tolist())


def test_recurrent_reader_reads_the_last_hidden_state_of_torchs_rnn():
    torch.manual_seed(0)
    model = RecurrentReader("rnn", 9, 4, d_embed=5, d_hidden=7)
    tokens = torch.randint(0, 9, (2, 6))
    # An explicit tanh recurrence with the same weights, against torch's fused nn.RNN.
    rnn, x = model.recurrent, model.embed(tokens)  # (batch, seq_len, d_embed)
    h = torch.zeros(2, 7)
    for t in range(6):
        h = torch.tanh(x[:, t] @ rnn.weight_ih_l0.T + rnn.bias_ih_l0
                       + h @ rnn.weight_hh_l0.T + rnn.bias_hh_l0)
    torch.testing.assert_close(model(tokens), model.readout(h))


def test_recurrent_reader_rejects_unknown_cells():
    with pytest.raises(ValueError, match="cell should be 'rnn' or 'lstm'"):
        RecurrentReader("gru", 9, 4, d_embed=5, d_hidden=7)


def test_attention_reader_matches_torchs_attention_at_the_last_query():
    torch.manual_seed(0)
    model = AttentionReader(9, 4, d_model=6)
    tokens = torch.randint(0, 9, (3, 8))
    logits, weights = model(tokens, return_weights=True)
    attention, x = model.attention, model.embed(tokens)
    q, k, v = attention.w_q(x), attention.w_k(x), attention.w_v(x)
    expected = nn.functional.scaled_dot_product_attention(q, k, v)[:, -1]  # (batch, d_model)
    torch.testing.assert_close(logits, model.readout(expected))
    _, expected_weights = scaled_dot_product_attention(q, k, v)
    torch.testing.assert_close(weights, expected_weights[:, -1])
    torch.testing.assert_close(weights.sum(-1), torch.ones(3))


def test_count_parameters_counts_only_trainable_ones():
    model = nn.Linear(3, 2)
    assert count_parameters(model) == 8
    model.bias.requires_grad_(False)
    assert count_parameters(model) == 6


def test_training_teaches_attention_the_task_and_accuracy_sweeps_distances():
    torch.manual_seed(0)
    task = RecallTask(num_symbols=4, max_len=16)
    model = AttentionReader(task.vocab_size, task.num_symbols, d_model=16)
    before = accuracy_by_distance(model, task, [1, 15], samples=200, generator=generator(1))
    losses = train(model, task, steps=150, lr=1e-2, generator=generator())
    after = accuracy_by_distance(model, task, [1, 15], samples=200, generator=generator(1))
    assert len(losses) == 150 and sum(losses[-10:]) < sum(losses[:10])
    assert before.shape == after.shape == (2,)
    assert after.min() > 0.9 > before.max()


def test_train_rejects_a_bad_step_count():
    task = RecallTask(num_symbols=4, max_len=8)
    with pytest.raises(ValueError, match="steps should be a positive int, got 0"):
        train(AttentionReader(task.vocab_size, 4, d_model=4), task, steps=0)
