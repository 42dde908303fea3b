"""The committed training texts, the character tokenizer, the split, the batch sampler, and
the baselines (unigram, bigram, verse-line share)."""

from __future__ import annotations

import re
from collections import Counter

import pytest
import torch
import torch.nn.functional as F

from course_utils.data.corpus import (
    BIGRAM_WEIGHTS,
    TEXTS,
    CharTokenizer,
    bigram_loss,
    load_text,
    sample_windows,
    train_validation_split,
    unigram_loss,
    verse_line_share,
)
from tools import corpora


@pytest.mark.parametrize("name", TEXTS)
def test_each_text_is_a_small_real_corpus(name):
    text = load_text(name)
    assert 50_000 < len(text.encode("utf-8")) <= 1_000_000
    assert text.endswith("\n") and "\r" not in text and "\x1b" not in text


def test_the_english_text_is_three_plays():
    text = load_text("shakespeare")
    assert text.isascii()
    for title in ("HAMLET, PRINCE OF DENMARK", "MACBETH", "ROMEO AND JULIET"):
        assert title in text
    assert "To be, or not to be" in text


def test_the_chinese_text_is_one_regulated_poem_per_block():
    text = load_text("tang_poems")
    poems = text.rstrip("\n").split("\n\n")
    assert len(poems) == 1490
    han = "[\u4e00-\u9fff]"
    for poem in poems:
        title, author, *couplets = poem.split("\n")
        assert title.startswith("\u300a") and title.endswith("\u300b"), title
        assert author and len(couplets) in (2, 4), poem[:30]
        width = len(couplets[0]) // 2 - 1  # "xxxxx,xxxxx." holds 2 * width + 2 characters
        assert width in (5, 7), poem[:30]
        for couplet in couplets:
            assert re.fullmatch(f"{han}{{{width}}}\uff0c{han}{{{width}}}\u3002", couplet), couplet
    assert len(set(text)) <= corpora.TANG_CHARACTERS + 6  # + the marks and the newline
    assert verse_line_share(text) == 1.0


@pytest.mark.parametrize("name", TEXTS)
def test_the_tokenizer_round_trips(name):
    text = load_text(name)
    tokenizer = CharTokenizer.from_text(text)
    ids = tokenizer.encode(text)
    assert len(ids) == len(text) and max(ids) == tokenizer.vocab_size - 1
    assert tokenizer.decode(ids) == text
    assert tokenizer.decode(torch.tensor(ids[:100])) == text[:100]
    assert tokenizer.vocab_size == len(set(text))


def test_ids_follow_the_sorted_characters():
    tokenizer = CharTokenizer.from_text("hello world")
    assert tokenizer.chars == " dehlorw" and tokenizer.encode("low") == [4, 5, 7]


def test_the_split_is_contiguous():
    tokens = torch.arange(1000)
    train, validation = train_validation_split(tokens, 0.1)
    assert torch.equal(torch.cat((train, validation)), tokens) and len(validation) == 100


def test_windows_are_consecutive_tokens_drawn_by_the_generator():
    tokens = torch.arange(500)
    windows = sample_windows(tokens, 8, 16, torch.Generator().manual_seed(0))
    assert windows.shape == (8, 17) and windows.dtype == tokens.dtype
    assert (windows.diff(dim=1) == 1).all()  # each window is a stretch of the stream
    again = sample_windows(tokens, 8, 16, torch.Generator().manual_seed(0))
    other = sample_windows(tokens, 8, 16, torch.Generator().manual_seed(1))
    assert torch.equal(windows, again) and not torch.equal(windows, other)
    every_start = sample_windows(torch.arange(20), 2000, 19, torch.Generator().manual_seed(0))
    assert set(every_start[:, 0].tolist()) == {0}, "a stream of exactly one window"
    starts = sample_windows(tokens, 4000, 16, torch.Generator().manual_seed(0))[:, 0]
    assert starts.min() == 0 and starts.max() == 500 - 17, "every start can be drawn"


def _counting_case(vocab_size=7, seed=0):
    generator = torch.Generator().manual_seed(seed)
    train = torch.randint(0, vocab_size, (400,), generator=generator)
    train[::3] = 2  # some structure for the bigram to find
    validation = torch.randint(0, vocab_size, (120,), generator=generator)
    validation[::3] = 2
    return train, validation, vocab_size


def _log_table(rows: list[list[float]]) -> torch.Tensor:
    return torch.tensor(rows, dtype=torch.float64).log()


def test_the_unigram_loss_is_the_cross_entropy_of_add_one_counts():
    train, validation, vocab = _counting_case()
    counts = Counter(train.tolist())
    probabilities = [(counts[t] + 1) / (len(train) + vocab) for t in range(vocab)]
    log_p = _log_table([probabilities] * len(validation))  # (num_tokens, vocab)
    expected = F.nll_loss(log_p, validation).item()
    assert unigram_loss(train, validation, vocab) == pytest.approx(expected, rel=1e-9)


def test_the_bigram_loss_is_the_better_of_add_one_and_the_tuned_interpolation():
    train, validation, vocab = _counting_case()
    pairs = Counter(zip(train[:-1].tolist(), train[1:].tolist(), strict=True))
    firsts = Counter(train[:-1].tolist())
    unigram = Counter(train.tolist())
    p_unigram = [(unigram[t] + 1) / (len(train) + vocab) for t in range(vocab)]
    add_one = _log_table([[(pairs[a, b] + 1) / (firsts[a] + vocab) for b in range(vocab)]
                          for a in range(vocab)])
    scores = [F.nll_loss(add_one[validation[:-1]], validation[1:]).item()]
    for weight in BIGRAM_WEIGHTS:
        table = _log_table([[weight * pairs[a, b] / firsts[a] + (1 - weight) * p_unigram[b]
                             if firsts[a] else p_unigram[b] for b in range(vocab)]
                            for a in range(vocab)])
        scores.append(F.nll_loss(table[validation[:-1]], validation[1:]).item())
    assert bigram_loss(train, validation, vocab) == pytest.approx(min(scores), rel=1e-9)
    assert bigram_loss(train, validation, vocab) < unigram_loss(train, validation, vocab)


def test_the_bigram_falls_back_on_the_unigram_after_an_unseen_character():
    train = torch.tensor([0, 1, 0, 1, 0, 1])
    validation = torch.tensor([2, 0, 1])  # 2 never occurs in train
    counts = torch.tensor([3.0, 3.0, 0.0])
    p_unigram = (counts + 1) / (6 + 3)
    best = min(-(torch.log(p_unigram[0]) + torch.log(w + (1 - w) * p_unigram[1])).item() / 2
               for w in BIGRAM_WEIGHTS)
    add_one = -(torch.log(torch.tensor(1 / 3)) + torch.log(torch.tensor(4 / 6))).item() / 2
    assert bigram_loss(train, validation, 3) == pytest.approx(min(best, add_one), rel=1e-6)


def test_the_verse_line_share_counts_the_lines_between_marks():
    comma, stop, han = "\uff0c", "\u3002", "\u5b57"
    five, three = han * 5, han * 3
    poem = f"\u300a{three}\u300b\n{three}\n{five}{comma}{five}{stop}\n"
    assert verse_line_share(poem) == 1.0  # the title and author end in a newline: no lines
    cut = f"{three}{comma}{five}{stop}\n{three}{comma}{han * 7}{stop}{five}"
    assert verse_line_share(cut) == pytest.approx(2 / 3)  # the cut start and end do not count
    assert verse_line_share(cut, lengths=(3,)) == pytest.approx(1 / 3)
    assert verse_line_share(five) == 0.0
    assert verse_line_share(f"{stop}{comma}{stop}") == 0.0  # empty lines have 0 characters


_TOKENIZER = CharTokenizer.from_text("abc")
_STREAM = torch.arange(50)
_GEN = torch.Generator().manual_seed(0)

BAD_INPUTS = [
    pytest.param(load_text, ("hamlet",), {}, ValueError, ("name", "'shakespeare'", "'hamlet'"),
                 id="load_text: unknown name"),
    pytest.param(CharTokenizer, ("ba",), {}, ValueError, ("chars", "sorted", "'ba'"),
                 id="CharTokenizer: unsorted chars"),
    pytest.param(CharTokenizer, (["a"],), {}, TypeError, ("chars", "str", "list"),
                 id="CharTokenizer: a list"),
    pytest.param(CharTokenizer.from_text, ("",), {}, ValueError, ("text", "one character", "''"),
                 id="CharTokenizer.from_text: empty"),
    pytest.param(CharTokenizer.from_text, (b"abc",), {}, TypeError, ("text", "str", "bytes"),
                 id="CharTokenizer.from_text: bytes"),
    pytest.param(_TOKENIZER.encode, ("abz",), {}, ValueError, ("text", "does not know", "'z'"),
                 id="CharTokenizer.encode: unknown character"),
    pytest.param(_TOKENIZER.encode, (3,), {}, TypeError, ("text", "str", "int"),
                 id="CharTokenizer.encode: an int"),
    pytest.param(_TOKENIZER.decode, ([0, 3],), {}, ValueError, ("ids", "0..2", "3"),
                 id="CharTokenizer.decode: id past the vocabulary"),
    pytest.param(_TOKENIZER.decode, ("ab",), {}, TypeError, ("ids", "list of int", "str"),
                 id="CharTokenizer.decode: a str"),
    pytest.param(_TOKENIZER.decode, (torch.zeros(2, 2, dtype=torch.long),), {}, ValueError,
                 ("ids", "(seq_len,)", "(2, 2)"), id="CharTokenizer.decode: 2-D tensor"),
    pytest.param(train_validation_split, (_STREAM.float(),), {}, TypeError,
                 ("tokens", "integer", "torch.float32"), id="train_validation_split: floats"),
    pytest.param(train_validation_split, (_STREAM, 1.5), {}, ValueError,
                 ("validation_fraction", "between 0 and 1", "1.5"),
                 id="train_validation_split: fraction above 1"),
    pytest.param(train_validation_split, (_STREAM, 0), {}, ValueError,
                 ("validation_fraction", "positive number", "0"),
                 id="train_validation_split: fraction 0"),
    pytest.param(train_validation_split, (_STREAM[:3], 0.1), {}, ValueError,
                 ("too short", "(3,)", "0.1"), id="train_validation_split: too short"),
    pytest.param(sample_windows, (_STREAM, 4, 8, None), {}, TypeError,
                 ("generator", "torch.Generator", "global"), id="sample_windows: no generator"),
    pytest.param(sample_windows, (_STREAM, 4, 50, _GEN), {}, ValueError,
                 ("(50,)", "seq_len + 1 = 51"), id="sample_windows: stream too short"),
    pytest.param(sample_windows, (_STREAM, 0, 8, _GEN), {}, ValueError,
                 ("batch_size", "positive int", "0"), id="sample_windows: batch_size 0"),
    pytest.param(sample_windows, (_STREAM[None], 4, 8, _GEN), {}, ValueError,
                 ("tokens", "(num_tokens,)", "(1, 50)"), id="sample_windows: 2-D stream"),
    pytest.param(unigram_loss, (_STREAM.float(), _STREAM, 50), {}, TypeError,
                 ("train", "integer", "torch.float32"), id="unigram_loss: float train"),
    pytest.param(unigram_loss, (_STREAM, _STREAM, 10), {}, ValueError,
                 ("train", "0..9", "49"), id="unigram_loss: id past vocab_size"),
    pytest.param(unigram_loss, (_STREAM, _STREAM[:1], 50), {}, ValueError,
                 ("validation", "at least 2 tokens", "(1,)"), id="unigram_loss: one token"),
    pytest.param(bigram_loss, (_STREAM, _STREAM[None], 50), {}, ValueError,
                 ("validation", "(num_tokens,)", "(1, 50)"), id="bigram_loss: 2-D validation"),
    pytest.param(bigram_loss, (_STREAM, _STREAM, 0), {}, ValueError,
                 ("vocab_size", "positive int", "0"), id="bigram_loss: vocab_size 0"),
    pytest.param(bigram_loss, ([0, 1], _STREAM, 50), {}, TypeError,
                 ("train", "torch.Tensor", "list"), id="bigram_loss: a list"),
    pytest.param(verse_line_share, (b"x",), {}, TypeError, ("text", "str", "bytes"),
                 id="verse_line_share: bytes"),
    pytest.param(verse_line_share, ("x",), {"lengths": [5, 7]}, TypeError,
                 ("lengths", "tuple", "list"), id="verse_line_share: lengths a list"),
    pytest.param(verse_line_share, ("x",), {"lengths": ()}, ValueError,
                 ("lengths", "at least one", "()"), id="verse_line_share: no lengths"),
    pytest.param(verse_line_share, ("x",), {"lengths": (5, 0)}, ValueError,
                 ("lengths", "positive int", "0"), id="verse_line_share: length 0"),
    # Integer dtypes the embedding below refuses, and tensors with no values to count.
    pytest.param(unigram_loss, (_STREAM.to(torch.int16), _STREAM, 50), {}, TypeError,
                 ("train", "torch.long", "torch.int16"), id="unigram_loss: int16 train"),
    pytest.param(bigram_loss, (_STREAM, _STREAM.to(torch.uint8), 50), {}, TypeError,
                 ("validation", "torch.long", "torch.uint8"), id="bigram_loss: uint8 validation"),
    pytest.param(unigram_loss, (_STREAM.to("meta"), _STREAM, 50), {}, ValueError,
                 ("train", "meta", "values"), id="unigram_loss: train on meta"),
    pytest.param(bigram_loss, (_STREAM, _STREAM.to("meta"), 50), {}, ValueError,
                 ("validation", "meta", "values"), id="bigram_loss: validation on meta"),
    pytest.param(sample_windows, (_STREAM.to(torch.int8), 2, 4, _GEN), {}, TypeError,
                 ("tokens", "torch.long", "torch.int8"), id="sample_windows: int8 stream"),
    pytest.param(train_validation_split, (_STREAM.to("meta"),), {}, ValueError,
                 ("tokens", "meta"), id="train_validation_split: stream on meta"),
    pytest.param(_TOKENIZER.decode, (torch.tensor([0, 1], dtype=torch.int8),), {}, TypeError,
                 ("ids", "torch.long", "torch.int8"), id="CharTokenizer.decode: int8 ids"),
    pytest.param(_TOKENIZER.decode, (torch.tensor([0, 1], device="meta"),), {}, ValueError,
                 ("ids", "meta"), id="CharTokenizer.decode: ids on meta"),
]
