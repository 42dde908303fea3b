"""The English and Chinese editions stay in parity (tools/editions.py), and a third edition
costs a catalogue and a folder, no code: a pseudo-edition of a lesson goes through the parity
check and carry/stale (tools/translation.py) as the Chinese one does."""

from __future__ import annotations

import shutil
from functools import cache

import nbformat
import pytest

from course_utils.language import LOCALE_DIR, available_languages
from tests.support import pseudo_edition
from tools import editions, lessons, translation


def _notebook(*cells):
    """cells: ("md", text) or ("code", source, outputs_text)."""
    notebook = nbformat.v4.new_notebook()
    for cell in cells:
        if cell[0] == "md":
            notebook.cells.append(nbformat.v4.new_markdown_cell(cell[1]))
        else:
            code = nbformat.v4.new_code_cell(cell[1])
            if len(cell) > 2:
                code.outputs = [nbformat.v4.new_output("stream", name="stdout", text=cell[2])]
            notebook.cells.append(code)
    return notebook


ENGLISH = _notebook(
    ("md", "# Lesson 02 · Q, K, V"),
    ("code", 'x = torch.ones(2, 3)  # (batch, d_model)\nprint("shape", x.shape)',
     "shape torch.Size([2, 3])\n"),
    ("code", 'claim(w.sum(-1).allclose(torch.ones(2)), "rows sum to 1")', "✓ rows sum to 1\n"),
    ("code", 'print(f"max weight {w.max():.2f} on {label}")', "max weight 0.59 on kitten\n"),
)


def test_a_faithful_translation_has_no_differences():
    chinese = _notebook(
        ("md", "# 第 02 课 · Q、K、V"),
        ("code", 'x = torch.ones(2, 3)  # (batch, d_model)：一批向量\nprint("shape", x.shape)',
         "shape torch.Size([2, 3])\n"),
        ("code", 'claim(w.sum(-1).allclose(torch.ones(2)), "每行之和为 1")', "✓ 每行之和为 1\n"),
        ("code", 'print(f"最大权重 {w.max():.2f} 落在「{label}」上")',
         "最大权重 0.59 落在「小猫」上\n"),
    )
    assert editions.compare(ENGLISH, chinese) == []


@pytest.mark.parametrize(
    ("index", "source", "output", "words"),
    [
        (1, 'x = torch.ones(3, 2)  # (batch, d_model)\nprint("shape", x.shape)',
         "shape torch.Size([3, 2])\n", "code differs"),
        (2, 'assert w.sum(-1).allclose(torch.ones(2)), "每行之和为 1"', "", "code differs"),
        (2, 'w.sum(-1)', "", "code differs"),
        (1, 'x = torch.ones(2, 3)  # (batch, d_model)\nprint("shape", x.shape)',
         "shape torch.Size([2, 4])\n", "different stored outputs"),
        (3, 'print(f"最大权重 {w.max():.2f} 落在「{label}」上")', "最大权重 0.61 落在「小猫」上\n",
         "different numbers"),
    ],
    ids=["other shape", "assert instead of claim", "claim dropped", "stale output",
         "other number"],
)
def test_a_drifted_translation_is_caught(index, source, output, words):
    chinese = _notebook(*[("md", c.source) if c.cell_type == "markdown" else
                          ("code", c.source, c.outputs[0].text) for c in ENGLISH.cells])
    chinese.cells[index] = nbformat.v4.new_code_cell(source)
    chinese.cells[index].outputs = [nbformat.v4.new_output("stream", name="stdout", text=output)]
    problems = editions.compare(ENGLISH, chinese)
    assert len(problems) == 1 and words in problems[0], problems


def test_a_different_cell_sequence_is_caught():
    chinese = _notebook(("md", "# 第 02 课"), ("md", "多出的一段"))
    assert "cell sequence differs" in editions.compare(ENGLISH, chinese)[0]


def test_outputs_nbval_does_not_compare_may_hold_other_numbers_in_the_twin():
    english = _notebook(("md", "# Lesson 06"), ("code", 'print(f"{t:.1f} ms")', "3.2 ms\n"))
    chinese = _notebook(("md", "# 第 06 课"), ("code", 'print(f"{t:.1f} 毫秒")', "2.9 毫秒\n"))
    assert "different numbers" in editions.compare(english, chinese)[0]
    for notebook in (english, chinese):
        notebook.cells[1].metadata["tags"] = ["nbval-ignore-output"]
    assert editions.compare(english, chinese) == []


def test_cells_both_twins_declare_edition_specific_may_hold_other_numbers():
    english = _notebook(("md", "# Lesson 12"),
                        ("code", 'text = load_text("shakespeare")\nprint(len(text))', "420000\n"))
    chinese = _notebook(("md", "# 第 12 课"),
                        ("code", 'text = load_text("tang_poems")\nprint(len(text))', "214000\n"))
    assert "different numbers" in editions.compare(english, chinese)[0]
    english.cells[1].metadata["tags"] = [editions.EDITION_SPECIFIC]
    assert "tags differ" in editions.compare(english, chinese)[0]  # both twins must declare it
    chinese.cells[1].metadata["tags"] = [editions.EDITION_SPECIFIC]
    assert editions.compare(english, chinese) == []
    chinese.cells[1].source = 'text = load_text("tang_poems")\nprint(len(text) + 1)'
    assert "code differs" in editions.compare(english, chinese)[0]  # the code still must match


def test_package_text_in_the_course_language_may_differ_when_the_numbers_match():
    english = _notebook(("md", "# Lesson 05"), ("code", "ex.check(f)", "✓ Correct: 'f' works\n"))
    chinese = _notebook(("md", "# 第 05 课"), ("code", "ex.check(f)", "✓ 正确：「f」通过\n"))
    assert editions.compare(english, chinese) == []
    chinese.cells[1].outputs[0].text = "✓ Correct: 'f' works 2\n"
    assert "same code, different stored outputs" in editions.compare(english, chinese)[0]


def test_tags_must_match():
    chinese = nbformat.from_dict(nbformat.v4.new_notebook())
    chinese.cells = [nbformat.from_dict(dict(cell)) for cell in ENGLISH.cells]
    chinese.cells[1].metadata = {"tags": ["nbval-ignore-output"]}
    assert "tags differ" in editions.compare(ENGLISH, chinese)[0]


def test_code_shape_keeps_code_and_drops_comments_and_string_text():
    tokens, strings = editions.code_shape('y = f(x, "a")  # why\nprint(f"{y:.2f} b")\n')
    assert tokens == ["y", "=", "f", "(", "x", ",", "<str>", ")", "print", "(", "<str>", ")"]
    assert strings == ['"a"', 'f"{y:.2f} b"']


@cache  # the whole course's parity takes seconds: once for every test that reads it
def _parity_of_the_course() -> tuple[str, ...]:
    return tuple(editions.parity_problems())


def test_every_lesson_of_one_edition_has_its_twin_in_the_other():
    missing = [p for p in _parity_of_the_course()
               if "no English edition" in p or " edition (notebooks/" in p]
    assert missing == [], "\n".join(missing)
    assert [p.name for p in editions.english_lessons()] == [
        p.name for p in editions.twin_lessons("zh-CN")]


def test_a_glyph_missing_from_the_font_is_caught_in_stored_outputs():
    warning = ("/usr/lib/python3/matplotlib/backends/backend_agg.py:211: UserWarning: Glyph "
               "27880 (\\N{CJK UNIFIED IDEOGRAPH-6CE8}) missing from font(s) DejaVu Sans.\n")
    notebook = _notebook(("md", "# 第 02 课"), ("code", "plt.title('注意力')", ""))
    assert editions.missing_glyphs(notebook) == []
    notebook.cells[1].outputs = [nbformat.v4.new_output("stream", name="stderr", text=warning)]
    assert editions.missing_glyphs(notebook) == [
        "cell 2: a figure lacks glyphs (Glyph 27880 (\\N{CJK UNIFIED IDEOGRAPH-6CE8}) missing "
        "from font)"]
    notebook.cells[1].outputs[0].text = ("WARNING:matplotlib.mathtext:Font 'default' does not "
                                         "have a glyph for '\\u7ecf' [U+7ecf], substituting "
                                         "with a dummy symbol.\n")
    assert len(editions.missing_glyphs(notebook)) == 1


def test_the_glossary_reads_and_every_term_has_both_languages():
    rows = editions.glossary("zh-CN")
    assert len(rows) >= 30
    assert (("query", "queries"), "查询") in rows
    assert all(variants and chinese for variants, chinese in rows)


def test_a_glossary_term_missing_from_the_chinese_prose_is_named():
    english = _notebook(("md", "A **causal mask** hides the future; the queries stay."))
    good = _notebook(("md", "**因果掩码**遮住未来；查询不变。"))
    loose = _notebook(("md", "**因果遮罩**遮住未来；查询不变。"))
    terms = [(("causal mask",), "因果掩码"), (("query", "queries"), "查询"),
             (("decoder",), "解码器")]
    assert editions.glossary_problems(english, good, terms) == []
    assert editions.glossary_problems(english, loose, terms) == [
        "glossary: the English prose says 'causal mask', the twin's prose never says '因果掩码'"]
    badge = _notebook(("md", "[![Colab](https://colab.example/self-attention-hands-on/a.svg)]"
                             "(https://colab.example/github/self-attention-hands-on/course)"))
    assert editions.glossary_problems(badge, _notebook(("md", "徽章")),
                                      [(("self-attention",), "自注意力")]) == []


PAIRS = sorted(p.name for p in editions.twin_lessons("zh-CN"))


@pytest.mark.parametrize("name", PAIRS)
def test_each_chinese_lesson_matches_its_english_twin(name):
    """Cells, code, tags, numbers, glossary terms, stated run time, and no missing glyph."""
    problems = [p for p in _parity_of_the_course()
                if p.startswith((f"{name}:", f"zh-CN/{name}:"))]
    assert problems == [], "\n".join(problems)


def test_a_line_break_between_chinese_characters_is_caught_and_joined():
    source = ("注意力让每个词\n直接看到其他词。\n\n- 第一项\n- 第二项，\n  接着写"
              "\n```\n代码\n不动\n```")
    notebook = _notebook(("md", source))
    assert len(editions.soft_breaks(notebook)) == 1
    joined = editions.join_soft_breaks(source)
    assert joined == ("注意力让每个词直接看到其他词。\n\n- 第一项\n- 第二项，接着写"
                      "\n```\n代码\n不动\n```")
    assert editions.soft_breaks(_notebook(("md", joined))) == []
    assert editions.soft_breaks(_notebook(("md", "d_k 越大\nscores grow and\n分数变大"))) == []
    emphasis = "还需要*读取*\n编码器的输出，左边是\n“它”的那一行\n* 第二项"
    assert editions.join_soft_breaks(emphasis) == (
        "还需要*读取*编码器的输出，左边是“它”的那一行\n* 第二项")


def test_the_tools_words_for_an_edition_come_from_its_catalogue():
    from tools import colab

    for language in lessons.EDITIONS:
        line = lessons.run_time_line(language, 42)
        assert lessons.run_time_pattern(language).search(f"intro\n{line}\n").group(1) == "42"
        heading = lessons.edition_text(language, "notebook", "Lesson {number}")
        notebook = _notebook(("md", f"# {heading.format(number='07')} · Title"))
        assert lessons.lesson_heading(notebook) == ("07", "Title")
        intro, last = colab.setup_comments(language)
        assert intro in colab.setup_cell_source(language) and last in colab.setup_cell_source(
            language)
    # Every committed lesson's header is read in its edition's words.
    assert all(lessons.stated_run_time(path) for path in lessons.all_lesson_paths())


# ------------------------------------------------------------------ a third edition
PSEUDO = pseudo_edition.EDITION
LESSON = lessons.lesson_paths("en")[1]  # 02: comments and labels in its code


@pytest.fixture
def three_editions(tmp_path, monkeypatch):
    """Lesson 02 in a course tree of its own, in English, Chinese and the pseudo-edition,
    which is registered as any edition is: a catalogue folder in ``locale/`` (beside the real
    ones) and a folder of lessons in ``EDITIONS``. Returns each edition's copy of the lesson."""
    locale = tmp_path / "locale"
    locale.mkdir()
    for name in available_languages()[1:]:
        (locale / name).symlink_to(LOCALE_DIR / name)
    pseudo_edition.add_to_locale(locale)
    monkeypatch.setattr("course_utils.language.LOCALE_DIR", locale)
    monkeypatch.setitem(lessons.EDITIONS, PSEUDO, lessons.notebook_folder(PSEUDO))
    copies = {}
    for edition, folder in lessons.EDITIONS.items():
        copy = tmp_path / folder.relative_to(lessons.ROOT) / LESSON.name
        copy.parent.mkdir(parents=True, exist_ok=True)
        if edition == PSEUDO:
            nbformat.write(pseudo_edition.pseudo_twin(lessons.read(LESSON)), copy)
        else:
            shutil.copy(lessons.twin_path(LESSON, edition), copy)
        monkeypatch.setitem(lessons.EDITIONS, edition, copy.parent)
        copies[edition] = copy
    monkeypatch.setattr(translation, "ROOT", tmp_path)
    return copies


def _commented_code_cell(notebook) -> int:
    """The first code cell (0-based) after the setup with a comment."""
    return next(i for i, cell in enumerate(notebook.cells) if i > 1
                and cell.cell_type == "code" and "#" in translation.english_words(cell))


def test_a_third_edition_is_checked_for_parity_with_no_code_of_its_own(three_editions):
    assert lessons.translated_editions() == ("zh-CN", PSEUDO)
    twin = three_editions[PSEUDO]
    assert lessons.stated_run_time(twin) == lessons.stated_run_time(three_editions["en"])
    assert lessons.read(twin).cells[0].source.startswith("⟦# Léssóñ 02")
    assert editions.parity_problems() == []
    # A code change in the pseudo-edition alone is caught, under its name.
    notebook = lessons.read(twin)
    index = _commented_code_cell(notebook)
    notebook.cells[index].source = "extra = 1\n" + notebook.cells[index].source
    nbformat.write(notebook, twin)
    assert [p.split(": cell")[0] for p in editions.parity_problems()] == [f"{PSEUDO}/{twin.name}"]


def test_carry_and_stale_serve_a_third_edition_with_no_code_of_its_own(three_editions, capsys):
    number = LESSON.name.split("_")[0]
    english_path, twin = three_editions["en"], three_editions[PSEUDO]
    assert translation.main(["stale"]) == 1  # the pseudo twin's cells have no record yet
    assert f"notebooks/{PSEUDO}/{twin.name} cell 1 (markdown): no translation record" in (
        capsys.readouterr().out)
    assert translation.main(["stale", "--accept-all"]) == 0
    assert translation.main(["stale", number]) == 0
    english = lessons.read(english_path)
    index = _commented_code_cell(english)
    pseudo_words = translation.english_words(lessons.read(twin).cells[index])
    english.cells[index].source = "scale_check = 2 * 3\n" + english.cells[index].source
    english.cells[0].source += "\n\nA sentence the translation does not have yet."
    nbformat.write(english, english_path)
    capsys.readouterr()
    assert translation.main(["carry", number]) == 0
    assert f"notebooks/{PSEUDO}/{twin.name}: code carried into cells [{index + 1}]" in (
        capsys.readouterr().out)
    carried = lessons.read(twin).cells[index]
    assert carried.source.startswith("scale_check = 2 * 3\n")
    assert translation.english_words(carried) == pseudo_words
    assert editions.parity_problems() == []
    assert translation.main(["stale", number]) == 1
    out = capsys.readouterr().out
    assert f"notebooks/{PSEUDO}/{twin.name} cell 1 (markdown): the English changed" in out
    assert f"cell {index + 1} " not in out
