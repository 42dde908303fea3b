"""Cutting attention edges (``course_utils.nn.ablation.cut_edges``): the cut edge gets weight 0,
its row is the rest of the intact row renormalised (a softmax without that score), and every
other head, row and layer is untouched; leaving the block restores the model."""

import pytest
import torch

from course_utils.models.gpt import GPT
from course_utils.nn.ablation import cut_edges


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return GPT(vocab_size=11, max_len=8, d_model=16, num_heads=4, num_layers=2).eval()


@pytest.fixture(scope="module")
def tokens():
    return torch.randint(11, (2, 6), generator=torch.Generator().manual_seed(1))


def test_the_cut_edge_gets_nothing_and_its_row_is_renormalised(model, tokens):
    with torch.no_grad():
        _, intact = model(tokens, return_weights=True)  # (batch, layers, heads, n, n)
        with cut_edges(model, [(0, 2, 5, 1)]):
            _, cut = model(tokens, return_weights=True)
    assert torch.all(cut[:, 0, 2, 5, 1] == 0)
    kept = intact[:, 0, 2, 5].clone()
    kept[:, 1] = 0
    torch.testing.assert_close(cut[:, 0, 2, 5], kept / kept.sum(-1, keepdim=True))
    # the same layer's other heads and rows are untouched; later layers may change (their input did)
    others = torch.ones(4, 6, dtype=torch.bool)
    others[2, 5] = False
    torch.testing.assert_close(cut[:, 0][:, others], intact[:, 0][:, others])


def test_leaving_the_block_restores_the_model(model, tokens):
    with torch.no_grad():
        before = model(tokens)
        with cut_edges(model, [(1, 0, 3, 0), (1, 3, 4, 2)]):
            during = model(tokens)
        after = model(tokens)
    assert not torch.allclose(before, during)
    assert torch.equal(before, after)


def test_a_position_beyond_the_input_is_refused_at_the_call(model, tokens):
    with cut_edges(model, [(0, 0, 9, 0)]), pytest.raises(ValueError, match="seq_len=6"):
        model(tokens)


BAD_INPUTS = [
    pytest.param(cut_edges, (GPT(11, 8, 16, 4, 2), [(0, 4, 1, 0)]), {}, ValueError,
                 ("head (of an edge)", "0..3", "4"), id="cut_edges: head out of range"),
    pytest.param(cut_edges, (GPT(11, 8, 16, 4, 2), [(0, 1, 1)]), {}, TypeError,
                 ("edges", "(layer, head, query, key)", "(0, 1, 1)"), id="cut_edges: a triple"),
    pytest.param(cut_edges, (GPT(11, 8, 16, 4, 2), "0,1,1,0"), {}, TypeError,
                 ("edges", "iterable", "str"), id="cut_edges: a str"),
]
