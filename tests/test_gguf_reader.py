"""Tests of xinfer_async/llm/_gguf_reader.py: field-by-field and tensor-by-tensor against the ``gguf``
package's reader (synthetic files of every value type and several tensor types, and the real model),
speed on the real vocabulary, and each bound the reader checks (message pinned)."""

from __future__ import annotations

import re
import struct

import numpy as np
import pytest

from _llm_fixtures import require_model
from xinfer_async.hal._errors import GGUFError
from xinfer_async.llm._gguf_reader import GGML_TYPES, VALUE_TYPES, read_gguf

gguf = pytest.importorskip("gguf")
VT = gguf.GGUFValueType


def test_type_tables_match_gguf():
    for t in gguf.GGMLQuantizationType:
        if t.value in GGML_TYPES:
            name, block, size = GGML_TYPES[t.value]
            assert (name, (block, size)) == (t.name, gguf.GGML_QUANT_SIZES[t]), t
    assert {t.value: t.name.lower() for t in VT} == VALUE_TYPES


def _type_name(field) -> str:
    names = [VALUE_TYPES[int(t)] for t in field.types]
    return f"array[{names[1]}]" if names[0] == "array" else names[0]


def _compare_with_gguf(path):
    """Every metadata key and every tensor of ``path`` as gguf.GGUFReader reads it and as we do."""
    ref = gguf.GGUFReader(path, "r")
    ours = read_gguf(path)
    keys = [k for k in ref.fields if not k.startswith("GGUF.")]
    assert keys == list(ours.metadata)
    for key in keys:
        field = ref.fields[key]
        assert ours.value_types[key] == _type_name(field), key
        got = ours.metadata[key]
        if ours.value_types[key] == "array[array]":
            continue  # gguf's contents() does not decode nested arrays; see test_every_value_type
        want = field.contents()
        if isinstance(got, np.ndarray):
            assert got.dtype.kind in "iufb" and not got.flags.writeable, key
            got = got.tolist()
        assert got == want, key
        assert type(got) is type(want) or isinstance(got, list), key
    assert ours.alignment == ref.alignment
    assert len(ref.tensors) == len(ours.tensors)
    for r, t in zip(ref.tensors, ours.tensors):
        assert (t.name, t.type_id, t.type_name) == (r.name, r.tensor_type.value, r.tensor_type.name)
        assert list(t.ne) == [int(d) for d in r.shape]
        assert (t.offset, t.nbytes) == (int(r.data_offset), int(r.n_bytes)), t.name
        assert t.data.shape == r.data.shape and t.data.dtype == r.data.dtype, t.name
        assert np.array_equal(t.data.view(np.uint8), np.asarray(r.data).view(np.uint8)), t.name
    return ours


def _write_all_types(path, rng):
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_custom_alignment(64)
    scalars = [("u8", 7, VT.UINT8), ("i8", -3, VT.INT8), ("u16", 65535, VT.UINT16), ("i16", -300, VT.INT16),
               ("u32", 2**32 - 1, VT.UINT32), ("i32", -2**31, VT.INT32), ("f32", 1.5, VT.FLOAT32),
               ("bool", True, VT.BOOL), ("str", "h\u00e9llo \U0001F600", VT.STRING), ("u64", 2**64 - 1, VT.UINT64),
               ("i64", -2**63, VT.INT64), ("f64", -2.25, VT.FLOAT64), ("empty_str", "", VT.STRING)]
    for name, v, t in scalars:
        w.add_key_value(f"t.{name}", v, t)
    for t, dt in ((VT.UINT8, np.uint8), (VT.INT8, np.int8), (VT.UINT16, np.uint16), (VT.INT16, np.int16),
                  (VT.UINT32, np.uint32), (VT.INT32, np.int32), (VT.FLOAT32, np.float32), (VT.UINT64, np.uint64),
                  (VT.INT64, np.int64), (VT.FLOAT64, np.float64)):
        vals = rng.integers(0, 100, 17).astype(dt).tolist()
        w.add_key_value(f"a.{t.name.lower()}", vals, VT.ARRAY, sub_type=t)
    w.add_key_value("a.bool", [True, False, True], VT.ARRAY, sub_type=VT.BOOL)
    w.add_array("a.str", ["x", "", "line\nbreak", "\u00e9"])  # a newline: the per-string decode path
    w.add_array("a.str_plain", [f"tok{i}" for i in range(1000)])
    w.add_key_value("a.nested", [[1, 2], [3]], VT.ARRAY, sub_type=VT.ARRAY)
    w.add_tensor("f32_3d", rng.standard_normal((3, 4, 5)).astype(np.float32))
    w.add_tensor("f32_4d", rng.standard_normal((2, 1, 3, 2)).astype(np.float32))
    w.add_tensor("f16", rng.standard_normal((6, 64)).astype(np.float16))
    for qt in ("Q8_0", "Q4_0", "Q4_1"):
        q = gguf.GGMLQuantizationType[qt]
        w.add_tensor(qt.lower(), gguf.quants.quantize(rng.standard_normal((5, 64)).astype(np.float32), q), raw_dtype=q)
    q5 = gguf.GGMLQuantizationType.Q5_0
    w.add_tensor("q5_0", rng.integers(0, 256, (3, 2 * 22), dtype=np.uint8), raw_dtype=q5)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return dict((n, v) for n, v, _ in scalars)


def test_every_value_type_and_tensor_type(tmp_path):
    rng = np.random.default_rng()
    p = tmp_path / "all.gguf"
    scalars = _write_all_types(p, rng)
    f = _compare_with_gguf(p)
    for name, v in scalars.items():
        assert f.metadata[f"t.{name}"] == v, name
    assert f.metadata["a.str"] == ["x", "", "line\nbreak", "\u00e9"]
    assert f.metadata["a.nested"][0].tolist() == [1, 2] and f.metadata["a.nested"][1].tolist() == [3]
    assert f.value_types["a.nested"] == "array[array]"
    assert f.alignment == 64 and f.data_offset % 64 == 0
    assert all(t.offset % 64 == 0 for t in f.tensors)
    assert f.tensors[0].shape == (3, 4, 5) and f.tensors[0].data.dtype == np.float32


def test_synthetic_model_matches_gguf(tmp_path):
    from xinfer_async.llm._synthetic import write_synthetic_gguf

    p = write_synthetic_gguf(tmp_path / "tiny.gguf", "tiny", "q8_0", seed=int(np.random.default_rng().integers(1000)))
    _compare_with_gguf(p)


@pytest.mark.model
def test_real_model_matches_gguf():
    """(Its speed, ~0.1 s against gguf's reader's 6-35 s on a 2-core machine, is a benchmark figure,
    not a timed test: it failed once at load ~20.)"""
    path = require_model()
    f = _compare_with_gguf(path)
    assert len(f.metadata["tokenizer.ggml.tokens"]) == 49152 and len(f.metadata["tokenizer.ggml.merges"]) == 48900


# -- bounds ---------------------------------------------------------------------------------------------
def _header(n_tensors=0, n_kv=1, version=3) -> bytes:
    return b"GGUF" + struct.pack("<IQQ", version, n_tensors, n_kv)


def _s(x: str) -> bytes:
    b = x.encode()
    return struct.pack("<Q", len(b)) + b


def _read(tmp_path, data: bytes):
    p = tmp_path / "x.gguf"
    p.write_bytes(data)
    return read_gguf(p)


@pytest.mark.parametrize("count", [2**31, 2**63, 2**64 - 1])
def test_huge_array_count(tmp_path, count):
    data = _header() + _s("k") + struct.pack("<IIQ", 9, 5, count) + bytes(64)
    with pytest.raises(GGUFError, match=re.escape(f"truncated file or corrupt count: metadata key 'k' has {count} "
                                                  "elements, more than the 64 bytes left after offset")):
        _read(tmp_path, data)


def test_huge_string_length(tmp_path):
    data = _header() + _s("k") + struct.pack("<IQ", 8, 2**64 - 1) + b"abc"
    with pytest.raises(GGUFError, match=r"truncated file: metadata key 'k' needs 18446744073709551615 bytes at "
                                        r"offset \d+ but the file has \d+ bytes"):
        _read(tmp_path, data)


def test_huge_string_array_element(tmp_path):
    data = _header() + _s("k") + struct.pack("<IIQ", 9, 8, 2) + _s("ok") + struct.pack("<Q", 2**40) + b"x" * 8
    with pytest.raises(GGUFError, match=re.escape("truncated file: metadata key 'k'[1] needs 1099511627776 bytes")):
        _read(tmp_path, data)


@pytest.mark.parametrize("n_kv,n_tensors,what", [(2**64 - 1, 0, "metadata count"), (0, 2**40, "tensor count")])
def test_huge_counts(tmp_path, n_kv, n_tensors, what):
    with pytest.raises(GGUFError, match=re.escape(f"truncated file or corrupt {what}")):
        _read(tmp_path, _header(n_tensors, n_kv) + bytes(100))


def test_unknown_value_types(tmp_path):
    with pytest.raises(GGUFError, match=re.escape("metadata key 'k' has unknown value type id 13")):
        _read(tmp_path, _header() + _s("k") + struct.pack("<I", 13) + bytes(8))
    with pytest.raises(GGUFError, match=re.escape("metadata key 'k' has unknown array element type id 99")):
        _read(tmp_path, _header() + _s("k") + struct.pack("<II", 9, 99) + bytes(8))


def test_nesting_depth_is_bounded(tmp_path):
    data = _header() + _s("k") + struct.pack("<I", 9) + struct.pack("<IQ", 9, 1) * 20 + bytes(16)
    with pytest.raises(GGUFError, match="arrays nested deeper than 8"):
        _read(tmp_path, data)


def test_versions_and_endianness(tmp_path):
    with pytest.raises(GGUFError, match=re.escape("unsupported GGUF version 1; supported: 2, 3")):
        _read(tmp_path, _header(version=1, n_kv=0))
    be = b"GGUF" + struct.pack(">IQQ", 3, 0, 0)
    with pytest.raises(GGUFError, match="big-endian GGUF files are not supported"):
        _read(tmp_path, be)


def test_duplicate_key_and_bool_value(tmp_path):
    kv = _s("k") + struct.pack("<IB", 7, 1)
    with pytest.raises(GGUFError, match=re.escape("duplicate metadata key 'k'")):
        _read(tmp_path, _header(n_kv=2) + kv + kv)
    with pytest.raises(GGUFError, match=re.escape("metadata key 'k' is a bool of value 2, expected 0 or 1")):
        _read(tmp_path, _header() + _s("k") + struct.pack("<IB", 7, 2))


def _one_tensor(ne=(32,), ttype=0, offset=0, alignment=None, n_data=256, n_dims=None, dup=False):
    kvs = [] if alignment is None else [_s("general.alignment") + struct.pack("<I", 4) + alignment]
    info = _s("t") + struct.pack(f"<I{len(ne)}Q", len(ne) if n_dims is None else n_dims, *ne) + struct.pack("<IQ", ttype, offset)
    infos = [info, info] if dup else [info]
    head = _header(len(infos), len(kvs)) + b"".join(kvs) + b"".join(infos)
    return head + bytes(-len(head) % 32) + bytes(n_data)


@pytest.mark.parametrize("alignment,msg", [(0, "general.alignment must be a power of two, got 0"),
                                           (3, "general.alignment must be a power of two, got 3"),
                                           (2**31 + 1, "general.alignment must be a power of two, got 2147483649")])
def test_bad_alignment(tmp_path, alignment, msg):
    with pytest.raises(GGUFError, match=re.escape(msg)):
        _read(tmp_path, _one_tensor(alignment=struct.pack("<I", alignment)))


def test_alignment_of_another_type(tmp_path):
    data = _header(0, 1) + _s("general.alignment") + struct.pack("<IQ", 10, 32)
    with pytest.raises(GGUFError, match=re.escape("general.alignment must be a uint32, got uint64 32")):
        _read(tmp_path, data)


@pytest.mark.parametrize("offset,msg", [
    (1, "tensor 't' has offset 1, not a multiple of the alignment 32"),
    (4096, "tensor 't' has offset 4096, past the end of the file"),
    (2**64 - 32, f"tensor 't' has offset {2**64 - 32}, past the end of the file"),  # would wrap in C
    (32, "tensor 't' has offset 32, expected 0 (tensors must be packed in file order"),
])
def test_bad_offsets(tmp_path, offset, msg):
    with pytest.raises(GGUFError, match=re.escape(msg)):
        _read(tmp_path, _one_tensor(offset=offset))


def test_overlapping_tensors(tmp_path):
    # two tensors at offset 0: the second overlaps the first (it should start at 128)
    head = _header(2, 0) + b"".join(_s(n) + struct.pack("<IQIQ", 1, 32, 0, 0) for n in ("a", "b"))
    with pytest.raises(GGUFError, match=re.escape("tensor 'b' has offset 0, expected 128")):
        _read(tmp_path, head + bytes(-len(head) % 32) + bytes(256))


@pytest.mark.parametrize("kw,msg", [
    (dict(ttype=99), "tensor 't' has unknown ggml type id 99"),
    (dict(ne=(0,)), "tensor 't' has shape ne=[0], every dimension must be >= 1"),
    (dict(ne=(16,), ttype=8), "tensor 't' of type Q8_0 has ne[0]=16, not a multiple of the block size 32"),
    (dict(ne=(32, 2**40)), "truncated file: tensor 't' needs bytes"),
    (dict(ne=(2**32, 2**32, 2**32, 2**32)), "truncated file: tensor 't' needs bytes"),
    (dict(ne=(), n_dims=0), "tensor 't' has n_dims 0, expected 1 to 4"),
    (dict(dup=True), "duplicate tensor name 't'"),
])
def test_bad_tensor_infos(tmp_path, kw, msg):
    with pytest.raises(GGUFError, match=re.escape(msg)):
        _read(tmp_path, _one_tensor(**kw))


def test_n_dims_huge(tmp_path):
    data = _header(1, 0) + _s("t") + struct.pack("<I", 2**32 - 1) + bytes(64)
    with pytest.raises(GGUFError, match=re.escape("tensor 't' has n_dims 4294967295, expected 1 to 4")):
        _read(tmp_path, data)


def test_tensor_data_is_a_view(tmp_path):
    f = _read(tmp_path, _one_tensor())
    t = f.tensors[0]
    assert t.data.shape == (32,) and t.data.dtype == np.float32 and not t.data.flags.writeable
    assert t.offset == f.data_offset and t.nbytes == 128


def test_missing_and_directory(tmp_path):
    with pytest.raises(GGUFError, match=re.escape(f"{tmp_path / 'nope.gguf'}: no such file")):
        read_gguf(tmp_path / "nope.gguf")
    with pytest.raises(GGUFError, match="not a regular file|cannot read"):
        read_gguf(tmp_path)


def test_object_counts_are_capped(tmp_path):
    # counts the file could hold but whose Python objects would cost ~100x their bytes
    n = 70_000
    data = _header(0, n) + (_s("") + struct.pack("<IB", 0, 0)) * n
    with pytest.raises(GGUFError, match=re.escape("metadata count 70000 is more than this reader accepts (65536)")):
        _read(tmp_path, data)
    data = _header() + _s("k") + struct.pack("<IIQ", 9, 9, n) + struct.pack("<IQ", 0, 0) * n
    with pytest.raises(GGUFError, match=re.escape("metadata key 'k' is an array of 70000 arrays, more than this "
                                                  "reader accepts (65536)")):
        _read(tmp_path, data)
