"""The attention core: attention, masks, positions, the KV cache, the blocks,
training and generation."""
