"""The validators of course_utils.checks: what they let through, and what they say otherwise."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from course_utils.checks import (
    require_bool,
    require_bool_mask,
    require_cache_sizes,
    require_callable,
    require_divisible,
    require_float_dtype,
    require_generator,
    require_instance,
    require_int_in_range,
    require_int_tensor,
    require_key_padding,
    require_matches_module,
    require_one_of,
    require_positive_int,
    require_positive_number,
    require_same_device,
    require_same_dtype,
    require_seed,
    require_temperature,
    require_tensor,
    require_token_ids,
    require_values,
)

SCORES_3D = torch.Size((2, 4, 5))  # (batch, n_q, n_k)
SCORES_4D = torch.Size((2, 3, 4, 5))  # (batch, heads, n_q, n_k)
cpu, meta = torch.ones(2, 3), torch.ones(2, 3, device="meta")


@pytest.mark.parametrize("shape", [(5,), (4, 5), (1, 5), (2, 1, 5), (2, 4, 5), (1, 1, 1)])
def test_bool_mask_accepts_shared_and_full_rank_masks_for_3d_scores(shape):
    mask = torch.ones(shape, dtype=torch.bool)
    assert require_bool_mask(mask, SCORES_3D, "(batch, n_q, n_k)") is mask


@pytest.mark.parametrize("shape", [(4, 5), (2, 1, 1, 5), (1, 3, 4, 5), (2, 3, 4, 5), (2, 1, 4, 1)])
def test_bool_mask_accepts_shared_and_full_rank_masks_for_4d_scores(shape):
    mask = torch.ones(shape, dtype=torch.bool)
    assert require_bool_mask(mask, SCORES_4D, "(batch, heads, n_q, n_k)") is mask


@pytest.mark.parametrize(
    ("shape", "scores"),
    [((2, 1, 5), SCORES_4D), ((3, 4, 5), SCORES_4D), ((2, 4, 5), torch.Size((4, 5))),
     ((1, 2, 1, 5), SCORES_3D)],
    ids=["batch read as heads", "(heads, n_q, n_k) read as (batch, ...)", "3-D for 2-D scores",
         "4-D for 3-D scores"],
)
def test_rank_rule_refuses_masks_that_broadcast_only_by_adding_axes_on_the_left(shape, scores):
    # Each of these broadcasts (or would after left-padding) but means something else.
    with pytest.raises(ValueError, match="dims but the scores"):
        require_bool_mask(torch.ones(shape, dtype=torch.bool), scores, "(..., n_q, n_k)")


def test_a_padding_mask_needs_its_axes_and_the_error_says_how():
    padding = torch.ones(2, 5, dtype=torch.bool)  # (batch, n_k), batch != n_q
    with pytest.raises(ValueError) as raised:
        require_bool_mask(padding, SCORES_4D, "(batch, heads, n_q, n_k)")
    assert "mask[:, None, None, :]" in str(raised.value)
    with pytest.raises(ValueError) as raised:
        require_bool_mask(padding, SCORES_3D, "(batch, n_q, n_k)")
    assert "mask[:, None, :]" in str(raised.value)
    assert require_bool_mask(padding[:, None, :], SCORES_3D, "(batch, n_q, n_k)") is not None
    assert require_bool_mask(padding[:, None, None, :], SCORES_4D, "(...)") is not None


def test_same_device_and_dtype_skip_none_and_return_the_common_one():
    assert require_same_device(a=cpu, b=None, c=cpu) == torch.device("cpu")
    assert require_same_device(a=None) is None
    assert require_same_dtype(a=cpu, b=cpu.double()[:0].float()) == torch.float32


def test_matches_module_accepts_its_dtype_and_device():
    layer = nn.Linear(3, 2)
    assert require_matches_module("x", cpu, layer) is cpu
    assert require_matches_module("x", cpu.double(), nn.ReLU()) is not None  # no weights


def test_divisible_returns_d_k_and_token_ids_accept_the_edges():
    assert require_divisible(12, 4) == 3
    with pytest.raises(ValueError, match="not divisible by heads=3: every head"):
        require_divisible(8, 3, num_heads_name="heads")
    tokens = torch.tensor([[0, 9]])
    assert require_token_ids("tokens", tokens, 10) is tokens
    # Ids on 'meta' have no values to check against vocab_size (nor to look up): refused.
    with pytest.raises(ValueError, match="'meta' device"):
        require_token_ids("tokens", torch.zeros(2, 3, dtype=torch.long, device="meta"), 10)
    assert require_token_ids("tokens", tokens.int(), 10).dtype == torch.int32


def test_numbers_and_switches():
    assert require_positive_number("lr", 3e-3) == 3e-3 and require_positive_number("lr", 1) == 1
    assert require_bool("bias", False) is False
    assert require_float_dtype("dtype", torch.float16) is torch.float16
    assert require_callable("fn", len) is len
    assert require_temperature("temperature", 0) == 0.0
    mask = torch.ones(2, 1, 3, dtype=torch.bool)
    assert require_key_padding("memory_padding_mask", mask, (2, 3)).shape == (2, 3)
    assert require_seed("seed", 2**32 - 1) == 2**32 - 1 and require_generator("g", None) is None


def test_range_choice_and_kind_checks_return_what_they_let_through():
    assert require_int_in_range("seq_len", 12, 2, 12) == 12
    assert require_int_in_range("n", 10**6, 2) == 10**6
    assert require_one_of("rule", "sqrt", ("none", "sqrt")) == "sqrt"
    assert require_one_of("cell", "lstm", {"rnn": 1, "lstm": 2}) == "lstm"
    layer = nn.Linear(1, 1)
    assert require_instance("model", layer, nn.Module) is layer


mask_34 = torch.ones(3, 4, dtype=torch.bool)

BAD_INPUTS = [
    pytest.param(require_temperature, ("temperature", -1.0), {}, ValueError,
                 ("temperature", ">= 0", "-1.0"), id="require_temperature: negative"),
    pytest.param(require_temperature, ("temperature", "hot"), {}, TypeError,
                 ("temperature", "number", "str"), id="require_temperature: a str"),
    pytest.param(require_key_padding, ("memory_padding_mask", torch.ones(2, 3), (2, 3)), {},
                 ValueError, ("memory_padding_mask", "bool (batch, n_src)", "torch.float32"),
                 id="require_key_padding: float mask"),
    pytest.param(require_cache_sizes, ("alibi_bias", 5, 3), {}, ValueError,
                 ("alibi_bias", "n_k >= n_q", "n_q=5 and n_k=3"),
                 id="require_cache_sizes: n_k < n_q"),
    pytest.param(require_values, ("tokens", torch.zeros(3, device="meta")), {}, ValueError,
                 ("tokens", "meta", "values"), id="require_values: meta"),
    pytest.param(require_int_tensor, ("ids", torch.arange(3).to(torch.int16), "(seq_len,)"),
                 {}, TypeError, ("ids", "torch.long", "torch.int16", ".long()"),
                 id="require_int_tensor: int16, which nn.Embedding refuses"),
    pytest.param(require_int_tensor, ("positions", torch.ones(3), "(seq_len,)", "positions"), {},
                 TypeError, ("positions", "integer positions", "torch.float32"),
                 id="int tensor: float dtype"),
    pytest.param(require_int_tensor, ("positions", torch.arange(3)[None], "(seq_len,)"), {},
                 ValueError, ("positions", "(seq_len,)", "(1, 3)"), id="int tensor: wrong rank"),
    pytest.param(require_tensor, ("q", [1.0], "(..., n_q, d_k)"), {}, TypeError,
                 ("q", "torch.Tensor", "(..., n_q, d_k)", "list"), id="tensor: a list"),
    pytest.param(require_tensor, ("x", torch.ones(2, 3, dtype=torch.long), "(batch, d)"), {},
                 TypeError, ("x", "floating-point", "torch.int64"), id="tensor: int dtype"),
    pytest.param(require_tensor, ("q", torch.ones(3), "(..., n_q, d_k)"), {}, ValueError,
                 ("q", "(..., n_q, d_k)", "at least 2 dims", "(3,)"), id="tensor: too few dims"),
    pytest.param(require_bool_mask, ([[True]], (4, 5), "(n_q, n_k)"), {}, TypeError,
                 ("mask", "bool torch.Tensor", "list"), id="mask: a list"),
    pytest.param(require_bool_mask, (mask_34.float(), (3, 4), "(n_q, n_k)"), {}, TypeError,
                 ("mask", "bool", "torch.float32", "mask.bool()"), id="mask: 0/1 floats"),
    pytest.param(require_bool_mask, (mask_34, (3, 5), "(n_q, n_k)"), {}, ValueError,
                 ("mask", "(3, 4)", "(n_q, n_k) = (3, 5)"), id="mask: does not broadcast"),
    pytest.param(require_bool_mask, (torch.ones(2, 1, 5, dtype=torch.bool), SCORES_4D,
                                     "(batch, heads, n_q, n_k)"), {}, ValueError,
                 ("mask", "(2, 1, 5)", "3 dims", "(batch, heads, n_q, n_k) = (2, 3, 4, 5)",
                  "mask[:, None, None, :]"), id="mask: rank rule"),
    pytest.param(require_same_device, (), {"q": cpu, "k": meta, "mask": None}, ValueError,
                 ("q, k", "one device", "q on cpu", "k on meta"), id="device: q and k differ"),
    pytest.param(require_same_dtype, (), {"q": cpu, "v": cpu.double()}, TypeError,
                 ("q, v", "one dtype", "q is torch.float32", "v is torch.float64"),
                 id="dtype: q and v differ"),
    pytest.param(require_matches_module, ("x", cpu.double(), nn.Linear(3, 2)), {}, TypeError,
                 ("x", "torch.float64", "Linear", "torch.float32"), id="module: dtype"),
    pytest.param(require_matches_module, ("x", meta, nn.Linear(3, 2)), {}, ValueError,
                 ("x", "meta", "Linear", "cpu"), id="module: device"),
    pytest.param(require_float_dtype, ("dtype", torch.int64), {}, TypeError,
                 ("dtype", "floating-point torch.dtype", "torch.int64"), id="dtype: int64"),
    pytest.param(require_float_dtype, ("dtype", "float32"), {}, TypeError,
                 ("dtype", "floating-point torch.dtype", "str 'float32'"), id="dtype: a str"),
    pytest.param(require_positive_int, ("d_k", 0), {}, ValueError,
                 ("d_k", "positive int", "got 0"), id="int: zero"),
    pytest.param(require_positive_int, ("d_k", 2.0), {}, TypeError,
                 ("d_k", "positive int", "float 2.0"), id="int: float"),
    pytest.param(require_positive_int, ("d_k", True), {}, TypeError,
                 ("d_k", "positive int", "bool True"), id="int: bool"),
    pytest.param(require_positive_number, ("lr", -0.1), {}, ValueError,
                 ("lr", "> 0", "-0.1"), id="number: negative"),
    pytest.param(require_positive_number, ("lr", float("nan")), {}, ValueError,
                 ("lr", "finite", "nan"), id="number: nan"),
    pytest.param(require_positive_number, ("lr", "0.1"), {}, TypeError,
                 ("lr", "positive number", "str '0.1'"), id="number: str"),
    pytest.param(require_bool, ("bias", 1), {}, TypeError,
                 ("bias", "True or False", "int 1"), id="bool: int"),
    pytest.param(require_divisible, (10, 4), {}, ValueError,
                 ("d_model=10", "num_heads=4", "divisible"), id="divisible: 10 by 4"),
    pytest.param(require_divisible, (8, 0), {}, ValueError,
                 ("num_heads", "positive int", "got 0"), id="divisible: zero heads"),
    pytest.param(require_token_ids, ("tokens", torch.tensor([[0, 10]]), 10), {}, ValueError,
                 ("tokens", "0..9", "vocab_size=10", "from 0 to 10"), id="tokens: id too big"),
    pytest.param(require_token_ids, ("tokens", torch.tensor([[-1, 2]]), 10), {}, ValueError,
                 ("tokens", "0..9", "from -1 to 2"), id="tokens: negative id"),
    pytest.param(require_token_ids, ("tokens", torch.ones(1, 2), 10), {}, TypeError,
                 ("tokens", "integer token ids", "torch.float32"), id="tokens: floats"),
    pytest.param(require_token_ids, ("tokens", torch.ones(3, dtype=torch.long), 10), {},
                 ValueError, ("tokens", "(batch, seq_len)", "(3,)"), id="tokens: 1-D"),
    pytest.param(require_token_ids, ("tokens", [[1, 2]], 10), {}, TypeError,
                 ("tokens", "integer torch.Tensor", "list"), id="tokens: a list"),
    pytest.param(require_seed, ("seed", 1.0), {}, TypeError, ("seed", "int", "float 1.0"),
                 id="seed: float"),
    pytest.param(require_seed, ("seed", 2**32), {}, ValueError,
                 ("seed", "0 to 2**32 - 1", "4294967296"), id="seed: too big"),
    pytest.param(require_generator, ("generator", 0), {}, TypeError,
                 ("generator", "torch.Generator", "int 0"), id="generator: a seed"),
    pytest.param(require_callable, ("loss_at_step", 3), {}, TypeError,
                 ("loss_at_step", "function", "int 3"), id="callable: an int"),
    pytest.param(require_int_in_range, ("seq_len", 13, 2, 12), {}, ValueError,
                 ("seq_len", "int in 2..12", "got 13"), id="int in range: above"),
    pytest.param(require_int_in_range, ("num_digits", 1, 2), {}, ValueError,
                 ("num_digits", "int >= 2", "got 1"), id="int in range: below, no upper end"),
    pytest.param(require_int_in_range, ("index", True, 0, 9), {}, TypeError,
                 ("index", "int in 0..9", "bool True"), id="int in range: a bool"),
    pytest.param(require_int_in_range, ("index", "3", 0, 9), {}, TypeError,
                 ("index", "int in 0..9", "str '3'"), id="int in range: a str"),
    pytest.param(require_one_of, ("rule", "log", ("none", "sqrt")), {}, ValueError,
                 ("rule", "('none', 'sqrt')", "'log'"), id="one of: unknown"),
    pytest.param(require_one_of, ("cell", ["rnn"], ("rnn", "lstm")), {}, ValueError,
                 ("cell", "('rnn', 'lstm')", "['rnn']"), id="one of: unhashable"),
    pytest.param(require_instance, ("model", "net", nn.Module), {}, TypeError,
                 ("model", "torch.nn.modules.module.Module", "str 'net'"),
                 id="instance: no description"),
    pytest.param(require_instance, ("task", 3, dict, "a dict of tasks"), {}, TypeError,
                 ("task", "a dict of tasks", "int 3"), id="instance: described"),
]
