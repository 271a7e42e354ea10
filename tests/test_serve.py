"""xinfer_async/serve: the OpenAI-compatible server, live on 127.0.0.1 (a free port), through the
official ``openai`` client (and httpx where a raw request is the point: malformed JSON, a huge
body, a client that goes away).

Each server runs ``run_server`` (hypercorn's trio worker) in a thread of its own with its own
``trio.run``; the in-process results the HTTP ones are held against come from the same loaded
model through ``LanguageModel.complete``/``chat``, run in the server's trio.run
(``LiveServer.call``). Most tests use the tiny synthetic model (loads in well under a second);
chat and the disconnect test use the real SmolLM2 file (chat template; slow enough on a cpu that a
client can leave mid-stream).
"""

from __future__ import annotations

import collections
import functools
import importlib.util
import math
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import numpy as np
import openai
import pytest
import trio
import trio.testing
from prometheus_client.parser import text_string_to_metric_families

from tests._llm_fixtures import require_model
from xinfer_async import llm
from xinfer_async.llm._synthetic import write_synthetic_gguf
from xinfer_async.serve import OpenAIServer, ServerLimits, hypercorn_config, run_server

KEY = "sk-test-0123456789"
HAVE_MPL = importlib.util.find_spec("matplotlib") is not None
DEVICE = os.environ.get("XINFER_TEST_DEVICE", "cpu")


class LiveServer:
    """``run_server`` on 127.0.0.1:0 in a thread with its own trio.run.

    Attributes:
        url: ``http://127.0.0.1:PORT``; app: the ``OpenAIServer``.
    """

    def __init__(self, path, name: str, *, slots: int, ctx: int, api_key: str | None = None,
                 limits: ServerLimits = ServerLimits(), gate: threading.Event | None = None):
        self.app = OpenAIServer(name, api_key=api_key, limits=limits)
        self.name = name
        self._path, self._slots, self._ctx, self._gate = path, slots, ctx, gate
        self._bound = threading.Event()
        self._error: BaseException | None = None
        self.thread = threading.Thread(target=self._main, daemon=True, name=f"serve-{name}")
        self.thread.start()
        assert self._bound.wait(60), "the server did not bind within 60 s"
        if self._error is not None:
            raise self._error

    def _main(self) -> None:
        try:
            trio.run(self._run)
        except BaseException as exc:  # reported by stop() (or by __init__ before binding)
            self._error = exc
            self._bound.set()

    async def _run(self) -> None:
        self.token = trio.lowlevel.current_trio_token()
        self._stop = trio.Event()

        async def load():
            if self._gate is not None:
                await trio.to_thread.run_sync(self._gate.wait)
            return await llm.load(self._path, device=DEVICE, slots=self._slots, ctx=self._ctx, batching=True,
                                  max_queued=self._slots + self.app.limits.max_queue)

        async with trio.open_nursery() as nursery:
            binds = await nursery.start(functools.partial(run_server, self.app, load, hypercorn_config("127.0.0.1", 0),
                                                          shutdown_trigger=self._stop.wait))
            self.url = binds[0]
            self._bound.set()

    def wait_loaded(self, timeout_s: float = 120.0) -> "LiveServer":
        deadline = time.monotonic() + timeout_s
        while self.app.model is None:
            assert self.app.load_error is None, self.app.load_error
            assert time.monotonic() < deadline, "the model did not load in time"
            time.sleep(0.02)
        return self

    def call(self, afn, *args):
        """Run ``await afn(*args)`` in the server's trio.run; returns its result."""
        return trio.from_thread.run(afn, *args, trio_token=self.token)

    def client(self, **kwargs) -> openai.OpenAI:
        return openai.OpenAI(base_url=self.url + "/v1", api_key=kwargs.pop("api_key", KEY), max_retries=0,
                             timeout=120, **kwargs)

    def http(self, method: str, path: str, key: str | None = KEY, **kwargs) -> httpx.Response:
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        return httpx.request(method, self.url + path, headers=headers, timeout=60, **kwargs)

    def metrics(self) -> dict[str, float]:
        """Every sample of ``/metrics`` as ``{name{labels}: value}``, parsed by prometheus_client."""
        r = self.http("GET", "/metrics")
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
        out = {}
        for fam in text_string_to_metric_families(r.text):
            for s in fam.samples:
                labels = ",".join(f'{k}="{v}"' for k, v in sorted(s.labels.items()))
                out[f"{s.name}{{{labels}}}" if labels else s.name] = s.value
        return out

    def wait_idle(self, timeout_s: float = 30.0) -> None:
        """Until the model holds no slot and nothing waits (read from /metrics)."""
        deadline = time.monotonic() + timeout_s
        while True:
            m = self.metrics()
            if m["xinfer_num_requests_running"] == 0 and m["xinfer_num_requests_waiting"] == 0 \
                    and m["xinfer_num_requests_in_flight"] == 0:
                return
            assert time.monotonic() < deadline, f"still busy after {timeout_s} s: {m['xinfer_num_requests_running']}"
            time.sleep(0.02)

    def stop(self) -> None:
        if self.thread.is_alive():
            try:
                trio.from_thread.run_sync(self._stop.set, trio_token=self.token)
            except trio.RunFinishedError:
                pass
            self.thread.join(60)
        assert not self.thread.is_alive(), "the server did not stop"
        if self._error is not None:
            raise self._error


@pytest.fixture(scope="module")
def tiny_path(tmp_path_factory):
    return write_synthetic_gguf(tmp_path_factory.mktemp("serve") / "tiny.gguf", "tiny")


@pytest.fixture(scope="module")
def tiny(tiny_path):
    """The tiny synthetic model, 4 slots, an API key, a 64 KiB body limit."""
    server = LiveServer(tiny_path, "tiny", slots=4, ctx=256, api_key=KEY,
                        limits=ServerLimits(max_body_bytes=64 << 10)).wait_loaded()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def smol():
    """The real SmolLM2 (chat template), 2 slots, no API key."""
    server = LiveServer(require_model(), "smollm2-135m", slots=2, ctx=256).wait_loaded()
    yield server
    server.stop()


PROMPTS = ["hello world", "once upon a time", "the quick brown fox", "abc", "zz top", "lorem ipsum dolor",
           "a b c d e f", "serve me"]


def reference(server: LiveServer, prompt, **kwargs):
    """The in-process result of the same request on the same loaded model."""
    return server.call(functools.partial(server.app.model.complete, prompt, **kwargs))


# -- health and models ---------------------------------------------------------------------
def test_health_is_503_while_the_model_loads_then_200(tiny_path):
    gate = threading.Event()
    server = LiveServer(tiny_path, "tiny", slots=2, ctx=64, gate=gate)
    try:
        r = server.http("GET", "/health", key=None)
        assert r.status_code == 503 and r.json() == {"status": "loading"} and r.headers["retry-after"] == "1"
        r = server.http("GET", "/v1/models")
        assert r.status_code == 503 and r.json()["error"]["code"] == "model_not_ready"
        assert server.metrics()["xinfer_model_loaded"] == 0
        gate.set()
        deadline = time.monotonic() + 60
        while (r := server.http("GET", "/health", key=None)).status_code == 503:
            assert r.json() == {"status": "loading"}
            assert time.monotonic() < deadline
            time.sleep(0.01)
        assert r.status_code == 200 and r.json() == {"status": "ok"}
        assert server.metrics()["xinfer_model_loaded"] == 1
        assert [m.id for m in server.client().models.list()] == ["tiny"]
    finally:
        gate.set()
        server.stop()


def test_models_lists_the_served_model(tiny):
    models = tiny.client().models.list().data
    assert [(m.id, m.object, m.owned_by) for m in models] == [("tiny", "model", "xinfer_async")]


# -- completions ---------------------------------------------------------------------------
def test_completion_equals_the_in_process_result_with_usage(tiny):
    before = tiny.metrics()
    r = tiny.client().completions.create(model="tiny", prompt="hello world", max_tokens=12, temperature=0)
    ref = reference(tiny, "hello world", max_tokens=12)
    assert r.object == "text_completion" and r.model == "tiny" and r.id.startswith("cmpl-")
    assert r.choices[0].text == ref.text and r.choices[0].finish_reason == ref.finish_reason == "length"
    assert (r.usage.prompt_tokens, r.usage.completion_tokens) == (ref.timings.prompt_tokens, 12)
    assert r.usage.total_tokens == r.usage.prompt_tokens + 12
    after = tiny.metrics()
    # the server's counters moved by exactly this request (the in-process reference is not counted)
    assert after["xinfer_generation_tokens_total"] - before["xinfer_generation_tokens_total"] == 12
    assert after["xinfer_prompt_tokens_total"] - before["xinfer_prompt_tokens_total"] == r.usage.prompt_tokens
    assert after["xinfer_time_to_first_token_seconds_count"] - before["xinfer_time_to_first_token_seconds_count"] == 1
    assert after["xinfer_inter_token_latency_seconds_count"] - before["xinfer_inter_token_latency_seconds_count"] == 11
    key = 'xinfer_http_requests_total{route="/v1/completions",status="200"}'
    assert after[key] - before.get(key, 0) == 1


def test_completion_of_token_ids_and_the_default_length(tiny):
    ids = tiny.app.model.tokenize("the quick brown fox")
    r = tiny.client().completions.create(model="tiny", prompt=ids, temperature=0)
    ref = reference(tiny, ids, max_tokens=16)
    assert r.choices[0].text == ref.text and r.usage.completion_tokens == 16  # OpenAI's default max_tokens


def test_streaming_completion_with_usage(tiny):
    chunks = list(tiny.client().completions.create(model="tiny", prompt="once upon a time", max_tokens=10,
                                                    temperature=0, stream=True,
                                                    stream_options={"include_usage": True}))
    ref = reference(tiny, "once upon a time", max_tokens=10)
    body, usage_chunk = chunks[:-1], chunks[-1]
    assert "".join(c.choices[0].text for c in body) == ref.text
    assert [c.choices[0].finish_reason for c in body][-1] == "length"
    assert all(c.choices[0].finish_reason is None for c in body[:-1]) and all(c.usage is None for c in body)
    assert usage_chunk.choices == [] and usage_chunk.usage.completion_tokens == 10
    assert usage_chunk.usage.prompt_tokens == ref.timings.prompt_tokens
    assert len({c.id for c in chunks}) == 1


def test_stop_string_and_sampling_fields_reach_generate(tiny):
    ref = reference(tiny, "abc", max_tokens=20)
    stop = ref.text[5:7]
    r = tiny.client().completions.create(model="tiny", prompt="abc", max_tokens=20, temperature=0, stop=[stop])
    assert r.choices[0].text == ref.text[:ref.text.find(stop)] and r.choices[0].finish_reason == "stop"
    seeded = [tiny.client().completions.create(model="tiny", prompt="abc", max_tokens=12, temperature=1.5, seed=7,
                                               top_p=0.9, extra_body={"top_k": 50}).choices[0].text for _ in range(2)]
    ref = reference(tiny, "abc", max_tokens=12, temperature=1.5, seed=7, top_p=0.9, top_k=50)
    assert seeded == [ref.text, ref.text]
    # the penalties and min_p (vLLM's repetition_penalty, llama-server's repeat_last_n) reach generate
    pen = dict(presence_penalty=1.5, frequency_penalty=0.5)
    extra = {"min_p": 0.1, "repetition_penalty": 1.3, "repeat_last_n": -1}
    r = tiny.client().completions.create(model="tiny", prompt="abc", max_tokens=20, temperature=0, **pen,
                                         extra_body=extra)
    ref = reference(tiny, "abc", max_tokens=20, **pen, min_p=0.1, repeat_penalty=1.3, repeat_last_n=-1)
    plain = reference(tiny, "abc", max_tokens=20)
    assert r.choices[0].text == ref.text != plain.text


def test_32_concurrent_streams_all_equal_the_in_process_results(tiny):
    refs = {p: reference(tiny, p, max_tokens=24, ignore_eos=True) for p in PROMPTS}
    client = tiny.client()

    def one(i: int):
        p = PROMPTS[i % len(PROMPTS)]
        text, usage, finish = "", None, None
        for c in client.completions.create(model="tiny", prompt=p, max_tokens=24, temperature=0, stream=True,
                                           stream_options={"include_usage": True}, extra_body={"ignore_eos": True}):
            if c.choices:
                text += c.choices[0].text
                finish = c.choices[0].finish_reason or finish
            else:
                usage = c.usage
        return p, text, usage, finish

    before = tiny.call(_max_active, tiny.app.model)
    with ThreadPoolExecutor(32) as pool:
        results = list(pool.map(one, range(32)))
    for p, text, usage, finish in results:
        assert text == refs[p].text and finish == "length"
        assert (usage.prompt_tokens, usage.completion_tokens) == (refs[p].timings.prompt_tokens, 24)
    assert tiny.call(_max_active, tiny.app.model) >= max(before, 2)  # the requests did decode together
    tiny.wait_idle()


def test_a_stream_interval_groups_the_tokens_of_one_interval_into_one_event(tiny):
    from xinfer_async.serve._sse import StreamPacing

    ref = reference(tiny, "once upon a time", max_tokens=24, ignore_eos=True)
    client = tiny.client()
    tiny.app.pacing = StreamPacing(0.3)  # one write per 0.3 s: every event after the first carries several tokens
    try:
        chunks = [c for c in client.completions.create(model="tiny", prompt="once upon a time", max_tokens=24,
                                                        temperature=0, stream=True, extra_body={"ignore_eos": True})]
    finally:
        tiny.app.pacing = StreamPacing()
    texts = [c.choices[0].text for c in chunks if c.choices and c.choices[0].text]
    assert "".join(texts) == ref.text and chunks[-1].choices[0].finish_reason == "length"
    assert 1 <= len(texts) < 24  # each event a valid chunk; fewer events than tokens
    tiny.wait_idle()


def test_stream_pacing_default_grows_with_the_streams_and_checks_its_arguments():
    from xinfer_async.serve._sse import StreamPacing

    auto = StreamPacing(write_cost_s=1e-3)
    assert auto.interval(0) == auto.interval(1) == 0.0  # one stream: every token its own event
    assert auto.interval(64) == pytest.approx(63e-3)
    assert StreamPacing(0.01).interval(64) == 0.01 and StreamPacing(0).interval(64) == 0
    with pytest.raises(ValueError, match="interval_s must be None or >= 0 seconds, got -1"):
        StreamPacing(-1)
    with pytest.raises(ValueError, match="write_cost_s must be > 0 seconds, got 0"):
        StreamPacing(write_cost_s=0)


async def _max_active(model):
    return model.statistics()["scheduler"].max_active


async def test_stream_pacing_spreads_the_turns_over_the_interval_oldest_first(autojump_clock):
    from xinfer_async.serve._sse import StreamPacing

    pacing = StreamPacing(write_cost_s=1e-3)  # 32 streams: an interval of 31 ms, a tick of 4 ms
    streams, rounds = 32, 5
    turns: list[tuple[float, int]] = []  # (time, stream) of each turn

    async def stream(k: int) -> None:
        await trio.sleep(k * 1e-5)  # they park in the order 0..31
        for _ in range(rounds):
            await pacing.wait(streams)
            turns.append((trio.current_time(), k))

    t0 = trio.current_time()
    async with trio.open_nursery() as nursery:
        for k in range(streams):
            nursery.start_soon(stream, k)
    per_tick = collections.Counter(round((t - t0) / 4e-3) for t, _ in turns)
    assert max(per_tick.values()) <= 5  # 32 x 4 / 31 turns a tick, never all 32 streams at once
    first = [min(t for t, j in turns if j == k) for k in range(streams)]
    assert first == sorted(first) and first[-1] <= t0 + 0.04  # oldest waiter first (one tick's turns run in any order)
    for k in range(streams):  # each stream about once an interval
        times = [t for t, j in turns if j == k]
        assert len(times) == rounds
        gaps = np.diff(times)
        assert 27e-3 <= gaps.min() and gaps.max() <= 37e-3, gaps
    await trio.sleep(0.05)  # the clock stops after an idle interval and restarts on demand
    assert pacing._clock is None
    t1 = trio.current_time()
    await pacing.wait(2)  # 2 streams, an interval of 1 ms: a turn within a tick
    assert t1 < trio.current_time() <= t1 + 1e-3 + 1e-9
    t2 = trio.current_time()
    await StreamPacing(0).wait(64)  # interval 0: at once
    assert trio.current_time() == t2


async def test_stream_pacing_gives_a_late_tick_its_share_but_no_burst(autojump_clock):
    from xinfer_async.serve._sse import StreamPacing

    pacing = StreamPacing(write_cost_s=1e-3)  # 64 streams: 63 ms, a tick of 4 ms, 64 / 63 turns a ms
    woken: list[float] = []

    async def stream() -> None:
        await pacing.wait(64)
        woken.append(trio.current_time())

    async with trio.open_nursery() as nursery:
        for _ in range(64):
            nursery.start_soon(stream)
        await trio.testing.wait_all_tasks_blocked()
        t0 = trio.current_time()
        autojump_clock.jump(0.0065)  # the first tick comes 2.5 ms late: 6.5 ms of turns
        await trio.testing.wait_all_tasks_blocked()
        assert len(woken) == 6 and all(t == t0 + 0.0065 for t in woken)
        autojump_clock.jump(0.1)  # the thread was busy for 100 ms: two ticks' turns, not 100 ms of them
        await trio.testing.wait_all_tasks_blocked()
        assert len(woken) == 6 + 8
        nursery.cancel_scope.cancel()


def test_counted_histogram_equals_prometheus_histogram_observed_one_by_one():
    from prometheus_client import CollectorRegistry, Histogram, generate_latest

    from xinfer_async.serve._metrics import ITL_BUCKETS, CountedHistogram

    rng = np.random.default_rng(3)
    values = rng.exponential(0.02, 300)
    counts = rng.integers(0, 6, 300)
    values[:5] = ITL_BUCKETS[:5]  # on a bound: counted in that bucket (le is inclusive)
    ours, ref = CollectorRegistry(), CollectorRegistry()
    h = CountedHistogram("x_seconds", "doc", ITL_BUCKETS, ours)
    r = Histogram("x_seconds", "doc", buckets=ITL_BUCKETS, registry=ref)
    for v, n in zip(values, counts):
        h.observe(float(v), int(n))
        for _ in range(n):
            r.observe(float(v))

    def samples(reg):
        return {(s.name, s.labels.get("le")): s.value for f in text_string_to_metric_families(
            generate_latest(reg).decode()) for s in f.samples if not s.name.endswith("_created")}

    got, want = samples(ours), samples(ref)
    assert got.keys() == want.keys()
    for k in want:
        assert got[k] == pytest.approx(want[k], rel=1e-12), k
    with pytest.raises(ValueError, match="buckets must be a non-empty increasing sequence"):
        CountedHistogram("y", "doc", [0.1, 0.1], CollectorRegistry())


def test_tokenize_and_detokenize(tiny):
    r = tiny.http("POST", "/tokenize", json={"content": "hello world"})
    ids = tiny.app.model.tokenize("hello world")
    assert r.status_code == 200 and r.json() == {"tokens": ids, "count": len(ids), "max_model_len": 256}
    r = tiny.http("POST", "/detokenize", json={"tokens": ids})
    assert r.status_code == 200 and r.json()["content"] == "hello world"
    r = tiny.http("POST", "/detokenize", json={"tokens": [10 ** 6]})
    assert r.status_code == 400 and r.json()["error"]["param"] == "tokens"


# -- refusals ------------------------------------------------------------------------------
def test_bad_requests_are_refused_while_a_stream_runs_undisturbed(tiny):
    ref = reference(tiny, "lorem ipsum dolor", max_tokens=200, ignore_eos=True)
    before = tiny.metrics()
    out = {}

    def stream():
        with httpx.stream("POST", tiny.url + "/v1/completions", headers={"Authorization": f"Bearer {KEY}"},
                          json={"model": "tiny", "prompt": "lorem ipsum dolor", "max_tokens": 200, "temperature": 0,
                                "stream": True, "ignore_eos": True}, timeout=60) as r:
            out["lines"] = [line for line in r.iter_lines() if line]

    t = threading.Thread(target=stream)
    t.start()
    bad = [
        (400, "invalid_json", tiny.http("POST", "/v1/completions", content=b'{"model": "tiny", "prompt": ')),
        (400, "invalid_json", tiny.http("POST", "/v1/completions", content=b'[1, 2]')),
        (413, "body_too_large", tiny.http("POST", "/v1/completions", content=b"x" * (65 << 10))),
        (413, "body_too_large", tiny.http("POST", "/v1/completions",  # chunked: no Content-Length
                                          content=iter([b'{"prompt": "', b"y" * (40 << 10), b"z" * (40 << 10)]))),
        (401, "invalid_api_key", tiny.http("POST", "/v1/completions", key="sk-wrong", json={"prompt": "hi"})),
        (401, "invalid_api_key", tiny.http("GET", "/v1/models", key=None)),
        (404, "model_not_found", tiny.http("POST", "/v1/completions", json={"model": "gpt-4", "prompt": "hi"})),
        (400, None, tiny.http("POST", "/v1/completions", json={"prompt": "hi", "logprobs": 21})),
        (400, None, tiny.http("POST", "/v1/completions", json={"prompt": "hi", "logprobs": -1})),
        (400, None, tiny.http("POST", "/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}],
                                                                    "logprobs": True, "top_logprobs": 21})),
        (400, None, tiny.http("POST", "/v1/completions", json={"prompt": "hi", "presence_penalty": 2.5})),
        (400, None, tiny.http("POST", "/v1/completions", json={"prompt": "hi", "repetition_penalty": 0})),
        (400, None, tiny.http("POST", "/v1/completions", json={"prompt": "hi", "max_tokens": 10 ** 6})),
        (400, None, tiny.http("POST", "/v1/completions", json={"prompt": "hi", "n": 2})),
        (400, None, tiny.http("POST", "/v1/completions", json={"prompt": "hi", "temperature": "hot"})),
    ]
    for status, code, r in bad:
        assert r.status_code == status, r.text
        err = r.json()["error"]
        assert err["code"] == code and err["message"] and set(err) == {"message", "type", "param", "code"}
    assert tiny.http("GET", "/health", key=None).status_code == 200  # /health needs no key
    t.join(60)
    lines = out["lines"]
    assert lines[-1] == "data: [DONE]"
    import json

    chunks = [json.loads(line[6:]) for line in lines[:-1]]
    assert "".join(c["choices"][0]["text"] for c in chunks) == ref.text
    # and the openai client's errors for the same refusals
    with pytest.raises(openai.AuthenticationError):
        tiny.client(api_key="sk-wrong").completions.create(model="tiny", prompt="hi", max_tokens=2)
    with pytest.raises(openai.NotFoundError, match="the model .gpt-4. does not exist"):
        tiny.client().completions.create(model="gpt-4", prompt="hi", max_tokens=2)
    with pytest.raises(openai.BadRequestError, match=r"frequency_penalty must be a number in \[-2, 2\], got 3"):
        tiny.client().completions.create(model="tiny", prompt="hi", max_tokens=2, frequency_penalty=3)
    with pytest.raises(openai.BadRequestError, match=r"logprobs must be an integer in \[0, 20\], got 21"):
        tiny.client().completions.create(model="tiny", prompt="hi", max_tokens=2, logprobs=21)
    with pytest.raises(openai.BadRequestError, match=r"top_logprobs must be an integer in \[0, 20\], got -1"):
        tiny.client().chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hi"}],
                                              max_tokens=2, logprobs=True, top_logprobs=-1)
    with pytest.raises(openai.BadRequestError, match="top_logprobs needs logprobs: true"):
        tiny.client().chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hi"}],
                                              max_tokens=2, top_logprobs=2)
    after = tiny.metrics()
    assert after['xinfer_http_requests_total{route="/v1/completions",status="413"}'] \
        - before.get('xinfer_http_requests_total{route="/v1/completions",status="413"}', 0) == 2
    assert after["xinfer_generation_tokens_total"] - before["xinfer_generation_tokens_total"] == 200
    tiny.wait_idle()


def test_a_full_queue_answers_429_with_retry_after(tiny_path):
    server = LiveServer(tiny_path, "tiny", slots=1, ctx=256, limits=ServerLimits(max_queue=0)).wait_loaded()
    try:
        with httpx.stream("POST", server.url + "/v1/completions",
                          json={"prompt": "abc", "max_tokens": 250, "ignore_eos": True, "stream": True,
                                "temperature": 0}, timeout=60) as first:
            lines = first.iter_lines()
            assert next(lines).startswith("data: ")  # the first request holds the one slot
            r = server.http("POST", "/v1/completions", json={"prompt": "abc", "max_tokens": 2})
            assert r.status_code == 429 and r.headers["retry-after"] == "1"
            assert r.json()["error"]["code"] == "too_many_requests"
            assert [line for line in lines if line][-1] == "data: [DONE]"
        server.wait_idle()
        r = server.client().completions.create(model="tiny", prompt="abc", max_tokens=2)  # room again
        assert r.usage.completion_tokens == 2
    finally:
        server.stop()


def test_a_request_past_its_time_is_cancelled_and_answered_504(tiny_path):
    server = LiveServer(tiny_path, "tiny", slots=1, ctx=256,
                        limits=ServerLimits(request_timeout_s=0.005)).wait_loaded()
    try:
        r = server.http("POST", "/v1/completions", json={"prompt": "abc", "max_tokens": 250, "ignore_eos": True})
        assert r.status_code == 504 and r.json()["error"]["code"] == "timeout"
        server.wait_idle()
        m = server.metrics()
        assert m['xinfer_requests_cancelled_total{reason="timeout"}'] == 1
        assert m["xinfer_disconnect_to_free_seconds_count"] == 1
    finally:
        server.stop()


# -- the real model: chat, and a client that goes away ---------------------------------------
MESSAGES = [{"role": "system", "content": "You are brief."}, {"role": "user", "content": "Name a colour."}]


def test_chat_equals_the_in_process_chat(smol):
    client = smol.client()
    r = client.chat.completions.create(model="smollm2-135m", messages=MESSAGES, max_tokens=8, temperature=0)
    ref = smol.call(functools.partial(smol.app.model.chat, MESSAGES, max_tokens=8))
    assert r.object == "chat.completion" and r.id.startswith("chatcmpl-")
    assert r.choices[0].message.role == "assistant" and r.choices[0].message.content == ref.text
    assert r.choices[0].finish_reason == ref.finish_reason
    assert (r.usage.prompt_tokens, r.usage.completion_tokens) == (ref.timings.prompt_tokens, len(ref.token_ids))
    assert r.usage.prompt_tokens == len(smol.app.model.render_chat(MESSAGES))
    chunks = list(client.chat.completions.create(model="smollm2-135m", messages=MESSAGES, max_tokens=8,
                                                 temperature=0, stream=True, stream_options={"include_usage": True}))
    assert chunks[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == ref.text
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == ref.finish_reason
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == len(ref.token_ids)


# logprobs: the chosen token's against a float64 log-softmax of the same step's logits, from the
# in-process teacher-forced ``logits`` of prompt + generated tokens (identical on cpu to the decode
# step's: the difference is the log-sum-exp's rounding; a cuda prefill kernel may round otherwise)
LP_TOL = 1e-9 if DEVICE == "cpu" else 2e-2


def reference_logprobs(server: LiveServer, prompt_ids: list[int], token_ids: list[int]) -> np.ndarray:
    """float64 (len(token_ids), vocab): the log-softmax of the logits that generated each token."""
    logits = server.call(server.app.model.logits, prompt_ids + token_ids[:-1]).astype(np.float64)
    rows = logits[len(prompt_ids) - 1:]
    return rows - np.logaddexp.reduce(rows, axis=1, keepdims=True)


def token_text(server: LiveServer, token_id: int) -> str:
    return server.app.model.tokenizer.token_bytes(token_id).decode("utf-8", errors="replace")


def test_completion_logprobs_match_a_float64_log_softmax_streamed_or_not(smol):
    model = smol.app.model
    ids = model.tokenize("The capital of France is")
    client = smol.client()
    ref = smol.call(functools.partial(model.complete, ids, max_tokens=8))
    lp = reference_logprobs(smol, ids, ref.token_ids)
    r = client.completions.create(model="smollm2-135m", prompt=ids, max_tokens=8, temperature=0, logprobs=5)
    got = r.choices[0].logprobs
    assert r.choices[0].text == ref.text
    assert got.tokens == [token_text(smol, t) for t in ref.token_ids]
    assert all(t.isascii() for t in got.tokens)  # so each token is its text: the offsets add up
    assert got.text_offset == [len("".join(got.tokens[:j])) for j in range(len(got.tokens))]
    for j, (t, chosen, top) in enumerate(zip(ref.token_ids, got.token_logprobs, got.top_logprobs)):
        assert chosen == pytest.approx(lp[j, t], abs=LP_TOL, rel=0)
        best = np.argsort(-lp[j], kind="stable")[:5]
        assert list(top) == [token_text(smol, i) for i in best]  # most likely first; greedy: the chosen first
        assert list(top.values()) == pytest.approx(lp[j, best], abs=LP_TOL, rel=0)
        assert got.tokens[j] in top and top[got.tokens[j]] == chosen
    # streamed: the chunks' logprobs joined are the same
    chunks = list(client.completions.create(model="smollm2-135m", prompt=ids, max_tokens=8, temperature=0,
                                            logprobs=5, stream=True))
    parts = [c.choices[0].logprobs for c in chunks if c.choices[0].logprobs is not None]
    assert sum((p.tokens for p in parts), []) == got.tokens
    assert sum((p.token_logprobs for p in parts), []) == got.token_logprobs
    assert sum((p.text_offset for p in parts), []) == got.text_offset
    assert sum((p.top_logprobs for p in parts), []) == got.top_logprobs
    # logprobs=0: the chosen token's only
    r0 = client.completions.create(model="smollm2-135m", prompt=ids, max_tokens=3, temperature=0, logprobs=0)
    assert [list(t) for t in r0.choices[0].logprobs.top_logprobs] == [[t] for t in got.tokens[:3]]
    # a sampled request: the raw logits' log-probabilities of the tokens it drew (seeded: the in-process ones)
    sampled = smol.call(functools.partial(model.complete, ids, max_tokens=8, temperature=1.2, seed=5))
    rs = client.completions.create(model="smollm2-135m", prompt=ids, max_tokens=8, temperature=1.2, seed=5,
                                   logprobs=2)
    assert rs.choices[0].text == sampled.text
    lps = reference_logprobs(smol, ids, sampled.token_ids)
    assert rs.choices[0].logprobs.token_logprobs == pytest.approx(
        [lps[j, t] for j, t in enumerate(sampled.token_ids)], abs=LP_TOL, rel=0)


def test_chat_logprobs_match_a_float64_log_softmax_streamed_or_not(smol):
    model = smol.app.model
    client = smol.client()
    ref = smol.call(functools.partial(model.chat, MESSAGES, max_tokens=8))
    lp = reference_logprobs(smol, model.render_chat(MESSAGES), ref.token_ids)
    r = client.chat.completions.create(model="smollm2-135m", messages=MESSAGES, max_tokens=8, temperature=0,
                                       logprobs=True, top_logprobs=3)
    assert r.choices[0].message.content == ref.text
    content = r.choices[0].logprobs.content
    assert len(content) == len(ref.token_ids)
    for j, (t, c) in enumerate(zip(ref.token_ids, content)):
        assert c.bytes == list(model.tokenizer.token_bytes(t)) and c.token == token_text(smol, t)
        assert c.logprob == pytest.approx(lp[j, t], abs=LP_TOL, rel=0)
        best = np.argsort(-lp[j], kind="stable")[:3]
        assert [a.token for a in c.top_logprobs] == [token_text(smol, i) for i in best]
        assert [a.logprob for a in c.top_logprobs] == pytest.approx(lp[j, best], abs=LP_TOL, rel=0)
        assert c.top_logprobs[0].token == c.token and c.top_logprobs[0].logprob == c.logprob  # greedy
    chunks = list(client.chat.completions.create(model="smollm2-135m", messages=MESSAGES, max_tokens=8,
                                                 temperature=0, logprobs=True, top_logprobs=3, stream=True))
    streamed = [e for c in chunks if c.choices and c.choices[0].logprobs for e in c.choices[0].logprobs.content]
    assert [e.model_dump() for e in streamed] == [e.model_dump() for e in content]
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == ref.text
    # logprobs without top_logprobs: the chosen token's, no alternatives; without logprobs: none
    r = client.chat.completions.create(model="smollm2-135m", messages=MESSAGES, max_tokens=3, temperature=0,
                                       logprobs=True)
    assert [(c.token, c.logprob, c.top_logprobs) for c in r.choices[0].logprobs.content] == \
        [(e.token, e.logprob, []) for e in content[:3]]
    r = client.chat.completions.create(model="smollm2-135m", messages=MESSAGES, max_tokens=3, temperature=0)
    assert r.choices[0].logprobs is None


async def test_a_chat_stream_writes_its_role_with_the_first_text_and_its_last_text_with_the_end():
    """The ASGI messages of one streamed chat (the app called directly, in this trio.run): the role
    chunk goes out with the first text, the last text with the finish, usage and [DONE] chunks --
    a socket write less each; every token its own event otherwise (one stream: no pacing)."""
    import json

    model = await llm.load(require_model(), device="cpu", slots=1, ctx=128, batching=True)
    try:
        app = OpenAIServer("smollm2-135m")
        app.set_model(model)
        ref = await model.chat(MESSAGES, max_tokens=5, ignore_eos=True)
        body = json.dumps({"messages": MESSAGES, "max_tokens": 5, "temperature": 0, "stream": True,
                           "ignore_eos": True, "stream_options": {"include_usage": True}}).encode()
        sent, requests = [], [{"type": "http.request", "body": body, "more_body": False}]

        async def receive():
            if requests:
                return requests.pop()
            await trio.sleep_forever()

        async def send(msg):
            sent.append(msg)

        scope = {"type": "http", "path": "/v1/chat/completions", "method": "POST", "headers": []}
        with trio.fail_after(60):
            await app(scope, receive, send)
    finally:
        await model.aclose()
    assert sent[0]["type"] == "http.response.start" and sent[0]["status"] == 200
    writes = [m["body"] for m in sent[1:]]
    events = [[json.loads(e[6:]) for e in w.decode().split("\n\n") if e.startswith("data: {")] for w in writes]
    assert [m.get("more_body") for m in sent[1:]] == [True] * (len(writes) - 1) + [False]
    assert writes[-1].endswith(b"data: [DONE]\n\n")
    first, last = events[0], events[-1]
    assert first[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""} and len(first) == 2
    assert first[1]["choices"][0]["delta"]["content"]
    assert last[-2]["choices"][0]["finish_reason"] == "length" and last[-1]["usage"]["completion_tokens"] == 5
    assert last[0]["choices"][0]["delta"].get("content")  # the last text rides with the end
    text = "".join(e["choices"][0]["delta"].get("content") or "" for w in events for e in w if e["choices"])
    assert text == ref.text
    assert len(writes) <= 5  # 5 tokens: at most a write each, the role and the end in theirs


def test_a_client_that_disconnects_mid_stream_frees_its_slot(smol):
    before = smol.metrics()
    with httpx.stream("POST", smol.url + "/v1/chat/completions",
                      json={"messages": MESSAGES, "max_tokens": 200, "ignore_eos": True, "stream": True,
                            "temperature": 0}, timeout=60) as r:
        lines = r.iter_lines()
        got = [next(lines) for _ in range(6)]  # role chunk, blank, two content chunks...
        assert got[0].startswith("data: ")
        assert smol.metrics()["xinfer_num_requests_running"] == 1
    # the response was closed after a few of its 200 tokens: the generation stops, the slot is free
    smol.wait_idle(timeout_s=30)
    st = smol.call(_statistics, smol.app.model)
    assert st["running"] == 0 and st["scheduler"].active == 0
    after = smol.metrics()
    assert after['xinfer_requests_cancelled_total{reason="disconnect"}'] \
        - before.get('xinfer_requests_cancelled_total{reason="disconnect"}', 0) == 1
    assert after["xinfer_disconnect_to_free_seconds_count"] - before["xinfer_disconnect_to_free_seconds_count"] == 1
    freed_s = after["xinfer_disconnect_to_free_seconds_sum"] - before["xinfer_disconnect_to_free_seconds_sum"]
    assert 0 < freed_s < 5.0
    generated = after["xinfer_generation_tokens_total"] - before["xinfer_generation_tokens_total"]
    assert 2 <= generated < 200  # it did stop early
    # the model serves the next request as before
    r = smol.client().chat.completions.create(model="smollm2-135m", messages=MESSAGES, max_tokens=2, temperature=0)
    assert r.usage.completion_tokens >= 1


async def _statistics(model):
    return model.statistics()


# -- bench serve -----------------------------------------------------------------------------
def test_bench_serve_sweeps_concurrency_against_the_live_server(tiny, tmp_path):
    import json

    from xinfer_async.bench import _serve, resolve

    out = tmp_path / "serve.json"
    argv = ["--url", tiny.url + "/v1", "--api-key", KEY, "--concurrency", "1,4", "--requests", "4",
            "--max-tokens", "6", "--rate", "inf,200", "--json", str(out)]
    if HAVE_MPL:
        argv += ["--plot", str(tmp_path / "serve.png")]
    assert resolve("serve")(argv) == 0
    d = json.loads(out.read_text())
    assert d["model"] == "tiny" and [(r["concurrency"], r["rate"]) for r in d["rows"]] == \
        [(1, None), (1, 200.0), (4, None), (4, 200.0)]  # inf is written as null
    for r in d["rows"]:
        assert r["completed"] == 4 and r["errors"] == 0 and r["output_tokens"] == 24
        assert 0 < r["ttft_ms_p10"] <= r["ttft_ms_p50"] <= r["ttft_ms_p90"] and r["itl_ms_p50"] >= 0
    assert not HAVE_MPL or (tmp_path / "serve.png").stat().st_size > 10_000
    assert _serve.parse_event('data: {"choices": [{"delta": {"content": "a"}}]}') == ("a", None)
    assert _serve.parse_event('data: {"choices": [], "usage": {"completion_tokens": 3}}') == ("", 3)
    assert _serve.parse_event("data: [DONE]") is None and _serve.parse_event("") is None
    with pytest.raises(RuntimeError, match="server error event"):
        _serve.parse_event('data: {"error": {"message": "x"}}')


def test_bench_serve_counts_the_tokens_of_grouped_events(tiny):
    """A server that groups tokens into events (a long stream interval): the client's token count at
    each chunk is the request's usage dealt by characters, ending at the usage, not one a chunk."""
    from xinfer_async.bench import _serve
    from xinfer_async.serve._sse import StreamPacing

    async def run():
        async with httpx.AsyncClient(timeout=60) as client:
            return await _serve.stream_request(client, tiny.url + "/v1/completions",
                                               _serve.request_body("tiny", "once upon a time", 24, False),
                                               {"Authorization": f"Bearer {KEY}"})

    tiny.app.pacing = StreamPacing(0.3)  # one write per 0.3 s: several tokens an event
    try:
        r = trio.run(run)
    finally:
        tiny.app.pacing = StreamPacing()
    counts = [n for _, n in r["times"]]
    assert r["tokens"] == 24 and counts[-1] == 24 and counts == sorted(counts) and 1 <= len(counts) < 24
    tiny.wait_idle()


def test_bench_serve_deals_a_row_out_to_client_processes_and_merges_them(tiny, tmp_path):
    import json

    from xinfer_async.bench import _serve, resolve
    from xinfer_async.bench._load import arrival_times

    shares = _serve.split_row(7, 20, 50.0, 3, 3)
    assert [s.concurrency for s in shares] == [3, 2, 2]
    assert sorted(i for s in shares for i in s.indices) == list(range(20))
    want = arrival_times(20, 50.0, 3)
    assert all(o == pytest.approx(want[i]) for s in shares for i, o in zip(s.indices, s.offsets))
    assert len(_serve.split_row(2, 5, math.inf, 0, 4)) == 2  # never more processes than places in flight
    with pytest.raises(ValueError, match="workers and concurrency must be >= 1, got 0, 2"):
        _serve.split_row(2, 5, math.inf, 0, 0)
    # SSE split anywhere on the wire: the bytes parser keeps the incomplete rest
    wire = b'data: {"choices":[{"text":"a"}]}\n\ndata: {"choices":[],"usage":{"completion_tokens":3}}\n\ndata: [DONE]\n\n'
    for cut in range(len(wire) + 1):
        first, rest = _serve.parse_events(wire[:cut])
        second, rest = _serve.parse_events(rest + wire[cut:])
        assert first + second == [("a", None), ("", 3)] and rest == b""
    out = tmp_path / "serve.json"
    assert resolve("serve")(["--url", tiny.url, "--api-key", KEY, "--concurrency", "4", "--requests", "6",
                             "--max-tokens", "5", "--workers", "2", "--json", str(out)]) == 0
    (row,) = json.loads(out.read_text())["rows"]
    assert row["client_processes"] == 2 and row["completed"] == 6 and row["errors"] == 0
    assert row["output_tokens"] == 30 and row["client_cpu_us_per_tok"] > 0 and row["server_cpu_us_per_tok"] > 0
    tiny.wait_idle()


# -- the command ---------------------------------------------------------------------------
def test_serve_command_help_and_a_model_that_fails_to_load(capsys, tmp_path):
    from xinfer_async.cli import main

    with pytest.raises(SystemExit) as exc:
        main(["serve", "-h"])
    assert exc.value.code == 0 and "--api-key" in capsys.readouterr().out
    missing = tmp_path / "missing.gguf"
    assert main(["serve", "-m", str(missing), "--port", "0", "--device", "cpu"]) == 2
    err = capsys.readouterr().err
    assert "listening on http://127.0.0.1:" in err and f"xinfer-async serve: error:" in err and "missing.gguf" in err
    with pytest.raises(SystemExit) as exc:
        main(["serve", "--port", "70000"])
    assert exc.value.code == 2 and "--port: must be in [0, 65535], got 70000" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        main(["serve", "--chat-template", "chatm1"])
    assert exc.value.code == 2 and ("--chat-template: unknown chat template 'chatm1': give a built-in name (chatml, "
                                    "gemma, llama3) or the path of a .jinja file") in capsys.readouterr().err
