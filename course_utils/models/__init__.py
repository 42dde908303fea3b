"""Whole models built from the attention core."""
