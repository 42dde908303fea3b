"""Text laid out by display width: padding and wrapping that count a CJK character twice."""

import textwrap

import pytest

from course_utils.text_layout import display_width, fill, format_table, pad


def test_wrapping_counts_wide_characters_twice_and_never_cuts_a_number():
    assert display_width("ab") == 2 and display_width("注意力") == 6
    english = "word " * 30
    assert fill(english, "> ", width=40) == textwrap.fill(english, 40, initial_indent="> ",
                                                          subsequent_indent="  ")
    chinese = "权重" * 20 + " 123456789 " + "权重" * 20
    lines = fill(chinese, "> ", width=30).splitlines()
    assert all(display_width(line) <= 30 for line in lines)
    assert any("123456789" in line for line in lines)
    assert all(line.startswith("  ") for line in lines[1:])


@pytest.mark.parametrize("align", ["<", ">", "^"])
@pytest.mark.parametrize("text", ["LSTM", "vanilla RNN", "", "abc"])
def test_pad_is_format_for_text_without_wide_characters(text, align):
    assert pad(text, 12, align) == format(text, f"{align}12")


@pytest.mark.parametrize("align", ["<", ">", "^"])
def test_pad_lines_up_chinese_and_latin_columns(align):
    column = [pad(name, 12, align) for name in ("注意力", "普通 RNN", "LSTM", "球")]
    assert {display_width(cell) for cell in column} == {12}
    assert pad("注意力", 12, ">") == " " * 6 + "注意力"


def test_text_wider_than_the_column_is_left_whole():
    assert pad("多头注意力机制", 4) == "多头注意力机制"


def test_a_table_lines_up_its_columns_by_display_width():
    lines = format_table([("方案", "L", "2L 中 >L"), ("none", "0.25", "0.17–0.17"),
                   ("learned", "1.00", "0.07")], align="<>>").splitlines()
    assert lines == ["方案        L   2L 中 >L",
                     "none     0.25  0.17–0.17",
                     "learned  1.00       0.07"]
    assert len({display_width(line) for line in lines}) == 1


def test_a_table_of_latin_text_is_format_with_the_widest_cell():
    rows = [("scheme", "L"), ("sinusoidal", "1.00")]
    assert format_table(rows, align="<>", gap=1) == "scheme        L\nsinusoidal 1.00"


BAD_INPUTS = [
    pytest.param(display_width, (3,), {}, TypeError, ("text", "str", "int"),
                 id="display_width: an int"),
    pytest.param(fill, (["a"], "head: "), {}, TypeError, ("message", "str", "list"),
                 id="fill: a list"),
    pytest.param(fill, ("a", None), {}, TypeError, ("head", "str", "None"), id="fill: no head"),
    pytest.param(fill, ("a", "head: "), {"width": 0}, ValueError, ("width", "positive", "0"),
                 id="fill: width 0"),
    pytest.param(pad, (3, 5), {}, TypeError, ("text", "str", "int"), id="pad: an int"),
    pytest.param(pad, ("a", 0), {}, ValueError, ("width", "positive", "0"), id="pad: width 0"),
    pytest.param(pad, ("a", 5, "right"), {}, ValueError, ("align", "'<', '>', '^'", "'right'"),
                 id="pad: align a word"),
    pytest.param(format_table, ("a b",), {}, TypeError, ("rows", "list of rows", "str"),
                 id="format_table: a str"),
    pytest.param(format_table, ([("a", "b"), ("c",)],), {}, ValueError, ("as many cells", "[2, 1]"),
                 id="format_table: ragged rows"),
    pytest.param(format_table, ([("a", 1)],), {}, TypeError, ("cell", "str", "int"),
                 id="format_table: a number cell"),
    pytest.param(format_table, ([("a", "b")],), {"align": "<><"}, ValueError,
                 ("align", "2", "'<><'"),
                 id="format_table: align for three columns"),
    pytest.param(format_table, ([("a", "b")],), {"align": "<|"}, ValueError, ("align", "'|'"),
                 id="format_table: align not a side"),
]
