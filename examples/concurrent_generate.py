"""Many trio tasks generating from one model at once.

    python examples/concurrent_generate.py [--device cpu|cuda] [--slots 4] [--requests 8]

Each request streams into its own buffer; the model's job queue hands requests to free slots (each
slot owns its KV cache). Prints each completion and the aggregate decode throughput.
"""

from __future__ import annotations

import argparse
import time

import trio

from xinfer_async import llm

PROMPTS = ["The capital of France is", "A short poem about the sea:", "def fibonacci(n):",
           "Three facts about the Moon:", "Once upon a time", "The best way to learn Python is",
           "Water boils at", "My favourite colour is"]


async def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--device", default=None)
    p.add_argument("--slots", type=int, default=4)
    p.add_argument("--requests", type=int, default=8)
    p.add_argument("--max-tokens", type=int, default=32)
    args = p.parse_args(argv)

    model = await llm.load(args.model, device=args.device, slots=args.slots, ctx=512)
    print(model)
    results = {}

    async def one(i: int) -> None:
        results[i] = await model.complete(PROMPTS[i % len(PROMPTS)], max_tokens=args.max_tokens)

    t0 = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for i in range(args.requests):
            nursery.start_soon(one, i)
    elapsed = time.perf_counter() - t0
    for i in range(args.requests):
        print(f"[{i}] {PROMPTS[i % len(PROMPTS)]!r} -> {results[i].text!r}")
    tokens = sum(len(r.token_ids) for r in results.values())
    print(f"{args.requests} requests, {tokens} tokens in {elapsed:.2f} s: {tokens / elapsed:.1f} tok/s aggregate; "
          f"at most {model.statistics()['max_running']} of {model.slots} decoding at once")
    await model.aclose()


if __name__ == "__main__":
    trio.run(main)
