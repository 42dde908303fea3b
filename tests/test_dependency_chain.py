"""longest_chain reads the longest path of autograd's record: checked on graphs of known depth
and on torch's own RNN, whose chain grows with the sequence."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from course_utils.nn.attention import SelfAttention
from course_utils.nn.dependency_chain import longest_chain

pytestmark = pytest.mark.unit


def test_a_chain_of_k_operations_is_k_long_plus_the_leaf():
    x = torch.randn(3, requires_grad=True)
    y = x
    for _ in range(5):
        y = y.tanh()
    assert longest_chain(y) == 5 + 1  # five TanhBackward, then the leaf's AccumulateGrad


def test_operations_side_by_side_do_not_add_up():
    x = torch.randn(3, requires_grad=True)
    side_by_side = torch.stack([x * 2, x.exp(), x.sin()])
    assert longest_chain(side_by_side) == longest_chain(torch.stack([x * 2])) == 3


def test_torchs_rnn_adds_the_same_steps_per_token_and_attention_none():
    torch.manual_seed(0)
    rnn, attention = nn.RNN(4, 4, batch_first=True), SelfAttention(4, 4, 4)
    chains = {}
    for n in (8, 16, 32):
        x = torch.randn(1, n, 4, requires_grad=True)
        chains[n] = longest_chain(rnn(x)[0]), longest_chain(attention(x)[0])
    assert chains[32][0] - chains[16][0] == 2 * (chains[16][0] - chains[8][0]) > 0
    assert chains[8][1] == chains[16][1] == chains[32][1]


def test_a_deep_graph_does_not_hit_the_recursion_limit():
    x = torch.randn(1, requires_grad=True)
    y = x
    for _ in range(5000):
        y = y + 1
    assert longest_chain(y) == 5001


BAD_INPUTS = [
    pytest.param(longest_chain, ([1.0],), {}, TypeError, ("output", "tensor", "list"),
                 id="longest_chain: a list"),
    pytest.param(longest_chain, (torch.ones(2),), {}, ValueError,
                 ("output", "autograd", "requires_grad=True"),
                 id="longest_chain: no history"),
]
