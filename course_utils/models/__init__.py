"""Whole models built from the course's blocks: GPT, Llama, the small
sequence readers, the toy models, MiniLM and SmolLM2."""
