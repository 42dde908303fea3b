"""Static checks of the committed notebooks: what nbval itself does not look at."""

from __future__ import annotations

import ast
import re
from functools import cache

import pytest

from tools import course
from tools.lessons import (
    NOTEBOOK_DIR,
    ROOT,
    all_lesson_paths,
    estimated_reading_time,
    read,
    stated_reading_time,
    stated_run_time,
)

LESSONS = all_lesson_paths()  # both editions
# Nine checks below look at every lesson and none changes it: each is parsed once.
parsed = cache(read)


def _name(path) -> str:
    return path.relative_to(NOTEBOOK_DIR).as_posix()


def test_there_are_lessons_and_they_are_numbered():
    assert LESSONS, "no notebooks found under notebooks/"
    for path in LESSONS:
        assert re.fullmatch(r"\d\d_[a-z0-9_]+\.ipynb", path.name), (
            f"{path.name} should be named NN_slug.ipynb"
        )


def test_every_notebook_is_validated_strictly():
    pyproject = (ROOT / "pyproject.toml").read_text()
    testpaths = re.search(r"^testpaths = (.*)$", pyproject, re.M).group(1)
    addopts = re.search(r"^addopts = (.*)$", pyproject, re.M).group(1)
    assert '"notebooks"' in testpaths
    # Both lanes of the full suite pass --nbval (not --nbval-lax) on testpaths' notebooks.
    assert course.STRICT_NBVAL == ["--nbval"]
    source = (ROOT / "tools" / "course.py").read_text()
    assert source.count('"pytest", *STRICT_NBVAL, "--lane=') == 2
    assert "--nbval-lax" not in addopts + source


def test_the_editions_other_than_english_are_validated_with_portable_cpu_kernels():
    # Outputs must not depend on this CPU's vector kernels (AVX2, AVX-512...).
    from tests.support.notebook_plugin import PORTABLE_KERNELS, _native_kernels
    from tools.lessons import lesson_paths

    assert PORTABLE_KERNELS == {"ATEN_CPU_CAPABILITY": "default"}
    assert not any(_native_kernels(path) for path in lesson_paths("zh-CN"))
    assert all(_native_kernels(path) for path in lesson_paths("en"))


@pytest.mark.parametrize("path", LESSONS, ids=_name)
def test_cells_ran_top_to_bottom_in_one_fresh_run(path):
    counts = [cell.execution_count for cell in parsed(path).cells if cell.cell_type == "code"]
    assert counts == list(range(1, len(counts) + 1)), (
        f"{path.name}: execution counts {counts}; re-run it with python3 tools/course.py execute"
    )


@pytest.mark.parametrize("path", LESSONS, ids=_name)
def test_no_error_output_is_stored(path):
    for index, cell in enumerate(parsed(path).cells):
        for output in cell.get("outputs", []):
            assert output.output_type != "error", f"{path.name} cell {index}: {output.ename}"


@pytest.mark.parametrize("path", LESSONS, ids=_name)
def test_no_widget_state_is_saved(path):
    assert "widgets" not in parsed(path).metadata, (
        f"{path.name} stores widget state; re-run it with python3 tools/course.py execute"
    )


@pytest.mark.parametrize("path", LESSONS, ids=_name)
def test_no_unfinished_prose(path):
    for cell in parsed(path).cells:
        assert not re.search(r"\bTODO\b|\bFIXME\b|\bXXX\b", cell.source), (
            f"{path.name} has unfinished text: {cell.source[:80]!r}"
        )


# The course's own machinery, which a learner never sees: the prose speaks of the seed in
# setup() and of "every seed we tried", not of audits, setup seeds or stored runs.
MACHINERY_WORDS = re.compile(r"claims audit|setup seed|stored run|audit seed|断言审计|声明审核"
                             r"|setup 种子|存储的运行", re.I)


@pytest.mark.parametrize("path", LESSONS, ids=_name)
def test_the_prose_does_not_speak_of_the_test_machinery(path):
    for number, cell in enumerate(parsed(path).cells, 1):
        if cell.cell_type == "markdown":
            found = MACHINERY_WORDS.search(cell.source)
            assert not found, f"{_name(path)} cell {number} says {found.group()!r} to the learner"


# A ✓ line is a claim that could have come out otherwise; a column of them stops being read, so
# a lesson prints at most this many (claim() lines and diagnose() reports' passing probes).
MAX_CHECK_MARKS = 30


@pytest.mark.parametrize("path", LESSONS, ids=_name)
def test_a_lesson_prints_few_enough_check_marks_to_be_parsed(path):
    marks = sum(line.lstrip().startswith("✓ ")
                for cell in parsed(path).cells if cell.cell_type == "code"
                for output in cell.get("outputs", []) if output.get("output_type") == "stream"
                for line in output.get("text", "").splitlines())
    assert marks <= MAX_CHECK_MARKS, (
        f"{_name(path)} prints {marks} ✓ lines, more than {MAX_CHECK_MARKS}: keep the claims that "
        "could have come out otherwise, and turn bookkeeping into a silent assert or a test")


@pytest.mark.parametrize("path", LESSONS, ids=_name)
def test_header_states_a_run_time_within_the_budget(path):
    stated = stated_run_time(path)
    assert stated is not None, (
        f"{_name(path)}: the first cell needs '**Run time:** about N s on 2 CPU cores.' "
        "('**运行时间：**在 2 核 CPU 上约 N 秒。' in the Chinese edition)"
    )
    assert stated <= 60, f"{path.name} states {stated} s; a lesson must run in 60 s or less"


@pytest.mark.parametrize("path", LESSONS, ids=_name)
def test_header_states_a_reading_time_near_what_the_lesson_holds(path):
    stated, estimate = stated_reading_time(path), estimated_reading_time(path)
    assert stated is not None, (
        f"{_name(path)}: the first cell needs '**Reading time:** about N minutes.' under the run "
        "time ('**阅读时间**：约 N 分钟。' in the Chinese edition)"
    )
    assert abs(stated - estimate) <= max(5, estimate // 4), (
        f"{_name(path)} states {stated} minutes to read; its prose and code come to about "
        f"{estimate} (tools.lessons.estimated_reading_time)"
    )


CJK = re.compile(r"[\u4e00-\u9fff]")


@pytest.mark.parametrize("path", LESSONS, ids=_name)
def test_every_figure_says_what_it_shows_to_a_screen_reader(path):
    # The site renders a figure with the cell's metadata mystnb.image.alt as its alt text;
    # without it the alt is the image's file name.
    english = "zh-CN" not in path.parts
    for index, cell in enumerate(parsed(path).cells):
        if not any("image/png" in output.get("data", {}) for output in cell.get("outputs", [])):
            continue
        alt = cell.metadata.get("mystnb", {}).get("image", {}).get("alt", "")
        assert len(alt) >= 40, (
            f"{_name(path)} cell {index}: a figure needs metadata mystnb.image.alt, one to three "
            "sentences on what it shows (the plot, its axes, the pattern to see)")
        # An English alt may quote the Chinese a figure shows (lesson 15 translates into it).
        assert english or CJK.search(alt), (
            f"{_name(path)} cell {index}: the alt text should be in the edition's language")


# Learner-facing text never says where the course's material came from. "seed" as a random
# seed is fine ("same seed", "3 seeds", "setup(seed=1)"); "the article" before a quoted word is
# grammar ('the article "the"'). Each pattern names a way of citing a source.
PROVENANCE = [
    r"\bsource (?:article|text|material|post)s?\b",
    r"\bseed (?:article|text|material|post)s?\b",
    r"\bseeds?['’]s? (?:claim|example|number|figure|text|author|point|argument|recipe)s?\b",
    r"\bthe seeds? (?:says?|claims?|writes?|states?|argues?|compares?|mentions?|explains?)\b",
    r"\baccording to the seeds?\b",
    r"\b(?:the|this|that|our|original) articles?\b(?!\s*[\"“‘`]|\s+')",
    r"\bfrom an article\b",
    r"\boriginal (?:text|post)s?\b",
    # The Chinese edition's ways: 原文, 这篇文章, 文章中/里/提到, 原作者, 参考资料.
    r"原文",
    r"(?:这|那|该|原|参考|源|种子)篇?文章",
    r"文章(?:中|里|提到|指出|说|认为|写道)",
    r"原作者",
    r"参考资料",
]


def provenance_mentions(text: str) -> list[str]:
    """The phrases of ``text`` that cite where material came from."""
    return [match.group(0) for pattern in PROVENANCE
            for match in re.finditer(pattern, text, re.IGNORECASE)]


@pytest.mark.parametrize(
    ("text", "found"),
    [("This is the seeds' claim, measured", True), ("the source articles say", True),
     ("The seed compares only the projections", True), ("a seed article's example", True),
     ("the article's recipe", True), ("with the recipe from an article", True),
     ("the article \"the\" should look at the noun", False), ("the article 'a'", False),
     ("the original paper (Vaswani et al., 2017)", False), ("is an article, is a noun", False),
     ("same seed, 3 seeds, every seed, setup(seed=1)", False),
     ("the seed changes the weights", False), ("each seed's run", False),
     ("原文给出的数字", True), ("这篇文章的例子", True), ("文章中提到", True),
     ("随机种子换成 3 个", False), ("在 3 个种子上都成立", False), ("文本和图片", False)],
)
def test_provenance_patterns_catch_citations_and_spare_random_seeds(text, found):
    assert bool(provenance_mentions(text)) == found, provenance_mentions(text)


@pytest.mark.parametrize("path", LESSONS, ids=_name)
def test_no_mention_of_where_the_material_came_from(path):
    found = [f"cell {index}: {phrase!r}" for index, cell in enumerate(parsed(path).cells)
             for phrase in provenance_mentions(cell.source)]
    assert not found, (
        f"{path.name} tells the learner where material came from ({'; '.join(found)}); "
        "state it as a fact about the example instead"
    )


def text_padded_by_character_count(source: str) -> list[str]:
    """The string literals that an f-string pads to a width (``{'合计':<10}``): ``format``
    counts characters, so a wide (CJK) character takes two columns and the column drifts."""
    try:
        tree = ast.parse(source)
    except SyntaxError:  # a cell of shell or magic commands holds no f-string to check
        return []
    found = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.FormattedValue) and isinstance(node.value, ast.Constant)
                and isinstance(node.value.value, str) and node.format_spec is not None
                and re.search(r"\d", ast.unparse(node.format_spec))):
            found.append(repr(node.value.value))
    return found


@pytest.mark.parametrize(("source", "found"), [
    ("print(f\"{'合计':<10} {total:>10,}\")", ["'合计'"]),
    ("print(f\"{'':>5} | {'unscaled':^8}\")", ["''", "'unscaled'"]),
    ("print(f\"{pad('合计', 17)} {total:>10,}\")", []),
    ("print(f\"{name:<8} {n:>10.2f} {'x'}\")", []),  # a variable: not knowable here
    ("!pip install torch", []),
])
def test_padding_by_character_count_is_found(source, found):
    assert text_padded_by_character_count(source) == found


@pytest.mark.parametrize("path", LESSONS, ids=_name)
def test_text_in_tables_is_padded_by_display_width(path):
    found = [f"cell {index}: {literal}" for index, cell in enumerate(parsed(path).cells)
             if cell.cell_type == "code"
             for literal in text_padded_by_character_count(cell.source)]
    assert not found, (
        f"{path.name} pads text with a format width ({'; '.join(found)}); use "
        "course_utils.text_layout.pad, which counts a wide character as two columns"
    )
