"""The course's two editions: which language messages use, and a CJK font for figures.

English is the default. ``set_language("zh-CN")`` switches the messages that support it
(``text(en=..., zh=...)``) to Simplified Chinese and makes matplotlib able to draw Chinese:
it registers Noto Sans SC from the ``zhplot`` package (a pip-installed font, so Linux,
macOS, Windows and Colab draw the same glyphs) as a fallback after the usual Latin font.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path

import matplotlib
from matplotlib import font_manager

LANGUAGES = ("en", "zh-CN")
CJK_FONT = "Noto Sans SC"
_state = {"language": "en"}


def set_language(language: str) -> None:
    """Use ``language`` ("en" or "zh-CN") for messages; "zh-CN" also sets up the CJK font."""
    if language not in LANGUAGES:
        raise ValueError(f"language should be one of {LANGUAGES}, got {language!r}")
    _state["language"] = language
    if language == "zh-CN":
        use_cjk_font()


def current_language() -> str:
    return _state["language"]


def text(en: str, zh: str) -> str:
    """The message in the current language (for text made when it is shown)."""
    return zh if _state["language"] == "zh-CN" else en


@dataclass(frozen=True)
class Bilingual:
    """A text written once in both languages, shown in whichever is current when printed.

    For text made before the learner picks a language (an exercise's title and hints, a
    module's labels): ``str()`` and f-strings read the language at that moment.
    """

    en: str
    zh: str

    def __str__(self) -> str:
        return text(self.en, self.zh)


def in_english(message) -> str:
    """The English form of a str or :class:`Bilingual` (names that must not change)."""
    return message.en if isinstance(message, Bilingual) else str(message)


def cjk_font_path() -> Path:
    """Where the pip-installed Noto Sans SC lies (package ``zhplot``)."""
    spec = importlib.util.find_spec("zhplot")
    if spec is None or spec.origin is None:
        raise ModuleNotFoundError(
            "the Chinese edition draws Chinese text with the font of the package 'zhplot': "
            "pip install zhplot")
    return Path(spec.origin).parent / "fonts" / "NotoSansSC-Regular.ttf"


def use_cjk_font() -> None:
    """Let matplotlib draw Chinese: Noto Sans SC after the usual sans-serif font.

    Latin letters and digits keep the default font (DejaVu Sans); a glyph it lacks falls
    back to Noto Sans SC, so mixed labels such as "注意力权重 (n_q, n_k)" draw completely.
    """
    font_manager.fontManager.addfont(str(cjk_font_path()))
    # A generic family stands for its first installed font only, so the fallback must be
    # named in font.family itself for matplotlib to try it glyph by glyph.
    families = [name for name in matplotlib.rcParams["font.family"] if name != CJK_FONT]
    matplotlib.rcParams["font.family"] = [*families, CJK_FONT]
