"""Helpers for the notebooks of *Self-attention, hands-on*.

Each module holds one idea; a lesson imports the few names it needs, e.g.
``from course_utils.attention import scaled_dot_product_attention``.
"""

__version__ = "0.1.0"
