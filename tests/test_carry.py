"""carry and stale (tools/translation.py), proved on a real lesson through temporary copies:
a line of code added to the English lesson is carried into its twin with the twin's words
kept, and parity holds; a sentence added to the English prose makes ``stale`` name the cell."""

from __future__ import annotations

import shutil
import subprocess

import nbformat
import pytest

from tools import editions, lessons, translation

LESSON = lessons.lesson_paths("en")[1]  # 02: translated labels and comments in its code
TWIN = lessons.twin_path(LESSON, "zh-CN")


def _pair():
    return lessons.read(LESSON), lessons.read(TWIN)


def _translated_code_cell(english, twin) -> int:
    """The first code cell (0-based) after the setup whose twin translates its comments
    and that builds a tensor."""
    return next(i for i, (ours, theirs) in enumerate(zip(english.cells, twin.cells, strict=True))
                if ours.cell_type == "code" and "setup(" not in ours.source
                and "torch.tensor(" in ours.source and ours.source != theirs.source
                and "#" in translation.english_words(theirs))


def _code_problems(english, twin) -> list[str]:
    return [p for p in editions.compare(english, twin) if "code differs" in p
            or "cannot be read" in p or "sequence" in p]


@pytest.mark.parametrize("path", lessons.lesson_paths("en"), ids=lambda path: path.name)
def test_carrying_an_unchanged_lesson_changes_nothing(path):
    english, twin = lessons.read(path), lessons.read(lessons.twin_path(path, "zh-CN"))
    before = nbformat.writes(twin)
    assert translation.carry(english, twin) == ([], [])
    assert nbformat.writes(twin) == before


@pytest.mark.parametrize("edit", ["line added", "call changed", "line removed"])
def test_a_structural_change_is_carried_keeping_the_translated_words(edit):
    english, twin = _pair()
    index = _translated_code_cell(english, twin)
    cell = english.cells[index]
    lines = cell.source.splitlines()
    if edit == "line added":
        cell.source = "scale_check = 2 * 3\n" + cell.source
    elif edit == "call changed":
        cell.source = cell.source.replace("torch.tensor(", "torch.as_tensor(", 1)
        assert cell.source != "\n".join(lines)
    else:
        cell.source = "\n".join(lines[:-1])
    assert _code_problems(english, twin), "the edit should break parity before carry"
    kept_words = translation.english_words(twin.cells[index])
    carried, to_translate = translation.carry(english, twin)
    assert carried == [index + 1] and to_translate == []
    assert _code_problems(english, twin) == []
    carried_words = translation.english_words(twin.cells[index])
    if edit == "line removed":  # its comment (if any) goes with it; the others stay
        assert set(carried_words.splitlines()) <= set(kept_words.splitlines())
    else:
        assert carried_words == kept_words


def test_new_english_words_are_kept_in_english_and_listed_for_translation():
    english, twin = _pair()
    index = _translated_code_cell(english, twin)
    english.cells[index].source += '\nprint("a new sentence to translate")  # and a comment'
    carried, to_translate = translation.carry(english, twin)
    assert carried == [index + 1] and to_translate == [index + 1]
    assert 'print("a new sentence to translate")' in twin.cells[index].source
    assert _code_problems(english, twin) == []


def test_changed_english_words_are_listed_not_guessed():
    english, twin = _pair()
    translation.accept(english, twin)
    index = _translated_code_cell(english, twin)
    old = next(word for word in translation.english_words(english.cells[index]).splitlines()
               if word.startswith("#"))
    source = twin.cells[index].source
    english.cells[index].source = english.cells[index].source.replace(old, "# other words", 1)
    assert translation.carry(english, twin) == ([], [index + 1])
    assert twin.cells[index].source == source


def test_stale_names_the_cell_whose_english_prose_changed():
    english, twin = _pair()
    assert {why for _n, why in translation.stale_cells(english, twin)} <= {
        "no translation record (translate it, then stale --accept)"}
    translation.accept(english, twin)
    assert translation.stale_cells(english, twin) == []
    prose = next(i for i, cell in enumerate(english.cells) if cell.cell_type == "markdown"
                 and i > 0)
    english.cells[prose].source += "\n\nA sentence the translation does not have yet."
    assert translation.stale_cells(english, twin) == [
        (prose + 1, "the English changed since it was translated")]
    # A structural code change carried by carry leaves the code cells' records current.
    index = _translated_code_cell(english, twin)
    english.cells[index].source = "scale_check = 2 * 3\n" + english.cells[index].source
    translation.carry(english, twin)
    assert [n for n, _why in translation.stale_cells(english, twin)] == [prose + 1]
    translation.accept(english, twin, [prose + 1])
    assert translation.stale_cells(english, twin) == []


@pytest.fixture
def course_copy(tmp_path, monkeypatch):
    """The lesson and its twin copied into a course tree of their own, for the commands."""
    folders = {edition: tmp_path / folder.relative_to(lessons.ROOT)
               for edition, folder in lessons.EDITIONS.items()}
    for edition, folder in folders.items():
        folder.mkdir(parents=True, exist_ok=True)
        shutil.copy(lessons.twin_path(LESSON, edition), folder)
        monkeypatch.setitem(lessons.EDITIONS, edition, folder)
    monkeypatch.setattr(translation, "ROOT", tmp_path)
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    return folders


def _commit(folder):
    subprocess.run(["git", "add", "-A"], cwd=folder, check=True)
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "t"],
                   cwd=folder, check=True)


def test_the_commands_on_copies(course_copy, capsys):
    number = LESSON.name.split("_")[0]
    english_path = course_copy["en"] / LESSON.name
    twin_path = course_copy["zh-CN"] / LESSON.name
    assert translation.main(["stale", "--accept-all"]) == 0
    assert translation.main(["stale", number]) == 0
    _commit(english_path.parent.parent)
    english = lessons.read(english_path)
    index = _translated_code_cell(english, lessons.read(twin_path))
    english.cells[index].source = "scale_check = 2 * 3\n" + english.cells[index].source
    prose = next(i for i, cell in enumerate(english.cells) if cell.cell_type == "markdown"
                 and i > 0)
    english.cells[prose].source += "\n\nA sentence the translation does not have yet."
    nbformat.write(english, english_path)
    capsys.readouterr()
    assert translation.main(["carry", number]) == 0
    assert f"code carried into cells [{index + 1}]" in capsys.readouterr().out
    assert _code_problems(lessons.read(english_path), lessons.read(twin_path)) == []
    assert translation.main(["stale", number]) == 1
    out = capsys.readouterr().out
    assert f"cell {prose + 1} (markdown): the English changed" in out
    assert "    +A sentence the translation does not have yet." in out  # from git's history
    assert f"cell {index + 1} " not in out
    assert translation.main(["stale", "--accept", number, str(prose + 1)]) == 0
    assert translation.main(["stale"]) == 0


def test_no_translation_on_main_is_stale(capsys):
    """Every translated cell of every lesson translates its English cell as it is now."""
    # In this process: a second Python spent 2 s importing what this one holds, for a check
    # that takes 0.4 s.
    assert translation.main(["stale"]) == 0, capsys.readouterr().out
