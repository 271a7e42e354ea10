"""``xinfer-async bench load``: a serving benchmark, N clients with Poisson arrivals.

As vLLM's ``benchmark_serving`` does: ``--requests`` requests arrive at ``--rate`` requests/s, with
exponential gaps (a Poisson process; ``--rate inf`` sends them all at once), each a trio task that
streams a greedy completion of ``--prompt-tokens`` random token ids for exactly ``--max-tokens``
tokens (a synthetic model has no end-of-sequence id; a real one may stop earlier) from a model
loaded with ``--slots`` slots. One row per (slots, rate) pair (both take comma-separated lists).

Per row (warm-up excluded: one short request per slot runs first, concurrently):

- ``req/s``, ``out tok/s``: completed requests and generated tokens / the time from the first
  arrival to the last token;
- ``latency``: arrival to last token, p50/p90/p99 (seconds);
- ``ttft``: time to first token (arrival to first streamed piece, queue wait included), p50/p99;
- ``itl``: inter-token latency, the gaps between streamed pieces divided by the tokens each
  carries, all requests pooled, p50/p99; ``tpot``: per request (latency - ttft) / (tokens - 1);
- ``queue``: wait for a slot (the ``JobQueue``'s submit-to-start time of each request, from its
  ``Timings``), p50/p99; the job queue's own ``statistics()`` goes into the JSON;
- ``busy``: slots running a request, sampled every ``--sample-ms`` (the series goes into the JSON),
  mean and max.

Every time is taken on the host when a token reaches its client, i.e. after the fence of its step.

Usage: ``xinfer-async bench load [--model synthetic:smollm2-135m] [--device cpu|cuda]
[--rate 4] [--requests 64] [--prompt-tokens 32] [--max-tokens 64] [--slots 8] [--json F] [--plot F.png]``
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from typing import Any

import numpy as np
import trio

from ._report import add_output_args, check_plot, percentiles, plot_concurrency, render_table, write_json
from . import parser as bench_parser

COLUMNS = [
    ("slots", "slots", "d"), ("rate", "rate", ".3g"), ("req/s", "req_per_s", ".2f"),
    ("out tok/s", "out_tok_per_s", ".1f"),
    ("lat p50 s", "latency_s_p50", ".3f"), ("lat p90", "latency_s_p90", ".3f"), ("lat p99", "latency_s_p99", ".3f"),
    ("ttft p50 ms", "ttft_ms_p50", ".1f"), ("ttft p99", "ttft_ms_p99", ".1f"),
    ("itl p50 ms", "itl_ms_p50", ".2f"), ("itl p99", "itl_ms_p99", ".2f"),
    ("tpot p50 ms", "tpot_ms_p50", ".2f"),
    ("queue p50 ms", "queue_ms_p50", ".1f"), ("queue p99", "queue_ms_p99", ".1f"),
    ("busy mean", "busy_mean", ".2f"), ("busy max", "busy_max", "d"),
]


def arrival_times(n: int, rate: float, seed: int = 0) -> np.ndarray:
    """Arrival offsets (seconds from the start, float64 (n,), non-decreasing) of a Poisson process
    of ``rate`` requests/s: cumulative exponential gaps, the first request at 0; all 0 when ``rate``
    is inf.

    Raises:
        ValueError: ``rate`` <= 0 or ``n`` < 1.
    """
    if not rate > 0:
        raise ValueError(f"rate must be > 0 requests/s (or inf), got {rate}")
    if n < 1:
        raise ValueError(f"requests must be >= 1, got {n}")
    if math.isinf(rate):
        return np.zeros(n)
    gaps = np.random.default_rng(seed).exponential(1.0 / rate, size=n)
    gaps[0] = 0.0
    return np.cumsum(gaps)


def random_prompts(model: Any, n: int, tokens: int, seed: int = 0) -> list[list[int]]:
    """``n`` prompts of ``tokens`` token ids each, drawn uniformly from the non-control ids."""
    special = model.tokenizer.special_ids
    ids = np.array([i for i in range(model.config.vocab_size) if i not in special])
    rng = np.random.default_rng(seed + 1)
    return [rng.choice(ids, size=tokens).tolist() for _ in range(n)]


async def _client(model: Any, prompt: list[int], max_tokens: int, arrive_at: float, out: dict) -> None:
    """One client: sleeps until ``arrive_at`` (trio clock), streams, records times (perf_counter)."""
    await trio.sleep_until(arrive_at)
    t0 = time.perf_counter()
    stream = model.generate(prompt, max_tokens=max_tokens)
    pieces = []  # (arrival time, tokens so far)
    async for _ in stream:
        pieces.append((time.perf_counter(), stream.token_count))
    end = time.perf_counter()
    r = stream.result
    n = len(r.token_ids)
    itl = []
    for (ta, na), (tb, nb) in zip(pieces, pieces[1:]):
        if nb > na:  # a held-back multi-byte character: one piece carries several tokens
            itl += [(tb - ta) / (nb - na)] * (nb - na)
    ttft = pieces[0][0] - t0 if pieces else r.timings.time_to_first_token_s
    out.update(start=t0, end=end, tokens=n, latency=end - t0, ttft=ttft, itl=itl,
               tpot=(end - t0 - ttft) / (n - 1) if n > 1 else math.nan, queue=r.timings.queue_wait_s)


async def _sampler(model: Any, every_s: float, samples: list, t0: float) -> None:
    while True:
        stats = model.statistics()  # running: slots (or batched sequences) held; waiting: queued requests
        samples.append((round(time.perf_counter() - t0, 4), stats["running"], stats["waiting"]))
        await trio.sleep(every_s)


async def run_row(model: Any, *, rate: float, requests: int, prompt_tokens: int, max_tokens: int,
                  sample_ms: float = 10.0, seed: int = 0, progress: bool = True) -> dict[str, Any]:
    """One load run on a loaded model (warm-up first); returns the row (see the module doc)."""
    prompts = random_prompts(model, requests, prompt_tokens, seed)
    # warm-up: every slot runs a prefill and a few decode steps, concurrently
    async with trio.open_nursery() as nursery:
        for i in range(model.slots):
            nursery.start_soon(_client, model, prompts[i % requests], min(4, max_tokens), 0.0, {})
    offsets = arrival_times(requests, rate, seed)
    results: list[dict] = [{} for _ in range(requests)]
    samples: list[tuple[float, int, int]] = []
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=requests, desc=f"load: {model.slots} slots, {rate:g} req/s", unit="req", file=sys.stderr,
                   leave=False)

    async def one(i: int, start: float) -> None:
        await _client(model, prompts[i], max_tokens, start + offsets[i], results[i])
        if bar is not None:
            bar.update()

    t_start = time.perf_counter()
    start = trio.current_time()
    async with trio.open_nursery() as outer:
        outer.start_soon(_sampler, model, sample_ms / 1e3, samples, t_start)
        async with trio.open_nursery() as nursery:
            for i in range(requests):
                nursery.start_soon(one, i, start)
        outer.cancel_scope.cancel()
    if bar is not None:
        bar.close()
    first = min(r["start"] for r in results)
    wall = max(r["end"] for r in results) - first
    tokens = sum(r["tokens"] for r in results)
    busy = np.array([s[1] for s in samples]) if samples else np.zeros(1, int)
    jobs = model.statistics()["scheduler"]
    return dict(
        slots=model.slots, rate=rate, requests=requests, prompt_tokens=prompt_tokens, max_tokens=max_tokens,
        duration_s=wall, output_tokens=tokens, req_per_s=requests / wall, out_tok_per_s=tokens / wall,
        **percentiles((r["latency"] for r in results), prefix="latency_s_"),
        **percentiles((r["ttft"] for r in results), (50, 90, 99), 1e3, "ttft_ms_"),
        **percentiles((x for r in results for x in r["itl"]), (50, 90, 99), 1e3, "itl_ms_"),
        **percentiles((r["tpot"] for r in results if not math.isnan(r["tpot"])), (50, 99), 1e3, "tpot_ms_"),
        **percentiles((r["queue"] for r in results), (50, 90, 99), 1e3, "queue_ms_"),
        busy_mean=float(busy.mean()), busy_max=int(busy.max()), sample_ms=sample_ms,
        occupancy={"t_s": [s[0] for s in samples], "running": [s[1] for s in samples],
                   "queued": [s[2] for s in samples]},  # t_s: seconds since the first arrival
        scheduler=jobs,  # the scheduler's statistics() after the row (JobQueue's or Batcher's; the warm-up included)
    )


async def _main(args: argparse.Namespace) -> dict[str, Any]:
    from .. import llm

    slot_counts = [int(s) for s in str(args.slots).split(",")]
    rates = [float(r) for r in str(args.rate).split(",")]
    ctx = args.prompt_tokens + args.max_tokens + 8
    rows = []
    description = None
    for slots in slot_counts:
        t = time.perf_counter()
        model = await llm.load(args.model, device=args.device, slots=slots, ctx=ctx,
                               max_queued=max(256, args.requests), batching=args.batching)
        load_s = time.perf_counter() - t
        try:
            if description is None:
                description = getattr(model.device, "description", model.device.name)
                print(f"model {model!r}; loaded in {load_s:.1f} s; device {description}", file=sys.stderr)
            for rate in rates:
                row = await run_row(model, rate=rate, requests=args.requests, prompt_tokens=args.prompt_tokens,
                                    max_tokens=args.max_tokens, sample_ms=args.sample_ms, seed=args.seed,
                                    progress=not args.no_progress)
                row["load_s"] = load_s
                rows.append(row)
        finally:
            await model.aclose()
    return dict(benchmark="load", model=str(args.model), device=description, batching=args.batching, rows=rows)


def main(argv: list[str] | None = None) -> int:
    p = bench_parser("load", __doc__)
    p.add_argument("--model", default="smollm2-135m",
                   help="a known model name, a .gguf path, or synthetic:SHAPE (default: smollm2-135m)")
    p.add_argument("--device", default=None, help="cpu, cuda, cuda:N or auto (default: $XINFER_DEVICE, else auto)")
    p.add_argument("--rate", default="4", help="arrivals, requests/s, comma-separated for several rows; inf: all at once (default: 4)")
    p.add_argument("--requests", type=int, default=64, help="timed requests a row (default: 64)")
    p.add_argument("--prompt-tokens", type=int, default=32, help="prompt length, tokens (default: 32)")
    p.add_argument("--max-tokens", type=int, default=64, help="generated tokens a request (default: 64)")
    p.add_argument("--slots", default="8", help="slot counts, comma-separated for several rows (default: 8)")
    p.add_argument("--sample-ms", type=float, default=10.0, help="slot occupancy sampling period, ms (default: 10)")
    p.add_argument("--seed", type=int, default=0, help="seed of the arrivals and the prompts (default: 0)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    p.add_argument("--batching", action="store_true",
                   help="load with batching=True: the active requests decode in one batched step")
    add_output_args(p)
    args = p.parse_args(argv)
    try:
        arrival_times(args.requests, min(float(r) for r in str(args.rate).split(",")))
        check_plot(args.plot)
    except (ValueError, RuntimeError) as exc:
        p.error(str(exc))
    result = trio.run(_main, args)
    print(f"load: {args.requests} requests a row, Poisson arrivals, {args.prompt_tokens}-token prompts, "
          f"{args.max_tokens} tokens each (greedy); model {result['model']} on {result['device']}")
    print(render_table(COLUMNS, result["rows"]))
    if args.json:
        write_json(args.json, result)
    if args.plot:
        plot_concurrency(args.plot, result["rows"], x="busy_mean", x_label="mean busy slots (concurrency)",
                         tok_per_s="out_tok_per_s",
                         latencies={"itl p50": "itl_ms_p50", "itl p99": "itl_ms_p99", "ttft p50": "ttft_ms_p50"},
                         title=(f"bench load: {result['model']} on {result['device']}, batching "
                                f"{'on' if args.batching else 'off'}, {args.prompt_tokens}-token prompts, "
                                f"{args.max_tokens} tokens asked a request"),
                         point_label=lambda r: f"{r['slots']} slots, "
                         + ("all at once" if math.isinf(r["rate"]) else f"{r['rate']:g} req/s"))
    return 0
