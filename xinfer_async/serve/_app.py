"""The ASGI application of ``xinfer-async serve``: routing, auth, limits, and the generation
endpoints, on the public ``LanguageModel`` API (``generate``, ``render_chat``, ``tokenize``,
``detokenize``, ``statistics``, and ``tokenizer.token_bytes`` for the token texts of
log-probabilities).

Plain ASGI rather than a framework: seven fixed routes, and the two things a framework would get
in the way of are ours to control: reading the body with a size limit (refused once it passes
the limit, not after buffering it), and watching the connection for ``http.disconnect`` while a
response streams, which is what cancels a generation.

A generation request runs in a nursery with a watcher task on ``receive()``: when the client
goes away (or the request's time is up) the scope is cancelled, the ``GenerationStream`` stops
at the next step boundary and frees its slot; the time from the disconnect to
``wait_released()`` returning goes to ``xinfer_disconnect_to_free_seconds``.

A streamed response costs the server per event, not per token, wherever it can: an event is one
pre-encoded template with the text spliced in (``PieceEncoder``; a request with log-probabilities
builds its whole chunk), the tokens that came meanwhile are read without waiting
(``GenerationStream.read_nowait``), the inter-token histogram takes the event's gaps in one call,
and the stream then waits for its next turn on the shared pacing clock (``StreamPacing``).
"""

from __future__ import annotations

import dataclasses
import hmac
import inspect
import json
import time
from typing import Any, Awaitable, Callable

import trio

from . import _schema as oa
from ._metrics import CONTENT_TYPE_LATEST, ServerMetrics, Snapshot
from ._schema import APIError
from ._sse import PieceEncoder, StreamPacing, encode

__all__ = ["ServerLimits", "OpenAIServer"]

_JSON = [(b"content-type", b"application/json")]


@dataclasses.dataclass(frozen=True)
class ServerLimits:
    """What the server accepts.

    Attributes:
        max_body_bytes: request bodies larger than this are refused (413).
        max_queue: generation requests that may wait for a slot; past slots + max_queue in flight,
            a request is refused with 429 and ``Retry-After``.
        max_tokens: the largest ``max_tokens`` a request may ask (None: the context length).
        default_completion_tokens: ``max_tokens`` of a completion that gives none (OpenAI's 16);
            a chat that gives none runs to the end of the context or a stop.
        request_timeout_s: a generation running longer is cancelled (its slot freed) and answered
            504 (or, streaming, an error event); None: no limit.
        retry_after_s: the ``Retry-After`` of a 429, whole seconds.
    """

    max_body_bytes: int = 1 << 20
    max_queue: int = 256
    max_tokens: int | None = None
    default_completion_tokens: int = 16
    request_timeout_s: float | None = 600.0
    retry_after_s: int = 1

    def __post_init__(self):
        for name in ("max_body_bytes", "max_queue", "default_completion_tokens", "retry_after_s"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise ValueError(f"{name} must be an integer >= 0, got {v!r}")
        if self.max_tokens is not None and (not isinstance(self.max_tokens, int) or self.max_tokens < 1):
            raise ValueError(f"max_tokens must be None or an integer >= 1, got {self.max_tokens!r}")
        t = self.request_timeout_s
        if t is not None and not t > 0:
            raise ValueError(f"request_timeout_s must be None or > 0 seconds, got {t!r}")


class _Disconnected(Exception):
    """The client went away before its request was read."""


class OpenAIServer:
    """An ASGI app serving one ``LanguageModel`` with the OpenAI API.

    The model is handed over once loaded (``set_model``); until then ``/health`` answers 503 and
    every other route 503 with an error body.

    Args:
        model_name: the id the model is served as (``/v1/models``, the ``model`` field).
        api_key: when set, every route but ``/health`` needs ``Authorization: Bearer KEY``
            (compared in constant time, ``hmac.compare_digest``).
        limits: see ``ServerLimits``.
        pacing: how often a streamed response writes (see ``StreamPacing``: by default one
            token an event while few requests stream, several tokens an event when many do).
    """

    def __init__(self, model_name: str, *, api_key: str | None = None, limits: ServerLimits = ServerLimits(),
                 pacing: StreamPacing = StreamPacing()):
        self.model_name = model_name
        self.limits = limits
        self.model: Any = None
        self.load_error: BaseException | None = None
        self.created = oa.now()
        self._api_key = api_key.encode() if api_key else None
        self._accepted: frozenset[str] = frozenset()
        self._streams: set = set()  # GenerationStreams of the requests in flight
        self._in_flight = 0
        self._streaming = 0  # requests whose SSE response has started and not ended
        self.pacing = pacing
        self.metrics = ServerMetrics(self.snapshot)
        self._routes: dict[str, tuple[str, Callable[..., Awaitable[None]]]] = {
            "/health": ("GET", self._health), "/metrics": ("GET", self._metrics), "/v1/models": ("GET", self._models),
            "/v1/completions": ("POST", self._completions), "/v1/chat/completions": ("POST", self._chat),
            "/tokenize": ("POST", self._tokenize), "/detokenize": ("POST", self._detokenize),
        }

    # -- state -----------------------------------------------------------------------------
    def set_model(self, model: Any) -> None:
        """Start serving ``model`` (a loaded ``LanguageModel``): ``/health`` answers 200 from now."""
        self._accepted = frozenset(inspect.signature(model.generate).parameters)
        self.model = model

    def set_load_error(self, exc: BaseException) -> None:
        """The model failed to load: ``/health`` answers 503 with the error from now."""
        self.load_error = exc

    def snapshot(self) -> Snapshot:
        """The gauges' state (see ``Snapshot``)."""
        m = self.model
        if m is None:
            return Snapshot(in_flight=self._in_flight)
        st = m.statistics()
        kv = sum(s.prompt_tokens + s.token_count for s in self._streams if s.token_count)
        return Snapshot(True, st["running"], st["waiting"], self._in_flight, m.slots, kv, m.slots * m.ctx)

    @property
    def capacity(self) -> int:
        """Generation requests admitted at most at once: slots + ``limits.max_queue``."""
        return (self.model.slots if self.model is not None else 0) + self.limits.max_queue

    # -- ASGI ------------------------------------------------------------------------------
    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] == "lifespan":
            while True:
                msg = await receive()
                if msg["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif msg["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if scope["type"] != "http":
            return
        path, method = scope["path"], scope["method"]
        route = path if path in self._routes else "other"
        status = [0]  # the response's status once started

        async def counted_send(msg: dict) -> None:
            if msg["type"] == "http.response.start":
                status[0] = msg["status"]
            await send(msg)

        try:
            if path not in self._routes:
                raise APIError(404, f"no route {method} {path}", code="not_found")
            want, handler = self._routes[path]
            if method != want:
                raise APIError(405, f"{path} takes {want}, got {method}", code="method_not_allowed")
            if path != "/health":
                self._authorize(scope)
            await handler(scope, receive, counted_send)
        except APIError as exc:
            await _send_json(counted_send, exc.status, exc.body(), exc.headers)
        except _Disconnected:
            status[0] = 499  # nginx's "client closed request": nothing was sent
        except Exception as exc:
            if status[0]:  # the response had started (a stream): the server's log has the rest
                raise
            await _send_json(counted_send, 500, APIError(500, f"{type(exc).__name__}: {exc}", type="server_error",
                                                         code="internal_error").body())
        finally:
            self.metrics.http_requests.labels(route, str(status[0])).inc()

    def _authorize(self, scope: dict) -> None:
        if self._api_key is None:
            return
        given = _header(scope, b"authorization") or b""
        scheme, _, token = given.partition(b" ")
        if scheme.lower() != b"bearer" or not hmac.compare_digest(token.strip(), self._api_key):
            raise APIError(401, "invalid API key: send Authorization: Bearer KEY", type="authentication_error",
                           code="invalid_api_key", headers=[("www-authenticate", "Bearer")])

    def _ready(self) -> Any:
        if self.model is None:
            raise APIError(503, "the model is loading" if self.load_error is None else
                           f"the model failed to load: {self.load_error}", type="server_error",
                           code="model_not_ready", headers=[("retry-after", str(self.limits.retry_after_s))])
        return self.model

    async def _body(self, scope: dict, receive: Callable) -> dict:
        limit = self.limits.max_body_bytes
        declared = _header(scope, b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            raise APIError(413, f"the body has {int(declared)} bytes, more than this server's limit of {limit}",
                           code="body_too_large")
        chunks, n = [], 0
        while True:
            msg = await receive()
            if msg["type"] == "http.disconnect":
                raise _Disconnected
            part = msg.get("body", b"")
            n += len(part)
            if n > limit:
                raise APIError(413, f"the body has more than this server's limit of {limit} bytes",
                               code="body_too_large")
            chunks.append(part)
            if not msg.get("more_body", False):
                return oa.parse_json(b"".join(chunks))

    def _check_model(self, body: dict) -> None:
        name = body.get("model")
        if name is not None and name != self.model_name:
            raise APIError(404, f"the model {name!r} does not exist; this server serves {self.model_name!r}",
                           param="model", code="model_not_found")

    # -- routes ----------------------------------------------------------------------------
    async def _health(self, scope, receive, send) -> None:
        if self.model is not None:
            await _send_json(send, 200, {"status": "ok"})
        elif self.load_error is not None:
            await _send_json(send, 503, {"status": "error", "message": str(self.load_error)})
        else:
            await _send_json(send, 503, {"status": "loading"}, [("retry-after", str(self.limits.retry_after_s))])

    async def _metrics(self, scope, receive, send) -> None:
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", CONTENT_TYPE_LATEST.encode())]})
        await send({"type": "http.response.body", "body": self.metrics.render()})

    async def _models(self, scope, receive, send) -> None:
        self._ready()
        await _send_json(send, 200, oa.models_body(self.model_name, self.created))

    async def _tokenize(self, scope, receive, send) -> None:
        body = await self._body(scope, receive)
        model = self._ready()
        self._check_model(body)
        text = body.get("content", body.get("prompt"))  # llama-server's and vLLM's names
        special = body.get("add_special", False)
        if not isinstance(text, str):
            raise APIError(400, f"content must be a string, got {text!r:.80}", param="content")
        if not isinstance(special, bool):
            raise APIError(400, f"add_special must be a boolean, got {special!r}", param="add_special")
        ids = model.tokenize(text, special=special)
        await _send_json(send, 200, {"tokens": ids, "count": len(ids), "max_model_len": model.ctx})

    async def _detokenize(self, scope, receive, send) -> None:
        body = await self._body(scope, receive)
        model = self._ready()
        self._check_model(body)
        ids = body.get("tokens")
        if not isinstance(ids, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
            raise APIError(400, f"tokens must be a list of token ids, got {ids!r:.80}", param="tokens")
        try:
            text = model.detokenize(ids)
        except ValueError as exc:
            raise APIError(400, str(exc), param="tokens") from None
        await _send_json(send, 200, {"content": text, "prompt": text})  # llama-server's and vLLM's names

    async def _completions(self, scope, receive, send) -> None:
        await self._generate(scope, receive, send, chat=False)

    async def _chat(self, scope, receive, send) -> None:
        await self._generate(scope, receive, send, chat=True)

    # -- generation ------------------------------------------------------------------------
    async def _generate(self, scope, receive, send, *, chat: bool) -> None:
        received = time.perf_counter()
        body = await self._body(scope, receive)
        model = self._ready()
        self._check_model(body)
        streaming, include_usage = oa.stream_options(body)
        limit = self.limits.max_tokens or model.ctx
        kwargs = oa.generate_kwargs(body, self._accepted, chat=chat, max_tokens_limit=limit,
                                    default_max_tokens=limit if chat else min(limit, self.limits.default_completion_tokens))
        try:
            prompt = model.render_chat(oa.chat_messages(body)) if chat else oa.completion_prompt(body)
        except ValueError as exc:
            raise APIError(400, str(exc), param="messages") from None
        if self._in_flight >= self.capacity:
            raise APIError(429, f"the server is busy: {self._in_flight} requests in flight, at most {self.capacity} "
                           f"({model.slots} slots + a queue of {self.limits.max_queue}); retry later",
                           type="server_error", code="too_many_requests",
                           headers=[("retry-after", str(self.limits.retry_after_s))])
        try:
            stream = model.generate(prompt, **kwargs)
        except ValueError as exc:
            raise APIError(400, str(exc), param="messages" if chat else "prompt") from None
        self._in_flight += 1
        self._streams.add(stream)
        self.metrics.prompt_tokens.inc(stream.prompt_tokens)
        try:
            rid, created = oa.request_id("chatcmpl" if chat else "cmpl"), oa.now()
            if streaming:
                await self._stream(stream, receive, send, chat, rid, created, include_usage, received)
            else:
                await self._complete(stream, receive, send, chat, rid, created, received)
        finally:
            self._streams.discard(stream)
            self._in_flight -= 1

    async def _run(self, stream: Any, receive: Callable, on_text: Callable[[str, bool], Awaitable[None]] | None,
                   received: float) -> str | None:
        """Iterate ``stream`` into ``await on_text(text, final)`` (the text of every token there when
        it wakes, so one call may carry several tokens; ``final``: the stream has ended with it,
        ``stream.result`` is set, and ``text`` may be empty; None: only run it) while watching the
        connection; returns None when it ran to its end, ``"disconnect"`` or ``"timeout"`` when it
        was cancelled (its slot is free by then, and the time from the event to that is recorded)."""
        ended_by: list = []  # (reason, perf_counter at the event)
        last, counted = received, 0
        m = self.metrics

        def count(now: float) -> None:
            nonlocal last, counted
            n = stream.token_count
            if n > counted:
                if counted == 0:
                    m.ttft.observe(now - received)
                else:
                    m.itl.observe((now - last) / (n - counted), n - counted)
                m.generation_tokens.inc(n - counted)
                last, counted = now, n

        try:
            async with trio.open_nursery() as nursery:
                async def watch() -> None:
                    while (await receive())["type"] != "http.disconnect":
                        pass
                    ended_by.append(("disconnect", time.perf_counter()))
                    nursery.cancel_scope.cancel()

                nursery.start_soon(watch)
                timeout = self.limits.request_timeout_s
                left = timeout - (time.perf_counter() - received) if timeout else float("inf")
                with trio.move_on_after(max(0.0, left)) as timer:
                    while True:
                        # the tokens already there first (no wait, no trio round); the stream only
                        # when there are none (it waits for the next, and sees the end)
                        piece = stream.read_nowait() if on_text is not None else ""
                        if not piece:
                            try:
                                piece = await stream.__anext__()
                            except StopAsyncIteration:
                                break
                            if on_text is not None:
                                piece += stream.read_nowait()
                        if on_text is None:
                            count(time.perf_counter())
                            continue
                        if stream.result is None and stream.at_end():  # the end too: in the same event
                            try:
                                piece += await stream.__anext__()
                            except StopAsyncIteration:
                                pass
                        final = stream.result is not None
                        count(time.perf_counter())
                        await on_text(piece, final)
                        if final:
                            break
                    count(time.perf_counter())
                if timer.cancelled_caught:
                    ended_by.append(("timeout", time.perf_counter()))
                nursery.cancel_scope.cancel()
        finally:
            if ended_by or stream.result is None:
                with trio.CancelScope(shield=True):
                    await stream.aclose()
                    with trio.move_on_after(60):
                        await stream.wait_released()
                    if ended_by:
                        reason, at = ended_by[0]
                        m.disconnect_to_free.observe(time.perf_counter() - at)
                        m.requests_cancelled.labels(reason).inc()
        if ended_by:
            return ended_by[0][0]
        r = stream.result
        m.e2e.observe(time.perf_counter() - received)
        m.request_success.labels(r.finish_reason).inc()
        return None

    async def _complete(self, stream, receive, send, chat, rid, created, received) -> None:
        ended = await self._run(stream, receive, None, received)
        if ended == "disconnect":
            raise _Disconnected
        if ended == "timeout":
            raise APIError(504, f"the request ran past this server's limit of {self.limits.request_timeout_s} s",
                           type="server_error", code="timeout")
        r = stream.result
        use = oa.usage(r.timings.prompt_tokens, len(r.token_ids))
        make = oa.chat_body if chat else oa.completion_body
        await _send_json(send, 200, make(rid, self.model_name, created, r.text, r.finish_reason, use,
                                         self._logprobs(r.logprobs, r.text_offsets, chat)))

    def _logprobs(self, entries: list | None, offsets: list[int], chat: bool) -> dict | None:
        """The ``logprobs`` field of a choice for these tokens' ``TokenLogprobs`` (None: not asked)."""
        if entries is None:
            return None
        token_bytes = self.model.tokenizer.token_bytes
        return oa.chat_logprobs(entries, token_bytes) if chat else oa.completion_logprobs(entries, offsets, token_bytes)

    async def _stream(self, stream, receive, send, chat, rid, created, include_usage, received) -> None:
        name = self.model_name
        with_logprobs = stream.request.top_logprobs is not None
        sent = 0  # tokens whose log-probabilities went out

        def logprobs_upto(n: int) -> dict | None:  # those of the tokens sent..n, once
            nonlocal sent
            if not with_logprobs:
                return None
            lp, sent = self._logprobs(stream.logprobs[sent:n], stream.text_offsets[sent:n], chat), n
            return lp

        if with_logprobs:  # the whole chunk each event (the template has no place for them)
            def piece_event(text: str) -> bytes:
                lp = logprobs_upto(stream.token_count)
                if chat:
                    return encode(oa.chat_chunk(rid, name, created, {"content": text}, with_usage=include_usage,
                                                logprobs=lp))
                return encode(oa.completion_chunk(rid, name, created, text, with_usage=include_usage, logprobs=lp))
        elif chat:
            piece_event = PieceEncoder(lambda text: oa.chat_chunk(rid, name, created, {"content": text},
                                                                  with_usage=include_usage))
        else:
            piece_event = PieceEncoder(lambda text: oa.completion_chunk(rid, name, created, text,
                                                                        with_usage=include_usage))

        async def write(data: bytes, more: bool = True) -> None:
            await send({"type": "http.response.body", "body": data, "more_body": more})

        # events not written yet: they go out with the next write (a chat's role chunk with its
        # first text, the last text with the end: a socket write less each)
        pending = b""
        if chat:
            pending = encode(oa.chat_chunk(rid, name, created, {"role": "assistant", "content": ""},
                                           with_usage=include_usage))

        async def on_text(text: str, final: bool) -> None:  # one event of the tokens there, then wait for a turn
            nonlocal pending
            data = pending + piece_event(text) if text else pending
            if final:
                pending = data
                return
            pending = b""
            await write(data)
            await self.pacing.wait(self._streaming)

        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]})
        self._streaming += 1
        try:
            ended = await self._run(stream, receive, on_text, received)
        finally:
            self._streaming -= 1
        if ended == "disconnect":
            return
        if ended == "timeout":
            error = APIError(504, f"the request ran past this server's limit of {self.limits.request_timeout_s} s",
                             type="server_error", code="timeout")
            await write(pending + encode(error.body()) + encode(b"[DONE]"), more=False)
            return
        r = stream.result
        rest = logprobs_upto(len(r.token_ids)) if sent < len(r.token_ids) else None  # tokens of no text event
        if chat:
            tail = [oa.chat_chunk(rid, name, created, {}, r.finish_reason, with_usage=include_usage, logprobs=rest)]
        else:
            tail = [oa.completion_chunk(rid, name, created, "", r.finish_reason, with_usage=include_usage,
                                        logprobs=rest)]
        if include_usage:
            use = oa.usage(r.timings.prompt_tokens, len(r.token_ids))
            make = oa.chat_chunk if chat else oa.completion_chunk
            tail.append(make(rid, name, created, {} if chat else "", use=use, with_usage=True))
        await write(pending + b"".join(encode(c) for c in tail) + encode(b"[DONE]"), more=False)


def _header(scope: dict, name: bytes) -> bytes | None:
    for k, v in scope["headers"]:
        if k == name:
            return v
    return None


async def _send_json(send: Callable, status: int, body: Any, headers: list[tuple[str, str]] = ()) -> None:
    data = json.dumps(body).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": _JSON + [(k.encode(), v.encode()) for k, v in headers]})
    await send({"type": "http.response.body", "body": data})
