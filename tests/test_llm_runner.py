"""llm/_runner.py: named inputs and outputs mapped onto the plans' order (``PlanSpec``), padding,
speculative runs (a fake slot records what ``start_run`` gets; no device)."""

import numpy as np
import pytest

from xinfer_async.llm._llama import PlanSpec
from xinfer_async.llm._runner import Runner


class _Pending:
    def __init__(self, outs):
        self.outs = outs

    async def result(self):
        return self.outs


class _Slot:
    def __init__(self):
        self.calls = []

    def output_view(self, index, plan):
        return ("view", plan, index)

    async def start_run(self, inputs, plan, outputs, device_inputs, wait_for_list):
        self.calls.append(dict(inputs=inputs, plan=plan, outputs=outputs, device_inputs=device_inputs,
                               wait_for_list=wait_for_list))
        return _Pending([f"out{i}" for i in outputs])


SINGLE = {"decode": PlanSpec(1, False, False), "prefill16": PlanSpec(16, False, False),
          "score": PlanSpec(64, True, False)}
BATCHED = {"batch1": PlanSpec(1, True, True), "batch8": PlanSpec(8, True, True),
           "prefill16": PlanSpec(16, False, True)}


def test_plan_spec_names_the_inputs_in_forward_order():
    assert PlanSpec(4, False, False).inputs == ("tokens", "positions", "last")
    assert PlanSpec(4, True, True).inputs == ("tokens", "positions", "rows", "first_rows", "last_rows")
    assert PlanSpec(4, False, True).inputs == ("tokens", "positions", "rows", "first_rows", "last_rows", "last")
    assert PlanSpec(4, False, True).outputs == ("logits", "argmax")


async def test_single_plan_inputs_padded_and_outputs_named():
    slot, r = _Slot(), Runner(SINGLE, ctx=128, chunk=16)
    assert r.prefill_plan(1) == "decode" and r.prefill_plan(5) == "prefill16"
    out = await r.run(slot, "prefill16", tokens=[7, 8, 9], positions=range(4, 7), outputs=("logits", "argmax"))
    assert out == {"logits": "out0", "argmax": "out1"}
    (c,) = slot.calls
    tok, pos, last = c["inputs"]
    assert tok.dtype == pos.dtype == last.dtype == np.int32
    assert tok.tolist() == [7, 8, 9] + [0] * 13 and pos.tolist() == [4, 5, 6] + [-1] * 13 and last.tolist() == [2]
    assert c["outputs"] == [0, 1] and c["device_inputs"] is None and c["wait_for_list"]


async def test_batched_rows_and_speculative_tokens_from_argmax():
    slot, r = _Slot(), Runner(BATCHED, ctx=100, chunk=16)
    assert r.batch_plan(3) == "batch8" and r.prefill_plan(1) == "batch1"
    await r.start(slot, "batch8", positions=[5, 9], rows=[5, 209], first_rows=[0, 200], speculative=True)
    (c,) = slot.calls
    tok, pos, rows, first, last_rows = (a.tolist() for a in c["inputs"])
    assert tok == [0] * 8 and pos == [5, 9] + [-1] * 6 and rows == last_rows == [5, 209] + [-1] * 6
    assert first == [0, 200] + [0] * 6
    assert c["outputs"] == [1] and c["device_inputs"] == {0: ("view", "batch8", 1)} and not c["wait_for_list"]


async def test_unknown_output_name():
    with pytest.raises(ValueError, match="has outputs \\('logits', 'argmax'\\), not 'probs'"):
        await Runner(SINGLE, 128, 16).start(_Slot(), "decode", tokens=[1], positions=[0], outputs=("probs",))
