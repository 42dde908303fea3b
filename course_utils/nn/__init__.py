"""The attention core: mechanisms a model is built from."""
