"""A decoder-only Transformer (GPT) built from the course's own parts.

Tokens ``(batch, seq_len)`` become vectors (a token embedding plus a learned position
vector, as in GPT-2), pass ``num_layers`` pre-LN blocks (lesson 07's
:class:`~course_utils.nn.blocks.EncoderBlock` with ``norm_first=True`` and GELU, under the
causal mask of lesson 05), a final LayerNorm, and are read out through the token embedding
itself (weight tying): the logit of token ``t`` is the dot product of the last vector with
``t``'s embedding. Each position predicts the next token from itself and what came before.

Why learned absolute positions (lesson 11 has the others): they are GPT-2's, the forward
pass stays a table look-up and an addition (easy to port to the browser), and their limit is
instructive: a model with ``max_len`` position vectors cannot see position ``max_len``, which
is why :func:`course_utils.nn.generation.generate` crops the context. Lesson 14's model rotates
its queries and keys instead (RoPE, ``MultiHeadAttention(rope_base=...)``).

The model follows the protocol of :mod:`course_utils.nn.kv_cache`: ``model(tokens, cache=None)``.
:func:`train_on_text` is lesson 12's training recipe, shared with lesson 13, which retrains
the same model to look for induction heads in it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from course_utils.checks import (
    require_bool,
    require_generator,
    require_instance,
    require_one_of,
    require_positive_int,
    require_positive_number,
    require_seed,
    require_token_ids,
)
from course_utils.data.corpus import sample_windows
from course_utils.language import _
from course_utils.nn.blocks import EncoderBlock
from course_utils.nn.kv_cache import require_next_tokens
from course_utils.nn.llama_parts import RMSNorm
from course_utils.nn.masks import band_mask, causal_mask
from course_utils.nn.training import fit


class GPT(nn.Module):
    """A GPT: embeddings, ``num_layers`` pre-LN blocks, final LayerNorm, tied readout.

    Args:
        vocab_size: how many token ids there are.
        max_len: how many positions the model can see (one learned vector each).
        d_model, num_heads, num_layers: the sizes (``d_k = d_model / num_heads``).
        d_ff: the FFN's hidden width, ``4 * d_model`` by default as in GPT-2.
        window: ``None`` (every layer attends to the whole past, GPT-2's layout), an int W
            (every layer a sliding window of W positions, itself included: lesson 17's
            :func:`~course_utils.nn.masks.band_mask`), or a list of ``num_layers`` entries,
            one per layer, each an int or ``None`` for a global layer (e.g. Gemma 3's five
            local layers per global one). A windowed layer's cache keeps at most W positions.
        sink, gate: every layer's attention gets a learned sink logit per head (gpt-oss) or
            a sigmoid output gate (Qwen3-Next); see
            :class:`~course_utils.nn.attention.MultiHeadAttention`. Off by default.
        norm_first, norm, activation, rope_base: lesson 14's ablation turns this GPT into
            a Llama one part at a time: ``norm_first=False`` post-norm blocks, ``norm="rms"``
            RMSNorm (blocks and final norm), ``activation="swiglu"`` a SwiGLU FFN of width
            ``d_ff``, ``rope_base`` RoPE in every attention instead of the learned position
            vectors (the model then has no ``position_embedding``: it is ``None``). The
            defaults (True, "layer", "gelu", None) are GPT-2's, the model described above.
        seed: ``None`` (the initial weights come from torch's global random state, as any
            module's) or an int: they are drawn from torch's random state seeded with
            ``seed``, and the global state is left as it was (``torch.random.fork_rng``).
            ``GPT(..., seed=s)`` has the weights of ``torch.manual_seed(s); GPT(...)``.

    ``forward(tokens, cache=None, return_weights=False)``: tokens ``(batch, n_new)`` ids
    give logits ``(batch, n_new, vocab_size)``. With a :class:`~course_utils.nn.kv_cache.KVCache`
    the tokens continue the cached sequence (positions ``cache.seq_len ..``) and every block
    appends its keys and values. ``return_weights=True`` returns ``(logits, weights)`` with
    every block's attention, ``(batch, num_layers, num_heads, n_new, n_k)`` (``n_k =
    cache.seq_len + n_new``, before the call).

    Used in lessons 12, 13, 14, 16 and 17.
    """

    def __init__(self, vocab_size: int, max_len: int, d_model: int, num_heads: int,
                 num_layers: int, d_ff: int | None = None, window=None,
                 sink: bool = False, gate: bool = False, norm_first: bool = True,
                 norm: str = "layer", activation: str = "gelu",
                 rope_base: float | None = None, seed: int | None = None):
        super().__init__()
        if seed is not None:
            require_seed("seed", seed)
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(seed)
                self._build(vocab_size, max_len, d_model, num_heads, num_layers, d_ff, window,
                            sink, gate, norm_first, norm, activation, rope_base)
        else:
            self._build(vocab_size, max_len, d_model, num_heads, num_layers, d_ff, window,
                        sink, gate, norm_first, norm, activation, rope_base)

    def _build(self, vocab_size, max_len, d_model, num_heads, num_layers, d_ff, window, sink,
               gate, norm_first, norm, activation, rope_base) -> None:
        """Check the sizes and make the parts, drawing their initial weights."""
        self.vocab_size = require_positive_int("vocab_size", vocab_size)
        self.max_len = require_positive_int("max_len", max_len)
        require_positive_int("d_model", d_model)
        self.num_layers = require_positive_int("num_layers", num_layers)
        d_ff = 4 * d_model if d_ff is None else d_ff
        self.windows = _layer_windows(window, num_layers)  # one int or None per layer
        require_bool("sink", sink)
        require_bool("gate", gate)
        require_bool("norm_first", norm_first)
        require_one_of("norm", norm, ["layer", "rms"])
        require_one_of("activation", activation, ["gelu", "swiglu"])
        self.token_embedding = nn.Embedding(vocab_size, d_model)
        # RoPE (lesson 14's ablation) puts the positions into the attention instead
        self.position_embedding = (nn.Embedding(max_len, d_model) if rope_base is None
                                   else None)
        # GPT-2's initial scale. nn.Embedding starts at N(0, 1), and through the tied readout
        # such vectors would give logits of size ~sqrt(d_model): a confident model at step 0.
        nn.init.normal_(self.token_embedding.weight, std=0.02)
        if self.position_embedding is not None:
            nn.init.normal_(self.position_embedding.weight, std=0.02)
        self.blocks = nn.ModuleList(
            EncoderBlock(d_model, num_heads, d_ff, norm_first=norm_first, activation=activation,
                         sink=sink, gate=gate, norm=norm, rope_base=rope_base)
            for _layer in range(num_layers)
        )
        self.final_norm = nn.LayerNorm(d_model) if norm == "layer" else RMSNorm(d_model, eps=1e-5)

    def forward(self, tokens, cache=None, return_weights: bool = False):
        tokens, past = require_next_tokens(tokens, cache, self.vocab_size, self.max_len)
        require_bool("return_weights", return_weights)
        n_new = tokens.shape[1]
        positions = torch.arange(past, past + n_new, device=tokens.device)
        # (batch, n_new, d_model): what each token is, plus where it is
        x = self.token_embedding(tokens)
        if self.position_embedding is not None:  # None: RoPE, inside every attention
            x = x + self.position_embedding(positions)
        mask = causal_mask(n_new, past + n_new, device=tokens.device)  # (n_new, n_k)
        all_weights = []
        for layer, block in enumerate(self.blocks):
            window, layer_mask = self.windows[layer], mask
            if window is not None:
                # A sliding window: the keys are the positions this layer's cache holds
                # (at most `window`), then the new ones.
                held = 0 if cache is None else cache.layer_held(layer)
                layer_mask = band_mask(n_new, held + n_new, window=window,
                                       device=tokens.device)  # (n_new, held + n_new)
            x, weights = block(x, mask=layer_mask, cache=cache, layer=layer,
                               window=window)  # lesson 07's block
            all_weights.append(weights)  # (batch, num_heads, n_new, n_k)
        # Tied readout: the token embedding (vocab_size, d_model) is the output matrix too.
        logits = F.linear(self.final_norm(x), self.token_embedding.weight)
        if return_weights:
            if len({w.shape for w in all_weights}) > 1:
                raise ValueError(_("return_weights=True with a cache needs every layer to hold "
                                   "the same keys; windowed layers hold fewer, got n_k = {n_k}")
                                 .format(n_k=[w.shape[-1] for w in all_weights]))
            return logits, torch.stack(all_weights, dim=1)
        return logits  # (batch, n_new, vocab_size)


def _layer_windows(window, num_layers: int) -> tuple[int | None, ...]:
    """``GPT``'s ``window`` argument as one entry per layer: an int W or None (global)."""
    if window is None or (isinstance(window, int) and not isinstance(window, bool)):
        window = [window] * num_layers
    if not isinstance(window, (list, tuple)):
        raise TypeError(_("window should be None, a positive int or a list of num_layers ints "
                          "or Nones, got {kind} {window}").format(kind=type(window).__name__,
                                                                  window=repr(window)))
    if len(window) != num_layers:
        raise ValueError(_("window should list one entry per layer, num_layers={num_layers}, "
                           "got {count}: {window}").format(num_layers=num_layers,
                                                           count=len(window),
                                                           window=repr(list(window))))
    for layer, entry in enumerate(window):
        if entry is not None:
            require_positive_int(f"window[{layer}]", entry)
    return tuple(window)


def _require_one_window(name: str, tokens: torch.Tensor, model: GPT) -> None:
    """A token stream ``(num_tokens,)`` must hold one window: ``max_len`` inputs and the next."""
    if len(tokens) < model.max_len + 1:
        raise ValueError(_("{name} (num_tokens,) = {shape} is shorter than one "
                           "window of max_len + 1 = {needed} tokens")
                         .format(name=name, shape=tuple(tokens.shape), needed=model.max_len + 1))


@dataclass(frozen=True)
class TrainingCurve:
    """What :func:`train_on_text` returns when given held-out tokens.

    ``losses``: the loss of every step's batch (what it returns without them);
    ``steps``: how many steps were done at each evaluation (0 first, ``steps`` last);
    ``train``, ``validation``: the model's loss at those moments on the same fixed windows
    of the training and of the held-out tokens (:func:`text_loss`).

    Used in lesson 12.
    """

    losses: list[float]
    steps: list[int]
    train: list[float]
    validation: list[float]


def text_loss(model: GPT, tokens, max_windows: int | None = None) -> float:
    """The mean next-token loss (nats per token) of ``model`` on ``tokens`` ``(num_tokens,)``.

    The stream is cut into non-overlapping windows of ``model.max_len`` inputs (each scored
    on the next ``max_len`` tokens); ``max_windows`` keeps that many of them, evenly spaced
    along the stream (all by default). No random draw: the same tokens, the same windows.

    Used in lesson 12.
    """
    require_instance("model", model, GPT, "a course_utils.models.gpt.GPT")
    tokens = require_token_ids("tokens", tokens, model.vocab_size, "(num_tokens,)")
    if max_windows is not None:
        require_positive_int("max_windows", max_windows)
    _require_one_window("tokens", tokens, model)
    seq_len = model.max_len
    windows = (len(tokens) - 1) // seq_len
    starts = torch.arange(windows) * seq_len  # (windows,)
    if max_windows is not None and max_windows < windows:
        starts = starts[torch.linspace(0, windows - 1, max_windows).long()]
    offsets = torch.arange(seq_len)
    inputs, targets = tokens[starts[:, None] + offsets], tokens[starts[:, None] + offsets + 1]
    with torch.no_grad():
        logits = model(inputs)  # (windows, seq_len, vocab_size)
        return F.cross_entropy(logits.reshape(-1, model.vocab_size), targets.reshape(-1)).item()


def train_on_text(model: GPT, tokens, steps: int, generator: torch.Generator,
                  batch_size: int = 32, lr: float = 5e-3, validation_tokens=None,
                  eval_every: int = 50, eval_windows: int = 256):
    """Train ``model`` on a token stream as lesson 12 does; return the loss of every step.

    Each of the ``steps`` Adam steps (:func:`course_utils.nn.training.fit`) draws ``batch_size``
    windows of ``model.max_len + 1`` consecutive tokens from ``tokens`` ``(num_tokens,)``
    with ``generator`` (:func:`course_utils.data.corpus.sample_windows`); the model reads
    ``window[:, :-1]`` and every position is scored (cross-entropy) on the next token,
    ``window[:, 1:]``. The same generator state and initial weights give the same model.

    With ``validation_tokens`` ``(num_val_tokens,)`` (held-out text) it returns a
    :class:`TrainingCurve` instead of the list: before training, every ``eval_every`` steps
    and at the end, the loss on ``eval_windows`` fixed windows of the training tokens and of
    the held-out ones (:func:`text_loss`). The evaluations draw nothing at random, so the
    model trained is the same with or without them.

    Used in lessons 12, 13 and 17.
    """
    require_instance("model", model, GPT, "a course_utils.models.gpt.GPT")
    tokens = require_token_ids("tokens", tokens, model.vocab_size, "(num_tokens,)")
    require_positive_int("steps", steps)
    if require_generator("generator", generator) is None:
        raise TypeError(_("generator should be a torch.Generator (e.g. "
                          "torch.Generator().manual_seed(0)): batches are drawn with it, never "
                          "with the global random state"))
    require_positive_int("batch_size", batch_size)
    require_positive_number("lr", lr)
    _require_one_window("tokens", tokens, model)
    require_positive_int("eval_every", eval_every)
    require_positive_int("eval_windows", eval_windows)
    if validation_tokens is not None:
        validation_tokens = require_token_ids("validation_tokens", validation_tokens,
                                              model.vocab_size, "(num_val_tokens,)")
        _require_one_window("validation_tokens", validation_tokens, model)

    def loss_at_step(step: int) -> torch.Tensor:
        window = sample_windows(tokens, batch_size, model.max_len, generator)
        logits = model(window[:, :-1])  # (batch, max_len, vocab_size)
        return F.cross_entropy(logits.reshape(-1, model.vocab_size), window[:, 1:].reshape(-1))

    if validation_tokens is None:
        return fit(model, loss_at_step, steps, lr=lr)
    evaluated: list[int] = []
    train: list[float] = []
    validation: list[float] = []

    def evaluate(steps_done: int) -> None:  # fixed windows: no draw from `generator`
        evaluated.append(steps_done)
        train.append(text_loss(model, tokens, eval_windows))
        validation.append(text_loss(model, validation_tokens, eval_windows))

    losses = fit(model, loss_at_step, steps, lr=lr, evaluate=evaluate, eval_every=eval_every)
    return TrainingCurve(losses, evaluated, train, validation)
