"""Tests of xinfer_async/llm/_gguf_metadata.py: the same metadata as the gguf package reads, bounded."""

from __future__ import annotations

import pytest

from _llm_fixtures import require_model, write_tiny_gguf
from xinfer_async.hal import GGUFError
from xinfer_async.llm._gguf import load_gguf
from xinfer_async.llm._gguf_metadata import read_metadata


def test_tiny_file_matches_the_gguf_package(tmp_path, rng):
    p = tmp_path / "t.gguf"
    write_tiny_gguf(p, rng=rng)
    assert read_metadata(p) == load_gguf(p).metadata


@pytest.mark.model
def test_real_model_matches_the_gguf_package():
    p = require_model()
    meta = read_metadata(p)
    ref = load_gguf(p).metadata
    assert meta.keys() == ref.keys() and all(meta[k] == ref[k] for k in ref)
    assert len(meta["tokenizer.ggml.tokens"]) == 49152


def test_until_stops_early(tmp_path, rng):
    p = tmp_path / "t.gguf"
    write_tiny_gguf(p, rng=rng)
    meta = read_metadata(p, until=lambda m: "llama.block_count" in m)
    assert "llama.block_count" in meta and "tokenizer.ggml.tokens" not in meta


def test_truncated_and_foreign_files_are_gguf_errors(tmp_path, rng):
    p = tmp_path / "t.gguf"
    write_tiny_gguf(p, rng=rng)
    data = p.read_bytes()
    full = read_metadata(p)
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(data[:200])
    with pytest.raises(GGUFError, match="truncated"):
        read_metadata(cut)
    huge = bytearray(data)
    huge[16:24] = (2**63).to_bytes(8, "little")  # key/value count far past the file's end
    cut.write_bytes(bytes(huge))
    with pytest.raises(GGUFError, match="truncated: key/value section needs"):
        read_metadata(cut)
    cut.write_bytes(b"NOPE" + data[4:])
    with pytest.raises(GGUFError, match="not a GGUF file"):
        read_metadata(cut)
    assert len(full) > 5
