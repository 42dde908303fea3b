"""course_utils.models.llama at small sizes against transformers' LlamaForCausalLM with
random weights.

tests/test_smollm2.py proves the same model equal to transformers at SmolLM2's real sizes and
weights; here the sizes are small (and vary), so it also runs without the model package.
"""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from course_utils.models.llama import Llama, LlamaBlock
from course_utils.models.smollm2.loading import _course_name
from course_utils.nn.kv_cache import KVCache

VOCAB, MAX_LEN, D_MODEL, HEADS, KV_HEADS, LAYERS, D_FF = 19, 16, 16, 4, 2, 2, 24


@pytest.fixture(scope="module")
def pair():
    """Our Llama and transformers' holding the same random weights (norms away from 1)."""
    torch.manual_seed(0)  # transformers initialises from the global generator
    config = LlamaConfig(vocab_size=VOCAB, hidden_size=D_MODEL, intermediate_size=D_FF,
                         num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                         num_key_value_heads=KV_HEADS, max_position_embeddings=MAX_LEN,
                         rope_theta=100000.0, rms_norm_eps=1e-5, tie_word_embeddings=True,
                         attn_implementation="eager")
    theirs = LlamaForCausalLM(config).eval()
    with torch.no_grad():
        for name, parameter in theirs.named_parameters():
            if "norm" in name:
                parameter.normal_(1.0, 0.3)
    ours = Llama(VOCAB, MAX_LEN, D_MODEL, HEADS, LAYERS, D_FF, num_kv_heads=KV_HEADS,
                 rope_base=100000.0, eps=1e-5).eval()
    state = {_course_name(name): weight for name, weight in theirs.state_dict().items()
             if name != "lm_head.weight"}  # tied: the embedding itself
    ours.load_state_dict(state)
    return ours, theirs


def test_llama_equals_transformers(pair):
    ours, theirs = pair
    tokens = torch.randint(0, VOCAB, (3, 9), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        logits, weights = ours(tokens, return_weights=True)
        expected = theirs(tokens, output_attentions=True)
    assert logits.shape == (3, 9, VOCAB) and weights.shape == (3, LAYERS, HEADS, 9, 9)
    torch.testing.assert_close(logits, expected.logits, atol=1e-5, rtol=0)
    torch.testing.assert_close(weights, torch.stack(expected.attentions, dim=1), atol=1e-6,
                               rtol=0)


def test_the_cache_gives_the_same_logits_one_token_at_a_time(pair):
    ours, _ = pair
    tokens = torch.randint(0, VOCAB, (2, 7), generator=torch.Generator().manual_seed(2))
    cache = KVCache()
    with torch.no_grad():
        whole = ours(tokens)
        steps = torch.cat([ours(tokens[:, i:i + 1], cache=cache) for i in range(7)], dim=1)
    torch.testing.assert_close(steps, whole, atol=1e-5, rtol=0)
    # Grouped-query attention: the cache keeps KV_HEADS heads, not HEADS.
    assert cache.keys[0].shape == (2, KV_HEADS, 7, D_MODEL // HEADS)


def test_no_biases_and_a_tied_readout():
    model = Llama(VOCAB, MAX_LEN, D_MODEL, HEADS, 1, D_FF)
    names = [name for name, _ in model.named_parameters()]
    assert not any(name.endswith("bias") for name in names)
    assert not any("readout" in name or "lm_head" in name for name in names)
    model(torch.tensor([[1, 2, 3]])).sum().backward()
    assert model.token_embedding.weight.grad[5].abs().sum() > 0, (
        "token 5 is not in the input: only the tied readout gives it a gradient")


_MODEL = Llama(VOCAB, MAX_LEN, D_MODEL, HEADS, 1, D_FF, num_kv_heads=KV_HEADS)
_FULL = KVCache()
_MODEL(torch.zeros(1, MAX_LEN, dtype=torch.long), cache=_FULL)

BAD_INPUTS = [
    pytest.param(Llama, (0, MAX_LEN, D_MODEL, HEADS, 1, D_FF), {}, ValueError,
                 ("vocab_size", "positive int", "0"), id="Llama: vocab_size 0"),
    pytest.param(Llama, (VOCAB, None, D_MODEL, HEADS, 1, D_FF), {}, TypeError,
                 ("max_len", "positive int", "NoneType"), id="Llama: max_len None"),
    pytest.param(Llama, (VOCAB, MAX_LEN, 16.0, HEADS, 1, D_FF), {}, TypeError,
                 ("d_model", "positive int", "float"), id="Llama: float d_model"),
    pytest.param(Llama, (VOCAB, MAX_LEN, D_MODEL, HEADS, 0, D_FF), {}, ValueError,
                 ("num_layers", "positive int", "0"), id="Llama: no layers"),
    pytest.param(Llama, (VOCAB, MAX_LEN, D_MODEL, HEADS, 1, D_FF), {"num_kv_heads": 3},
                 ValueError, ("num_heads=4", "num_kv_heads=3"),
                 id="Llama: kv heads do not divide the heads"),
    pytest.param(Llama, (VOCAB, MAX_LEN, D_MODEL, HEADS, 1, D_FF), {"rope_base": 0},
                 ValueError, ("rope_base", "positive number", "0"), id="Llama: rope_base 0"),
    pytest.param(_MODEL, (torch.tensor([[0, VOCAB]]),), {}, ValueError,
                 ("tokens", f"0..{VOCAB - 1}", str(VOCAB)), id="Llama: id past the vocabulary"),
    pytest.param(_MODEL, (torch.zeros(1, 3),), {}, TypeError,
                 ("tokens", "integer", "torch.float32"), id="Llama: float tokens"),
    pytest.param(_MODEL, (torch.zeros(1, 0, dtype=torch.long),), {}, ValueError,
                 ("tokens", "at least one token", "(1, 0)"), id="Llama: no tokens"),
    pytest.param(_MODEL, (torch.zeros(1, MAX_LEN + 1, dtype=torch.long),), {}, ValueError,
                 ("max_len=16", "position 16", "crop"), id="Llama: longer than max_len"),
    pytest.param(_MODEL, (torch.zeros(1, 1, dtype=torch.long),), {"cache": _FULL}, ValueError,
                 ("16 cached positions", "max_len=16"), id="Llama: a full cache"),
    pytest.param(_MODEL, (torch.zeros(1, 1, dtype=torch.long),), {"cache": {}}, TypeError,
                 ("cache", "KVCache", "dict"), id="Llama: a dict as cache"),
    pytest.param(_MODEL, (torch.zeros(1, 1, dtype=torch.long),), {"return_weights": "yes"},
                 TypeError, ("return_weights", "True or False", "str"),
                 id="Llama: return_weights a str"),
    pytest.param(Llama, (VOCAB, MAX_LEN, D_MODEL, HEADS, 1, D_FF), {"rope_base": None},
                 TypeError, ("rope_base", "positive number", "None"),
                 id="Llama: rope_base None, no positions at all"),
    pytest.param(LlamaBlock, (D_MODEL, HEADS, D_FF), {"rope_base": None}, TypeError,
                 ("rope_base", "positive number", "None"), id="LlamaBlock: rope_base None"),
    pytest.param(_MODEL, (torch.zeros(1, 3, dtype=torch.int8),), {}, TypeError,
                 ("tokens", "torch.long", "torch.int8"), id="Llama: int8 tokens"),
    pytest.param(_MODEL, (torch.zeros(1, 3, dtype=torch.int16),), {}, TypeError,
                 ("tokens", "torch.long", "torch.int16"), id="Llama: int16 tokens"),
    pytest.param(_MODEL, (torch.zeros(1, 3, dtype=torch.long, device="meta"),), {}, ValueError,
                 ("tokens", "meta", "values"), id="Llama: tokens on meta"),
    pytest.param(LlamaBlock, (D_MODEL, HEADS, 0), {}, ValueError,
                 ("d_ff", "positive int", "0"), id="LlamaBlock: d_ff 0"),
    pytest.param(LlamaBlock, (12, 4, D_FF), {}, ValueError,
                 ("rope_base", "even d_k", "3"), id="LlamaBlock: odd d_k"),
    pytest.param(LlamaBlock, (D_MODEL, HEADS, D_FF), {"eps": -1.0}, ValueError,
                 ("eps", "positive number", "-1.0"), id="LlamaBlock: negative eps"),
    pytest.param(_MODEL.blocks[0], (torch.zeros(1, 3, 8),), {}, ValueError,
                 ("x", "d_model=16", "(1, 3, 8)"), id="LlamaBlock: wrong d_model"),
]
