"""``ModelDefinition``: a frozen model (weights on the device, scratch as sizes) that builds
validated fragments and prepared models."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

from ..hal import Access, ValidationError
from ..ops import kernel_spec
from ._commands import Copy, Dispatch, Fill, Gemm, unpack_arguments
from ._graph import Graph, GraphTensor, ModelFragment
from ._prepared import PreparedModel
from ._region import Allocation, AllocationKind, IODesc, KernelId, Region

if TYPE_CHECKING:  # annotations only: the session module imports this one
    from ._session import ModelContext


class ModelDefinition:
    """Immutable weights shared once, private scratch sizes, kernels; from ``ModelSession.freeze``.

    Attributes:
        context: the ``ModelContext``.
        device: its device.
    """

    def __init__(self, token: object, context: ModelContext, allocations: list[Allocation], kernels: dict[str, KernelId]):
        self._token = token
        self.context = context
        self.device = context.device
        self.allocations = allocations
        self.kernels = kernels

    # -- queries ---------------------------------------------------------------------------
    def weight_bytes(self) -> int:
        """Bytes of weights on the device, each counted once however many plans and slots exist."""
        return sum(a.nbytes for a in self.allocations if a.kind is AllocationKind.WEIGHT)

    def launch_config(self, kernel: KernelId, workload: Any) -> tuple:
        """The grid the device launches ``kernel`` with for these constants (``workload``).

        Raises:
            ValidationError: the kernel is of another definition.
        """
        self._check_kernel(kernel, "launch_config")
        spec = kernel_spec(kernel.name)
        _, values = spec.pack(unpack_arguments(spec, workload))
        return self.device.kernel(kernel.name).launch_grid(values)

    # -- validation ------------------------------------------------------------------------
    def _check_region(self, region: Region, what: str) -> None:
        if not isinstance(region, Region):
            raise TypeError(f"{what} must be a Region, got {type(region).__name__}")
        if region.allocation.owner is not self._token:
            raise ValidationError(f"{what}: region of another model definition")

    def _check_kernel(self, kernel: KernelId, what: str) -> None:
        if not isinstance(kernel, KernelId) or kernel.owner is not self._token:
            raise ValidationError(f"{what}: kernel {getattr(kernel, 'name', kernel)!r} of another model definition")

    def validate_commands(self, commands: Sequence[Any]) -> None:
        """Check every command (see ``Dispatch``'s contract).

        Raises:
            ValidationError: a region or kernel of another definition, a fill or write of a
                weight, a binding smaller than the kernel contract needs or with a wrong access.
            ValueError / TypeError: malformed arguments.
        """
        for i, cmd in enumerate(commands):
            where = f"command #{i} ({type(cmd).__name__})"
            if isinstance(cmd, Fill):
                self._check_region(cmd.region, where)
                if cmd.region.allocation.is_weight:
                    raise ValidationError(f"{where}: fill of immutable weight {cmd.region.allocation!r}")
                if cmd.region.nbytes % 4:
                    raise ValidationError(f"{where}: fill of {cmd.region.nbytes} bytes, not a multiple of 4")
            elif isinstance(cmd, Copy):
                self._check_region(cmd.dst, f"{where} dst")
                self._check_region(cmd.src, f"{where} src")
                if cmd.dst.allocation.is_weight:
                    raise ValidationError(f"{where}: write of immutable weight {cmd.dst.allocation!r}")
                if cmd.dst.nbytes != cmd.src.nbytes:
                    raise ValidationError(f"{where}: dst has {cmd.dst.nbytes} bytes, src {cmd.src.nbytes}")
            elif isinstance(cmd, Dispatch):
                self._check_kernel(cmd.kernel, where)
                spec = kernel_spec(cmd.kernel.name)
                _, values = spec.pack(unpack_arguments(spec, cmd.arguments))
                if len(cmd.bindings) != len(spec.bindings):
                    raise ValidationError(f"{where}: {cmd.kernel.name} takes {len(spec.bindings)} bindings, got {len(cmd.bindings)}")
                for j, (b, bs) in enumerate(zip(cmd.bindings, spec.bindings)):
                    self._check_region(b.region, f"{where} binding {j} ({bs.name})")
                    if ((b.access | bs.access) & Access.WRITE) and b.region.allocation.is_weight:
                        raise ValidationError(f"{where}: binding {j} ({bs.name}) writes immutable weight {b.region.allocation!r}")
                    if (bs.access & Access.WRITE) and not (b.access & Access.WRITE):
                        raise ValidationError(f"{where}: binding {j} ({bs.name}) is declared {b.access.name} but {cmd.kernel.name} writes it")
                    need = bs.nbytes(values)
                    if b.region.nbytes < need:
                        raise ValidationError(f"{where}: binding {j} ({bs.name}) has {b.region.nbytes} bytes, the contract needs {need}")
            elif isinstance(cmd, Gemm):
                for arg in ("m", "n", "k"):
                    v = getattr(cmd, arg)
                    if not isinstance(v, int) or v <= 0:
                        raise ValueError(f"{where}: {arg}={v!r} must be a positive int")
                for name, region, need in (("a", cmd.a, 2 * cmd.m * cmd.k), ("b", cmd.b, 2 * cmd.n * cmd.k),
                                           ("c", cmd.c, 4 * cmd.m * cmd.n)):
                    self._check_region(region, f"{where} {name}")
                    if region.nbytes < need:
                        raise ValidationError(f"{where}: {name} has {region.nbytes} bytes, the gemm needs {need}")
                if cmd.c.allocation.is_weight:
                    raise ValidationError(f"{where}: c writes immutable weight {cmd.c.allocation!r}")
            else:
                raise TypeError(f"{where}: not a model command")

    def validate_io(self, ios: Sequence[IODesc], what: str) -> None:
        """Raises: ValidationError: an empty descriptor, one larger than its region, or a weight."""
        for i, io in enumerate(ios):
            if not isinstance(io, IODesc):
                raise TypeError(f"{what} {i} must be an IODesc, got {type(io).__name__}")
            self._check_region(io.region, f"{what} {i}")
            if io.desc.nbytes == 0:
                raise ValidationError(f"{what} {i}: empty IO descriptor {io.desc}")
            if io.desc.nbytes > io.region.nbytes:
                raise ValidationError(f"{what} {i}: descriptor {io.desc} needs {io.desc.nbytes} bytes, its region has {io.region.nbytes}")
            if io.region.allocation.is_weight:
                raise ValidationError(f"{what} {i}: IO aliases immutable weight {io.region.allocation!r}")

    # -- building --------------------------------------------------------------------------
    def fragment(self, commands: Sequence[Fill | Copy | Dispatch | Gemm], inputs: Sequence[IODesc],
                 outputs: Sequence[IODesc]) -> ModelFragment:
        """A validated, shape-specific fragment (see ``ModelFragment``)."""
        self.validate_commands(commands)
        self.validate_io(inputs, "input")
        self.validate_io(outputs, "output")
        return ModelFragment(self, tuple(commands), tuple(inputs), tuple(outputs))

    def prepare(self, commands: Sequence[Fill | Copy | Dispatch], inputs: Sequence[IODesc], outputs: Sequence[IODesc],
                capacity: int) -> PreparedModel:
        """``fragment(commands, inputs, outputs).prepare(capacity)``."""
        return self.fragment(commands, inputs, outputs).prepare(capacity)

    def graph(self) -> Graph:
        """A new, empty caller-owned ``Graph`` to record fragments into."""
        return Graph(self)

    def prepare_plans(self, plans: dict[str, tuple[Graph, list[GraphTensor], list[GraphTensor]]],
                      capacity: int) -> PreparedModel:
        """A ``PreparedModel`` with several plans per slot (e.g. prefill and decode) that share
        each slot's persistent state.

        Args:
            plans: name -> ``(graph, graph_inputs, graph_outputs)``.
            capacity: number of slots.
        """
        return PreparedModel(self, plans, capacity)
