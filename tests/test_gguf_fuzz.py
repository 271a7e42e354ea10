"""Fuzz test of ``llm.load``: a few hundred seeded mutants of GGUF files (tools/fuzz_gguf.py), each
loaded with one ``logits`` call by worker subprocesses under a per-mutant watchdog. Every outcome
must be finite logits, ``GGUFError`` or ``DeviceError``: no hang, no crash by signal, no other
exception, no NaN/inf logits. The mutants are those of ``python tools/fuzz_gguf.py -n 10000`` with
another seed; the base files are the tiny synthetic model and, when present, the real SmolLM2 header."""

from __future__ import annotations

import importlib.util
import struct
import sys
from pathlib import Path

import pytest

from _llm_fixtures import model_file

_TOOL = Path(__file__).resolve().parents[1] / "tools" / "fuzz_gguf.py"
N_MUTANTS = 240
SEED = 19


def _tool():
    spec = importlib.util.spec_from_file_location("fuzz_gguf", _TOOL)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["fuzz_gguf"] = mod
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def fuzz():
    return _tool()


@pytest.fixture(scope="module")
def bases(fuzz, tmp_path_factory):
    out = {"tiny": fuzz.tiny_base(tmp_path_factory.mktemp("fuzz") / "tiny.gguf")}
    model = model_file()
    if model is not None:
        out["real"] = fuzz.real_base(model)
    return out


def test_mutants_are_seeded_and_change_the_file(fuzz, bases):
    for i in range(40):
        kind, a = fuzz.mutant(bases["tiny"], SEED, i)
        assert (kind, a) == fuzz.mutant(bases["tiny"], SEED, i)
        assert kind in fuzz.KINDS
    # every kind changes the bytes (a mutant equal to its base would test nothing)
    for kind in fuzz.KINDS:
        changed = sum(fuzz.mutant(bases["tiny"], SEED, i, kind)[1] != bases["tiny"] for i in range(10))
        assert changed >= 5, kind


def test_layout_round_trip(fuzz, bases):
    for name, raw in bases.items():
        L = fuzz.Layout(raw)
        assert L.write() == raw, name
        assert struct.unpack_from("<Q", raw, 8)[0] == len(L.infos)


def test_fuzz_load(fuzz, bases):
    results = fuzz.run_mutants(bases, N_MUTANTS, SEED, timeout_s=30.0, real_fraction=0.15, jobs=2)
    assert len(results) == N_MUTANTS
    bad = [r for r in results if r[2] not in fuzz.GOOD]
    report = fuzz.table(results) + "".join(f"\n  mutant {i} ({b}:{k}): {o}: {d}" for b, k, o, d, i in bad)
    assert not bad, report
    outcomes = {r[2] for r in results}
    assert "GGUFError" in outcomes and "ok" in outcomes, report
    assert {r[1] for r in results} == set(fuzz.KINDS), report
