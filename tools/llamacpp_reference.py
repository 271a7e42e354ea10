"""llama.cpp's greedy tokens and logits on a tiny synthetic file of each family: the references of
``tests/test_families_llamacpp.py``, written to ``tests/data/llamacpp_<name>.json``.

Usage: ``python tools/llamacpp_reference.py [--llama-src /work/llama.cpp-src] [--build DIR]
[--references llama,llama3,qwen2,...] [--out tests/data]``

Needs a cpu build of llama.cpp with its shared library (``../shared/vendor/README.md``'s recipe with
``-DBUILD_SHARED_LIBS=ON`` and the ``llama`` target; commit 0c1e570, the goldens' commit). The script
compiles ``tools/llamacpp_reference.c`` against that build's ``libllama`` and, for each of ``REFERENCES``
(every family, and Llama 3.1's rope scaling):

1. writes the file with ``write_synthetic_gguf(path, ModelConfig(**CONFIG), "f32", SEED)`` into a
   temporary folder (it is regenerated bit for bit from these arguments, so only its sha256 is kept);
   f32 weights, so that neither side rounds a weight or an activation for a matrix product (llama.cpp
   rounds activations to f16 for f16 weights) and the comparison is about the architecture;
2. runs the program: the prompt evaluated as one batch with every position's logits, then ``N_GEN``
   greedy tokens (llama.cpp's cpu backend, 2 threads, flash attention off, an f32 KV cache, the
   same reason: llama.cpp's default f16 cache rounds every key and value);
3. writes ``llamacpp_<name>.json``: the config, dtype, seed, the file's sha256, llama.cpp's
   settings and commit, the prompt, the greedy ids with each step's top-1 logit and top-1 minus top-2
   margin, and full logits rows as base64 of little-endian float32 (exact; 2.7 KB a row): the prompt
   positions ``rows()`` and the last greedy step (position ``PROMPT_LEN + N_GEN - 2``, decoded one
   token at a time through llama.cpp's KV cache).

The prompt (``PROMPT_LEN`` ids drawn with ``SEED`` from the non-control ids) is longer than the
gemma3 file's sliding window, so the rows after it and the greedy steps see local and global layers.
"""

from __future__ import annotations

import argparse
import base64
import dataclasses
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from xinfer_async.llm._llama_config import ModelConfig  # noqa: E402
from xinfer_async.llm._synthetic import SHAPES, write_synthetic_gguf  # noqa: E402

LLAMA_CPP_COMMIT = "0c1e570"
SEED = 17
DTYPE = "f32"
PROMPT_LEN = 12
N_GEN = 16
THREADS = 2
KV_TYPE = "f32"
#: reference name -> (family, the synthetic shape it uses: 2-3 layers, dim 64, vocab 512, ``_synthetic.SHAPES``);
#: ``llama3``: a llama with Llama 3.1's rope scaling (``rope_freqs.weight``)
REFERENCES = {"llama": ("llama", "tiny"), "llama3": ("llama", "tiny-llama3"), "qwen2": ("qwen2", "tiny-qwen2"),
              "qwen3": ("qwen3", "tiny-qwen3"), "gemma3": ("gemma3", "tiny-gemma3"), "phi3": ("phi3", "tiny-phi3")}


def rows(prompt_len: int) -> list[int]:
    """The prompt positions whose full logits are kept: the first two, the middle and the last."""
    return sorted({0, 1, prompt_len // 2, prompt_len - 1})


def prompt_ids(vocab: int, n: int = PROMPT_LEN, seed: int = SEED) -> list[int]:
    """``n`` token ids drawn with ``seed`` from the bytes 0-255 and the ids after the control token 256."""
    ids = np.array([i for i in range(vocab) if i != 256])
    return [int(i) for i in np.random.default_rng(seed).choice(ids, size=n)]


def encode_row(row: np.ndarray) -> str:
    """float32 (vocab,) -> base64 of its little-endian bytes."""
    return base64.b64encode(np.asarray(row, "<f4").tobytes()).decode()


def decode_row(text: str) -> np.ndarray:
    """``encode_row``'s inverse: float32 (vocab,)."""
    return np.frombuffer(base64.b64decode(text), "<f4").copy()


def write_file(config: dict, path: Path) -> str:
    """Write the synthetic file of a reference's ``config`` (``ModelConfig`` fields), dtype and seed;
    its sha256."""
    write_synthetic_gguf(path, ModelConfig(**config), DTYPE, SEED)
    return hashlib.sha256(path.read_bytes()).hexdigest()


def find_libllama(build: Path) -> Path:
    for p in sorted(build.rglob("libllama.so")):
        return p
    raise SystemExit(f"no libllama.so under {build}: build llama.cpp with -DBUILD_SHARED_LIBS=ON and the "
                     f"'llama' target (../shared/vendor/README.md)")


def compile_program(src: Path, build: Path, out: Path) -> Path:
    lib = find_libllama(build)
    cmd = ["cc", "-O2", "-std=c11", "-Wall", f"-I{src / 'include'}", f"-I{src / 'ggml' / 'include'}",
           str(ROOT / "tools" / "llamacpp_reference.c"), f"-L{lib.parent}", "-lllama",
           f"-Wl,-rpath,{lib.parent}", "-o", str(out)]
    subprocess.run(cmd, check=True)
    return out


def reference(program: Path, name: str, workdir: Path) -> dict:
    family, shape = REFERENCES[name]
    config = dataclasses.asdict(dataclasses.replace(SHAPES[shape], arch=family))
    gguf = workdir / f"{name}.gguf"
    sha = write_file(config, gguf)
    ids = prompt_ids(config["vocab_size"])
    keep = rows(len(ids))
    cmd = [str(program), str(gguf), ",".join(map(str, ids)), str(N_GEN), str(max(keep) + 1), KV_TYPE, str(THREADS)]
    out = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
    assert out["prompt_ids"] == ids and out["n_vocab"] == config["vocab_size"]
    logits = np.asarray(out["logits"], np.float32)
    return dict(name=name, family=family, shape=shape, config=config, dtype=DTYPE, seed=SEED, sha256=sha,
                llama_cpp=dict(commit=LLAMA_CPP_COMMIT, backend="cpu", threads=THREADS, kv_type=KV_TYPE,
                               flash_attn=False, program="tools/llamacpp_reference.c"),
                prompt_ids=ids, greedy_ids=out["greedy_ids"], greedy_top2=out["greedy_top2"],
                greedy_margins=[float(np.float32(m)) for m in out["greedy_margins"]],
                greedy_logits=[float(np.float32(v)) for v in out["greedy_logits"]],
                logits_rows=keep, logits_f32_b64=[encode_row(logits[r]) for r in keep],
                final_logits_f32_b64=encode_row(np.asarray(out["final_logits"], np.float32)))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--llama-src", type=Path, default=Path(os.environ.get("XINFER_LLAMA_SRC", "/work/llama.cpp-src")))
    p.add_argument("--build", type=Path, default=None, help="the build folder (default: LLAMA_SRC/build)")
    p.add_argument("--references", default=",".join(REFERENCES), help="names of REFERENCES (default: all)")
    p.add_argument("--out", type=Path, default=ROOT / "tests" / "data")
    args = p.parse_args(argv)
    build = args.build or args.llama_src / "build"
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="llamacpp-ref-") as tmp:
        program = compile_program(args.llama_src, build, Path(tmp) / "llamacpp_reference")
        for name in args.references.split(","):
            ref = reference(program, name, Path(tmp))
            target = args.out / f"llamacpp_{name}.json"
            target.write_text(json.dumps(ref, indent=1) + "\n")
            print(f"{name}: {target} ({target.stat().st_size} bytes); greedy {ref['greedy_ids']}; "
                  f"smallest margin {min(ref['greedy_margins']):.4g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
