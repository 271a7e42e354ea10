"""``xinfer-async chat``: the interactive loop, keyed as llama-cli's.

Ctrl-C during an answer stops that answer (what was said so far stays in the history) and returns
to the prompt; Ctrl-C or Ctrl-D at the prompt ends the chat; an empty line asks again. After each
answer a line on stderr gives its tokens, rates and why it ended.

SIGINT is taken from trio (``trio.open_signal_receiver``) for the whole loop, so it never becomes
a ``KeyboardInterrupt`` in the middle of a step: it cancels the answer or the wait for a line.
"""

from __future__ import annotations

import signal
import sys
from typing import Any

import trio

__all__ = ["run_chat", "banner"]


def banner(model: Any) -> str:
    """Two lines that say which model runs where, and the keys."""
    c = model.config
    name = getattr(model.path, "name", str(model.path))
    return (f"xinfer-async chat: {name} ({c.n_layer} layers, dim {c.dim}) on {model.device.name}, "
            f"context {model.ctx} tokens\n"
            "Type a message and press Enter. Ctrl-C stops an answer; Ctrl-C or Ctrl-D at the prompt ends the chat.")


def _end_line(result: Any, n_predict: int, ctx: int) -> str:
    t = result.timings
    line = (f"[{len(result.token_ids)} tokens, decode {t.decode_tok_per_s:.1f} tok/s, prompt {t.prompt_tokens} tokens "
            f"at {t.prefill_tok_per_s:.1f} tok/s, first token after {t.time_to_first_token_s * 1e3:.0f} ms]")
    if result.finish_reason == "length":
        if len(result.token_ids) >= n_predict:
            line += f"\n[answer cut at -n {n_predict} tokens; give a larger -n for longer answers]"
        else:
            line += f"\n[answer cut: the context of {ctx} tokens is full; start again with a larger --ctx]"
    return line


async def run_chat(model: Any, *, system: str | None, n_predict: int, sampling: dict,
                   out: Any = None, err: Any = None) -> None:
    """Chat with ``model`` on the terminal until Ctrl-C or Ctrl-D at the prompt.

    Args:
        model: a loaded ``LanguageModel`` with a chat template.
        system: a system message, or None.
        n_predict: tokens per answer at most (``-n``).
        sampling: ``generate``'s sampling keywords (``cli.SAMPLING_ARGS``: temperature, top_p, top_k,
            seed, min_p and the penalties).
        out, err: text streams for the answers and for the status lines (default stdout, stderr).
    """
    out = out or sys.stdout
    err = err or sys.stderr
    messages: list[dict] = [{"role": "system", "content": system}] if system else []
    print(banner(model), file=err, flush=True)
    with trio.open_signal_receiver(signal.SIGINT) as sigint:
        while True:
            line = await _read_line(sigint, out)
            if line is None:
                out.write("\n")
                out.flush()
                return
            if not line.strip():
                continue
            messages.append({"role": "user", "content": line})
            try:
                prompt = model.render_chat(messages)
                if len(prompt) > model.ctx:
                    raise ValueError(f"the conversation has {len(prompt)} tokens")
            except ValueError as exc:
                messages.pop()
                print(f"[{exc}, more than the context of {model.ctx} tokens holds: this message was not "
                      f"sent; start again with a larger --ctx]", file=err, flush=True)
                continue
            text, note = await _answer(model, prompt, n_predict, sampling, sigint, out)
            messages.append({"role": "assistant", "content": text})
            print(note, file=err, flush=True)


async def _read_line(sigint: Any, out: Any) -> str | None:
    """The next line typed, or None on Ctrl-D (EOF) or Ctrl-C."""
    out.write("> ")
    out.flush()
    line: list[str | None] = [None]
    async with trio.open_nursery() as nursery:
        async def read() -> None:
            try:
                line[0] = await trio.to_thread.run_sync(sys.stdin.readline, abandon_on_cancel=True)
            finally:
                nursery.cancel_scope.cancel()

        async def watch() -> None:
            async for _ in sigint:  # Ctrl-C at the prompt: end (the reading thread is abandoned)
                nursery.cancel_scope.cancel()
                return

        nursery.start_soon(read)
        nursery.start_soon(watch)
    text = line[0]
    if not text:  # "" is EOF (Ctrl-D); None is Ctrl-C
        return None
    return text.rstrip("\n")


async def _answer(model: Any, prompt: list[int], n_predict: int, sampling: dict, sigint: Any,
                  out: Any) -> tuple[str, str]:
    """Stream one answer; Ctrl-C stops it. Returns (its text so far, the status line)."""
    stream = model.generate(prompt, max_tokens=n_predict, **sampling)
    pieces: list[str] = []
    async with trio.open_nursery() as nursery:
        async def watch() -> None:
            async for _ in sigint:
                nursery.cancel_scope.cancel()
                return

        async def speak() -> None:
            async for piece in stream:
                pieces.append(piece)
                out.write(piece)
                out.flush()
            nursery.cancel_scope.cancel()

        nursery.start_soon(watch)
        nursery.start_soon(speak)
    out.write("\n")
    out.flush()
    if stream.result is None:  # stopped by Ctrl-C: cancel the request, keep what was said
        with trio.CancelScope(shield=True):
            await stream.aclose()
        return "".join(pieces), "[answer stopped (Ctrl-C); what it said stays in the chat]"
    return stream.result.text, _end_line(stream.result, n_predict, model.ctx)
