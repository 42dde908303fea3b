"""Every test process runs torch on one thread (loaded by pyproject's addopts, -p tests.one_thread).

The suite runs as two processes on two cores (the lanes of ``tools/course.py test``, or
``test --fast``'s two xdist workers), and the lessons' kernels already use one thread each
(``course_utils.notebook.setup``). With torch's default of one thread per core, every small
operation of a test hands work to a second thread that must wait for a core the other
process holds: measured on a busy 2-core machine, ``test_any_seed_gives_the_same_verdicts``
took 24 s with two threads and 5 s with one.
"""

from __future__ import annotations


def pytest_configure(config) -> None:
    if getattr(config.option, "numprocesses", None) and not hasattr(config, "workerinput"):
        return  # xdist's controller runs no test: importing torch would delay its workers' start
    import torch

    torch.set_num_threads(1)
