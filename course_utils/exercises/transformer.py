"""Lesson 07 exercises: a pre-LN block's forward pass, a permutation-equivariance test, and
the sinusoidal position table."""

from __future__ import annotations

import torch

from course_utils.exercises import (
    Exercise,
    Incorrect,
    attempt,
    expect_close,
    expect_finite,
    expect_shape,
)
from course_utils.language import Bilingual, text
from course_utils.transformer import EncoderBlock, sinusoidal_positions


def _pre_ln_block_reference(block, x):
    """Pre-LN order: x + sublayer(norm(x)), first attention, then the FFN.

    block has .self_attn, .ffn, .norm1, .norm2; x is (batch, seq_len, d_model).
    """
    attended, _ = block.self_attn(block.norm1(x))  # (batch, seq_len, d_model)
    x = x + attended  # the residual stream itself is never normalised
    return x + block.ffn(block.norm2(x))  # (batch, seq_len, d_model)


def _test_block() -> tuple[EncoderBlock, torch.Tensor]:
    """A block whose LayerNorms have non-trivial gains and shifts, so every misplaced norm shows."""
    with torch.random.fork_rng():
        torch.manual_seed(7)
        block = EncoderBlock(16, 2, 32, norm_first=True)
        for norm in (block.norm1, block.norm2):
            torch.nn.init.uniform_(norm.weight, 0.5, 2.0)
            torch.nn.init.normal_(norm.bias)
        x = 3 * torch.randn(2, 5, 16) + 1  # far from unit scale: normalising matters
    return block, x


def _check_pre_ln_block(answer):
    block, x = _test_block()
    with torch.no_grad():
        got = attempt(answer, block, x.clone())
        if isinstance(got, tuple):
            raise Incorrect(text(
                "return only the output tensor (batch, seq_len, d_model); block.self_attn "
                "returns (output, weights), so unpack it: attended, _ = block.self_attn(...)",
                "只返回输出张量 (batch, seq_len, d_model)。block.self_attn 返回的是 "
                "(output, weights)，要先拆开：attended, _ = block.self_attn(...)"
            ))
        expect_shape(got, x.shape, text("the block's output", "块的输出"))
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
    known_mistakes = (
        (post_ln, text(
            "this is the post-LN order, norm(x + sublayer(x)). Pre-LN normalises the "
            "sublayer's input instead: x + sublayer(norm(x))",
            "这是 post-LN 的顺序 norm(x + sublayer(x))。pre-LN 归一化的是子层的输入："
            "x + sublayer(norm(x))")),
        (normalised_residual, text(
            "the residual adds the normalised x. Keep the original x for the "
            "residual: x + attn(norm1(x)); only the sublayer sees norm(x)",
            "残差连接加回的是归一化之后的 x。残差要用原来的 x：x + attn(norm1(x))；"
            "只有子层看到 norm(x)")),
        (no_residual, text(
            "there is no residual connection: add each sublayer's input back, "
            "x = x + sublayer(norm(x))",
            "缺少残差连接：把每个子层的输入加回来，x = x + sublayer(norm(x))")),
        (attention_half, text(
            "the output is the attention half only: the FFN sublayer, "
            "x + ffn(norm2(x)), is missing",
            "输出只有注意力这一半：缺少前馈网络子层 x + ffn(norm2(x))")),
        (no_norm2, text(
            "the FFN sees the un-normalised stream: normalise its input with norm2, "
            "x + ffn(norm2(x))",
            "前馈网络看到的是未归一化的残差流：先用 norm2 归一化它的输入，x + ffn(norm2(x))")),
        (norm1_twice, text(
            "norm1 is used before both sublayers: the FFN has its own, norm2",
            "两个子层前都用了 norm1：前馈网络有它自己的 norm2")),
        (swapped_norms, text(
            "norm1 and norm2 are swapped: norm1 goes before attention, "
            "norm2 before the FFN",
            "norm1 和 norm2 用反了：norm1 放在注意力之前，norm2 放在前馈网络之前")),
        (normalised_output, text(
            "the output is normalised at the end: a pre-LN block leaves the "
            "residual stream un-normalised (only the sublayer inputs are)",
            "输出在最后被归一化了：pre-LN 块不对残差流做归一化（只归一化各子层的输入）")),
    )
    for wrong, reason in known_mistakes:
        if torch.allclose(got, wrong, atol=1e-5):
            raise Incorrect(reason)
    expect_close(got, reference, text("the block's output", "块的输出"))


pre_ln_block = Exercise(
    title=Bilingual("the pre-LN block's forward pass", "pre-LN 块的前向计算"),
    checker=_check_pre_ln_block,
    reference=_pre_ln_block_reference,
    hints=(
        Bilingual("Two sublayers, each as x = x + sublayer(norm(x)): attention with norm1, "
                  "then the FFN with norm2.",
                  "两个子层，都写成 x = x + sublayer(norm(x))：先是注意力配 norm1，"
                  "再是前馈网络配 norm2。"),
        Bilingual("block.self_attn(h) returns (output, weights): keep the output only.",
                  "block.self_attn(h) 返回 (output, weights)：只保留 output。"),
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
    result = attempt(answer, fn, x, perm)
    if isinstance(result, torch.Tensor) and result.dtype == torch.bool and result.numel() == 1:
        return bool(result)
    if not isinstance(result, bool):
        raise Incorrect(text(f"return True or False, got {type(result).__name__}",
                             f"应当返回 True 或 False，实际得到 {type(result).__name__}"))
    return result


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

    def reversed_tokens(x):  # same rows in another order: equal sums, equal sorted values
        return x.flip(1)

    def last_token_shifted(x):  # differs from an equivariant function at one position only
        shifted = x.clone()
        shifted[:, -1] += 1
        return shifted

    with torch.no_grad():
        if not _verdict(answer, doubled, x, perm):
            raise Incorrect(text(
                "fn(x) = 2 * x is equivariant, but your function says no: compare "
                "fn(x[:, perm]) with fn(x)[:, perm], the output permuted the same way",
                "fn(x) = 2 * x 是置换等变的，你的函数却说不是：应当比较 fn(x[:, perm]) "
                "和按同样方式置换后的输出 fn(x)[:, perm]"
            ))
        for fn in (block_output, block_output_with_rounding):
            if not _verdict(answer, fn, x, perm):
                raise Incorrect(text(
                    "a block without positions is equivariant, but your function says no: "
                    "outputs computed in another order differ in the last bits, so compare "
                    "them with torch.allclose, not exactly (torch.equal or ==)",
                    "没有位置信息的块是置换等变的，你的函数却说不是：按另一种顺序算出的输出"
                    "在最后几位上会有舍入差异，所以要用 torch.allclose 比较，"
                    "不能要求完全相等（torch.equal 或 ==）"
                ))
        if _verdict(answer, block_with_positions, x, perm):
            raise Incorrect(text(
                "a block with position encodings added is not equivariant (the outputs "
                "differ by far more than rounding), but your function says it is: compare "
                "the two outputs' values position by position with torch.allclose",
                "加上位置编码的块不是置换等变的（两个输出的差别远大于舍入误差），"
                "你的函数却说是：用 torch.allclose 逐个位置比较两个输出的数值"
            ))
        if _verdict(answer, reversed_tokens, x, perm):
            raise Incorrect(text(
                "fn(x) = x.flip(1) (reverse the tokens) is not equivariant, but your function "
                "says it is: comparing sums, sorted values or a permutation of the wrong axis "
                "cannot see the order; compare fn(x[:, perm]) with fn(x)[:, perm] element by "
                "element, permuting the tokens (dim 1)",
                "fn(x) = x.flip(1)（把词元倒序）不是置换等变的，你的函数却说是：比较求和、"
                "排序后的值，或者在错误的维度上置换，都看不出顺序；应当逐元素比较 "
                "fn(x[:, perm]) 和 fn(x)[:, perm]，置换的是词元所在的维度（dim 1）"
            ))
        if _verdict(answer, last_token_shifted, x, perm):
            raise Incorrect(text(
                "a function that adds 1 to the last position only is not equivariant, but "
                "your function says it is: compare every position, not just some tokens",
                "只给最后一个位置加 1 的函数不是置换等变的，你的函数却说是："
                "要比较每一个位置，而不只是其中几个词元"
            ))


is_permutation_equivariant = Exercise(
    title=Bilingual("test a function for permutation equivariance",
                    "检验一个函数是否置换等变"),
    checker=_check_is_permutation_equivariant,
    reference=_is_permutation_equivariant_reference,
    hints=(
        Bilingual("Run fn twice: once on the permuted tokens x[:, perm], once on x and permute "
                  "its output with [:, perm]. Equivariant means the two agree.",
                  "把 fn 运行两次：一次作用在置换后的词元 x[:, perm] 上，一次作用在 x 上，"
                  "再用 [:, perm] 置换它的输出。两者一致，就是置换等变。"),
        Bilingual("Float sums in another order differ in the last bits: compare with "
                  "torch.allclose.",
                  "浮点数换一种顺序求和，最后几位会不同：用 torch.allclose 比较。"),
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
    seq_len, d_model = 12, 16
    got = attempt(answer, seq_len, d_model)
    what = f"sinusoidal_positions({seq_len}, {d_model})"
    expect_shape(got, (seq_len, d_model), what)
    if not got.is_floating_point():
        raise Incorrect(text(
            f"{what} should be a floating-point tensor, got dtype {got.dtype}: "
            "integer positions must become floats before the division",
            f"{what} 应当是浮点张量，实际的 dtype 是 {got.dtype}：整数位置要先转成浮点数再做除法"))
    expect_finite(got, what)
    got = got.detach().double()
    expected = sinusoidal_positions(seq_len, d_model).double()

    def close(a, b):  # the tolerance the task states
        return torch.allclose(a, b, atol=1e-5, rtol=1e-4)

    if close(got, expected):
        return
    if close(got[:, 0::2], expected[:, 1::2]):
        raise Incorrect(text(
            "sin and cos are swapped: even columns (0, 2, ...) hold the sines",
            "sin 和 cos 放反了：偶数列（0, 2, ...）放的是正弦"))
    half = d_model // 2
    if close(got[:, :half], expected[:, 0::2]):
        raise Incorrect(text(
            "the sines fill the first half and the cosines the second; interleave them "
            "instead: table[:, 0::2] = sin, table[:, 1::2] = cos",
            "正弦填满了前一半、余弦填满了后一半；应当交错排列："
            "table[:, 0::2] = sin，table[:, 1::2] = cos"
        ))
    if close(got[:-1], expected[1:]):
        raise Incorrect(text(
            "your positions start at 1: the first row is position 0 (sin 0 = 0)",
            "你的位置从 1 开始：第一行应当是位置 0（sin 0 = 0）"))
    if close(got[:, 0::2], expected[:, 0::2]):
        raise Incorrect(text(
            "the sine columns are right but the cosine columns are not: column 2i+1 uses the "
            "same frequency as column 2i, 1 / 10000^(2i/d_model)",
            "正弦列对了，余弦列不对：第 2i+1 列和第 2i 列用同一个频率 1 / 10000^(2i/d_model)"
        ))
    if not close(got[:, 0], expected[:, 0]):
        raise Incorrect(text(
            "column 0 should be sin(pos), the fastest clock (frequency 1): check the angle "
            "pos / 10000^(2i/d_model) at i = 0",
            "第 0 列应当是 sin(pos)，转得最快的那个时钟（频率为 1）：检查 i = 0 时的角度 "
            "pos / 10000^(2i/d_model)"
        ))
    slowest = 1 / 10000 ** ((d_model - 2) / d_model)
    raise Incorrect(text(
        "the first column is right but the frequencies of the others are not: pair i turns "
        f"at 1 / 10000^(2i/d_model), down to {slowest:.2g} for the last pair when "
        f"d_model={d_model}; 2i runs over 0, 2, 4, ..., not over 0, 1, 2, ...",
        "第一列对了，其余各列的频率不对：第 i 对列的频率是 1 / 10000^(2i/d_model)，"
        f"d_model={d_model} 时最后一对降到 {slowest:.2g}；2i 取 0, 2, 4, ...，"
        "而不是 0, 1, 2, ..."
    ))


sinusoidal = Exercise(
    title=Bilingual("the sinusoidal position table", "正弦位置编码表"),
    checker=_check_sinusoidal,
    reference=_sinusoidal_reference,
    hints=(
        Bilingual("Make an angle table (seq_len, d_model / 2): position / 10000^(2i/d_model), "
                  "with 2i = torch.arange(0, d_model, 2).",
                  "先做一张角度表 (seq_len, d_model / 2)：position / 10000^(2i/d_model)，"
                  "其中 2i = torch.arange(0, d_model, 2)。"),
        Bilingual("Start from torch.zeros(seq_len, d_model) and fill table[:, 0::2] with the "
                  "sines and table[:, 1::2] with the cosines.",
                  "从 torch.zeros(seq_len, d_model) 开始，把正弦填进 table[:, 0::2]，"
                  "余弦填进 table[:, 1::2]。"),
    ),
)
