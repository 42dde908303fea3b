"""The course's editions: the language of every text the package shows, and their fonts.

English is the source language: learner-facing text is written in English in the code and
marked for translation, and the English text is the message id. Every other edition has a
folder ``course_utils/locale/<edition>/`` with

- ``course_utils.po`` / ``.mo``: the gettext catalogue (``python3 tools/course.py
  catalogue`` extracts the messages with Babel and compiles the ``.mo`` the standard
  library reads here);
- ``edition.json``: what the edition needs beyond words: a font for figures (a pip
  package, so every platform and Colab draw the same glyphs) and the examples that are
  about language (``example_words``).

Adding an edition is adding such a folder (and its notebooks and glossary column): no
module changes. ``set_language`` lists what it finds.

Two ways to mark a message:

- ``_("query {word}").format(word=...)``: translated now, for text made when it is shown;
- ``N_("Measure Var(q·k)")``: a :class:`Message` translated each time it is shown, for
  text made at import (an exercise's title and hints, a module's labels);
- ``pgettext("figure", "weights")``: where the same English needs other words elsewhere.

Placeholders are named (``{word}``, ``{gap:.3g}``) so a translation may reorder them.
"""

from __future__ import annotations

import gettext
import importlib.util
import json
from collections.abc import Iterable
from functools import cache
from pathlib import Path

import matplotlib
from matplotlib import font_manager

ENGLISH = "en"
LOCALE_DIR = Path(__file__).resolve().parent / "locale"
DOMAIN = "course_utils"
_state = {"language": ENGLISH}


# This module is the floor of the package (checks.py writes its messages with ``_``), so it
# checks its own few arguments here rather than with course_utils.checks.
def _got(value) -> str:
    """What came, for an error message: its type and (short) value."""
    text = repr(value)
    return f"{type(value).__name__} {text if len(text) <= 40 else text[:37] + '...'}"


def _require_instance(name: str, value, kind, what: str):
    if not isinstance(value, kind):
        raise TypeError(_("{name} should be {expected}, got {got}").format(
            name=name, expected=what, got=_got(value)))
    return value


def available_languages() -> tuple[str, ...]:
    """English, then every edition with a compiled catalogue in ``locale/``.

    Used in every lesson.
    """
    return (ENGLISH, *sorted(path.parent.name for path in LOCALE_DIR.glob(f"*/{DOMAIN}.mo")))


@cache
def _catalogue(language: str) -> gettext.NullTranslations:
    if language == ENGLISH:
        return gettext.NullTranslations()
    with (LOCALE_DIR / language / f"{DOMAIN}.mo").open("rb") as file:
        return gettext.GNUTranslations(file)


@cache
def edition(language: str) -> dict:
    """An edition's settings from its ``edition.json`` (English has none: ``{}``).

    Used in every lesson.
    """
    path = LOCALE_DIR / language / "edition.json"
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}


def require_language(language) -> str:
    """``language`` if it names an edition; a ValueError naming the editions otherwise.

    Used in every lesson.
    """
    languages = available_languages()
    if language not in languages:
        raise ValueError(_("{name} should be one of {options}, got {got!r}").format(
            name="language", options=languages, got=language))
    return language


def set_language(language: str) -> None:
    """Show every text the package makes in ``language`` (``available_languages()``) and
    let figures draw its script with the edition's font.

    Used in every lesson.
    """
    _state["language"] = require_language(language)
    if edition(language).get("figure_font"):
        use_edition_font(language)


def current_language() -> str:
    """The language the package shows its text in (``setup(language=...)``).

    Used in every lesson.
    """
    return _state["language"]


def translate(message: str, language: str | None = None, context: str | None = None) -> str:
    """``message`` (its English text) in ``language`` (default: the current one), in
    ``context`` if given (as :func:`pgettext`).

    Used in every lesson.
    """
    _require_instance("message", message, str, _("a str (the English text)"))
    catalogue = _catalogue(require_language(language or _state["language"]))
    return catalogue.gettext(message) if context is None else catalogue.pgettext(context, message)


def _(message: str) -> str:
    """``message`` in the current language: mark text made when it is shown."""
    return _catalogue(_state["language"]).gettext(message)


def pgettext(context: str, message: str) -> str:
    """``message`` in the current language where the same English needs another word in
    ``context`` (a figure's label, say, or a value named in a checker's message).

    Used in every lesson.
    """
    _require_instance("context", context, str, _("a str"))
    _require_instance("message", message, str, _("a str (the English text)"))
    return _catalogue(_state["language"]).pgettext(context, message)


def join_sentences(sentences) -> str:
    """Sentences one after the other, as the current language writes them: separated by a
    space in English, with none in Chinese (each translation says how).

    Used in every lesson.
    """
    if isinstance(sentences, str | Message) or not isinstance(sentences, Iterable):
        raise TypeError(_("sentences should be a list (or iterable) of sentences, got {kind}")
                        .format(kind=type(sentences).__name__))
    sentences = [str(sentence) for sentence in sentences]
    if not sentences:
        return ""
    text = sentences[0]
    for sentence in sentences[1:]:
        text = _("{sentence} {next_sentence}").format(sentence=text, next_sentence=sentence)
    return text


class Message:
    """A text written in English and shown in whichever language is current when shown.

    For text made before the learner picks a language: ``str()``, ``format()`` and
    f-strings translate at that moment; ``english`` is the message id.

    Used in every lesson.
    """

    __slots__ = ("english",)

    def __init__(self, english: str):
        if not isinstance(english, str):
            raise TypeError(_("a message should be a str, got {kind}").format(
                kind=type(english).__name__))
        self.english = english

    def __str__(self) -> str:
        return _(self.english)

    def __format__(self, spec: str) -> str:
        return format(str(self), spec)

    def format(self, *args, **kwargs) -> str:
        return str(self).format(*args, **kwargs)

    def __repr__(self) -> str:
        return f"N_({self.english!r})"

    def __eq__(self, other) -> bool:
        return isinstance(other, Message) and other.english == self.english

    def __hash__(self) -> int:
        return hash(self.english)


def N_(message: str) -> Message:  # noqa: N802 (gettext's name for a deferred message)
    """Mark ``message`` for translation when it is shown (see :class:`Message`).

    Used in every lesson.
    """
    return Message(message)


def in_english(message: str | Message) -> str:
    """The English form of a str or :class:`Message` (names that must not change).

    Used in every lesson.
    """
    _require_instance("message", message, str | Message, _("a str or N_(...)"))
    return message.english if isinstance(message, Message) else message


def example_words(name: str, english: tuple[str, ...]) -> tuple[str, ...]:
    """The current edition's words for the example ``name`` (an example about language,
    such as the explorer's pronoun sentence), or ``english`` where it has none.

    Used in lesson 09.
    """
    _require_instance("name", name, str, _("the example's name (a str)"))
    words = edition(_state["language"]).get("examples", {}).get(name)
    if words is None:
        return tuple(english)
    if len(words) != len(english):
        raise ValueError(_("edition {edition!r}: example {name!r} should have {count} words, "
                           "one per English word, got {got}").format(
            edition=_state["language"], name=name, count=len(english), got=len(words)))
    return tuple(words)


def edition_font_path(language: str) -> Path:
    """Where the pip-installed font of ``language``'s figures lies.

    Used in every lesson.
    """
    font = edition(require_language(language)).get("figure_font")
    if font is None:
        raise ValueError(_("the {language} edition has no figure_font: its figures keep "
                           "matplotlib's default font").format(language=language))
    spec = importlib.util.find_spec(font["package"])
    if spec is None or spec.origin is None:
        raise ModuleNotFoundError(
            f"the {language} edition draws its text with the font of the package "
            f"{font['package']!r}: pip install {font['package']}")
    return Path(spec.origin).parent / font["file"]


def use_edition_font(language: str) -> None:
    """Let matplotlib draw ``language``'s script: its font after the usual sans-serif one.

    Latin letters and digits keep the default font (DejaVu Sans); a glyph it lacks falls
    back to the edition's font, so labels that mix a CJK script with "(n_q, n_k)" draw
    completely.

    Used in every lesson.
    """
    path = str(edition_font_path(language))
    family = edition(language)["figure_font"]["family"]
    # Once: addfont lists the font again at every call and forgets every font it had found,
    # so each switch of language made the next figures' font lookups slower.
    if all(font.fname != path for font in font_manager.fontManager.ttflist):
        font_manager.fontManager.addfont(path)
    # A generic family stands for its first installed font only, so the fallback must be
    # named in font.family itself for matplotlib to try it glyph by glyph.
    families = [name for name in matplotlib.rcParams["font.family"] if name != family]
    matplotlib.rcParams["font.family"] = [*families, family]
