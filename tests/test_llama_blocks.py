"""course_utils.nn.llama_parts: RMSNorm against torch.nn.RMSNorm, SwiGLU against LlamaMLP."""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaConfig
from transformers.models.llama.modeling_llama import LlamaMLP, LlamaRMSNorm

from course_utils.nn.llama_parts import RMSNorm, SwiGLUFeedForward


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("eps", [1e-5, 1e-2])
def test_rmsnorm_equals_torch(dtype, eps):
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(2, 5, 12, generator=generator, dtype=dtype) * 3 + 1  # (batch, seq_len, d_model)
    ours = RMSNorm(12, eps=eps).to(dtype)
    theirs = torch.nn.RMSNorm(12, eps=eps, dtype=dtype)
    with torch.no_grad():
        ours.weight.copy_(torch.randn(12, generator=generator, dtype=dtype))
        theirs.weight.copy_(ours.weight)
    tolerance = {"atol": 1e-6, "rtol": 1e-6} if dtype == torch.float32 else {"atol": 1e-12,
                                                                             "rtol": 1e-12}
    torch.testing.assert_close(ours(x), theirs(x), **tolerance)
    assert ours(x).dtype == dtype


def test_rmsnorm_equals_transformers_llama_in_half_precision():
    # LlamaRMSNorm squares in float32, so does ours: bfloat16 input gives the same bits.
    x = torch.randn(3, 7, 16, generator=torch.Generator().manual_seed(1)).to(torch.bfloat16) * 50
    ours, theirs = RMSNorm(16, eps=1e-5).to(torch.bfloat16), LlamaRMSNorm(16, eps=1e-5)
    theirs = theirs.to(torch.bfloat16)
    assert torch.equal(ours(x), theirs(x))


def test_rmsnorm_has_unit_root_mean_square_before_its_weight():
    x = torch.randn(4, 3, 10, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    rms = RMSNorm(10, eps=1e-12).double()(x).square().mean(dim=-1).sqrt()
    torch.testing.assert_close(rms, torch.ones_like(rms))


@pytest.mark.parametrize("bias", [False, True])
def test_swiglu_equals_transformers_llama_mlp(bias):
    torch.manual_seed(0)  # LlamaMLP initialises from the global generator
    config = LlamaConfig(hidden_size=12, intermediate_size=20, num_attention_heads=3,
                         num_key_value_heads=3, hidden_act="silu", mlp_bias=bias)
    theirs = LlamaMLP(config)
    ours = SwiGLUFeedForward(12, 20, bias=bias)
    pairs = {"gate": "gate_proj", "up": "up_proj", "down": "down_proj"}
    ours.load_state_dict({f"{mine}.{kind}": theirs.state_dict()[f"{name}.{kind}"]
                          for mine, name in pairs.items()
                          for kind in (["weight", "bias"] if bias else ["weight"])})
    x = torch.randn(2, 6, 12, generator=torch.Generator().manual_seed(3))
    torch.testing.assert_close(ours(x), theirs(x), atol=1e-6, rtol=1e-6)


def test_swiglu_is_the_formula_and_has_no_bias_by_default():
    ffn = SwiGLUFeedForward(8, 24)
    assert all(layer.bias is None for layer in (ffn.gate, ffn.up, ffn.down))
    assert sum(p.numel() for p in ffn.parameters()) == 3 * 8 * 24
    x = torch.randn(1, 4, 8, generator=torch.Generator().manual_seed(4))
    gate, up = x @ ffn.gate.weight.T, x @ ffn.up.weight.T  # (batch, seq_len, d_ff)
    expected = (gate * torch.sigmoid(gate) * up) @ ffn.down.weight.T
    torch.testing.assert_close(ffn(x), expected)


BAD_INPUTS = [
    pytest.param(RMSNorm, (0,), {}, ValueError, ("d_model", "positive int", "got 0"),
                 id="RMSNorm: d_model 0"),
    pytest.param(RMSNorm, (8,), {"eps": 0.0}, ValueError, ("eps", "positive number", "0.0"),
                 id="RMSNorm: eps 0"),
    pytest.param(RMSNorm, (8,), {"eps": "1e-5"}, TypeError, ("eps", "positive number", "str"),
                 id="RMSNorm: eps a str"),
    pytest.param(RMSNorm(8), (torch.ones(2, 3, 6),), {}, ValueError,
                 ("x", "d_model=8", "(2, 3, 6)"), id="RMSNorm: wrong width"),
    pytest.param(RMSNorm(8), (torch.ones(2, 8, dtype=torch.long),), {}, TypeError,
                 ("x", "floating-point", "torch.int64"), id="RMSNorm: integer x"),
    pytest.param(RMSNorm(8), (torch.ones(2, 8, dtype=torch.float64),), {}, TypeError,
                 ("x", "torch.float64", "torch.float32"), id="RMSNorm: dtype of x"),
    pytest.param(SwiGLUFeedForward, (8, 0), {}, ValueError, ("d_ff", "positive int", "got 0"),
                 id="SwiGLUFeedForward: d_ff 0"),
    pytest.param(SwiGLUFeedForward, (8.0, 16), {}, TypeError, ("d_model", "positive int",
                                                              "float"),
                 id="SwiGLUFeedForward: float d_model"),
    pytest.param(SwiGLUFeedForward, (8, 16), {"bias": 0}, TypeError, ("bias", "True or False",
                                                                     "int 0"),
                 id="SwiGLUFeedForward: bias 0"),
    pytest.param(SwiGLUFeedForward(8, 16), (torch.ones(1, 2, 4),), {}, ValueError,
                 ("x", "d_model=8", "(1, 2, 4)"), id="SwiGLUFeedForward: wrong width"),
    pytest.param(SwiGLUFeedForward(8, 16), ([1.0] * 8,), {}, TypeError,
                 ("x", "torch.Tensor", "list"), id="SwiGLUFeedForward: a list"),
]
