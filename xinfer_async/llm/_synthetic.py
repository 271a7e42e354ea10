"""Synthetic GGUF files: the architecture of a named model with random weights.

A benchmark (or a GPU test) needs the shape of a model, not its knowledge: ``write_synthetic_gguf``
writes a GGUF of any family of ``_arch`` (``config.arch``, or ``arch=``: its tensor names and
metadata keys) (spec: https://github.com/ggml-org/ggml/blob/master/docs/gguf.md)
of a named shape with N(0, 0.02) matrices, norms of 1 + N(0, 0.1) and biases of N(0, 0.1), so activations stay finite
through any depth, plus a minimal byte-level tokenizer. ``load("synthetic:llama-3.2-1b")`` writes one
into the cache on first use (``synthetic_model``) and reuses it after.

Matrices are drawn and quantized in row chunks on a thread pool (numpy releases the GIL), each chunk
from its own generator seeded by ``(seed, tensor index, chunk index)``, so a file is the same whatever
the number of cores. Quantization is ``gguf.quants.quantize`` itself (ggml's reference rounding,
bit-exact with llama.cpp's ``quantize_row_q4_1_ref`` / ``q8_0``), applied per chunk: quantization is
per 32-element block, so chunking by rows does not change a bit. The types ``gguf`` cannot quantize
(q4_k, q5_k, q6_k, iq4_nl) use the plain quantizers of ``_kquantize`` (valid blocks, not llama.cpp's
rounding search). ``dtype`` is one type for every matrix, or one of llama.cpp's mixes ``q4_k_m`` /
``q5_k_m`` (``tensor_types``: llama.cpp's ``llama-quant.cpp`` rules for a Llama).

Streamed: the tensor infos are written first, then each tensor as soon as its chunks are encoded while
the pool draws the next ones (up to 256 MiB of them), so memory holds about that, not the file.
Measured on a shared 2-core machine: llama-3.2-1b in q4_1 (1.24 G parameters, 890 MB) takes 36
CPU-seconds and peaks at 389 MB resident (smollm2-135m: 134 MB, against 160 MB when the whole file
was held); by extrapolation the 8.03 G-parameter llama-3.1-8b shape (5.5 GB in q4_1) takes ~235
CPU-seconds, ~15-20 s on 16 cores, and ~1-1.5 GB of memory (its 0.56 GB q8_0 embedding and output
matrices, and 16 threads' chunks).
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import os
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from ._cache import cache_dir
from ._arch import architecture
from ._llama_config import LlamaConfig, ModelConfig, llama_tensor_shapes, model_tensor_shapes
from ._tokenizer import _bytes_to_unicode

__all__ = ["SHAPES", "PREFIX", "shape_config", "write_synthetic_gguf", "synthetic_model", "llama_tensor_shapes",
           "model_tensor_shapes", "llama3_rope_factors",
           "encode_tensor", "tensor_types", "use_more_bits"]

PREFIX = "synthetic:"
#: one type for every matrix (the embedding q8_0; f16 for f16, f32 for f32: a file with no rounding
#: of its own, for comparisons of the arithmetic alone) ...
PURE_DTYPES = ("q4_1", "q8_0", "f16", "q4_0", "q5_0", "q5_1", "q4_k", "q5_k", "q6_k", "iq4_nl", "bf16", "f32")
#: ... or llama.cpp's mixes (q8_0 is also llama.cpp's Q8_0 mix: every matrix and the output q8_0)
MIXES = {"q4_k_m": "q4_k", "q5_k_m": "q5_k"}
DTYPES = PURE_DTYPES + tuple(MIXES)
#: llama.cpp's ``llama_ftype`` of each (``general.file_type``)
_FTYPE = {"f32": 0, "f16": 1, "q4_0": 2, "q4_1": 3, "q8_0": 7, "q5_0": 8, "q5_1": 9, "q4_k": 14, "q5_k": 16, "q6_k": 18,
          "iq4_nl": 25, "bf16": 32, "q4_k_m": 15, "q5_k_m": 17}
_GGUF_QUANTIZES = ("q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "bf16")
WEIGHT_STD = 0.02
_CHUNK_ELEMS = 1 << 22  # elements drawn and quantized per task
_INFLIGHT_BYTES = 1 << 28  # encoded tensors drawn ahead of the file write (the pool's work queue)
_VERSION = 2  # bump when the file contents of a (shape, dtype, seed) change: invalidates the cache

SHAPES: dict[str, LlamaConfig] = {
    # HuggingFaceTB/SmolLM2-135M: 30 layers, dim 576, 9 heads (3 kv), ffn 1536, vocab 49152
    "smollm2-135m": LlamaConfig(n_layer=30, dim=576, n_head=9, n_kv_head=3, head_dim=64, ffn_dim=1536,
                                vocab_size=49152, rope_theta=100000.0, rms_eps=1e-5, context_length=8192,
                                tied_embeddings=True),
    # meta-llama/Llama-3.2-1B: 16 layers, dim 2048, 32 heads (8 kv), ffn 8192, vocab 128256
    "llama-3.2-1b": LlamaConfig(n_layer=16, dim=2048, n_head=32, n_kv_head=8, head_dim=64, ffn_dim=8192,
                                vocab_size=128256, rope_theta=500000.0, rms_eps=1e-5, context_length=131072,
                                tied_embeddings=True),
    # meta-llama/Llama-3.1-8B: 32 layers, dim 4096, 32 heads (8 kv), head_dim 128, ffn 14336, vocab 128256,
    # untied output; 8.03 G parameters (the llama3 rope scaling of long contexts is not written: no rope_freqs)
    "llama-3.1-8b": LlamaConfig(n_layer=32, dim=4096, n_head=32, n_kv_head=8, head_dim=128, ffn_dim=14336,
                                vocab_size=128256, rope_theta=500000.0, rms_eps=1e-5, context_length=131072,
                                tied_embeddings=False),
    # Qwen/Qwen2.5-7B's sizes in the llama architecture: 28 layers, dim 3584, 28 heads (4 kv), head_dim 128,
    # ffn 18944, vocab 152064, untied output; 7.615 G parameters without qwen2's q/k/v biases (129,024 more)
    "qwen2.5-7b": LlamaConfig(n_layer=28, dim=3584, n_head=28, n_kv_head=4, head_dim=128, ffn_dim=18944,
                              vocab_size=152064, rope_theta=1000000.0, rms_eps=1e-6, context_length=32768,
                              tied_embeddings=False),
    # for tests: seconds to write, load and run on a cpu
    "tiny": LlamaConfig(n_layer=2, dim=64, n_head=4, n_kv_head=2, head_dim=16, ffn_dim=128, vocab_size=512,
                        rope_theta=10000.0, rms_eps=1e-5, context_length=256, tied_embeddings=True),
    # google/gemma-3-270m: 18 layers, dim 640, 4 heads (1 kv) of 256, ffn 2048, vocab 262144, window 512
    "gemma3-270m": ModelConfig(n_layer=18, dim=640, n_head=4, n_kv_head=1, head_dim=256, ffn_dim=2048,
                               vocab_size=262144, rope_theta=1e6, rms_eps=1e-6, context_length=32768,
                               tied_embeddings=True, arch="gemma3", sliding_window=512, swa_pattern=6,
                               rope_theta_swa=10000.0),
    # Llama 3.1's rope scaling (rope_freqs.weight: llama.cpp's converter, factor 8, low 1, high 4, 8192)
    "tiny-llama3": ModelConfig(n_layer=2, dim=64, n_head=4, n_kv_head=2, head_dim=16, ffn_dim=128, vocab_size=512,
                               rope_theta=500000.0, rms_eps=1e-5, context_length=256, tied_embeddings=True,
                               rope_freqs=True),
    # for tests, one a family: a head_dim other than dim / n_head (gemma3, qwen3), a window of 4 keys
    # on layers 0 and 1 of 3 (gemma3, pattern 3)
    "tiny-qwen2": ModelConfig(n_layer=2, dim=64, n_head=4, n_kv_head=2, head_dim=16, ffn_dim=128, vocab_size=512,
                              rope_theta=1e6, rms_eps=1e-6, context_length=256, tied_embeddings=True, arch="qwen2"),
    "tiny-qwen3": ModelConfig(n_layer=2, dim=64, n_head=4, n_kv_head=2, head_dim=32, ffn_dim=128, vocab_size=512,
                              rope_theta=1e6, rms_eps=1e-6, context_length=256, tied_embeddings=True, arch="qwen3"),
    "tiny-gemma3": ModelConfig(n_layer=3, dim=64, n_head=4, n_kv_head=1, head_dim=32, ffn_dim=128, vocab_size=512,
                               rope_theta=1e6, rms_eps=1e-6, context_length=256, tied_embeddings=True, arch="gemma3",
                               sliding_window=4, swa_pattern=3, rope_theta_swa=10000.0),
    "tiny-phi3": ModelConfig(n_layer=2, dim=64, n_head=4, n_kv_head=4, head_dim=16, ffn_dim=128, vocab_size=512,
                             rope_theta=10000.0, rms_eps=1e-5, context_length=256, tied_embeddings=False, arch="phi3"),
}


def shape_config(shape: str | LlamaConfig) -> LlamaConfig:
    """The ``LlamaConfig`` of a shape name (a key of ``SHAPES``) or the config itself.

    Raises:
        ValueError: an unknown shape name (the message lists the known ones), an unknown family, or a
            config whose n_head is not a multiple of n_kv_head or whose head_dim is odd.
    """
    if isinstance(shape, LlamaConfig):
        c = shape
    else:
        try:
            c = SHAPES[shape]
        except KeyError:
            raise ValueError(f"unknown synthetic shape {shape!r}; known shapes: {', '.join(SHAPES)}") from None
    architecture(c.arch)
    if c.n_head % c.n_kv_head or c.head_dim % 2:
        raise ValueError(f"shape {c}: need n_head % n_kv_head == 0 and an even head_dim")
    return c


def encode_tensor(x: np.ndarray, dtype: str) -> tuple[np.ndarray, object]:
    """A float32 array in a GGUF encoding: (data, raw_dtype) for ``GGUFWriter.add_tensor``.

    Args:
        x: float32 (..., K); K a multiple of the block size (32; 256 for q4_k, q5_k, q6_k) for
            the quantized types.
        dtype: ``'f32'``, ``'f16'`` or a type of ``PURE_DTYPES`` (any case).

    Returns:
        float32/float16 ``x`` with raw_dtype None, or uint8 (..., K / block * block bytes) blocks
        (``gguf.quants.quantize``, else ``_kquantize``) with the ``GGMLQuantizationType``.

    Raises:
        ValueError: another dtype.
    """
    import gguf

    from ._kquantize import QUANTIZERS

    d = dtype.lower()
    if d == "f32":
        return x.astype(np.float32, copy=False), None
    if d == "f16":
        return x.astype(np.float16), None
    if d in _GGUF_QUANTIZES or d in QUANTIZERS:
        qt = gguf.GGMLQuantizationType[d.upper()]
        if d in QUANTIZERS:
            return QUANTIZERS[d](x.reshape(-1, x.shape[-1])).reshape(*x.shape[:-1], -1), qt
        return gguf.quants.quantize(x, qt), qt
    raise ValueError(f"dtype must be one of f32, {', '.join(PURE_DTYPES)}, got {dtype!r}")


def use_more_bits(i_layer: int, n_layer: int) -> bool:
    """llama.cpp's ``use_more_bits`` (``llama-quant.cpp``): the first and last eighth of the layers
    and every third one between take more bits in the _M mixes."""
    return i_layer < n_layer // 8 or i_layer >= 7 * n_layer // 8 or (i_layer - n_layer // 8) % 3 == 2


_BLOCK = {"q4_k": 256, "q5_k": 256, "q6_k": 256, "f16": 1, "bf16": 1, "f32": 1}
#: llama.cpp's ``tensor_type_fallback``: a 256-block type on rows not a multiple of 256
_FALLBACK = {"q4_k": "q5_0", "q5_k": "q5_1", "q6_k": "q8_0"}


def _fallback(t: str, k: int) -> str:
    if k % _BLOCK.get(t, 32):
        t = _FALLBACK.get(t, t)
        if k % _BLOCK.get(t, 32):
            t = "f16"  # llama.cpp: "must use F16 due to unusual shape"
    return t


def tensor_types(c: LlamaConfig, dtype: str) -> dict[str, str]:
    """GGUF tensor name -> dtype label of a synthetic file, in file order.

    A pure dtype: every matrix of that type, the embedding (and tied output) q8_0 (f16 for f16, f32 for f32);
    norms f32. A mix (``q4_k_m``, ``q5_k_m``) follows llama.cpp's ``llama_tensor_get_type`` for a
    dense Llama: the output projection (or the tied embedding) q6_k, q8_0 when ``dim`` is not a
    multiple of 256; ``attn_v`` and ``ffn_down`` q6_k on the ``use_more_bits`` layers; every other
    matrix the mix's type (q4_k / q5_k); then ``tensor_type_fallback`` for a row length K not a
    multiple of 256 (q4_k -> q5_0, q5_k -> q5_1, q6_k -> q8_0; f16 when not a multiple of 32).

    Raises:
        ValueError: an unknown dtype.
    """
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    shapes = model_tensor_shapes(c)
    out = {}
    for name, shape in shapes.items():
        if len(shape) == 1:
            out[name] = "f32"
            continue
        k = shape[1]
        if dtype not in MIXES:
            t = dtype if name not in ("token_embd.weight", "output.weight") or dtype in ("f16", "f32") else "q8_0"
            out[name] = t
            continue
        base = MIXES[dtype]
        if name == "output.weight" or (name == "token_embd.weight" and c.tied_embeddings):
            t = "q8_0" if k % 256 else "q6_k"
        elif name.endswith(("attn_v.weight", "attn_qkv.weight", "ffn_down.weight")) and use_more_bits(
                int(name.split(".")[1]), c.n_layer):
            t = "q6_k"
        else:
            t = base
        out[name] = _fallback(t, k)
    return out


def llama3_rope_factors(head_dim: int, theta: float, factor: float = 8.0, low_freq_factor: float = 1.0,
                        high_freq_factor: float = 4.0, original_context: int = 8192) -> np.ndarray:
    """``rope_freqs.weight`` as llama.cpp's converter writes it for ``rope_type: llama3`` (Llama 3.1+):
    float32 (head_dim/2,) divisors of each pair's frequency: 1 for short wavelengths, ``factor`` for
    long ones, a smooth blend between."""
    freqs = 1.0 / (np.float32(theta) ** (np.arange(0, head_dim, 2, dtype=np.float32) / np.float32(head_dim)))
    low, high = original_context / low_freq_factor, original_context / high_freq_factor
    out = []
    for f in freqs.astype(np.float64):
        wavelen = 2 * np.pi / f
        if wavelen < high:
            out.append(1.0)
        elif wavelen > low:
            out.append(factor)
        else:
            smooth = (original_context / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
            out.append(1 / ((1 - smooth) / factor + smooth))
    return np.array(out, dtype=np.float32)


def _tokenizer_metadata(vocab: int) -> dict[str, tuple[str, object]]:
    """A minimal byte-level BPE vocabulary of ``vocab`` tokens (add_* method name, value).

    Ids 0-255 are the 256 bytes (GPT-2 byte-to-unicode alphabet, so any text encodes); then the
    control token ``<|begin_of_text|>`` (bos, never eos, and not a text llama.cpp takes for an
    end of generation: a synthetic model runs to max_tokens, as serving benchmarks ask with ``ignore_eos``); then the 26 x 26 lowercase letter pairs with their
    merges; then filler tokens ``" wN"`` (printable, so every generated token decodes to text).
    """
    table = _bytes_to_unicode()
    tokens = [table[b] for b in range(min(vocab, 256))]
    types = [1] * len(tokens)
    merges: list[str] = []
    if vocab > 256:
        tokens.append("<|begin_of_text|>")
        types.append(3)
    letters = "abcdefghijklmnopqrstuvwxyz"
    for a in letters:
        for b in letters:
            if len(tokens) < vocab:
                tokens.append(a + b)
                types.append(1)
                merges.append(f"{a} {b}")
    space = table[ord(" ")]
    n = 0
    while len(tokens) < vocab:
        tokens.append(f"{space}w{n}")
        types.append(1)
        n += 1
    meta: dict[str, tuple[str, object]] = {
        "tokenizer.ggml.model": ("string", "gpt2"),
        "tokenizer.ggml.pre": ("string", "default"),
        "tokenizer.ggml.tokens": ("array", tokens),
        "tokenizer.ggml.token_type": ("array", types),
        "tokenizer.ggml.merges": ("array", merges),
    }
    if vocab > 256:
        meta["tokenizer.ggml.bos_token_id"] = ("uint32", 256)
    return meta


def _start_tensor(shape: tuple[int, ...], dtype: str, seed: int, index: int,
                  pool: ThreadPoolExecutor, bias: bool = False) -> tuple[np.ndarray, object, list]:
    """Begin drawing one tensor: a vector 1 + N(0, 0.1) in f32 (a bias: N(0, 0.1); drawn at once), or
    an (N, K) matrix N(0, 0.02) encoded as ``dtype``, its row chunks submitted to ``pool``, each
    encoding into its rows of the returned array.

    Returns:
        (the array, filled once every future is done; its GGML raw dtype or None; the futures)
    """
    if len(shape) == 1:
        rng = np.random.default_rng([seed, index])
        return ((0.0 if bias else 1.0) + 0.1 * rng.standard_normal(shape, dtype=np.float32)).astype(np.float32), None, []
    n, k = shape
    row, raw = encode_tensor(np.zeros((1, k), np.float32), dtype)
    out = np.empty((n, row.shape[-1]), row.dtype)  # (N, bytes or elements of an encoded row)
    rows = max(1, _CHUNK_ELEMS // k)

    def chunk(ci: int) -> None:
        rng = np.random.default_rng([seed, index, ci])
        start = ci * rows
        x = rng.standard_normal((min(rows, n - start), k), dtype=np.float32)
        x *= np.float32(WEIGHT_STD)
        out[start:start + len(x)] = encode_tensor(x, dtype)[0]

    return out, raw, [pool.submit(chunk, ci) for ci in range(-(-n // rows))]


def write_synthetic_gguf(path: str | os.PathLike, shape: str | ModelConfig, dtype: str = "q4_1",
                         seed: int = 0, *, arch: str | None = None, threads: int | None = None,
                         progress: bool = False) -> Path:
    """Write a random-weight GGUF file of a named shape.

    Args:
        path: the file to write (replaced if present).
        shape: a key of ``SHAPES`` (``"smollm2-135m"``, ``"llama-3.2-1b"``, ``"llama-3.1-8b"``,
            ``"qwen2.5-7b"``, ``"tiny"``, ``"gemma3-270m"``, ``"tiny-qwen3"``, ...) or a ``ModelConfig``.
        arch: the family (a key of ``_arch.ARCHITECTURES``) instead of the shape's ``arch``: its
            tensor names (``model_tensor_shapes``) and ``{arch}.*`` metadata keys (``general.architecture``;
            ``attention.key_length``/``value_length`` when head_dim is not dim / n_head;
            ``attention.sliding_window`` and ``_pattern``, ``rope.freq_base_swa`` for a sliding window;
            ``final_logit_softcapping`` when > 0).
        dtype: encoding of the matrices: a type of ``PURE_DTYPES`` (``"q4_1"``, ``"q8_0"``,
            ``"f16"``, ``"q4_k"``, ...) or a llama.cpp mix (``"q4_k_m"``, ``"q5_k_m"``): see
            ``tensor_types``. With a pure type the embedding (``token_embd.weight``, also the tied
            output projection) is q8_0 (f16 for f16, f32 for f32), as llama.cpp's quantized files have it; norms
            are f32.
        seed: the weights are a function of (shape, dtype, seed) only.
        threads: worker threads (default: ``os.cpu_count()``).
        progress: a tqdm bar (tensors) on stderr.

    Returns:
        the path.

    Raises:
        ValueError: an unknown shape, family or dtype, or a K not a multiple of a pure quantized dtype's
            block size (32, 256 for the K-quants; the mixes fall back as llama.cpp does).
    """
    import gguf

    c = shape_config(shape)
    if arch is not None:
        c = shape_config(dataclasses.replace(c, arch=arch))
    types = tensor_types(c, dtype)
    for tname, t in types.items():
        k = model_tensor_shapes(c)[tname][-1]
        if k % _BLOCK.get(t, 32):
            raise ValueError(f"{dtype} needs dim and ffn_dim multiples of {_BLOCK.get(t, 32)} ({tname} is {t}), "
                             f"got {c.dim} and {c.ffn_dim}")
    path = Path(path)
    name = shape if isinstance(shape, str) else "custom"
    w = gguf.GGUFWriter(str(path), c.arch)
    w.add_string("general.name", f"synthetic {name} ({dtype}, seed {seed})")
    w.add_uint32("general.file_type", _FTYPE[dtype])  # llama_ftype
    a = c.arch + "."
    extra = []
    if c.head_dim * c.n_head != c.dim:
        extra += [("attention.key_length", "uint32", c.head_dim), ("attention.value_length", "uint32", c.head_dim)]
    if c.sliding_window:
        extra += [("attention.sliding_window", "uint32", c.sliding_window),
                  ("attention.sliding_window_pattern", "uint32", c.swa_pattern),
                  ("rope.freq_base_swa", "float32", c.rope_theta_swa)]
    if c.logit_softcap:
        extra.append(("final_logit_softcapping", "float32", c.logit_softcap))
    for key, kind, value in extra + [("context_length", "uint32", c.context_length), ("embedding_length", "uint32", c.dim),
                             ("block_count", "uint32", c.n_layer), ("feed_forward_length", "uint32", c.ffn_dim),
                             ("rope.dimension_count", "uint32", c.head_dim),
                             ("attention.head_count", "uint32", c.n_head),
                             ("attention.head_count_kv", "uint32", c.n_kv_head),
                             ("attention.layer_norm_rms_epsilon", "float32", c.rms_eps),
                             ("rope.freq_base", "float32", c.rope_theta), ("vocab_size", "uint32", c.vocab_size)]:
        getattr(w, f"add_{kind}")(a + key, value)
    for key, (kind, value) in _tokenizer_metadata(c.vocab_size).items():
        getattr(w, f"add_{kind}")(key, value)
    shapes = model_tensor_shapes(c)
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=len(shapes), desc=f"writing synthetic {name}", unit="tensor", leave=False)
    # Streamed: the tensor infos first (sizes from one encoded row), then each tensor in file order
    # as soon as its chunks are done, while the pool draws the next ones (up to _INFLIGHT_BYTES
    # encoded, so small tensors still give every core a chunk): not the whole file in memory.
    for tname, tshape in shapes.items():
        row, raw = encode_tensor(np.zeros((1, tshape[-1]), np.float32), types[tname]) if len(tshape) == 2 else \
            (np.zeros((1, tshape[0]), np.float32), None)
        byte_shape = (tshape[0], row.shape[-1]) if len(tshape) == 2 else tshape
        w.add_tensor_info(tname, byte_shape, row.dtype, tshape[0] * row.nbytes if len(tshape) == 2 else row.nbytes,
                          raw_dtype=raw)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    with ThreadPoolExecutor(max_workers=threads or os.cpu_count() or 1) as pool:
        pending: collections.deque = collections.deque()
        for index, (tname, tshape) in enumerate(shapes.items()):
            # write the oldest tensors once the ones in flight pass the byte budget (two at least)
            while len(pending) >= 2 and sum(p[0].nbytes for p in pending) >= _INFLIGHT_BYTES:
                _write_tensor(w, *pending.popleft(), bar)
            if tname == "rope_freqs.weight":
                pending.append((llama3_rope_factors(c.head_dim, c.rope_theta), None, []))
            else:
                pending.append(_start_tensor(tshape, types[tname], seed, index, pool, bias=tname.endswith(".bias")))
        while pending:
            _write_tensor(w, *pending.popleft(), bar)
    if bar is not None:
        bar.close()
    w.close()
    return path


def _write_tensor(w, data: np.ndarray, raw: object, futures: list, bar) -> None:
    for f in futures:
        f.result()  # its rows are filled (re-raises a chunk's error)
    w.write_tensor_data(data)
    if bar is not None:
        bar.update()


def _cache_key(c: LlamaConfig, name: str, dtype: str, seed: int) -> str:
    if name in SHAPES and SHAPES[name] == c:
        return f"{name}-{dtype}-seed{seed}-v{_VERSION}"
    digest = hashlib.sha256(repr(dataclasses.astuple(c)).encode()).hexdigest()[:12]
    return f"custom-{digest}-{dtype}-seed{seed}-v{_VERSION}"


def synthetic_model(spec: str | LlamaConfig, dtype: str = "q4_1", seed: int = 0, *,
                    progress: bool = True) -> Path:
    """The cached synthetic GGUF of a shape, written on first use.

    Args:
        spec: ``"synthetic:SHAPE"`` or ``"synthetic:SHAPE:DTYPE"`` (DTYPE overrides ``dtype``), a
            bare shape name, or a ``LlamaConfig``.
        dtype, seed: see ``write_synthetic_gguf``.
        progress: a tqdm bar on stderr while writing.

    Returns:
        ``cache_dir()/synthetic/SHAPE-DTYPE-seedSEED-vN.gguf`` (written to a temporary file and
        renamed into place, so a concurrent or interrupted writer never leaves a partial file).

    Raises:
        ValueError: an unknown shape or dtype.
    """
    if isinstance(spec, str):
        name = spec[len(PREFIX):] if spec.startswith(PREFIX) else spec
        name, _, dt = name.partition(":")
        dtype = dt or dtype
        config = shape_config(name)
    else:
        name, config = "custom", shape_config(spec)
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    target = cache_dir() / "synthetic" / f"{_cache_key(config, name, dtype, seed)}.gguf"
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=target.name + ".", suffix=".part", dir=target.parent)
    os.close(fd)
    try:
        write_synthetic_gguf(tmp, config if name == "custom" else name, dtype, seed, progress=progress)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target
