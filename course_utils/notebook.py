"""The one setup call every lesson makes after its imports."""

from __future__ import annotations

import random

import numpy as np
import torch


def setup(seed: int = 0) -> None:
    """Seed Python, NumPy and torch, set short print options and report the device."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.set_printoptions(precision=3, sci_mode=False, linewidth=100)
    np.set_printoptions(precision=3, suppress=True, linewidth=100)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    print(f"seed {seed}, device {device} (every lesson runs on a CPU)")
