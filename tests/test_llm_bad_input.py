"""Bad input to ``xinfer_async.llm.load`` and ``LanguageModel`` (xinfer_async/llm/_load.py,
_engine.py): each a clear error with a pinned message, or a documented behaviour."""

from __future__ import annotations

import re

import numpy as np
import pytest
import trio

from _llm_fixtures import load_model_sync, require_model
from xinfer_async import llm
from xinfer_async.hal import GGUFError

CTX = 64


@pytest.fixture(scope="module")
def model():
    m = load_model_sync(slots=1, ctx=CTX)
    yield m
    trio.run(m.aclose)


# -- files and names -------------------------------------------------------------------------
@pytest.mark.model
async def test_truncated_model_names_the_first_tensor_that_does_not_fit(tmp_path):
    import gguf

    src = require_model()
    size = src.stat().st_size
    cut = size * 3 // 5
    tensors = gguf.GGUFReader(src, "r").tensors
    first = next(t for t in tensors if int(t.data_offset) + int(t.n_bytes) > cut)
    path = tmp_path / "truncated.gguf"
    with open(src, "rb") as f:
        path.write_bytes(f.read(cut))
    start, end = int(first.data_offset), int(first.data_offset) + int(first.n_bytes)
    msg = f"{path}: truncated file: tensor {first.name!r} needs bytes [{start}, {end}) but the file has {cut} bytes"
    with pytest.raises(GGUFError, match=f"^{re.escape(msg)}$"):
        await llm.load(path, device="cpu", slots=1, ctx=CTX)
    # cut inside the header: no tensor to name, the counts cannot fit
    path.write_bytes(src.read_bytes()[:1000])
    with pytest.raises(GGUFError, match=re.escape(f"{path}: truncated file or corrupt tensor count: 272 entries "
                                                  "need at least 6528 bytes but the file has 1000")):
        await llm.load(path, device="cpu", slots=1, ctx=CTX)


async def test_not_a_gguf_file(tmp_path):
    path = tmp_path / "model.gguf"
    path.write_text("hello, I am not a model")
    with pytest.raises(GGUFError, match=re.escape(f"{path}: not a GGUF file (magic b'hell', expected b'GGUF')")):
        await llm.load(path, device="cpu")
    empty = tmp_path / "empty.gguf"
    empty.write_bytes(b"")
    with pytest.raises(GGUFError, match=re.escape(f"{empty}: not a GGUF file (magic b'', expected b'GGUF')")):
        await llm.load(empty, device="cpu")


async def test_unknown_model_name_lists_the_known_ones(tmp_path):
    with pytest.raises(ValueError, match=r"^unknown model 'no-such-model'; known models: .*smollm2-135m.* "
                                         r"\(or pass a path to a \.gguf file\)$"):
        await llm.load("no-such-model", device="cpu", pull=False)
    missing = tmp_path / "missing.gguf"
    with pytest.raises(FileNotFoundError, match=f"^model file not found: {re.escape(str(missing))}$"):
        await llm.load(str(missing), device="cpu")


async def test_load_sizes():
    with pytest.raises(ValueError, match=r"^slots must be an int >= 1, got 0$"):
        await llm.load("smollm2-135m", slots=0)


# -- requests --------------------------------------------------------------------------------
@pytest.mark.model
async def test_empty_prompt(model):
    for prompt in ("", []):
        with pytest.raises(ValueError, match=r"^prompt is empty: give at least one token of text$"):
            model.generate(prompt)
        with pytest.raises(ValueError, match=r"^prompt is empty: give at least one token of text$"):
            await model.complete(prompt)
    with pytest.raises(ValueError, match=r"^token_ids is empty: give at least one token$"):
        await model.logits([])


@pytest.mark.model
async def test_prompt_longer_than_the_context(model):
    ids = model.tokenize("one two three " * 40)
    assert len(ids) > CTX
    msg = f"prompt has {len(ids)} tokens but the context holds {CTX} (load with a larger ctx=)"
    with pytest.raises(ValueError, match=f"^{re.escape(msg)}$"):
        await model.complete("one two three " * 40)
    with pytest.raises(ValueError, match=f"^token_ids has {len(ids)} tokens but the context holds {CTX}"):
        await model.logits(ids)
    # exactly the context: allowed, the one token that fits is generated, finish "length"
    r = await model.complete(ids[:CTX], max_tokens=5)
    assert len(r.token_ids) == 1 and r.finish_reason in ("length", "stop")


@pytest.mark.model
@pytest.mark.parametrize("bad", [-1, 1.5, True, "8"])
async def test_max_tokens_invalid(model, bad):
    with pytest.raises(ValueError, match=f"^max_tokens must be an int >= 0, got {re.escape(repr(bad))}$"):
        model.generate("hello", max_tokens=bad)


@pytest.mark.model
async def test_max_tokens_zero_is_empty(model):
    r = await model.complete("hello", max_tokens=0)
    assert (r.text, r.token_ids, r.finish_reason) == ("", [], "length")
    t = r.timings  # nothing ran: every time is 0.0 (not the time since the request was built)
    await trio.sleep(0.05)
    assert (t.queue_wait_s, t.time_to_first_token_s, t.prefill_s, t.decode_s) == (0.0, 0.0, 0.0, 0.0)
    assert (t.prompt_tokens, t.generated_tokens, t.decode_tok_per_s) == (len(model.tokenize("hello")), 0, 0.0)


@pytest.mark.model
@pytest.mark.parametrize("bad, msg", [
    (b"hello", "prompt must be a str or a sequence of int token ids, got bytes b'hello'"),
    (bytearray(b"hi"), "prompt must be a str or a sequence of int token ids, got bytearray bytearray(b'hi')"),
    (1.5, "prompt must be a str or a sequence of int token ids, got float 1.5"),
    (True, "prompt must be a str or a sequence of int token ids, got bool True"),
    (7, "prompt must be a str or a sequence of int token ids, got int 7"),
    (None, "prompt must be a str or a sequence of int token ids, got NoneType None"),
    ([1, 2.0, 3], "prompt[1] must be an int token id, got float 2.0"),
    ([1, True], "prompt[1] must be an int token id, got bool True"),
    (np.array([1.0, 2.0]), "prompt must be a str or a sequence of int token ids, got an array of shape (2,) and "
                           "dtype float64"),
])
async def test_prompt_of_another_type_is_a_type_error_naming_prompt(model, bad, msg):
    with pytest.raises(TypeError, match=f"^{re.escape(msg)}$"):
        model.generate(bad)
    ids_msg = msg.replace("prompt", "token_ids", 1).replace("a str or a sequence", "a sequence")
    with pytest.raises(TypeError, match=f"^{re.escape(ids_msg)}$"):
        await model.logits(bad)
    with pytest.raises(TypeError, match=f"^{re.escape(ids_msg.replace('token_ids', 'ids', 1))}$"):
        model.detokenize(bad)


@pytest.mark.model
async def test_text_where_ids_are_expected_is_a_type_error(model):
    with pytest.raises(TypeError, match="^token_ids must be a sequence of int token ids, got str 'Hello'$"):
        await model.logits("Hello")
    with pytest.raises(TypeError, match="^ids must be a sequence of int token ids, got str 'ab'$"):
        model.detokenize("ab")
    assert model.detokenize([]) == "" and model.detokenize(np.array(model.tokenize("Hi"))) == "Hi"


@pytest.mark.model
async def test_token_ids_as_a_tuple_or_an_integer_array(model):
    ids = model.tokenize("The sky is")
    a = await model.complete(ids, max_tokens=3)
    assert (await model.complete(tuple(ids), max_tokens=3)).token_ids == a.token_ids
    assert (await model.complete(np.array(ids, np.int32), max_tokens=3)).token_ids == a.token_ids


@pytest.mark.model
@pytest.mark.parametrize("bad, exc, msg", [
    ([], ValueError, "messages is empty: give at least one message, e.g. [{'role': 'user', 'content': 'Hi'}]"),
    (None, TypeError, "messages must be a list of {'role', 'content'} dicts, got NoneType None"),
    ("hi", TypeError, "messages must be a list of {'role', 'content'} dicts, got str 'hi'"),
    (["hi"], TypeError, "messages[0] must be a dict with 'role' and 'content', got str"),
    ([{"role": "user", "content": "a"}, {"role": "bot", "content": "b"}], ValueError,
     "messages[1]['role'] must be one of system, user, assistant, got 'bot'"),
    ([{"content": "a"}], ValueError, "messages[0]['role'] must be one of system, user, assistant, got None"),
    ([{"role": "user"}], ValueError, "messages[0]['content'] must be a str, got None"),
])
async def test_bad_chat_messages_name_the_argument(model, bad, exc, msg):
    for call in (model.render_chat, model.chat_stream):
        with pytest.raises(exc, match=f"^{re.escape(msg)}$"):
            call(bad)
    with pytest.raises(exc, match=f"^{re.escape(msg)}$"):
        await model.chat(bad)


@pytest.mark.model
async def test_chat_stream_pieces_join_to_the_chat_reply(model):
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 2 + 2?"}]
    whole = await model.chat(messages, max_tokens=8)
    stream = model.chat_stream(messages, max_tokens=8)
    pieces = [p async for p in stream]
    assert len(pieces) >= 2 and "".join(pieces) == whole.text == stream.result.text
    assert stream.result.token_ids == whole.token_ids


@pytest.mark.model
async def test_async_with_closes_the_model():
    async with await llm.load(require_model(), device="cpu", slots=1, ctx=16) as m:
        assert (await m.complete("hi", max_tokens=1)).token_ids
    assert m.device._closed
    with pytest.raises(trio.ClosedResourceError, match="^language model is closed$"):
        await m.complete("hello", max_tokens=2)
    async with llm.open_model(require_model(), device="cpu", slots=2, ctx=16) as m2:
        assert m2.batching and m2.slots == 2  # batching is the default with more than one slot
        assert (await m2.complete("hi", max_tokens=1)).token_ids
    assert m2.device._closed


@pytest.mark.model
@pytest.mark.parametrize("kwargs, msg", [
    (dict(temperature=-1), "temperature must be a finite number >= 0, got -1"),
    (dict(temperature=float("nan")), "temperature must be a finite number >= 0, got nan"),
    (dict(top_p=0), "top_p must be in (0, 1], got 0"),
    (dict(top_p=1.5), "top_p must be in (0, 1], got 1.5"),
    (dict(top_k=-1), "top_k must be an integer >= 0, got -1"),
    (dict(top_k=2.5), "top_k must be an integer >= 0, got 2.5"),
    (dict(seed=-3), "seed must be None or an integer >= 0, got -3"),
])
async def test_invalid_sampling_values(model, kwargs, msg):
    with pytest.raises(ValueError, match=f"^{re.escape(msg)}$"):
        model.generate("hello", **kwargs)
    with pytest.raises(ValueError, match=f"^{re.escape(msg)}$"):
        await model.complete("hello", **kwargs)


@pytest.mark.model
async def test_token_ids_outside_the_vocabulary(model):
    V = model.config.vocab_size
    for bad in (V, -1):
        with pytest.raises(ValueError, match=f"^token_ids holds token id {bad}, outside the vocabulary \\[0, {V}\\)$"):
            await model.logits([1, 2, bad])
        with pytest.raises(ValueError, match=f"^prompt holds token id {bad}, outside the vocabulary \\[0, {V}\\)$"):
            model.generate([1, bad])


@pytest.mark.model
async def test_closed_model_refuses_requests():
    m = await llm.load(require_model(), device="cpu", slots=1, ctx=16)
    await m.aclose()
    with pytest.raises(trio.ClosedResourceError, match="^language model is closed$"):
        await m.complete("hello", max_tokens=2)
