"""English number words and Chinese numerals, with the alignment between them.

Lesson 15's translation task: ``english_words(n)`` spells ``n`` as British English writes it
(``"three thousand and five"``, hyphens in ``"twenty-one"``, a comma before a hundreds group
after a larger one), and ``chinese_numerals(n)`` writes it in Chinese numerals (3005 is
san-qian-ling-wu, "three thousand zero five").
Both are tested equal to the references (the packages ``num2words`` and ``cn2an``) on many
numbers; neither reference is needed to run the lesson.

English groups digits by thousands (thousand, million), Chinese by ten-thousands (wan,
10**4, and yi, 10**8), so the two orders differ: ``"twelve thousand, three hundred"`` is
yi-wan-er-qian-san-bai ("one wan two thousand three hundred"), where the word ``twelve``
writes the characters on both sides of wan. Because the generator knows
which English word names each digit, it knows the alignment: :func:`alignment` credits
every Chinese character to the word that names its digit (a place character, ten, hundred,
thousand, wan or yi, to the digit it follows; a leading "ten" to the 1 it stands for) and
credits ling (the zero Chinese writes inside a number) to no word,
since no English word says "zero" inside a number.

Source tokens are the words, with ``-`` and ``,`` as tokens of their own
(:func:`english_tokens`); target tokens are the characters.
"""

from __future__ import annotations

import re

import torch

from course_utils.checks import (
    require_generator,
    require_instance,
    require_int_in_range,
    require_positive_int,
)
from course_utils.language import _

LARGEST = 10**8  # the task's range is 1..LARGEST
_UNITS = ("zero one two three four five six seven eight nine ten eleven twelve thirteen "
          "fourteen fifteen sixteen seventeen eighteen nineteen").split()
_TENS = "_ _ twenty thirty forty fifty sixty seventy eighty ninety".split()
_SCALES = ("", "thousand", "million")
DIGITS = "\u96f6\u4e00\u4e8c\u4e09\u56db\u4e94\u516d\u4e03\u516b\u4e5d"  # 0..9
_PLACES = ("", "\u5341", "\u767e", "\u5343")  # 10, 100, 1000
_WAN, _YI = "\u4e07", "\u4ebf"  # 10**4, 10**8

# Every word and mark an English number uses, and every character a Chinese one uses.
SOURCE_WORDS = (*_UNITS[1:], *_TENS[2:], "hundred", "thousand", "million", "and", "-", ",")
TARGET_CHARACTERS = (*DIGITS, *_PLACES[1:], _WAN, _YI)


def _require_number(n) -> int:
    return require_int_in_range("n", n, 1, LARGEST)


def _group_words(value: int, group: int, digit_of_word: list) -> list[str]:
    """The words of one thousands group ``value`` (1..999) at ``group`` (0 units, 1 thousands,
    2 millions); appends to ``digit_of_word`` the digit positions each word names."""
    words = []
    hundreds, rest = divmod(value, 100)
    if hundreds:
        words += [_UNITS[hundreds], "hundred"]
        digit_of_word += [(3 * group + 2,), ()]
        if rest:
            words.append("and")
            digit_of_word.append(())
    if rest >= 20:
        tens, units = divmod(rest, 10)
        words.append(_TENS[tens])
        digit_of_word.append((3 * group + 1,))
        if units:
            words += ["-", _UNITS[units]]
            digit_of_word += [(), (3 * group,)]
    elif rest >= 10:  # ten..nineteen name the tens digit and the units digit at once
        words.append(_UNITS[rest])
        digit_of_word.append((3 * group + 1, 3 * group))
    elif rest:
        words.append(_UNITS[rest])
        digit_of_word.append((3 * group,))
    return words


def _english(n: int) -> tuple[list[str], list[tuple[int, ...]]]:
    """The tokens of ``n`` in English and, for each, the digit positions (10**p) it names."""
    tokens: list[str] = []
    names: list[tuple[int, ...]] = []
    groups = [(n // 1000**g) % 1000 for g in range(3)]
    if n >= 1000**3:  # 10**9 and up never occur (LARGEST is 10**8)
        raise ValueError(_("n should be below 10**9, got {n}").format(n=n))
    for group in (2, 1, 0):
        value = groups[group]
        if not value:
            continue
        if tokens:
            # num2words: "and" before a last group below 100, a comma before any other group
            if group == 0 and value < 100:
                tokens.append("and")
            else:
                tokens.append(",")
            names.append(())
        tokens += _group_words(value, group, names)
        if group:
            tokens.append(_SCALES[group])
            names.append(())
    return tokens, names


def english_tokens(n: int) -> list[str]:
    """The source tokens of ``n``: its English words, with ``-`` and ``,`` as tokens.

    ``english_tokens(12300)`` is ``['twelve', 'thousand', ',', 'three', 'hundred']``.

    Used in lesson 15.
    """
    return _english(_require_number(n))[0]


def english_words(n: int) -> str:
    """``n`` (1..10**8) in British English words, exactly as ``num2words(n)`` writes it.

    ``english_words(3005)`` is ``"three thousand and five"``.

    Used in lesson 15.
    """
    text = " ".join(english_tokens(n))
    return text.replace(" - ", "-").replace(" ,", ",")


def _chinese(n: int) -> tuple[list[str], list[int | None]]:
    """The characters of ``n`` in Chinese and, for each, the digit position it belongs to
    (``None`` for ling, the zero)."""
    chars: list[str] = []
    digit_at: list[int | None] = []
    if n == LARGEST:
        return [DIGITS[1], _YI], [8, 8]
    digits = [(n // 10**p) % 10 for p in range(8)]
    top = max(p for p in range(8) if digits[p])
    zero_pending = False
    for p in range(top, -1, -1):
        d = digits[p]
        if d == 0:
            zero_pending = bool(chars)
        else:
            if zero_pending:
                chars.append(DIGITS[0])
                digit_at.append(None)
                zero_pending = False
            # a 1 before "ten" is dropped at the very start (15, 100000), kept elsewhere
            if not (d == 1 and p % 4 == 1 and p == top):
                chars.append(DIGITS[d])
                digit_at.append(p)
            if p % 4:
                chars.append(_PLACES[p % 4])
                digit_at.append(p)
        if p == 4 and any(digits[4:8]):
            chars.append(_WAN)
            digit_at.append(min(q for q in range(4, 8) if digits[q]))
            zero_pending = False
            if any(digits[:4]) and not digits[3]:  # 10500: a gap below wan says ling
                zero_pending = True
    return chars, digit_at


def chinese_numerals(n: int) -> str:
    """``n`` (1..10**8) in Chinese numerals, exactly as ``cn2an.an2cn(n)`` writes it.

    ``chinese_numerals(12300)`` is ``"\u4e00\u4e07\u4e8c\u5343\u4e09\u767e"``
    (one wan two thousand three hundred).

    Used in lesson 15.
    """
    return "".join(_chinese(_require_number(n))[0])


def alignment(n: int) -> list[int | None]:
    """For each character of ``chinese_numerals(n)``, the index of the English token of
    ``english_tokens(n)`` that produced it (``None`` for ling, the zero, which no word says).

    A digit is produced by the word that names it (``twelve`` names both the 1 and the 2 of
    12); a place character (ten, hundred, thousand, wan, yi) by the word of the digit it
    follows; a leading "ten" (in 15 or 100000) by the word of the 1 it stands for. So
    ``alignment(12300)`` is ``[0, 0, 0, 0, 3, 3]``: one, wan, two, thousand from ``twelve``;
    three, hundred from ``three``.

    Used in lesson 15.
    """
    n = _require_number(n)
    _words, names = _english(n)
    word_of_digit = {p: i for i, ps in enumerate(names) for p in ps}
    _words, digit_at = _chinese(n)
    return [None if p is None else word_of_digit[p] for p in digit_at]


def number_splits(generator: torch.Generator, train: int = 4000, validation: int = 300,
                  test: int = 300, longer: int = 300, max_train_tokens: int = 15) -> dict:
    """Disjoint lists of numbers for training and evaluation, drawn with ``generator``.

    Numbers are drawn with a number of digits uniform in 1..8 (so small numbers are as
    common as large ones), then uniform among the numbers of that many digits. The pools:
    ``"train"``, ``"validation"`` and ``"test"`` hold numbers of at most ``max_train_tokens``
    English tokens, never the same number twice across pools; ``"longer"`` holds numbers of
    more tokens than any training number, so its sources are longer than anything seen.

    Used in lesson 15.
    """
    require_instance("generator", require_generator("generator", generator), torch.Generator,
                     _("a torch.Generator (e.g. torch.Generator().manual_seed(0))"))
    sizes = {"train": train, "validation": validation, "test": test, "longer": longer}
    for name, size in sizes.items():
        require_positive_int(name, size)
    require_int_in_range("max_train_tokens", max_train_tokens, 3, 20)
    pools: dict[str, list[int]] = {name: [] for name in sizes}
    seen: set[int] = set()
    order = ("train", "validation", "test", "longer")
    budget = 200 * sum(sizes.values())
    while any(len(pools[name]) < sizes[name] for name in order):
        budget -= 1
        if budget < 0:
            raise ValueError(_(
                "could not draw {sizes} distinct numbers with "
                "max_train_tokens={max_train_tokens}; ask for fewer"
            ).format(sizes=sizes, max_train_tokens=max_train_tokens))
        width = int(torch.randint(1, 9, (1,), generator=generator))
        low = 10 ** (width - 1)
        n = low + int(torch.randint(0, 9 * low, (1,), generator=generator))
        if n in seen:
            continue
        short = len(_english(n)[0]) <= max_train_tokens
        for name in order:
            if (name == "longer") != short and len(pools[name]) < sizes[name]:
                pools[name].append(n)
                seen.add(n)
                break
    return pools


def source_length(n: int) -> int:
    """How many English tokens ``n`` has (``len(english_tokens(n))``).

    Used in lesson 15.
    """
    return len(english_tokens(n))


_TOKEN = re.compile(r"[a-z]+|[,-]")


def tokens_of_text(text: str) -> list[str]:
    """Split typed English number words into source tokens: words, ``-`` and ``,``.

    ``tokens_of_text("Twenty-one thousand")`` is ``['twenty', '-', 'one', 'thousand']``;
    unknown words raise ValueError naming them.

    Used in lesson 15.
    """
    if not isinstance(text, str):
        raise TypeError(_(
            "text should be a str of English number words, got {kind}"
        ).format(kind=type(text).__name__))
    tokens = _TOKEN.findall(text.lower())
    unknown = sorted({t for t in tokens if t not in SOURCE_WORDS})
    if unknown or not tokens:
        raise ValueError(_(
            "text should be English number words such as 'three thousand and five', got {text!r} "
            "(unknown: {unknown})"
        ).format(text=text, unknown=unknown))
    return tokens
