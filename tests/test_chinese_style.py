"""The Chinese edition follows its style rules (CONTRIBUTING.zh-CN.md, 中文写作规范;
tools/chinese_style.py). The prose is rendered with CommonMark, the rule JupyterLab, GitHub
and the site follow: it closes ``**`` after full-width punctuation only before a space or
more punctuation, so ``**运行时间：**在`` shows its asterisks and the style guide puts the
punctuation outside the bold (``**运行时间**：在``). Printed strings and the catalogue are
checked as the learner reads them, without markdown."""

from __future__ import annotations

import nbformat
import pytest
from markdown_it import MarkdownIt

from course_utils.text_layout import pad
from tools import chinese_style as style
from tools.lessons import lesson_paths, read, translated_editions

COMMONMARK = MarkdownIt("commonmark")
WORDS = [("批次", "批量"), ("批大小", "批量大小"), ("融合内核", "融合算子"), ("token", "词元"),
         ("前向计算", "前向传播")]


def unrendered_emphasis(markdown: str) -> list[str]:
    """Text a CommonMark renderer leaves with literal ``**`` or ``__`` (code spans aside)."""
    return [child.content for token in COMMONMARK.parse(markdown) if token.type == "inline"
            for child in token.children or [] if child.type == "text"
            and ("**" in child.content or "__" in child.content)]


def test_the_check_sees_the_full_width_punctuation_case_and_passes_the_fix():
    assert unrendered_emphasis("**运行时间：**在 2 核 CPU 上")
    assert not unrendered_emphasis("**运行时间**：在 2 核 CPU 上")
    assert not unrendered_emphasis("`a ** b` and **bold**")


TRANSLATED_LESSONS = [path for edition in translated_editions() for path in lesson_paths(edition)]


@pytest.mark.parametrize("path", TRANSLATED_LESSONS, ids=lambda path: path.name)
def test_every_bold_span_of_the_translated_prose_renders(path):
    for number, cell in enumerate(read(path).cells, 1):
        if cell.cell_type == "markdown":
            assert not unrendered_emphasis(cell.source), (
                f"cell {number}: put full-width punctuation outside the bold: "
                f"{unrendered_emphasis(cell.source)}")


def base_rule(rule: str) -> str:
    """The rule without its advice ("not the glossary's word (write 批量)")."""
    return next(base for base in style.RULES if rule.startswith(base))


def rules_broken(markdown: str) -> list[str]:
    return [base_rule(rule) for rule, _ in style.markdown_problems(markdown, WORDS)]


# (rule, text that breaks it, the same text written as the style guide asks)
MARKDOWN_CASES = [
    (style.RULE_MARKS, "**运行时间：**在 2 核 CPU 上", "**运行时间**：在 2 核 CPU 上"),
    (style.RULE_MARKS, "可以读作*“它”收集到了什么*：", "可以读作“它”收集到了什么："),
    (style.RULE_ITALIC, "填充位置的*查询*仍然会关注", "填充位置的**查询**仍然会关注"),
    (style.RULE_ITALIC, "| 头 | *没有*角色 |\n|---|---|\n| 1 | 2 |",     # a table cell
     "| 头 | 没有角色 |\n|---|---|\n| 1 | 2 |"),
    (style.RULE_TIMES, "比有缩放时小 100 倍", "不到有缩放时的百分之一"),
    (style.RULE_TIMES, "信号少了一百多倍", "信号不到原来的百分之一"),
    (style.RULE_TIMES, "KV 缓存缩小 `num_heads / num_kv_heads` 倍",
     "KV 缓存缩小为原来的 `num_kv_heads / num_heads`"),
    (style.RULE_SECTION, "见 §5。", "见第 5 节。"),
    (style.RULE_QUOTES, "它指向 '小猫'。", "它指向“小猫”。"),
    (style.RULE_QUOTES, '动词汇集到了 "我有一个主语" 这一信息', "动词由此“得知”自己有主语"),
    (style.RULE_BREAK, "每个笔记本都会在 CI 中重新运行，并逐个单元\n与保存的输出比对。",
     "每个笔记本都会在 CI 中重新运行，并逐个单元与保存的输出比对。"),
    (style.RULE_GLOSSARY, "由 64 条序列组成的批次", "由 64 条序列组成的批量"),
    (style.RULE_GLOSSARY, "学习率 5e-3，批大小 64", "学习率 5e-3，批量大小 64"),
    (style.RULE_GLOSSARY, "融合内核可以跳过整块", "融合算子可以跳过整块"),
    (style.RULE_GLOSSARY, "改动一个 token 不会改变它之前的输出",
     "改动一个词元不会改变它之前的输出"),
    (style.RULE_MILLION, "它的 22.6 M 个参数", "它的 2260 万个参数"),
    (style.RULE_RANGE, "训练中只出现过位置 0..15", "训练中只出现过位置 0～15"),
    (style.RULE_ARROW, "损失 3.93 -> 4.12", "损失 3.93 → 4.12"),
    (style.RULE_RATIO, "头 3.1 的权重是头 3.3 的 4.9×", "头 3.1 的权重是头 3.3 的 4.9 倍"),
    (style.RULE_GROUPING, "Llama 3 用的底数是 500 000", "Llama 3 用的底数是 50 万"),
    (style.RULE_GROUPING, "共 30,522 个条目", "共 30522 个条目"),
    (style.RULE_GLOSSARY, "一次前向计算的时间", "一次前向传播的时间"),
]


@pytest.mark.parametrize(("rule", "wrong", "right"), MARKDOWN_CASES,
                         ids=[f"{rule.split()[0]}-{n}" for n, (rule, _, _) in
                              enumerate(MARKDOWN_CASES)])
def test_each_rule_flags_the_wrong_text_and_passes_the_rewrite(rule, wrong, right):
    assert rules_broken(wrong) == [rule]
    assert rules_broken(right) == []


@pytest.mark.parametrize("text", [
    "`(batch, seq_len)` 中的 **词元（token）**，以及 `tokens[:, k]`",      # code, a gloss
    "之比增长了十倍，是它的 3 倍，至少 2 倍",                                # not 小 N 倍
    "两句 `a ** b` 与 $q \\cdot k / \\sqrt{d_k} * 2$",                      # code, math
    "SmolLM2-135M 的权重占 1.5 MiB；第 05 课的 [PAD] 与 [MASK]",
    "以 \"round\" 而不是 \"playful\" 结尾",                                  # English quoted
    "每个笔记本都会在 CI 中运行。\n\nIt is one line.\nAnother line.",       # breaks in English
    "```python\nx = 1  # 一行\n# 注释\n```",                                # a code block
    "`0..15` 与 `f(x) -> y`，路径 ../notebooks，以及……",                   # code, a path
    "一个 64×64 的矩阵，4 × `d_model` 宽，(8, 16) 共 128 个",              # shapes, not ratios
])
def test_what_the_rules_allow_is_not_flagged(text):
    assert rules_broken(text) == []


def test_printed_strings_are_checked_as_printed():
    source = ('print(f"第 {i} 个 token：{tokens[i]!r}")\n'
              'label = "*未缩放*"\nprint(example.tokens[k], "\'最大权重\'", "“最大权重”")\n'
              '%time run()\n')
    found = [base_rule(rule) for text in style.string_literals(source)
             for rule, _ in style.printed_text_problems(text, WORDS)]
    assert sorted(found) == sorted([style.RULE_GLOSSARY, style.RULE_ITALIC, style.RULE_QUOTES])


def test_a_notebook_violation_names_file_cell_text_and_rule(tmp_path):
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_markdown_cell("# 第 03 课"),
                      nbformat.v4.new_markdown_cell("信号比有缩放时小 100 倍。"),
                      nbformat.v4.new_code_cell('print("整个批次")')]
    path = tmp_path / "03_x.ipynb"
    nbformat.write(notebook, path)
    assert [str(problem) for problem in style.notebook_problems(path, WORDS)] == [
        f"{path} cell 2: {style.RULE_TIMES}: '小 100 倍'",
        f"{path} cell 3: {style.RULE_GLOSSARY} (write 批量): '整个批次'"]


def test_the_glossary_lists_the_words_not_to_use():
    assert set(WORDS) <= set(style.avoided_words())


def _rows(words, padding):
    """A table of (word, number) rows, each word padded by ``padding(word, 8)``."""
    return "\n".join(f"{padding(word, 8)}  {number:.3f}" for word, number in words)


def by_characters(word, width):
    return f"{word:<{width}}"


TABLE_WORDS = [("球", 0.085), ("因为", 0.042), ("它", 0.042), ("the ball", 0.5)]


@pytest.mark.parametrize("words", [TABLE_WORDS, TABLE_WORDS[:2], TABLE_WORDS[2:]],
                         ids=["four-rows", "one-and-two-characters", "chinese-and-english"])
def test_a_table_padded_by_characters_is_flagged_and_padded_by_width_passes(words):
    assert {rule for rule, _ in style.table_problems(_rows(words, by_characters))} == {
        style.RULE_TABLE}
    assert style.table_problems(_rows(words, pad)) == []


@pytest.mark.parametrize("printed", [
    _rows([("ball", 1.0), ("because", 2.0)], by_characters),     # no wide character
    "n = 256：每一对 (查询, 键) 一个权重\n✓ n = 256：每一对  一个权重",  # a claim is not a row
    "每个分数花费的纳秒数：\n  n =  512：显式实现  7.75 ns",          # a heading is not a row
    "它  分数  0.0\n很  分数  0.0",                                  # same widths line up
    "    x = f(x)  # 键填充掩码\n    y = g(y, x)  # 错误：填充位置看不到键",  # a listing's comments
    # Padded by width; the spaces inside a shape are not columns.
    "q.transpose(1, 2)    (2, 3, 5, 4)   (batch, num_heads, seq_len, d_k)\n"
    "注意力权重           (2, 3, 5, 5)   (batch, num_heads, n_q, n_k)",
])
def test_text_that_is_not_a_drifting_table_is_not_flagged(printed):
    assert style.table_problems(printed) == []


@pytest.mark.parametrize("printed", [
    # Labels right-aligned by len: every later cell is one column off in one row.
    f"{'RNN：':>6} n=256：1.2 ms  n=1024：4.5 ms\n{'注意力：':>6} n=256：0.3 ms  n=1024：3.3 ms",
    # A header padded by len over rows padded by width.
    f"{'方案':<6}{'2L 中 >L':>12}\n{pad('none', 6)}{'0.17–0.17':>12}",
    # Indented rows under a header: the indent is not a cell.
    "掩码：          权重：\n  [0, 1, 1]    [0, 1, 1]",
])
def test_rows_whose_cells_neither_start_nor_end_together_are_flagged(printed):
    assert {rule for rule, _ in style.table_problems(printed)} == {style.RULE_TABLE}


@pytest.mark.parametrize("printed", [
    # Right-aligned numbers followed by their note line up by the numbers' ends.
    "底数    10000：波长 [6, 20]\n底数   500000：波长 [6, 32, 167]",
    # Left-aligned, right-aligned and indented cells padded by width.
    f"{pad('方案', 12)}{pad('2L 中 >L', 12, '>')}\n{pad('none', 12)}{pad('0.17–0.17', 12, '>')}",
    f"{pad('掩码：', 16)}权重：\n  {pad('[0, 1, 1]', 14)}[0, 1, 1]",
    # Right-aligned cells of different widths may share a character index: not drift.
    "                  配置    float32   bfloat16\n    BERT-base，批量 32    4.5 GiB    2.2 GiB",
])
def test_rows_that_line_up_by_start_or_end_pass(printed):
    assert style.table_problems(printed) == []


def test_a_notebook_table_is_read_from_the_cell_output(tmp_path):
    notebook = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("print(table)")
    cell.outputs = [nbformat.v4.new_output("stream", name="stdout",
                                           text=_rows(TABLE_WORDS[:2], by_characters) + "\n")]
    notebook.cells = [cell]
    path = tmp_path / "09_x.ipynb"
    nbformat.write(notebook, path)
    assert [problem.rule for problem in style.notebook_problems(path, WORDS)] == [
        style.RULE_TABLE]


def test_a_table_printed_in_chunks_is_read_as_the_reader_sees_it(tmp_path):
    upper, lower = _rows(TABLE_WORDS[:2], by_characters).split("\n")[:2]
    chunks = [upper + "\n", lower + "\n"]
    notebook = nbformat.v4.new_notebook()
    one_stream = nbformat.v4.new_code_cell("print(table)")
    one_stream.outputs = [nbformat.v4.new_output("stream", name="stdout", text=chunk)
                          for chunk in chunks]
    # Rows of two streams, or on both sides of a figure, are not one table.
    two_streams = nbformat.v4.new_code_cell("print(table)")
    two_streams.outputs = [nbformat.v4.new_output("stream", name=name, text=chunk)
                           for name, chunk in zip(["stdout", "stderr"], chunks, strict=True)]
    around_a_figure = nbformat.v4.new_code_cell("print(table)")
    around_a_figure.outputs = [
        nbformat.v4.new_output("stream", name="stdout", text=chunks[0]),
        nbformat.v4.new_output("display_data", data={"text/plain": "<Figure>"}),
        nbformat.v4.new_output("stream", name="stdout", text=chunks[1])]
    notebook.cells = [one_stream, two_streams, around_a_figure]
    path = tmp_path / "09_x.ipynb"
    nbformat.write(notebook, path)
    assert [(problem.place.rsplit(" ", 1)[-1], problem.rule)
            for problem in style.notebook_problems(path, WORDS)] == [("1", style.RULE_TABLE)]


def _problems_by_rule(problems, rule):
    return "\n".join(str(problem) for problem in problems if problem.rule.startswith(rule))


RULE_IDS = {style.RULE_MARKS: "marks", style.RULE_ITALIC: "italics", style.RULE_TIMES: "times",
            style.RULE_SECTION: "section", style.RULE_QUOTES: "quotes",
            style.RULE_BREAK: "line-breaks", style.RULE_GLOSSARY: "glossary",
            style.RULE_MILLION: "millions", style.RULE_TABLE: "tables",
            style.RULE_RANGE: "ranges", style.RULE_ARROW: "arrows", style.RULE_RATIO: "ratios",
            style.RULE_GROUPING: "grouping"}
LESSON_RULES = [(path, rule) for path in lesson_paths("zh-CN") for rule in style.RULES]


@pytest.fixture(scope="module")
def lesson_problems():
    words = style.avoided_words()
    return {path: style.notebook_problems(path, words) for path in lesson_paths("zh-CN")}


@pytest.mark.parametrize(("path", "rule"), LESSON_RULES,
                         ids=[f"{path.stem[:2]}-{RULE_IDS[rule]}" for path, rule in LESSON_RULES])
def test_each_chinese_lesson_follows_each_style_rule(lesson_problems, path, rule):
    found = _problems_by_rule(lesson_problems[path], rule)
    assert not found, "\n" + found


@pytest.mark.parametrize("path", style.DOCUMENTS, ids=lambda path: path.name)
def test_each_chinese_document_follows_the_style_rules(path):
    found = "\n".join(str(problem) for problem in style.document_problems(path))
    assert not found, "\n" + found


def test_the_catalogue_follows_the_style_rules():
    found = "\n".join(str(problem) for problem in style.catalogue_problems())
    assert not found, "\n" + found
