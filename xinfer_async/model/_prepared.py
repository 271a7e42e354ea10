"""``PreparedModel``: a bounded pool of fixed-address inference slots sharing one definition's
weights. Each slot owns its private scratch and persistent state, so each plan's commands are
recorded once per slot and replayed (cuda: a CUDA graph per slot and plan)."""

from __future__ import annotations

import dataclasses
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, AsyncIterator, Sequence

import numpy as np
import trio

from ..hal import TensorDesc, ValidationError
from ..ops import Gemm
from ..runtime import BufferView, CapturedGraph, Completion, DeviceBuffer, Executor, Readback
from ._graph import Graph, GraphAlloc, GraphCopy, GraphDispatch, GraphFill, GraphGemm, GraphTensor, Ref
from ._region import Allocation

if TYPE_CHECKING:  # annotations only: the definition module imports this one
    from ._definition import ModelDefinition


@dataclasses.dataclass(frozen=True)
class DeviceTensor:
    """A tensor on the device: description, buffer view, and the ``Completion`` that writes it."""

    desc: TensorDesc
    view: BufferView
    completion: Completion | None


class PendingRun(Completion):
    """A submitted run of a slot whose outputs are not read yet (``Slot.start_run``): a
    ``Completion`` at the run's fence value (``await run.wait()``, ``run.done()``) whose command
    list stays taken until ``result()`` or ``settle()``, so its readbacks stay valid.

    Attributes:
        completion: the ``Completion`` it was made from (same queue and fence value).
    """

    def __init__(self, slot: "Slot", plan: str | None, outputs: list[int], lease: Any, readbacks: list,
                 completion: Completion):
        super().__init__(completion.queue, completion.value)
        self.slot, self.plan, self.outputs = slot, plan, outputs
        self.completion = completion
        self._lease, self._readbacks = lease, readbacks

    async def result(self) -> list[np.ndarray]:
        """Await the fence; the downloaded outputs (as ``Slot.run`` returns them). Gives the
        command list back, also when cancelled (the pool then takes it after the fence)."""
        try:
            await self.wait()
            return self.slot.read_outputs(self._readbacks, self.plan, self.outputs)
        finally:
            await self.settle()

    async def discard(self) -> None:
        """Give the command list back without waiting or reading (the pool takes it back after the
        fence; the slot too, after ``completion``). Idempotent."""
        if self._lease is not None:
            lease, self._lease = self._lease, None
            await lease.__aexit__(None, None, None)

    async def settle(self) -> None:
        """Await the fence and give the command list back (also when the wait is cancelled: the
        pool then takes it back after the fence). Idempotent."""
        try:
            if not self.done():
                await self.wait()
        finally:
            await self.discard()


@dataclasses.dataclass(frozen=True)
class PreparedStatistics:
    capacity: int
    busy: int
    max_busy: int
    waiting_tasks: int
    runs: int
    private_bytes_per_slot: int
    weight_bytes: int


class _Plan:
    def __init__(self, name: str, graph: Graph, inputs: Sequence[GraphTensor], outputs: Sequence[GraphTensor]):
        for t in list(inputs) + list(outputs):
            if t.graph is not graph:
                raise ValidationError(f"plan {name!r}: a tensor of another graph")
        self.name, self.graph, self.inputs, self.outputs = name, graph, list(inputs), list(outputs)


class Slot:
    """One inference slot: private buffers at fixed addresses, one captured graph per plan.

    Held through ``PreparedModel.slot()``; persistent state survives between runs of this slot
    and no other slot sees it.
    """

    def __init__(self, prepared: "PreparedModel", index: int):
        self.prepared = prepared
        self.index = index
        self.device = prepared.device
        self._buffers: dict[GraphAlloc | Allocation, DeviceBuffer] = {}  # state: by its Allocation
        for plan in prepared.plans.values():
            for ga in plan.graph.allocs:
                key = ga.source if ga.kind == "state" else ga
                if key not in self._buffers:
                    # float32 elements, so fills take float values (NaN poisoning included)
                    self._buffers[key] = self.device.alloc(-(-ga.nbytes // 4), "f32")
        self._last: Completion | None = None
        self._graphs: dict[str, CapturedGraph] = {}
        self._workspace: DeviceBuffer | None = None
        self._gemm_ops: dict[tuple[int, int, int], Gemm] = {}
        # one GEMM workspace for every plan of the slot: its runs go one after another (the model's
        # queue), so its GEMMs never overlap; not shared with other slots, whose runs may be
        # recorded into any command list (record_run); none where no GEMM needs one
        ws = max((self._gemm(cmd).workspace_nbytes for plan in prepared.plans.values()
                  for cmd in plan.graph.commands if type(cmd) is GraphGemm), default=0)
        if ws:
            self._workspace = self.device.alloc(ws, "u8")
        ex = self.device.executor(queue=prepared.queue)
        for buf in self._buffers.values():
            ex.fill(buf, 0.0)
        ex.submit()
        prepared.queue.fence.wait_blocking(ex.fence_value)
        for name, plan in prepared.plans.items():
            rec = self.device.executor(queue=prepared.queue)
            self._record(rec, plan)
            self._graphs[name] = rec.capture()

    def _gemm(self, cmd: GraphGemm) -> Gemm:
        """The compiled ``ops.Gemm`` of ``cmd``'s shape, made once a slot (sizing the workspace and
        recording use the same one; each record binds it, then dispatches it)."""
        key = (cmd.m, cmd.n, cmd.k)
        if key not in self._gemm_ops:
            self._gemm_ops[key] = Gemm.create(self.device, cmd.m, cmd.n, cmd.k, "f16", trans_b=True,
                                              out_dtype="f32").compile()
        return self._gemm_ops[key]

    def _buffer(self, ga: GraphAlloc) -> DeviceBuffer:
        return self._buffers[ga.source if ga.kind == "state" else ga]

    def _view(self, ref: Ref) -> BufferView:
        owner, offset, nbytes = ref
        buf = owner.buffer if not isinstance(owner, GraphAlloc) else self._buffer(owner)
        return buf.view(offset, nbytes)

    def _record(self, ex: Executor, plan: _Plan) -> None:
        for cmd in plan.graph.commands:
            kind = type(cmd)
            if kind is GraphDispatch:
                ex.dispatch(self.device.kernel(cmd.kernel), [self._view(r) for r in cmd.refs], cmd.constants, cmd.grid)
            elif kind is GraphFill:
                ex.fill(self._view(cmd.ref), cmd.value)
            elif kind is GraphCopy:
                ex.copy(self._view(cmd.dst), self._view(cmd.src))
            elif kind is GraphGemm:  # the Operator lifecycle: create -> compile -> bind -> dispatch
                op = self._gemm(cmd)
                op.bind(self._view(cmd.a), self._view(cmd.b), self._view(cmd.c), self._workspace)
                op.dispatch(ex)
            else:
                raise TypeError(f"plan {plan.name!r}: not a graph command: {cmd!r}")

    def tensor_view(self, t: GraphTensor) -> BufferView:
        return self._buffer(t.alloc).view(t.offset, t.desc.nbytes)

    @property
    def private_bytes(self) -> int:
        return sum(b.nbytes for b in self._buffers.values()) + (self._workspace.size_in_bytes if self._workspace else 0)

    def busy(self) -> bool:
        return self._last is not None and not self._last.is_complete()

    def _plan(self, plan: str | None) -> _Plan:
        plans = self.prepared.plans
        if plan is None:
            if len(plans) != 1:
                raise ValueError(f"plan must be named; this model has plans {sorted(plans)}")
            return next(iter(plans.values()))
        try:
            return plans[plan]
        except KeyError:
            raise ValueError(f"plan={plan!r} is not one of {sorted(plans)}") from None

    def output_view(self, index: int, plan: str | None = None) -> BufferView:
        """The device view of output ``index`` of ``plan`` in this slot (valid until the next run
        of a plan that writes it), e.g. a ``device_inputs`` source of the next run."""
        p = self._plan(plan)
        return self.tensor_view(p.outputs[self._output_indices(p, [index])[0]])

    def record_run(self, ex: Any, inputs: Sequence[Any], plan: str | None = None, download: bool = True,
                   outputs: Sequence[int] | None = None, device_inputs: dict[int, Any] | None = None):
        """Record uploads of ``inputs``, the plan's replay and (optionally) downloads of the
        outputs numbered in ``outputs`` (default: all) into the command list ``ex``; returns the
        readbacks.

        ``device_inputs``: input number -> a device view of the input's byte size, copied on the
        device instead of uploading ``inputs[i]`` (which is then ignored): e.g. the token a previous
        run sampled, so the next run can be submitted before the host has read it.

        Raises:
            ValueError: a wrong input count, shape, dtype or byte count (naming the input).
        """
        p = self._plan(plan)
        if len(inputs) != len(p.inputs):
            raise ValueError(f"plan {p.name!r} takes {len(p.inputs)} inputs, got {len(inputs)}")
        device_inputs = device_inputs or {}
        for i, (data, t) in enumerate(zip(inputs, p.inputs)):
            if i in device_inputs:
                src = device_inputs[i]
                if src.nbytes != t.desc.nbytes:
                    raise ValueError(f"input {i}: a device input of {src.nbytes} bytes for {t.desc.nbytes}")
                ex.copy(self.tensor_view(t), src)
            else:
                ex.upload(self.tensor_view(t), _check_input(i, data, t.desc))
        ex.replay(self._graphs[p.name])
        if not download:
            return []
        return [ex.download(self.tensor_view(p.outputs[i])) for i in self._output_indices(p, outputs)]

    def read_outputs(self, readbacks: Sequence[Any], plan: str | None = None,
                     outputs: Sequence[int] | None = None) -> list[np.ndarray]:
        """The arrays of ``record_run``'s readbacks (after the fence), as ``run`` returns them."""
        p = self._plan(plan)
        return [_as_array(rb, p.outputs[i].desc) for rb, i in zip(readbacks, self._output_indices(p, outputs))]

    def submit_recorded(self, ex: Any) -> int:
        """Submit a command list holding ``record_run``s of this slot; the slot is given back
        only after its fence (like ``run``'s). Returns the fence value."""
        value = ex.submit()
        self._last = ex.completion()
        self.prepared._runs += 1
        return value

    @staticmethod
    def _output_indices(p: _Plan, outputs: Sequence[int] | None) -> list[int]:
        if outputs is None:
            return list(range(len(p.outputs)))
        for i in outputs:
            if not 0 <= i < len(p.outputs):
                raise ValueError(f"outputs: plan {p.name!r} has {len(p.outputs)} outputs, no output {i}")
        return list(outputs)

    async def run(self, inputs: Sequence[Any], plan: str | None = None,
                  outputs: Sequence[int] | None = None) -> list[np.ndarray]:
        """Upload inputs, replay the plan, download the outputs; await the fence.

        Args:
            outputs: numbers of the outputs to download (default: all), e.g. only the sampled
                token ids and not the logits.

        Returns:
            one numpy array per downloaded output, of its descriptor's shape and dtype (raw
            ``uint8`` for block types).
        """
        return await (await self.start_run(inputs, plan, outputs)).result()

    async def start_run(self, inputs: Sequence[Any], plan: str | None = None, outputs: Sequence[int] | None = None,
                        device_inputs: dict[int, Any] | None = None, wait_for_list: bool = True) -> PendingRun:
        """Take a command list, record the run (``record_run``) and submit it; returns before the
        device finishes, so the caller can submit the next run first (pipelining). With a list free,
        the run is submitted before this task yields (its schedule point comes after the submission),
        so the device starts before the tasks the yield lets run; a call cancelled on entry takes no
        list.

        Args:
            device_inputs: see ``record_run``.
            wait_for_list: False: raise ``trio.WouldBlock`` instead of waiting when no command list
                is free (a task that already holds one must not wait for a second).

        Raises:
            trio.WouldBlock: ``wait_for_list`` is False and no list is free.
            ValueError: as ``record_run``.
        """
        p = self._plan(plan)
        chosen = self._output_indices(p, outputs)
        pool = self.device.command_lists
        if wait_for_list:
            await trio.lowlevel.checkpoint_if_cancelled()
        parked = False
        try:
            lease = pool.acquire_nowait(self.prepared.queue)
            ex = lease.__enter__()
        except trio.WouldBlock:
            if not wait_for_list:
                raise
            lease = pool.acquire(self.prepared.queue)
            ex = await lease.__aenter__()  # parks until a list is returned
            parked = True
        try:
            readbacks = self.record_run(ex, inputs, plan, outputs=chosen, device_inputs=device_inputs)
            value = self.submit_recorded(ex)
        except BaseException:
            await lease.__aexit__(None, None, None)
            raise
        run = PendingRun(self, plan, chosen, lease, readbacks, Completion(ex.queue, value))
        if wait_for_list and not parked:
            await trio.lowlevel.cancel_shielded_checkpoint()  # the schedule point, after the submission
        return run

    def submit(self, inputs: Sequence[Any], plan: str | None = None) -> list[DeviceTensor]:
        """Record and submit a run without downloading; returns the outputs as ``DeviceTensor``s."""
        p = self._plan(plan)
        ex = self.device.executor(queue=self.prepared.queue)
        self.record_run(ex, inputs, plan, download=False)
        ex.submit()
        self._last = ex.completion()
        self.prepared._runs += 1
        return [DeviceTensor(t.desc, self.tensor_view(t), self._last) for t in p.outputs]

    async def fill_private(self, value: float) -> None:
        """Fill every private buffer of this slot (scratch and state) with ``value`` (e.g. NaN)."""
        ex = self.device.executor(queue=self.prepared.queue)
        for buf in self._buffers.values():
            ex.fill(buf, value)
        ex.submit()
        self._last = ex.completion()
        await self._last.wait()

    async def reset_state(self) -> None:
        """Zero this slot's persistent state."""
        await self.fill_private(0.0)

    def _release_buffers(self) -> None:
        for g in self._graphs.values():
            g.destroy()
        for buf in self._buffers.values():
            buf.free()
        if self._workspace is not None:
            self._workspace.free()


class PreparedModel:
    """``capacity`` independent slots sharing a definition's weights.

    ``await prepared.run(inputs)`` takes a free slot (waiting when all are busy), uploads, submits,
    awaits the fence, downloads and returns the outputs. ``async with prepared.slot() as s`` holds
    one slot across several runs (a generation's steps). A slot goes back to the pool only when
    its last submission's fence completes, also when its holder is cancelled.
    """

    def __init__(self, definition: ModelDefinition, plans: dict[str, tuple[Graph, list[GraphTensor], list[GraphTensor]]],
                 capacity: int):
        if not isinstance(capacity, int) or capacity < 1:
            raise ValueError(f"capacity must be a positive int, got {capacity!r}")
        if not plans:
            raise ValueError("plans must not be empty")
        self.definition = definition
        self.device = definition.device
        self.queue = definition.context.queue
        self.plans = {name: _Plan(name, *spec) for name, spec in plans.items()}
        layouts = self.device.backend.device_layouts
        for plan in self.plans.values():
            if plan.graph.definition is not definition:
                raise ValidationError(f"plan {plan.name!r}: the graph belongs to another model definition")
            for what, ts in (("input", plan.inputs), ("output", plan.outputs)):
                for i, t in enumerate(ts):
                    # a slot's buffers are f32 (Slot): their host copies would skip the conversion
                    if t.desc.dtype.label in layouts:
                        raise ValueError(
                            f"plan {plan.name!r}: {what} {i} is {t.desc.dtype.label}, which {self.device.name} keeps "
                            f"in a device layout of its own (hal/_layout.py); give it as a weight "
                            f"(ModelSession.weight), not as a graph {what}")
        self.capacity = capacity
        self.slots = [Slot(self, i) for i in range(capacity)]
        self._free = list(reversed(self.slots))
        self._lot = trio.lowlevel.ParkingLot()
        self._busy = 0
        self._max_busy = 0
        self._runs = 0
        self._closed = False
        self._idle: trio.Event | None = None

    async def _acquire(self) -> Slot:
        await trio.lowlevel.checkpoint_if_cancelled()
        while not self._free or self._closed:
            if self._closed:
                raise trio.ClosedResourceError("prepared model is closed")
            await self._lot.park()
        slot = self._free.pop()
        self._busy += 1
        self._max_busy = max(self._max_busy, self._busy)
        await trio.lowlevel.cancel_shielded_checkpoint()
        return slot

    def _release(self, slot: Slot) -> None:
        if slot.busy():
            trio.lowlevel.spawn_system_task(self._release_after_fence, slot, name="xinfer_async.slot-reclaim")
        else:
            self._return(slot)

    async def _release_after_fence(self, slot: Slot) -> None:
        try:
            await slot._last.wait()
        except trio.Cancelled:
            # system tasks are cancelled when their trio.run ends; the slot must still come back
            # (a later run may use this model), and only after its fence: wait without trio
            try:
                slot._last.wait_blocking()
            except Exception:
                pass
            raise
        except Exception:
            pass
        finally:
            self._return(slot)

    async def wait_idle(self) -> None:
        """Wait until no slot is held (each comes back after its last fence)."""
        while self._busy:
            if self._idle is None:
                self._idle = trio.Event()
            await self._idle.wait()

    def _return(self, slot: Slot) -> None:
        self._busy -= 1
        self._free.append(slot)
        if self._busy == 0 and self._idle is not None:
            self._idle.set()
            self._idle = None
        if self._closed:  # closed while this slot was held: its buffers go now
            slot._release_buffers()
        self._lot.unpark()

    @asynccontextmanager
    async def slot(self) -> AsyncIterator[Slot]:
        """Hold a free slot for the block (waits when all are busy)."""
        s = await self._acquire()
        try:
            yield s
        finally:
            self._release(s)

    def slot_nowait(self) -> Slot:
        """Take a free slot now (release it with ``release(slot)``).

        Raises:
            trio.WouldBlock: every slot is busy.
            trio.ClosedResourceError: the model was closed.
        """
        if self._closed:
            raise trio.ClosedResourceError("prepared model is closed")
        if not self._free:
            raise trio.WouldBlock
        slot = self._free.pop()
        self._busy += 1
        self._max_busy = max(self._max_busy, self._busy)
        return slot

    def release(self, slot: Slot) -> None:
        self._release(slot)

    async def run(self, inputs: Sequence[Any], plan: str | None = None,
                  outputs: Sequence[int] | None = None) -> list[np.ndarray]:
        """Run on any free slot; see ``Slot.run``."""
        async with self.slot() as s:
            return await s.run(inputs, plan, outputs)

    def statistics(self) -> PreparedStatistics:
        return PreparedStatistics(self.capacity, self._busy, self._max_busy, self._lot.statistics().tasks_waiting,
                                  self._runs, self.slots[0].private_bytes, self.definition.weight_bytes())

    def close(self) -> None:
        """Release every slot's buffers (after their fences; a slot still held, when its holder
        returns it). The weights stay with the definition."""
        if not self._closed:
            self._closed = True
            for s in self._free:  # held slots release theirs when their holder returns them
                s._release_buffers()
            self._lot.unpark_all()


def _check_input(i: int, data: Any, desc: TensorDesc) -> Any:
    if isinstance(data, np.ndarray):
        nt = desc.dtype.numpy_type
        if nt is not None and data.dtype != np.dtype(nt):
            raise ValueError(f"input {i}: dtype {data.dtype} does not match {desc.dtype.label}")
        if nt is not None and tuple(data.shape) != tuple(desc.shape):
            raise ValueError(f"input {i}: shape {tuple(data.shape)} does not match {desc.shape}")
        if data.nbytes != desc.nbytes:
            raise ValueError(f"input {i}: {data.nbytes} bytes, expected {desc.nbytes}")
        return data
    try:
        n = memoryview(data).nbytes
    except TypeError:
        raise TypeError(f"input {i}: expected a numpy array or bytes, got {type(data).__name__}") from None
    if n != desc.nbytes:
        raise ValueError(f"input {i}: {n} bytes, expected {desc.nbytes}")
    return data


def _as_array(readback: Readback, desc: TensorDesc) -> np.ndarray:
    nt = desc.dtype.numpy_type
    if nt is None:
        return np.frombuffer(readback.bytes(), np.uint8).copy()
    return readback.numpy(desc.shape, nt).copy()
