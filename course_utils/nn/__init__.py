"""Attention mechanisms: the cores that later layers (models, experiments) build on."""
