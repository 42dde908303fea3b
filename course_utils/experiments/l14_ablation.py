"""Lesson 14's ablation: why Llama changed GPT-2's block, one change at a time.

Lesson 12's small character GPT (:class:`course_utils.models.gpt.GPT`) is built as a Llama
(pre-norm blocks with RMSNorm, a SwiGLU feed-forward, RoPE in every attention) and four more
times with one of those changes reverted (:data:`VARIANTS`):

- ``"LayerNorm"``: LayerNorm instead of RMSNorm (blocks and final norm);
- ``"GELU MLP"``: GPT-2's two-layer GELU MLP of width ``4 · d_model`` instead of SwiGLU;
- ``"learned positions"``: a learned position vector added to each token instead of RoPE;
- ``"post-norm"``: ``norm(x + sublayer(x))`` instead of ``x + sublayer(norm(x))``.

The parameter budget: SwiGLU has three bias-free matrices where the MLP has two, so its
hidden width is ``round(8 · d_model / 3)`` (Llama's two thirds of ``4 · d_model``): 171 for
``d_model = 64``, 32 832 weights against the MLP's 33 088 (biases included). Learned
positions add ``max_len · d_model`` weights, LayerNorm a bias per norm; nothing else differs.

Every variant of one seed starts from ``torch.manual_seed(seed)`` and sees the same batches
in the same order (a generator seeded with ``seed``), the same steps and learning rate, so
the variants differ in the reverted part only. :func:`llama_changes_ablation` returns the
losses of one seed; the lesson runs it over its seeds and reads the differences, whatever
they say.
"""

from __future__ import annotations

import torch

from course_utils.checks import require_one_of, require_positive_int, require_seed
from course_utils.data.corpus import (
    TEXTS,
    CharTokenizer,
    load_text,
    train_validation_split,
)
from course_utils.experiments.l18_cache_budget import validation_loss
from course_utils.models.gpt import GPT, train_on_text

BASELINE = "Llama"
# Each variant's GPT options: the baseline's, with one of them reverted to GPT-2's.
_LLAMA = {"norm": "rms", "activation": "swiglu", "rope_base": 10000.0, "norm_first": True}
VARIANTS = {
    BASELINE: _LLAMA,
    "LayerNorm": {**_LLAMA, "norm": "layer"},
    "GELU MLP": {**_LLAMA, "activation": "gelu"},
    "learned positions": {**_LLAMA, "rope_base": None},
    "post-norm": {**_LLAMA, "norm_first": False},
}
# Lesson 12's model and recipe: 2 layers of width 64, 4 heads, windows of 32 characters.
D_MODEL, NUM_HEADS, NUM_LAYERS, MAX_LEN = 64, 4, 2, 32
BATCH_SIZE, LR = 32, 5e-3
TRAIN_TAIL = 50  # the training loss reported: the mean over the last TRAIN_TAIL steps


def swiglu_width(d_model: int) -> int:
    """SwiGLU's hidden width with the weights of a ``4 · d_model`` MLP: ``round(8 d_model / 3)``.

    Three ``d_model x width`` matrices hold about as many weights as two ``d_model x 4
    d_model`` ones (171 for ``d_model = 64``).

    Used in lesson 14.
    """
    return round(8 * require_positive_int("d_model", d_model) / 3)


def ablation_model(variant: str, vocab_size: int, seed: int) -> GPT:
    """The GPT of ``variant`` (a key of :data:`VARIANTS`), initialised from ``seed``.

    Sizes: ``D_MODEL``, ``NUM_HEADS``, ``NUM_LAYERS``, ``MAX_LEN``; the FFN's width is
    :func:`swiglu_width` for SwiGLU and ``4 · d_model`` for the GELU MLP. The global random
    state is left as it was. The model maps tokens ``(batch, n_new)`` to logits ``(batch,
    n_new, vocab_size)``.

    Used in lesson 14.
    """
    options = VARIANTS[require_one_of("variant", variant, tuple(VARIANTS))]
    require_positive_int("vocab_size", vocab_size)
    d_ff = swiglu_width(D_MODEL) if options["activation"] == "swiglu" else 4 * D_MODEL
    with torch.random.fork_rng():
        torch.manual_seed(require_seed("seed", seed))
        return GPT(vocab_size, MAX_LEN, D_MODEL, NUM_HEADS, NUM_LAYERS, d_ff=d_ff, **options)


def llama_changes_ablation(seed: int, steps: int = 150, text: str = "shakespeare"
                           ) -> dict[str, dict[str, float]]:
    """Train every variant of :data:`VARIANTS` for one seed; return its losses.

    The text (``"shakespeare"`` or ``"tang_poems"``, lesson 12's) is split as lesson 12
    splits it, the last 10 % held out. Each variant is trained ``steps`` Adam steps on
    ``BATCH_SIZE`` windows ``(batch, MAX_LEN + 1)`` drawn with a generator seeded with
    ``seed`` (the same windows for every variant), from initial weights drawn from
    ``seed``. Returns ``{variant: {"validation": loss, "train": loss, "parameters":
    count}}``: the mean cross-entropy (nats per character) over every held-out window, the
    mean training loss of the last ``TRAIN_TAIL`` steps, and the model's parameter count.

    Used in lesson 14.
    """
    require_seed("seed", seed)
    require_positive_int("steps", steps)
    characters = load_text(require_one_of("text", text, TEXTS))
    tokenizer = CharTokenizer.from_text(characters)
    tokens = torch.tensor(tokenizer.encode(characters))  # (num_tokens,)
    train_tokens, validation_tokens = train_validation_split(tokens, 0.1)
    results = {}
    for variant in VARIANTS:
        model = ablation_model(variant, tokenizer.vocab_size, seed)
        losses = train_on_text(model, train_tokens, steps, torch.Generator().manual_seed(seed),
                               batch_size=BATCH_SIZE, lr=LR)
        tail = losses[-TRAIN_TAIL:]
        results[variant] = {"validation": validation_loss(model, validation_tokens),
                            "train": sum(tail) / len(tail),
                            "parameters": sum(p.numel() for p in model.parameters())}
    return results
