"""``ModelFragment`` and the caller-owned ``Graph`` it records into.

Recording binds a fragment's inputs to tensors already in the graph without a device copy: the
allocation that holds an input is remapped onto the caller's tensor. Private scratch gets a fresh
instance per recorded fragment, or, after ``reuse_private_scratch()``, a place in one arena
shared by every such fragment of the graph (the in-order queue and the executor's hazard
barriers order a fragment's reads before a later fragment overwrites them). Persistent state
allocations map to one instance per slot, shared by every fragment and plan.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Sequence

from ..hal import Access, TensorDesc, ValidationError
from ..ops import kernel_spec
from ._commands import Copy, Dispatch, Fill, Gemm, unpack_arguments
from ._region import Allocation, AllocationKind, IODesc, Region

if TYPE_CHECKING:  # annotations only: the definition and prepared modules import this one
    from ._definition import ModelDefinition
    from ._prepared import PreparedModel

_ALIGN = 256


class GraphAlloc:
    """An allocation of a graph: an input, a scratch instance, the shared arena, or slot state."""

    def __init__(self, kind: str, nbytes: int, source: Allocation | None = None):
        self.kind = kind  # "input" | "scratch" | "arena" | "state"
        self.nbytes = nbytes
        self.source = source

    def __repr__(self) -> str:
        return f"<GraphAlloc {self.kind} {self.nbytes} B>"


#: bytes a graph command touches: ``(owner, offset, nbytes)``, the owner a ``GraphAlloc`` (a slot's
#: own buffer) or a weight ``Allocation`` (the definition's buffer)
Ref = tuple[GraphAlloc | Allocation, int, int]


@dataclasses.dataclass(frozen=True)
class GraphFill:
    """Fill ``ref`` with the float32 ``value``."""

    ref: Ref
    value: float


@dataclasses.dataclass(frozen=True)
class GraphCopy:
    """Copy ``src`` to ``dst`` (equal byte counts)."""

    dst: Ref
    src: Ref


@dataclasses.dataclass(frozen=True)
class GraphDispatch:
    """Launch kernel ``kernel`` (its name) on ``refs`` (binding order) with the constants dict
    ``constants`` and ``grid`` blocks (``None``: the kernel's launch configuration)."""

    kernel: str
    refs: Sequence[Ref]
    constants: dict
    grid: tuple | None = None


@dataclasses.dataclass(frozen=True)
class GraphGemm:
    """``c (m, n) f32 = a (m, k) f16 @ b (n, k)^T f16`` (the model command ``Gemm``)."""

    a: Ref
    b: Ref
    c: Ref
    m: int
    n: int
    k: int


#: a command of a ``Graph``
GraphCommand = GraphFill | GraphCopy | GraphDispatch | GraphGemm


@dataclasses.dataclass(frozen=True)
class GraphTensor:
    """A tensor inside a graph: ``desc`` at byte ``offset`` of a graph allocation."""

    graph: "Graph"
    alloc: GraphAlloc
    offset: int
    desc: TensorDesc


class Graph:
    """A caller-owned list of commands over graph allocations, built by ``ModelFragment.record``.

    Use ``input(desc)`` for graph inputs, record fragments, then ``prepare(inputs, outputs,
    capacity)`` (or ``ModelDefinition.prepare_plans`` for several plans).
    """

    def __init__(self, definition: ModelDefinition):
        self.definition = definition
        self.allocs: list[GraphAlloc] = []
        self.commands: list[GraphCommand] = []
        self._state: dict[Allocation, GraphAlloc] = {}
        self._arena: GraphAlloc | None = None

    def input(self, desc: TensorDesc) -> GraphTensor:
        """A new graph input tensor.

        Raises:
            ValidationError: an empty descriptor.
        """
        if desc.nbytes == 0:
            raise ValidationError(f"empty graph input descriptor {desc}")
        ga = GraphAlloc("input", desc.nbytes)
        self.allocs.append(ga)
        return GraphTensor(self, ga, 0, desc)

    def _state_alloc(self, alloc: Allocation) -> GraphAlloc:
        ga = self._state.get(alloc)
        if ga is None:
            ga = self._state[alloc] = GraphAlloc("state", alloc.nbytes, alloc)
            self.allocs.append(ga)
        return ga

    def _arena_alloc(self, nbytes: int) -> GraphAlloc:
        if self._arena is None:
            self._arena = GraphAlloc("arena", nbytes)
            self.allocs.append(self._arena)
        self._arena.nbytes = max(self._arena.nbytes, nbytes)
        return self._arena

    def private_bytes(self) -> int:
        """Bytes a slot allocates for this graph (inputs, scratch, arena, state)."""
        return sum(a.nbytes for a in self.allocs)

    def prepare(self, inputs: Sequence[GraphTensor], outputs: Sequence[GraphTensor], capacity: int) -> PreparedModel:
        """A ``PreparedModel`` with this graph as its one plan (``"default"``)."""
        return self.definition.prepare_plans({"default": (self, list(inputs), list(outputs))}, capacity)


class ModelFragment:
    """Validated, shape-specific commands with declared inputs and outputs
    (from ``ModelDefinition.fragment``)."""

    def __init__(self, definition: ModelDefinition, commands: tuple[Fill | Copy | Dispatch | Gemm, ...],
                 inputs: tuple[IODesc, ...], outputs: tuple[IODesc, ...], reuse_scratch: bool = False):
        self.definition = definition
        self.commands = commands
        self.inputs = inputs
        self.outputs = outputs
        self.reuses_private_scratch = reuse_scratch

    def reuse_private_scratch(self) -> "ModelFragment":
        """This fragment, with private temporaries placed in the graph's shared scratch arena
        (allocations that hold an output or input keep their own instance)."""
        return ModelFragment(self.definition, self.commands, self.inputs, self.outputs, True)

    def _regions(self):
        for i, cmd in enumerate(self.commands):
            if isinstance(cmd, Fill):
                yield i, cmd.region
            elif isinstance(cmd, Copy):
                yield i, cmd.dst
                yield i, cmd.src
            elif isinstance(cmd, Dispatch):
                for b in cmd.bindings:
                    yield i, b.region
            elif isinstance(cmd, Gemm):
                yield i, cmd.a
                yield i, cmd.b
                yield i, cmd.c

    def _written_allocations(self) -> set:
        out = set()
        for cmd in self.commands:
            if isinstance(cmd, Fill):
                out.add(cmd.region.allocation)
            elif isinstance(cmd, Copy):
                out.add(cmd.dst.allocation)
            elif isinstance(cmd, Gemm):
                out.add(cmd.c.allocation)
            elif isinstance(cmd, Dispatch):
                for b, bs in zip(cmd.bindings, kernel_spec(cmd.kernel.name).bindings):
                    if (b.access | bs.access) & Access.WRITE:
                        out.add(b.region.allocation)
        return out

    def record(self, graph: Graph, inputs: Sequence[GraphTensor]) -> list[GraphTensor]:
        """Append this fragment to ``graph`` with its inputs bound to ``inputs`` (no copy, no
        submission, no pool, no synchronization).

        Returns:
            the outputs as graph tensors, to feed the next fragment.

        Raises:
            ValidationError: a graph of another definition; an input count or descriptor mismatch;
                inputs that alias one allocation inconsistently; a remapping that would alias bytes
                no input declares (a command or output touching bytes of an input's allocation
                outside the input descriptors' bytes, or two distinct allocations bound to
                overlapping bytes of one tensor while the fragment writes one of them).
        """
        if graph.definition is not self.definition:
            raise ValidationError("record: the graph belongs to another model definition")
        if len(inputs) != len(self.inputs):
            raise ValidationError(f"record: the fragment has {len(self.inputs)} inputs, got {len(inputs)}")
        for i, (t, io) in enumerate(zip(inputs, self.inputs)):
            if not isinstance(t, GraphTensor) or t.graph is not graph:
                raise ValidationError(f"record: input {i} is not a tensor of this graph")
            if t.desc != io.desc:
                raise ValidationError(f"record: input {i} descriptor mismatch: the fragment expects {io.desc}, got {t.desc}")

        mapping: dict[Allocation, tuple[GraphAlloc, int]] = {}
        # the bytes of each remapped allocation that an input declares: the descriptor's bytes at
        # the input's offset (the caller's tensor has exactly these; a larger region would reach
        # past it)
        declared: dict[Allocation, list[tuple[int, int, int]]] = {}
        for i, (t, io) in enumerate(zip(inputs, self.inputs)):
            a = io.region.allocation
            target = (t.alloc, t.offset - io.region.offset)
            if a in mapping and mapping[a] != target:
                raise ValidationError(
                    f"record: inputs alias allocation {a!r} inconsistently: input {i} maps it to a different "
                    f"tensor or offset than an earlier input"
                )
            mapping[a] = target
            declared.setdefault(a, []).append((io.region.offset, io.region.offset + io.desc.nbytes, i))
        uses = list(self._regions()) + [(f"output {k}", io.region) for k, io in enumerate(self.outputs)]
        for i, region in uses:
            a = region.allocation
            if a in declared and not any(lo <= region.offset and region.end <= hi for lo, hi, _ in declared[a]):
                what = i if isinstance(i, str) else f"command #{i}"
                raise ValidationError(
                    f"record: remapping {a!r} onto the caller's tensor would alias bytes "
                    f"[{region.offset}:{region.end}] that {what} uses but no input declares"
                )
        written = self._written_allocations()
        spans = [(a, mapping[a][0], lo + mapping[a][1], hi + mapping[a][1], i)
                 for a, ds in declared.items() for lo, hi, i in ds]
        for x, (a, ga, lo, hi, i) in enumerate(spans):
            for b, gb, blo, bhi, j in spans[x + 1:]:
                if a is not b and ga is gb and lo < bhi and blo < hi and (a in written or b in written):
                    raise ValidationError(
                        f"record: inputs {i} and {j} bind distinct allocations {a!r} and {b!r} to overlapping "
                        f"bytes of one tensor while the fragment writes one of them: an undeclared alias"
                    )

        out_allocs = {io.region.allocation for io in self.outputs}
        arena_cursor = 0
        for _, region in list(self._regions()) + [(None, io.region) for io in self.outputs]:
            a = region.allocation
            if a in mapping or a.is_weight:
                continue
            if a.kind is AllocationKind.STATE:
                mapping[a] = (graph._state_alloc(a), 0)
            elif self.reuses_private_scratch and a not in out_allocs:
                mapping[a] = (graph._arena_alloc(arena_cursor + a.nbytes), arena_cursor)
                arena_cursor += -(-a.nbytes // _ALIGN) * _ALIGN
            else:
                ga = GraphAlloc("scratch", a.nbytes, a)
                graph.allocs.append(ga)
                mapping[a] = (ga, 0)

        def ref(region: Region) -> Ref:
            a = region.allocation
            if a.is_weight:
                return (a, region.offset, region.nbytes)
            ga, delta = mapping[a]
            return (ga, region.offset + delta, region.nbytes)

        for cmd in self.commands:
            if isinstance(cmd, Fill):
                graph.commands.append(GraphFill(ref(cmd.region), cmd.value))
            elif isinstance(cmd, Copy):
                graph.commands.append(GraphCopy(ref(cmd.dst), ref(cmd.src)))
            elif isinstance(cmd, Gemm):
                graph.commands.append(GraphGemm(ref(cmd.a), ref(cmd.b), ref(cmd.c), cmd.m, cmd.n, cmd.k))
            else:
                consts = unpack_arguments(kernel_spec(cmd.kernel.name), cmd.arguments)
                graph.commands.append(GraphDispatch(cmd.kernel.name, [ref(b.region) for b in cmd.bindings], consts, cmd.grid))

        outs = []
        for io in self.outputs:
            ga, delta = mapping[io.region.allocation]
            outs.append(GraphTensor(graph, ga, io.region.offset + delta, io.desc))
        return outs

    def prepare(self, capacity: int) -> PreparedModel:
        """A ``PreparedModel`` of ``capacity`` slots running this fragment alone."""
        graph = Graph(self.definition)
        ins = [graph.input(io.desc) for io in self.inputs]
        outs = self.record(graph, ins)
        return graph.prepare(ins, outs, capacity)
