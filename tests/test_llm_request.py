"""llm/_request.py: the finish rules of ``Request.advance``, ``stop`` and ``timings`` (no device)."""

import numpy as np
import pytest
import trio

from xinfer_async.llm import SamplingParams
from xinfer_async.llm._request import Request

GREEDY = SamplingParams()


def _run(req: Request, tokens) -> list:
    """Advance ``req`` with ``tokens`` until it finishes; the finish reasons returned."""
    out = []
    for t in tokens:
        out.append(req.advance(t))
        if out[-1] is not None:
            break
    return out


def test_max_tokens_ends_with_length():
    req = Request([1, 2, 3], GREEDY, max_tokens=4, ctx=100, stop_ids=frozenset({0}))
    assert _run(req, [5, 6, 7, 8, 9]) == [None, None, None, "length"]
    assert req.tokens == [5, 6, 7, 8] and req.finish_reason == "length" and req.remaining() == 0


def test_stop_id_ends_with_stop_and_is_kept():
    req = Request([1], GREEDY, max_tokens=10, ctx=100, stop_ids=frozenset({7}))
    assert _run(req, [5, 7, 8]) == [None, "stop"]
    assert req.tokens == [5, 7]


def test_no_stop_ids_generates_past_eos():
    req = Request([1], GREEDY, max_tokens=3, ctx=100)
    assert _run(req, [7, 7, 7]) == [None, None, "length"]


@pytest.mark.parametrize("prompt_len, ctx, want", [(3, 3, 1), (3, 4, 2), (1, 5, 5), (5, 6, 2)])
def test_context_full_ends_with_length(prompt_len, ctx, want):
    """Token k sits at position prompt_len + k - 1; a token follows only while that is < ctx, so a
    request makes ctx - prompt_len + 1 tokens at most (the last one is never written)."""
    req = Request(list(range(prompt_len)), GREEDY, max_tokens=100, ctx=ctx)
    assert req.remaining() == want
    reasons = _run(req, [9] * 100)
    assert len(req.tokens) == want and reasons[-1] == "length" and req.remaining() == 0


def test_tokens_go_to_the_consumer_and_the_channel_ends_on_close():
    req = Request([1], GREEDY, max_tokens=2, ctx=10)
    req.advance(np.int32(4))
    req.advance(5)
    req.close()
    got = []
    with pytest.raises(trio.EndOfChannel):
        while True:
            got.append(req.received.receive_nowait())
    assert got == [4, 5] and all(type(t) is int for t in got + req.tokens)


def test_stop_string_ends_it_and_drops_later_tokens():
    req = Request([1], GREEDY, max_tokens=10, ctx=100)
    _run(req, [5, 6, 7])
    req.stop(2)  # the consumer found a stop string in the text of the first 2 tokens
    assert req.finish_reason == "stop" and req.tokens == [5, 6]
    assert req.advance(8) == "stop" and req.tokens == [5, 6]  # the scheduler sees it at its next token


def test_stop_string_overrides_a_length_finish():
    req = Request([1], GREEDY, max_tokens=2, ctx=100)
    _run(req, [5, 6])
    req.stop(2)
    assert req.finish_reason == "stop" and req.tokens == [5, 6]


def test_advance_after_close_raises_for_a_closed_consumer():
    req = Request([1], GREEDY, max_tokens=5, ctx=100)
    req.received.close()
    with pytest.raises(trio.BrokenResourceError):
        req.advance(3)
    assert req.tokens == [3]


def test_timings_from_the_marks():
    req = Request([1, 2], GREEDY, max_tokens=2, ctx=100)
    req.submitted_at, req.started_at, req.prefilled_at = 10.0, 10.5, 11.0
    req.advance(3)
    req.advance(4)
    req.ended_at = 13.0
    t = req.timings()
    assert (t.queue_wait_s, t.time_to_first_token_s, t.prefill_s, t.decode_s) == (0.5, 1.0, 0.5, 2.0)
    assert (t.prompt_tokens, t.generated_tokens) == (2, 2)
    assert t.decode_tok_per_s == 0.5 and t.prefill_tok_per_s == 4.0


def test_sample_uses_the_seeded_sampler():
    logits = np.random.default_rng(0).standard_normal(50).astype(np.float32)
    p = SamplingParams(temperature=1.0, seed=3)
    a, b = Request([1], p, 5, 10), Request([1], p, 5, 10)
    assert [a.sample(logits) for _ in range(5)] == [b.sample(logits) for _ in range(5)]
    assert not a.greedy and Request([1], GREEDY, 5, 10).greedy


def test_a_penalized_request_takes_the_logits_path_and_penalizes_its_window():
    """greedy (the device's argmax) only without a penalty; ``sample`` penalizes the window of
    the last ``repeat_last_n`` prompt + generated ids before the argmax."""
    p = SamplingParams(repeat_penalty=2.0, repeat_last_n=3)
    req = Request([5, 6, 7, 8], p, 5, 100)
    assert not req.greedy and req.params.greedy
    assert req.penalty_window() == [6, 7, 8]
    req.advance(9)
    assert req.penalty_window() == [7, 8, 9]
    logits = np.zeros(12, np.float32)
    logits[9], logits[4] = 3.0, 2.0  # 9 is seen: 3 / 2 = 1.5 < 2 -> 4
    assert req.sample(logits) == 4
    logits[6] = 5.0  # 6 fell out of the window: not penalized
    assert req.sample(logits) == 6
    assert Request([1], SamplingParams(repeat_penalty=1.3, repeat_last_n=0), 5, 10).greedy  # window 0: off
    assert Request([1, 2], SamplingParams(presence_penalty=1.0, repeat_last_n=-1), 5, 10).penalty_window() == [1, 2]


def test_timings_of_stages_not_reached_are_zero():
    never = Request([1, 2], GREEDY, max_tokens=0, ctx=100)
    never.stop(0, "length")  # max_tokens 0: never submitted
    t = never.timings()
    assert (t.queue_wait_s, t.time_to_first_token_s, t.prefill_s, t.decode_s) == (0.0, 0.0, 0.0, 0.0)
    queued = Request([1, 2], GREEDY, max_tokens=4, ctx=100)
    queued.submitted_at = 10.0
    queued.stop(0)  # cancelled while waiting
    queued.ended_at = 12.0
    t = queued.timings()
    assert (t.queue_wait_s, t.time_to_first_token_s, t.prefill_s, t.decode_s) == (2.0, 0.0, 0.0, 0.0)


def test_logprobs_are_recorded_with_each_token_and_cut_by_stop():
    rng = np.random.default_rng(4)
    req = Request([1], GREEDY, max_tokens=10, ctx=100, top_logprobs=2)
    assert not req.greedy  # its tokens come from the logits on the host
    rows = [rng.standard_normal(16).astype(np.float32) for _ in range(4)]
    for t, row in zip([3, 5, 7, 9], rows):
        assert req.advance(t, row) is None
    assert [e.token_id for e in req.logprobs] == [3, 5, 7, 9]
    x = rows[1].astype(np.float64)
    assert req.logprobs[1].logprob == pytest.approx(x[5] - np.logaddexp.reduce(x), abs=1e-12)
    req.stop(2)
    assert req.tokens == [3, 5] and [e.token_id for e in req.logprobs] == [3, 5]
    with pytest.raises(ValueError, match="a request with top_logprobs needs the step's logits"):
        Request([1], GREEDY, max_tokens=10, ctx=100, top_logprobs=0).advance(3)
    assert Request([1], GREEDY, max_tokens=10, ctx=100).greedy
