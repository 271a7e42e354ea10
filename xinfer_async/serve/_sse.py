"""Server-sent events for a streamed response: the encoding (``data: JSON\\n\\n``) and a writer
that never makes the generation wait for the socket.

``EventWriter.write`` only appends to a buffer; a sender task of the request sends what has
gathered as one HTTP body part. While the socket keeps up, each event goes out on its own as soon
as it is written; when it falls behind (a loaded host, a slow client), the events written
meanwhile go out together in one write, so the cost a token pays for the network shrinks as the
load grows instead of the generation slowing down to the socket's pace.
"""

from __future__ import annotations

import json
from typing import Any, Callable

import trio

__all__ = ["encode", "PieceEncoder", "EventWriter"]

_SENTINEL = "\x00piece\x00"


def encode(data: Any) -> bytes:
    """One event: ``data: <compact JSON>\\n\\n`` (bytes are sent as they are, e.g. ``b"[DONE]"``)."""
    payload = data if isinstance(data, bytes) else json.dumps(data, separators=(",", ":")).encode()
    return b"data: " + payload + b"\n\n"


class PieceEncoder:
    """Events of one request's text pieces from a template chunk, without building and dumping the
    whole chunk for every token.

    Args:
        make: ``make(text)`` returns the chunk (a dict) carrying ``text``; called once, with a
            sentinel, to split the encoded chunk around the text.
    """

    def __init__(self, make: Callable[[str], dict]):
        full = encode(make(_SENTINEL))
        self._head, _, self._tail = full.partition(json.dumps(_SENTINEL).encode())
        if not self._tail:
            raise ValueError("the chunk template does not carry its text")

    def __call__(self, piece: str) -> bytes:
        return self._head + json.dumps(piece).encode() + self._tail


class EventWriter:
    """Buffers events and sends them from ``run`` (start it in the request's nursery).

    Args:
        send: the ASGI ``send``; the response must have been started.
    """

    def __init__(self, send: Callable):
        self._send = send
        self._buffer: list[bytes] = []
        self._wake = trio.Event()
        self._closed = False

    def write(self, event: bytes) -> None:
        """Queue ``event`` (encoded bytes) for sending; never waits."""
        self._buffer.append(event)
        self._wake.set()

    def close(self) -> None:
        """No more events: ``run`` sends what is queued, ends the body and returns."""
        self._closed = True
        self._wake.set()

    async def run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake = trio.Event()
            if self._buffer:
                data = b"".join(self._buffer)
                self._buffer.clear()
                await self._send({"type": "http.response.body", "body": data, "more_body": True})
            if self._closed and not self._buffer:
                await self._send({"type": "http.response.body", "body": b"", "more_body": False})
                return
