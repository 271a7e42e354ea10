"""The dequantize and get_rows kernels on real tensors of the default model, through the runtime,
equal ``gguf``'s own dequantize bit for bit (float32), on every device present."""

import numpy as np
import pytest

from _llm_fixtures import require_model

pytestmark = pytest.mark.model

TENSORS = ["blk.0.attn_q.weight", "blk.17.ffn_down.weight", "blk.29.ffn_gate.weight", "token_embd.weight"]


@pytest.fixture(scope="module")
def gguf_model():
    from xinfer_async.llm import load_gguf

    return load_gguf(require_model())


@pytest.mark.parametrize("name", TENSORS)
async def test_dequantize_real_tensor_bit_exact(devices, gguf_model, name, rng):
    t = gguf_model.tensors[name]
    rows = np.sort(rng.choice(t.shape[0], size=min(64, t.shape[0]), replace=False))
    raw = np.ascontiguousarray(np.asarray(t.data)[rows])  # whole rows of blocks
    want = t.dequantize()[rows]
    n = want.size
    src = devices.upload(raw, (len(rows), t.shape[1]), t.dtype)
    dst = devices.alloc(n, "f32")
    ex = devices.executor()
    ex.fill(dst, float("nan"))
    ex.dispatch(f"dequantize_{t.dtype}", [src, dst], {"n": n})
    await ex.submit_and_wait()
    got = devices.download_numpy(dst).reshape(want.shape)
    np.testing.assert_array_equal(got.view(np.uint32), want.astype(np.float32).view(np.uint32))


async def test_get_rows_real_embedding_bit_exact(devices, gguf_model, rng):
    t = gguf_model.tensors["token_embd.weight"]
    vocab, dim = t.shape
    table = devices.upload(np.ascontiguousarray(np.asarray(t.data)), (vocab, dim), t.dtype)
    ids = rng.integers(0, vocab, size=16).astype(np.int32)
    out = devices.alloc((16, dim), "f32")
    ex = devices.executor()
    ex.fill(out, float("nan"))
    ex.dispatch(f"get_rows_{t.dtype}", [table, devices.upload(ids), out], {"T": 16, "dim": dim, "vocab": vocab})
    await ex.submit_and_wait()
    want = t.dequantize()[ids].astype(np.float32)
    np.testing.assert_array_equal(devices.download_numpy(out).view(np.uint32), want.view(np.uint32))
