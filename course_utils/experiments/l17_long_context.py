"""Lesson 17's experiments: what sliding windows, global layers and attention sinks buy and lose.

- :func:`measured_reach`: how far back the last position of a real (untrained) ``GPT`` can
  read, found by changing one earlier token at a time and watching its logits;
- :func:`fact_lookup_batch`, :func:`train_fact_lookup`, :func:`lookup_accuracy_by_distance`:
  a synthetic "find the value of this key" task, trained for a fixed budget under each
  layout and scored against the distance between the query and its fact;
- :func:`masked_nll`: a Llama's next-token loss under any attention mask, which is what a
  windowed cache (with or without kept first tokens, StreamingLLM's sinks) computes.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from course_utils.checks import (
    require_bool_mask,
    require_generator,
    require_instance,
    require_int_in_range,
    require_positive_int,
    require_token_ids,
)
from course_utils.language import _
from course_utils.models.gpt import GPT
from course_utils.models.llama import Llama
from course_utils.nn.training import fit


@torch.no_grad()
def measured_reach(model: GPT, seq_len: int, generator: torch.Generator) -> int:
    """How many positions back the last of ``seq_len`` tokens can read, measured.

    Draws one random sequence, then changes one token at a time (positions ``0 ..
    seq_len - 2``) and reruns ``model``: the reach is ``seq_len - 1 - j`` for the earliest
    position ``j`` whose change moves the last position's logits. ``seq_len - 1`` means it
    reads the whole sequence. One batch of ``seq_len`` sequences, so one forward pass.

    Used in lesson 17.
    """
    require_instance("model", model, GPT, "a course_utils.models.gpt.GPT")
    require_int_in_range("seq_len", seq_len, 2, model.max_len)
    if require_generator("generator", generator) is None:
        raise TypeError(_("generator should be a torch.Generator: the sequence is drawn with it"))
    model.eval()
    tokens = torch.randint(model.vocab_size, (seq_len,), generator=generator)
    changed = tokens.repeat(seq_len, 1)  # (seq_len, seq_len): row j has token j changed
    rows = torch.arange(seq_len)
    changed[rows, rows] = (tokens + 1) % model.vocab_size
    logits = model(torch.cat((tokens[None], changed[:-1])))[:, -1]  # (seq_len, vocab_size)
    moved = (logits[1:] - logits[0]).abs().amax(dim=-1) > 1e-6  # (seq_len - 1,)
    earliest = int(moved.nonzero()[0]) if moved.any() else seq_len - 1
    return seq_len - 1 - earliest


# ------------------------------------------------------------------ find the value of a key
LOOKUP_KEYS = 4      # key ids
LOOKUP_VALUES = 8    # value ids
LOOKUP_FILLER = 1    # filler ids: the haystack is one blank token, repeated
LOOKUP_FACTS = 1     # facts per sequence (more than one makes the task much slower to learn)


QUESTIONS = LOOKUP_KEYS * LOOKUP_VALUES  # first id of "what is the value of key k?"
ANSWERS = QUESTIONS + LOOKUP_KEYS  # first id of "the value is v"
FILLER = ANSWERS + LOOKUP_VALUES  # first filler id


def lookup_vocab_size() -> int:
    """Token ids of the look-up task: one per (key, value) fact, per question, per answer,
    per filler token.

    Used in lesson 17.
    """
    return FILLER + LOOKUP_FILLER


def fact_lookup_batch(batch_size: int, context: int, generator: torch.Generator):
    """Sequences of ``context`` filler tokens holding ``LOOKUP_FACTS`` facts, then a question.

    A fact is one token, "key k has value v" (id ``k · LOOKUP_VALUES + v``), at a random
    position; the facts have different keys. The last token asks for one of the keys (id
    ``QUESTIONS + k``); the model answers on the ids ``ANSWERS + v``. Returns
    ``(tokens, answers, distances)``: tokens ``(batch, context + 1)``, the value asked for
    ``(batch,)`` (0 .. LOOKUP_VALUES - 1) and how far back its fact sits from the question
    ``(batch,)``.

    Used in lesson 17.
    """
    require_positive_int("batch_size", batch_size)
    require_int_in_range("context", context, LOOKUP_FACTS)
    if require_generator("generator", generator) is None:
        raise TypeError(_("generator should be a torch.Generator: the batch is drawn with it"))
    tokens = torch.randint(LOOKUP_FILLER, (batch_size, context + 1),
                           generator=generator) + FILLER
    keys = torch.stack([torch.randperm(LOOKUP_KEYS, generator=generator)[:LOOKUP_FACTS]
                        for _row in range(batch_size)])  # (batch, facts)
    values = torch.randint(LOOKUP_VALUES, (batch_size, LOOKUP_FACTS), generator=generator)
    slots = torch.stack([torch.randperm(context, generator=generator)[:LOOKUP_FACTS]
                         for _row in range(batch_size)])  # (batch, facts)
    tokens.scatter_(1, slots, keys * LOOKUP_VALUES + values)
    asked = torch.randint(LOOKUP_FACTS, (batch_size, 1), generator=generator)
    tokens[:, -1] = QUESTIONS + keys.gather(1, asked)[:, 0]
    return tokens, values.gather(1, asked)[:, 0], context - slots.gather(1, asked)[:, 0]


def _lookup_logits(model: GPT, tokens) -> torch.Tensor:
    """The model's scores of the LOOKUP_VALUES answers at the question ``(batch, values)``."""
    logits = model(tokens)[:, -1]  # (batch, vocab_size)
    return logits[:, ANSWERS:ANSWERS + LOOKUP_VALUES]  # the answer ids


def train_fact_lookup(window, context: int, steps: int, generator: torch.Generator,
                      d_model: int = 32, num_heads: int = 2, batch_size: int = 32,
                      lr: float = 6e-3) -> GPT:
    """A ``GPT(..., window=window)`` of 2 layers trained ``steps`` Adam steps on the task.

    ``window`` is ``GPT``'s: an int for every layer or a list of 2 (None = global). The
    generator draws the initial weights' seed and every batch, so the same generator state
    gives the same model; every layout gets the same sizes, steps and batches (one budget).

    Used in lesson 17.
    """
    require_positive_int("steps", steps)
    if require_generator("generator", generator) is None:
        raise TypeError(_("generator should be a torch.Generator: weights and batches use it"))
    torch.manual_seed(int(torch.randint(2**31, (1,), generator=generator)))
    model = GPT(lookup_vocab_size(), context + 1, d_model, num_heads, 2, window=window)

    def loss_at_step(step: int) -> torch.Tensor:
        tokens, answers, _distances = fact_lookup_batch(batch_size, context, generator)
        return F.cross_entropy(_lookup_logits(model, tokens), answers)

    fit(model, loss_at_step, steps, lr=lr)
    return model.eval()


@torch.no_grad()
def lookup_accuracy_by_distance(model: GPT, context: int, edges, generator: torch.Generator,
                                batch_size: int = 2000) -> list[float]:
    """Accuracy of ``model`` on fresh look-ups, by distance from question to fact.

    ``edges`` (ascending ints) make the bins ``[edges[i], edges[i + 1])``; returns one
    accuracy per bin (NaN for an empty bin). Chance is ``1 / LOOKUP_VALUES``.

    Used in lesson 17.
    """
    require_instance("model", model, GPT, "a course_utils.models.gpt.GPT")
    edges = [require_int_in_range("edges", edge, 1) for edge in edges]
    if len(edges) < 2 or edges != sorted(set(edges)):
        raise ValueError(_("edges should be at least two ascending distinct ints, got {edges}")
                         .format(edges=edges))
    tokens, answers, distances = fact_lookup_batch(batch_size, context, generator)
    right = (_lookup_logits(model.eval(), tokens).argmax(dim=-1) == answers).float()
    return [right[(distances >= low) & (distances < high)].mean().item()
            for low, high in zip(edges[:-1], edges[1:], strict=False)]


# ------------------------------------------------------------------ sinks in a real model
@torch.no_grad()
def masked_nll(model: Llama, tokens, mask, start: int = 0) -> float:
    """Mean next-token loss (nats) of ``model`` reading ``tokens`` ``(seq_len,)`` under ``mask``.

    ``mask`` bool ``(seq_len, seq_len)`` (True = may attend) replaces the causal mask in
    every layer: a sliding window ``band_mask(seq_len, window=W)`` is what a cache that
    keeps the last W positions computes, ``band_mask(..., sinks=4)`` one that also keeps the
    first 4. Scored on predicting tokens ``start + 1 .. seq_len - 1``.

    Used in lesson 17.
    """
    require_instance("model", model, Llama, "a course_utils.models.llama.Llama")
    tokens = require_token_ids("tokens", tokens, model.vocab_size, "(seq_len,)")
    seq_len = tokens.shape[0]
    require_bool_mask(mask, torch.Size((seq_len, seq_len)), "(seq_len, seq_len)")
    require_int_in_range("start", start, 0, seq_len - 2)
    model.eval()
    x = model.token_embedding(tokens[None])  # (1, seq_len, d_model)
    for block in model.blocks:
        x, _weights = block(x, mask=mask)
    logits = F.linear(model.final_norm(x), model.token_embedding.weight)[0]
    return F.cross_entropy(logits[start:-1], tokens[start + 1:]).item()
