"""The model layer: ModelSession -> freeze -> ModelDefinition -> fragment -> ModelFragment ->
record into a Graph / prepare(capacity) -> PreparedModel of inference slots."""

from ._commands import Binding as Binding, Copy as Copy, Dispatch as Dispatch, Fill as Fill, Gemm as Gemm
from ._commands import Indices as Indices, Packed as Packed
from ._definition import ModelDefinition as ModelDefinition
from ._graph import Graph as Graph, GraphTensor as GraphTensor, ModelFragment as ModelFragment
from ._prepared import Completion as Completion, DeviceTensor as DeviceTensor, PendingRun as PendingRun
from ._prepared import PreparedModel as PreparedModel, PreparedStatistics as PreparedStatistics, Slot as Slot
from ._region import Allocation as Allocation, IODesc as IODesc, KernelId as KernelId
from ._region import Placement as Placement, Region as Region
from ._session import ModelContext as ModelContext, ModelSession as ModelSession
