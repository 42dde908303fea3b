"""The course's three tokenizers follow one protocol (course_utils.data.tokenizer_protocol),
and decode what they encode."""

from __future__ import annotations

import pytest
import torch

from course_utils.checks import require_token_id_list
from course_utils.data.corpus import CharTokenizer, load_text
from course_utils.data.tokenizer_protocol import TextTokenizer
from course_utils.models.minilm import load_minilm
from course_utils.models.smollm2.tokenizer import SmolLM2Tokenizer

TEXT = "the cat sat"


@pytest.fixture(scope="module")
def tokenizers() -> dict:
    return {"characters": CharTokenizer.from_text(load_text("shakespeare")),
            "WordPiece": load_minilm()[1], "byte-level BPE": SmolLM2Tokenizer()}


def test_every_tokenizer_follows_the_protocol(tokenizers):
    for name, tokenizer in tokenizers.items():
        assert isinstance(tokenizer, TextTokenizer), name
        ids = tokenizer.encode(TEXT)
        assert len(tokenizer.tokens(TEXT)) == len(ids), name
        assert all(0 <= i < tokenizer.vocab_size for i in ids), name
        assert TEXT in tokenizer.decode(ids) and tokenizer.decode(torch.tensor(ids)) == \
            tokenizer.decode(ids), name


def test_a_token_id_list_is_checked_once_for_every_tokenizer():
    assert require_token_id_list("ids", torch.tensor([0, 3]), 4) == [0, 3]
    assert require_token_id_list("ids", (1, 2), 4) == [1, 2]


BAD_INPUTS = [
    pytest.param(require_token_id_list, ("ids", [0, 4], 4), {}, ValueError,
                 ("ids", "0..3", "4"), id="require_token_id_list: id too large"),
    pytest.param(require_token_id_list, ("ids", [0, True], 4), {}, TypeError,
                 ("ids", "list of int token ids", "list"), id="require_token_id_list: a bool"),
    pytest.param(require_token_id_list, ("ids", torch.zeros(2, 2, dtype=torch.long), 4), {},
                 ValueError, ("ids", "(seq_len,)", "(2, 2)"),
                 id="require_token_id_list: a 2-D tensor"),
    pytest.param(CharTokenizer("ab").tokens, ("abc",), {}, ValueError,
                 ("text", "does not know", "c"), id="CharTokenizer.tokens: unknown character"),
]
