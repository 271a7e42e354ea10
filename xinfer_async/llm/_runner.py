"""``Runner``: calls a prepared Llama's plans on a slot with named inputs and outputs.

The plans' input and output names and orders are declared once, by the builder
(``LlamaBuilder.plan_specs``, ``PlanSpec``); the runner pads each named input to the plan's T
rows and maps names to the positions ``Slot.start_run`` takes, so no caller writes a positional
input list or an output number.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from ._llama import PlanSpec

#: what a padding row holds in each input (position -1: the row touches no cache row)
_PAD = {"tokens": 0, "positions": -1, "rows": -1, "first_rows": 0, "last_rows": -1, "last": 0}


class StepRun:
    """A submitted run whose outputs are not read yet (``Runner.start``). Its command list stays
    taken until ``result()``, ``settle()`` or ``discard()``."""

    def __init__(self, pending: Any, outputs: Sequence[str]):
        self._pending = pending
        self.outputs = tuple(outputs)

    async def result(self) -> dict[str, np.ndarray]:
        """Await the fence; output name -> array (``logits`` float32 (rows, vocab), ``argmax``
        int32 (rows,)). Gives the command list back, also when cancelled."""
        return dict(zip(self.outputs, await self._pending.result()))

    async def settle(self) -> None:
        """Await the fence and give the command list back, without reading. Idempotent."""
        await self._pending.settle()

    async def discard(self) -> None:
        """Give the command list back without waiting (the pool takes it after the fence). Idempotent."""
        await self._pending.discard()


class Runner:
    """Runs the plans of ``LlamaBuilder.prepare()`` (``batched`` False) or ``prepare_batched()``.

    Args:
        specs: ``builder.plan_specs(batched)``.
        ctx: KV-cache rows per sequence, tokens.
        chunk: prompt tokens of one sequence per prefill run at most.
        step_prompt_rows: batched plans: prompt tokens a decode step carries at most beside its
            decode rows (default: ``chunk``).
    """

    def __init__(self, specs: dict[str, PlanSpec], ctx: int, chunk: int, step_prompt_rows: int | None = None):
        self.specs = dict(specs)
        self.ctx = ctx
        self.chunk = chunk
        self.step_prompt_rows = chunk if step_prompt_rows is None else step_prompt_rows
        self.batched = any(s.batched for s in self.specs.values())
        self.prefill_sizes = sorted(s.tokens for n, s in self.specs.items() if n.startswith("prefill"))
        self.batch_sizes = sorted(s.tokens for n, s in self.specs.items() if n.startswith("batch"))
        #: plan -> (input names, a padding array per input, output name -> number), built once
        self._layout = {name: (s.inputs, [np.full(s.tokens, _PAD[i], np.int32) for i in s.inputs],
                               {o: k for k, o in enumerate(s.outputs)}) for name, s in self.specs.items()}

    def prefill_plan(self, n: int) -> str:
        """The smallest plan that takes ``n`` (1 <= n <= chunk) prompt tokens of one sequence."""
        if n == 1:
            return "batch1" if self.batched else "decode"
        return f"prefill{min(T for T in self.prefill_sizes if T >= n)}"

    def batch_plan(self, n_rows: int) -> str:
        """The smallest ``batch{B}`` plan with B >= ``n_rows``."""
        return f"batch{min(B for B in self.batch_sizes if B >= n_rows)}"

    async def start(self, slot: Any, plan: str, *, positions: Sequence[int], tokens: Sequence[int] | None = None,
                    rows: Sequence[int] | None = None, first_rows: Sequence[int] | None = None,
                    last: int | None = None, outputs: Sequence[str] = ("argmax",),
                    speculative: bool = False) -> StepRun:
        """Submit one run of ``plan`` on ``slot``; returns before the device finishes.

        Args:
            positions: the position of each row in its sequence (n <= T rows; the rest are padding).
            tokens: the id of each row (n,). None with ``speculative``.
            rows, first_rows: batched plans: each row's KV-cache row (s*ctx + position) and its
                sequence's first cache row (s*ctx); the row attends cache rows first..row.
            last: the row whose logits come back in plans with one logits row (default: n - 1).
            outputs: the output names to download (``"logits"``, ``"argmax"``).
            speculative: the tokens are this plan's previous run's ``argmax`` on this slot, copied on
                the device (the run is submitted before that one is read back); takes a command
                list only when one is free.

        Raises:
            trio.WouldBlock: ``speculative`` and no command list is free (a task that holds one
                must not wait for a second).
            ValueError: a wrong input size (as ``Slot.start_run``) or an unknown output name.
        """
        inputs, pads, out_index = self._layout[plan]
        n = len(positions)
        given = {"tokens": tokens, "positions": positions, "rows": rows, "first_rows": first_rows, "last_rows": rows}
        arrays = []
        for name, pad in zip(inputs, pads):
            if name == "last":
                arrays.append(np.array([n - 1 if last is None else last], np.int32))
                continue
            value = given[name]
            if value is None:
                arrays.append(pad.copy())
            elif n == len(pad):  # a full plan (a decode step): one conversion
                arrays.append(np.array(value, np.int32))
            else:
                a = pad.copy()
                a[:n] = value
                arrays.append(a)
        try:
            chosen = [out_index[o] for o in outputs]
        except KeyError as e:
            raise ValueError(f"outputs: plan {plan!r} has outputs {tuple(out_index)}, not {e.args[0]!r}") from None
        device_inputs = None
        if speculative:
            device_inputs = {inputs.index("tokens"): slot.output_view(out_index["argmax"], plan)}
        pending = await slot.start_run(arrays, plan, outputs=chosen, device_inputs=device_inputs,
                                       wait_for_list=not speculative)
        return StepRun(pending, outputs)

    async def run(self, slot: Any, plan: str, *, outputs: Sequence[str] = ("argmax",),
                  **inputs: Any) -> dict[str, np.ndarray]:
        """``start`` (not speculative) and await the result: output name -> array."""
        return await (await self.start(slot, plan, outputs=outputs, **inputs)).result()
