"""What every lesson uses: the setup call, the thread setting, and ``claim`` for checked prose."""

from __future__ import annotations

import random
from contextlib import contextmanager

import numpy as np
import torch

from course_utils.checks import require_seed
from course_utils.language import set_language, text


@contextmanager
def one_thread():
    """Run torch on one thread inside the block, restoring the previous count afterwards."""
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
    up in the same order on every machine, so the printed numbers are reproducible.
    """
    require_seed("seed", seed)
    set_language(language)
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.set_num_threads(1)
    torch.set_printoptions(precision=3, sci_mode=False, linewidth=100)
    np.set_printoptions(precision=3, suppress=True, linewidth=100)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    print(text(f"seed {seed}, device {device}, 1 torch thread (every lesson runs on a CPU)",
               f"随机种子 {seed}，设备 {device}，1 个 torch 线程（每一课都在 CPU 上运行）"))


def claim(holds, statement: str) -> None:
    """Check a claim the lesson's prose makes and print it as a line the learner reads.

    ``holds`` is a bool (or a one-element bool tensor); ``statement`` says what the lesson
    claims, in its own words. A claim that holds prints ``✓ statement``; one that does not
    stops the lesson with an AssertionError naming the claim, so prose cannot go stale.
    """
    if isinstance(holds, torch.Tensor):
        if holds.numel() != 1:
            raise ValueError(f"claim() needs one truth value, got a tensor of shape "
                             f"{tuple(holds.shape)}; use .all() or .any()")
        holds = bool(holds.item())
    if not isinstance(holds, (bool, np.bool_)):
        raise TypeError(f"claim() needs a bool, got {type(holds).__name__}")
    if not isinstance(statement, str) or not statement.strip():
        raise TypeError(f"claim() needs the statement as a non-empty str, got {statement!r}")
    if not holds:
        raise AssertionError(text(f"✗ the lesson claims: {statement} — but the code says otherwise",
                                  f"✗ 课文声称：{statement}——但代码的结果并非如此"))
    print(f"✓ {statement}")
