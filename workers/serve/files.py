"""``<data dir>/serve.json``: where a running ``memledger serve`` answers, and the local
operator's credential, readable by the data directory's owner only (mode 0600).

The embedded default allows one process per data directory (the local vector index has
one owner), so while ``serve`` runs the CLI sends its commands there (``workers.serve.
forward``). The file holds ``{"url", "pid", "token", "settings"}``; the token is an API key of the
``api_keys`` table marked ``operator``, made at start and revoked at a clean stop. A
file left by a killed ``serve`` names a pid that no longer runs, and is ignored.
``settings`` holds a digest of each setting a forwarded command runs with
(``workers.serve.environment``), never a value.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from workers.processes import alive as _alive

NAME = "serve.json"


@dataclass(frozen=True)
class ServeFile:
    """What ``serve.json`` holds."""

    url: str
    pid: int
    token: str
    settings: dict[str, str] = field(default_factory=dict)
    """setting name -> SHA-256 hex digest of ``serve``'s value (``workers.serve.environment``)"""


def path_of(data_dir: Path) -> Path:
    return data_dir / NAME


def write(data_dir: Path, info: ServeFile) -> Path:
    """Write the file atomically with mode 0600 (created so, never wider)."""
    data_dir.mkdir(parents=True, exist_ok=True)
    target = path_of(data_dir)
    tmp = target.with_name(f".{NAME}.{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        json.dump({"url": info.url, "pid": info.pid, "token": info.token, "settings": info.settings}, fh)
    os.replace(tmp, target)
    return target


def read(data_dir: Path) -> ServeFile | None:
    """The file of a ``serve`` process that is still running, else ``None`` (no file,
    an unreadable one, or a pid that is gone)."""
    try:
        raw = json.loads(path_of(data_dir).read_text())
        settings = {str(k): str(v) for k, v in dict(raw.get("settings", {})).items()}
        info = ServeFile(str(raw["url"]), int(raw["pid"]), str(raw["token"]), settings)
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return info if _alive(info.pid) else None


def remove(data_dir: Path, pid: int) -> None:
    """Remove the file if it is still this process's."""
    try:
        if int(json.loads(path_of(data_dir).read_text())["pid"]) == pid:
            path_of(data_dir).unlink()
    except (OSError, ValueError, KeyError, TypeError):
        pass
