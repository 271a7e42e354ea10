"""Server-sent events for a streamed response: the encoding (``data: JSON\\n\\n``), the per-request
event template, and the pacing of one request's writes (``StreamPacing``).

Every write to a socket costs the server tens of microseconds (hypercorn's HTTP/1.1 framing, the
``send`` system call, a trio task switch), whatever it carries; at tens of thousands of tokens a
second over dozens of streams that cost, not the device, would set the pace. So a request's
stream writes at most once per *stream interval*: the first event goes out as soon as its token
is there, and the tokens that arrive while the request waits for its next turn go out together as
one event whose text is theirs joined (one OpenAI chunk, as vLLM's ``--stream-interval`` does).
The default interval grows with the streams in flight (``StreamPacing``): one stream gets one
event per token; 64 streams of a fast model get tens of tokens an event. The generation never waits
for the socket: the scheduler's tokens queue on the request meanwhile.

The turns come from one clock per ``StreamPacing`` (a trio system task that ticks every few
``write_cost_s`` and wakes the streams' turns due, oldest waiter first, spread over the interval
rather than all at once: see ``StreamPacing``), not a timer per stream: a ``trio.sleep_until``
per event costs a cancel scope, a deadline and the ``Cancelled`` raised through the task when it
expires (measured 60 us a wake on the shared 2-core cpu, against 10 us for a wake from a
``ParkingLot``).
"""

from __future__ import annotations

import json
from typing import Any, Callable

import trio

__all__ = ["encode", "PieceEncoder", "StreamPacing"]

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


class StreamPacing:
    """How often one request's stream may write: its *stream interval*, seconds.

    A stream writes an event, then ``await wait(streams)`` for its next turn. The turns are handed
    out by one clock per ``StreamPacing`` (a trio system task), oldest waiter first, at
    ``streams / interval(streams)`` turns a second in all (1 / ``write_cost_s`` by default), about
    ``TURNS_PER_TICK`` on each tick of ``min(TURNS_PER_TICK * write_cost_s, interval)``: so each
    stream writes about once per interval, and the writes -- and the text work of the tokens each
    carries (detokenizing, stop strings, the chunk's encoding) -- are spread evenly over the
    interval. Turns given all at
    once (every waiting stream woken on one tick) would make one burst of all the streams' work
    each interval, holding the trio thread -- and with it the batched scheduler, which submits the
    device's next step from the same thread -- for the whole burst (64 streams x 28 tokens an
    event: several steps' time on the H200). A tick that comes late (the thread overloaded) hands
    out two ticks' turns at most: the writes back off, each carrying more tokens. With an interval
    of 0 a stream writes as soon as its tokens are there.

    Args:
        interval_s: a fixed interval (0: every token as soon as it is there), or None for the
            default: ``write_cost_s`` times the streams in flight, which holds the server's writes
            to about ``1 / write_cost_s`` a second in all (1,000 with the default) however many
            streams there are, and is shorter than a token's time while few stream (one token an
            event then).
        write_cost_s: see ``interval_s`` (seconds of server time a write is allowed). The
            default, 1 ms, keeps the writes to a few percent of the trio thread: an event costs
            the server 60-130 us whatever it carries (hypercorn's h11 framing and send lock, the
            socket send and its trio rounds; measured on the shared 2-core cpu with 1 token an
            event against 6), so at 64 streams of a fast model one event a token would take the
            thread, and 4,000 events a second (the former 0.25 ms) still about a tenth of it; at
            64 streams the interval is 63 ms (16 events a second a stream), at 8 streams 7 ms.
            A tick (a ``trio.sleep`` wake, tens of us on the shared cpu) every few of them keeps
            the clock's own cost small beside the writes it paces.

    Raises:
        ValueError: ``interval_s`` below 0, or ``write_cost_s`` not above 0.
    """

    #: turns a tick hands out (with the streams all waiting): a burst of a few events' work, well
    #: under a decode step's time, at a fraction of one tick per turn
    TURNS_PER_TICK = 4

    def __init__(self, interval_s: float | None = None, write_cost_s: float = 1e-3):
        if interval_s is not None and not interval_s >= 0:
            raise ValueError(f"interval_s must be None or >= 0 seconds, got {interval_s!r}")
        if not write_cost_s > 0:
            raise ValueError(f"write_cost_s must be > 0 seconds, got {write_cost_s!r}")
        self.interval_s = interval_s
        self.write_cost_s = write_cost_s
        self._turns = trio.lowlevel.ParkingLot()  # the streams waiting for a turn, oldest first
        self._tick_s = 0.0  # the clock's next sleep
        self._rate = 0.0  # turns a second: streams / interval
        self._gap = 0.0  # the interval
        self._clock: Any = None  # the trio token of the run whose clock task ticks, or None

    def interval(self, streams: int) -> float:
        """The interval, seconds, with ``streams`` requests streaming."""
        if self.interval_s is not None:
            return self.interval_s
        return self.write_cost_s * max(0, streams - 1)

    async def wait(self, streams: int) -> None:
        """Wait for the calling stream's next turn to write, with ``streams`` requests streaming
        (the clock is started here when it is not running: a trio system task of the current run,
        which stops after an interval in which no stream waited). Cancellable; returns at once,
        without a checkpoint, when the interval is 0 (the write before it had its own)."""
        gap = self.interval(streams)
        if gap <= 0:
            return
        self._tick_s = min(self.TURNS_PER_TICK * self.write_cost_s, gap)
        self._rate = max(1, streams) / gap
        self._gap = gap
        token = trio.lowlevel.current_trio_token()
        if self._clock is not token:
            self._clock = token
            trio.lowlevel.spawn_system_task(self._tick, token, name="xinfer_async.serve-stream-clock")
        await self._turns.park()

    async def _tick(self, token: Any) -> None:
        # turns owed (a fraction carries to the next tick), accrued over the time that passed, up
        # to two ticks' worth: a tick a little late owes its share, and one late because the
        # thread is overloaded hands out no burst (the streams write less often then, more tokens
        # an event, which is what an overloaded thread needs); time with none waiting
        credit, idle_s, last = 0.0, 0.0, trio.current_time()
        try:
            while True:
                await trio.sleep(self._tick_s)
                now = trio.current_time()
                elapsed, last = min(now - last, 2 * self._tick_s), now
                waiting = len(self._turns)
                if not waiting:
                    credit, idle_s = 0.0, idle_s + elapsed
                    if idle_s >= self._gap:  # an interval with no stream waiting: stop
                        return
                    continue
                idle_s = 0.0
                credit = min(credit + elapsed * self._rate, waiting)  # no turns saved up for a burst later
                n = int(credit)
                if n:
                    credit -= n
                    self._turns.unpark(count=n)
        finally:
            if self._clock is token:
                self._clock = None

    def __repr__(self) -> str:
        fixed = "auto" if self.interval_s is None else f"{self.interval_s * 1e3:g} ms"
        return f"StreamPacing({fixed}, write_cost_s={self.write_cost_s})"
