"""``examples/two_stage_model.py`` runs and reports a correct summary."""

import importlib.util
import pathlib

import pytest

from xinfer_async._open import cuda_status

EXAMPLE = pathlib.Path(__file__).resolve().parent.parent / "examples" / "two_stage_model.py"


def _load():
    spec = importlib.util.spec_from_file_location("two_stage_model", EXAMPLE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("device", ["cpu"] + (["cuda"] if cuda_status()[0] else []))
def test_two_stage_example_main(device, capsys):
    summary = _load().main(["--device", device, "--tasks", "16", "--capacity", "4"])
    assert summary["runs"] == 16 and summary["max_busy"] == 4
    assert summary["max_abs_error"] < 1e-4
    out = capsys.readouterr().out
    assert "16 runs on 4 slots, max slots busy 4, max abs error" in out
