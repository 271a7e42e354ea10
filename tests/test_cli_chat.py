"""Tests of xinfer_async/_cli_chat.py: ``xinfer-async chat`` on a pseudo-terminal, with the real
model, keyed as a user keys it (issue #20, item 3)."""

from __future__ import annotations

import os
import pty
import re
import select
import signal
import sys
import time
from pathlib import Path

import pytest

from _child_env import child_pythonpath
from _llm_fixtures import require_model

ROOT = Path(__file__).resolve().parents[1]
pytestmark = [pytest.mark.model, pytest.mark.skipif(sys.platform == "win32", reason="needs a pty")]


class Terminal:
    """The CLI as a child on a pseudo-terminal: what it prints, and keys typed into it."""

    def __init__(self, *argv: str):
        self.pid, self.fd = pty.fork()
        if self.pid == 0:  # the child: its controlling terminal is the pty, so ^C is a SIGINT
            os.environ["PYTHONPATH"] = child_pythonpath()
            os.environ.pop("XINFER_DEVICE", None)
            os.execv(sys.executable, [sys.executable, "-m", "xinfer_async.cli", *argv])
        self.buf = b""

    def expect(self, pattern: bytes, timeout: float = 180.0) -> bytes:
        """Everything up to and including the first ``pattern``."""
        end = time.monotonic() + timeout
        while pattern not in self.buf:
            ready, _, _ = select.select([self.fd], [], [], max(0.0, end - time.monotonic()))
            if not ready:
                raise AssertionError(f"no {pattern!r} in {timeout} s; the terminal shows: {self.buf[-800:]!r}")
            try:
                data = os.read(self.fd, 4096)
            except OSError:  # the child ended
                data = b""
            if not data:
                raise AssertionError(f"the chat ended before {pattern!r}; the terminal shows: {self.buf[-800:]!r}")
            self.buf += data
        i = self.buf.index(pattern) + len(pattern)
        seen, self.buf = self.buf[:i], self.buf[i:]
        return seen

    def type(self, keys: bytes) -> None:
        os.write(self.fd, keys)

    def wait(self, timeout: float = 60.0) -> int:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                os.close(self.fd)
                return os.waitstatus_to_exitcode(status)
            try:
                os.read(self.fd, 4096)
            except OSError:
                time.sleep(0.05)
        os.kill(self.pid, signal.SIGKILL)
        raise AssertionError("the chat did not end")


def _prompt_tokens_of(messages: list[dict]) -> int:
    """Tokens of the chat's prompt for ``messages``, counted with the model's own template."""
    from xinfer_async.llm._chat import render_chat
    from xinfer_async.llm._gguf_reader import read_gguf
    from xinfer_async.llm._tokenizer import Tokenizer

    meta = read_gguf(require_model()).metadata
    text = render_chat(meta["tokenizer.chat_template"], messages)
    return len(Tokenizer.from_gguf(meta).encode(text, special=True))


def test_chat_keys_as_llama_cli():
    model = require_model()
    term = Terminal("chat", "-m", str(model), "--device", "cpu", "--ctx", "512", "-n", "24")
    banner = term.expect(b"\n> ")
    assert b"xinfer-async chat: " + model.name.encode() in banner and b"<LanguageModel" not in banner
    assert b"Ctrl-C stops an answer; Ctrl-C or Ctrl-D at the prompt ends the chat." in banner
    term.type(b"\n")  # an empty line asks again, it does not end the chat
    term.expect(b"> ")
    first = "Tell me a long story about a dragon."
    term.type(first.encode() + b"\n")
    term.expect(first.encode() + b"\r\n")  # the echo
    term.expect(b" ")  # the answer has begun
    term.type(b"\x03")  # Ctrl-C mid-answer: stops it, back to the prompt
    shown = term.expect(b"\n> ")
    assert b"[answer stopped (Ctrl-C); what it said stays in the chat]" in shown
    second = "Write a long poem about the sea."
    term.type(second.encode() + b"\n")
    shown = term.expect(b"\n> ").decode(errors="replace")
    m = re.search(r"\[24 tokens, decode [\d.]+ tok/s, prompt (\d+) tokens at [\d.]+ tok/s, first token after \d+ ms\]",
                  shown)
    assert m, shown
    assert "[answer cut at -n 24 tokens; give a larger -n for longer answers]" in shown
    # the history kept the first exchange: the prompt holds at least both questions and an answer turn
    at_least = _prompt_tokens_of([{"role": "user", "content": first}, {"role": "assistant", "content": ""},
                                  {"role": "user", "content": second}])
    assert int(m[1]) >= at_least > _prompt_tokens_of([{"role": "user", "content": second}])
    term.type(b"\x03")  # Ctrl-C at the prompt: ends the chat
    assert term.wait() == 0


def test_chat_ctrl_d_at_the_prompt_ends_it():
    term = Terminal("chat", "-m", str(require_model()), "--device", "cpu", "--ctx", "256")
    term.expect(b"\n> ")
    term.type(b"\x04")  # Ctrl-D on an empty line: end of input
    assert term.wait() == 0
