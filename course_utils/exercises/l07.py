"""Lesson 07 exercises: a pre-LN block's forward pass, a permutation-equivariance test, and
the sinusoidal position table."""

from __future__ import annotations

import torch

from course_utils.exercises import (
    Exercise,
    Incorrect,
    as_bool,
    attempt,
    expect_close,
    expect_finite,
    expect_shape,
    reject_half_precision,
)
from course_utils.language import N_, _
from course_utils.nn.blocks import EncoderBlock
from course_utils.nn.positions import sinusoidal_positions


def _pre_ln_block_reference(block, x):
    """Pre-LN order: x + sublayer(norm(x)), first attention, then the FFN.

    block has .self_attn, .ffn, .norm1, .norm2; x is (batch, seq_len, d_model).
    """
    attended, _weights = block.self_attn(block.norm1(x))  # (batch, seq_len, d_model)
    x = x + attended  # the residual stream itself is never normalised
    return x + block.ffn(block.norm2(x))  # (batch, seq_len, d_model)


def _test_block() -> tuple[EncoderBlock, tuple[torch.Tensor, ...]]:
    """A block whose LayerNorms have non-trivial gains and shifts, so every misplaced norm shows,
    and two inputs (a second one, of other sizes, fails an answer hard-coded to the first)."""
    with torch.random.fork_rng():
        torch.manual_seed(7)
        block = EncoderBlock(16, 2, 32, norm_first=True)
        for norm in (block.norm1, block.norm2):
            torch.nn.init.uniform_(norm.weight, 0.5, 2.0)
            torch.nn.init.normal_(norm.bias)
        # Far from unit scale: normalising matters.
        inputs = 3 * torch.randn(2, 5, 16) + 1, 2 * torch.randn(3, 4, 16) - 1
    return block, inputs


def _other_block() -> tuple[EncoderBlock, torch.Tensor]:
    """Another width and head count, and one sentence of 7 tokens: nothing written for the
    first block's sizes passes."""
    with torch.random.fork_rng():
        torch.manual_seed(8)
        block = EncoderBlock(24, 3, 40, norm_first=True)
        for norm in (block.norm1, block.norm2):
            torch.nn.init.uniform_(norm.weight, 0.5, 2.0)
            torch.nn.init.normal_(norm.bias)
        return block, 4 * torch.randn(1, 7, 24) - 2


def _check_pre_ln_block(answer):
    block, inputs = _test_block()
    for x in inputs:
        _check_pre_ln_block_once(answer, block, x)
    _check_pre_ln_block_once(answer, *_other_block())


def _check_pre_ln_block_once(answer, block, x):
    with torch.no_grad():
        got = attempt(answer, block, x.clone())
        if isinstance(got, tuple):
            raise Incorrect(_(
                "return only the output tensor (batch, seq_len, d_model); block.self_attn returns "
                "(output, weights), so unpack it: attended, _ = block.self_attn(...)"))
        expect_shape(got, x.shape, _("the block's output"))
        if not got.is_floating_point():
            raise Incorrect(_(
                "{what} should be a floating-point tensor, got dtype {dtype}").format(
                what=_("the block's output"), dtype=got.dtype))
        expect_finite(got, _("the block's output"))
        n1, n2, ffn = block.norm1, block.norm2, block.ffn

        def attn(h):
            return block.self_attn(h)[0]

        h = n1(x + attn(x))
        post_ln = n2(h + ffn(h))
        h = n1(x) + attn(n1(x))
        normalised_residual = n2(h) + ffn(n2(h))
        no_residual = ffn(n2(attn(n1(x))))
        attention_half = x + attn(n1(x))
        no_norm2 = attention_half + ffn(attention_half)
        norm1_twice = attention_half + ffn(n1(attention_half))
        reference = _pre_ln_block_reference(block, x)
        normalised_output = n2(reference)
        h = x + attn(n2(x))
        swapped_norms = h + ffn(n1(h))
    if torch.equal(got.detach().double(), x.double()):
        raise Incorrect(_(
            "your function returns its input x unchanged: apply the two sublayers, x + "
            "attn(norm1(x)), then + ffn(norm2(x))"))
    reject_half_precision(got, reference, _("the block's output"))
    got = got.detach().double()  # any float dtype: the comparisons run in float64
    known_mistakes = (
        (post_ln, _(
            "this is the post-LN order, norm(x + sublayer(x)). Pre-LN normalises the sublayer's "
            "input instead: x + sublayer(norm(x))")),
        (normalised_residual, _(
            "the residual adds the normalised x. Keep the original x for the residual: x + "
            "attn(norm1(x)); only the sublayer sees norm(x)")),
        (no_residual, _(
            "there is no residual connection: add each sublayer's input back, x = x + "
            "sublayer(norm(x))")),
        (attention_half, _(
            "the output is the attention half only: the FFN sublayer, x + ffn(norm2(x)), is "
            "missing")),
        (no_norm2, _(
            "the FFN sees the un-normalised stream: normalise its input with norm2, x + "
            "ffn(norm2(x))")),
        (norm1_twice, _("norm1 is used before both sublayers: the FFN has its own, norm2")),
        (swapped_norms, _(
            "norm1 and norm2 are swapped: norm1 goes before attention, norm2 before the FFN")),
        (normalised_output, _(
            "the output is normalised at the end: a pre-LN block leaves the residual stream "
            "un-normalised (only the sublayer inputs are)")),
    )
    for wrong, reason in known_mistakes:
        if torch.allclose(got, wrong.double(), atol=1e-5):
            raise Incorrect(reason)
    expect_close(got, reference, _("the block's output"))


pre_ln_block = Exercise(
    title=N_("the pre-LN block's forward pass"),
    checker=_check_pre_ln_block,
    reference=_pre_ln_block_reference,
    hints=(
        N_(
            "Two sublayers, each as x = x + sublayer(norm(x)): attention with norm1, then the FFN "
            "with norm2."),
        N_("block.self_attn(h) returns (output, weights): keep the output only."),
    ),
)


def _is_permutation_equivariant_reference(fn, x, perm):
    """Does permuting the tokens of x permute fn's output the same way?

    x is (batch, seq_len, d_model), perm a reordering of range(seq_len).
    """
    permuted_then_fn = fn(x[:, perm])  # (batch, seq_len, d_model)
    fn_then_permuted = fn(x)[:, perm]
    # allclose, not equal: sums in another order may differ in the last bits.
    return torch.allclose(permuted_then_fn, fn_then_permuted)


def _verdict(answer, fn, x, perm) -> bool:
    return as_bool(attempt(answer, fn, x, perm), "is_permutation_equivariant(fn, x, perm)")


def _check_is_permutation_equivariant(answer):
    seq_len, d_model = 6, 16
    with torch.random.fork_rng():
        torch.manual_seed(3)
        block = EncoderBlock(d_model, 2, 32).double().eval()
        x = torch.randn(2, seq_len, d_model, dtype=torch.float64)  # batch != seq_len
        positions = sinusoidal_positions(seq_len, d_model).double()
    # Moves every token, and neither the first nor the last token to the place of the other.
    perm = torch.tensor([4, 0, 5, 2, 1, 3])
    # A float64 rounding-sized wobble, the same on every CPU (real rounding is not).
    wobble = torch.arange(seq_len, dtype=torch.float64)[:, None] * 1e-13  # (seq_len, 1)

    def doubled(x):
        return 2 * x

    def block_output(x):
        return block(x)[0]

    def block_output_with_rounding(x):
        return block(x)[0] + wobble

    def block_with_positions(x):
        return block(x + positions)[0]

    def block_with_faint_positions(x):  # not equivariant, but only by about 1e-3
        return block(x + 1e-3 * positions)[0]

    def reversed_tokens(x):  # same rows in another order: equal sums, equal sorted values
        return x.flip(1)

    def last_token_shifted(x):  # differs from an equivariant function at one position only
        shifted = x.clone()
        shifted[:, -1] += 1
        return shifted

    def second_sequence_shifted(x):  # equivariant on the first sequence of the batch only
        shifted = x.clone()
        shifted[1:, -1] += 1
        return shifted

    with torch.no_grad():
        if not _verdict(answer, doubled, x, perm):
            raise Incorrect(_(
                "fn(x) = 2 * x is equivariant, but your function says no: compare fn(x[:, perm]) "
                "with fn(x)[:, perm], the output permuted the same way"))
        for fn in (block_output, block_output_with_rounding):
            if not _verdict(answer, fn, x, perm):
                raise Incorrect(_(
                    "a block without positions is equivariant, but your function says no: outputs "
                    "computed in another order differ in the last bits, so compare them with "
                    "torch.allclose, not exactly (torch.equal or ==)"))
        if _verdict(answer, block_with_positions, x, perm):
            raise Incorrect(_(
                "a block with position encodings added is not equivariant (the outputs differ by "
                "far more than rounding), but your function says it is: compare the two outputs' "
                "values position by position with torch.allclose"))
        if _verdict(answer, block_with_faint_positions, x, perm):
            gap = (block_with_faint_positions(x[:, perm])
                   - block_with_faint_positions(x)[:, perm]).abs().max().item()
            raise Incorrect(_(
                "a block with faint position encodings (0.001 · positions) is not equivariant: "
                "its two outputs differ by up to {gap:.1g}, far more than rounding, but your "
                "function says it is. Your tolerance is too loose: torch.allclose's defaults "
                "(rtol=1e-05, atol=1e-08) tell rounding from a real difference").format(gap=gap))
        if _verdict(answer, reversed_tokens, x, perm):
            raise Incorrect(_(
                "fn(x) = x.flip(1) (reverse the tokens) is not equivariant, but your function "
                "says it is: comparing sums, sorted values or a permutation of the wrong axis "
                "cannot see the order; compare fn(x[:, perm]) with fn(x)[:, perm] element by "
                "element, permuting the tokens (dim 1)"))
        if _verdict(answer, last_token_shifted, x, perm):
            raise Incorrect(_(
                "a function that adds 1 to the last position only is not equivariant, but your "
                "function says it is: compare every position, not just some tokens"))
        if _verdict(answer, second_sequence_shifted, x, perm):
            raise Incorrect(_(
                "a function that adds 1 to the last position of the second sequence only is not "
                "equivariant, but your function says it is: compare every sequence of the batch, "
                "not only the first"))


is_permutation_equivariant = Exercise(
    title=N_("test a function for permutation equivariance"),
    checker=_check_is_permutation_equivariant,
    reference=_is_permutation_equivariant_reference,
    hints=(
        N_(
            "Run fn twice: once on the permuted tokens x[:, perm], once on x and permute its "
            "output with [:, perm]. Equivariant means the two agree."),
        N_("Float sums in another order differ in the last bits: compare with torch.allclose."),
    ),
)


def _sinusoidal_reference(seq_len, d_model):
    """(seq_len, d_model): column 2i is sin(pos / 10000^(2i/d_model)), column 2i+1 its cos."""
    position = torch.arange(seq_len, dtype=torch.float32)[:, None]  # (seq_len, 1)
    two_i = torch.arange(0, d_model, 2, dtype=torch.float32)  # (d_model / 2,)
    angle = position / 10000 ** (two_i / d_model)  # (seq_len, d_model / 2)
    table = torch.zeros(seq_len, d_model)
    table[:, 0::2] = torch.sin(angle)
    table[:, 1::2] = torch.cos(angle)
    return table


def _check_sinusoidal(answer):
    # A second size fails a hard-coded d_model; then 40 positions (angles far from small, no
    # table of 12 rows) and a single pair.
    for seq_len, d_model in ((12, 16), (7, 10), (40, 6), (3, 2)):
        _check_sinusoidal_once(answer, seq_len, d_model)


def _check_sinusoidal_once(answer, seq_len, d_model):
    got = attempt(answer, seq_len, d_model)
    what = f"sinusoidal_positions({seq_len}, {d_model})"
    expect_shape(got, (seq_len, d_model), what)
    if not got.is_floating_point():
        raise Incorrect(_(
            "{what} should be a floating-point tensor, got dtype {dtype}: integer positions must "
            "become floats before the division").format(what=what, dtype=got.dtype))
    expect_finite(got, what)
    expected = sinusoidal_positions(seq_len, d_model).double()
    reject_half_precision(got, expected, what)  # before the mistakes: rounding is none of them
    got = got.detach().double()

    def close(a, b):  # the tolerance the task states
        return torch.allclose(a, b, atol=1e-5, rtol=1e-4)

    if close(got, expected):
        return
    if close(got[:, 0::2], expected[:, 1::2]):
        raise Incorrect(_("sin and cos are swapped: even columns (0, 2, ...) hold the sines"))
    half = d_model // 2
    if close(got[:, :half], expected[:, 0::2]):
        raise Incorrect(_(
            "the sines fill the first half and the cosines the second; interleave them instead: "
            "table[:, 0::2] = sin, table[:, 1::2] = cos"))
    if close(got[:-1], expected[1:]):
        raise Incorrect(_("your positions start at 1: the first row is position 0 (sin 0 = 0)"))
    if close(got[:, 0::2], expected[:, 0::2]):
        raise Incorrect(_(
            "the sine columns are right but the cosine columns are not: column 2i+1 uses the same "
            "frequency as column 2i, 1 / 10000^(2i/d_model)"))
    if not close(got[:, 0], expected[:, 0]):
        raise Incorrect(_(
            "column 0 should be sin(pos), the fastest clock (frequency 1): check the angle pos / "
            "10000^(2i/d_model) at i = 0"))
    slowest = 1 / 10000 ** ((d_model - 2) / d_model)
    raise Incorrect(_(
        "the first column is right but the frequencies of the others are not: pair i turns at 1 / "
        "10000^(2i/d_model), down to {slowest:.2g} for the last pair when d_model={d_model}; 2i "
        "runs over 0, 2, 4, ..., not over 0, 1, 2, ...").format(
        slowest=slowest, d_model=d_model))


sinusoidal = Exercise(
    title=N_("the sinusoidal position table"),
    checker=_check_sinusoidal,
    reference=_sinusoidal_reference,
    hints=(
        N_(
            "Make an angle table (seq_len, d_model / 2): position / 10000^(2i/d_model), with 2i = "
            "torch.arange(0, d_model, 2)."),
        N_(
            "Start from torch.zeros(seq_len, d_model) and fill table[:, 0::2] with the sines and "
            "table[:, 1::2] with the cosines."),
    ),
)
