"""Time greedy decoding of SmolLM2 by the course's Llama against transformers' on one thread.

Both models hold the very same tensors (``transformers_twin``; transformers runs its default
attention, ``sdpa``), decode the same prompt greedily with a KV cache, and must produce the
same tokens. Runs alternate between the two so that a busy machine slows both alike, and
which one goes first alternates too; the
report gives each one's median and the ratio of the medians (course / transformers):

    python -m tools.measure_decode [--tokens 64] [--runs 5]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from course_utils.models.smollm2.loading import load_smollm2, transformers_twin
from course_utils.nn.generation import generate

PROMPT = "def fibonacci(n):\n    if n < 2:\n        return n\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(1)
    model, tokenizer = load_smollm2()
    twin = transformers_twin(model)
    twin.config._attn_implementation = "sdpa"  # transformers' default, fused
    prompt = torch.tensor([tokenizer.encode(PROMPT)])
    times: dict[str, list[float]] = {"course": [], "transformers": []}
    decoders = {
        "course": lambda: generate(model, prompt, args.tokens),
        "transformers": lambda: twin.generate(
            prompt, max_new_tokens=args.tokens, do_sample=False, use_cache=True,
            attention_mask=torch.ones_like(prompt), pad_token_id=0),
    }
    outputs = {}
    with torch.no_grad():
        for run in range(args.runs):
            # The second of two back-to-back runs was measured about 2 % faster whichever model
            # it was: the order alternates so that neither gets the better seat every time.
            order = list(decoders) if run % 2 == 0 else list(reversed(decoders))
            for name in order:
                start = time.perf_counter()
                outputs[name] = decoders[name]()
                times[name].append(time.perf_counter() - start)
    same = torch.equal(outputs["course"], outputs["transformers"])
    medians = {name: statistics.median(values) for name, values in times.items()}
    for name, values in times.items():
        print(f"{name:>12}: median {medians[name]:.3f} s for {args.tokens} tokens "
              f"({', '.join(f'{v:.3f}' for v in values)})")
    print(f"ratio course / transformers: {medians['course'] / medians['transformers']:.3f}; "
          f"same greedy tokens: {same}")


if __name__ == "__main__":
    main()
