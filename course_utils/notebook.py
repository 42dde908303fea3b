"""What every lesson uses: the setup call, the seeds of its training runs, and ``claim``.

Every random choice of a lesson derives from the seed ``setup()`` was given: the global
generators (``setup`` seeds them), and every training run and data draw the lesson seeds
itself, through ``seeds(n)`` and ``lesson_generator(i)``. The stored run is ``setup(seed=0)``; any
other seed trains other models, which is how the claims audit (``tools/course.py audit``)
tries every claim on runs nobody looked at.
"""

from __future__ import annotations

import json
import os
import random
from contextlib import contextmanager

import numpy as np
import torch

from course_utils.checks import require_int_in_range, require_positive_int, require_seed
from course_utils.language import _, set_language

# The seed setup() was given: seeds() and lesson_generator() derive the lesson's seeds from it.
_run = {"seed": 0}
# Seeds of one run are spaced this far apart, so no two setup seeds share a training seed.
SEEDS_PER_RUN = 1000
# Set by the claims audit: claims are recorded there (one JSON line each) and a claim that
# does not hold is recorded instead of stopping the lesson, so every later claim is tried.
CLAIMS_LOG = "COURSE_CLAIMS_LOG"


@contextmanager
def one_thread():
    """Run torch on one thread inside the block, restoring the previous count afterwards.

    Used in every lesson.
    """
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def setup(seed: int = 0, language: str = "en") -> None:
    """Seed Python, NumPy and torch, use one torch thread, set print options, report the device.

    ``language`` is the edition's: "en", or "zh-CN" for Chinese messages and a CJK font.

    Every tensor in the lessons is small: a second thread costs more in hand-over than it
    saves (on a busy machine, many times more), and one thread makes float reductions add
    up in one order, so re-running a lesson on the same CPU prints the same numbers. Another
    CPU may not: torch picks its kernels by the CPU's vector instructions (AVX-512, AVX2 or
    none: ``torch.backends.cpu.get_cpu_capability()``), and they add in other orders, so a
    training loss can differ in the third decimal after a few hundred steps (measured: 60
    steps of lesson 12's model end at 3.04481 with AVX-512, 3.04527 with AVX2, 3.04569
    without). That is why lessons print rounded results, and the cells whose numbers depend on
    the CPU are not compared with the stored ones but assert their claims instead.

    Used in every lesson.
    """
    _run["seed"] = require_seed("seed", seed)
    set_language(language)
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.set_num_threads(1)
    torch.set_printoptions(precision=3, sci_mode=False, linewidth=100)
    np.set_printoptions(precision=3, suppress=True, linewidth=100)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    print(_(
        "seed {seed}, device {device}, 1 torch thread (every lesson runs on a CPU)").format(
        seed=seed, device=device))


def seeds(n: int) -> tuple[int, ...]:
    """The lesson's ``n`` training seeds, derived from the seed ``setup()`` was given.

    ``setup(seed=0)`` (the stored run) gives ``0, 1, ..., n - 1``; ``setup(seed=s)`` gives
    ``1000 s, 1000 s + 1, ...``: other models, for claims that must hold on any seed.

    Used in lessons 01, 03, 04, 05, 06, 07, 08, 11, 12, 13, 14, 15, 16, 17, 18 and 19.
    """
    n = require_positive_int("n", n)
    if n > SEEDS_PER_RUN:
        raise ValueError(_(
            "n should be at most {SEEDS_PER_RUN} seeds, got {n}"
        ).format(SEEDS_PER_RUN=SEEDS_PER_RUN, n=n))
    base = SEEDS_PER_RUN * _run["seed"]
    return tuple(base + i for i in range(n))


def lesson_generator(index: int = 0) -> torch.Generator:
    """A ``torch.Generator`` seeded with the lesson's seed number ``index`` (``seeds``): for a
    data draw or an initialisation that must change with the setup seed and with nothing
    else (re-running the cell gives the same draw).

    Used in lessons 01, 02, 03, 04, 05, 06, 07, 08, 09, 11, 12, 13, 14, 15, 16, 17, 18 and 19.
    """
    require_int_in_range("index", index, 0, SEEDS_PER_RUN - 1)
    return torch.Generator().manual_seed(SEEDS_PER_RUN * _run["seed"] + index)


def claim(holds, statement: str) -> None:
    """Check a claim the lesson's prose makes and print it as a line the learner reads.

    ``holds`` is a bool (or a one-element bool tensor); ``statement`` says what the lesson
    claims, in its own words. A claim that holds prints ``✓ statement``; one that does not
    stops the lesson with an AssertionError naming the claim, so prose cannot go stale.

    Used in every lesson.
    """
    if isinstance(holds, torch.Tensor):
        if holds.numel() != 1:
            raise ValueError(_(
                "claim() needs one truth value, got a tensor of shape {holds_shape}; use .all() "
                "or .any()"
            ).format(holds_shape=tuple(holds.shape)))
        holds = bool(holds.item())
    if not isinstance(holds, (bool, np.bool_)):
        raise TypeError(_("claim() needs a bool, got {kind}").format(kind=type(holds).__name__))
    if not isinstance(statement, str) or not statement.strip():
        raise TypeError(_(
            "claim() needs the statement as a non-empty str, got {statement!r}"
        ).format(statement=statement))
    log = os.environ.get(CLAIMS_LOG)
    if log:
        with open(log, "a", encoding="utf-8") as file:
            file.write(json.dumps({"statement": statement, "holds": bool(holds)},
                                  ensure_ascii=False) + "\n")
        if not holds:
            print(f"✗ {statement}")
            return
    if not holds:
        raise AssertionError(_(
            "✗ the lesson claims: {statement} — but the code says otherwise").format(
            statement=statement))
    print(f"✓ {statement}")
