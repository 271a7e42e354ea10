"""The OpenAI API as this server speaks it: request bodies -> ``generate`` arguments, results ->
response bodies and stream chunks, errors -> OpenAI-style error bodies.

Follows the OpenAI API reference (https://platform.openai.com/docs/api-reference/completions and
/chat) as llama.cpp's llama-server and vLLM implement it, with vLLM's extensions ``top_k``,
``min_p``, ``repetition_penalty`` and ``ignore_eos``, and llama-server's ``repeat_last_n``. Every
field a request may carry is read in ``generate_kwargs`` (one table, one function); ``n`` must be 1.
Log-probabilities (``completion_logprobs``, ``chat_logprobs``) are those of the raw logits (see
``LanguageModel.generate``), at most ``MAX_TOP_LOGPROBS`` alternatives a token.

``presence_penalty`` and ``frequency_penalty`` count the tokens of the last ``repeat_last_n``
(default 64; -1: all) of the prompt and the generated text, as llama-server does (OpenAI's
reference counts the generated text only): one window for the three penalties, see
``SamplingParams``.
"""

from __future__ import annotations

import json
import math
import secrets
import time
from typing import Any, Callable, Container, Sequence

__all__ = ["APIError", "parse_json", "generate_kwargs", "completion_prompt", "chat_messages", "stream_options",
           "usage", "completion_body", "completion_chunk", "chat_body", "chat_chunk", "models_body", "request_id",
           "completion_logprobs", "chat_logprobs", "MAX_TOP_LOGPROBS"]


class APIError(Exception):
    """A refused request: the HTTP status and an OpenAI-style body
    ``{"error": {"message", "type", "param", "code"}}``.

    Args:
        status: the HTTP status (400, 401, 404, 413, 429, 503...).
        message: what was wrong, naming the field and the value where there is one.
        type: OpenAI's error type (``invalid_request_error``, ``authentication_error``...).
        param: the request field at fault, or None.
        code: a machine-readable code (``model_not_found``, ``unsupported_parameter``...), or None.
        headers: extra response headers, e.g. ``[("retry-after", "1")]``.
    """

    def __init__(self, status: int, message: str, *, type: str = "invalid_request_error", param: str | None = None,
                 code: str | None = None, headers: list[tuple[str, str]] | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type
        self.param = param
        self.code = code
        self.headers = list(headers or [])

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


def parse_json(raw: bytes) -> dict:
    """The JSON object of a request body.

    Raises:
        APIError: 400 when the body is not UTF-8 JSON or not an object.
    """
    try:
        body = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise APIError(400, f"the body is not valid JSON: {exc}", code="invalid_json") from None
    if not isinstance(body, dict):
        raise APIError(400, f"the body must be a JSON object, got {type(body).__name__}", code="invalid_json")
    return body


def _number(body: dict, name: str, lo: float, hi: float) -> float | None:
    v = body.get(name)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or not lo <= v <= hi:
        raise APIError(400, f"{name} must be a number in [{lo:g}, {hi:g}], got {v!r}", param=name)
    return float(v)


def _integer(body: dict, name: str, lo: int, hi: int | None = None) -> int | None:
    v = body.get(name)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or v < lo or (hi is not None and v > hi):
        rng = f">= {lo}" if hi is None else f"in [{lo}, {hi}]"
        raise APIError(400, f"{name} must be an integer {rng}, got {v!r}", param=name)
    return v


def _unsupported(name: str, why: str = "") -> APIError:
    return APIError(400, f"{name} is not supported yet by this server{why}", param=name, code="unsupported_parameter")


#: the most alternatives a token's log-probabilities may list (OpenAI's ``top_logprobs`` cap; vLLM's
#: default ``max_logprobs``); the legacy completions ``logprobs`` takes as many
MAX_TOP_LOGPROBS = 20
#: what a log-probability of -inf is sent as (JSON has no infinity; vLLM's value)
LOGPROB_FLOOR = -9999.0


def generate_kwargs(body: dict, accepted: Container[str], *, chat: bool, default_max_tokens: int,
                    max_tokens_limit: int) -> dict:
    """The keyword arguments of ``LanguageModel.generate`` for an OpenAI request body.

    Args:
        body: the parsed request.
        accepted: the parameter names ``generate`` takes (``inspect.signature``); a field it does
            not take yet is refused only when the request sets it to a non-default value.
        chat: a chat request (``max_completion_tokens``, ``logprobs`` as a bool with
            ``top_logprobs``) rather than a completion (``logprobs`` an int).
        default_max_tokens: ``max_tokens`` when the request gives none.
        max_tokens_limit: the largest ``max_tokens`` accepted.

    Returns:
        ``{"max_tokens", "temperature", "top_p", "top_k", "seed", "stop", "ignore_eos"}``, plus
        ``min_p``, ``presence_penalty``, ``frequency_penalty``, ``repeat_penalty`` (from
        ``repetition_penalty``) and ``repeat_last_n`` when the request sets them, and ``logprobs``
        (the count of alternatives, 0..20) when it asks for log-probabilities: completions'
        ``logprobs: k``, chat's ``logprobs: true`` with ``top_logprobs: k`` (default 0).

    Raises:
        APIError: 400 naming the field for a value of the wrong type or out of range (``logprobs``
            or ``top_logprobs`` outside [0, 20], ``top_logprobs`` without ``logprobs: true``),
            ``n`` other than 1, a field this server does not support (``unsupported_parameter``;
            ``logprobs`` too when the model's ``generate`` has no such argument), or
            ``max_tokens`` above the limit.
    """
    n = _integer(body, "n", 1)
    if n not in (None, 1):
        raise APIError(400, f"n must be 1 (one choice a request), got {n}", param="n")
    for name, default in (("echo", False), ("best_of", 1), ("suffix", None), ("logit_bias", None), ("tools", None),
                          ("functions", None), ("response_format", None)):
        v = body.get(name)
        if v not in (None, default) and not (name == "logit_bias" and v == {}) and \
                not (name == "response_format" and v == {"type": "text"}):
            raise _unsupported(name)
    mt_name = "max_completion_tokens" if chat and body.get("max_completion_tokens") is not None else "max_tokens"
    max_tokens = _integer(body, mt_name, 0)
    if max_tokens is None:
        max_tokens = default_max_tokens
    if max_tokens > max_tokens_limit:
        raise APIError(400, f"{mt_name} must be at most {max_tokens_limit} (this server's limit), got {max_tokens}",
                       param=mt_name)
    temperature = _number(body, "temperature", 0.0, 2.0)
    top_p = _number(body, "top_p", 0.0, 1.0)
    if top_p == 0.0:
        raise APIError(400, "top_p must be in (0, 1], got 0", param="top_p")
    top_k = _integer(body, "top_k", -1)
    seed = _integer(body, "seed", 0)
    stop = body.get("stop")
    if stop is None:
        stop = []
    elif isinstance(stop, str):
        stop = [stop]
    elif not (isinstance(stop, list) and all(isinstance(s, str) for s in stop)):
        raise APIError(400, f"stop must be a string or a list of strings, got {stop!r}", param="stop")
    ignore_eos = body.get("ignore_eos", False)
    if not isinstance(ignore_eos, bool):
        raise APIError(400, f"ignore_eos must be a boolean, got {ignore_eos!r}", param="ignore_eos")
    kwargs: dict[str, Any] = dict(max_tokens=max_tokens, temperature=1.0 if temperature is None else temperature,
                                  top_p=1.0 if top_p is None else top_p, top_k=max(0, top_k or 0), seed=seed,
                                  stop=stop, ignore_eos=ignore_eos)
    rp = _number(body, "repetition_penalty", 0.0, 1e9)
    if rp == 0.0:
        raise APIError(400, "repetition_penalty must be a number > 0, got 0", param="repetition_penalty")
    sampling = {"presence_penalty": _number(body, "presence_penalty", -2.0, 2.0),
                "frequency_penalty": _number(body, "frequency_penalty", -2.0, 2.0),
                "min_p": _number(body, "min_p", 0.0, 1.0), "repeat_penalty": rp,
                "repeat_last_n": _integer(body, "repeat_last_n", -1)}
    kwargs.update({k: v for k, v in sampling.items() if v is not None})
    top = _logprobs(body, chat)
    if top is not None:
        if "logprobs" not in accepted:
            raise _unsupported("logprobs", ": this model's generate() gives no log-probabilities")
        kwargs["logprobs"] = top
    return kwargs


def _logprobs(body: dict, chat: bool) -> int | None:
    """The count of most likely alternatives asked for each token (0: the chosen token's
    log-probability only), or None for no log-probabilities: completions' ``logprobs`` (an int),
    chat's ``top_logprobs`` with ``logprobs: true``."""
    if not chat:
        return _integer(body, "logprobs", 0, MAX_TOP_LOGPROBS)
    lp = body.get("logprobs")
    if lp not in (None, True, False):
        raise APIError(400, f"logprobs must be a boolean, got {lp!r}", param="logprobs")
    top = _integer(body, "top_logprobs", 0, MAX_TOP_LOGPROBS)
    if top is not None and not lp:
        raise APIError(400, "top_logprobs needs logprobs: true", param="top_logprobs")
    return (top or 0) if lp else None


def _lp(value: float) -> float:
    return value if value > LOGPROB_FLOOR else LOGPROB_FLOOR


def _token_text(token_bytes: Callable[[int], bytes], token_id: int) -> str:
    return token_bytes(token_id).decode("utf-8", errors="replace")


def completion_logprobs(entries: Sequence[Any], offsets: Sequence[int],
                        token_bytes: Callable[[int], bytes]) -> dict:
    """The legacy completions ``choices[i].logprobs``: ``{"tokens", "token_logprobs",
    "top_logprobs", "text_offset"}``, one element per token, as OpenAI's completions API (and vLLM)
    give them: ``top_logprobs[i]`` maps the token text of each of the most likely tokens, and of
    the chosen one (so up to k + 1 entries), to its log-probability.

    Args:
        entries: ``TokenLogprobs`` of the tokens (``token_id``, ``logprob``, ``top``).
        offsets: the offset of each token's text in the completion text, characters.
        token_bytes: ``token_bytes(id)`` -> the token's bytes (its text: decoded as UTF-8, an
            incomplete character as U+FFFD).

    Log-probabilities of -inf are sent as ``LOGPROB_FLOOR`` (JSON has no infinity).
    """
    tokens, chosen, tops = [], [], []
    for e in entries:
        text = _token_text(token_bytes, e.token_id)
        tokens.append(text)
        chosen.append(_lp(e.logprob))
        top = {_token_text(token_bytes, i): _lp(v) for i, v in e.top}
        top.setdefault(text, _lp(e.logprob))
        tops.append(top)
    return {"tokens": tokens, "token_logprobs": chosen, "top_logprobs": tops, "text_offset": list(offsets)}


def chat_logprobs(entries: Sequence[Any], token_bytes: Callable[[int], bytes]) -> dict:
    """The chat ``choices[i].logprobs``: ``{"content": [{"token", "logprob", "bytes",
    "top_logprobs": [{"token", "logprob", "bytes"}]}], "refusal": None}`` as the OpenAI chat API
    defines it (``bytes``: the token's UTF-8 bytes as ints; ``top_logprobs``: the k most likely
    tokens, most likely first). ``entries`` and ``token_bytes`` as in ``completion_logprobs``."""
    def item(token_id: int, logprob: float) -> dict:
        b = token_bytes(token_id)
        return {"token": b.decode("utf-8", errors="replace"), "logprob": _lp(logprob), "bytes": list(b)}

    return {"content": [{**item(e.token_id, e.logprob), "top_logprobs": [item(i, v) for i, v in e.top]}
                        for e in entries], "refusal": None}


def completion_prompt(body: dict) -> str | list[int]:
    """The prompt of a completion request: a string, or token ids.

    Raises:
        APIError: 400 for a missing prompt, several prompts (a batch: send one request each), or
            a value of another type.
    """
    p = body.get("prompt")
    if isinstance(p, list) and len(p) == 1 and isinstance(p[0], (str, list)):
        p = p[0]  # a batch of one
    if isinstance(p, str):
        return p
    if isinstance(p, list) and p and all(isinstance(i, int) and not isinstance(i, bool) for i in p):
        return p
    if p is None:
        raise APIError(400, "prompt is required", param="prompt")
    if isinstance(p, list) and p and all(isinstance(i, (str, list)) for i in p):
        raise APIError(400, f"prompt holds {len(p)} prompts; this server takes one a request", param="prompt")
    raise APIError(400, f"prompt must be a string or a list of token ids, got {p!r:.80}", param="prompt")


def chat_messages(body: dict) -> list[dict]:
    """The messages of a chat request as ``render_chat`` takes them (str contents; a list of text
    parts is joined).

    Raises:
        APIError: 400 for missing or malformed messages, or a content part other than text.
    """
    msgs = body.get("messages")
    if not isinstance(msgs, list) or not msgs:
        raise APIError(400, f"messages must be a non-empty list, got {msgs!r:.80}", param="messages")
    out = []
    for i, m in enumerate(msgs):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise APIError(400, f"messages[{i}] must be an object with a string role", param="messages")
        content = m.get("content")
        if isinstance(content, list):
            parts = []
            for part in content:
                if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                    raise APIError(400, f"messages[{i}].content: only text parts are supported, got {part!r:.80}",
                                   param="messages")
                parts.append(part["text"])
            content = "".join(parts)
        if content is None:
            content = ""
        if not isinstance(content, str):
            raise APIError(400, f"messages[{i}].content must be a string or a list of text parts", param="messages")
        out.append({"role": m["role"], "content": content})
    return out


def stream_options(body: dict) -> tuple[bool, bool]:
    """(stream, include_usage) of a request.

    Raises:
        APIError: 400 for non-boolean values, or ``stream_options`` without ``stream``.
    """
    stream = body.get("stream", False)
    if stream is None:
        stream = False
    if not isinstance(stream, bool):
        raise APIError(400, f"stream must be a boolean, got {stream!r}", param="stream")
    opts = body.get("stream_options")
    if opts is None:
        return stream, False
    if not stream:
        raise APIError(400, "stream_options needs stream: true", param="stream_options")
    if not isinstance(opts, dict) or not isinstance(opts.get("include_usage", False), bool):
        raise APIError(400, f"stream_options must be an object with a boolean include_usage, got {opts!r:.80}",
                       param="stream_options")
    return stream, bool(opts.get("include_usage", False))


def request_id(prefix: str) -> str:
    return f"{prefix}-{secrets.token_hex(12)}"


def usage(prompt_tokens: int, completion_tokens: int) -> dict:
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens}


def _head(rid: str, obj: str, model: str, created: int) -> dict:
    return {"id": rid, "object": obj, "created": created, "model": model}


def completion_body(rid: str, model: str, created: int, text: str, finish_reason: str, use: dict,
                    logprobs: dict | None = None) -> dict:
    """A completion (``logprobs``: ``completion_logprobs``, or None)."""
    return {**_head(rid, "text_completion", model, created),
            "choices": [{"index": 0, "text": text, "logprobs": logprobs, "finish_reason": finish_reason}],
            "usage": use}


def completion_chunk(rid: str, model: str, created: int, text: str, finish_reason: str | None = None,
                     use: dict | None = None, with_usage: bool = False, logprobs: dict | None = None) -> dict:
    """A stream chunk (``logprobs``: ``completion_logprobs`` of its tokens, or None); with ``use``,
    the closing usage chunk (no choices)."""
    body = {**_head(rid, "text_completion", model, created),
            "choices": [] if use is not None else [{"index": 0, "text": text, "logprobs": logprobs,
                                                    "finish_reason": finish_reason}]}
    if with_usage:
        body["usage"] = use
    return body


def chat_body(rid: str, model: str, created: int, text: str, finish_reason: str, use: dict,
              logprobs: dict | None = None) -> dict:
    """A chat completion (``logprobs``: ``chat_logprobs``, or None)."""
    return {**_head(rid, "chat.completion", model, created),
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "logprobs": logprobs,
                         "finish_reason": finish_reason}], "usage": use}


def chat_chunk(rid: str, model: str, created: int, delta: dict, finish_reason: str | None = None,
               use: dict | None = None, with_usage: bool = False, logprobs: dict | None = None) -> dict:
    """A stream chunk (``delta``: ``{"role": "assistant", "content": ""}`` first, then
    ``{"content": piece}``, then ``{}`` with the finish reason; ``logprobs``: ``chat_logprobs`` of
    its tokens, or None); with ``use``, the usage chunk."""
    body = {**_head(rid, "chat.completion.chunk", model, created),
            "choices": [] if use is not None else [{"index": 0, "delta": delta, "logprobs": logprobs,
                                                    "finish_reason": finish_reason}]}
    if with_usage:
        body["usage"] = use
    return body


def models_body(model: str, created: int) -> dict:
    return {"object": "list", "data": [{"id": model, "object": "model", "created": created, "owned_by": "xinfer_async"}]}


def now() -> int:
    return int(time.time())
