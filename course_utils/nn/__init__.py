"""Attention mechanisms: the layers that mix tokens, one module per idea."""
