"""JSON files that are never half-written, whose read errors name the file, and whose names are safe.

Stored baselines, reports and the xdist registry all go through here: a crash or a concurrent
reader must see either the old file or the new one, never a torn one.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import re
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pytest_specperf.common.redact import redact_text
from pytest_specperf.errors import SpecperfError


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


_UNSAFE_CHARS = re.compile(r"[^A-Za-z0-9._-]+")
_RESERVED = frozenset({"CON", "PRN", "AUX", "NUL", *(f"COM{i}" for i in range(10)), *(f"LPT{i}" for i in range(10))})


# mkstemp creates 0600 files; baselines and reports are shared (CI artifacts, other users): use the umask.
_FILE_MODE = 0o666 & ~_umask()


def atomic_write(path: Path, text: str) -> None:
    """Write via a temp file in the same directory, fsync, then `os.replace` (all or nothing)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, _FILE_MODE)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    sync_folder(path.parent)


def sync_folder(folder: Path) -> None:
    """Make a rename or a new file's name in `folder` durable; a file system that cannot is not an error."""
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def read_json_object(path: Path, error: type[SpecperfError], what: str) -> dict[str, Any]:
    """A JSON object from `path`; `error` names the file, the kind of file and what is wrong."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise error(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise error(f"{path}: cannot read {what}: {exc}") from exc
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise error(f"{path}: corrupt {what}: not valid JSON ({exc})") from exc
    if not isinstance(data, dict):
        raise error(f"{path}: corrupt {what}: expected a JSON object, got {type(data).__name__}")
    return data


def clean(value: Any) -> Any:
    """Strict JSON, no secrets: non-finite floats become null, every string is redacted.

    Every JSON file the plugin writes (baselines, reports, BMF) passes through it: None is how
    records say "undefined", and NaN would make a file unreadable to jq and friends.
    """
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {str(k): clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [clean(v) for v in value]
    return value


def safe_name(name: str) -> str:
    """`name` as a portable file name; changed names get a hash so they cannot collide."""
    safe = _UNSAFE_CHARS.sub("_", name).strip("._")[:80]
    if safe == name and name.upper() not in _RESERVED:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:8]
    return f"{safe or 'x'}-{digest}"
