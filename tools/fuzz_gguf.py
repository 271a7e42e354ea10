"""Fuzz ``llm.load`` with mutated GGUF files; print a table of mutation kind x outcome.

Usage: ``python tools/fuzz_gguf.py [-n 10000] [--seed 0] [--timeout-s 30] [--real-fraction 0.2]
[--show 5] [-j 1]``

Two base files: ``tiny`` (``write_synthetic_gguf(.., "tiny", "q4_1")``: 2 blocks, dim 64, 512 tokens,
with ``general.alignment`` written) and, when the SmolLM2 file is in the cache (or
``$XINFER_MODEL_PATH``), ``real``: its whole header (all 33 metadata keys, the 49,152-token vocabulary
and 48,900 merges) with ``block_count`` 1 and the tensors of block 0, the embedding and the output norm
(real data, ~33 MB). Each mutant (seeded: mutant i of seed s is the same on every run) is one of
``KINDS``; it is written to a temporary file and loaded by a worker subprocess (``llm.load(path,
device="cpu", slots=1, chunk=16)`` then one ``logits`` call) under a per-mutant watchdog. A worker serves many
mutants in sequence and is restarted after a hang or a crash; a hang is ``--timeout-s`` of the
worker's CPU time on one mutant (or twenty times that of wall time), so a worker starved on a loaded
machine is not taken for a hung one. Its address space is capped
(``RLIMIT_AS``, 6 GiB) so that a load that tries to allocate gigabytes fails at once.

Outcomes: ``ok`` (finite logits), ``GGUFError``, ``DeviceError``, ``exception`` (any other, with its
type), ``nonfinite`` (logits with NaN/inf), ``hang`` (see above), ``signal``
(the worker died). Anything but ``ok``, ``GGUFError`` or ``DeviceError`` is a defect; the exit status
is 1 when there is one. ``tests/test_gguf_fuzz.py`` runs a few hundred of the same mutants in CI.
"""

from __future__ import annotations

import argparse
import collections
import json
import math
import os
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
GOOD = ("ok", "GGUFError", "DeviceError")
OUTCOMES = ("ok", "GGUFError", "DeviceError", "exception", "nonfinite", "hang", "signal")
HUGE = (2**31, 2**32 - 1, 2**40, 2**63, 2**64 - 1)
_FMT = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<B", 10: "<Q", 11: "<q", 12: "<d"}
U32, I32, F32, BOOL, STR, ARR, U64, I64, F64 = 4, 5, 6, 7, 8, 9, 10, 11, 12


# -- the file as fields ------------------------------------------------------------------------------------
class Layout:
    """A GGUF file split into its parts, with the byte position of every field (for byte mutations)
    and enough structure to write it back (for structural ones): ``kvs`` is a list of
    ``[key, value_type, encoded value bytes]``, ``infos`` of ``[name, ne, type_id, offset]``."""

    def __init__(self, raw: bytes):
        self.raw = raw
        self.version = struct.unpack_from("<I", raw, 4)[0]
        n_tensors, n_kv = struct.unpack_from("<QQ", raw, 8)
        self.fields: list[tuple[str, int, int]] = [("version", 4, 4), ("n_tensors", 8, 8), ("n_kv", 16, 8)]
        off = 24
        self.kv_start = off
        self.kvs = []
        for _ in range(n_kv):
            self.fields.append(("key_len", off, 8))
            key, off = self._str(off)
            self.fields.append((f"type:{key}", off, 4))
            (vt,) = struct.unpack_from("<I", raw, off)
            off += 4
            start = off
            off = self._skip(off, vt, key)
            self.kvs.append([key, vt, raw[start:off]])
        self.kv_end = off
        self.infos = []
        for _ in range(n_tensors):
            self.fields.append(("name_len", off, 8))
            name, off = self._str(off)
            self.fields.append((f"n_dims:{name}", off, 4))
            (nd,) = struct.unpack_from("<I", raw, off)
            off += 4
            ne = list(struct.unpack_from(f"<{nd}Q", raw, off))
            for j in range(nd):
                self.fields.append((f"dim:{name}", off + 8 * j, 8))
            off += 8 * nd
            self.fields.append((f"ttype:{name}", off, 4))
            self.fields.append((f"offset:{name}", off + 4, 8))
            tt, rel = struct.unpack_from("<IQ", raw, off)
            off += 12
            self.infos.append([name, ne, tt, rel])
        self.info_end = off
        self.alignment = self.scalar("general.alignment") or 32
        self.data_offset = -(-off // self.alignment) * self.alignment
        self.data = raw[self.data_offset:]

    def copy(self) -> "Layout":
        """A copy whose kvs and infos may be changed (raw, fields and data are shared, never changed)."""
        c = Layout.__new__(Layout)
        c.__dict__.update(self.__dict__)
        c.kvs = [list(kv) for kv in self.kvs]
        c.infos = [[n, list(ne), t, o] for n, ne, t, o in self.infos]
        return c

    def _str(self, off: int) -> tuple[str, int]:
        (n,) = struct.unpack_from("<Q", self.raw, off)
        return self.raw[off + 8:off + 8 + n].decode("utf-8", "replace"), off + 8 + n

    def _skip(self, off: int, vt: int, key: str) -> int:
        if vt == STR:
            self.fields.append((f"strlen:{key}", off, 8))
            return self._str(off)[1]
        if vt == ARR:
            self.fields.append((f"elemtype:{key}", off, 4))
            self.fields.append((f"count:{key}", off + 4, 8))
            sub, n = struct.unpack_from("<IQ", self.raw, off)
            off += 12
            if sub in _FMT:
                return off + n * struct.calcsize(_FMT[sub])
            for _ in range(n):
                off = self._skip(off, sub, key) if sub == ARR else self._str(off)[1]
            return off
        return off + struct.calcsize(_FMT[vt])

    def scalar(self, key: str):
        for k, vt, b in self.kvs:
            if k == key and vt in _FMT:
                return struct.unpack(_FMT[vt], b)[0]
        return None

    def set_kv(self, key: str, vt: int, value) -> None:
        """Replace (or append) a key with a value of GGUF type ``vt`` (ARR: value = (elem type, list))."""
        enc = encode(vt, value)
        for kv in self.kvs:
            if kv[0] == key:
                kv[1], kv[2] = vt, enc
                return
        self.kvs.append([key, vt, enc])

    def drop_kv(self, key: str) -> None:
        self.kvs = [kv for kv in self.kvs if kv[0] != key]

    def write(self, alignment: int | None = None) -> bytes:
        """The file again: header, kvs, infos, padding to ``alignment`` (default: the file's), data."""
        out = [b"GGUF", struct.pack("<IQQ", self.version, len(self.infos), len(self.kvs))]
        for key, vt, enc in self.kvs:
            out += [encode(STR, key), struct.pack("<I", vt), enc]
        for name, ne, tt, rel in self.infos:
            out += [encode(STR, name), struct.pack(f"<I{len(ne)}Q", len(ne), *ne), struct.pack("<IQ", tt, rel)]
        head = b"".join(out)
        a = alignment or self.alignment
        return head + bytes(-len(head) % a) + self.data


def encode(vt: int, value) -> bytes:
    if vt == STR:
        b = value.encode() if isinstance(value, str) else value
        return struct.pack("<Q", len(b)) + b
    if vt == ARR:
        sub, items = value
        return struct.pack("<IQ", sub, len(items)) + b"".join(encode(sub, v) for v in items)
    return struct.pack(_FMT[vt], value)


# -- mutations ---------------------------------------------------------------------------------------------
def _pick(rng, seq):
    return seq[int(rng.integers(len(seq)))]


def _set_field(raw: bytes, off: int, size: int, value: int) -> bytes:
    b = bytearray(raw)
    b[off:off + size] = (value % (1 << (8 * size))).to_bytes(size, "little")
    return bytes(b)


def _flip(raw: bytes, rng, lo: int, hi: int, n: int) -> bytes:
    b = bytearray(raw)
    for _ in range(n):
        i = int(rng.integers(lo, max(lo + 1, hi)))
        if rng.random() < 0.5:
            b[i] ^= 1 << int(rng.integers(8))
        else:
            b[i] = int(rng.integers(256))
    return bytes(b)


def m_flip_header(rng, L):
    return _flip(L.raw, rng, 4, 24, int(rng.integers(1, 3)))


def m_flip_metadata(rng, L):
    return _flip(L.raw, rng, L.kv_start, L.kv_end, int(rng.integers(1, 5)))


def m_flip_tensor_info(rng, L):
    return _flip(L.raw, rng, L.kv_end, L.info_end, int(rng.integers(1, 5)))


def m_truncate(rng, L):
    hi = L.info_end + 64 if rng.random() < 0.6 else len(L.raw)
    return L.raw[:int(rng.integers(0, min(hi, len(L.raw))))]


def m_huge_count(rng, L):
    fields = [f for f in L.fields if f[0] in ("n_tensors", "n_kv", "key_len", "name_len")
              or f[0].split(":")[0] in ("count", "strlen", "n_dims", "dim")]
    name, off, size = _pick(rng, fields)
    v = _pick(rng, HUGE) if size == 8 else _pick(rng, (2**31, 2**32 - 1, 5, 0))
    if rng.random() < 0.2:
        v = int.from_bytes(L.raw[off:off + size], "little") + int(rng.integers(1, 1000))
    return _set_field(L.raw, off, size, v)


def m_bad_alignment(rng, L):
    v = _pick(rng, (0, 1, 3, 7, 16, 48, 64, 2**31, 2**32 - 1))
    vt = U32 if rng.random() < 0.8 else _pick(rng, (U64, I32, STR, F32))
    L.set_kv("general.alignment", vt, str(v) if vt == STR else (float(v) if vt == F32 else min(v, 2**31 - 1)
                                                                if vt == I32 else v))
    # the data is written at the old alignment (a valid new one then mis-places every tensor)
    return L.write(alignment=L.alignment)


def m_unknown_type(rng, L):
    r = rng.random()
    if r < 0.4:
        fields = [f for f in L.fields if f[0].startswith(("type:", "elemtype:"))]
        name, off, size = _pick(rng, fields)
        return _set_field(L.raw, off, size, _pick(rng, (13, 14, 99, 2**31, 2**32 - 1, 8, 9, 4, 6, 0)))
    fields = [f for f in L.fields if f[0].startswith("ttype:")]
    name, off, size = _pick(rng, fields)
    return _set_field(L.raw, off, size, _pick(rng, (0, 1, 2, 3, 6, 8, 12, 30, 31, 33, 40, 99, 2**32 - 1)))


def m_bad_offset(rng, L):
    i = int(rng.integers(len(L.infos)))
    rel = L.infos[i][3]
    size = len(L.data)
    v = _pick(rng, (rel + 1, rel + 16, rel + L.alignment, max(rel - L.alignment, 0), size, size + 4096,
                    2**64 - L.data_offset, 2**64 - L.data_offset + rel, 2**64 - 32, 2**63, 0,
                    L.infos[int(rng.integers(len(L.infos)))][3]))
    off = next(o for n, o, s in L.fields if n == f"offset:{L.infos[i][0]}")
    return _set_field(L.raw, off, 8, v)


_HPARAMS = ("llama.block_count", "llama.embedding_length", "llama.feed_forward_length", "llama.attention.head_count",
            "llama.attention.head_count_kv", "llama.context_length", "llama.vocab_size", "llama.rope.dimension_count",
            "llama.rope.freq_base", "llama.attention.layer_norm_rms_epsilon")


def m_bad_hparam(rng, L):
    key = _pick(rng, _HPARAMS)
    v = _pick(rng, (math.nan, math.inf, -math.inf, -1.0, 0.0, 1e-50, 1e39, 1e300, 0, -1, 1, 2, 3, 7, 2**31, 2**32 - 1,
                    2**63, 2**64 - 1))
    if isinstance(v, float):
        vt = F64 if abs(v) > 3e38 or (v and abs(v) < 1e-45) else _pick(rng, (F32, F64))
    else:
        vt = U64 if v >= 2**32 else (I32 if v < 0 else _pick(rng, (U32, I32, U64, I64)) if v < 2**31 else U32)
    L.set_kv(key, vt, v)
    return L.write()


def m_key_as_string_or_array(rng, L):
    key = _pick(rng, _HPARAMS + ("tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id", "general.alignment",
                                 "tokenizer.ggml.add_bos_token"))
    old = L.scalar(key)
    old = 1 if old is None else old
    r = rng.random()
    if r < 0.35:
        L.set_kv(key, STR, str(old))
    elif r < 0.7:
        L.set_kv(key, ARR, (U32 if isinstance(old, int) else F32, [old] * int(rng.integers(0, 3))))
    elif r < 0.85:
        L.set_kv(key, BOOL, 1)
    else:
        L.set_kv(key, ARR, (STR, [str(old)]))
    return L.write()


def m_bad_token_id(rng, L):
    n = len(_string_array(L, "tokenizer.ggml.tokens"))
    key = "tokenizer.ggml." + _pick(rng, ("bos", "eos", "unknown", "padding", "separator")) + "_token_id"
    v = _pick(rng, (n, n + 100, 2**31, 2**32 - 1, -1))
    L.set_kv(key, I32 if v < 0 else U32, v)
    return L.write()


def _string_array(L, key) -> list[str]:
    for k, vt, enc in L.kvs:
        if k == key and vt == ARR:
            sub, n = struct.unpack_from("<IQ", enc, 0)
            off, out = 12, []
            for _ in range(n):
                (ln,) = struct.unpack_from("<Q", enc, off)
                out.append(enc[off + 8:off + 8 + ln].decode("utf-8", "replace"))
                off += 8 + ln
            return out
    return []


def m_tokenizer(rng, L):
    tokens = _string_array(L, "tokenizer.ggml.tokens")
    merges = _string_array(L, "tokenizer.ggml.merges")
    r = int(rng.integers(8))
    if r == 0:  # token_type one short / one long
        L.set_kv("tokenizer.ggml.token_type", ARR, (I32, [1] * (len(tokens) + _pick(rng, (-1, 1)))))
    elif r == 1:  # a malformed merge
        m = list(merges) or ["a b"]
        m[int(rng.integers(len(m)))] = _pick(rng, ("abc", "a b c", "", " "))
        L.set_kv("tokenizer.ggml.merges", ARR, (STR, m))
    elif r == 2:  # a merge of tokens the vocabulary lacks
        L.set_kv("tokenizer.ggml.merges", ARR, (STR, list(merges) + ["\u2603zz qq\u2603"]))
    elif r == 3:  # tokens dropped (vocab size disagrees)
        L.set_kv("tokenizer.ggml.tokens", ARR, (STR, tokens[:-int(rng.integers(1, 4))]))
    elif r == 4:  # scores of the wrong type or length
        L.set_kv("tokenizer.ggml.scores", ARR, _pick(rng, ((STR, ["0"] * len(tokens)), (F32, [0.0] * (len(tokens) - 1)),
                                                           (F32, [math.nan] * len(tokens)))))
    elif r == 5:  # token_type as floats / strings
        L.set_kv("tokenizer.ggml.token_type", ARR, _pick(rng, ((F32, [1.0] * len(tokens)), (STR, ["1"] * len(tokens)))))
    elif r == 6:  # unknown tokenizer model / pre-tokenizer
        L.set_kv(_pick(rng, ("tokenizer.ggml.model", "tokenizer.ggml.pre")), STR, _pick(rng, ("llama", "bert", "", "x")))
    else:  # a duplicate token (two ids for one piece)
        t = list(tokens)
        t[-1] = t[int(rng.integers(len(t) - 1))]
        L.set_kv("tokenizer.ggml.tokens", ARR, (STR, t))
    return L.write()


def m_drop_or_duplicate(rng, L):
    r = rng.random()
    if r < 0.4:
        L.drop_kv(_pick(rng, [kv[0] for kv in L.kvs]))
        return L.write()
    if r < 0.7:
        i = int(rng.integers(len(L.infos)))
        del L.infos[i]
        return L.write()
    if r < 0.85:
        L.kvs.append(list(_pick(rng, L.kvs)))
        return L.write()
    L.infos[int(rng.integers(len(L.infos)))][0] = L.infos[int(rng.integers(len(L.infos)))][0]
    return L.write()


KINDS = {
    "flip_header": m_flip_header, "flip_metadata": m_flip_metadata, "flip_tensor_info": m_flip_tensor_info,
    "truncate": m_truncate, "huge_count": m_huge_count, "bad_alignment": m_bad_alignment,
    "unknown_type": m_unknown_type, "bad_offset": m_bad_offset, "bad_hparam": m_bad_hparam,
    "key_as_string_or_array": m_key_as_string_or_array, "bad_token_id": m_bad_token_id, "tokenizer": m_tokenizer,
    "drop_or_duplicate": m_drop_or_duplicate,
}


_PARSED: dict[int, tuple[bytes, Layout]] = {}


def mutant(base: bytes, seed: int, index: int, kind: str | None = None) -> tuple[str, bytes]:
    """Mutant ``index`` of ``seed`` of a base file: (kind, bytes)."""
    rng = np.random.default_rng([seed, index])
    kind = kind or _pick(rng, list(KINDS))
    if id(base) not in _PARSED or _PARSED[id(base)][0] is not base:  # parse each base once (the real one: ~0.3 s)
        _PARSED[id(base)] = (base, Layout(base))
    return kind, KINDS[kind](rng, _PARSED[id(base)][1].copy())


# -- base files --------------------------------------------------------------------------------------------
def tiny_base(path: Path) -> bytes:
    """The tiny synthetic model (2 blocks, dim 64, vocab 512, q4_1), with general.alignment = 32."""
    sys.path.insert(0, str(ROOT))
    from xinfer_async.llm._synthetic import write_synthetic_gguf

    write_synthetic_gguf(path, "tiny", "q4_1", seed=0, threads=1)
    L = Layout(path.read_bytes())
    L.kvs.insert(0, ["general.alignment", U32, encode(U32, 32)])
    return L.write()


def real_base(model: Path) -> bytes:
    """The real model's header with block_count 1 and the data of the tensors 1 block needs (~33 MB)."""
    with open(model, "rb") as f:
        head = f.read(4 << 20)
    L = Layout(head)  # the header fits in 4 MiB; the data is read below
    keep = [i for i in L.infos if not i[0].startswith("blk.") or i[0].startswith("blk.0.")]
    data = []
    pos = 0
    with open(model, "rb") as f:
        for info in keep:
            name, ne, tt, rel = info
            block, size = {0: (1, 4), 1: (1, 2), 2: (32, 18), 3: (32, 20), 8: (32, 34)}[tt]
            nbytes = math.prod(ne) // block * size
            f.seek(L.data_offset + rel)
            chunk = f.read(nbytes)
            info[3] = pos
            pad = -nbytes % L.alignment
            data.append(chunk + bytes(pad))
            pos += nbytes + pad
    L.infos = keep
    L.data = b"".join(data)
    L.set_kv("llama.block_count", U32, 1)
    return L.write()


def model_file() -> Path | None:
    env = os.environ.get("XINFER_MODEL_PATH")
    if env and Path(env).is_file():
        return Path(env)
    p = Path.home() / ".cache" / "xinfer_async" / "smollm2-135m" / "SmolLM2-135M-Instruct.Q4_1.gguf"
    cache = os.environ.get("XINFER_CACHE")
    if cache:
        p = Path(cache) / "smollm2-135m" / p.name
    return p if p.is_file() else None


# -- the worker --------------------------------------------------------------------------------------------
WORKER = r"""
import json, resource, sys, warnings
resource.setrlimit(resource.RLIMIT_AS, (6 << 30, 6 << 30))
warnings.simplefilter("ignore")
import numpy as np, trio
from xinfer_async import llm
from xinfer_async.hal import DeviceError, GGUFError

async def one(path):
    model = await llm.load(path, device="cpu", slots=1, chunk=16, pull=False)
    try:
        logits = await model.logits([0, 1, 2][:model.ctx])  # a file may give a context of 1 or 2
    finally:
        await model.aclose()
    return "ok" if np.isfinite(logits).all() else "nonfinite"

print("ready", flush=True)
for line in sys.stdin:
    path = line.strip()
    try:
        out, detail = trio.run(one, path), ""
    except GGUFError as e:
        out, detail = "GGUFError", str(e).replace(path, "<file>")
    except DeviceError as e:
        out, detail = "DeviceError", str(e)
    except BaseException as e:
        out, detail = "exception", f"{type(e).__name__}: {e}"
    print(json.dumps([out, detail[:300]]), flush=True)
"""


class Worker:
    """A subprocess that loads mutants one after another; restarted after a hang or a death."""

    def __init__(self, timeout_s: float):
        self.timeout_s = timeout_s
        self.proc = None

    def _start(self) -> None:
        env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
        self.proc = subprocess.Popen([sys.executable, "-c", WORKER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, text=True, env=env, cwd=str(ROOT))
        if self.proc.stdout.readline().strip() != "ready":
            raise RuntimeError("fuzz worker failed to start")

    def _cpu_s(self) -> float | None:
        """CPU seconds the worker has used (all its threads), from /proc; None where there is none."""
        try:
            fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except (OSError, ValueError, IndexError):
            return None

    def run(self, path: Path) -> tuple[str, str]:
        """Load one mutant. A hang is ``timeout_s`` of the worker's CPU time on it (a starved worker on
        a loaded machine is slow, not hung), or twenty times that of wall time (a deadlock burns no CPU)."""
        import select

        if self.proc is None or self.proc.poll() is not None:
            self._start()
        cpu0, t0 = self._cpu_s(), time.monotonic()
        self.proc.stdin.write(f"{path}\n")
        self.proc.stdin.flush()
        while True:
            ready, _, _ = select.select([self.proc.stdout], [], [], 0.5)
            if ready:
                break
            cpu, wall = self._cpu_s(), time.monotonic() - t0
            used = cpu - cpu0 if cpu is not None and cpu0 is not None else wall
            if used > self.timeout_s or wall > 20 * self.timeout_s:
                self.close()
                return "hang", f"no answer after {used:.0f} s of CPU time, {wall:.0f} s of wall time"
        line = self.proc.stdout.readline()
        if not line:
            rc = self.proc.wait()
            self.proc = None
            return "signal", f"worker exited with {rc}"
        out, detail = json.loads(line)
        return out, detail

    def close(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None


def run_mutants(bases: dict[str, bytes], n: int, seed: int, timeout_s: float, real_fraction: float = 0.2,
                jobs: int = 1, progress: bool = False, only: list[int] | None = None):
    """Run mutants ``0 .. n-1`` (or the indices ``only``) on ``jobs`` workers; returns
    (base, kind, outcome, detail, index) in index order."""
    import threading

    todo = list(range(n)) if only is None else sorted(set(only))
    n = len(todo)
    results: list = [None] * (max(todo) + 1 if todo else 0)
    done = [0]
    lock = threading.Lock()

    def serve(indices) -> None:
        worker = Worker(timeout_s)
        tmp = Path(tempfile.mkdtemp(prefix="fuzz_gguf_"))
        path = tmp / "mutant.gguf"
        try:
            for i in indices:
                base = "real" if "real" in bases and np.random.default_rng([seed, i, 1]).random() < real_fraction \
                    else "tiny"
                kind, data = mutant(bases[base], seed, i)
                path.write_bytes(data)
                outcome, detail = worker.run(path)
                results[i] = (base, kind, outcome, detail, i)
                with lock:
                    done[0] += 1
                    if progress and done[0] % 100 == 0:
                        print(f"{done[0]}/{n} mutants", file=sys.stderr, flush=True)
                    if progress and done[0] % 1000 == 0:  # a table so far, should the run be cut short
                        print(table([r for r in results if r is not None]), file=sys.stderr, flush=True)
        finally:
            worker.close()
            path.unlink(missing_ok=True)
            tmp.rmdir()

    threads = [threading.Thread(target=serve, args=(todo[j::jobs],)) for j in range(jobs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return [r for r in results if r is not None]


def table(results) -> str:
    counts = collections.defaultdict(collections.Counter)
    for base, kind, outcome, _, _ in results:
        counts[f"{base}:{kind}"][outcome] += 1
    w = max(len(k) for k in counts) if counts else 10
    lines = [f"{'base:kind':<{w}} " + " ".join(f"{o:>11}" for o in OUTCOMES) + f" {'total':>6}"]
    for k in sorted(counts):
        c = counts[k]
        lines.append(f"{k:<{w}} " + " ".join(f"{c[o]:>11}" for o in OUTCOMES) + f" {sum(c.values()):>6}")
    tot = collections.Counter(o for _, _, o, _, _ in results)
    lines.append(f"{'all':<{w}} " + " ".join(f"{tot[o]:>11}" for o in OUTCOMES) + f" {len(results):>6}")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", type=int, default=10_000, help="mutants (default 10000)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout-s", type=float, default=30.0, help="per-mutant watchdog (default 30 s)")
    ap.add_argument("--real-fraction", type=float, default=0.2,
                    help="share of mutants of the real model's header when the file is present (default 0.2)")
    ap.add_argument("--show", type=int, default=5, help="defects to print in full (default 5)")
    ap.add_argument("-j", "--jobs", type=int, default=1, help="worker processes (default 1)")
    ap.add_argument("--only", type=str, default=None,
                    help="comma-separated mutant indices to run again (of the same -n, --seed, --real-fraction)")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as d:
        bases = {"tiny": tiny_base(Path(d) / "tiny.gguf")}
    model = model_file()
    if model is not None and args.real_fraction > 0:
        bases["real"] = real_base(model)
    else:
        print("real model file not found: tiny mutants only", file=sys.stderr)
    t = time.perf_counter()
    only = [int(i) for i in args.only.split(",")] if args.only else None
    results = run_mutants(bases, args.n, args.seed, args.timeout_s, args.real_fraction, args.jobs, progress=True,
                          only=only)
    dt = time.perf_counter() - t
    print(table(results))
    bad = [r for r in results if r[2] not in GOOD]
    print(f"{len(results)} mutants in {dt:.0f} s (seed {args.seed}); {len(bad)} defects")
    for base, kind, outcome, detail, i in bad[:args.show]:
        print(f"  mutant {i} ({base}:{kind}): {outcome}: {detail}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
