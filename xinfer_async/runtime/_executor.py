"""``Executor``: a one-shot command list with resource-state tracking and the validation layer.

Recording checks every command at once (bounds, lifetime, states, hazards) and lowers it to the
backend's typed commands (``hal/_commands.py``); ``submit`` hands them to a queue.

Resource states follow D3D12: a copy reads ``COPY_SOURCE`` and writes ``COPY_DEST``; a dispatch reads
``SHADER_READ`` and writes ``UNORDERED_ACCESS`` (a buffer already in ``UNORDERED_ACCESS`` may also be
read there). ``ensure_state`` records a transition barrier only when the state changes. With
``auto_barriers=True`` (the default) every command transitions its buffers and inserts a UAV barrier
where a byte range written by one command is touched by another; with ``auto_barriers=False`` the
caller records them, and the validation layer raises ``ValidationError`` on a wrong state or an
unordered hazard.
"""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING, Any, Callable, Iterable, Sequence

import numpy as np

from ..hal import Access, ResourceState, ValidationError
from ..hal._commands import (Command, CopyCmd, DispatchCmd, DownloadCmd, FillCmd, ReplayCmd, TimestampCmd,
                            UploadCmd)
from ..hal._layout import ALIGN, check_whole_blocks, enclosing_blocks, gguf_span, to_device_layout
from ._buffer import BufferView, DeviceBuffer, as_view, host_bytes
from ._completion import Completion
from ._queue import Queue

if TYPE_CHECKING:  # annotations only: the device module imports this one
    from ._device import Device

_S = ResourceState


class _Phase(enum.Enum):
    RECORDING = "recording"
    SUBMITTED = "submitted"


class Readback(Completion):
    """Host bytes that a recorded ``download`` fills: a ``Completion`` (bound when the list is
    submitted) whose bytes are readable once it is done.

    Args:
        host: the ``uint8`` array the download fills.
        transform: ``host -> uint8 array`` applied when the bytes are read (the conversion from a
            device layout to GGUF's, ``hal/_layout.py``); None: the bytes as they are.
    """

    def __init__(self, host: np.ndarray, transform: Callable[[np.ndarray], np.ndarray] | None = None):
        super().__init__()
        self._host = host
        self._transform = transform

    def ready(self) -> bool:
        """Same as ``done()``: the bytes are readable."""
        return self.done()

    def bytes(self) -> bytes:
        """Raises: ValidationError: the list was not submitted or its fence has not completed."""
        if not self.done():
            raise ValidationError("readback is not ready: await the command list's fence first")
        if self._transform is not None:
            return self._transform(self._host).tobytes()
        return self._host.tobytes()

    def numpy(self, shape=None, dtype=np.float32) -> np.ndarray:
        """The bytes as an array (copied), reshaped to ``shape`` when given."""
        raw = np.frombuffer(self.bytes(), dtype)
        return raw.reshape(shape) if shape is not None else raw


class Executor:
    """A command list: record commands, ``submit`` once, await its fence, ``reset`` to reuse.

    Args:
        device: the owning device.
        queue: the queue ``submit`` uses (the device's default queue).
        auto_barriers: record transitions and UAV barriers automatically (see the module doc).

    Attributes:
        transition_count: transition barriers recorded since the last reset.
        uav_barrier_count: UAV barriers recorded since the last reset.
        fence_value: the queue fence value of the submission (``None`` before ``submit``).
    """

    def __init__(self, device: Device, *, queue: Queue | None = None, auto_barriers: bool = True):
        self.device = device
        self.queue = queue if queue is not None else device.queue
        self.auto_barriers = auto_barriers
        self._reset_state()

    def _reset_state(self) -> None:
        self._phase = _Phase.RECORDING
        self._epoch = self.device.free_epoch  # every buffer recorded from here on was live then
        self._lowered: list[Command] = []
        self._keepalive: list[Any] = []
        self._used: dict[DeviceBuffer, None] = {}
        self._entry: dict[DeviceBuffer, ResourceState] = {}
        # per buffer since its last barrier: (reads, writes), each {byte range: first command}; or
        # an int, the command (a graph replay) that wrote all of it (``_pending_of``)
        self._pending: dict[DeviceBuffer, Any] = {}
        self._host_io = False
        self._completions: list[Completion] = []  # readbacks and tracked completions, bound at submit
        self._n_commands = 0
        self.transition_count = 0
        self.uav_barrier_count = 0
        self.fence_value: int | None = None

    @property
    def commands(self) -> Sequence[Command]:
        """The lowered commands recorded so far (read-only view for inspection)."""
        return tuple(self._lowered)

    # -- barriers and validation -----------------------------------------------------------
    def _check_recording(self) -> None:
        if self._phase is not _Phase.RECORDING:
            raise ValidationError("command list was submitted: call reset() before recording again")

    def _touch(self, buf: DeviceBuffer) -> None:
        if buf not in self._used:
            self._used[buf] = None
            self._entry[buf] = buf.state

    def ensure_state(self, buffer: DeviceBuffer | BufferView, state: ResourceState) -> bool:
        """Record a transition barrier if ``buffer`` is not in ``state``; returns whether one was
        recorded. A transition orders every earlier access to the buffer before later ones."""
        self._check_recording()
        buf = as_view(buffer, self.device, "buffer").buffer
        self._touch(buf)
        if buf.state is state:
            return False
        buf.state = state
        self.transition_count += 1
        self._pending.pop(buf, None)
        return True

    def uav_barrier(self, buffer: DeviceBuffer | BufferView) -> None:
        """Order every earlier access to ``buffer`` before later ones (cpu and one cuda stream:
        ordering only, no device work)."""
        self._check_recording()
        buf = as_view(buffer, self.device, "buffer").buffer
        self._touch(buf)
        self.uav_barrier_count += 1
        self._pending.pop(buf, None)

    def _access(self, accesses: Iterable[tuple[BufferView, Access, ResourceState, str]]) -> None:
        """Transition/validate then hazard-check the bindings of one command."""
        accesses = list(accesses)
        for view, access, state, arg in accesses:
            buf = view.buffer
            self._touch(buf)
            reads_uav = access is Access.READ and buf.state is _S.UNORDERED_ACCESS and state is _S.SHADER_READ
            if buf.state is not state and not reads_uav:
                if self.auto_barriers:
                    self.ensure_state(buf, state)
                elif self.device.validate:
                    raise ValidationError(
                        f"{arg}: buffer #{buf.id} is in state {buf.state.name} but this command needs "
                        f"{state.name}; record ensure_state(buffer, ResourceState.{state.name}) first"
                    )
        for view, access, state, arg in accesses:
            buf = view.buffer
            lo, hi, writes = view.offset, view.offset + view.nbytes, bool(access & Access.WRITE)
            pending = self._pending_of(buf)
            if pending is None:
                continue
            reads, written = pending
            hazard = _overlap(written, lo, hi, "writes") or (_overlap(reads, lo, hi, "reads") if writes else None)
            if hazard is None:
                continue
            if self.auto_barriers:
                self.uav_barrier(buf)
            elif self.device.validate:
                (plo, phi), idx, what = hazard
                raise ValidationError(
                    f"{arg}: bytes [{lo}:{hi}] of buffer #{buf.id} are "
                    f"{'written' if writes else 'read'} while command #{idx} {what} "
                    f"[{plo}:{phi}] without a barrier in between; record uav_barrier(buffer)"
                )
        for view, access, state, arg in accesses:
            # per buffer: the byte ranges read and written since its last barrier, each with the
            # first command that touched it (identical ranges are kept once: recording stays O(1)
            # per command however often a buffer is read)
            reads, written = self._pending_of(view.buffer) or self._pending.setdefault(view.buffer, ({}, {}))
            (written if access & Access.WRITE else reads).setdefault(
                (view.offset, view.offset + view.nbytes), self._n_commands)

    def _pending_of(self, buf: DeviceBuffer) -> tuple[dict, dict] | None:
        """The (reads, writes) ranges of ``buf`` since its last barrier, or None; a whole-buffer write
        by a replay (kept as its command number) becomes its dicts here, on first use."""
        p = self._pending.get(buf)
        if type(p) is int:
            p = self._pending[buf] = ({}, {(0, buf.size_in_bytes): p})
        return p

    def _record(self, command: Command, accesses: Iterable[tuple[BufferView, Access, ResourceState, str]]) -> None:
        self._check_recording()
        self._access(accesses)
        self._lowered.append(command)
        self._n_commands += 1

    # -- commands --------------------------------------------------------------------------
    def copy(self, dst: DeviceBuffer | BufferView, src: DeviceBuffer | BufferView, nbytes: int | None = None) -> None:
        """Copy ``nbytes`` (default: all of ``src``) from ``src`` to ``dst`` (buffers or views).

        A dtype the backend keeps in a layout that depends on the address (``Backend.device_layouts``,
        ``hal/_layout.py``) is copied as it is, which keeps the layout only for whole blocks, from a
        block boundary of one buffer of that dtype to a block boundary of another at an address equal
        mod 16.

        Raises:
            ValueError: ``nbytes`` is negative or larger than either side; or one side's dtype has a
                device layout and the other side is not of that dtype, either side is not whole blocks
                from a block boundary of its buffer, or the addresses differ mod 16.
        """
        d = as_view(dst, self.device, "dst")
        s = as_view(src, self.device, "src")
        n = s.nbytes if nbytes is None else nbytes
        if n < 0 or n > s.nbytes or n > d.nbytes:
            raise ValueError(f"copy of nbytes={n}: src has {s.nbytes} bytes, dst has {d.nbytes}")
        if d.buffer is s.buffer and d.offset < s.offset + n and s.offset < d.offset + n:
            raise ValueError("copy: src and dst ranges overlap")
        layouts = self.device.backend.device_layouts
        dl, sl = d.buffer.dtype.label, s.buffer.dtype.label
        if n and (dl in layouts or sl in layouts):
            label = dl if dl in layouts else sl
            if dl != sl:
                raise ValueError(
                    f"copy from a {sl} buffer to a {dl} buffer: {self.device.name} keeps {label} in a device "
                    f"layout of its own (hal/_layout.py), so its bytes are copied only between {label} buffers")
            check_whole_blocks(label, s.offset, n, "copy (src)")
            check_whole_blocks(label, d.offset, n, "copy (dst)")
            if (d.address - s.address) % ALIGN:
                raise ValueError(
                    f"copy of {label} from address {s.address:#x} to {d.address:#x}: {self.device.name} keeps "
                    f"{label} blocks rotated by their address mod {ALIGN} (hal/_layout.py), so src and dst must be "
                    f"equal mod {ALIGN}; these differ by {(d.address - s.address) % ALIGN}")
        self._record(
            CopyCmd(d.address, s.address, n),
            [(s, Access.READ, _S.COPY_SOURCE, "src"), (d, Access.WRITE, _S.COPY_DEST, "dst")],
        )

    def fill(self, dst: DeviceBuffer | BufferView, value: float | int) -> None:
        """Fill ``dst`` with ``value`` in the buffer's own dtype (f32, f16, i32, u8), or with the raw
        32-bit ``value`` for other dtypes.

        Raises:
            ValueError: the byte count is not a multiple of 4; or ``dst``'s dtype has a device layout
                (``Backend.device_layouts``) and the fill is not whole blocks from a block boundary or
                its four bytes differ (a rotated block would show them in another order).
        """
        d = as_view(dst, self.device, "dst")
        if d.nbytes % 4:
            raise ValueError(f"fill: dst has {d.nbytes} bytes, not a multiple of 4")
        label = d.buffer.dtype.label
        pattern = _pattern(label, value)
        if d.nbytes and label in self.device.backend.device_layouts:
            check_whole_blocks(label, d.offset, d.nbytes, "fill")
            if pattern != (pattern & 0xFF) * 0x01010101:
                raise ValueError(f"fill of a {label} buffer with pattern {pattern:#010x}: {self.device.name} keeps "
                                 f"{label} blocks rotated by their address (hal/_layout.py), so only a pattern of "
                                 f"four equal bytes fills them as it would GGUF's bytes")
        self._record(FillCmd(d.address, d.nbytes, pattern), [(d, Access.WRITE, _S.COPY_DEST, "dst")])

    def upload(self, dst: DeviceBuffer | BufferView, data: Any) -> None:
        """Copy host ``data`` (snapshotted now) into ``dst`` when the list executes. For a dtype the
        backend keeps in a layout of its own (``Backend.device_layouts``) ``data`` is GGUF's bytes,
        converted now.

        Raises:
            ValueError: ``data`` is larger than ``dst``; or ``dst``'s dtype has a device layout and
                ``data`` is not whole blocks starting at a block boundary of the buffer.
        """
        d = as_view(dst, self.device, "dst")
        src = host_bytes(data)
        if src.nbytes > d.nbytes:
            raise ValueError(f"upload of {src.nbytes} bytes into dst of {d.nbytes} bytes")
        label = d.buffer.dtype.label
        laid_out = bool(src.nbytes) and label in self.device.backend.device_layouts
        if laid_out:
            check_whole_blocks(label, d.offset, src.nbytes, "upload")
        host = self.device.backend.host_array(src.nbytes)
        if laid_out:
            to_device_layout(label, src, d.address, out=host)
        else:
            host[:] = src
        self._keepalive.append(host)
        self._host_io = True
        self._record(UploadCmd(d.address, host), [(BufferView(d.buffer, d.offset, host.nbytes), Access.WRITE, _S.COPY_DEST, "dst")])

    def download(self, src: DeviceBuffer | BufferView, nbytes: int | None = None) -> Readback:
        """Copy the first ``nbytes`` (default: all) of ``src`` to host memory when the list executes;
        read the ``Readback`` after the fence. For a dtype the backend keeps in a layout of its own
        (``Backend.device_layouts``) the readback gives GGUF's bytes (part of a block: the whole
        blocks around it are copied and converted when read).

        Raises:
            ValueError: ``nbytes`` is negative or larger than ``src``.
        """
        s = as_view(src, self.device, "src")
        n = s.nbytes if nbytes is None else nbytes
        if n < 0 or n > s.nbytes:
            raise ValueError(f"download of nbytes={n} from src of {s.nbytes} bytes")
        label = s.buffer.dtype.label
        lo, hi, transform = s.offset, s.offset + n, None
        if n and label in self.device.backend.device_layouts:
            lo, hi = enclosing_blocks(label, s.offset, n)
            start, cut = s.buffer.address + lo, s.offset - lo

            def transform(host: np.ndarray) -> np.ndarray:
                return gguf_span(label, host, start, cut, n)

        host = self.device.backend.host_array(hi - lo)
        self._keepalive.append(host)
        self._host_io = True
        self._record(DownloadCmd(s.buffer.address + lo, host),
                     [(BufferView(s.buffer, lo, hi - lo), Access.READ, _S.COPY_SOURCE, "src")])
        rb = Readback(host, transform)
        self._completions.append(rb)
        return rb

    def dispatch(self, kernel: Any, bindings: Sequence[Any], constants: Any = None, grid: Any = None) -> None:
        """Record a compute kernel launch.

        Args:
            kernel: a ``ComputeKernel`` or a kernel name (``native/KERNELS.md``).
            bindings: buffers or views, in the kernel's binding order.
            constants: a dict (or sequence in order) of the kernel's constants.
            grid: ``(x, y, z)`` blocks; default: the kernel's launch config for these constants.

        Raises:
            ValueError / TypeError: a binding too small for the constants, a wrong count, a bad
                constant (each message names the binding or constant).
        """
        if isinstance(kernel, str):
            kernel = self.device.kernel(kernel)
        views, accesses, packed, launch = kernel.bind(bindings, constants)
        self._record(
            DispatchCmd(kernel.handle, grid if grid is not None else launch, [v.address for v in views], packed),
            [(v, a, _S.UNORDERED_ACCESS if a & Access.WRITE else _S.SHADER_READ, f"binding {i} ({name})")
             for i, (v, a, name) in enumerate(accesses)],
        )

    def record_operator(self, command: Command, accesses: Sequence[tuple[BufferView, Access, str]]) -> None:
        """Record a lowered vendor-library command (``Operator.dispatch`` calls this)."""
        self._record(command, [(v, a, _S.UNORDERED_ACCESS if a & Access.WRITE else _S.SHADER_READ, n)
                               for v, a, n in accesses])

    def _track_completion(self) -> Completion:
        """A ``Completion`` of this recording, bound when it is submitted (it stays valid after the
        list is reset; ``GpuTimer`` uses it)."""
        c = Completion()
        self._completions.append(c)
        return c

    def timestamp(self) -> Any:
        """Record a device timestamp; returns the slot (read through ``GpuTimer``)."""
        self._check_recording()
        ts = self.device.backend.create_timestamp()
        self._lowered.append(TimestampCmd(ts))
        self._host_io = True
        self._n_commands += 1
        return ts

    # -- graphs ----------------------------------------------------------------------------
    def capture(self) -> "CapturedGraph":
        """Turn the recorded commands into a replayable graph (cuda: a CUDA graph) and reset.

        The graph keeps the buffers' addresses: replaying it after one was freed raises.

        Raises:
            ValidationError: the list holds uploads, downloads or timestamps (host I/O cannot be
                captured) or was submitted.
        """
        self._check_recording()
        if self._host_io:
            raise ValidationError("capture: uploads, downloads and timestamps cannot be captured; record them around replay()")
        graph = CapturedGraph(self.device, self.device.backend.capture(self._lowered), dict(self._entry),
                              {b: b.state for b in self._used}, tuple(self._lowered))
        for b, s in self._entry.items():  # capture does not execute: states stay as they were
            b.state = s
        self._reset_state()
        return graph

    def replay(self, graph: "CapturedGraph") -> None:
        """Record one replay of ``graph``.

        Raises:
            ValidationError: a buffer the graph uses was freed since capture, or the graph was
                destroyed.
        """
        self._check_recording()
        if graph.destroyed:
            raise ValidationError("replay of a destroyed graph")
        if graph.live_epoch != graph.device.free_epoch:  # some buffer was freed since the last check
            for buf in graph.entry:
                if buf.freed:
                    raise ValidationError(f"replay: buffer #{buf.id} used by the graph was freed after capture")
            graph.live_epoch = graph.device.free_epoch
        # hot path (every decode step; a graph holds a few hundred buffers, one per weight): the
        # bookkeeping of ensure_state for each, in bulk. The graph's buffers end in its exit states,
        # with every byte counted as written by the replay, so their states on entry matter only
        # for the transition count, and their pending ranges are replaced.
        used, ge = self._used, graph.entry
        new = ge.keys() - used.keys()
        if new:
            used.update(dict.fromkeys(new))
            self._entry.update({buf: buf.state for buf in new})
        self.transition_count += sum(1 for buf, state in ge.items() if buf.state is not state)
        self._lowered.append(ReplayCmd(graph.handle))
        self._n_commands += 1
        last = self._n_commands - 1
        for buf, state in graph.exit.items():
            buf.state = state
        self._pending.update(dict.fromkeys(ge, last))  # each written whole by this replay (_pending_of)
        self._keepalive.append(graph)

    # -- submission ------------------------------------------------------------------------
    def submit(self) -> int:
        """Submit to the queue; returns the fence value to await.

        Raises:
            ValidationError: already submitted, or a recorded buffer was freed before submission.
            DeviceError: the device is lost.
        """
        self._check_recording()
        if self._epoch != self.device.free_epoch:  # a buffer was freed while this list recorded
            for buf in self._used:
                if buf.freed:
                    raise ValidationError(f"submit: buffer #{buf.id} was freed after it was recorded (use after free)")
        queue = self.queue
        # buffers another queue used: wait for those uses
        for buf in [b for b in self._used if (lu := b.last_use) and (len(lu) > 1 or queue not in lu)]:
            for q, v in buf.last_use.items():
                if q is not queue:
                    queue.wait_for(q, v)
        value = queue.submit_lowered(self._lowered, keepalive=self._keepalive)
        for buf in self._used:
            buf.last_use[queue] = value
        self.fence_value = value
        for c in self._completions:
            c._bind(queue, value)
        self._phase = _Phase.SUBMITTED
        return value

    def completion(self) -> Completion:
        """The ``Completion`` of this list's submission.

        Raises:
            ValidationError: the list was not submitted.
        """
        if self.fence_value is None:
            raise ValidationError("completion(): the command list was not submitted")
        return Completion(self.queue, self.fence_value)

    async def wait(self) -> None:
        """Await the fence of this list's submission.

        Raises:
            ValidationError: the list was not submitted.
        """
        if self.fence_value is None:
            raise ValidationError("wait(): the command list was not submitted")
        await self.queue.fence.wait(self.fence_value)

    async def submit_and_wait(self) -> int:
        """``submit()`` then await its fence; returns the fence value."""
        value = self.submit()
        await self.queue.fence.wait(value)
        return value

    def is_complete(self) -> bool:
        return self.fence_value is not None and self.queue.fence.completed_value >= self.fence_value

    def reset(self) -> None:
        """Make the list recordable again. Commands recorded but never submitted are dropped, and
        the buffers they touched get back the states they had before (nothing executed).

        Raises:
            ValidationError: its submission has not completed (a list still executing must not be
                reset).
        """
        if self._phase is _Phase.SUBMITTED and not self.is_complete():
            raise ValidationError(
                f"reset of a command list whose fence value {self.fence_value} has not completed"
            )
        if self._phase is _Phase.RECORDING:
            for buf, state in self._entry.items():
                buf.state = state
        self._reset_state()


class CapturedGraph:
    """A captured command list for replay with fixed addresses (see ``Executor.capture``)."""

    def __init__(self, device: Device, handle: Any, entry: dict[DeviceBuffer, ResourceState],
                 exit: dict[DeviceBuffer, ResourceState], commands: tuple[Command, ...] = ()):
        self.device = device
        self.handle = handle
        self.commands = commands  # the lowered commands it was captured from (runtime/_profile.py)
        self.entry = entry
        self.exit = exit
        self.destroyed = False
        self.live_epoch = -1  # device.free_epoch when every buffer of the graph was last seen live

    def destroy(self) -> None:
        if not self.destroyed:
            self.destroyed = True
            self.device.backend.destroy_graph(self.handle)


def _overlap(ranges: dict[tuple[int, int], int], lo: int, hi: int, verb: str):
    """The first recorded range overlapping ``[lo, hi)``: ((lo, hi), command index, verb), or None."""
    for (plo, phi), idx in ranges.items():
        if plo < hi and lo < phi:
            return (plo, phi), idx, verb
    return None


def _pattern(dtype_label: str, value: float | int) -> int:
    if dtype_label == "f32":
        return int(np.array([value], np.float32).view(np.uint32)[0])
    if dtype_label == "f16":
        h = int(np.array([value], np.float16).view(np.uint16)[0])
        return h | (h << 16)
    if dtype_label == "bf16":
        h = int(np.array([value], np.float32).view(np.uint32)[0]) >> 16
        return h | (h << 16)
    if dtype_label == "u8":
        b = int(value) & 0xFF
        return b * 0x01010101
    return int(np.array([value]).astype(np.int64)[0]) & 0xFFFFFFFF
