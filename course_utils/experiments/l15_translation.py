"""Lesson 15's measurements of a trained :class:`~course_utils.models.translator.Translator`.

Exact-match accuracy (greedy, free-running) and its teacher-forced counterpart; the
cross-attention rows scored against the alignment the data generator knows; cross-attention
ablated; a small beam search against greedy decoding. Every function takes a list of numbers
and computes in batches, without gradients.
"""

from __future__ import annotations

import torch

from course_utils.checks import require_instance, require_one_of, require_positive_int
from course_utils.data.number_words import alignment, chinese_numerals, english_tokens
from course_utils.language import _
from course_utils.models.translator import (
    BOS,
    EOS,
    PAD,
    Translator,
    characters,
    source_batch,
    target_batch,
)

LESSON_RECIPE = {"d_model": 48, "num_heads": 4, "num_layers": 2}
TRAINING = {"steps": 600, "batch_size": 48, "lr": 5e-3}


def _require_inputs(model, numbers) -> list[int]:
    require_instance("model", model, Translator, _("a course_utils.models.translator.Translator"))
    if isinstance(numbers, (int, str)) or not hasattr(numbers, "__len__") or not len(numbers):
        raise TypeError(_(
            "numbers should be a non-empty list of ints, got {kind}"
        ).format(kind=type(numbers).__name__))
    return list(numbers)


@torch.no_grad()
def greedy_translations(model: Translator, numbers, cross_reads=None) -> list[str]:
    """What ``model`` writes for each number, greedy with its KV cache.

    Used in lesson 15.
    """
    numbers = _require_inputs(model, numbers)
    src, mask = source_batch(numbers)
    out, _weights = model.translate(src, mask, cross_reads=cross_reads)
    return [characters(row[1:]) for row in out]


def exact_match(model: Translator, numbers, cross_reads=None) -> float:
    """Share of ``numbers`` whose greedy translation is exactly right (free-running).

    Used in lesson 15.
    """
    numbers = _require_inputs(model, numbers)
    wrote = greedy_translations(model, numbers, cross_reads)
    return sum(w == chinese_numerals(n) for w, n in zip(wrote, numbers, strict=True)) / len(
        numbers)


@torch.no_grad()
def teacher_forced_exact_match(model: Translator, numbers) -> float:
    """Share of ``numbers`` whose every next character (and the end token) is the model's
    top choice when it is fed the true characters before it (teacher forcing).

    Used in lesson 15.
    """
    numbers = _require_inputs(model, numbers)
    src, mask = source_batch(numbers)
    tgt_in, labels = target_batch(numbers)
    logits, _weights = model(src, tgt_in, mask)
    right = (logits.argmax(-1) == labels) | (labels == PAD)  # (batch, n_tgt)
    return right.all(dim=1).sum().item() / len(numbers)


@torch.no_grad()
def cross_weights_of(model: Translator, number: int) -> torch.Tensor:
    """The cross-attention weights ``(num_layers, heads, n_chars, n_src)`` while ``model``
    writes ``number``'s true characters (teacher forced): row ``t`` is the query that
    produces character ``t``.

    Used in lesson 15.
    """
    require_instance("model", model, Translator, _("a course_utils.models.translator.Translator"))
    src, mask = source_batch([number])
    tgt_in, _tgt_out = target_batch([number])
    _logits, weights = model(src, tgt_in, mask)  # (1, layers, heads, n_chars + 1, n_src)
    return weights[0, :, :, :-1]


@torch.no_grad()
def alignment_agreement(model: Translator, numbers) -> tuple[torch.Tensor, float]:
    """Per decoder layer and head ``(num_layers, heads)``: the share of output characters
    (those an English word produced; the zero ling has none) whose strongest source token in the
    cross-attention row is the word that produced them, teacher forced. Also the share a
    head would reach by picking a real source token at random (the chance level).

    Used in lesson 15.
    """
    numbers = _require_inputs(model, numbers)
    src, mask = source_batch(numbers)
    tgt_in, _tgt_out = target_batch(numbers)
    _logits, weights = model(src, tgt_in, mask)  # (batch, layers, heads, n_tgt, n_src)
    strongest = weights.argmax(-1)  # (batch, layers, heads, n_tgt)
    hits = torch.zeros(weights.shape[1:3])
    total, chance = 0, 0.0
    for b, n in enumerate(numbers):
        n_src = len(english_tokens(n))
        for t, word in enumerate(alignment(n)):
            if word is None:
                continue
            hits += (strongest[b, :, :, t] == word).float()
            total += 1
            chance += 1 / n_src
    return hits / total, chance / total


def score_alignment(weights, links) -> float:
    """The alignment score of one sentence: among characters with a producing word
    (``links[t]`` not None), the share whose row of ``weights`` ``(n_chars, n_src)`` peaks
    at that word.

    Used in lesson 15.
    """
    if not isinstance(weights, torch.Tensor) or weights.dim() != 2:
        raise ValueError(_(
            "weights should be a (n_chars, n_src) tensor, got {got}"
        ).format(got=getattr(weights, 'shape', type(weights).__name__)))
    if len(links) != weights.shape[0]:
        raise ValueError(_(
            "links should have one entry per row of weights ({weights_shape}), got {n_links}"
        ).format(weights_shape=weights.shape[0], n_links=len(links)))
    scored = [(t, w) for t, w in enumerate(links) if w is not None]
    if not scored:
        raise ValueError(_("links should hold at least one word index (not None)"))
    return sum(int(weights[t].argmax()) == w for t, w in scored) / len(scored)


@torch.no_grad()
def mean_reads(model: Translator, numbers) -> torch.Tensor:
    """The mean of what each decoder block's cross-attention adds, ``(num_layers, d_model)``,
    over every character of ``numbers``: the read of an average sentence.

    Used in lesson 15.
    """
    numbers = _require_inputs(model, numbers)
    src, mask = source_batch(numbers)
    tgt_in, _tgt_out = target_batch(numbers)
    return model.mean_cross_reads(src, tgt_in, mask)


@torch.no_grad()
def beam_translations(model: Translator, numbers, beam: int = 3) -> list[str]:
    """Beam search of width ``beam``: keep the ``beam`` most likely prefixes (sum of log
    probabilities) at each step; return the most likely finished one per number (with
    ``beam=1``, greedy decoding).

    Used in lesson 15.
    """
    numbers = _require_inputs(model, numbers)
    beam = require_positive_int("beam", beam)
    results = []
    for n in numbers:
        src, mask = source_batch([n])
        _memory, memory_kv = model.encode(src, mask)
        alive = [((BOS,), 0.0)]
        finished: list[tuple[tuple[int, ...], float]] = []
        for _step in range(model.max_len):
            prefixes = torch.tensor([p for p, _score in alive])
            kv = [(k.expand(len(alive), -1, -1, -1), v.expand(len(alive), -1, -1, -1))
                  for k, v in memory_kv]
            logits, _cache = model.decode(prefixes, kv, mask.expand(len(alive), -1))
            logp = torch.log_softmax(logits[:, -1], dim=-1)  # (alive, tgt_vocab)
            options = [(p + (c,), s + float(logp[i, c]))
                       for i, (p, s) in enumerate(alive)
                       for c in logp[i].topk(beam).indices.tolist()]
            options.sort(key=lambda o: -o[1])
            alive = []
            for p, s in options[:beam]:  # the beam most likely continuations
                (finished if p[-1] == EOS else alive).append((p, s))
            # log probabilities only fall: stop once no live prefix can beat a finished one
            best_finished = max((s for _prefix, s in finished), default=float("-inf"))
            alive = [(p, s) for p, s in alive if s > best_finished]
            if not alive:
                break
        best = max(finished or alive, key=lambda o: o[1])[0]
        results.append(characters(best[1:]))
    return results


# The ways ablated_exact_match switches cross-attention off.
ABLATION_MODES = ("zero", "mean")


def ablated_exact_match(model: Translator, numbers, mode: str, reference=None) -> float:
    """Exact match with every decoder block's cross-attention read replaced: ``"zero"``
    (nothing read) or ``"mean"`` (the average read over ``reference`` numbers, default
    ``numbers``): what the decoder can write without reading this sentence.

    Used in lesson 15.
    """
    numbers = _require_inputs(model, numbers)
    require_one_of("mode", mode, ABLATION_MODES)
    reads = "zero" if mode == "zero" else mean_reads(model, reference or numbers)
    return exact_match(model, numbers, cross_reads=reads)


@torch.no_grad()
def character_accuracy(model: Translator, numbers, teacher_forced: bool) -> float:
    """Share of target positions (each character and the end token) the model gets right.

    ``teacher_forced=True``: its top choice at each position given the true characters
    before it. ``False``: the character it wrote there itself, free running (greedy), so an
    early mistake shifts or changes what follows.

    Used in lesson 15.
    """
    numbers = _require_inputs(model, numbers)
    if not isinstance(teacher_forced, bool):
        raise TypeError(_(
            "teacher_forced should be True or False, got {teacher_forced!r}"
        ).format(teacher_forced=teacher_forced))
    src, mask = source_batch(numbers)
    tgt_in, labels = target_batch(numbers)
    real = labels != PAD  # (batch, n_tgt)
    if teacher_forced:
        logits, _weights = model(src, tgt_in, mask)
        guess = logits.argmax(-1)
    else:
        out, _weights = model.translate(src, mask)
        guess = torch.full_like(labels, -1)
        width = min(labels.shape[1], out.shape[1] - 1)
        guess[:, :width] = out[:, 1:width + 1]
    return ((guess == labels) & real).sum().item() / real.sum().item()
