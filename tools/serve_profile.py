"""The server's CPU cost per generated token (``xinfer-async serve`` under 64 streaming clients),
with the model's compute out of the way, and a cProfile of the server's trio thread.

    python tools/serve_profile.py [--step-ms 2.2] [--slots 64] [--requests 128] [--max-tokens 128]
        [--repeats 3] [--profile-top 25] [--server-cpus 0-7 --client-cpus 8-15]
    python tools/serve_profile.py --model smollm2-135m --device cuda ...   # the real model instead

Stub mode (the default): the server (a child process) serves a real ``LanguageModel`` (SmolLM2's
tokenizer and chat template, the batched scheduler ``llm._batch.Batcher``, ``GenerationStream``,
the whole HTTP path) whose device is a stub (``StubRunner``): one simulated in-order queue where
every batched step takes ``--step-ms`` of wall time (2.2 ms: SmolLM2 at 64 rows on the H200) and
costs no CPU; its argmax of a row at position p is token p of a fixed English text, so the
detokenizer and the stop-string scan see ordinary text. What the server process spends is then
the server's own cost: the scheduler's Python, the streams, hypercorn, the SSE encoding, metrics.
The stub also records how long its queue sat empty while requests were decoding (``dev idle %``):
a step the scheduler submitted late because the trio thread was busy with HTTP work.

Per repeat: a warm-up row (left out), then a timed row of ``bench serve`` (``--requests``
requests, ``--concurrency`` in flight, ``--workers`` client processes); the server's CPU comes
from its ``/metrics`` ``process_cpu_seconds_total`` before and after the timed row (as ``bench
serve``'s ``srv cpu us/tok`` column), the cProfile covers the timed row (started and stopped with
SIGUSR1 / SIGUSR2 to the child). Besides: the in-process figure of the same stub (the same
requests consumed by ``model.generate`` in one trio.run, no HTTP: ``bench model --batching``'s
path), so the ratio HTTP / in-process of the stub reads as the H200's target would.

``--server-path DIR``: the child imports ``xinfer_async`` from DIR (an A/B against another tree).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import trio

HERE = Path(__file__).resolve().parent
TEXT = ("The history of the printing press begins in the middle of the fifteenth century, when Johannes "
        "Gutenberg combined movable metal type, oil-based ink and a wooden press adapted from those used "
        "for wine. Within fifty years presses were at work in more than two hundred European cities, and "
        "the price of a book fell so far that a craftsman could own one. Scholars argue about how much the "
        "new machine changed the way people thought, but few doubt that it changed what they could read. ")


# -- the stub device ---------------------------------------------------------------------------
class StubRun:
    """A submitted step of the stub queue: its outputs are there at ``end`` (trio time)."""

    def __init__(self, runner: "StubRunner", end: float, outputs: dict[str, np.ndarray]):
        self._runner, self.end, self._outputs, self._held = runner, end, outputs, True

    def _release(self) -> None:
        if self._held:
            self._held = False
            self._runner._lists += 1

    async def result(self) -> dict[str, np.ndarray]:
        try:
            await trio.sleep_until(self.end)
            self._runner.late_s.append(trio.current_time() - self.end)
            return self._outputs
        finally:
            self._release()

    async def settle(self) -> None:
        try:
            await trio.sleep_until(self.end)
        finally:
            self._release()

    async def discard(self) -> None:
        self._release()
        await trio.lowlevel.checkpoint()


class StubRunner:
    """What ``llm._batch.Batcher`` needs of a ``Runner`` (plans, ``start``, ``run``), on a queue
    that runs one step per ``step_s`` seconds in submission order and costs no CPU.

    Args:
        ctx, chunk: as the model's.
        seqs: sequences of the batched cache (the buckets go up to seqs + chunk).
        step_s: wall time of one step (a decode step or a prompt chunk), seconds.
        text_ids: the argmax of a row at position p is ``text_ids[p % len]``.
        vocab: logits' width when a request asks for them (zeros).
        lists: command lists (a speculative step takes one only when free, as ``Runner.start``).
    """

    def __init__(self, ctx: int, chunk: int, seqs: int, step_s: float, text_ids: Sequence[int], vocab: int,
                 lists: int = 2):
        self.ctx, self.chunk, self.step_s, self.vocab = ctx, chunk, step_s, vocab
        self.batched = True
        self.batch_sizes = sorted({1 << k for k in range(((seqs + chunk) - 1).bit_length() + 1)})
        self.prefill_sizes = sorted({min(1 << k, chunk) for k in range(1, chunk.bit_length() + 1)})
        self._ids = np.asarray(text_ids, np.int32)
        self._lists = lists
        self._busy_until = 0.0  # trio time when the queue runs dry
        self._last_plan = ""
        self.steps = 0
        self.idle_s = 0.0  # time the queue sat empty between a step's end and the next submission
        self.busy_s = 0.0
        #: per read step: how long after its end the scheduler got to run (the trio thread was busy)
        self.late_s: list[float] = []

    def reset(self) -> None:
        self.steps, self.idle_s, self.busy_s, self.late_s = 0, 0.0, 0.0, []

    def prefill_plan(self, n: int) -> str:
        return "batch1" if n == 1 else f"prefill{min(T for T in self.prefill_sizes if T >= n)}"

    def batch_plan(self, n_rows: int) -> str:
        return f"batch{min(B for B in self.batch_sizes if B >= n_rows)}"

    async def start(self, slot: Any, plan: str, *, positions: Sequence[int], tokens: Sequence[int] | None = None,
                    rows: Any = None, first_rows: Any = None, last: int | None = None,
                    outputs: Sequence[str] = ("argmax",), speculative: bool = False) -> StubRun:
        if self._lists == 0:
            if speculative:
                raise trio.WouldBlock
            raise RuntimeError("StubRunner: a step submitted with no command list free")
        self._lists -= 1
        now = trio.current_time()
        # idle counted between decode steps only (not before a prefill plan: nothing was decoding)
        if plan.startswith("batch") and self._last_plan.startswith("batch") and now > self._busy_until:
            self.idle_s += now - self._busy_until
        self._last_plan = plan
        begin = max(now, self._busy_until)
        self._busy_until = begin + self.step_s
        self.steps += 1
        self.busy_s += self.step_s
        pos = np.asarray(positions, np.int64)
        out: dict[str, np.ndarray] = {}
        if "argmax" in outputs:
            out["argmax"] = self._ids[pos % len(self._ids)]
        if "logits" in outputs:
            out["logits"] = np.zeros((len(pos), self.vocab), np.float32)
        run = StubRun(self, self._busy_until, out)
        if not speculative:
            await trio.lowlevel.cancel_shielded_checkpoint()  # as Slot.start_run: the yield after submission
        return run

    async def run(self, slot: Any, plan: str, *, outputs: Sequence[str] = ("argmax",), **inputs: Any):
        return await (await self.start(slot, plan, outputs=outputs, **inputs)).result()

    def idle_fraction(self) -> float:
        total = self.idle_s + self.busy_s
        return self.idle_s / total if total else 0.0


def stub_model(gguf_path: str, *, slots: int, ctx: int, step_s: float, max_queued: int) -> Any:
    """A ``LanguageModel`` of ``gguf_path``'s tokenizer and chat template on a ``StubRunner``
    (the weights are not read onto any device)."""
    import types

    from xinfer_async.llm._engine import LanguageModel
    from xinfer_async.llm._gguf import load_gguf

    g = load_gguf(gguf_path)
    chunk = 64
    builder = types.SimpleNamespace(device=types.SimpleNamespace(name="stub"), ctx=ctx, chunk=chunk,
                                    plan_specs=lambda batched=False: {})
    prepared = types.SimpleNamespace(capacity=1, close=lambda: None)
    batched = types.SimpleNamespace(slots=[None], close=lambda: None)
    model = LanguageModel(Path(gguf_path), g, builder, prepared, max_queued=max_queued, batched=batched,
                          batch_seqs=slots)
    ids = model.tokenizer.encode(TEXT)
    model.batched_runner = StubRunner(ctx, chunk, slots, step_s, ids, g.config.vocab_size)
    return model


# -- the server child --------------------------------------------------------------------------
async def _child(args: argparse.Namespace) -> None:
    from xinfer_async.serve import OpenAIServer, ServerLimits, hypercorn_config, run_server

    from xinfer_async.serve._sse import StreamPacing

    pacing = StreamPacing(None if args.stream_interval is None else args.stream_interval / 1e3)
    app = OpenAIServer("stub" if args.model is None else args.model, limits=ServerLimits(max_queue=1024),
                       pacing=pacing)
    profiler = cProfile.Profile(time.process_time) if args.profile else None  # CPU time: the machine may be shared
    stop = trio.Event()
    holder: dict[str, Any] = {}

    async def load():
        import gc

        if args.model is None:
            model = stub_model(args.gguf, slots=args.slots, ctx=args.ctx, step_s=args.step_ms / 1e3,
                               max_queued=args.slots + 1024)
        else:
            from xinfer_async import llm

            model = await llm.load(args.model, device=args.device, slots=args.slots, ctx=args.ctx, batching=True,
                                   max_queued=args.slots + 1024)
        gc.collect()
        gc.freeze()  # as the serve command does
        holder["model"] = model
        return model

    async def signals():
        with trio.open_signal_receiver(signal.SIGUSR1, signal.SIGUSR2, signal.SIGTERM, signal.SIGINT) as sigs:
            async for s in sigs:
                runner = getattr(holder.get("model"), "batched_runner", None)
                if s == signal.SIGUSR1:
                    if isinstance(runner, StubRunner):
                        runner.reset()
                    if profiler is not None:
                        profiler.enable()
                elif s == signal.SIGUSR2:
                    if profiler is not None:
                        profiler.disable()
                        profiler.dump_stats(args.profile)
                    report = {"dev_idle_fraction": None, "late_ms_p50": None, "late_ms_p99": None}
                    if isinstance(runner, StubRunner):
                        late = np.array(runner.late_s or [np.nan]) * 1e3
                        report.update(dev_idle_fraction=runner.idle_fraction(), steps=runner.steps,
                                      late_ms_p50=float(np.median(late)), late_ms_p99=float(np.percentile(late, 99)),
                                      late_ms_max=float(late.max()))
                    tmp = Path(args.report + ".tmp")
                    tmp.write_text(json.dumps(report))
                    tmp.rename(args.report)  # whole when the driver sees it
                else:
                    stop.set()
                    return

    async with trio.open_nursery() as nursery:
        nursery.start_soon(signals)
        binds = await nursery.start(lambda task_status: run_server(app, load, hypercorn_config("127.0.0.1", args.port),
                                                                   shutdown_trigger=stop.wait,
                                                                   task_status=task_status))
        print(f"serve_profile child: listening on {binds}", file=sys.stderr, flush=True)


# -- in-process figure ---------------------------------------------------------------------------
async def _inprocess(args: argparse.Namespace) -> dict:
    """The stub's tok/s and CPU us/token with ``model.generate`` consumers in this trio.run."""
    from xinfer_async.bench._model import PROMPTS

    model = stub_model(args.gguf, slots=args.slots, ctx=args.ctx, step_s=args.step_ms / 1e3,
                       max_queued=args.slots + 1024)
    counts = []

    async def one(i: int, n: int) -> None:
        stream = model.generate(PROMPTS[i % len(PROMPTS)], max_tokens=n, ignore_eos=True)
        async for _ in stream:  # a piece a token, as bench model reads them
            pass
        counts.append(len(stream.result.token_ids))

    async def row(n_req: int, n: int) -> None:
        places = trio.Semaphore(args.concurrency)

        async def limited(i):
            async with places:
                await one(i, n)

        async with trio.open_nursery() as nursery:
            for i in range(n_req):
                nursery.start_soon(limited, i)

    await row(args.concurrency, 4)
    counts.clear()
    model.batched_runner.reset()
    cpu, t = time.process_time(), time.perf_counter()
    await row(args.requests, args.max_tokens)
    wall, cpu = time.perf_counter() - t, time.process_time() - cpu
    tokens = sum(counts)
    out = dict(tok_per_s=tokens / wall, cpu_us_per_tok=cpu / tokens * 1e6,
               dev_idle_fraction=model.batched_runner.idle_fraction())
    await model.aclose()
    return out


# -- the driver -------------------------------------------------------------------------------
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _cpu_list(text: str) -> set[int]:
    """``"0-3,8"`` -> {0, 1, 2, 3, 8} (taskset's list format)."""
    cpus: set[int] = set()
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        cpus.update(range(int(lo), int(hi or lo) + 1))
    return cpus


def _taskset(cpus: str | None) -> list[str]:
    return ["taskset", "-c", cpus] if cpus else []


def _wait_health(url: str, proc: subprocess.Popen, timeout_s: float = 300.0) -> None:
    import httpx

    t = time.perf_counter()
    while time.perf_counter() - t < timeout_s:
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited with status {proc.returncode}")
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"the server was not ready within {timeout_s} s")


def _top(path: str, n: int, key: str) -> str:
    s = io.StringIO()
    pstats.Stats(path, stream=s).strip_dirs().sort_stats(key).print_stats(n)
    return s.getvalue()


def _one_repeat(args: argparse.Namespace, k: int, out_dir: Path, profile: bool = False) -> dict:
    from xinfer_async.bench._serve import run_row

    port = _free_port()
    prof, report = out_dir / f"server_{k}.prof", out_dir / f"server_{k}.json"
    cmd = [*_taskset(args.server_cpus), sys.executable, str(Path(__file__).resolve()), "--child", "--port", str(port),
           "--slots", str(args.slots), "--ctx", str(args.ctx), "--step-ms", str(args.step_ms), "--gguf", args.gguf,
           "--report", str(report)]
    if args.stream_interval is not None:
        cmd += ["--stream-interval", str(args.stream_interval)]
    if profile:
        cmd += ["--profile", str(prof)]
    if args.model is not None:
        cmd += ["--model", args.model] + (["--device", args.device] if args.device else [])
    env = dict(os.environ)
    if args.server_path:
        env["PYTHONPATH"] = os.pathsep.join([str(Path(args.server_path).resolve()), env.get("PYTHONPATH", "")])
    proc = subprocess.Popen(cmd, env=env, stderr=subprocess.PIPE if not args.verbose else None)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_health(url, proc)
        ep = url + "/v1/completions"
        row_args = dict(model=None, concurrency=args.concurrency, rate=float("inf"), max_tokens=args.max_tokens,
                        chat=False, workers=args.workers)
        run_row(ep, {}, requests=args.concurrency, **row_args)  # warm-up row
        proc.send_signal(signal.SIGUSR1)
        time.sleep(0.2)
        row = run_row(ep, {}, requests=args.requests, **row_args)
        proc.send_signal(signal.SIGUSR2)
        for _ in range(100):
            if report.exists():
                break
            time.sleep(0.1)
        row.update(json.loads(report.read_text()))
        row["profile"] = str(prof) if profile else None
        return row
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()


def _default_gguf() -> str:
    from xinfer_async.llm._registry import resolve_model

    return str(resolve_model("smollm2-135m"))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--step-ms", type=float, default=2.2, help="stub: wall time of one batched step (default 2.2)")
    p.add_argument("--gguf", default=None, help="stub: the file whose tokenizer is served (default: SmolLM2-135M)")
    p.add_argument("--model", default=None, help="serve this model for real instead of the stub (e.g. on the H200)")
    p.add_argument("--device", default=None, help="with --model: the device (default: auto)")
    p.add_argument("--stream-interval", type=float, default=None, metavar="MS",
                   help="the server's --stream-interval (default: its own, 1 ms x streams); a long one puts as many "
                        "tokens in an event here as the H200's rate does with the default (~28 at 64 streams)")
    p.add_argument("--slots", type=int, default=64)
    p.add_argument("--ctx", type=int, default=512)
    p.add_argument("--concurrency", type=int, default=64)
    p.add_argument("--requests", type=int, default=128, help="timed requests a repeat (default 128)")
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--workers", type=int, default=2, help="client processes (default 2)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--profile-top", type=int, default=0, help="print the N top entries of the server profile")
    p.add_argument("--server-cpus", default=None, help="taskset -c for the server (e.g. 0-7)")
    p.add_argument("--client-cpus", default=None, help="CPU affinity of this process and its client processes (e.g. 8-15)")
    p.add_argument("--server-path", default=None, help="the child imports xinfer_async from this tree")
    p.add_argument("--no-inprocess", action="store_true", help="skip the in-process stub figure")
    p.add_argument("--out", default=None, help="folder for the profiles and the JSON (default: a temp folder)")
    p.add_argument("--json", default=None, help="write the rows here")
    p.add_argument("--verbose", action="store_true", help="the child's stderr shows")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--profile", default=None, help=argparse.SUPPRESS)
    p.add_argument("--report", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.gguf is None:
        args.gguf = _default_gguf()
    if args.child:
        trio.run(_child, args)
        return 0
    import tempfile

    if args.client_cpus:  # the client processes (spawned by bench serve's run_row) inherit it
        os.sched_setaffinity(0, _cpu_list(args.client_cpus))

    out_dir = Path(args.out or tempfile.mkdtemp(prefix="serve_profile_"))
    out_dir.mkdir(parents=True, exist_ok=True)
    rows, inproc = [], []
    what = f"stub step {args.step_ms} ms" if args.model is None else f"{args.model} on {args.device or 'auto'}"
    print(f"serve_profile: {what}, {args.slots} slots, {args.concurrency} clients x {args.requests} requests x "
          f"{args.max_tokens} tokens, {args.workers} client processes; profiles in {out_dir}")
    for k in range(args.repeats):
        row = _one_repeat(args, k, out_dir)
        rows.append(row)
        idle = row.get("dev_idle_fraction")
        steady = row.get("steady_tok_per_s")
        print(f"  http      #{k}: {row['out_tok_per_s']:8.0f} tok/s (steady {steady or float('nan'):.0f})  server cpu {row['server_cpu_us_per_tok']:5.1f} "
              f"us/tok  client cpu {row['client_cpu_us_per_tok']:5.1f} us/tok"
              + (f"  dev idle {100 * idle:4.1f} %  late p50/p99 {row['late_ms_p50']:.2f}/{row['late_ms_p99']:.2f} ms"
                 if idle is not None else "")
              + (f"  tok/event {row['tokens_per_event']:.1f}" if row.get("tokens_per_event") else "")
              + f"  ttft p50 {row['ttft_ms_p50']:.0f} ms  tpot p50 {row['tpot_ms_p50']:.2f} ms  errors {row['errors']}",
              flush=True)
        if args.model is None and not args.no_inprocess:
            r = trio.run(_inprocess, args)
            inproc.append(r)
            print(f"  in-proc   #{k}: {r['tok_per_s']:8.0f} tok/s  cpu {r['cpu_us_per_tok']:5.1f} us/tok  "
                  f"dev idle {100 * r['dev_idle_fraction']:4.1f} %", flush=True)
    med = lambda xs: float(np.median(xs))  # noqa: E731
    summary = dict(server_cpu_us_per_tok=med([r["server_cpu_us_per_tok"] for r in rows]),
                   http_tok_per_s=med([r["out_tok_per_s"] for r in rows]))
    line = (f"median of {len(rows)}: server CPU {summary['server_cpu_us_per_tok']:.1f} us per token, "
            f"HTTP {summary['http_tok_per_s']:.0f} tok/s")
    if inproc:
        summary.update(inprocess_tok_per_s=med([r["tok_per_s"] for r in inproc]),
                       inprocess_cpu_us_per_tok=med([r["cpu_us_per_tok"] for r in inproc]))
        line += (f"; in-process {summary['inprocess_tok_per_s']:.0f} tok/s ({summary['inprocess_cpu_us_per_tok']:.1f} "
                 f"us/tok): HTTP / in-process {summary['http_tok_per_s'] / summary['inprocess_tok_per_s']:.3f}")
    print(line)
    if args.profile_top:  # a run of its own: cProfile's overhead stays out of the figures above
        row = _one_repeat(args, len(rows), out_dir, profile=True)
        print(f"\nprofiled run (cProfile on: {row['server_cpu_us_per_tok']:.1f} us/tok, "
              f"{row['out_tok_per_s']:.0f} tok/s), {row['profile']}, by own time:")
        print(_top(row["profile"], args.profile_top, "tottime"))
        print("by cumulative time:")
        print(_top(row["profile"], args.profile_top, "cumulative"))
        rows.append(dict(row, profiled=True))
    if args.json:
        Path(args.json).write_text(json.dumps(dict(args=vars(args), summary=summary, http=rows, inprocess=inproc),
                                              indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
