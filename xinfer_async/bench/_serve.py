"""``xinfer-async bench serve --url URL``: a streaming load test of any OpenAI-compatible server
(``xinfer-async serve``, llama.cpp's llama-server, vLLM).

As vLLM's ``benchmark_serving``: per row, ``--requests`` requests arrive as a Poisson process of
``--rate`` requests/s (exponential gaps; ``inf``: all at once), at most ``--concurrency`` in
flight at a time (a client waits for a free place); each streams a completion (``stream: true``,
``stream_options.include_usage``) of ``--max-tokens`` tokens at temperature 0 with
``ignore_eos: true`` (vLLM's and llama-server's field: fixed-length requests). One row per
(concurrency, rate) pair: both take comma-separated lists, a sweep.

Per row (a warm-up of one short request per place in flight runs first and is left out):

- ``req/s``, ``out tok/s``: completed requests and generated tokens (the usage the server
  reports, else the content chunks) / the time from the first arrival to the last token;
- ``steady tok/s``: generated tokens / time while every request of the row streams (from the last
  first token to the first last token; as ``bench model`` reports it: the figure to hold against
  ``bench model --batching`` with as many requests as ``--concurrency``; ``-`` when that window is
  under 4 tokens a request). A chunk does not say how many tokens it carries: a request's tokens
  (its usage) are dealt to its chunks in proportion to their characters (exact for one token a
  chunk; for a server that groups tokens into events, as ``xinfer-async serve`` does with many
  streams, an estimate good to the variation of characters a token);
- ``ttft``: time to first token (request sent to the first content chunk), ``itl``: gaps
  between content chunks, all requests pooled (a chunk counted as one token, as vLLM's benchmark
  does), ``tpot``: (latency - ttft) / (tokens - 1) per request, ``latency``: sent to last chunk;
  each as the median and the p10-p90 spread, plus p99. A server that puts several tokens in one
  event (``xinfer-async serve``'s stream interval with many streams, vLLM's ``--stream-interval``)
  has fewer, longer gaps, and events that reach the client in one read have gaps near 0: ``tpot``
  is the figure that does not depend on how the tokens were grouped.

- ``cli cpu us/tok``: CPU time of the client processes while the row ran / generated tokens;
  ``srv cpu us/tok``: the same of the server, from its ``/metrics`` ``process_cpu_seconds_total``
  read before and after the row (``-`` for a server without it). CPU time, not wall time, is the
  figure that holds on a shared machine.

Times are taken when a chunk arrives (HTTP client: httpx under trio, the SSE parsed from the bytes)
in ``--workers`` client processes (default min(4, CPUs); a row's request i goes to process
i mod N, its places in flight dealt out evenly; ``time.perf_counter`` is the system's monotonic
clock, one clock for all of them, so their records merge): one Python process parsing 64 streams
of a fast server would itself be the limit.

Usage: ``xinfer-async bench serve --url http://127.0.0.1:8080 [--concurrency 1,8,64] [--rate inf]
[--requests 64] [--max-tokens 128] [--workers 4] [--chat] [--api-key KEY] [--json F] [--plot F.png]``
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import sys
import time
from typing import Any

import numpy as np
import trio

from . import parser as bench_parser
from ._load import arrival_times
from ._model import PROMPTS, steady_rate
from ._report import add_output_args, check_plot, percentiles, render_table, write_json

COLUMNS = [
    ("conc", "concurrency", "d"), ("rate", "rate", ".3g"), ("reqs", "requests", "d"), ("req/s", "req_per_s", ".2f"),
    ("out tok/s", "out_tok_per_s", ".1f"), ("steady tok/s", "steady_tok_per_s", ".1f"),
    ("ttft p50 ms", "ttft_ms_p50", ".1f"), ("p10", "ttft_ms_p10", ".1f"), ("p90", "ttft_ms_p90", ".1f"),
    ("itl p50 ms", "itl_ms_p50", ".2f"), ("p10", "itl_ms_p10", ".2f"), ("p90", "itl_ms_p90", ".2f"),
    ("p99", "itl_ms_p99", ".2f"), ("tpot p50 ms", "tpot_ms_p50", ".2f"), ("lat p50 s", "latency_s_p50", ".3f"),
    ("cli cpu us/tok", "client_cpu_us_per_tok", ".0f"), ("srv cpu us/tok", "server_cpu_us_per_tok", ".0f"),
    ("errors", "errors", "d"),
]
QS = (10, 50, 90, 99)


def request_body(model: str | None, prompt: str, max_tokens: int, chat: bool) -> dict:
    """The JSON of one streamed greedy fixed-length request."""
    body: dict[str, Any] = {"max_tokens": max_tokens, "temperature": 0, "stream": True,
                            "stream_options": {"include_usage": True}, "ignore_eos": True}
    if model is not None:
        body["model"] = model
    if chat:
        body["messages"] = [{"role": "user", "content": prompt}]
    else:
        body["prompt"] = prompt
    return body


def parse_event(line: str) -> tuple[str, int | None] | None:
    """One SSE line -> (content text, completion tokens from a usage chunk or None); None for a
    line that is no data chunk (blank, comment, ``[DONE]``).

    Raises:
        RuntimeError: an error event (the server's message).
    """
    if not line.startswith("data:"):
        return None
    data = line[5:].strip()
    if data == "[DONE]":
        return None
    chunk = json.loads(data)
    if "error" in chunk:
        raise RuntimeError(f"server error event: {chunk['error']}")
    text = ""
    for c in chunk.get("choices") or []:
        text += c.get("text") or (c.get("delta") or {}).get("content") or ""
    usage = chunk.get("usage")
    return text, (usage or {}).get("completion_tokens")


def parse_events(data: bytes) -> tuple[list[tuple[str, int | None]], bytes]:
    """Complete SSE events at the start of ``data`` (bytes as they came off the socket) ->
    (``parse_event`` of each data event, the incomplete rest). Works on bytes, without decoding
    and splitting lines first: the client's cost per event is what limits it at tens of
    thousands of events a second.

    Raises:
        RuntimeError: an error event (the server's message).
    """
    events = []
    *complete, rest = data.replace(b"\r\n", b"\n").split(b"\n\n")
    for raw in complete:
        for line in raw.split(b"\n"):
            if line.startswith(b"data:"):
                ev = parse_event(line.decode())
                if ev is not None:
                    events.append(ev)
    return events, rest


async def stream_request(client: Any, url: str, body: dict, headers: dict) -> dict:
    """Send one streamed request; returns its times (perf_counter seconds) and token counts."""
    t0 = time.perf_counter()
    times: list[tuple[float, int]] = []  # (arrival, characters of content so far)
    chars = 0
    usage_tokens = None
    async with client.stream("POST", url, json=body, headers=headers) as r:
        if r.status_code != 200:
            raise RuntimeError(f"HTTP {r.status_code}: {(await r.aread()).decode(errors='replace')[:300]}")
        rest = b""
        async for data in r.aiter_bytes():
            events, rest = parse_events(rest + data)
            for text, n in events:
                if n is not None:
                    usage_tokens = n
                if text:
                    chars += len(text)
                    times.append((time.perf_counter(), chars))
    end = time.perf_counter()
    tokens = usage_tokens if usage_tokens is not None else len(times)
    # tokens so far at each chunk: the request's tokens in proportion to the characters (a chunk
    # does not say how many tokens it carries, and a server may group several in one event)
    times = [(t, round(tokens * c / chars)) for t, c in times] if usage_tokens is not None and chars else \
        [(t, k + 1) for k, (t, _) in enumerate(times)]
    ttft = times[0][0] - t0 if times else math.nan
    gaps = [b[0] - a[0] for a, b in zip(times, times[1:])]
    return dict(start=t0, end=end, tokens=tokens, ttft=ttft, itl=gaps, times=times, latency=end - t0,
                tpot=(end - t0 - ttft) / (tokens - 1) if tokens > 1 else math.nan)


@dataclasses.dataclass(frozen=True)
class Share:
    """The part of a row one client process runs.

    Attributes:
        concurrency: its requests in flight at most.
        indices: the row's request numbers it sends (the prompt is ``PROMPTS[i % len(PROMPTS)]``).
        offsets: their arrival times, seconds after the row's start.
    """

    concurrency: int
    indices: tuple[int, ...]
    offsets: tuple[float, ...]


def split_row(concurrency: int, requests: int, rate: float, seed: int, workers: int) -> list[Share]:
    """A row's Poisson arrivals dealt out to ``workers`` client processes (request i to process
    i mod workers, the places in flight as evenly as they go); fewer processes when the row has
    fewer places in flight than ``workers``.

    Raises:
        ValueError: ``workers`` or ``concurrency`` below 1.
    """
    if workers < 1 or concurrency < 1:
        raise ValueError(f"workers and concurrency must be >= 1, got {workers}, {concurrency}")
    offsets = arrival_times(requests, rate, seed)
    w = min(workers, concurrency)
    return [Share(concurrency // w + (k < concurrency % w), tuple(range(k, requests, w)),
                  tuple(float(offsets[i]) for i in range(k, requests, w))) for k in range(w)]


async def warm_up(client: Any, url: str, headers: dict, model: str | None, places: int, chat: bool) -> None:
    """One short request per place in flight (opens the connections; left out of the row)."""
    async with trio.open_nursery() as nursery:
        for i in range(places):
            nursery.start_soon(stream_request, client, url, request_body(model, PROMPTS[i % len(PROMPTS)], 4, chat),
                               headers)


async def run_share(client: Any, url: str, headers: dict, share: Share, start: float, *, model: str | None,
                    max_tokens: int, chat: bool) -> tuple[list[dict], list[str]]:
    """Send ``share``'s requests, each at ``start`` (``trio.current_time()``) + its offset, at most
    ``share.concurrency`` at a time; returns (the records of those that completed, the errors, the
    CPU seconds this process spent meanwhile)."""
    places = trio.Semaphore(share.concurrency)
    results: list[dict] = []
    errors: list[str] = []

    async def one(i: int, offset: float) -> None:
        await trio.sleep_until(start + offset)
        async with places:
            try:
                results.append(await stream_request(client, url, request_body(model, PROMPTS[i % len(PROMPTS)],
                                                                               max_tokens, chat), headers))
            except Exception as exc:  # httpx's errors, an error event, a bad status: counted
                errors.append(f"{type(exc).__name__}: {exc}")

    cpu = time.process_time()
    async with trio.open_nursery() as nursery:
        for i, offset in zip(share.indices, share.offsets):
            nursery.start_soon(one, i, offset)
    return results, errors, time.process_time() - cpu


def _client(httpx: Any, places: int, timeout: float) -> Any:
    return httpx.AsyncClient(timeout=httpx.Timeout(timeout),
                             limits=httpx.Limits(max_connections=places, max_keepalive_connections=places))


async def _row_here(url: str, headers: dict, share: Share, opts: dict, timeout: float) -> tuple[list, list]:
    import httpx

    async with _client(httpx, share.concurrency, timeout) as client:
        await warm_up(client, url, headers, opts["model"], share.concurrency, opts["chat"])
        server_cpu = await _server_cpu_s(client, url, headers)
        out = await run_share(client, url, headers, share, trio.current_time(), **opts)
        return (*out, await _server_cpu_s(client, url, headers) - server_cpu)


async def _row_worker(conn: Any, url: str, headers: dict, share: Share, opts: dict, timeout: float) -> None:
    import httpx

    async with _client(httpx, share.concurrency, timeout) as client:
        await warm_up(client, url, headers, opts["model"], share.concurrency, opts["chat"])
        conn.send("ready")
        start = await trio.to_thread.run_sync(conn.recv)  # a perf_counter time, the same in every process
        out = await run_share(client, url, headers, share, trio.current_time() + (start - time.perf_counter()),
                              **opts)
    conn.send(out)


def _worker_main(conn: Any, *args: Any) -> None:
    try:
        trio.run(_row_worker, conn, *args)
    except BaseException as exc:
        conn.send(RuntimeError(f"client process failed: {type(exc).__name__}: {exc}"))
        raise


async def _server_cpu_s(client: Any, url: str, headers: dict) -> float:
    """The server's ``process_cpu_seconds_total`` from its ``/metrics`` (NaN without it: another
    server, or not Linux)."""
    try:
        r = await client.get(url.rsplit("/v1/", 1)[0] + "/metrics", headers=headers)
        for line in r.text.splitlines():
            if line.startswith("process_cpu_seconds_total "):
                return float(line.split()[1])
    except Exception:  # no /metrics, not Prometheus text: the figure is left out
        pass
    return math.nan


async def _scrape_cpu_s(url: str, headers: dict) -> float:
    import httpx

    async with httpx.AsyncClient(timeout=30) as client:
        return await _server_cpu_s(client, url, headers)


def _row_in_processes(url: str, headers: dict, shares: list[Share], opts: dict, timeout: float) -> tuple[list, list]:
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")  # the parent's state (threads, sockets) stays out
    procs, conns = [], []
    try:
        for share in shares:
            mine, theirs = ctx.Pipe()
            proc = ctx.Process(target=_worker_main, args=(theirs, url, headers, share, opts, timeout), daemon=True)
            proc.start()
            procs.append(proc)
            conns.append(mine)
        for c in conns:
            if (msg := c.recv()) != "ready":
                raise msg
        server_cpu = trio.run(_scrape_cpu_s, url, headers)
        start = time.perf_counter() + 0.05
        for c in conns:
            c.send(start)
        results, errors, client_cpu = [], [], 0.0
        for c in conns:
            out = c.recv()
            if isinstance(out, BaseException):
                raise out
            results += out[0]
            errors += out[1]
            client_cpu += out[2]
        return results, errors, client_cpu, trio.run(_scrape_cpu_s, url, headers) - server_cpu
    finally:
        for proc in procs:
            proc.join(timeout=10)
            if proc.is_alive():
                proc.kill()


def run_row(url: str, headers: dict, *, model: str | None, concurrency: int, rate: float, requests: int,
            max_tokens: int, chat: bool, seed: int = 0, workers: int = 1, timeout: float = 600.0) -> dict:
    """One row: a warm-up, then ``requests`` Poisson arrivals with at most ``concurrency`` in
    flight, sent from ``min(workers, concurrency)`` client processes (1: this process) whose
    records are merged (their ``time.perf_counter`` is the system's monotonic clock, one
    clock for all of them)."""
    shares = split_row(concurrency, requests, rate, seed, workers)
    opts = dict(model=model, max_tokens=max_tokens, chat=chat)
    if len(shares) == 1:
        done, errors, client_cpu, server_cpu = trio.run(_row_here, url, headers, shares[0], opts, timeout)
    else:
        done, errors, client_cpu, server_cpu = _row_in_processes(url, headers, shares, opts, timeout)
    if not done:
        raise RuntimeError(f"every request failed; first error: {errors[0] if errors else '?'}")
    wall = max(r["end"] for r in done) - min(r["start"] for r in done)
    tokens = sum(r["tokens"] for r in done)
    events = sum(len(r["times"]) for r in done)
    steady_tok_s, _ = steady_rate(done)
    return dict(
        concurrency=concurrency, rate=rate, requests=requests, completed=len(done), errors=len(errors),
        first_errors=errors[:3], max_tokens=max_tokens, client_processes=len(shares), duration_s=wall,
        output_tokens=tokens, content_events=events, tokens_per_event=tokens / events if events else math.nan,
        client_cpu_us_per_tok=client_cpu / tokens * 1e6,
        server_cpu_us_per_tok=server_cpu / tokens * 1e6, req_per_s=len(done) / wall, out_tok_per_s=tokens / wall, steady_tok_per_s=steady_tok_s,
        **percentiles((r["ttft"] for r in done if not math.isnan(r["ttft"])), QS, 1e3, "ttft_ms_"),
        **percentiles((g for r in done for g in r["itl"]), QS, 1e3, "itl_ms_"),
        **percentiles((r["tpot"] for r in done if not math.isnan(r["tpot"])), QS, 1e3, "tpot_ms_"),
        **percentiles((r["latency"] for r in done), QS, 1.0, "latency_s_"),
    )


def collect(args: argparse.Namespace) -> dict:
    """Every (concurrency, rate) row of ``args`` against ``args.url``."""
    import httpx

    base = args.url.rstrip("/")
    base = base[:-3] if base.endswith("/v1") else base
    headers = {"Authorization": f"Bearer {args.api_key}"} if args.api_key else {}
    concurrencies = [int(c) for c in str(args.concurrency).split(",")]
    rates = [float(r) for r in str(args.rate).split(",")]
    model = args.model
    if model is None:  # the server's first model
        r = httpx.get(base + "/v1/models", headers=headers, timeout=args.timeout)
        r.raise_for_status()
        model = r.json()["data"][0]["id"]
    url = base + ("/v1/chat/completions" if args.chat else "/v1/completions")
    rows = []
    for c in concurrencies:
        for rate in rates:
            row = run_row(url, headers, model=model, concurrency=c, rate=rate, requests=args.requests or c,
                          max_tokens=args.max_tokens, chat=args.chat, seed=args.seed, workers=args.workers,
                          timeout=args.timeout)
            rows.append(row)
            print(f"  concurrency {c}, rate {rate:g}: {row['out_tok_per_s']:.1f} tok/s "
                  f"({row['completed']} requests, {row['errors']} errors, {row['client_processes']} client "
                  f"processes)", file=sys.stderr)
    return dict(benchmark="serve", url=args.url, model=model, endpoint=url, max_tokens=args.max_tokens, rows=rows)


def plot_rows(path: str, rows: list[dict], title: str) -> None:
    """Throughput and latency (median with the p10-p90 spread) against concurrency, axes from 0."""
    check_plot(path)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a1, a2, a3) = plt.subplots(1, 3, figsize=(15, 4))
    for rate in sorted({r["rate"] for r in rows}):
        pts = sorted((r for r in rows if r["rate"] == rate), key=lambda r: r["concurrency"])
        xs = [r["concurrency"] for r in pts]
        label = f"rate {rate:g}/s" if math.isfinite(rate) else "all at once"
        a1.plot(xs, [r["out_tok_per_s"] for r in pts], "o-", label=f"out ({label})")
        if any(r["steady_tok_per_s"] for r in pts):
            a1.plot(xs, [r["steady_tok_per_s"] or np.nan for r in pts], "s--", label=f"steady ({label})")
        for a, key in ((a2, "ttft_ms"), (a3, "itl_ms")):
            a.plot(xs, [r[f"{key}_p50"] for r in pts], "o-", label=f"p50 ({label})")
            a.fill_between(xs, [r[f"{key}_p10"] for r in pts], [r[f"{key}_p90"] for r in pts], alpha=0.2)
    a1.set(xlabel="concurrent requests", ylabel="tokens/s", title="throughput")
    a2.set(xlabel="concurrent requests", ylabel="ms", title="time to first token (band: p10-p90)")
    a3.set(xlabel="concurrent requests", ylabel="ms", title="inter-token latency (band: p10-p90)")
    for a in (a1, a2, a3):
        a.set_xlim(left=0)
        a.set_ylim(bottom=0)
        a.grid(True, alpha=0.3)
        a.legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    print(f"plot written to {path}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    p = bench_parser("serve", __doc__)
    p.add_argument("--url", required=True, help="the server's base URL, e.g. http://127.0.0.1:8080 (a /v1 suffix is dropped)")
    p.add_argument("--model", default=None, help="the model field (default: the first id of GET /v1/models)")
    p.add_argument("--api-key", default=None, help="sent as Authorization: Bearer KEY")
    p.add_argument("--concurrency", default="1,8,64", help="requests in flight at most, comma-separated: one row each "
                   "(default 1,8,64)")
    p.add_argument("--rate", default="inf", help="arrivals, requests/s, comma-separated; inf: all at once (default inf)")
    p.add_argument("--requests", type=int, default=0, help="timed requests a row (default: the row's concurrency)")
    p.add_argument("--max-tokens", type=int, default=128, help="generated tokens a request (default 128)")
    p.add_argument("--chat", action="store_true", help="POST /v1/chat/completions (default: /v1/completions)")
    p.add_argument("--timeout", type=float, default=600.0, help="HTTP timeout a request, seconds (default 600)")
    p.add_argument("--seed", type=int, default=0, help="seed of the arrivals (default 0)")
    p.add_argument("--workers", type=int, default=min(4, os.cpu_count() or 1),
                   help="client processes a row's requests are dealt out to (at most one per place in flight), so "
                        "that parsing the streams is not what limits a fast server (default: min(4, CPUs), here "
                        f"{min(4, os.cpu_count() or 1)})")
    add_output_args(p)
    args = p.parse_args(argv)
    try:
        if any(int(c) < 1 for c in str(args.concurrency).split(",")):
            raise ValueError(f"--concurrency values must be >= 1, got {args.concurrency}")
        if args.workers < 1:
            raise ValueError(f"--workers must be >= 1, got {args.workers}")
        if args.requests < 0 or args.max_tokens < 1:
            raise ValueError(f"--requests must be >= 0 and --max-tokens >= 1, got {args.requests}, {args.max_tokens}")
        for r in str(args.rate).split(","):
            arrival_times(1, float(r))
        check_plot(args.plot)
    except (ValueError, RuntimeError) as exc:
        p.error(str(exc))
    result = collect(args)
    print(f"bench serve: {result['endpoint']} model {result['model']}, {args.max_tokens} tokens a request "
          f"(greedy, ignore_eos), streamed; medians with p10/p90")
    print(render_table(COLUMNS, result["rows"]))
    if args.json:
        write_json(args.json, result)
    if args.plot:
        plot_rows(args.plot, result["rows"], f"bench serve: {result['model']} at {args.url}")
    return 0
