"""``llm/_llama.py``'s builder on the cpu: its matrices in the device's matrix layout
(``ModelSession.matrix_dtype``: the row-interleaved ``*_r8`` of q8_0 / q4_0 / q4_1) give the bits of
the GGUF layout, tied embeddings (the table read by ``get_rows`` and the output matrix) included."""

import dataclasses

import numpy as np
import pytest
import trio

from xinfer_async import llm
from xinfer_async.llm import _synthetic

#: vocab 300: 37 groups of 8 rows and 4 rows left in the GGUF layout
SHAPE = _synthetic.LlamaConfig(n_layer=2, dim=128, n_head=4, n_kv_head=1, head_dim=32, ffn_dim=224, vocab_size=300,
                               rope_theta=10000.0, rms_eps=1e-5, context_length=64, tied_embeddings=True)


async def _logits(path, ids):
    model = await llm.load(path, device="cpu", slots=1, ctx=64)
    try:
        return await model.logits(ids), set(model.builder.definition.kernels)
    finally:
        await model.aclose()


@pytest.mark.parametrize("qtype", ["Q4_1", "Q4_0", "Q8_0"])
@pytest.mark.parametrize("tied", [True, False])
def test_repacked_matrices_give_the_gguf_layouts_bits(tmp_path, monkeypatch, qtype, tied):
    rng = np.random.default_rng()
    cfg = dataclasses.replace(SHAPE, tied_embeddings=tied)
    path = _synthetic.write_synthetic_gguf(tmp_path / "m.gguf", cfg, qtype.lower(), seed=int(rng.integers(1 << 30)))
    ids = [int(i) for i in rng.integers(0, cfg.vocab_size, size=11)] + [cfg.vocab_size - 1, 296]
    out = {}
    for repack in ("1", "0"):
        monkeypatch.setenv("XINFER_CPU_REPACK", repack)
        out[repack] = trio.run(_logits, path, ids)
    (got, kernels), (want, plain_kernels) = out["1"], out["0"]
    dt = qtype.lower()
    assert {f"matmul_{dt}_r8", f"rmsnorm_matmul_swiglu_{dt}_r8", "rmsnorm_matmul_q8_0_r8" if tied else
            f"rmsnorm_matmul_{dt}_r8"} <= kernels
    assert ("get_rows_q8_0_r8" if tied else "get_rows_q8_0") in kernels  # the file's table is Q8_0
    assert not any(k.endswith("_r8") for k in plain_kernels)
    assert np.isfinite(got).all()
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
