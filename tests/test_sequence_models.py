"""The three sequence readers of lesson 01 against torch's own layers, and parameter counting."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from course_utils.experiments.l01_distance import DistanceTask
from course_utils.models.sequence_models import AttentionReader, RecurrentReader, count_parameters
from course_utils.nn.attention import scaled_dot_product_attention


@pytest.mark.parametrize("model_factory", [
    lambda: RecurrentReader("rnn", 9, 4, d_embed=5, d_hidden=7),
    lambda: RecurrentReader("lstm", 9, 4, d_embed=5, d_hidden=7),
    lambda: AttentionReader(9, 4, d_model=6),
])
def test_readers_map_tokens_to_logits_and_reject_bad_tokens(model_factory):
    model = model_factory()
    tokens = DistanceTask(num_symbols=4, max_len=12).batch(
        3, generator=torch.Generator().manual_seed(0))[0]
    assert model(tokens).shape == (3, 4)
    with pytest.raises(TypeError, match="integer token ids"):
        model(tokens.float())
    with pytest.raises(ValueError, match=r"shape \(batch, seq_len\)"):
        model(tokens[0])
    with pytest.raises(ValueError, match=r"tokens should be token ids in 0\.\.8 \(vocab_size=9\)"):
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


def test_lstm_reader_reads_the_last_hidden_state_of_torchs_lstm_cell():
    torch.manual_seed(0)
    model = RecurrentReader("lstm", 9, 4, d_embed=5, d_hidden=7)
    tokens = torch.randint(0, 9, (2, 6))
    lstm, x = model.recurrent, model.embed(tokens)
    cell = nn.LSTMCell(5, 7)
    cell.load_state_dict({name.removesuffix("_l0"): value
                          for name, value in lstm.state_dict().items()})
    h = c = torch.zeros(2, 7)
    for t in range(6):
        h, c = cell(x[:, t], (h, c))
    torch.testing.assert_close(model(tokens), model.readout(h))


def test_recurrent_reader_rejects_unknown_cells():
    with pytest.raises(ValueError, match=r"cell should be one of \('rnn', 'lstm'\), got 'gru'"):
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


def test_count_parameters_agrees_with_torchs_own_lstm_formula():
    # nn.LSTM(d_in, d_hidden) holds 4 gates: 4 * (d_hidden * (d_in + d_hidden) + 2 * d_hidden).
    assert count_parameters(nn.LSTM(16, 32)) == 4 * (32 * (16 + 32) + 2 * 32)


BAD_INPUTS = [
    pytest.param(RecurrentReader, ("gru", 4, 2, 3, 3), {}, ValueError,
                 ("cell", "'rnn', 'lstm'", "'gru'"), id="RecurrentReader: gru"),
    pytest.param(AttentionReader, (0, 2, 4), {}, ValueError,
                 ("vocab_size", "positive int", "got 0"), id="AttentionReader: no vocabulary"),
    pytest.param(AttentionReader, (4, 2, 4.0), {}, TypeError,
                 ("d_model", "positive int", "float"), id="AttentionReader: float d_model"),
    pytest.param(count_parameters, ([nn.Linear(1, 1)],), {}, TypeError,
                 ("model", "torch.nn.Module", "list"), id="count_parameters: a list"),
]
