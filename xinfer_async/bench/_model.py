"""LLM benchmark: decode and prefill speed of a real model through ``LanguageModel``.

For each slot count N: N concurrent trio tasks, each a greedy request of exactly ``--max-tokens``
tokens after a short prompt (``ignore_eos``, as serving benchmarks run fixed-length requests), on a
model loaded with N slots. Reported per row:

- ``agg tok/s``: generated tokens of all N requests / wall time from the first submission to the
  last token (short prompts' prefill included);
- ``step ms``: per-token latency within the requests (the time between consecutive tokens of one
  request, as its stream delivers them; the first token, which comes from the prefill, left out):
  median and p10-p90;
- ``ttft ms``: time to first token (submission to first piece, queue wait included), median;
- ``GB/s``: weight bytes read per decode step / the median step time (every step reads every
  weight once but the token embedding table, of which it gathers its tokens' rows: the table is
  left out unless tied to the output projection, ``streamed_weight_bytes``; at N > 1 each slot reads
  them separately), against the device's peak bandwidth when
  known (``--peak-gbs``; cuda default: the H200's measured 4300 GB/s; cpu: reported only);
- ``dev ms``: device time of one decode step alone (the GPU's on cuda, the queue thread's on cpu), from a ``GpuTimer`` around 32 back-to-back
  replays of the step's captured plan (``decode``, or ``batch{B}`` for the bucket N falls in with
  ``--batching``), and ``host %``: the share of a step's wall time outside that device time
  (1 - dev ms / steady ms), where a request's token time is one step: batched, or one slot alone
  (unbatched N > 1 interleaves the slots' steps on the device: shown as ``-``);
- ``steady tok/s``, ``steady ms``: aggregate tok/s and the step ms p50 while all N requests decode (from
  the last request's first token to the first request's last token: the ramp-up while prompts are
  admitted and the tail while requests end are left out): the figure to hold against a batch-N
  decode step, as PyTorch's is timed (``-`` when that window is under 4 steps a request).

Prefill: one request of a ``--prompt-tokens`` prompt and one generated token, alone on the model;
the prefill's tok/s (median of ``--repeats``). Warm-up requests on every slot run first and are
left out; every time is taken after the fence is awaited (a token reaches the caller only then).

Usage: ``xinfer-async bench model [--model NAME|PATH] [--device cpu|cuda] [--slots 1,4,8]
[--batching] [--max-tokens 64] [--ctx N] [--json FILE] [--plot FILE.png] [--compare torch]
[--compare llama.cpp --llama-bench PATH [--repeats 3]] [--kernels] [--timeline]``

``--compare torch`` (where PyTorch sees a CUDA device) times ``_torch_ref``'s hand-written decode step of
the model's shape, captured in a CUDA graph, at batch 1, 8 and 64 in the same process, and prints ms a
step, tok/s and torch/ours against the rows of the same slot count.

``--compare llama.cpp --llama-bench PATH`` (or ``$XINFER_LLAMA_BENCH``) runs llama.cpp's own benchmarks
on the same GGUF file (a model name is resolved to its file first: a synthetic one is written, a known
one pulled), interleaved with ours in the same run: ``--repeats`` times ours then llama.cpp's, for
each slot count (one slot: ``llama-bench`` tg``--max-tokens``; N slots: ``llama-batched-bench``'s
S_TG at N streams of a 32-token prompt, against our steady tok/s) and for the prefill
(``llama-bench`` pp``--prompt-tokens``, against our prefill tok/s). Defaults become pp512 and tg128;
on cpu both use the same threads (ours ``OMP_NUM_THREADS``, set from ``XINFER_THREADS``; llama.cpp
``-t``), on cuda llama.cpp runs every layer on the GPU with flash attention. It prints ours, llama.cpp
and ours/llama.cpp (medians, min and max), beside PyTorch's tok/s where ``--compare torch`` measured
the same batch, and the load average. The binary, and ``llama-batched-bench`` beside it when a row
has more than one slot, are checked before anything runs.

``--kernels`` times each kernel of the last row's decode step alone (``runtime/_profile.py``) and
prints the device time a step spends in each kernel name.

``--timeline`` (cuda, compute capability 9.0+) compiles every shader with the launch timeline
(``XINFER_TIMELINE=1``: backends/cuda/_timeline.py) and, after the rows, replays the last row's decode
step 8 times back to back: each kernel's mean device time in situ (from passing its wait for the previous
kernel to the next kernel's), its lead (how long its first block waited for the previous kernel: a
hidden launch), the step's first launches in order, and beside them the time alone when ``--kernels``
is given. The instrumented build differs a little from the plain one (a timer read and, in one block,
an atomic a kernel; register allocation may shift): hold its figures against each other.
"""

from __future__ import annotations

import os
import time

import numpy as np
import trio

from .._omp import physical_cores
from ..model._commands import Packed, unpack_arguments
from ..ops import kernel_spec
from ..runtime._profile import by_label, command_label, profile_graph
from . import _llamacpp, _torch_ref
from ._report import add_output_args, check_plot, plot_concurrency, write_json
from . import parser as bench_parser

PROMPTS = ["Once upon a time, in a small village,", "The history of the Roman Empire begins",
           "Here is a recipe for a simple bread:", "The theory of relativity was developed by",
           "In the middle of the ocean there is", "A good way to learn programming is",
           "The weather today is", "My favourite book tells the story of"]
H200_GBS = 4300.0  # measured device-to-device copy rate on the H200 (../shared/H200.md)


async def _request(model, prompt: str, max_tokens: int) -> dict:
    t0 = time.perf_counter()
    stream = model.generate(prompt, max_tokens=max_tokens, ignore_eos=True)  # every request max_tokens long
    times = []  # (arrival time, tokens generated so far)
    async for _ in stream:
        times.append((time.perf_counter(), stream.token_count))
    end = time.perf_counter()
    steps = []
    for (ta, na), (tb, nb) in zip(times, times[1:]):
        if nb > na:  # a piece can carry several tokens (a held-back multi-byte character)
            steps += [(tb - ta) / (nb - na)] * (nb - na)
    return dict(ttft=times[0][0] - t0 if times else float("nan"), steps=steps, start=t0, end=end,
                tokens=len(stream.result.token_ids), times=times)


def steady_rate(results: list[dict]) -> tuple[float | None, float | None]:
    """(tok/s, step ms p50) while every request decodes: from the last request's first token to
    the first request's last one (the ramp-up, while prompts are admitted, and the tail, while
    requests end, left out); (None, None) when that window holds fewer than 4 steps a request.

    Each result's ``times`` is its arrivals: (perf_counter seconds, tokens so far), one a piece or
    a streamed event. The tokens counted are those *generated* in the window: of each request, its
    count interpolated at ``hi`` minus at ``lo``, between the arrivals around each (the tokens of an
    arrival taken as made evenly since the one before: they are what the server had when it
    wrote). That stays unbiased when the tokens come grouped, in events far apart (a server's
    stream interval): counting only between a request's first and last arrival inside the window
    leaves out about one interval of its tokens while the window keeps its length (at 64 streams
    of 128 tokens, 470 tok/s each, events 63 ms apart: 24% of the rate), and counting arrivals in
    the window still leaves out the tokens made before ``hi`` that arrive after it (about 10%
    there); tests/test_bench.py simulates both. The step ms is the median gap a token between
    consecutive arrivals inside the window (an arrival of several tokens divides its gap)."""
    if not all(r["times"] for r in results):
        return None, None
    lo = max(r["times"][0][0] for r in results)
    hi = min(r["times"][-1][0] for r in results)
    tokens, steps = 0.0, []
    for r in results:
        ts, ns = zip(*r["times"])
        tokens += float(np.interp(hi, ts, ns) - np.interp(lo, ts, ns))  # lo, hi lie within ts's span
        inside = [(t, n) for t, n in r["times"] if lo <= t <= hi]
        for (ta, na), (tb, nb) in zip(inside, inside[1:]):
            if nb > na:
                steps += [(tb - ta) / (nb - na)] * (nb - na)
    if hi <= lo or len(steps) < 4 * len(results):
        return None, None
    return tokens / (hi - lo), 1e3 * float(np.median(steps))


async def _decode_row(model, n: int, max_tokens: int) -> dict:
    results = [None] * n

    async def one(i):
        results[i] = await _request(model, PROMPTS[i % len(PROMPTS)], max_tokens)

    async with trio.open_nursery() as nursery:
        for i in range(n):
            nursery.start_soon(one, i)
    steps = np.array([s for r in results for s in r["steps"]]) * 1e3
    wall = max(r["end"] for r in results) - min(r["start"] for r in results)
    tokens = sum(r["tokens"] for r in results)
    med = float(np.median(steps))
    steady_tok_s, steady_ms = steady_rate(results)
    return dict(slots=n, requests=n, tokens=tokens, wall_s=wall, agg_tok_per_s=tokens / wall,
                steady_tok_per_s=steady_tok_s, steady_step_ms=steady_ms,
                step_ms_p50=med, step_ms_p10=float(np.percentile(steps, 10)), step_ms_p90=float(np.percentile(steps, 90)),
                per_request_tok_per_s=1e3 / med, ttft_ms_p50=float(np.median([r["ttft"] * 1e3 for r in results])),
                weight_gb_per_s=model.builder.streamed_weight_bytes() / (med * 1e-3) / 1e9)


def _step_plan(model, n: int) -> str:
    """The plan one decode step of ``n`` requests replays: ``decode``, or with batching the
    ``batch{B}`` bucket that holds n rows."""
    if not model.batching:
        return "decode"
    sizes = model.builder.batch_sizes
    return f"batch{min([b for b in sizes if b >= n] or sizes[-1:])}"


async def _gpu_step_ms(model, n: int, reps: int = 32) -> tuple[float, str]:
    """Device ms of one decode step (``reps`` replays of the plan in one command list, timed on the
    device), and the plan's name."""
    async def timed(prepared, slot, plan):
        async with model.device.command_lists.acquire(prepared.queue) as ex:
            timer = model.device.timer()
            timer.begin(ex)
            for _ in range(reps):
                ex.replay(slot._graphs[plan])
            timer.end(ex)
            await ex.queue.fence.wait(ex.submit())
            return timer.elapsed_ms() / reps, plan

    if model.batching:  # the batch scheduler owns the one slot; it is idle between rows
        await model.batched.wait_idle()
        return await timed(model.batched, model.batched.slots[0], _step_plan(model, n))
    await model.prepared.wait_idle()
    async with model.prepared.slot() as slot:
        return await timed(model.prepared, slot, "decode")


def _shaped_label(cmd) -> str:
    """``runtime/_profile.command_label`` of a command, plus `` NxK`` for a matrix kernel (the N and
    K of its packed constants, read by its declaration: ``ops.kernel_spec``, ``model``'s
    ``unpack_arguments``), so that a step's products of one kernel (o and down are both
    ``matmul_q4_1/pq``) get rows of their own."""
    label = command_label(cmd)
    try:
        spec = kernel_spec(getattr(getattr(cmd, "kernel", None), "name", None))
        values = unpack_arguments(spec, Packed(cmd.constants))
    except (ValueError, TypeError, AttributeError):  # not a declared kernel, or constants of another size
        return label
    return f"{label} {values['N']}x{values['K']}" if "N" in values and "K" in values else label


async def _kernel_profile(model, n: int) -> dict:
    """Device us a decode step spends in each kernel (``runtime/_profile.py``) of the plan
    ``_gpu_step_ms`` times; run last (it reruns the step's kernels over its buffers)."""
    prepared = model.batched if model.batching else model.prepared
    plan = _step_plan(model, n)
    await prepared.wait_idle()
    slot = prepared.slots[0]
    graph = slot._graphs[plan]
    rows = await profile_graph(prepared.queue, graph)
    for r in rows:
        r["label"] = _shaped_label(graph.commands[r["index"]])
    return dict(plan=plan, slots=n, kernels=by_label(rows), total_us=sum(r["us"] for r in rows))


async def _timeline_profile(model, n: int, reps: int = 8) -> dict:
    """In-situ device us of each kernel of the plan ``_gpu_step_ms`` times, from the launch timeline
    (backends/cuda/_timeline.py ``step_rows``) of ``reps`` back-to-back replays (labelled from slot 0's
    graph: every slot records the plan's same commands, only addresses differ); run last, like
    ``_kernel_profile``."""
    from ..backends.cuda._timeline import step_rows
    from ..hal._commands import DispatchCmd

    timeline = model.device.backend.timeline
    plan = _step_plan(model, n)
    prepared = model.batched if model.batching else model.prepared
    await prepared.wait_idle()
    graph = prepared.slots[0]._graphs[plan]
    labels = [_shaped_label(c) for c in graph.commands if isinstance(c, DispatchCmd)]
    timeline.reset()
    await _gpu_step_ms(model, n, reps)
    return dict(plan=plan, slots=n, **step_rows(timeline.read(), labels))


def _render_timeline(t: dict, alone: dict | None, first: int = 14) -> str:
    """``_timeline_profile``'s table by kernel (with each kernel's time alone from ``--kernels``
    beside it), then the step's first ``first`` launches in order."""
    alone_us = {k["label"]: k["us"] for k in alone["kernels"]} if alone else {}
    res = f"{t['resolution_ns']:.0f} ns" if t["resolution_ns"] else "not seen"
    lines = [f"\nin-situ device time a step by kernel ({t['plan']}, {t['slots']} requests; launch timeline of "
             f"{t['steps']} back-to-back steps, means: {t['step_us'] / 1e3:.3f} ms a step; lead: how long a "
             f"kernel's first block waited for the one before; timer steps {res})",
             f"{'kernel':<44} {'calls':>5} {'us':>9} {'%':>6} {'lead us':>8}" + (f" {'alone us':>9}" if alone else "")]
    for k in t["kernels"]:
        line = (f"{k['label']:<44} {k['calls']:>5} {k['us']:>9.1f} {100 * k['us'] / t['step_us']:>5.1f}% "
                f"{k['lead_us']:>8.2f}")
        if alone:
            line += f" {alone_us.get(k['label'], float('nan')):>9.1f}"
        lines.append(line)
    lines.append(f"the step's first {min(first, len(t['order']))} launches (us in situ, lead us):")
    lines += [f"  {i:>3} {o['label']:<44} {o['us']:>8.2f} {o['lead_us']:>8.2f}" for i, o in enumerate(t["order"][:first])]
    return "\n".join(lines)


def _render_profile(p: dict, gpu_ms: float) -> str:
    lines = [f"\ndevice time a step by kernel ({p['plan']}, {p['slots']} requests; each kernel timed alone, "
             f"{p['total_us'] / 1e3:.3f} ms in all vs {gpu_ms:.3f} ms for the whole step)",
             f"{'kernel':<44} {'calls':>5} {'us':>9} {'%':>6}"]
    for k in p["kernels"]:
        lines.append(f"{k['label']:<44} {k['calls']:>5} {k['us']:>9.1f} {100 * k['us'] / p['total_us']:>5.1f}%")
    return "\n".join(lines)


async def _prefill(model, n_tokens: int, repeats: int) -> dict:
    text = " ".join(f"word{i % 97}" for i in range(n_tokens))
    ids = model.tokenize(text)[:n_tokens]
    rates = []
    for _ in range(repeats):
        r = await model.complete(ids, max_tokens=1)
        rates.append(r.timings.prefill_tok_per_s)
    return dict(prompt_tokens=len(ids), prefill_tok_per_s=float(np.median(rates)),
                prefill_tok_per_s_min=float(min(rates)), prefill_tok_per_s_max=float(max(rates)))


async def _main(args) -> dict:
    from .. import llm

    slot_counts = [int(s) for s in args.slots.split(",")]
    ctx = args.ctx
    rows = []
    model = peer = None
    reps = args.repeats if args.peer is not None else 1
    peer_rows: list[dict] = []
    loadavg_start = os.getloadavg()
    for n in slot_counts:
        if model is not None:
            await model.aclose()
        t = time.perf_counter()
        model = await llm.load(args.model, device=args.device, slots=n, ctx=ctx, batching=args.batching)
        load_s = time.perf_counter() - t
        if not rows:
            dev = model.device
            if args.timeline and getattr(dev.backend, "timeline", None) is None:
                await model.aclose()
                raise SystemExit(f"bench model: --timeline needs the cuda backend on compute capability 9.0+ "
                                 f"(the device is {getattr(dev, 'description', dev.name)})")
            if getattr(dev.backend, "timeline", None) is not None:
                print("note: XINFER_TIMELINE=1: every kernel records its launch; all rows ran the instrumented build")
            peak = args.peak_gbs if args.peak_gbs is not None else (H200_GBS if dev.name.startswith("cuda") else None)
            weight_bytes, streamed = model.builder.weight_bytes(), model.builder.streamed_weight_bytes()
            f16_bytes = model.builder.f16_weight_bytes
            print(f"model {model!r}; weights {weight_bytes / 1e6:.1f} MB, {streamed / 1e6:.1f} MB read a decode "
                  f"step (GB/s); resident f16 weights "
                  f"{f'{f16_bytes / 1e6:.1f} MB' if f16_bytes else 'off'} (XINFER_F16_WEIGHTS); prefill chunk "
                  f"{model.chunk}, {model.builder.step_prompt_rows} prompt rows a batched step; KV cache {model.ctx} tokens a slot; "
                  f"loaded in {load_s:.2f} s")
            print(f"device {getattr(dev, 'description', dev.name)}; peak bandwidth: "
                  f"{f'{peak:.0f} GB/s' if peak else 'not known (reported only)'}")
            if args.peer is not None:
                peer = _llamacpp.LlamaCpp(cuda=dev.name.startswith("cuda"), **args.peer)
        await _decode_row(model, n, args.warmup_tokens)  # warm-up: every slot runs once
        before = model.statistics()["scheduler"] if model.batching else None
        runs, theirs = [], []
        for _ in range(reps):  # with llama.cpp: ours, theirs, ours, theirs, ...
            runs.append(await _decode_row(model, n, args.max_tokens))
            if peer is not None:
                theirs.append(await trio.to_thread.run_sync(_peer_decode, peer, n, args.max_tokens))
        ours = [_decode_rate(r) for r in runs]
        row = runs[int(np.argsort(ours)[len(ours) // 2])]  # the median run's row
        if peer is not None:
            row["runs_tok_per_s"] = ours
            peer_rows.append(dict(batch=n, ours=ours, theirs=[t["tok_per_s"] for t in theirs], raw=theirs))
        row["load_s"] = load_s
        # what the row ran on: resident f16 weights can differ between rows (auto decides by the
        # memory free at each load) and the GEMM regime's threshold with them
        row["f16_weight_bytes"] = model.builder.f16_weight_bytes
        row["gemm_min_t"] = model.builder.gemm_min_t
        if rows and row["f16_weight_bytes"] != rows[0]["f16_weight_bytes"]:
            print(f"note: {n} slots: resident f16 weights {row['f16_weight_bytes'] / 1e6:.1f} MB against "
                  f"{rows[0]['f16_weight_bytes'] / 1e6:.1f} MB in the first row (XINFER_F16_WEIGHTS=auto decides "
                  f"by the memory free at load); GEMM from T = {row['gemm_min_t']}")
        if before is not None:  # the batched scheduler's steps over the row
            st = model.statistics()["scheduler"]
            row["batch_steps"] = st.steps - before.steps
            row["pipelined_steps"] = st.pipelined - before.pipelined
            row["prompt_rows"] = st.prompt_rows - before.prompt_rows
        gpu_ms, row["gpu_plan"] = await _gpu_step_ms(model, n)
        row["gpu_ms_per_step"] = gpu_ms
        # a request's token time is one step when batched or alone; unbatched N > 1 interleaves
        # the slots' steps on the device (how many run at once is the pool's and the queue's), so
        # no share is read off there
        one_step = model.batching or n == 1
        ref_ms = row["steady_step_ms"] or row["step_ms_p50"]
        row["host_fraction"] = max(0.0, 1.0 - gpu_ms / ref_ms) if one_step else None
        if peak:
            row["bandwidth_fraction"] = row["weight_gb_per_s"] / peak
        rows.append(row)
    await _request(model, PROMPTS[0], 2)  # warm-up of the prefill plan on a fresh slot
    if peer is None:
        prefill = await _prefill(model, args.prompt_tokens, args.repeats)
    else:  # interleaved with llama.cpp's pp{prompt_tokens}
        runs, theirs = [], []
        for _ in range(reps):
            runs.append(await _prefill(model, args.prompt_tokens, 1))
            theirs.append(await trio.to_thread.run_sync(peer.bench, args.prompt_tokens, 0))
        rates = [r["prefill_tok_per_s"] for r in runs]
        prefill = dict(prompt_tokens=runs[0]["prompt_tokens"], prefill_tok_per_s=float(np.median(rates)),
                       prefill_tok_per_s_min=min(rates), prefill_tok_per_s_max=max(rates))
        peer_rows.append(dict(batch=None, prompt_tokens=prefill["prompt_tokens"], ours=rates,
                              theirs=[t["avg_ts"] for t in theirs], raw=theirs))
    timeline = await _timeline_profile(model, rows[-1]["slots"]) if args.timeline else None
    profile = await _kernel_profile(model, rows[-1]["slots"]) if args.kernels else None
    await model.aclose()

    print(f"\ndecode: greedy, {args.max_tokens} tokens a request after a short prompt, N concurrent requests"
          + (", batched decode (one step for all)" if args.batching else ""))
    print(f"{'slots':>5} {'tokens':>6} {'agg tok/s':>9} {'step ms p50':>11} {'p10-p90':>13} {'req tok/s':>9} "
          f"{'ttft ms':>8} {'GB/s':>6}" + (f" {'of peak':>7}" if peak else "") + f" {'dev ms':>7} {'host %':>6}"
          f" {'steady tok/s':>12} {'steady ms':>9}")
    for r in rows:
        line = (f"{r['slots']:>5} {r['tokens']:>6} {r['agg_tok_per_s']:>9.1f} {r['step_ms_p50']:>11.2f} "
                f"{r['step_ms_p10']:>6.2f}-{r['step_ms_p90']:<6.2f} {r['per_request_tok_per_s']:>9.1f} "
                f"{r['ttft_ms_p50']:>8.1f} {r['weight_gb_per_s']:>6.2f}")
        if peak:
            line += f" {100 * r['bandwidth_fraction']:>6.1f}%"
        host = f"{100 * r['host_fraction']:>5.1f}%" if r["host_fraction"] is not None else f"{'-':>6}"
        line += f" {r['gpu_ms_per_step']:>7.3f} {host}"
        line += (f" {r['steady_tok_per_s']:>12.1f} {r['steady_step_ms']:>9.2f}" if r["steady_tok_per_s"]
                 else f" {'-':>12} {'-':>9}")
        print(line)
    print(legend(dev.name, peak))
    for r in rows:
        if r.get("batch_steps"):
            print(f"  {r['slots']} requests: {r['batch_steps']} batched steps, {r['pipelined_steps']} pipelined "
                  f"(submitted before the previous step's tokens were read), {r['prompt_rows']} prompt tokens run "
                  f"inside them")
    print(f"prefill: {prefill['prompt_tokens']}-token prompt, {prefill['prefill_tok_per_s']:.1f} tok/s "
          f"(median of {args.repeats}; {prefill['prefill_tok_per_s_min']:.1f}-{prefill['prefill_tok_per_s_max']:.1f})")
    if profile is not None:
        print(_render_profile(profile, rows[-1]["gpu_ms_per_step"]))
    if timeline is not None:
        print(_render_timeline(timeline, profile))
    llamacpp = None
    if peer is not None:
        build = next((t.get("build_commit") for r in peer_rows for t in r["raw"] if t.get("build_commit")), None)
        llamacpp = dict(llama_bench=str(peer.llama_bench), batched_bench=str(peer.batched_bench or ""),
                        model_path=str(peer.model), build_commit=build, threads=peer.threads, cuda=peer.cuda,
                        repetitions=reps, loadavg=loadavg_start, loadavg_end=os.getloadavg(), runs=peer_rows)
    return dict(model=str(args.model), device=dev.name, weight_bytes=weight_bytes,
                streamed_weight_bytes=streamed, f16_weight_bytes=f16_bytes,
                chunk=model.chunk, ctx=model.ctx, batching=args.batching,
                max_tokens=args.max_tokens, peak_gb_per_s=peak, decode=rows, prefill=prefill, config=model.config,
                kernel_profile=profile, timeline=timeline, llamacpp=llamacpp)


def _decode_rate(row: dict) -> float:
    """A decode row's figure to hold against llama.cpp's: the steady tok/s (all requests decoding;
    one request: its tokens after the first / their time, llama-bench's tg), else the aggregate."""
    return row["steady_tok_per_s"] or row["agg_tok_per_s"]


def _peer_decode(peer: "_llamacpp.LlamaCpp", n: int, n_gen: int) -> dict:
    """llama.cpp's decode figure at ``n`` streams: llama-bench tg{n_gen} (one), llama-batched-bench's
    speed_tg (several); the run's output with ``tok_per_s``."""
    if n == 1:
        t = peer.bench(0, n_gen)
        return dict(t, tok_per_s=t["avg_ts"])
    b = peer.batched(n, n_gen)
    return dict(b, tok_per_s=b["speed_tg"])


def llamacpp_table(result: dict) -> dict:
    """The ``--compare llama.cpp`` table's rows from ``_main``'s result (after ``--compare torch``
    where it ran: its tok/s at a batch size goes beside ours)."""
    lc = result["llamacpp"]
    torch_rows = {r["batch"]: r for r in (result.get("compare") or {}).get("rows", [])}
    rows = []
    for r in lc["runs"]:
        if r["batch"] is None:
            what = f"prefill {r['prompt_tokens']} tokens (pp{r['prompt_tokens']})"
            torch = None
        else:
            n = r["batch"]
            what = (f"decode 1 stream (tg{result['max_tokens']})" if n == 1
                    else f"decode {n} streams, steady (batched-bench S_TG)")
            torch = torch_rows.get(n, {}).get("torch_tok_per_s")
        rows.append(_llamacpp.comparison_row(what, r["batch"], r["ours"], r["theirs"], torch))
    return dict(lc, rows=rows)


def legend(device: str, peak: float | None) -> str:
    """What the decode table's columns mean, in a few lines under it."""
    where = "the GPU" if device.startswith("cuda") else "the cpu backend's queue thread"
    return "\n".join([
        "  slots: concurrent requests; tokens: generated a request; agg tok/s: all requests' tokens / wall time",
        "  step ms: time between two tokens of one request (p50, p10-p90); req tok/s: one request's own rate",
        "  ttft ms: time to the first token; GB/s: weight bytes read a step / step time"
        + (f"; of peak: of {peak:.0f} GB/s" if peak else ""),
        f"  dev ms: time of one decode step on {where} alone; host %: the share of a step spent outside it"
        " (- where slots interleave)",
        "  steady tok/s, steady ms: rate and step time while all requests decode at once (ramp-up and tail left out)",
    ])


def plot_title(result: dict) -> str:
    """The plot's title: model, device, batching and the tokens each request asked for."""
    return (f"bench model: {result['model']} on {result['device']}, batching "
            f"{'on' if result['batching'] else 'off'}, {result['max_tokens']} tokens a request")


def _peer_config(args) -> dict:
    """``LlamaCpp``'s fields but ``cuda``, checked before anything slow runs: the binaries, then the
    model resolved to its file (a synthetic name is written into the cache, a known name pulled),
    which ``args.model`` becomes, so both sides run the same file.

    Raises:
        ValueError: a binary missing or not executable, a row of more than one slot without
            llama-batched-bench, or an unknown model name.
        FileNotFoundError: a model path that does not exist.
    """
    from ..llm import resolve_model

    bench = _llamacpp.check_binary(args.llama_bench, "--llama-bench")
    batched = None
    if any(int(n) > 1 for n in args.slots.split(",")):
        if args.llama_batched_bench:
            batched = _llamacpp.check_binary(args.llama_batched_bench, "--llama-batched-bench")
        else:
            batched = _llamacpp.batched_bench_beside(bench)
            if batched is None:
                raise ValueError(f"--slots {args.slots} needs llama-batched-bench for the rows of more than one "
                                 f"slot: none beside {str(bench)!r}; pass --llama-batched-bench PATH")
    model = resolve_model(args.model)
    args.model = str(model)
    threads = int(os.environ.get("OMP_NUM_THREADS") or 0) or physical_cores()
    return dict(llama_bench=bench, batched_bench=batched, model=model, threads=threads)


def main(argv: list[str] | None = None) -> int:
    p = bench_parser("model", __doc__)
    p.add_argument("--model", default="smollm2-135m", help="a known model name or a .gguf path (default: smollm2-135m)")
    p.add_argument("--device", default=None, help="cpu, cuda, cuda:N or auto (default: $XINFER_DEVICE, else auto)")
    p.add_argument("--slots", default="1,4,8", help="comma-separated slot counts, one row each (default: 1,4,8)")
    p.add_argument("--max-tokens", type=int, default=None,
                   help="generated tokens a request (default: 64; 128 with --compare llama.cpp, as tg128)")
    p.add_argument("--warmup-tokens", type=int, default=8, help="tokens of each warm-up request (default: 8)")
    p.add_argument("--prompt-tokens", type=int, default=None,
                   help="prompt length of the prefill row (default: 256; 512 with --compare llama.cpp, as pp512)")
    p.add_argument("--ctx", type=int, default=None,
                   help="KV cache tokens a slot (default: the prompt tokens + max tokens + 64, the least the rows "
                        "need; cuda sizes the attention launch for it, so e.g. 2048, load's default, times what a "
                        "default load runs)")
    p.add_argument("--repeats", type=int, default=3,
                   help="prefill runs, median reported; with --compare llama.cpp, the interleaved runs of every "
                        "figure, ours and llama.cpp's (default: 3)")
    p.add_argument("--peak-gbs", type=float, default=None, help="device memory bandwidth, GB/s (cuda default: 4300)")
    p.add_argument("--compare", action="append", choices=["torch", "llama.cpp"], default=[],
                   help="torch: also time a hand-written PyTorch decode step of the same shape (CUDA graph); "
                        "llama.cpp: run llama.cpp's llama-bench (and llama-batched-bench) on the same file, "
                        "interleaved with ours; print the ratio (may be given twice)")
    p.add_argument("--llama-bench", metavar="PATH", default=os.environ.get(_llamacpp.ENV_LLAMA_BENCH),
                   help=f"llama.cpp's llama-bench binary (default: ${_llamacpp.ENV_LLAMA_BENCH})")
    p.add_argument("--llama-batched-bench", metavar="PATH", default=None,
                   help="llama.cpp's llama-batched-bench, for rows of more than one slot (default: beside llama-bench)")
    p.add_argument("--batching", action="store_true",
                   help="load with batching=True: the N requests decode in one batched step (default: a step per slot)")
    p.add_argument("--compare-batches", default="1,8,64", help="PyTorch batch sizes (default: 1,8,64)")
    p.add_argument("--kernels", action="store_true",
                   help="after the rows, time each kernel of the last row's decode step alone and print the device us by kernel")
    p.add_argument("--timeline", action="store_true",
                   help="cuda, compute capability 9.0+: compile the kernels with the launch timeline (XINFER_TIMELINE=1) and, "
                        "after the rows, print each kernel's device time in situ in the last row's decode step")
    add_output_args(p)
    args = p.parse_args(argv)
    if args.timeline:
        if (args.device or "").startswith("cpu"):
            p.error("--timeline needs a cuda device")
        os.environ["XINFER_TIMELINE"] = "1"  # read when the backend opens and when each shader compiles
    try:
        check_plot(args.plot)
    except RuntimeError as exc:
        p.error(str(exc))
    with_llamacpp = "llama.cpp" in args.compare
    args.max_tokens = args.max_tokens or (128 if with_llamacpp else 64)
    args.prompt_tokens = args.prompt_tokens or (512 if with_llamacpp else 256)
    if args.repeats < 1:
        p.error(f"--repeats must be >= 1, got {args.repeats}")
    least = args.prompt_tokens + args.max_tokens + 64  # what the rows need, 64 tokens to spare
    if args.ctx is None:
        args.ctx = least
    elif args.ctx < least:
        p.error(f"--ctx must be >= {least} (the {args.prompt_tokens}-token prompt + {args.max_tokens} tokens + 64), "
                f"got {args.ctx}")
    args.peer = None
    if with_llamacpp:
        try:
            args.peer = _peer_config(args)
        except (ValueError, FileNotFoundError) as exc:
            p.error(str(exc))
    result = trio.run(_main, args)
    if "torch" in args.compare:
        device = result["device"] if result["device"].startswith("cuda") else "cuda"
        batches = [int(b) for b in args.compare_batches.split(",")]
        result["compare"] = _torch_ref.compare(result["config"], result["decode"], batches, device)
        print(_torch_ref.render(result["compare"]))
    if with_llamacpp:
        result["llamacpp"] = llamacpp_table(result)
        print(_llamacpp.render(result["llamacpp"]))
    if args.json:
        write_json(args.json, result)
    if args.plot:
        plot_concurrency(args.plot, result["decode"], x="slots", x_label="concurrent requests (slots)",
                         tok_per_s="agg_tok_per_s", latencies={"step p50": "step_ms_p50", "step p90": "step_ms_p90",
                                                               "ttft p50": "ttft_ms_p50"},
                         title=plot_title(result), integer_x=True,
                         point_label=lambda r: f"{r['slots']} slot{'s' if r['slots'] != 1 else ''}")
    return 0
