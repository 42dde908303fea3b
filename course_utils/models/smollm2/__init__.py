"""SmolLM2-135M-Instruct read offline from its GGUF file: the file, the weights and
the tokenizer (lesson 14)."""
