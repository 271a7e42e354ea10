"""CUDA graphs: a captured command list (``Backend.capture``) becomes an instantiated CUDA graph,
replayed by the ``ReplayCmd(g)`` command."""

from __future__ import annotations

from typing import Any, Callable, Sequence

from ...hal._commands import CAPTURABLE, Command
from . import _driver
from ._driver import check, ffi

class CUDAGraph:
    """A captured, instantiated CUDA graph; ``ReplayCmd(g)`` launches it."""

    def __init__(self, graph, exec_):
        self.graph, self.exec = graph, exec_


class GraphCapture:
    """Captures command lists on a stream of its own (created on first use).

    Args:
        lib: the driver library.
        enqueue: ``(stream, command)`` -> None, the backend's lowering of one command.
    """

    def __init__(self, lib: Any, enqueue: Callable[[Any, Command], None]):
        self._lib, self._enqueue, self._stream = lib, enqueue, None

    @staticmethod
    def validate(commands: Sequence[Command]) -> None:
        """Raises: ValueError: a command that cannot be captured (upload, download, timestamp, graph)."""
        for cmd in commands:
            if not isinstance(cmd, CAPTURABLE):
                raise ValueError(f"command {getattr(cmd, 'kind', cmd)!r} cannot be captured into a graph")

    def capture(self, commands: Sequence[Command]) -> CUDAGraph:
        """Capture ``commands`` (validated, context current) into an instantiated CUDA graph.

        Raises:
            DeviceError: capture or instantiation failed.
        """
        lib = self._lib
        if self._stream is None:
            s = ffi.new("CUstream *")
            check(lib.cuStreamCreate(s, _driver.CU_STREAM_NON_BLOCKING), "cuStreamCreate")
            self._stream = s[0]
        stream = self._stream
        check(lib.cuStreamBeginCapture_v2(stream, _driver.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL), "cuStreamBeginCapture")
        graph = ffi.new("CUgraph *")
        try:
            for cmd in commands:
                self._enqueue(stream, cmd)
        except BaseException:
            if lib.cuStreamEndCapture(stream, graph) == 0 and graph[0] != ffi.NULL:
                lib.cuGraphDestroy(graph[0])
            raise
        check(lib.cuStreamEndCapture(stream, graph), "cuStreamEndCapture")
        exe = ffi.new("CUgraphExec *")
        status = lib.cuGraphInstantiateWithFlags(exe, graph[0], 0)
        if status:
            lib.cuGraphDestroy(graph[0])
            check(status, "cuGraphInstantiate")
        return CUDAGraph(graph[0], exe[0])

    def destroy(self, graph: CUDAGraph) -> None:
        """Release ``graph`` (context current)."""
        check(self._lib.cuGraphExecDestroy(graph.exec), "cuGraphExecDestroy")
        check(self._lib.cuGraphDestroy(graph.graph), "cuGraphDestroy")

    def close(self) -> None:
        """Destroy the capture stream (context current)."""
        if self._stream is not None:
            self._lib.cuStreamDestroy_v2(self._stream)
            self._stream = None
