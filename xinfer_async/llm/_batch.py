"""Batched decode across requests (``llm.load(..., batching=True)``).

One ``PreparedModel`` of capacity 1 (``LlamaBuilder.prepare_batched``) holds ``seqs`` sequences'
KV caches as one allocation per layer (sequence s owns cache rows ``[s*ctx, (s+1)*ctx)``). A
scheduler, a trio system task per ``trio.run`` like the job queue's workers, loops:

1. admit waiting requests while a sequence is free (each gets one);
2. one step for every active request at once: the smallest ``batch{B}`` plan with B >= rows
   (padding rows: pos = row = last = -1), greedy argmax on the device (logits come back only when
   some request samples), one token to each active request. Up to ``chunk`` more rows (the
   buckets reach seqs + chunk; a smaller bucket where it still takes half of them, rather than
   padding a step for a few prompt rows) carry prompt tokens of admitted requests (in arrival
   order, a piece of a long prompt per step): a row is a (sequence, position) like any other, so a prompt that
   ends in a step gets its first token from that step's row of its last prompt token (chunked
   prefill mixed into decode, as serving systems schedule it). With nothing to decode, the first
   admitted prompt runs through the ``prefill{T}`` plans instead (one chunk a loop);
3. a finished or cancelled request frees its sequence. Device work that still touches its rows
   (a speculative step, below) runs before anything a later owner of the sequence submits: one
   queue, in order.

Every row's result is the same whatever the other rows of its step (the kernels' per-row sums do
not depend on the token count; see shaders/xi_mvt.cuh and shaders/xi_tc.cuh), so a request's
tokens are exactly those it gets alone, however its prompt and its steps were batched -- on cuda,
where a weight row fits the 32 KB stage of the 2..8-token kernel (shaders/xi_mvc.cuh: e.g. q4_1
K <= 52k, f16 K <= 16k, half that for the gate/up weight; longer rows run other kernels at 2..8
tokens), and for any K on the weights that run the tensor-core kernel (the q4_1/q8_0 SwiGLU gate/up
and output layers backends/cuda/_launch.py's tc_weight picks).

Pipelining: when every active request is greedy and has room for two more tokens, and no prompt
is waiting or running (the next step's rows are this one's), the step after
the one in flight is submitted before the host reads the tokens back, its input tokens copied on
the device from the in-flight step's argmax (same bucket, same rows), so the host's work for one
step (reading ids, streaming 64 tokens to 64 tasks) overlaps the device's next step. A step's
results go to the requests it was submitted for: one that ended meanwhile (a stop token, a
cancel) has its row ignored (it only wrote the KV-cache row after its last token); one admitted
meanwhile joins the step after. A request's end costs one step submitted after the tokens were
read (the one after it: its rows changed).
"""

from __future__ import annotations

import collections
import dataclasses
from typing import Any

import numpy as np
import trio

from ._request import Request
from ._runner import Runner, StepRun


@dataclasses.dataclass(frozen=True)
class BatchStatistics:
    """steps: batched decode steps run; rows: request rows over those steps (rows / steps: the
    mean batch); max_active: the most requests decoding at once; waiting, active: now;
    pipelined: steps submitted before the previous step's tokens were read (see the module doc);
    prompt_rows: prompt tokens run inside decode steps (the rest ran through prefill plans);
    busy: sequences held by a request now (admitted, prefilling or decoding)."""

    steps: int
    rows: int
    max_active: int
    waiting: int
    active: int
    pipelined: int = 0
    prompt_rows: int = 0
    busy: int = 0


class BatchedRequest:
    """The handle of one request in the batcher (what ``JobHandle`` is for the job queue)."""

    def __init__(self, batcher: "Batcher", request: Request):
        self._batcher = batcher
        self.request = request
        self.cancelled = False
        self.error: BaseException | None = None
        self.done = trio.Event()
        #: its sequence of the batched cache; the position of its next row (prompt, then decode)
        self.seq: int | None = None
        self.pos = 0
        #: the token its next decode row takes
        self.token = 0

    def cancel(self) -> None:
        """Stop generating (at the next step boundary); the sequence is freed after its fence."""
        if not self.done.is_set():
            self.cancelled = True
            self._batcher._wake.set()

    async def result(self) -> None:
        """Wait for the end of the request; re-raises its error, if any."""
        await self.done.wait()
        if self.error is not None:
            raise self.error


class Batcher:
    """Runs every generation request of a batched ``LanguageModel`` through one prepared slot.

    Args:
        runner: a ``Runner`` of ``builder.plan_specs(batched=True)``.
        slot: the one ``Slot`` of ``builder.prepare_batched()``.
        seqs: sequences in the batched cache (concurrent requests).
        max_queued: waiting requests at most (``submit`` waits while that many wait).
    """

    def __init__(self, runner: Runner, slot: Any, seqs: int, max_queued: int = 256):
        self.runner = runner
        self.ctx = runner.ctx
        self.slot = slot
        self.seqs = seqs
        self.max_queued = max_queued
        self._room = trio.lowlevel.ParkingLot()
        #: requests with a sequence whose prompt has not all run yet, in arrival order
        self._admitted: list[BatchedRequest] = []
        #: set when the scheduler loop has ended (after its last step's fence)
        self.stopped = trio.Event()
        self.buckets = runner.batch_sizes
        self._free = list(reversed(range(seqs)))
        self._waiting: collections.deque[BatchedRequest] = collections.deque()
        self._active: list[BatchedRequest] = []
        self._wake = trio.Event()
        self._closed = False
        self._steps = self._rows = self._max_active = self._pipelined = self._prompt_rows = 0
        self._inflight: _Step | None = None  # a submitted step whose tokens were not read yet

    async def submit(self, request: Request) -> BatchedRequest:
        """Queue ``request``, waiting while ``max_queued`` requests already wait (back-pressure,
        as the job queue of the unbatched path).

        Raises:
            trio.ClosedResourceError: the model was closed.
        """
        while len(self._waiting) >= self.max_queued and not self._closed:
            await self._room.park()
        if self._closed:
            raise trio.ClosedResourceError("language model is closed")
        r = BatchedRequest(self, request)
        self._waiting.append(r)
        self._wake.set()
        return r

    def close(self) -> None:
        self._closed = True
        self._wake.set()
        self._room.unpark_all()

    def statistics(self) -> BatchStatistics:
        return BatchStatistics(self._steps, self._rows, self._max_active, len(self._waiting), len(self._active),
                               self._pipelined, self._prompt_rows, self.seqs - len(self._free))

    # -- the scheduler ---------------------------------------------------------------------
    async def run(self) -> None:
        """The scheduler loop (a system task); ends when closed or when its trio.run ends."""
        try:
            while not self._closed:
                if not self._waiting and not self._active and not self._admitted:
                    if self._inflight is not None:  # a speculative step of requests that all ended
                        await self._inflight.run.settle()
                        self._inflight = None
                        continue
                    self._wake = trio.Event()
                    await self._wake.wait()
                    continue
                await self._admit()
                self._drop_cancelled()
                if self._active:
                    await self._decode_step()
                    self._drop_cancelled()
        except BaseException as exc:
            err = exc if isinstance(exc, Exception) else trio.ClosedResourceError("the batched decode scheduler stopped")
            for r in self._requests():
                self._end(r, error=err)
            raise
        finally:
            if self._inflight is not None:  # stopped between a speculative step and its read
                step, self._inflight = self._inflight, None
                with trio.CancelScope(shield=True):
                    await step.run.settle()
            for r in self._requests():
                self._end(r, error=trio.ClosedResourceError("language model is closed"))
            self._room.unpark_all()
            self.stopped.set()

    def _requests(self) -> list[BatchedRequest]:
        return list(self._active) + list(self._waiting) + list(self._admitted)

    async def _admit(self) -> None:
        """Give each waiting request a free sequence; with nothing to decode, run ONE prompt chunk
        of the first admitted request through the prefill plans (otherwise prompts ride in the
        decode steps' free rows: ``_decode_step``)."""
        while self._waiting and self._free and not self._closed:
            r = self._waiting.popleft()
            self._room.unpark()
            if r.cancelled:
                self._end(r)
                continue
            r.seq = self._free.pop()
            r.request.mark_started()
            r.pos = 0
            self._admitted.append(r)
        if self._active or not self._admitted:
            return
        r = self._admitted[0]
        if r.cancelled:
            self._end(r)
            return
        try:
            nxt = await self._prefill_chunk(r)
        except Exception as exc:
            self._end(r, error=exc)
            return
        if r.pos == len(r.request.prompt_ids):
            self._activate(r, nxt)

    def _activate(self, r: BatchedRequest, nxt: Any) -> None:
        """``r``'s prompt has all run; ``nxt`` (its greedy id or logits) gives its first token."""
        self._admitted.remove(r)
        r.request.mark_prefilled()
        self._active.append(r)
        self._emit(r, nxt)
        self._max_active = max(self._max_active, len(self._active))

    async def _prefill_chunk(self, r: BatchedRequest):
        """Run the next chunk of the prompt of ``r`` into its sequence (advances ``r.pos``); the
        greedy next id or the logits (vocab,) after it."""
        base, start, greedy = r.seq * self.ctx, r.pos, r.request.greedy
        chunk = r.request.prompt_ids[start:start + self.runner.chunk]
        positions = np.arange(start, start + len(chunk))
        output = "argmax" if greedy else "logits"
        out = await self.runner.run(self.slot, self.runner.prefill_plan(len(chunk)), tokens=chunk, positions=positions,
                                    rows=base + positions, first_rows=[base] * len(chunk), outputs=(output,))
        r.pos = start + len(chunk)
        return int(out[output][0]) if greedy else out[output][0]

    def _prompt_room(self, n_decode: int) -> int:
        """Prompt rows for a step beside ``n_decode`` decode rows: what the admitted prompts still
        need, at most a chunk; fewer when the bucket below the one that takes them all still holds
        half of them (instead of a step padded up to the next bucket for a few prompt rows)."""
        want = min(self.runner.chunk, sum(len(r.request.prompt_ids) - r.pos for r in self._admitted if not r.cancelled))
        if want <= 0:
            return 0
        up = min([b for b in self.buckets if b >= n_decode + want] or self.buckets[-1:])
        below = max([b for b in self.buckets if b < up] or [0])
        if below - n_decode >= want / 2:
            return below - n_decode
        return min(want, up - n_decode)

    def _prompt_pieces(self, room: int) -> list[tuple[BatchedRequest, int, int]]:
        """(request, first prompt position, tokens) for up to ``room`` prompt tokens of the
        admitted requests, in arrival order."""
        pieces = []
        for r in self._admitted:
            if room <= 0:
                break
            if r.cancelled:
                continue
            n = min(room, len(r.request.prompt_ids) - r.pos)
            pieces.append((r, r.pos, n))
            room -= n
        return pieces

    async def _submit_step(self, active: list[BatchedRequest], pieces=(), speculative: bool = False) -> "_Step":
        """Submit one batched step: each of ``active`` at its next position with its token, then
        the prompt ``pieces`` ((request, start, n): prompt tokens start..start+n-1). ``speculative``
        (no pieces): one position further, the input tokens copied on the device from the in-flight
        step's argmax (same bucket, same rows; only with a free command list: raises
        ``trio.WouldBlock`` otherwise, as this task already holds one)."""
        ctx, ahead = self.ctx, 1 if speculative else 0
        tokens, positions, rows, first_rows = [], [], [], []
        for r in active:
            tokens.append(r.token)
            positions.append(r.pos + ahead)
            rows.append(r.seq * ctx + r.pos + ahead)
            first_rows.append(r.seq * ctx)
        ends = []  # (request, its row of the piece's last token, the piece ends the prompt)
        for r, start, n in pieces:
            base = r.seq * ctx
            tokens += r.request.prompt_ids[start:start + n]
            positions += range(start, start + n)
            rows += range(base + start, base + start + n)
            first_rows += [base] * n
            ends.append((r, len(positions) - 1, start + n == len(r.request.prompt_ids)))
        # logits come back only for a row that samples: a decode row, or the last row of a prompt
        greedy = all(r.request.greedy for r in active) and all(r.request.greedy or not done for r, _, done in ends)
        run = await self.runner.start(self.slot, self.runner.batch_plan(len(positions)), positions=positions,
                                      tokens=None if speculative else tokens, rows=rows, first_rows=first_rows,
                                      outputs=("argmax",) if greedy else ("logits", "argmax"), speculative=speculative)
        return _Step(active, greedy, run, ends)

    async def _decode_step(self) -> None:
        active = list(self._active)
        step, self._inflight = self._inflight, None
        nxt = None
        try:
            if step is None:
                pieces = self._prompt_pieces(self._prompt_room(len(active)))
                step = await self._submit_step(active, pieces)
            if (step.greedy and step.rows == active and not step.prompts and not self._waiting and not self._admitted
                    and all(r.request.remaining() >= 2 for r in active)):
                try:  # speculative: the step after, fed this one's argmax on the device
                    nxt = await self._submit_step(active, speculative=True)
                    self._pipelined += 1
                except trio.WouldBlock:  # no free command list: the next step waits for the tokens
                    nxt = None
            outs = await step.run.result()
        except BaseException as exc:
            with trio.CancelScope(shield=True):  # nothing the device still runs is left unsettled
                for s in (step, nxt):
                    if s is not None:
                        await s.run.settle()
            if not isinstance(exc, Exception):
                raise
            for r in (step.rows + [e[0] for e in step.prompts]) if step is not None else active:
                self._end(r, error=exc)
            return
        self._inflight = nxt
        self._steps += 1
        self._rows += len(step.rows)
        ids, logits = outs["argmax"].tolist(), outs.get("logits")  # ints: one conversion a step, not a row
        for i, r in enumerate(step.rows):
            if r.done.is_set():
                continue  # ended after this step was submitted: its row is ignored
            r.pos += 1
            if not r.cancelled:
                self._emit(r, ids[i] if r.request.greedy else logits[i])
        i0 = len(step.rows)
        for r, i, complete in step.prompts:
            n = i + 1 - i0
            i0 = i + 1
            self._prompt_rows += n
            if r.done.is_set():
                continue
            r.pos += n
            if complete and not r.cancelled:
                self._activate(r, ids[i] if r.request.greedy else logits[i])

    def _emit(self, r: BatchedRequest, nxt: Any) -> None:
        """Sample (non-greedy) and ``advance`` the request; end it when it is done, or with the
        error when sampling failed (that request's, not the scheduler's and the other requests').
        One call a row: 64 rows a step on the trio thread."""
        req = r.request
        try:
            if req.greedy:
                token = nxt
                finish = req.advance(token)
            else:
                token = req.sample(nxt)
                finish = req.advance(token, nxt)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            self._end(r)  # the consumer closed the stream
            return
        except Exception as exc:
            self._end(r, error=exc)
            return
        if finish is not None:
            self._end(r)
        else:
            r.token = token

    def _drop_cancelled(self) -> None:
        for r in [r for r in self._active + self._admitted if r.cancelled]:
            self._end(r)

    def _end(self, r: BatchedRequest, error: BaseException | None = None) -> None:
        """Done with ``r`` (finished, cancelled, or failed with ``error``): free its sequence and
        end its token channel. Called only between steps, after the fence of the last step that
        touched the sequence."""
        if r.done.is_set():
            return
        if r in self._active:
            self._active.remove(r)
        if r in self._admitted:
            self._admitted.remove(r)
        try:
            self._waiting.remove(r)
        except ValueError:
            pass
        if r.seq is not None:
            self._free.append(r.seq)
            r.seq = None
        r.error = error
        r.request.close()
        r.done.set()


@dataclasses.dataclass
class _Step:
    """One submitted batched step: the requests of its decode rows (in order), its run, and its
    prompt pieces after them: (request, row of the piece's last token, the piece ends the prompt)."""

    rows: list[BatchedRequest]
    greedy: bool
    run: StepRun
    prompts: list = dataclasses.field(default_factory=list)
