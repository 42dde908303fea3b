"""Measure lesson 12's recipe on a committed text: a GPT against the unigram and bigram
baselines, and how much its samples look like regulated verse. Run by hand (one torch
thread; the numbers go into the lesson's claims):

    python -m tools.measure_text_gpt                     # lesson 12's recipe, tang_poems, 5 seeds
    python -m tools.measure_text_gpt --batch 8 --steps 1200 --seeds 0 1

For every seed: training time, validation loss (every non-overlapping window of the
validation tokens), its margin under the bigram, and the share of 5- or 7-character lines
(``verse_line_share``) of samples at temperature 0.8 and greedy, each continuing the title
and author lines of the first 8 validation poems, against samples of the counted bigram.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F

from course_utils.data.corpus import (
    CharTokenizer,
    bigram_loss,
    load_text,
    train_validation_split,
    unigram_loss,
    verse_line_share,
)
from course_utils.models.gpt import GPT, train_on_text
from course_utils.nn.generation import generate


def _prompts(validation_text: str, count: int) -> list[str]:
    """The title and author lines (with their newlines) of the first ``count`` whole poems."""
    poems = validation_text.split("\n\n")[1:count + 1]  # the first block is cut
    return ["\n".join(poem.split("\n")[:2]) + "\n" for poem in poems]


def _bigram_sample(counts, prompt_id: int, length: int, temperature: float,
                   generator: torch.Generator) -> list[int]:
    """Tokens of the counted (maximum-likelihood) bigram, the sharpest bigram sampler."""
    out, current = [], prompt_id
    for _ in range(length):
        row = counts[current]
        if temperature == 0:
            current = int(row.argmax())
        else:
            weights = row ** (1 / temperature) if row.sum() else torch.ones_like(row)
            current = int(torch.multinomial(weights, 1, generator=generator))
        out.append(current)
    return out


def measure(seed: int, args, tokenizer, train, validation) -> dict[str, float]:
    vocab = tokenizer.vocab_size
    torch.manual_seed(seed)
    model = GPT(vocab, max_len=args.seq_len, d_model=args.d_model, num_heads=4,
                num_layers=args.layers)
    batches = torch.Generator().manual_seed(seed)
    start = time.perf_counter()
    train_on_text(model, train, args.steps, batches, batch_size=args.batch, lr=args.lr)
    seconds = time.perf_counter() - start
    windows = (len(validation) - 1) // args.seq_len
    inputs = validation[:windows * args.seq_len].view(windows, args.seq_len)
    targets = validation[1:windows * args.seq_len + 1].view(windows, args.seq_len)
    with torch.no_grad():
        loss = F.cross_entropy(model(inputs).reshape(-1, vocab), targets.reshape(-1)).item()
    prompts = _prompts(tokenizer.decode(validation), 8)
    samples = {0.8: [], 0.0: []}
    sampler = torch.Generator().manual_seed(1000 + seed)
    for prompt in prompts:
        ids = torch.tensor([tokenizer.encode(prompt)])
        for temperature, texts in samples.items():
            out = generate(model, ids, args.sample_len, use_cache=False,
                           temperature=temperature, generator=sampler)
            texts.append(prompt[-1] + tokenizer.decode(out[0, ids.shape[1]:]))
    counts = torch.zeros(vocab, vocab)
    counts.index_put_((train[:-1], train[1:]), torch.ones(len(train) - 1), accumulate=True)
    bigram = {0.8: [], 0.0: []}
    for prompt in prompts:
        for temperature, texts in bigram.items():
            ids = _bigram_sample(counts, tokenizer.encode(prompt)[-1], args.sample_len,
                                 temperature, sampler)
            texts.append(prompt[-1] + tokenizer.decode(ids))
    return {"seconds": seconds, "loss": loss,
            "gpt_t0.8": verse_line_share("".join(samples[0.8])),
            "gpt_greedy": verse_line_share("".join(samples[0.0])),
            "bigram_t0.8": verse_line_share("".join(bigram[0.8])),
            "bigram_greedy": verse_line_share("".join(bigram[0.0])),
            "sample": samples[0.8][0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--text", default="tang_poems")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--seq-len", type=int, default=32)
    parser.add_argument("--d-model", type=int, default=64)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--steps", type=int, default=700)
    parser.add_argument("--lr", type=float, default=5e-3)
    parser.add_argument("--sample-len", type=int, default=200)
    args = parser.parse_args()
    torch.set_num_threads(1)
    text = load_text(args.text)
    tokenizer = CharTokenizer.from_text(text)
    train, validation = train_validation_split(torch.tensor(tokenizer.encode(text)), 0.1)
    unigram = unigram_loss(train, validation, tokenizer.vocab_size)
    bigram = bigram_loss(train, validation, tokenizer.vocab_size)
    print(f"{args.text}: vocab {tokenizer.vocab_size}, {len(train)} training and "
          f"{len(validation)} validation tokens; unigram {unigram:.3f}, bigram {bigram:.3f}; "
          f"validation text's verse-line share {verse_line_share(tokenizer.decode(validation))}")
    rows = []
    for seed in args.seeds:
        row = measure(seed, args, tokenizer, train, validation)
        row["margin"] = bigram - row["loss"]
        rows.append(row)
        print(f"seed {seed}: " + ", ".join(f"{key} {value:.3f}" for key, value in row.items()
                                          if key != "sample"), flush=True)
        print("  " + row["sample"][:120].replace("\n", "/"))
    for key in ("seconds", "loss", "margin", "gpt_t0.8", "gpt_greedy", "bigram_t0.8",
                "bigram_greedy"):
        values = [row[key] for row in rows]
        print(f"{key}: min {min(values):.3f}, median {statistics.median(values):.3f}, "
              f"max {max(values):.3f}")


if __name__ == "__main__":
    main()
