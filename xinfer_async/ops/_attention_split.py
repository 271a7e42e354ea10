"""The split-K (flash-decoding) rule of the attention kernels, written once: how a row's keys are cut
into segments, and the workspace a launch needs.

The numerics contract (shaders/xi_attention.cuh, which mirrors these constants as ``XI_ATT_*``): a row
attending keys ``0..p`` is cut into ``segments(p)`` segments of ``segment_keys(p)`` keys; each segment's
partial (max, sum, unnormalized p @ V) is computed the same way wherever it runs and the partials are
merged in segment order. The segmentation depends on ``p`` and these constants only: never on T, on the
batch, on the other heads or on the device, so a (token, head) gets the same bits alone or batched, and
whatever number of blocks the launch spreads its segments over (``backends/cuda/_launch.py``). With one
segment (``p < SEG_KEYS``) the result is that of the single-pass kernel.

Reference: Tri Dao, Daniel Haziza, Francisco Massa, Grigory Sizov, "Flash-Decoding for long-context
inference" (2023).
"""

from __future__ import annotations

#: keys of a segment, at least (XI_ATT_SEG_KEYS: one chunk of 32 keys for each of the 8 warps of a
#: block, so a decode launch's block waits for one chunk's loads, not two in a row: H200, Llama-3.1-8B
#: shape, 512 keys a segment took ~10.7 us a layer in a decode step at 512-576 keys of context; a
#: segment ends in a merge of the 8 warps' states through shared memory, which a block that walks every
#: segment of its row (T > SPLIT_T_MAX) pays once a segment)
SEG_KEYS = 256
#: segments of a row, at most (XI_ATT_SEGS_MAX): past SEG_KEYS * SEGS_MAX keys the segments grow
SEGS_MAX = 32
#: tokens of a launch that may spread a row over several blocks (XI_ATT_SPLIT_T_MAX): decode and small
#: batches; above, the tokens' rows fill the device and a block runs all of its row's segments
SPLIT_T_MAX = 8


def segment_keys(p: int) -> int:
    """Keys a segment for a row attending keys ``0..p`` (``p >= 0``):
    ``SEG_KEYS * ceil((p + 1) / (SEG_KEYS * SEGS_MAX))`` (``xi_att_seg_keys``)."""
    per = SEG_KEYS * SEGS_MAX
    return SEG_KEYS * ((p + per) // per)


def segments(p: int) -> int:
    """Segments of a row attending keys ``0..p``: ``ceil((p + 1) / segment_keys(p))``, 1 to SEGS_MAX;
    0 for ``p < 0`` (a zero row)."""
    if p < 0:
        return 0
    seg = segment_keys(p)
    return (p + seg) // seg


def workspace_floats(T: int, n_head: int, head_dim: int) -> int:
    """float32 elements of the ``part`` workspace: (T, n_head, SEGS_MAX, head_dim + 2), a segment's
    (max, sum, r[head_dim]), where T <= SPLIT_T_MAX; 0 above (a launch of more tokens never splits)."""
    return T * n_head * SEGS_MAX * (head_dim + 2) if 0 < T <= SPLIT_T_MAX else 0


def count_ints(T: int, n_head: int) -> int:
    """int32 elements of the ``count`` workspace: (T, n_head), zero before a launch, where T <=
    SPLIT_T_MAX; 0 above."""
    return T * n_head if 0 < T <= SPLIT_T_MAX else 0
