"""Helpers for the notebooks of *Self-attention, hands-on*.

A lesson imports the few names it needs, e.g.
``from course_utils.nn.attention import scaled_dot_product_attention``. The package has:

- core modules, one per idea of the course (``attention``, ``masks``, ``transformer``,
  ``cost``, ``plots`` ...), each tested against PyTorch's own implementation;
- modules with the experiments of a particular lesson (their docstring names it);
- what every module shares: ``checks`` (the input validators, each written once),
  ``training`` (the one training loop, ``fit``) and ``notebook`` (``setup`` and ``claim``);
- ``exercises`` (the exercises and their checkers, one registry) and ``widgets``.
"""

__version__ = "0.1.0"
