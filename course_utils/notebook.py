"""The one setup call every lesson makes after its imports, and the thread setting it uses."""

from __future__ import annotations

import random
from contextlib import contextmanager

import numpy as np
import torch


@contextmanager
def one_thread():
    """Run torch on one thread inside the block, restoring the previous count afterwards."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def setup(seed: int = 0) -> None:
    """Seed Python, NumPy and torch, use one torch thread, set print options, report the device.

    Every tensor in the lessons is small: a second thread costs more in hand-over than it
    saves (on a busy machine, many times more), and one thread makes float reductions add
    up in the same order on every machine, so the printed numbers are reproducible.
    """
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.set_num_threads(1)
    torch.set_printoptions(precision=3, sci_mode=False, linewidth=100)
    np.set_printoptions(precision=3, suppress=True, linewidth=100)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    print(f"seed {seed}, device {device}, 1 torch thread (every lesson runs on a CPU)")
